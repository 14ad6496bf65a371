/* sefer_run.c - `sefer run`: execute a program with libsefer.so preloaded
 * and the introspection server enabled; with --profile FILE, heap profiling
 * on (at profile.sample_bytes, or SF_RUN_PROFILE_RATE if nothing sets it)
 * and a pprof file written at exit and on SIGUSR2 (profile.output).
 *
 * The library is looked for relative to this executable, so that the build
 * tree and an installed tree both work (sefer_paths.c); SEFER_LIB overrides. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sefer_cli.h"

static int run_usage(void) {
    fprintf(stderr, "usage: sefer run [--config FILE] [--listen ADDR] [--profile FILE] [--] PROGRAM [ARGS...]\n");
    return 2;
}

/* The URL the program will serve at, as far as we can tell before it runs. */
static void announce(const char *program, const char *lib, const char *listen, const char *config) {
    fprintf(stderr, "sefer run: %s with %s\n", program, lib);
    if (listen == NULL) {
        fprintf(stderr, "sefer run: introspection at " SEFER_CLI_DEFAULT_URL "%s%s%s\n",
                config ? " (unless " : "", config ? config : "", config ? " sets introspect.listen)" : "");
        return;
    }
    size_t n = strlen(listen);
    bool any = n >= 2 && strcmp(listen + n - 2, ":0") == 0;
    if (any || (n && listen[n - 1] == '+')) {
        fprintf(stderr, "sefer run: introspection on %s: the program prints its URL on stderr\n", listen);
        return;
    }
    const char *colon = strrchr(listen, ':');
    if (colon == NULL) fprintf(stderr, "sefer run: introspection at http://127.0.0.1:%s/\n", listen);
    else fprintf(stderr, "sefer run: introspection at http://%s/\n", listen);
}

/* The rate --profile uses when neither the environment nor the config file
 * sets profile.sample_bytes and its default is off. */
#define SF_RUN_PROFILE_RATE "512KiB"

/* Whether the config file (--config, or SEFER_CONFIG) mentions
 * sample_bytes: it then has the say. */
static bool config_sets_rate(const char *config) {
    if (config == NULL) config = getenv("SEFER_CONFIG");
    FILE *f = config ? fopen(config, "re") : NULL;
    if (f == NULL) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) found = strstr(line, "sample_bytes") != NULL;
    fclose(f);
    return found;
}

int cli_run(int argc, char **argv) {
    const char *config = NULL, *listen = NULL, *profile = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
        else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) listen = argv[++i];
        else if (strcmp(argv[i], "--profile") == 0 && i + 1 < argc) profile = argv[++i];
        else if (argv[i][0] == '-') return run_usage();
        else break;
    }
    if (i >= argc) return run_usage();
    char lib[PATH_MAX];
    if (!cli_find_library(lib, sizeof lib)) {
        fprintf(stderr, "sefer run: %s not found (set SEFER_LIB)\n", lib);
        return 127;
    }
    const char *old = getenv("LD_PRELOAD");
    char *preload = NULL;
    if (asprintf(&preload, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "") < 0) return 127;
    setenv("LD_PRELOAD", preload, 1);
    setenv("SEFER_INTROSPECT_ENABLED", "1", 1);
    /* the program keeps this pid across exec; its children, which inherit
     * the variables, stay silent on a fixed port (introspect/autostart.c) */
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("SEFER_INTROSPECT_PID", pid, 1);
    if (config) setenv("SEFER_CONFIG", config, 1);
    if (listen) setenv("SEFER_INTROSPECT_LISTEN", listen, 1);
    if (profile) {
        char path[PATH_MAX];
        /* the program may change directory: an absolute path */
        if (profile[0] != '/' && getcwd(path, sizeof path) != NULL &&
            strlen(path) + strlen(profile) + 2 <= sizeof path) {
            strcat(path, "/");
            strcat(path, profile);
            profile = path;
        }
        setenv("SEFER_PROFILE_OUTPUT", profile, 1);
        if (getenv("SEFER_PROFILE_SAMPLE_BYTES") == NULL && !config_sets_rate(config))
            setenv("SEFER_PROFILE_SAMPLE_BYTES", SF_RUN_PROFILE_RATE, 1);
        fprintf(stderr, "sefer run: heap profile to %s at exit (and on SIGUSR2)\n", profile);
    }
    announce(argv[i], lib, listen, config);
    execvp(argv[i], argv + i);
    fprintf(stderr, "sefer run: %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
