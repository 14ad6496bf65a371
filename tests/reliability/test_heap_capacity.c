/* test_heap_capacity.c - threads past the heap registry's capacity.
 *
 * The registry holds SF_HEAP_SLOTS_MAX heaps (2^20 in the library: more
 * threads than a test can start).  This program links, whole, a variant of
 * libsefer built with -DSF_HEAP_SLOTS_MAX=HEAPCAP (64: one chunk) and its
 * introspection server (tests/reliability/meson.build), so a few dozen
 * threads fill it.
 *
 *   past_capacity  HEAPCAP + EXTRA threads alive at once, each allocating
 *       through the prefixed API: the ones that find every heap owned use
 *       the locked fallback heap.  Checked:
 *       - exactly those threads are without a heap in /heaps, and
 *         heap_fallbacks rose by their number (sefer_stats_get, /stats and
 *         /metrics' sefer_heap_fallbacks_total agree), heap_slots and
 *         heaps_live are the capacity, fallback_allocs rose by at least
 *         their small and medium allocations; stderr says the registry is
 *         full, once;
 *       - every thread's blocks (small, medium, span; malloc, calloc,
 *         realloc) keep their contents; each thread frees half of its own
 *         and half of another's, chosen so that threads on the fallback
 *         heap free blocks of threads with a heap and the reverse;
 *         sefer_check finds nothing while they all hold blocks, nor after.
 *       Then, once those threads have exited, as many new threads as
 *       there are released heaps all get one: heap_fallbacks does not
 *       move, heap_slots stays at the capacity.
 *
 * Worker threads cannot use check's assertions: they record failures with
 * rel_fail (rel.h), asserted by the test's thread. */
#include "rel.h"

#include "../introspect/itest.h"

#include <pthread.h>

#ifndef HEAPCAP
#error "build with -DHEAPCAP=N, the variant's SF_HEAP_SLOTS_MAX"
#endif

#define EXTRA 16
#define WORKERS (HEAPCAP + EXTRA)
#define NBLOCKS 18

static const size_t sizes[] = {16, 48, 256, 1000, 4096, 8192, 20000, 100000, 300000};
#define NSIZES (sizeof sizes / sizeof *sizes)
#define NOT_SPANS 8 /* sizes[] up to SEFER_MEDIUM_MAX: served by a heap (or the fallback heap) */

struct worker {
    int index, tid;
    unsigned char *p[NBLOCKS];
    size_t n[NBLOCKS];
    struct worker *victim; /* whose second half of blocks this one frees */
    pthread_t thread;
};

static struct worker workers[WORKERS];
static pthread_barrier_t started, assigned, done;

static uint64_t seed_of(const struct worker *w, int i) { return 0x5eed0000u + (uint64_t)w->index * 64 + (uint64_t)i; }

static void check_block(const struct worker *w, int i, const char *when)
{
    if (!st_pat_ok(w->p[i], w->n[i], seed_of(w, i)))
        rel_fail("worker %d block %d (%zu B) lost its contents %s", w->index, i, w->n[i], when);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->tid = it_tid();
    for (int i = 0; i < NBLOCKS; i++) {
        size_t n = sizes[i % NSIZES];
        w->p[i] = i % 3 == 1 ? sefer_calloc(1, n) : sefer_malloc(n);
        w->n[i] = n;
        if (w->p[i] == NULL) {
            rel_fail("worker %d: allocation of %zu B failed: %s", w->index, n, strerror(errno));
            continue;
        }
        if (i % 3 == 1)
            for (size_t k = 0; k < n; k++)
                if (w->p[i][k] != 0) {
                    rel_fail("worker %d: calloc(%zu) byte %zu is %u", w->index, n, k, w->p[i][k]);
                    break;
                }
        st_pat_fill(w->p[i], n, seed_of(w, i));
    }
    /* a realloc that moves, and churn: the fallback heap's paths, under its lock */
    unsigned char *q = sefer_realloc(w->p[0], 5000);
    if (q == NULL || !st_pat_ok(q, 16, seed_of(w, 0)))
        rel_fail("worker %d: realloc 16 -> 5000 lost the block's bytes", w->index);
    w->p[0] = q;
    w->n[0] = 5000;
    if (q != NULL)
        st_pat_fill(q, 5000, seed_of(w, 0));
    for (int k = 0; k < 2000; k++) {
        void *t = sefer_malloc(16 + (size_t)(k % 64) * 16);
        if (t == NULL) {
            rel_fail("worker %d: churn allocation failed", w->index);
            break;
        }
        memset(t, k, 16);
        sefer_free(t);
    }
    pthread_barrier_wait(&started);  /* all alive, every block written */
    pthread_barrier_wait(&assigned); /* the test's thread chose each victim */
    for (int i = 0; i < NBLOCKS / 2; i++) {
        if (w->p[i] == NULL)
            continue;
        check_block(w, i, "before its own thread freed it");
        sefer_free(w->p[i]);
    }
    for (int i = NBLOCKS / 2; i < NBLOCKS; i++) {
        if (w->victim->p[i] == NULL)
            continue;
        check_block(w->victim, i, "before another thread freed it");
        sefer_free(w->victim->p[i]);
    }
    pthread_barrier_wait(&done);
    return NULL;
}

static bool has_heap(const cJSON *heaps, int tid)
{
    const cJSON *h = it_heap_of(heaps, tid);
    return h != NULL && strcmp(it_str(h, "state"), "live") == 0;
}

/* /metrics' value of an unlabelled series, or -1. */
static long long metric(int port, const char *name)
{
    it_resp_t r;
    it_get(port, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    char want[128];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr(r.body, want);
    long long v = at ? strtoll(at + strlen(want), NULL, 10) : -1;
    it_free(&r);
    return v;
}

START_TEST(past_capacity)
{
    int port = it_start();
    cJSON_Delete(it_json(port, "/stats")); /* the server's thread has taken its heap (or not) */
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_eq(s0.heap_fallbacks, 0);
    ck_assert_uint_lt(s0.heaps_live, HEAPCAP);
    int with_heap = HEAPCAP - (int)s0.heaps_live; /* released heaps, then new slots */
    int expected = WORKERS - with_heap;
    ck_assert_int_gt(expected, 0);

    struct st_capture cap;
    st_capture_begin(&cap);
    pthread_barrier_init(&started, NULL, WORKERS + 1);
    pthread_barrier_init(&assigned, NULL, WORKERS + 1);
    pthread_barrier_init(&done, NULL, WORKERS + 1);
    for (int i = 0; i < WORKERS; i++) {
        workers[i].index = i;
        workers[i].thread = st_spawn(worker_main, &workers[i], 256 << 10);
    }
    pthread_barrier_wait(&started);
    char err[4096];
    st_capture_end(&cap, err, sizeof err);

    /* Every worker alive and holding its blocks. */
    struct sefer_stats s1 = st_stats();
    ck_assert_uint_eq(s1.heap_slots, HEAPCAP);
    ck_assert_uint_eq(s1.heaps_live, HEAPCAP);
    ck_assert_int_eq(ST_DELTA(s1, s0, heap_fallbacks), expected);
    ck_assert_int_ge(ST_DELTA(s1, s0, fallback_allocs), (int64_t)expected * (NBLOCKS * NOT_SPANS / NSIZES + 2000));
    cJSON *st = it_json(port, "/stats");
    ck_assert_uint_eq(it_u64(st, "heap_fallbacks"), s1.heap_fallbacks);
    cJSON_Delete(st);
    ck_assert_int_eq(metric(port, "sefer_heap_fallbacks_total"), (long long)s1.heap_fallbacks);
    ck_assert_msg(it_count(err, "heaps are owned by live threads") == 1,
                  "stderr should say once that the registry is full; it said:\n%s", err);
    REL_ASSERT_CONSISTENT("with every worker holding its blocks");

    /* Which workers are on the fallback heap: the ones /heaps does not
     * list with a live heap of their own. */
    cJSON *heaps = it_json(port, "/heaps?limit=10000");
    struct worker *fallback[WORKERS], *owning[WORKERS];
    int nf = 0, no = 0;
    for (int i = 0; i < WORKERS; i++) {
        if (has_heap(heaps, workers[i].tid))
            owning[no++] = &workers[i];
        else
            fallback[nf++] = &workers[i];
    }
    cJSON_Delete(heaps);
    printf("%d threads alive, registry of %d heaps (%d owned before): %d on the fallback heap;"
           " heap_fallbacks +%" PRId64 ", fallback_allocs +%" PRId64 ", heaps_live %" PRIu64 "\n",
           WORKERS, HEAPCAP, (int)s0.heaps_live, nf, ST_DELTA(s1, s0, heap_fallbacks),
           ST_DELTA(s1, s0, fallback_allocs), s1.heaps_live);
    ck_assert_int_eq(nf, expected);
    ck_assert_int_eq(no, with_heap);
    /* One cycle through every worker, alternating fallback and owning
     * ones while both last: each frees the second half of the next one's
     * blocks, so blocks cross from the fallback heap to heaps and back. */
    struct worker *order[WORKERS];
    int n = 0;
    for (int f = 0, o = 0; f < nf || o < no;) {
        if (f < nf)
            order[n++] = fallback[f++];
        if (o < no)
            order[n++] = owning[o++];
    }
    for (int i = 0; i < WORKERS; i++)
        order[i]->victim = order[(i + 1) % WORKERS];
    pthread_barrier_wait(&assigned);
    pthread_barrier_wait(&done);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i].thread, NULL);
    REL_ASSERT_NO_FAILURES();
    REL_ASSERT_CONSISTENT("after every worker freed its blocks and exited");
    struct sefer_stats s2 = st_stats();
    ck_assert_uint_eq(s2.heap_fallbacks, s1.heap_fallbacks);
    ck_assert_uint_eq(s2.heap_slots, HEAPCAP);

    /* The released heaps go to new threads: as many as there are, and not
     * one of them falls back. */
    int fresh = HEAPCAP - (int)s2.heaps_live;
    ck_assert_int_ge(fresh, with_heap);
    pthread_barrier_destroy(&started);
    pthread_barrier_destroy(&assigned);
    pthread_barrier_destroy(&done);
    pthread_barrier_init(&started, NULL, (unsigned)fresh + 1);
    pthread_barrier_init(&assigned, NULL, (unsigned)fresh + 1);
    pthread_barrier_init(&done, NULL, (unsigned)fresh + 1);
    for (int i = 0; i < fresh; i++) {
        workers[i] = (struct worker){.index = WORKERS + i};
        workers[i].victim = &workers[(i + 1) % fresh];
        workers[i].thread = st_spawn(worker_main, &workers[i], 256 << 10);
    }
    pthread_barrier_wait(&started);
    struct sefer_stats s3 = st_stats();
    ck_assert_uint_eq(s3.heaps_live, HEAPCAP);
    pthread_barrier_wait(&assigned);
    pthread_barrier_wait(&done);
    for (int i = 0; i < fresh; i++)
        pthread_join(workers[i].thread, NULL);
    REL_ASSERT_NO_FAILURES();
    struct sefer_stats s4 = st_stats();
    ck_assert_uint_eq(s4.heap_fallbacks, s1.heap_fallbacks);
    ck_assert_uint_eq(s4.heap_slots, HEAPCAP);
    REL_ASSERT_CONSISTENT("after the second round");
    sefer_introspect_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("heap-capacity");
    TCase *tc = tcase_create("heap-capacity");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, past_capacity);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
