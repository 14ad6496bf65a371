/* test_entry_bounds.c - the exported malloc and free under every state
 * sf_entry_choose can leave a concurrent caller in (lib/entry.c; linked
 * statically, so the test can set lib/internal.h's sf_entry_bounds).
 *
 * The exported pair reads its bounds with plain loads, and sf_entry_choose
 * zeroes them one store at a time while other threads may be in malloc:
 * a caller can see any of them zero and the others not yet.  For each of
 * those states (and the flags off: levels 0-1), malloc of every size at
 * the tables' edges returns a block that holds the request, free takes it
 * back, and the heap checks clean.  The first version of the bounds
 * (e5f5168) sent malloc(0) with small_end zero and the medium bound not yet
 * to the medium table's index -1: a load 2^53 bytes away (found in review,
 * confirmed under gdb). */
#include "sefer_test.h"

#include "internal.h"

static const size_t sizes[] = {0,
                               1,
                               16,
                               SF_DIRECT_MAX - 1,
                               SF_DIRECT_MAX,
                               SF_DIRECT_MAX + 1,
                               SF_DIRECT_MAX + 2048,
                               SF_MEDIUM_MAX - 1,
                               SF_MEDIUM_MAX,
                               SF_MEDIUM_MAX + 1,
                               (size_t)1 << 20};

START_TEST(test_every_partial_state)
{
    sf_entry_bounds_t full = sf_entry_bounds;
    /* (the state a malloc before this one left: levels 0-1, initialised) */
    free(malloc(1));
    full = sf_entry_bounds;
    ck_assert_uint_eq(full.small_end, SF_DIRECT_MAX + 1);
    ck_assert(!full.malloc_l2 && !full.free_l2 && !full.free_counted);
    for (unsigned zeroed = 0; zeroed < 8; zeroed++) {
        sf_entry_bounds_t b = full;
        if (zeroed & 1) b.small_end = 0;
        if (zeroed & 2) b.medium_span = 0;
        if (zeroed & 4) b.chunk_end = 0;
        sf_entry_bounds = b;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            unsigned char *p = malloc(n);
            ck_assert_msg(p != NULL, "state %u: malloc(%zu) failed", zeroed, n);
            ck_assert_msg(sefer_usable_size(p) >= n, "state %u: malloc(%zu) holds %zu", zeroed, n,
                          sefer_usable_size(p));
            memset(p, 0x5a, n);
            free(p);
        }
        sf_entry_bounds = full;
        ck_assert_msg(sefer_check() == 0, "state %u: the heap checks unclean", zeroed);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("entry-bounds");
    TCase *tc = tcase_create("states");
    tcase_add_test(tc, test_every_partial_state);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
