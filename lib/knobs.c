/* knobs.c - the values of the knobs and where they came from.
 *
 * The table (SF_KNOBS in internal.h, as data in knob_table.c) gives each
 * knob its name, type, default, bounds, whether it may change while the
 * program runs, and a one-line meaning.  Values live in an array of 64-bit
 * atomics so the allocator reads them without locks; strings live in fixed
 * buffers.
 *
 * Start-up (sf_knobs_init, from the first allocation's slow path, before
 * any allocation is served, maybe inside the dynamic loader) applies, in
 * order: the defaults, the SEFER_CONFIG file, the SEFER_* variables.  A
 * runtime sefer_config_set comes last.  None of it calls malloc or stdio:
 * secure_getenv, open, fstat, read, close, write and _exit only; the file goes into
 * a static buffer (and, before libc has set environ, the SEFER_* entries of
 * /proc/self/environ: knob_getenv).  Every bad input is reported once on stderr as
 *   FILE:LINE: KEY: what is wrong (default kept)
 *   SEFER_X=value: KEY: what is wrong (default kept)
 * and with SEFER_CONFIG_STRICT=1 refuses the start (exit status 78).
 * sefer_config_get/set (config.c) read and change them at run time. */
#include "internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

_Atomic uint64_t sf_knob_value[SF_KNOB_COUNT];
static uint8_t knob_source[SF_KNOB_COUNT];
static char knob_strings[SF_KNOB_COUNT][SF_KNOB_STR_MAX];
pthread_mutex_t sf_knob_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const source_names[] = {
    [SF_SRC_DEFAULT] = "default", [SF_SRC_FILE] = "file", [SF_SRC_ENV] = "env", [SF_SRC_RUNTIME] = "runtime"};

void sf_knob_set(int i, uint64_t v, const char *str, uint8_t source) {
    if (sf_knob_defs[i].type == SF_KNOB_STRING) {
        size_t n = strlen(str);
        if (n >= SF_KNOB_STR_MAX) n = SF_KNOB_STR_MAX - 1;
        memcpy(knob_strings[i], str, n);
        knob_strings[i][n] = '\0';
    } else {
        atomic_store_explicit(&sf_knob_value[i], v, memory_order_relaxed);
    }
    knob_source[i] = source;
}

static void set_default(int i) {
    sf_knob_set(i, sf_knob_defs[i].def, sf_knob_default_string(i), SF_SRC_DEFAULT);
}

/* ---- start-up ------------------------------------------------------------------ */

static unsigned startup_errors;

/* Writes one report line, cut to fit, with a newline. */
static void report_line(sf_str_t *s) {
    if (s->len + 1 >= s->cap) s->len = s->cap - 2;
    s->buf[s->len++] = '\n';
    s->buf[s->len] = '\0';
    sf_write_stderr(s->buf);
    startup_errors++;
}

struct file_ctx {
    const char *path;
};

static void file_set(void *ctx, int knob, uint64_t value, const char *str, unsigned line) {
    (void)ctx;
    (void)line;
    sf_knob_set(knob, value, str, SF_SRC_FILE);
}

static void file_unset(void *ctx, int knob, unsigned line) {
    (void)ctx;
    (void)line;
    set_default(knob);
}

static void file_error(void *ctx, unsigned line, const char *key, const char *msg) {
    const struct file_ctx *f = ctx;
    char buf[1024];
    sf_str_t s;
    sf_str_init(&s, buf, sizeof buf);
    sf_str_add_clean(&s, f->path, strlen(f->path), 512);
    sf_str_add(&s, ":");
    sf_str_addu(&s, line);
    sf_str_add(&s, ": ");
    sf_str_add_clean(&s, key, strlen(key), 128);
    sf_str_add(&s, ": ");
    sf_str_add_clean(&s, msg, strlen(msg), 400);
    sf_str_add(&s, line ? " (default kept)" : " (defaults kept)");
    report_line(&s);
}

static void file_failed(struct file_ctx *f, const char *what, const char *why) {
    char msg[160];
    sf_str_t s;
    sf_str_init(&s, msg, sizeof msg);
    sf_str_add(&s, what);
    sf_str_add(&s, why);
    file_error(f, 0, "-", msg);
}

/* Read once, at start-up, by the one thread initialising sefer. */
static char file_buf[SF_CONFIG_FILE_MAX];

static void load_file(const char *path) {
    struct file_ctx f = {path};
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        file_failed(&f, "cannot open: ", sf_errno_text(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        file_failed(&f, "cannot read: ", sf_errno_text(EISDIR));
        return;
    }
    size_t len = 0;
    bool too_large = false;
    for (;;) {
        char extra;
        bool full = len == sizeof file_buf;
        ssize_t n = full ? read(fd, &extra, 1) : read(fd, file_buf + len, sizeof file_buf - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            file_failed(&f, "cannot read: ", sf_errno_text(e));
            return;
        }
        if (n == 0) break;
        if (full) {
            too_large = true;
            break;
        }
        len += (size_t)n;
    }
    close(fd);
    if (too_large) {
        char msg[64];
        sf_str_t s;
        sf_str_init(&s, msg, sizeof msg);
        sf_str_add(&s, "file too large (max ");
        sf_str_addu(&s, SF_CONFIG_FILE_MAX);
        sf_str_add(&s, " bytes)");
        file_error(&f, 0, "-", msg);
        return;
    }
    sf_config_parse(file_buf, len, &(sf_config_sink_t){&f, file_set, file_unset, file_error});
}

/* "SEFER_X=value: key: what (default kept)" */
static void report_env(const char *var, size_t var_len, const char *value, const char *key,
                       const char *msg, const char *kept) {
    char buf[512];
    sf_str_t s;
    sf_str_init(&s, buf, sizeof buf);
    sf_str_add_clean(&s, var, var_len, 64);
    sf_str_add(&s, "=");
    sf_str_add_clean(&s, value, strlen(value), 64);
    sf_str_add(&s, ": ");
    sf_str_add(&s, key);
    sf_str_add(&s, ": ");
    sf_str_add(&s, msg);
    sf_str_add(&s, kept);
    report_line(&s);
}

extern char **environ;

/* The SEFER_* entries of the environment execve gave, when sefer starts
 * before libc has set environ: a program whose first allocation is made
 * by a function of its .preinit_array (libc sets environ in its own
 * initialiser, which runs after those).  getenv and secure_getenv then
 * answer NULL for everything, and sefer ran on its defaults, silently
 * ignoring SEFER_GUARD_LEVEL and SEFER_CONFIG.  /proc/self/environ holds
 * what environ will hold; its SEFER_* entries are kept in static memory
 * (what does not fit in it is left out, as no program sets that much).
 * Empty in a process running with AT_SECURE (set-user-ID), where
 * secure_getenv would answer NULL too. */
#define EARLY_VARS 64
static char early_bytes[8192];
static char *early_vars[EARLY_VARS + 1];

static char **early_environ(void) {
    static bool read_once;
    if (read_once) return early_vars;
    read_once = true;
    if (getauxval(AT_SECURE)) return early_vars;
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return early_vars;
    char chunk[1024];
    size_t used = 0, start = 0, pos = 0, n = 0;
    bool keep = true; /* the entry being read may still be a SEFER_ one that fits */
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0) {
        for (ssize_t i = 0; i < got; i++) {
            char c = chunk[i];
            if (keep && ((pos < 6 && c != "SEFER_"[pos]) || used == sizeof early_bytes)) keep = false;
            if (keep) early_bytes[used++] = c;
            if (c != '\0') {
                pos++;
                continue;
            }
            if (keep && n < EARLY_VARS) early_vars[n++] = early_bytes + start;
            else used = start; /* (dropped: its bytes are taken back) */
            start = used;
            pos = 0;
            keep = true;
        }
    }
    close(fd);
    return early_vars;
}

/* The environment the SEFER_* variables are read from (above). */
static char **knob_environ(void) { return environ != NULL ? environ : early_environ(); }

/* secure_getenv, or its answer from early_environ before libc set environ. */
static const char *knob_getenv(const char *name) {
    if (environ != NULL) return secure_getenv(name);
    size_t len = strlen(name);
    for (char **e = early_environ(); *e != NULL; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
    return NULL;
}

/* Variables in a knob table's name space that sefer itself sets and that
 * are not knobs: `sefer run` exports SEFER_INTROSPECT_PID
 * (introspect/autostart.c). */
static bool sefer_own_variable(const char *var, size_t len) {
    return len == 20 && memcmp(var, "SEFER_INTROSPECT_PID", 20) == 0;
}

/* A SEFER_<TABLE>_... variable that names no knob is a typo, not someone
 * else's variable: report it. */
static void check_unknown_env(void) {
    for (char **e = knob_environ(); e && *e; e++) {
        const char *var = *e, *eq = strchr(var, '=');
        if (eq == NULL || strncmp(var, "SEFER_", 6) != 0) continue;
        size_t len = (size_t)(eq - var);
        if (sefer_own_variable(var, len)) continue;
        bool known = false, in_table = false;
        for (int i = 0; i < SF_KNOB_COUNT && !known; i++) {
            char name[64];
            size_t n = sf_knob_env_name(i, name, sizeof name);
            known = n == len && memcmp(name, var, len) == 0;
            size_t t = 6 + (size_t)(strchr(sf_knob_defs[i].name, '.') - sf_knob_defs[i].name);
            if (len > t + 1 && memcmp(name, var, t + 1) == 0) in_table = true;
        }
        if (!known && in_table) report_env(var, len, eq + 1, "-", "no such knob", " (ignored)");
    }
}

/* SEFER_CONFIG_STRICT takes what a boolean knob takes; anything else is
 * reported, and counts as strict (the safe reading). */
static bool strict_mode(void) {
    const char *v = knob_getenv("SEFER_CONFIG_STRICT");
    if (v == NULL || *v == '\0') return false;
    uint64_t on = 0;
    char why[96];
    if (sf_knob_from_text(SF_KNOB_INTROSPECT_ENABLED, v, &on, why, sizeof why)) return on != 0;
    report_env("SEFER_CONFIG_STRICT", 19, v, "-", "expected 1 or 0", " (strict mode on)");
    return true;
}

void sf_knobs_init(void) {
    startup_errors = 0;
    for (int i = 0; i < SF_KNOB_COUNT; i++) set_default(i);

    const char *path = knob_getenv("SEFER_CONFIG");
    if (path != NULL && *path != '\0') load_file(path);

    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        char var[64], why[160];
        size_t var_len = sf_knob_env_name(i, var, sizeof var);
        const char *value = knob_getenv(var);
        if (value == NULL) continue;
        uint64_t v = 0;
        if (sf_knob_from_text(i, value, &v, why, sizeof why))
            sf_knob_set(i, v, value, SF_SRC_ENV);
        else
            report_env(var, var_len, value, sf_knob_defs[i].name, why,
                       knob_source[i] == SF_SRC_FILE ? " (file value kept)" : " (default kept)");
    }
    check_unknown_env();

    bool strict = strict_mode();
    if (strict && startup_errors) {
        const char *v = knob_getenv("SEFER_CONFIG_STRICT");
        char buf[128];
        sf_str_t s;
        sf_str_init(&s, buf, sizeof buf);
        sf_str_add(&s, "sefer: SEFER_CONFIG_STRICT=");
        sf_str_add_clean(&s, v, strlen(v), 16);
        sf_str_add(&s, ": refusing to start\n");
        sf_write_stderr(buf);
        _exit(78); /* EX_CONFIG */
    }
}

/* ---- for sefer_config_* (config.c) ----------------------------------------- */

uint8_t sf_knob_source(int i) { return knob_source[i]; }

const char *sf_knob_string(int i) { return knob_strings[i]; }

const char *sf_knob_source_name(int source) {
    return source >= 0 && source <= SF_SRC_RUNTIME ? source_names[source] : "unknown";
}
