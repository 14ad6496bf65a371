/* test_process.c - the introspection server across processes:
 *
 *   - a program run with LD_PRELOAD=libsefer.so and SEFER_INTROSPECT_ENABLED=1
 *     (tests/introspect/host.c) serves from its start: the test reads its
 *     heaps (thread names included) and figures;
 *   - the same from a SEFER_CONFIG file;
 *   - a taken port: one line on stderr, no server, the program runs on;
 *   - "HOST:PORT+": the next free port, its URL printed once;
 *   - a non-loopback address without a token: refused, the program runs on;
 *   - a child that inherits the environment does not take the parent's port;
 *   - fork() while the server runs and a client polls it: the child has no
 *     server, allocates at once, nothing deadlocks; the parent keeps serving;
 *   - build/tools/sefer run and build/tools/sefer stat;
 *   - hosts that close or reuse descriptors (closefrom, dup2 onto every
 *     descriptor, close 3..63, dup2 onto 3 and 4, a shell's `exec 3>file`
 *     under sefer run): the program ends at once with its own status, and
 *     the server, out of the low range, keeps serving where it can;
 *   - a host at its descriptor limit: the server does not spin, and answers
 *     the waiting client once descriptors are free again;
 *   - under sefer run, children of the program stay silent on a fixed port
 *     (SEFER_INTROSPECT_PID) and take their own port with '+';
 *   - a process that finds the port taken does not load libmicrohttpd.
 *
 * Paths come from meson: SEFER_TEST_LIB (libsefer.so), SEFER_TEST_HOST,
 * SEFER_TEST_CLI. */
#include "itest.h"

static const char *env_path(const char *name)
{
    const char *v = getenv(name);
    ck_assert_msg(v != NULL && access(v, R_OK) == 0, "%s not set or missing (run through meson)", name);
    return v;
}

static char preload[4200];

static const char *preload_var(void)
{
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", env_path("SEFER_TEST_LIB"));
    return preload;
}

/* Listens on a free loopback port (the "other process" holding it). */
static int hold_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static void spawn_host(it_proc_t *p, const char *const env[], const char *const args[])
{
    char *argv[12];
    int a = 0;
    argv[a++] = (char *)env_path("SEFER_TEST_HOST");
    for (int i = 0; args && args[i] && a < 11; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    it_spawn(p, argv, env);
}

static char host_out[4096]; /* the host's stdout up to "ready" */
static const char *host_what = ""; /* what the host was asked to do, for the failure message */

/* Waits for the host's "ready".  If its stdout ends first, the failure
 * says how the host ended and all it wrote to stderr (read to its end,
 * the host given 5 s to go: only on the failure's path), where the first
 * such failure (once, in CI, --fds with UBSan) said only its first line. */
static void wait_ready(it_proc_t *p)
{
    size_t len = 0;
    if (it_read_until(p->out, host_out, sizeof host_out, &len, "ready\n", IT_WAIT_MS))
        return;
    int status = it_finish(p, 5);
    ck_abort_msg("the host%s did not get ready: stdout \"%s\", %s; stderr \"%s\"", host_what, host_out,
                 st_describe_status(status), p->errbuf);
}

/* CPU time (user + system) of process pid so far, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* fields 14 and 15 follow "(comm) S" */
    long utime = 0, stime = 0;
    ck_assert(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) == 2);
    return utime + stime;
}

/* CPU time the process takes over ms milliseconds, in seconds. */
static double cpu_over(pid_t pid, int ms)
{
    long t0 = cpu_ticks(pid);
    usleep((useconds_t)ms * 1000);
    return (double)(cpu_ticks(pid) - t0) / (double)sysconf(_SC_CLK_TCK);
}

static void finish_ok(it_proc_t *p)
{
    int status = it_finish(p, IT_WAIT_MS / 1000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "host %s; stderr: %s",
                  st_describe_status(status), p->errbuf);
}

static bool has_thread(const cJSON *heaps, const char *name)
{
    for (const cJSON *h = it_item(heaps, "heaps")->child; h; h = h->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "thread");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return true;
    }
    return false;
}

START_TEST(test_preloaded_program_serves)
{
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1",
                         "SEFER_INTROSPECT_LISTEN=127.0.0.1:0", NULL};
    const char *args[] = {"--alloc", "1000", "4096", "--threads", "2", "--maps", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    int port = it_wait_url(&p);
    wait_ready(&p);
    ck_assert_msg(strstr(host_out, "mhd 1\n") != NULL, "stdout: %s", host_out);
    cJSON *heaps = it_json(port, "/heaps");
    ck_assert(has_thread(heaps, "it-host") && has_thread(heaps, "it-worker-0") &&
              has_thread(heaps, "it-worker-1"));
    uint64_t host_bytes = 0;
    for (const cJSON *h = it_item(heaps, "heaps")->child; h; h = h->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, "thread"), "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, "it-host") == 0)
            host_bytes = it_u64(h, "bytes_in_blocks");
    }
    ck_assert_uint_ge(host_bytes, 1000 * 4096);
    cJSON_Delete(heaps);
    cJSON *st = it_json(port, "/stats");
    ck_assert_uint_ge(it_u64(st, "bytes_in_blocks"), 1000 * 4096 + 2 * 100 * 100);
    ck_assert_uint_ge(it_u64(st, "heaps_live"), 4);
    cJSON_Delete(st);
    cJSON *segs = it_json(port, "/segments");
    ck_assert_uint_ge(it_u64(segs, "total"), 2);
    cJSON_Delete(segs);
    finish_ok(&p);
    ck_assert_int_eq(it_count(p.errbuf, "sefer: introspection:"), 1);
}
END_TEST

START_TEST(test_config_file_enables_server)
{
    char path[] = "/tmp/sefer-introspect-XXXXXX";
    int fd = mkstemp(path);
    const char *toml = "[introspect]\nenabled = true\nlisten = \"127.0.0.1:0\"\n";
    ck_assert(write(fd, toml, strlen(toml)) == (ssize_t)strlen(toml));
    close(fd);
    char config[128];
    snprintf(config, sizeof config, "SEFER_CONFIG=%s", path);
    const char *env[] = {preload_var(), config, NULL};
    it_proc_t p;
    spawn_host(&p, env, NULL);
    int port = it_wait_url(&p);
    wait_ready(&p);
    cJSON *c = it_json(port, "/config");
    for (const cJSON *k = it_item(c, "knobs")->child; k; k = k->next)
        if (strcmp(it_str(k, "name"), "introspect.listen") == 0) {
            ck_assert_str_eq(it_str(k, "value"), "127.0.0.1:0");
            ck_assert_str_eq(it_str(k, "source"), "file");
        }
    cJSON_Delete(c);
    finish_ok(&p);
    unlink(path);
}
END_TEST

START_TEST(test_port_taken_says_so_once)
{
    int port;
    int blocker = hold_port(&port);
    char listen[64];
    snprintf(listen, sizeof listen, "SEFER_INTROSPECT_LISTEN=127.0.0.1:%d", port);
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1", listen, NULL};
    const char *args[] = {"--alloc", "10", "100", "--maps", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    wait_ready(&p);
    /* the port is tried before libmicrohttpd (and GnuTLS...) is loaded */
    ck_assert_msg(strstr(host_out, "mhd 0\n") != NULL, "stdout: %s", host_out);
    finish_ok(&p);
    close(blocker);
    ck_assert_msg(it_count(p.errbuf, "is in use") == 1, "stderr: %s", p.errbuf);
    ck_assert_int_eq(it_count(p.errbuf, "no server in this process"), 1);
    ck_assert_int_eq(it_count(p.errbuf, "sefer:"), 1);
}
END_TEST

START_TEST(test_plus_takes_next_free_port)
{
    int port;
    int blocker = hold_port(&port);
    char listen[64];
    snprintf(listen, sizeof listen, "SEFER_INTROSPECT_LISTEN=127.0.0.1:%d+", port);
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1", listen, NULL};
    it_proc_t p;
    spawn_host(&p, env, NULL);
    int got = it_wait_url(&p);
    wait_ready(&p);
    ck_assert_int_gt(got, port);
    ck_assert_int_le(got, port + 63);
    cJSON *ok = it_json(got, "/healthz");
    cJSON_Delete(ok);
    finish_ok(&p);
    close(blocker);
    ck_assert_int_eq(it_count(p.errbuf, "sefer: introspection:"), 1);
}
END_TEST

START_TEST(test_non_loopback_refused_without_token)
{
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1",
                         "SEFER_INTROSPECT_LISTEN=0.0.0.0:0", NULL};
    it_proc_t p;
    spawn_host(&p, env, NULL);
    wait_ready(&p);
    finish_ok(&p);
    ck_assert_msg(strstr(p.errbuf, "refusing to listen on 0.0.0.0") != NULL, "stderr: %s", p.errbuf);
    ck_assert_ptr_nonnull(strstr(p.errbuf, "introspect.token"));
    ck_assert_ptr_null(strstr(p.errbuf, "http://"));
}
END_TEST

START_TEST(test_child_does_not_fight_for_the_port)
{
    int port = it_free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "SEFER_INTROSPECT_LISTEN=127.0.0.1:%d", port);
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1", listen, NULL};
    const char *args[] = {"--spawn-child", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    char out[4096];
    size_t len = 0;
    ck_assert(it_read_until(p.out, out, sizeof out, &len, "ready\n", IT_WAIT_MS));
    ck_assert_msg(strstr(out, "child-exit 0\n") != NULL, "stdout: %s", out);
    cJSON *ok = it_json(port, "/healthz"); /* the parent still serves */
    cJSON_Delete(ok);
    finish_ok(&p);
    ck_assert_msg(it_count(p.errbuf, "is in use") == 1, "stderr: %s", p.errbuf);
}
END_TEST

/* ---- fork in a serving process ------------------------------------------------ */

static atomic_bool stop_client;
static atomic_long client_requests;
static int serving_port;

static void *poll_server(void *arg)
{
    (void)arg;
    static const char *const paths[] = {"/segments", "/heaps", "/stats", "/rings", "/metrics"};
    for (unsigned i = 0; !atomic_load(&stop_client); i++) {
        it_resp_t r;
        it_get(serving_port, paths[i % 5], &r);
        if (r.status == 200)
            atomic_fetch_add(&client_requests, 1);
        it_free(&r);
    }
    return NULL;
}

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_client)) {
        void *p[64];
        for (int i = 0; i < 64; i++)
            p[i] = malloc(16 + i * 40);
        for (int i = 0; i < 64; i++)
            free(p[i]);
    }
    return NULL;
}

START_TEST(test_fork_while_serving)
{
    serving_port = it_start();
    pthread_t client, worker;
    pthread_create(&client, NULL, poll_server, NULL);
    pthread_create(&worker, NULL, churn, NULL);
    for (int i = 0; i < 20; i++) {
        int hold[2] = {-1, -1}; /* the first child lives until the parent closes hold[1] */
        if (i == 0)
            ck_assert_int_eq(pipe2(hold, O_CLOEXEC), 0);
        pid_t pid = fork();
        if (pid == 0) { /* no ck_assert here: the client thread may hold check's lock */
            st_hang_guard(2 * IT_WAIT_MS / 1000); /* a deadlock kills the child: the test fails */
            int bad = 0;
            bad |= sefer_introspect_port() != 0;
            bad |= (sefer_introspect_start("127.0.0.1:0") != -1 || errno != EPERM) << 1;
            void *p[1000];
            for (int k = 0; k < 1000; k++)
                p[k] = malloc(k + 1);
            for (int k = 0; k < 1000; k++)
                free(p[k]);
            struct sefer_stats s = {.size = sizeof s};
            bad |= (sefer_stats_get(&s, sizeof s) != 0) << 2;
            if (i == 0) { /* a child that lives on, without exec, until the parent has looked */
                char c;
                close(hold[1]);
                while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
                }
            }
            _exit(bad);
        }
        ck_assert_int_gt(pid, 0);
        int status = 0;
        bool reaped = false;
        if (i == 0) {
            /* the parent's connections are not held open by the child: the
             * client goes on being served (6 more answers) while the child
             * lives.  (This used to count the answers of one second, which
             * a loaded machine need not reach.) */
            close(hold[0]);
            long before = atomic_load(&client_requests);
            uint64_t end = it_now_ms() + IT_WAIT_MS;
            while (atomic_load(&client_requests) <= before + 5 && it_now_ms() < end)
                usleep(10000);
            long served = atomic_load(&client_requests) - before;
            reaped = waitpid(pid, &status, WNOHANG) == pid;
            close(hold[1]); /* the child may go */
            ck_assert_msg(!reaped, "the first child ended before the parent looked: %s", st_describe_status(status));
            ck_assert_msg(served > 5, "the client stalled while a forked child lived: %ld answers in %d ms", served,
                          IT_WAIT_MS);
        }
        if (!reaped)
            waitpid(pid, &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %s", i,
                      st_describe_status(status));
        usleep(5000);
    }
    atomic_store(&stop_client, true);
    pthread_join(client, NULL);
    pthread_join(worker, NULL);
    ck_assert_int_gt(atomic_load(&client_requests), 0);
    cJSON *ok = it_json(serving_port, "/healthz");
    cJSON_Delete(ok);
    sefer_introspect_stop();
}
END_TEST

/* `sefer stat` (with --token-file token_file, SEFER_INTROSPECT_TOKEN=token_env)
 * run against a one-shot server on the loopback that answers its first
 * request with reply and closes: that request into req, the command's
 * stderr into p->errbuf.  Returns the server's port. */
static int stat_against_fake(bool v6, const char *token_file, const char *token_env, const char *reply, char *req,
                             size_t req_cap, it_proc_t *p)
{
    int ls = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss = {0};
    socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (v6) {
        ((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
    } else {
        ((struct sockaddr_in *)&ss)->sin_family = AF_INET;
        ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    ck_assert_msg(bind(ls, (struct sockaddr *)&ss, len) == 0, "cannot bind %s: %s", v6 ? "[::1]" : "127.0.0.1",
                  strerror(errno));
    ck_assert_int_eq(listen(ls, 1), 0);
    getsockname(ls, (struct sockaddr *)&ss, &len);
    int port = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    char url[64], env_token[64];
    snprintf(url, sizeof url, v6 ? "http://[::1]:%d/" : "http://127.0.0.1:%d/", port);
    snprintf(env_token, sizeof env_token, "SEFER_INTROSPECT_TOKEN=%s", token_env ? token_env : "");
    char *argv[] = {(char *)env_path("SEFER_TEST_CLI"), "stat", url, token_file ? "--token-file" : NULL,
                    (char *)token_file, NULL};
    const char *env[] = {token_env ? env_token : "SEFER_INTROSPECT_TOKEN", NULL};
    it_spawn(p, argv, env);
    struct pollfd pf = {ls, POLLIN, 0};
    ck_assert_int_eq(poll(&pf, 1, IT_WAIT_MS), 1);
    int c = accept(ls, NULL, NULL);
    size_t n = 0;
    ck_assert(it_read_until(c, req, req_cap, &n, "\r\n\r\n", IT_WAIT_MS));
    it_send(c, reply, strlen(reply));
    close(c);
    close(ls);
    it_finish(p, IT_WAIT_MS / 1000);
    return port;
}

/* What `sefer stat` sends: a Host header with the port (IPv6 in brackets),
 * and the token from a file or from SEFER_INTROSPECT_TOKEN. */
static void stat_request(bool v6, const char *token_file, const char *token_env, const char *want_auth)
{
    char req[2048], host[64];
    it_proc_t p;
    int port = stat_against_fake(v6, token_file, token_env,
                                 "HTTP/1.1 500 x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", req,
                                 sizeof req, &p);
    snprintf(host, sizeof host, v6 ? "\r\nHost: [::1]:%d\r\n" : "\r\nHost: 127.0.0.1:%d\r\n", port);
    ck_assert_msg(strstr(req, host) != NULL, "no \"%s\" in:\n%s", host + 2, req);
    if (want_auth != NULL)
        ck_assert_msg(strstr(req, want_auth) != NULL, "no \"%s\" in:\n%s", want_auth, req);
    else
        ck_assert_ptr_null(strstr(req, "Authorization"));
}

START_TEST(test_cli_stat_request)
{
    char path[] = "/tmp/sefer-token-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(write(fd, "tok-123\n", 8) == 8);
    close(fd);
    stat_request(false, NULL, NULL, NULL);
    stat_request(false, path, NULL, "\r\nAuthorization: Bearer tok-123\r\n");
    unlink(path);
}
END_TEST

/* (the optional "ipv6" case: introspect-process-ipv6) */
START_TEST(test_cli_stat_request_ipv6)
{
    stat_request(true, NULL, "tok-456", "\r\nAuthorization: Bearer tok-456\r\n");
}
END_TEST

/* An error reply's body comes from whatever answers at the URL: sefer stat
 * prints it on one line with '?' for its control bytes, so an escape
 * sequence in it never reaches the terminal. */
START_TEST(test_cli_stat_error_body)
{
    char req[2048];
    it_proc_t p;
    stat_against_fake(false, NULL, NULL,
                      "HTTP/1.1 403 x\r\nConnection: close\r\n\r\n"
                      "{\n\t\"error\":\t\"no\033]0;owned\007\033[2J\"\n}\n",
                      req, sizeof req, &p);
    ck_assert_msg(strstr(p.errbuf, "sefer stat: /stats?pretty=0: HTTP 403: { \"error\": \"no?]0;owned??[2J\" }\n"),
                  "stderr: %s", p.errbuf);
    ck_assert_msg(strchr(p.errbuf, '\033') == NULL && strchr(p.errbuf, '\007') == NULL,
                  "sefer stat printed a control byte: %s", p.errbuf);
}
END_TEST

/* The C1 controls too: U+009B in UTF-8 (CSI to terminals that obey C1),
 * a raw 0x9b byte; letters whose UTF-8 holds the bytes 0x80-0x9f (U+0101
 * is 0xc4 0x81) stay as written. */
START_TEST(test_cli_stat_error_body_c1)
{
    char req[2048];
    it_proc_t p;
    stat_against_fake(false, NULL, NULL,
                      "HTTP/1.1 403 x\r\nConnection: close\r\n\r\n"
                      "{\"error\": \"a\xc2\x9b" "2J b\x9b" "31m \xc4\x81\xc3\xa9\"}",
                      req, sizeof req, &p);
    ck_assert_msg(strstr(p.errbuf, "HTTP 403: {\"error\": \"a??2J b?31m \xc4\x81\xc3\xa9\"}\n"), "stderr: %s",
                  p.errbuf);
    ck_assert_msg(strstr(p.errbuf, "\x9b") == NULL, "sefer stat printed a C1 control: %s", p.errbuf);
}
END_TEST

/* A status line no HTTP server sends: an error of its own, not the
 * uninitialised message of a failed request. */
START_TEST(test_cli_stat_bad_status)
{
    char req[2048];
    it_proc_t p;
    stat_against_fake(false, NULL, NULL, "HTTP/1.1 -1 x\r\nConnection: close\r\n\r\nbody", req, sizeof req, &p);
    ck_assert_msg(strstr(p.errbuf, "no complete HTTP response") != NULL, "stderr: %s", p.errbuf);
}
END_TEST

/* ---- hosts and their descriptors ------------------------------------------------------- */

/* The server took fds 3 and 4 before main; hosts that closed or reused them
 * hung at exit, spun or aborted.  Each mode runs a host with --status 7: it
 * must end at once with 7, and not burn CPU meanwhile. */
START_TEST(test_host_closes_or_reuses_fds)
{
    static const char *const modes[] = {"close-all", "dup2-all", "close-low", "dup2-low"};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1",
                             "SEFER_INTROSPECT_LISTEN=127.0.0.1:0", NULL};
        const char *args[] = {"--fds", modes[m], "--status", "7", NULL};
        char what[64];
        snprintf(what, sizeof what, " (--fds %s)", modes[m]);
        host_what = what;
        it_proc_t p;
        spawn_host(&p, env, args);
        int port = it_wait_url(&p);
        wait_ready(&p);
        host_what = "";
        if (strstr(modes[m], "low") != NULL) { /* the server lives above the low range */
            cJSON *ok = it_json(port, "/healthz");
            cJSON_Delete(ok);
        }
        double cpu = cpu_over(p.pid, 1000);
        ck_assert_msg(cpu < 0.3, "--fds %s: %.2f s of CPU in 1 s", modes[m], cpu);
        /* It exits, with its own status: a host that hung at exit (the bug
         * this guards against) is killed by it_finish after IT_WAIT_MS and
         * fails here.  (This used to time the exit, < 3 s: the only wait at
         * exit is sefer's bounded join of the server's thread, so that
         * figure said nothing a hang guard does not, and a loaded machine
         * could fail it.) */
        int status = it_finish(&p, IT_WAIT_MS / 1000);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 7, "--fds %s: %s; stderr: %s", modes[m],
                      st_describe_status(status), p.errbuf);
    }
}
END_TEST

/* A shell under sefer run that redirects fd 3 ends, with its status.  (A
 * shell that hung at exit, the bug this guards against, is killed by
 * it_finish after IT_WAIT_MS and fails; the run used to be timed, < 4 s,
 * which said no more than that and a loaded machine could fail.) */
START_TEST(test_shell_exec_redirect_under_sefer_run)
{
    const char *cli = env_path("SEFER_TEST_CLI");
    char *argv[] = {(char *)cli, "run", "--listen", "127.0.0.1:0", "--", "/bin/sh", "-c",
                    "exec 3>/dev/null 4>/dev/null; echo done; exit 7", NULL};
    const char *env[] = {"LD_PRELOAD", "SEFER_INTROSPECT_ENABLED", NULL};
    it_proc_t p;
    it_spawn(&p, argv, env);
    char out[256];
    size_t len = 0;
    ck_assert_msg(it_read_until(p.out, out, sizeof out, &len, "done\n", IT_WAIT_MS), "stdout: \"%s\"", out);
    int status = it_finish(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 7, "%s; stderr: %s", st_describe_status(status),
                  p.errbuf);
}
END_TEST

/* At its descriptor limit, the host's server waits instead of retrying
 * accept at once, and serves the waiting client when descriptors are free. */
START_TEST(test_emfile_does_not_spin)
{
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1", "SEFER_INTROSPECT_LISTEN=127.0.0.1:0",
                         NULL};
    const char *args[] = {"--emfile", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    int port = it_wait_url(&p);
    wait_ready(&p);
    char out[256];
    size_t len = 0;
    ck_assert(strstr(host_out, "full") || it_read_until(p.out, out, sizeof out, &len, "full", IT_WAIT_MS));
    int fd = it_connect(port); /* waits in the listen backlog */
    ck_assert_int_ge(fd, 0);
    const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    ck_assert(it_send(fd, req, sizeof req - 1));
    double cpu = cpu_over(p.pid, 2000);
    ck_assert_msg(cpu < 0.3, "%.2f s of CPU in 2 s at EMFILE", cpu);
    ck_assert(write(p.in, "free\n", 5) == 5);
    it_resp_t r;
    it_read_response(fd, &r);
    close(fd);
    ck_assert_msg(r.status == 200, "status %d after the descriptors were freed", r.status);
    it_free(&r);
    finish_ok(&p);
}
END_TEST

/* Under sefer run on a fixed port, a child of the program (which inherits
 * SEFER_INTROSPECT_ENABLED) stays silent and starts nothing; with '+' it
 * takes a port of its own. */
START_TEST(test_sefer_run_children)
{
    const char *cli = env_path("SEFER_TEST_CLI");
    for (int plus = 0; plus < 2; plus++) {
        int port = it_free_port();
        char listen[32];
        snprintf(listen, sizeof listen, "127.0.0.1:%d%s", port, plus ? "+" : "");
        char *argv[] = {(char *)cli, "run", "--listen", listen, "--", (char *)env_path("SEFER_TEST_HOST"),
                        "--spawn-child", NULL};
        const char *env[] = {"LD_PRELOAD", "SEFER_INTROSPECT_ENABLED", "SEFER_INTROSPECT_PID", NULL};
        it_proc_t p;
        it_spawn(&p, argv, env);
        wait_ready(&p);
        ck_assert_msg(strstr(host_out, "child-exit 0\n") != NULL, "stdout: %s", host_out);
        cJSON *ok = it_json(port, "/healthz"); /* the program itself serves */
        cJSON_Delete(ok);
        finish_ok(&p);
        ck_assert_msg(it_count(p.errbuf, "in use") == 0, "stderr: %s", p.errbuf);
        ck_assert_msg(it_count(p.errbuf, "sefer: introspection: http") == (plus ? 2 : 0), "stderr: %s",
                      p.errbuf);
    }
}
END_TEST

/* ---- the CLI ---------------------------------------------------------------------- */

START_TEST(test_cli_run_and_stat)
{
    const char *cli = env_path("SEFER_TEST_CLI");
    int port = it_free_port();
    char listen[32], url[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    /* (the host's thread name holds an escape sequence: sefer stat prints
     * it with '?' for the control byte, never raw to the terminal) */
    char *argv[] = {(char *)cli, "run", "--listen", listen, "--", (char *)env_path("SEFER_TEST_HOST"),
                    "--alloc", "100", "1000", "--name", "it-\033[1mhost", NULL};
    const char *env[] = {"LD_PRELOAD", "SEFER_INTROSPECT_ENABLED", NULL};
    it_proc_t p;
    it_spawn(&p, argv, env);
    wait_ready(&p);
    ck_assert_msg(strstr(p.errbuf, url) != NULL || it_read_until(p.err, p.errbuf, sizeof p.errbuf, &p.errlen, url, IT_WAIT_MS),
                  "sefer run did not print %s: %s", url, p.errbuf);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s stat %s 2>&1", cli, url);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    ck_assert_msg(rc == 0, "sefer stat: %d: %s", rc, out);
    ck_assert_msg(strstr(out, "bytes in blocks") && strstr(out, "it-?[1mhost") && strstr(out, "rings"),
                  "sefer stat printed: %s", out);
    ck_assert_msg(strchr(out, '\033') == NULL, "sefer stat printed an escape byte: %s", out);
    /* the host preloads the library this test links: the same build */
    char build_line[512];
    snprintf(build_line, sizeof build_line, ": build %s\n  build options: %s\n", sefer_build(),
             sefer_build_options());
    ck_assert_msg(strstr(out, build_line) != NULL, "no \"%s\" in sefer stat's output: %s", build_line, out);
    finish_ok(&p);

    snprintf(cmd, sizeof cmd, "%s stat http://127.0.0.1:%d/ >/dev/null 2>&1", cli, port);
    ck_assert_int_ne(system(cmd), 0); /* nobody serves there any more */
    snprintf(cmd, sizeof cmd, "%s frobnicate >/dev/null 2>&1", cli);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("introspect-process");
    /* (hang guards, above the IT_WAIT_MS waits of one test) */
    TCase *tc = tcase_create("process");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_preloaded_program_serves);
    tcase_add_test(tc, test_config_file_enables_server);
    tcase_add_test(tc, test_port_taken_says_so_once);
    tcase_add_test(tc, test_plus_takes_next_free_port);
    tcase_add_test(tc, test_non_loopback_refused_without_token);
    tcase_add_test(tc, test_child_does_not_fight_for_the_port);
    tcase_add_test(tc, test_fork_while_serving);
    tcase_add_test(tc, test_cli_run_and_stat);
    tcase_add_test(tc, test_host_closes_or_reuses_fds);
    tcase_add_test(tc, test_shell_exec_redirect_under_sefer_run);
    tcase_add_test(tc, test_emfile_does_not_spin);
    tcase_add_test(tc, test_sefer_run_children);
    tcase_add_test(tc, test_cli_stat_request);
    tcase_add_test(tc, test_cli_stat_error_body);
    tcase_add_test(tc, test_cli_stat_error_body_c1);
    tcase_add_test(tc, test_cli_stat_bad_status);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "ipv6", it_ipv6_why_not);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_cli_stat_request_ipv6);
    return st_main(s, argc, argv);
}
