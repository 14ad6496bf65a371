/* listen.c - where the introspection server listens.
 *
 * introspect.listen (and sefer_introspect_start's argument) takes:
 *
 *   127.0.0.1:9090      an IPv4 address and a port (the default)
 *   [::1]:9090          an IPv6 address in brackets
 *   localhost:9090      the same as 127.0.0.1:9090 (no other name is looked up)
 *   9090                a port alone: 127.0.0.1
 *   127.0.0.1:0         any free port (the kernel picks)
 *   127.0.0.1:9090+     9090, or the first free port of the 63 after it
 *
 * A loopback address is 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104; anything
 * else (0.0.0.0 included) is reachable from the network and needs a token
 * (server.c).  The socket is opened here, not by libmicrohttpd, so that a
 * taken port is told apart from every other failure and the next one can be
 * tried. */
#include "introspect.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <unistd.h>

static bool parse_port(const char *s, size_t n, sf_listen_t *out) {
    if (n > 0 && s[n - 1] == '+') {
        out->next_free = true;
        n--;
    }
    if (n == 0 || n > 5) return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535) return false;
    out->port = (int)v;
    out->any_port = v == 0;
    return true;
}

static bool parse_host(const char *h, sf_listen_t *out) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&out->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->addr;
    if (strcmp(h, "localhost") == 0) h = "127.0.0.1";
    if (inet_pton(AF_INET, h, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        out->addrlen = sizeof *v4;
        return true;
    }
    if (inet_pton(AF_INET6, h, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        out->addrlen = sizeof *v6;
        return true;
    }
    return false;
}

bool sf_listen_parse(const char *text, sf_listen_t *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    if (text == NULL || *text == '\0') text = SF_LISTEN_DEFAULT;
    size_t len = strlen(text);
    const char *host = "127.0.0.1", *port = text;
    size_t host_len = strlen(host);
    if (text[0] == '[') { /* [v6]:port */
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') goto bad;
        host = text + 1;
        host_len = (size_t)(close - host);
        port = close + 2;
    } else if (strchr(text, ':') != NULL) {
        const char *colon = strrchr(text, ':');
        if (strchr(text, ':') != colon) goto bad; /* a bare IPv6 address needs brackets */
        host = text;
        host_len = (size_t)(colon - text);
        port = colon + 1;
    }
    if (host_len == 0 || host_len >= sizeof out->host) goto bad;
    memcpy(out->host, host, host_len);
    out->host[host_len] = '\0';
    if (!parse_port(port, len - (size_t)(port - text), out) || !parse_host(out->host, out)) goto bad;
    if (strcmp(out->host, "localhost") == 0) strcpy(out->host, "127.0.0.1");
    out->loopback = sf_addr_is_loopback((struct sockaddr *)&out->addr);
    return true;
bad: {
    /* the text as the variable gave it, control bytes as '?' (it goes to
     * stderr: an escape sequence there would drive the terminal) */
    sf_str_t s;
    sf_str_init(&s, why, whylen);
    sf_str_add(&s, "introspect.listen \"");
    sf_str_add_clean(&s, text, strlen(text), 64);
    sf_str_add(&s, "\": expected HOST:PORT, [IPV6]:PORT or PORT, with an optional '+' after the port (next "
                   "free port) and PORT 0 for any free port");
    errno = EINVAL;
}
    return false;
}

bool sf_addr_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
        return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

static void set_port(sf_listen_t *l, int port) {
    if (l->addr.ss_family == AF_INET) ((struct sockaddr_in *)&l->addr)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)&l->addr)->sin6_port = htons((uint16_t)port);
}

static int bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -1;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* One attempt at one port: the socket, or -1 with errno. */
static int try_bind(sf_listen_t *l, int port) {
    int fd = socket(l->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    /* reuse a port whose previous owner's connections linger in TIME_WAIT;
     * on Linux this never lets two live listeners share a port */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l->addr.ss_family == AF_INET6) {
        /* a v4-mapped address (::ffff:127.0.0.1) binds only on a dual-stack
         * socket, and then takes the IPv4 port; any other: IPv6 only */
        int v6only = !IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&l->addr)->sin6_addr);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    set_port(l, port);
    if (bind(fd, (struct sockaddr *)&l->addr, l->addrlen) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sf_listen_open(sf_listen_t *l, char *why, size_t whylen) {
    int tries = l->next_free && l->port != 0 ? SF_LISTEN_TRIES : 1;
    for (int i = 0; i < tries && l->port + i <= 65535; i++) {
        int fd = try_bind(l, l->port + i);
        if (fd >= 0) {
            l->port = bound_port(fd);
            set_port(l, l->port);
            return fd;
        }
        if (errno != EADDRINUSE) {
            int e = errno;
            snprintf(why, whylen, "cannot listen on %s port %d: %s", l->host, l->port + i,
                     strerror(e));
            errno = e;
            return -1;
        }
    }
    if (tries > 1)
        snprintf(why, whylen, "%s ports %d-%d are all in use", l->host, l->port,
                 l->port + tries - 1 > 65535 ? 65535 : l->port + tries - 1);
    else
        snprintf(why, whylen, "%s:%d is in use (by another process, perhaps the parent this one "
                 "inherited SEFER_* variables from)", l->host, l->port);
    errno = EADDRINUSE;
    return -1;
}

void sf_listen_url(const sf_listen_t *l, char *buf, size_t len) {
    bool v6 = l->addr.ss_family == AF_INET6;
    snprintf(buf, len, "http://%s%s%s:%d/", v6 ? "[" : "", l->host, v6 ? "]" : "", l->port);
}
