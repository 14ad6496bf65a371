/* test_history.c - the figures' history (/history).
 *
 *   tiers      introspect/history.c itself (linked into this test), with
 *              tiers of a few milliseconds: the raw tier keeps the last
 *              samples, coarser tiers keep min/max/last per bucket (a spike
 *              survives after the raw tier has let it go), null figures,
 *              parts that do not overlap, `since`
 *   steps      a server in this process sampling every 100 ms (meson sets
 *              SEFER_INTROSPECT_HISTORY_INTERVAL): bytes in blocks follow a
 *              known step pattern (one big block allocated or freed per
 *              step); /history shows the steps in order, none before it
 *              happened; `fields`, `since`, the reply's shape, 400s
 *
 * The server's own requests allocate a little (a connection's buffers), so
 * a sample is matched to the nearest level, each step being 8 MiB or more
 * from the next. */
#include "itest.h"

#include "history.h"

#include <malloc.h>

/* ---- the tiers, alone --------------------------------------------------------- */

static sf_history_t hist;

static void *make(uint32_t raw, uint64_t step1, uint32_t cap1, uint64_t step2, uint32_t cap2, uint32_t fields)
{
    sf_hist_conf_t c = {.fields = fields, .tier = {{0, raw}, {step1, cap1}, {step2, cap2}}};
    size_t bytes = sf_history_size(&c);
    ck_assert_uint_eq(bytes, 8 * ((size_t)raw * (1 + fields) + ((size_t)cap1 + cap2) * (1 + 3 * (size_t)fields)));
    void *mem = calloc(1, bytes);
    sf_history_init(&hist, &c, mem);
    return mem;
}

static uint64_t point(unsigned tier, uint32_t i, uint64_t *last, uint64_t *min, uint64_t *max, unsigned f)
{
    const uint64_t *l, *mn, *mx;
    uint64_t t = sf_history_point(&hist, tier, i, &l, &mn, &mx);
    *last = l[f];
    if (min) *min = mn ? mn[f] : 0;
    if (max) *max = mx ? mx[f] : 0;
    return t;
}

START_TEST(test_tiers_keep_spikes)
{
    /* raw: 4 samples; tier 1: buckets of 10 ms, 3 of them; tier 2: 100 ms, 2 */
    void *mem = make(4, 10, 3, 100, 2, 2);
    /* samples every 2 ms: figure 0 is t itself, figure 1 is 5 except a spike
     * of 900 at t = 14 */
    for (uint64_t t = 2; t <= 40; t += 2) {
        uint64_t v[2] = {t, t == 14 ? 900 : 5};
        sf_history_add(&hist, t, v);
    }
    ck_assert_uint_eq(hist.samples, 20);
    ck_assert_uint_eq(hist.first_ms, 2);
    ck_assert_uint_eq(hist.last_ms, 40);
    /* the raw tier: the last four samples */
    ck_assert_uint_eq(hist.tier[0].count, 4);
    uint64_t last, min, max;
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(point(0, i, &last, NULL, NULL, 0), 34 + 2 * i);
        ck_assert_uint_eq(last, 34 + 2 * i);
    }
    /* tier 1: buckets 2 (20-28), 3 (30-38), 4 (40); bucket 1 (10-18, the
     * spike) has gone: the ring holds 3 */
    ck_assert_uint_eq(hist.tier[1].count, 3);
    ck_assert_uint_eq(point(1, 0, &last, &min, &max, 0), 28);
    ck_assert_uint_eq(last, 28);
    ck_assert_uint_eq(min, 20);
    ck_assert_uint_eq(max, 28);
    ck_assert_uint_eq(point(1, 2, &last, &min, &max, 0), 40);
    ck_assert_uint_eq(min, 40);
    /* tier 2: bucket 0 (2-98): the spike is its max, the last value is 5 */
    ck_assert_uint_eq(hist.tier[2].count, 1);
    ck_assert_uint_eq(point(2, 0, &last, &min, &max, 1), 40);
    ck_assert_uint_eq(last, 5);
    ck_assert_uint_eq(min, 5);
    ck_assert_uint_eq(max, 900);
    free(mem);
}
END_TEST

START_TEST(test_tiers_spike_in_a_minute)
{
    /* the shape of the real tiers, scaled: a raw hour of 1-ms "seconds"
     * (3600), minutes of 60 ms; a one-sample spike in minute 10 is gone from
     * the raw tier 2 hours later but is that minute's maximum */
    void *mem = make(3600, 60, 1440, 600, 1008, 1);
    for (uint64_t t = 1; t <= 3 * 3600; t++) {
        uint64_t v[1] = {t == 10 * 60 + 17 ? 1000000 : 1000 + t % 7};
        sf_history_add(&hist, t, v);
    }
    ck_assert_uint_eq(hist.tier[0].count, 3600);
    uint64_t last, min, max;
    ck_assert_uint_eq(point(0, 0, &last, NULL, NULL, 0), 2 * 3600 + 1);
    bool found = false;
    for (uint32_t i = 0; i < hist.tier[1].count; i++) {
        uint64_t t = point(1, i, &last, &min, &max, 0);
        if (t >= 600 && t < 660) {
            ck_assert_uint_eq(max, 1000000);
            ck_assert_uint_ge(min, 1000);
            ck_assert_uint_lt(last, 1007);
            found = true;
        } else {
            ck_assert_uint_lt(max, 1007);
        }
    }
    ck_assert(found);
    point(2, 1, &last, &min, &max, 0); /* 600-1199 */
    ck_assert_uint_eq(max, 1000000);
    free(mem);
}
END_TEST

START_TEST(test_tiers_null_figures)
{
    void *mem = make(8, 10, 4, 100, 2, 1);
    uint64_t v[1];
    v[0] = SF_HIST_NULL;
    sf_history_add(&hist, 1, v);
    v[0] = 7;
    sf_history_add(&hist, 2, v);
    v[0] = SF_HIST_NULL;
    sf_history_add(&hist, 3, v);
    uint64_t last, min, max;
    point(1, 0, &last, &min, &max, 0);
    ck_assert_uint_eq(last, SF_HIST_NULL); /* the last sample had none */
    ck_assert_uint_eq(min, 7);             /* null counts for neither bound */
    ck_assert_uint_eq(max, 7);
    v[0] = SF_HIST_NULL;
    sf_history_add(&hist, 11, v); /* a bucket with no figure at all */
    point(1, 1, &last, &min, &max, 0);
    ck_assert_uint_eq(min, SF_HIST_NULL);
    ck_assert_uint_eq(max, SF_HIST_NULL);
    free(mem);
}
END_TEST

START_TEST(test_tiers_parts)
{
    void *mem = make(5, 10, 4, 100, 3, 1);
    sf_hist_part_t p[SF_HIST_TIERS];
    ck_assert_uint_eq(sf_history_parts(&hist, 0, p), 0); /* empty */
    for (uint64_t t = 1; t <= 299; t++) {
        uint64_t v[1] = {t};
        sf_history_add(&hist, t, v);
    }
    /* raw: 295-299; tier 1: buckets 26-29 (last samples 269, 279, 289,
     * 299); tier 2: buckets 0-2 (99, 199, 299) */
    unsigned n = sf_history_parts(&hist, 0, p);
    ck_assert_uint_eq(n, 3);
    uint64_t prev = 0;
    for (unsigned k = 0; k < n; k++) {
        ck_assert_uint_eq(p[k].tier, 2 - k); /* coarsest first */
        for (uint32_t i = 0; i < p[k].count; i++) {
            uint64_t last, t = point(p[k].tier, p[k].first + i, &last, NULL, NULL, 0);
            ck_assert_uint_gt(t, prev); /* in time order, no overlap */
            ck_assert_uint_eq(last, t);
            prev = t;
        }
    }
    ck_assert_uint_eq(p[0].count, 2);  /* 99, 199: 299 is after tier 1 begins */
    ck_assert_uint_eq(p[1].count, 3);  /* 269, 279, 289 */
    ck_assert_uint_eq(p[2].count, 5);  /* 295-299 */
    /* since: only what is at or after it */
    n = sf_history_parts(&hist, 298, p);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(p[0].tier, 0);
    ck_assert_uint_eq(p[0].first, 3);
    ck_assert_uint_eq(p[0].count, 2);
    n = sf_history_parts(&hist, 280, p);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(p[0].tier, 1);
    ck_assert_uint_eq(p[0].count, 1); /* 289 */
    ck_assert_uint_eq(sf_history_parts(&hist, 300, p), 0);
    free(mem);
}
END_TEST

/* ---- steps through the server ------------------------------------------------------ */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The raw part of a /history reply (the last part). */
static const cJSON *raw_part(const cJSON *h)
{
    const cJSON *parts = it_item(h, "parts");
    const cJSON *last = NULL;
    for (const cJSON *p = parts->child; p; p = p->next)
        last = p;
    ck_assert_ptr_nonnull(last);
    ck_assert_uint_eq(it_u64(last, "tier"), 0);
    return last;
}

/* Waits until the history has a sample taken after `after` (wall ms). */
static void wait_sample_after(int port, uint64_t after)
{
    char path[128];
    snprintf(path, sizeof path, "/history?fields=allocs&since=%" PRIu64, after + 1);
    uint64_t end = it_now_ms() + IT_WAIT_MS; /* (a hang guard: it returns on the sample) */
    for (;;) {
        cJSON *h = it_json(port, path);
        bool got = cJSON_GetArraySize(it_item(h, "parts")) > 0;
        cJSON_Delete(h);
        if (got)
            return;
        ck_assert_msg(it_now_ms() < end, "no sample after %" PRIu64 " within %d s", after, IT_WAIT_MS / 1000);
        usleep(50000);
    }
}

/* Waits until the history has a sample taken after `after` (wall ms)
 * whose bytes_in_blocks is within 1 MiB of `want`: the step is on record.
 * (Waiting for any sample after a time would not do: a sample whose
 * figures were read before the step but stamped after it, its thread
 * preempted between the two, shows the level before, and the step could
 * then end with no sample of it on a loaded machine.) */
static void wait_level_after(int port, uint64_t after, int64_t want)
{
    char path[128];
    snprintf(path, sizeof path, "/history?fields=bytes_in_blocks&since=%" PRIu64, after + 1);
    int64_t last = -1;
    for (uint64_t end = it_now_ms() + IT_WAIT_MS;; usleep(50000)) {
        cJSON *h = it_json(port, path);
        bool got = false;
        const cJSON *parts = it_item(h, "parts");
        for (const cJSON *p = parts->child; p && !got; p = p->next)
            for (const cJSON *v = it_item(it_item(p, "last"), "bytes_in_blocks")->child; v && !got; v = v->next) {
                last = (int64_t)v->valuedouble;
                got = llabs(last - want) < (int64_t)ST_MIB;
            }
        cJSON_Delete(h);
        if (got)
            return;
        ck_assert_msg(it_now_ms() < end, "no sample of %" PRId64 " bytes in blocks after %" PRIu64 " within %d s (last: %" PRId64 ")",
                      want, after, IT_WAIT_MS / 1000, last);
    }
}

#define STEPS 5

START_TEST(test_steps)
{
    void *small = malloc(8 * ST_MIB), *big = NULL; /* its size, before any sample */
    st_escape(small);
    size_t s1 = malloc_usable_size(small);
    free(small);
    int port = it_start();
    uint64_t start = wall_ms();
    wait_sample_after(port, start);
    cJSON *first = it_json(port, "/history?fields=bytes_in_blocks");
    int64_t base0 = (int64_t)it_item(it_item(raw_part(first), "last"), "bytes_in_blocks")->child->valuedouble;
    cJSON_Delete(first);
    /* levels above the base: 0, s1, s1 + s2, s1, 0; one operation a step */
    uint64_t at[STEPS], done[STEPS];
    int64_t level[STEPS];
    for (int k = 0; k < STEPS; k++) {
        at[k] = wall_ms();
        if (k == 1) small = malloc(8 * ST_MIB);
        if (k == 2) big = malloc(24 * ST_MIB);
        if (k == 3) free(big);
        if (k == 4) free(small);
        st_escape(small);
        st_escape(big);
        done[k] = wall_ms();
        level[k] = k == 0 || k == 4 ? 0 : k == 2 ? (int64_t)(s1 + malloc_usable_size(big)) : (int64_t)s1;
        wait_level_after(port, done[k], base0 + level[k]); /* each step on record before the next */
    }
    char path[128];
    snprintf(path, sizeof path, "/history?fields=bytes_in_blocks,segments&since=%" PRIu64, start);
    cJSON *h = it_json(port, path);
    uint64_t interval = it_u64(h, "interval_ms"); /* 100 ms under meson */
    ck_assert_int_eq(cJSON_GetArraySize(it_item(h, "fields")), 2);
    ck_assert_str_eq(it_item(h, "fields")->child->valuestring, "bytes_in_blocks");
    const cJSON *raw = raw_part(h);
    ck_assert_uint_eq(it_u64(raw, "step_ms"), interval);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(raw, "min")); /* raw points are samples */
    const cJSON *t = it_item(raw, "t");
    const cJSON *v = it_item(it_item(raw, "last"), "bytes_in_blocks");
    ck_assert_ptr_nonnull(it_item(it_item(raw, "last"), "segments"));
    ck_assert_int_eq(cJSON_GetArraySize(t), cJSON_GetArraySize(v));
    /* the base: the samples before the first step */
    int64_t base = (int64_t)v->child->valuedouble;
    int seen = 0;        /* steps seen so far, in order */
    int per_step[STEPS] = {0};
    uint64_t prev_t = 0;
    const cJSON *tv = t->child, *vv = v->child;
    for (; tv && vv; tv = tv->next, vv = vv->next) {
        uint64_t when = (uint64_t)tv->valuedouble;
        int64_t above = (int64_t)vv->valuedouble - base;
        ck_assert_uint_gt(when, prev_t);
        prev_t = when;
        int k = 0; /* the nearest level */
        for (int j = 1; j < STEPS; j++)
            if (llabs(above - level[j]) < llabs(above - level[k]))
                k = j;
        ck_assert_msg(llabs(above - level[k]) < (int64_t)ST_MIB,
                      "sample at %" PRIu64 ": %" PRId64 " bytes above the base, no level near", when, above);
        /* levels 1 and 3, and 0 and 4, are the same: take the step in order */
        int step = seen;
        while (step < STEPS && level[step] != level[k])
            step++;
        ck_assert_msg(step < STEPS, "sample at %" PRIu64 " (level %d) out of order after step %d", when, k, seen);
        /* a sample is stamped once its figures are read: never before the
         * step it shows began (10 ms for the two clocks and rounding) */
        ck_assert_msg(step == 0 || when + 10 >= at[step], "sample at %" PRIu64 " shows step %d, which began at %" PRIu64,
                      when, step, at[step]);
        seen = step;
        per_step[step]++;
    }
    for (int k = 0; k < STEPS; k++)
        ck_assert_msg(per_step[k] > 0, "no sample shows step %d (%" PRIu64 "-%" PRIu64 ")", k, at[k], done[k]);
    cJSON_Delete(h);
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_reply_shape_and_errors)
{
    int port = it_start();
    uint64_t start = wall_ms();
    wait_sample_after(port, start);
    cJSON *h = it_json(port, "/history");
    const cJSON *fields = it_item(h, "fields");
    ck_assert_int_ge(cJSON_GetArraySize(fields), 31); /* every figure of /stats, and more */
    const char *want[] = {"bytes_in_blocks", "bytes_committed", "rss_bytes", "ring_pending", "allocs",
                          "guard_double_free", "heaps_live", "introspect_requests"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        bool found = false;
        for (const cJSON *f = fields->child; f; f = f->next)
            found |= strcmp(f->valuestring, want[i]) == 0;
        ck_assert_msg(found, "no field %s in /history", want[i]);
    }
    const cJSON *tiers = it_item(h, "tiers");
    ck_assert_int_eq(cJSON_GetArraySize(tiers), 3);
    uint64_t interval = it_u64(h, "interval_ms"), raw = (3600000 + interval - 1) / interval;
    ck_assert_uint_eq(it_u64(tiers->child, "span_ms"), 3600000); /* an hour of samples */
    ck_assert_uint_eq(it_u64(tiers->child, "capacity"), raw < 36000 ? raw : 36000);
    ck_assert_uint_eq(it_u64(tiers->child->next, "step_ms"), 60000);
    ck_assert_uint_ge(it_u64(tiers->child->next, "span_ms"), 86400000); /* a day at least */
    ck_assert_uint_gt(it_u64(h, "memory_bytes"), 0);
    ck_assert_uint_ge(it_u64(h, "samples"), 1);
    ck_assert_uint_ge(it_u64(h, "last_ms"), it_u64(h, "first_ms"));
    ck_assert_uint_gt(it_u64(it_item(h, "sampling"), "max_ns"), 0);
    cJSON_Delete(h);
    /* since in the future: no part */
    h = it_json(port, "/history?since=99999999999999");
    ck_assert_int_eq(cJSON_GetArraySize(it_item(h, "parts")), 0);
    cJSON_Delete(h);
    static const char *const bad[] = {"/history?fields=nope", "/history?fields=", "/history?since=x",
                                      "/history?fields=allocs,", "/history?pretty=1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *e = it_json_status(port, bad[i], 400);
        cJSON_Delete(e);
    }
    sefer_introspect_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-history");
    TCase *tiers = tcase_create("tiers");
    tcase_add_test(tiers, test_tiers_keep_spikes);
    tcase_add_test(tiers, test_tiers_spike_in_a_minute);
    tcase_add_test(tiers, test_tiers_null_figures);
    tcase_add_test(tiers, test_tiers_parts);
    suite_add_tcase(s, tiers);
    TCase *server = tcase_create("server");
    tcase_set_timeout(server, 180); /* (a hang guard, above the IT_WAIT_MS waits) */
    tcase_add_test(server, test_steps);
    tcase_add_test(server, test_reply_shape_and_errors);
    suite_add_tcase(s, server);
    return st_run_suite(s);
}
