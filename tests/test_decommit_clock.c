/* test_decommit_clock.c - what the time-driven policies do, on a clock the
 * test steps itself (test limits-decommit).
 *
 * This program links the variant of libsefer built with
 * -DSEFER_FAULT_INJECTION (tests/meson.build), whose sefer_test_clock_ms()
 * freezes sefer's clock.  Every case sets the clock, does its work, moves
 * the clock on by a set number of decommit.delays and only then calls what
 * looks at the time (page allocations, a large-cache operation): the
 * outcome is the same on a fast machine, a loaded one and under a
 * sanitizer, and no case sleeps.  (The first two cases were in
 * test_limits.c, where the delay was sized from one timed fill and the
 * idle times were real sleeps: under ASan on a busy machine the timing
 * decided the verdict.)
 *
 *   adaptive_keeps_what_is_reused  a program fills 16 MiB of small blocks,
 *       frees them and idles 2.5 delays, over and over: with delayed every
 *       cycle gives its pages back (>= 8 MiB a cycle), with adaptive the
 *       pages the last bursts used stay (at most 1/8 of delayed's)
 *   adaptive_gives_back_idle  the same, then an idle time past the window
 *       of 8 delays: the memory goes back (>= 8 MiB)
 *   adaptive_window_edge_in, _out  the window exactly: a burst's pages
 *       stay while its interval is one of the last 8 (nothing goes back
 *       7.5 delays later) and go back once it is not (8.5 delays later)
 *   delayed_edge_before, _after  delayed gives nothing back 1 ms before
 *       decommit.delay has passed, and the burst's pages 1 ms after
 *   large_cache_ttl  a cached span stays until large_cache.ttl has passed,
 *       and is unmapped at the first cache operation after
 *   growth_reuses_other_sizes  16 MiB of small blocks freed, then 16 MiB of
 *       medium blocks, then of 4 MiB blocks, with the clock stopped (no
 *       deadline passes, the adaptive window keeps everything): each phase
 *       serves itself from what the last one freed; the RSS at each phase's
 *       peak stays within 3 MiB and one warm 4 MiB span of the first
 *       phase's (and of 1/8 more under ASan, whose shadow of a new range
 *       is new memory); the library before peaked 32 MiB higher
 *   growth_takes_resident_memory_first  a decommitted span waits in the
 *       large cache and the heap's empty small segments are resident: a
 *       phase of medium blocks takes the segments (nothing shed), not the
 *       span (13 MiB shed and decommitted before)
 *   growth_reuses_warm_large_span  warm spans of 1 MiB blocks cached, then
 *       rounds of 8 MiB of 64 B blocks freed and a 1 MiB block: the warm
 *       spans serve the blocks and the heap keeps its segments, nothing
 *       decommitted or shed (about 4 MiB a round when a span had to be
 *       resident to its end)
 *   growth_sheds_waiting_pages  pages waiting in segments still in use
 *       cannot serve a span: mapping it gives back as much of them at once
 *       (bytes_shed_on_growth), except with decommit.policy = never
 *   growth_sheds_free_medium_blocks  16 blocks of 48 KiB written and
 *       freed (one more keeps their page in use), then 12 of 64 KiB carved
 *       on a fresh page: the freed blocks' interior pages go back but for
 *       the block the class hands out next (bytes_shed_on_growth, mincore), their
 *       headers stay (sefer_check), and the 64 KiB blocks freed and taken
 *       again (no carving) shed nothing more; none with decommit.policy =
 *       never
 *   growth_shed_stops_at_a_broken_link  the same, with a freed block's link
 *       rewritten (a write after free) to name a live block of the page:
 *       the live block's bytes are all still there after the carves
 *   trim_sheds_free_medium_blocks  the same 16 blocks freed, then
 *       sefer_trim, under decommit.policy = never: every interior page goes
 *       back, the list heads' too, and counts in what sefer_trim returns
 *   exited_keep_*  a thread fills 8 MiB, frees it and exits: its heap
 *       keeps between 1 MiB and decommit.exited_keep (2 MiB) of empty
 *       pages for an adopter and gives the rest back at the exit; none with
 *       0; 6 MiB or more with room for 64 MiB (the control); and the thread
 *       that adopts the heap takes them over (bytes_exited_waiting 0)
 *   cache_max_*  threads.cache_max bounds the waiting pages of every heap
 *       together, live threads' included: a thread fills 24 MiB, frees it
 *       and sleeps (nothing of its own will purge its heap again); two
 *       delays later, with the bound at 8 MiB, the main thread's next page
 *       operations give the sleeping thread's pages back at once
 *       (bytes_waiting <= 8 MiB, at least one cache_max purge) while the
 *       main thread's own pages, within their delay, stay (filling them
 *       again commits nothing); with 0 all of the sleeping thread's go
 *       and only the main thread's recent ones wait; with room for 64 MiB
 *       both threads' pages wait (the control: the library before the
 *       bound kept them all), and so they do at 8 MiB before their
 *       delay has passed
 *
 * Prefixed API only, so it runs in every build (the ASan build runs the
 * tests named limits*).  Each case runs in its own forked child (CK_FORK):
 * the frozen clock and the knobs do not leak. */
#define _GNU_SOURCE
#include "sefer_test.h"

#ifndef SEFER_FAULT_INJECTION
#error "test_decommit_clock.c needs the fault-injection variant of libsefer (sefer_test_clock_ms)"
#endif

/* ---- the clock ------------------------------------------------------------ */

#define DELAY_MS 100u /* decommit.delay in every case: any value would do */
static uint64_t clock_ms;

/* Freezes sefer's clock at a round time ahead of the real one (so no time
 * sefer noted before the case is later than it, and interval boundaries,
 * multiples of decommit.delay, fall on round numbers). */
static void clock_start(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t real = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    clock_ms = (real / 3600000u + 2) * 3600000u;
    sefer_test_clock_ms(clock_ms);
}

static void clock_advance(uint64_t ms)
{
    clock_ms += ms;
    sefer_test_clock_ms(clock_ms);
}

static void set_policy(const char *policy)
{
    char text[32];
    snprintf(text, sizeof text, "%ums", DELAY_MS);
    ST_KNOB_SET("decommit.policy", policy);
    ST_KNOB_SET("decommit.delay", text);
}

static uint64_t decommitted(void)
{
    return st_stats().bytes_decommitted_total;
}

/* ---- the workload ---------------------------------------------------------- */

/* 256-byte blocks: small ones, 256 to a 64 KiB page, and few enough calls
 * that a fill is quick under ASan too (the test of test_limits.c this came
 * from used 64-byte ones, 4 times as many calls for the same pages) */
#define BLOCK 256
#define CYCLE_BLOCKS (16 * 1024 * 1024 / BLOCK)
static void **cycle_v;

static void fill(int c)
{
    if (cycle_v == NULL)
        cycle_v = st_map(CYCLE_BLOCKS * sizeof *cycle_v);
    for (size_t i = 0; i < CYCLE_BLOCKS; i++) {
        cycle_v[i] = sefer_malloc(BLOCK);
        if (cycle_v[i] == NULL) /* (not ck_assert: a passing one is a write to check's pipe) */
            ck_abort_msg("block %zu of a fill: NULL, errno %d", i, errno);
        memset(cycle_v[i], c, BLOCK);
    }
}

static void free_fill(void)
{
    for (size_t i = 0; i < CYCLE_BLOCKS; i++)
        sefer_free(cycle_v[i]);
}

/* `cycles` bursts of 16 MiB of small blocks, each freed and followed by
 * 2.5 delays of idle time; returns what the last `measured` of them gave
 * back, per cycle.  The decommits due after a cycle happen at the next
 * cycle's page allocations (no background purger: decommit.c), so the
 * measure ends after one more fill. */
static uint64_t decommitted_per_cycle(int cycles, int measured)
{
    uint64_t before = 0;
    for (int c = 0; c < cycles; c++) {
        if (c == cycles - measured)
            before = decommitted();
        fill(c);
        free_fill();
        clock_advance(DELAY_MS * 5 / 2);
    }
    fill(cycles);
    uint64_t got = (decommitted() - before) / (uint64_t)measured;
    free_fill();
    return got;
}

/* The purge points: page allocations (every 16th looks at the purge queue:
 * 512 blocks of 4 KiB are 32 pages) and a large-cache operation (a span). */
static void purge_points(void)
{
    void *v[512];
    for (int i = 0; i < 512; i++) {
        v[i] = sefer_malloc(4096);
        ck_assert_ptr_nonnull(v[i]);
    }
    for (int i = 0; i < 512; i++)
        sefer_free(v[i]);
    sefer_free(sefer_malloc(ST_MIB));
}

/* Moves the clock to the next interval boundary (a multiple of the delay). */
static void clock_to_boundary(void)
{
    if (clock_ms % DELAY_MS)
        clock_advance(DELAY_MS - clock_ms % DELAY_MS);
}

/* ---- cases ---------------------------------------------------------------- */

/* decommit.policy = adaptive against delayed: a program that fills 16 MiB
 * of small blocks, frees them all and idles for 2.5 delays, over and over.
 * With delayed every cycle gives the pages back and faults them in again;
 * with adaptive the pages the last burst took (within the last 8 delays)
 * stay. */
START_TEST(test_decommit_adaptive_keeps_what_is_reused)
{
    clock_start();
    set_policy("delayed");
    uint64_t delayed = decommitted_per_cycle(4, 2);
    set_policy("adaptive");
    uint64_t adaptive = decommitted_per_cycle(8, 2);
    printf("decommitted per idle cycle of 16 MiB: delayed %" PRIu64 " bytes, adaptive %" PRIu64 " bytes\n",
           delayed, adaptive);
    ck_assert_msg(delayed >= 8 * ST_MIB, "policy delayed gave back only %" PRIu64 " bytes per cycle", delayed);
    ck_assert_msg(adaptive <= delayed / 8,
                  "policy adaptive still gives back %" PRIu64 " bytes per cycle (delayed: %" PRIu64 ")", adaptive,
                  delayed);
}
END_TEST

/* ... and an idle program still gets its memory back: after the cycles
 * above, an idle time longer than the window (8 delays) decommits them. */
START_TEST(test_decommit_adaptive_gives_back_idle)
{
    clock_start();
    set_policy("adaptive");
    decommitted_per_cycle(6, 1);
    fill(0);
    free_fill();
    uint64_t before = decommitted();
    clock_advance(DELAY_MS * 12); /* past the window of 8 delays */
    purge_points();
    uint64_t got = decommitted() - before;
    printf("after %u ms idle: %" PRIu64 " bytes went back\n", DELAY_MS * 12, got);
    ck_assert_msg(got >= 8 * ST_MIB, "after %u ms idle only %" PRIu64 " bytes went back", DELAY_MS * 12, got);
}
END_TEST

/* One burst of 16 MiB at the start of an interval of decommit.delay, freed;
 * the clock moved on by `later` ms; then the purge points, arranged to
 * have no side effects of their own: blocks of the burst's size for 18
 * pages, kept live until the measure, take pages of their class back from
 * the purge queue (one of every 16 page allocations looks at the queue;
 * nothing is trimmed for another class, and no page or segment is freed,
 * which would put a segment in the large cache and merge it with the
 * burst's there, making the whole as young as its youngest part), and the
 * free of a block taken before the burst is the large-cache operation (a
 * put, which takes no cached span and, the span freed last cooling apart
 * at guard level 1, merges none).  Returns what went back: only what the
 * clock says is due. */
#define PROBE_BLOCKS (18 * 65536 / BLOCK)
static uint64_t burst_then_probe(const char *policy, uint64_t later)
{
    static void *v[PROBE_BLOCKS];
    clock_start();
    set_policy(policy);
    void *big = sefer_malloc(ST_MIB); /* (its span is no part of the burst's memory) */
    ck_assert_ptr_nonnull(big);
    clock_to_boundary();
    fill(0);
    free_fill();
    uint64_t before = decommitted();
    clock_advance(later);
    for (int i = 0; i < PROBE_BLOCKS; i++)
        if ((v[i] = sefer_malloc(BLOCK)) == NULL)
            ck_abort_msg("block %d of the probe: NULL, errno %d", i, errno);
    sefer_free(big);
    uint64_t got = decommitted() - before;
    for (int i = 0; i < PROBE_BLOCKS; i++)
        sefer_free(v[i]);
    printf("%s: a burst of 16 MiB, %" PRIu64 " ms later: %" PRIu64 " bytes went back\n", policy, later, got);
    return got;
}

/* The window exactly (decommit.c: the peak of each of the last 8 intervals
 * of decommit.delay): a burst at the start of interval e stays committed
 * while e is in the window, through interval e + 7, and goes back in
 * interval e + 8, all of it but the pages the probe itself takes again
 * (18 of 64 KiB) and what a segment's metadata takes. */
START_TEST(test_decommit_adaptive_window_edge_in)
{
    uint64_t got = burst_then_probe("adaptive", 7 * DELAY_MS + DELAY_MS / 2);
    ck_assert_msg(got == 0, "adaptive: %" PRIu64 " bytes went back while the burst was in the window", got);
}
END_TEST

START_TEST(test_decommit_adaptive_window_edge_out)
{
    uint64_t got = burst_then_probe("adaptive", 8 * DELAY_MS + DELAY_MS / 2);
    ck_assert_msg(got >= 14 * ST_MIB, "adaptive: once the burst left the window, only %" PRIu64 " bytes of 16 MiB went back",
                  got);
}
END_TEST

/* delayed gives nothing back 1 ms before decommit.delay has passed, and the
 * burst's pages (but the probe's) 1 ms after. */
START_TEST(test_decommit_delayed_edge_before)
{
    uint64_t got = burst_then_probe("delayed", DELAY_MS - 1);
    ck_assert_msg(got == 0, "delayed: %" PRIu64 " bytes went back before decommit.delay", got);
}
END_TEST

START_TEST(test_decommit_delayed_edge_after)
{
    uint64_t got = burst_then_probe("delayed", DELAY_MS + 1);
    ck_assert_msg(got >= 14 * ST_MIB, "delayed: past decommit.delay only %" PRIu64 " bytes of 16 MiB went back", got);
}
END_TEST

/* large_cache.ttl: a cached span stays until it has been cached for the
 * ttl, and goes at the first cache operation after (a take that finds
 * nothing cached to fit, here). */
START_TEST(test_large_cache_ttl)
{
    ST_KNOB_SET("large_cache.ttl", "1000ms");
    sefer_trim(); /* an empty cache */
    clock_start();
    void *p = sefer_malloc(16 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    sefer_free(p);
    struct sefer_stats s0 = st_stats();
    ck_assert_uint_eq(s0.large_cache_spans, 1);
    clock_advance(999);
    void *q = sefer_malloc(32 * ST_MIB); /* bigger than what is cached: a miss */
    struct sefer_stats s1 = st_stats();
    clock_advance(1);
    void *r = sefer_malloc(32 * ST_MIB);
    struct sefer_stats s2 = st_stats();
    ck_assert(q != NULL && r != NULL);
    sefer_free(q);
    sefer_free(r);
    ck_assert_msg(s1.large_cache_spans == 1 && s1.large_cache_bytes == s0.large_cache_bytes,
                  "999 ms into a ttl of 1000 ms the cache holds %" PRIu64 " spans, %" PRIu64
                  " bytes (it held %" PRIu64 " bytes)",
                  s1.large_cache_spans, s1.large_cache_bytes, s0.large_cache_bytes);
    ck_assert_msg(s2.large_cache_spans == 0 && s2.large_cache_bytes == 0,
                  "once the ttl of 1000 ms was over the cache still held %" PRIu64 " spans, %" PRIu64 " bytes",
                  s2.large_cache_spans, s2.large_cache_bytes);
}
END_TEST

/* ---- growth (segment.c, "Growth") --------------------------------------------- */

/* `bytes` in blocks of `size`, written; v has room for bytes / size. */
static size_t phase_fill(void **v, size_t size, size_t bytes)
{
    size_t n = bytes / size;
    for (size_t i = 0; i < n; i++) {
        if ((v[i] = sefer_malloc(size)) == NULL)
            ck_abort_msg("block %zu of %zu B: NULL, errno %d", i, size, errno);
        memset(v[i], 0x5a, size);
    }
    return n;
}

static void phase_free(void **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sefer_free(v[i]);
}

/* The phases workload of bench/phases.c, small: before the growth rule the
 * medium phase mapped segments of its own beside the small phase's waiting
 * pages (RSS 16 MiB higher), and the 4 MiB phase spans beside both.  (RSS,
 * not bytes_committed: the large cache counts a merged span's committed
 * bytes as a prefix, an upper bound that can be well above what is
 * resident.) */
START_TEST(test_growth_reuses_other_sizes)
{
    static const size_t sizes[] = {64, 16384, 4 * ST_MIB, 1024, 256 * 1024};
    const size_t bytes = 16 * ST_MIB;
    void **v = st_map(bytes / 64 * sizeof *v);
    clock_start();
    set_policy("adaptive");
    sefer_trim();
    uint64_t base = st_rss();
    uint64_t peak[5], segs_after_first = 0;
    for (int ph = 0; ph < 5; ph++) {
        size_t n = phase_fill(v, sizes[ph], bytes);
        uint64_t rss = st_rss();
        peak[ph] = rss > base ? rss - base : 0;
        phase_free(v, n);
        if (ph == 0)
            segs_after_first = st_stats().segments_peak;
    }
    struct sefer_stats s = st_stats();
    printf("RSS above the start at each phase's peak:");
    for (int ph = 0; ph < 5; ph++)
        printf(" %zu B: %.1f MiB", sizes[ph], (double)peak[ph] / ST_MIB);
    printf("; segments peak %" PRIu64 " after the first phase, %" PRIu64 " at the end\n", segs_after_first,
           s.segments_peak);
    fflush(stdout);
    /* 3 MiB, and the span of the 4 MiB block freed last: the cache keeps
     * it warm, neither handed out nor shed, until the next span is put
     * back (cache.c, "cooling"); with a running clock the decommit policy
     * would age it out */
    uint64_t slack = 3 * ST_MIB + 4 * ST_MIB + 4096 + (ST_UNDER_SANITIZER ? bytes / 8 : 0);
    for (int ph = 1; ph < 5; ph++)
        ck_assert_msg(peak[ph] <= peak[0] + slack,
                      "the %zu B phase peaked at %" PRIu64 " bytes of RSS above the start, the 64 B phase at %" PRIu64,
                      sizes[ph], peak[ph], peak[0]);
}
END_TEST

/* Resident memory before memory the decommit policy emptied: a cached span
 * that was decommitted (decommit.policy = eager while it was put back)
 * waits beside a heap whose small segments sit empty with their pages
 * resident; a phase of medium blocks then needs segments.  The cache's
 * smallest fit alone gave it the decommitted span: its pages were faulted
 * in anew and as many of the small pages shed at once (13 MiB here, a
 * cycle of bench/phases 1.4x slower); taken first, the heap's own empty
 * segments serve it resident and nothing is shed. */
START_TEST(test_growth_takes_resident_memory_first)
{
    const size_t small_bytes = 32 * ST_MIB, medium_bytes = 12 * ST_MIB;
    void **v = st_map(small_bytes / 64 * sizeof *v);
    clock_start();
    ST_KNOB_SET("large_cache.ttl", "60min");
    sefer_trim();
    set_policy("eager"); /* (a span decommitted as it enters the cache) */
    void *big = sefer_malloc(64 * ST_MIB), *next = sefer_malloc(8 * ST_MIB);
    ck_assert(big != NULL && next != NULL);
    sefer_free(big);
    sefer_free(next); /* (the 64 MiB span no longer the one cooling) */
    set_policy("adaptive");
    size_t n = phase_fill(v, 64, small_bytes); /* (its segments: cut from the front of that span) */
    phase_free(v, n);
    struct sefer_stats s0 = st_stats();
    uint64_t rss0 = st_rss();
    n = phase_fill(v, 16384, medium_bytes);
    struct sefer_stats s1 = st_stats();
    uint64_t rss1 = st_rss();
    phase_free(v, n);
    uint64_t shed = s1.bytes_shed_on_growth - s0.bytes_shed_on_growth;
    uint64_t decommitted = s1.bytes_decommitted_total - s0.bytes_decommitted_total;
    printf("12 MiB of 16 KiB blocks after 32 MiB of 64 B blocks freed, a decommitted span cached: %" PRIu64
           " bytes shed, %" PRIu64 " decommitted, RSS %+.1f MiB\n",
           shed, decommitted, ((double)rss1 - (double)rss0) / ST_MIB);
    fflush(stdout);
    /* (the empty small segments hold about 28 MiB, room for all of it:
     * 0 bytes in the release build; 3 MiB of each in the UBSan build,
     * whose process allocates through sefer too, with 24 or 32 MiB of
     * small blocks alike, not explained; 13 MiB before) */
    ck_assert_msg(shed <= 4 * ST_MIB && decommitted <= 4 * ST_MIB,
                  "%" PRIu64 " bytes shed, %" PRIu64
                  " decommitted: the medium blocks took memory that was not resident",
                  shed, decommitted);
}
END_TEST

/* ... and a large block's warm span before the heap's empty segments.  A
 * span's slack past its block is never resident: asked whether its whole
 * span was, a warm span never was, so every large malloc took the heap's
 * empty small segments (and dropped their pages past the block) instead:
 * here 4 MiB decommitted and some 1000 faults a round, where the warm
 * span's reuse costs nothing (a review's find in f379d2d). */
START_TEST(test_growth_reuses_warm_large_span)
{
    const size_t small_bytes = 8 * ST_MIB;
    void **v = st_map(small_bytes / 64 * sizeof *v);
    clock_start();
    ST_KNOB_SET("large_cache.ttl", "60min");
    sefer_trim();
    set_policy("adaptive");
    void *warm[6]; /* (warm spans in the cache: one cooling, five to take) */
    for (int i = 0; i < 6; i++) {
        ck_assert_ptr_nonnull(warm[i] = sefer_malloc(ST_MIB));
        memset(warm[i], 0x5a, ST_MIB);
    }
    for (int i = 0; i < 6; i++)
        sefer_free(warm[i]);
    struct sefer_stats s0 = {0};
    for (int round = 0; round < 10; round++) {
        if (round == 4) /* (the first rounds make the heap's segments) */
            s0 = st_stats();
        size_t n = phase_fill(v, 64, small_bytes);
        phase_free(v, n);
        void *p = sefer_malloc(ST_MIB);
        ck_assert_ptr_nonnull(p);
        memset(p, 0x5a, ST_MIB);
        sefer_free(p);
    }
    struct sefer_stats s1 = st_stats();
    uint64_t decommitted = s1.bytes_decommitted_total - s0.bytes_decommitted_total;
    uint64_t shed = s1.bytes_shed_on_growth - s0.bytes_shed_on_growth;
    printf("6 rounds of 8 MiB of 64 B blocks freed, then a 1 MiB block, warm spans cached: %" PRIu64
           " bytes decommitted, %" PRIu64 " shed\n",
           decommitted, shed);
    fflush(stdout);
    ck_assert_msg(decommitted == 0 && shed == 0,
                  "%" PRIu64 " bytes decommitted, %" PRIu64 " shed: the warm spans were not reused",
                  decommitted, shed);
}
END_TEST

/* Segments kept in use by one block each, their other pages emptied: the
 * pages wait (the clock is stopped) and no segment goes to the cache.  A
 * span of 24 MiB then has to be mapped: as much of the waiting pages goes
 * back at once. */
static uint64_t shed_by_span(const char *policy, uint64_t *committed_drop)
{
    const size_t bytes = 32 * ST_MIB, size = 256, per_segment = 4 * ST_MIB / size;
    void **v = st_map(bytes / size * sizeof *v);
    clock_start();
    set_policy(policy);
    sefer_trim();
    size_t n = phase_fill(v, size, bytes);
    for (size_t i = 0; i < n; i++)
        if (i % (per_segment / 2) != 0) {
            sefer_free(v[i]);
            v[i] = NULL;
        }
    struct sefer_stats s0 = st_stats();
    void *big = sefer_malloc(24 * ST_MIB);
    ck_assert_ptr_nonnull(big);
    struct sefer_stats s1 = st_stats();
    *committed_drop = s0.bytes_committed + 24 * ST_MIB > s1.bytes_committed
                          ? s0.bytes_committed + 24 * ST_MIB - s1.bytes_committed
                          : 0;
    sefer_free(big);
    for (size_t i = 0; i < n; i++)
        sefer_free(v[i]);
    uint64_t shed = s1.bytes_shed_on_growth - s0.bytes_shed_on_growth;
    printf("%s: a 24 MiB span mapped beside ~30 MiB of waiting pages: %" PRIu64 " bytes shed, committed %" PRIu64
           " bytes below the sum\n",
           policy, shed, *committed_drop);
    return shed;
}

START_TEST(test_growth_sheds_waiting_pages)
{
    uint64_t drop = 0, shed = shed_by_span("adaptive", &drop);
    ck_assert_msg(shed >= 24 * ST_MIB, "adaptive: mapping 24 MiB shed only %" PRIu64 " bytes", shed);
    ck_assert_msg(drop >= 24 * ST_MIB, "adaptive: committed memory only %" PRIu64 " bytes below the sum", drop);
}
END_TEST

START_TEST(test_growth_sheds_nothing_with_policy_never)
{
    uint64_t drop = 0, shed = shed_by_span("never", &drop);
    ck_assert_msg(shed == 0, "never: %" PRIu64 " bytes shed", shed);
}
END_TEST

/* ---- freed medium blocks ------------------------------------------------------- */

#define SHED_A (48u << 10) /* a medium class, 21 blocks a page */
#define SHED_B (64u << 10) /* another, carved on a fresh page */
#define SHED_NA 16
#define SHED_NB 12

/* Resident OS pages of free medium block p's interior: past the page that
 * holds its header, up to its last whole page (medium_shed.c). */
static size_t interior_resident(const void *p, size_t size)
{
    uintptr_t lo = ((uintptr_t)p + 24 + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)p + size) & ~(uintptr_t)4095;
    unsigned char vec[64];
    ck_assert(hi > lo && (hi - lo) / 4096 <= sizeof vec);
    ck_assert_int_eq(mincore((void *)lo, hi - lo, vec), 0);
    size_t n = 0;
    for (size_t i = 0; i < (hi - lo) / 4096; i++)
        n += vec[i] & 1;
    return n;
}

/* Under `policy` on a stopped clock, with no cached span left to cut a
 * segment from: SHED_NA + 1 blocks of SHED_A written, all but the last
 * freed (it keeps their page in use).  Returns the freed blocks' interior
 * pages resident. */
static size_t medium_blocks_freed(const char *policy, void *a[SHED_NA + 1])
{
    clock_start();
    set_policy(policy);
    sefer_trim();
    for (int i = 0; i <= SHED_NA; i++) {
        a[i] = sefer_malloc(SHED_A);
        ck_assert_ptr_nonnull(a[i]);
        memset(a[i], 0x5a, SHED_A);
    }
    size_t resident = 0;
    for (int i = 0; i < SHED_NA; i++) {
        sefer_free(a[i]);
        resident += interior_resident(a[i], SHED_A);
    }
    return resident;
}

struct medium_shed_result {
    uint64_t shed, shed_again;
    size_t resident_before, resident_after;
};

static struct medium_shed_result shed_by_carving(const char *policy)
{
    struct medium_shed_result r = {0};
    void *a[SHED_NA + 1], *b[SHED_NB];
    r.resident_before = medium_blocks_freed(policy, a);
    struct sefer_stats s0 = st_stats();
    for (int i = 0; i < SHED_NB; i++) {
        b[i] = sefer_malloc(SHED_B);
        ck_assert_ptr_nonnull(b[i]);
        memset(b[i], 0x6b, SHED_B);
    }
    struct sefer_stats s1 = st_stats();
    for (int i = 0; i < SHED_NA; i++)
        r.resident_after += interior_resident(a[i], SHED_A);
    ck_assert_int_eq(sefer_check(), 0);
    /* a steady state: the same blocks again, from the free lists */
    for (int i = 1; i < SHED_NB; i++)
        sefer_free(b[i]);
    for (int i = 1; i < SHED_NB; i++) {
        b[i] = sefer_malloc(SHED_B);
        memset(b[i], 0x7c, SHED_B);
    }
    struct sefer_stats s2 = st_stats();
    r.shed = s1.bytes_shed_on_growth - s0.bytes_shed_on_growth;
    r.shed_again = s2.bytes_shed_on_growth - s1.bytes_shed_on_growth;
    /* the shed blocks serve again like any other */
    for (int i = 0; i < SHED_NA; i++) {
        a[i] = sefer_malloc(SHED_A);
        ck_assert_ptr_nonnull(a[i]);
        memset(a[i], 0x2d, SHED_A);
    }
    ck_assert_int_eq(sefer_check(), 0);
    for (int i = 0; i <= SHED_NA; i++)
        sefer_free(a[i]);
    for (int i = 0; i < SHED_NB; i++)
        sefer_free(b[i]);
    printf("%s: %d blocks of 48 KiB freed, then %d of 64 KiB carved: %" PRIu64
           " bytes shed (%" PRIu64 " more when taken again), interior pages resident %zu -> %zu\n",
           policy, SHED_NA, SHED_NB, r.shed, r.shed_again, r.resident_before, r.resident_after);
    fflush(stdout);
    return r;
}

START_TEST(test_growth_sheds_free_medium_blocks)
{
    struct medium_shed_result r = shed_by_carving("adaptive");
    /* all but the block the class hands out next (the bound allows two:
     * it was written when each list's head stayed), each block 11 or 12
     * pages */
    ck_assert_uint_ge(r.resident_before, SHED_NA * 11);
    ck_assert_msg(r.resident_after <= 2 * 12, "%zu interior pages of the freed blocks still resident",
                  r.resident_after);
    ck_assert_msg(r.shed >= (SHED_NA - 2) * 11 * 4096u, "only %" PRIu64 " bytes shed", r.shed);
    ck_assert_msg(r.shed_again == 0, "%" PRIu64 " bytes shed by blocks taken again", r.shed_again);
}
END_TEST

START_TEST(test_growth_sheds_no_medium_block_with_policy_never)
{
    struct medium_shed_result r = shed_by_carving("never");
    ck_assert_msg(r.shed == 0 && r.resident_after == r.resident_before,
                  "never: %" PRIu64 " bytes shed, interior pages resident %zu -> %zu", r.shed,
                  r.resident_before, r.resident_after);
}
END_TEST

/* A write after free into a freed block's link (levels 0-1 do not check
 * links until the block is handed out) points at a live block of the same
 * page: the next carve's walk stops there rather than shed the live
 * block's pages. */
START_TEST(test_growth_shed_stops_at_a_broken_link)
{
    void *a[SHED_NA + 1], *b[SHED_NB];
    medium_blocks_freed("adaptive", a);
    unsigned char *live = a[SHED_NA];
    /* freed in order, so a[SHED_NA - 1] heads the list and a[SHED_NA - 2]
     * is the first block a walk sheds; its link, rewritten, names the live
     * block */
    void **link = a[SHED_NA - 2], *saved = *link;
    *link = live;
    for (int i = 0; i < SHED_NB; i++) {
        b[i] = sefer_malloc(SHED_B);
        ck_assert_ptr_nonnull(b[i]);
    }
    size_t zeroed = 0;
    for (size_t i = 0; i < SHED_A; i++)
        zeroed += live[i] != 0x5a;
    *link = saved;
    printf("a broken link naming a live block: %zu of its bytes changed\n", zeroed);
    fflush(stdout);
    ck_assert_msg(zeroed == 0, "%zu bytes of the live block changed by the shed", zeroed);
    ck_assert_int_eq(sefer_check(), 0);
    for (int i = 0; i < SHED_NB; i++)
        sefer_free(b[i]);
    sefer_free(live);
}
END_TEST

/* sefer_trim gives back every free medium block's pages, the list heads
 * too, whatever the policy. */
START_TEST(test_trim_sheds_free_medium_blocks)
{
    void *a[SHED_NA + 1];
    size_t before = medium_blocks_freed("never", a), after = 0;
    size_t released = sefer_trim();
    for (int i = 0; i < SHED_NA; i++)
        after += interior_resident(a[i], SHED_A);
    printf("sefer_trim with %d free blocks of 48 KiB: %zu bytes released, interior pages resident %zu -> %zu\n",
           SHED_NA, released, before, after);
    fflush(stdout);
    ck_assert_uint_ge(before, SHED_NA * 11);
    ck_assert_msg(after == 0, "%zu interior pages still resident after sefer_trim", after);
    ck_assert_uint_ge(released, before * 4096);
    ck_assert_int_eq(sefer_check(), 0);
    sefer_free(a[SHED_NA]);
}
END_TEST

/* ---- exited threads ---------------------------------------------------------- */

#define EXIT_BLOCKS 8192 /* 8 MiB of 1 KiB blocks, written, all freed */

static void *fill_free_exit(void *arg)
{
    (void)arg;
    static void *v[EXIT_BLOCKS];
    for (size_t i = 0; i < EXIT_BLOCKS; i++) {
        v[i] = sefer_malloc(1024);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], 0x5a, 1024);
    }
    for (size_t i = 0; i < EXIT_BLOCKS; i++)
        sefer_free(v[i]);
    return NULL;
}

static void run_thread(void *(*fn)(void *))
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fn, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
}

/* A thread fills 8 MiB and frees it all, then exits, with the clock
 * stopped (no deadline passes) and the adaptive policy (which keeps a live
 * heap's pages for its recent peak): what its heap keeps waiting for an
 * adopter is decommit.exited_keep, and the rest is given back at the exit. */
static struct sefer_stats exited_with_keep(const char *keep, uint64_t *committed_rise)
{
    clock_start();
    set_policy("adaptive");
    ST_KNOB_SET("decommit.exited_keep", keep);
    struct sefer_stats s0 = st_stats();
    run_thread(fill_free_exit);
    struct sefer_stats s1 = st_stats();
    *committed_rise = s1.bytes_committed > s0.bytes_committed ? s1.bytes_committed - s0.bytes_committed : 0;
    printf("decommit.exited_keep = %s: %" PRIu64 " bytes waiting for an adopter, committed %" PRIu64
           " bytes above the start\n",
           keep, s1.bytes_exited_waiting, *committed_rise);
    return s1;
}

START_TEST(test_exited_keep_bounds_waiting_pages)
{
    uint64_t rise = 0;
    struct sefer_stats s = exited_with_keep("2MiB", &rise);
    ck_assert_msg(s.bytes_exited_waiting <= 2 * ST_MIB, "%" PRIu64 " bytes waiting, past the 2 MiB bound",
                  s.bytes_exited_waiting);
    ck_assert_msg(s.bytes_exited_waiting >= ST_MIB, "only %" PRIu64 " bytes kept of the 2 MiB allowed",
                  s.bytes_exited_waiting);
    /* (segment headers and the large cache's share come on top) */
    ck_assert_msg(rise <= 3 * ST_MIB, "committed memory %" PRIu64 " bytes above the start", rise);
}
END_TEST

START_TEST(test_exited_keep_zero_gives_all_back)
{
    uint64_t rise = 0;
    struct sefer_stats s = exited_with_keep("0", &rise);
    ck_assert_msg(s.bytes_exited_waiting == 0, "%" PRIu64 " bytes waiting with a bound of 0", s.bytes_exited_waiting);
    ck_assert_msg(rise <= ST_MIB, "committed memory %" PRIu64 " bytes above the start", rise);
}
END_TEST

/* The control: with room for all of it, the exited thread's pages wait. */
START_TEST(test_exited_keep_large_keeps_pages)
{
    uint64_t rise = 0;
    struct sefer_stats s = exited_with_keep("64MiB", &rise);
    ck_assert_msg(s.bytes_exited_waiting >= 6 * ST_MIB, "only %" PRIu64 " bytes waiting with room for 64 MiB",
                  s.bytes_exited_waiting);
}
END_TEST

static void *one_block(void *arg)
{
    (void)arg;
    struct sefer_stats before = st_stats();
    void *p = sefer_malloc(1024); /* (this thread's heap: the exited one's, adopted) */
    ck_assert_ptr_nonnull(p);
    struct sefer_stats after = st_stats();
    sefer_free(p);
    printf("adopter: %" PRIu64 " bytes waiting before its first malloc, %" PRIu64 " after\n",
           before.bytes_exited_waiting, after.bytes_exited_waiting);
    ck_assert_msg(after.bytes_exited_waiting == 0, "the adopted heap's %" PRIu64 " waiting bytes still counted",
                  after.bytes_exited_waiting);
    return NULL;
}

/* A thread that adopts the heap takes its waiting pages over: they are no
 * longer counted against the bound (and serve it without a fault). */
START_TEST(test_exited_keep_adopter_takes_over)
{
    uint64_t rise = 0;
    struct sefer_stats s = exited_with_keep("64MiB", &rise);
    ck_assert_uint_gt(s.bytes_exited_waiting, 0);
    run_thread(one_block);
}
END_TEST

/* ---- threads.cache_max -------------------------------------------------------- */

#define PARKED_BYTES (24u * 1024 * 1024)
static pthread_barrier_t parked;

/* Fills 24 MiB of 1 KiB blocks, frees them (its pages wait: the clock is
 * stopped) and sleeps on the barrier until the main thread is done. */
static void *fill_free_park(void *arg)
{
    (void)arg;
    size_t n = PARKED_BYTES / 1024;
    void **v = st_map(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        if ((v[i] = sefer_malloc(1024)) == NULL)
            ck_abort_msg("block %zu: NULL, errno %d", i, errno);
        memset(v[i], 0x6b, 1024);
    }
    for (size_t i = 0; i < n; i++)
        sefer_free(v[i]);
    pthread_barrier_wait(&parked); /* 1: its pages wait */
    pthread_barrier_wait(&parked); /* 2: the main thread measured */
    return NULL;
}

#define MAIN_BLOCKS 1024 /* 4 MiB of 4 KiB blocks: another class, the main thread's own pages */
static void *main_v[MAIN_BLOCKS];

static void main_fill(void)
{
    for (size_t i = 0; i < MAIN_BLOCKS; i++) {
        if ((main_v[i] = sefer_malloc(4096)) == NULL)
            ck_abort_msg("block %zu: NULL, errno %d", i, errno);
        memset(main_v[i], 0x2c, 4096);
    }
}

static void main_free(void)
{
    for (size_t i = 0; i < MAIN_BLOCKS; i++)
        sefer_free(main_v[i]);
}

/* The thread's 24 MiB wait (with room for them); then threads.cache_max is
 * set to `max`, the clock moves on by `delays` decommit.delays, and the
 * main thread fills and frees 4 MiB of its own.  Returns the statistics
 * after that free; *refill_rise: committed memory added by filling the
 * 4 MiB again. */
static struct sefer_stats parked_thread_then(const char *max, unsigned delays, uint64_t *refill_rise)
{
    clock_start();
    set_policy("adaptive");
    ST_KNOB_SET("threads.cache_max", "64MiB");
    ck_assert_int_eq(pthread_barrier_init(&parked, NULL, 2), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fill_free_park, NULL), 0);
    pthread_barrier_wait(&parked); /* 1 */
    struct sefer_stats s0 = st_stats();
    ck_assert_msg(s0.bytes_waiting >= PARKED_BYTES - ST_MIB, "the sleeping thread's pages do not wait: %" PRIu64 " B",
                  s0.bytes_waiting);
    ST_KNOB_SET("threads.cache_max", max);
    clock_advance(DELAY_MS * delays);
    main_fill();
    main_free();
    struct sefer_stats s1 = st_stats();
    main_fill();
    struct sefer_stats s2 = st_stats();
    main_free();
    pthread_barrier_wait(&parked); /* 2 */
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    *refill_rise = s2.bytes_committed > s1.bytes_committed ? s2.bytes_committed - s1.bytes_committed : 0;
    printf("threads.cache_max = %s, %u delays later: %" PRIu64 " B waiting before, %" PRIu64
           " B after the main thread's pages; %" PRIu64 " purges gave back %" PRIu64
           " B; filling 4 MiB again committed %" PRIu64 " B\n",
           max, delays, s0.bytes_waiting, s1.bytes_waiting, ST_DELTA(s1, s0, cache_max_purges),
           ST_DELTA(s1, s0, bytes_cache_max_purged), *refill_rise);
    fflush(stdout);
    return s1;
}

START_TEST(test_cache_max_purges_sleeping_thread)
{
    uint64_t rise = 0;
    struct sefer_stats s = parked_thread_then("8MiB", 2, &rise);
    ck_assert_msg(s.bytes_waiting <= 8 * ST_MIB, "%" PRIu64 " B waiting, past the 8 MiB bound", s.bytes_waiting);
    ck_assert_uint_ge(s.cache_max_purges, 1);
    ck_assert_msg(s.bytes_cache_max_purged >= 16 * ST_MIB, "only %" PRIu64 " B purged", s.bytes_cache_max_purged);
    /* the main thread's pages are within their delay: they stay */
    ck_assert_msg(rise <= ST_MIB, "filling its 4 MiB again committed %" PRIu64 " B: its own pages were purged", rise);
}
END_TEST

/* Within their delay the sleeping thread's pages stay, bound or not. */
START_TEST(test_cache_max_keeps_pages_within_delay)
{
    uint64_t rise = 0;
    struct sefer_stats s = parked_thread_then("8MiB", 0, &rise);
    ck_assert_msg(s.bytes_waiting >= PARKED_BYTES, "only %" PRIu64 " B waiting: pages within their delay purged",
                  s.bytes_waiting);
    ck_assert_uint_eq(s.bytes_cache_max_purged, 0);
}
END_TEST

START_TEST(test_cache_max_large_keeps_all)
{
    uint64_t rise = 0;
    struct sefer_stats s = parked_thread_then("64MiB", 2, &rise);
    ck_assert_msg(s.bytes_waiting >= PARKED_BYTES + 3 * ST_MIB, "only %" PRIu64 " B waiting with room for 64 MiB",
                  s.bytes_waiting);
    ck_assert_uint_eq(s.cache_max_purges, 0);
}
END_TEST

START_TEST(test_cache_max_zero_keeps_none)
{
    uint64_t rise = 0;
    struct sefer_stats s = parked_thread_then("0", 2, &rise);
    /* (the main thread's 4 MiB, within their delay, and segment slack) */
    ck_assert_msg(s.bytes_waiting <= 5 * ST_MIB, "%" PRIu64 " B waiting with a bound of 0", s.bytes_waiting);
    ck_assert_msg(s.bytes_cache_max_purged >= PARKED_BYTES - ST_MIB, "only %" PRIu64 " B purged",
                  s.bytes_cache_max_purged);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("limits-decommit");
    TCase *tc = tcase_create("decommit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_decommit_adaptive_keeps_what_is_reused);
    tcase_add_test(tc, test_decommit_adaptive_gives_back_idle);
    tcase_add_test(tc, test_decommit_adaptive_window_edge_in);
    tcase_add_test(tc, test_decommit_adaptive_window_edge_out);
    tcase_add_test(tc, test_decommit_delayed_edge_before);
    tcase_add_test(tc, test_decommit_delayed_edge_after);
    tcase_add_test(tc, test_large_cache_ttl);
    tcase_add_test(tc, test_growth_reuses_other_sizes);
    tcase_add_test(tc, test_growth_takes_resident_memory_first);
    tcase_add_test(tc, test_growth_reuses_warm_large_span);
    tcase_add_test(tc, test_growth_sheds_waiting_pages);
    tcase_add_test(tc, test_growth_sheds_nothing_with_policy_never);
    tcase_add_test(tc, test_growth_sheds_free_medium_blocks);
    tcase_add_test(tc, test_growth_sheds_no_medium_block_with_policy_never);
    tcase_add_test(tc, test_growth_shed_stops_at_a_broken_link);
    tcase_add_test(tc, test_trim_sheds_free_medium_blocks);
    tcase_add_test(tc, test_exited_keep_bounds_waiting_pages);
    tcase_add_test(tc, test_exited_keep_zero_gives_all_back);
    tcase_add_test(tc, test_exited_keep_large_keeps_pages);
    tcase_add_test(tc, test_exited_keep_adopter_takes_over);
    tcase_add_test(tc, test_cache_max_purges_sleeping_thread);
    tcase_add_test(tc, test_cache_max_keeps_pages_within_delay);
    tcase_add_test(tc, test_cache_max_large_keeps_all);
    tcase_add_test(tc, test_cache_max_zero_keeps_none);
    suite_add_tcase(s, tc);
    return st_main(s, argc, argv);
}
