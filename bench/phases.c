/* phases.c - memory freed in one size must serve the next: phases of one
 * block size each, live memory never above one phase's worth.
 *
 *   phases [-t THREADS] [-s SCALE] [-d SECONDS] [-S SEED]
 *
 * Each of THREADS threads runs cycles of five phases, block sizes 64 B,
 * 1 KiB, 16 KiB, 256 KiB and 4 MiB: a phase allocates 200 MiB * SCALE /
 * THREADS in blocks of its size, writes a byte of every 4 KiB page of each
 * block (so all of it is resident), checks the marks, and frees them all.
 * A cycle follows a cycle until SECONDS have passed, two at least (the
 * issue's "twice over": the second cycle finds the memory the first one
 * left, in whatever state the allocator keeps it).  The threads keep in
 * step (a barrier after every phase), so the process never holds more than
 * about 200 MiB * SCALE of blocks at once.
 *
 * What it measures is the peak RSS (bench/compare reads it with
 * /usr/bin/time; rss_hwm_kib is the kernel's VmHWM, the same figure): an
 * allocator that reuses freed memory for any size, or gives it back before
 * it maps more, stays near one phase's worth; one that keeps each size's
 * memory apart holds several phases' worth.  rss_after_kib is the RSS read
 * after the last phase (everything freed).
 *
 * Where the time goes, size by size: thread 0 times each phase from its
 * start to the barrier after it (all threads done) and counts the process's
 * minor page faults over it; seconds_SIZE and faults_SIZE sum them over the
 * cycles.  An allocator that reuses memory freed in another size without
 * giving it back faults each page in once; one that gives it back and maps
 * it again faults it in at every phase that needs it.
 *
 * Output (one line):
 *   phases threads=T scale=S seconds=D cycles=C ops=N elapsed=E ops_per_s=X
 *     rss_after_kib=A rss_hwm_kib=H seconds_64=.. faults_64=.. ... (each
 *     size) errors=0 allocator=... */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <sys/resource.h>

#include "benchutil.h"
#include "whichalloc.h"

#define TOTAL_BYTES ((size_t)200 << 20)
#define MIN_CYCLES 2
#define TOUCH 4096

static const size_t phase_sizes[] = {64, 1024, 16 << 10, 256 << 10, 4 << 20};
#define PHASES (sizeof phase_sizes / sizeof *phase_sizes)

struct worker {
    unsigned index;
    size_t bytes; /* per phase */
    uint64_t ops, errors;
    char pad[64];
};

static struct bu_opts opt;
static pthread_barrier_t barrier;
static atomic_int stop_flag; /* set by the main thread; read at a cycle's end */
static atomic_uint cycles_done;
static double phase_seconds[PHASES]; /* (thread 0's) */
static long phase_faults[PHASES];

static long minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

static void run_phase(struct worker *w, size_t size) {
    size_t n = w->bytes / size ? w->bytes / size : 1;
    unsigned char **v = bu_xcalloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (p == NULL) bu_die("malloc", ENOMEM);
        for (size_t off = 0; off < size; off += TOUCH)
            p[off] = (unsigned char)(i + off / TOUCH);
        p[size - 1] = (unsigned char)i;
        v[i] = p;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = v[i];
        for (size_t off = 0; off < size; off += TOUCH)
            if (p[off] != (unsigned char)(i + off / TOUCH)) w->errors++;
        if (p[size - 1] != (unsigned char)i) w->errors++;
        free(p);
    }
    free(v);
    w->ops += 2 * n;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    for (unsigned cycle = 0;; cycle++) {
        for (size_t ph = 0; ph < PHASES; ph++) {
            double t0 = bu_now();
            long f0 = minor_faults();
            run_phase(w, phase_sizes[ph]);
            pthread_barrier_wait(&barrier);
            if (w->index == 0) {
                phase_seconds[ph] += bu_now() - t0;
                phase_faults[ph] += minor_faults() - f0;
            }
        }
        /* thread 0 decides before the barrier, every thread reads the
         * verdict after it: they all stop after the same cycle */
        if (w->index == 0 && cycle + 1 >= MIN_CYCLES && atomic_load(&stop_flag))
            atomic_store(&cycles_done, cycle + 1);
        pthread_barrier_wait(&barrier);
        if (atomic_load(&cycles_done) != 0) break;
    }
    return NULL;
}

static void *timer_main(void *arg) {
    (void)arg;
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "phases";
    bu_max_threads = 64;
    bu_parse(argc, argv, &opt, "-");
    int err = pthread_barrier_init(&barrier, NULL, opt.threads);
    if (err) bu_die("pthread_barrier_init", err);
    struct worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    size_t per_thread = (size_t)((double)TOTAL_BYTES * opt.scale) / opt.threads;
    for (unsigned i = 0; i < opt.threads; i++) {
        ws[i].index = i;
        ws[i].bytes = per_thread;
    }
    double t0 = bu_now();
    pthread_t timer = bu_start(timer_main, NULL);
    for (unsigned i = 0; i < opt.threads; i++)
        tids[i] = bu_start(worker_main, &ws[i]);
    for (unsigned i = 0; i < opt.threads; i++)
        bu_join(tids[i]);
    double elapsed = bu_now() - t0;
    bu_join(timer);
    long rss_after = bu_rss_kib(), hwm = bu_hwm_kib();

    uint64_t ops = 0, errors = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        ops += ws[i].ops;
        errors += ws[i].errors;
    }
    printf("phases threads=%u scale=%g seconds=%g cycles=%u ops=%llu elapsed=%.6f ops_per_s=%.0f"
           " rss_after_kib=%ld rss_hwm_kib=%ld",
           opt.threads, opt.scale, opt.seconds, atomic_load(&cycles_done), (unsigned long long)ops, elapsed,
           (double)ops / elapsed, rss_after, hwm);
    for (size_t ph = 0; ph < PHASES; ph++)
        printf(" seconds_%zu=%.3f faults_%zu=%ld", phase_sizes[ph], phase_seconds[ph], phase_sizes[ph], phase_faults[ph]);
    printf(" errors=%llu", (unsigned long long)errors);
    wa_print(stdout);
    putchar('\n');
    free(ws);
    free(tids);
    pthread_barrier_destroy(&barrier);
    return errors ? 1 : 0;
}
