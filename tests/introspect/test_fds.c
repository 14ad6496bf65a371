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
 *     across fork()).
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

static int start_listing(int *fds, int max, int *n)
{
    fdset_t before, after;
    list_fds(&before);
    int port = it_start();
    /* the server's thread opens /proc/self/statm for a moment at each
     * history sample: a listing can catch it, so list again until the
     * server's own four are all there is (a leak stays and still fails) */
    for (uint64_t end = it_now_ms() + 2000;; usleep(10000)) {
        list_fds(&after);
        *n = new_fds(&before, &after, fds, max);
        if (*n == 4 || it_now_ms() >= end) break;
    }
    return port;
}

static bool wait_port_zero(int ms)
{
    uint64_t end = it_now_ms() + (uint64_t)ms;
    while (sefer_introspect_port() != 0 && it_now_ms() < end)
        usleep(10000);
    return sefer_introspect_port() == 0;
}

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
    int port = start_listing(fds, 16, &n);
    ck_assert_int_eq(n, 4); /* listening socket, wake-up pipe, libmicrohttpd's epoll */
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
    /* wait for exactly two: the server accepts at the lowest free number and
     * then moves the socket above 512, so a listing can catch both for a moment */
    int added[16], k = 0;
    for (uint64_t end = it_now_ms() + 2000; k != 2 && it_now_ms() < end; usleep(10000)) {
        list_fds(&after);
        k = new_fds(&before, &after, added, 16);
    }
    ck_assert_int_eq(k, 2);
    for (int i = 0; i < k; i++)
        ck_assert_msg(added[i] == c || added[i] >= 512, "the server's connection is fd %d", added[i]);
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
    ck_assert_int_eq(n, 4);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int i = 0; i < n; i++) {
        if (dup_over)
            ck_assert_int_eq(dup2(nul, fds[i]), fds[i]);
        else
            close(fds[i]);
    }
    ck_assert_msg(wait_port_zero(2000), "the server did not notice: port %d", sefer_introspect_port());
    int mine = -1;
    if (!dup_over) /* the host opens something at a number the server had */
        ck_assert_int_eq(mine = dup2(nul, fds[0]), fds[0]);
    uint64_t t0 = it_now_ms();
    sefer_introspect_stop();
    ck_assert_uint_lt(it_now_ms() - t0, 500);
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
    ck_assert(wait_port_zero(2000));
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
        int c = it_connect_t(started, 2000);
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
            alarm(10);
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

int main(int argc, char **argv)
{
    Suite *s = suite_create("introspect-fds");
    TCase *tc = tcase_create("fds");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_closed_under_the_server);
    tcase_add_test(tc, test_replaced_under_the_server);
    tcase_add_test(tc, test_start_after_loss);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "high", high_why_not);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_descriptors_live_high);
    tcase_add_test(tc, test_fork_during_start_stop);
    return st_main(s, argc, argv);
}
