/* server.c - the introspection HTTP server: a guest in someone else's
 * process (docs/introspection.md).
 *
 * One libmicrohttpd daemon answers every request, driven by one thread of
 * ours (loop.c: it accepts, polls and runs the daemon, and owns every file
 * descriptor of the server); the thread blocks all asynchronous signals (the
 * host's signal handling must not change because we are here) and allocates
 * through sefer like any other thread.  Limits: SF_CONN_MAX connections at
 * once (more wait in the listen backlog), SF_CONN_PER_PEER per peer address
 * on a listener that is not loopback, introspect.idle_timeout of silence
 * (5 s by default) closes a connection,
 * CONNECTION_MEMORY bytes per connection for the request line and headers
 * (libmicrohttpd answers 414 or 431 past it), BODY_MAX bytes of POST body
 * (413 past it).  Methods: GET and HEAD on the read endpoints, POST on the
 * write endpoints, 405 otherwise; unknown paths (a path is compared whole:
 * %00 is never decoded) 404; unknown, repeated or malformed query
 * parameters 400.
 *
 * Security: read-only unless introspect.token is set.  The write endpoints
 * (POST /config, POST /trim) answer 403 without a configured token and 401
 * (counted) without the right "Authorization: Bearer TOKEN"; tokens are
 * compared in constant time.  A non-loopback listen address needs a token,
 * and on such a listener every request from a non-loopback peer needs it
 * too, except /healthz and the dashboard's static files (/ and /ui/...,
 * introspect/webui.c), which hold nothing about the process.  Against DNS
 * rebinding (a web page whose host name resolves to 127.0.0.1), a request
 * without the token must name this server in its Host header (421
 * otherwise; host_allowed).
 *
 * Life in the process: the first start installs a pthread_atfork handler
 * (the lock is held across fork(); a child forgets the server and closes its
 * copies of the descriptors) and an atexit handler that stops the server
 * before the libraries it uses are torn down.  Both are installed here, not
 * in autostart.c, so that a program linked with libsefer.a, where the linker
 * leaves autostart.o out, gets them too. */
#include "introspect.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#define CONNECTION_MEMORY (32u << 10)
#define BODY_MAX 4096

sf_introspect_counters_t sf_introspect_counters;

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static bool serving; /* loop.c runs a server */
static const sf_mhd_t *mhd;
static _Atomic int bound_port;
static bool listen_loopback;
static char listen_host[72]; /* as a Host header names it: "127.0.0.1", "[::1]" */
static char token[SF_KNOB_STR_MAX];
static size_t token_len;
static bool forked_with_server; /* this process is a fork() child of a serving one */
static __thread char last_error[320];

struct route {
    const char *path, *method;
    sf_endpoint_fn *fn;
    const char *params; /* query parameters it takes, space-separated */
    bool write;
};

static const struct route routes[] = {
    {"/healthz", "GET", sf_ep_healthz, "", false},
    {"/stats", "GET", sf_ep_stats, "pretty", false},
    {"/segments", "GET", sf_ep_segments, "limit offset pretty", false},
    {"/heaps", "GET", sf_ep_heaps, "limit offset pretty", false},
    {"/rings", "GET", sf_ep_rings, "limit offset pretty", false},
    {"/config", "GET", sf_ep_config, "pretty", false},
    {"/config", "POST", sf_ep_config_set, "", true},
    {"/metrics", "GET", sf_ep_metrics, "", false},
    {"/history", "GET", sf_ep_history, "since fields", false},
    {"/events", "GET", sf_ep_events, "since after pretty", false},
    {"/phases", "GET", sf_ep_phases, "pretty", false},
    {"/trim", "POST", sf_ep_trim, "", true},
    {"/profile/sites", "GET", sf_ep_profile_sites, "by limit since pretty", false},
    {"/profile/stacks", "GET", sf_ep_profile_stacks, "by pretty", false},
    {"/profile/mark", "POST", sf_ep_profile_mark, "name", true},
    {"/debug/pprof/heap", "GET", sf_ep_pprof_heap, "gc seconds", false},
    {"/debug/pprof/allocs", "GET", sf_ep_pprof_allocs, "gc seconds", false},
};
#define ROUTES (sizeof routes / sizeof *routes)

/* What a request keeps across calls of the access handler: the body of a
 * POST, gathered; or a pprof delta (?seconds=N) waiting, its connection
 * suspended. */
struct post {
    const struct route *route;
    sf_query_t query; /* checked in begin(); its strings live as long as the connection */
    size_t len;
    bool too_big;
    sf_pprof_delta_t *delta; /* the profile when the request came */
    struct MHD_Connection *conn;
    struct MHD_Daemon *daemon;
    uint64_t due_ms;     /* CLOCK_MONOTONIC */
    bool waiting;        /* in `deltas`, suspended */
    const char *cut;     /* resumed before it was due: why (503) */
    char body[BODY_MAX + 1];
};

/* ---- replies ---------------------------------------------------------------------- */

/* Headers of the dashboard's files (introspect/webui.c): scripts, styles and
 * fetches from this server only, no inline script, no inline style but the
 * flame-graph library's one stylesheet, allowed by its hash
 * (sf_webui_style_src, written by webui/embed.py), no framing. */
#define PAGE_CSP_BEFORE_STYLE "default-src 'none'; script-src 'self'; style-src "
#define PAGE_CSP_AFTER_STYLE \
    "; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static struct MHD_Response *make_response(sf_reply_t *r) {
    static char oom[] = "{\"error\": \"out of memory\", \"status\": 503}\n";
    static char empty[] = "";
    if (r->static_body) /* constant data: no free callback */
        return mhd->response_from_buffer(r->len, r->body ? r->body : empty, NULL);
    if (r->body == NULL) {
        r->status = 503;
        r->type = "application/json";
        return mhd->response_from_buffer(sizeof oom - 1, oom, NULL);
    }
    struct MHD_Response *resp = mhd->response_from_buffer(r->len, r->body, free);
    if (resp == NULL) free(r->body);
    return resp;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, sf_reply_t *r, const char *allow,
                                  bool challenge) {
    struct MHD_Response *resp = make_response(r);
    if (resp == NULL) return MHD_NO;
    mhd->add_header(resp, "Content-Type", r->type);
    mhd->add_header(resp, "Cache-Control", r->page ? "no-cache" : "no-store");
    mhd->add_header(resp, "X-Content-Type-Options", "nosniff");
    if (r->etag != NULL) mhd->add_header(resp, "ETag", r->etag);
    if (r->page) {
        char csp[512];
        snprintf(csp, sizeof csp, "%s%s%s", PAGE_CSP_BEFORE_STYLE, sf_webui_style_src, PAGE_CSP_AFTER_STYLE);
        mhd->add_header(resp, "Content-Security-Policy", csp);
        mhd->add_header(resp, "Referrer-Policy", "no-referrer");
        mhd->add_header(resp, "X-Frame-Options", "DENY");
    }
    if (allow != NULL) mhd->add_header(resp, "Allow", allow);
    if (challenge) mhd->add_header(resp, "WWW-Authenticate", "Bearer realm=\"sefer\"");
    enum MHD_Result ret = mhd->queue_response(c, r->status, resp);
    mhd->destroy_response(resp);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *error,
                                  const char *reason, const char *allow, bool challenge) {
    sf_reply_t r = {0};
    sf_reply_error(&r, status, error, reason);
    return send_reply(c, &r, allow, challenge);
}

/* ---- authentication ------------------------------------------------------------- */

/* Equal in time that depends only on the configured token's length. */
static bool same_token(const char *given, size_t given_len) {
    unsigned char diff = given_len != token_len;
    for (size_t i = 0; i < token_len; i++)
        diff |= (unsigned char)((i < given_len ? given[i] : 0) ^ token[i]);
    return diff == 0;
}

/* "Authorization: Bearer TOKEN" as RFC 7235 writes credentials: the scheme
 * in any case, one or more spaces or tabs, the token; whitespace after it
 * is not part of it. */
static bool bearer_ok(struct MHD_Connection *c) {
    const char *h = mhd->lookup_value(c, MHD_HEADER_KIND, "Authorization");
    if (h == NULL || token_len == 0 || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return same_token(h, n);
}

/* Whether a Host header names this server: 127.0.0.1, localhost, [::1] or
 * the listen address as configured, with this server's port or none.  A
 * page served from another name (DNS rebinding: evil.example resolving to
 * 127.0.0.1) sends that name, and a page on another local port (which the
 * browser's same-origin rule already keeps from reading the reply) sends
 * its own port. */
static bool host_is_ours(const char *h) {
    size_t n = h[0] == '[' ? strcspn(h, "]") + (strchr(h, ']') != NULL) : strcspn(h, ":");
    const char *port = h + n;
    if (*port != '\0') {
        char *end;
        unsigned long p = *port == ':' && port[1] >= '0' && port[1] <= '9' ? strtoul(port + 1, &end, 10) : 0;
        if (p == 0 || *end != '\0' || p != (unsigned long)atomic_load(&bound_port)) return false;
    }
    static const char *const names[] = {"127.0.0.1", "localhost", "[::1]"};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == n && strncasecmp(h, names[i], n) == 0) return true;
    return strlen(listen_host) == n && strncasecmp(h, listen_host, n) == 0;
}

/* A request without the token must carry a Host header that names this
 * server (none at all only in HTTP/1.0, which a browser never speaks):
 * false after queueing 421 (or 400 for an HTTP/1.1 request without one). */
static bool host_allowed(struct MHD_Connection *c, const char *version, enum MHD_Result *ret) {
    const char *h = mhd->lookup_value(c, MHD_HEADER_KIND, "Host");
    if (h == NULL && strcmp(version, "HTTP/1.0") == 0) return true;
    if (h != NULL && host_is_ours(h)) return true;
    if (bearer_ok(c)) return true;
    if (h == NULL) {
        *ret = send_error(c, 400, "bad request", "an HTTP/1.1 request needs a Host header", NULL, false);
        return false;
    }
    *ret = send_error(c, 421, "misdirected request",
                      "the Host header does not name this server (127.0.0.1, localhost, [::1] or "
                      "the listen address, with its port); send the token to use another name",
                      NULL, false);
    return false;
}

static bool peer_is_loopback(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = mhd->connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info != NULL && info->client_addr != NULL && sf_addr_is_loopback(info->client_addr);
}

static enum MHD_Result refuse_auth(struct MHD_Connection *c, const char *reason) {
    atomic_fetch_add(&sf_introspect_counters.auth_failures, 1);
    return send_error(c, 401, "unauthorized", reason, NULL, true);
}

/* NULL if the request may go on, else the reply already queued. */
static bool authorize(struct MHD_Connection *c, const struct route *rt, enum MHD_Result *ret) {
    if (rt->write && token_len == 0) {
        *ret = send_error(c, 403, "forbidden",
                          "writes are disabled: introspect.token is not set in this process", NULL, false);
        return false;
    }
    bool need = rt->write || (!listen_loopback && rt->fn != sf_ep_healthz && !peer_is_loopback(c));
    if (need && !bearer_ok(c)) {
        *ret = refuse_auth(c, "this request needs \"Authorization: Bearer TOKEN\" with introspect.token");
        return false;
    }
    return true;
}

/* ---- routing ----------------------------------------------------------------------- */

static bool has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, word, n) == 0) return true;
        p += len + (end != NULL);
    }
    return false;
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    sf_query_t *q = cls;
    if (q->count == SF_QUERY_MAX) {
        q->too_many = true;
        return MHD_NO;
    }
    q->key[q->count] = key;
    q->value[q->count++] = value;
    return MHD_YES;
}

/* Whether the key of parameter i came before it. */
static bool repeated(const sf_query_t *q, unsigned i) {
    for (unsigned k = 0; k < i; k++)
        if (strcmp(q->key[k], q->key[i]) == 0) return true;
    return false;
}

/* Collects and checks the query; false after queueing a 400. */
static bool read_query(struct MHD_Connection *c, const struct route *rt, sf_query_t *q,
                       enum MHD_Result *ret) {
    memset(q, 0, sizeof *q);
    mhd->get_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, q);
    char why[200];
    if (q->too_many) {
        snprintf(why, sizeof why, "more than %d query parameters", SF_QUERY_MAX);
    } else {
        unsigned i = 0, j = 0;
        while (i < q->count && has_word(rt->params, q->key[i])) i++;
        while (i == q->count && j < q->count && !repeated(q, j)) j++;
        if (i == q->count && j == q->count) return true;
        if (i < q->count)
            snprintf(why, sizeof why, "unknown query parameter \"%.40s\" (%s takes: %s)", q->key[i],
                     rt->path, *rt->params ? rt->params : "none");
        else
            snprintf(why, sizeof why, "query parameter \"%.40s\" given more than once", q->key[j]);
    }
    *ret = send_error(c, 400, "bad request", why, NULL, false);
    return false;
}

/* The route for path and method; NULL with *path_known telling 404 from 405. */
static const struct route *find_route(const char *path, const char *method, bool *path_known, char *allow,
                                      size_t allow_len) {
    const struct route *found = NULL;
    bool head = strcmp(method, "HEAD") == 0;
    *path_known = false;
    allow[0] = '\0';
    for (size_t i = 0; i < ROUTES; i++) {
        if (strcmp(routes[i].path, path) != 0) continue;
        *path_known = true;
        bool get = strcmp(routes[i].method, "GET") == 0;
        size_t n = strlen(allow);
        snprintf(allow + n, allow_len - n, "%s%s", n ? ", " : "", get ? "GET, HEAD" : routes[i].method);
        if (strcmp(routes[i].method, method) == 0 || (head && get)) found = &routes[i];
    }
    return found;
}

/* ---- pprof deltas: requests held for N seconds --------------------------------------
 *
 * /debug/pprof/heap?seconds=N (and /allocs) answers with what changed over
 * the next N seconds (profile_views.c).  The connection is suspended
 * meanwhile (libmicrohttpd's flow control), so the server goes on answering
 * others; the server's thread resumes it when it is due (sf_delta_tick,
 * loop.c) and the access handler then replies.  At most
 * SF_PPROF_DELTAS_MAX wait at once: each holds a connection and a copy of
 * the profile. */
static pthread_mutex_t deltas_lock = PTHREAD_MUTEX_INITIALIZER;
static struct post *deltas[SF_PPROF_DELTAS_MAX];

static bool is_pprof(const struct route *rt) { return rt->fn == sf_ep_pprof_heap || rt->fn == sf_ep_pprof_allocs; }

static enum MHD_Result delta_begin(struct MHD_Connection *c, const struct route *rt, const sf_query_t *q,
                                   unsigned seconds, void **req_cls) {
    struct post *p = calloc(1, sizeof *p);
    if (p == NULL) return MHD_NO;
    p->route = rt;
    p->query = *q;
    p->conn = c;
    const union MHD_ConnectionInfo *info = mhd->connection_info(c, MHD_CONNECTION_INFO_DAEMON);
    p->daemon = info != NULL ? info->daemon : NULL;
    if (p->daemon == NULL) /* (a stop could not find it to resume it: refused) */
        return send_error(c, 503, "unavailable", "no profile with \"seconds\" now", NULL, false);
    p->due_ms = sf_mono_ms() + (uint64_t)seconds * 1000u;
    *req_cls = p; /* (on_completed frees it, whatever happens) */
    sf_lock(&deltas_lock);
    unsigned i = 0;
    while (i < SF_PPROF_DELTAS_MAX && deltas[i] != NULL) i++;
    if (i == SF_PPROF_DELTAS_MAX) {
        sf_unlock(&deltas_lock);
        char why[96];
        snprintf(why, sizeof why, "%d profiles with \"seconds\" are already being taken; try later",
                 SF_PPROF_DELTAS_MAX);
        return send_error(c, 503, "busy", why, NULL, false);
    }
    p->delta = sf_pprof_delta_begin(rt->fn == sf_ep_pprof_heap);
    if (p->delta == NULL) {
        sf_unlock(&deltas_lock);
        return send_error(c, 503, "out of memory", "no room to copy the profile", NULL, false);
    }
    deltas[i] = p;
    p->waiting = true;
    mhd->suspend(c);
    sf_unlock(&deltas_lock);
    return MHD_YES;
}

/* The access handler's call after the resume. */
static enum MHD_Result delta_end(struct MHD_Connection *c, struct post *p) {
    sf_reply_t r = {0};
    if (p->cut != NULL) sf_reply_error(&r, 503, "cut short", p->cut);
    else sf_pprof_delta_reply(p->delta, &r);
    return send_reply(c, &r, NULL, false);
}

static void delta_forget(struct post *p) {
    sf_lock(&deltas_lock);
    for (unsigned i = 0; i < SF_PPROF_DELTAS_MAX; i++)
        if (deltas[i] == p) deltas[i] = NULL;
    sf_unlock(&deltas_lock);
}

/* The peer of a suspended connection shut its side down or went away (a
 * client that gave up): libmicrohttpd does not watch a suspended
 * connection, and the slot would stay taken until the delta was due. */
static bool peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = mhd->connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == NULL) return false;
    struct pollfd p = {info->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void sf_delta_tick(uint64_t now_ms, struct MHD_Daemon *stopping, bool forget) {
    sf_lock(&deltas_lock);
    for (unsigned i = 0; i < SF_PPROF_DELTAS_MAX; i++) {
        struct post *p = deltas[i];
        if (p == NULL || !p->waiting) continue;
        if (forget && p->daemon == stopping) { /* (its struct goes with the daemon's connection: leaked) */
            deltas[i] = NULL;
            continue;
        }
        if (p->due_ms > now_ms) {
            if (stopping != NULL && p->daemon == stopping) /* (the stop closes it: no answer) */
                p->cut = "the introspection server stopped before the profile was due";
            else if (peer_gone(p->conn))
                p->cut = "the client closed its side before the profile was due";
            else
                continue;
        }
        p->waiting = false;
        deltas[i] = NULL;
        mhd->resume(p->conn);
    }
    sf_unlock(&deltas_lock);
}

int sf_delta_due_ms(uint64_t now_ms) {
    long long next = -1;
    sf_lock(&deltas_lock);
    for (unsigned i = 0; i < SF_PPROF_DELTAS_MAX; i++)
        if (deltas[i] != NULL && deltas[i]->waiting) {
            long long left = deltas[i]->due_ms > now_ms ? (long long)(deltas[i]->due_ms - now_ms) : 0;
            if (next < 0 || left < next) next = left;
        }
    sf_unlock(&deltas_lock);
    return (int)next;
}

static enum MHD_Result run(struct MHD_Connection *c, const struct route *rt, const sf_query_t *q,
                           const char *body, size_t len) {
    sf_reply_t r = {0};
    rt->fn(q, body, len, &r);
    return send_reply(c, &r, NULL, false);
}

/* GET or HEAD of the dashboard's files (introspect/webui.c): no token (they
 * hold nothing about the process), the query string ignored. */
static enum MHD_Result serve_file(struct MHD_Connection *c, const char *url, const char *method) {
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_error(c, 405, "method not allowed", "the dashboard's files take GET, HEAD", "GET, HEAD",
                          false);
    sf_reply_t r = {0};
    sf_webui_reply(url, mhd->lookup_value(c, MHD_HEADER_KIND, "If-None-Match"), &r);
    return send_reply(c, &r, NULL, false);
}

/* First call for a request: everything but a POST body is known. */
static enum MHD_Result begin(struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, void **req_cls) {
    atomic_fetch_add(&sf_introspect_counters.requests, 1);
    if (sf_webui_path(url)) return serve_file(c, url, method);
    bool known;
    char allow[64];
    const struct route *rt = find_route(url, method, &known, allow, sizeof allow);
    if (rt == NULL && !known) return send_error(c, 404, "not found", "no such endpoint", NULL, false);
    if (rt == NULL) {
        char why[96];
        snprintf(why, sizeof why, "%s takes %s", url, allow);
        return send_error(c, 405, "method not allowed", why, allow, false);
    }
    enum MHD_Result ret;
    sf_query_t q;
    if (rt->fn != sf_ep_healthz && !host_allowed(c, version, &ret)) return ret;
    if (!authorize(c, rt, &ret) || !read_query(c, rt, &q, &ret)) return ret;
    if (is_pprof(rt)) {
        sf_reply_t r = {0};
        int seconds = sf_pprof_seconds(&q, &r);
        if (seconds < 0) return send_reply(c, &r, NULL, false);
        if (seconds > 0) return delta_begin(c, rt, &q, (unsigned)seconds, req_cls);
    }
    if (!rt->write) return run(c, rt, &q, NULL, 0);
    const char *cl = mhd->lookup_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl != NULL && (strlen(cl) > 9 || strtoul(cl, NULL, 10) > BODY_MAX))
        return send_error(c, 413, "content too large", "request bodies are limited to 4096 bytes", NULL, false);
    struct post *p = calloc(1, sizeof *p);
    if (p == NULL) return MHD_NO;
    p->route = rt;
    p->query = q;
    *req_cls = p;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size,
                                  void **req_cls) {
    (void)cls;
    struct post *p = *req_cls;
    if (p == NULL) return begin(c, url, method, version, req_cls);
    if (p->delta != NULL) return delta_end(c, p);
    if (*upload_size > 0) { /* more of the body */
        if (p->len + *upload_size > BODY_MAX) p->too_big = true;
        else memcpy(p->body + p->len, upload, *upload_size);
        if (!p->too_big) p->len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    if (p->too_big)
        return send_error(c, 413, "content too large", "request bodies are limited to 4096 bytes", NULL, false);
    return run(c, p->route, &p->query, p->body, p->len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    struct post *p = *req_cls;
    if (p != NULL && p->delta != NULL) {
        delta_forget(p); /* (no longer there, unless the daemon closed it suspended) */
        sf_pprof_delta_free(p->delta);
    }
    free(p);
    *req_cls = NULL;
}

/* MHD_OPTION_UNESCAPE_CALLBACK, for the path and the query: %XX decoded in
 * place, except %00, which stays as it is written.  A decoded NUL would end
 * the C string libmicrohttpd hands us early, and "/stats%00x" would pass
 * for "/stats". */
static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_digit(r[1]) : -1, lo = hi >= 0 ? hex_digit(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* ---- start and stop ------------------------------------------------------------------ */

static int fail(int err, char *why, const char *msg) {
    snprintf(why, sizeof last_error, "%s", msg);
    errno = err;
    return -1;
}

/* The daemon: external polling (loop.c's thread drives it) with epoll, no
 * listening socket of its own (loop.c accepts and adds the connections). */
static struct MHD_Daemon *create_daemon(void *loop) {
    /* (libmicrohttpd counts it in whole seconds) */
    unsigned idle_s = (unsigned)((sf_knob(SF_KNOB_INTROSPECT_IDLE_TIMEOUT) + 999) / 1000);
    return mhd->start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)SF_CONN_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
        idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
        sf_loop_on_connection, loop, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
}

/* fork(): srv_lock is held across it, so that a fork() in the middle of a
 * start or a stop waits for it to end, and the child sees a server either
 * running or not.  These handlers are installed at the first start, after
 * sefer's own (lib/init.c), so they run before sefer's prepare handler
 * takes the allocator's locks: a start in progress can still allocate. */
static void fork_prepare(void) {
    sf_lock(&srv_lock);
    sf_loop_fork_prepare();
}

static void fork_parent(void) {
    sf_loop_fork_parent();
    sf_unlock(&srv_lock);
}

/* In the child: only the forking thread exists, so the server's thread is
 * gone and libmicrohttpd's state may be mid-change.  Forget the daemon
 * without touching it; close our copies of the listening socket (the parent
 * alone owns the port) and of the open connections (so that they end when
 * the parent closes them); the same for stopped servers whose threads had
 * not ended yet (loop.c). */
static void fork_child(void) {
    memset(deltas, 0, sizeof deltas); /* (the parent's connections: not ours to answer) */
    pthread_mutex_init(&deltas_lock, NULL); /* (held by the server's thread when it forked, perhaps) */
    if (serving) {
        forked_with_server = true;
        serving = false;
        atomic_store(&bound_port, 0);
    }
    sf_loop_after_fork_child();
    /* (a stopped server's thread that had not ended held connections too:
     * their copies are closed above, none is the child's) */
    atomic_store(&sf_introspect_counters.connections_open, 0);
    /* the locks the server's thread takes while it runs: free in the
     * child even if a thread that is not here held them (stopped without
     * a wait, it may still have been working); symbols.c's has a handler
     * of its own, since the exit writer names frames without a server */
    sf_sampler_after_fork_child();
    sf_profile_views_after_fork_child();
    sf_unlock(&srv_lock);
}

static void stop_at_exit(void) { sefer_introspect_stop(); }

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

/* atexit rather than a destructor: atexit handlers run before any
 * library's destructors (libmicrohttpd's among them), in a static program
 * too. */
static void install_hooks(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(stop_at_exit);
}

/* The port is opened before libmicrohttpd is loaded: a process that finds
 * it taken (a child under `sefer run` on a fixed port) loads nothing. */
static int open_and_load(sf_listen_t *l, char *why) {
    int fd = sf_listen_open(l, why, sizeof last_error);
    if (fd < 0) return -1;
    if ((mhd = sf_mhd_load(why, sizeof last_error)) == NULL || !sf_cjson_load(why, sizeof last_error)) {
        close(fd);
        errno = ENOSYS;
        return -1;
    }
    return fd;
}

/* Starts the server; fills l with where it listens.  Holds srv_lock. */
static int start_locked(const char *listen, sf_listen_t *l, char *why) {
    if (serving && sf_loop_lost()) { /* its descriptors were closed under it */
        sf_loop_stop();
        serving = false;
    }
    if (serving) {
        snprintf(why, sizeof last_error, "already serving on port %d", atomic_load(&bound_port));
        errno = EALREADY;
        return -1;
    }
    if (forked_with_server)
        return fail(EPERM, why, "this process is a fork() child of a process whose server was running: "
                                "it has no server (exec a program to get one)");
    char listen_knob[SF_KNOB_STR_MAX];
    if (listen == NULL && sefer_config_get("introspect.listen", listen_knob, sizeof listen_knob) == 0)
        listen = listen_knob;
    if (!sf_listen_parse(listen, l, why, sizeof last_error)) return -1;
    if (sefer_config_get("introspect.token", token, sizeof token) != 0) token[0] = '\0';
    token_len = strlen(token);
    if (!l->loopback && token_len == 0) {
        snprintf(why, sizeof last_error,
                 "refusing to listen on %s: not a loopback address, and introspect.token is not set "
                 "(a non-loopback listener needs a token)", l->host);
        errno = EACCES;
        return -1;
    }
    int fd = open_and_load(l, why);
    if (fd < 0) return -1;
    listen_loopback = l->loopback;
    bool v6 = l->addr.ss_family == AF_INET6;
    snprintf(listen_host, sizeof listen_host, "%s%s%s", v6 ? "[" : "", l->host, v6 ? "]" : "");
    atomic_store(&bound_port, l->port);
    sf_sampler_prepare(); /* the history's memory, before the thread that samples exists */
    if (sf_loop_start(mhd, fd, !l->loopback, &bound_port, create_daemon, why, sizeof last_error) != 0) {
        atomic_store(&bound_port, 0);
        return -1;
    }
    serving = true;
    sf_event_server_start(l->port, (int)getpid());
    return l->port;
}

static int start(const char *listen, bool report) {
    sf_ensure_init();
    pthread_once(&hooks_once, install_hooks);
    sf_listen_t l;
    sf_lock(&srv_lock);
    int port = start_locked(listen, &l, last_error);
    int e = errno;
    sf_unlock(&srv_lock);
    if (!report) {
        errno = e;
        return port;
    }
    char line[sizeof last_error + 64];
    if (port < 0) {
        snprintf(line, sizeof line, "sefer: introspection: %s: no server in this process\n", last_error);
        sf_write_stderr(line);
    } else if (l.next_free || l.any_port) { /* the port was not fixed: say which one */
        char url[96];
        sf_listen_url(&l, url, sizeof url);
        snprintf(line, sizeof line, "sefer: introspection: %s (pid %d)\n", url, (int)getpid());
        sf_write_stderr(line);
    }
    errno = e;
    return port;
}

int sf_introspect_start_reporting(const char *listen) { return start(listen, true); }

SEFER_EXPORT int sefer_introspect_start(const char *listen) {
    last_error[0] = '\0';
    return start(listen, false);
}

/* Bounded: loop.c waits at most 2 s for the reply in progress, and never
 * closes a descriptor that is no longer the server's. */
SEFER_EXPORT void sefer_introspect_stop(void) {
    sf_lock(&srv_lock);
    if (serving) sf_loop_stop();
    serving = false;
    atomic_store(&bound_port, 0);
    sf_unlock(&srv_lock);
}

SEFER_EXPORT int sefer_introspect_port(void) { return atomic_load(&bound_port); }

SEFER_EXPORT const char *sefer_introspect_error(void) { return last_error; }
