/* sefer.c - the `sefer` command: run a program under sefer, or look into a
 * running one through its introspection server (docs/introspection.md).
 *
 *   sefer run [--config FILE] [--listen ADDR] [--] PROGRAM [ARGS...]
 *   sefer soak [--seconds N] [--threads T] [--config FILE] [--listen ADDR] [-- SOAK-ARGS...]
 *   sefer stat [URL] [--token-file FILE | --token TOKEN]
 *
 * One file per subcommand: sefer_run.c, sefer_soak.c, sefer_stat.c;
 * sefer_http.c is the HTTP client stat and soak use. */
#include <stdio.h>
#include <string.h>

#include "sefer_cli.h"

static int usage(FILE *f, int status) {
    fprintf(f, "usage: sefer run [--config FILE] [--listen ADDR] [--] PROGRAM [ARGS...]\n"
               "       sefer soak [--seconds N] [--threads T] [--config FILE] [--listen ADDR] [-- SOAK-ARGS...]\n"
               "       sefer stat [URL] [--token-file FILE | --token TOKEN]\n"
               "\n"
               "run   runs PROGRAM with libsefer.so preloaded and its introspection server on\n"
               "      (SEFER_INTROSPECT_ENABLED=1); ADDR as in introspect.listen, e.g.\n"
               "      127.0.0.1:9090, 127.0.0.1:9090+ (next free port) or 127.0.0.1:0 (any)\n"
               "soak  runs the soak workload (sefer-soak) the same way, with config/soak.toml,\n"
               "      and prints the dashboard's URL (default 600 s, listen 127.0.0.1:9090+;\n"
               "      `sefer soak --help`); exits with the soak's status\n"
               "stat  prints a one-screen summary of a process serving at URL\n"
               "      (default " SEFER_CLI_DEFAULT_URL "); the token from SEFER_INTROSPECT_TOKEN or\n"
               "      the first line of FILE (--token puts it where ps shows it to every user)\n");
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr, 2);
    if (strcmp(argv[1], "run") == 0) return cli_run(argc - 1, argv + 1);
    if (strcmp(argv[1], "soak") == 0) return cli_soak(argc - 1, argv + 1);
    if (strcmp(argv[1], "stat") == 0) return cli_stat(argc - 1, argv + 1);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)
        return usage(stdout, 0);
    fprintf(stderr, "sefer: unknown command '%s'\n", argv[1]);
    return usage(stderr, 2);
}
