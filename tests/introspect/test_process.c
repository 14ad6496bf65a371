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
 *   - build/sefer run and build/sefer stat.
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

/* A port nobody listens on right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
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

static void wait_ready(it_proc_t *p)
{
    char out[4096];
    size_t len = 0;
    ck_assert_msg(it_read_until(p->out, out, sizeof out, &len, "ready\n", 10000),
                  "the host did not get ready: stdout \"%s\", stderr \"%s\"", out, p->errbuf);
}

static void finish_ok(it_proc_t *p)
{
    int status = it_finish(p, 10);
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
    const char *args[] = {"--alloc", "1000", "4096", "--threads", "2", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    int port = it_wait_url(&p);
    wait_ready(&p);
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
    const char *args[] = {"--alloc", "10", "100", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    wait_ready(&p);
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
    int port = free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "SEFER_INTROSPECT_LISTEN=127.0.0.1:%d", port);
    const char *env[] = {preload_var(), "SEFER_INTROSPECT_ENABLED=1", listen, NULL};
    const char *args[] = {"--spawn-child", NULL};
    it_proc_t p;
    spawn_host(&p, env, args);
    char out[4096];
    size_t len = 0;
    ck_assert(it_read_until(p.out, out, sizeof out, &len, "ready\n", 10000));
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
        pid_t pid = fork();
        if (pid == 0) { /* no ck_assert here: the client thread may hold check's lock */
            alarm(10); /* a deadlock kills the child: the test fails */
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
            if (i == 0)
                usleep(1500000); /* a child that lives on, without exec */
            _exit(bad);
        }
        ck_assert_int_gt(pid, 0);
        if (i == 0) { /* the parent's connections are not held open by the child */
            long before = atomic_load(&client_requests);
            usleep(1000000);
            ck_assert_msg(atomic_load(&client_requests) > before + 5,
                          "the client stalled while a forked child lived");
        }
        int status = 0;
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

/* ---- the CLI ---------------------------------------------------------------------- */

START_TEST(test_cli_run_and_stat)
{
    const char *cli = env_path("SEFER_TEST_CLI");
    int port = free_port();
    char listen[32], url[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    char *argv[] = {(char *)cli, "run", "--listen", listen, "--", (char *)env_path("SEFER_TEST_HOST"),
                    "--alloc", "100", "1000", NULL};
    const char *env[] = {"LD_PRELOAD", "SEFER_INTROSPECT_ENABLED", NULL};
    it_proc_t p;
    it_spawn(&p, argv, env);
    wait_ready(&p);
    ck_assert_msg(strstr(p.errbuf, url) != NULL || it_read_until(p.err, p.errbuf, sizeof p.errbuf, &p.errlen, url, 2000),
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
    ck_assert_msg(strstr(out, "bytes in blocks") && strstr(out, "it-host") && strstr(out, "rings"),
                  "sefer stat printed: %s", out);
    finish_ok(&p);

    snprintf(cmd, sizeof cmd, "%s stat http://127.0.0.1:%d/ >/dev/null 2>&1", cli, port);
    ck_assert_int_ne(system(cmd), 0); /* nobody serves there any more */
    snprintf(cmd, sizeof cmd, "%s frobnicate >/dev/null 2>&1", cli);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-process");
    TCase *tc = tcase_create("process");
    tcase_set_timeout(tc, 40);
    tcase_add_test(tc, test_preloaded_program_serves);
    tcase_add_test(tc, test_config_file_enables_server);
    tcase_add_test(tc, test_port_taken_says_so_once);
    tcase_add_test(tc, test_plus_takes_next_free_port);
    tcase_add_test(tc, test_non_loopback_refused_without_token);
    tcase_add_test(tc, test_child_does_not_fight_for_the_port);
    tcase_add_test(tc, test_fork_while_serving);
    tcase_add_test(tc, test_cli_run_and_stat);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
