/* loop.c - the server's thread, and every file descriptor the server owns.
 *
 * The descriptors of a process belong to the host program.  Programs close
 * or reuse low numbers as they please: a shell runs `exec 3>file`, a daemon
 * closes 3..63 before it starts work, a program dup2()s onto fd 3.  A
 * server that took fd 3 and 4 before main (the listening socket and
 * libmicrohttpd's epoll fd) then hangs the host at exit, spins or aborts.
 * So the server keeps out of the way and never trusts a number it did not
 * check:
 *
 *   - its descriptors live high: the listening socket, the wake-up pipe and
 *     every accepted connection are moved to fd_base or above (512, or half
 *     of RLIMIT_NOFILE when that is below 1024) with F_DUPFD_CLOEXEC, and
 *     the one descriptor libmicrohttpd opens itself (its epoll fd, created
 *     inside MHD_start_daemon) lands there too, because every free number
 *     below fd_base is held by a copy of /dev/null while the daemon starts;
 *   - libmicrohttpd runs in "external" mode, with no thread and no listening
 *     socket of its own: this file's thread polls the listening socket, the
 *     wake-up pipe and the daemon's epoll fd, accepts connections itself
 *     (accept4) and hands them over with MHD_add_connection, then lets the
 *     daemon work (MHD_run) for as long as MHD_get_timeout allows;
 *   - a descriptor that vanished under us (POLLNVAL, or accept failing with
 *     EBADF/ENOTSOCK) ends the thread at once: the server is "lost" and is
 *     never touched again (no spinning on EBADF).  The wake-up pipe is the
 *     tripwire: only a stop writes to it, so it turning readable without a
 *     stop, or hanging up (its write end closed or replaced), means the
 *     host has been at our descriptors; and since a close() does not wake
 *     a poll() that sleeps on the closed descriptor, the hang-up is also
 *     what wakes the thread when the host closes everything (closefrom);
 *   - each descriptor's identity (st_dev, st_ino) is remembered; at stop,
 *     at exit and in a fork() child a descriptor is closed only if it is
 *     still the one we opened, and libmicrohttpd's MHD_stop_daemon (which
 *     closes the connections) is called only if every one of them is intact
 *     and the thread has ended; otherwise the daemon is forgotten as it is.
 *     The wait for the thread is bounded (introspect.stop_wait): exit never
 *     hangs.  A thread still running then releases the server (descriptors
 *     included) itself when it ends, which the stop told it to do;
 *   - a client that shuts its side down right after a partial request
 *     (its data and its FIN queued before libmicrohttpd's first read) would
 *     wait for the idle timeout: libmicrohttpd's epoll is edge-triggered,
 *     it takes a short read for "drained" and so never reads the EOF that
 *     was already there.  The thread also polls each connection for
 *     POLLRDHUP, once, and when it shows, lets the daemon run (it reads what
 *     the peer sent before its EOF) and then does shutdown(SHUT_RD) on the
 *     socket: that wakes the epoll registration again, so the daemon's next
 *     run reads the EOF and answers or closes at once (a kick made before
 *     that read would only deliver the data; tests/introspect/test_hostile.c);
 *   - accepting is ours, so a host at its descriptor limit (EMFILE) does not
 *     make the thread spin (libmicrohttpd retries accept at once): the
 *     listening socket is left alone for SF_LOOP_BACKOFF_MS and tried again;
 *     and so is the connection cap (SF_CONN_MAX: the socket is not polled
 *     while the cap is reached) and, on a listener that is not loopback, the
 *     per-peer cap (SF_CONN_PER_PEER connections from one address).
 *
 * What stays possible: a host that dup2()s onto the server's high numbers
 * while it serves, or that closes them between our check and our close.
 * docs/introspection.md ("File descriptors") says what is guaranteed. */
#include "introspect.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SF_FD_BASE 512          /* the server's descriptors go here or above */
#define SF_LOOP_BACKOFF_MS 100  /* after accept failed for want of descriptors */
#define SF_LOOP_ACCEPT_BURST 16 /* connections accepted per wake-up */

/* A descriptor and what it was when we opened it. */
typedef struct {
    int fd;
    dev_t dev;
    ino_t ino;
} sf_owned_fd_t;

struct sf_conn {
    _Atomic int fd; /* -1: a free slot */
    dev_t dev;
    ino_t ino;
    struct sockaddr_storage peer;
    bool eof_kicked; /* the peer's EOF was seen and passed on (loop_once) */
};

/* One server.  Allocated per start and never reused.  Two hold it: the
 * starter (until stop) and the thread; the last to let go releases it, so
 * a thread that a stop could not join in time releases its own state and
 * descriptors when it ends (it has been told to stop). */
struct sf_loop {
    const sf_mhd_t *mhd;
    struct MHD_Daemon *daemon;
    sf_owned_fd_t listen, wake_r, wake_w, epoll;
    int fd_base;
    bool per_peer;     /* cap connections per peer address */
    _Atomic int *port; /* server.c's bound port: zeroed when lost */
    int port_value;
    pthread_t thread;
    _Atomic bool stopping, lost;
    _Atomic int holders;       /* 2 from start: the starter's and the thread's */
    struct sf_loop *next_late; /* on the late list (below) */
    uint64_t backoff_until; /* ms, CLOCK_MONOTONIC */
    unsigned open;          /* slots in use */
    struct sf_conn *adding; /* the slot MHD_add_connection is adding */
    struct sf_conn conn[SF_CONN_MAX];
};

static struct sf_loop *current; /* changed under server.c's srv_lock */

/* Stopped servers whose threads outlived the stop's wait and have not
 * ended yet: a fork() child closes its copies of their descriptors too
 * (else a child of a process whose server was stopped could hold them).
 * late_lock is held across fork() (sf_loop_fork_prepare). */
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sf_loop *late;

/* ---- descriptors ------------------------------------------------------------ */

static sf_owned_fd_t own(int fd) {
    sf_owned_fd_t o = {.fd = -1};
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) o = (sf_owned_fd_t){fd, st.st_dev, st.st_ino};
    return o;
}

static bool same_file(int fd, dev_t dev, ino_t ino) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static bool still_ours(const sf_owned_fd_t *o) {
    return same_file(o->fd, o->dev, o->ino);
}

static void close_if_ours(sf_owned_fd_t *o) {
    if (still_ours(o)) close(o->fd);
    o->fd = -1;
}

/* 512, or half the descriptor limit when that is below 1024. */
static int pick_fd_base(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 3;
    if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= 2 * SF_FD_BASE) return SF_FD_BASE;
    return r.rlim_cur / 2 > 3 ? (int)(r.rlim_cur / 2) : 3;
}

/* fd moved to base or above; where it was if there is no room there. */
static int move_high(int fd, int base) {
    if (fd < 0 || fd >= base) return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
    if (high < 0) return fd;
    close(fd);
    return high;
}

/* Every free descriptor below base, held by a copy of /dev/null (st: its
 * identity); returns how many are held. */
static int hold_low_fds(int base, int *held, struct stat *st) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    if (fd >= base || fstat(fd, st) != 0) {
        close(fd);
        return 0;
    }
    int n = 0;
    held[n++] = fd;
    while (n < base) {
        fd = fcntl(held[0], F_DUPFD_CLOEXEC, 0);
        if (fd < 0) break;
        if (fd >= base) {
            close(fd);
            break;
        }
        held[n++] = fd;
    }
    return n;
}

static void release_low_fds(const int *held, int n, const struct stat *st) {
    for (int i = 0; i < n; i++)
        if (same_file(held[i], st->st_dev, st->st_ino)) close(held[i]);
}

uint64_t sf_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- connections ------------------------------------------------------------- */

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Whether one more connection from peer fits the per-peer cap. */
static bool peer_admitted(const struct sf_loop *lp, const struct sockaddr_storage *peer) {
    if (!lp->per_peer || sf_addr_is_loopback((const struct sockaddr *)peer)) return true;
    unsigned n = 0;
    for (unsigned i = 0; i < SF_CONN_MAX; i++)
        n += atomic_load(&lp->conn[i].fd) >= 0 && same_host(&lp->conn[i].peer, peer);
    return n < SF_CONN_PER_PEER;
}

static struct sf_conn *conn_slot(struct sf_loop *lp) {
    for (unsigned i = 0; i < SF_CONN_MAX; i++)
        if (atomic_load(&lp->conn[i].fd) < 0) return &lp->conn[i];
    return NULL;
}

static void conn_forget(struct sf_loop *lp, struct sf_conn *c) {
    if (atomic_exchange(&c->fd, -1) >= 0) lp->open--;
}

/* MHD_OPTION_NOTIFY_CONNECTION: links libmicrohttpd's connection to its
 * slot, and frees the slot before libmicrohttpd closes the socket. */
void sf_loop_on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                           enum MHD_ConnectionNotificationCode toe) {
    (void)c;
    struct sf_loop *lp = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&sf_introspect_counters.connections_open, 1);
        *socket_ctx = lp->adding;
        return;
    }
    atomic_fetch_sub(&sf_introspect_counters.connections_open, 1);
    if (*socket_ctx != NULL) conn_forget(lp, *socket_ctx);
    *socket_ctx = NULL;
}

/* Takes fd (moved high) into a slot and hands it to the daemon. */
static void conn_add(struct sf_loop *lp, int fd, const struct sockaddr_storage *peer,
                     socklen_t len) {
    fd = move_high(fd, lp->fd_base);
    struct sf_conn *c = conn_slot(lp);
    sf_owned_fd_t o = own(fd);
    if (c == NULL || o.fd < 0 || !peer_admitted(lp, peer)) {
        close(fd);
        return;
    }
    c->dev = o.dev;
    c->ino = o.ino;
    c->peer = *peer;
    c->eof_kicked = false;
    atomic_store(&c->fd, fd);
    lp->open++;
    lp->adding = c;
    /* closes the socket itself when it fails */
    if (lp->mhd->add_connection(lp->daemon, fd, (const struct sockaddr *)peer, len) != MHD_YES)
        conn_forget(lp, c);
    lp->adding = NULL;
}

/* Accepts what waits, a burst at a time.  False if the listening socket is
 * no longer a listening socket (the server is lost). */
static bool accept_some(struct sf_loop *lp) {
    for (int i = 0; i < SF_LOOP_ACCEPT_BURST && lp->open < SF_CONN_MAX; i++) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof peer;
        int fd =
            accept4(lp->listen.fd, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            conn_add(lp, fd, &peer, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL) return false;
        /* EMFILE, ENFILE, ENOBUFS, ENOMEM, or a network error of the new
         * connection: the rest waits in the backlog, tried again soon */
        lp->backoff_until = sf_mono_ms() + SF_LOOP_BACKOFF_MS;
        return true;
    }
    return true;
}

/* ---- the thread ----------------------------------------------------------------- */

/* How long poll may sleep: until the daemon's next time-out, the next
 * sample of the history, or the end of an accept back-off; -1 for no
 * limit. */
static int poll_timeout(struct sf_loop *lp, bool *listen_ready) {
    MHD_UNSIGNED_LONG_LONG t;
    long long ms = lp->mhd->get_timeout(lp->daemon, &t) == MHD_YES
                       ? (long long)(t > INT32_MAX ? INT32_MAX : t)
                       : -1;
    int sample = sf_sampler_due_ms(sf_mono_ms());
    if (sample >= 0 && (ms < 0 || sample < ms)) ms = sample;
    int delta = sf_delta_due_ms(sf_mono_ms()); /* a suspended ?seconds=N request */
    if (delta >= 0 && (ms < 0 || delta < ms)) ms = delta;
    *listen_ready = lp->open < SF_CONN_MAX;
    if (lp->backoff_until != 0) {
        uint64_t now = sf_mono_ms();
        if (now < lp->backoff_until) {
            long long left = (long long)(lp->backoff_until - now);
            *listen_ready = false;
            if (ms < 0 || left < ms) ms = left;
        } else {
            lp->backoff_until = 0;
        }
    }
    /* the heap profile's history and SIGUSR2 dumps (profile_views.c) */
    if (ms < 0 || ms > SF_PROFILE_TICK_MS) ms = SF_PROFILE_TICK_MS;
    return (int)ms;
}

static void mark_lost(struct sf_loop *lp) {
    if (atomic_load(&lp->stopping)) return;
    atomic_store(&lp->lost, true);
    int port = lp->port_value;
    atomic_compare_exchange_strong(lp->port, &port, 0);
}

/* The connections whose peer's EOF is still to be passed on, as pollfds
 * after the first 3 of p; their slots in which.  Returns how many. */
static nfds_t watch_eofs(struct sf_loop *lp, struct pollfd *p, struct sf_conn **which) {
    nfds_t n = 0;
    for (unsigned i = 0; i < SF_CONN_MAX; i++) {
        int fd = atomic_load(&lp->conn[i].fd);
        if (fd < 0 || lp->conn[i].eof_kicked) continue;
        p[n] = (struct pollfd){fd, POLLRDHUP, 0};
        which[n++] = &lp->conn[i];
    }
    return n;
}

/* The peer shut its side down, and the daemon has read what came before:
 * wake its edge-triggered epoll registration of the socket so that it reads
 * the EOF too (the header comment says why).  A slot the daemon closed
 * during its run is free again (or holds another connection): skipped. */
static void pass_eofs(const struct pollfd *p, struct sf_conn **which, nfds_t n) {
    for (nfds_t i = 0; i < n; i++) {
        struct sf_conn *c = which[i];
        if (!(p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) || (p[i].revents & POLLNVAL)) continue;
        if (atomic_load(&c->fd) != p[i].fd || c->eof_kicked) continue;
        c->eof_kicked = true;
        if (same_file(p[i].fd, c->dev, c->ino)) shutdown(p[i].fd, SHUT_RD);
    }
}

/* One wait and what follows; false when the thread is to end. */
static bool loop_once(struct sf_loop *lp) {
    bool listen_ready;
    int timeout = poll_timeout(lp, &listen_ready);
    struct pollfd p[3 + SF_CONN_MAX] = {{lp->wake_r.fd, POLLIN, 0},
                                        {lp->epoll.fd, POLLIN, 0},
                                        {listen_ready ? lp->listen.fd : -1, POLLIN, 0}};
    struct sf_conn *which[SF_CONN_MAX];
    nfds_t conns = watch_eofs(lp, p + 3, which);
    int n = poll(p, 3 + conns, timeout);
    if (atomic_load(&lp->stopping)) return false;
    sf_profile_tick();
    /* what the decommit policy, large_cache.ttl and threads.cache_max would
     * give back at some thread's next page or cache operation, for a
     * process whose threads all sleep (at least every SF_PROFILE_TICK_MS) */
    sf_decommit_tick();
    if (n < 0 && errno != EINTR) return mark_lost(lp), false;
    for (int i = 0; i < 3; i++)
        if (p[i].revents & POLLNVAL) return mark_lost(lp), false; /* closed under us */
    if (p[0].revents != 0) return mark_lost(lp), false; /* only stop writes there: replaced */
    if ((p[2].revents & (POLLIN | POLLERR | POLLHUP)) && !accept_some(lp))
        return mark_lost(lp), false;
    sf_sampler_tick(sf_mono_ms());
    sf_delta_tick(sf_mono_ms(), NULL, false);
    lp->mhd->run(lp->daemon);
    if (n > 0) pass_eofs(p + 3, which, conns);
    return true;
}

static void loop_release(struct sf_loop *lp);

static void *loop_main(void *arg) {
    struct sf_loop *lp = arg;
    pthread_setname_np(pthread_self(), "sefer-http");
    while (loop_once(lp)) {
    }
    /* a stop that gave up waiting for this thread left the rest to it */
    if (atomic_fetch_sub(&lp->holders, 1) == 1) {
        sf_lock(&late_lock);
        for (struct sf_loop **at = &late; *at != NULL; at = &(*at)->next_late)
            if (*at == lp) {
                *at = lp->next_late;
                break;
            }
        loop_release(lp);
        sf_unlock(&late_lock);
    }
    return NULL;
}

/* ---- start, stop, fork ------------------------------------------------------------ */

static bool make_wake_pipe(struct sf_loop *lp) {
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    lp->wake_r = own(move_high(p[0], lp->fd_base));
    lp->wake_w = own(move_high(p[1], lp->fd_base));
    return lp->wake_r.fd >= 0 && lp->wake_w.fd >= 0;
}

/* The daemon, created while the low descriptors are held (so that its
 * epoll fd lands high), and its epoll fd. */
static bool make_daemon(struct sf_loop *lp, sf_daemon_fn *create) {
    int held[SF_FD_BASE];
    struct stat nul;
    int n = hold_low_fds(lp->fd_base, held, &nul);
    lp->daemon = create(lp);
    release_low_fds(held, n, &nul);
    if (lp->daemon == NULL) return false;
    const union MHD_DaemonInfo *info = lp->mhd->daemon_info(lp->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    lp->epoll = own(info != NULL ? info->epoll_fd : -1);
    return lp->epoll.fd >= 0;
}

static void loop_free(struct sf_loop *lp) {
    if (lp->daemon != NULL) {
        sf_delta_tick(sf_mono_ms(), lp->daemon, false); /* (libmicrohttpd panics on a suspended connection) */
        lp->mhd->stop_daemon(lp->daemon);
    }
    close_if_ours(&lp->listen);
    close_if_ours(&lp->wake_r);
    close_if_ours(&lp->wake_w);
    free(lp);
}

int sf_loop_start(const sf_mhd_t *mhd, int fd, bool per_peer, _Atomic int *port,
                  sf_daemon_fn *create, char *why, size_t whylen) {
    struct sf_loop *lp = calloc(1, sizeof *lp);
    if (lp == NULL) {
        close(fd);
        snprintf(why, whylen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    for (unsigned i = 0; i < SF_CONN_MAX; i++)
        atomic_init(&lp->conn[i].fd, -1);
    atomic_init(&lp->holders, 2);
    lp->mhd = mhd;
    lp->per_peer = per_peer;
    lp->port = port;
    lp->port_value = atomic_load(port);
    lp->fd_base = pick_fd_base();
    fd = move_high(fd, lp->fd_base);
    lp->listen = own(fd);
    lp->wake_r.fd = lp->wake_w.fd = lp->epoll.fd = -1;
    const char *step = "cannot create the wake-up pipe";
    errno = 0;
    if (lp->listen.fd < 0) close(fd);
    if (lp->listen.fd < 0 || !make_wake_pipe(lp)) goto fail;
    step = "libmicrohttpd could not start a daemon (epoll, external mode)";
    if (!make_daemon(lp, create)) goto fail;
    step = "cannot create the server's thread";
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits: no host signal goes there */
    errno = pthread_create(&lp->thread, NULL, loop_main, lp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (errno != 0) goto fail;
    current = lp;
    return 0;
fail:;
    int err = errno ? errno : EAGAIN;
    snprintf(why, whylen, "%s: %s", step, strerror(err));
    loop_free(lp);
    errno = err;
    return -1;
}

static bool all_ours(const struct sf_loop *lp) {
    if (!still_ours(&lp->listen) || !still_ours(&lp->wake_r) || !still_ours(&lp->wake_w) ||
        !still_ours(&lp->epoll))
        return false;
    for (unsigned i = 0; i < SF_CONN_MAX; i++) {
        int fd = atomic_load(&lp->conn[i].fd);
        if (fd >= 0 && !same_file(fd, lp->conn[i].dev, lp->conn[i].ino)) return false;
    }
    return true;
}

static bool join_within(pthread_t t, unsigned ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    return pthread_timedjoin_np(t, NULL, &until) == 0;
}

/* Closes what is still ours of a daemon we will not touch again. */
static void forget_daemon(struct sf_loop *lp) {
    for (unsigned i = 0; i < SF_CONN_MAX; i++) {
        struct sf_conn *c = &lp->conn[i];
        int fd = atomic_exchange(&c->fd, -1);
        if (fd >= 0 && same_file(fd, c->dev, c->ino)) close(fd);
    }
    close_if_ours(&lp->epoll);
    if (lp->daemon != NULL) sf_delta_tick(sf_mono_ms(), lp->daemon, true); /* (its waiting deltas: dropped) */
    lp->daemon = NULL; /* leaked: libmicrohttpd's state is left as it is */
}

void sf_loop_stop(void) {
    struct sf_loop *lp = current;
    if (lp == NULL) return;
    current = NULL;
    atomic_store(&lp->stopping, true);
    if (still_ours(&lp->wake_w)) {
        char b = 1;
        ssize_t w = write(lp->wake_w.fd, &b, 1);
        (void)w;
    }
    /* exit() called from a request handler: the thread cannot wait for itself */
    /* (a wait of 0 is none: the thread is always left to end on its own) */
    unsigned wait_ms = (unsigned)sf_knob(SF_KNOB_INTROSPECT_STOP_WAIT);
    bool joined = !pthread_equal(pthread_self(), lp->thread) && wait_ms > 0 && join_within(lp->thread, wait_ms);
    if (!joined) {
        /* it is us: leave all of it alone (the process is exiting) */
        if (pthread_equal(pthread_self(), lp->thread)) return;
        /* still running (a loaded machine can keep it off a CPU past the
         * wait): it releases everything itself when it ends, which it does
         * at its next wake-up (stopping is set) */
        pthread_detach(lp->thread);
        sf_lock(&late_lock);
        if (atomic_fetch_sub(&lp->holders, 1) == 1) {
            loop_release(lp); /* it ended meanwhile */
        } else {
            lp->next_late = late;
            late = lp;
        }
        sf_unlock(&late_lock);
        return;
    }
    loop_release(lp);
}

/* Everything of a server whose thread has ended. */
static void loop_release(struct sf_loop *lp) {
    if (atomic_load(&lp->lost) || !all_ours(lp)) forget_daemon(lp);
    loop_free(lp); /* MHD_stop_daemon closes the connections and the epoll fd */
}

bool sf_loop_lost(void) {
    return current != NULL && atomic_load(&current->lost);
}

/* In a fork() child: no thread, the parent's state.  Close our copies of
 * the descriptors (those that are still ours) and forget the rest. */
static void close_copies(struct sf_loop *lp) {
    forget_daemon(lp);
    close_if_ours(&lp->listen);
    close_if_ours(&lp->wake_r);
    close_if_ours(&lp->wake_w);
}

void sf_loop_after_fork_child(void) {
    if (current != NULL) close_copies(current);
    current = NULL;
    for (struct sf_loop *lp = late; lp != NULL; lp = lp->next_late)
        close_copies(lp);
    late = NULL; /* (their memory stays: the threads that owned it are not here) */
    sf_unlock(&late_lock);
}

void sf_loop_fork_prepare(void) { sf_lock(&late_lock); }
void sf_loop_fork_parent(void) { sf_unlock(&late_lock); }
