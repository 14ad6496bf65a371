/* test_limits.c - budgets and giving memory back: the segment cap
 * (segments.max) ending in ENOMEM and recovering, RSS returning to the OS
 * with decommit.policy = eager, and the large cache.  What depends on time
 * (the delayed and adaptive decommit, the cache's ttl) is tested on a test
 * clock in test_decommit_clock.c (test limits-decommit).
 *
 * Uses only the prefixed API, so it runs in every build.  While the cap is
 * exhausted no check assertion is made: with the standard names interposed
 * check's own bookkeeping allocates through sefer too.  Each test runs in its
 * own forked child (CK_FORK), so knob changes do not leak between tests. */
#define _GNU_SOURCE
#include "sefer_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define UNDER_SANITIZER ST_UNDER_SANITIZER

static void set_cap(unsigned long long cap)
{
    char v[32];
    snprintf(v, sizeof v, "%llu", cap);
    ST_KNOB_SET("segments.max", v);
}

/* ======================================================================
 * segment cap: exhaustion and recovery
 * ==================================================================== */

static const size_t cap_sizes[] = {4 * ST_KIB, 100 * ST_KIB, ST_MIB, 9 * ST_MIB};

/* How many n-byte blocks `segs` segments hold at least: small and medium
 * blocks share pages (allow 1/8 for headers), a large block takes whole
 * segments (allow 64 KiB of header). */
static size_t blocks_in(size_t segs, size_t n)
{
    if (n <= SEFER_MEDIUM_MAX)
        return segs * (SEFER_SEGMENT_SIZE - SEFER_SEGMENT_SIZE / 8) / n;
    size_t per = (n + 64 * ST_KIB + SEFER_SEGMENT_SIZE - 1) / SEFER_SEGMENT_SIZE;
    return segs / per;
}

struct fill_result {
    size_t count;     /* successful allocations */
    int err;          /* errno at the first NULL (0: never got one) */
    bool bad_errno;   /* a NULL came with another errno */
    bool unaligned;   /* */
    uint64_t max_segments;
};

/* Allocates blocks of size n until NULL or `limit` blocks; touches each. */
static struct fill_result fill_until_null(void **v, size_t limit, size_t n)
{
    struct fill_result r = {0, 0, false, false, 0};
    for (size_t i = 0; i < limit; i++) {
        errno = 0;
        void *p = sefer_malloc(n);
        if (!p) {
            r.err = errno;
            break;
        }
        ((volatile char *)p)[0] = 1;
        ((volatile char *)p)[n - 1] = 1;
        v[r.count++] = p;
    }
    struct sefer_stats s = st_stats();
    r.max_segments = s.segments;
    return r;
}

static void free_all(void **v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        sefer_free(v[i]);
}

START_TEST(test_segment_cap_exhaustion)
{
    size_t n = cap_sizes[_i];
    struct sefer_stats s0 = st_stats();
    unsigned long long cap = s0.segments + 8;
    /* the most blocks 8 more segments could hold, and then some */
    size_t limit = (size_t)(cap + 8) * (SEFER_SEGMENT_SIZE / n + 1);
    void **v = st_map(limit * sizeof *v);
    set_cap(cap);
    ck_assert_uint_eq(st_knob_ull("segments.max"), cap);

    struct fill_result r1 = fill_until_null(v, limit, n);
    /* one more attempt of each kind while full: refused, counted */
    errno = 0;
    void *extra_small = sefer_malloc(4 * ST_KIB);
    int extra_small_err = errno;
    errno = 0;
    void *extra_large = sefer_malloc(2 * ST_MIB);
    int extra_large_err = errno;
    struct sefer_stats s1 = st_stats();
    free_all(v, r1.count);
    sefer_free(extra_small);
    sefer_free(extra_large);

    /* assertions only now that memory is back */
    ck_assert_msg(r1.err != 0, "%zu-byte blocks: %zu allocations never hit the cap of %llu", n,
                  r1.count, cap);
    ck_assert_msg(r1.err == ENOMEM, "%zu-byte blocks: NULL with errno %d, not ENOMEM", n, r1.err);
    ck_assert_msg(r1.count > 0, "%zu-byte blocks: no allocation fitted under the cap", n);
    ck_assert_msg(r1.max_segments <= cap, "segments %" PRIu64 " above the cap %llu",
                  r1.max_segments, cap);
    ck_assert_msg(s1.segments <= cap, "segments %" PRIu64 " above the cap %llu", s1.segments, cap);
    ck_assert_msg(ST_DELTA(s1, s0, enomem) >= 1, "stats.enomem did not grow");
    if (n <= 2 * ST_MIB) /* (a 9 MiB refusal can leave room for 2 MiB) */
        ck_assert_msg(extra_large == NULL && extra_large_err == ENOMEM,
                      "2 MiB request with no segment left: %p errno %d", extra_large,
                      extra_large_err);
    (void)extra_small_err; /* a small block may still fit in a partly used page */
    /* the blocks that fitted are a sensible share of what the cap allows */
    ck_assert_msg(r1.count >= blocks_in((size_t)(cap - s0.segments - 2), n) / 2,
                  "only %zu blocks of %zu bytes under a cap of %llu (%" PRIu64 " in use)",
                  r1.count, n, cap, s0.segments);

    /* Frees made room: the same again fits, about as many. */
    struct fill_result r2 = fill_until_null(v, limit, n);
    free_all(v, r2.count);
    ck_assert_msg(r2.count + r2.count / 8 + 2 >= r1.count,
                  "after freeing everything only %zu of %zu blocks fit again", r2.count, r1.count);
    ck_assert_int_eq(r2.err, ENOMEM);

    /* And every other kind fits too (cached spans / empty pages of one kind
     * must give way to another). */
    for (size_t k = 0; k < sizeof cap_sizes / sizeof cap_sizes[0]; k++) {
        size_t want = blocks_in((size_t)(cap - s0.segments - 2), cap_sizes[k]) / 2;
        if (want == 0)
            want = 1;
        /* an array of its own: `want` can exceed v's `limit` (many small
         * blocks fit where few large ones did) */
        void **w = st_map(want * sizeof *w);
        struct fill_result r3 = fill_until_null(w, want, cap_sizes[k]);
        free_all(w, r3.count);
        st_unmap(w, want * sizeof *w);
        ck_assert_msg(r3.count == want,
                      "after freeing %zu-byte blocks, only %zu of %zu %zu-byte blocks fit "
                      "(errno %d)",
                      n, r3.count, want, cap_sizes[k], r3.err);
    }

    /* Raising the cap lets more in. */
    set_cap(cap + 8);
    struct fill_result r4 = fill_until_null(v, limit, n);
    free_all(v, r4.count);
    ck_assert_msg(r4.count > r1.count, "raising the cap by 8 segments: %zu blocks, before %zu",
                  r4.count, r1.count);
    st_unmap(v, limit * sizeof *v);
}
END_TEST

START_TEST(test_segment_cap_enomem_reported_once)
{
    struct sefer_stats s0 = st_stats();
    unsigned long long cap = s0.segments + 4;
    set_cap(cap);
    void *v[64];
    size_t count = 0;
    int refusals = 0;
    static char err[8192];
    struct st_capture c;
    st_capture_begin(&c);
    for (int i = 0; i < 64; i++) {
        errno = 0;
        void *p = sefer_malloc(3 * ST_MIB);
        if (p)
            v[count++] = p;
        else if (errno == ENOMEM)
            refusals++;
    }
    st_capture_end(&c, err, sizeof err);
    struct sefer_stats s1 = st_stats();
    free_all(v, count);
    ck_assert_int_ge(refusals, 10);
    ck_assert_msg(ST_DELTA(s1, s0, enomem) == refusals,
                  "%d refusals, stats.enomem grew by %" PRId64, refusals,
                  ST_DELTA(s1, s0, enomem));
    ck_assert_msg(err[0] != 0, "hitting segments.max said nothing on stderr");
    int lines = 0;
    for (const char *q = err; *q; q++)
        lines += *q == '\n';
    ck_assert_msg(lines <= 1, "%d refusals wrote %d lines to stderr (expected one):\n%s",
                  refusals, lines, err);
}
END_TEST

/* two threads hit the cap at once */

#define CAP_THREADS 2
#define CAP_LIMIT 200000

struct cap_thread {
    void **v;
    size_t count;
    int nulls_enomem, nulls_other;
};
static pthread_barrier_t cap_barrier;

static void *cap_thread_fn(void *argp)
{
    struct cap_thread *t = argp;
    void *warm = sefer_malloc(16);
    sefer_free(warm);
    pthread_barrier_wait(&cap_barrier);
    int consecutive = 0;
    for (size_t i = 0; i < CAP_LIMIT && consecutive < 6; i++) {
        size_t n = i % 3 == 0 ? 1536 * ST_KIB : i % 3 == 1 ? 4000 : 60000;
        errno = 0;
        void *p = sefer_malloc(n);
        if (!p) {
            if (errno == ENOMEM)
                t->nulls_enomem++;
            else
                t->nulls_other++;
            consecutive++;
            continue;
        }
        consecutive = 0;
        memset(p, 0x44, n < 4096 ? n : 4096);
        t->v[t->count++] = p;
    }
    pthread_barrier_wait(&cap_barrier); /* stay alive until both are full */
    return NULL;
}

START_TEST(test_segment_cap_two_threads)
{
    struct sefer_stats s0 = st_stats();
    unsigned long long cap = s0.segments + 12;
    set_cap(cap);
    struct cap_thread t[CAP_THREADS];
    pthread_t th[CAP_THREADS];
    pthread_barrier_init(&cap_barrier, NULL, CAP_THREADS);
    for (int i = 0; i < CAP_THREADS; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].v = st_map(CAP_LIMIT * sizeof(void *));
        ck_assert_int_eq(pthread_create(&th[i], NULL, cap_thread_fn, &t[i]), 0);
    }
    for (int i = 0; i < CAP_THREADS; i++)
        pthread_join(th[i], NULL);
    struct sefer_stats s1 = st_stats();
    pthread_barrier_destroy(&cap_barrier);
    /* main frees both threads' blocks (they have exited) */
    for (int i = 0; i < CAP_THREADS; i++)
        free_all(t[i].v, t[i].count);

    for (int i = 0; i < CAP_THREADS; i++) {
        ck_assert_msg(t[i].nulls_other == 0, "thread %d: %d NULLs with an errno other than ENOMEM",
                      i, t[i].nulls_other);
        ck_assert_msg(t[i].nulls_enomem > 0, "thread %d never hit the cap", i);
        ck_assert_msg(t[i].count > 0, "thread %d got nothing", i);
    }
    ck_assert_msg(s1.segments <= cap, "segments %" PRIu64 " above the cap %llu", s1.segments, cap);
    ck_assert_msg(s1.segments_peak <= cap || s0.segments_peak > cap,
                  "segments_peak %" PRIu64 " above the cap %llu", s1.segments_peak, cap);
    ck_assert_int_ge(ST_DELTA(s1, s0, enomem), 2);

    /* Room again, for large and small, in the main thread. */
    void *big[4];
    for (int i = 0; i < 4; i++) {
        big[i] = sefer_malloc(1536 * ST_KIB);
        ck_assert_msg(big[i] != NULL, "large allocation %d after the threads' blocks were freed: "
                      "errno %d", i, errno);
    }
    void **small = st_map(2000 * sizeof(void *));
    for (int i = 0; i < 2000; i++) {
        small[i] = sefer_malloc(4000);
        ck_assert_msg(small[i] != NULL, "small allocation %d after recovery: errno %d", i, errno);
    }
    for (int i = 0; i < 2000; i++)
        sefer_free(small[i]);
    for (int i = 0; i < 4; i++)
        sefer_free(big[i]);
    st_unmap(small, 2000 * sizeof(void *));
    for (int i = 0; i < CAP_THREADS; i++)
        st_unmap(t[i].v, CAP_LIMIT * sizeof(void *));
}
END_TEST

/* ======================================================================
 * RSS goes back to the OS
 * ==================================================================== */

static void ensure_room_for(size_t bytes)
{
    unsigned long long need = (unsigned long long)(bytes / SEFER_SEGMENT_SIZE) * 2 + 64;
    struct sefer_stats s = st_stats();
    need += s.segments;
    if (st_knob_ull("segments.max") < need)
        set_cap(need);
}

/* The rss case is optional (its own meson test, limits-rss): a sanitizer's
 * shadow memory and quarantine make RSS say nothing about sefer. */
static const char *rss_why_not(void)
{
    return UNDER_SANITIZER ? "under ASan or TSan, shadow memory makes RSS meaningless" : NULL;
}

START_TEST(test_rss_falls_after_free_eager)
{
    ST_KNOB_SET("decommit.policy", "eager");
    const size_t small = 4 * ST_KIB, nsmall = 512 * ST_MIB / small;
    static const size_t large_sizes[] = {ST_MIB, 8 * ST_MIB, 3 * ST_MIB + 4096, 200 * ST_KIB};
    ensure_room_for(1100 * ST_MIB);
    void **vs = st_map(nsmall * sizeof *vs);
    void *vl[1024];
    size_t nl = 0, large_bytes = 0;

    size_t rss0 = st_rss();
    for (size_t i = 0; i < nsmall; i++) {
        vs[i] = sefer_malloc(small);
        if (!vs[i])
            ck_abort_msg("small block %zu: %s", i, strerror(errno));
        memset(vs[i], 0x5A, small);
    }
    for (size_t k = 0; large_bytes < 512 * ST_MIB && nl < 1024; k++) {
        size_t n = large_sizes[k % 4];
        vl[nl] = sefer_malloc(n);
        if (!vl[nl])
            ck_abort_msg("large block %zu: %s", nl, strerror(errno));
        memset(vl[nl], 0xA5, n);
        large_bytes += n;
        nl++;
    }
    size_t rss_peak = st_rss();
    for (size_t i = 0; i < nsmall; i++)
        sefer_free(vs[i]);
    for (size_t i = 0; i < nl; i++)
        sefer_free(vl[i]);
    size_t trimmed = sefer_trim();
    size_t rss1 = st_rss();
    struct sefer_stats s = st_stats();

    ck_assert_msg(rss0 > 0 && rss_peak > 0 && rss1 > 0, "cannot read /proc/self/statm");
    ck_assert_msg(rss_peak > rss0 + 900 * ST_MIB,
                  "touching ~1 GiB raised RSS only from %zu to %zu", rss0, rss_peak);
    size_t grew = rss_peak - rss0;
    size_t left = rss1 > rss0 ? rss1 - rss0 : 0;
    ck_assert_msg(left < grew / 4,
                  "RSS after free + sefer_trim: %zu MiB above the start, peak increment %zu MiB "
                  "(sefer_trim returned %zu MiB, bytes_committed %" PRIu64 " MiB)",
                  left >> 20, grew >> 20, trimmed >> 20, s.bytes_committed >> 20);
    ck_assert_msg(s.bytes_committed < 256 * ST_MIB, "bytes_committed still %" PRIu64 " MiB",
                  s.bytes_committed >> 20);
    ck_assert_uint_eq(s.large_cache_bytes, 0);
    st_unmap(vs, nsmall * sizeof *vs);
}
END_TEST

START_TEST(test_rss_falls_eager_without_trim)
{
    /* eager: "return pages when a page or segment empties" - no trim call
     * needed for small blocks freed by their owner. */
    ST_KNOB_SET("decommit.policy", "eager");
    const size_t small = 2000, nsmall = 256 * ST_MIB / small;
    ensure_room_for(300 * ST_MIB);
    void **vs = st_map(nsmall * sizeof *vs);
    struct sefer_stats s0 = st_stats();
    size_t rss0 = st_rss();
    for (size_t i = 0; i < nsmall; i++) {
        vs[i] = sefer_malloc(small);
        if (!vs[i])
            ck_abort_msg("block %zu: %s", i, strerror(errno));
        memset(vs[i], 0x5A, small);
    }
    size_t rss_peak = st_rss();
    struct sefer_stats s1 = st_stats();
    for (size_t i = 0; i < nsmall; i++)
        sefer_free(vs[i]);
    size_t rss1 = st_rss();
    struct sefer_stats s2 = st_stats();

    size_t grew = rss_peak - rss0;
    size_t left = rss1 > rss0 ? rss1 - rss0 : 0;
    ck_assert_msg(grew > 200 * ST_MIB, "RSS grew by %zu MiB only", grew >> 20);
    ck_assert_msg(left < grew / 4, "eager: RSS %zu MiB above the start after freeing (peak +%zu)",
                  left >> 20, grew >> 20);
    int64_t committed_up = ST_DELTA(s1, s0, bytes_committed);
    int64_t committed_left = ST_DELTA(s2, s0, bytes_committed);
    ck_assert_msg(committed_left < committed_up / 4,
                  "eager: bytes_committed +%" PRId64 " MiB at peak, still +%" PRId64
                  " MiB after freeing",
                  committed_up >> 20, committed_left >> 20);
    ck_assert_uint_gt(s2.bytes_decommitted_total, s0.bytes_decommitted_total);
    st_unmap(vs, nsmall * sizeof *vs);
}
END_TEST

/* ======================================================================
 * large cache
 * ==================================================================== */

/* (Run before each large_cache test, in its forked child.)  These tests
 * count what the cache holds from one step to the next; with the default
 * large_cache.ttl (2 s) a machine that stalls the test for that long
 * between two steps would see spans expire under it.  The longest ttl
 * takes the clock out of the verdict; what the ttl does is tested on a
 * test clock in test_decommit_clock.c. */
static void large_cache_no_expiry(void)
{
    ST_KNOB_SET("large_cache.ttl", "60min");
}

START_TEST(test_large_cache_hit_no_mapping)
{
    const size_t n = 16 * ST_MIB;
    void *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, n);
    struct sefer_stats s0 = st_stats();
    sefer_free(p);
    struct sefer_stats s1 = st_stats();
    ck_assert_msg(ST_DELTA(s1, s0, large_cache_bytes) >= (int64_t)n,
                  "freeing a 16 MiB block put %" PRId64 " bytes in the large cache",
                  ST_DELTA(s1, s0, large_cache_bytes));
    ck_assert_int_ge(ST_DELTA(s1, s0, large_cache_spans), 1);

    /* not handed out again at once (guard level >= 1: docs/design.md,
     * "Large cache"): the next block of that size is another span ... */
    void *q = sefer_malloc(n);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_ne(q, p);
    memset(q, 2, n);
    sefer_free(q);

    /* ... and from then on the two take turns: hits, no mapping */
    s0 = st_stats();
    void *last = q;
    for (int i = 0; i < 50; i++) {
        void *r = sefer_malloc(n);
        ck_assert_ptr_nonnull(r);
        ck_assert_ptr_ne(r, last);
        ((volatile char *)r)[n - 1] = 3;
        sefer_free(r);
        last = r;
    }
    s1 = st_stats();
    ck_assert_msg(s1.os_maps == s0.os_maps, "large-cache hits made %" PRId64 " new mapping(s)",
                  ST_DELTA(s1, s0, os_maps));
    ck_assert_int_eq(ST_DELTA(s1, s0, large_cache_hits), 50);
    ck_assert_int_eq(ST_DELTA(s1, s0, large_cache_misses), 0);
}
END_TEST

/* A cached span reused for a smaller block must not keep its old pages past
 * the new block resident and uncounted: RSS stays close to what sefer says
 * is committed (the rest of a split span stays cached, and counted). */
START_TEST(test_large_cache_reuse_smaller_counts_tail)
{
    void *v[16];
    for (int i = 0; i < 16; i++) {
        v[i] = sefer_malloc(7 * ST_MIB);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], 1, 7 * ST_MIB);
    }
    for (int i = 0; i < 16; i++)
        sefer_free(v[i]);
    size_t base = st_rss();
    for (int i = 0; i < 16; i++) {
        v[i] = sefer_malloc(3 * ST_MIB);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], 2, 3 * ST_MIB);
    }
    struct sefer_stats s = st_stats();
    size_t rss = st_rss();
    /* before the fix: RSS 113 MiB against 48 MiB committed */
    ck_assert_msg(rss <= s.bytes_committed + 24 * ST_MIB,
                  "RSS %zu MiB, committed %zu MiB (before the reuse: %zu MiB)", rss / ST_MIB,
                  (size_t)(s.bytes_committed / ST_MIB), base / ST_MIB);
    for (int i = 0; i < 16; i++)
        sefer_free(v[i]);
}
END_TEST

/* A cached span bigger than a request is split: the front serves it, the
 * rest stays cached with its pages; freed again, the pieces merge back into
 * one span that serves the big request with no new mapping.  (A span freed
 * last stays apart, not merged and not handed out, until the next one is
 * freed: the small blocks `x` and `y` move that on.) */
START_TEST(test_large_cache_splits_and_merges)
{
    sefer_trim(); /* an empty cache to start from */
    const size_t big = 22 * ST_MIB, part = 6 * ST_MIB; /* spans of 24 and 8 MiB */
    char *x = sefer_malloc(ST_MIB), *y = sefer_malloc(ST_MIB); /* a 4 MiB span each */
    char *p = sefer_malloc(big);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, big);
    sefer_free(p);
    sefer_free(x); /* p is an ordinary cached span now, x stays apart */
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_eq(s0.large_cache_spans, 2);
    ck_assert_uint_eq(s0.large_cache_bytes, 28 * ST_MIB);
    char *a = sefer_malloc(part), *b = sefer_malloc(part);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    struct sefer_stats s1 = st_stats();
    ck_assert_int_eq(ST_DELTA(s1, s0, os_maps), 0);
    ck_assert_int_eq(ST_DELTA(s1, s0, large_cache_hits), 2);
    ck_assert_uint_eq(s1.large_cache_bytes, 12 * ST_MIB); /* the third piece, and x */
    ck_assert_uint_ge(sefer_usable_size(a), part);
    memset(a, 2, part);
    memset(b, 3, part);
    sefer_free(a);
    sefer_free(b);
    sefer_free(y); /* b joins a and the third piece: one 24 MiB span again */
    struct sefer_stats s3 = st_stats();
    ck_assert_uint_eq(s3.large_cache_bytes, 32 * ST_MIB);
    p = sefer_malloc(big);
    ck_assert_ptr_nonnull(p);
    struct sefer_stats s4 = st_stats();
    ck_assert_int_eq(ST_DELTA(s4, s0, os_maps), 0);
    ck_assert_uint_eq(s4.large_cache_bytes, 8 * ST_MIB); /* x and y */
    /* still the same memory, every byte usable */
    memset(p, 4, big);
    sefer_free(p);
}
END_TEST

/* Allocates count blocks of size bytes, all live at once, then frees them:
 * count spans offered to the large cache together. */
static void alloc_then_free_spans(int count, size_t size)
{
    void *v[64];
    ck_assert_int_le(count, 64);
    for (int i = 0; i < count; i++) {
        v[i] = sefer_malloc(size);
        ck_assert_ptr_nonnull(v[i]);
    }
    for (int i = 0; i < count; i++)
        sefer_free(v[i]);
}

START_TEST(test_large_cache_knobs)
{
    const size_t n = 16 * ST_MIB;
    /* slots = 0: nothing is cached */
    ST_KNOB_SET("large_cache.slots", "0");
    void *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    sefer_free(p);
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_eq(s0.large_cache_spans, 0);
    ck_assert_uint_eq(s0.large_cache_bytes, 0);
    p = sefer_malloc(n);
    struct sefer_stats s1 = st_stats();
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(ST_DELTA(s1, s0, large_cache_hits), 0);
    ck_assert_int_ge(ST_DELTA(s1, s0, large_cache_misses), 1);
    ck_assert_int_ge(ST_DELTA(s1, s0, os_maps), 1);
    sefer_free(p);

    /* a byte budget smaller than the span: not cached either */
    ST_KNOB_SET("large_cache.slots", "8");
    ST_KNOB_SET("large_cache.max_bytes", "8MiB");
    p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    sefer_free(p);
    s0 = st_stats();
    ck_assert_uint_le(s0.large_cache_bytes, 8 * ST_MIB);

    /* the byte budget holds across many frees */
    sefer_trim();
    ST_KNOB_SET("large_cache.max_bytes", "32MiB");
    alloc_then_free_spans(12, 5 * ST_MIB);
    s0 = st_stats();
    ck_assert_uint_le(s0.large_cache_bytes, 32 * ST_MIB);
    ck_assert_uint_le(s0.large_cache_spans, 8);
    ck_assert_uint_gt(s0.large_cache_spans, 0);

    /* the slot count holds too */
    sefer_trim();
    ST_KNOB_SET("large_cache.max_bytes", "1GiB");
    ST_KNOB_SET("large_cache.slots", "3");
    alloc_then_free_spans(12, 5 * ST_MIB);
    s0 = st_stats();
    ck_assert_uint_le(s0.large_cache_spans, 3);

    /* and a trim empties it */
    sefer_trim();
    s0 = st_stats();
    ck_assert_uint_eq(s0.large_cache_spans, 0);
    ck_assert_uint_eq(s0.large_cache_bytes, 0);
}
END_TEST

START_TEST(test_cached_spans_count_against_cap)
{
    /* Spans held in the large cache count as segments; when the cap is
     * reached they must be given up rather than refusing the request. */
    ST_KNOB_SET("large_cache.max_bytes", "1GiB");
    ST_KNOB_SET("large_cache.slots", "64");
    struct sefer_stats s0 = st_stats();
    unsigned long long cap = s0.segments + 10;
    set_cap(cap);
    void *v[8];
    size_t got = 0;
    for (int i = 0; i < 8; i++) {
        v[i] = sefer_malloc(3 * ST_MIB); /* one segment each */
        if (v[i])
            got++;
    }
    for (size_t i = 0; i < got; i++)
        sefer_free(v[i]);
    struct sefer_stats s1 = st_stats();
    /* Now ask for something no cached span fits. */
    void *big = sefer_malloc(20 * ST_MIB);
    int e = errno;
    struct sefer_stats s2 = st_stats();
    sefer_free(big);
    ck_assert_uint_eq(got, 8);
    ck_assert_msg(s1.segments <= cap, "segments %" PRIu64 " > cap %llu", s1.segments, cap);
    ck_assert_msg(big != NULL,
                  "20 MiB with %" PRIu64 " cached spans (%" PRIu64 " segments, cap %llu): "
                  "NULL, errno %d",
                  s1.large_cache_spans, s1.segments, cap, e);
    ck_assert_msg(s2.segments <= cap, "segments %" PRIu64 " > cap %llu", s2.segments, cap);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("segment_cap");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_segment_cap_exhaustion, 0,
                        (int)(sizeof cap_sizes / sizeof cap_sizes[0]));
    tcase_add_test(tc, test_segment_cap_enomem_reported_once);
    tcase_add_test(tc, test_segment_cap_two_threads);
    tcase_add_test(tc, test_cached_spans_count_against_cap);
    suite_add_tcase(s, tc);

    tc = st_optional_case(s, "rss", rss_why_not);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rss_falls_after_free_eager);
    tcase_add_test(tc, test_rss_falls_eager_without_trim);

    tc = tcase_create("large_cache");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, large_cache_no_expiry, NULL);
    tcase_add_test(tc, test_large_cache_hit_no_mapping);
    tcase_add_test(tc, test_large_cache_knobs);
    tcase_add_test(tc, test_large_cache_reuse_smaller_counts_tail);
    tcase_add_test(tc, test_large_cache_splits_and_merges);
    suite_add_tcase(s, tc);

    return st_main(s, argc, argv);
}
