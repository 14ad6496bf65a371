/* fuzz_http.c - libFuzzer target for the introspection server's HTTP request
 * handling: routing, query parameters, headers, POST bodies (issue 7;
 * docs/security.md, "Introspection").
 *
 * The real server (introspect/server.c behind libmicrohttpd) runs in this
 * process, started once on 127.0.0.1:0 with introspect.token set.  Each input
 * (cut at 64 KiB) is sent as it is over a new loopback TCP connection, which
 * is then half-closed, and the reply is read until the server closes.
 * Checked, besides "no crash, no sanitizer report":
 *   - the server keeps serving: while a connection is quiet, GET /healthz on
 *     a second one is answered, and a connection the client resets is let
 *     go (exchange() below; STALL_MS is the hang guard of both).  A connection the
 *     server holds open after the client's request and half-close is
 *     counted (fuzz_http_lingered), and a failure with
 *     FUZZ_HTTP_STRICT_CLOSE=1 in the environment;
 *   - a reply starts "HTTP/1.x NNN" (after any "100 Continue"), NNN one of
 *     the statuses the server or libmicrohttpd may send (statuses[] below);
 *   - a JSON reply parses and an error's "status" is the HTTP status; a 401
 *     carries WWW-Authenticate, a 405 Allow;
 *   - the token appears in no reply unless the request carried it itself;
 *   - nothing is written without the token: a POST answered 200, or a
 *     runtime knob changed, means the request carried it (the knobs are put
 *     back after every input, so that inputs stay independent);
 *   - every HEALTH_EVERY inputs, and at exit, GET /healthz answers 200.
 *
 * An input whose first byte is 0 goes in the other way: to an endpoint
 * (introspect/endpoints.c, metrics.c) called directly, as server.c calls it
 * once routing, authentication and the query check have passed.  The next
 * byte picks the endpoint; the rest is "QUERY\nBODY", the query split on '&'
 * and '=' like libmicrohttpd does, keeping the parameters the endpoint takes.
 * Checked: the status, a JSON body parses, no token.  The endpoints are
 * hidden in libsefer.so: both builds link the static library.
 *
 * libFuzzer (clang, ASan + UBSan; libmicrohttpd, loaded with dlopen, is not
 * instrumented), as tests/fuzz_http/build-libfuzzer.sh DIR does it:
 *   CC=clang-14 meson setup DIR/build . -Doverride=false -Dbuildtype=debugoptimized \
 *     -Db_sanitize=address,undefined -Db_lundef=false \
 *     -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=all'
 *   ninja -C DIR/build lib/libsefer.a
 *   clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -D_GNU_SOURCE -Iinclude -Ilib -Iintrospect tests/fuzz_http/fuzz_http.c \
 *     DIR/build/lib/libsefer.a -lcjson -ldl -lpthread -o DIR/fuzz_http
 *   nice -n 10 DIR/fuzz_http -max_total_time=600 -timeout=10 \
 *     -dict=tests/fuzz_http/http.dict DIR/work tests/fuzz_http/corpus
 * With -Doverride=false sefer does not interpose malloc (ASan owns it): the
 * server allocates from ASan, and sefer's heaps hold the blocks populate()
 * allocates so that the endpoints have something to report.
 * Without clang, fuzz_http_corpus.c (meson test "fuzz-http-corpus") replays
 * the corpus with this same file. */
#include "introspect.h"

#include "fuzz_http.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define REQUEST_MAX (64u << 10) /* inputs are cut here */
#define REPLY_MAX (4u << 20)    /* replies are read up to here */
/* The server accepts, answers, lets go within this: only a hang guard (each
 * wait ends when the event is seen), generous because a loaded machine or a
 * sanitizer build can keep the server's thread off a CPU for seconds (it
 * was 3 s).  libFuzzer's own -timeout (10 s a run) still bounds one input. */
#define STALL_MS 60000
#define QUIET_MS 2              /* quiet on a connection: ask whether the server is done */
#define QUIET_TURNS 4           /* at most that many answers with no progress: it is */
#define TURN_BYTES 8192         /* a turn of the server reads at least this much */
#define HEALTH_EVERY 64         /* inputs between two GET /healthz */
#define TOKEN FUZZ_HTTP_TOKEN
#define TOKEN_LEN (sizeof TOKEN - 1)

const char *fuzz_http_input;
int fuzz_http_last_status;
unsigned long fuzz_http_lingered;

static bool strict_close; /* FUZZ_HTTP_STRICT_CLOSE=1: a lingering connection is a failure */

static int port;
static char reply[REPLY_MAX];
static size_t reply_len;
static char scratch[REQUEST_MAX + 1];

/* Statuses a reply may have: the server's own (server.c, endpoints.c,
 * webui.c) and libmicrohttpd's answers to requests it refuses itself. */
static const int statuses[] = {
    200, /* an endpoint or a dashboard file */
    304, /* a dashboard file whose ETag the client has (If-None-Match) */
    400, /* a bad query or body; libmicrohttpd: a malformed request */
    401, /* a write without the right token */
    403, /* a write where no token is configured */
    404, /* no such endpoint or file, or no such knob (POST /config) */
    405, /* the path takes other methods */
    413, /* a POST body over 4096 bytes */
    421, /* a request without the token whose Host header names another server */
    414, /* libmicrohttpd: the request line does not fit in 32 KiB */
    431, /* libmicrohttpd: the headers do not fit in 32 KiB */
    500, /* libmicrohttpd: the handler refused the request */
    503, /* out of memory */
    505, /* libmicrohttpd: an HTTP version other than 1.0 and 1.1 */
};

/* ---- checks ---------------------------------------------------------------------- */

static void show(const char *what, const char *p, size_t n) {
    fprintf(stderr, "fuzz_http: %s (%zu bytes): \"", what, n);
    for (size_t i = 0; i < n && i < 300; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "%s\"\n", n > 300 ? "..." : "");
}

__attribute__((noreturn, format(printf, 3, 4))) static void failed(const char *cond, int line,
                                                                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_http: check failed (fuzz_http.c:%d: %s): ", line, cond);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", fuzz_http_input ? "; input " : "",
            fuzz_http_input ? fuzz_http_input : "");
    show("reply", reply, reply_len);
    abort();
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) failed(#cond, __LINE__, __VA_ARGS__);                                         \
    } while (0)

static bool hex(const uint8_t *p, int digits, unsigned *out) {
    *out = 0;
    for (int i = 0; i < digits; i++) {
        int c = p[i];
        int v = c >= '0' && c <= '9'                     ? c - '0'
                : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                         : -1;
        if (v < 0) return false;
        *out = *out * 16 + (unsigned)v;
    }
    return true;
}

/* Whether the request carries the token, as written or encoded the ways a
 * reply could decode it: %XX (the URL), \uXXXX and \c (a JSON body). */
static bool mentions_token(const uint8_t *req, size_t len) {
    if (memmem(req, len, TOKEN, TOKEN_LEN) != NULL) return true;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        if (req[i] == '%' && i + 2 < len && hex(req + i + 1, 2, &v)) {
            scratch[n++] = (char)v;
            i += 2;
        } else if (req[i] == '\\' && i + 5 < len && req[i + 1] == 'u' && hex(req + i + 2, 4, &v) &&
                   v < 256) {
            scratch[n++] = (char)v;
            i += 5;
        } else if (req[i] == '\\' && i + 1 < len) {
            scratch[n++] = (char)req[++i];
        } else {
            scratch[n++] = (char)req[i];
        }
    }
    return memmem(scratch, n, TOKEN, TOKEN_LEN) != NULL;
}

static bool status_allowed(int status) {
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (statuses[i] == status) return true;
    return false;
}

/* "HTTP/1.x NNN" at p: NNN, else -1. */
static int status_at(const char *p, const char *end) {
    if (end - p < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ') return -1;
    int s = 0;
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        s = s * 10 + p[i] - '0';
    }
    return s;
}

/* ---- the runtime knobs: saved at start, put back after every input ------------- */

static struct {
    const char *name;
    char value[SF_KNOB_STR_MAX];
} knobs[SF_KNOB_COUNT];
static unsigned knob_count;

static void knobs_save(void) {
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        if (!sf_knob_defs[i].runtime) continue;
        const char *name = sf_knob_defs[i].name;
        char *value = knobs[knob_count].value;
        CHECK(sefer_config_get(name, value, SF_KNOB_STR_MAX) == 0, "%s: %s", name,
              sefer_config_error());
        CHECK(sefer_config_set(name, value) == 0, "%s does not take back \"%s\": %s", name, value,
              sefer_config_error());
        knobs[knob_count++].name = name;
    }
}

/* Puts every runtime knob back; whether one had changed. */
static bool knobs_restore(void) {
    bool changed = false;
    char now[SF_KNOB_STR_MAX];
    for (unsigned i = 0; i < knob_count; i++) {
        CHECK(sefer_config_get(knobs[i].name, now, sizeof now) == 0, "%s: %s", knobs[i].name,
              sefer_config_error());
        if (strcmp(now, knobs[i].value) == 0) continue;
        changed = true;
        CHECK(sefer_config_set(knobs[i].name, knobs[i].value) == 0, "%s: %s", knobs[i].name,
              sefer_config_error());
    }
    return changed;
}

/* ---- one request over loopback TCP -------------------------------------------------- */

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* Waits up to ms for events on fd; false if none came. */
static bool wait_fd(int fd, short events, int ms) {
    long long deadline = now_ms() + ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n != 0 && !(n < 0 && errno == EINTR)) return true;
        ms = (int)(deadline - now_ms());
        if (ms <= 0) return false;
    }
}

/* A new connection to the server, req sent on it and its writing side
 * closed.  A server that stops reading keeps what did not fit. */
static int send_request(const void *req, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    CHECK(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        CHECK(errno == EINPROGRESS, "connect: %s", strerror(errno));
        CHECK(wait_fd(fd, POLLOUT, STALL_MS), "connect: not accepted within %d ms", STALL_MS);
        int err = 0;
        socklen_t elen = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
        CHECK(err == 0, "connect: %s (has the server stopped?)", strerror(err));
    }
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, (const char *)req + sent, len - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR) || !wait_fd(fd, POLLOUT, STALL_MS))
            break;
    }
    shutdown(fd, SHUT_WR);
    return fd;
}

/* Closes with a reset: no TIME_WAIT left at thousands of connections a second. */
static void reset(int fd) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

/* Reads into buf what comes within ms of quiet; true once the server has
 * closed (or reset) the connection, or buf is full. */
static bool take(int fd, char *buf, size_t cap, size_t *len, int ms) {
    while (*len < cap) {
        ssize_t n = recv(fd, buf + *len, cap - *len, 0);
        if (n > 0)
            *len += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return true;
        else if (!wait_fd(fd, POLLIN, ms))
            return false;
    }
    return true;
}

/* GET /healthz on a connection of its own: 200 {"status":"ok",...}, and closed. */
static bool healthz_ok(void) {
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    static char buf[4096];
    size_t len = 0;
    int fd = send_request(req, sizeof req - 1);
    bool closed = take(fd, buf, sizeof buf, &len, STALL_MS);
    reset(fd);
    return closed && status_at(buf, buf + len) == 200 &&
           memmem(buf, len, "{\"status\":\"ok\"", 14) != NULL;
}

/* Waits until the server has let go of every connection: it has done all it
 * will do with the last request (knobs included). */
static void wait_released(void) {
    long long deadline = now_ms() + STALL_MS;
    while (atomic_load(&sf_introspect_counters.connections_open) != 0) {
        CHECK(now_ms() < deadline,
              "the server still holds a connection %d ms after the client reset it", STALL_MS);
        usleep(100);
    }
}

/* Sends req and reads the reply into reply[] until the server closes.  A
 * server that goes quiet without closing is asked for /healthz on a second
 * connection: it serves its connections in turns, in one thread, so once
 * that reply is in it has had a turn at the first.  A long request takes
 * several turns to read (one per TURN_BYTES, at most QUIET_TURNS); after as
 * many turns with nothing more on the first connection, the server is
 * holding it open waiting for bytes the client said it would never send
 * (lingered): reset it and go on. */
static void exchange(const void *req, size_t len) {
    int fd = send_request(req, len);
    reply_len = 0;
    unsigned quiet = 0, turns = 1 + (unsigned)(len / TURN_BYTES);
    if (turns > QUIET_TURNS) turns = QUIET_TURNS;
    while (!take(fd, reply, REPLY_MAX, &reply_len, QUIET_MS)) {
        size_t before = reply_len;
        CHECK(healthz_ok(), "GET /healthz on a second connection is not answered 200 within %d ms",
              STALL_MS);
        if (take(fd, reply, REPLY_MAX, &reply_len, 0)) break;
        quiet = reply_len == before ? quiet + 1 : 0;
        if (quiet == turns) {
            fuzz_http_lingered++;
            CHECK(!strict_close,
                  "the server holds a connection the client has half-closed (strict mode)");
            break;
        }
    }
    reset(fd);
    wait_released();
}

/* ---- the reply ------------------------------------------------------------------------ */

/* The header name's value in the header block [p, end), copied to val. */
static bool header(const char *p, const char *end, const char *name, char *val, size_t len) {
    size_t n = strlen(name);
    const char *l = memmem(p, (size_t)(end - p), "\r\n", 2); /* the end of the status line */
    while (l != NULL && (l += 2) < end) {
        const char *e = memmem(l, (size_t)(end - l), "\r\n", 2);
        if (e == NULL) e = end;
        if ((size_t)(e - l) > n && strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1;
            while (v < e && *v == ' ')
                v++;
            snprintf(val, len, "%.*s", (int)(e - v), v);
            return true;
        }
        l = e < end ? e : NULL;
    }
    return false;
}

/* Whether the first request of req has this method (leading empty lines
 * are skipped, as libmicrohttpd does). */
static bool method_is(const uint8_t *req, size_t len, const char *method) {
    size_t i = 0, n = strlen(method);
    while (i < len && (req[i] == '\r' || req[i] == '\n'))
        i++;
    return len - i > n && memcmp(req + i, method, n) == 0 && req[i + n] == ' ';
}

/* A JSON body parses; an error's "status" is the HTTP status. */
static void check_json(const char *body, size_t len, int status) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    CHECK(root != NULL, "a %d reply's JSON body does not parse", status);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "status");
    bool ok = status < 400 || (cJSON_IsNumber(st) && st->valuedouble == status);
    cJSON_Delete(root);
    CHECK(ok, "a %d reply's JSON body has another \"status\"", status);
}

/* Checks the first response in reply[] (after any 100 Continue). */
static void check_reply(const uint8_t *req, size_t len, bool token) {
    const char *p = reply, *end = reply + reply_len, *body;
    int status = status_at(p, end);
    CHECK(status >= 0, "the reply does not start with \"HTTP/1.x NNN \"");
    while (status == 100 && (body = memmem(p, (size_t)(end - p), "\r\n\r\n", 4)) != NULL) {
        p = body + 4;
        if (p == end) return; /* Continue, then the body never came */
        status = status_at(p, end);
        CHECK(status >= 0, "no \"HTTP/1.x NNN \" after 100 Continue");
    }
    fuzz_http_last_status = status;
    CHECK(status_allowed(status), "status %d", status);
    CHECK(!(status == 200 && method_is(req, len, "POST")) || token,
          "a POST answered 200 without the token");
    body = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
    if (body == NULL) return; /* the headers were cut short */
    body += 4;
    char type[64] = "", clen[32] = "", any[256];
    CHECK(status != 401 || header(p, body, "WWW-Authenticate", any, sizeof any),
          "a 401 without WWW-Authenticate");
    CHECK(status != 405 || header(p, body, "Allow", any, sizeof any), "a 405 without Allow");
    if (!header(p, body, "Content-Type", type, sizeof type) ||
        strncmp(type, "application/json", 16) != 0 ||
        !header(p, body, "Content-Length", clen, sizeof clen) || method_is(req, len, "HEAD"))
        return;
    size_t n = strtoul(clen, NULL, 10);
    if ((size_t)(end - body) >= n) check_json(body, n, status);
}

static void run_http(const uint8_t *req, size_t len) {
    exchange(req, len);
    bool token = mentions_token(req, len);
    bool changed = knobs_restore();
    fuzz_http_last_status = 0;
    CHECK(!changed || token, "a runtime knob changed, but the request does not carry the token");
    CHECK(token || memmem(reply, reply_len, TOKEN, TOKEN_LEN) == NULL, "the token is in the reply");
    if (reply_len > 0) check_reply(req, len, token); /* closed unanswered: allowed */
}

/* ---- the direct mode: the endpoints without HTTP ---------------------------------- */

/* The endpoints and the query parameters each takes: as routes[] in
 * introspect/server.c. */
static const struct {
    sf_endpoint_fn *fn;
    const char *params;
} endpoints[] = {
    {sf_ep_healthz, ""},     {sf_ep_stats, "pretty"}, {sf_ep_segments, "limit offset pretty"},
    {sf_ep_heaps, "pretty"}, {sf_ep_rings, "pretty"}, {sf_ep_config, "pretty"},
    {sf_ep_config_set, ""},  {sf_ep_metrics, ""},     {sf_ep_trim, ""},
};
#define ENDPOINTS (sizeof endpoints / sizeof *endpoints)

static bool takes(const char *params, const char *key) {
    size_t n = strlen(key);
    for (const char *p = params; *p; p += *p == ' ') {
        size_t len = strcspn(p, " ");
        if (len == n && memcmp(p, key, n) == 0) return true;
        p += len;
    }
    return false;
}

static bool given(const sf_query_t *q, const char *key) {
    for (unsigned i = 0; i < q->count; i++)
        if (strcmp(q->key[i], key) == 0) return true;
    return false;
}

/* Splits "k=v&k&..." (copied into scratch) into q, keeping the keys params
 * names, each once, at most SF_QUERY_MAX of them (the server refuses the
 * others). */
static void split_query(const uint8_t *s, size_t len, const char *params, sf_query_t *q) {
    memset(q, 0, sizeof *q);
    memcpy(scratch, s, len);
    scratch[len] = '\0';
    for (char *p = scratch, *next; p != NULL && q->count < SF_QUERY_MAX; p = next) {
        next = strchr(p, '&');
        if (next != NULL) *next++ = '\0';
        char *eq = strchr(p, '=');
        if (eq != NULL) *eq++ = '\0';
        if (!takes(params, p) || given(q, p)) continue;
        q->key[q->count] = p;
        q->value[q->count++] = eq;
    }
}

static void run_direct(const uint8_t *data, size_t size) {
    fuzz_http_last_status = -1;
    if (size == 0) return;
    unsigned which = data[0] % ENDPOINTS;
    const uint8_t *query = data + 1, *nl = memchr(query, '\n', size - 1);
    size_t qlen = nl != NULL ? (size_t)(nl - query) : size - 1;
    size_t blen = nl != NULL ? size - 2 - qlen : 0;
    sf_query_t q;
    split_query(query, qlen, endpoints[which].params, &q);
    char *body = malloc(blen + 1); /* exactly blen bytes count: no NUL after them */
    CHECK(body != NULL, "out of memory");
    if (blen > 0) memcpy(body, nl + 1, blen);
    sf_reply_t r = {0};
    endpoints[which].fn(&q, body, blen, &r);
    free(body);
    knobs_restore();
    reply_len = 0;
    CHECK(status_allowed((int)r.status), "endpoint %u: status %u", which, r.status);
    CHECK(r.type != NULL, "endpoint %u: no Content-Type", which);
    if (r.body != NULL) {
        bool token = memmem(r.body, r.len, TOKEN, TOKEN_LEN) != NULL;
        CHECK(!token || mentions_token(data, size), "endpoint %u: the token is in the reply",
              which);
        if (strcmp(r.type, "application/json") == 0) check_json(r.body, r.len, (int)r.status);
        if (!r.static_body) free(r.body);
    }
}

/* ---- start, health, end ---------------------------------------------------------- */

static int ready_fd[2];

/* Blocks in sefer's heaps for the endpoints to report (with -Doverride=false
 * nothing else allocates through sefer): small to huge, in a thread that
 * stays alive while this one frees every other block (remote frees left in
 * its ring, which it never drains). */
static void *hold_blocks(void *arg) {
    void **blocks = arg;
    for (unsigned i = 0; i < 64; i++)
        blocks[i] = sefer_malloc((size_t)8 << (i % 21));
    char c = 1;
    CHECK(write(ready_fd[1], &c, 1) == 1, "pipe: %s", strerror(errno));
    for (;;)
        pause();
    return NULL;
}

static void populate(void) {
    static void *blocks[64];
    pthread_t t;
    CHECK(pipe(ready_fd) == 0, "pipe: %s", strerror(errno));
    CHECK(pthread_create(&t, NULL, hold_blocks, blocks) == 0, "pthread_create");
    char c;
    CHECK(read(ready_fd[0], &c, 1) == 1, "pipe: %s", strerror(errno));
    pthread_detach(t);
    for (unsigned i = 0; i < 64; i += 2)
        sefer_free(blocks[i]);
}

void fuzz_http_healthz(void) {
    if (port == 0) return;
    CHECK(healthz_ok(), "GET /healthz: the server no longer answers 200 {\"status\":\"ok\"}");
    wait_released();
}

void fuzz_http_finish(void) {
    if (port == 0) return;
    fuzz_http_input = "(the last health check)";
    fuzz_http_healthz();
    fuzz_http_input = NULL;
    sefer_introspect_stop();
    port = 0;
    fprintf(stderr,
            "fuzz_http: GET /healthz answered at the end; the server held %lu connection%s open "
            "after the client had sent its request and half-closed (reset by the client)\n",
            fuzz_http_lingered, fuzz_http_lingered == 1 ? "" : "s");
}

/* Whether SEFER_* in the environment is the token alone: anything else
 * (SEFER_CONFIG, SEFER_INTROSPECT_ENABLED, ...) would change the server. */
static bool environment_ready(void) {
    bool token = false;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "SEFER_", 6) != 0) continue;
        if (strcmp(*e, "SEFER_INTROSPECT_TOKEN=" TOKEN) != 0) return false;
        token = true;
    }
    return token;
}

/* Runs this program again with the token as the only SEFER_* variable. */
static void reexecute(char **argv) {
    size_t n = 0, k = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 3, sizeof *env);
    CHECK(env != NULL, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "SEFER_", 6) != 0 &&
            strncmp(environ[i], "FUZZ_HTTP_REEXEC=", 17) != 0)
            env[k++] = environ[i];
    env[k++] = "SEFER_INTROSPECT_TOKEN=" TOKEN;
    env[k++] = "FUZZ_HTTP_REEXEC=1";
    execve("/proc/self/exe", argv, env);
    CHECK(false, "execve /proc/self/exe: %s", strerror(errno));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    if (!environment_ready()) {
        CHECK(getenv("FUZZ_HTTP_REEXEC") == NULL,
              "SEFER_INTROSPECT_TOKEN is not seen after re-executing");
        reexecute(*argv);
    }
    char token[SF_KNOB_STR_MAX];
    CHECK(sefer_config_get("introspect.token", token, sizeof token) == 0 &&
              strcmp(token, TOKEN) == 0,
          "introspect.token is not the fuzz token");
    const char *strict = getenv("FUZZ_HTTP_STRICT_CLOSE");
    strict_close = strict != NULL && strcmp(strict, "1") == 0;
    populate();
    port = sefer_introspect_start("127.0.0.1:0");
    CHECK(port > 0, "sefer_introspect_start: %s", sefer_introspect_error());
    knobs_save();
    atexit(fuzz_http_finish);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned long runs;
    if (size > REQUEST_MAX) size = REQUEST_MAX;
    if (size > 0 && data[0] == 0)
        run_direct(data + 1, size - 1);
    else
        run_http(data, size);
    if (++runs % HEALTH_EVERY == 0) fuzz_http_healthz();
    return 0;
}
