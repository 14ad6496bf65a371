/* test_segment_header.c - a small segment's page descriptors are written
 * when their pages are first taken (lib/segment.c, segment_ready_to; linked
 * statically, so the test reads the segment header).  A fresh segment's 63
 * descriptors fill 8 KiB; a heap that uses a few of its pages must leave
 * the descriptors past them blank, so that the header's second OS page is
 * never written.  meson runs it plain and at guard level 2 (guard pages:
 * the last page a guard page shorter).
 *
 *   - a new thread's heap on a fresh segment: after blocks of 16 classes,
 *     pages_ready is the pages taken, every descriptor past it all zero and
 *     its page free, the header's second OS page not resident (mincore),
 *     and sefer_check clean (check.c verifies the same of every segment);
 *   - the same heap taking 40 pages more: every ready descriptor holds its
 *     page's place, the last one too when all 63 are taken (less a guard
 *     page at level 2), and after everything is freed and trimmed the
 *     heap checks clean (the segment's release reads the ready ones). */
#include "sefer_test.h"

#include <sys/mman.h>

#include "internal.h"

#define CLASSES 16
#define BIG 4000 /* a small class (4096 B, with level 2's tail too): 16 blocks a page */

static bool resident(const void *p)
{
    unsigned char v = 0;
    ck_assert_int_eq(mincore((void *)((uintptr_t)p & ~(uintptr_t)(SF_OS_PAGE - 1)), SF_OS_PAGE, &v), 0);
    return v & 1;
}

static void check_descriptors(const sf_segment_t *seg)
{
    ck_assert_uint_le(seg->pages_ready, seg->page_count);
    for (unsigned i = 0; i < seg->page_count; i++) {
        const sf_page_t *pg = &seg->pages[i];
        size_t start = (size_t)(i + seg->page_bias) << seg->page_shift;
        if (i < seg->pages_ready) {
            ck_assert_ptr_eq(pg->page_start, (const uint8_t *)seg + start);
            size_t bytes = ((size_t)1 << seg->page_shift) -
                           (sf_guard_level >= 2 && i == (unsigned)seg->page_count - 1 ? SF_OS_PAGE : 0);
            ck_assert_uint_eq(pg->page_bytes, bytes);
        } else {
            static const sf_page_t blank;
            ck_assert_msg(memcmp(pg, &blank, sizeof blank) == 0, "descriptor %u past the ready ones is written", i);
            ck_assert_msg((seg->free_mask >> i) & 1, "page %u never taken but not free", i);
        }
    }
}

struct run {
    void *small[CLASSES];
    void *big[64 * 16];
    size_t nbig;
    const sf_segment_t *seg;
    unsigned ready_first;
    bool second_page_resident;
};

static void *thread_main(void *arg)
{
    struct run *r = arg;
    for (int c = 0; c < CLASSES; c++) {
        size_t n = sf_class_size[c + 1]; /* (16 B to 512 B: a class each) */
        r->small[c] = sefer_malloc(n);
        ck_assert_ptr_nonnull(r->small[c]);
        memset(r->small[c], 1, n);
    }
    r->seg = sf_segment_of(r->small[0]);
    for (int c = 1; c < CLASSES; c++) ck_assert_ptr_eq(sf_segment_of(r->small[c]), r->seg);
    r->ready_first = r->seg->pages_ready;
    /* (before anything reads the blank descriptors: a read maps the zero
     * page, which mincore counts) */
    r->second_page_resident = resident((const uint8_t *)r->seg + SF_OS_PAGE);
    check_descriptors(r->seg);
    ck_assert_int_eq(sefer_check(), 0);
    /* the rest of the segment: 4000-byte blocks until one lands in another segment */
    for (r->nbig = 0; r->nbig < sizeof r->big / sizeof r->big[0]; r->nbig++) {
        void *p = sefer_malloc(BIG);
        ck_assert_ptr_nonnull(p);
        memset(p, 2, 64);
        r->big[r->nbig] = p;
        if (sf_segment_of(p) != r->seg) {
            r->nbig++;
            break;
        }
    }
    check_descriptors(r->seg);
    ck_assert_int_eq(sefer_check(), 0);
    for (size_t i = 0; i < r->nbig; i++) sefer_free(r->big[i]);
    for (int c = 0; c < CLASSES; c++) sefer_free(r->small[c]);
    sefer_trim();
    ck_assert_int_eq(sefer_check(), 0);
    return NULL;
}

START_TEST(test_descriptors_written_when_taken)
{
    /* a fresh mapping for the thread's segment: nothing cached to reuse */
    ST_KNOB_SET("large_cache.slots", "0");
    ST_KNOB_SET("threads.heap_after", "0"); /* (its blocks on its own heap from the first) */
    ST_KNOB_SET("threads.small_from", "0"); /* (a page of each of its classes) */
    sefer_trim();
    struct run r;
    memset(&r, 0, sizeof r);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_main, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    /* 16 classes, one page each, taken lowest first */
    ck_assert_uint_eq(r.ready_first, CLASSES);
    ck_assert_msg(!r.second_page_resident, "the header's second page was written with %u pages ready",
                  r.ready_first);
    ck_assert_uint_ge(r.nbig, 40);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("segment-header");
    TCase *tc = tcase_create("descriptors");
    tcase_add_test(tc, test_descriptors_written_when_taken);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
