/* timeline.c - /history (the figures over time, sampler.c) and /events
 * (the event ring, lib/event.c); schemas in docs/introspection.md.
 *
 * /history can hold a week of points for every figure: about 300,000
 * numbers.  A cJSON tree of that (an item and a string per number) would
 * take tens of MB, so the reply is written as text directly: columnar (the
 * times, then one array per figure), integers in decimal (exact: no double
 * on the way), null for a figure that could not be had.  /events is small
 * (at most SF_EVENT_CAP events) and goes through cJSON like the rest. */
#include "cjson_calls.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- /history ---------------------------------------------------------------- */

#define FIELDS_MAX 64

/* The figures asked for ("fields=a,b,c"; all of them without it): their
 * indexes in want[], how many in *n.  False after a 400. */
static bool chosen_fields(const sf_query_t *q, unsigned *want, unsigned *n, sf_reply_t *r) {
    unsigned count;
    const char *const *names = sf_sampler_fields(&count);
    const char *list = NULL;
    for (unsigned i = 0; i < q->count; i++)
        if (strcmp(q->key[i], "fields") == 0) list = q->value[i] ? q->value[i] : "";
    *n = 0;
    if (list == NULL) {
        for (unsigned i = 0; i < count && i < FIELDS_MAX; i++)
            want[(*n)++] = i;
        return true;
    }
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        unsigned i = 0;
        while (i < count && !(strlen(names[i]) == len && memcmp(names[i], p, len) == 0))
            i++;
        if (i == count || *n == FIELDS_MAX) {
            char why[200];
            snprintf(why, sizeof why,
                     "fields: \"%.*s\" is not a figure of /history (its \"fields\" lists them)",
                     (int)(len > 60 ? 60 : len), p);
            sf_reply_error(r, 400, "bad request", why);
            return false;
        }
        want[(*n)++] = i;
        if (p[len] == '\0') return true;
        p += len + 1;
    }
}

static void add_value(sf_text_t *t, uint64_t v, bool comma) {
    if (v == SF_HIST_NULL)
        sf_text_add(t, comma ? ",null" : "null");
    else
        sf_text_addf(t, comma ? ",%" PRIu64 : "%" PRIu64, v);
}

/* "name": {"f1": [...], "f2": [...]} for one of last/min/max of a part. */
static void part_values(sf_text_t *t, const sf_history_t *h, const sf_hist_part_t *p,
                        const char *name, int which, const unsigned *want, unsigned n,
                        const char *const *names) {
    sf_text_addf(t, ",\"%s\":{", name);
    for (unsigned f = 0; f < n; f++) {
        sf_text_addf(t, "%s\"%s\":[", f ? "," : "", names[want[f]]);
        for (uint32_t i = 0; i < p->count; i++) {
            const uint64_t *v[3];
            sf_history_point(h, p->tier, p->first + i, &v[0], &v[1], &v[2]);
            add_value(t, v[which][want[f]], i > 0);
        }
        sf_text_add(t, "]");
    }
    sf_text_add(t, "}");
}

static void part_json(sf_text_t *t, const sf_history_t *h, const sf_hist_part_t *p,
                      uint64_t interval_ms, const unsigned *want, unsigned n,
                      const char *const *names) {
    const sf_hist_tier_t *tier = &h->tier[p->tier];
    sf_text_addf(t, "{\"tier\":%u,\"step_ms\":%" PRIu64 ",\"t\":[", p->tier,
                 tier->conf.step_ms ? tier->conf.step_ms : interval_ms);
    for (uint32_t i = 0; i < p->count; i++) {
        const uint64_t *v[3];
        add_value(t, sf_history_point(h, p->tier, p->first + i, &v[0], &v[1], &v[2]), i > 0);
    }
    sf_text_add(t, "]");
    part_values(t, h, p, "last", 0, want, n, names);
    if (tier->conf.step_ms) {
        part_values(t, h, p, "min", 1, want, n, names);
        part_values(t, h, p, "max", 2, want, n, names);
    }
    sf_text_add(t, "}");
}

static void history_json(sf_text_t *t, const sf_history_t *h, const sf_sampler_info_t *info,
                         uint64_t since, const unsigned *want, unsigned n) {
    unsigned count;
    const char *const *names = sf_sampler_fields(&count);
    sf_text_addf(t,
                 "{\"interval_ms\":%" PRIu64 ",\"now_ms\":%" PRIu64 ",\"samples\":%" PRIu64
                 ",\"first_ms\":%" PRIu64 ",\"last_ms\":%" PRIu64 ",\"memory_bytes\":%zu",
                 info->interval_ms, sf_clock_ms(), h->samples, h->first_ms, h->last_ms,
                 info->bytes);
    sf_text_addf(
        t, ",\"sampling\":{\"last_ns\":%" PRIu64 ",\"max_ns\":%" PRIu64 ",\"mean_ns\":%" PRIu64 "}",
        info->last_ns, info->max_ns, info->mean_ns);
    sf_text_add(t, ",\"tiers\":[");
    for (unsigned k = 0; k < SF_HIST_TIERS; k++) {
        const sf_hist_tier_t *tier = &h->tier[k];
        uint64_t step = tier->conf.step_ms ? tier->conf.step_ms : info->interval_ms;
        sf_text_addf(t,
                     "%s{\"step_ms\":%" PRIu64 ",\"capacity\":%" PRIu32 ",\"points\":%" PRIu32
                     ",\"span_ms\":%" PRIu64 "}",
                     k ? "," : "", step, tier->conf.capacity, tier->count,
                     step * tier->conf.capacity);
    }
    sf_text_add(t, "],\"fields\":[");
    for (unsigned f = 0; f < n; f++)
        sf_text_addf(t, "%s\"%s\"", f ? "," : "", names[want[f]]);
    sf_text_add(t, "],\"parts\":[");
    sf_hist_part_t parts[SF_HIST_TIERS];
    unsigned np = sf_history_parts(h, since, parts);
    for (unsigned i = 0; i < np; i++) {
        if (i) sf_text_add(t, ",");
        part_json(t, h, &parts[i], info->interval_ms, want, n, names);
    }
    sf_text_add(t, "]}\n");
}

void sf_ep_history(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    uint64_t since;
    unsigned want[FIELDS_MAX], n;
    if (!sf_query_u64(q, "since", 0, UINT64_MAX, &since, r) || !chosen_fields(q, want, &n, r))
        return;
    sf_sampler_info_t info;
    const sf_history_t *h = sf_sampler_lock(&info);
    if (h == NULL) {
        char why[200];
        snprintf(why, sizeof why, "%s", info.why[0] ? info.why : "no server has started");
        sf_sampler_unlock();
        return sf_reply_error(r, 404, "no history", why);
    }
    sf_text_t t = {0};
    history_json(&t, h, &info, since, want, n);
    sf_sampler_unlock();
    sf_reply_text(r, 200, "application/json", &t);
}

/* ---- /events ------------------------------------------------------------------- */

static const char *const kind_names[SF_EVENT_KINDS] = {
    [SF_EVENT_NONE] = "none",
    [SF_EVENT_SERVER_START] = "server_start",
    [SF_EVENT_KNOB] = "knob",
    [SF_EVENT_ENOMEM] = "enomem",
    [SF_EVENT_GUARD] = "guard",
    [SF_EVENT_RING_OVERFLOW] = "ring_overflow",
    [SF_EVENT_TRIM] = "trim",
    [SF_EVENT_PROFILE_MARK] = "profile_mark",
    [SF_EVENT_PHASE_BEGIN] = "phase_begin",
    [SF_EVENT_PHASE_END] = "phase_end",
    [SF_EVENT_MEMORY_PRESSURE] = "memory_pressure",
};

/* As /stats and /metrics name them (guard_KIND, kind="KIND"). */
static const char *const guard_names[SF_GUARD_KINDS] = {[SF_GUARD_INVALID] = "invalid_free",
                                                        [SF_GUARD_INTERIOR] = "interior_free",
                                                        [SF_GUARD_DOUBLE] = "double_free",
                                                        [SF_GUARD_OVERFLOW] = "overflow",
                                                        [SF_GUARD_USE_AFTER_FREE] =
                                                            "use_after_free"};

static const char *const knob_type_names[] = {
    [SF_KNOB_UINT] = "uint", [SF_KNOB_SIZE] = "size", [SF_KNOB_MS] = "duration",
    [SF_KNOB_BOOL] = "bool", [SF_KNOB_ENUM] = "enum", [SF_KNOB_STRING] = "string"};

static void knob_fields(cJSON *o, const sf_event_t *e) {
    if (e->code >= SF_KNOB_COUNT) return;
    const struct sf_knob_def *d = &sf_knob_defs[e->code];
    sf_json_str(o, "name", d->name);
    sf_json_str(o, "type", knob_type_names[d->type]);
    /* string knobs cannot change at run time: every value here is a number */
    sf_json_add(o, "old", sf_knob_json_value(d, e->a, ""));
    sf_json_add(o, "new", sf_knob_json_value(d, e->b, ""));
    sf_json_str(o, "old_source", sf_knob_source_name((int)e->c));
    sf_json_str(o, "source", sf_knob_source_name((int)e->d));
}

static void kind_fields(cJSON *o, const sf_event_t *e) {
    switch (e->kind) {
    case SF_EVENT_SERVER_START:
        sf_json_u64(o, "port", e->a);
        sf_json_u64(o, "pid", e->b);
        break;
    case SF_EVENT_KNOB:
        knob_fields(o, e);
        break;
    case SF_EVENT_ENOMEM:
        sf_json_u64(o, "count", e->a);
        sf_json_u64(o, "size", e->b);
        break;
    case SF_EVENT_GUARD:
        sf_json_str(o, "guard", e->code < SF_GUARD_KINDS ? guard_names[e->code] : "unknown");
        sf_json_hex(o, "address", (uintptr_t)e->a);
        sf_json_u64(o, "count", e->b);
        break;
    case SF_EVENT_RING_OVERFLOW:
        sf_json_u64(o, "heap", e->code);
        sf_json_u64(o, "overflowed", e->a);
        sf_json_u64(o, "capacity", e->b);
        break;
    case SF_EVENT_TRIM:
        sf_json_u64(o, "bytes_released", e->a);
        break;
    case SF_EVENT_PROFILE_MARK:
        sf_json_str(o, "name", e->text);
        sf_json_u64(o, "id", e->a);
        break;
    case SF_EVENT_PHASE_BEGIN: /* lib/phase.c: a entry bytes in blocks, b committed, c depth */
        sf_json_str(o, "name", e->text);
        sf_json_u64(o, "block_bytes_entry", e->a);
        sf_json_u64(o, "committed_entry", e->b);
        sf_json_u64(o, "depth", e->c);
        break;
    case SF_EVENT_PHASE_END: /* a entry, b peak, c exit bytes in blocks */
        sf_json_str(o, "name", e->text);
        sf_json_u64(o, "block_bytes_entry", e->a);
        sf_json_u64(o, "block_bytes_peak", e->b);
        sf_json_u64(o, "block_bytes_exit", e->c);
        break;
    case SF_EVENT_MEMORY_PRESSURE:
        sf_json_u64(o, "committed", e->a);
        sf_json_u64(o, "limit", e->b);
        sf_json_u64(o, "bytes_released", e->c);
        break;
    default:
        break;
    }
}

static cJSON *event_json(const sf_event_t *e) {
    cJSON *o = cJSON_CreateObject();
    sf_json_u64(o, "seq", e->seq);
    sf_json_u64(o, "t", e->time_ms);
    sf_json_str(o, "kind", e->kind < SF_EVENT_KINDS ? kind_names[e->kind] : "unknown");
    kind_fields(o, e);
    return o;
}

void sf_ep_events(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    uint64_t since, after;
    bool pretty;
    if (!sf_query_u64(q, "since", 0, UINT64_MAX, &since, r) ||
        !sf_query_u64(q, "after", 0, UINT64_MAX, &after, r) || !sf_query_pretty(q, r, &pretty))
        return;
    sf_event_t *ev = malloc(SF_EVENT_CAP * sizeof *ev);
    if (ev == NULL)
        return sf_reply_error(r, 503, "out of memory", "the event buffer could not be allocated");
    sf_events_info_t info;
    size_t n = sf_events_read(after, ev, SF_EVENT_CAP, &info);
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "now_ms", sf_clock_ms());
    sf_json_u64(root, "recorded", info.recorded);
    sf_json_u64(root, "dropped", info.dropped);
    sf_json_u64(root, "capacity", info.capacity);
    sf_json_u64(root, "complete_upto", info.complete_upto);
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        if (ev[i].time_ms >= since) sf_json_add(list, NULL, event_json(&ev[i]));
    free(ev);
    sf_json_add(root, "events", list);
    sf_reply_json(r, 200, root, pretty);
}
