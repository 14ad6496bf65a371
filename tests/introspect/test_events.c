/* test_events.c - the event timeline (/events) of a process: every kind
 * that something in sefer records today appears once, with its fields,
 * made to happen by this test in this process:
 *
 *   server_start   the server this test starts (port, pid)
 *   knob           sefer_config_set("decommit.delay", "250ms") (old, new, sources)
 *   enomem         one request past segments.max (count 1, size); 999 more
 *                  give exactly one more event, the 1000th
 *   guard          an interior free with guard.on_error = report (kind, address)
 *   ring_overflow  frees into 160 full pages of a sleeping thread's heap
 *                  (rings.capacity = 64 in this test's environment): the
 *                  first free into each full page tells the owner through
 *                  its ring, which fills: one burst, one event (heap, capacity)
 *   trim           sefer_trim() (bytes released, as returned)
 *
 *   phase_begin, phase_end  a phase (sefer_phase_begin/end) with its
 *                  figures, and the same phase in /phases
 *
 * Heap-profile marks have their kind and recording function; the profiler
 * records them (tests/test_event_ring.c records them directly too). */
#include "itest.h"

static cJSON *events_of(int port, const char *kind, int *count)
{
    cJSON *all = it_json(port, "/events");
    cJSON *out = cJSON_CreateArray();
    *count = 0;
    for (const cJSON *e = it_item(all, "events")->child; e; e = e->next)
        if (strcmp(it_str(e, "kind"), kind) == 0) {
            cJSON_AddItemToArray(out, cJSON_Duplicate(e, 1));
            (*count)++;
        }
    cJSON_Delete(all);
    return out;
}

/* The only event of a kind. */
static cJSON *one_event(int port, const char *kind)
{
    int n;
    cJSON *list = events_of(port, kind, &n);
    ck_assert_msg(n == 1, "%d events of kind %s, expected 1", n, kind);
    cJSON *e = cJSON_DetachItemFromArray(list, 0);
    cJSON_Delete(list);
    return e;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

START_TEST(test_server_start_and_knob)
{
    uint64_t before = wall_ms();
    int port = it_start();
    cJSON *e = one_event(port, "server_start");
    ck_assert_uint_eq(it_u64(e, "port"), (uint64_t)port);
    ck_assert_uint_eq(it_u64(e, "pid"), (uint64_t)getpid());
    ck_assert_uint_ge(it_u64(e, "seq"), 1);
    /* the clock is the wall clock as of the process's start (10 ms: two clocks) */
    ck_assert_uint_ge(it_u64(e, "t") + 10, before);
    ck_assert_uint_le(it_u64(e, "t"), wall_ms() + 10);
    cJSON_Delete(e);

    ST_KNOB_SET("decommit.delay", "250ms");
    e = one_event(port, "knob");
    ck_assert_str_eq(it_str(e, "name"), "decommit.delay");
    ck_assert_str_eq(it_str(e, "type"), "duration");
    ck_assert_uint_eq(it_u64(e, "old"), 100);
    ck_assert_uint_eq(it_u64(e, "new"), 250);
    ck_assert_str_eq(it_str(e, "old_source"), "default");
    ck_assert_str_eq(it_str(e, "source"), "runtime");
    cJSON_Delete(e);
    ST_KNOB_SET("decommit.policy", "eager"); /* an enum: its choice */
    int n;
    cJSON *list = events_of(port, "knob", &n);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(it_str(list->child->next, "new"), "eager");
    ck_assert_str_eq(it_str(list->child->next, "old"), "adaptive");
    cJSON_Delete(list);
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_enomem_first_and_every_1000th)
{
    int port = it_start();
    size_t huge = (size_t)1 << 46; /* 16 M segments: past segments.max */
    void *p = malloc(huge);
    ck_assert_ptr_null(p);
    cJSON *e = one_event(port, "enomem");
    ck_assert_uint_eq(it_u64(e, "count"), 1);
    ck_assert_uint_eq(it_u64(e, "size"), huge);
    cJSON_Delete(e);
    for (int i = 0; i < 999; i++)
        st_escape(malloc(huge));
    int n;
    cJSON *list = events_of(port, "enomem", &n);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(it_u64(list->child->next, "count"), 1000);
    cJSON_Delete(list);
    st_escape(malloc(huge));
    cJSON_Delete(events_of(port, "enomem", &n));
    ck_assert_int_eq(n, 2); /* the 1001st: none */
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_guard_detection)
{
    int port = it_start();
    ST_KNOB_SET("guard.on_error", "report");
    char *p = malloc(64);
    st_escape(p);
    free(st_launder(p + 16));
    cJSON *e = one_event(port, "guard");
    ck_assert_str_eq(it_str(e, "guard"), "interior_free");
    char want[32];
    snprintf(want, sizeof want, "%p", (void *)(p + 16));
    ck_assert_str_eq(it_str(e, "address"), want);
    ck_assert_uint_eq(it_u64(e, "count"), 1);
    cJSON_Delete(e);
    free(p);
    sefer_introspect_stop();
}
END_TEST

/* The owner: allocates the blocks (1 KiB: 64 to a page), then sleeps
 * (never drains its ring) until told to go. */
#define REMOTE (64 * 160)
#define REMOTE_SIZE 1024
#define RING_CAPACITY 64 /* SEFER_RINGS_CAPACITY in tests/introspect/meson.build */
static void *blocks[REMOTE];
static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t owner_cond = PTHREAD_COND_INITIALIZER;
static int owner_stage, owner_tid;

static void *owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < REMOTE; i++)
        blocks[i] = malloc(REMOTE_SIZE);
    pthread_mutex_lock(&owner_lock);
    owner_tid = it_tid();
    owner_stage = 1;
    pthread_cond_broadcast(&owner_cond);
    while (owner_stage != 2)
        pthread_cond_wait(&owner_cond, &owner_lock);
    pthread_mutex_unlock(&owner_lock);
    return NULL;
}

START_TEST(test_ring_overflow_burst)
{
    int port = it_start();
    pthread_t t = st_spawn(owner, NULL, 0);
    pthread_mutex_lock(&owner_lock);
    while (owner_stage != 1)
        pthread_cond_wait(&owner_cond, &owner_lock);
    pthread_mutex_unlock(&owner_lock);
    for (int i = 0; i < REMOTE; i++)
        free(blocks[i]); /* 64 notifications fill the ring, the rest overflow: one burst */
    cJSON *heaps = it_json(port, "/heaps");
    const cJSON *h = it_heap_of(heaps, owner_tid);
    ck_assert_ptr_nonnull(h);
    uint64_t slot = it_u64(h, "slot");
    cJSON_Delete(heaps);
    cJSON *e = one_event(port, "ring_overflow");
    ck_assert_uint_eq(it_u64(e, "heap"), slot);
    ck_assert_uint_eq(it_u64(e, "capacity"), RING_CAPACITY);
    ck_assert_uint_ge(it_u64(e, "overflowed"), 1);
    cJSON_Delete(e);
    pthread_mutex_lock(&owner_lock);
    owner_stage = 2;
    pthread_cond_broadcast(&owner_cond);
    pthread_mutex_unlock(&owner_lock);
    pthread_join(t, NULL);
    sefer_introspect_stop();
}
END_TEST

/* A phase: its begin and end events with their figures, and /phases. */
START_TEST(test_phase_events_and_endpoint)
{
    int port = it_start();
    int rc = sefer_phase_begin("batch");
    void *p = malloc(256 << 10);
    free(p);
    struct sefer_phase ph = {.size = sizeof ph};
    int rc2 = sefer_phase_end(&ph);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rc2, 0);
    cJSON *b = one_event(port, "phase_begin");
    ck_assert_str_eq(it_str(b, "name"), "batch");
    ck_assert_uint_eq(it_u64(b, "block_bytes_entry"), ph.block_bytes_entry);
    ck_assert_uint_eq(it_u64(b, "depth"), 1);
    cJSON_Delete(b);
    cJSON *e = one_event(port, "phase_end");
    ck_assert_str_eq(it_str(e, "name"), "batch");
    ck_assert_uint_eq(it_u64(e, "block_bytes_peak"), ph.block_bytes_peak);
    ck_assert_uint_eq(it_u64(e, "block_bytes_exit"), ph.block_bytes_exit);
    cJSON_Delete(e);
    cJSON *all = it_json(port, "/phases");
    ck_assert_uint_eq(it_u64(all, "ended_total"), 1);
    ck_assert_int_eq(cJSON_GetArraySize(it_item(all, "open")), 0);
    const cJSON *d = it_item(all, "ended")->child;
    ck_assert_str_eq(it_str(d, "name"), "batch");
    ck_assert_uint_eq(it_u64(d, "block_bytes_peak"), ph.block_bytes_peak);
    ck_assert_uint_eq(it_u64(d, "block_bytes_peak") - it_u64(d, "block_bytes_entry"), 256 << 10);
    ck_assert_uint_eq(it_u64(d, "allocs"), ph.allocs);
    ck_assert_uint_eq(it_u64(d, "start_ms"), ph.start_ms);
    ck_assert_uint_ge(it_u64(d, "end_ms"), it_u64(d, "start_ms"));
    cJSON_Delete(all);
    /* an open phase is listed as open */
    ck_assert_int_eq(sefer_phase_begin("still open"), 0);
    all = it_json(port, "/phases");
    ck_assert_int_eq(cJSON_GetArraySize(it_item(all, "open")), 1);
    ck_assert_str_eq(it_str(it_item(all, "open")->child, "name"), "still open");
    cJSON_Delete(all);
    ck_assert_int_eq(sefer_phase_end(NULL), 0);
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_trim)
{
    int port = it_start();
    void *big = malloc(64 * ST_MIB);
    memset(big, 1, 64 * ST_MIB);
    free(big);
    size_t released = sefer_trim();
    cJSON *e = one_event(port, "trim");
    ck_assert_uint_eq(it_u64(e, "bytes_released"), released);
    cJSON_Delete(e);
    sefer_introspect_stop();
}
END_TEST

/* memory.limit's soft threshold: a 48 MiB block under a limit of 64 MiB
 * at 50 % purges, recorded with the committed bytes that passed it and the
 * limit, and counted in /stats. */
START_TEST(test_memory_pressure)
{
    int port = it_start();
    ST_KNOB_SET("memory.limit", "64MiB");
    ST_KNOB_SET("memory.soft_percent", "50");
    void *big = malloc(48 * ST_MIB);
    ck_assert_ptr_nonnull(big);
    memset(big, 1, 48 * ST_MIB);
    /* the first when the block passed 32 MiB; maybe more, one each time
     * committed memory grew by 1/32 of the limit while above the threshold
     * (the server's own answers may) */
    int n = 0;
    cJSON *list = events_of(port, "memory_pressure", &n);
    ck_assert_msg(n >= 1, "no memory_pressure event");
    const cJSON *e = list->child;
    ck_assert_uint_eq(it_u64(e, "limit"), 64 * ST_MIB);
    ck_assert_uint_gt(it_u64(e, "committed"), 32 * ST_MIB);
    it_u64(e, "bytes_released");
    for (const cJSON *x = e->next; x; x = x->next)
        ck_assert_uint_eq(it_u64(x, "limit"), 64 * ST_MIB);
    cJSON_Delete(list);
    cJSON *st = it_json(port, "/stats");
    ck_assert_uint_eq(it_u64(st, "memory_limit"), 64 * ST_MIB);
    ck_assert_uint_ge(it_u64(st, "memory_limit_purges"), 1);
    ck_assert_uint_le(it_u64(st, "memory_headroom"), 16 * ST_MIB);
    cJSON_Delete(st);
    free(big);
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_after_since_and_counts)
{
    int port = it_start();
    for (int i = 0; i < 3; i++)
        sefer_trim();
    cJSON *all = it_json(port, "/events");
    uint64_t recorded = it_u64(all, "recorded");
    ck_assert_uint_eq(recorded, 4); /* server_start, 3 trims */
    ck_assert_uint_eq(it_u64(all, "dropped"), 0);
    ck_assert_uint_eq(it_u64(all, "capacity"), 1024);
    ck_assert_uint_eq(it_u64(all, "complete_upto"), 4);
    const cJSON *third = cJSON_GetArrayItem(it_item(all, "events"), 2);
    uint64_t t3 = it_u64(third, "t");
    cJSON *after = it_json(port, "/events?after=2");
    ck_assert_int_eq(cJSON_GetArraySize(it_item(after, "events")), 2);
    ck_assert_uint_eq(it_u64(it_item(after, "events")->child, "seq"), 3);
    cJSON_Delete(after);
    char path[64];
    snprintf(path, sizeof path, "/events?since=%" PRIu64, t3);
    cJSON *since = it_json(port, path);
    for (const cJSON *e = it_item(since, "events")->child; e; e = e->next)
        ck_assert_uint_ge(it_u64(e, "t"), t3);
    ck_assert_int_ge(cJSON_GetArraySize(it_item(since, "events")), 2);
    cJSON_Delete(since);
    cJSON_Delete(all);
    cJSON *bad = it_json_status(port, "/events?after=x", 400);
    cJSON_Delete(bad);
    sefer_introspect_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-events");
    TCase *tc = tcase_create("events");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_server_start_and_knob);
    tcase_add_test(tc, test_enomem_first_and_every_1000th);
    tcase_add_test(tc, test_guard_detection);
    tcase_add_test(tc, test_ring_overflow_burst);
    tcase_add_test(tc, test_trim);
    tcase_add_test(tc, test_memory_pressure);
    tcase_add_test(tc, test_phase_events_and_endpoint);
    tcase_add_test(tc, test_after_since_and_counts);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
