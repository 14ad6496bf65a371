/* large.c - large blocks: alloc/free, realloc growth and vector push.
 *
 *   large [-m alloc|random|realloc|neighbour|vector] [-z SIZES_MIB] [-t THREADS]
 *         [-s SCALE] [-d SECONDS]
 *
 * Every thread runs the same loop on its own blocks until the main thread
 * raises a stop flag after SECONDS (read once per op; an op takes
 * milliseconds).  SCALE multiplies every size.
 *
 *   alloc      malloc(size), write one byte in every 4 KiB page (so the
 *              memory is really faulted in), free.  Sizes from -z in MiB,
 *              used in turn (default 4,16,64).  One op: one malloc+touch+free.
 *   random     each thread keeps 8 live blocks; one op frees a random one
 *              and mallocs a block of a random size in [5, 25] MiB in its
 *              place, writing one byte in every page (the malloc-large
 *              pattern: big buffers of varying sizes, reused at once).
 *              One op: one free + malloc + touch.
 *   realloc    geometric growth: malloc(64), then realloc to twice the size
 *              until 64 MiB; after each realloc the new part gets one byte
 *              per page and the old part's bytes are checked (realloc must
 *              keep them); free.  One op: one realloc.
 *   neighbour  the same chain, but after each realloc a neighbour block of a
 *              quarter of the new size is allocated (first byte written) and
 *              kept until the chain ends, so the next realloc usually cannot
 *              grow in place.  One op: one realloc (neighbour mallocs and
 *              frees are part of the work but not counted).
 *   vector     push 32-bit ints one by one into a vector that starts with 4
 *              elements and grows by 1.5x with realloc when full, up to 4 Mi
 *              elements (16 MiB); then check every 1024th element; free.
 *              One op: one push.
 *
 *   ops_per_s = ops / elapsed, all threads.
 * Data checks (realloc, neighbour, vector) count mismatches in errors; exit
 * status 1 when there were any.  Output (one line):
 *   large mode=M sizes=Z threads=T scale=S seconds=D ops=N elapsed=E
 *     ops_per_s=X errors=0 allocator=A version=V malloc_from=P */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

#define PAGE 4096
#define MIB ((size_t)1 << 20)

enum mode { M_ALLOC, M_RANDOM, M_REALLOC, M_NEIGHBOUR, M_VECTOR };
#define RANDOM_LIVE 8

struct worker {
    unsigned index;
    uint64_t ops, errors, rng;
    unsigned char *live[RANDOM_LIVE];
    double end;
    char pad[64];
};

static struct bu_opts opt;
static enum mode mode;
static size_t sizes[16], nsizes;
static size_t chain_max, vector_max;
static atomic_int stop_flag;

static inline unsigned char pattern(size_t off, unsigned salt) {
    return (unsigned char)((off >> 12) * 131 + salt);
}

/* Writes the pattern into one byte of each page of [from, to). */
static inline void fill(unsigned char *p, size_t from, size_t to, unsigned salt) {
    for (size_t o = from; o < to; o += PAGE)
        p[o] = pattern(o, salt);
}

static inline uint64_t check(const unsigned char *p, size_t to, unsigned salt) {
    uint64_t bad = 0;
    for (size_t o = 0; o < to; o += PAGE)
        bad += p[o] != pattern(o, salt);
    return bad;
}

/* Writes one byte in every page of p's first size bytes. */
static void touch_pages(unsigned char *p, size_t size) {
    for (size_t o = 0; o < size; o += PAGE)
        ((volatile unsigned char *)p)[o] = (unsigned char)o;
}

static uint64_t op_alloc(size_t size) {
    unsigned char *p = malloc(size);
    if (!p) bu_die("malloc", ENOMEM);
    touch_pages(p, size);
    free(p);
    return 1;
}

/* Replaces one of the worker's live blocks by one of a random size. */
static uint64_t op_random(struct worker *w) {
    uint64_t r = xorshift64(&w->rng);
    size_t k = below((uint32_t)(r >> 32), RANDOM_LIVE);
    size_t size = (size_t)((double)(5 * MIB + below((uint32_t)r, 20 * MIB + 1)) * opt.scale);
    free(w->live[k]);
    w->live[k] = malloc(size);
    if (!w->live[k]) bu_die("malloc", ENOMEM);
    touch_pages(w->live[k], size);
    return 1;
}

/* One realloc chain; returns the reallocs done. */
static uint64_t op_chain(int neighbours, unsigned salt, uint64_t *errors) {
    void *held[64];
    size_t nheld = 0, size = 64;
    uint64_t ops = 0;
    unsigned char *p = malloc(size);
    if (!p) bu_die("malloc", ENOMEM);
    fill(p, 0, size, salt);
    while (size < chain_max) {
        size_t old = size;
        size *= 2;
        p = realloc(p, size);
        if (!p) bu_die("realloc", ENOMEM);
        ops++;
        *errors += check(p, old, salt);
        fill(p, (old + PAGE - 1) / PAGE * PAGE, size, salt);
        if (neighbours && nheld < 64) {
            unsigned char *n = malloc(size / 4);
            if (!n) bu_die("malloc", ENOMEM);
            n[0] = 1;
            held[nheld++] = n;
        }
    }
    *errors += check(p, size, salt);
    free(p);
    for (size_t i = 0; i < nheld; i++)
        free(held[i]);
    return ops;
}

static uint64_t op_vector(uint64_t *errors) {
    size_t cap = 4, len = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    if (!v) bu_die("malloc", ENOMEM);
    while (len < vector_max) {
        if (len == cap) {
            cap += cap / 2;
            v = realloc(v, cap * sizeof *v);
            if (!v) bu_die("realloc", ENOMEM);
        }
        v[len] = (uint32_t)len;
        len++;
    }
    for (size_t i = 0; i < len; i += 1024)
        *errors += v[i] != (uint32_t)i;
    free(v);
    return len;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t ops = 0, errors = 0, n = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        switch (mode) {
        case M_ALLOC:
            ops += op_alloc(sizes[n % nsizes]);
            break;
        case M_RANDOM:
            ops += op_random(w);
            break;
        case M_REALLOC:
        case M_NEIGHBOUR:
            ops += op_chain(mode == M_NEIGHBOUR, (unsigned)(n + w->index), &errors);
            break;
        case M_VECTOR:
            ops += op_vector(&errors);
            break;
        }
        n++;
    }
    w->end = bu_now();
    for (size_t k = 0; k < RANDOM_LIVE; k++) free(w->live[k]);
    w->ops = ops;
    w->errors = errors;
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "large";
    bu_usage_text = "[-m alloc|random|realloc|neighbour|vector] [-z SIZES_MIB]";
    bu_parse(argc, argv, &opt, "alloc");
    if (strcmp(opt.mode, "alloc") == 0)
        mode = M_ALLOC;
    else if (strcmp(opt.mode, "random") == 0)
        mode = M_RANDOM;
    else if (strcmp(opt.mode, "realloc") == 0)
        mode = M_REALLOC;
    else if (strcmp(opt.mode, "neighbour") == 0)
        mode = M_NEIGHBOUR;
    else if (strcmp(opt.mode, "vector") == 0)
        mode = M_VECTOR;
    else
        bu_usage();
    const char *sizes_text = mode == M_ALLOC ? (opt.sizes ? opt.sizes : "4,16,64") : "-";
    if (mode == M_ALLOC) {
        nsizes = bu_parse_sizes(sizes_text, sizes, 16);
        for (size_t i = 0; i < nsizes; i++)
            sizes[i] = (size_t)((double)(sizes[i] * MIB) * opt.scale);
    }
    chain_max = (size_t)(64.0 * (double)MIB * opt.scale);
    vector_max = (size_t)(4.0 * (double)MIB * opt.scale);
    struct worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);

    double t0 = bu_now();
    for (unsigned i = 0; i < opt.threads; i++) {
        ws[i].index = i;
        ws[i].rng = bu_seed(opt.seed, i);
        tids[i] = bu_start(worker_main, &ws[i]);
    }
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned i = 0; i < opt.threads; i++)
        bu_join(tids[i]);

    double end = t0;
    uint64_t ops = 0, errors = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        ops += ws[i].ops;
        errors += ws[i].errors;
        if (ws[i].end > end) end = ws[i].end;
    }
    double elapsed = end - t0;
    printf("large mode=%s sizes=%s threads=%u scale=%g seconds=%g ops=%llu elapsed=%.6f"
           " ops_per_s=%.1f errors=%llu",
           opt.mode, sizes_text, opt.threads, opt.scale, opt.seconds, (unsigned long long)ops,
           elapsed, (double)ops / elapsed, (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(ws);
    free(tids);
    return errors ? 1 : 0;
}
