/* manythreads.c - a thread-per-connection server: many threads, all alive
 * for the whole run, each allocating and freeing small blocks, with a small
 * share of frees going to a neighbour thread.
 *
 *   manythreads [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED] [-z REMOTE_EVERY]
 *
 * Every thread starts before the clock: it fills its own working set of
 * 64*SCALE blocks of random sizes in [16, 512] bytes and waits at a barrier
 * with the others.  Then, until the main thread raises the stop flag after
 * SECONDS, each thread repeats one step: pick a random slot, check the
 * block's stamp, free it, malloc a new block of a random size and stamp it.
 * On one step in REMOTE_EVERY (default 128) the old block is not freed by
 * its thread but swapped into a random cell of the next thread's mailbox (16
 * atomic cells); whatever block the swap brings back (allocated by some
 * other thread) is checked and freed: so about one free in REMOTE_EVERY is a
 * free of a block another thread allocated.
 *
 *   ops_per_s = (mallocs + frees) / elapsed
 * where elapsed runs from the barrier's release to the moment the last
 * thread saw the stop flag: with thousands of threads on a few cores, a
 * thread may run for a while after the flag is raised before it is
 * scheduled and notices, and its work until then counts, so the clock runs
 * until then too.  On a machine shared with other work, wall time also
 * counts time the threads waited for a CPU; ops_per_cpu_s divides by the
 * CPU time the process used in the same interval (user + system, from
 * getrusage) and moves much less with the machine's load.  Threads run with
 * 256 KiB stacks so that
 * thousands of them fit in any address-space limit; up to 16384 threads.
 *
 * Output (one line):
 *   manythreads threads=T scale=S seconds=D remote_every=R ops=N elapsed=E
 *     ops_per_s=X cpu_s=C ops_per_cpu_s=Y remote_frees=F errors=0 allocator=A
 *     version=V malloc_from=P
 * Exit status 1 when a stamp did not match. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <sys/resource.h>

#include "benchutil.h"
#include "whichalloc.h"

#define MIN_SIZE 16
#define MAX_SIZE 512
#define MAILBOX 16
#define MAX_THREADS 16384

struct worker {
    _Alignas(64) unsigned index;
    uint64_t rng;
    uint64_t ops, remote, errors;
    double end; /* when it saw the stop flag */
    unsigned char **slots;
    _Atomic(unsigned char *) mailbox[MAILBOX];
};

static struct bu_opts opt;
static struct worker *workers;
static size_t nslots;
static uint64_t remote_every = 128;
static pthread_barrier_t start_line;
static atomic_int stop_flag;

/* CPU seconds the whole process has used so far. */
static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static unsigned char *new_block(uint64_t *rng) {
    uint64_t r = xorshift64(rng);
    size_t size = MIN_SIZE + below((uint32_t)r, MAX_SIZE - MIN_SIZE + 1);
    unsigned char *p = malloc(size);
    bu_stamp(p, size, r);
    return p;
}

/* Hands `old` to the next thread's mailbox; frees what comes back. */
static void hand_over(struct worker *w, unsigned char *old, uint64_t r) {
    struct worker *next = &workers[(w->index + 1) % opt.threads];
    unsigned char *got = atomic_exchange_explicit(&next->mailbox[r % MAILBOX], old, memory_order_acq_rel);
    if (got == NULL) return;
    if (!bu_check_self(got, MAX_SIZE)) w->errors++;
    free(got);
    w->ops++;
    w->remote++;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t rng = w->rng;
    w->slots = bu_xmalloc(nslots * sizeof *w->slots);
    for (size_t i = 0; i < nslots; i++) w->slots[i] = new_block(&rng);
    pthread_barrier_wait(&start_line);
    uint64_t ops = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        uint64_t r = xorshift64(&rng);
        size_t k = below((uint32_t)(r >> 32), nslots);
        unsigned char *old = w->slots[k];
        if (!bu_check_self(old, MAX_SIZE)) w->errors++;
        if (below((uint32_t)r, remote_every) == 0) {
            hand_over(w, old, r >> 8);
        } else {
            free(old);
            ops++;
        }
        w->slots[k] = new_block(&rng);
        ops++;
    }
    w->end = bu_now();
    w->ops += ops;
    /* wait until every thread has stopped: a late thread must still find
     * its neighbours' mailboxes alive */
    pthread_barrier_wait(&start_line);
    for (size_t i = 0; i < nslots; i++) {
        if (!bu_check_self(w->slots[i], MAX_SIZE)) w->errors++;
        free(w->slots[i]);
    }
    free(w->slots);
    return NULL;
}

static void parse(int argc, char **argv) {
    /* -z REMOTE_EVERY rides on the common parser's "sizes" option */
    bu_parse(argc, argv, &opt, "-");
    if (opt.sizes != NULL) {
        char *end;
        remote_every = strtoull(opt.sizes, &end, 0);
        if (*end || remote_every == 0) bu_usage();
    }
}

int main(int argc, char **argv) {
    bu_prog = "manythreads";
    bu_usage_text = "[-z REMOTE_EVERY]";
    bu_max_threads = MAX_THREADS;
    parse(argc, argv);
    nslots = (size_t)(64 * opt.scale) + 1;
    workers = bu_xcalloc_lines(opt.threads, sizeof *workers);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_barrier_init(&start_line, NULL, opt.threads + 1);
    for (unsigned i = 0; i < opt.threads; i++) {
        workers[i].index = i;
        workers[i].rng = bu_seed(opt.seed, i);
        int err = pthread_create(&tids[i], &attr, worker_main, &workers[i]);
        if (err) bu_die("pthread_create", err);
    }
    pthread_barrier_wait(&start_line);
    double t0 = bu_now(), c0 = cpu_now();
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    pthread_barrier_wait(&start_line);
    double cpu = cpu_now() - c0;

    uint64_t ops = 0, remote = 0, errors = 0;
    double last = t0;
    for (unsigned i = 0; i < opt.threads; i++) {
        bu_join(tids[i]);
        if (workers[i].end > last) last = workers[i].end;
        ops += workers[i].ops;
        remote += workers[i].remote;
        errors += workers[i].errors;
    }
    double elapsed = last - t0;
    for (unsigned i = 0; i < opt.threads; i++)
        for (unsigned c = 0; c < MAILBOX; c++) {
            unsigned char *p = atomic_load(&workers[i].mailbox[c]);
            if (p && !bu_check_self(p, MAX_SIZE)) errors++;
            free(p);
        }
    printf("manythreads threads=%u scale=%g seconds=%g remote_every=%llu ops=%llu elapsed=%.6f"
           " ops_per_s=%.0f cpu_s=%.3f ops_per_cpu_s=%.0f remote_frees=%llu errors=%llu",
           opt.threads, opt.scale, opt.seconds, (unsigned long long)remote_every,
           (unsigned long long)ops, elapsed, (double)ops / elapsed, cpu, (double)ops / cpu,
           (unsigned long long)remote,
           (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    pthread_barrier_destroy(&start_line);
    pthread_attr_destroy(&attr);
    free(workers);
    free(tids);
    return errors ? 1 : 0;
}
