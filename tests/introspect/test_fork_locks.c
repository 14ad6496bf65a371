/* test_fork_locks.c - fork() while another thread holds one of the locks
 * the introspection server's thread takes as it runs (introspect/server.c's
 * fork handler, and the after-fork functions of sampler.c, profile_views.c
 * and symbols.c), or the phases' lock (lib/phase.c, held across the fork).  Only the forking thread exists in the child, so a lock that
 * another thread held at the fork stays held there for ever unless the
 * child starts it afresh; the child must then be able to start a server and
 * be served in full.  Each case holds the lock itself, across the fork, so
 * the state is there every time, not by chance:
 *
 *   - the history's lock (a sample being added, a /history reply being
 *     written): the child's first start takes it;
 *   - the symbol lock (a stack being named): the child names one itself;
 *   - the sites view's history lock, held by a server's thread that waits
 *     for the symbol lock while a stop that does not wait for it
 *     (introspect.stop_wait = 0, as when a loaded machine keeps the thread
 *     off a CPU past the wait) has left it running: the child starts a
 *     server and GETs /profile/sites, which takes both.
 * Before the child handlers, the first hung 1 in about 1000 forks right
 * after such a stop (introspect-fds-late, killed after 30 s); each case
 * here hung every time.
 *
 * Linked with libsefer.a, to take the internal locks as the server does.
 * A hang is caught by a guard (SIGALRM in the child), never judged by time. */
#include "itest.h"

#include "../../introspect/introspect.h"
#include "../../introspect/symbols.h"

#include <dirent.h>
#include <pthread.h>

/* Hang guards only (a passing run never waits for them): the child's, and
 * a wait in the parent for the server's thread to get somewhere. */
#define CHILD_GUARD_S 100
#define PHASE_FORKS 300
#define WAIT_MS 60000

/* ---- in the child: no ck_assert (check's lock) -------------------------- */

/* The status of GET path from a server on port (-1: no connection or no
 * status line).  No ck_assert (in a child, or in a thread that is not the
 * test's) and no timeout of its own: the child's hang guard is the one. */
static int raw_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[512];
    int status = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        int n = snprintf(buf, sizeof buf, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
        size_t got = 0;
        if (it_send(fd, buf, (size_t)n)) {
            for (ssize_t r; got + 1 < sizeof buf && (r = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0;)
                got += (size_t)r;
        }
        buf[got] = '\0';
        if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
            status = -1;
    }
    close(fd);
    return status;
}

/* A server in the child, and GET path from it: 0, or a bit per problem. */
static int child_serves(const char *path)
{
    int port = sefer_introspect_start("127.0.0.1:0");
    if (port <= 0)
        return 1;
    int bad = (raw_get(port, "/healthz") != 200) << 1;
    bad |= (raw_get(port, path) != 200) << 2;
    sefer_introspect_stop();
    return bad;
}

/* fork(): the child runs fn under a hang guard; the parent, once fork()
 * has returned, calls release, then waits for the child.  The child's wait
 * status. */
static int fork_while_held(int (*fn)(void), void (*release)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        st_hang_guard(CHILD_GUARD_S);
        _exit(fn());
    }
    ck_assert_int_gt(pid, 0);
    release();
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* A thread that takes a lock, says so, and holds it until told. */
typedef struct {
    void (*take)(void);
    void (*give)(void);
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool held, release;
} holder_t;

static holder_t holder = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *hold(void *arg)
{
    (void)arg;
    holder.take();
    pthread_mutex_lock(&holder.m);
    holder.held = true;
    pthread_cond_broadcast(&holder.cv);
    while (!holder.release)
        pthread_cond_wait(&holder.cv, &holder.m);
    pthread_mutex_unlock(&holder.m);
    holder.give();
    return NULL;
}

static pthread_t hold_start(void (*take)(void), void (*give)(void))
{
    holder.take = take;
    holder.give = give;
    holder.held = holder.release = false;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, hold, NULL), 0);
    pthread_mutex_lock(&holder.m);
    while (!holder.held)
        pthread_cond_wait(&holder.cv, &holder.m);
    pthread_mutex_unlock(&holder.m);
    return t;
}

static void hold_release(void)
{
    pthread_mutex_lock(&holder.m);
    holder.release = true;
    pthread_cond_broadcast(&holder.cv);
    pthread_mutex_unlock(&holder.m);
}

/* A thread takes a lock and holds it across a fork(); the child runs
 * child; the lock is given back once fork() has returned.  The child's
 * wait status. */
static int fork_holding(void (*take)(void), void (*give)(void), int (*child)(void))
{
    pthread_t t = hold_start(take, give);
    int status = fork_while_held(child, hold_release);
    pthread_join(t, NULL);
    return status;
}

/* This process's threads. */
static int task_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The fork handlers are installed by the first start: one, stopped at
 * once.  With stop_wait 0 its thread, perhaps not even running yet, ends by
 * itself; it is waited for (by count: it may not have named itself), so
 * that no thread of it is left for the cases to see. */
static void install_handlers(void)
{
    int before = task_count();
    it_start();
    sefer_introspect_stop();
    for (uint64_t end = it_now_ms() + WAIT_MS; task_count() > before && it_now_ms() < end;)
        usleep(1000);
    ck_assert_msg(task_count() == before, "after %d ms a stopped server's thread still runs (%d threads, %d before)",
                  WAIT_MS, task_count(), before);
}

/* ---- the history's lock ----------------------------------------------------- */

static void history_take(void)
{
    sf_sampler_info_t info;
    sf_sampler_lock(&info); /* as a /history reply does while it writes */
}

static int child_history(void) { return child_serves("/history"); }

START_TEST(test_history_lock_held)
{
    install_handlers();
    int status = fork_holding(history_take, sf_sampler_unlock, child_history);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "forked while the history was locked, the child (start, /healthz, /history): %s",
                  st_describe_status(status));
    /* and in the parent, the history is still there */
    int port = it_start();
    cJSON *h = it_json(port, "/history");
    cJSON_Delete(h);
    sefer_introspect_stop();
}
END_TEST

/* ---- the symbol lock -------------------------------------------------------- */

static int child_names(void)
{
    sf_sym_begin();
    const sf_sym_t *s = sf_sym_lookup((uintptr_t)&child_names);
    int bad = s == NULL || s->function == NULL || strstr(s->function, "child_names") == NULL;
    sf_sym_end();
    return bad | child_serves("/profile/stacks") << 3;
}

START_TEST(test_symbol_lock_held)
{
    install_handlers();
    int status = fork_holding(sf_sym_begin, sf_sym_end, child_names);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "forked while a stack was being named, the child (a name, then a server's /profile/stacks): %s",
                  st_describe_status(status));
}
END_TEST

/* ---- a phase's lock ------------------------------------------------------------ */

/* sefer_phase_begin and _end hold the phases' lock while they wait for the
 * allocator's locks, which fork()'s prepare handler holds: the lock is held
 * across the fork too (by handlers of lib/phase.c's), or a child could find
 * it held by a thread that is not there.  Not forced every time like the cases above
 * (the test cannot hold a lock that the fork then waits for): forks while
 * another thread opens and ends phases without a pause; before the lock
 * was held across, the second fork's child hung, in each of three runs. */
static atomic_bool phases_stop;

static void *phase_churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&phases_stop)) {
        if (sefer_phase_begin("churn") == 0) {
            struct sefer_phase ph = {.size = sizeof ph};
            sefer_phase_end(&ph);
        }
    }
    return NULL;
}

static int child_phase(void)
{
    struct sefer_phase ph = {.size = sizeof ph}; /* (the caller says how much it takes) */
    if (sefer_phase_begin("child") != 0)
        return 1;
    void *p = malloc(100);
    free(p);
    return (sefer_phase_end(&ph) != 0 || ph.allocs < 1) << 1;
}

static void nothing(void) {}

START_TEST(test_fork_during_phases)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, phase_churn, NULL), 0);
    for (int i = 0; i < PHASE_FORKS; i++) {
        int status = fork_while_held(child_phase, nothing);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d while phases open and end: child %s",
                      i, st_describe_status(status));
    }
    atomic_store(&phases_stop, true);
    pthread_join(t, NULL);
}
END_TEST

/* ---- a late server's thread in the sites view -------------------------------- */

/* A task's system call and first argument (/proc/self/task/TID/syscall);
 * false if it is not in one. */
static bool task_syscall(const char *tid, long *nr, unsigned long *arg0)
{
    char path[320], line[256] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/syscall", tid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    bool ok = fgets(line, sizeof line, f) != NULL && sscanf(line, "%ld %lx", nr, arg0) == 2;
    fclose(f);
    return ok;
}

static bool in_futex_on(const char *tid, void *word)
{
    long nr;
    unsigned long arg0;
    return task_syscall(tid, &nr, &arg0) && nr == SYS_futex && arg0 == *(unsigned long *)word;
}

/* Whether a thread named sefer-http waits in futex(2) on that word. */
static bool server_thread_waits_on(unsigned long word)
{
    return it_thread_named("sefer-http", in_futex_on, &word);
}

/* A thread that waits for the symbol lock, so that the test learns the
 * lock's address (the word its futex(2) waits on) from outside. */
static _Atomic int probe_tid;

static void *probe(void *arg)
{
    (void)arg;
    atomic_store(&probe_tid, it_tid());
    sf_sym_begin();
    sf_sym_end();
    return NULL;
}

static unsigned long symbol_lock_word(pthread_t *t)
{
    atomic_store(&probe_tid, 0);
    ck_assert_int_eq(pthread_create(t, NULL, probe, NULL), 0);
    char tid[16];
    long nr = 0;
    unsigned long word = 0;
    for (uint64_t end = it_now_ms() + WAIT_MS; it_now_ms() < end; usleep(1000)) {
        snprintf(tid, sizeof tid, "%d", atomic_load(&probe_tid));
        if (atomic_load(&probe_tid) != 0 && task_syscall(tid, &nr, &word) && nr == SYS_futex)
            return word;
    }
    ck_abort_msg("after %d ms the probe does not wait for the symbol lock", WAIT_MS);
    return 0;
}

static int sites_port;

static void *get_sites(void *arg)
{
    (void)arg;
    raw_get(sites_port, "/profile/sites"); /* answered or not: the server is stopped meanwhile */
    return NULL;
}

static int child_sites(void) { return child_serves("/profile/sites"); }

static void *keep; /* a sampled block or two, so the sites view has sites */

START_TEST(test_late_thread_in_sites_view)
{
    install_handlers(); /* (its thread gone: only the next server's is seen below) */
    keep = malloc(4 << 20);
    memset(keep, 1, 4 << 20);
    pthread_t t = hold_start(sf_sym_begin, sf_sym_end), p;
    unsigned long word = symbol_lock_word(&p);
    sites_port = it_start();
    pthread_t client;
    ck_assert_int_eq(pthread_create(&client, NULL, get_sites, NULL), 0);
    /* the server's thread waits for the symbol lock in the sites view,
     * which holds its history lock there (a hang guard only: it gets
     * there as soon as it has a CPU) */
    bool waits = false;
    for (uint64_t end = it_now_ms() + WAIT_MS; !(waits = server_thread_waits_on(word)) && it_now_ms() < end;)
        usleep(1000);
    ck_assert_msg(waits, "after %d ms the server's thread does not wait for the symbol lock", WAIT_MS);
    sefer_introspect_stop(); /* stop_wait 0: returns, the thread stays blocked */
    int status = fork_while_held(child_sites, hold_release);
    pthread_join(t, NULL);
    pthread_join(p, NULL);
    pthread_join(client, NULL);
    free(keep);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "forked while a stopped server's thread held the sites view's locks, the child "
                  "(start, /healthz, /profile/sites): %s",
                  st_describe_status(status));
}
END_TEST

static const char *late_why_not(void)
{
    const char *v = getenv("SEFER_INTROSPECT_STOP_WAIT");
    if (v == NULL || strcmp(v, "0") != 0)
        return "run with SEFER_INTROSPECT_STOP_WAIT=0 (meson test introspect-fork-locks-late)";
    v = getenv("SEFER_PROFILE_SAMPLE_BYTES");
    if (v == NULL || strcmp(v, "0") == 0)
        return "run with the heap profile on (meson test introspect-fork-locks-late)";
    return NULL;
}

int main(int argc, char **argv)
{
    Suite *s = suite_create("introspect-fork-locks");
    TCase *tc = tcase_create("held");
    tcase_set_timeout(tc, 240); /* a hang guard, above the child's */
    tcase_add_test(tc, test_history_lock_held);
    tcase_add_test(tc, test_symbol_lock_held);
    tcase_add_test(tc, test_fork_during_phases);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "late", late_why_not);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_late_thread_in_sites_view);
    return st_main(s, argc, argv);
}
