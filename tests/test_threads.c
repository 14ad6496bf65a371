/* test_threads.c - sefer under threads: cross-thread frees with checksummed
 * blocks, a remote-free ring overflow storm, thousands of short-lived
 * threads, more live threads than registry slots, allocation from thread
 * destructors after sefer's own teardown, and fork from a busy process (also while threads.cache_max purges
 * other threads' heaps).
 *
 * Uses the standard names (the interposed malloc family). */
#define _GNU_SOURCE
#include "sefer_test.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

static atomic_long failures;

#define FAIL_IF(cond)                                                                      \
    do {                                                                                   \
        if (cond)                                                                          \
            atomic_fetch_add(&failures, 1);                                                \
    } while (0)

/* ======================================================================
 * 1. cross-thread stress with checksummed blocks
 * ==================================================================== */

#define STRESS_THREADS 4
#define QCAP 4096

static struct st_queue *queues; /* STRESS_THREADS of them, from mmap */

static size_t stress_size(uint64_t x)
{
    unsigned pick = (unsigned)(x % 1000);
    x >>= 10;
    if (pick < 700)
        return 1 + x % 256;
    if (pick < 950)
        return 257 + x % (8192 - 256);
    if (pick < 995)
        return 8193 + x % (SEFER_MEDIUM_MAX - 8192);
    return SEFER_MEDIUM_MAX + 1 + x % (ST_MIB + ST_MIB / 2);
}

struct stress_arg {
    int id;
    long ops;
};
static pthread_barrier_t stress_barrier;

static void *stress_thread(void *argp)
{
    struct stress_arg *a = argp;
    uint64_t r = 0x1234567ULL * (uint64_t)(a->id + 1);
    for (long op = 0; op < a->ops; op++) {
        uint64_t x = st_rand(&r);
        struct st_block e;
        if ((x & 1) && st_queue_pop(&queues[a->id], &e)) {
            FAIL_IF(!st_block_ok(e.p, e.n));
            FAIL_IF(malloc_usable_size(e.p) < e.n);
            if ((x >> 1) % 8 == 0 && e.n <= 8192) {
                /* realloc a block another thread allocated */
                size_t nn = 1 + (x >> 8) % 8192;
                uint64_t old_seed = st_seed_of(e.p, e.n);
                unsigned char *q = realloc(e.p, nn);
                FAIL_IF(q == NULL);
                if (!q)
                    continue;
                FAIL_IF(!st_block_resized(&e, q, nn, old_seed));
                if (!st_queue_push(&queues[(x >> 20) % STRESS_THREADS], e)) {
                    FAIL_IF(!st_block_ok(e.p, e.n));
                    free(e.p);
                }
            } else {
                free(e.p);
            }
            continue;
        }
        e.n = stress_size(x >> 1);
        e.p = ((x >> 40) % 16 == 0) ? calloc(1, e.n) : malloc(e.n);
        FAIL_IF(e.p == NULL);
        if (!e.p)
            continue;
        st_block_fill(e.p, e.n);
        if (!st_queue_push(&queues[(x >> 24) % STRESS_THREADS], e)) {
            FAIL_IF(!st_block_ok(e.p, e.n));
            free(e.p);
        }
    }
    /* nobody pushes after this barrier: empty our own queue, then exit (the
     * exit hands our heap back with every remote free drained) */
    pthread_barrier_wait(&stress_barrier);
    struct st_block e;
    while (st_queue_pop(&queues[a->id], &e)) {
        FAIL_IF(!st_block_ok(e.p, e.n));
        free(e.p);
    }
    pthread_barrier_wait(&stress_barrier);
    return NULL;
}

START_TEST(test_cross_thread_stress)
{
    queues = st_map(STRESS_THREADS * sizeof *queues);
    for (int i = 0; i < STRESS_THREADS; i++)
        st_queue_init(&queues[i], QCAP);

    pthread_barrier_init(&stress_barrier, NULL, STRESS_THREADS);
    struct sefer_stats s0 = st_stats();
    pthread_t t[STRESS_THREADS];
    struct stress_arg args[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        args[i].id = i;
        args[i].ops = 200000;
        t[i] = st_spawn(stress_thread, &args[i], 0);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(t[i], NULL);

    pthread_barrier_destroy(&stress_barrier);
    size_t left = 0;
    for (int i = 0; i < STRESS_THREADS; i++)
        left += queues[i].count;
    struct sefer_stats s1 = st_stats();
    ck_assert_msg(atomic_load(&failures) == 0, "%ld corrupted/failed blocks during the stress",
                  atomic_load(&failures));
    ck_assert_uint_eq(left, 0);
    ck_assert_msg(ST_DELTA(s1, s0, remote_frees) > 0, "no remote frees counted");
    /* (a few allocations are glibc's own, for the new threads) */
    int64_t live = ST_DELTA(s1, s0, allocs) - ST_DELTA(s1, s0, frees);
    ck_assert_msg(live >= -16 && live <= 16, "allocs - frees off by %" PRId64 " after the stress",
                  live);
    int64_t bytes = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks moved by %" PRId64 " after everything was freed", bytes);
    st_unmap(queues, STRESS_THREADS * sizeof *queues);
}
END_TEST

/* ======================================================================
 * 2. ring-full storm
 * ==================================================================== */

enum storm_phase {
    PH_START,
    PH_READY,     /* owner: has a heap, waits */
    PH_ALLOCATE,  /* main: go allocate */
    PH_ALLOCATED, /* owner: N blocks published */
    PH_FREE,      /* main: freers go */
    PH_DRAIN,     /* main: owner allocates once more */
    PH_DRAINED,
    PH_ROUND2,
    PH_ROUND2_DONE,
    PH_EXIT,
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    enum storm_phase phase;
    int freers_ready, freers_done;
    size_t n;
    unsigned char **blocks;
} storm = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PH_START, 0, 0, 0, NULL};

/* 1 KiB blocks: 64 to a 64 KiB page.  A remote free goes onto its page's
 * own list, except the first into each full page, which tells the owner
 * through its ring: so 2 x capacity full pages make the ring overflow. */
#define STORM_SIZE 1024
#define STORM_PAGE_BLOCKS 64
#define STORM_FREERS 2

static void storm_set(enum storm_phase ph)
{
    pthread_mutex_lock(&storm.lock);
    storm.phase = ph;
    pthread_cond_broadcast(&storm.cond);
    pthread_mutex_unlock(&storm.lock);
}

static void storm_wait(enum storm_phase ph)
{
    pthread_mutex_lock(&storm.lock);
    while (storm.phase < ph)
        pthread_cond_wait(&storm.cond, &storm.lock);
    pthread_mutex_unlock(&storm.lock);
}

static void *storm_owner(void *unused)
{
    (void)unused;
    void *warm = malloc(STORM_SIZE); /* claim a heap before main's baseline */
    free(warm);
    storm_set(PH_READY);
    storm_wait(PH_ALLOCATE);
    for (size_t i = 0; i < storm.n; i++) {
        storm.blocks[i] = malloc(STORM_SIZE);
        if (!storm.blocks[i]) {
            atomic_fetch_add(&failures, 1);
            continue;
        }
        st_block_fill(storm.blocks[i], STORM_SIZE);
    }
    storm_set(PH_ALLOCATED);
    /* Not allocating while the others free everything. */
    storm_wait(PH_DRAIN);
    void *one = malloc(STORM_SIZE);
    FAIL_IF(one == NULL);
    free(one);
    storm_set(PH_DRAINED);
    storm_wait(PH_ROUND2);
    for (size_t i = 0; i < storm.n; i++) {
        storm.blocks[i] = malloc(STORM_SIZE);
        FAIL_IF(storm.blocks[i] == NULL);
        if (storm.blocks[i])
            st_block_fill(storm.blocks[i], STORM_SIZE);
    }
    storm_set(PH_ROUND2_DONE);
    storm_wait(PH_EXIT);
    for (size_t i = 0; i < storm.n; i++) {
        if (storm.blocks[i]) {
            FAIL_IF(!st_block_ok(storm.blocks[i], STORM_SIZE));
            free(storm.blocks[i]);
        }
    }
    return NULL;
}

static void *storm_freer(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp;
    void *warm = malloc(STORM_SIZE); /* claim a heap before main's baseline */
    free(warm);
    pthread_mutex_lock(&storm.lock);
    storm.freers_ready++;
    pthread_cond_broadcast(&storm.cond);
    pthread_mutex_unlock(&storm.lock);
    storm_wait(PH_FREE);
    /* interleave: freer k frees every STORM_FREERS-th block */
    for (size_t i = id; i < storm.n; i += STORM_FREERS) {
        if (!storm.blocks[i])
            continue;
        FAIL_IF(!st_block_ok(storm.blocks[i], STORM_SIZE));
        free(storm.blocks[i]);
    }
    /* the batch it was filling goes to the owner (lib/remote.c, "Batches":
     * else it would wait for this thread's next slow path or its exit) */
    sefer_trim();
    pthread_mutex_lock(&storm.lock);
    storm.freers_done++;
    pthread_cond_broadcast(&storm.cond);
    pthread_mutex_unlock(&storm.lock);
    return NULL;
}

START_TEST(test_ring_overflow_storm)
{
    unsigned long long cap = st_knob_ull("rings.capacity");
    size_t n = (size_t)cap * 2 * STORM_PAGE_BLOCKS;
    storm.n = n;
    storm.blocks = st_map(n * sizeof *storm.blocks);

    struct sefer_stats s_start = st_stats();
    pthread_t owner = st_spawn(storm_owner, NULL, 0);
    pthread_t freers[STORM_FREERS];
    for (size_t i = 0; i < STORM_FREERS; i++)
        freers[i] = st_spawn(storm_freer, (void *)(uintptr_t)i, 0);
    /* let the freers claim their heaps too before the baseline */
    storm_wait(PH_READY);
    pthread_mutex_lock(&storm.lock);
    while (storm.freers_ready < STORM_FREERS)
        pthread_cond_wait(&storm.cond, &storm.lock);
    pthread_mutex_unlock(&storm.lock);
    struct sefer_stats s_pre = st_stats();
    storm_set(PH_ALLOCATE);
    storm_wait(PH_ALLOCATED);
    struct sefer_stats s0 = st_stats();
    storm_set(PH_FREE);
    pthread_mutex_lock(&storm.lock);
    while (storm.freers_done < STORM_FREERS)
        pthread_cond_wait(&storm.cond, &storm.lock);
    pthread_mutex_unlock(&storm.lock);
    struct sefer_stats s1 = st_stats();
    storm_set(PH_DRAIN);
    storm_wait(PH_DRAINED);
    struct sefer_stats s2 = st_stats();
    storm_set(PH_ROUND2);
    storm_wait(PH_ROUND2_DONE);
    struct sefer_stats s3 = st_stats();
    storm_set(PH_EXIT);
    pthread_join(owner, NULL);
    for (size_t i = 0; i < STORM_FREERS; i++)
        pthread_join(freers[i], NULL);
    struct sefer_stats s4 = st_stats();

    ck_assert_int_eq(atomic_load(&failures), 0);
    /* the storm itself (stats.frees counts a remote free when its owner
     * takes the block back, so it is checked after the owner allocated) */
    ck_assert_int_eq(ST_DELTA(s0, s_pre, allocs), (int64_t)n);
    ck_assert_int_eq(ST_DELTA(s1, s0, allocs), 0);
    ck_assert_msg(ST_DELTA(s1, s0, frees) <= (int64_t)n,
                  "freeing %zu blocks counted %" PRId64 " frees", n, ST_DELTA(s1, s0, frees));
    ck_assert_msg(ST_DELTA(s1, s0, remote_frees) == (int64_t)n,
                  "%zu cross-thread frees counted %" PRId64 " remote frees", n,
                  ST_DELTA(s1, s0, remote_frees));
    ck_assert_msg(ST_DELTA(s1, s0, ring_overflows) > 0,
                  "%zu remote frees into %zu full pages of an idle owner (ring capacity %llu) never"
                  " overflowed", n, n / STORM_PAGE_BLOCKS, cap);
    /* one notification per full page (the page the owner last allocated
     * from may not be full), every other free onto the page's list; but
     * the first frees of each freer go into its batches (lib/remote.c,
     * "Batches": SF_BATCHES of them, until the idle owner takes them), and
     * a page whose first free went into one is not notified: at most one
     * page per such block (counted once the owner took them, s3) */
    int64_t told = ST_DELTA(s1, s0, ring_pushes) + ST_DELTA(s1, s0, ring_overflows);
    int64_t batched = ST_DELTA(s3, s0, remote_batch_frees);
    ck_assert_msg(batched > 0 && batched < (int64_t)(n / 2), "%" PRId64 " of %zu remote frees in batches",
                  batched, n);
    ck_assert_msg(told + batched >= (int64_t)(n / STORM_PAGE_BLOCKS) - 1 && told <= (int64_t)(n / STORM_PAGE_BLOCKS),
                  "ring pushes %" PRId64 " + overflows %" PRId64 " (+ %" PRId64 " in batches) for %zu full pages",
                  ST_DELTA(s1, s0, ring_pushes), ST_DELTA(s1, s0, ring_overflows), batched, n / STORM_PAGE_BLOCKS);
    /* the owner allocating once more, then a second round: by then every
     * block freed by the others is back and counted, exactly once */
    ck_assert_int_eq(ST_DELTA(s2, s1, allocs), 1);
    ck_assert_int_ge(ST_DELTA(s2, s1, frees), 1);
    ck_assert_int_eq(ST_DELTA(s3, s2, allocs), (int64_t)n);
    /* by now the owner took back every block from its pages' lists and
     * its inbox too */
    ck_assert_msg(told + ST_DELTA(s3, s0, remote_list_frees) + batched == (int64_t)n,
                  "%" PRId64 " through the ring + %" PRId64 " from page lists + %" PRId64 " in batches != %zu remote frees",
                  told, ST_DELTA(s3, s0, remote_list_frees), batched, n);
    ck_assert_msg(ST_DELTA(s3, s0, frees) == (int64_t)n + 1,
                  "%zu remote frees + 1 local: stats.frees grew by %" PRId64
                  " once the owner allocated again",
                  n, ST_DELTA(s3, s0, frees));
    int64_t live = (int64_t)(s3.allocs - s3.frees) - (int64_t)(s_pre.allocs - s_pre.frees);
    ck_assert_msg(live == (int64_t)n,
                  "allocs - frees is %" PRId64 " above the baseline with %zu blocks live", live,
                  n);
    int64_t bytes = ST_DELTA(s3, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -65536 && bytes < 65536,
                  "bytes_in_blocks: %" PRId64 " apart between two rounds of %zu blocks", bytes,
                  n);
    /* every block came back: a second round fits where the first did */
    ck_assert_msg(s3.segments <= s0.segments + 1,
                  "second round of %zu blocks needed %" PRIu64 " segments, first %" PRIu64
                  " (blocks lost?)",
                  n, s3.segments, s0.segments);
    ck_assert_msg(s3.bytes_in_blocks <= s0.bytes_in_blocks + 65536,
                  "bytes_in_blocks after round 2: %" PRIu64 ", after round 1: %" PRIu64,
                  s3.bytes_in_blocks, s0.bytes_in_blocks);
    /* and after everybody exited */
    ck_assert_msg(s4.heaps_live == s_start.heaps_live, "heaps_live %" PRIu64 " -> %" PRIu64,
                  s_start.heaps_live, s4.heaps_live);
    live = (int64_t)(s4.allocs - s4.frees) - (int64_t)(s_start.allocs - s_start.frees);
    ck_assert_msg(live >= -8 && live <= 8, "allocs - frees %" PRId64 " away at the end", live);
    bytes = ST_DELTA(s4, s_start, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks %" PRId64 " away at the end", bytes);
    st_unmap(storm.blocks, n * sizeof *storm.blocks);
}
END_TEST

/* ======================================================================
 * 2b. the owner exits while others are freeing its blocks
 * ==================================================================== */

#define RACE_BLOCKS 20000
#define RACE_ROUNDS 20

static struct {
    unsigned char *p[RACE_BLOCKS];
    size_t n[RACE_BLOCKS];
} *race;
static pthread_barrier_t race_barrier; /* owner + 2 freers */

static void *race_owner(void *argp)
{
    uint64_t r = 1 + (uintptr_t)argp;
    for (size_t i = 0; i < RACE_BLOCKS; i++) {
        uint64_t x = st_rand(&r);
        size_t n = x % 64 == 0 ? 9000 + x % 30000 : 8 + x % 600;
        race->p[i] = malloc(n);
        race->n[i] = n;
        FAIL_IF(race->p[i] == NULL);
        if (race->p[i])
            st_block_fill(race->p[i], n);
    }
    pthread_barrier_wait(&race_barrier);
    /* and exit at once, while the freers are busy */
    return NULL;
}

static void *race_freer(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp;
    pthread_barrier_wait(&race_barrier);
    for (size_t i = id; i < RACE_BLOCKS; i += 2) {
        if (!race->p[i])
            continue;
        FAIL_IF(!st_block_ok(race->p[i], race->n[i]));
        free(race->p[i]);
    }
    return NULL;
}

START_TEST(test_owner_exits_during_remote_frees)
{
    race = st_map(sizeof *race);
    pthread_barrier_init(&race_barrier, NULL, 3);
    /* warm-up round so thread stacks (and glibc's allocations for them)
     * are cached before the baseline */
    struct sefer_stats s0 = {0};
    uint64_t max_segments = 0;
    for (int round = 0; round <= RACE_ROUNDS; round++) {
        pthread_t o = st_spawn(race_owner, (void *)(uintptr_t)round, 0);
        pthread_t f0 = st_spawn(race_freer, (void *)0, 0);
        pthread_t f1 = st_spawn(race_freer, (void *)1, 0);
        pthread_join(o, NULL);
        pthread_join(f0, NULL);
        pthread_join(f1, NULL);
        sefer_trim();
        struct sefer_stats s = st_stats();
        if (round == 0)
            s0 = s;
        if (s.segments > max_segments)
            max_segments = s.segments;
    }
    struct sefer_stats s1 = st_stats();
    pthread_barrier_destroy(&race_barrier);
    ck_assert_int_eq(atomic_load(&failures), 0);
    int64_t live = (int64_t)(s1.allocs - s1.frees) - (int64_t)(s0.allocs - s0.frees);
    ck_assert_msg(live >= -8 && live <= 8,
                  "after %d rounds of %d blocks freed while their owner exited: allocs - frees "
                  "moved by %" PRId64,
                  RACE_ROUNDS, RACE_BLOCKS, live);
    int64_t bytes = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks moved by %" PRId64, bytes);
    ck_assert_msg(max_segments <= s0.segments + 4,
                  "segments grew from %" PRIu64 " to %" PRIu64 " over the rounds", s0.segments,
                  max_segments);
    ck_assert_uint_eq(s1.heaps_live, s0.heaps_live);
    ck_assert_uint_le(s1.heaps_abandoned, s0.heaps_abandoned);
    st_unmap(race, sizeof *race);
}
END_TEST

/* ======================================================================
 * 2c. abandoned heaps are visible and go away
 * ==================================================================== */

static void *leave_blocks(void *argp)
{
    void **out = argp;
    for (int i = 0; i < 10; i++) {
        out[i] = malloc(100 + (size_t)i * 1000);
        FAIL_IF(out[i] == NULL);
    }
    return NULL;
}

START_TEST(test_abandoned_heap_accounting)
{
    void *blocks[10];
    sefer_trim();
    struct sefer_stats s0 = st_stats();
    pthread_t t = st_spawn(leave_blocks, blocks, 0);
    pthread_join(t, NULL);
    struct sefer_stats s1 = st_stats();
    for (int i = 0; i < 10; i++)
        free(blocks[i]);
    sefer_trim();
    struct sefer_stats s2 = st_stats();
    ck_assert_int_eq(atomic_load(&failures), 0);
    ck_assert_uint_eq(s1.heaps_live, s0.heaps_live);
    ck_assert_msg(s1.heaps_abandoned == s0.heaps_abandoned + 1,
                  "a thread exited with 10 live blocks: heaps_abandoned %" PRIu64 " -> %" PRIu64,
                  s0.heaps_abandoned, s1.heaps_abandoned);
    ck_assert_msg(s2.heaps_abandoned == s0.heaps_abandoned,
                  "its blocks freed and trimmed: heaps_abandoned still %" PRIu64 " (was %" PRIu64
                  ")",
                  s2.heaps_abandoned, s0.heaps_abandoned);
}
END_TEST

/* A thread with no heap whose first free is a block of an exited thread's
 * heap adopts that heap (lib/heap.c, sf_heap_adopt_for_free): the free is
 * its own, not a remote one.  Left again (with a block the adopter
 * allocated in place of the one it freed), the heap stays on the ownerless
 * stack (its entry went stale while the free-adopter had it) and the next
 * thread that allocates takes it from there. */
struct adopt_case {
    void **blocks;
    struct sefer_stats before, after;
    void *again;
};

static void *first_free_adopts(void *argp)
{
    struct adopt_case *c = argp;
    c->before = st_stats();
    free(c->blocks[0]);
    c->after = st_stats();
    c->again = malloc(100);
    c->blocks[0] = c->again;
    return NULL;
}

static void *malloc_then_own_free(void *argp)
{
    struct adopt_case *c = argp;
    void *p = malloc(64);
    st_escape(p);
    c->before = st_stats();
    free(c->blocks[1]); /* (its heap's block: an owner free if it adopted the heap) */
    c->after = st_stats();
    free(p);
    return NULL;
}

START_TEST(test_first_free_adopts_exited_heap)
{
    void *blocks[10];
    sefer_trim();
    pthread_join(st_spawn(leave_blocks, blocks, 0), NULL);
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_ge(s0.heaps_abandoned, 1);

    struct adopt_case c = {.blocks = blocks};
    pthread_join(st_spawn(first_free_adopts, &c, 0), NULL);
    ck_assert_int_eq(atomic_load(&failures), 0);
    ck_assert_uint_eq(c.before.heaps_live, s0.heaps_live); /* (no heap before its free) */
    ck_assert_msg(c.after.heaps_abandoned == s0.heaps_abandoned - 1 && c.after.heaps_live == s0.heaps_live + 1,
                  "the first free of an exited thread's block: heaps_abandoned %" PRIu64 " -> %" PRIu64
                  ", heaps_live %" PRIu64 " -> %" PRIu64 " (the heap was not adopted)",
                  s0.heaps_abandoned, c.after.heaps_abandoned, s0.heaps_live, c.after.heaps_live);
    ck_assert_int_eq(ST_DELTA(c.after, c.before, remote_frees), 0);
    ck_assert_ptr_nonnull(c.again);
    struct sefer_stats s1 = st_stats();
    ck_assert_uint_eq(s1.heaps_abandoned, s0.heaps_abandoned); /* left again, with its blocks */

    /* the stale entry serves: a thread that allocates first takes the heap */
    struct adopt_case d = {.blocks = blocks};
    pthread_join(st_spawn(malloc_then_own_free, &d, 0), NULL);
    ck_assert_int_eq(ST_DELTA(d.after, d.before, remote_frees), 0);
    ck_assert_uint_eq(d.after.heaps_abandoned, s0.heaps_abandoned - 1);
    for (int i = 2; i < 10; i++)
        free(blocks[i]);
    free(blocks[0]);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

/* A thread whose first free is a block of a live thread's heap adopts
 * nothing: that free and its later ones are remote frees. */
static void *free_two_of_live(void *argp)
{
    struct adopt_case *c = argp;
    c->before = st_stats();
    free(c->blocks[0]);
    free(c->blocks[1]);
    c->after = st_stats();
    return NULL;
}

START_TEST(test_first_free_of_live_heap_adopts_nothing)
{
    void *blocks[2] = {malloc(100), malloc(200)};
    struct adopt_case c = {.blocks = blocks};
    pthread_join(st_spawn(free_two_of_live, &c, 0), NULL);
    ck_assert_int_eq(ST_DELTA(c.after, c.before, remote_frees), 2);
    ck_assert_uint_eq(c.after.heaps_live, c.before.heaps_live);
}
END_TEST

/* Blocks another thread freed count as free in bytes_in_blocks at once,
 * although their owner takes them back only when it needs them (its own
 * lists run dry): they wait on their page's remote list, whose count the
 * statistics subtract.  Before, a workload whose blocks other threads
 * free showed up to three times its live bytes (the heap profile's
 * estimate looked 40 % short against it: docs/design.md, "Heap
 * profiling"). */
#define REMOTE_BLOCKS 32 /* of 1 KiB: half a page, which stays off the full list */

/* n blocks of `size` bytes, each filled with `byte`. */
static void malloc_filled(void **v, int n, size_t size, int byte)
{
    for (int i = 0; i < n; i++) {
        v[i] = malloc(size);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], byte, size);
    }
}

struct block_list {
    void **v;
    int n;
};

static void *free_list(void *argp)
{
    struct block_list *l = argp;
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    return NULL;
}

/* Frees v[0..n) from a thread of its own, and waits for it. */
static void free_in_another_thread(void **v, int n)
{
    struct block_list l = {v, n};
    pthread_join(st_spawn(free_list, &l, 0), NULL);
}

START_TEST(test_remote_frees_leave_bytes_in_blocks)
{
    void *v[REMOTE_BLOCKS];
    struct sefer_stats s0 = st_stats();
    malloc_filled(v, REMOTE_BLOCKS, 1024, 1);
    struct sefer_stats s1 = st_stats();
    free_in_another_thread(v, REMOTE_BLOCKS);
    struct sefer_stats s2 = st_stats(); /* (this thread has not allocated since) */
    printf("32 KiB freed by another thread: bytes_in_blocks %" PRIu64 " -> %" PRIu64 " -> %" PRIu64 "\n",
           s0.bytes_in_blocks, s1.bytes_in_blocks, s2.bytes_in_blocks);
    ck_assert_uint_ge(s1.bytes_in_blocks, s0.bytes_in_blocks + REMOTE_BLOCKS * 1024);
    /* (the other thread's own allocations, a few hundred bytes, may stay
     * in the heap it leaves) */
    ck_assert_msg(s2.bytes_in_blocks <= s0.bytes_in_blocks + 1024,
                  "after the other thread's frees bytes_in_blocks is %" PRIu64 ", %" PRIu64 " before the mallocs",
                  s2.bytes_in_blocks, s0.bytes_in_blocks);
    ck_assert_uint_eq(s2.remote_list_frees, s1.remote_list_frees); /* (not taken back yet) */
    /* ... and they show as waiting for their owner */
    ck_assert_msg(s2.bytes_remote_pending >= s1.bytes_remote_pending + REMOTE_BLOCKS * 1024,
                  "bytes_remote_pending %" PRIu64 " -> %" PRIu64, s1.bytes_remote_pending, s2.bytes_remote_pending);
}
END_TEST

/* A thread with a heap of its own gathers the blocks of others' it frees
 * into batches (lib/remote.c, "Batches"), without touching them; its exit
 * sends the one it was filling, and the owner takes them all back as it
 * next collects: every one counted once, in remote_batch_frees, none on
 * the page lists or the ring, and bytes_in_blocks back where it was. */
#define BATCH_TEST_BLOCKS 100 /* of 64 B: more than one batch (30), fewer than all (16 x 30) */

static void *free_list_with_heap(void *argp)
{
    /* more allocations than threads.heap_after in a second: a heap of its
     * own, not the shared one (which gathers no batches) */
    for (int i = 0; i < 1000; i++)
    {
        void *q = malloc(16);
        st_escape(q);
        free(q);
    }
    return free_list(argp);
}

START_TEST(test_remote_frees_in_batches)
{
    void *v[BATCH_TEST_BLOCKS];
    malloc_filled(v, BATCH_TEST_BLOCKS, 64, 2);
    sefer_trim(); /* (nothing of this thread's waiting before the baseline) */
    struct sefer_stats s0 = st_stats();
    struct block_list l = {v, BATCH_TEST_BLOCKS};
    pthread_join(st_spawn(free_list_with_heap, &l, 0), NULL);
    struct sefer_stats s1 = st_stats();
    /* (not taken back yet: still counted in blocks) */
    ck_assert_uint_eq(s1.remote_batch_frees, s0.remote_batch_frees);
    ck_assert_uint_ge(s1.bytes_in_blocks, s0.bytes_in_blocks);
    sefer_trim(); /* the owner collects: its inbox too */
    struct sefer_stats s2 = st_stats();
    ck_assert_int_eq(ST_DELTA(s2, s0, remote_frees), BATCH_TEST_BLOCKS);
    ck_assert_int_eq(ST_DELTA(s2, s0, remote_batch_frees), BATCH_TEST_BLOCKS);
    ck_assert_int_eq(ST_DELTA(s2, s0, remote_list_frees), 0);
    ck_assert_int_eq(ST_DELTA(s2, s0, ring_pushes), 0);
    ck_assert_msg(s2.bytes_in_blocks <= s0.bytes_in_blocks - BATCH_TEST_BLOCKS * 64 + 1024,
                  "bytes_in_blocks %" PRIu64 " -> %" PRIu64 " after %d blocks of 64 B came back",
                  s0.bytes_in_blocks, s2.bytes_in_blocks, BATCH_TEST_BLOCKS);
}
END_TEST

/* Pages another thread emptied serve this heap before a new segment is
 * mapped: 8 MiB of 1 KiB blocks, all freed by another thread (they wait on
 * their pages' remote lists, this thread never running dry there), then
 * 8 MiB of 2 KiB blocks.  Before, the 2 KiB blocks took new segments
 * beside 8 MiB of pages that only needed to be looked at. */
#define REFILL_BLOCKS 8192

START_TEST(test_remote_emptied_pages_serve_growth)
{
    static void *v[REFILL_BLOCKS], *w[REFILL_BLOCKS / 2];
    malloc_filled(v, REFILL_BLOCKS, 1024, 2);
    free_in_another_thread(v, REFILL_BLOCKS);
    struct sefer_stats s1 = st_stats();
    malloc_filled(w, REFILL_BLOCKS / 2, 2048, 3);
    struct sefer_stats s2 = st_stats();
    printf("8 MiB of 2 KiB blocks after 8 MiB of 1 KiB blocks freed by another thread: segments %" PRIu64
           " -> %" PRIu64 "\n", s1.segments, s2.segments);
    for (int i = 0; i < REFILL_BLOCKS / 2; i++)
        free(w[i]);
    ck_assert_msg(s2.segments <= s1.segments, "segments %" PRIu64 " -> %" PRIu64, s1.segments, s2.segments);
}
END_TEST

/* ======================================================================
 * 3. thousands of short-lived threads
 * ==================================================================== */

#define CHURN_THREADS 3000
#define CHURN_WAVE 4
#define CHURN_BLOCKS 6
#define CHURN_DELAY 3 /* waves between a thread's exit and main freeing its blocks */

struct churn_slot {
    unsigned char *p[CHURN_BLOCKS];
    size_t n[CHURN_BLOCKS];
};
static struct churn_slot *churn;

static void *churn_thread(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp;
    uint64_t r = 0x9E3779B9ULL + id * 7919;
    /* some garbage that is freed locally, then blocks left behind */
    for (int i = 0; i < 20; i++) {
        void *g = malloc(1 + st_rand(&r) % 3000);
        FAIL_IF(g == NULL);
        free(g);
    }
    for (int k = 0; k < CHURN_BLOCKS; k++) {
        uint64_t x = st_rand(&r);
        size_t n = k == 0 ? 10000 + x % 50000 : 16 + x % 2000;
        unsigned char *p = malloc(n);
        FAIL_IF(p == NULL);
        if (p)
            st_block_fill(p, n);
        churn[id].p[k] = p;
        churn[id].n[k] = n;
    }
    return NULL;
}

static void churn_free(size_t id)
{
    for (int k = 0; k < CHURN_BLOCKS; k++) {
        if (!churn[id].p[k])
            continue;
        FAIL_IF(!st_block_ok(churn[id].p[k], churn[id].n[k]));
        free(churn[id].p[k]);
        churn[id].p[k] = NULL;
    }
}

/* Segments held outside the large cache: the cache's own come and go with
 * large_cache.ttl (how fast the waves ran decides what it still holds at
 * a given wave) and are bounded by its budget; a leak across threads shows
 * in the rest. */
static uint64_t held_segments(const struct sefer_stats *s)
{
    return s->segments - s->large_cache_bytes / SEFER_SEGMENT_SIZE;
}

START_TEST(test_short_lived_threads)
{
    /* No page waits for a decommit deadline, so what a heap holds is what
     * its live blocks need, whatever the clock did: under the default
     * policy the segments held halfway depended on how many deadlines had
     * passed, which a busy machine decides (5 halfway and 13 at the end in
     * one run, 12 and 14 in the next).  (This case runs in a child of its
     * own: the knob goes with it.) */
    ST_KNOB_SET("decommit.policy", "never");
    churn = st_map(CHURN_THREADS * sizeof *churn);
    struct sefer_stats s0 = st_stats();
    uint64_t max_segments = s0.segments;
    uint64_t mid_segments = 0;
    for (size_t w = 0; w < CHURN_THREADS / CHURN_WAVE; w++) {
        pthread_t t[CHURN_WAVE];
        for (size_t i = 0; i < CHURN_WAVE; i++)
            t[i] = st_spawn(churn_thread, (void *)(uintptr_t)(w * CHURN_WAVE + i), 64 * 1024);
        for (size_t i = 0; i < CHURN_WAVE; i++)
            pthread_join(t[i], NULL);
        if (w >= CHURN_DELAY)
            for (size_t i = 0; i < CHURN_WAVE; i++)
                churn_free((w - CHURN_DELAY) * CHURN_WAVE + i);
        struct sefer_stats s = st_stats();
        if (s.segments > max_segments)
            max_segments = s.segments;
        /* (the most of the first half: one wave's figure moves with how
         * the waves' threads happened to overlap) */
        if (w <= CHURN_THREADS / CHURN_WAVE / 2 && held_segments(&s) > mid_segments)
            mid_segments = held_segments(&s);
    }
    struct sefer_stats s1 = st_stats();
    printf("short-lived threads: segments %" PRIu64 " at the start, %" PRIu64 " at most; outside the large "
           "cache %" PRIu64 " at most in the first half, %" PRIu64 " at the end\n",
           s0.segments, max_segments, mid_segments, held_segments(&s1));
    fflush(stdout);
    for (size_t id = 0; id < CHURN_THREADS; id++)
        churn_free(id);
    sefer_trim(); /* collects frees still waiting in exited threads' rings */
    struct sefer_stats s2 = st_stats();

    ck_assert_int_eq(atomic_load(&failures), 0);
    ck_assert_msg(max_segments <= s0.segments + 16,
                  "segments went from %" PRIu64 " to %" PRIu64 " over %d short-lived threads",
                  s0.segments, max_segments, CHURN_THREADS);
    /* At any time the blocks of at most (CHURN_DELAY + 1) waves of threads
     * are live, in as many heaps, each needing a small and a medium segment
     * at most: that, not the first half's figure, bounds the end (the first
     * half's maximum depends on how the waves overlapped: 5 there and 13 at
     * the end in one run on a busy machine).  A leak across threads would
     * be a segment per thread or per heap: thousands here. */
    uint64_t bound = 2 * (CHURN_DELAY + 1) * CHURN_WAVE + 8;
    ck_assert_msg(held_segments(&s1) <= bound,
                  "segments outside the large cache at the end: %" PRIu64 " (%" PRIu64
                  " at most in the first half), more than the %" PRIu64 " the live blocks can need",
                  held_segments(&s1), mid_segments, bound);
    ck_assert_msg(s2.heaps_live == s0.heaps_live, "heaps_live %" PRIu64 " -> %" PRIu64,
                  s0.heaps_live, s2.heaps_live);
    int64_t live = (int64_t)(s2.allocs - s2.frees) - (int64_t)(s0.allocs - s0.frees);
    ck_assert_msg(live >= -16 && live <= 16, "allocs - frees moved by %" PRId64, live);
    int64_t bytes = ST_DELTA(s2, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks moved by %" PRId64, bytes);

    /* Main can still allocate and the memory is reused. */
    void *p = malloc(1000);
    ck_assert_ptr_nonnull(p);
    free(p);
    st_unmap(churn, CHURN_THREADS * sizeof *churn);
}
END_TEST

/* ======================================================================
 * 4. more live threads than registry slots
 * ==================================================================== */

#define MANY_THREADS 300
#define MANY_BLOCKS 100

static struct {
    unsigned char *p[MANY_BLOCKS];
    size_t n[MANY_BLOCKS];
} *many;
static pthread_barrier_t many_barrier;

static void *many_thread(void *argp)
{
    size_t id = (size_t)(uintptr_t)argp;
    uint64_t r = 0xABCDEF1ULL + id * 104729;
    for (int k = 0; k < MANY_BLOCKS; k++) {
        uint64_t x = st_rand(&r);
        size_t n = x % 32 == 0 ? 9000 + x % 40000 : 8 + x % 1500;
        many[id].p[k] = malloc(n);
        many[id].n[k] = n;
        FAIL_IF(many[id].p[k] == NULL);
        if (many[id].p[k])
            st_block_fill(many[id].p[k], n);
    }
    pthread_barrier_wait(&many_barrier); /* all 300 alive with their blocks */
    for (int k = 0; k < MANY_BLOCKS; k++)
        FAIL_IF(many[id].p[k] && !st_block_ok(many[id].p[k], many[id].n[k]));
    pthread_barrier_wait(&many_barrier);
    /* free the next thread's blocks (cross-thread) */
    size_t other = (id + 1) % MANY_THREADS;
    for (int k = 0; k < MANY_BLOCKS; k++) {
        if (!many[other].p[k])
            continue;
        FAIL_IF(!st_block_ok(many[other].p[k], many[other].n[k]));
        free(many[other].p[k]);
    }
    pthread_barrier_wait(&many_barrier);
    /* and some local churn */
    for (int k = 0; k < 200; k++) {
        size_t n = 1 + st_rand(&r) % 2000;
        unsigned char *p = malloc(n);
        FAIL_IF(p == NULL);
        if (!p)
            continue;
        st_block_fill(p, n);
        FAIL_IF(!st_block_ok(p, n));
        free(p);
    }
    return NULL;
}

START_TEST(test_more_threads_than_slots)
{
    many = st_map(MANY_THREADS * sizeof *many);
    pthread_barrier_init(&many_barrier, NULL, MANY_THREADS);
    struct sefer_stats s0 = st_stats();
    pthread_t *t = st_map(MANY_THREADS * sizeof *t);
    for (size_t i = 0; i < MANY_THREADS; i++)
        t[i] = st_spawn(many_thread, (void *)(uintptr_t)i, 128 * 1024);
    for (size_t i = 0; i < MANY_THREADS; i++)
        pthread_join(t[i], NULL);
    sefer_trim();
    struct sefer_stats s1 = st_stats();
    pthread_barrier_destroy(&many_barrier);

    ck_assert_int_eq(atomic_load(&failures), 0);
    ck_assert_msg(s1.heaps_live == s0.heaps_live, "heaps_live %" PRIu64 " -> %" PRIu64,
                  s0.heaps_live, s1.heaps_live);
    /* glibc keeps one allocation (the DTV) per cached thread stack: up to
     * one per thread the first time round */
    int64_t live = (int64_t)(s1.allocs - s1.frees) - (int64_t)(s0.allocs - s0.frees);
    ck_assert_msg(live >= -16 && live <= MANY_THREADS + 16, "allocs - frees moved by %" PRId64,
                  live);
    int64_t bytes = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(bytes > -(int64_t)ST_MIB && bytes < (int64_t)ST_MIB,
                  "bytes_in_blocks moved by %" PRId64, bytes);
    /* again, to see the slots are really free */
    pthread_barrier_init(&many_barrier, NULL, MANY_THREADS);
    for (size_t i = 0; i < MANY_THREADS; i++)
        t[i] = st_spawn(many_thread, (void *)(uintptr_t)i, 128 * 1024);
    for (size_t i = 0; i < MANY_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&many_barrier);
    sefer_trim();
    struct sefer_stats s2 = st_stats();
    ck_assert_int_eq(atomic_load(&failures), 0);
    ck_assert_uint_eq(s2.heaps_live, s0.heaps_live);
    /* the second time the stacks (and their DTVs) are reused: exact */
    live = (int64_t)(s2.allocs - s2.frees) - (int64_t)(s1.allocs - s1.frees);
    ck_assert_msg(live >= -4 && live <= 4, "second round: allocs - frees moved by %" PRId64,
                  live);
    ck_assert_msg(s2.segments <= s1.segments + 8, "segments %" PRIu64 " -> %" PRIu64,
                  s1.segments, s2.segments);
    st_unmap(t, MANY_THREADS * sizeof *t);
    st_unmap(many, MANY_THREADS * sizeof *many);
}
END_TEST

/* ======================================================================
 * 5. allocation from thread destructors after sefer's teardown
 * ==================================================================== */

#define DTOR_THREADS 64
#define DTOR_ROUNDS 3

static pthread_key_t dtor_key;
struct dtor_state {
    size_t id;
    int round;
    unsigned char *kept[DTOR_ROUNDS + 1];
    size_t kept_n[DTOR_ROUNDS + 1];
};
static struct dtor_state *dtor_states; /* from mmap */

static void dtor(void *v)
{
    struct dtor_state *s = v;
    int r = s->round++;
    /* malloc / calloc / realloc / free, after sefer's own key destructor
     * may already have run */
    size_t n = 100 + s->id * 3 + (size_t)r * 1000;
    unsigned char *p = malloc(n);
    FAIL_IF(p == NULL);
    if (p)
        st_block_fill(p, n);
    s->kept[r] = p;
    s->kept_n[r] = n;
    unsigned char *z = calloc(50, 20);
    FAIL_IF(z == NULL);
    if (z) {
        for (int i = 0; i < 1000; i++)
            FAIL_IF(z[i] != 0);
        memset(z, 0x77, 1000);
        z = realloc(z, 20000);
        FAIL_IF(z == NULL);
        if (z) {
            for (int i = 0; i < 1000; i++)
                FAIL_IF(z[i] != 0x77);
            free(z);
        }
    }
    void *big = malloc(3 * ST_MIB);
    FAIL_IF(big == NULL);
    if (big)
        memset(big, 1, 4096);
    free(big);
    if (s->round < DTOR_ROUNDS)
        pthread_setspecific(dtor_key, s); /* run again, in a later pass */
}

static void *dtor_thread(void *argp)
{
    struct dtor_state *s = argp;
    void *p = malloc(64);
    FAIL_IF(p == NULL);
    free(p);
    pthread_setspecific(dtor_key, s);
    return NULL;
}

START_TEST(test_thread_destructor_allocates)
{
    ck_assert_int_eq(pthread_key_create(&dtor_key, dtor), 0);
    dtor_states = st_map(DTOR_THREADS * sizeof *dtor_states);
    struct sefer_stats s0 = st_stats();
    for (size_t base = 0; base < DTOR_THREADS; base += 8) {
        pthread_t t[8];
        for (size_t i = 0; i < 8; i++) {
            dtor_states[base + i].id = base + i;
            t[i] = st_spawn(dtor_thread, &dtor_states[base + i], 0);
        }
        for (size_t i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
    }
    struct sefer_stats s1 = st_stats();
    ck_assert_int_eq(atomic_load(&failures), 0);
    for (size_t i = 0; i < DTOR_THREADS; i++) {
        ck_assert_int_eq(dtor_states[i].round, DTOR_ROUNDS);
        for (int r = 0; r < DTOR_ROUNDS; r++) {
            unsigned char *p = dtor_states[i].kept[r];
            ck_assert_ptr_nonnull(p);
            ck_assert_msg(st_block_ok(p, dtor_states[i].kept_n[r]),
                          "block from thread %zu's destructor (round %d) damaged", i, r);
            free(p);
        }
    }
    ck_assert_msg(s1.heaps_live == s0.heaps_live,
                  "heaps_live %" PRIu64 " -> %" PRIu64 " after %d threads allocated in destructors",
                  s0.heaps_live, s1.heaps_live, DTOR_THREADS);
    sefer_trim();
    struct sefer_stats s2 = st_stats();
    int64_t live = (int64_t)(s2.allocs - s2.frees) - (int64_t)(s0.allocs - s0.frees);
    ck_assert_msg(live >= -16 && live <= 16, "allocs - frees moved by %" PRId64, live);
    pthread_key_delete(dtor_key);
    st_unmap(dtor_states, DTOR_THREADS * sizeof *dtor_states);
}
END_TEST

static void exit_handler(void)
{
    void *p = malloc(1000);
    if (!p)
        _exit(3);
    memset(p, 1, 1000);
    void *q = realloc(p, 100000);
    if (!q)
        _exit(4);
    free(q);
    void *c = calloc(10, 10);
    if (!c)
        _exit(5);
    free(c);
}

static void child_exit_allocates(void *unused)
{
    (void)unused;
    atexit(exit_handler);
    void *p = malloc(10);
    free(p);
    exit(0); /* runs exit_handler, then libc's own teardown */
}

START_TEST(test_atexit_allocates)
{
    static char err[4096];
    int st = st_run_child(child_exit_allocates, NULL, err, sizeof err, 20);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %s: %s", st_describe_status(st),
                  err);
}
END_TEST

/* ======================================================================
 * 6. fork from a busy multi-threaded process
 * ==================================================================== */

#define BUSY_THREADS 3
static atomic_int busy_stop;
static _Atomic(void *) exchange[64];

static void *busy_thread(void *argp)
{
    uint64_t r = 0x51ED2701ULL * ((uintptr_t)argp + 1);
    void *local[32] = {0};
    while (!atomic_load_explicit(&busy_stop, memory_order_relaxed)) {
        uint64_t x = st_rand(&r);
        size_t n = stress_size(x);
        unsigned slot = (unsigned)((x >> 40) % 32);
        if (local[slot]) {
            if (x & (1u << 20)) {
                void *q = realloc(local[slot], 1 + (x >> 22) % 20000);
                FAIL_IF(q == NULL);
                local[slot] = q;
            } else {
                free(local[slot]);
                local[slot] = NULL;
            }
        } else {
            local[slot] = malloc(n);
            FAIL_IF(local[slot] == NULL);
            if (local[slot])
                memset(local[slot], 0x3A, n < 512 ? n : 512);
        }
        /* swap a block through the exchange so frees cross threads */
        void *mine = malloc(48);
        void *theirs = atomic_exchange(&exchange[(x >> 50) % 64], mine);
        free(theirs);
    }
    for (int i = 0; i < 32; i++)
        free(local[i]);
    return NULL;
}

static void *child_thread(void *unused)
{
    (void)unused;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc((size_t)i * 7 + 1);
        if (!p)
            return (void *)1;
        free(p);
    }
    return NULL;
}

static void *inherited;

static void child_after_fork(void *argp)
{
    int with_thread = (int)(intptr_t)argp;
    /* alarm() was set by st_run_child: a deadlock becomes SIGALRM. */
    if (sefer_check() != 0) /* (what it found is on stderr) */
        _exit(17);
    unsigned char *p = malloc(100);
    if (!p)
        _exit(10);
    memset(p, 1, 100);
    unsigned char *c = calloc(100, 10);
    if (!c)
        _exit(11);
    for (int i = 0; i < 1000; i++)
        if (c[i])
            _exit(12);
    p = realloc(p, 10000);
    if (!p || p[99] != 1)
        _exit(13);
    free(c);
    free(p);
    free(inherited); /* owned by the parent's main heap */
    void *big = malloc(6 * ST_MIB);
    if (!big)
        _exit(14);
    memset(big, 2, 6 * ST_MIB);
    free(big);
    for (int i = 0; i < 64; i++) /* blocks other threads owned */
        free(atomic_exchange(&exchange[i], NULL));
    if (with_thread) {
        pthread_t t;
        if (pthread_create(&t, NULL, child_thread, NULL) != 0)
            _exit(15);
        void *ret = NULL;
        pthread_join(t, &ret);
        if (ret)
            _exit(16);
    }
    if (sefer_check() != 0)
        _exit(18);
    _exit(0);
}

/* 2 MiB of 1 KiB blocks, allocated and freed: pages that wait. */
static void burst_of_pages(void)
{
    static void *v[2048];
    for (int i = 0; i < 2048; i++) {
        v[i] = malloc(1024);
        FAIL_IF(v[i] == NULL);
        if (v[i])
            memset(v[i], 0x4d, 1024);
    }
    for (int i = 0; i < 2048; i++)
        free(v[i]);
}

static void fork_while_busy(bool purging)
{
    atomic_store(&busy_stop, 0);
    pthread_t t[BUSY_THREADS];
    for (uintptr_t i = 0; i < BUSY_THREADS; i++)
        t[i] = st_spawn(busy_thread, (void *)i, 0);
    static char err[4096], first_err[4096];
    int bad = 0, bad_status = 0, bad_at = -1;
    for (int i = 0; i < 20; i++) {
        inherited = malloc(200 + (size_t)i);
        ck_assert_ptr_nonnull(inherited);
        usleep(2000);
        if (purging) { /* the last burst's pages are past their delay: this one's purge them */
            usleep(10000);
            burst_of_pages();
        }
        int st = st_run_child(child_after_fork, (void *)(intptr_t)(i % 4 == 0), err, sizeof err,
                              10);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            if (!bad) {
                bad_status = st, bad_at = i;
                snprintf(first_err, sizeof first_err, "%s", err);
            }
            bad++;
        }
        free(inherited);
    }
    atomic_store(&busy_stop, 1);
    for (int i = 0; i < BUSY_THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 64; i++)
        free(atomic_exchange(&exchange[i], NULL));
    ck_assert_msg(bad == 0, "%d of 20 forked children failed; first (fork %d): %s (SIGALRM = "
                  "deadlock; exit 10-16 = an allocation failed in the child, 17-18 = sefer_check "
                  "found a problem in it); its stderr: %s",
                  bad, bad_at, st_describe_status(bad_status), first_err);
    ck_assert_int_eq(atomic_load(&failures), 0);
}

START_TEST(test_fork_while_busy)
{
    fork_while_busy(false);
}
END_TEST

/* The same while every page that empties is purged at once from whichever
 * heap holds it (threads.cache_max 0, a 1 ms delay): forks land in the
 * middle of purges of other threads' heaps, which fork must not cut in
 * half (sf_heaps_fork_prepare), and the children's own page operations
 * purge the heaps the parent's threads left them. */
START_TEST(test_fork_while_purging)
{
    ST_KNOB_SET("threads.cache_max", "0");
    ST_KNOB_SET("decommit.delay", "1ms");
    struct sefer_stats s0 = st_stats();
    fork_while_busy(true);
    struct sefer_stats s1 = st_stats();
    ck_assert_int_gt(ST_DELTA(s1, s0, cache_max_purges), 0);
}
END_TEST

/* ====================================================================== */

/* ======================================================================
 * Threads that allocate rarely (threads.heap_after, docs/design.md)
 * ==================================================================== */

#define RARE_THREADS 64
#define RARE_BLOCKS 10 /* below threads.heap_after = 16: none gets a heap */
static pthread_barrier_t rare_parked, rare_go;
static unsigned char *rare_p[RARE_THREADS][RARE_BLOCKS];
static atomic_int rare_bad;

static size_t rare_size(int j)
{
    return (size_t)24 << (j / 2) | (size_t)(j & 1) * 8; /* 24 B to 400 B, ten classes */
}

static void *rare_thread(void *arg)
{
    int t = (int)(uintptr_t)arg;
    for (int j = 0; j < RARE_BLOCKS; j++) {
        rare_p[t][j] = malloc(rare_size(j));
        st_block_fill(rare_p[t][j], rare_size(j));
    }
    pthread_barrier_wait(&rare_parked);
    pthread_barrier_wait(&rare_go);
    for (int j = 0; j < RARE_BLOCKS; j += 2) { /* the odd ones the main thread freed */
        if (!st_block_ok(rare_p[t][j], rare_size(j)))
            atomic_fetch_add(&rare_bad, 1);
        free(rare_p[t][j]);
    }
    return NULL;
}

/* RARE_THREADS threads make RARE_BLOCKS allocations each (ten sizes) and park.
 * Returns the memory committed meanwhile; checks heaps_live against
 * `own_heaps` (whether each thread is expected to have one) and that every
 * block survives frees by the main thread and by its own thread. */
static int64_t run_rare_threads(bool own_heaps)
{
    pthread_t t[RARE_THREADS];
    sefer_trim();
    struct sefer_stats s0 = st_stats();
    pthread_barrier_init(&rare_parked, NULL, RARE_THREADS + 1);
    pthread_barrier_init(&rare_go, NULL, RARE_THREADS + 1);
    for (int i = 0; i < RARE_THREADS; i++)
        t[i] = st_spawn(rare_thread, (void *)(uintptr_t)i, 0);
    pthread_barrier_wait(&rare_parked);
    struct sefer_stats s1 = st_stats();
    ck_assert_int_eq(sefer_check(), 0);
    if (own_heaps)
        ck_assert_uint_ge(s1.heaps_live, s0.heaps_live + RARE_THREADS);
    else {
        ck_assert_msg(s1.heaps_live == s0.heaps_live, "heaps_live %" PRIu64 " -> %" PRIu64 " for threads that allocated %d blocks each",
                      s0.heaps_live, s1.heaps_live, RARE_BLOCKS);
        ck_assert_int_ge(ST_DELTA(s1, s0, fallback_allocs), RARE_THREADS * RARE_BLOCKS);
    }
    for (int i = 0; i < RARE_THREADS; i++)
        for (int j = 1; j < RARE_BLOCKS; j += 2) {
            ck_assert(st_block_ok(rare_p[i][j], rare_size(j)));
            free(rare_p[i][j]); /* another thread's block, of the shared heap or of its own */
        }
    pthread_barrier_wait(&rare_go);
    for (int i = 0; i < RARE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&rare_parked);
    pthread_barrier_destroy(&rare_go);
    ck_assert_int_eq(atomic_load(&rare_bad), 0);
    ck_assert_int_eq(sefer_check(), 0);
    struct sefer_stats s2 = st_stats();
    ck_assert_msg(ST_DELTA(s2, s0, bytes_in_blocks) <= 0, "own_heaps %d: bytes_in_blocks %" PRIu64 " -> %" PRIu64 " after every block was freed", own_heaps, s0.bytes_in_blocks, s2.bytes_in_blocks);
    return ST_DELTA(s1, s0, bytes_committed);
}

/* Threads that made a few allocations share pages: no heap each, and a
 * fraction of the memory a heap each takes (the control, in the same test:
 * threads.heap_after = 0 gives each of them a heap and a page per size). */
static void *rare_nothing(void *unused) { return unused; }

START_TEST(test_rare_threads_share_a_heap)
{
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "16"), 0);
    /* glibc keeps joined threads' stacks for reuse, with the TLS vectors it
     * allocated for them: made here, before the counts are read */
    pthread_t t[RARE_THREADS];
    for (int i = 0; i < RARE_THREADS; i++)
        t[i] = st_spawn(rare_nothing, NULL, 0);
    for (int i = 0; i < RARE_THREADS; i++)
        pthread_join(t[i], NULL);
    int64_t shared = run_rare_threads(false);
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "0"), 0);
    int64_t own = run_rare_threads(true);
    printf("rare threads: %d threads x %d sizes committed %" PRId64 " KiB on the shared heap, %" PRId64
           " KiB with a heap each\n",
           RARE_THREADS, RARE_BLOCKS, shared >> 10, own >> 10);
    ck_assert_msg(shared * 4 < own, "shared %" PRId64 " KiB, a heap each %" PRId64 " KiB", shared >> 10, own >> 10);
}
END_TEST

static atomic_int rare_stage;

/* In a thread of stats_while_parked: waits until the statistics are read. */
static void park_until_read(void)
{
    atomic_store(&rare_stage, 1);
    while (atomic_load(&rare_stage) != 2)
        sched_yield();
}

/* Runs fn in a thread and returns the statistics read while it waits in
 * park_until_read. */
static struct sefer_stats stats_while_parked(void *(*fn)(void *))
{
    atomic_store(&rare_stage, 0);
    pthread_t t = st_spawn(fn, NULL, 0);
    while (atomic_load(&rare_stage) != 1)
        sched_yield();
    struct sefer_stats s = st_stats();
    atomic_store(&rare_stage, 2);
    pthread_join(t, NULL);
    return s;
}

static void *rare_busy_thread(void *unused)
{
    (void)unused;
    /* far more than threads.heap_after allocations: within some second it
     * passes the bound, however slowly the machine runs it */
    for (int i = 0; i < 200000; i++) {
        void *p = malloc(64 + (size_t)(i & 7) * 16);
        st_escape(p);
        free(p);
    }
    park_until_read();
    return NULL;
}

/* A thread that allocates often gets its own heap. */
START_TEST(test_busy_thread_gets_its_heap)
{
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "16"), 0);
    struct sefer_stats s0 = st_stats();
    struct sefer_stats s1 = stats_while_parked(rare_busy_thread);
    ck_assert_uint_eq(s1.heaps_live, s0.heaps_live + 1);
    ck_assert_int_ge(ST_DELTA(s1, s0, allocs), 100000); /* (its own heap's counter) */
}
END_TEST

static void *rare_leave_blocks(void *unused)
{
    (void)unused;
    for (int i = 0; i < 100; i++)
        st_escape(malloc(48)); /* 100 allocations: a heap of its own, left with blocks in it */
    return NULL;
}

static void *one_block(void *unused)
{
    (void)unused;
    void *p = malloc(48);
    st_escape(p);
    park_until_read();
    free(p);
    return NULL;
}

/* A heap left with blocks by an exited thread is taken at once by the next
 * thread, however rarely it allocates (its frees of what the last thread
 * left are then its own). */
START_TEST(test_abandoned_heap_taken_at_once)
{
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "16"), 0);
    pthread_join(st_spawn(rare_leave_blocks, NULL, 0), NULL);
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_ge(s0.heaps_abandoned, 1);
    struct sefer_stats s1 = stats_while_parked(one_block);
    ck_assert_uint_eq(s1.heaps_live, s0.heaps_live + 1);
    ck_assert_uint_eq(s1.heaps_abandoned, s0.heaps_abandoned - 1);
    ck_assert_int_eq(ST_DELTA(s1, s0, fallback_allocs), 0);
}
END_TEST

/* These cases are about each thread's own heap (its remote frees, its ring,
 * its life after the thread): every thread gets it at its first malloc,
 * rather than after threads.heap_after allocations in a second, which
 * the tcase "rare" tests. */
static void heap_per_thread(void)
{
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "0"), 0);
}

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc;

    tc = tcase_create("stress");
    tcase_add_checked_fixture(tc, heap_per_thread, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cross_thread_stress);
    tcase_add_test(tc, test_ring_overflow_storm);
    tcase_add_test(tc, test_owner_exits_during_remote_frees);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, heap_per_thread, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_short_lived_threads);
    tcase_add_test(tc, test_abandoned_heap_accounting);
    tcase_add_test(tc, test_first_free_adopts_exited_heap);
    tcase_add_test(tc, test_first_free_of_live_heap_adopts_nothing);
    tcase_add_test(tc, test_remote_frees_leave_bytes_in_blocks);
    tcase_add_test(tc, test_remote_frees_in_batches);
    tcase_add_test(tc, test_remote_emptied_pages_serve_growth);
    tcase_add_test(tc, test_more_threads_than_slots);
    tcase_add_test(tc, test_thread_destructor_allocates);
    tcase_add_test(tc, test_atexit_allocates);
    suite_add_tcase(s, tc);

    tc = tcase_create("rare");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rare_threads_share_a_heap);
    tcase_add_test(tc, test_busy_thread_gets_its_heap);
    tcase_add_test(tc, test_abandoned_heap_taken_at_once);
    suite_add_tcase(s, tc);

    tc = tcase_create("fork");
    tcase_add_checked_fixture(tc, heap_per_thread, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fork_while_busy);
    tcase_add_test(tc, test_fork_while_purging);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return st_run_suite(threads_suite());
}
