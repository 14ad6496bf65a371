/* threadrounds.c - rounds of short-lived threads, each leaving half of what
 * it allocated to the next round: does memory stay bounded as threads come
 * and go (issue 20, "thread churn")?
 *
 *   threadrounds [-t THREADS] [-s SCALE] [-r ROUNDS] [-d SECONDS]
 *
 * A round starts THREADS threads (default 8) and joins them.  Thread i of a
 * round frees the blocks thread i of the round before kept, mallocs
 * 4 MiB * SCALE in 1 KiB blocks, writes every byte of them, frees every
 * other one and exits, keeping the rest for thread i of the next round.  So
 * about THREADS * 2 MiB * SCALE is live between rounds, always, and each
 * round frees as much as it keeps: an allocator whose freed memory serves
 * the next round holds about the same after round 1000 as after round 10.
 * The blocks a thread frees were allocated by a thread that exited, and the
 * heap that allocated them may have been taken over by another thread of
 * this round meanwhile.
 *
 * ROUNDS (default 1000) rounds always run, whatever -d says: the figures
 * are RSS after given rounds, and a row cut short by the clock would not
 * compare (-d is taken for bench/compare's sake and ignored).  RSS comes
 * from /proc/self/statm right after the round's threads were joined.
 *
 *   ops_per_s = (mallocs + frees) / elapsed
 * Output (one line):
 *   threadrounds threads=T scale=S rounds=R ops=N elapsed=E ops_per_s=X
 *     rss_round10_kib=A rss_final_kib=B rss_growth=B/A rss_hwm_kib=H errors=0
 *     allocator=... version=... malloc_from=...
 * Exit status 1 when a kept block's contents changed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "benchutil.h"
#include "whichalloc.h"

#define BLOCK 1024

static struct bu_opts opt;
static size_t blocks_per_thread; /* allocated by each thread; half are kept */
static unsigned rounds = 1000;
static unsigned char ***kept;    /* kept[i]: thread i's kept blocks, for its successor */
static _Atomic uint64_t errors;

static int rounds_option(int letter, const char *value) {
    char *end;
    if (letter != 'r') return 0;
    unsigned long v = strtoul(value, &end, 0);
    if (*end || v < 10 || v > 1000000) return 0;
    rounds = (unsigned)v;
    return 1;
}

static void *round_thread(void *arg) {
    size_t i = (size_t)(uintptr_t)arg, half = blocks_per_thread / 2;
    unsigned char **mine = kept[i];
    uint64_t bad = 0;
    if (mine != NULL) {
        for (size_t j = 0; j < half; j++) {
            /* (each kept block is filled with its index's low byte) */
            if (mine[j][0] != (unsigned char)j || mine[j][BLOCK - 1] != (unsigned char)j) bad++;
            free(mine[j]);
        }
        free(mine);
    }
    unsigned char **all = bu_xmalloc(blocks_per_thread * sizeof *all);
    for (size_t j = 0; j < blocks_per_thread; j++) {
        all[j] = bu_xmalloc(BLOCK);
        memset(all[j], (unsigned char)(j / 2), BLOCK);
    }
    mine = bu_xmalloc(half * sizeof *mine);
    for (size_t j = 0; j < blocks_per_thread; j++) {
        if (j & 1) free(all[j]);
        else mine[j / 2] = all[j];
    }
    free(all);
    kept[i] = mine;
    if (bad) atomic_fetch_add(&errors, bad);
    return NULL;
}

int main(int argc, char **argv) {
    bu_prog = "threadrounds";
    bu_usage_text = "[-t THREADS] [-s SCALE] [-r ROUNDS] [-d SECONDS]";
    bu_extra_letters = "r:";
    bu_extra_option = rounds_option;
    bool t_given = false; /* (bu_parse's default is 2 threads; this program's 8) */
    for (int a = 1; a < argc; a++) t_given |= strncmp(argv[a], "-t", 2) == 0;
    bu_parse(argc, argv, &opt, "");
    if (!t_given) opt.threads = 8;
    blocks_per_thread = (size_t)(4096 * opt.scale) & ~(size_t)1;
    if (blocks_per_thread < 2) bu_usage();
    kept = bu_xcalloc(opt.threads, sizeof *kept);
    pthread_t *t = bu_xmalloc(opt.threads * sizeof *t);
    long rss10 = 0;
    double t0 = bu_now();
    for (unsigned r = 1; r <= rounds; r++) {
        for (unsigned i = 0; i < opt.threads; i++) t[i] = bu_start(round_thread, (void *)(uintptr_t)i);
        for (unsigned i = 0; i < opt.threads; i++) bu_join(t[i]);
        if (r == 10) rss10 = bu_rss_kib();
    }
    double elapsed = bu_now() - t0;
    long rss_final = bu_rss_kib();
    /* per thread and round: the kept blocks' frees, every malloc, the
     * odd blocks' frees, and the two arrays (malloc and free each) */
    uint64_t per = (uint64_t)blocks_per_thread / 2 + blocks_per_thread + blocks_per_thread / 2 + 4;
    uint64_t ops = per * opt.threads * rounds;
    printf("threadrounds threads=%u scale=%g rounds=%u ops=%" PRIu64 " elapsed=%.6f ops_per_s=%.0f"
           " rss_round10_kib=%ld rss_final_kib=%ld rss_growth=%.3f rss_hwm_kib=%ld errors=%" PRIu64,
           opt.threads, opt.scale, rounds, ops, elapsed, (double)ops / elapsed, rss10, rss_final,
           rss10 > 0 ? (double)rss_final / (double)rss10 : 0.0, bu_hwm_kib(), (uint64_t)errors);
    wa_print(stdout);
    printf("\n");
    return errors ? 1 : 0;
}
