/* test_size_table.c - the size-class tables themselves (lib/sizeclass.c,
 * linked into this test; test_size_classes.c checks what the allocator
 * hands out under traffic):
 *
 *   - sf_class_of: for every size from 1 B to SEFER_MEDIUM_MAX, the class
 *     holds the size and the class below does not (the smallest fit);
 *   - sf_medium_class_index, the medium malloc fast path's table by 2 KiB
 *     step: for every medium size, the mdirect[] index of sf_class_of's
 *     class (a wrong entry hands out a block of the wrong class, which the
 *     traffic test sees only when the class is too small). */
#include "sefer_test.h"

#include "internal.h"

/* (Every size is tested with a plain if and fails with ck_abort_msg: a
 * passing ck_assert_msg sends its place to the forked runner's parent, a
 * write to a pipe for each of 786 432 assertions, which beside other work
 * took the first test past check's 4 s timeout once in CI; 0.04 s now.) */
START_TEST(test_class_of_is_the_smallest_fit)
{
    for (size_t n = 1; n <= SF_MEDIUM_MAX; n++) {
        unsigned c = sf_class_of(n);
        if (c < 1 || c >= SF_CLASS_COUNT)
            ck_abort_msg("size %zu: class %u", n, c);
        if (sf_class_size[c] < n)
            ck_abort_msg("size %zu: class %u holds %u", n, c, sf_class_size[c]);
        if (c != 1 && sf_class_size[c - 1] >= n)
            ck_abort_msg("size %zu: class %u, but %u holds %u", n, c, c - 1, sf_class_size[c - 1]);
    }
}
END_TEST

START_TEST(test_medium_table_agrees_with_class_of)
{
    for (size_t n = SF_SMALL_MAX + 1; n <= SF_MEDIUM_MAX; n++)
        if (sf_medium_class_index(n) != sf_class_of(n) - SF_MEDIUM_CLASS_MIN)
            ck_abort_msg("size %zu: table says %u, sf_class_of %u", n, sf_medium_class_index(n),
                         sf_class_of(n) - SF_MEDIUM_CLASS_MIN);
    ck_assert_uint_eq(sf_medium_class_index(SF_MEDIUM_MAX), SF_MDIRECT_COUNT - 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("size-table");
    TCase *tc = tcase_create("tables");
    tcase_set_timeout(tc, 60); /* (a hang guard, not a judge of speed) */
    tcase_add_test(tc, test_class_of_is_the_smallest_fit);
    tcase_add_test(tc, test_medium_table_agrees_with_class_of);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
