/* test_small_heaps.c - a thread's new heap starts small once the process
 * has had threads.small_from heaps at once (docs/design.md "Small heaps"):
 * its small requests take the power-of-two classes until a page of one of
 * them fills, then every size its own class.  Through the public API: the
 * class a block came from is its usable size.  Most cases set the knob to 1
 * (every thread's heap but the first thread's starts small).
 *
 *   - a new thread's requests up to 512 B get power-of-two blocks of at
 *     least 64 B, larger ones their own class, aligned ones stay aligned;
 *     the first thread's and a thread's with the knob off get their own
 *     classes;
 *   - pages of 8000-byte blocks filled: the heap stays small; a page of
 *     128-byte blocks filled: it leaves small mode (33 B then gets a 48-byte
 *     block), not before half a page was handed out; the 64-byte class,
 *     which serves every request up to 64 B, past 16 KiB of blocks carved:
 *     it leaves small mode then, not before;
 *     every block written before and after keeps its bytes, and the
 *     consistency checker (which knows which page each direct-table entry
 *     may name in each mode) is clean in both modes;
 *   - the knob changed at run time moves heaps claimed after it, not the
 *     heaps that exist;
 *   - at its default, 16: threads claiming heaps one after another while
 *     the earlier ones live, the first 15 heaps (the first thread's among
 *     them) keep every class and the 16th and later start small. */
#include "sefer_test.h"

#define PAGE_BLOCKS_128 512 /* 64 KiB page / 128 B */
#define CARVED_BLOCKS_64 256 /* SF_SMALL_HEAP_MIN_CARVED / 64 B */

static size_t usable_of(size_t n)
{
    void *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    size_t u = sefer_usable_size(p);
    sefer_free(p);
    return u;
}

static void *small_classes(void *arg)
{
    (void)arg;
    ck_assert_uint_eq(usable_of(1), 64);
    ck_assert_uint_eq(usable_of(17), 64);
    ck_assert_uint_eq(usable_of(33), 64);
    ck_assert_uint_eq(usable_of(48), 64);
    ck_assert_uint_eq(usable_of(100), 128);
    ck_assert_uint_eq(usable_of(129), 256);
    ck_assert_uint_eq(usable_of(300), 512);
    ck_assert_uint_eq(usable_of(512), 512);
    /* above 512 B and medium: their own classes */
    ck_assert_uint_eq(usable_of(513), 640);
    ck_assert_uint_eq(usable_of(5000), 5120);
    ck_assert_uint_eq(usable_of(9000), 10240);
    void *a = sefer_aligned_alloc(32, 96); /* its class, 96 B, a multiple of 32: 128 B here */
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 32, 0);
    ck_assert_uint_eq(sefer_usable_size(a), 128);
    sefer_free(a);
    /* a shrink within the smallest class stays where it is (a move would
     * take another 64-byte block) */
    char *r = sefer_malloc(60);
    ck_assert_ptr_nonnull(r);
    memset(r, 7, 60);
    ck_assert_ptr_eq(sefer_realloc(r, 10), r);
    ck_assert_uint_eq(r[9], 7);
    sefer_free(r);
    ck_assert_int_eq(sefer_check(), 0);
    return NULL;
}

static void *own_classes(void *arg)
{
    (void)arg;
    ck_assert_uint_eq(usable_of(33), 48);
    ck_assert_uint_eq(usable_of(300), 320);
    return NULL;
}

START_TEST(test_new_thread_starts_small)
{
    ST_KNOB_SET("threads.heap_after", "0"); /* its own heap from the first allocation */
    ST_KNOB_SET("threads.small_from", "1");
    st_on_thread(small_classes, NULL);
    /* the process's first thread keeps every class */
    ck_assert_uint_eq(usable_of(33), 48);
    ck_assert_uint_eq(usable_of(300), 320);
    ST_KNOB_SET("threads.small_from", "0");
    st_on_thread(own_classes, NULL);
}
END_TEST

#define MIXED 64

/* arg: the size of the blocks the heap grows by, 128 (a page of them
 * fills) or 64 (the smallest class past one OS page). */
static void *grows(void *arg)
{
    size_t size = (size_t)(uintptr_t)arg;
    /* blocks of many sizes while small */
    unsigned char *mixed[MIXED];
    size_t tiny = 0; /* of them, in the 64-byte class */
    for (unsigned i = 0; i < MIXED; i++) {
        size_t n = 16 + (size_t)i * 61 % 2000;
        mixed[i] = sefer_malloc(n);
        ck_assert_ptr_nonnull(mixed[i]);
        st_pat_fill(mixed[i], n, i);
        tiny += n <= 64;
    }
    ck_assert_int_eq(sefer_check(), 0);
    /* pages of a class above 512 B fill with 8 blocks of 8000 B: no
     * matter, the power-of-two classes' pages are what count */
    unsigned char *large[3 * 8];
    for (unsigned i = 0; i < 3 * 8; i++) {
        large[i] = sefer_malloc(8000);
        ck_assert_ptr_nonnull(large[i]);
        st_pat_fill(large[i], 8000, i);
    }
    ck_assert_uint_eq(usable_of(33), 64);
    /* blocks of `size` until 33 B gets its own class */
    static unsigned char *b[4 * PAGE_BLOCKS_128];
    size_t n = 0, left_at = 0;
    while (n < 4 * PAGE_BLOCKS_128) {
        b[n] = sefer_malloc(size);
        ck_assert_ptr_nonnull(b[n]);
        st_pat_fill(b[n], size, (unsigned)n);
        n++;
        if (usable_of(33) == 48) {
            left_at = n;
            break;
        }
    }
    ck_assert_msg(left_at != 0, "still small after %zu blocks of %zu B", n, size);
    if (size == 128) {
        ck_assert_msg(left_at >= PAGE_BLOCKS_128 / 2, "left small mode after only %zu blocks of 128 B", left_at);
    } else {
        /* (the 257th block carved is past 16 KiB: this loop's, or the
         * one usable_of takes for a moment, or one the class list keeps) */
        ck_assert_msg(left_at + tiny + 2 >= CARVED_BLOCKS_64 && left_at + tiny <= CARVED_BLOCKS_64 + 1,
                      "left small mode with %zu blocks of 64 B in use", left_at + tiny);
    }
    ck_assert_int_eq(sefer_check(), 0);
    /* every size its own class now, the blocks of before intact */
    ck_assert_uint_eq(usable_of(1), 16);
    ck_assert_uint_eq(usable_of(100), 112);
    ck_assert_uint_eq(usable_of(300), 320);
    ck_assert_uint_eq(usable_of(600), 640);
    for (unsigned i = 0; i < MIXED; i++) {
        ck_assert(st_pat_ok(mixed[i], 16 + (size_t)i * 61 % 2000, i));
        sefer_free(mixed[i]);
    }
    for (size_t i = 0; i < n; i++) {
        ck_assert(st_pat_ok(b[i], size, (unsigned)i));
        sefer_free(b[i]);
    }
    for (unsigned i = 0; i < 3 * 8; i++) {
        ck_assert(st_pat_ok(large[i], 8000, i));
        sefer_free(large[i]);
    }
    ck_assert_int_eq(sefer_check(), 0);
    return NULL;
}

START_TEST(test_filled_page_leaves_small_mode)
{
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("threads.small_from", "1");
    st_on_thread(grows, (void *)(uintptr_t)128);
}
END_TEST

START_TEST(test_tiny_blocks_leave_small_mode)
{
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("threads.small_from", "1");
    st_on_thread(grows, (void *)(uintptr_t)64);
}
END_TEST

/* A thread that stays alive across a knob change. */
struct holder {
    struct st_steps steps;
    size_t before, after;
};

static void *holds_heap(void *arg)
{
    struct holder *h = arg;
    void *keep = sefer_malloc(20); /* its heap claimed, with a page */
    h->before = usable_of(33);
    st_steps_set(&h->steps, 1);
    st_steps_wait(&h->steps, 2);
    h->after = usable_of(33);
    sefer_free(keep);
    return NULL;
}

START_TEST(test_knob_moves_later_heaps)
{
    ST_KNOB_SET("threads.heap_after", "0");
    ST_KNOB_SET("threads.small_from", "1");
    struct holder h = {.steps = ST_STEPS_INIT};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, holds_heap, &h), 0);
    st_steps_wait(&h.steps, 1);
    ST_KNOB_SET("threads.small_from", "0");
    st_on_thread(own_classes, NULL); /* a heap claimed after the change */
    st_steps_set(&h.steps, 2);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(h.before, 64);
    ck_assert_uint_eq(h.after, 64); /* the existing heap keeps its mode */
    ST_KNOB_SET("threads.small_from", "1");
    st_on_thread(small_classes, NULL);
}
END_TEST

/* Threads that claim their heaps one after another and live until the
 * last has claimed its own: each says whether its heap is small. */
#define CROWD 20

struct crowd {
    struct st_steps steps; /* threads that have claimed; CROWD + 1: all may go */
    bool small[CROWD];
};

struct member {
    struct crowd *c;
    int index;
};

static void *crowd_member(void *arg)
{
    struct member *m = arg;
    void *keep = sefer_malloc(20); /* its heap, with a page: not handed on */
    m->c->small[m->index] = usable_of(33) == 64;
    st_steps_set(&m->c->steps, m->index + 1);
    st_steps_wait(&m->c->steps, CROWD + 1);
    sefer_free(keep);
    return NULL;
}

START_TEST(test_small_from_the_sixteenth_heap)
{
    ST_KNOB_SET("threads.heap_after", "0");
    ck_assert_str_eq(st_knob_get("threads.small_from"), "16");
    sefer_free(sefer_malloc(1)); /* the first thread's heap: slot 0 */
    struct crowd c = {.steps = ST_STEPS_INIT};
    struct member m[CROWD];
    pthread_t t[CROWD];
    for (int i = 0; i < CROWD; i++) {
        m[i] = (struct member){&c, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, crowd_member, &m[i]), 0);
        st_steps_wait(&c.steps, i + 1); /* one claim at a time: heap i + 1 */
    }
    st_steps_set(&c.steps, CROWD + 1);
    for (int i = 0; i < CROWD; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < CROWD; i++)
        ck_assert_msg(c.small[i] == (i + 2 >= 16), "heap %d of the process: small %d", i + 2, c.small[i]);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("small_heaps");
    TCase *tc = tcase_create("small_heaps");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_new_thread_starts_small);
    tcase_add_test(tc, test_filled_page_leaves_small_mode);
    tcase_add_test(tc, test_tiny_blocks_leave_small_mode);
    tcase_add_test(tc, test_knob_moves_later_heaps);
    tcase_add_test(tc, test_small_from_the_sixteenth_heap);
    suite_add_tcase(s, tc);
    return st_main(s, argc, argv);
}
