/* test_event_ring.c - the event ring itself (lib/event.c and the clock it
 * reads, lib/clock.c, linked into this test; tests/introspect/test_events.c
 * checks what sefer records in it):
 *
 *   - oldest dropped: 1500 events in a 1024-slot ring leave the newest
 *     1024, in order, and say 476 were dropped;
 *   - the kinds nothing records yet (heap-profile marks, phase begin and
 *     end) carry their name, cut to fit;
 *   - guard detections: the first 10 of a kind, then every 1000th;
 *   - 4 threads recording while another reads: every event read is whole
 *     (its words agree), numbers only go up, none is read twice (also run
 *     under ThreadSanitizer: the name ends in -tsan);
 *   - a fork() while threads record: the child's ring takes new events in
 *     every slot (none stays "being written" for a thread that is gone). */
#include "sefer_test.h"

#include "internal.h"

static sf_event_t got[SF_EVENT_CAP];

static void record_value(uint32_t kind, uint64_t v)
{
    sf_event_t e = {.kind = kind, .a = v, .b = ~v, .c = v ^ 0x5a5a5a5a5a5a5a5aull, .d = v + 1};
    sf_event_record(&e);
}

static bool whole(const sf_event_t *e)
{
    return e->b == ~e->a && e->c == (e->a ^ 0x5a5a5a5a5a5a5a5aull) && e->d == e->a + 1;
}

START_TEST(test_oldest_dropped)
{
    sf_clock_init();
    for (uint64_t i = 1; i <= 1500; i++)
        record_value(SF_EVENT_TRIM, i);
    sf_events_info_t info;
    size_t n = sf_events_read(0, got, SF_EVENT_CAP, &info);
    ck_assert_uint_eq(n, 1024);
    ck_assert_uint_eq(info.recorded, 1500);
    ck_assert_uint_eq(info.dropped, 476);
    ck_assert_uint_eq(info.complete_upto, 1500);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(got[i].seq, 477 + i);
        ck_assert_uint_eq(got[i].a, 477 + i);
        ck_assert(whole(&got[i]));
        if (i)
            ck_assert_uint_ge(got[i].time_ms, got[i - 1].time_ms);
    }
    n = sf_events_read(1490, got, SF_EVENT_CAP, &info);
    ck_assert_uint_eq(n, 10);
    ck_assert_uint_eq(got[0].seq, 1491);
    n = sf_events_read(1500, got, SF_EVENT_CAP, &info);
    ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_named_kinds)
{
    sf_clock_init();
    char longname[100];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    sf_event_profile_mark("before-load", 7);
    sf_event_phase(true, "scoring", 0, 0, 0);
    sf_event_phase(false, longname, 1, 2, 3);
    sf_events_info_t info;
    size_t n = sf_events_read(0, got, SF_EVENT_CAP, &info);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(got[0].kind, SF_EVENT_PROFILE_MARK);
    ck_assert_str_eq(got[0].text, "before-load");
    ck_assert_uint_eq(got[0].a, 7);
    ck_assert_uint_eq(got[1].kind, SF_EVENT_PHASE_BEGIN);
    ck_assert_str_eq(got[1].text, "scoring");
    ck_assert_uint_eq(got[2].kind, SF_EVENT_PHASE_END);
    ck_assert_uint_eq(strlen(got[2].text), sizeof got[2].text - 1);
    ck_assert_uint_eq(got[2].c, 3);
}
END_TEST

START_TEST(test_guard_first_ten_then_every_1000th)
{
    sf_clock_init();
    int x;
    for (uint64_t count = 1; count <= 2500; count++)
        sf_event_guard(SF_GUARD_DOUBLE, &x, count);
    sf_events_info_t info;
    size_t n = sf_events_read(0, got, SF_EVENT_CAP, &info);
    ck_assert_uint_eq(n, 12);
    for (size_t i = 0; i < 10; i++)
        ck_assert_uint_eq(got[i].b, i + 1);
    ck_assert_uint_eq(got[10].b, 1000);
    ck_assert_uint_eq(got[11].b, 2000);
    ck_assert_uint_eq(got[11].a, (uintptr_t)&x);
    ck_assert_uint_eq(got[11].code, SF_GUARD_DOUBLE);
}
END_TEST

#define WRITERS 4
#define PER_WRITER 20000
static _Atomic int writers_done;

static void *writer(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    for (uint64_t i = 0; i < PER_WRITER; i++)
        record_value(SF_EVENT_TRIM, id << 32 | i);
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

START_TEST(test_concurrent_writers_and_a_reader)
{
    sf_clock_init();
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++)
        t[i] = st_spawn(writer, (void *)(uintptr_t)(i + 1), 0);
    uint64_t after = 0, read = 0, last_seq = 0;
    sf_events_info_t info;
    for (;;) {
        bool finished = atomic_load(&writers_done) == WRITERS;
        size_t n = sf_events_read(after, got, SF_EVENT_CAP, &info);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(whole(&got[i]), "event %" PRIu64 " torn", got[i].seq);
            ck_assert_uint_gt(got[i].seq, last_seq);
            last_seq = got[i].seq;
        }
        read += n;
        after = info.complete_upto;
        if (finished && after == info.recorded)
            break;
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    ck_assert_uint_eq(info.recorded, WRITERS * PER_WRITER);
    ck_assert_uint_gt(read, 0);
    ck_assert_uint_le(read, info.recorded);
    printf("# %" PRIu64 " events read of %" PRIu64 " recorded while they were written, %" PRIu64 " dropped\n",
           read, info.recorded, info.dropped);
}
END_TEST

static void *busy_writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0;; i++)
        record_value(SF_EVENT_TRIM, i);
    return NULL;
}

START_TEST(test_fork_while_recording)
{
    sf_clock_init();
    for (int i = 0; i < 2; i++)
        pthread_detach(st_spawn(busy_writer, NULL, 0)); /* they end with this test's process */
    for (int round = 0; round < 20; round++) {
        usleep(1000);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            sf_events_after_fork_child(); /* as lib/init.c's fork handler does */
            sf_events_info_t info;
            sf_events_read(0, got, 0, &info);
            uint64_t first = info.recorded + 1;
            for (int i = 0; i < 2 * SF_EVENT_CAP; i++)
                record_value(SF_EVENT_KNOB, (uint64_t)i);
            size_t n = sf_events_read(first + SF_EVENT_CAP - 1, got, SF_EVENT_CAP, &info);
            /* the last lap: every slot took its event */
            _exit(n == SF_EVENT_CAP && got[0].kind == SF_EVENT_KNOB && whole(&got[n - 1]) ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: the child's ring lost a slot",
                      round);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("events");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_oldest_dropped);
    tcase_add_test(tc, test_named_kinds);
    tcase_add_test(tc, test_guard_first_ten_then_every_1000th);
    tcase_add_test(tc, test_concurrent_writers_and_a_reader);
    tcase_add_test(tc, test_fork_while_recording);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
