/* sefer_http.c - the smallest HTTP client that reads sefer's endpoints:
 * GET over plain TCP with "Connection: close", the body read to the end
 * (the server sends Content-Length and closes).  Bounded: 3 s to connect,
 * 10 s without data ends the read, 256 MiB at most. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sefer_cli.h"

#define BODY_LIMIT ((size_t)256 << 20)

/* "http://HOST:PORT/...", "HOST:PORT" or "PORT"; HOST an address or localhost.
 * host gets the Host header's value: "127.0.0.1:9090", "[::1]:9090". */
static bool parse_url(const char *url, struct sockaddr_storage *ss, socklen_t *sslen, char *host,
                      size_t hostlen) {
    if (strncmp(url, "http://", 7) == 0) url += 7;
    char h[80] = "127.0.0.1";
    const char *port = url;
    if (url[0] == '[') {
        const char *close = strchr(url, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - url - 1) >= sizeof h) return false;
        snprintf(h, sizeof h, "%.*s", (int)(close - url - 1), url + 1);
        port = close + 2;
    } else if (strchr(url, ':') != NULL) {
        const char *colon = strchr(url, ':');
        if ((size_t)(colon - url) >= sizeof h) return false;
        snprintf(h, sizeof h, "%.*s", (int)(colon - url), url);
        port = colon + 1;
    }
    char *end;
    unsigned long p = strtoul(port, &end, 10);
    if (end == port || p == 0 || p > 65535 || (*end && *end != '/')) return false;
    if (strcmp(h, "localhost") == 0) snprintf(h, sizeof h, "127.0.0.1");
    snprintf(host, hostlen, strchr(h, ':') ? "[%s]:%lu" : "%s:%lu", h, p);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    if (inet_pton(AF_INET, h, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *sslen = sizeof *v4;
        return true;
    }
    if (inet_pton(AF_INET6, h, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *sslen = sizeof *v6;
        return true;
    }
    return false;
}

static int connect_timed(const struct sockaddr_storage *ss, socklen_t len, int ms) {
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)ss, len) != 0 && errno != EINPROGRESS) goto fail;
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, ms) != 1) {
        errno = ETIMEDOUT;
        goto fail;
    }
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        errno = err;
        goto fail;
    }
    return fd;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

static bool send_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 10000) != 1) return false;
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (w <= 0) return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads until the peer closes; the response (malloc) or NULL. */
static char *recv_all(int fd, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n + 1 >= cap) {
            char *b = cap >= BODY_LIMIT ? NULL : realloc(buf, cap * 2);
            if (b == NULL) break;
            buf = b;
            cap *= 2;
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) != 1) break;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
            buf[n] = '\0';
            *len = n;
            return r == 0 ? buf : (free(buf), NULL);
        }
        n += (size_t)r;
    }
    free(buf);
    return NULL;
}

int cli_http_get(const char *url, const char *path, const char *token, char **body, size_t *len,
                 char *err, size_t errlen) {
    struct sockaddr_storage ss;
    socklen_t sslen;
    char host[100];
    *body = NULL;
    if (!parse_url(url, &ss, &sslen, host, sizeof host)) {
        snprintf(err, errlen, "%s: expected http://HOST:PORT/", url);
        return -1;
    }
    int fd = connect_timed(&ss, sslen, 3000);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot connect: %s", url, strerror(errno));
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s%s\r\n", path,
                     host, token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "");
    size_t total = 0;
    char *resp = n > 0 && (size_t)n < sizeof req && send_all(fd, req, (size_t)n) ? recv_all(fd, &total) : NULL;
    close(fd);
    int status = 0;
    char *split = resp ? strstr(resp, "\r\n\r\n") : NULL;
    /* (a status outside 100-599 is no HTTP reply: a negative one would
     * read as this function's own failure, with err unwritten) */
    if (resp == NULL || split == NULL || sscanf(resp, "HTTP/1.%*d %d", &status) != 1 || status < 100 || status > 599) {
        snprintf(err, errlen, "%s%s: no complete HTTP response", url, path);
        free(resp);
        return -1;
    }
    size_t head = (size_t)(split + 4 - resp);
    memmove(resp, split + 4, total - head + 1);
    *body = resp;
    *len = total - head;
    return status;
}
