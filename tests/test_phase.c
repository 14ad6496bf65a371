/* test_phase.c - phase measurements (sefer_phase_begin / sefer_phase_end,
 * lib/phase.c), through the prefixed API:
 *
 *   control      keep 4 KiB, then in a phase allocate and free 64 KiB: the
 *                peak is entry + 64 KiB exactly (one heap, one fold), exit
 *                = entry, one alloc and one free of 64 KiB
 *   empty        a phase with no allocation: entry = peak = exit, no counts
 *   nested       an inner phase inside an outer one: each its own figures,
 *                the outer's peak at least the inner's, depths 1 and 2
 *   threads      4 threads each hold 1 MiB at once inside a phase: the peak
 *                is within the reported bound of the true peak (entry +
 *                4 MiB + what the threads' own start-up allocated, which the
 *                test measures), and the counts add up
 *   realloc      reallocs counted once each, a span grown in place counted
 *                in the block bytes
 *   (that the fast paths come back after a phase is an instruction count:
 *   bench/instructions' pair64-after-phase row equals pair64's)
 *   errors       sefer_phase_end without a phase: -1 ENOENT; 17 nested
 *                begins: the 17th -1 EBUSY; out->size limits the copy
 *   consistent   the consistency checker finds nothing wrong in a phase, or
 *                after it on pages the phase took off the fast paths and no
 *                one has touched since (it reported every such page) */
#include "sefer_test.h"

#include <pthread.h>

/* libcheck allocates for every assertion it evaluates (it records where the
 * test is): no ck_* call may run while a phase is open, or its blocks are
 * the phase's.  Failures inside a phase are noted here and asserted after. */
static int bad_inside;
#define NOTE(cond) ((cond) ? (void)0 : (void)bad_inside++)

static struct sefer_phase end_phase(void)
{
    struct sefer_phase ph;
    memset(&ph, 0xAB, sizeof ph);
    ph.size = sizeof ph;
    int rc = sefer_phase_end(&ph);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(bad_inside, 0);
    ck_assert_uint_eq(ph.size, sizeof ph);
    ck_assert_uint_eq(ph.version, SEFER_PHASE_VERSION);
    return ph;
}

START_TEST(test_control)
{
    void *keep = sefer_malloc(4096);
    ck_assert_ptr_nonnull(keep);
    NOTE(sefer_phase_begin("control") == 0);
    void *big = sefer_malloc(64 << 10);
    NOTE(big != NULL);
    memset(big, 1, 64 << 10);
    sefer_free(big);
    struct sefer_phase ph = end_phase();
    printf("control: entry %" PRIu64 " peak %" PRIu64 " exit %" PRIu64 " (error bound %" PRIu64 ")\n",
           ph.block_bytes_entry, ph.block_bytes_peak, ph.block_bytes_exit, ph.block_bytes_peak_error);
    ck_assert_str_eq(ph.name, "control");
    ck_assert_uint_eq(ph.depth, 1);
    ck_assert_uint_eq(ph.block_bytes_peak, ph.block_bytes_entry + (64 << 10));
    ck_assert_uint_eq(ph.block_bytes_exit, ph.block_bytes_entry);
    ck_assert_uint_eq(ph.allocs, 1);
    ck_assert_uint_eq(ph.frees, 1);
    ck_assert_uint_eq(ph.reallocs, 0);
    ck_assert_uint_eq(ph.bytes_allocated, 64 << 10);
    ck_assert_uint_ge(ph.committed_peak, ph.committed_entry);
    ck_assert_uint_ge(ph.committed_peak, ph.committed_exit);
    sefer_free(keep);
}
END_TEST

START_TEST(test_empty)
{
    NOTE(sefer_phase_begin("nothing") == 0);
    struct sefer_phase ph = end_phase();
    ck_assert_uint_eq(ph.block_bytes_entry, ph.block_bytes_peak);
    ck_assert_uint_eq(ph.block_bytes_peak, ph.block_bytes_exit);
    ck_assert_uint_eq(ph.committed_entry, ph.committed_exit);
    ck_assert_uint_eq(ph.allocs + ph.frees + ph.reallocs + ph.bytes_allocated, 0);
}
END_TEST

START_TEST(test_nested)
{
    NOTE(sefer_phase_begin("outer") == 0);
    void *a = sefer_malloc(1 << 20);
    NOTE(sefer_phase_begin("inner") == 0);
    void *b = sefer_malloc(2 << 20);
    sefer_free(b);
    struct sefer_phase in;
    memset(&in, 0, sizeof in);
    in.size = sizeof in;
    NOTE(sefer_phase_end(&in) == 0); /* (the outer phase is still open) */
    sefer_free(a);
    struct sefer_phase out = end_phase();
    ck_assert_str_eq(in.name, "inner");
    ck_assert_uint_eq(in.depth, 2);
    ck_assert_str_eq(out.name, "outer");
    ck_assert_uint_eq(out.depth, 1);
    ck_assert_uint_eq(in.allocs, 1);
    ck_assert_uint_eq(in.frees, 1);
    ck_assert_uint_eq(out.allocs, 2);
    ck_assert_uint_eq(out.frees, 2);
    ck_assert_uint_eq(in.block_bytes_entry, out.block_bytes_entry + (1 << 20));
    ck_assert_uint_eq(in.block_bytes_peak, in.block_bytes_entry + (2 << 20));
    ck_assert_uint_ge(out.block_bytes_peak, in.block_bytes_peak);
    ck_assert_uint_eq(out.block_bytes_exit, out.block_bytes_entry);
    ck_assert_uint_eq(out.bytes_allocated, (3u << 20));
}
END_TEST

#define THREADS 4
#define HOLD (1 << 20)
#define BLOCK 1024
static pthread_barrier_t at_peak, after_peak;

static void *holder(void *arg)
{
    (void)arg;
    void **v = sefer_malloc(HOLD / BLOCK * sizeof *v);
    for (int i = 0; i < HOLD / BLOCK; i++) {
        v[i] = sefer_malloc(BLOCK);
        ((char *)v[i])[0] = 1;
    }
    pthread_barrier_wait(&at_peak);   /* every thread holds its MiB */
    pthread_barrier_wait(&after_peak); /* main has read the figures */
    for (int i = 0; i < HOLD / BLOCK; i++)
        sefer_free(v[i]);
    sefer_free(v);
    return NULL;
}

START_TEST(test_threads)
{
    pthread_barrier_init(&at_peak, NULL, THREADS + 1);
    pthread_barrier_init(&after_peak, NULL, THREADS + 1);
    pthread_t t[THREADS];
    NOTE(sefer_phase_begin("threads") == 0);
    for (int i = 0; i < THREADS; i++)
        NOTE(pthread_create(&t[i], NULL, holder, NULL) == 0);
    pthread_barrier_wait(&at_peak);
    /* the true sum at the peak: what sefer_stats says now (exact, while
     * the fast paths are off) */
    struct sefer_stats now = {.size = sizeof now};
    NOTE(sefer_stats_get(&now, sizeof now) == 0);
    uint64_t truth = now.bytes_in_blocks;
    pthread_barrier_wait(&after_peak);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct sefer_phase ph = end_phase();
    printf("threads: entry %" PRIu64 " peak %" PRIu64 " (true %" PRIu64 ", bound %" PRIu64 ") exit %" PRIu64 "\n",
           ph.block_bytes_entry, ph.block_bytes_peak, truth, ph.block_bytes_peak_error, ph.block_bytes_exit);
    ck_assert_uint_ge(truth, ph.block_bytes_entry + THREADS * HOLD);
    int64_t off = (int64_t)ph.block_bytes_peak - (int64_t)truth;
    ck_assert_msg(off >= -(int64_t)ph.block_bytes_peak_error && off <= (int64_t)ph.block_bytes_peak_error,
                  "peak %" PRIu64 " is %" PRId64 " from the true %" PRIu64 " (bound %" PRIu64 ")", ph.block_bytes_peak,
                  off, truth, ph.block_bytes_peak_error);
    ck_assert_uint_le(ph.block_bytes_peak_error, (THREADS + 2) * (64u << 10));
    /* the threads' own: their blocks and arrays (pthread_create's stack
     * comes from mmap, not malloc) */
    ck_assert_uint_ge(ph.allocs, THREADS * (HOLD / BLOCK + 1));
    /* glibc keeps one block per thread it started (its thread-local
     * storage vector) past the join, with the cached stack */
    ck_assert_uint_le(ph.allocs - ph.frees, THREADS);
    ck_assert_uint_le(ph.block_bytes_exit - ph.block_bytes_entry, THREADS * 1024);
    pthread_barrier_destroy(&at_peak);
    pthread_barrier_destroy(&after_peak);
}
END_TEST

START_TEST(test_realloc)
{
    char *p = sefer_malloc(100);
    char *big = sefer_malloc(1 << 20);
    NOTE(sefer_phase_begin("realloc") == 0);
    p = sefer_realloc(p, 5000);         /* moves: a realloc, a malloc, a free */
    big = sefer_realloc(big, 2u << 20); /* a span grows in place: a realloc */
    struct sefer_phase ph = end_phase();
    ck_assert_uint_eq(ph.reallocs, 2);
    ck_assert_uint_ge(ph.allocs, 1);
    ck_assert_uint_ge(ph.frees, 1);
    ck_assert_uint_eq(ph.block_bytes_exit, ph.block_bytes_entry + (sefer_usable_size(p) - 112) + (1u << 20));
    sefer_free(p);
    sefer_free(big);
}
END_TEST

START_TEST(test_errors)
{
    errno = 0;
    ck_assert_int_eq(sefer_phase_end(NULL), -1);
    ck_assert_int_eq(errno, ENOENT);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(sefer_phase_begin("deep"), 0);
    errno = 0;
    ck_assert_int_eq(sefer_phase_begin("too deep"), -1);
    ck_assert_int_eq(errno, EBUSY);
    struct sefer_phase small;
    memset(&small, 0, sizeof small);
    small.size = offsetof(struct sefer_phase, name);
    ck_assert_int_eq(sefer_phase_end(&small), 0);
    ck_assert_uint_eq(small.size, offsetof(struct sefer_phase, name));
    ck_assert_uint_eq(small.depth, 16);
    ck_assert_uint_eq(small.name[0], 0); /* not copied */
    /* a size below the size field's own: nothing written (before, the
     * field's low byte took r's, and read 192: "all written") */
    memset(&small, 0, sizeof small);
    small.size = 1;
    ck_assert_int_eq(sefer_phase_end(&small), 0);
    ck_assert_uint_eq(small.size, 1);
    ck_assert_uint_eq(small.depth, 0);
    ck_assert_int_eq(sefer_phase_begin("deep"), 0);
    for (int i = 0; i < 15; i++)
        ck_assert_int_eq(sefer_phase_end(NULL), 0);
    ck_assert_int_eq(sefer_phase_end(NULL), -1);
}
END_TEST

START_TEST(test_consistent)
{
    void *a = sefer_malloc(40), *b = sefer_malloc(3000);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(sefer_check(), 0);
    NOTE(sefer_phase_begin("consistent") == 0);
    NOTE(sefer_check() == 0);
    end_phase();
    ck_assert_int_eq(sefer_check(), 0); /* (the pages untouched since) */
    sefer_free(a);
    ck_assert_int_eq(sefer_check(), 0);
    sefer_free(b);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("phase");
    TCase *tc = tcase_create("phase");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_control);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_nested);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_realloc);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_consistent);
    suite_add_tcase(s, tc);
    return st_main(s, argc, argv);
}
