/* test_fault.c - the OS layer failing on purpose (lib/os.c's fault
 * injection; this program links a variant of libsefer built with
 * -DSEFER_FAULT_INJECTION, see meson.build).
 *
 *   decommit_failure_reads_zero  madvise (and then mmap too) made to fail
 *       while a large block and whole small segments are freed with
 *       decommit.policy = eager: memory reused from them must still read as
 *       zero where sefer relies on it (calloc of a reused span skips its
 *       memset; a reused segment's header is not cleared), and sefer_check
 *       must find nothing.  A control run injects nothing.
 *   random_failures  300 rounds, each with a random plan (which of mmap,
 *       munmap, madvise and mprotect fail, from which call, how many in a
 *       row) over random malloc/calloc/realloc/aligned_alloc/free and
 *       sefer_trim: every allocation succeeds or returns NULL with ENOMEM, a
 *       failed realloc leaves its block intact, every live block keeps its
 *       pattern, sefer_check finds nothing after each round, and once the
 *       OS works again everything can be allocated.  Run at guard levels 1,
 *       2 (guard pages: mprotect) and 3, each in a fresh process.
 *   threads_random_failures  4 threads doing the same with blocks handed
 *       between them while the main thread keeps arming random plans.
 *   open_failure_releases_segment  mprotect and mmap failing from the
 *       1st, 2nd, ... 8th call on while a new thread's first medium malloc
 *       makes and opens a segment (lib/segment.c, "The unused part of a
 *       segment"): NULL with ENOMEM or a block, and no segment left
 *       behind once the thread is gone.
 *
 * Uses the prefixed API for the allocations under test.  While a plan is
 * armed nothing asserts (check's own bookkeeping allocates through sefer
 * too): failures are recorded (rel_fail) and asserted once disarmed.
 * SEFER_FAULT_SEED replays a seed. */
#include "rel.h"

#include <sched.h>

#define FI_LIVE 512

struct fi_block {
    unsigned char *p;
    size_t n;
    uint64_t seed;
};

struct fi_state {
    struct fi_block live[FI_LIVE];
    size_t count;
    uint64_t rng;
    size_t nulls;
    int id;
};

static void disarm(void)
{
    sefer_test_fail_os(0, 0, 0);
}

/* Patterns: all of a block up to 64 KiB, else its first and last 4 KiB
 * (a huge block is never touched beyond that). */
static void fi_fill(unsigned char *p, size_t n, uint64_t seed)
{
    if (n <= 64 * ST_KIB) {
        st_pat_fill(p, n, seed);
        return;
    }
    st_pat_fill_range(p, 0, 4096, seed);
    st_pat_fill_range(p, n - 4096, n, seed);
}

/* The first byte below `limit` of an n-byte block filled by fi_fill that
 * does not hold its pattern, or SIZE_MAX. */
static size_t fi_bad_below(const unsigned char *p, size_t n, size_t limit, uint64_t seed)
{
    size_t head = n <= 64 * ST_KIB ? n : 4096, tail = n <= 64 * ST_KIB ? n : n - 4096;
    size_t bad = st_pat_check_range(p, 0, head < limit ? head : limit, seed);
    if (bad == SIZE_MAX && tail < limit)
        bad = st_pat_check_range(p, tail, n < limit ? n : limit, seed);
    return bad;
}

static size_t fi_bad_offset(const unsigned char *p, size_t n, uint64_t seed)
{
    return fi_bad_below(p, n, n, seed);
}

static bool fi_zero(const unsigned char *p, size_t n)
{
    size_t head = n <= 64 * ST_KIB ? n : 4096;
    for (size_t i = 0; i < head; i++)
        if (p[i])
            return false;
    for (size_t i = n - (n <= 64 * ST_KIB ? 0 : 4096); i < n; i++)
        if (p[i])
            return false;
    return true;
}

static size_t fi_size(uint64_t *r)
{
    uint64_t x = st_rand(r);
    switch (x % 10) {
    case 0: case 1: case 2: case 3:
        return 1 + x % 2000;
    case 4: case 5:
        return 2000 + x % 120000;
    case 6: case 7:
        return 130000 + x % (6 * ST_MIB);
    case 8:
        return 16 + x % 300;
    default: /* now and then huge: mapped and unmapped directly */
        return (x >> 8) % 4 == 0 ? 140 * ST_MIB + x % ST_MIB : 16 + x % 100;
    }
}

/* A NULL result must come with ENOMEM. */
static bool fi_null_ok(struct fi_state *s, const char *call, size_t n)
{
    s->nulls++;
    if (errno != ENOMEM)
        rel_fail("thread %d: %s(%zu) returned NULL with errno %d (%s), not ENOMEM", s->id, call,
                 n, errno, strerror(errno));
    return false;
}

static void fi_adopt(struct fi_state *s, unsigned char *p, size_t n)
{
    struct fi_block *b = &s->live[s->count++];
    b->p = p;
    b->n = n;
    b->seed = st_seed_of(p, n);
    fi_fill(p, n, b->seed);
}

static void fi_release(struct fi_state *s, size_t i, const char *when)
{
    struct fi_block *b = &s->live[i];
    size_t bad = fi_bad_offset(b->p, b->n, b->seed);
    if (bad != SIZE_MAX)
        rel_fail("thread %d: block %p (%zu bytes) corrupted at byte %zu %s", s->id, (void *)b->p,
                 b->n, bad, when);
    sefer_free(b->p);
    *b = s->live[--s->count];
}

/* One random operation on the thread's own blocks. */
static void fi_step(struct fi_state *s)
{
    uint64_t k = st_rand(&s->rng) % 10;
    if (s->count == FI_LIVE || (k >= 7 && s->count > 0)) {
        fi_release(s, (size_t)(st_rand(&s->rng) % s->count), "before free");
        return;
    }
    size_t n = fi_size(&s->rng);
    errno = 0;
    if (k <= 2 || (k >= 6 && s->count == 0)) {
        unsigned char *p = sefer_malloc(n);
        if (p || fi_null_ok(s, "malloc", n))
            fi_adopt(s, p, n);
    } else if (k == 3) {
        unsigned char *p = sefer_calloc(1, n);
        if (p && !fi_zero(p, n))
            rel_fail("thread %d: calloc(%zu) at %p is not zero", s->id, n, (void *)p);
        if (p || fi_null_ok(s, "calloc", n))
            fi_adopt(s, p, n);
    } else if (k <= 5) {
        size_t align = (size_t)16 << (st_rand(&s->rng) % 12); /* 16 B - 32 KiB */
        unsigned char *p = sefer_aligned_alloc(align, n);
        if (p && ((uintptr_t)p & (align - 1)))
            rel_fail("thread %d: aligned_alloc(%zu, %zu) = %p", s->id, align, n, (void *)p);
        if (p || fi_null_ok(s, "aligned_alloc", n))
            fi_adopt(s, p, n);
    } else {
        struct fi_block *b = &s->live[st_rand(&s->rng) % s->count];
        unsigned char *q = sefer_realloc(b->p, n);
        if (q == NULL) { /* the old block must be untouched */
            fi_null_ok(s, "realloc", n);
            return;
        }
        if (fi_bad_below(q, b->n, n, b->seed) != SIZE_MAX)
            rel_fail("thread %d: realloc(%zu -> %zu) lost the block's bytes", s->id, b->n, n);
        b->p = q;
        b->n = n;
        fi_fill(q, n, b->seed);
    }
}

static void fi_release_all(struct fi_state *s)
{
    while (s->count > 0)
        fi_release(s, s->count - 1, "at the end");
}

/* After the OS works again every kind of allocation succeeds (8 of each
 * size, patterned and checked).  Returns 0, or the first size that failed. */
static size_t fi_first_failing_size(void)
{
    static const size_t sizes[] = {16, 700, 5000, 60000, 300000, 5 * ST_MIB, 150 * ST_MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int k = 0; k < 8; k++) {
            unsigned char *p = sefer_malloc(sizes[i]);
            if (p == NULL)
                return sizes[i];
            fi_fill(p, sizes[i], (uint64_t)k);
            bool intact = fi_bad_offset(p, sizes[i], (uint64_t)k) == SIZE_MAX;
            sefer_free(p);
            if (!intact)
                return sizes[i];
        }
    return 0;
}

/* ======================================================================
 * the promise "decommitted memory reads as zero"
 * ==================================================================== */

static const unsigned zero_plans[] = {0, SEFER_OS_MADVISE, SEFER_OS_MADVISE | SEFER_OS_MMAP};

START_TEST(test_decommit_failure_reads_zero)
{
    unsigned plan = zero_plans[_i];
    ST_KNOB_SET("decommit.policy", "eager");
    unsigned long before = sefer_test_os_failures(SEFER_OS_ALL);

    /* a large block: cached on free, its memory decommitted */
    size_t n = 3 * ST_MIB;
    unsigned char *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    memset(p, 0xAA, n);
    sefer_test_fail_os(plan, 1, 1000);
    sefer_free(p);
    disarm();
    unsigned char *q = sefer_calloc(1, n);
    ck_assert_ptr_nonnull(q);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += q[i] != 0;
    sefer_free(q);

    /* whole small segments: their pages decommitted as they empty (eager)
     * and the empty segments released to the large cache, all with the
     * decommit failing; then reused at once, as small blocks and as spans,
     * through calloc, which must read zero either way */
    enum { COUNT = 3 * 63 * 16, SMALL = 4000 }; /* about three segments of 4 KiB blocks */
    const size_t span = 3 * ST_MIB;             /* takes a whole segment */
    void **v = st_map(COUNT * sizeof *v);
    size_t small_nonzero = 0, span_nonzero = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < COUNT; i++) {
            v[i] = sefer_malloc(SMALL);
            ck_assert_ptr_nonnull(v[i]);
            memset(v[i], 0x55, SMALL);
        }
        sefer_test_fail_os(plan, 1, 100000);
        for (int i = 0; i < COUNT; i++)
            sefer_free(v[i]);
        disarm();
        REL_ASSERT_CONSISTENT("after segments were released with decommit failing");
        for (int i = 0; i < COUNT; i++) {
            unsigned char *c = sefer_calloc(1, SMALL);
            ck_assert_ptr_nonnull(c);
            for (size_t k = 0; k < SMALL; k++)
                small_nonzero += c[k] != 0;
            v[i] = c;
        }
        for (int i = 0; i < COUNT; i++)
            sefer_free(v[i]);
        for (int i = 0; i < 3; i++) {
            unsigned char *c = sefer_calloc(1, span);
            ck_assert_ptr_nonnull(c);
            for (size_t k = 0; k < span; k++)
                span_nonzero += c[k] != 0;
            v[i] = c;
        }
        for (int i = 0; i < 3; i++)
            sefer_free(v[i]);
        sefer_trim();
    }
    st_unmap(v, COUNT * sizeof *v);
    unsigned long injected = sefer_test_os_failures(SEFER_OS_ALL) - before;
    printf("plan %#x: %lu calls failed; non-zero bytes in calloc: %zu of the large block's span,"
           " %zu of small blocks and %zu of spans on the small segments' pages\n", plan, injected,
           nonzero, small_nonzero, span_nonzero);
    fflush(stdout);
    ck_assert_msg(nonzero == 0, "calloc(%zu) after a failed decommit has %zu non-zero bytes", n,
                  nonzero);
    ck_assert_msg(small_nonzero == 0,
                  "calloc(1, %d) x %d on reused small-segment pages after a failed decommit: %zu"
                  " non-zero bytes", SMALL, COUNT, small_nonzero);
    ck_assert_msg(span_nonzero == 0,
                  "calloc(1, %zu) x 3 on the released small segments after a failed decommit: %zu"
                  " non-zero bytes", span, span_nonzero);
    if (plan)
        ck_assert_msg(injected > 0, "plan %#x injected nothing", plan);
    else
        ck_assert_uint_eq(injected, 0);
    REL_ASSERT_CONSISTENT("at the end");
}
END_TEST

/* ======================================================================
 * the unused part of a segment: opening it fails
 * ==================================================================== */

/* A thread's first medium malloc makes a medium segment (closed past its
 * metadata at levels 0-1: lib/segment.c, "The unused part of a segment")
 * and opens it for its first page.  With mprotect and mmap failing from
 * the nth call on, one of those steps fails: the malloc returns NULL with
 * ENOMEM or succeeds, and either way the segment goes back once the
 * thread is gone (decommit eager, nothing kept for exited threads, no
 * large cache): a segment made and left with no page in use was listed
 * by its heap for ever before page_alloc released it. */
struct open_try {
    unsigned long nth;
    void *p;
    int err;
};

static void *open_try_main(void *arg)
{
    struct open_try *t = arg;
    sefer_test_fail_os(SEFER_OS_MPROTECT | SEFER_OS_MMAP, t->nth, 1000);
    errno = 0;
    t->p = sefer_malloc(100 * ST_KIB);
    t->err = errno;
    disarm();
    if (t->p != NULL) {
        memset(t->p, 7, 100 * ST_KIB);
        sefer_free(t->p);
    }
    return NULL;
}

START_TEST(test_open_failure_releases_segment)
{
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("decommit.policy", "eager");
    ST_KNOB_SET("decommit.exited_keep", "0");
    ST_KNOB_SET("large_cache.slots", "0");
    sefer_trim();
    unsigned long before = sefer_test_os_failures(SEFER_OS_MPROTECT);
    int nulls = 0;
    for (unsigned long nth = 1; nth <= 8; nth++) {
        uint64_t segments = st_stats().segments;
        struct open_try t = {nth, NULL, 0};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, open_try_main, &t), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        sefer_trim();
        if (t.p == NULL) {
            nulls++;
            ck_assert_msg(t.err == ENOMEM, "malloc failed with errno %d, not ENOMEM", t.err);
        }
        ck_assert_msg(st_stats().segments == segments,
                      "failing from call %lu: %llu segments where there were %llu", nth,
                      (unsigned long long)st_stats().segments, (unsigned long long)segments);
        REL_ASSERT_CONSISTENT("after a failed open");
    }
    printf("open failures: %d of 8 mallocs returned NULL, %lu mprotect calls failed\n", nulls,
           sefer_test_os_failures(SEFER_OS_MPROTECT) - before);
    fflush(stdout);
    /* (some plan must have hit an mprotect: the segment closed, then opened) */
    ck_assert_uint_gt(sefer_test_os_failures(SEFER_OS_MPROTECT), before);
    ck_assert_int_gt(nulls, 0);
}
END_TEST

/* ======================================================================
 * random plans, one thread
 * ==================================================================== */

/* Runs the random scenario; returns the number of problems (and prints). */
static long fi_random_scenario(uint64_t seed)
{
    static struct fi_state s;
    memset(&s, 0, sizeof s);
    s.rng = seed | 1;
    long problems = 0;
    sefer_config_set("decommit.policy", "eager");
    sefer_config_set("large_cache.slots", "4");
    for (int round = 0; round < 300; round++) {
        unsigned ops = 1 + (unsigned)(st_rand(&s.rng) % SEFER_OS_ALL);
        unsigned long nth = 1 + st_rand(&s.rng) % 6, count = 1 + st_rand(&s.rng) % 3;
        sefer_test_fail_os(ops, nth, count);
        for (int k = 0; k < 40; k++)
            fi_step(&s);
        if (st_rand(&s.rng) % 4 == 0)
            sefer_trim();
        disarm();
        int found = sefer_check();
        if (found)
            printf("round %d (ops %#x from call %lu, %lu failing): sefer_check found %d\n", round,
                   ops, nth, count, found);
        problems += found;
    }
    fi_release_all(&s);
    printf("injected: mmap %lu, munmap %lu, madvise %lu, mprotect %lu; NULL results %zu\n",
           sefer_test_os_failures(SEFER_OS_MMAP), sefer_test_os_failures(SEFER_OS_MUNMAP),
           sefer_test_os_failures(SEFER_OS_MADVISE), sefer_test_os_failures(SEFER_OS_MPROTECT),
           s.nulls);
    return problems + atomic_load(&rel_failures);
}

/* guard level = _i + 1, in a fresh process */
START_TEST(test_random_failures)
{
    uint64_t seed = rel_seed("SEFER_FAULT_SEED", 0x5EEDF417);
    static char out[1 << 16];
    char level[32], seed_text[32];
    snprintf(level, sizeof level, "SEFER_GUARD_LEVEL=%d", _i + 1);
    snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
    char *env[] = {level, (char *)"CK_FORK=no", NULL};
    char *args[] = {(char *)"random", seed_text, NULL};
    int st = st_run_self(env, args, out, sizeof out);
    printf("%s", out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "random OS failures at guard level %d (seed %#" PRIx64 "): child %s; output:\n%s",
                  _i + 1, seed, st_describe_status(st), out);
    ck_assert_msg(strstr(out, "recovered") != NULL, "no recovery line:\n%s", out);
}
END_TEST

static int random_child(uint64_t seed)
{
    long problems = fi_random_scenario(seed);
    if (problems) {
        printf("%ld problem(s); the first failure: %s\n", problems, rel_first_failure);
        return 1;
    }
    if (sefer_test_os_failures(SEFER_OS_MMAP) == 0 || sefer_test_os_failures(SEFER_OS_MUNMAP) == 0 ||
        sefer_test_os_failures(SEFER_OS_MADVISE) == 0) {
        printf("some operation was never made to fail\n");
        return 1;
    }
    size_t failing = fi_first_failing_size();
    if (failing) {
        printf("malloc(%zu) fails after the OS recovered\n", failing);
        return 1;
    }
    if (sefer_check() != 0)
        return 1;
    printf("recovered\n");
    return 0;
}

/* ======================================================================
 * random plans, four threads handing blocks to each other
 * ==================================================================== */

#define FI_THREADS 4
#define FI_OPS 20000

static struct fi_state fi_threads[FI_THREADS];
static struct st_queue *fi_queues; /* one per thread, from mmap */
static atomic_int fi_running;

static void *fi_thread(void *argp)
{
    struct fi_state *s = argp;
    for (int op = 0; op < FI_OPS; op++) {
        fi_step(s);
        if (s->count > 0 && op % 5 == 0) { /* hand a block to the next thread */
            struct fi_block *b = &s->live[s->count - 1];
            size_t bad = fi_bad_offset(b->p, b->n, b->seed);
            if (bad != SIZE_MAX)
                rel_fail("thread %d: block %p (%zu bytes) corrupted at byte %zu before a hand-off",
                         s->id, (void *)b->p, b->n, bad);
            /* the receiver derives the seed from address and size */
            fi_fill(b->p, b->n, st_seed_of(b->p, b->n));
            struct st_block e = {b->p, b->n};
            if (st_queue_push(&fi_queues[(s->id + 1) % FI_THREADS], e))
                s->count--;
            else
                b->seed = st_seed_of(b->p, b->n);
        }
        struct st_block in;
        while (s->count < FI_LIVE && st_queue_pop(&fi_queues[s->id], &in)) {
            struct fi_block *b = &s->live[s->count++];
            b->p = in.p;
            b->n = in.n;
            b->seed = st_seed_of(in.p, in.n);
        }
    }
    atomic_fetch_sub(&fi_running, 1);
    return NULL;
}

START_TEST(test_threads_random_failures)
{
    uint64_t seed = rel_seed("SEFER_FAULT_SEED", 0x5EEDF417);
    ST_KNOB_SET("decommit.policy", "eager");
    fi_queues = st_map(FI_THREADS * sizeof *fi_queues);
    for (int i = 0; i < FI_THREADS; i++) {
        st_queue_init(&fi_queues[i], 256);
        memset(&fi_threads[i], 0, sizeof fi_threads[i]);
        fi_threads[i].id = i;
        fi_threads[i].rng = st_mix64(seed + (uint64_t)i) | 1;
    }
    unsigned long before = sefer_test_os_failures(SEFER_OS_ALL);
    atomic_store(&fi_running, FI_THREADS);
    pthread_t t[FI_THREADS];
    for (int i = 0; i < FI_THREADS; i++)
        t[i] = st_spawn(fi_thread, &fi_threads[i], 0);
    uint64_t r = seed ^ 0xA5A5A5A5ULL;
    unsigned plans = 0;
    while (atomic_load(&fi_running) > 0) {
        unsigned ops = 1 + (unsigned)(st_rand(&r) % SEFER_OS_ALL);
        sefer_test_fail_os(ops, 1 + st_rand(&r) % 8, 1 + st_rand(&r) % 4);
        plans++;
        sched_yield();
    }
    for (int i = 0; i < FI_THREADS; i++)
        pthread_join(t[i], NULL);
    disarm();
    unsigned long injected = sefer_test_os_failures(SEFER_OS_ALL) - before;
    int problems = sefer_check();
    size_t nulls = 0;
    for (int i = 0; i < FI_THREADS; i++) {
        struct st_block in;
        while (st_queue_pop(&fi_queues[i], &in)) {
            if (fi_threads[i].count == FI_LIVE)
                fi_release_all(&fi_threads[i]);
            struct fi_block *b = &fi_threads[i].live[fi_threads[i].count++];
            b->p = in.p;
            b->n = in.n;
            b->seed = st_seed_of(in.p, in.n);
        }
        fi_release_all(&fi_threads[i]);
        nulls += fi_threads[i].nulls;
    }
    printf("threads: %u plans armed, %lu calls failed, %zu NULL results\n", plans, injected, nulls);
    REL_ASSERT_NO_FAILURES();
    ck_assert_msg(problems == 0, "sefer_check after the threads: %d problems", problems);
    ck_assert_msg(injected > 0, "no call was made to fail");
    size_t failing = fi_first_failing_size();
    ck_assert_msg(failing == 0, "malloc(%zu) fails after the OS recovered", failing);
    REL_ASSERT_CONSISTENT("after recovery");
    st_unmap(fi_queues, FI_THREADS * sizeof *fi_queues);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "random") == 0)
        return random_child(strtoull(argv[2], NULL, 0));
    Suite *s = suite_create("fault");
    TCase *tc = tcase_create("fault");
    tcase_set_timeout(tc, ST_RUN_SELF_HANG_S + 60);
    tcase_add_loop_test(tc, test_decommit_failure_reads_zero, 0,
                        (int)(sizeof zero_plans / sizeof zero_plans[0]));
    tcase_add_loop_test(tc, test_random_failures, 0, 3);
    tcase_add_test(tc, test_open_failure_releases_segment);
    tcase_add_test(tc, test_threads_random_failures);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
