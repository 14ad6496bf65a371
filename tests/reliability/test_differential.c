/* test_differential.c - long random call sequences checked against a
 * reference model.
 *
 * Four threads each run a long random sequence of malloc, calloc, realloc
 * (growing, shrinking, to 0, of NULL), reallocarray, aligned_alloc,
 * posix_memalign and free, handing blocks to each other through queues (so a
 * block is reallocated and freed by threads that did not allocate it).  The
 * model is what a correct allocator must give: for every live block its
 * size and its exact bytes (the pattern of its address and size, written
 * after every call that hands it out; zeros after calloc), its alignment,
 * and the errors the calls must return (EINVAL for a bad alignment, ENOMEM
 * for an overflowing size, the old block untouched when realloc fails).
 * Every block is checked against the model before it is freed or
 * reallocated, all of a thread's blocks every 5000 operations, and
 * malloc_usable_size must cover the request.
 *
 * The sequence is fixed by a seed, printed on failure and overridable with
 * SEFER_DIFF_SEED.  It runs at guard levels 0-3, each in a fresh process
 * (the level is fixed at start-up).  Uses the standard names. */
#include "rel.h"

#include <malloc.h>

#define DT_THREADS 4
#define DT_LIVE 512
#define DT_VERIFY_EVERY 5000

struct dt_rec {
    unsigned char *p;
    size_t n, align;
};

struct dt_thread {
    int id;
    uint64_t rng, op, ops;
    size_t count;
    struct dt_rec live[DT_LIVE];
    uint64_t calls[10];
};

static uint64_t dt_seed;
static struct dt_thread dt[DT_THREADS];
static struct st_queue *dt_queues; /* one inbox per thread, from mmap */

__attribute__((format(printf, 2, 3))) static void dt_fail(const struct dt_thread *t, const char *fmt, ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    rel_fail("seed %#" PRIx64 ", thread %d, operation %" PRIu64 ": %s (replay: SEFER_DIFF_SEED=%#" PRIx64
             ")",
             dt_seed, t->id, t->op, what, dt_seed);
}

static size_t dt_size(uint64_t *r)
{
    uint64_t x = st_rand(r);
    switch (x % 16) {
    case 0:
        return 0;
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8:
        return 1 + x % 512;
    case 9: case 10: case 11:
        return 513 + x % 8000;
    case 12: case 13:
        return 8193 + x % 130000;
    case 14:
        return (x >> 8) % 4 == 0 ? 130000 + x % ST_MIB : 1 + x % 300;
    default:
        return (x >> 8) % 32 == 0 ? 2 * ST_MIB + x % (4 * ST_MIB) : 1 + x % 64;
    }
}

/* ---- the model's bytes ------------------------------------------------- */

/* A block at rest holds st_block_fill's pattern for its address and size
 * (all of it up to 8 KiB; beyond, its first and last 256 bytes and 64 bytes
 * per 4 KiB).  Returns the first byte below `limit` of q that differs from
 * the pattern an n-byte block at `at` was given (q != at: it moved), or
 * SIZE_MAX. */
static size_t dt_bad_below(const unsigned char *q, const unsigned char *at, size_t n, size_t limit)
{
    uint64_t seed = st_seed_of(at, n);
    if (limit > n)
        limit = n;
    if (n <= 8192)
        return st_pat_check_range(q, 0, limit, seed);
    size_t bad = st_pat_check_range(q, 0, limit < 256 ? limit : 256, seed);
    for (size_t off = 4096; bad == SIZE_MAX && off + 64 <= n && off < limit; off += 4096)
        bad = st_pat_check_range(q, off, off + 64 < limit ? off + 64 : limit, seed);
    if (bad == SIZE_MAX && n - 256 < limit)
        bad = st_pat_check_range(q, n - 256, limit, seed);
    return bad;
}

static bool dt_zero(const unsigned char *p, size_t n)
{
    size_t lim = n < 65536 ? n : 65536; /* and the last 4 KiB of a bigger one */
    for (size_t i = 0; i < lim; i++)
        if (p[i])
            return false;
    for (size_t i = n > 65536 ? n - 4096 : n; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* ---- the model's blocks ------------------------------------------------- */

static bool dt_verify(struct dt_thread *t, const struct dt_rec *b, const char *when)
{
    size_t bad = dt_bad_below(b->p, b->p, b->n, b->n);
    if (bad != SIZE_MAX) {
        dt_fail(t, "block %p (%zu bytes) %s: byte %zu is 0x%02x, the model says 0x%02x", (void *)b->p,
                b->n, when, bad, b->p[bad], st_pat_byte(st_seed_of(b->p, b->n), bad));
        return false;
    }
    if (b->p && malloc_usable_size(b->p) < b->n) {
        dt_fail(t, "malloc_usable_size(%p) = %zu < %zu requested", (void *)b->p,
                malloc_usable_size(b->p), b->n);
        return false;
    }
    return true;
}

/* A new block from an allocation call: aligned, zero if calloc'ed. */
static void dt_adopt(struct dt_thread *t, unsigned char *p, size_t n, size_t align, bool zero,
                     const char *call)
{
    if (p == NULL) {
        dt_fail(t, "%s(%zu) returned NULL (%s)", call, n, strerror(errno));
        return;
    }
    if ((uintptr_t)p % align != 0)
        dt_fail(t, "%s(%zu) = %p, not aligned to %zu", call, n, (void *)p, align);
    if (zero && !dt_zero(p, n))
        dt_fail(t, "%s(%zu) = %p is not zero", call, n, (void *)p);
    st_block_fill(p, n);
    t->live[t->count++] = (struct dt_rec){p, n, align};
}

static void dt_drop(struct dt_thread *t, size_t i)
{
    dt_verify(t, &t->live[i], "before free");
    free(t->live[i].p);
    t->live[i] = t->live[--t->count];
}

static void dt_realloc(struct dt_thread *t, size_t i)
{
    struct dt_rec *b = &t->live[i];
    uint64_t x = st_rand(&t->rng);
    size_t n = x % 20 == 0 ? 0 : x % 3 == 0 ? b->n / 2 : x % 3 == 1 ? b->n + 1 + x % 64 : dt_size(&t->rng);
    if (!dt_verify(t, b, "before realloc"))
        return;
    unsigned char *old = b->p;
    size_t old_n = b->n;
    unsigned char *q = realloc(old, n);
    t->calls[2]++;
    if (n == 0) { /* realloc(p, 0) frees p and returns NULL */
        if (q != NULL)
            dt_fail(t, "realloc(%p, 0) returned %p, not NULL", (void *)old, (void *)q);
        t->live[i] = t->live[--t->count];
        return;
    }
    if (q == NULL) {
        dt_fail(t, "realloc(%p, %zu) returned NULL (%s)", (void *)old, n, strerror(errno));
        return;
    }
    size_t bad = dt_bad_below(q, old, old_n, n);
    if (bad != SIZE_MAX)
        dt_fail(t, "realloc(%p, %zu -> %zu) = %p lost byte %zu", (void *)old, old_n, n, (void *)q, bad);
    if ((uintptr_t)q % 16 != 0)
        dt_fail(t, "realloc returned %p, not 16-aligned", (void *)q);
    st_block_fill(q, n);
    *b = (struct dt_rec){q, n, 16};
}

/* Calls that must fail, and leave everything as it was. */
static void dt_errors(struct dt_thread *t)
{
    void *keep = (void *)&t->live[0];
    void *out = keep;
    errno = 0;
    if (aligned_alloc(24, 64) != NULL || errno != EINVAL)
        dt_fail(t, "aligned_alloc(24, 64) did not fail with EINVAL (errno %d)", errno);
    if (posix_memalign(&out, 12, 64) != EINVAL || out != keep)
        dt_fail(t, "posix_memalign(12) did not return EINVAL leaving *out alone");
    errno = 0;
    if (calloc(SIZE_MAX / 2, 3) != NULL || errno != ENOMEM)
        dt_fail(t, "calloc overflow did not fail with ENOMEM (errno %d)", errno);
    errno = 0;
    if (malloc(SIZE_MAX - 4096) != NULL || errno != ENOMEM)
        dt_fail(t, "malloc(SIZE_MAX - 4096) did not fail with ENOMEM (errno %d)", errno);
    if (t->count > 0) {
        struct dt_rec *b = &t->live[st_rand(&t->rng) % t->count];
        errno = 0;
        if (reallocarray(b->p, SIZE_MAX / 2, 3) != NULL || errno != ENOMEM)
            dt_fail(t, "reallocarray overflow did not fail with ENOMEM (errno %d)", errno);
        errno = 0;
        if (realloc(b->p, SIZE_MAX - 4096) != NULL || errno != ENOMEM)
            dt_fail(t, "realloc(p, SIZE_MAX - 4096) did not fail with ENOMEM (errno %d)", errno);
        dt_verify(t, b, "after a failed realloc");
    }
}

/* Hands a block to another thread, which will own it in its model. */
static void dt_handoff(struct dt_thread *t)
{
    if (t->count == 0)
        return;
    size_t i = st_rand(&t->rng) % t->count;
    struct st_block e = {t->live[i].p, t->live[i].n};
    if (t->live[i].align == 16 && st_queue_push(&dt_queues[(t->id + 1 + st_rand(&t->rng) % (DT_THREADS - 1)) % DT_THREADS], e))
        t->live[i] = t->live[--t->count];
}

static void dt_take_inbox(struct dt_thread *t)
{
    struct st_block e;
    while (t->count < DT_LIVE && st_queue_pop(&dt_queues[t->id], &e)) {
        t->live[t->count] = (struct dt_rec){e.p, e.n, 16};
        dt_verify(t, &t->live[t->count++], "after a hand-off");
    }
}

static void dt_step(struct dt_thread *t)
{
    /* free with probability count / DT_LIVE: about a third of DT_LIVE live */
    if (t->count > 0 && st_rand(&t->rng) % DT_LIVE < t->count) {
        dt_drop(t, st_rand(&t->rng) % t->count);
        t->calls[6]++;
        return;
    }
    uint64_t k = st_rand(&t->rng) % 100;
    size_t n = dt_size(&t->rng);
    if (k < 40) {
        dt_adopt(t, malloc(n), n, 16, false, "malloc");
        t->calls[0]++;
    } else if (k < 52) {
        size_t count = 1 + st_rand(&t->rng) % 8, each = n / count + 1;
        dt_adopt(t, calloc(count, each), count * each, 16, true, "calloc");
        t->calls[1]++;
    } else if (k < 70) {
        if (t->count > 0)
            dt_realloc(t, st_rand(&t->rng) % t->count);
        else
            dt_adopt(t, realloc(NULL, n), n, 16, false, "realloc(NULL)");
    } else if (k < 74) {
        size_t size = 1 + st_rand(&t->rng) % 64;
        dt_adopt(t, reallocarray(NULL, n / size + 1, size), (n / size + 1) * size, 16, false,
                 "reallocarray(NULL)");
        t->calls[3]++;
    } else if (k < 83) {
        size_t align = (size_t)1 << (st_rand(&t->rng) % 22); /* 1 B - 2 MiB */
        dt_adopt(t, aligned_alloc(align, n), n, align, false, "aligned_alloc");
        t->calls[4]++;
    } else if (k < 90) {
        size_t align = sizeof(void *) << (st_rand(&t->rng) % 17); /* 8 B - 512 KiB */
        void *p = NULL;
        int rc = posix_memalign(&p, align, n);
        if (rc != 0)
            dt_fail(t, "posix_memalign(%zu, %zu) returned %d", align, n, rc);
        else
            dt_adopt(t, p, n, align, false, "posix_memalign");
        t->calls[5]++;
    } else if (k < 92) {
        dt_errors(t);
    } else if (k < 97) {
        dt_handoff(t);
    } else if (t->count > 0) { /* the program writes: a new pattern, checked, restored */
        struct dt_rec *b = &t->live[st_rand(&t->rng) % t->count];
        if (dt_verify(t, b, "before a rewrite")) {
            st_pat_fill(b->p, b->n < 8192 ? b->n : 8192, ~st_seed_of(b->p, b->n));
            if (st_pat_check_range(b->p, 0, b->n < 8192 ? b->n : 8192, ~st_seed_of(b->p, b->n)) != SIZE_MAX)
                dt_fail(t, "block %p did not keep what was written to it", (void *)b->p);
            st_block_fill(b->p, b->n);
        }
    }
}

static void *dt_thread_main(void *argp)
{
    struct dt_thread *t = argp;
    for (t->op = 0; t->op < t->ops && atomic_load(&rel_failures) == 0; t->op++) {
        dt_step(t);
        dt_take_inbox(t);
        if (t->op % DT_VERIFY_EVERY == DT_VERIFY_EVERY - 1)
            for (size_t i = 0; i < t->count; i++)
                dt_verify(t, &t->live[i], "in a full check");
    }
    return NULL;
}

/* Runs the sequences in this process; 0 if the model held. */
static int dt_run(uint64_t seed, uint64_t ops)
{
    dt_seed = seed;
    dt_queues = st_map(DT_THREADS * sizeof *dt_queues);
    for (int i = 0; i < DT_THREADS; i++) {
        st_queue_init(&dt_queues[i], 512);
        memset(&dt[i], 0, sizeof dt[i]);
        dt[i].id = i;
        dt[i].rng = st_mix64(seed + (uint64_t)i) | 1;
        dt[i].ops = ops;
    }
    pthread_t th[DT_THREADS];
    for (int i = 0; i < DT_THREADS; i++)
        th[i] = st_spawn(dt_thread_main, &dt[i], 0);
    for (int i = 0; i < DT_THREADS; i++)
        pthread_join(th[i], NULL);
    uint64_t calls[10] = {0};
    for (int i = 0; i < DT_THREADS; i++) { /* what is left, whoever allocated it */
        dt[i].ops = 0;
        dt_take_inbox(&dt[i]);
        while (dt[i].count > 0)
            dt_drop(&dt[i], dt[i].count - 1);
        dt_take_inbox(&dt[i]);
        while (dt[i].count > 0)
            dt_drop(&dt[i], dt[i].count - 1);
        for (int c = 0; c < 10; c++)
            calls[c] += dt[i].calls[c];
    }
    st_unmap(dt_queues, DT_THREADS * sizeof *dt_queues);
    int problems = sefer_check();
    printf("seed %#" PRIx64 ", %d threads x %" PRIu64 " operations: malloc %" PRIu64 ", calloc %" PRIu64
           ", realloc %" PRIu64 ", reallocarray %" PRIu64 ", aligned_alloc %" PRIu64
           ", posix_memalign %" PRIu64 ", free %" PRIu64 "; sefer_check problems %d\n",
           seed, DT_THREADS, ops, calls[0], calls[1], calls[2], calls[3], calls[4], calls[5], calls[6],
           problems);
    if (atomic_load(&rel_failures)) {
        printf("%ld failure(s); the first: %s\n", atomic_load(&rel_failures), rel_first_failure);
        return 1;
    }
    return problems != 0;
}

/* guard level = _i, in a fresh process */
START_TEST(test_differential)
{
    uint64_t seed = rel_seed("SEFER_DIFF_SEED", 0xD1FF5EED);
    static char out[8192];
    char level[32], seed_text[32];
    snprintf(level, sizeof level, "SEFER_GUARD_LEVEL=%d", _i);
    snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
    char *env[] = {level, (char *)"SEFER_GUARD_ON_ERROR=abort", NULL};
    char *args[] = {(char *)"run", seed_text, (char *)(_i >= 2 ? "60000" : "200000"), NULL};
    int st = st_run_self(env, args, out, sizeof out);
    printf("guard level %d: %s", _i, out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "differential run at guard level %d: child %s; output:\n%s", _i,
                  st_describe_status(st), out);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "run") == 0)
        return dt_run(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    Suite *s = suite_create("differential");
    TCase *tc = tcase_create("differential");
    tcase_set_timeout(tc, ST_RUN_SELF_HANG_S + 60);
    tcase_add_loop_test(tc, test_differential, 0, 4);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
