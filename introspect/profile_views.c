/* profile_views.c - the heap profile over HTTP: /profile/sites,
 * /profile/stacks, POST /profile/mark, /debug/pprof/heap and /allocs, the
 * short history of the top sites, and profile.output's file
 * (docs/introspection.md, "Heap profile").
 *
 * Every view starts from one copy of the profile's tables (profile_copy.c),
 * then names the frames (symbols.c) and formats; the pprof views and the
 * file encode it with pprof.c.  Nothing here runs inside malloc. */
#include "introspect.h"
#include "cjson_calls.h"
#include "symbols.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SITES_LIMIT_DEFAULT 20
#define SITES_LIMIT_MAX 1000
#define HISTORY_POINTS 60   /* the history keeps the last 60 points... */
#define HISTORY_MS 5000     /* ...taken every 5 s: 5 minutes */
#define HISTORY_SITES 32    /* the top sites by live bytes at each point */

/* ---- query parameters ------------------------------------------------------------ */

static const char *query_text(const sf_query_t *q, const char *key) {
    for (unsigned i = 0; i < q->count; i++)
        if (strcmp(q->key[i], key) == 0) return q->value[i] ? q->value[i] : "";
    return NULL;
}

/* by=live (default) or by=allocated; false after a 400 reply. */
static bool query_by(const sf_query_t *q, sf_reply_t *r, bool *allocated) {
    const char *by = query_text(q, "by");
    *allocated = by != NULL && strcmp(by, "allocated") == 0;
    if (by == NULL || *allocated || strcmp(by, "live") == 0) return true;
    sf_reply_error(r, 400, "bad request", "query parameter by must be live or allocated");
    return false;
}

/* ---- ordering ------------------------------------------------------------------- */

/* key: 0 live bytes, 1 allocated bytes, 2 growth since the mark.  Passed
 * to the comparison, not kept in a static: a server stopped without waiting
 * for its thread may still be sorting while a new server's thread sorts. */
static int64_t growth(const sf_prof_site_t *s) { return (int64_t)(s->live_bytes - s->mark_bytes); }

static int64_t key_of(const sf_prof_site_t *s, int key) {
    return key == 0 ? (int64_t)s->live_bytes : key == 1 ? (int64_t)s->alloc_bytes : growth(s);
}

static int by_key(const void *a, const void *b, void *key) {
    const sf_prof_site_t *x = a, *y = b;
    int64_t kx = key_of(x, *(const int *)key), ky = key_of(y, *(const int *)key);
    if (kx != ky) return kx > ky ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void sort_sites(sf_prof_copy_t *c, int key) {
    qsort_r(c->sites, c->nsites, sizeof *c->sites, by_key, &key);
}

/* ---- history ------------------------------------------------------------------ */

struct point {
    uint64_t ms;
    uint32_t n;
    uint32_t id[HISTORY_SITES];
    uint64_t bytes[HISTORY_SITES];
};
static pthread_mutex_t history_lock = PTHREAD_MUTEX_INITIALIZER;
static struct point history[HISTORY_POINTS];
static unsigned history_next, history_count;
static uint64_t history_last_ms;
static volatile sig_atomic_t dump_requested;

static void history_take(uint64_t now) {
    sf_prof_copy_t c;
    if (!sf_prof_copy_take(&c)) return;
    if (c.nsites != 0) {
        sort_sites(&c, 0);
        sf_lock(&history_lock);
        struct point *p = &history[history_next];
        p->ms = now;
        p->n = 0;
        for (size_t i = 0; i < c.nsites && p->n < HISTORY_SITES && c.sites[i].live_bytes > 0; i++, p->n++) {
            p->id[p->n] = c.sites[i].id;
            p->bytes[p->n] = c.sites[i].live_bytes;
        }
        history_next = (history_next + 1) % HISTORY_POINTS;
        if (history_count < HISTORY_POINTS) history_count++;
        sf_unlock(&history_lock);
    }
    sf_prof_copy_free(&c);
}

/* profile.output with each "%p" replaced by the process id (one file per
 * process when children inherit the setting); false if unset. */
static bool output_path(char *path, size_t size) {
    char knob[SF_KNOB_STR_MAX];
    if (sefer_config_get("profile.output", knob, sizeof knob) != 0 || knob[0] == '\0') return false;
    size_t n = 0;
    for (const char *c = knob; *c && n + 24 < size; c++) {
        if (c[0] == '%' && c[1] == 'p') {
            n += (size_t)snprintf(path + n, size - n, "%ld", (long)getpid());
            c++;
        } else {
            path[n++] = *c;
        }
    }
    path[n] = '\0';
    return true;
}

static bool write_to(const char *path) {
    if (sf_pprof_write_file(path) == 0) return true;
    fprintf(stderr, "sefer: profile.output %s: %s\n", path, strerror(errno));
    return false;
}

static void write_output(void) {
    char path[SF_KNOB_STR_MAX + 256];
    if (output_path(path, sizeof path)) write_to(path);
}

/* A guard detection is about to abort the process (guard_report.c): the
 * profile of what was live then, to profile.output.  Written by a child
 * made with the raw fork system call, which runs no fork handlers: this
 * thread may be inside the allocator holding one of its locks, which
 * sefer's own handlers would wait for.  The child has this thread alone,
 * its own copy of the heap (which the detection stopped before any
 * damage), and writes the file as at exit; a lock that another thread held
 * at the fork stays held in the child, so this process waits at most
 * ABORT_DUMP_MS for it, kills it if it has not finished (no file: the
 * write is to a temporary name, renamed when whole), and aborts. */
#define ABORT_DUMP_MS 10000
static void dump_before_abort(void) {
    char path[SF_KNOB_STR_MAX + 256];
    if (!output_path(path, sizeof path)) return; /* (the parent's pid for %p) */
#if defined(SYS_fork)
    pid_t pid = (pid_t)syscall(SYS_fork);
#else
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
    if (pid == 0) _exit(write_to(path) ? 0 : 1);
    if (pid < 0) return;
    for (int waited = 0; waited < ABORT_DUMP_MS; waited += 20) {
        int status = 0;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                fprintf(stderr, "sefer: the heap profile of the process as it aborts: %s\n", path);
            else
                fprintf(stderr, "sefer: no heap profile at abort: its writer failed (status %#x)\n", (unsigned)status);
            return;
        }
        if (w < 0) { /* (SIGCHLD ignored, or a handler of the program's reaped it) */
            fprintf(stderr, "sefer: the heap profile at abort was written to %s if its writer, whose end was not "
                            "seen, succeeded\n", path);
            return;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char tmp[sizeof path + 32];
    sf_pprof_tmp_path(tmp, sizeof tmp, path, pid);
    unlink(tmp);
    fprintf(stderr, "sefer: no heap profile at abort: its writer did not finish in %d ms\n", ABORT_DUMP_MS);
}

/* In a fork() child (server.c's handler): the sites view holds
 * history_lock while it names frames, which can take long (libdwfl reads
 * every module's symbols the first time), so a server's thread stopped
 * without waiting for it may hold the lock when the parent forks.  That
 * thread is not in the child: the child starts with a new lock and, since
 * the point being written then may be half written, no history. */
void sf_profile_views_after_fork_child(void) {
    if (!sf_lock_lost_at_fork(&history_lock)) return;
    history_next = history_count = 0;
}

void sf_profile_tick(void) {
    uint64_t now = sf_now_ms();
    if (dump_requested) {
        dump_requested = 0;
        write_output();
    }
    if (now - history_last_ms < HISTORY_MS) return;
    history_last_ms = now;
    if (sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES) != 0 || history_count != 0) history_take(now);
}

/* The site's past live bytes, oldest first (null where it was not among
 * the top sites). */
static cJSON *site_history(uint32_t id) {
    cJSON *a = cJSON_CreateArray();
    for (unsigned k = 0; k < history_count; k++) {
        const struct point *p = &history[(history_next + HISTORY_POINTS - history_count + k) % HISTORY_POINTS];
        cJSON *v = NULL;
        for (uint32_t j = 0; j < p->n && v == NULL; j++)
            if (p->id[j] == id) v = sf_json_u64_item(p->bytes[j]);
        sf_json_add(a, NULL, v ? v : cJSON_CreateNull());
    }
    return a;
}

static cJSON *history_ages(uint64_t now) {
    cJSON *a = cJSON_CreateArray();
    for (unsigned k = 0; k < history_count; k++) {
        const struct point *p = &history[(history_next + HISTORY_POINTS - history_count + k) % HISTORY_POINTS];
        sf_json_add(a, NULL, sf_json_u64_item(now - p->ms));
    }
    return a;
}

/* ---- JSON ---------------------------------------------------------------------- */

static cJSON *frame_json(uintptr_t a) {
    const sf_sym_t *s = sf_sym_lookup(a);
    size_t nmaps;
    const sf_mapping_t *maps = sf_sym_mappings(&nmaps);
    cJSON *o = cJSON_CreateObject();
    sf_json_hex(o, "address", a);
    if (s->function) sf_json_str(o, "function", s->function);
    else sf_json_null(o, "function");
    if (s->mapping != UINT32_MAX) {
        sf_json_str(o, "module", maps[s->mapping].path);
        sf_json_hex(o, "offset", s->module_offset);
    } else {
        sf_json_null(o, "module");
        sf_json_null(o, "offset");
    }
    if (s->file) {
        sf_json_str(o, "file", s->file);
        sf_json_u64(o, "line", (uint64_t)s->line);
    } else {
        sf_json_null(o, "file");
        sf_json_null(o, "line");
    }
    return o;
}

static void add_objs(cJSON *o, const char *key, uint64_t fixed) {
    sf_json_u64(o, key, (uint64_t)(fixed / SF_PROF_OBJ_UNIT + 0.5));
}

static void add_signed(cJSON *o, const char *key, int64_t v) {
    char text[24];
    snprintf(text, sizeof text, "%" PRId64, v);
    sf_json_add(o, key, cJSON_CreateRaw(text));
}

static cJSON *totals_json(const sf_prof_totals_t *t) {
    struct sefer_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    sefer_stats_get(&st, sizeof st);
    cJSON *o = cJSON_CreateObject();
    sf_json_u64(o, "samples", t->samples);
    sf_json_u64(o, "dropped", t->dropped);
    sf_json_u64(o, "live_samples", t->live_samples);
    sf_json_u64(o, "estimated_live_bytes", t->live_bytes);
    add_objs(o, "estimated_live_objects", t->live_objs);
    sf_json_u64(o, "bytes_in_blocks", st.bytes_in_blocks);
    sf_json_u64(o, "sites", t->sites);
    sf_json_u64(o, "profile_bytes", t->bytes);
    return o;
}

void sf_ep_profile_sites(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty, allocated;
    uint64_t limit;
    const char *since = query_text(q, "since");
    if (!sf_query_pretty(q, r, &pretty) || !query_by(q, r, &allocated) ||
        !sf_query_u64(q, "limit", SITES_LIMIT_DEFAULT, SITES_LIMIT_MAX, &limit, r))
        return;
    if (since != NULL && strcmp(since, "mark") != 0)
        return sf_reply_error(r, 400, "bad request", "query parameter since must be mark");
    sf_prof_copy_t c;
    if (!sf_prof_copy_take(&c)) return sf_reply_error(r, 503, "out of memory", "no room to copy the profile");
    bool growth_view = since != NULL;
    sort_sites(&c, growth_view ? 2 : allocated ? 1 : 0);
    uint64_t now = sf_now_ms();
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "rate", c.totals.rate);
    sf_json_u64(root, "rate_now", c.totals.rate_now);
    sf_json_str(root, "by", growth_view ? "growth" : allocated ? "allocated" : "live");
    sf_json_add(root, "totals", totals_json(&c.totals));
    cJSON *mark = cJSON_CreateObject();
    sf_json_bool(mark, "set", c.totals.mark_ms != 0);
    if (c.totals.mark_ms != 0) sf_json_u64(mark, "age_ms", now - c.totals.mark_ms);
    else sf_json_null(mark, "age_ms");
    sf_json_u64(mark, "marks", c.totals.marks);
    sf_json_add(root, "mark", mark);
    sf_json_u64(root, "history_interval_ms", HISTORY_MS);
    sf_lock(&history_lock);
    sf_json_add(root, "history_ages_ms", history_ages(now));
    sf_sym_begin();
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < c.nsites && i < limit; i++) {
        const sf_prof_site_t *s = &c.sites[i];
        if (!allocated && !growth_view && s->live_samples == 0) break; /* (sorted: the rest hold nothing) */
        cJSON *o = cJSON_CreateObject();
        sf_json_u64(o, "id", s->id);
        sf_json_u64(o, "live_bytes", s->live_bytes);
        add_objs(o, "live_objects", s->live_objs);
        sf_json_u64(o, "allocated_bytes", s->alloc_bytes);
        add_objs(o, "allocated_objects", s->alloc_objs);
        sf_json_u64(o, "samples", s->samples);
        sf_json_u64(o, "live_samples", s->live_samples);
        if (growth_view) {
            add_signed(o, "growth_bytes", growth(s));
            add_signed(o, "growth_objects", (int64_t)((double)(int64_t)(s->live_objs - s->mark_objs) / SF_PROF_OBJ_UNIT));
        }
        size_t first, n;
        sf_prof_site_frames(&c, s, &first, &n);
        cJSON *frames = cJSON_CreateArray();
        for (size_t f = first; f < first + n; f++) sf_json_add(frames, NULL, frame_json(c.frames[f]));
        sf_json_add(o, "frames", frames);
        sf_json_add(o, "history", site_history(s->id));
        sf_json_add(list, NULL, o);
    }
    sf_sym_end();
    sf_unlock(&history_lock);
    sf_json_add(root, "sites", list);
    sf_prof_copy_free(&c);
    sf_reply_json(r, 200, root, pretty);
}

/* A frame as one name: function, else module+offset, else the address. */
static cJSON *frame_name(uintptr_t a) {
    const sf_sym_t *s = sf_sym_lookup(a);
    char text[1200];
    size_t nmaps;
    const sf_mapping_t *maps = sf_sym_mappings(&nmaps);
    if (s->function) return sf_json_string_item(s->function);
    if (s->mapping != UINT32_MAX) {
        const char *base = strrchr(maps[s->mapping].path, '/');
        snprintf(text, sizeof text, "%s+0x%" PRIxPTR, base ? base + 1 : maps[s->mapping].path, s->module_offset);
    } else {
        snprintf(text, sizeof text, "0x%" PRIxPTR, a);
    }
    return sf_json_string_item(text); /* (a module's path need not be UTF-8) */
}

/* Every stack with its bytes, frames from the outermost (main) in: the
 * input of a flame graph (merge equal prefixes; width = bytes). */
void sf_ep_profile_stacks(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    bool pretty, allocated;
    if (!sf_query_pretty(q, r, &pretty) || !query_by(q, r, &allocated)) return;
    sf_prof_copy_t c;
    if (!sf_prof_copy_take(&c)) return sf_reply_error(r, 503, "out of memory", "no room to copy the profile");
    sort_sites(&c, allocated ? 1 : 0);
    cJSON *root = cJSON_CreateObject();
    sf_json_u64(root, "rate", c.totals.rate);
    sf_json_u64(root, "rate_now", c.totals.rate_now);
    sf_json_str(root, "by", allocated ? "allocated" : "live");
    sf_json_str(root, "unit", "bytes");
    uint64_t total = 0;
    sf_sym_begin();
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < c.nsites; i++) {
        const sf_prof_site_t *s = &c.sites[i];
        uint64_t v = allocated ? s->alloc_bytes : s->live_bytes;
        if (v == 0) continue;
        total += v;
        cJSON *o = cJSON_CreateObject();
        sf_json_u64(o, "site", s->id);
        sf_json_u64(o, "bytes", v);
        size_t first, n;
        sf_prof_site_frames(&c, s, &first, &n);
        cJSON *frames = cJSON_CreateArray();
        for (size_t f = first + n; f-- > first;) sf_json_add(frames, NULL, frame_name(c.frames[f]));
        sf_json_add(o, "frames", frames);
        sf_json_add(list, NULL, o);
    }
    sf_sym_end();
    sf_json_u64(root, "total_bytes", total);
    sf_json_add(root, "stacks", list);
    sf_prof_copy_free(&c);
    sf_reply_json(r, 200, root, pretty);
}

/* POST /profile/mark[?name=N]: one event on the timeline per mark, with its
 * name ("mark K" if none was given) and its number. */
void sf_ep_profile_mark(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)body, (void)len;
    char name[64];
    if (!sf_query_name(q, "name", name, sizeof name, r)) return;
    sf_prof_mark();
    sf_prof_totals_t t;
    sf_prof_totals(&t);
    if (name[0] == '\0') snprintf(name, sizeof name, "mark %" PRIu64, t.marks);
    sf_event_profile_mark(name, t.marks);
    cJSON *root = cJSON_CreateObject();
    sf_json_bool(root, "marked", true);
    sf_json_str(root, "name", name);
    sf_json_u64(root, "marks", t.marks);
    sf_json_u64(root, "sites", t.sites);
    sf_json_u64(root, "estimated_live_bytes", t.live_bytes);
    sf_reply_json(r, 200, root, true);
}

/* ---- pprof ----------------------------------------------------------------------- */

/* Takes c (frees it). */
static void encode_reply(sf_prof_copy_t *c, bool heap, int64_t duration_ns, sf_reply_t *r) {
    sf_sym_begin();
    size_t len = 0;
    unsigned char *gz = sf_pprof_encode(c, heap, duration_ns, &len);
    sf_sym_end();
    sf_prof_copy_free(c);
    if (gz == NULL) return sf_reply_error(r, 503, "out of memory", "no room to encode the profile");
    r->status = 200;
    r->type = "application/octet-stream";
    r->body = (char *)gz;
    r->len = len;
}

static void pprof_reply(sf_reply_t *r, bool heap) {
    sf_prof_copy_t c;
    if (!sf_prof_copy_take(&c)) return sf_reply_error(r, 503, "out of memory", "no room to copy the profile");
    encode_reply(&c, heap, 0, r);
}

/* ---- ?seconds=N: a delta, as Go's net/http/pprof serves it ---------------------------
 *
 * The profile when the request came, and N seconds later the profile then
 * less it, site by site: what was allocated meanwhile (alloc_*) and how
 * much more or less is live (inuse_*, negative where more was freed than
 * allocated), sites where nothing changed left out (pprof's merge drops
 * all-zero samples), the duration set.  server.c holds the connection
 * suspended in between, so the server answers other requests. */
struct sf_pprof_delta {
    sf_prof_copy_t before;
    uint64_t before_ns; /* CLOCK_REALTIME, as the profile's time */
    bool heap;
};

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int sf_pprof_seconds(const sf_query_t *q, sf_reply_t *r) {
    const char *text = query_text(q, "seconds");
    if (text == NULL) return 0;
    char *end;
    errno = 0;
    unsigned long v = text[0] >= '0' && text[0] <= '9' ? strtoul(text, &end, 10) : 0;
    if (v == 0 || *end != '\0' || errno != 0 || v > SF_PPROF_SECONDS_MAX) {
        char why[128];
        snprintf(why, sizeof why, "invalid value for \"seconds\": a whole number from 1 to %d",
                 SF_PPROF_SECONDS_MAX);
        sf_reply_error(r, 400, "bad request", why);
        return -1;
    }
    return (int)v;
}

sf_pprof_delta_t *sf_pprof_delta_begin(bool heap) {
    sf_pprof_delta_t *d = calloc(1, sizeof *d);
    if (d == NULL) return NULL;
    if (!sf_prof_copy_take(&d->before)) {
        free(d);
        return NULL;
    }
    d->before_ns = realtime_ns();
    d->heap = heap;
    return d;
}

static int by_id(const void *a, const void *b) {
    uint32_t x = ((const sf_prof_site_t *)a)->id, y = ((const sf_prof_site_t *)b)->id;
    return (x > y) - (x < y);
}

void sf_pprof_delta_reply(sf_pprof_delta_t *d, sf_reply_t *r) {
    sf_prof_copy_t now;
    if (!sf_prof_copy_take(&now)) return sf_reply_error(r, 503, "out of memory", "no room to copy the profile");
    int64_t duration = (int64_t)(realtime_ns() - d->before_ns);
    qsort(d->before.sites, d->before.nsites, sizeof *d->before.sites, by_id);
    size_t kept = 0;
    for (size_t i = 0; i < now.nsites; i++) {
        sf_prof_site_t s = now.sites[i];
        const sf_prof_site_t *b = bsearch(&s, d->before.sites, d->before.nsites, sizeof s, by_id);
        if (b != NULL) { /* (unsigned: a fall wraps, read back as negative) */
            s.alloc_bytes -= b->alloc_bytes;
            s.alloc_objs -= b->alloc_objs;
            s.live_bytes -= b->live_bytes;
            s.live_objs -= b->live_objs;
        }
        if (s.alloc_bytes != 0 || s.alloc_objs != 0 || s.live_bytes != 0 || s.live_objs != 0) now.sites[kept++] = s;
    }
    now.nsites = kept;
    encode_reply(&now, d->heap, duration > 0 ? duration : 1, r);
}

void sf_pprof_delta_free(sf_pprof_delta_t *d) {
    if (d == NULL) return;
    sf_prof_copy_free(&d->before);
    free(d);
}

void sf_ep_pprof_heap(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q, (void)body, (void)len;
    pprof_reply(r, true);
}

void sf_ep_pprof_allocs(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r) {
    (void)q, (void)body, (void)len;
    pprof_reply(r, false);
}

/* ---- profile.output ------------------------------------------------------------- */

static void on_sigusr2(int sig) {
    (void)sig;
    dump_requested = 1; /* the server's thread writes the file (sf_profile_tick) */
}

static void output_at_exit(void) { write_output(); }

/* With profile.output set, in the process `sefer run` started (not in its
 * children, which inherit the variables): the file at exit, and on SIGUSR2
 * while the introspection server runs (its thread writes it within
 * SF_PROFILE_TICK_MS; a signal handler may not allocate). */
void sf_profile_output_init(void) {
    char path[SF_KNOB_STR_MAX];
    if (sefer_config_get("profile.output", path, sizeof path) != 0 || path[0] == '\0') return;
    const char *pid = secure_getenv("SEFER_INTROSPECT_PID");
    if (pid != NULL && *pid != '\0' && strtol(pid, NULL, 10) != (long)getpid()) return;
    atexit(output_at_exit);
    __atomic_store_n(&sf_guard_abort_hook, dump_before_abort, __ATOMIC_RELEASE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr2;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    struct sigaction old;
    if (sigaction(SIGUSR2, NULL, &old) == 0 && old.sa_handler == SIG_DFL) sigaction(SIGUSR2, &sa, NULL);
}
