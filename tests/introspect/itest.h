/* itest.h - helpers of the introspection tests (tests/introspect/): a raw
 * HTTP/1.1 client over loopback sockets, JSON reading with cJSON, and child
 * processes with piped stdin/stdout/stderr.  Everything talks to a real
 * server; nothing is mocked. */
#ifndef SEFER_ITEST_H
#define SEFER_ITEST_H

#include "../sefer_test.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

static inline int it_tid(void) { return (int)syscall(SYS_gettid); }

/* How long a wait for the server or a child process may last before the
 * test fails (a socket's receive timeout, a wait for a line on a pipe, for
 * a child's exit).  Only a hang guard: a passing run stops waiting when it
 * sees what it waits for, so this costs nothing there, and it is generous
 * because a loaded machine or a sanitizer build can keep the server's
 * thread off a CPU for seconds.  A test must never pass or fail on how
 * soon something happened within it. */
#define IT_WAIT_MS 60000

static inline uint64_t it_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- this process's threads --------------------------------------------- */

/* Whether a thread of this process is named `name` and, if match is not
 * NULL, match(its task id as text, arg) holds for it. */
static inline bool it_thread_named(const char *name, bool (*match)(const char *tid, void *arg), void *arg)
{
    bool found = false;
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[320], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue; /* (it ended while we looked) */
        if (fgets(comm, sizeof comm, f) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        found = strcmp(comm, name) == 0 && (match == NULL || match(e->d_name, arg));
    }
    closedir(d);
    return found;
}

/* ---- the server under test (in this process) ---------------------------- */

static inline int it_start(void)
{
    int port = sefer_introspect_start("127.0.0.1:0");
    ck_assert_msg(port > 0, "sefer_introspect_start: %s (%s)", sefer_introspect_error(),
                  strerror(errno));
    ck_assert_int_eq(sefer_introspect_port(), port);
    return port;
}

/* ---- sockets ------------------------------------------------------------ */

/* why_not of the optional "ipv6" cases (tests/sefer_test.h): NULL when a
 * socket can be bound to [::1], else why not. */
static inline const char *it_ipv6_why_not(void)
{
    static char why[128];
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        close(fd);
        return NULL;
    }
    snprintf(why, sizeof why, "no IPv6 loopback here: %s [::1]: %s", fd < 0 ? "socket" : "bind", strerror(errno));
    if (fd >= 0)
        close(fd);
    return why;
}

/* A loopback port nobody listens on now, for a test that must name its
 * port before a process binds it. Taken at random below the kernel's
 * ephemeral range (net.ipv4.ip_local_port_range): a port the kernel hands
 * out (bind to port 0, every client's connect, in this test or any test
 * running beside it) can then never be this one between our check and the
 * process's bind. Only another test's pick, 1 in thousands, can collide. */
static inline int it_free_port(void)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    int span = low - 1024 > 16384 ? 16384 : low - 1024;
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)it_now_ms();
    for (int tries = 0; span > 0 && tries < 200; tries++) {
        int port = low - 1 - (int)(rand_r(&seed) % (unsigned)span);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (rc == 0)
            return port;
    }
    /* no room below the range (or all taken): any port the kernel picks */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A blocking socket connected to 127.0.0.1:port (-1 if refused); reads and
 * writes time out after timeout_ms. */
static inline int it_connect_t(int port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int it_connect(int port) { return it_connect_t(port, IT_WAIT_MS); }

static inline bool it_send(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* it_resp_t.status when there is no HTTP status to give: */
#define IT_CLOSED (-1)  /* the server closed (or reset) the connection without a response */
#define IT_TIMEOUT (-2) /* the server neither finished nor closed within the socket's timeout */

typedef struct {
    int status;        /* the response's status, IT_CLOSED or IT_TIMEOUT */
    char head[8192];   /* status line and headers */
    char *body;        /* malloc, NUL-terminated (also when status is -1) */
    size_t len;
} it_resp_t;

static inline void it_free(it_resp_t *r)
{
    free(r->body);
    r->body = NULL;
}

/* Reads a response into buf (malloc, cap bytes; grown as needed) until
 * the server closes the connection.  A receive that times out (the
 * socket's SO_RCVTIMEO) makes the status IT_TIMEOUT, whatever came before:
 * a server that stops answering is not one that closed. */
static inline void it_read_response_into(int fd, it_resp_t *r, char *buf, size_t cap)
{
    size_t n = 0;
    bool timed_out = false;
    ck_assert_ptr_nonnull(buf);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t got = recv(fd, buf + n, cap - 1 - n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        timed_out = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    r->status = IT_CLOSED;
    r->head[0] = '\0';
    char *split = strstr(buf, "\r\n\r\n");
    int st;
    if (split != NULL && sscanf(buf, "HTTP/1.%*d %d", &st) == 1) {
        size_t h = (size_t)(split - buf);
        if (h >= sizeof r->head)
            h = sizeof r->head - 1;
        memcpy(r->head, buf, h);
        r->head[h] = '\0';
        r->status = st;
        size_t off = (size_t)(split + 4 - buf);
        memmove(buf, split + 4, n - off + 1);
        n -= off;
    }
    r->body = buf;
    r->len = n;
    if (timed_out)
        r->status = IT_TIMEOUT;
}

static inline void it_read_response(int fd, it_resp_t *r)
{
    it_read_response_into(fd, r, malloc(1 << 16), 1 << 16);
}

/* Sends raw bytes, reads the response. */
static inline void it_raw(int port, const char *req, size_t len, it_resp_t *r)
{
    int fd = it_connect(port);
    ck_assert_msg(fd >= 0, "connect to port %d: %s", port, strerror(errno));
    /* allocated before the request is sent, so that a snapshot of this
     * thread's heap sees it whenever the server takes it */
    char *buf = malloc(1 << 16);
    it_send(fd, req, len);
    it_read_response_into(fd, r, buf, 1 << 16);
    close(fd);
}

static inline void it_request(int port, const char *method, const char *path, const char *auth,
                              const char *body, it_resp_t *r)
{
    size_t blen = body ? strlen(body) : 0;
    size_t cap = strlen(path) + blen + 512;
    char *req = malloc(cap);
    ck_assert_ptr_nonnull(req);
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, auth ? "Authorization: " : "", auth ? auth : "",
                     auth ? "\r\n" : "", blen, body ? body : "");
    it_raw(port, req, (size_t)n, r);
    free(req);
}

static inline void it_get(int port, const char *path, it_resp_t *r)
{
    it_request(port, "GET", path, NULL, NULL, r);
}

/* Writes a response's body to a new file named from `path`, a mkstemp
 * template ending in XXXXXX, which it fills in (the caller unlinks it). */
static inline void it_save_body(const it_resp_t *r, char *path)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert(write(fd, r->body, r->len) == (ssize_t)r->len);
    close(fd);
}

/* The value of a response header (case-insensitive name), copied into a
 * static buffer; NULL if absent. */
static inline const char *it_header(const it_resp_t *r, const char *name)
{
    static char value[512];
    size_t n = strlen(name);
    for (const char *line = strstr(r->head, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, n) == 0 && h[n] == ':') {
            h += n + 1;
            while (*h == ' ')
                h++;
            size_t len = strcspn(h, "\r\n");
            if (len >= sizeof value)
                len = sizeof value - 1;
            memcpy(value, h, len);
            value[len] = '\0';
            return value;
        }
    }
    return NULL;
}

/* GET path: expects status, application/json, a parseable body. */
static inline cJSON *it_json_status(int port, const char *path, int status)
{
    it_resp_t r;
    it_get(port, path, &r);
    ck_assert_msg(r.status == status, "GET %s: status %d, expected %d: %.300s", path, r.status,
                  status, r.body);
    const char *ct = it_header(&r, "Content-Type");
    ck_assert_msg(ct && strcmp(ct, "application/json") == 0, "GET %s: Content-Type %s", path,
                  ct ? ct : "(none)");
    cJSON *j = cJSON_ParseWithLength(r.body, r.len);
    ck_assert_msg(j != NULL, "GET %s: not JSON: %.300s", path, r.body);
    it_free(&r);
    return j;
}

static inline cJSON *it_json(int port, const char *path) { return it_json_status(port, path, 200); }

static inline const cJSON *it_item(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(v != NULL, "no field \"%s\" in %.200s", key, o && o->child ? o->child->string : "?");
    return v;
}

/* An exact count (below 2^53, where a double is exact). */
static inline uint64_t it_u64(const cJSON *o, const char *key)
{
    const cJSON *v = it_item(o, key);
    ck_assert_msg(cJSON_IsNumber(v) && v->valuedouble >= 0, "field %s is not a count", key);
    return (uint64_t)v->valuedouble;
}

static inline const char *it_str(const cJSON *o, const char *key)
{
    const cJSON *v = it_item(o, key);
    ck_assert_msg(cJSON_IsString(v), "field %s is not a string", key);
    return v->valuestring;
}

/* The /heaps entry of thread tid, or NULL. */
static inline const cJSON *it_heap_of(const cJSON *heaps, int tid)
{
    const cJSON *list = it_item(heaps, "heaps");
    for (const cJSON *h = list->child; h; h = h->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "thread");
        if (cJSON_IsObject(t) && (int)it_u64(t, "tid") == tid)
            return h;
    }
    return NULL;
}

/* ---- child processes ---------------------------------------------------- */

typedef struct {
    pid_t pid;
    int in, out, err; /* our ends of its stdin, stdout, stderr */
    char errbuf[8192];
    size_t errlen;
} it_proc_t;

/* Starts argv with env changes ("NAME=value" sets, "NAME" unsets). */
static inline void it_spawn(it_proc_t *p, char *const argv[], const char *const env[])
{
    int in[2], out[2], err[2];
    ck_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
    fflush(stdout);
    fflush(stderr);
    memset(p, 0, sizeof *p);
    p->pid = fork();
    ck_assert_msg(p->pid >= 0, "fork: %s", strerror(errno));
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        for (int i = 0; env && env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            if (eq == NULL) {
                unsetenv(env[i]);
            } else {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
                setenv(name, eq + 1, 1);
            }
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    p->in = in[1];
    p->out = out[0];
    p->err = err[0];
}

/* Reads fd into buf (appending at *len) until needle appears, EOF, or
 * timeout_ms; true if the needle was seen. */
static inline bool it_read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle,
                                 int timeout_ms)
{
    uint64_t end = it_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        buf[*len] = '\0';
        if (needle && strstr(buf, needle))
            return true;
        uint64_t now = it_now_ms();
        if (now >= end || *len + 1 >= cap)
            return false;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, (int)(end - now)) <= 0)
            return false;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        *len += (size_t)n;
    }
}

/* Waits for the child's stderr line announcing its server; returns the port. */
static inline int it_wait_url(it_proc_t *p)
{
    ck_assert_msg(it_read_until(p->err, p->errbuf, sizeof p->errbuf, &p->errlen, "/ (pid", IT_WAIT_MS),
                  "no introspection URL on the child's stderr: %s", p->errbuf);
    const char *u = strstr(p->errbuf, "http://127.0.0.1:");
    ck_assert_ptr_nonnull(u);
    return atoi(u + strlen("http://127.0.0.1:"));
}

/* Closes its stdin (hosts exit on EOF), collects its stderr, waits (at most
 * timeout_s, then SIGKILL).  Returns the wait status. */
static inline int it_finish(it_proc_t *p, int timeout_s)
{
    close(p->in);
    it_read_until(p->err, p->errbuf, sizeof p->errbuf, &p->errlen, NULL, timeout_s * 1000);
    int status = 0;
    uint64_t end = it_now_ms() + (uint64_t)timeout_s * 1000;
    while (waitpid(p->pid, &status, WNOHANG) == 0) {
        if (it_now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    close(p->out);
    close(p->err);
    return status;
}

/* Occurrences of needle in hay. */
static inline int it_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

#endif /* SEFER_ITEST_H */
