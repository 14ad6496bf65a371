/* test_many_threads.c - many threads, short-lived threads, and the segment
 * cap under multi-threaded load.
 *
 *   thousands_of_live_threads  4000 threads alive at once, all allocating
 *       checksummed blocks, checking and freeing each other's: every one
 *       gets a heap of its own (the registry grows; nothing goes to the
 *       locked fallback heap), sefer_check() while they all hold their
 *       blocks and after they exit.
 *   thread_generations  20 generations of 1000 threads alive at once, each
 *       leaving blocks for the next generation to free: the heaps of one
 *       generation are reused by the next (the registry does not grow past
 *       the first), and RSS after the last is within 1.15x + 8 MiB of RSS
 *       after the sixth, each read after sefer_trim() (as in
 *       thread_churn_rss: without it the figures held what the adaptive
 *       decommit keeps for reuse, which depends on how long the
 *       generations took; it takes a few generations to settle).
 *   thread_churn_rss  5000 threads created and destroyed (5 batches of 1000,
 *       8 alive at a time), each leaving 20 blocks behind that the main
 *       thread checks and frees one batch later (frees into the heaps of
 *       exited threads).  RSS after the last batch, read after sefer_trim()
 *       (so it is what is still held, not what the large cache and the
 *       decommit policy keep for reuse at that moment), must be within
 *       1.15x + 8 MiB of the highest RSS after batches 1-3, and
 *       segments within 1.10x + 2 of the most after batches 1-3: what
 *       exited threads leave is reused, not accumulated.
 *   segment_cap_threads  segments.max set 24 segments above what is in use;
 *       4 threads allocate small, medium and large blocks until each has
 *       been refused 40 times: every refusal is NULL with ENOMEM, the count
 *       never passes the cap, every block is intact and sefer_check() finds
 *       nothing; after everything is freed (across threads) the same load
 *       fits again (a little less while the threads live: each heap keeps
 *       the last page of each class it used), once the threads have exited
 *       the whole cap is free again, and more fits once the cap is raised.
 *
 * Uses the standard names (the interposed malloc family). */
#include "rel.h"

#include <malloc.h>

/* RSS readings are what these tests are about: without /proc they cannot
 * be made, and that is a failure of the test's premise, not a pass. */
static size_t rss_or_fail(void)
{
    size_t r = st_rss();
    ck_assert_msg(r > 0, "RSS cannot be read (/proc/self/statm)");
    return r;
}

/* ======================================================================
 * 4000 live threads
 * ==================================================================== */

#define MANY 4000
#define MANY_BLOCKS 16

static struct many_slot {
    unsigned char *p[MANY_BLOCKS];
    size_t n[MANY_BLOCKS];
} *many;
static pthread_barrier_t many_barrier;

static void many_alloc(size_t id, uint64_t *r)
{
    for (int k = 0; k < MANY_BLOCKS; k++) {
        uint64_t x = st_rand(r);
        size_t n = x % 16 == 0 ? 9000 + x % 50000 : 8 + x % 3000;
        unsigned char *p = malloc(n);
        if (p == NULL)
            rel_fail("thread %zu: malloc(%zu) failed", id, n);
        else
            st_block_fill(p, n);
        many[id].p[k] = p;
        many[id].n[k] = n;
    }
}

static void many_check(size_t id, const char *when)
{
    for (int k = 0; k < MANY_BLOCKS; k++)
        if (many[id].p[k] && !st_block_ok(many[id].p[k], many[id].n[k]))
            rel_fail("thread %zu's block %d (%p, %zu bytes) corrupted %s", id, k,
                     (void *)many[id].p[k], many[id].n[k], when);
}

static void *many_thread(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp;
    uint64_t r = 0x5A5A1234ULL + id * 7919;
    many_alloc(id, &r);
    pthread_barrier_wait(&many_barrier); /* all alive, holding their blocks */
    pthread_barrier_wait(&many_barrier); /* main has looked at the statistics */
    many_check(id, "while all threads were alive");
    pthread_barrier_wait(&many_barrier);
    /* free another thread's blocks (cross-thread frees into live heaps) */
    size_t other = (id + 47) % MANY;
    many_check(other, "before another thread freed them");
    for (int k = 0; k < MANY_BLOCKS; k++)
        free(many[other].p[k]);
    pthread_barrier_wait(&many_barrier);
    /* then local churn with reallocs: the remote frees come back too */
    unsigned char *p = NULL;
    size_t n = 0;
    for (int k = 0; k < 100; k++) {
        size_t nn = 1 + st_rand(&r) % 5000;
        unsigned char *q = realloc(p, nn);
        if (q == NULL) {
            rel_fail("thread %zu: realloc(%zu) failed", id, nn);
            break;
        }
        if (p && st_pat_check_range(q, 0, n < nn ? n : nn, (uint64_t)k) != SIZE_MAX)
            rel_fail("thread %zu: realloc lost bytes", id);
        st_pat_fill(q, nn, (uint64_t)k + 1);
        p = q;
        n = nn;
    }
    free(p);
    return NULL;
}

START_TEST(test_thousands_of_live_threads)
{
    many = st_map(MANY * sizeof *many);
    pthread_t *t = st_map(MANY * sizeof *t);
    pthread_barrier_init(&many_barrier, NULL, MANY + 1);
    free(malloc(1)); /* main's own heap */
    struct sefer_stats s0 = st_stats();
    for (size_t i = 0; i < MANY; i++)
        t[i] = st_spawn(many_thread, (void *)(uintptr_t)i, 64 * 1024);
    pthread_barrier_wait(&many_barrier);
    struct sefer_stats s1 = st_stats();
    int problems_alive = sefer_check();
    pthread_barrier_wait(&many_barrier);
    pthread_barrier_wait(&many_barrier);
    pthread_barrier_wait(&many_barrier);
    for (size_t i = 0; i < MANY; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&many_barrier);
    sefer_trim();
    struct sefer_stats s2 = st_stats();

    REL_ASSERT_NO_FAILURES();
    printf("%d threads: heaps_live %" PRIu64 " with all alive (before %" PRIu64 "), heap slots %" PRIu64
           ", fallback allocations +%" PRId64 ", RSS %.1f MiB\n",
           MANY, s1.heaps_live, s0.heaps_live, s1.heap_slots, ST_DELTA(s1, s0, fallback_allocs),
           (double)rss_or_fail() / ST_MIB);
    ck_assert_msg(s1.heaps_live >= s0.heaps_live + MANY, "with %d threads alive heaps_live is %" PRIu64,
                  MANY, s1.heaps_live);
    ck_assert_msg(ST_DELTA(s1, s0, fallback_allocs) == 0,
                  "%d live threads made %" PRId64 " fallback allocations", MANY,
                  ST_DELTA(s1, s0, fallback_allocs));
    ck_assert_msg(ST_DELTA(s1, s0, heap_fallbacks) == 0, "%" PRId64 " of %d live threads got no heap",
                  ST_DELTA(s1, s0, heap_fallbacks), MANY);
    ck_assert_msg(problems_alive == 0, "sefer_check with %d threads alive: %d problems", MANY,
                  problems_alive);
    ck_assert_uint_eq(s2.heaps_live, s0.heaps_live);
    int64_t bytes = ST_DELTA(s2, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks moved by %" PRId64, bytes);
    REL_ASSERT_CONSISTENT("after 4000 threads exited");
    st_unmap(t, MANY * sizeof *t);
    st_unmap(many, MANY * sizeof *many);
}
END_TEST

/* ======================================================================
 * 20 generations of 1000 live threads: heaps are reused
 * ==================================================================== */

#define GEN_COUNT 20
#define GEN_THREADS 1000
#define GEN_KEEP 4 /* blocks each thread leaves for the next generation */
#define GEN_RSS_FACTOR 1.15
#define GEN_RSS_SLACK (8 * ST_MIB)
#define GEN_SETTLED 5 /* the generation whose RSS is the reference */

static struct gen_slot {
    unsigned char *p[GEN_KEEP];
    size_t n[GEN_KEEP];
} *gen; /* [GEN_THREADS]: what generation g leaves for g + 1 */
static pthread_barrier_t gen_barrier;

static void *gen_thread(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp % GEN_THREADS, g = (size_t)(uintptr_t)argp / GEN_THREADS;
    uint64_t r = 0xBEEF0000ULL + (uint64_t)(uintptr_t)argp * 6151;
    struct gen_slot *mine = &gen[id], *theirs = &gen[(id + 1) % GEN_THREADS];
    void *tmp[32];
    for (int k = 0; k < 32; k++)
        tmp[k] = malloc(16 + st_rand(&r) % 2000);
    pthread_barrier_wait(&gen_barrier); /* the whole generation alive */
    /* the blocks a thread of the generation before left (its thread gone):
     * freed into an abandoned heap, or one this generation adopted */
    for (int k = 0; k < GEN_KEEP && g > 0; k++) {
        if (!st_block_ok(theirs->p[k], theirs->n[k]))
            rel_fail("generation %zu: a block left by the one before is corrupted", g);
        free(theirs->p[k]);
    }
    pthread_barrier_wait(&gen_barrier); /* every old block freed before new ones go in */
    for (int k = 0; k < GEN_KEEP; k++) {
        size_t n = 16 + st_rand(&r) % 6000;
        unsigned char *p = malloc(n);
        if (p == NULL) {
            rel_fail("generation %zu: malloc(%zu) failed", g, n);
            n = 0;
        } else {
            st_block_fill(p, n);
        }
        mine->p[k] = p;
        mine->n[k] = n;
    }
    for (int k = 0; k < 32; k++)
        free(tmp[k]);
    return NULL;
}

START_TEST(test_thread_generations)
{
    gen = st_map(GEN_THREADS * sizeof *gen);
    pthread_t *t = st_map(GEN_THREADS * sizeof *t);
    size_t rss[GEN_COUNT];
    uint64_t slots[GEN_COUNT];
    for (size_t g = 0; g < GEN_COUNT; g++) {
        pthread_barrier_init(&gen_barrier, NULL, GEN_THREADS);
        for (size_t i = 0; i < GEN_THREADS; i++)
            t[i] = st_spawn(gen_thread, (void *)(uintptr_t)(g * GEN_THREADS + i), 64 * 1024);
        for (size_t i = 0; i < GEN_THREADS; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&gen_barrier);
        /* after sefer_trim: what is still held, not what the decommit
         * policy keeps for reuse at that moment, which depends on how long
         * the generations took (decommit.delay is a time) */
        sefer_trim();
        rss[g] = rss_or_fail();
        slots[g] = st_stats().heap_slots;
    }
    for (size_t i = 0; i < GEN_THREADS; i++)
        for (int k = 0; k < GEN_KEEP; k++)
            free(gen[i].p[k]);
    REL_ASSERT_NO_FAILURES();
    printf("%d generations of %d threads: heap slots %" PRIu64 " after the first, %" PRIu64
           " after the last; RSS %.1f MiB after the sixth, %.1f MiB after the last\n",
           GEN_COUNT, GEN_THREADS, slots[0], slots[GEN_COUNT - 1], (double)rss[GEN_SETTLED] / ST_MIB,
           (double)rss[GEN_COUNT - 1] / ST_MIB);
    /* a generation's threads take the heaps the one before released (a few
     * more may be made while a thread of the last generation is still
     * between its last free and its exit) */
    ck_assert_msg(slots[GEN_COUNT - 1] <= slots[0] + 16,
                  "the registry grew from %" PRIu64 " to %" PRIu64 " heaps over %d generations of %d",
                  slots[0], slots[GEN_COUNT - 1], GEN_COUNT, GEN_THREADS);
    double bound = (double)rss[GEN_SETTLED] * GEN_RSS_FACTOR + (double)GEN_RSS_SLACK;
    ck_assert_msg((double)rss[GEN_COUNT - 1] <= bound,
                  "RSS grew over thread generations: %zu bytes after generation %d, %zu after the last"
                  " (bound %.0f)",
                  rss[GEN_SETTLED], GEN_SETTLED + 1, rss[GEN_COUNT - 1], bound);
    REL_ASSERT_CONSISTENT("after 20 generations of 1000 threads");
    st_unmap(t, GEN_THREADS * sizeof *t);
    st_unmap(gen, GEN_THREADS * sizeof *gen);
}
END_TEST

/* ======================================================================
 * 5000 short-lived threads: RSS does not grow with churn
 * ==================================================================== */

#define CHURN_BATCHES 5
#define CHURN_BATCH 1000
#define CHURN_WAVE 8
#define CHURN_KEEP 20 /* blocks each thread leaves behind */
#define CHURN_RSS_FACTOR 1.15
#define CHURN_RSS_SLACK (8 * ST_MIB)
#define CHURN_EARLY 3 /* batches whose highest RSS is the baseline */

struct churn_slot {
    unsigned char *p[CHURN_KEEP];
    size_t n[CHURN_KEEP];
};
static struct churn_slot *churn; /* 2 * CHURN_BATCH: this batch's and the last one's */

static void *churn_thread(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp, slot = id % (2 * CHURN_BATCH);
    uint64_t r = 0xC0FFEEULL + id * 104729;
    void *tmp[10];
    for (int k = 0; k < 10; k++) /* garbage freed before exit */
        tmp[k] = malloc(1 + st_rand(&r) % 4000);
    for (int k = 0; k < CHURN_KEEP; k++) {
        uint64_t x = st_rand(&r);
        size_t n = k == 0 ? 10000 + x % 90000 : (k == 1 && x % 10 == 0) ? 300000 : 16 + x % 4000;
        unsigned char *p = malloc(n);
        if (p == NULL)
            rel_fail("churn thread %zu: malloc(%zu) failed", id, n);
        else
            st_block_fill(p, n);
        churn[slot].p[k] = p;
        churn[slot].n[k] = n;
    }
    for (int k = 0; k < 10; k++)
        free(tmp[k]);
    return NULL;
}

static void churn_release(size_t batch)
{
    for (size_t id = batch * CHURN_BATCH; id < (batch + 1) * CHURN_BATCH; id++) {
        struct churn_slot *c = &churn[id % (2 * CHURN_BATCH)];
        for (int k = 0; k < CHURN_KEEP; k++) {
            if (c->p[k] && !st_block_ok(c->p[k], c->n[k]))
                rel_fail("block %d of exited thread %zu corrupted", k, id);
            free(c->p[k]);
            c->p[k] = NULL;
        }
    }
}

START_TEST(test_thread_churn_rss)
{
    churn = st_map(2 * CHURN_BATCH * sizeof *churn);
    size_t rss[CHURN_BATCHES];
    uint64_t segs[CHURN_BATCHES];
    for (size_t b = 0; b < CHURN_BATCHES; b++) {
        for (size_t w = 0; w < CHURN_BATCH; w += CHURN_WAVE) {
            pthread_t t[CHURN_WAVE];
            size_t wave = CHURN_BATCH - w < CHURN_WAVE ? CHURN_BATCH - w : CHURN_WAVE;
            for (size_t i = 0; i < wave; i++)
                t[i] = st_spawn(churn_thread, (void *)(uintptr_t)(b * CHURN_BATCH + w + i),
                                 64 * 1024);
            for (size_t i = 0; i < wave; i++)
                pthread_join(t[i], NULL);
        }
        if (b >= 1)
            churn_release(b - 1); /* they outlived their threads by a batch */
        sefer_trim();
        rss[b] = rss_or_fail();
        struct sefer_stats now = st_stats();
        segs[b] = now.segments;
        printf("thread churn: batch %zu: RSS %.1f MiB, in blocks %.1f MiB, %" PRIu64 " segments\n", b + 1,
               (double)rss[b] / ST_MIB, (double)now.bytes_in_blocks / ST_MIB, segs[b]);
    }
    churn_release(CHURN_BATCHES - 1);
    struct sefer_stats s = st_stats();
    REL_ASSERT_NO_FAILURES();
    printf("thread churn: RSS after batch 2 %.1f MiB, after batch %d %.1f MiB; segments %" PRIu64
           " -> %" PRIu64 "; abandoned heaps at the end %" PRIu64 "\n",
           (double)rss[1] / ST_MIB, CHURN_BATCHES, (double)rss[CHURN_BATCHES - 1] / ST_MIB,
           segs[1], segs[CHURN_BATCHES - 1], s.heaps_abandoned);
    /* The baseline is the highest of the first CHURN_EARLY batches: one
     * batch's RSS depends on how the waves of threads interleaved (the
     * blocks in use are the same every run, the memory around them is
     * not).  Batch 2 went from 139 MiB (a loaded CI machine, where the
     * bound on batches 1-2 alone failed at 170 MiB after batch 5) to
     * 159 MiB over runs of the same library; batches 1-3 together vary
     * less.  A leak of the exited threads' heaps still shows: it grows
     * every batch, by two batches' worth past the baseline. */
    size_t early = 0;
    for (int b = 0; b < CHURN_EARLY; b++)
        early = rss[b] > early ? rss[b] : early;
    double bound = (double)early * CHURN_RSS_FACTOR + (double)CHURN_RSS_SLACK;
    ck_assert_msg((double)rss[CHURN_BATCHES - 1] <= bound,
                  "RSS grew with thread churn: %zu bytes after batches 1-%d, %zu after batch %d "
                  "(bound %.0f)",
                  early, CHURN_EARLY, rss[CHURN_BATCHES - 1], CHURN_BATCHES, bound);
    /* the segments' baseline the same way: after batch 2 they ran 154 in
     * one CI run (and 172 at the end) where they run 172-190 on the
     * development machine (and 159-166 at the end) */
    uint64_t early_segs = 0;
    for (int b = 0; b < CHURN_EARLY; b++)
        early_segs = segs[b] > early_segs ? segs[b] : early_segs;
    ck_assert_msg(segs[CHURN_BATCHES - 1] <= early_segs + early_segs / 10 + 2,
                  "segments grew with thread churn: at most %" PRIu64 " after batches 1-%d, %" PRIu64
                  " at the end",
                  early_segs, CHURN_EARLY, segs[CHURN_BATCHES - 1]);
    /* heaps follow the threads alive at once, not the threads ever started */
    ck_assert_msg(s.heap_slots <= CHURN_WAVE + 16,
                  "%" PRIu64 " heaps made for at most %d threads alive at once", s.heap_slots, CHURN_WAVE);
    ck_assert_msg(s.heaps_abandoned <= s.heap_slots, "%" PRIu64 " abandoned heaps of %" PRIu64,
                  s.heaps_abandoned, s.heap_slots);
    REL_ASSERT_CONSISTENT("after 5000 short-lived threads");
    st_unmap(churn, 2 * CHURN_BATCH * sizeof *churn);
}
END_TEST

/* ======================================================================
 * segments.max under multi-threaded load
 * ==================================================================== */

#define CAP_THREADS 4
#define CAP_EXTRA 24     /* segments allowed above what is in use */
#define CAP_REFUSALS 40  /* each thread stops after this many NULLs */
#define CAP_MAX_BLOCKS (1 << 17)

static struct cap_thread {
    unsigned char **p;
    size_t *n;
    size_t count, refusals, bad_errno;
    uint64_t max_segments;
    int id;
} cap[CAP_THREADS];
static pthread_barrier_t cap_barrier;
static unsigned long long cap_limit;

static size_t cap_size(uint64_t x)
{
    switch (x % 3) {
    case 0:
        return 16 + x % 1000;
    case 1:
        return 2000 + x % 100000;
    default:
        return 200000 + x % 3000000;
    }
}

/* Allocates until refused CAP_REFUSALS times; nothing here may assert. */
static void cap_fill(struct cap_thread *c, uint64_t seed)
{
    uint64_t r = seed;
    c->count = c->refusals = c->bad_errno = 0;
    while (c->refusals < CAP_REFUSALS && c->count < CAP_MAX_BLOCKS) {
        size_t n = cap_size(st_rand(&r));
        errno = 0;
        unsigned char *p = malloc(n);
        if (p == NULL) {
            c->refusals++;
            c->bad_errno += errno != ENOMEM;
            struct sefer_stats s = st_stats();
            if (s.segments > c->max_segments)
                c->max_segments = s.segments;
            continue;
        }
        st_block_fill(p, n);
        c->p[c->count] = p;
        c->n[c->count++] = n;
    }
}

static void cap_check(struct cap_thread *c, const char *when)
{
    for (size_t i = 0; i < c->count; i++)
        if (!st_block_ok(c->p[i], c->n[i]))
            rel_fail("thread %d's block %zu (%zu bytes) corrupted %s", c->id, i, c->n[i], when);
}

static void cap_free(struct cap_thread *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->p[i]);
    c->count = 0;
}

static void *cap_thread(void *argp)
{
    struct cap_thread *c = argp;
    for (int round = 0; round < 2; round++) {
        cap_fill(c, 0xCAFE0000ULL + (uint64_t)c->id * 31 + (uint64_t)round);
        pthread_barrier_wait(&cap_barrier); /* all full: main checks */
        pthread_barrier_wait(&cap_barrier);
        cap_check(c, "at the cap");
        /* free the next thread's blocks (cross-thread) */
        struct cap_thread *o = &cap[(c->id + 1) % CAP_THREADS];
        pthread_barrier_wait(&cap_barrier);
        cap_check(o, "before another thread freed them");
        cap_free(o);
        pthread_barrier_wait(&cap_barrier);
    }
    return NULL;
}

START_TEST(test_segment_cap_threads)
{
    for (int i = 0; i < CAP_THREADS; i++) {
        cap[i].id = i;
        cap[i].p = st_map(CAP_MAX_BLOCKS * sizeof *cap[i].p);
        cap[i].n = st_map(CAP_MAX_BLOCKS * sizeof *cap[i].n);
    }
    struct sefer_stats s0 = st_stats();
    cap_limit = s0.segments + CAP_EXTRA;
    char v[32];
    snprintf(v, sizeof v, "%llu", cap_limit);
    ST_KNOB_SET("segments.max", v);
    pthread_barrier_init(&cap_barrier, NULL, CAP_THREADS + 1);
    pthread_t t[CAP_THREADS];
    for (int i = 0; i < CAP_THREADS; i++)
        t[i] = st_spawn(cap_thread, &cap[i], 0);
    size_t fitted[2] = {0, 0}, refused = 0, bad_errno = 0;
    int problems[2];
    uint64_t max_segments = 0;
    for (int round = 0; round < 2; round++) {
        pthread_barrier_wait(&cap_barrier);
        for (int i = 0; i < CAP_THREADS; i++) {
            fitted[round] += cap[i].count;
            refused += cap[i].refusals;
            bad_errno += cap[i].bad_errno;
            if (cap[i].max_segments > max_segments)
                max_segments = cap[i].max_segments;
        }
        problems[round] = sefer_check(); /* allocates nothing: fine at the cap */
        pthread_barrier_wait(&cap_barrier);
        pthread_barrier_wait(&cap_barrier);
        pthread_barrier_wait(&cap_barrier);
    }
    for (int i = 0; i < CAP_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&cap_barrier);
    struct sefer_stats s1 = st_stats();
    /* the threads are gone, their heaps emptied: the whole cap is free again
     * (a 3 MiB block takes one segment) */
    void *whole[2 * CAP_EXTRA];
    size_t segments_back = 0;
    while (segments_back < 2 * CAP_EXTRA && (whole[segments_back] = malloc(3 * ST_MIB)) != NULL)
        segments_back++;
    for (size_t i = 0; i < segments_back; i++)
        free(whole[i]);

    /* assertions only now that memory is back */
    REL_ASSERT_NO_FAILURES();
    printf("segment cap %llu: %zu then %zu blocks fitted, %zu refusals, segments at most %" PRIu64
           "; after the threads exited %zu 3 MiB blocks fit\n",
           cap_limit, fitted[0], fitted[1], refused, max_segments, segments_back);
    ck_assert_msg(bad_errno == 0, "%zu refusals came without ENOMEM", bad_errno);
    ck_assert_uint_eq(refused, 2 * CAP_THREADS * CAP_REFUSALS);
    ck_assert_msg(max_segments <= cap_limit, "segments reached %" PRIu64 ", cap %llu", max_segments,
                  cap_limit);
    ck_assert_msg(problems[0] == 0 && problems[1] == 0, "sefer_check at the cap: %d, %d problems",
                  problems[0], problems[1]);
    ck_assert_msg(ST_DELTA(s1, s0, enomem) >= (int64_t)refused, "stats.enomem grew by %" PRId64,
                  ST_DELTA(s1, s0, enomem));
    /* while the threads live, each heap keeps the last page of each size
     * class it used (and so its segment): the second round has a little
     * less room */
    ck_assert_msg(fitted[1] + fitted[1] / 3 >= fitted[0],
                  "after freeing everything only %zu blocks fitted (first time %zu)", fitted[1],
                  fitted[0]);
    ck_assert_msg(segments_back >= CAP_EXTRA - 4,
                  "after the threads exited only %zu 3 MiB blocks fit under a cap %d segments "
                  "above the start",
                  segments_back, CAP_EXTRA);
    REL_ASSERT_CONSISTENT("after the segment cap was hit and everything freed");

    /* raising the cap: much more fits */
    snprintf(v, sizeof v, "%llu", cap_limit + 64);
    ST_KNOB_SET("segments.max", v);
    void *big = malloc(128 * ST_MIB);
    ck_assert_msg(big != NULL, "128 MiB with the cap raised by 64 segments: %s", strerror(errno));
    free(big);
    for (int i = 0; i < CAP_THREADS; i++) {
        st_unmap(cap[i].p, CAP_MAX_BLOCKS * sizeof *cap[i].p);
        st_unmap(cap[i].n, CAP_MAX_BLOCKS * sizeof *cap[i].n);
    }
}
END_TEST

/* These cases are about each thread's own heap (its remote frees, its ring,
 * its life after the thread): every thread gets it at its first malloc,
 * rather than after threads.heap_after allocations in a second, which
 * test_rare_threads.c tests. */
static void heap_per_thread(void)
{
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "0"), 0);
}

int main(void)
{
    Suite *s = suite_create("many_threads");
    TCase *tc = tcase_create("many_threads");
    tcase_add_checked_fixture(tc, heap_per_thread, NULL);
    tcase_set_timeout(tc, 300); /* a hang guard only (the whole test took 117 s beside two CPU hogs) */
    tcase_add_test(tc, test_thousands_of_live_threads);
    tcase_add_test(tc, test_thread_generations);
    tcase_add_test(tc, test_thread_churn_rss);
    tcase_add_test(tc, test_segment_cap_threads);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
