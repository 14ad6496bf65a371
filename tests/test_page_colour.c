/* test_page_colour.c - medium pages coloured (lib/internal.h,
 * sf_page_colour; linked statically, so the test reads the page
 * descriptors).  A medium class whose size is not a power of two starts
 * its page's first block some cache lines past its natural place, within
 * the page's slack; aligned requests never get such a class past 64-byte
 * alignment.  meson runs it plain and at guard level 2.
 *
 *   - every medium class: its page's first block at the colour the class
 *     asks for (or the slack's whole lines), no block lost to it, and the
 *     coloured classes' first blocks on at least 8 different sets of
 *     64-byte lines within 4 KiB;
 *   - aligned requests of 64 B to 64 KiB alignment and 1 KiB to 256 KiB:
 *     every block aligned, usable for its size, and the heap checks
 *     clean. */
#include "sefer_test.h"

#include "internal.h"

START_TEST(test_medium_pages_coloured)
{
    bool set_used[64] = {false};
    unsigned sets = 0, coloured = 0;
    void *held[SF_CLASS_COUNT] = {NULL};
    for (unsigned c = SF_MEDIUM_CLASS_MIN; c < SF_CLASS_COUNT; c++) {
        uint32_t bs = sf_class_size[c];
        /* (at level 2 the request leaves room for the tail: the same class) */
        size_t n = sf_guard_level >= 2 ? bs - 64 : bs;
        unsigned char *p = sefer_malloc(n);
        ck_assert_ptr_nonnull(p);
        held[c] = p;
        const sf_page_t *page = sf_page_of(sf_segment_of(p), p);
        if (page->flags & SF_PAGE_SPAN) continue; /* (decommit.policy = eager: the largest classes are spans) */
        ck_assert_uint_eq(page->block_size, bs);
        uintptr_t natural = bs & (0u - bs);
        const uint8_t *place = (const uint8_t *)sf_align_up((uintptr_t)page->page_start, natural);
        const uint8_t *end = page->page_start + page->page_bytes;
        size_t room = (size_t)(end - place), shift = (size_t)(page->block_start - place);
        ck_assert_uint_eq(page->reserved, room / bs); /* no block lost */
        if (!sf_class_coloured(bs)) {
            ck_assert_uint_eq(shift, 0);
            ck_assert_uint_eq((uintptr_t)p % natural, 0);
            continue;
        }
        size_t want = (size_t)((c * 23u) & 63u) * 64u, slack = room % bs;
        ck_assert_uint_eq(shift, want <= slack ? want : (want % (slack + 64)) & ~(size_t)63);
        ck_assert_uint_eq((uintptr_t)p % 64, 0);
        unsigned set = (unsigned)(((uintptr_t)page->block_start >> 6) & 63);
        if (!set_used[set]) sets++;
        set_used[set] = true;
        coloured++;
    }
    ck_assert_uint_ge(coloured, 8);
    ck_assert_uint_ge(sets, 8);
    for (unsigned c = 0; c < SF_CLASS_COUNT; c++) sefer_free(held[c]);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

START_TEST(test_aligned_requests_stay_aligned)
{
    for (size_t align = 64; align <= 64 * ST_KIB; align *= 2) {
        for (size_t n = ST_KIB; n <= 256 * ST_KIB; n += n / 3 + 1) {
            void *p = NULL;
            ck_assert_int_eq(sefer_posix_memalign(&p, align, n), 0);
            ck_assert_msg((uintptr_t)p % align == 0, "posix_memalign(%zu, %zu) gave %p", align, n, p);
            ck_assert_uint_ge(sefer_usable_size(p), n);
            memset(p, 0x5a, n);
            void *q = sefer_aligned_alloc(align, (n + align - 1) / align * align);
            ck_assert_ptr_nonnull(q);
            ck_assert_msg((uintptr_t)q % align == 0, "aligned_alloc(%zu, %zu) gave %p", align, n, q);
            sefer_free(q);
            sefer_free(p);
        }
    }
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("page-colour");
    TCase *tc = tcase_create("medium");
    tcase_add_test(tc, test_medium_pages_coloured);
    tcase_add_test(tc, test_aligned_requests_stay_aligned);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
