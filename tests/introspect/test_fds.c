/* test_fds.c - the introspection server and the host's file descriptors,
 * in this process (introspect/loop.c):
 *
 *   - the server's descriptors are out of the low range (at or above 512
 *     when RLIMIT_NOFILE allows it), and none is left below while it starts;
 *   - a host that closes them (closefrom) or dup2()s onto them: the server
 *     notices at once, reports port 0, stops without waiting or closing
 *     anything that is no longer its own (a descriptor the host opened at a
 *     freed number survives the stop), and a new server starts;
 *   - fork() while another thread starts and stops the server: the child
 *     sees the server either running (then it has no server, cannot start
 *     one, and holds none of its descriptors) or not (then it can start
 *     one); never the descriptors without the server (the lock is held
 *     across fork());
 *   - a stop that does not wait for the server's thread (the "late" case,
 *     introspect.stop_wait = 0, as when a loaded machine keeps the thread
 *     off a CPU past the wait): the thread releases the server itself when
 *     it ends, its descriptors closed, and a fork() meanwhile leaves the
 *     child none of them.
 * The same from other programs (closing 3..63, a shell's exec 3>file, exit
 * status) is in test_process.c. */
#include "itest.h"

#include <dirent.h>
#include <sys/resource.h>

/* Open descriptors, as a bitmap over [0, 4096). */
typedef struct {
    uint64_t bits[64];
} fdset_t;

static void list_fds(fdset_t *s)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd != dirfd(d) && fd < 4096)
            s->bits[fd / 64] |= 1ull << (fd % 64);
    }
    closedir(d);
}

/* The descriptors in after and not in before, into fds; their count. */
static int new_fds(const fdset_t *before, const fdset_t *after, int *fds, int max)
{
    int n = 0;
    for (int fd = 0; fd < 4096 && n < max; fd++)
        if ((after->bits[fd / 64] >> (fd % 64) & 1) && !(before->bits[fd / 64] >> (fd % 64) & 1))
            fds[n++] = fd;
    return n;
}

/* How long a wait for something the server does in its own thread may
 * take before the test fails: only a hang guard (a passing run stops
 * waiting as soon as it sees the event), generous because a loaded machine
 * or a sanitizer build can keep that thread off a CPU for seconds. */
#define WAIT_MS 30000

/* The descriptors of a listing, as text for a failure message. */
static const char *fd_text(const int *fds, int n)
{
    static char buf[256];
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at + 12 < sizeof buf; i++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%d", i ? " " : "", fds[i]);
    return n ? buf : "none";
}

static int start_listing(int *fds, int max, int *n)
{
    fdset_t before, after;
    list_fds(&before);
    int port = it_start();
    /* the server's thread opens /proc/self/statm for a moment at each
     * history sample: a listing can catch it, so list again until the
     * server's own four are all there is (a leak stays and still fails) */
    for (uint64_t end = it_now_ms() + WAIT_MS;; usleep(10000)) {
        list_fds(&after);
        *n = new_fds(&before, &after, fds, max);
        if (*n == 4 || it_now_ms() >= end) break;
    }
    ck_assert_msg(*n == 4, "the server's descriptors: expected 4 new ones, after %d ms still %d: %s", WAIT_MS, *n,
                  fd_text(fds, *n));
    return port;
}

static bool wait_port_zero(void)
{
    uint64_t end = it_now_ms() + WAIT_MS;
    while (sefer_introspect_port() != 0 && it_now_ms() < end)
        usleep(10000);
    return sefer_introspect_port() == 0;
}

/* Whether a thread named `name` is alive in this process. */
static bool thread_alive(const char *name) { return it_thread_named(name, NULL, NULL); }

/* The "high" case (its own meson test, introspect-fds-high) needs room for
 * descriptors at 512 and above: the server moves its own there only when
 * RLIMIT_NOFILE allows 1024.  The soft limit is raised to the hard one if
 * that is enough (the test processes are forked after this). */
static const char *high_why_not(void)
{
    static char why[128];
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return "getrlimit(RLIMIT_NOFILE) failed";
    if (r.rlim_cur < 1024 && r.rlim_max >= 1024) {
        r.rlim_cur = r.rlim_max < 4096 ? r.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &r);
        getrlimit(RLIMIT_NOFILE, &r);
    }
    if (r.rlim_cur >= 1024)
        return NULL;
    snprintf(why, sizeof why, "RLIMIT_NOFILE is %llu (hard %llu): the server keeps its descriptors low",
             (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max);
    return why;
}

START_TEST(test_descriptors_live_high)
{
    int fds[16], n;
    int port = start_listing(fds, 16, &n); /* listening socket, wake-up pipe, libmicrohttpd's epoll */
    for (int i = 0; i < n; i++)
        ck_assert_msg(fds[i] >= 512, "the server holds fd %d", fds[i]);
    /* a connection's socket too: nothing new below 512 but our own client
     * (a request left unfinished, so that the server keeps the connection) */
    fdset_t before, after;
    list_fds(&before);
    int c = it_connect(port);
    ck_assert_int_ge(c, 0);
    const char part[] = "GET /healthz HTTP/1.1\r\n";
    it_send(c, part, sizeof part - 1);
    /* wait for the state where the server holds the connection: besides
     * our client, exactly one new descriptor, the server's socket at 512 or
     * above.  On the way a listing can catch our client alone (not
     * accepted yet), the accepted socket still at the lowest free number
     * (the server accepts there and then moves it above 512), both copies
     * for a moment, or the history sampler's /proc/self/statm; a server
     * that kept the connection low never gets there, and fails with what
     * was seen last.  (Our client is left out by number, not counted as
     * new: `before` may have caught the sampler's statm at the number the
     * client then got, and the client then looked old; a CI run of the
     * package's tests failed so, with "the new descriptors are none".) */
    int added[16], k = 0;
    bool held_high = false;
    for (uint64_t end = it_now_ms() + WAIT_MS; !held_high && it_now_ms() < end; usleep(10000)) {
        list_fds(&after);
        k = new_fds(&before, &after, added, 16);
        int server = 0, other = 0;
        for (int i = 0; i < k; i++) {
            if (added[i] == c) continue;
            if (added[i] >= 512) server++;
            else other++;
        }
        held_high = server == 1 && other == 0;
    }
    ck_assert_msg(held_high,
                  "after %d ms the new descriptors are %s (our client: %d): not the client and one at 512 or above",
                  WAIT_MS, fd_text(added, k), c);
    close(c);
    sefer_introspect_stop();
}
END_TEST

/* closefrom(), or dup2() onto each: the server is lost, says port 0, and
 * its stop neither waits nor closes what is now the host's. */
static void lose_server(bool dup_over)
{
    int fds[16], n;
    int port = start_listing(fds, 16, &n);
    /* the server's thread, once it has named itself (first thing it does):
     * the look for it below can see it */
    for (uint64_t end = it_now_ms() + WAIT_MS; !thread_alive("sefer-http") && it_now_ms() < end;)
        usleep(10000);
    ck_assert_msg(thread_alive("sefer-http"), "after %d ms no thread is named sefer-http while serving", WAIT_MS);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int i = 0; i < n; i++) {
        if (dup_over)
            ck_assert_int_eq(dup2(nul, fds[i]), fds[i]);
        else
            close(fds[i]);
    }
    ck_assert_msg(wait_port_zero(), "after %d ms the server has not noticed: port %d", WAIT_MS,
                  sefer_introspect_port());
    /* "Stop does not wait": the only thing a stop waits for is the server's
     * thread (joined for at most 2 s, introspect/loop.c), and here it cannot
     * wake it (the wake-up pipe is no longer the server's).  So the thread
     * must end by itself once it has seen the loss; it is seen to, with no
     * clock but a hang guard, and stop then joins a thread that has ended.
     * (A thread that needed the stop to end would still be here after
     * WAIT_MS; this used to be timed, stop < 500 ms, which a loaded machine
     * could fail.) */
    uint64_t end = it_now_ms() + WAIT_MS;
    while (thread_alive("sefer-http") && it_now_ms() < end)
        usleep(10000);
    ck_assert_msg(!thread_alive("sefer-http"), "the lost server's thread is still running after %d ms", WAIT_MS);
    int mine = -1;
    if (!dup_over) /* the host opens something at a number the server had */
        ck_assert_int_eq(mine = dup2(nul, fds[0]), fds[0]);
    sefer_introspect_stop();
    for (int i = 0; i < n; i++)
        if (dup_over || fds[i] == mine)
            ck_assert_msg(fcntl(fds[i], F_GETFD) >= 0, "stop closed the host's fd %d", fds[i]);
    for (int i = 0; i < n; i++)
        if (dup_over || fds[i] == mine)
            close(fds[i]);
    close(nul);
    ck_assert_int_eq(it_connect(port), -1);
    int again = it_start(); /* and the process can serve again */
    cJSON *ok = it_json(again, "/healthz");
    cJSON_Delete(ok);
    sefer_introspect_stop();
}

START_TEST(test_closed_under_the_server)
{
    lose_server(false);
}
END_TEST

START_TEST(test_replaced_under_the_server)
{
    lose_server(true);
}
END_TEST

/* A start with the server lost and never stopped: it cleans up and serves. */
START_TEST(test_start_after_loss)
{
    int fds[16], n;
    start_listing(fds, 16, &n);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    ck_assert_msg(wait_port_zero(), "after %d ms the server has not noticed: port %d", WAIT_MS,
                  sefer_introspect_port());
    int port = it_start();
    cJSON *ok = it_json(port, "/healthz");
    cJSON_Delete(ok);
    sefer_introspect_stop();
}
END_TEST

static atomic_bool churn_stop;

static void *start_stop(void *arg)
{
    (void)arg;
    while (!atomic_load(&churn_stop)) {
        if (sefer_introspect_start("127.0.0.1:0") > 0)
            sefer_introspect_stop();
        /* (a pause between rounds: the lock a start and a stop hold is not
         * fair, and on an idle machine this loop took it back before the
         * woken fork() could, round after round; the test ran past its
         * 120 s alone, in 0.3 s beside two busy processes) */
        usleep(100);
    }
    return NULL;
}

/* In the child: 0 if its state is consistent, else a bit per problem. */
static int child_state(void)
{
    fdset_t now;
    list_fds(&now); /* no ck_assert below: another thread may hold check's lock */
    int high = 0;
    for (int fd = 512; fd < 4096; fd++)
        high += (int)(now.bits[fd / 64] >> (fd % 64) & 1);
    int started = sefer_introspect_start("127.0.0.1:0");
    int bad = sefer_introspect_port() != (started > 0 ? started : 0);
    bad |= (high != 0) << 1; /* the server's descriptors came along */
    bad |= (started < 0 && errno != EPERM) << 2;
    if (started > 0) {
        int c = it_connect_t(started, WAIT_MS);
        bad |= (c < 0) << 3;
        close(c);
        sefer_introspect_stop();
    }
    return bad;
}

START_TEST(test_fork_during_start_stop)
{
    /* (in the high case: the server's descriptors are told from others by number) */
    pthread_t t;
    pthread_create(&t, NULL, start_stop, NULL);
    for (int i = 0; i < 60; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* a deadlock kills the child: the test fails naming the fork
             * (before st_hang_guard, check's inherited handler killed the
             * whole test, "signal 9", when the child's first start waited
             * for a lock a stopped server's thread held: test_fork_locks.c) */
            st_hang_guard(WAIT_MS / 1000);
            _exit(child_state());
        }
        int status = 0;
        waitpid(pid, &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: child %s", i,
                      st_describe_status(status));
        usleep(2000);
    }
    atomic_store(&churn_stop, true);
    pthread_join(t, NULL);
}
END_TEST

/* The "late" case (introspect-fds-late): the stops below do not wait for
 * the server's thread.  Needs the knob at 0 and the high descriptors (so
 * that a child's listing tells the server's from others by number). */
static const char *late_why_not(void)
{
    const char *v = getenv("SEFER_INTROSPECT_STOP_WAIT");
    if (v == NULL || strcmp(v, "0") != 0)
        return "run with SEFER_INTROSPECT_STOP_WAIT=0 (meson test introspect-fds-late)";
    return high_why_not();
}

/* No stop waits for the thread (a wait of 0 is none: every stop takes the
 * late path, whether the thread has ended by then or not); once it has
 * ended, none of the server's descriptors is open. */
START_TEST(test_late_stop_releases)
{
    for (int round = 0; round < 20; round++) {
        int fds[16], n;
        start_listing(fds, 16, &n);
        for (uint64_t end = it_now_ms() + WAIT_MS; !thread_alive("sefer-http") && it_now_ms() < end;)
            usleep(1000);
        sefer_introspect_stop();
        uint64_t end = it_now_ms() + WAIT_MS;
        while (thread_alive("sefer-http") && it_now_ms() < end)
            usleep(1000);
        ck_assert_msg(!thread_alive("sefer-http"), "round %d: the stopped server's thread still runs after %d ms",
                      round, WAIT_MS);
        /* (the thread's last act is the release: it may still be closing
         * when its name is gone from /proc; wait for the descriptors) */
        int open_fds = n;
        for (end = it_now_ms() + WAIT_MS; open_fds > 0 && it_now_ms() < end; usleep(1000)) {
            open_fds = 0;
            for (int i = 0; i < n; i++)
                open_fds += fcntl(fds[i], F_GETFD) >= 0;
        }
        ck_assert_msg(open_fds == 0, "round %d: %d of the server's descriptors (%s) still open after its thread ended",
                      round, open_fds, fd_text(fds, n));
    }
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("introspect-fds");
    /* (the case timeouts are hang guards too: above the WAIT_MS waits) */
    TCase *tc = tcase_create("fds");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_closed_under_the_server);
    tcase_add_test(tc, test_replaced_under_the_server);
    tcase_add_test(tc, test_start_after_loss);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "high", high_why_not);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_descriptors_live_high);
    tcase_add_test(tc, test_fork_during_start_stop);
    tc = st_optional_case(s, "late", late_why_not);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_late_stop_releases);
    tcase_add_test(tc, test_fork_during_start_stop);
    return st_main(s, argc, argv);
}
