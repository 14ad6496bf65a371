/* test_entry_bounds.c - the exported malloc and free and their bounds
 * (lib/entry.c; linked statically, so the test reads and sets
 * lib/internal.h's sf_entry_bounds).  meson runs it plain and with
 * SEFER_GUARD_LEVEL=2 or 3, SEFER_PROFILE_SAMPLE_BYTES and
 * SEFER_GUARD_SAMPLE_BYTES set:
 *
 *   - the mode's bounds and flags: what sf_entry_choose set for the mode
 *     the environment asked for (malloc's bounds zero for level 2, the
 *     sampled guard and the heap profile, free's for levels 2 and 3; malloc's
 *     mode byte, which takes level 2's paths or the counted malloc, and
 *     free's level 2 flag);
 *   - every partial state: the exported pair reads its bounds with plain
 *     loads and sf_entry_choose writes them one store at a time while
 *     other threads may be in malloc, so a caller can see any of them
 *     changed and the others not yet.  In each of the 32 states (each
 *     bound its levels 0-1 value or 0, malloc's mode and free's flag each
 *     as the mode has it or not yet set), malloc of every size at the tables' edges returns a block that
 *     holds the request and, for a small size, is a small block; free
 *     takes it back; the heap checks clean.  And at levels 0-1 (without
 *     the sampled guard, whose samples are random) a malloc
 *     of a class whose page holds blocks on its free list and on
 *     local_free takes the free list's top: a state that sent it to the
 *     generic path (small bound 0, the profile's flag not yet set), whose
 *     swaps took the free list to be empty, overwrote the list and lost
 *     its blocks (found in review of 551f14d).  The first version of the
 *     bounds (e5f5168) sent malloc(0) with small_end zero and the medium
 *     bound not yet to the medium table's index -1: a load 2^53 bytes away
 *     (found in review, confirmed under gdb). */
#include "sefer_test.h"

#include "internal.h"
#include "class_list_room.h"

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

static const sf_entry_bounds_t plain = {.small_end = SF_DIRECT_MAX + 1,
                                        .medium_span = SF_MEDIUM_MAX - SF_DIRECT_MAX,
                                        .chunk_end = SF_SEGMAP_CHUNKS};

#define LISTS_SIZE 1000 /* (a class nothing else here uses) */

static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

START_TEST(test_the_mode_sets_its_bounds)
{
    free(malloc(1)); /* (initialised) */
    const char *level = env_set("SEFER_GUARD_LEVEL") ? getenv("SEFER_GUARD_LEVEL") : "";
    bool level2 = strcmp(level, "2") == 0, level3 = strcmp(level, "3") == 0;
    bool sampled = env_set("SEFER_GUARD_SAMPLE_BYTES"), profiled = env_set("SEFER_PROFILE_SAMPLE_BYTES");
    sf_entry_bounds_t b = sf_entry_bounds;
    /* (level 3's malloc finds its tables empty and goes to its checked
     * path; its free goes there past a zero bound) */
    bool malloc_other = level2 || sampled || profiled, free_other = level2 || level3;
    ck_assert_uint_eq(b.small_end, malloc_other ? 0 : plain.small_end);
    ck_assert_uint_eq(b.medium_span, malloc_other ? 0 : plain.medium_span);
    ck_assert_uint_eq(b.chunk_end, free_other ? 0 : plain.chunk_end);
    /* (the sampled guard counts on the profile's countdown, but at level 3) */
    bool counted = !level2 && (sampled ? !level3 : profiled);
    ck_assert_uint_eq(b.malloc_mode, level2 ? SF_ENTRY_L2 : counted ? SF_ENTRY_COUNTED : SF_ENTRY_PLAIN);
    ck_assert_int_eq(b.free_l2, level2);
}
END_TEST

START_TEST(test_every_partial_state)
{
    free(malloc(1)); /* (initialised) */
    st_class_list_no_room(LISTS_SIZE); /* (the page's own lists, below) */
    sf_entry_bounds_t mode = sf_entry_bounds;
    for (unsigned state = 0; state < 32; state++) {
        sf_entry_bounds_t b = mode;
        b.small_end = state & 1 ? 0 : plain.small_end;
        b.medium_span = state & 2 ? 0 : plain.medium_span;
        b.chunk_end = state & 4 ? 0 : plain.chunk_end;
        /* (malloc's mode, level 2's or the counted one, set or not yet) */
        b.malloc_mode = state & 8 ? mode.malloc_mode : SF_ENTRY_PLAIN;
        b.free_l2 = state & 16 ? mode.free_l2 : false;
        /* a page whose free list and local_free both hold blocks (levels
         * 0-1, without the sampled guard, whose samples come from slots of
         * their own at random: it took v[1] once, in the UBSan build): the
         * state's malloc must take the free list's top */
        void *v[4], *moved = NULL;
        bool lists = sf_guard_level < 2 && !env_set("SEFER_GUARD_SAMPLE_BYTES");
        if (lists) {
            for (int i = 0; i < 4; i++) v[i] = malloc(LISTS_SIZE);
            void *q = malloc(LISTS_SIZE);
            free(v[0]);
            free(v[1]); /* the free list's top */
            moved = realloc(q, 20000); /* q onto local_free */
        }
        sf_entry_bounds = b;
        if (lists) {
            sf_countdown_set(sf_tls_heap, SF_COUNTDOWN_MAX); /* (no sample: it would come from a page of its own) */
            void *p = malloc(LISTS_SIZE);
            ck_assert_msg(p == v[1], "state %u: the free list's top %p, got %p", state, v[1], p);
            free(p);
            for (int i = 2; i < 4; i++) free(v[i]);
            free(moved);
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            unsigned char *p = malloc(n);
            ck_assert_msg(p != NULL, "state %u: malloc(%zu) failed", state, n);
            size_t usable = sefer_usable_size(p);
            ck_assert_msg(usable >= n, "state %u: malloc(%zu) holds %zu", state, n, usable);
            /* (a small size sent to mdirect[] would get a medium block) */
            if (n <= SF_DIRECT_MAX)
                ck_assert_msg(usable <= SF_SMALL_MAX, "state %u: malloc(%zu) got a block of %zu", state, n, usable);
            memset(p, 0x5a, n);
            free(p);
        }
        sf_entry_bounds = mode;
        ck_assert_msg(sefer_check() == 0, "state %u: the heap checks unclean", state);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("entry-bounds");
    TCase *tc = tcase_create("states");
    tcase_add_test(tc, test_the_mode_sets_its_bounds);
    tcase_add_test(tc, test_every_partial_state);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
