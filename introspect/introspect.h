/* introspect.h - the introspection server's internal interface.
 *
 * The server (docs/introspection.md) is split by concern:
 *
 *   mhd.c        loads libmicrohttpd with dlopen when a server starts
 *   cjson.c      loads cJSON the same way (cjson_calls.h routes the calls)
 *   listen.c     the introspect.listen syntax, loopback test, the socket
 *   loop.c       the server's thread: accepts, polls, drives the daemon;
 *                owns every descriptor of the server
 *   server.c     the daemon: limits, routing, methods, authentication
 *   endpoints.c  the JSON endpoints, built from snapshots (lib/snapshot.c)
 *   metrics.c    /metrics in the Prometheus text format
 *   history.c    tiers of samples in fixed memory (history.h; pure)
 *   sampler.c    the server's thread samples every figure into the history
 *   timeline.c   /history and /events (the event ring is lib/event.c)
 *   webui.c      the dashboard's files (/ and /ui/...), embedded at build
 *                time by webui/embed.py (docs/dashboard.md)
 *   json.c       cJSON helpers (exact 64-bit integers) and a text buffer
 *   autostart.c  start from a constructor when introspect.enabled is set
 *
 * Endpoints know nothing of HTTP: they read a parsed query (and body) and
 * fill an sf_reply_t; server.c is the only user of libmicrohttpd. */
#ifndef SEFER_INTROSPECT_H
#define SEFER_INTROSPECT_H

#include "history.h"
#include "snapshot.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* ---- mhd.c ---------------------------------------------------------------- */
/* The libmicrohttpd functions the server calls, resolved with dlsym.
 * libmicrohttpd brings GnuTLS and eight more libraries with it; loading it
 * only when a server starts keeps a preloaded libsefer.so light. */
typedef struct {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_create_response_from_buffer_with_free_callback) *response_from_buffer;
    __typeof__(MHD_add_response_header) *add_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
    __typeof__(MHD_lookup_connection_value) *lookup_value;
    __typeof__(MHD_get_connection_values) *get_values;
    __typeof__(MHD_get_connection_info) *connection_info;
    __typeof__(MHD_add_connection) *add_connection;
    __typeof__(MHD_run) *run;
    __typeof__(MHD_get_timeout) *get_timeout;
    __typeof__(MHD_get_daemon_info) *daemon_info;
    __typeof__(MHD_suspend_connection) *suspend;
    __typeof__(MHD_resume_connection) *resume;
} sf_mhd_t;
/* NULL (with the reason in why) if the library cannot be loaded.  Called
 * with server.c's srv_lock held, like sf_cjson_load: that lock, which the
 * fork handlers hold across fork(), is the only one. */
SF_HIDDEN const sf_mhd_t *sf_mhd_load(char *why, size_t whylen);

/* ---- cjson.c ---------------------------------------------------------------- */
/* The cJSON functions the server calls, resolved with dlsym from
 * libcjson.so.1 when a server starts (so that a preloaded libsefer.so does
 * not need the library: ld.so would refuse the preload without it).  The
 * sources that build JSON include cjson_calls.h, which routes each cJSON_*
 * call through this table. */
#define SF_CJSON_FUNCS(X)                                                                          \
    X(cJSON_CreateObject) X(cJSON_CreateArray) X(cJSON_CreateRaw) X(cJSON_CreateString)           \
    X(cJSON_CreateBool) X(cJSON_CreateNull) X(cJSON_AddItemToArray) X(cJSON_AddItemToObjectCS)    \
    X(cJSON_Delete) X(cJSON_Print) X(cJSON_PrintUnformatted) X(cJSON_ParseWithLength)             \
    X(cJSON_GetObjectItemCaseSensitive) X(cJSON_IsArray) X(cJSON_IsBool) X(cJSON_IsNumber)         \
    X(cJSON_IsObject) X(cJSON_IsString) X(cJSON_IsTrue)
typedef struct {
#define SF_CJSON_SLOT_(f) __typeof__(f) *f;
    SF_CJSON_FUNCS(SF_CJSON_SLOT_)
#undef SF_CJSON_SLOT_
} sf_cjson_t;
SF_HIDDEN extern sf_cjson_t sf_cjson;
/* False (with the reason in why) if libcjson.so.1 cannot be loaded. */
SF_HIDDEN bool sf_cjson_load(char *why, size_t whylen);

/* ---- listen.c ------------------------------------------------------------- */
#define SF_LISTEN_DEFAULT "127.0.0.1:9090"
#define SF_LISTEN_TRIES 64 /* ports tried by "HOST:PORT+" */
typedef struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int port;       /* asked for (0: any); after sf_listen_open: bound */
    bool next_free; /* "HOST:PORT+": PORT or the next free port after it */
    bool any_port;  /* PORT 0: the kernel picks */
    bool loopback;  /* the address is 127.0.0.0/8 or ::1 */
    char host[64];  /* as written (IPv6 without brackets) */
} sf_listen_t;
SF_HIDDEN bool sf_listen_parse(const char *text, sf_listen_t *out, char *why, size_t whylen);
/* A listening socket (non-blocking, close-on-exec) or -1 (reason in why,
 * errno EADDRINUSE when the port, or every port tried, is taken). */
SF_HIDDEN int sf_listen_open(sf_listen_t *l, char *why, size_t whylen);
SF_HIDDEN bool sf_addr_is_loopback(const struct sockaddr *sa);
/* "http://127.0.0.1:9090/" or "http://[::1]:9090/" */
SF_HIDDEN void sf_listen_url(const sf_listen_t *l, char *buf, size_t len);

/* ---- loop.c ------------------------------------------------------------------ */
#define SF_CONN_MAX 64     /* connections open at once */
#define SF_CONN_PER_PEER 8 /* from one address, on a listener that is not loopback */
/* Makes the daemon (external polling, epoll, no listening socket); cls goes
 * to sf_loop_on_connection (MHD_OPTION_NOTIFY_CONNECTION). */
typedef struct MHD_Daemon *sf_daemon_fn(void *cls);
/* Starts the server's thread on listening socket fd (taken over, closed on
 * failure); port points at the bound port, which the thread zeroes if it
 * loses its descriptors.  0, or -1 with errno and the reason in why.  The
 * caller serialises start, stop and the fork handler (srv_lock). */
SF_HIDDEN int sf_loop_start(const sf_mhd_t *mhd, int fd, bool per_peer, _Atomic int *port,
                            sf_daemon_fn *create, char *why, size_t whylen);
/* Ends the thread (waits a bounded time) and the daemon, closing only
 * descriptors that are still the server's. */
SF_HIDDEN void sf_loop_stop(void);
/* The thread ended because its descriptors were closed or replaced. */
SF_HIDDEN bool sf_loop_lost(void);
/* fork(): late_lock across it (prepare, then parent or after_fork_child,
 * which also closes the child's copies of every server's descriptors). */
SF_HIDDEN void sf_loop_fork_prepare(void);
SF_HIDDEN void sf_loop_fork_parent(void);
SF_HIDDEN void sf_loop_after_fork_child(void);
SF_HIDDEN void sf_loop_on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                                     enum MHD_ConnectionNotificationCode toe);

/* ---- json.c ----------------------------------------------------------------- */
/* cJSON keeps numbers as doubles, exact only up to 2^53: 64-bit counts are
 * added as raw decimal text.  Keys must be string literals (not copied).
 * An item that could not be made or added (out of memory) is remembered for
 * this thread, and the next sf_reply_json answers 503 instead of a reply
 * with fields missing. */
SF_HIDDEN void sf_json_u64(cJSON *obj, const char *key, uint64_t v);
SF_HIDDEN cJSON *sf_json_u64_item(uint64_t v);
SF_HIDDEN cJSON *sf_json_string_item(const char *s);
SF_HIDDEN void sf_json_str(cJSON *obj, const char *key, const char *s);
SF_HIDDEN void sf_json_bool(cJSON *obj, const char *key, bool v);
SF_HIDDEN void sf_json_null(cJSON *obj, const char *key);
SF_HIDDEN void sf_json_hex(cJSON *obj, const char *key, uintptr_t v);
SF_HIDDEN void sf_json_double(cJSON *obj, const char *key, double v);
SF_HIDDEN void sf_json_add(cJSON *obj, const char *key, cJSON *item);

/* A growing text buffer (malloc); on allocation failure it stops growing and
 * remembers it (failed), so callers check once at the end. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool failed;
} sf_text_t;
SF_HIDDEN void sf_text_add(sf_text_t *t, const char *s);
SF_HIDDEN void sf_text_addf(sf_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- endpoints.c / metrics.c ---------------------------------------------- */
#define SF_QUERY_MAX 8
typedef struct {
    const char *key[SF_QUERY_MAX], *value[SF_QUERY_MAX]; /* value NULL: "?key" */
    unsigned count;
    bool too_many;
} sf_query_t;

typedef struct {
    unsigned status;
    const char *type; /* Content-Type */
    char *body;       /* malloc; NULL: out of memory (the server answers 503) */
    size_t len;
    /* set by webui.c only: */
    bool static_body; /* body is constant data, never freed (len 0 and NULL: no body) */
    const char *etag; /* ETag, or NULL */
    bool page;        /* Cache-Control: no-cache and the page's security headers,
                         not no-store */
} sf_reply_t;

typedef void sf_endpoint_fn(const sf_query_t *q, const char *body, size_t len, sf_reply_t *r);
SF_HIDDEN sf_endpoint_fn sf_ep_segments, sf_ep_heaps, sf_ep_rings, sf_ep_stats, sf_ep_config,
    sf_ep_healthz, sf_ep_metrics, sf_ep_config_set, sf_ep_trim, sf_ep_history, sf_ep_events, sf_ep_phases;
/* A knob value as /config gives it: integers (durations in ms), booleans,
 * enum choices and strings as strings. */
SF_HIDDEN cJSON *sf_knob_json_value(const struct sf_knob_def *d, uint64_t v, const char *text);
/* the heap profile (profile_views.c, pprof.c) */
SF_HIDDEN sf_endpoint_fn sf_ep_profile_sites, sf_ep_profile_stacks, sf_ep_profile_mark, sf_ep_pprof_heap,
    sf_ep_pprof_allocs;
#define SF_PROFILE_TICK_MS 1000 /* the server's thread calls sf_profile_tick at least this often */
/* ?seconds=N on /debug/pprof/heap and /allocs (profile_views.c; server.c
 * holds the connection in between) */
#define SF_PPROF_SECONDS_MAX 3600
#define SF_PPROF_DELTAS_MAX 4 /* waiting at once; more are answered 503 */
typedef struct sf_pprof_delta sf_pprof_delta_t;
/* N, 0 without the parameter, -1 after filling r with a 400 */
SF_HIDDEN int sf_pprof_seconds(const sf_query_t *q, sf_reply_t *r);
/* The profile now, kept for the delta (NULL: out of memory). */
SF_HIDDEN sf_pprof_delta_t *sf_pprof_delta_begin(bool heap);
/* The profile now less the one begin kept, as the pprof reply. */
SF_HIDDEN void sf_pprof_delta_reply(sf_pprof_delta_t *d, sf_reply_t *r);
SF_HIDDEN void sf_pprof_delta_free(sf_pprof_delta_t *d);
/* server.c, for the server's thread: resumes the requests whose delta is
 * due, and with `stopping` every one of that daemon's (libmicrohttpd must
 * not be stopped with a connection suspended); with `forget` as well, drops
 * that daemon's without touching it (a daemon loop.c forgets, whose
 * descriptors may no longer be its own); ms until the next is due, -1 for
 * none */
SF_HIDDEN void sf_delta_tick(uint64_t now_ms, struct MHD_Daemon *stopping, bool forget);
SF_HIDDEN uint64_t sf_mono_ms(void); /* CLOCK_MONOTONIC in ms (loop.c) */
SF_HIDDEN int sf_delta_due_ms(uint64_t now_ms);
SF_HIDDEN void sf_profile_tick(void);
SF_HIDDEN void sf_profile_views_after_fork_child(void);
/* profile.output: the file written at exit and on SIGUSR2 (autostart.c) */
SF_HIDDEN void sf_profile_output_init(void);

/* Replies: JSON (takes and deletes root), an error object, plain text. */
SF_HIDDEN void sf_reply_json(sf_reply_t *r, unsigned status, cJSON *root, bool pretty);
SF_HIDDEN void sf_reply_error(sf_reply_t *r, unsigned status, const char *error, const char *reason);
SF_HIDDEN void sf_reply_text(sf_reply_t *r, unsigned status, const char *type, sf_text_t *t);
/* Query parameters: false after filling r with a 400 reply. */
SF_HIDDEN bool sf_query_u64(const sf_query_t *q, const char *key, uint64_t dflt, uint64_t max,
                            uint64_t *out, sf_reply_t *r);
SF_HIDDEN bool sf_query_pretty(const sf_query_t *q, sf_reply_t *r, bool *pretty);
/* A text parameter (a name): absent leaves out empty; else 1 to size-1
 * printable ASCII characters, or false with a 400 reply. */
SF_HIDDEN bool sf_query_name(const sf_query_t *q, const char *key, char *out, size_t size, sf_reply_t *r);

/* ---- sampler.c: the history of the figures (/history) ---------------------- */
/* Maps the history's memory (the first time; a later server appends to the
 * same history) and makes the next tick sample at once.  Called by the
 * server's start before its thread exists. */
SF_HIDDEN void sf_sampler_prepare(void);
/* Milliseconds (CLOCK_MONOTONIC) until the next sample is due, -1 if never;
 * the server's thread sleeps no longer, then calls tick. */
SF_HIDDEN int sf_sampler_due_ms(uint64_t now_ms);
SF_HIDDEN void sf_sampler_tick(uint64_t now_ms);
SF_HIDDEN const char *const *sf_sampler_fields(unsigned *count);
typedef struct {
    uint64_t interval_ms;
    size_t bytes;    /* memory of the history, 0 if there is none */
    const char *why; /* why there is none */
    uint64_t last_ns, max_ns, mean_ns; /* what a sample took */
} sf_sampler_info_t;
/* The history, held still until sf_sampler_unlock (NULL if there is none). */
SF_HIDDEN const sf_history_t *sf_sampler_lock(sf_sampler_info_t *info);
SF_HIDDEN void sf_sampler_unlock(void);
SF_HIDDEN void sf_sampler_after_fork_child(void);

/* ---- webui.c and the generated webui_assets.c (webui/embed.py) ------------ */
typedef struct {
    const char *path; /* "/" or "/ui/NAME" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
    const char *etag; /* quoted hash of the bytes */
} sf_webui_file_t;
SF_HIDDEN const sf_webui_file_t *sf_webui_find(const char *path);
/* The page's CSP style-src: 'self' and the hash of the one stylesheet the
 * flame-graph library injects (webui/embed.py --style-hash says why). */
SF_HIDDEN extern const char sf_webui_style_src[];
/* Whether path is the dashboard's: "/" or under "/ui/". */
SF_HIDDEN bool sf_webui_path(const char *path);
/* The file at path (GET or HEAD): 200, 304 when if_none_match names its
 * ETag, or 404. */
SF_HIDDEN void sf_webui_reply(const char *path, const char *if_none_match, sf_reply_t *r);

/* ---- server.c: figures about the server itself ---------------------------- */
typedef struct {
    _Atomic uint64_t requests, auth_failures, connections_open;
} sf_introspect_counters_t;
SF_HIDDEN extern sf_introspect_counters_t sf_introspect_counters;
/* Start with stderr reports (autostart); the public start reports nothing. */
SF_HIDDEN int sf_introspect_start_reporting(const char *listen);

#endif /* SEFER_INTROSPECT_H */
