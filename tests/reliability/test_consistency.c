/* test_consistency.c - the internal consistency checker (sefer_check,
 * lib/check.c): no false alarms, and real damage found.
 *
 *   quiet_while_busy  sefer_check 200 times while 4 threads allocate and
 *       free small, medium and large blocks across threads, create and
 *       release segments and exit (their heaps abandoned) and new threads
 *       adopt them: it must find nothing, every time.
 *   quiet_beside_spans  sefer_check over and over while 2 threads free
 *       and allocate large blocks (each free unlinks its span and clears
 *       its segment-map bytes, each allocation links and marks one): the
 *       checker must never see a span in the one and not the other.  (It
 *       did, until both changed under one lock: a free preempted between
 *       the two was reported as damage on a loaded machine.)  The checks
 *       go on until the threads have freed 4000 spans while they ran.
 *   quiet_at_levels   a mixed workload then sefer_check, at guard levels
 *       0-3 (fresh processes).
 *   finds_bad_link    a freed block's free-list link overwritten (a write
 *       after free at guard level 1): found, named on stderr once.
 *   finds_bad_cookie  a freed block's free mark overwritten: found.
 *   finds_cycle       a block freed twice by two other threads (undetected
 *       below level 3) puts it twice on its page's list: found.
 *   finds_in_abandoned_heap  the same damage in the heap of a thread that
 *       has exited: abandoned heaps are checked too.
 *
 * Each corruption is undone (or the process ends) before anything else
 * allocates from the damaged page. */
#include "rel.h"

#include <malloc.h>

/* ======================================================================
 * no false alarms
 * ==================================================================== */

#define BUSY_THREADS 4
static atomic_int busy_stop;
static struct st_queue *busy_queues;

static void *busy_thread(void *argp)
{
    int id = (int)(intptr_t)argp;
    uint64_t r = 0xB05ULL + (uint64_t)id * 7919;
    unsigned char *held[64] = {0};
    size_t held_n[64] = {0};
    while (!atomic_load(&busy_stop)) {
        int k = (int)(st_rand(&r) % 64);
        if (held[k]) {
            if (!st_block_ok(held[k], held_n[k]))
                rel_fail("thread %d: block corrupted", id);
            struct st_block e = {held[k], held_n[k]};
            if (st_rand(&r) % 3 || !st_queue_push(&busy_queues[(id + 1) % BUSY_THREADS], e))
                free(held[k]);
            held[k] = NULL;
        } else {
            uint64_t x = st_rand(&r);
            size_t n = x % 50 == 0 ? 200000 + x % 3000000 : x % 5 == 0 ? 9000 + x % 100000 : 1 + x % 2000;
            held[k] = malloc(n);
            held_n[k] = n;
            if (held[k])
                st_block_fill(held[k], n);
        }
        struct st_block in;
        while (st_queue_pop(&busy_queues[id], &in))
            free(in.p);
        if (st_rand(&r) % 1500 == 0)
            break; /* exit early now and then: a new thread adopts the heap */
    }
    for (int k = 0; k < 64; k++)
        if (held[k] && st_rand(&r) % 2)
            free(held[k]); /* the rest outlive the thread */
    return NULL;
}

START_TEST(test_quiet_while_busy)
{
    busy_queues = st_map(BUSY_THREADS * sizeof *busy_queues);
    for (int i = 0; i < BUSY_THREADS; i++)
        st_queue_init(&busy_queues[i], 512);
    pthread_t t[BUSY_THREADS];
    for (int i = 0; i < BUSY_THREADS; i++)
        t[i] = st_spawn(busy_thread, (void *)(intptr_t)i, 0);
    int found = 0, checks = 0, restarts = 0;
    for (; checks < 200; checks++) {
        found += sefer_check();
        for (int i = 0; i < BUSY_THREADS; i++) /* replace threads that ended */
            if (pthread_tryjoin_np(t[i], NULL) == 0) {
                t[i] = st_spawn(busy_thread, (void *)(intptr_t)i, 0);
                restarts++;
            }
    }
    atomic_store(&busy_stop, 1);
    for (int i = 0; i < BUSY_THREADS; i++)
        pthread_join(t[i], NULL);
    printf("%d checks while %d threads (%d replaced) allocated: %d problems\n", checks,
           BUSY_THREADS, restarts, found);
    REL_ASSERT_NO_FAILURES();
    ck_assert_msg(found == 0, "sefer_check reported %d problems while threads ran (stderr)", found);
    REL_ASSERT_CONSISTENT("after the threads stopped");
}
END_TEST

static atomic_long spans_freed;

static void *span_thread(void *argp)
{
    uint64_t r = 0x5EA7ULL + (uint64_t)(intptr_t)argp * 104729;
    void *held[2] = {NULL, NULL};
    for (unsigned k = 0; !atomic_load(&busy_stop); k ^= 1) {
        if (held[k]) {
            free(held[k]); /* (two held: the free is not the one level 1 keeps shut) */
            atomic_fetch_add(&spans_freed, 1);
        }
        size_t n = 300000 + st_rand(&r) % 3000000;
        held[k] = malloc(n);
        if (held[k])
            ((volatile char *)held[k])[n - 1] = 1;
    }
    free(held[0]);
    free(held[1]);
    return NULL;
}

START_TEST(test_quiet_beside_spans)
{
    atomic_store(&busy_stop, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        t[i] = st_spawn(span_thread, (void *)(intptr_t)i, 0);
    int found = 0, checks = 0;
    while (checks < 500 || atomic_load(&spans_freed) < 4000) {
        found += sefer_check();
        checks++;
    }
    atomic_store(&busy_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("%d checks while 2 threads freed %ld spans: %d problems\n", checks, atomic_load(&spans_freed), found);
    ck_assert_msg(found == 0, "sefer_check reported %d problems beside span frees (stderr)", found);
}
END_TEST

/* guard level = _i */
START_TEST(test_quiet_at_levels)
{
    static char out[1024];
    char level[32];
    snprintf(level, sizeof level, "SEFER_GUARD_LEVEL=%d", _i);
    char *env[] = {level, NULL};
    char *args[] = {(char *)"workload", NULL};
    int st = st_run_self(env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "level %d: child %s: %s", _i,
                  st_describe_status(st), out);
    ck_assert_msg(strstr(out, "problems=0") != NULL, "level %d: %s", _i, out);
}
END_TEST

static int workload_child(void)
{
    void *v[3000];
    for (int i = 0; i < 3000; i++)
        v[i] = malloc(1 + (size_t)i * 7919 % (i % 100 == 0 ? 3000000 : 20000));
    for (int i = 0; i < 3000; i += 2)
        free(v[i]);
    for (int i = 0; i < 3000; i += 4)
        v[i] = realloc(v[i + 1], 1 + (size_t)i * 31 % 50000), v[i + 1] = NULL;
    printf("problems=%d\n", sefer_check());
    for (int i = 1; i < 3000; i += 2)
        free(v[i]);
    for (int i = 0; i < 3000; i += 4)
        free(v[i]);
    printf("after freeing: problems=%d\n", sefer_check());
    return 0;
}

/* ======================================================================
 * real damage is found
 * ==================================================================== */

/* The damage below is made the way a level-1 heap lays blocks out (plain
 * links, a free mark in the second word, no quarantine): the "damage" case
 * is optional (its own meson test, consistency-damage), skipped when
 * SEFER_GUARD_LEVEL sets another level for the whole run. */
static const char *damage_why_not(void)
{
    static char why[128];
    char level[16];
    if (sefer_config_get("guard.level", level, sizeof level) != 0)
        return "sefer_config_get(\"guard.level\") failed";
    if (strcmp(level, "1") == 0)
        return NULL;
    snprintf(why, sizeof why, "guard.level is %s (SEFER_GUARD_LEVEL): the damage is laid out as level 1 lays blocks",
             level);
    return why;
}

/* Runs sefer_check with stderr captured; returns its count, its report in
 * buf. */
static int check_captured(char *buf, size_t len)
{
    struct st_capture c;
    st_capture_begin(&c);
    int n = sefer_check();
    st_capture_end(&c, buf, len);
    return n;
}

START_TEST(test_finds_bad_link)
{
    static char err[4096];
    char *keep = malloc(48), *p = malloc(48), *q = malloc(48);
    free(p);
    free(q); /* q's link now points at p */
    void *saved, *bad = (void *)(uintptr_t)0x4040404040404040ULL;
    memcpy(&saved, q, sizeof saved);
    memcpy(q, &bad, sizeof bad);
    int n = check_captured(err, sizeof err);
    memcpy(q, &saved, sizeof saved); /* undone before anything allocates */
    ck_assert_msg(n >= 1, "an overwritten free-list link was not found");
    ck_assert_msg(strstr(err, "sefer: check:") && strstr(err, "free list") &&
                      st_mentions_address(err, bad),
                  "report: %s", err);
    REL_ASSERT_CONSISTENT("after the link was restored");
    free(keep);
}
END_TEST

START_TEST(test_finds_bad_cookie)
{
    static char err[4096];
    char *keep = malloc(48), *p = malloc(48);
    free(p);
    uintptr_t saved;
    memcpy(&saved, p + sizeof(void *), sizeof saved);
    memset(p + sizeof(void *), 0, sizeof saved); /* the free mark */
    int n = check_captured(err, sizeof err);
    memcpy(p + sizeof(void *), &saved, sizeof saved);
    ck_assert_msg(n >= 1, "a free block without its free mark was not found");
    ck_assert_msg(strstr(err, "free mark") && st_mentions_address(err, p), "report: %s", err);
    REL_ASSERT_CONSISTENT("after the mark was restored");
    free(keep);
}
END_TEST

static void cycle_child(void *unused)
{
    (void)unused;
    for (int i = 0; i < 10; i++)
        st_escape(malloc(48));
    char *a = malloc(48), *b = malloc(48);
    free(a);
    free(b); /* the page's local list: b -> a */
    memcpy(a, &b, sizeof b); /* a write after free level 1 cannot see: b -> a -> b -> ... */
    int n = sefer_check();
    printf("problems=%d\n", n);
    fflush(stdout);
    _exit(n > 0 ? 0 : 1); /* the heap is damaged: end here */
}

START_TEST(test_finds_cycle)
{
    static char err[4096];
    int st = st_run_child(cycle_child, NULL, err, sizeof err, 20);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %s; stderr: %s",
                  st_describe_status(st), err);
    ck_assert_msg(strstr(err, "met twice"), "report: %s", err);
}
END_TEST

static char *abandoned_p;
static void *leave_damage(void *unused)
{
    (void)unused;
    st_escape(malloc(48)); /* keeps the page, and the heap abandoned */
    abandoned_p = malloc(48);
    free(abandoned_p); /* on its page's list, in this thread's heap */
    return NULL;
}

START_TEST(test_finds_in_abandoned_heap)
{
    static char err[4096];
    /* (a heap of its own at the thread's first malloc: it makes two) */
    ck_assert_int_eq(sefer_config_set("threads.heap_after", "0"), 0);
    pthread_t t = st_spawn(leave_damage, NULL, 0);
    pthread_join(t, NULL);
    struct sefer_stats s = st_stats();
    ck_assert_uint_ge(s.heaps_abandoned, 1);
    uintptr_t saved;
    memcpy(&saved, abandoned_p + sizeof(void *), sizeof saved);
    memset(abandoned_p + sizeof(void *), 0, sizeof saved);
    int n = check_captured(err, sizeof err);
    memcpy(abandoned_p + sizeof(void *), &saved, sizeof saved);
    ck_assert_msg(n >= 1, "damage in an abandoned heap was not found");
    ck_assert_msg(st_mentions_address(err, abandoned_p), "report: %s", err);
    REL_ASSERT_CONSISTENT("after the damage was undone");
    s = st_stats();
    ck_assert_uint_ge(s.heaps_abandoned, 1); /* the check gave the heap back */
}
END_TEST

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "workload") == 0)
        return workload_child();
    Suite *s = suite_create("consistency");
    TCase *tc = tcase_create("consistency");
    tcase_set_timeout(tc, ST_RUN_SELF_HANG_S + 60);
    tcase_add_test(tc, test_quiet_while_busy);
    tcase_add_test(tc, test_quiet_beside_spans);
    tcase_add_loop_test(tc, test_quiet_at_levels, 0, 4);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "damage", damage_why_not);
    tcase_set_timeout(tc, ST_RUN_SELF_HANG_S + 60);
    tcase_add_test(tc, test_finds_bad_link);
    tcase_add_test(tc, test_finds_bad_cookie);
    tcase_add_test(tc, test_finds_cycle);
    tcase_add_test(tc, test_finds_in_abandoned_heap);
    return st_main(s, argc, argv);
}
