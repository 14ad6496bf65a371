/* sefer_paths.c - where the `sefer` command finds what it runs: libsefer.so.N
 * (`sefer run`, `sefer soak`), sefer-soak and soak.toml (`sefer soak`).
 *
 * Each is looked for, first found wins:
 *   1. its environment variable (SEFER_LIB, SEFER_SOAK; none for the config,
 *      which --config replaces);
 *   2. in the meson build tree this executable is in (build/tools/sefer:
 *      DIR/.. holds meson-private/): DIR/../lib/libsefer.so.N,
 *      DIR/../tools/sefer-soak, DIR/../config/soak.toml;
 *   3. in the installed tree this executable belongs to: PREFIX is DIR minus
 *      the configured bindir ("/usr" for /usr/bin/sefer), then
 *      PREFIX/libdir/libsefer.so.N, PREFIX/libexecdir/sefer/sefer-soak and
 *      PREFIX/datadir/sefer/soak.toml, so a tree installed with
 *      `meson install --destdir` or moved elsewhere works as it is;
 *   4. the same under the configured prefix.
 * The library is looked for by its SONAME (libsefer.so.N): the runtime
 * package installs only that name, the libsefer.so link is for linking.
 * Nothing of the source or build tree is compiled in: the meson build gives
 * only the install layout (SEFER_CLI_* below; docs/install.md). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sefer_cli.h"

/* Install layout, from meson (tools/meson.build); these defaults are meson's. */
#ifndef SEFER_CLI_SONAME
#define SEFER_CLI_SONAME "libsefer.so.0"
#endif
#ifndef SEFER_CLI_PREFIX
#define SEFER_CLI_PREFIX "/usr/local"
#endif
#ifndef SEFER_CLI_BINDIR
#define SEFER_CLI_BINDIR "bin"
#endif
#ifndef SEFER_CLI_LIBDIR
#define SEFER_CLI_LIBDIR "lib"
#endif
#ifndef SEFER_CLI_LIBEXECDIR
#define SEFER_CLI_LIBEXECDIR "libexec"
#endif
#ifndef SEFER_CLI_DATADIR
#define SEFER_CLI_DATADIR "share"
#endif

bool cli_exe_dir(char *dir, size_t len) {
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0) return false;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash != NULL) *slash = '\0';
    return true;
}

/* The prefix of the installed tree holding this executable: its directory
 * with the bindir stripped from the end; false if it is not in one. */
static bool exe_prefix(char *out, size_t len) {
    const char *bindir = SEFER_CLI_BINDIR;
    if (bindir[0] == '/' || !cli_exe_dir(out, len)) return false;
    size_t n = strlen(out), b = strlen(bindir);
    if (n <= b || out[n - b - 1] != '/' || strcmp(out + n - b, bindir) != 0) return false;
    out[n - b - 1] = '\0';
    return true;
}

/* PREFIX/DIR/NAME into out (DIR alone if absolute); true if it is there
 * with the access mode wanted. */
static bool try_installed(const char *prefix, const char *dir, const char *name, int mode, char *out,
                          size_t len) {
    int n = dir[0] == '/' ? snprintf(out, len, "%s/%s", dir, name)
                          : snprintf(out, len, "%s/%s/%s", prefix, dir, name);
    return n > 0 && (size_t)n < len && access(out, mode) == 0;
}

/* Steps 2-4 of the comment at the top for one file; out holds the last
 * path tried when nothing is found, for the error message. */
static bool find(const char *build_rel, const char *dir, const char *name, int mode, char *out,
                 size_t len) {
    char base[PATH_MAX];
    if (cli_exe_dir(base, sizeof base)) {
        int n = snprintf(out, len, "%s/../meson-private", base);
        bool build_tree = n > 0 && (size_t)n < len && access(out, F_OK) == 0;
        n = snprintf(out, len, "%s/../%s", base, build_rel);
        if (build_tree && n > 0 && (size_t)n < len && access(out, mode) == 0) return true;
    }
    if (exe_prefix(base, sizeof base) && try_installed(base, dir, name, mode, out, len)) return true;
    return try_installed(SEFER_CLI_PREFIX, dir, name, mode, out, len);
}

static bool from_env(const char *var, int mode, char *out, size_t len, bool *found) {
    const char *forced = getenv(var);
    if (forced == NULL || !*forced) return false;
    snprintf(out, len, "%s", forced);
    *found = access(out, mode) == 0;
    return true;
}

bool cli_find_library(char *out, size_t len) {
    bool found;
    if (from_env("SEFER_LIB", R_OK, out, len, &found)) return found;
    /* absolute (from /proc/self/exe or the prefix), and the SONAME link
     * rather than the file it points to, so that an upgrade of the library
     * reaches the program's next child */
    return find("lib/" SEFER_CLI_SONAME, SEFER_CLI_LIBDIR, SEFER_CLI_SONAME, R_OK, out, len);
}

bool cli_find_soak(char *out, size_t len) {
    bool found;
    if (from_env("SEFER_SOAK", X_OK, out, len, &found)) return found;
    return find("tools/sefer-soak", SEFER_CLI_LIBEXECDIR "/sefer", "sefer-soak", X_OK, out, len);
}

bool cli_find_soak_config(char *out, size_t len) {
    return find("config/soak.toml", SEFER_CLI_DATADIR "/sefer", "soak.toml", R_OK, out, len);
}
