/* test_soak_cmd.c - `sefer soak` (tools/sefer_soak.c), as a person runs it:
 *
 *   - a short soak under the default config/soak.toml: the dashboard's URL
 *     in the box, the server answers while it runs (guard.level 2 from the
 *     file, introspection from the environment), the soak passes, exit 0;
 *   - SIGINT (Ctrl-C) stops a long soak cleanly: exit 130 with a line saying
 *     so, the soak process gone, its port closed;
 *   - --config FILE and a fixed --listen port (announced once /healthz
 *     answers); SIGTERM gives 143;
 *   - the soak's own status comes through: 1 from a failing soak
 *     (SEFER_SOAK=/bin/false), 2 for arguments the soak refuses; and the
 *     command's own errors: a bad --seconds, a missing --config.
 *
 * Paths come from meson: SEFER_TEST_CLI (build/tools/sefer, with build/tools/sefer-soak
 * beside it). */
#include "itest.h"

static const char *cli(void)
{
    const char *v = getenv("SEFER_TEST_CLI");
    ck_assert_msg(v != NULL && access(v, X_OK) == 0, "SEFER_TEST_CLI not set or missing (run through meson)");
    return v;
}

/* The environment changes every run gets: nothing inherited that would
 * change where the soak listens or what it reads. */
#define CLEAN_ENV "SEFER_CONFIG", "SEFER_INTROSPECT_LISTEN", "SEFER_INTROSPECT_TOKEN", "SEFER_SOAK", "LD_PRELOAD"

static void spawn_soak(it_proc_t *p, const char *const args[], const char *const env[])
{
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)cli();
    argv[n++] = "soak";
    for (int i = 0; args[i] && n < 23; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    it_spawn(p, argv, env);
}

/* Waits for the box with the dashboard's URL; returns the port, and the
 * soak's pid in *pid. */
static int wait_banner(it_proc_t *p, pid_t *pid)
{
    ck_assert_msg(it_read_until(p->err, p->errbuf, sizeof p->errbuf, &p->errlen, "Ctrl-C stops it", IT_WAIT_MS),
                  "no dashboard box on stderr: %s", p->errbuf);
    const char *u = strstr(p->errbuf, "sefer soak dashboard:");
    ck_assert_msg(u != NULL, "no dashboard line: %s", p->errbuf);
    u = strstr(u, "http://127.0.0.1:");
    ck_assert_ptr_nonnull(u);
    const char *s = strstr(p->errbuf, "soak:    pid ");
    ck_assert_ptr_nonnull(s);
    *pid = (pid_t)atoi(s + strlen("soak:    pid "));
    ck_assert_int_gt(*pid, 0);
    return atoi(u + strlen("http://127.0.0.1:"));
}

static const cJSON *knob(const cJSON *config, const char *name)
{
    for (const cJSON *k = it_item(config, "knobs")->child; k; k = k->next)
        if (strcmp(it_str(k, "name"), name) == 0)
            return k;
    ck_abort_msg("no knob %s in /config", name);
    return NULL;
}

/* Waits (at most timeout_s) for the command; its exit code, or 128 + signal. */
static int exit_code(it_proc_t *p, int timeout_s)
{
    int status = it_finish(p, timeout_s);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_short_soak_passes_with_the_dashboard_up)
{
    /* no RSS bound: 200 ms phases are too short for it to mean anything;
     * 6 s: the two requests below must reach the soak before it ends */
    const char *args[] = {"--seconds", "6", "--threads", "2", "--listen", "127.0.0.1:0", "--", "--pool", "2000",
                          "--large-max-mib", "4", "--no-rss-bound", NULL};
    const char *env[] = {CLEAN_ENV, NULL};
    it_proc_t p;
    spawn_soak(&p, args, env);
    pid_t pid;
    int port = wait_banner(&p, &pid);
    cJSON *health = it_json(port, "/healthz");
    cJSON_Delete(health);
    cJSON *config = it_json(port, "/config");
    const cJSON *level = knob(config, "guard.level"), *on = knob(config, "introspect.enabled");
    ck_assert_msg(it_u64(level, "value") == 2 && strcmp(it_str(level, "source"), "file") == 0,
                  "guard.level from config/soak.toml expected");
    ck_assert_msg(cJSON_IsTrue(it_item(on, "value")), "introspection should be on");
    cJSON_Delete(config);
    ck_assert_msg(strstr(p.errbuf, "SEFER_CONFIG=") && strstr(p.errbuf, "config/soak.toml"),
                  "the default config is not named: %s", p.errbuf);
    char out[16384];
    size_t len = 0;
    it_read_until(p.out, out, sizeof out, &len, "sefer-soak: PASS", IT_WAIT_MS);
    int code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 0, "exit %d; stdout %s; stderr %s", code, out, p.errbuf);
    ck_assert_msg(strstr(out, "sefer-soak: PASS") != NULL, "no PASS: %s", out);
}
END_TEST

START_TEST(test_ctrl_c_stops_cleanly)
{
    const char *args[] = {"--listen", "127.0.0.1:0", "--threads", "1", NULL};
    const char *env[] = {CLEAN_ENV, NULL};
    it_proc_t p;
    spawn_soak(&p, args, env);
    pid_t pid;
    int port = wait_banner(&p, &pid);
    ck_assert_msg(strstr(p.errbuf, "600 s") != NULL, "the default is 600 s: %s", p.errbuf);
    kill(p.pid, SIGINT);
    /* It stops, rather than running its 600 s: a soak that went on is
     * killed after IT_WAIT_MS and fails on its status.  (The stop used to
     * be timed, < 5 s, which told no more and a loaded machine could
     * fail.) */
    int code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 130, "exit %d after SIGINT; stderr %s", code, p.errbuf);
    ck_assert_msg(strstr(p.errbuf, "stopped by SIGINT") != NULL, "stderr: %s", p.errbuf);
    ck_assert_msg(kill(pid, 0) != 0 && errno == ESRCH, "the soak (pid %d) is still there", (int)pid);
    int fd = it_connect_t(port, 1000);
    ck_assert_msg(fd < 0, "port %d still answers", port);
}
END_TEST

START_TEST(test_config_file_and_fixed_port)
{
    char path[] = "/tmp/sefer-soak-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char toml[] = "[guard]\nlevel = 3\n[introspect]\nenabled = false\n";
    ck_assert_int_eq(write(fd, toml, sizeof toml - 1), (ssize_t)(sizeof toml - 1));
    close(fd);
    int want = it_free_port();
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", want);
    const char *args[] = {"--config", path, "--listen", listen, "--threads", "1", NULL};
    const char *env[] = {CLEAN_ENV, NULL};
    it_proc_t p;
    spawn_soak(&p, args, env);
    pid_t pid;
    int port = wait_banner(&p, &pid);
    ck_assert_int_eq(port, want);
    cJSON *config = it_json(port, "/config");
    const cJSON *level = knob(config, "guard.level");
    ck_assert_msg(it_u64(level, "value") == 3 && strcmp(it_str(level, "source"), "file") == 0,
                  "guard.level 3 from --config expected");
    cJSON_Delete(config);
    kill(p.pid, SIGTERM);
    int code = exit_code(&p, IT_WAIT_MS / 1000);
    unlink(path);
    ck_assert_msg(code == 143, "exit %d after SIGTERM; stderr %s", code, p.errbuf);
}
END_TEST

START_TEST(test_exit_status_comes_through)
{
    const char *env_false[] = {CLEAN_ENV, "SEFER_SOAK=/bin/false", NULL};
    const char *env[] = {CLEAN_ENV, NULL};
    const char *short_run[] = {"--seconds", "1", "--listen", "127.0.0.1:0", NULL};
    it_proc_t p;
    spawn_soak(&p, short_run, env_false);
    int code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 1 && strstr(p.errbuf, "failed with status 1"), "exit %d: %s", code, p.errbuf);

    const char *bad_soak_arg[] = {"--seconds", "1", "--listen", "127.0.0.1:0", "--", "--threads", "0", NULL};
    spawn_soak(&p, bad_soak_arg, env);
    code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 2, "the soak refuses --threads 0 with 2; got %d: %s", code, p.errbuf);

    const char *bad_seconds[] = {"--seconds", "soon", NULL};
    spawn_soak(&p, bad_seconds, env);
    code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 2 && strstr(p.errbuf, "--seconds"), "exit %d: %s", code, p.errbuf);

    const char *no_config[] = {"--config", "/nonexistent/soak.toml", NULL};
    spawn_soak(&p, no_config, env);
    code = exit_code(&p, IT_WAIT_MS / 1000);
    ck_assert_msg(code == 2 && strstr(p.errbuf, "/nonexistent/soak.toml"), "exit %d: %s", code, p.errbuf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("soak-command");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 240); /* (a hang guard, above a test's IT_WAIT_MS waits) */
    tcase_add_test(tc, test_short_soak_passes_with_the_dashboard_up);
    tcase_add_test(tc, test_ctrl_c_stops_cleanly);
    tcase_add_test(tc, test_config_file_and_fixed_port);
    tcase_add_test(tc, test_exit_status_comes_through);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
