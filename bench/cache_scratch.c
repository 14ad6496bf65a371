/* cache_scratch.c - allocator-induced false sharing, in two modes (after the
 * cache-scratch and cache-thrash tests of the Hoard suite, written anew).
 *
 *   cache_scratch [-m scratch|thrash] [-t THREADS] [-s SCALE] [-d SECONDS]
 *                 [-z OBJSIZE]
 *
 * Each of THREADS threads repeats: malloc(OBJSIZE) (default 8 bytes), write
 * every byte of the object 100*SCALE times (rounded, at least 1), free it.
 * If the allocator hands two threads objects in one cache line, the writes
 * bounce the line between the cores and the figure drops.
 *
 *   thrash   the threads allocate their objects themselves from the start
 *            ("active" false sharing: the allocator itself puts objects of
 *            different threads side by side).
 *   scratch  before the clock starts the main thread allocates one object per
 *            thread, back to back (likely in one line), and hands object i to
 *            thread i, which frees it before its first malloc ("passive"
 *            false sharing: an allocator that gives a freed block back to
 *            the thread that freed it returns a line shared with the others).
 *
 * Threads run until the main thread raises a stop flag after SECONDS; the
 * flag is read once per object.  The figure:
 *   ops_per_s = objects allocated, written and freed, per second (all threads).
 * Output (one line):
 *   cache_scratch mode=M threads=T objsize=B writes=W seconds=D objects=N
 *     elapsed=E ops_per_s=X allocator=A version=V malloc_from=P */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>

#include "benchutil.h"
#include "whichalloc.h"

struct worker {
    unsigned char *handed; /* scratch: the main thread's object to free first */
    uint64_t objects;
    double end;
    char pad[64];
};

static struct bu_opts opt;
static size_t objsize = 8;
static unsigned writes;
static atomic_int stop_flag;

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t objects = 0;
    if (w->handed) free(w->handed);
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        volatile unsigned char *p = malloc(objsize);
        for (unsigned r = 0; r < writes; r++)
            for (size_t b = 0; b < objsize; b++)
                p[b] = (unsigned char)(p[b] + 1);
        free((void *)p);
        objects++;
    }
    w->objects = objects;
    w->end = bu_now();
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "cache_scratch";
    bu_usage_text = "[-m scratch|thrash] [-z OBJSIZE]";
    bu_parse(argc, argv, &opt, "scratch");
    int scratch = strcmp(opt.mode, "scratch") == 0;
    if (!scratch && strcmp(opt.mode, "thrash") != 0) bu_usage();
    if (opt.sizes) bu_parse_sizes(opt.sizes, &objsize, 1);
    writes = (unsigned)(100 * opt.scale + 0.5);
    if (writes == 0) writes = 1;
    struct worker *ws = bu_xcalloc(opt.threads, sizeof *ws);
    pthread_t *tids = bu_xcalloc(opt.threads, sizeof *tids);
    if (scratch)
        for (unsigned i = 0; i < opt.threads; i++) {
            ws[i].handed = bu_xmalloc(objsize);
            memset(ws[i].handed, 0, objsize);
        }

    double t0 = bu_now();
    for (unsigned i = 0; i < opt.threads; i++)
        tids[i] = bu_start(worker_main, &ws[i]);
    bu_sleep(opt.seconds);
    atomic_store(&stop_flag, 1);
    for (unsigned i = 0; i < opt.threads; i++)
        bu_join(tids[i]);

    double end = t0;
    uint64_t objects = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        objects += ws[i].objects;
        if (ws[i].end > end) end = ws[i].end;
    }
    double elapsed = end - t0;
    printf("cache_scratch mode=%s threads=%u objsize=%zu writes=%u seconds=%g objects=%llu"
           " elapsed=%.6f ops_per_s=%.0f",
           opt.mode, opt.threads, objsize, writes, opt.seconds, (unsigned long long)objects,
           elapsed, (double)objects / elapsed);
    wa_print(stdout);
    putchar('\n');
    free(ws);
    free(tids);
    return 0;
}
