/* test_sample_countdown.c - the heap profile's countdown running out on
 * each path that counts (lib/fastpath.h, sf_sample_tick; lib/profile.c,
 * sf_sample_take).  Linked statically, so the test sets its own heap's
 * countdown (lib/types.h, sf_heap_t.countdown) to 0 and the next
 * allocation meets the run-out, deterministically.  Run with the profile
 * off (meson: `sample-countdown`) and on at 64 KiB (`-profile`).
 *
 *   - a small pop whose page holds blocks on its free list and on
 *     local_free: the blocks come off the free list, then local_free, none
 *     lost.  The first version served a run-out the generic way, whose
 *     swap takes the free list to be empty: it overwrote the free list
 *     (with the profile off every 16 MiB of a heap's allocations: churn of
 *     256 B blocks ran 4x slower, its pages filling with lost blocks);
 *   - a medium pop, an aligned request (its class's pop, sf_heap_pop) and
 *     calloc: each returns a block of its request, the aligned one
 *     aligned, the calloc'ed one zero.  (With the profile off the entry
 *     paths do not count, so there the run-outs come on the slow paths
 *     only: the local_free swap, sf_heap_pop, sf_page_malloc_class.)
 *   - every run-out leaves the countdown at or above zero, and the heap
 *     checks clean;
 *   - every allocation is counted once in the heap's `allocs`, whichever
 *     path served it and whether its countdown ran out or not (the counting
 *     paths count in the countdown word's low part: lib/internal.h, "The
 *     countdown word"), and armed, malloc(0) takes a byte of the countdown
 *     (the word's count cannot reach its high half);
 *   - with the sampled guard at one sample a byte (`-sampled`), the guard's
 *     point on the same countdown (lib/profile.c, "one countdown, two
 *     points"): a small pop's run-out is served from a slot, its lists
 *     kept; a medium one, too big for a slot, by its pop again; an aligned
 *     one by its class, the point passed on. */
#include "sefer_test.h"

#include "internal.h"
#include "class_list_room.h"

static void run_out(void) { sf_countdown_set(sf_tls_heap, 0); }

/* Checks what the run-out left, then keeps the countdown out of the way
 * of the allocations between the ones under test. */
static void countdown_armed(void) {
    ck_assert_msg(sf_countdown_left(sf_tls_heap) >= 0, "countdown %lld after a run-out",
                  (long long)sf_countdown_left(sf_tls_heap));
    sf_countdown_set(sf_tls_heap, SF_COUNTDOWN_MAX);
}

#define LISTS_SIZE 1000

START_TEST(test_lists_kept) {
    /* with the profile on, a run-out may be a sample, and with the sampled
     * guard at one sample a byte (`-sampled`) every run-out after the
     * heap's first is the guard's (a slot's block, whose usable size is the
     * request's): either comes from elsewhere, and the lists are kept for
     * the next malloc */
    bool exact = getenv("SEFER_PROFILE_SAMPLE_BYTES") == NULL && getenv("SEFER_GUARD_SAMPLE_BYTES") == NULL;
    int guarded = 0;
    free(malloc(1)); /* (a heap of its own) */
    st_class_list_no_room(LISTS_SIZE); /* (the page's own lists) */
    sf_countdown_set(sf_tls_heap, SF_COUNTDOWN_MAX);
    void *v[8];
    for (int i = 0; i < 8; i++) v[i] = malloc(LISTS_SIZE);
    for (int i = 0; i < 4; i++) free(v[i]); /* on top of the free list: v[3] first */
    void *q = malloc(LISTS_SIZE);
    ck_assert_ptr_eq(q, v[3]);
    void *moved = realloc(q, 20000); /* q moves: held by the heap (guarded.c) */
    ck_assert_ptr_ne(moved, q);
    /* the next block realloc moves takes its place, and q goes to its
     * page's local_free */
    void *other = realloc(malloc(100), 30000);
    ck_assert_ptr_nonnull(other);
    /* v[2], v[1], v[0] from the free list, then q (v[3]) from local_free,
     * the countdown running out on each */
    for (int i = 2; i >= 0; i--) {
        run_out();
        void *p = malloc(LISTS_SIZE);
        countdown_armed();
        if (!exact && p != v[i]) {
            guarded += sefer_usable_size(p) == LISTS_SIZE;
            free(p);
            p = malloc(LISTS_SIZE);
        }
        ck_assert_msg(p == v[i], "the free list's top %p, got %p", v[i], p);
    }
    run_out();
    void *last = malloc(LISTS_SIZE);
    countdown_armed();
    if (!exact && last != v[3]) {
        guarded += sefer_usable_size(last) == LISTS_SIZE;
        free(last);
        last = malloc(LISTS_SIZE);
    }
    ck_assert_ptr_eq(last, v[3]);
    if (getenv("SEFER_GUARD_SAMPLE_BYTES") != NULL)
        ck_assert_msg(guarded >= 3, "%d of 4 run-outs placed in the sampled guard's slots", guarded);
    for (int i = 0; i < 8; i++) free(v[i]);
    free(moved);
    free(other);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

START_TEST(test_other_pops) {
    free(malloc(1));
    sf_countdown_set(sf_tls_heap, SF_COUNTDOWN_MAX);
    for (int round = 0; round < 64; round++) {
        size_t medium = 20000 + (size_t)round * 1000, align = (size_t)64 << (round % 8);
        run_out();
        unsigned char *m = malloc(medium);
        countdown_armed();
        ck_assert_ptr_nonnull(m);
        ck_assert_uint_ge(sefer_usable_size(m), medium);
        memset(m, 0x5a, medium);
        void *a = NULL;
        run_out();
        ck_assert_int_eq(posix_memalign(&a, align, align * 3 / 2), 0);
        countdown_armed();
        ck_assert_msg((uintptr_t)a % align == 0, "posix_memalign(%zu) gave %p", align, a);
        ck_assert_uint_ge(sefer_usable_size(a), align * 3 / 2);
        run_out();
        unsigned char *c = calloc(1, 200);
        countdown_armed();
        for (int i = 0; i < 200; i++) ck_assert_uint_eq(c[i], 0);
        free(m);
        free(a);
        free(c);
    }
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

#define COUNTED_N 4000

START_TEST(test_allocs_counted) {
    /* (the sampled guard's slots are no heap's allocations) */
    bool exact = getenv("SEFER_GUARD_SAMPLE_BYTES") == NULL;
    static void *v[COUNTED_N];
    free(malloc(1));
    sf_heap_t *heap = sf_tls_heap;
    /* (no ck_assert inside: each passes its place to the runner, with
     * allocations of its own) */
    int null = 0;
    uint64_t before = sf_heap_allocs(heap);
    for (int i = 0; i < COUNTED_N; i++) {
        if (i % 5 == 0) sf_countdown_set(heap, i % 97); /* run-outs among them */
        size_t n = (size_t)i * 37 % 3000;              /* 0, small and medium */
        v[i] = malloc(n);
        null += v[i] == NULL;
    }
    uint64_t after = sf_heap_allocs(heap);
    ck_assert_int_eq(null, 0);
    for (int i = 0; i < COUNTED_N; i++) free(v[i]);
    if (exact)
        ck_assert_msg(after - before == COUNTED_N, "%d allocations counted %llu", COUNTED_N,
                      (unsigned long long)(after - before));
    if (sf_prof_is_armed()) {
        /* the counted path: one byte and one allocation each */
        free(malloc(0));
        sf_countdown_set(heap, 1000);
        for (int i = 0; i < 600; i++) free(malloc(0));
        uint64_t in_word = (uint64_t)heap->countdown & SF_COUNTDOWN_ALLOCS;
        ck_assert_msg(sf_countdown_left(heap) <= 400, "600 x malloc(0) left %lld of 1000 bytes",
                      (long long)sf_countdown_left(heap));
        ck_assert_uint_ge(in_word, 600);
        uint64_t total = sf_heap_allocs(heap);
        sf_countdown_flush(heap);
        uint64_t left_in_word = (uint64_t)heap->countdown & SF_COUNTDOWN_ALLOCS, moved = sf_heap_allocs(heap);
        ck_assert_uint_eq(left_in_word, 0);
        ck_assert_uint_eq(moved, total);
    }
    sf_countdown_set(heap, SF_COUNTDOWN_MAX);
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sample-countdown");
    TCase *tc = tcase_create("run-outs");
    tcase_add_test(tc, test_lists_kept);
    tcase_add_test(tc, test_other_pops);
    tcase_add_test(tc, test_allocs_counted);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
