/* sefer_soak.c - `sefer soak`: the soak workload with the dashboard live.
 *
 *   sefer soak [--seconds N] [--threads T] [--config FILE] [--listen ADDR]
 *              [-- SOAK-ARGS...]
 *
 * Runs sefer-soak (tools/soak.c; next to this program in the build tree,
 * in libexec/sefer/ when installed, or SEFER_SOAK: sefer_paths.c) with
 * LD_PRELOAD=libsefer.so.N (as `sefer run` finds it),
 * SEFER_INTROSPECT_ENABLED=1, SEFER_CONFIG=soak.toml (build/config/ or
 * share/sefer/ when installed; or --config)
 * and SEFER_INTROSPECT_LISTEN=ADDR (default 127.0.0.1:9090+: 9090 or the
 * next free port).  It waits for the soak's server to say where it listens
 * (the "sefer: introspection: http://... (pid N)" line the library prints
 * on stderr when the port was not fixed; for a fixed port, the first answer
 * of /healthz) and prints the dashboard's URL in a box.  The soak's stdout
 * goes straight through; its stderr is relayed as it comes.
 *
 * SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to
 * the soak, and the soak dies if this program does (PR_SET_PDEATHSIG).
 * The exit status is the soak's (0 pass, 1 corruption or a failed call, 2
 * bad arguments, 3 RSS above its bound), or 128 + the signal that ended it:
 * Ctrl-C stops a soak cleanly, with status 130 and a line saying so. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sefer_cli.h"

#define DEFAULT_SECONDS "600"
#define DEFAULT_LISTEN "127.0.0.1:9090+"
#define ANNOUNCE_WAIT_MS 10000 /* a fixed port: how long /healthz is tried */
#define MAX_ARGS 64

struct soak {
    const char *seconds, *threads, *config, *listen;
    char *const *extra; /* after "--": passed to sefer-soak as they are */
    int nextra;
    char program[PATH_MAX], lib[PATH_MAX], config_path[PATH_MAX];
    pid_t pid;
    double started;
    bool announced;
    bool taken; /* a fixed port already answered before the soak started */
    char line[1024]; /* the stderr line being assembled */
    size_t line_len;
};

static volatile sig_atomic_t child_pid, stop_signal;

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void forward_signal(int sig) {
    stop_signal = sig;
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int soak_usage(FILE *f, int status) {
    fprintf(f, "usage: sefer soak [--seconds N] [--threads T] [--config FILE] [--listen ADDR] [-- SOAK-ARGS...]\n"
               "  --seconds N    how long the soak runs (default " DEFAULT_SECONDS "; Ctrl-C stops it)\n"
               "  --threads T    worker threads (sefer-soak's default: 4)\n"
               "  --config FILE  SEFER_CONFIG for the soak (default: sefer's soak.toml, config/ in the source)\n"
               "  --listen ADDR  where the dashboard listens (default " DEFAULT_LISTEN
               ": 9090 or the next free port)\n"
               "  SOAK-ARGS      more sefer-soak options (build/tools/sefer-soak --help)\n"
               "Exit status: the soak's (0 pass, 1 corruption or a failed call, 3 RSS above its\n"
               "bound), or 128 + the signal that stopped it (130 after Ctrl-C).\n");
    return status;
}

/* ---- finding things ----------------------------------------------------------- */

/* ---- options ----------------------------------------------------------------- */

/* 0, or the exit status for a bad command line (-1: --help). */
static int parse(struct soak *s, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = strcmp(a, "--seconds") == 0   ? &s->seconds
                            : strcmp(a, "--threads") == 0 ? &s->threads
                            : strcmp(a, "--config") == 0  ? &s->config
                            : strcmp(a, "--listen") == 0  ? &s->listen
                                                          : NULL;
        if (strcmp(a, "--") == 0) {
            s->extra = argv + i + 1;
            s->nextra = argc - i - 1;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return -1;
        if (slot == NULL || i + 1 >= argc) {
            fprintf(stderr, "sefer soak: %s '%s'\n", slot ? "missing value after" : "unknown option", a);
            return 2;
        }
        *slot = argv[++i];
    }
    char *end;
    double secs = strtod(s->seconds, &end);
    if (end == s->seconds || *end || !(secs > 0)) {
        fprintf(stderr, "sefer soak: --seconds wants a positive number, not '%s'\n", s->seconds);
        return 2;
    }
    if (s->nextra > MAX_ARGS - 8) {
        fprintf(stderr, "sefer soak: too many arguments after --\n");
        return 2;
    }
    return 0;
}

/* Finds the soak, the library and the config file; 0 or an exit status. */
static int locate(struct soak *s) {
    if (!cli_find_soak(s->program, sizeof s->program)) {
        fprintf(stderr, "sefer soak: %s not found or not executable (build it with `ninja -C build`, "
                        "or set SEFER_SOAK)\n", s->program);
        return 127;
    }
    if (!cli_find_library(s->lib, sizeof s->lib)) {
        fprintf(stderr, "sefer soak: %s not found (set SEFER_LIB)\n", s->lib);
        return 127;
    }
    if (s->config != NULL) {
        if (access(s->config, R_OK) != 0) {
            fprintf(stderr, "sefer soak: --config %s: %s\n", s->config, strerror(errno));
            return 2;
        }
        snprintf(s->config_path, sizeof s->config_path, "%s", s->config);
    } else if (!cli_find_soak_config(s->config_path, sizeof s->config_path)) {
        fprintf(stderr, "sefer soak: soak.toml not found (last looked at %s): running with the "
                        "defaults and the server on\n", s->config_path);
        s->config_path[0] = '\0';
    }
    return 0;
}

/* ---- the dashboard's URL ----------------------------------------------------------- */

static bool port_fixed(const char *listen) {
    size_t n = strlen(listen);
    return !(n && listen[n - 1] == '+') && !(n >= 2 && strcmp(listen + n - 2, ":0") == 0);
}

/* "http://ADDR/" for a fixed ADDR ("9090" alone: 127.0.0.1). */
static void fixed_url(const char *listen, char *out, size_t len) {
    if (strchr(listen, ':') == NULL) snprintf(out, len, "http://127.0.0.1:%s/", listen);
    else snprintf(out, len, "http://%s/", listen);
}

static bool answers(const char *url) {
    char *body = NULL, err[160];
    size_t len = 0;
    int status = cli_http_get(url, "/healthz", NULL, &body, &len, err, sizeof err);
    free(body);
    return status == 200;
}

static void banner(struct soak *s, const char *url, const char *problem) {
    const char *token = getenv("SEFER_INTROSPECT_TOKEN");
    s->announced = true;
    fprintf(stderr, "\n  ==================================================================\n");
    if (problem != NULL) {
        fprintf(stderr, "    sefer soak: NO DASHBOARD: %s\n", problem);
    } else {
        fprintf(stderr, "    sefer soak dashboard:   %s\n", url);
        fprintf(stderr, "    knobs:   %s\n",
                token && *token ? "changeable from the page with the token (SEFER_INTROSPECT_TOKEN)"
                                : "read-only (set SEFER_INTROSPECT_TOKEN to change them from the page)");
    }
    fprintf(stderr, "    soak:    pid %d, %s s; Ctrl-C stops it\n", (int)s->pid, s->seconds);
    fprintf(stderr, "  ==================================================================\n\n");
}

/* A complete line of the soak's stderr: the library's word on its server. */
static void scan_line(struct soak *s, const char *line) {
    static const char prefix[] = "sefer: introspection: ";
    if (s->announced || strncmp(line, prefix, sizeof prefix - 1) != 0) return;
    const char *rest = line + sizeof prefix - 1;
    if (strstr(rest, "no server in this process") != NULL) {
        char why[600];
        snprintf(why, sizeof why, "%.*s", (int)strcspn(rest, "\n"), rest);
        banner(s, NULL, why);
    } else if (strncmp(rest, "http://", 7) == 0 && strstr(rest, " (pid ") != NULL) {
        char url[200];
        snprintf(url, sizeof url, "%.*s", (int)strcspn(rest, " \n"), rest);
        banner(s, url, NULL);
    }
}

/* Relays a chunk of the soak's stderr, scanning it line by line. */
static void relay(struct soak *s, const char *buf, size_t n) {
    if (write(STDERR_FILENO, buf, n) < 0) { /* our stderr is gone: keep the soak going */
    }
    for (size_t i = 0; i < n; i++) {
        if (s->line_len < sizeof s->line - 1) s->line[s->line_len++] = buf[i];
        if (buf[i] != '\n') continue;
        s->line[s->line_len] = '\0';
        scan_line(s, s->line);
        s->line_len = 0;
    }
}

/* ---- running it ------------------------------------------------------------------------ */

static void child_exec(struct soak *s, int err_fd, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* we die: so does the soak */
    if (getppid() != parent) _exit(127);
    dup2(err_fd, STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    const char *old = getenv("LD_PRELOAD");
    char preload[2 * PATH_MAX + 2];
    snprintf(preload, sizeof preload, "%s%s%s", s->lib, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    setenv("SEFER_INTROSPECT_ENABLED", "1", 1);
    setenv("SEFER_INTROSPECT_LISTEN", s->listen, 1);
    if (s->config_path[0]) setenv("SEFER_CONFIG", s->config_path, 1);
    char *argv[MAX_ARGS];
    int n = 0;
    argv[n++] = s->program;
    argv[n++] = "--seconds";
    argv[n++] = (char *)s->seconds;
    if (s->threads) {
        argv[n++] = "--threads";
        argv[n++] = (char *)s->threads;
    }
    for (int i = 0; i < s->nextra; i++) argv[n++] = s->extra[i];
    argv[n] = NULL;
    execv(s->program, argv);
    dprintf(STDERR_FILENO, "sefer soak: %s: %s\n", s->program, strerror(errno));
    _exit(127);
}

static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal; /* no SA_RESTART: poll and waitpid return EINTR */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) sigaction(forwarded[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Relays the soak's stderr until it closes; announces the URL on the way. */
static void watch(struct soak *s, int fd) {
    bool fixed = port_fixed(s->listen) && !s->taken; /* else the soak's own line tells */
    char url[200];
    fixed_url(s->listen, url, sizeof url);
    for (;;) {
        if (fixed && !s->announced && now_s() - s->started < ANNOUNCE_WAIT_MS / 1000.0 && answers(url))
            banner(s, url, NULL);
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, fixed && !s->announced ? 100 : -1);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        relay(s, buf, (size_t)n);
    }
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    default: return "a signal";
    }
}

/* The soak's status as ours, with a line for anything but a plain pass. */
static int verdict(const struct soak *s, int status) {
    double secs = now_s() - s->started;
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (stop_signal != 0 && code == 128 + stop_signal) { /* it stopped cleanly */
            fprintf(stderr, "sefer soak: stopped by %s after %.1f s; the soak checked its blocks first\n",
                    signal_name(stop_signal), secs);
            return code;
        }
        if (code != 0)
            fprintf(stderr, "sefer soak: the soak failed with status %d after %.1f s (%s)\n", code, secs,
                    code == 1   ? "corruption or a failed call: see above"
                    : code == 2 ? "bad arguments"
                    : code == 3 ? "RSS above its bound"
                                : "see above");
        return code;
    }
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    if (sig == stop_signal)
        fprintf(stderr, "sefer soak: stopped by %s after %.1f s, before the soak's verdict\n",
                signal_name(sig), secs);
    else
        fprintf(stderr, "sefer soak: the soak was killed by %s (signal %d) after %.1f s\n", signal_name(sig), sig,
                secs);
    return 128 + sig;
}

int cli_soak(int argc, char **argv) {
    struct soak s = {.seconds = DEFAULT_SECONDS, .listen = DEFAULT_LISTEN};
    int rc = parse(&s, argc, argv);
    if (rc != 0) return rc < 0 ? soak_usage(stdout, 0) : soak_usage(stderr, rc);
    if ((rc = locate(&s)) != 0) return rc;
    char url[200];
    fixed_url(s.listen, url, sizeof url);
    s.taken = port_fixed(s.listen) && answers(url);
    if (s.taken)
        fprintf(stderr, "sefer soak: something already answers at %s: the soak's server cannot listen there\n", url);
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        fprintf(stderr, "sefer soak: pipe: %s\n", strerror(errno));
        return 126;
    }
    install_handlers();
    fflush(NULL);
    pid_t parent = getpid();
    s.started = now_s();
    s.pid = fork();
    if (s.pid < 0) {
        fprintf(stderr, "sefer soak: fork: %s\n", strerror(errno));
        return 126;
    }
    if (s.pid == 0) child_exec(&s, pipefd[1], parent);
    child_pid = s.pid;
    close(pipefd[1]);
    fprintf(stderr, "sefer soak: %s --seconds %s (pid %d) with %s%s%s\n", s.program, s.seconds, (int)s.pid, s.lib,
            s.config_path[0] ? ", SEFER_CONFIG=" : "", s.config_path);
    watch(&s, pipefd[0]);
    close(pipefd[0]);
    int status = 0;
    while (waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
    }
    child_pid = 0;
    return verdict(&s, status);
}
