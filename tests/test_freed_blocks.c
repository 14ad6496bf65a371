/* test_freed_blocks.c - what freed blocks' memory does at guard levels 0-1
 * (lib/cache.c: the span freed last; lib/alloc.c, realloc_move).  Linked statically, so
 * the test reads span headers; protections come from /proc/self/maps, and
 * an access that must fault is made in a forked child.  meson runs it at level 1, at level 1
 * with guard.unused_no_access off, and at level 0.
 *
 *   - level 1: a large block's span freed last is no-access past its
 *     header page (its hole stays closed), so a write or read through the
 *     old pointer kills a child; the next large block freed takes its
 *     place and it is read-write again, end to end of its open part; the
 *     old block of a realloc that moved a large block is shut the same
 *     way; with guard.protect_rate spent, a freed span stays open; level
 *     0: never shut;
 *   - levels 0-1: realloc's old small or medium block is held by its heap
 *     (guarded.c, the one-block quarantine) until the next realloc moves a
 *     block, so it is not the next malloc's of its size (a block alone on
 *     a page that carves one at a time was), and counts free in
 *     sefer_stats; a write into its first bytes meanwhile is reported when
 *     it leaves;
 *   - sefer_check clean throughout. */
#include "sefer_test.h"

#include "internal.h"
#include "maps_access.h"

#include <pthread.h>

#define LARGE ST_MIB /* a span of one segment */

/* The part of p's span that is shut while it cools: past its header page
 * and its hole, to the end of its open part (read before the free). */
struct shut_range {
    uint8_t *base;
    size_t from, to;
};

static struct shut_range range_of(void *p)
{
    sf_segment_t *seg = sf_segment_of(p);
    ck_assert_uint_eq(seg->kind, SF_SEG_LARGE);
    struct shut_range r = {(uint8_t *)seg, (seg->hole ? 2 : 1) * SF_OS_PAGE, seg->open_bytes};
    ck_assert_uint_gt(r.to, r.from);
    return r;
}

static void expect_shut(struct shut_range r, void *p, size_t n, bool shut, const char *what)
{
    read_maps();
    expect_access(r.base, 0, SF_OS_PAGE, READ_WRITE, what);
    expect_access(r.base, r.from, r.to, shut ? NO_ACCESS : READ_WRITE, what);
    ck_assert_msg(write_faults((uint8_t *)p + n / 2) == shut, "%s: a write into the freed block %s", what,
                  shut ? "did not fault" : "faulted");
    ck_assert_msg(access_faults(read_one, p) == shut, "%s: a read of the freed block %s", what,
                  shut ? "did not fault" : "faulted");
}

static void *large_block(size_t n, int fill)
{
    void *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    memset(p, fill, n);
    return p;
}

START_TEST(test_large_block_freed_last_is_shut)
{
    ST_KNOB_SET("large_cache.ttl", "3600000");
    ST_KNOB_SET("guard.protect_rate", "0"); /* (no limit: a slow machine must not spend the bucket) */
    bool shuts = sf_guard_level == 1;
    void *p = large_block(LARGE, 1);
    struct shut_range rp = range_of(p);
    sefer_free(p);
    expect_shut(rp, p, LARGE, shuts, "a large block freed last");
    ck_assert_int_eq(sefer_check(), 0);
    if (!shuts)
        return; /* (level 0: no span cools, the next malloc may take it) */

    /* the next one freed takes its place: p's span open again */
    void *q = large_block(LARGE, 2);
    ck_assert_ptr_ne(q, p);
    struct shut_range rq = range_of(q);
    sefer_free(q);
    expect_shut(rq, q, LARGE, true, "the next large block freed");
    read_maps();
    expect_access(rp.base, rp.from, rp.to, READ_WRITE, "a freed span once the next one cools");
    void *again = large_block(LARGE, 3);
    ck_assert_int_eq(sefer_check(), 0);

    /* realloc moves a block past its span: the old one is shut */
    struct shut_range ra = range_of(again);
    void *moved = sefer_realloc(again, 8 * LARGE);
    ck_assert_ptr_nonnull(moved);
    ck_assert_ptr_ne(moved, again);
    memset(moved, 4, 8 * LARGE);
    expect_shut(ra, again, LARGE, true, "a large block realloc moved");
    sefer_free(moved);

    /* the budget spent: a freed span stays open (1 byte a second: the
     * bucket holds 1 byte) */
    ST_KNOB_SET("guard.protect_rate", "1");
    void *r = large_block(LARGE, 5);
    struct shut_range rr = range_of(r);
    sefer_free(r);
    expect_shut(rr, r, LARGE, false, "a large block freed past guard.protect_rate");
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

/* realloc moves a block of n bytes to `to`; the next malloc(n) must not be
 * the old block (held by the heap until the next realloc moves a block). */
static void realloc_then_malloc(size_t n, size_t to)
{
    void *p = sefer_malloc(n);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, n);
    void *q = sefer_realloc(p, to);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_ne(q, p);
    void *r = sefer_malloc(n);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r != p, "malloc(%zu) after realloc(p, %zu) returned p", n, to);
    ck_assert_int_eq(sefer_check(), 0);
    sefer_free(q);
    sefer_free(r);
    ck_assert_int_eq(sefer_check(), 0);
}

static void *realloc_run(void *arg)
{
    (void)arg;
    /* small classes, those carved a block at a time (4 KiB and up), and
     * medium ones up to the largest */
    static const size_t sizes[] = {24, 1024, 4096, 8192, 8200, 16384, 65536, SF_MEDIUM_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        realloc_then_malloc(sizes[i], 4 * sizes[i]);
        realloc_then_malloc(sizes[i], sizes[i] / 4);
    }
    /* statistics: the held block counts free (lib/stats.c) */
    struct sefer_stats a, b;
    void *p = sefer_malloc(4096);
    ck_assert_int_eq(sefer_stats_get(&a, sizeof a), 0);
    void *q = sefer_realloc(p, 16384);
    ck_assert_ptr_ne(q, p);
    ck_assert_int_eq(sefer_stats_get(&b, sizeof b), 0);
    ck_assert_msg(b.allocs - b.frees == a.allocs - a.frees, "blocks live before the move %llu, after %llu",
                  (unsigned long long)(a.allocs - a.frees), (unsigned long long)(b.allocs - b.frees));
    sefer_free(q);
    return NULL;
}

START_TEST(test_realloc_old_block_held)
{
    /* on a thread of its own: a fresh heap, whose pages carve few blocks */
    ST_KNOB_SET("threads.heap_after", "0");
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, realloc_run, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
}
END_TEST

/* A write through realloc's old pointer into the held block's first word,
 * then another realloc that moves a block: the held one leaves, and the
 * write is reported (level 1: abort, guard.on_error's default; level 0:
 * counted, silently, and the child says so with its exit status). */
static void write_into_held(void *arg)
{
    (void)arg;
    char *p = sefer_malloc(4096);
    memset(p, 1, 4096);
    char *q = sefer_realloc(p, 16384);
    if (q == p)
        _exit(3);
    memset(p, 'x', 16); /* (a write after free, on purpose) */
    char *r = sefer_realloc(sefer_malloc(100), 30000);
    (void)r;
    struct sefer_stats st;
    if (sefer_stats_get(&st, sizeof st) != 0)
        _exit(5);
    _exit(st.guard_use_after_free == 1 ? 0 : 4);
}

START_TEST(test_write_into_held_block_reported)
{
    char err[4096];
    int status = st_run_child(write_into_held, NULL, err, sizeof err, 30);
    if (sf_guard_level == 0) {
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "level 0, the write into the held block: %s",
                      st_describe_status(status));
        return;
    }
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the write into the held block: %s",
                  st_describe_status(status));
    ck_assert_msg(strstr(err, "write into a freed block") != NULL, "no report on stderr: %s", err);
}
END_TEST

/* A fork that lands in the middle of another thread's realloc: the held
 * block written, its page not yet (lib/guarded.c, sf_quarantine_swap_one).
 * Made here by hand: a thread holds a block and parks; its heap's
 * held_page is pointed at another page, as the cut leaves it; in the
 * child, sefer_trim collects the thread's heap, abandoned by the fork.
 * The child drops the parent's other threads' held blocks
 * (sf_heaps_after_fork_child), so nothing is reported; before, the
 * release compared the block's free mark with the wrong page's and
 * reported a write after free no one made (a CI run's fork test, one
 * child of 20, under load). */
static pthread_barrier_t torn_held, torn_done;
static sf_heap_t *torn_heap;

static void *torn_holder(void *unused)
{
    (void)unused;
    char *p = sefer_malloc(4096), *other = sefer_malloc(100);
    char *q = sefer_realloc(p, 16384); /* (p held) */
    torn_heap = sf_tls_heap;
    pthread_barrier_wait(&torn_held);
    pthread_barrier_wait(&torn_done);
    sefer_free(q);
    sefer_free(other);
    return NULL;
}

static void trim_in_child(void *unused)
{
    (void)unused;
    sefer_trim();
    struct sefer_stats st;
    if (sefer_stats_get(&st, sizeof st) != 0)
        _exit(5);
    _exit(st.guard_use_after_free == 0 ? 0 : 4);
}

START_TEST(test_fork_cut_hold_dropped)
{
    ST_KNOB_SET("threads.heap_after", "0");
    pthread_barrier_init(&torn_held, NULL, 2);
    pthread_barrier_init(&torn_done, NULL, 2);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, torn_holder, NULL), 0);
    pthread_barrier_wait(&torn_held);
    ck_assert_ptr_nonnull(torn_heap->quarantine_head);
    sf_page_t *held = torn_heap->held_page, *cut = held + 1; /* (the next descriptor: another page) */
    torn_heap->held_page = cut;
    char err[4096];
    int status = st_run_child(trim_in_child, NULL, err, sizeof err, 30);
    torn_heap->held_page = held;
    pthread_barrier_wait(&torn_done);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's trim of a hold the fork cut: %s; %s",
                  st_describe_status(status), err);
}
END_TEST

int main(void)
{
    if (sf_guard_level >= 2) {
        fprintf(stderr, "test_freed_blocks: levels 0-1 only (level %d)\n", sf_guard_level);
        return 77;
    }
    Suite *s = suite_create("freed-blocks");
    TCase *tc = tcase_create("freed");
    tcase_add_test(tc, test_large_block_freed_last_is_shut);
    tcase_add_test(tc, test_realloc_old_block_held);
    tcase_add_test(tc, test_write_into_held_block_reported);
    tcase_add_test(tc, test_fork_cut_hold_dropped);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
