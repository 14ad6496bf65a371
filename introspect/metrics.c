/* metrics.c - /metrics in the Prometheus text exposition format 0.0.4.
 *
 * Every field of struct sefer_stats has one row below giving its metric
 * name and type; the HELP text is the field's meaning from
 * SEFER_STATS_FIELDS (sefer.h), so the two cannot drift apart, and a
 * static assertion fails the build if a statistic has no row.  Names follow
 * the Prometheus conventions: the sefer_ prefix, base units (bytes), _bytes
 * for sizes and _total for counters.  A figure that cannot be had (RSS
 * without /proc) is left out, with a comment line saying why: the format has
 * no null. */
#include "introspect.h"

#include <inttypes.h>
#include <stddef.h>

enum metric_type { GAUGE, COUNTER };

/* X(field, metric name, type, label): rows with the same name form one
 * family with a "kind" label; they must be adjacent. */
#define SF_METRICS(X)                                                                  \
    X(bytes_in_blocks, "sefer_block_bytes", GAUGE, NULL)                              \
    X(bytes_committed, "sefer_committed_bytes", GAUGE, NULL)                          \
    X(bytes_reserved, "sefer_reserved_bytes", GAUGE, NULL)                            \
    X(bytes_metadata, "sefer_metadata_bytes", GAUGE, NULL)                            \
    X(bytes_decommitted_total, "sefer_decommitted_bytes_total", COUNTER, NULL)        \
    X(segments, "sefer_segments", GAUGE, NULL)                                        \
    X(segments_peak, "sefer_segments_peak", GAUGE, NULL)                              \
    X(large_cache_bytes, "sefer_large_cache_bytes", GAUGE, NULL)                      \
    X(large_cache_spans, "sefer_large_cache_spans", GAUGE, NULL)                      \
    X(large_cache_hits, "sefer_large_cache_hits_total", COUNTER, NULL)                \
    X(large_cache_misses, "sefer_large_cache_misses_total", COUNTER, NULL)            \
    X(os_maps, "sefer_os_maps_total", COUNTER, NULL)                                  \
    X(allocs, "sefer_allocs_total", COUNTER, NULL)                                    \
    X(frees, "sefer_frees_total", COUNTER, NULL)                                      \
    X(remote_frees, "sefer_remote_frees_total", COUNTER, NULL)                        \
    X(ring_pushes, "sefer_ring_pushes_total", COUNTER, NULL)                          \
    X(ring_overflows, "sefer_ring_overflows_total", COUNTER, NULL)                    \
    X(enomem, "sefer_enomem_total", COUNTER, NULL)                                    \
    X(heaps_live, "sefer_heaps_live", GAUGE, NULL)                                    \
    X(heaps_abandoned, "sefer_heaps_abandoned", GAUGE, NULL)                          \
    X(fallback_allocs, "sefer_fallback_allocs_total", COUNTER, NULL)                  \
    X(guard_invalid_free, "sefer_guard_detections_total", COUNTER, "invalid_free")    \
    X(guard_interior_free, "sefer_guard_detections_total", COUNTER, "interior_free")  \
    X(guard_double_free, "sefer_guard_detections_total", COUNTER, "double_free")      \
    X(guard_overflow, "sefer_guard_detections_total", COUNTER, "overflow")            \
    X(guard_use_after_free, "sefer_guard_detections_total", COUNTER, "use_after_free") \
    X(remote_list_frees, "sefer_remote_list_frees_total", COUNTER, NULL)                \
    X(heap_slots, "sefer_heap_slots", GAUGE, NULL)                                    \
    X(profile_samples, "sefer_profile_samples_total", COUNTER, NULL)                  \
    X(profile_dropped, "sefer_profile_dropped_total", COUNTER, NULL)                  \
    X(profile_live_samples, "sefer_profile_live_samples", GAUGE, NULL)                \
    X(profile_bytes, "sefer_profile_bytes", GAUGE, NULL)                              \
    X(heap_fallbacks, "sefer_heap_fallbacks_total", COUNTER, NULL)                    \
    X(bytes_shed_on_growth, "sefer_shed_on_growth_bytes_total", COUNTER, NULL)        \
    X(memory_limit, "sefer_memory_limit_bytes", GAUGE, NULL)                          \
    X(memory_headroom, "sefer_memory_headroom_bytes", GAUGE, NULL)                    \
    X(memory_limit_purges, "sefer_memory_limit_purges_total", COUNTER, NULL)          \
    X(memory_limit_refusals, "sefer_memory_limit_refusals_total", COUNTER, NULL)      \
    X(bytes_exited_waiting, "sefer_exited_waiting_bytes", GAUGE, NULL)                \
    X(bytes_remote_pending, "sefer_remote_pending_bytes", GAUGE, NULL)                \
    X(profile_unwind_fallbacks, "sefer_profile_unwind_fallbacks_total", COUNTER, NULL) \
    X(profile_unwind_disagreements, "sefer_profile_unwind_disagreements_total", COUNTER, NULL) \
    X(guard_samples, "sefer_guard_samples_total", COUNTER, NULL)                      \
    X(guard_samples_live, "sefer_guard_samples_live", GAUGE, NULL)                    \
    X(bytes_waiting, "sefer_waiting_bytes", GAUGE, NULL)                              \
    X(cache_max_purges, "sefer_cache_max_purges_total", COUNTER, NULL)                \
    X(bytes_cache_max_purged, "sefer_cache_max_purged_bytes_total", COUNTER, NULL)     \
    X(remote_batch_frees, "sefer_remote_batch_frees_total", COUNTER, NULL)             \
    X(profile_sample_bytes_now, "sefer_profile_sample_bytes", GAUGE, NULL)

struct metric {
    size_t offset; /* of the field in struct sefer_stats */
    const char *name;
    enum metric_type type;
    const char *label;
};

static const struct metric metrics[] = {
#define SF_METRIC_ROW_(field, name, type, label) {offsetof(struct sefer_stats, field), name, type, label},
    SF_METRICS(SF_METRIC_ROW_)
#undef SF_METRIC_ROW_
};

struct stat_doc {
    size_t offset;
    const char *doc;
};
static const struct stat_doc stat_docs[] = {
#define SF_STAT_DOC_(field, doc) {offsetof(struct sefer_stats, field), doc},
    SEFER_STATS_FIELDS(SF_STAT_DOC_)
#undef SF_STAT_DOC_
};

_Static_assert(sizeof metrics / sizeof *metrics == sizeof stat_docs / sizeof *stat_docs,
               "every statistic of SEFER_STATS_FIELDS needs a row in SF_METRICS");

static const char *doc_of(const struct metric *m) {
    if (m->label != NULL) return "misuses detected by the guard checks, by kind";
    for (size_t i = 0; i < sizeof stat_docs / sizeof *stat_docs; i++)
        if (stat_docs[i].offset == m->offset) return stat_docs[i].doc;
    return "";
}

static void family(sf_text_t *t, const char *name, const char *type, const char *help) {
    sf_text_add(t, "# HELP ");
    sf_text_add(t, name);
    sf_text_add(t, " ");
    for (const char *c = help; *c; c++) /* the format escapes \ and newline */
        sf_text_add(t, *c == '\\' ? "\\\\" : *c == '\n' ? "\\n" : (char[2]){*c, 0});
    sf_text_addf(t, "\n# TYPE %s %s\n", name, type);
}

static void stats_metrics(sf_text_t *t) {
    struct sefer_stats st = {.size = sizeof st};
    sefer_stats_get(&st, sizeof st);
    for (size_t i = 0; i < sizeof metrics / sizeof *metrics; i++) {
        const struct metric *m = &metrics[i];
        if (i == 0 || strcmp(metrics[i - 1].name, m->name) != 0)
            family(t, m->name, m->type == COUNTER ? "counter" : "gauge", doc_of(m));
        uint64_t v;
        memcpy(&v, (const char *)&st + m->offset, sizeof v);
        if (m->label) sf_text_addf(t, "%s{kind=\"%s\"} %" PRIu64 "\n", m->name, m->label, v);
        else sf_text_addf(t, "%s %" PRIu64 "\n", m->name, v);
    }
}

static void extra_metrics(sf_text_t *t) {
    uint64_t rss = 0;
    char why[160];
    family(t, "sefer_resident_bytes", "gauge",
           "resident set size of the whole process (RSS, not only sefer's memory)");
    if (sf_snapshot_rss(&rss, why, sizeof why)) sf_text_addf(t, "sefer_resident_bytes %" PRIu64 "\n", rss);
    else sf_text_addf(t, "# sefer_resident_bytes unavailable: %s\n", why);

    uint64_t pending = sf_snapshot_ring_pending();
    family(t, "sefer_ring_pending", "gauge", "remote frees waiting in heap rings for their owner");
    sf_text_addf(t, "sefer_ring_pending %" PRIu64 "\n", pending);

    sf_introspect_counters_t *c = &sf_introspect_counters;
    family(t, "sefer_introspect_requests_total", "counter", "requests answered by the introspection server");
    sf_text_addf(t, "sefer_introspect_requests_total %" PRIu64 "\n", atomic_load(&c->requests));
    family(t, "sefer_introspect_auth_failures_total", "counter",
           "requests refused for a missing or wrong bearer token");
    sf_text_addf(t, "sefer_introspect_auth_failures_total %" PRIu64 "\n", atomic_load(&c->auth_failures));
    family(t, "sefer_introspect_connections", "gauge", "connections open to the introspection server");
    sf_text_addf(t, "sefer_introspect_connections %" PRIu64 "\n", atomic_load(&c->connections_open));
    family(t, "sefer_info", "gauge", "sefer version and build (always 1)");
    sf_text_addf(t, "sefer_info{version=\"%s\",build=\"%s\"} 1\n", SEFER_VERSION_STRING, sefer_build());
}

void sf_ep_metrics(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q, (void)body, (void)len;
    sf_text_t t = {0};
    stats_metrics(&t);
    extra_metrics(&t);
    sf_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", &t);
}
