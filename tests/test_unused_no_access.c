/* test_unused_no_access.c - at guard levels 0-1 the part of a small or
 * medium segment that no page has taken yet is no-access, and it opens as
 * pages are taken (lib/segment.c, "The unused part of a segment";
 * guard.unused_no_access).  Linked statically, so the test reads the
 * segment header; the protections come from /proc/self/maps, and a write
 * that must fault is made in a forked child.  meson runs it plain, with
 * the knob off, and at guard level 2 (which keeps its own layout).
 *
 *   - a thread's fresh small segment: past open_bytes, and the metadata
 *     page past the descriptors, no-access; the descriptors and the pages
 *     taken read-write; a write 1 MiB past its first block, or into the
 *     metadata page past the descriptors, kills a child with SIGSEGV;
 *   - the heap then takes every page of it: every block written whole,
 *     the segment open to its end, and the next block on a second
 *     segment closed the same way;
 *   - a medium segment the same way, its end mark's page read-write (every
 *     medium free reads it);
 *   - everything freed and the thread gone (decommit.exited_keep 0): the
 *     second small segment and the medium one released to the large
 *     cache, and read-write there end to end (the cache hands spans out as
 *     accessible memory); large blocks then cut from the cache are
 *     written whole;
 *   - a new thread's medium segment made from one of those cached spans:
 *     open over what may hold old pages (which closing would cost a fault
 *     each at their next write), the metadata page included, and
 *     no-access past that if anything is left;
 *   - the knob off or level 2: no segment closed, and the write 1 MiB
 *     past the first block does not fault (it lands in the segment);
 *   - a large block's span: no-access past its block, a write 1 MiB past
 *     it kills a child; realloc grows the block in place, opening the
 *     span as far as it needs; the span cached, reused for a bigger block
 *     (opened) and a smaller one (closed again), split and joined again in
 *     the cache, and made into a medium segment: every block written whole
 *     and the heap's check clean (off or at level 2: all of it open); the
 *     page below the block (the span's second) no-access too, so a write
 *     1 byte below the block kills a child. */
#include "sefer_test.h"

#include <sys/mman.h>

#include "internal.h"
#include "maps_access.h"

#define BIG 4000 /* a small class: 16 blocks a page */
#define MEDIUM (100 * ST_KIB)

/* The end of a segment's descriptors, rounded up to an OS page. */
static size_t descriptors_end(const sf_segment_t *seg)
{
    return sf_align_up(sizeof(sf_segment_t) + seg->page_count * sizeof(sf_page_t), SF_OS_PAGE);
}

/* ---- the run, on a thread of its own (a fresh heap) -------------------- */

struct run {
    bool closing; /* levels 0-1 with the knob on */
    void *first, *medium;
    void *big[64 * 16];
    size_t nbig;
    sf_segment_t *seg, *seg2, *mseg;
};

/* A closed segment as the layout says: metadata page past the descriptors
 * and everything past open_bytes no-access, the rest read-write (a medium
 * segment's last metadata page, its end mark, too). */
static void expect_closed(const sf_segment_t *seg, const char *what)
{
    ck_assert_msg(seg->closed, "%s: not closed", what);
    ck_assert_uint_gt(seg->open_bytes, SF_SEG_META_SIZE);
    ck_assert_uint_lt(seg->open_bytes, SF_SEG_SIZE);
    read_maps();
    size_t desc = descriptors_end(seg), mark = seg->kind == SF_SEG_MEDIUM ? SF_OS_PAGE : 0;
    expect_access(seg, 0, desc, READ_WRITE, what);
    expect_access(seg, desc, SF_SEG_META_SIZE - mark, NO_ACCESS, what);
    expect_access(seg, SF_SEG_META_SIZE - mark, seg->open_bytes, READ_WRITE, what);
    expect_access(seg, seg->open_bytes, SF_SEG_SIZE, NO_ACCESS, what);
}

static void *thread_main(void *arg)
{
    struct run *r = arg;
    r->first = sefer_malloc(64);
    ck_assert_ptr_nonnull(r->first);
    memset(r->first, 1, 64);
    r->seg = sf_segment_of(r->first);
    ck_assert_uint_eq(r->seg->kind, SF_SEG_SMALL);
    uint8_t *one_mib_past = (uint8_t *)r->first + 64 + ST_MIB;
    if (r->closing) {
        expect_closed(r->seg, "a fresh small segment");
        ck_assert_msg(write_faults(one_mib_past), "a write 1 MiB past the first block did not fault");
        ck_assert_msg(write_faults((uint8_t *)r->seg + descriptors_end(r->seg)),
                      "a write into the metadata page past the descriptors did not fault");
    } else {
        ck_assert_msg(!r->seg->closed, "closed with the knob off or at level 2");
        ck_assert_uint_eq(r->seg->open_bytes, SF_SEG_SIZE);
        ck_assert_msg(!write_faults(one_mib_past), "a write 1 MiB past the first block faulted");
    }

    /* every page of the segment taken: each block written whole */
    for (r->nbig = 0; r->nbig < sizeof r->big / sizeof r->big[0]; r->nbig++) {
        void *p = sefer_malloc(BIG);
        ck_assert_ptr_nonnull(p);
        memset(p, 2, BIG);
        r->big[r->nbig] = p;
        if (sf_segment_of(p) != r->seg) {
            r->nbig++;
            break;
        }
        if (r->closing)
            ck_assert_uint_le((uintptr_t)p + BIG - (uintptr_t)r->seg, r->seg->open_bytes);
    }
    ck_assert_uint_ge(r->nbig, 40);
    ck_assert_uint_eq(r->seg->open_bytes, SF_SEG_SIZE);
    /* (the last block opened a second segment, which holds nothing else) */
    r->seg2 = sf_segment_of(r->big[r->nbig - 1]);
    ck_assert_ptr_ne(r->seg2, r->seg);
    if (r->closing)
        expect_closed(r->seg2, "a second small segment");
    if (r->closing) {
        read_maps();
        expect_access(r->seg, SF_SEG_META_SIZE, SF_SEG_SIZE, READ_WRITE, "a small segment with every page taken");
    }

    /* a medium segment */
    r->medium = sefer_malloc(MEDIUM);
    ck_assert_ptr_nonnull(r->medium);
    memset(r->medium, 3, MEDIUM);
    r->mseg = sf_segment_of(r->medium);
    ck_assert_uint_eq(r->mseg->kind, SF_SEG_MEDIUM);
    if (r->closing) {
        expect_closed(r->mseg, "a fresh medium segment");
        ck_assert_msg(write_faults((uint8_t *)r->mseg + r->mseg->open_bytes),
                      "a write past a medium segment's open part did not fault");
    } else {
        ck_assert_msg(!r->mseg->closed, "closed with the knob off or at level 2");
    }
    ck_assert_int_eq(sefer_check(), 0);

    /* everything back before the thread exits (the first segment also
     * keeps blocks the C library allocated on this thread) */
    sefer_free(r->medium); /* (its free reads the end mark) */
    for (size_t i = 0; i < r->nbig; i++) sefer_free(r->big[i]);
    sefer_free(r->first);
    return NULL;
}

struct reuse {
    const sf_segment_t *cached[2];
    void *p;
};

static void *reuse_main(void *arg)
{
    struct reuse *u = arg;
    u->p = sefer_malloc(MEDIUM);
    ck_assert_ptr_nonnull(u->p);
    memset(u->p, 5, MEDIUM);
    const sf_segment_t *seg = sf_segment_of(u->p);
    ck_assert_msg(seg == u->cached[0] || seg == u->cached[1], "the medium segment %p is not a cached span",
                  (const void *)seg);
    ck_assert_uint_eq(seg->kind, SF_SEG_MEDIUM);
    /* (how far its old pages may lie is the cache's figure, which spans
     * merged in the cache can stretch to the whole segment: then it stays
     * open end to end) */
    read_maps();
    expect_access(seg, 0, seg->open_bytes, READ_WRITE, "a segment made from a cached span");
    if (seg->closed)
        expect_access(seg, seg->open_bytes, SF_SEG_SIZE, NO_ACCESS, "a segment made from a cached span");
    else
        ck_assert_uint_eq(seg->open_bytes, SF_SEG_SIZE);
    sefer_free(u->p);
    return NULL;
}

START_TEST(test_unused_part_no_access)
{
    /* (set here: a knob set allocates, and the thread's heap must hold
     * only its own blocks for its segments to go back) */
    ST_KNOB_SET("threads.heap_after", "0"); /* (its blocks on its own heap from the first) */
    ST_KNOB_SET("threads.small_from", "0");
    /* (a segment goes as its last page empties, and the large cache keeps
     * its pages resident) */
    ST_KNOB_SET("decommit.policy", "never");
    ST_KNOB_SET("decommit.exited_keep", "0"); /* (an exited thread's empty segments go at once) */
    ST_KNOB_SET("large_cache.ttl", "3600000"); /* (what is cached stays: nothing here waits on time) */
    sefer_trim();
    struct run r;
    memset(&r, 0, sizeof r);
    r.closing = sf_guard_level <= 1 && strcmp(st_knob_get("guard.unused_no_access"), "true") == 0;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_main, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    /* the thread's exit gave its empty segments back (decommit.exited_keep
     * at 0): the second small one and the medium one are in the large
     * cache, read-write from end to end */
    ck_assert_int_eq(sefer_check(), 0);
    if (r.closing) {
        read_maps();
        const sf_segment_t *segs[2] = {r.seg2, r.mseg};
        for (int s = 0; s < 2; s++) {
            /* (released: no longer a small or medium segment's head) */
            uint8_t head = sf_segmap_byte((uintptr_t)segs[s] >> SF_SEG_SHIFT);
            ck_assert_msg(head != SF_SEGMAP_SMALL_HEAD && head != SF_SEGMAP_MEDIUM_HEAD,
                          "segment %d not released (segment map %u)", s, head);
            expect_access(segs[s], 0, SF_SEG_SIZE, READ_WRITE, "a released segment in the large cache");
        }
    }
    /* a new thread's first medium block: its heap is the first thread's
     * (adopted at its first free or claim), which has no medium segment,
     * so a segment is made from one of those two cached spans, whose old
     * pages may be resident: that part stays open, the metadata page too
     * (closed and opened again, a resident page takes a fault at its next
     * write), and the rest is closed as in a fresh one */
    if (r.closing) {
        struct reuse u = {{r.seg2, r.mseg}, NULL};
        pthread_t t2;
        ck_assert_int_eq(pthread_create(&t2, NULL, reuse_main, &u), 0);
        ck_assert_int_eq(pthread_join(t2, NULL), 0);
    }
    /* large blocks cut from the cache: written whole, the first ones
     * where those segments' metadata pages were */
    void *large[4];
    for (int i = 0; i < 4; i++) {
        large[i] = sefer_malloc(3 * ST_MIB);
        ck_assert_ptr_nonnull(large[i]);
        memset(large[i], 4, 3 * ST_MIB);
    }
    for (int i = 0; i < 4; i++) sefer_free(large[i]);
}
END_TEST

/* ---- large blocks' spans ------------------------------------------------- */

#define LARGE (300 * ST_KIB) /* a span of one segment (4 MiB), mostly slack */

/* p is a large block of n bytes: its span open over its header and block
 * and no-access past them when closing (a write 1 MiB past the block
 * kills a child), else open to its end. */
static sf_segment_t *expect_span(void *p, size_t n, bool closing, const char *what)
{
    sf_segment_t *seg = sf_segment_of(p);
    ck_assert_msg(seg->kind == SF_SEG_LARGE, "%s: not a large block's span (kind %u)", what, seg->kind);
    size_t end = sf_align_up((size_t)((uint8_t *)p - (uint8_t *)seg) + n, SF_OS_PAGE);
    if (!closing) {
        ck_assert_msg(!seg->closed && !seg->hole && seg->open_bytes == seg->span_size,
                      "%s: closed (open %zu of %zu, hole %d)", what, seg->open_bytes, seg->span_size, seg->hole);
        if (sf_guard_level <= 1) { /* (level 2 has its guard pages) */
            read_maps();
            expect_access(seg, 0, seg->span_size, READ_WRITE, what);
        }
        return seg;
    }
    /* (nothing resident past the block here: decommit.policy eager) */
    ck_assert_msg(seg->closed && seg->open_bytes == end, "%s: open %zu of %zu, the block ending at %zu", what,
                  seg->open_bytes, seg->span_size, end);
    ck_assert_msg(seg->hole && (uint8_t *)p == (uint8_t *)seg + 2 * SF_OS_PAGE,
                  "%s: the block at offset %#zx, not right above the hole", what, (size_t)((uint8_t *)p - (uint8_t *)seg));
    read_maps();
    expect_access(seg, 0, SF_OS_PAGE, READ_WRITE, what);
    expect_access(seg, SF_OS_PAGE, 2 * SF_OS_PAGE, NO_ACCESS, what);
    expect_access(seg, 2 * SF_OS_PAGE, end, READ_WRITE, what);
    expect_access(seg, end, seg->span_size, NO_ACCESS, what);
    ck_assert_msg(write_faults((uint8_t *)p + n + ST_MIB), "%s: a write 1 MiB past the block did not fault", what);
    ck_assert_msg(write_faults((uint8_t *)p - 1), "%s: a write 1 byte below the block did not fault", what);
    return seg;
}

struct medium_run {
    void *blocks[4];
};

static void *new_medium_blocks(void *arg)
{
    struct medium_run *m = arg;
    for (int i = 0; i < 4; i++) {
        m->blocks[i] = sefer_malloc(MEDIUM);
        ck_assert_ptr_nonnull(m->blocks[i]);
        memset(m->blocks[i], 6, MEDIUM);
    }
    const sf_segment_t *seg = sf_segment_of(m->blocks[0]);
    ck_assert_msg(!seg->closed && seg->open_bytes == SF_SEG_SIZE, "a segment made with the knob off is closed");
    read_maps();
    expect_access(seg, 0, SF_SEG_SIZE, READ_WRITE, "a segment made with the knob off from a span cached closed");
    return NULL;
}

START_TEST(test_large_span_slack)
{
    /* (cached spans hold no page: how far a reused span stays open is
     * then the new block's end alone) */
    ST_KNOB_SET("decommit.policy", "eager");
    ST_KNOB_SET("large_cache.ttl", "3600000");
    sefer_trim();
    bool closing = sf_guard_level <= 1 && strcmp(st_knob_get("guard.unused_no_access"), "true") == 0;

    /* a fresh span: closed past the block */
    unsigned char *a = sefer_malloc(LARGE);
    ck_assert_ptr_nonnull(a);
    memset(a, 1, LARGE);
    expect_span(a, LARGE, closing, "a fresh large block's span");

    /* grown in place: the span opens as far as the block needs */
    unsigned char *g = sefer_realloc(a, 3 * LARGE);
    ck_assert_ptr_nonnull(g);
    memset(g, 2, 3 * LARGE);
    sf_segment_t *sg = expect_span(g, 3 * LARGE, closing, "a large block grown by realloc");
    if (sf_guard_level >= 2) { /* (its spans wait in a quarantine, and are neither split nor joined) */
        sefer_free(g);
        return;
    }
    ck_assert_ptr_eq(g, a);

    /* cached (the span freed last cools: another one freed after it lets
     * it be taken), then reused for a bigger block: opened */
    sefer_trim();
    sefer_free(g);
    unsigned char *x = sefer_malloc(LARGE);
    ck_assert_ptr_nonnull(x);
    sefer_free(x);
    unsigned char *b = sefer_malloc(5 * LARGE);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_eq(sf_segment_of(b), sg);
    memset(b, 3, 5 * LARGE);
    expect_span(b, 5 * LARGE, closing, "a cached span reused for a bigger block");

    /* and for a smaller one: closed again past it */
    sefer_trim();
    sefer_free(b);
    x = sefer_malloc(LARGE);
    ck_assert_ptr_nonnull(x);
    sefer_free(x);
    unsigned char *d = sefer_malloc(LARGE + 8 * SF_OS_PAGE);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_eq(sf_segment_of(d), sg);
    memset(d, 4, LARGE + 8 * SF_OS_PAGE);
    expect_span(d, LARGE + 8 * SF_OS_PAGE, closing, "a cached span reused for a smaller block");
    ck_assert_int_eq(sefer_check(), 0);

    /* made into a medium segment (a new thread's heap has none) with the
     * knob turned off since: opened whole (its blocks reach past where the
     * span was closed) */
    sefer_trim();
    sefer_free(d);
    x = sefer_malloc(LARGE);
    ck_assert_ptr_nonnull(x);
    sefer_free(x);
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("threads.small_from", "0");
    ST_KNOB_SET("guard.unused_no_access", "false");
    struct medium_run m = {{NULL}};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, new_medium_blocks, &m), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_ptr_eq(sf_segment_of(m.blocks[0]), sg);
    ck_assert_int_eq(sefer_check(), 0);
    for (int i = 0; i < 4; i++) sefer_free(m.blocks[i]);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

/* The cache's own figures, on a span of three segments it was given closed
 * past 1 MiB and with its hole: split, the front keeps its share of the
 * open part and the hole, the back ones neither; joined again, the lower
 * pieces are opened to their ends and the upper ones' holes opened, so
 * that the open part stays a prefix and the one hole is the whole's. */
START_TEST(test_cache_keeps_open_part)
{
    if (sf_guard_level >= 2)
        return; /* (spans neither split nor joined) */
    ST_KNOB_SET("decommit.policy", "never");
    ST_KNOB_SET("large_cache.ttl", "3600000");
    sefer_trim(); /* (the cache empty) */
    size_t whole = 3 * SF_SEG_SIZE, open0 = ST_MIB + SF_OS_PAGE, seg = SF_SEG_SIZE;
    uint8_t *base = sf_os_map_aligned(whole, SF_SEG_SIZE);
    ck_assert_ptr_nonnull(base);
    ck_assert(sf_os_no_access(base + SF_OS_PAGE, SF_OS_PAGE));
    ck_assert(sf_os_no_access(base + open0, whole - open0));
    ck_assert(sf_cache_put(base, whole, 0, 0, (sf_span_access_t){open0, 0, true}, false));

    size_t size, committed;
    sf_span_access_t a;
    bool pages;
    uint8_t *first = sf_cache_take(seg, seg, 0, &size, &committed, &a, &pages);
    ck_assert_ptr_eq(first, base);
    ck_assert_uint_eq(size, seg);
    ck_assert_uint_eq(a.open, open0);
    ck_assert(a.hole);
    uint8_t *second = sf_cache_take(seg, seg, 0, &size, &committed, &a, &pages);
    ck_assert_ptr_eq(second, base + seg);
    ck_assert_uint_eq(a.open, 0);
    ck_assert(!a.hole);

    /* back: the first alone (its neighbours are taken and cached closed),
     * then the second, which joins both: opened whole, the first to its end */
    ck_assert(sf_cache_put(first, seg, 0, 0, (sf_span_access_t){open0, 0, true}, false));
    ck_assert(sf_cache_put(second, seg, 0, 0, (sf_span_access_t){0, 0, false}, false));
    read_maps();
    expect_access(base, 0, SF_OS_PAGE, READ_WRITE, "two pieces joined below a third");
    expect_access(base, SF_OS_PAGE, 2 * SF_OS_PAGE, NO_ACCESS, "the hole of the lowest piece");
    expect_access(base, 2 * SF_OS_PAGE, 2 * seg, READ_WRITE, "two pieces joined below a third");
    expect_access(base, 2 * seg, whole, NO_ACCESS, "the third piece");
    uint8_t *all = sf_cache_take(whole, whole, 0, &size, &committed, &a, &pages);
    ck_assert_ptr_eq(all, base);
    ck_assert_uint_eq(size, whole);
    ck_assert_uint_eq(a.open, 2 * seg);
    ck_assert(a.hole);

    /* two spans with a hole each, side by side: the upper one's hole is
     * opened as it joins the lower */
    munmap(base + 2 * seg, seg);
    ck_assert(sf_os_protect(base + 2 * seg - seg, seg, true));
    ck_assert(sf_os_no_access(base + seg + SF_OS_PAGE, SF_OS_PAGE));
    ck_assert(sf_cache_put(base, seg, 0, 0, (sf_span_access_t){seg, 0, true}, false));
    ck_assert(sf_cache_put(base + seg, seg, 0, 0, (sf_span_access_t){seg, 0, true}, false));
    read_maps();
    expect_access(base, SF_OS_PAGE, 2 * SF_OS_PAGE, NO_ACCESS, "the joined span's hole");
    expect_access(base, 2 * SF_OS_PAGE, 2 * seg, READ_WRITE, "two spans with holes joined");
    all = sf_cache_take(2 * seg, 2 * seg, 0, &size, &committed, &a, &pages);
    ck_assert_ptr_eq(all, base);
    ck_assert_uint_eq(a.open, 2 * seg);
    ck_assert(a.hole);
    munmap(base, 2 * seg);
}
END_TEST

/* A cached span handed to the cache as span_map would make it (counted
 * in stats.segments and stats.reserved, as the cache's unmap uncounts it),
 * with what may be resident and no hole. */
static uint8_t *cached_span(size_t resident)
{
    ck_assert(sf_reserve_segments(1));
    uint8_t *base = sf_os_map_aligned(SF_SEG_SIZE, SF_SEG_SIZE);
    ck_assert_ptr_nonnull(base);
    sf_stat_add(&sf_gstats.reserved, SF_SEG_SIZE);
    if (resident != 0)
        memset(base, 9, resident);
    ck_assert(sf_cache_put(base, SF_SEG_SIZE, resident, 0, (sf_span_access_t){SF_SEG_SIZE, 0, false}, false));
    return base;
}

/* The hole is made only in a span that reads as zero: a reused span that
 * may hold old pages (a piece of a split or a join, in a loop over blocks
 * of varying sizes) keeps none, and its block still starts at 8 KiB. */
START_TEST(test_hole_only_where_zero)
{
    if (sf_guard_level >= 2 || strcmp(st_knob_get("guard.unused_no_access"), "true") != 0)
        return;
    ST_KNOB_SET("decommit.policy", "never");
    ST_KNOB_SET("large_cache.ttl", "3600000");
    sefer_trim(); /* (the cache empty) */
    uint8_t *warm = cached_span(SF_SEG_SIZE);
    void *p = sefer_malloc(LARGE);
    ck_assert_ptr_eq(sf_segment_of(p), warm);
    ck_assert_ptr_eq(p, warm + 2 * SF_OS_PAGE);
    ck_assert_msg(!sf_segment_of(p)->hole, "a hole made in a span that may hold old pages");
    read_maps();
    /* (its page below the block open; what is past the block is the
     * cache's business: old pages of released segments go back a
     * megabyte past it, and are closed) */
    expect_access(warm, 0, 2 * SF_OS_PAGE + LARGE, READ_WRITE, "a warm span reused");
    sefer_free(p);
    sefer_trim();
    uint8_t *cold = cached_span(0);
    p = sefer_malloc(LARGE);
    ck_assert_ptr_eq(sf_segment_of(p), cold);
    ck_assert_msg(sf_segment_of(p)->hole, "no hole made in a span that reads as zero");
    expect_span(p, LARGE, true, "a cold cached span reused");
    sefer_free(p);
}
END_TEST

/* A knob change applies to segments made after it: off at run time, the
 * next fresh segment stays open. */
static void *fresh_segment(void *arg)
{
    void *p = sefer_malloc(64);
    ck_assert_ptr_nonnull(p);
    *(const sf_segment_t **)arg = sf_segment_of(p);
    ck_assert_msg(!sf_segment_of(p)->closed, "a segment made with the knob off is closed");
    sefer_free(p);
    return NULL;
}

START_TEST(test_knob_off_at_run_time)
{
    ST_KNOB_SET("large_cache.slots", "0");
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("guard.unused_no_access", "false");
    sefer_trim();
    const sf_segment_t *seg = NULL;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fresh_segment, &seg), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_ptr_nonnull(seg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("unused-no-access");
    TCase *tc = tcase_create("segments");
    tcase_add_test(tc, test_unused_part_no_access);
    tcase_add_test(tc, test_knob_off_at_run_time);
    tcase_add_test(tc, test_large_span_slack);
    tcase_add_test(tc, test_cache_keeps_open_part);
    tcase_add_test(tc, test_hole_only_where_zero);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
