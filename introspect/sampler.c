/* sampler.c - the server's thread samples every figure into the history.
 *
 * Every introspect.history_interval (1 s by default) the server's thread
 * (loop.c) reads every figure /stats gives as a number, plus the rings'
 * pending frees, into the history (history.h): each sample for the last
 * hour, then a point a minute (minimum, maximum, last) for a day, then a
 * point every 10 minutes for a week.  /history serves it (timeline.c).
 *
 * A guest in the host's process:
 *   - the memory is mapped once, when the first server starts and before its
 *     thread exists (sf_sampler_prepare), with mmap (sf_os_map_plain): no
 *     block of the host's heap, no sefer lock, and its size is fixed from
 *     then on (docs/introspection.md gives it); a later server appends to the
 *     same history;
 *   - a sample allocates nothing: sefer_stats_get (one walk of the pages
 *     under sf_seg_lock, as /stats does), /proc/self/statm, the heaps' ring
 *     counters (no lock) and the server's own counters;
 *   - hist_lock, ours alone (no allocation path takes it), makes a /history
 *     reply see whole samples.  Both run in the server's thread, but a
 *     server whose thread could not be stopped in time (loop.c) may still
 *     be answering a request when the next one starts. */
#include "history.h"
#include "introspect.h"

#include <stdio.h>

#define RAW_SPAN_MS 3600000u /* the raw tier covers the last hour... */
#define RAW_MAX 36000u       /* ...at most this many samples of it */

/* The figures sampled besides SEFER_STATS_FIELDS, in /history's names. */
/* clang-format off */
#define SF_SAMPLE_EXTRA(X) \
    X(rss_bytes) \
    X(ring_pending) \
    X(introspect_requests) \
    X(introspect_auth_failures) \
    X(introspect_connections_open)

static const char *const field_names[] = {
#define SF_STAT_NAME_(name, doc) #name,
    SEFER_STATS_FIELDS(SF_STAT_NAME_)
#undef SF_STAT_NAME_
#define SF_EXTRA_NAME_(name) #name,
    SF_SAMPLE_EXTRA(SF_EXTRA_NAME_)
#undef SF_EXTRA_NAME_
};
/* clang-format on */
#define FIELDS (sizeof field_names / sizeof *field_names)

static pthread_mutex_t hist_lock = PTHREAD_MUTEX_INITIALIZER;
static sf_history_t hist;
static void *hist_mem;    /* its mapping, */
static size_t hist_bytes; /* of this many bytes; 0: no history */
static uint64_t interval_ms;
static char hist_why[160]; /* why there is none */
static uint64_t next_due;  /* CLOCK_MONOTONIC ms; 0: at once */
static uint64_t cost_last_ns, cost_max_ns, cost_total_ns;

const char *const *sf_sampler_fields(unsigned *count) {
    *count = FIELDS;
    return field_names;
}

/* The tiers for a sampling interval: the last hour of samples, a day of
 * minutes, a week of 10-minute points. */
static sf_hist_conf_t shape(uint64_t every_ms) {
    uint64_t raw = (RAW_SPAN_MS + every_ms - 1) / every_ms;
    return (sf_hist_conf_t){.fields = FIELDS,
                            .tier = {{0, (uint32_t)(raw < RAW_MAX ? raw : RAW_MAX)},
                                     {60000, 24 * 60},
                                     {600000, 7 * 24 * 6}}};
}

void sf_sampler_prepare(void) {
    sf_lock(&hist_lock);
    if (hist_bytes == 0 && hist_why[0] == '\0') {
        if (!sf_knob(SF_KNOB_INTROSPECT_HISTORY)) {
            snprintf(hist_why, sizeof hist_why, "introspect.history is false in this process");
        } else {
            interval_ms = sf_knob(SF_KNOB_INTROSPECT_HISTORY_INTERVAL);
            sf_hist_conf_t conf = shape(interval_ms);
            size_t bytes = sf_history_size(&conf);
            void *mem = sf_os_map_plain(bytes); /* zero, touched as it fills */
            if (mem == NULL) {
                snprintf(hist_why, sizeof hist_why, "the history's %zu bytes could not be mapped",
                         bytes);
            } else {
                sf_history_init(&hist, &conf, mem);
                hist_mem = mem;
                hist_bytes = bytes;
            }
        }
    }
    next_due = 0; /* a new server samples at once */
    sf_unlock(&hist_lock);
}

static void read_figures(uint64_t *v) {
    struct sefer_stats st = {.size = sizeof st};
    sefer_stats_get(&st, sizeof st);
    unsigned i = 0;
#define SF_STAT_VALUE_(name, doc) v[i++] = st.name;
    SEFER_STATS_FIELDS(SF_STAT_VALUE_)
#undef SF_STAT_VALUE_
    uint64_t rss;
    char why[160];
    v[i++] = sf_snapshot_rss(&rss, why, sizeof why) ? rss : SF_HIST_NULL;
    v[i++] = sf_snapshot_ring_pending();
    v[i++] = atomic_load(&sf_introspect_counters.requests);
    v[i++] = atomic_load(&sf_introspect_counters.auth_failures);
    v[i++] = atomic_load(&sf_introspect_counters.connections_open);
}

int sf_sampler_due_ms(uint64_t now_ms) {
    if (hist_bytes == 0) return -1;
    return next_due <= now_ms ? 0 : (int)(next_due - now_ms);
}

void sf_sampler_tick(uint64_t now_ms) {
    if (hist_bytes == 0 || now_ms < next_due) return;
    next_due = next_due == 0 || next_due + interval_ms <= now_ms ? now_ms + interval_ms
                                                                 : next_due + interval_ms;
    uint64_t v[FIELDS];
    uint64_t t0 = sf_now_ns();
    read_figures(v);
    uint64_t t = sf_clock_ms(); /* every figure of the sample was read by then */
    sf_lock(&hist_lock);
    if (hist.samples > 0 && t <= hist.last_ms) t = hist.last_ms + 1; /* strictly later */
    sf_history_add(&hist, t, v);
    cost_last_ns = sf_now_ns() - t0;
    if (cost_last_ns > cost_max_ns) cost_max_ns = cost_last_ns;
    cost_total_ns += cost_last_ns;
    sf_unlock(&hist_lock);
}

const sf_history_t *sf_sampler_lock(sf_sampler_info_t *info) {
    sf_lock(&hist_lock);
    *info = (sf_sampler_info_t){.interval_ms = interval_ms,
                                .bytes = hist_bytes,
                                .why = hist_why,
                                .last_ns = cost_last_ns,
                                .max_ns = cost_max_ns,
                                .mean_ns = hist.samples ? cost_total_ns / hist.samples : 0};
    return hist_bytes ? &hist : NULL;
}

void sf_sampler_unlock(void) {
    sf_unlock(&hist_lock);
}

/* In a fork() child (server.c's handler).  A server's thread may have held
 * hist_lock when the parent forked: the thread of a server stopped without
 * waiting for it (introspect.stop_wait) still samples until it ends, and a
 * /history reply holds the lock while it writes.  That thread is not in the
 * child, so the lock would stay held and the child's first start would
 * wait for it forever.  The child's history may be half written then: it
 * is dropped, and a server started in the child maps a fresh one.  (Not
 * held across fork() instead: the fork would wait for a reply in progress.) */
void sf_sampler_after_fork_child(void) {
    if (!sf_lock_lost_at_fork(&hist_lock)) return; /* no thread held it: all is whole */
    if (hist_bytes != 0) sf_os_unmap(hist_mem, hist_bytes);
    memset(&hist, 0, sizeof hist);
    hist_mem = NULL;
    hist_bytes = 0;
    hist_why[0] = '\0';
    next_due = 0;
    cost_last_ns = cost_max_ns = cost_total_ns = 0;
}
