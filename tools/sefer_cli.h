/* sefer_cli.h - the `sefer` command (tools/sefer*.c): shared declarations.
 * It links libc and cJSON only, never libsefer: it runs other programs under
 * sefer and reads their introspection endpoints. */
#ifndef SEFER_CLI_H
#define SEFER_CLI_H

#include <stdbool.h>
#include <stddef.h>

#define SEFER_CLI_DEFAULT_URL "http://127.0.0.1:9090/"

/* sefer_http.c: a minimal HTTP/1.1 client (GET over a plain TCP socket,
 * Connection: close, bounded time and size).  Returns the status code and
 * the body (malloc, NUL-terminated) in *body, or -1 with the reason in err. */
int cli_http_get(const char *url, const char *path, const char *token, char **body, size_t *len,
                 char *err, size_t errlen);

/* sefer_paths.c: the directory of the running executable (the sefer
 * command itself), and the files it runs, found in the build tree or the
 * installed tree it belongs to.  Each writes an absolute path to out and
 * returns true, or false with the last path tried in out. */
bool cli_exe_dir(char *dir, size_t len);
bool cli_find_library(char *out, size_t len);     /* libsefer.so.N, or SEFER_LIB */
bool cli_find_soak(char *out, size_t len);        /* sefer-soak, or SEFER_SOAK */
bool cli_find_soak_config(char *out, size_t len); /* soak.toml */

int cli_run(int argc, char **argv);  /* sefer_run.c */
int cli_soak(int argc, char **argv); /* sefer_soak.c */
int cli_stat(int argc, char **argv); /* sefer_stat.c */

#endif
