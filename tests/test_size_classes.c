/* test_size_classes.c - the size-class boundaries under random traffic
 * (issue 19): sizes from 1 B to 256 KiB in random order, with checksummed
 * blocks, single-thread and with cross-thread frees, and sefer_check()
 * clean after each part.  One check case per part (CK_RUN_CASE=NAME runs
 * one alone):
 *
 *   level          the guard level asked for is the one running
 *   every-size     every size of every class (1 B to 256 KiB) once, and a
 *                  sample of the span sizes up to 512 KiB, in a shuffled
 *                  order (Fisher-Yates, fixed seed), kept live in windows
 *                  and freed half a window at a time in another random
 *                  order; each block 16-byte aligned, malloc_usable_size
 *                  >= n (and unchanged at free), its pattern intact over
 *                  its usable size when it is freed; sefer_check every 16
 *                  windows and at the end
 *   realloc        realloc across every class boundary, grown and shrunk,
 *                  from each class's last size, its neighbours and a size
 *                  within 32 bytes, then a random walk of reallocs among
 *                  64 live blocks: the bytes both sizes share survive
 *   cross-thread   four threads allocate random sizes and hand every block
 *                  to another thread (all directions), which checks it,
 *                  reallocs one in eight, and frees it; afterwards live
 *                  blocks and bytes_in_blocks are exactly where they were
 *   bursts         bursts of blocks of one class (or of random sizes) all
 *                  allocated, then all freed, thousands of times, so that a
 *                  class's current page goes empty and is used again (the
 *                  page kept with a bias on its `used` count), a quarter of
 *                  them freed by another thread, sefer_trim now and then;
 *                  sefer_check every 64 bursts
 *
 * The size classes are docs/design.md's ("Size classes"): 16-byte steps to
 * 128 B, then 5, 6, 7, 8 x 2^k up to 256 KiB; above that, spans.  The test
 * only uses them to pick the sizes next to each boundary; the verdicts need
 * nothing but the malloc family's own promises.
 *
 * guard.level is fixed at start-up: tests/meson.build runs this program once
 * per level (size-classes-l0 ... -l3, SEFER_GUARD_LEVEL=N).  Nothing is
 * judged by time: waits are for events (condition variables), and the
 * check timeout of each case is a hang guard only, many times what the
 * case takes at level 3.  Randomised parts use a fixed seed, printed, and
 * overridable with SEFER_SC_SEED to replay.
 *
 * Uses the standard names (the interposed malloc family), so it is built
 * with -Doverride=true only: the release and UBSan builds. */
#include "reliability/rel.h"

#include <malloc.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SC_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SC_UNDER_SANITIZER 1
#endif
#endif
#ifndef SC_UNDER_SANITIZER
#define SC_UNDER_SANITIZER 0
#endif

/* Under ASan or TSan (should a build ever run this suite with one) every
 * byte written is checked: the counts below are divided by this, and
 * every-size keeps, of the class sizes, those up to 16 KiB, those next to a
 * boundary and a sample of the rest, so that a level stays within about a
 * minute there. */
#define SC_SCALE (SC_UNDER_SANITIZER ? 8 : 1)

/* The largest size tried: the issue's 256 KiB is the last class's, so twice
 * that, for the spans next to it. */
#define SC_MAX (2 * SEFER_MEDIUM_MAX)
/* Seconds a case may run before check stops it: a hang guard, not a
 * verdict (a case takes well under a minute at level 3 in the UBSan build). */
#define SC_HANG_GUARD 300

/* The assertion of the loops: check's ck_assert_* records the place of
 * every assertion that passes (a write to its log each time: most of the
 * time of a loop over a hundred thousand blocks); this one only fails. */
#define SC_REQUIRE(cond, ...)            \
    do {                                 \
        if (!(cond))                     \
            ck_abort_msg(__VA_ARGS__);   \
    } while (0)

/* (mixed, so that any value given, 0 included, seeds the xorshift well) */
static uint64_t sc_seed(void)
{
    return st_mix64(rel_seed("SEFER_SC_SEED", 0x5eed19c1a55e5ULL)) | 1;
}

/* ---- the size-class boundaries ------------------------------------------ */

/* The last size of each class (docs/design.md), then SC_MAX: n and n + 1
 * are in different classes (or n + 1 is a span) for every n listed. */
#define SC_BOUNDARIES_MAX 64
static size_t sc_boundary[SC_BOUNDARIES_MAX];
static int sc_nboundaries;

static void sc_boundaries_init(void)
{
    sc_nboundaries = 0;
    for (size_t s = 16; s <= 128; s += 16)
        sc_boundary[sc_nboundaries++] = s;
    for (size_t p = 128; p < SEFER_MEDIUM_MAX; p *= 2)
        for (size_t m = 5; m <= 8; m++)
            sc_boundary[sc_nboundaries++] = p / 4 * m;
    sc_boundary[sc_nboundaries++] = SC_MAX;
    ck_assert_int_eq(sc_nboundaries, 53); /* 52 classes and the end */
    ck_assert_uint_eq(sc_boundary[51], SEFER_MEDIUM_MAX);
}

/* Whether n is within `d` bytes of a boundary. */
static bool sc_near_boundary(size_t n, size_t d)
{
    for (int i = 0; i < sc_nboundaries; i++)
        if (n + d >= sc_boundary[i] && n <= sc_boundary[i] + d)
            return true;
    return false;
}

/* A size 1..SC_MAX: three in four drawn from a class picked at random (every
 * class as likely, the spans from 256 to 512 KiB counted as one more), the
 * rest within 32 bytes of a boundary picked at random. */
static size_t sc_rand_size(uint64_t *r)
{
    uint64_t x = st_rand(r);
    int c = (int)((x >> 8) % (uint64_t)sc_nboundaries);
    size_t n;
    if (x % 4 != 0) {
        size_t lo = c > 0 ? sc_boundary[c - 1] + 1 : 1, hi = sc_boundary[c];
        n = lo + (size_t)((x >> 16) % (hi - lo + 1));
    } else {
        size_t b = sc_boundary[c], d = (size_t)((x >> 16) % 65);
        n = b + d >= 33 ? b + d - 32 : 1;
    }
    return n > SC_MAX ? SC_MAX : n;
}

/* ---- patterns ------------------------------------------------------------ */

/* Word k of a block (bytes 8k..8k+7, little end first) holds
 * seed + k * SC_STEP: cheap enough to write and check over every byte of
 * every block (the compiler vectorises both loops), different in every
 * word, and different between blocks (the seed mixes the block's address
 * and size, or for realloc a number of its own, which survives a move). */
#define SC_STEP 0x9e3779b97f4a7c15ULL

static inline uint8_t sc_byte(uint64_t seed, size_t i)
{
    return (uint8_t)((seed + (uint64_t)(i >> 3) * SC_STEP) >> ((i & 7) * 8));
}

static void sc_fill(void *p, size_t from, size_t to, uint64_t seed)
{
    unsigned char *b = p;
    size_t i = from;
    for (; i < to && (i & 7); i++)
        b[i] = sc_byte(seed, i);
    size_t k0 = i >> 3, k1 = to >> 3;
    for (size_t k = k0; k < k1; k++) {
        uint64_t w = seed + (uint64_t)k * SC_STEP;
        memcpy(b + 8 * k, &w, 8);
    }
    for (i = k1 > k0 ? 8 * k1 : i; i < to; i++)
        b[i] = sc_byte(seed, i);
}

/* The first offset in [from, to) not holding the pattern, or SIZE_MAX. */
static size_t sc_check(const void *p, size_t from, size_t to, uint64_t seed)
{
    const unsigned char *b = p;
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (b[i] != sc_byte(seed, i))
            return i;
    size_t k0 = i >> 3, k1 = to >> 3;
    uint64_t diff = 0;
    for (size_t k = k0; k < k1; k++) {
        uint64_t w;
        memcpy(&w, b + 8 * k, 8);
        diff |= w ^ (seed + (uint64_t)k * SC_STEP);
    }
    if (diff != 0) {
        for (size_t j = 8 * k0; j < 8 * k1; j++)
            if (b[j] != sc_byte(seed, j))
                return j;
    }
    for (i = k1 > k0 ? 8 * k1 : i; i < to; i++)
        if (b[i] != sc_byte(seed, i))
            return i;
    return SIZE_MAX;
}

static inline uint64_t sc_seed_of(const void *p, size_t n)
{
    return st_seed_of(p, n);
}

/* Blocks up to SC_FULL_MAX, and those within 32 bytes of a boundary, hold
 * the pattern over every byte; larger ones (where writing every byte is
 * most of the test's time and page faults) over their first and last
 * SC_EDGE bytes: enough to see a block handed out twice, a neighbour
 * overlapping either end, a usable size that runs into the next block, and
 * sefer's own links or canaries written into a block. */
#define SC_FULL_MAX (16 * ST_KIB)
#define SC_EDGE ((size_t)256)

static bool sc_full(size_t n)
{
    return n <= SC_FULL_MAX || sc_near_boundary(n, 32);
}

/* Writes the pattern over [0, extent), or (full false) its first and last
 * SC_EDGE bytes. */
static void sc_write(void *p, size_t extent, bool full, uint64_t seed)
{
    if (full || extent <= 2 * SC_EDGE) {
        sc_fill(p, 0, extent, seed);
        return;
    }
    sc_fill(p, 0, SC_EDGE, seed);
    sc_fill(p, extent - SC_EDGE, extent, seed);
}

/* The first offset below `limit` where what sc_write(p, extent, full, seed)
 * wrote is not there any more, or SIZE_MAX. */
static size_t sc_verify(const void *p, size_t extent, bool full, uint64_t seed, size_t limit)
{
    size_t end = extent < limit ? extent : limit;
    if (full || extent <= 2 * SC_EDGE)
        return sc_check(p, 0, end, seed);
    size_t bad = sc_check(p, 0, end < SC_EDGE ? end : SC_EDGE, seed);
    if (bad != SIZE_MAX || end <= extent - SC_EDGE)
        return bad;
    return sc_check(p, extent - SC_EDGE, end, seed);
}

/* What a failed check found at offset `off` (below `limit`, the bytes the
 * test may read), for the message: the bytes there and those expected. */
static const char *sc_describe_bad(const void *p, size_t off, uint64_t seed, size_t limit)
{
    static _Thread_local char buf[192];
    const unsigned char *b = p;
    size_t at = off & ~(size_t)7, len = limit - at < 8 ? limit - at : 8;
    uint64_t got = 0, want = seed + (uint64_t)(at >> 3) * SC_STEP;
    memcpy(&got, b + at, len);
    if (len < 8)
        want &= ((uint64_t)1 << (8 * len)) - 1;
    snprintf(buf, sizeof buf,
             "byte %zu differs (the %zu bytes at %zu hold %#" PRIx64 ", not %#" PRIx64
             ", little end first)",
             off, len, at, got, want);
    return buf;
}

/* ---- the guard level ----------------------------------------------------- */

/* The level this process runs at, as sefer reports it. */
static int sc_level(void)
{
    return (int)st_knob_ull("guard.level");
}

START_TEST(test_level_in_effect)
{
    /* Each meson test runs this program at one level: if SEFER_GUARD_LEVEL
     * did not take, four tests would quietly run the default level. */
    const char *want = getenv("SEFER_GUARD_LEVEL");
    int level = sc_level();
    printf("guard.level=%d (SEFER_GUARD_LEVEL=%s)\n", level, want ? want : "unset");
    fflush(stdout);
    if (want != NULL)
        ck_assert_msg(level == atoi(want), "SEFER_GUARD_LEVEL=%s but guard.level is %d", want,
                      level);
    ck_assert_str_eq(sefer_config_source("guard.level"), want != NULL ? "env" : "default");
}
END_TEST

/* ======================================================================
 * 1. every size, single thread
 * ==================================================================== */

#define WINDOW_BLOCKS 4096               /* live blocks at most ... */
#define WINDOW_BYTES ((size_t)96 << 20)  /* ... and bytes at most */
#define CHECK_EVERY_WINDOWS 16           /* sefer_check after this many flushes */

/* A block of every_size or of a burst: the pattern covers its whole usable
 * size (a program may use all of it), or both ends of it. */
struct sc_live {
    unsigned char *p;
    size_t n, usable;
    bool full;
};

/* malloc(n), checked: not NULL, 16-byte aligned, usable size >= n; then
 * written. */
static struct sc_live sc_alloc_written(size_t n, bool full, int level)
{
    unsigned char *p = malloc(n);
    SC_REQUIRE(p != NULL, "level %d: malloc(%zu) failed: %s", level, n, strerror(errno));
    SC_REQUIRE(((uintptr_t)p & 15) == 0, "level %d: malloc(%zu) = %p, not 16-byte aligned",
               level, n, (void *)p);
    size_t usable = malloc_usable_size(p);
    SC_REQUIRE(usable >= n, "level %d: malloc_usable_size(malloc(%zu)) = %zu", level, n,
               usable);
    sc_write(p, usable, full, sc_seed_of(p, n));
    return (struct sc_live){p, n, usable, full};
}

/* Whether a block still holds what sc_alloc_written wrote; if not, the
 * message says where and what. */
static const char *sc_live_bad(const struct sc_live *b)
{
    uint64_t seed = sc_seed_of(b->p, b->n);
    size_t bad = sc_verify(b->p, b->usable, b->full, seed, b->usable);
    return bad == SIZE_MAX ? NULL : sc_describe_bad(b->p, bad, seed, b->usable);
}

/* Checks a block (its usable size unchanged, its pattern intact) and frees
 * it. */
static void sc_verify_free(const struct sc_live *b, int level)
{
    size_t usable = malloc_usable_size(b->p);
    SC_REQUIRE(usable == b->usable,
               "level %d: malloc_usable_size(%p) of a %zu-byte block was %zu, is now %zu", level,
               (void *)b->p, b->n, b->usable, usable);
    const char *bad = sc_live_bad(b);
    SC_REQUIRE(bad == NULL, "level %d: block %p of %zu bytes (usable %zu%s): %s", level,
               (void *)b->p, b->n, b->usable, b->full ? "" : ", both ends written", bad);
    free(b->p);
}

static void sc_shuffle_live(struct sc_live *a, size_t n, uint64_t *r)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(st_rand(r) % i);
        struct sc_live t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* Of the sizes sc_full leaves with both ends written, one in this many is
 * written whole all the same (so that some of every range are). */
#define FULL_SAMPLE 256

/* Which sizes every_size allocates: every size of every class (up to
 * 256 KiB).  Above, each request is a span of its own, mapped and given
 * back, tens of times the cost of a class's block: there the sizes
 * within 16 bytes of a multiple of 4 KiB (where a span's rounding changes),
 * within 32 bytes of 256 and 512 KiB, and one in SPAN_SAMPLE of the rest.
 * Under a sanitizer, of the class sizes too: those up to 16 KiB, those
 * within 32 bytes of a boundary and one in SC_SCALE of the rest. */
#define SPAN_SAMPLE 32

static bool sc_size_selected(size_t n, uint64_t *r)
{
    if (n <= SEFER_MEDIUM_MAX) {
        if (!SC_UNDER_SANITIZER || n <= 16 * ST_KIB || sc_near_boundary(n, 32))
            return true;
        return st_rand(r) % SC_SCALE == 0;
    }
    size_t page_off = n & 4095;
    if (page_off <= 16 || page_off >= 4096 - 16 || sc_near_boundary(n, 32))
        return true;
    return st_rand(r) % (SPAN_SAMPLE * SC_SCALE) == 0;
}

START_TEST(test_every_size)
{
    sc_boundaries_init();
    int level = sc_level();
    uint64_t r = sc_seed();

    /* the order: every size once, shuffled (bookkeeping from mmap, so that
     * the allocator sees only the test's blocks) */
    size_t norder = 0, nfull = 0;
    uint32_t *order = st_map(SC_MAX * sizeof *order);
    for (size_t n = 1; n <= SC_MAX; n++)
        if (sc_size_selected(n, &r))
            order[norder++] = (uint32_t)n;
    for (size_t i = norder; i > 1; i--) {
        size_t j = (size_t)(st_rand(&r) % i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }

    struct sc_live *live = st_map(WINDOW_BLOCKS * sizeof *live);
    size_t nlive = 0, live_bytes = 0, windows = 0, checks = 0;
    for (size_t i = 0; i < norder; i++) {
        size_t n = order[i];
        bool full = sc_full(n) || st_rand(&r) % FULL_SAMPLE == 0;
        nfull += full;
        live[nlive] = sc_alloc_written(n, full, level);
        live_bytes += live[nlive++].usable;
        if (nlive < WINDOW_BLOCKS && live_bytes < WINDOW_BYTES)
            continue;
        /* free a random half of the window, in a random order (another one
         * than the allocations'); the other half lives on, mixing lifetimes */
        sc_shuffle_live(live, nlive, &r);
        size_t keep = nlive / 2;
        for (size_t k = keep; k < nlive; k++) {
            live_bytes -= live[k].usable;
            sc_verify_free(&live[k], level);
        }
        nlive = keep;
        if (++windows % CHECK_EVERY_WINDOWS == 0) {
            checks++;
            int problems = sefer_check();
            SC_REQUIRE(problems == 0,
                       "level %d: sefer_check found %d problem(s) after %zu of %zu sizes (see "
                       "stderr)",
                       level, problems, i + 1, norder);
        }
    }
    /* the last window, in a random order too */
    sc_shuffle_live(live, nlive, &r);
    for (size_t k = 0; k < nlive; k++)
        sc_verify_free(&live[k], level);
    printf("level %d: %zu sizes (%zu written whole), %zu windows, %zu sefer_check on the way\n",
           level, norder, nfull, windows, checks);
    fflush(stdout);
    REL_ASSERT_CONSISTENT("after every size was allocated and freed");
    st_unmap(live, WINDOW_BLOCKS * sizeof *live);
    st_unmap(order, SC_MAX * sizeof *order);
}
END_TEST

/* ======================================================================
 * 1b. realloc across the boundaries
 * ==================================================================== */

struct sc_rblock {
    unsigned char *p;
    size_t n;
    uint64_t seed; /* the block's own: its pattern survives a move */
};

/* realloc(b->p, nn): checks the new block and that the bytes both sizes
 * share are intact, then writes the pattern over the rest of the new size.
 * `what` says what the caller was doing, for the message. */
static void sc_realloc_to(struct sc_rblock *b, size_t nn, int level, const char *what)
{
    unsigned char *q = realloc(b->p, nn);
    SC_REQUIRE(q != NULL, "level %d: %s: realloc(%p, %zu) from %zu bytes failed: %s", level,
               what, (void *)b->p, nn, b->n, strerror(errno));
    SC_REQUIRE(((uintptr_t)q & 15) == 0, "level %d: %s: realloc to %zu gave %p, not aligned",
               level, what, nn, (void *)q);
    SC_REQUIRE(malloc_usable_size(q) >= nn, "level %d: %s: realloc to %zu: usable %zu", level,
               what, nn, malloc_usable_size(q));
    size_t keep = b->n < nn ? b->n : nn;
    size_t bad = sc_check(q, 0, keep, b->seed);
    SC_REQUIRE(bad == SIZE_MAX, "level %d: %s: realloc(%p, %zu -> %zu) = %p lost content: %s",
               level, what, (void *)b->p, b->n, nn, (void *)q,
               sc_describe_bad(q, bad, b->seed, keep));
    if (nn > keep)
        sc_fill(q, keep, nn, b->seed);
    b->p = q;
    b->n = nn;
}

static size_t sc_clamp(long long n)
{
    return n < 1 ? 1 : (size_t)n > SC_MAX ? SC_MAX : (size_t)n;
}

#define REALLOC_SLOTS 64
#define REALLOC_WALK (6000 / SC_SCALE)
#define REALLOC_CHECK_EVERY 2000

START_TEST(test_realloc_boundaries)
{
    sc_boundaries_init();
    int level = sc_level();
    uint64_t r = sc_seed() ^ 0x7ea110cULL;
    uint64_t next_seed = 1;
    char what[96];

    /* From each class's last size, the size after it and the one before,
     * and a size within 32 bytes: across the boundary up and back down, two
     * classes up and down, and to a random size. */
    for (int c = 0; c < sc_nboundaries; c++) {
        long long b = (long long)sc_boundary[c];
        long long below = c > 0 ? (long long)sc_boundary[c - 1] : 0;
        long long above =
            c + 1 < sc_nboundaries ? (long long)sc_boundary[c + 1] : (long long)SC_MAX;
        long long near = b - 32 + (long long)(st_rand(&r) % 65);
        long long starts[4] = {b - 1, b, b + 1, near};
        for (int s = 0; s < 4; s++) {
            struct sc_rblock blk = {NULL, 0, st_mix64(next_seed++)};
            size_t n0 = sc_clamp(starts[s]);
            blk.p = malloc(n0);
            SC_REQUIRE(blk.p != NULL, "level %d: malloc(%zu) failed", level, n0);
            blk.n = n0;
            sc_fill(blk.p, 0, n0, blk.seed);
            const long long targets[] = {b + 1, b, above + 1, below, b - 1, near, above, below + 1,
                                         (long long)(1 + st_rand(&r) % SC_MAX), b};
            for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
                snprintf(what, sizeof what, "boundary %lld, start %zu, step %zu", b, n0, t);
                sc_realloc_to(&blk, sc_clamp(targets[t]), level, what);
            }
            size_t bad = sc_check(blk.p, 0, blk.n, blk.seed);
            SC_REQUIRE(bad == SIZE_MAX, "level %d: boundary %lld: %s", level, b,
                       sc_describe_bad(blk.p, bad, blk.seed, blk.n));
            free(blk.p);
        }
    }
    REL_ASSERT_CONSISTENT("after realloc across every boundary");

    /* A random walk: REALLOC_SLOTS blocks live at once, each grown, shrunk,
     * freed and allocated again at random, half of the sizes within 2 bytes
     * of a boundary. */
    struct sc_rblock slot[REALLOC_SLOTS];
    memset(slot, 0, sizeof slot);
    for (long op = 0; op < REALLOC_WALK; op++) {
        uint64_t x = st_rand(&r);
        struct sc_rblock *b = &slot[x % REALLOC_SLOTS];
        size_t nn = (x >> 8) & 1 ? sc_rand_size(&r)
                                 : sc_clamp((long long)sc_boundary[(x >> 9) % (uint64_t)sc_nboundaries] - 2 +
                                            (long long)((x >> 20) % 5));
        if (b->p == NULL) {
            b->seed = st_mix64(next_seed++);
            b->p = malloc(nn);
            SC_REQUIRE(b->p != NULL, "level %d: malloc(%zu) failed", level, nn);
            b->n = nn;
            sc_fill(b->p, 0, nn, b->seed);
        } else if ((x >> 40) % 8 == 0) {
            size_t bad = sc_check(b->p, 0, b->n, b->seed);
            SC_REQUIRE(bad == SIZE_MAX, "level %d: walk op %ld: %zu-byte block %p: %s", level, op,
                       b->n, (void *)b->p, sc_describe_bad(b->p, bad, b->seed, b->n));
            free(b->p);
            b->p = NULL;
        } else {
            snprintf(what, sizeof what, "walk op %ld", op);
            sc_realloc_to(b, nn, level, what);
        }
        if (op % REALLOC_CHECK_EVERY == REALLOC_CHECK_EVERY - 1) {
            int problems = sefer_check();
            SC_REQUIRE(problems == 0, "level %d: sefer_check: %d problem(s) at walk op %ld",
                       level, problems, op);
        }
    }
    for (int i = 0; i < REALLOC_SLOTS; i++) {
        if (slot[i].p == NULL)
            continue;
        size_t bad = sc_check(slot[i].p, 0, slot[i].n, slot[i].seed);
        SC_REQUIRE(bad == SIZE_MAX, "level %d: walk slot %d: %s", level, i,
                   sc_describe_bad(slot[i].p, bad, slot[i].seed, slot[i].n));
        free(slot[i].p);
    }
    REL_ASSERT_CONSISTENT("after the realloc walk");
}
END_TEST

/* ======================================================================
 * 2. cross-thread frees
 * ==================================================================== */

/* Every thread allocates XT_QUOTA blocks of random sizes, writes them, and
 * hands each to another thread picked at random (so blocks go every way
 * between every pair), which checks it (one in eight also reallocated
 * there, a block another thread owns) and frees it.  A sender has at most
 * XT_CREDIT blocks out at once: it waits (on its own condition variable,
 * taking in the blocks sent to it meanwhile) until a receiver frees one.
 * That bounds the memory, and no thread can wait for ever: a waiting thread
 * has blocks out, so some inbox holds a block, and its owner takes it.
 * When done, a thread sends each other thread an end mark (the inbox is
 * FIFO: nothing follows it), empties its inbox until it has every other
 * thread's mark, and waits at a barrier: no thread exits before every block
 * is freed, so each heap gets every remote free back before its thread
 * ends. */
#define XT_THREADS 4
#define XT_QUOTA (12000 / SC_SCALE)
#define XT_CREDIT 256
#define XT_INBOX (XT_THREADS * XT_CREDIT + XT_THREADS)

struct xt_item {
    unsigned char *p; /* NULL: the sender's end mark */
    size_t n;
    int from;
};

struct xt_thread {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* signalled on a push to the inbox and on in_flight-- */
    size_t head, count;
    long in_flight; /* blocks this thread sent that are not yet freed */
    int marks;      /* end marks received */
    int id;
    long quota;
    uint64_t rng;
    struct xt_item inbox[XT_INBOX];
};

static struct xt_thread *xt; /* XT_THREADS of them, from mmap */
static pthread_barrier_t xt_barrier;

static void xt_push(struct xt_thread *to, struct xt_item it)
{
    pthread_mutex_lock(&to->lock);
    if (to->count == XT_INBOX) {
        rel_fail("thread %d's inbox is full (the credit should prevent that)", to->id);
    } else {
        to->inbox[(to->head + to->count) % XT_INBOX] = it;
        to->count++;
    }
    pthread_cond_signal(&to->cond);
    pthread_mutex_unlock(&to->lock);
}

/* Checks a block another thread sent, maybe reallocs it, frees it, and
 * gives its sender the credit back. */
static void xt_take(struct xt_thread *me, struct xt_item it)
{
    uint64_t seed = sc_seed_of(it.p, it.n);
    bool full = sc_full(it.n);
    size_t bad = sc_verify(it.p, it.n, full, seed, it.n);
    if (bad != SIZE_MAX)
        rel_fail("thread %d: block %p of %zu bytes from thread %d: %s", me->id, (void *)it.p, it.n,
                 it.from, sc_describe_bad(it.p, bad, seed, it.n));
    if (malloc_usable_size(it.p) < it.n)
        rel_fail("thread %d: malloc_usable_size of a %zu-byte block from thread %d is %zu", me->id,
                 it.n, it.from, malloc_usable_size(it.p));
    uint64_t x = st_rand(&me->rng);
    if (x % 8 == 0) {
        size_t nn = sc_rand_size(&me->rng);
        unsigned char *q = realloc(it.p, nn);
        if (q == NULL) {
            rel_fail("thread %d: realloc(%p, %zu) of thread %d's block failed", me->id,
                     (void *)it.p, nn, it.from);
            free(it.p);
        } else {
            size_t keep = it.n < nn ? it.n : nn;
            bad = sc_verify(q, it.n, full, seed, keep);
            if (bad != SIZE_MAX)
                rel_fail("thread %d: realloc of thread %d's block %zu -> %zu lost content: %s",
                         me->id, it.from, it.n, nn, sc_describe_bad(q, bad, seed, keep));
            if (((uintptr_t)q & 15) != 0 || malloc_usable_size(q) < nn)
                rel_fail("thread %d: realloc to %zu gave %p, usable %zu", me->id, nn, (void *)q,
                         malloc_usable_size(q));
            free(q);
        }
    } else {
        free(it.p);
    }
    struct xt_thread *from = &xt[it.from];
    pthread_mutex_lock(&from->lock);
    from->in_flight--;
    pthread_cond_signal(&from->cond);
    pthread_mutex_unlock(&from->lock);
}

/* Pops one item of the inbox (the caller holds the lock). */
static struct xt_item xt_pop_locked(struct xt_thread *me)
{
    struct xt_item it = me->inbox[me->head];
    me->head = (me->head + 1) % XT_INBOX;
    me->count--;
    return it;
}

static void *xt_main(void *arg)
{
    struct xt_thread *me = arg;
    long sent = 0;
    while (sent < me->quota) {
        pthread_mutex_lock(&me->lock);
        while (me->count == 0 && me->in_flight >= XT_CREDIT)
            pthread_cond_wait(&me->cond, &me->lock);
        if (me->count > 0) {
            struct xt_item it = xt_pop_locked(me);
            if (it.p == NULL) {
                me->marks++;
                pthread_mutex_unlock(&me->lock);
            } else {
                pthread_mutex_unlock(&me->lock);
                xt_take(me, it);
            }
            continue;
        }
        me->in_flight++;
        pthread_mutex_unlock(&me->lock);

        size_t n = sc_rand_size(&me->rng);
        unsigned char *p = malloc(n);
        if (p == NULL) {
            rel_fail("thread %d: malloc(%zu) failed", me->id, n);
            pthread_mutex_lock(&me->lock);
            me->in_flight--;
            pthread_mutex_unlock(&me->lock);
            sent++;
            continue;
        }
        if (((uintptr_t)p & 15) != 0 || malloc_usable_size(p) < n)
            rel_fail("thread %d: malloc(%zu) = %p, usable %zu", me->id, n, (void *)p,
                     malloc_usable_size(p));
        sc_write(p, n, sc_full(n), sc_seed_of(p, n));
        int to = (me->id + 1 + (int)(st_rand(&me->rng) % (XT_THREADS - 1))) % XT_THREADS;
        xt_push(&xt[to], (struct xt_item){p, n, me->id});
        sent++;
    }
    for (int i = 0; i < XT_THREADS; i++)
        if (i != me->id)
            xt_push(&xt[i], (struct xt_item){NULL, 0, me->id});
    pthread_mutex_lock(&me->lock);
    while (me->marks < XT_THREADS - 1 || me->count > 0) {
        while (me->count == 0)
            pthread_cond_wait(&me->cond, &me->lock);
        struct xt_item it = xt_pop_locked(me);
        if (it.p == NULL) {
            me->marks++;
            continue;
        }
        pthread_mutex_unlock(&me->lock);
        xt_take(me, it);
        pthread_mutex_lock(&me->lock);
    }
    pthread_mutex_unlock(&me->lock);
    pthread_barrier_wait(&xt_barrier);
    return NULL;
}

static void xt_round(long quota, uint64_t seed)
{
    for (int i = 0; i < XT_THREADS; i++) {
        struct xt_thread *t = &xt[i];
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->cond, NULL);
        t->head = t->count = 0;
        t->in_flight = 0;
        t->marks = 0;
        t->id = i;
        t->quota = quota;
        t->rng = st_mix64(seed + (uint64_t)i) | 1;
    }
    pthread_barrier_init(&xt_barrier, NULL, XT_THREADS);
    pthread_t th[XT_THREADS];
    for (int i = 0; i < XT_THREADS; i++)
        th[i] = st_spawn(xt_main, &xt[i], 0);
    for (int i = 0; i < XT_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&xt_barrier);
    for (int i = 0; i < XT_THREADS; i++) {
        ck_assert_msg(xt[i].count == 0 && xt[i].in_flight == 0,
                      "thread %d ended with %zu blocks in its inbox, %ld of its own out", i,
                      xt[i].count, xt[i].in_flight);
        pthread_mutex_destroy(&xt[i].lock);
        pthread_cond_destroy(&xt[i].cond);
    }
}

START_TEST(test_cross_thread)
{
    sc_boundaries_init();
    int level = sc_level();
    uint64_t seed = sc_seed() ^ 0xc705ULL;
    xt = st_map(XT_THREADS * sizeof *xt);

    /* A first, small round with the same threads: whatever glibc and sefer
     * allocate once for threads (and keep) is there before the baseline.
     * sefer_trim before each figure takes back what is freed but still
     * counted as live: frees into this thread's pages by others not yet
     * taken back, and (level 3) the blocks in this heap's quarantine, such
     * as the few glibc frees here when threads end. */
    xt_round(200, seed);
    REL_ASSERT_NO_FAILURES();
    sefer_trim();
    struct sefer_stats s0 = st_stats();
    xt_round(XT_QUOTA, seed + 1000);
    REL_ASSERT_NO_FAILURES();
    sefer_trim();
    struct sefer_stats s1 = st_stats();

    printf("level %d: %d threads x %ld blocks; remote frees %" PRId64 ", live blocks %+" PRId64
           ", bytes in blocks %+" PRId64 "\n",
           level, XT_THREADS, (long)XT_QUOTA, ST_DELTA(s1, s0, remote_frees),
           ST_DELTA(s1, s0, allocs) - ST_DELTA(s1, s0, frees), ST_DELTA(s1, s0, bytes_in_blocks));
    fflush(stdout);
    REL_ASSERT_CONSISTENT("after the cross-thread frees");
    ck_assert_msg(ST_DELTA(s1, s0, remote_frees) > 0, "level %d: no remote frees counted", level);
    /* Every block was freed, and every thread ended after all the frees
     * (so each heap had every remote free back before its thread ended):
     * the live blocks and their bytes are exactly where they were.  (The
     * same threads ran the first round, and the trims: no slack needed; at
     * every level the figures came back exact, run after run.) */
    int64_t live = ST_DELTA(s1, s0, allocs) - ST_DELTA(s1, s0, frees);
    ck_assert_msg(live == 0, "level %d: allocs - frees moved by %" PRId64 " with every block freed",
                  level, live);
    int64_t bytes = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(bytes == 0,
                  "level %d: bytes_in_blocks moved by %" PRId64 " with every block freed", level,
                  bytes);
    st_unmap(xt, XT_THREADS * sizeof *xt);
}
END_TEST

/* ======================================================================
 * 3. a class's page going empty and coming back
 * ==================================================================== */

/* Each round allocates a burst of 1..BURST_MAX blocks, writes them, checks
 * them and frees them all: mostly all of one class (sizes drawn from the
 * class's range, so its current page empties at the end of the round, and
 * for the big medium classes several pages fill and empty), sometimes
 * random sizes.  The frees go in allocation order, in reverse, or shuffled;
 * one round in four another thread frees the burst (the page empties
 * through remote frees, and the next round's allocations take them back);
 * sefer_trim every so often (the kept page is given back then).  Rounds run
 * in runs of the same class so that a page emptied is reused at once.
 * Only both ends of each block are written (all of it up to 512 bytes):
 * what is tested here is the pages' state, and a block handed out twice
 * still shows at its ends. */
#define BURST_ROUNDS (3000 / SC_SCALE)
#define BURST_MAX 48
#define BURST_CHECK_EVERY 64
#define BURST_TRIM_EVERY 193

struct bx_helper {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct sc_live *burst; /* non-NULL: a burst to free */
    size_t n;
    bool quit;
};

static void *bx_helper_main(void *arg)
{
    struct bx_helper *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->burst == NULL && !h->quit)
            pthread_cond_wait(&h->cond, &h->lock);
        if (h->burst == NULL)
            break;
        for (size_t i = 0; i < h->n; i++) {
            struct sc_live *b = &h->burst[i];
            const char *bad = sc_live_bad(b);
            if (bad != NULL)
                rel_fail("helper: burst block %p of %zu bytes (usable %zu): %s", (void *)b->p, b->n,
                         b->usable, bad);
            free(b->p);
        }
        h->burst = NULL;
        pthread_cond_broadcast(&h->cond);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

START_TEST(test_empty_page_bursts)
{
    sc_boundaries_init();
    int level = sc_level();
    uint64_t r = sc_seed() ^ 0xb0257ULL;
    struct sc_live burst[BURST_MAX];

    struct bx_helper *h = st_map(sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    pthread_t helper = st_spawn(bx_helper_main, h, 0);

    /* (sefer_trim before each figure: it takes back the frees the helper
     * made into this thread's pages, which count as live until then) */
    sefer_trim();
    struct sefer_stats s0 = st_stats();
    int c = 0, run = 0;
    long remote_rounds = 0, trims = 0;
    for (long round = 0; round < BURST_ROUNDS; round++) {
        uint64_t x = st_rand(&r);
        if (run == 0) { /* a new run: another class, for 1..16 rounds */
            c = (int)(x % (uint64_t)sc_nboundaries);
            run = 1 + (int)((x >> 8) % 16);
        }
        run--;
        bool mixed = (x >> 12) % 8 == 0;
        size_t lo = c > 0 ? sc_boundary[c - 1] + 1 : 1, hi = sc_boundary[c];
        size_t k = 1 + (size_t)((x >> 16) % BURST_MAX);
        for (size_t i = 0; i < k; i++) {
            size_t n = mixed ? sc_rand_size(&r) : lo + (size_t)(st_rand(&r) % (hi - lo + 1));
            burst[i] = sc_alloc_written(n, false, level);
        }
        unsigned how = (unsigned)((x >> 24) % 4);
        if (how == 3) {
            /* another thread frees the burst; wait until it has */
            remote_rounds++;
            pthread_mutex_lock(&h->lock);
            h->burst = burst;
            h->n = k;
            pthread_cond_broadcast(&h->cond);
            while (h->burst != NULL)
                pthread_cond_wait(&h->cond, &h->lock);
            pthread_mutex_unlock(&h->lock);
            REL_ASSERT_NO_FAILURES();
        } else {
            if (how == 2)
                sc_shuffle_live(burst, k, &r);
            for (size_t i = 0; i < k; i++)
                sc_verify_free(&burst[how == 1 ? k - 1 - i : i], level);
        }
        if (round % BURST_TRIM_EVERY == BURST_TRIM_EVERY - 1) {
            sefer_trim();
            trims++;
        }
        if (round % BURST_CHECK_EVERY == BURST_CHECK_EVERY - 1) {
            int problems = sefer_check();
            SC_REQUIRE(problems == 0,
                       "level %d: sefer_check found %d problem(s) after burst %ld (class of "
                       "%zu..%zu B, %zu blocks%s%s; see stderr)",
                       level, problems, round, lo, hi, k, mixed ? ", mixed sizes" : "",
                       how == 3 ? ", freed by another thread" : "");
        }
    }
    pthread_mutex_lock(&h->lock);
    h->quit = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(helper, NULL);
    REL_ASSERT_CONSISTENT("after the bursts");

    sefer_trim();
    struct sefer_stats s1 = st_stats();
    int64_t live = ST_DELTA(s1, s0, allocs) - ST_DELTA(s1, s0, frees);
    printf("level %d: %ld bursts (%ld freed by another thread), %ld trims; live blocks %+" PRId64
           ", bytes in blocks %+" PRId64 "\n",
           level, (long)BURST_ROUNDS, remote_rounds, trims, live,
           ST_DELTA(s1, s0, bytes_in_blocks));
    fflush(stdout);
    /* every burst was freed: nothing of them is live, and the pages kept
     * for their classes hold no block (exact, as in cross_thread) */
    ck_assert_msg(live == 0, "level %d: allocs - frees moved by %" PRId64 " with every burst freed",
                  level, live);
    int64_t bytes = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(bytes == 0,
                  "level %d: bytes_in_blocks moved by %" PRId64 " with every burst freed", level,
                  bytes);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    st_unmap(h, sizeof *h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("size-classes");
    TCase *tc = tcase_create("level");
    tcase_add_test(tc, test_level_in_effect);
    suite_add_tcase(s, tc);

    /* one case each, so that CK_RUN_CASE runs one part alone */
    const struct {
        const char *name;
        const TTest *test;
    } parts[] = {
        {"every-size", test_every_size},
        {"realloc", test_realloc_boundaries},
        {"cross-thread", test_cross_thread},
        {"bursts", test_empty_page_bursts},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        tc = tcase_create(parts[i].name);
        tcase_set_timeout(tc, SC_HANG_GUARD);
        tcase_add_test(tc, parts[i].test);
        suite_add_tcase(s, tc);
    }
    return st_run_suite(s);
}
