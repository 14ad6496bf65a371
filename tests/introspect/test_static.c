/* test_static.c - the introspection server in a program linked with
 * libsefer.a.  The linker takes only the objects a program refers to, so
 * autostart.o (nothing refers to it) is left out; what the server needs in
 * every process (the fork handler, the stop at exit) is installed by the
 * start itself (introspect/server.c):
 *
 *   - a fork() child of a serving process has no server and cannot start
 *     one, and its sefer_introspect_stop() leaves the parent's alone;
 *   - exit() stops the server before atexit handlers registered earlier
 *     run (atexit handlers run in reverse order). */
#include "itest.h"

START_TEST(test_fork_child_stops_nothing)
{
    int port = it_start();
    pid_t pid = fork();
    if (pid == 0) {
        int bad = sefer_introspect_port() != 0;
        bad |= (sefer_introspect_start("127.0.0.1:0") != -1 || errno != EPERM) << 1;
        sefer_introspect_stop();
        _exit(bad);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s", st_describe_status(status));
    for (int i = 0; i < 3; i++) { /* the parent's socket still listens */
        cJSON *ok = it_json(port, "/healthz");
        cJSON_Delete(ok);
    }
    ck_assert_int_eq(sefer_introspect_port(), port);
    sefer_introspect_stop();
}
END_TEST

static int exit_port = -1;

static void after_stop(void)
{
    /* runs after the server's own atexit handler */
    _exit(sefer_introspect_port() == 0 && it_connect(exit_port) < 0 ? 0 : 9);
}

START_TEST(test_exit_stops_the_server)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        atexit(after_stop);
        exit_port = sefer_introspect_start("127.0.0.1:0");
        exit(exit_port > 0 ? 8 : 7);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s", st_describe_status(status));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-static");
    TCase *tc = tcase_create("static");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fork_child_stops_nothing);
    tcase_add_test(tc, test_exit_stops_the_server);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
