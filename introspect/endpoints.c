/* endpoints.c - the JSON endpoints (schemas and examples in
 * docs/introspection.md).
 *
 * Each endpoint takes its snapshot first (lib/snapshot.c: copies made under
 * brief lock holds, or lock-free reads), then builds the cJSON tree from the
 * copies with no allocator lock held.  Figures are named as in struct
 * sefer_stats; a figure that cannot be had is null with a sibling
 * "<name>_reason". */
#include "cjson_calls.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define SEGMENTS_LIMIT_DEFAULT 1000
#define SEGMENTS_LIMIT_MAX 10000 /* about 3 MB of JSON, built in memory */
#define HEAPS_LIMIT_DEFAULT 1000 /* /heaps and /rings: heaps per page */
#define HEAPS_LIMIT_MAX 10000

static const char *const kind_names[] = {
    [SF_SEG_SMALL] = "small", [SF_SEG_MEDIUM] = "medium", [SF_SEG_LARGE] = "large", [SF_SEG_HUGE] = "huge"};

static const char *heap_state_name(const sf_snap_heap_t *h) {
    if (h->slot == SF_SNAP_FALLBACK) return "shared";
    switch (h->state) {
    case SF_HEAP_LIVE: return "live";
    case SF_HEAP_ABANDONED:
    case SF_HEAP_COLLECTING: return "abandoned"; /* collecting: abandoned, being tidied */
    default: return "free";
    }
}

static void reply_nomem(sf_reply_t *r) {
    sf_reply_error(r, 503, "out of memory", "the snapshot buffers could not be allocated");
}

/* ---- /segments ------------------------------------------------------------------ */

static cJSON *page_json(const sf_snap_page_t *p) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    bool span = (p->flags & SF_PAGE_SPAN) != 0;
    sf_json_u64(o, "index", p->index);
    if (span) sf_json_null(o, "class");
    else sf_json_u64(o, "class", p->class_idx);
    sf_json_u64(o, "block_size", span ? p->span_bytes : p->block_size);
    sf_json_u64(o, "used", p->used);
    sf_json_u64(o, "capacity", p->capacity);
    sf_json_u64(o, "carved", p->carved);
    sf_json_bool(o, "full", (p->flags & SF_PAGE_FULL) != 0);
    return o;
}

/* "owner_heap": the owner's registry slot; null for spans (no owner) and
 * for the fallback heap's segments ("owner_fallback": true). */
static void add_owner(cJSON *o, int64_t owner) {
    if (owner == SF_SNAP_NO_OWNER || owner == SF_SNAP_FALLBACK) sf_json_null(o, "owner_heap");
    else sf_json_u64(o, "owner_heap", (uint64_t)owner);
    sf_json_bool(o, "owner_fallback", owner == SF_SNAP_FALLBACK);
}

static cJSON *segment_json(const sf_snapshot_t *s, const sf_snap_segment_t *g) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    sf_json_u64(o, "id", g->id);
    sf_json_hex(o, "base", g->base);
    sf_json_str(o, "kind", g->kind < 4 ? kind_names[g->kind] : "unknown");
    sf_json_u64(o, "size", g->size);
    sf_json_u64(o, "committed", g->committed);
    sf_json_u64(o, "used_bytes", g->used_bytes);
    sf_json_u64(o, "blocks_used", g->blocks_used);
    sf_json_u64(o, "blocks_total", g->blocks_total);
    add_owner(o, g->owner);
    sf_json_u64(o, "page_count", g->page_count);
    sf_json_u64(o, "pages_in_use", g->pages);
    cJSON *pages = cJSON_CreateArray();
    for (uint32_t i = 0; i < g->pages; i++) sf_json_add(pages, NULL, page_json(&s->page[g->first_page + i]));
    sf_json_add(o, "pages", pages);
    return o;
}

static cJSON *snapshot_meta(const sf_snapshot_t *s) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    sf_json_u64(o, "lock_holds", s->lock_holds);
    sf_json_u64(o, "max_lock_hold_ns", s->max_hold_ns);
    sf_json_u64(o, "list_lock_hold_ns", s->list_hold_ns);
    sf_json_u64(o, "took_ns", s->total_ns);
    sf_json_u64(o, "vanished", s->vanished);
    return o;
}

void sf_ep_segments(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    uint64_t limit, offset;
    bool pretty;
    if (!sf_query_u64(q, "limit", SEGMENTS_LIMIT_DEFAULT, SEGMENTS_LIMIT_MAX, &limit, r) ||
        !sf_query_u64(q, "offset", 0, UINT32_MAX, &offset, r) || !sf_query_pretty(q, r, &pretty))
        return;
    sf_snapshot_t s;
    if (sf_snapshot_segments(&s, offset, limit) != 0) return reply_nomem(r);
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "total", s.total);
    sf_json_u64(root, "offset", offset);
    sf_json_u64(root, "limit", limit);
    sf_json_u64(root, "returned", s.segs);
    sf_json_add(root, "snapshot", snapshot_meta(&s));
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < s.segs; i++) sf_json_add(list, NULL, segment_json(&s, &s.seg[i]));
    sf_json_add(root, "segments", list);
    sf_snapshot_release(&s);
    sf_reply_json(r, 200, root, pretty);
}

/* ---- /heaps ------------------------------------------------------------------------ */

struct class_use {
    uint32_t pages;
    uint64_t used, capacity, listed;
};

struct heap_use {
    uint64_t bytes, blocks, pages, segments, listed;
    struct class_use cls[SF_CLASS_COUNT];
};

/* The heaps of one /heaps or /rings page: entries [offset, offset + n) of
 * the list "registry slots in order, then the fallback heap" (total long). */
struct heap_window {
    uint64_t offset, total;
    size_t n;
};

/* Where a segment owner's figures go: its entry in the window, or NULL. */
static struct heap_use *use_of(const struct heap_window *w, struct heap_use *use, int64_t owner) {
    uint64_t pos = owner == SF_SNAP_FALLBACK ? w->total - 1 : (uint64_t)owner;
    return pos >= w->offset && pos - w->offset < w->n ? &use[pos - w->offset] : NULL;
}

/* Sums the segment snapshot per owner heap of the window; spans go to *spans. */
static void heap_usage(const sf_snapshot_t *s, const struct heap_window *w, struct heap_use *use,
                       struct heap_use *spans) {
    for (size_t i = 0; i < s->segs; i++) {
        const sf_snap_segment_t *g = &s->seg[i];
        struct heap_use *h = g->owner == SF_SNAP_NO_OWNER ? spans : use_of(w, use, g->owner);
        if (h == NULL) continue;
        h->segments++;
        h->bytes += g->used_bytes;
        h->blocks += g->blocks_used;
        h->pages += g->pages;
        for (uint32_t k = 0; k < g->pages; k++) {
            const sf_snap_page_t *p = &s->page[g->first_page + k];
            if (p->class_idx == 0 || p->class_idx >= SF_CLASS_COUNT) continue;
            h->cls[p->class_idx].pages++;
            h->cls[p->class_idx].used += p->used;
            h->cls[p->class_idx].capacity += p->capacity;
        }
    }
}

/* The blocks on h's class lists out of its figures: free, though their
 * pages count them (lib/page.c, "Class lists"; read a moment apart from
 * the pages, so never more than the pages count). */
static void uncount_listed(const sf_snap_heap_t *h, struct heap_use *u) {
    for (unsigned c = 1; c <= SF_SMALL_CLASS_MAX; c++) {
        struct class_use *k = &u->cls[c];
        uint64_t n = h->listed[c] < k->used ? h->listed[c] : k->used;
        k->used -= n;
        k->listed = n;
        u->listed += n;
        u->blocks -= n < u->blocks ? n : u->blocks;
        u->bytes -= n * sf_class_size[c] < u->bytes ? n * sf_class_size[c] : u->bytes;
    }
}

static cJSON *classes_json(const struct heap_use *u) {
    cJSON *list = cJSON_CreateArray();
    for (unsigned c = 1; c < SF_CLASS_COUNT; c++) {
        const struct class_use *k = &u->cls[c];
        if (k->pages == 0) continue;
        cJSON *o = cJSON_CreateObject();
        sf_json_u64(o, "class", c);
        sf_json_u64(o, "block_size", sf_class_size[c]);
        sf_json_u64(o, "pages", k->pages);
        sf_json_u64(o, "blocks_used", k->used);
        sf_json_u64(o, "blocks_listed", k->listed);
        sf_json_u64(o, "blocks_capacity", k->capacity);
        sf_json_u64(o, "bytes_in_blocks", k->used * sf_class_size[c]);
        sf_json_add(list, NULL, o);
    }
    return list;
}

static cJSON *thread_json(int tid) {
    if (tid <= 0) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    char name[64];
    sf_json_u64(o, "tid", (uint64_t)tid);
    if (sf_snapshot_thread_name(tid, name, sizeof name)) sf_json_str(o, "name", name);
    else sf_json_null(o, "name");
    return o;
}

/* "slot": the registry slot, null for the fallback heap ("fallback": true). */
static void add_slot(cJSON *o, const sf_snap_heap_t *h) {
    bool fallback = h->slot == SF_HEAP_FALLBACK_SLOT;
    if (fallback) sf_json_null(o, "slot");
    else sf_json_u64(o, "slot", h->slot);
    sf_json_bool(o, "fallback", fallback);
}

static cJSON *heap_json(const sf_snap_heap_t *h, const struct heap_use *u) {
    cJSON *o = cJSON_CreateObject();
    add_slot(o, h);
    sf_json_str(o, "state", heap_state_name(h));
    sf_json_bool(o, "ever_used", h->ever_used);
    sf_json_bool(o, "small", h->small);
    sf_json_add(o, "thread", thread_json(h->tid));
    sf_json_u64(o, "bytes_in_blocks", u->bytes);
    sf_json_u64(o, "blocks", u->blocks);
    sf_json_u64(o, "blocks_listed", u->listed);
    sf_json_u64(o, "pages", u->pages);
    sf_json_u64(o, "segments", u->segments);
    sf_json_u64(o, "allocs", h->allocs);
    /* as process-wide: frees are not counted, every block handed out is
     * live or was freed and taken back */
    sf_json_u64(o, "frees", h->allocs > u->blocks ? h->allocs - u->blocks : 0);
    sf_json_u64(o, "remote_frees", h->remote_frees);
    sf_json_add(o, "classes", classes_json(u));
    return o;
}

/* The offset/limit query of /heaps and /rings, and the heaps it names. */
static sf_snap_heap_t *heaps_page(const sf_query_t *q, sf_reply_t *r, struct heap_window *w, uint64_t *limit) {
    if (!sf_query_u64(q, "limit", HEAPS_LIMIT_DEFAULT, HEAPS_LIMIT_MAX, limit, r) ||
        !sf_query_u64(q, "offset", 0, UINT32_MAX, &w->offset, r))
        return NULL;
    sf_snap_heap_t *heaps = malloc((*limit ? *limit : 1) * sizeof *heaps);
    if (heaps == NULL) {
        reply_nomem(r);
        return NULL;
    }
    w->n = sf_snapshot_heaps(heaps, w->offset, *limit, &w->total);
    return heaps;
}

static void add_paging(cJSON *root, const struct heap_window *w, uint64_t limit) {
    sf_json_u64(root, "total", w->total);
    sf_json_u64(root, "offset", w->offset);
    sf_json_u64(root, "limit", limit);
    sf_json_u64(root, "returned", w->n);
}

void sf_ep_heaps(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty;
    uint64_t limit;
    struct heap_window w;
    if (!sf_query_pretty(q, r, &pretty)) return;
    /* the heaps' counters first: a block allocated between the two reads is
     * then in blocks but not yet in allocs, never the other way round, so the
     * derived frees (allocs - blocks) may lag but never run ahead of the
     * frees really made (which a later request would then undercut) */
    sf_snap_heap_t *heaps = heaps_page(q, r, &w, &limit);
    if (heaps == NULL) return;
    struct heap_use *use = calloc(w.n + 1, sizeof *use);
    sf_snapshot_t s;
    if (use == NULL || sf_snapshot_segments(&s, 0, UINT64_MAX) != 0) {
        free(heaps);
        free(use);
        return reply_nomem(r);
    }
    heap_usage(&s, &w, use, &use[w.n]);
    cJSON *root = cJSON_CreateObject();
    add_paging(root, &w, limit);
    struct sefer_stats st;
    sf_stats_collect(&st);
    /* over all heaps, not only this page's */
    sf_json_u64(root, "live", st.heaps_live);
    sf_json_u64(root, "abandoned", st.heaps_abandoned);
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < w.n; i++) {
        uncount_listed(&heaps[i], &use[i]);
        sf_json_add(list, NULL, heap_json(&heaps[i], &use[i]));
    }
    cJSON *spans = cJSON_CreateObject();
    sf_json_u64(spans, "segments", use[w.n].segments);
    sf_json_u64(spans, "bytes_in_blocks", use[w.n].bytes);
    sf_json_add(root, "spans", spans);
    sf_json_add(root, "snapshot", snapshot_meta(&s));
    sf_json_add(root, "heaps", list);
    sf_snapshot_release(&s);
    free(heaps);
    free(use);
    sf_reply_json(r, 200, root, pretty);
}

/* ---- /rings ------------------------------------------------------------------------ */

void sf_ep_rings(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty;
    uint64_t limit;
    struct heap_window w;
    if (!sf_query_pretty(q, r, &pretty)) return;
    sf_snap_heap_t *heaps = heaps_page(q, r, &w, &limit);
    if (heaps == NULL) return;
    cJSON *root = cJSON_CreateObject();
    add_paging(root, &w, limit);
    cJSON *list = cJSON_CreateArray();
    uint64_t pending = 0, overflowed = 0;
    for (size_t i = 0; i < w.n; i++) {
        const sf_snap_heap_t *h = &heaps[i];
        if (!h->has_ring) continue;
        cJSON *o = cJSON_CreateObject();
        add_slot(o, h);
        sf_json_str(o, "state", heap_state_name(h));
        sf_json_u64(o, "capacity", h->ring_capacity);
        sf_json_u64(o, "pending", h->ring_pushed - h->ring_drained);
        sf_json_u64(o, "pushed", h->ring_pushed);
        sf_json_u64(o, "drained", h->ring_drained);
        sf_json_u64(o, "overflowed", h->ring_overflowed);
        sf_json_bool(o, "overflow_waiting", h->overflow_waiting);
        sf_json_u64(o, "page_list_collected", h->remote_collected);
        sf_json_add(list, NULL, o);
        pending += h->ring_pushed - h->ring_drained;
        overflowed += h->ring_overflowed;
    }
    free(heaps);
    (void)pending, (void)overflowed;
    /* over every heap's ring, not only this page's */
    struct sefer_stats st;
    sf_stats_collect(&st);
    sf_json_u64(root, "pending", sf_snapshot_ring_pending());
    sf_json_u64(root, "overflowed", st.ring_overflows);
    sf_json_add(root, "rings", list);
    sf_reply_json(r, 200, root, pretty);
}

/* ---- /stats ------------------------------------------------------------------------ */

void sf_ep_stats(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty;
    if (!sf_query_pretty(q, r, &pretty)) return;
    struct sefer_stats st = {.size = sizeof st};
    sefer_stats_get(&st, sizeof st);
    cJSON *root = cJSON_CreateObject();
    sf_json_str(root, "build", sefer_build());
    sf_json_str(root, "build_options", sefer_build_options());
#define SF_STAT_JSON_(name, doc) sf_json_u64(root, #name, st.name);
    SEFER_STATS_FIELDS(SF_STAT_JSON_)
#undef SF_STAT_JSON_
    sf_json_null(root, "bytes_requested");
    sf_json_str(root, "bytes_requested_reason",
                "sefer does not record requested sizes (a block has its size class's size)");
    uint64_t rss = 0;
    char why[160];
    if (sf_snapshot_rss(&rss, why, sizeof why)) {
        sf_json_u64(root, "rss_bytes", rss);
    } else {
        sf_json_null(root, "rss_bytes");
        sf_json_str(root, "rss_bytes_reason", why);
    }
    uint64_t lookups = st.large_cache_hits + st.large_cache_misses;
    if (lookups) {
        sf_json_double(root, "large_cache_hit_rate", (double)st.large_cache_hits / (double)lookups);
    } else {
        sf_json_null(root, "large_cache_hit_rate");
        sf_json_str(root, "large_cache_hit_rate_reason", "no large or segment request yet");
    }
    cJSON *srv = cJSON_CreateObject();
    sf_introspect_counters_t *c = &sf_introspect_counters;
    sf_json_u64(srv, "requests", atomic_load(&c->requests));
    sf_json_u64(srv, "auth_failures", atomic_load(&c->auth_failures));
    sf_json_u64(srv, "connections_open", atomic_load(&c->connections_open));
    sf_json_add(root, "introspect", srv);
    sf_reply_json(r, 200, root, pretty);
}

/* ---- /config ------------------------------------------------------------------------- */

static const char *const type_names[] = {[SF_KNOB_UINT] = "uint",  [SF_KNOB_SIZE] = "size",
                                         [SF_KNOB_MS] = "duration", [SF_KNOB_BOOL] = "bool",
                                         [SF_KNOB_ENUM] = "enum",  [SF_KNOB_STRING] = "string"};

/* A knob value as JSON (introspect.h). */
cJSON *sf_knob_json_value(const struct sf_knob_def *d, uint64_t v, const char *text) {
    switch (d->type) {
    case SF_KNOB_BOOL: return cJSON_CreateBool(v != 0);
    case SF_KNOB_ENUM: return cJSON_CreateString(d->choices[v]);
    case SF_KNOB_STRING: return sf_json_string_item(text); /* (a path need not be UTF-8) */
    case SF_KNOB_SIZE:
        if (v == SF_KNOB_AUTO) return cJSON_CreateString("auto");
        return sf_json_u64_item(v);
    default: return sf_json_u64_item(v);
    }
}

static cJSON *knob_json(int i) {
    const struct sf_knob_def *d = &sf_knob_defs[i];
    char text[SF_KNOB_STR_MAX + 8] = "", env[64];
    sefer_config_get(d->name, text, sizeof text);
    const char *source = sefer_config_source(d->name);
    cJSON *o = cJSON_CreateObject();
    sf_json_str(o, "name", d->name);
    if (i == SF_KNOB_INTROSPECT_TOKEN) { /* never shown */
        sf_json_null(o, "value");
        sf_json_bool(o, "redacted", true);
        sf_json_bool(o, "set", text[0] != '\0');
    } else {
        sf_json_add(o, "value", sf_knob_json_value(d, sf_knob((enum sf_knob_id)i), text));
    }
    sf_json_add(o, "default", sf_knob_json_value(d, d->def, sf_knob_default_string(i)));
    sf_json_str(o, "type", type_names[d->type]);
    if (d->type == SF_KNOB_SIZE) sf_json_str(o, "unit", "bytes");
    else if (d->type == SF_KNOB_MS) sf_json_str(o, "unit", "milliseconds");
    else sf_json_null(o, "unit");
    if (d->type == SF_KNOB_UINT || d->type == SF_KNOB_SIZE || d->type == SF_KNOB_MS) {
        sf_json_u64(o, "min", d->min);
        sf_json_u64(o, "max", d->max);
    }
    if (d->type == SF_KNOB_ENUM) {
        cJSON *ch = cJSON_CreateArray();
        for (const char *const *c = d->choices; *c; c++) sf_json_add(ch, NULL, cJSON_CreateString(*c));
        sf_json_add(o, "choices", ch);
    }
    sf_json_str(o, "source", source ? source : "unknown");
    sf_json_bool(o, "runtime", d->runtime != 0);
    sf_knob_env_name(i, env, sizeof env);
    sf_json_str(o, "env", env);
    sf_json_str(o, "meaning", d->meaning);
    return o;
}

void sf_ep_config(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty;
    if (!sf_query_pretty(q, r, &pretty)) return;
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < SF_KNOB_COUNT; i++) sf_json_add(list, NULL, knob_json(i));
    sf_json_add(root, "knobs", list);
    sf_reply_json(r, 200, root, pretty);
}

/* POST /config {"name": "guard.on_error", "value": "report"} */
static bool value_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) return snprintf(buf, len, "%s", v->valuestring) < (int)len;
    if (cJSON_IsBool(v)) return snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false") > 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
        v->valuedouble == (double)(uint64_t)v->valuedouble)
        return snprintf(buf, len, "%" PRIu64, (uint64_t)v->valuedouble) > 0;
    return false;
}

static const char *errno_name(int e) {
    return e == ENOENT ? "ENOENT" : e == EPERM ? "EPERM" : e == EINVAL ? "EINVAL" : "error";
}

/* Whether the body has a \u0000 escape.  cJSON puts the NUL in the string,
 * whose C text then ends there: {"value": "report\u0000junk"} would set
 * "report", and a name with one would change the knob its first part
 * names. */
static bool has_nul_escape(const char *body, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++) {
        if (body[i] != '\\') continue;
        if (body[i + 1] == 'u' && memcmp(body + i + 2, "0000", 4) == 0) return true;
        i++; /* the escaped character ("\\\\u0000" is a backslash, then text) */
    }
    return false;
}

void sf_ep_config_set(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q;
    if (has_nul_escape(body, len))
        return sf_reply_error(r, 400, "bad request", "a knob's name or value cannot hold a NUL (\\u0000)");
    cJSON *in = cJSON_ParseWithLength(body, len);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(in, "value");
    char text[SF_KNOB_STR_MAX + 8];
    if (!cJSON_IsObject(in) || !cJSON_IsString(name) || value == NULL ||
        !value_text(value, text, sizeof text)) {
        cJSON_Delete(in);
        return sf_reply_error(r, 400, "bad request",
                              "expected a JSON object {\"name\": KNOB, \"value\": TEXT, NUMBER or BOOL}");
    }
    if (sefer_config_set(name->valuestring, text) != 0) {
        int e = errno;
        cJSON *root = cJSON_CreateObject();
        sf_json_str(root, "error", "refused");
        sf_json_str(root, "reason", sefer_config_error());
        sf_json_str(root, "errno", errno_name(e));
        sf_json_u64(root, "status", e == ENOENT ? 404 : 400);
        cJSON_Delete(in);
        return sf_reply_json(r, e == ENOENT ? 404 : 400, root, true);
    }
    int i = sf_knob_lookup(name->valuestring, strlen(name->valuestring));
    cJSON_Delete(in);
    cJSON *root = knob_json(i);
    sf_reply_json(r, 200, root, true);
}

/* POST /trim */
void sf_ep_trim(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q, (void)body, (void)len;
    size_t released = sefer_trim();
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "bytes_released", released);
    sf_reply_json(r, 200, root, true);
}

/* ---- /phases --------------------------------------------------------------------- */

static cJSON *phase_json(const struct sefer_phase *p) {
    cJSON *o = cJSON_CreateObject();
    sf_json_str(o, "name", p->name);
    sf_json_u64(o, "depth", p->depth);
    sf_json_u64(o, "start_ms", p->start_ms);
    sf_json_u64(o, "end_ms", p->end_ms);
    sf_json_u64(o, "duration_ns", p->duration_ns);
    sf_json_u64(o, "block_bytes_entry", p->block_bytes_entry);
    sf_json_u64(o, "block_bytes_peak", p->block_bytes_peak);
    sf_json_u64(o, "block_bytes_exit", p->block_bytes_exit);
    sf_json_u64(o, "block_bytes_peak_error", p->block_bytes_peak_error);
    sf_json_u64(o, "committed_entry", p->committed_entry);
    sf_json_u64(o, "committed_peak", p->committed_peak);
    sf_json_u64(o, "committed_exit", p->committed_exit);
    sf_json_u64(o, "allocs", p->allocs);
    sf_json_u64(o, "frees", p->frees);
    sf_json_u64(o, "reallocs", p->reallocs);
    sf_json_u64(o, "bytes_allocated", p->bytes_allocated);
    return o;
}

void sf_ep_phases(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty;
    if (!sf_query_pretty(q, r, &pretty)) return;
    sf_phase_snap_t *s = malloc(sizeof *s);
    if (s == NULL) return reply_nomem(r);
    sf_phase_snapshot(s);
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "ended_total", s->done_total);
    sf_json_u64(root, "kept", SF_PHASES_KEPT);
    cJSON *open = cJSON_CreateArray();
    for (size_t i = 0; i < s->nopen; i++) {
        cJSON *o = cJSON_CreateObject();
        sf_json_str(o, "name", s->open[i].name);
        sf_json_u64(o, "depth", i + 1);
        sf_json_u64(o, "start_ms", s->open[i].start_ms);
        sf_json_u64(o, "running_ns", s->open[i].running_ns);
        sf_json_u64(o, "block_bytes_entry", s->open[i].block_bytes_entry);
        sf_json_u64(o, "block_bytes_peak", s->open[i].block_bytes_peak);
        sf_json_add(open, NULL, o);
    }
    sf_json_add(root, "open", open);
    cJSON *done = cJSON_CreateArray();
    for (size_t i = 0; i < s->ndone; i++) sf_json_add(done, NULL, phase_json(&s->done[i]));
    sf_json_add(root, "ended", done);
    free(s);
    sf_reply_json(r, 200, root, pretty);
}

/* ---- /healthz ------------------------------------------------------------------- */

void sf_ep_healthz(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q, (void)body, (void)len;
    cJSON *root = cJSON_CreateObject();
    sf_json_str(root, "status", "ok");
    sf_json_str(root, "version", sefer_version());
    sf_json_str(root, "build", sefer_build());
    sf_reply_json(r, 200, root, false);
}
