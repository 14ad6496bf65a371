/* whichalloc.h - which allocator answers malloc in this process?
 *
 * The benchmarks are linked against libc only and run under other allocators
 * with LD_PRELOAD.  A preload that silently did not take effect (a typo in the
 * path, a library that does not export malloc) would make glibc's figures look
 * like someone else's, so every benchmark prints, outside its timed region:
 *
 *   allocator=NAME version=TEXT malloc_from=PATH
 *
 * malloc_from is the object that defines the malloc this process calls (what
 * dlsym(RTLD_DEFAULT) finds first, i.e. what the executable's PLT resolves
 * to); the runner scripts compare it with the library they preloaded.  NAME is
 * guessed from that path; TEXT comes from the allocator's own version call
 * when it has one (sefer_version, mi_version, jemalloc's "version" mallctl,
 * tc_version, gnu_get_libc_version).  Under sefer the line also says which
 * build answered and with which guard level (wa_print_sefer). */
#ifndef SEFER_BENCH_WHICHALLOC_H
#define SEFER_BENCH_WHICHALLOC_H

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <string.h>

typedef const char *(*wa_str_fn)(void);
typedef int (*wa_int_fn)(void);
typedef int (*wa_mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef const char *(*wa_tc_version_fn)(int *, int *, const char **);

/* Name of the allocator that owns `path`, from the file name. */
static inline const char *wa_name_from_path(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strstr(base, "sefer")) return "sefer";
    if (strstr(base, "mimalloc")) return "mimalloc";
    if (strstr(base, "jemalloc")) return "jemalloc";
    if (strstr(base, "tcmalloc")) return "tcmalloc";
    if (strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0) return "glibc";
    return "unknown";
}

/* Version text of allocator `name`, written into buf. */
static inline void wa_version(const char *name, char *buf, size_t len) {
    snprintf(buf, len, "-");
    if (strcmp(name, "sefer") == 0) {
        wa_str_fn f = (wa_str_fn)dlsym(RTLD_DEFAULT, "sefer_version");
        if (f) snprintf(buf, len, "%s", f());
    } else if (strcmp(name, "mimalloc") == 0) {
        wa_int_fn f = (wa_int_fn)dlsym(RTLD_DEFAULT, "mi_version");
        int v = f ? f() : -1; /* 209 is 2.0.9 */
        if (v >= 0) snprintf(buf, len, "%d.%d.%d", v / 100, v / 10 % 10, v % 10);
    } else if (strcmp(name, "jemalloc") == 0) {
        wa_mallctl_fn f = (wa_mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
        const char *v = NULL;
        size_t sz = sizeof v;
        if (f && f("version", &v, &sz, NULL, 0) == 0 && v) snprintf(buf, len, "%s", v);
    } else if (strcmp(name, "tcmalloc") == 0) {
        wa_tc_version_fn f = (wa_tc_version_fn)dlsym(RTLD_DEFAULT, "tc_version");
        if (f) snprintf(buf, len, "%s", f(NULL, NULL, NULL));
    } else if (strcmp(name, "glibc") == 0) {
        snprintf(buf, len, "%s", gnu_get_libc_version());
    }
    for (char *c = buf; *c; c++)
        if (*c == ' ') *c = '_';
}

typedef int (*wa_config_get_fn)(const char *, char *, size_t);

/* Under sefer, what the runner scripts record as the provenance of a
 * figure, read from the library that served this very process:
 *   build=COMMIT[-dirty]     sefer_build() ("unknown" for a build without it)
 *   build_options=K=V,K=V    sefer_build_options(), spaces made commas
 *   guard_level=N            the guard.level in force
 * (no newline) to out. */
static inline void wa_print_sefer(FILE *out) {
    wa_str_fn build = (wa_str_fn)dlsym(RTLD_DEFAULT, "sefer_build");
    wa_str_fn options = (wa_str_fn)dlsym(RTLD_DEFAULT, "sefer_build_options");
    wa_config_get_fn get = (wa_config_get_fn)dlsym(RTLD_DEFAULT, "sefer_config_get");
    char opts[512], level[32] = "?";
    snprintf(opts, sizeof opts, "%s", options ? options() : "unknown");
    for (char *c = opts; *c; c++)
        if (*c == ' ') *c = ',';
    if (get == NULL || get("guard.level", level, sizeof level) != 0) snprintf(level, sizeof level, "?");
    fprintf(out, " build=%s build_options=%s guard_level=%s", build ? build() : "unknown", opts, level);
}

/* Prints " allocator=... version=... malloc_from=..." (no newline) to out,
 * and for sefer the words of wa_print_sefer. */
static inline void wa_print(FILE *out) {
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info info;
    const char *path = "?";
    if (m && dladdr(m, &info) && info.dli_fname) path = info.dli_fname;
    const char *name = wa_name_from_path(path);
    char version[128];
    wa_version(name, version, sizeof version);
    fprintf(out, " allocator=%s version=%s malloc_from=%s", name, version, path);
    if (strcmp(name, "sefer") == 0) wa_print_sefer(out);
}

#endif
