/* test_config.c - SEFER_CONFIG files, SEFER_* variables, strict mode,
 * sefer_config_get/set/error/source, the sample files in config/.
 *
 * The configuration is read once, at start-up, so most tests re-execute
 * this program (/proc/self/exe --helper ...) with a config file and
 * variables, and read back what it printed on stdout (every knob's value
 * and source) and on stderr (the error reports), byte for byte. */
#include "sefer_test.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#ifndef SEFER_CONFIG_DIR
#error "SEFER_CONFIG_DIR (the config/ directory) must be defined by the build"
#endif

static const char *const knob_names[] = {
    "segments.max",       "large_cache.slots", "large_cache.max_bytes", "large_cache.ttl",
    "decommit.policy",    "decommit.delay",    "rings.capacity",        "guard.level",
    "guard.on_error",     "guard.quarantine",  "introspect.enabled",    "introspect.listen",
    "introspect.token"};
#define N_KNOBS (sizeof knob_names / sizeof knob_names[0])

/* ---- the helper side ---------------------------------------------------- */

/* --helper [--set NAME VALUE]...: prints "main", applies the sets (printing
 * "set NAME rc errno error" for each), then "NAME=VALUE SOURCE" per knob. */
static int helper_main(int argc, char **argv)
{
    printf("main\n");
    int i = 2;
    for (; i + 2 < argc + 0 && !strcmp(argv[i], "--set"); i += 3) {
        errno = 0;
        int rc = sefer_config_set(argv[i + 1], argv[i + 2]);
        printf("set %s %d %d %s\n", argv[i + 1], rc, rc ? errno : 0, rc ? sefer_config_error() : "");
    }
    char buf[512];
    for (size_t k = 0; k < N_KNOBS; k++) {
        if (sefer_config_get(knob_names[k], buf, sizeof buf) != 0)
            snprintf(buf, sizeof buf, "<error %d>", errno);
        const char *src = sefer_config_source(knob_names[k]);
        printf("%s=%s %s\n", knob_names[k], buf, src ? src : "<null>");
    }
    /* allocate a little so the allocator did real work with this config */
    void *p[64];
    for (int k = 0; k < 64; k++) {
        p[k] = malloc((size_t)k * 100 + 1);
        st_escape(p[k]);
    }
    for (int k = 0; k < 64; k++)
        free(p[k]);
    return 0;
}

/* --helper --preinit-alloc: the process's first allocation is made by a
 * function of .preinit_array, before libc has set environ, so sefer starts
 * with getenv answering NULL (lib/knobs.c, early_environ).  (strcmp only:
 * nothing here may need libc initialised.) */
static void preinit_alloc(int argc, char **argv, char **envp)
{
    (void)envp;
    if (argc >= 3 && !strcmp(argv[1], "--helper") && !strcmp(argv[2], "--preinit-alloc"))
        sefer_free(sefer_malloc(24));
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_hook)(int, char **, char **) =
    preinit_alloc;

/* ---- the test side --------------------------------------------------------- */

struct run {
    int status;
    char out[16384];
    char err[16384];
};

static void read_all(int fd, char *buf, size_t len)
{
    size_t got = 0;
    if (lseek(fd, 0, SEEK_SET) == 0) {
        while (got + 1 < len) {
            ssize_t n = read(fd, buf + got, len - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    buf[got] = 0;
}

/* Runs the helper with only the given SEFER_* variables (the others are
 * removed from the environment) and extra arguments. */
static void run_helper(struct run *r, char *const env[], char *const args[])
{
    int out = memfd_create("cfg-out", 0), err = memfd_create("cfg-err", 0);
    ck_assert(out >= 0 && err >= 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(out, 1);
        dup2(err, 2);
        static char *envp[512];
        int e = 0;
        for (char **v = environ; *v && e < 400; v++)
            if (strncmp(*v, "SEFER_", 6) != 0)
                envp[e++] = *v;
        for (int k = 0; env && env[k] && e < 510; k++)
            envp[e++] = env[k];
        envp[e] = NULL;
        char *argv[32];
        int a = 0;
        argv[a++] = (char *)"test_config";
        argv[a++] = (char *)"--helper";
        for (int k = 0; args && args[k] && a < 31; k++)
            argv[a++] = args[k];
        argv[a] = NULL;
        alarm(20);
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
    read_all(out, r->out, sizeof r->out);
    read_all(err, r->err, sizeof r->err);
    close(out);
    close(err);
}

static void assert_ran(const struct run *r)
{
    ck_assert_msg(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && !strncmp(r->out, "main\n", 5),
                  "helper %s\nstdout:\n%s\nstderr:\n%s", st_describe_status(r->status), r->out, r->err);
}

/* The value and source the helper printed for a knob. */
static const char *knob_line(const struct run *r, const char *name, char *value, size_t vlen,
                             const char **source)
{
    static char src[32];
    size_t nl = strlen(name);
    for (const char *l = r->out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, name, nl) && l[nl] == '=') {
            const char *end = strchr(l, '\n');
            size_t len = end ? (size_t)(end - l) : strlen(l);
            const char *sp = l + len;
            while (sp > l && *sp != ' ')
                sp--;
            snprintf(value, vlen, "%.*s", (int)(sp - (l + nl + 1)), l + nl + 1);
            snprintf(src, sizeof src, "%.*s", (int)(l + len - sp - 1), sp + 1);
            *source = src;
            return value;
        }
    }
    ck_abort_msg("no line for %s in:\n%s", name, r->out);
    return NULL;
}

#define ASSERT_KNOB(r, name, want_value, want_source)                                          \
    do {                                                                                        \
        char v_[512];                                                                           \
        const char *s_ = NULL;                                                                  \
        knob_line((r), (name), v_, sizeof v_, &s_);                                             \
        ck_assert_msg(!strcmp(v_, (want_value)) && !strcmp(s_, (want_source)),                 \
                      "%s = \"%s\" (%s), expected \"%s\" (%s)\nstderr:\n%s", (name), v_, s_,    \
                      (want_value), (want_source), (r)->err);                                   \
    } while (0)

/* The defaults, read from this (unconfigured) process. */
static char defaults[N_KNOBS][512];
static void load_defaults(void)
{
    for (size_t k = 0; k < N_KNOBS; k++)
        ck_assert_int_eq(sefer_config_get(knob_names[k], defaults[k], sizeof defaults[k]), 0);
}
static const char *default_of(const char *name)
{
    for (size_t k = 0; k < N_KNOBS; k++)
        if (!strcmp(knob_names[k], name))
            return defaults[k];
    ck_abort_msg("no knob %s", name);
    return NULL;
}

static char tmpdir[256];
static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sefer-cfg-XXXXXX");
    ck_assert(mkdtemp(tmpdir) != NULL);
    load_defaults();
}
static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* Writes a config file; returns its path (static: one at a time). */
static const char *write_config(const char *name, const char *text, size_t len)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(fd >= 0);
    ck_assert(write(fd, text, len) == (ssize_t)len);
    close(fd);
    return path;
}

static char env_config[1024];
static char *config_env(const char *path)
{
    snprintf(env_config, sizeof env_config, "SEFER_CONFIG=%s", path);
    return env_config;
}

/* ---- every error, with its message and the rest of the file applied ---- */

static const struct bad_line {
    const char *file;    /* the config; "%L" lines follow */
    unsigned line;       /* where the error is */
    const char *report;  /* "KEY: message" */
    const char *knob;    /* a knob that must keep its default (or NULL) */
} bad_lines[] = {
    {"[guard]\nlevel = [1, 2]\n", 2, "guard.level: arrays are not supported", "guard.level"},
    {"[guard]\non_error = { a = 1 }\n", 2, "guard.on_error: inline tables are not supported", "guard.on_error"},
    {"[decommit]\ndelay = 1.5\n", 2, "decommit.delay: floats are not supported", "decommit.delay"},
    {"[decommit]\ndelay = 1e3\n", 2, "decommit.delay: floats are not supported", "decommit.delay"},
    {"[decommit]\ndelay = -inf\n", 2, "decommit.delay: floats are not supported", "decommit.delay"},
    {"[decommit]\ndelay = nan\n", 2, "decommit.delay: floats are not supported", "decommit.delay"},
    {"[decommit]\ndelay = 1979-05-27\n", 2, "decommit.delay: dates and times are not supported", "decommit.delay"},
    {"[decommit]\ndelay = 07:32:00\n", 2, "decommit.delay: dates and times are not supported", "decommit.delay"},
    {"[introspect]\ntoken = \"\"\"abc\"\"\"\n", 2, "introspect.token: multi-line strings are not supported", "introspect.token"},
    {"[introspect]\ntoken = '''abc'''\n", 2, "introspect.token: multi-line strings are not supported", "introspect.token"},
    {"[guard]\nlevel = 3\nlevel = 2\n", 3, "guard.level: set twice (first on line 2): both ignored", "guard.level"},
    {"guard.level = 3\n[guard]\nlevel = 2\n", 3, "guard.level: set twice (first on line 1): both ignored", "guard.level"},
    {"[nosuch]\nlevel = 1\n", 1,
     "[nosuch]: unknown table (known: segments, large_cache, decommit, threads, memory, rings, guard, valgrind, profile, introspect); keys up to the next [table] are ignored",
     NULL},
    {"[guard.deep]\nlevel = 3\n", 1,
     "[guard.deep]: unknown table (known: segments, large_cache, decommit, threads, memory, rings, guard, valgrind, profile, introspect); keys up to the next [table] are ignored",
     "guard.level"},
    {"[guard]\nlevle = 3\n", 2, "guard.levle: unknown key", NULL},
    {"level = 3\n", 1, "level: unknown key", "guard.level"},
    {"[guard]\nguard.level = 3\n", 2, "guard.guard.level: unknown key", "guard.level"},
    {"[guard]\nlevel = \"2\"\n", 2, "guard.level: expected an integer, not a string", "guard.level"},
    {"[guard]\non_error = 1\n", 2, "guard.on_error: expected one of \"abort\" or \"report\", not an integer", "guard.on_error"},
    {"[introspect]\nenabled = 1\n", 2, "introspect.enabled: expected true or false, not an integer", "introspect.enabled"},
    {"[introspect]\nenabled = \"true\"\n", 2, "introspect.enabled: expected true or false, not a string", "introspect.enabled"},
    {"[large_cache]\nslots = true\n", 2, "large_cache.slots: expected an integer, not a boolean", "large_cache.slots"},
    {"[introspect]\ntoken = 5\n", 2, "introspect.token: expected a string, not an integer", "introspect.token"},
    {"[large_cache]\nmax_bytes = false\n", 2, "large_cache.max_bytes: expected a size, not a boolean", "large_cache.max_bytes"},
    {"[large_cache]\nttl = true\n", 2, "large_cache.ttl: expected a duration, not a boolean", "large_cache.ttl"},
    {"[guard]\nlevel = 9\n", 2, "guard.level: out of range 0-3", "guard.level"},
    {"[rings]\ncapacity = 1\n", 2, "rings.capacity: out of range 2-1048576", "rings.capacity"},
    {"[guard]\nlevel = -1\n", 2, "guard.level: out of range 0-3", "guard.level"},
    {"[large_cache]\nmax_bytes = \"2TiB\"\n", 2, "large_cache.max_bytes: out of range 0-1TiB", "large_cache.max_bytes"},
    {"[large_cache]\nttl = \"61min\"\n", 2, "large_cache.ttl: out of range 0-60min", "large_cache.ttl"},
    {"[guard]\nquarantine = \"65MiB\"\n", 2, "guard.quarantine: out of range 0-64MiB", "guard.quarantine"},
    {"[large_cache]\nmax_bytes = \"99999999999999999999GiB\"\n", 2, "large_cache.max_bytes: out of range 0-1TiB", "large_cache.max_bytes"},
    {"[large_cache]\nmax_bytes = \"64 parsecs\"\n", 2,
     "large_cache.max_bytes: not a size (a number, optionally followed by B, KiB, MiB, GiB or TiB)", "large_cache.max_bytes"},
    {"[large_cache]\nmax_bytes = \"1.5GiB\"\n", 2,
     "large_cache.max_bytes: not a size (a number, optionally followed by B, KiB, MiB, GiB or TiB)", "large_cache.max_bytes"},
    {"[decommit]\ndelay = \"10 fortnights\"\n", 2,
     "decommit.delay: not a duration (a number, optionally followed by ms, s or min)", "decommit.delay"},
    {"[decommit]\npolicy = \"sometimes\"\n", 2, "decommit.policy: expected one of never, eager, delayed or adaptive", "decommit.policy"},
    {"[introspect]\ntoken = \"abc\n", 2, "introspect.token: unterminated string", "introspect.token"},
    {"[introspect]\ntoken = 'abc\n", 2, "introspect.token: unterminated string", "introspect.token"},
    {"[introspect]\ntoken = \"abc\\q\"\n", 2, "introspect.token: invalid escape in string (only \\\" \\\\ \\n \\t)", "introspect.token"},
    {"[introspect]\ntoken = \"abc\\u0041\"\n", 2, "introspect.token: unsupported escape in string (only \\\" \\\\ \\n \\t)", "introspect.token"},
    {"[introspect]\ntoken = \"a\x01" "b\"\n", 2, "introspect.token: control character in string", "introspect.token"},
    {"[introspect]\ntoken = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n",
     2, "introspect.token: too long (max 127 bytes)", "introspect.token"},
    /* a key or table name too long to be a knob's: its start is shown */
    {"[guard]\nllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll = 3\n", 2, "guard.llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll...: unknown key", "guard.level"},
    {"[gggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg]\nlevel = 3\n", 1,
     "[gggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg...]: unknown table (known: segments, large_cache, decommit, threads, memory, rings, guard, valgrind, profile, introspect); keys up to the next [table] are ignored",
     "guard.level"},
    {"[guard]\nlevel = 2 3\n", 2, "guard.level: unexpected text after the value", "guard.level"},
    {"[guard]\nlevel = 2 # fine\non_error = \"report\" \"abort\"\n", 3, "guard.on_error: unexpected text after the value", "guard.on_error"},
    {"[guard] x\nlevel = 3\n", 1, "[guard]: unexpected text after the table header; keys up to the next [table] are ignored", "guard.level"},
    {"[guard\nlevel = 3\n", 1, "-: malformed table header (expected ']'); keys up to the next [table] are ignored", "guard.level"},
    {"[[guard]]\nlevel = 3\n", 1, "-: arrays of tables are not supported; keys up to the next [table] are ignored", "guard.level"},
    {"[\"guard\"]\nlevel = 3\n", 1, "-: malformed table header; keys up to the next [table] are ignored", "guard.level"},
    {"[guard]\nlevel 3\n", 2, "guard.level: expected '=' after the key", "guard.level"},
    {"[guard]\nlevel =\n", 2, "guard.level: missing value", "guard.level"},
    {"[guard]\nlevel = # nothing\n", 2, "guard.level: missing value", "guard.level"},
    {"[guard]\n= 3\n", 2, "-: missing key before '='", "guard.level"},
    {"[guard]\n\"level\" = 3\n", 2, "-: quoted keys are not supported", "guard.level"},
    {"guard..level = 3\n", 1, "-: malformed key (expected letters, digits, '_' or '-')", "guard.level"},
    /* a byte no key can hold (UTF-8 letters here): the key as written, '?' for its bytes outside printable ASCII */
    {"[guard]\ngröße = 3\n", 2, "guard.gr????e: malformed key (holds a character other than ASCII letters, digits, '_' and '-')", NULL},
    {"guard.lével = 3\n", 1, "guard.l??vel: malformed key (holds a character other than ASCII letters, digits, '_' and '-')", "guard.level"},
    {"[guard]\nÄ = 3\n", 2, "guard.??: malformed key (holds a character other than ASCII letters, digits, '_' and '-')", NULL},
    {"[guard]\nlevel\x1b[2J\xff = 3\n", 2, "guard.level?[2J?: malformed key (holds a character other than ASCII letters, digits, '_' and '-')", "guard.level"},
    {"[decommit]\npolicy = eager\n", 2, "decommit.policy: expected a value (strings need quotes)", "decommit.policy"},
    {"[guard]\nlevel = 0x2\n", 2, "guard.level: hexadecimal, octal and binary integers are not supported", "guard.level"},
    {"[guard]\nlevel = 02\n", 2, "guard.level: leading zeros are not allowed", "guard.level"},
    {"[segments]\nmax = 1__000\n", 2, "segments.max: malformed integer ('_' must sit between digits)", NULL},
    {"[segments]\nmax = 99999999999999999999\n", 2, "segments.max: integer too large (TOML integers are 64-bit)", NULL},
    {"[guard]\nlevel = 3\n[guard]\n", 3, "[guard]: table defined twice (its keys still apply)", NULL},
    {"@@@\n", 1, "-: expected a key, [table], comment or blank line", NULL},
    /* a carriage return not part of a CRLF, wherever it stands (the last byte of a file: test_file_cr_at_end) */
    {"[guard]\r\nlevel = 3\r\n\rx = 1\n", 3, "-: a carriage return not followed by a newline", NULL},
    {"[guard]\nlevel = 3\r # x\n", 2, "guard.level: a carriage return not followed by a newline", "guard.level"},
    {"[guard]\nlevel\r= 3\n", 2, "guard.level: a carriage return not followed by a newline", "guard.level"},
    {"[guard]\nlevel =\r3\n", 2, "guard.level: a carriage return not followed by a newline", "guard.level"},
    {"[guard]\rlevel = 3\r", 1, "[guard]: a carriage return not followed by a newline; keys up to the next [table] are ignored", "guard.level"},
};

/* Each bad line: exactly one report "FILE:LINE: KEY: message (default
 * kept)", the knob it names keeps its default, and the rest of the file
 * (a good line after it, in its own table) still applies. */
START_TEST(test_file_error)
{
    const struct bad_line *b = &bad_lines[_i];
    /* the good line goes in a table the case does not use */
    bool lc = strstr(b->file, "large_cache") != NULL;
    const char *good_knob = lc ? "rings.capacity" : "large_cache.slots";
    char text[1024];
    int n = snprintf(text, sizeof text, "%s\n%s\n", b->file,
                     lc ? "[rings]\ncapacity = 128" : "[large_cache]\nslots = 7");
    const char *path = write_config("bad.toml", text, (size_t)n);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[1024];
    snprintf(want, sizeof want, "%s:%u: %s (default kept)\n", path, b->line, b->report);
    ck_assert_msg(!strcmp(r.err, want), "case %d: stderr\n%s\nexpected\n%s", _i, r.err, want);
    ASSERT_KNOB(&r, good_knob, lc ? "128" : "7", "file");
    if (b->knob)
        ASSERT_KNOB(&r, b->knob, default_of(b->knob), "default");
}
END_TEST

/* The helper run with SEFER_CONFIG naming a file of text; returns its path. */
static const char *run_config(struct run *r, const char *name, const char *text, size_t len)
{
    const char *path = write_config(name, text, len);
    char *env[] = {config_env(path), NULL};
    run_helper(r, env, NULL);
    assert_ran(r);
    return path;
}

/* A carriage return as the file's last byte (a CRLF file cut short) is
 * named, not "unexpected text after the value"; a last CRLF is a line end. */
START_TEST(test_file_cr_at_end)
{
    static const char text[] = "[guard]\r\nlevel = 2\r\n[rings]\r\ncapacity = 64\r\n";
    static struct run r;
    const char *path = run_config(&r, "cr.toml", text, sizeof text - 2);
    char want[600];
    snprintf(want, sizeof want, "%s:4: rings.capacity: a carriage return not followed by a newline (default kept)\n", path);
    ck_assert_str_eq(r.err, want);
    ASSERT_KNOB(&r, "guard.level", "2", "file");
    ASSERT_KNOB(&r, "rings.capacity", default_of("rings.capacity"), "default");

    run_config(&r, "cr.toml", text, sizeof text - 1);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "rings.capacity", "64", "file");
}
END_TEST

/* Several errors in one file: each reported once, in order, and everything
 * else applied. */
START_TEST(test_file_many_errors)
{
    static const char text[] = "# a config with mistakes\n"
                               "[segments]\n"
                               "max = 300\n"
                               "[large_cache]\n"
                               "slots = 99\n"
                               "max_bytes = \"64MiB\"\n"
                               "[bogus]\n"
                               "x = 1\n"
                               "[guard]\n"
                               "level = 2\n"
                               "on_error = report\n"
                               "quarantine = \"1MiB\" # ok\n";
    const char *path = write_config("many.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[2048];
    snprintf(want, sizeof want,
             "%s:5: large_cache.slots: out of range 0-64 (default kept)\n"
             "%s:7: [bogus]: unknown table (known: segments, large_cache, decommit, threads, memory, rings, guard, "
             "valgrind, profile, introspect); keys up to the next [table] are ignored (default kept)\n"
             "%s:11: guard.on_error: expected a value (strings need quotes) (default kept)\n",
             path, path, path);
    ck_assert_msg(!strcmp(r.err, want), "stderr\n%s\nexpected\n%s", r.err, want);
    ASSERT_KNOB(&r, "segments.max", "300", "file");
    ASSERT_KNOB(&r, "large_cache.slots", default_of("large_cache.slots"), "default");
    ASSERT_KNOB(&r, "large_cache.max_bytes", "67108864", "file");
    ASSERT_KNOB(&r, "guard.level", "2", "file");
    ASSERT_KNOB(&r, "guard.on_error", default_of("guard.on_error"), "default");
    ASSERT_KNOB(&r, "guard.quarantine", "1048576", "file");
}
END_TEST

START_TEST(test_file_missing)
{
    char path[400];
    snprintf(path, sizeof path, "%s/does-not-exist.toml", tmpdir);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[600];
    snprintf(want, sizeof want, "%s:0: -: cannot open: No such file or directory (defaults kept)\n", path);
    ck_assert_str_eq(r.err, want);
    for (size_t k = 0; k < N_KNOBS; k++)
        ASSERT_KNOB(&r, knob_names[k], defaults[k], "default");
}
END_TEST

START_TEST(test_file_directory)
{
    char *env[] = {config_env(tmpdir), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[600];
    snprintf(want, sizeof want, "%s:0: -: cannot read: Is a directory (defaults kept)\n", tmpdir);
    ck_assert_str_eq(r.err, want);
}
END_TEST

START_TEST(test_file_not_a_directory)
{
    const char *file = write_config("plain", "", 0);
    char path[500];
    snprintf(path, sizeof path, "%s/x.toml", file);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[600];
    snprintf(want, sizeof want, "%s:0: -: cannot open: Not a directory (defaults kept)\n", path);
    ck_assert_str_eq(r.err, want);
}
END_TEST

/* 64 KiB is accepted (a valid key in its last line); one byte more is an
 * error for the whole file. */
START_TEST(test_file_size_limit)
{
    static char text[(64 << 10) + 1];
    const char *last = "guard.level = 2\n";
    size_t n = (64 << 10) - strlen(last);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        memset(text + i, ' ', 64);
        text[i] = '#';
        text[i + 63] = '\n';
    }
    memset(text + i, '\n', n - i);
    memcpy(text + n, last, strlen(last));
    const char *path = write_config("big.toml", text, 64 << 10);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "guard.level", "2", "file");

    text[64 << 10] = '\n';
    path = write_config("big.toml", text, (64 << 10) + 1);
    run_helper(&r, env, NULL);
    assert_ran(&r);
    char want[600];
    snprintf(want, sizeof want, "%s:0: -: file too large (max 65536 bytes) (defaults kept)\n", path);
    ck_assert_str_eq(r.err, want);
    ASSERT_KNOB(&r, "guard.level", default_of("guard.level"), "default");
}
END_TEST

/* Every knob from a file, in every value form: nothing on stderr. */
START_TEST(test_file_all_forms)
{
    static const char text[] = "\xef\xbb\xbf# BOM, CRLF, comments, dotted keys, both string kinds\r\n"
                               "segments.max = 1_024   # underscores\r\n"
                               "\r\n"
                               "  [ large_cache ]  # spaces in the header\n"
                               "slots = +8\n"
                               "max_bytes = \"1 GiB\"\n"
                               "ttl = \"1min\"\n"
                               "[decommit]\n"
                               "\tpolicy\t=\t\"never\"\n"
                               "delay = 250\n"
                               "[rings]\n"
                               "capacity = 16\n"
                               "[guard]\n"
                               "level = 0\n"
                               "on_error = 'report'\n"
                               "quarantine = 4096\n"
                               "[introspect]\n"
                               "enabled = false\n"
                               "listen = \"127.0.0.1:19090\"\n"
                               "token = \"a\\\"b\\\\c\\td\\ne#f\"  # \" inside\n";
    const char *path = write_config("all.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "segments.max", "1024", "file");
    ASSERT_KNOB(&r, "large_cache.slots", "8", "file");
    ASSERT_KNOB(&r, "large_cache.max_bytes", "1073741824", "file");
    ASSERT_KNOB(&r, "large_cache.ttl", "60000ms", "file");
    ASSERT_KNOB(&r, "decommit.policy", "never", "file");
    ASSERT_KNOB(&r, "decommit.delay", "250ms", "file");
    ASSERT_KNOB(&r, "rings.capacity", "16", "file");
    ASSERT_KNOB(&r, "guard.level", "0", "file");
    ASSERT_KNOB(&r, "guard.on_error", "report", "file");
    ASSERT_KNOB(&r, "guard.quarantine", "4096", "file");
    ASSERT_KNOB(&r, "introspect.enabled", "false", "file");
    ASSERT_KNOB(&r, "introspect.listen", "127.0.0.1:19090", "file");
    /* the token holds a newline: its line is "introspect.token=a"b\c<TAB>d" then "e#f file" */
    ck_assert_msg(strstr(r.out, "introspect.token=a\"b\\c\td\ne#f file\n") != NULL, "stdout:\n%s", r.out);
}
END_TEST

/* Units in strings, and the bare-number forms. */
START_TEST(test_file_units)
{
    static const struct {
        const char *line, *knob, *value;
    } cases[] = {
        {"large_cache.max_bytes = \"512KiB\"", "large_cache.max_bytes", "524288"},
        {"large_cache.max_bytes = \"3K\"", "large_cache.max_bytes", "3072"},
        {"large_cache.max_bytes = \"2MB\"", "large_cache.max_bytes", "2097152"},
        {"large_cache.max_bytes = \"64MiB\"", "large_cache.max_bytes", "67108864"},
        {"large_cache.max_bytes = \"1TiB\"", "large_cache.max_bytes", "1099511627776"},
        {"large_cache.max_bytes = \"100B\"", "large_cache.max_bytes", "100"},
        {"large_cache.max_bytes = \"100\"", "large_cache.max_bytes", "100"},
        {"large_cache.max_bytes = 0", "large_cache.max_bytes", "0"},
        {"large_cache.ttl = \"250ms\"", "large_cache.ttl", "250ms"},
        {"large_cache.ttl = \"2s\"", "large_cache.ttl", "2000ms"},
        {"large_cache.ttl = \"60min\"", "large_cache.ttl", "3600000ms"},
        {"large_cache.ttl = 1500", "large_cache.ttl", "1500ms"},
        {"guard.quarantine = \"64MiB\"", "guard.quarantine", "67108864"},
    };
    static struct run r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        int n = snprintf(text, sizeof text, "%s\n", cases[i].line);
        const char *path = write_config("units.toml", text, (size_t)n);
        char *env[] = {config_env(path), NULL};
        run_helper(&r, env, NULL);
        assert_ran(&r);
        ck_assert_msg(r.err[0] == 0, "%s: stderr %s", cases[i].line, r.err);
        ASSERT_KNOB(&r, cases[i].knob, cases[i].value, "file");
    }
}
END_TEST

/* ---- the environment ----------------------------------------------------- */

START_TEST(test_env_errors)
{
    static const char text[] = "[guard]\nlevel = 2\n";
    const char *path = write_config("env.toml", text, sizeof text - 1);
    char *env[] = {config_env(path),
                   "SEFER_GUARD_LEVEL=9",
                   "SEFER_SEGMENTS_MAX=lots",
                   "SEFER_DECOMMIT_POLICY=sometimes",
                   "SEFER_LARGE_CACHE_MAX_BYTES=64 parsecs",
                   "SEFER_DECOMMIT_DELAY=soon",
                   "SEFER_INTROSPECT_ENABLED=maybe",
                   "SEFER_LARGE_CACHE_SLOTS=-1",
                   "SEFER_GUARD_LEVLE=3",
                   "SEFER_SETUP_SOMETHING=1", /* not a knob table: someone else's */
                   "SEFER_INTROSPECT_PID=1",  /* set by `sefer run`: not a typo */
                   NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    static const char want[] =
        "SEFER_SEGMENTS_MAX=lots: segments.max: not an integer (default kept)\n"
        "SEFER_LARGE_CACHE_SLOTS=-1: large_cache.slots: out of range 0-64 (default kept)\n"
        "SEFER_LARGE_CACHE_MAX_BYTES=64 parsecs: large_cache.max_bytes: not a size (a number, "
        "optionally followed by B, KiB, MiB, GiB or TiB) (default kept)\n"
        "SEFER_DECOMMIT_POLICY=sometimes: decommit.policy: expected one of never, eager, delayed or adaptive "
        "(default kept)\n"
        "SEFER_DECOMMIT_DELAY=soon: decommit.delay: not a duration (a number, optionally followed by "
        "ms, s or min) (default kept)\n"
        "SEFER_GUARD_LEVEL=9: guard.level: out of range 0-3 (file value kept)\n"
        "SEFER_INTROSPECT_ENABLED=maybe: introspect.enabled: expected 1/true/yes/on or "
        "0/false/no/off (default kept)\n"
        "SEFER_GUARD_LEVLE=3: -: no such knob (ignored)\n";
    ck_assert_msg(!strcmp(r.err, want), "stderr\n%s\nexpected\n%s", r.err, want);
    ASSERT_KNOB(&r, "guard.level", "2", "file");
    ASSERT_KNOB(&r, "segments.max", default_of("segments.max"), "default");
}
END_TEST

START_TEST(test_env_values)
{
    char *env[] = {"SEFER_INTROSPECT_ENABLED=yes", "SEFER_LARGE_CACHE_MAX_BYTES=3GiB",
                   "SEFER_LARGE_CACHE_TTL=2s",     "SEFER_INTROSPECT_TOKEN=t0k3n",
                   "SEFER_GUARD_QUARANTINE=0",     NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "introspect.enabled", "true", "env");
    ASSERT_KNOB(&r, "large_cache.max_bytes", "3221225472", "env");
    ASSERT_KNOB(&r, "large_cache.ttl", "2000ms", "env");
    ASSERT_KNOB(&r, "introspect.token", "t0k3n", "env");
    ASSERT_KNOB(&r, "guard.quarantine", "0", "env");
}
END_TEST

/* default < file < environment < runtime */
START_TEST(test_precedence)
{
    static const char text[] = "[segments]\nmax = 100\n"
                               "[large_cache]\nslots = 5\nttl = \"3s\"\n"
                               "[guard]\non_error = \"report\"\n";
    const char *path = write_config("prec.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), "SEFER_LARGE_CACHE_SLOTS=6", "SEFER_LARGE_CACHE_TTL=4s",
                   "SEFER_DECOMMIT_DELAY=7ms", NULL};
    char *args[] = {"--set", "large_cache.ttl", "5s", "--set", "decommit.policy", "eager", NULL};
    static struct run r;
    run_helper(&r, env, args);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "rings.capacity", default_of("rings.capacity"), "default"); /* default */
    ASSERT_KNOB(&r, "segments.max", "100", "file");                            /* file */
    ASSERT_KNOB(&r, "guard.on_error", "report", "file");
    ASSERT_KNOB(&r, "large_cache.slots", "6", "env");                          /* file < env */
    ASSERT_KNOB(&r, "decommit.delay", "7ms", "env");                           /* default < env */
    ASSERT_KNOB(&r, "large_cache.ttl", "5000ms", "runtime");                   /* file < env < runtime */
    ASSERT_KNOB(&r, "decommit.policy", "eager", "runtime");                    /* default < runtime */
}
END_TEST

/* sefer started by an allocation in .preinit_array, before libc set
 * environ: the variables and the file they name still apply, and a typo is
 * still reported (before, every one was ignored in silence: a program
 * asked for level 2 ran at level 1). */
START_TEST(test_env_before_libc)
{
    static const char text[] = "[segments]\nmax = 100\n";
    const char *path = write_config("preinit.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), "SEFER_GUARD_LEVEL=2", "SEFER_LARGE_CACHE_SLOTS=6", "SEFER_GUARD_LEVLE=3",
                   NULL};
    char *args[] = {"--preinit-alloc", NULL};
    static struct run r;
    run_helper(&r, env, args);
    assert_ran(&r);
    ck_assert_msg(!strcmp(r.err, "SEFER_GUARD_LEVLE=3: -: no such knob (ignored)\n"), "stderr: %s", r.err);
    ASSERT_KNOB(&r, "guard.level", "2", "env");
    ASSERT_KNOB(&r, "large_cache.slots", "6", "env");
    ASSERT_KNOB(&r, "segments.max", "100", "file");
}
END_TEST

/* A duplicate reverts the knob to its default even though the first value
 * was fine, and the environment still wins over that.  A malformed value
 * counts as given too, first or second (a float, text after the value):
 * the other value does not apply behind a report saying "(default kept)". */
START_TEST(test_duplicate_then_env)
{
    static const char text[] = "[guard]\non_error = \"report\"\non_error = \"report\"\nlevel = 2\n"
                               "[large_cache]\nslots = 5\nslots = 1.5\nttl = 3 s\nttl = 500\n";
    const char *path = write_config("dup.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ASSERT_KNOB(&r, "guard.on_error", default_of("guard.on_error"), "default");
    ASSERT_KNOB(&r, "guard.level", "2", "file");
    ASSERT_KNOB(&r, "large_cache.slots", default_of("large_cache.slots"), "default");
    ASSERT_KNOB(&r, "large_cache.ttl", default_of("large_cache.ttl"), "default");
    char want[1024];
    snprintf(want, sizeof want,
             "%s:3: guard.on_error: set twice (first on line 2): both ignored (default kept)\n"
             "%s:7: large_cache.slots: floats are not supported (default kept)\n"
             "%s:8: large_cache.ttl: unexpected text after the value (default kept)\n"
             "%s:9: large_cache.ttl: set twice (first on line 8): both ignored (default kept)\n",
             path, path, path, path);
    ck_assert_msg(!strcmp(r.err, want), "stderr\n%s\nexpected\n%s", r.err, want);
    char *env2[] = {config_env(path), "SEFER_GUARD_ON_ERROR=report", NULL};
    run_helper(&r, env2, NULL);
    assert_ran(&r);
    ASSERT_KNOB(&r, "guard.on_error", "report", "env");
}
END_TEST

/* ---- strict mode ------------------------------------------------------------ */

START_TEST(test_strict_file_error)
{
    static const char text[] = "[guard]\nlevel = 7\n";
    const char *path = write_config("strict.toml", text, sizeof text - 1);
    char *env[] = {config_env(path), "SEFER_CONFIG_STRICT=1", NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    ck_assert_msg(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 78, "helper %s",
                  st_describe_status(r.status));
    ck_assert_msg(r.out[0] == 0, "main ran: %s", r.out);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:2: guard.level: out of range 0-3 (default kept)\n"
             "sefer: SEFER_CONFIG_STRICT=1: refusing to start\n",
             path);
    ck_assert_str_eq(r.err, want);
}
END_TEST

START_TEST(test_strict_env_error)
{
    char *env[] = {"SEFER_CONFIG_STRICT=1", "SEFER_RINGS_CAPACITY=1", NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    ck_assert_msg(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 78, "helper %s",
                  st_describe_status(r.status));
    ck_assert_msg(r.out[0] == 0, "main ran: %s", r.out);
    ck_assert_str_eq(r.err, "SEFER_RINGS_CAPACITY=1: rings.capacity: out of range 2-1048576 (default kept)\n"
                            "sefer: SEFER_CONFIG_STRICT=1: refusing to start\n");
}
END_TEST

START_TEST(test_strict_missing_file)
{
    char *env[] = {"SEFER_CONFIG=/nonexistent/sefer.toml", "SEFER_CONFIG_STRICT=1", NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    ck_assert_msg(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 78, "helper %s",
                  st_describe_status(r.status));
    ck_assert_str_eq(r.err, "/nonexistent/sefer.toml:0: -: cannot open: No such file or directory "
                            "(defaults kept)\n"
                            "sefer: SEFER_CONFIG_STRICT=1: refusing to start\n");
}
END_TEST

/* Strict with a clean config starts; strict off (0) with errors starts;
 * an unreadable strict value counts as on and is itself an error. */
START_TEST(test_strict_other)
{
    static const char good[] = "[guard]\nlevel = 2\n";
    const char *path = write_config("good.toml", good, sizeof good - 1);
    char *env[] = {config_env(path), "SEFER_CONFIG_STRICT=1", "SEFER_SEGMENTS_MAX=99", NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
    ASSERT_KNOB(&r, "guard.level", "2", "file");
    ASSERT_KNOB(&r, "segments.max", "99", "env");

    char *env0[] = {"SEFER_CONFIG_STRICT=0", "SEFER_GUARD_LEVEL=5", NULL};
    run_helper(&r, env0, NULL);
    assert_ran(&r);
    ck_assert_str_eq(r.err, "SEFER_GUARD_LEVEL=5: guard.level: out of range 0-3 (default kept)\n");

    char *envm[] = {"SEFER_CONFIG_STRICT=maybe", NULL};
    run_helper(&r, envm, NULL);
    ck_assert_msg(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 78, "helper %s",
                  st_describe_status(r.status));
    ck_assert_str_eq(r.err, "SEFER_CONFIG_STRICT=maybe: -: expected 1 or 0 (strict mode on)\n"
                            "sefer: SEFER_CONFIG_STRICT=maybe: refusing to start\n");
}
END_TEST

/* ---- the runtime API ---------------------------------------------------------- */

static void expect_fail(int rc, int err, const char *reason)
{
    int e = errno;
    ck_assert_msg(rc == -1 && e == err, "rc %d errno %d, expected -1 errno %d", rc, e, err);
    ck_assert_str_eq(sefer_config_error(), reason);
}

START_TEST(test_set_reasons)
{
    expect_fail(sefer_config_set("guard.level", "2"), EPERM,
                "guard.level: cannot change while the program runs (set it in the SEFER_CONFIG file or "
                "SEFER_GUARD_LEVEL)");
    expect_fail(sefer_config_set("rings.capacity", "16"), EPERM,
                "rings.capacity: cannot change while the program runs (set it in the SEFER_CONFIG file "
                "or SEFER_RINGS_CAPACITY)");
    expect_fail(sefer_config_set("introspect.token", "x"), EPERM,
                "introspect.token: cannot change while the program runs (set it in the SEFER_CONFIG "
                "file or SEFER_INTROSPECT_TOKEN)");
    expect_fail(sefer_config_set("large_cache.slots", "65"), EINVAL, "large_cache.slots: out of range 0-64");
    expect_fail(sefer_config_set("segments.max", "0"), EINVAL, "segments.max: out of range 1-16777216");
    expect_fail(sefer_config_set("segments.max", "abc"), EINVAL, "segments.max: not an integer");
    expect_fail(sefer_config_set("segments.max", "99999999999999999999999"), EINVAL,
                "segments.max: out of range 1-16777216");
    expect_fail(sefer_config_set("segments.max", NULL), EINVAL, "segments.max: no value");
    expect_fail(sefer_config_set("large_cache.max_bytes", "2TiB"), EINVAL,
                "large_cache.max_bytes: out of range 0-1TiB");
    expect_fail(sefer_config_set("large_cache.max_bytes", "lots"), EINVAL,
                "large_cache.max_bytes: not a size (a number, optionally followed by B, KiB, MiB, GiB or TiB)");
    expect_fail(sefer_config_set("decommit.delay", "2h"), EINVAL,
                "decommit.delay: not a duration (a number, optionally followed by ms, s or min)");
    expect_fail(sefer_config_set("decommit.delay", "61min"), EINVAL, "decommit.delay: out of range 0-60min");
    expect_fail(sefer_config_set("decommit.policy", "sometimes"), EINVAL,
                "decommit.policy: expected one of never, eager, delayed or adaptive");
    expect_fail(sefer_config_set("guard.on_error", "explode"), EINVAL,
                "guard.on_error: expected one of abort or report");
    expect_fail(sefer_config_set("no.such", "1"), ENOENT, "no.such: unknown knob");
    expect_fail(sefer_config_set(NULL, "1"), ENOENT, "(null): unknown knob");
    char buf[4];
    expect_fail(sefer_config_get("decommit.policy", buf, sizeof buf), ERANGE,
                "decommit.policy: buffer too small (the value needs 9 bytes)");
    expect_fail(sefer_config_get("nope", buf, sizeof buf), ENOENT, "nope: unknown knob");
    /* a success leaves the last failure's reason in place, like errno */
    ck_assert_int_eq(sefer_config_set("segments.max", "500"), 0);
    ck_assert_str_eq(sefer_config_error(), "nope: unknown knob");
    ck_assert_str_eq(st_knob_get("segments.max"), "500");
}
END_TEST

static void *fresh_thread(void *arg)
{
    (void)arg;
    return (void *)sefer_config_error();
}

/* The reason is per thread: a new thread has none. */
START_TEST(test_error_per_thread)
{
    ck_assert_int_eq(sefer_config_set("guard.level", "2"), -1);
    ck_assert_str_ne(sefer_config_error(), "");
    pthread_t t;
    void *res = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, fresh_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    ck_assert_str_eq((const char *)res, "");
}
END_TEST

START_TEST(test_sources)
{
    for (size_t k = 0; k < N_KNOBS; k++)
        ck_assert_str_eq(sefer_config_source(knob_names[k]), "default");
    ST_KNOB_SET("decommit.delay", "20ms");
    ck_assert_str_eq(sefer_config_source("decommit.delay"), "runtime");
    ck_assert_str_eq(sefer_config_source("decommit.policy"), "default");
    errno = 0;
    ck_assert_ptr_null(sefer_config_source("no.such"));
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_ptr_null(sefer_config_source(NULL));
    /* a refused set changes neither the value nor its source */
    ck_assert_int_eq(sefer_config_set("decommit.delay", "soon"), -1);
    ck_assert_str_eq(sefer_config_source("decommit.delay"), "runtime");
    ck_assert_str_eq(st_knob_get("decommit.delay"), "20ms");
}
END_TEST

/* Runtime values accept the units and the boolean spellings of env. */
START_TEST(test_set_units)
{
    ST_KNOB_SET("large_cache.max_bytes", "2 MiB");
    ck_assert_str_eq(st_knob_get("large_cache.max_bytes"), "2097152");
    ST_KNOB_SET("large_cache.max_bytes", "5K");
    ck_assert_str_eq(st_knob_get("large_cache.max_bytes"), "5120");
    ST_KNOB_SET("large_cache.ttl", "1min");
    ck_assert_str_eq(st_knob_get("large_cache.ttl"), "60000ms");
    ST_KNOB_SET("decommit.delay", "3s");
    ck_assert_str_eq(st_knob_get("decommit.delay"), "3000ms");
    ST_KNOB_SET("decommit.delay", "42");
    ck_assert_str_eq(st_knob_get("decommit.delay"), "42ms");
}
END_TEST

/* ---- the sample files --------------------------------------------------------- */

static const struct sample {
    const char *file;
    const char *values[16][2]; /* every key the file sets, and the value get prints */
} samples[] = {
    {"prod.toml",
     {{"segments.max", "262144"},
      {"large_cache.slots", "64"},
      {"large_cache.max_bytes", "1073741824"},
      {"large_cache.ttl", "10000ms"},
      {"decommit.policy", "adaptive"},
      {"decommit.delay", "500ms"},
      {"rings.capacity", "4096"},
      {"guard.level", "1"},
      {"guard.on_error", "abort"}}},
    {"lowmem.toml",
     {{"segments.max", "1024"},
      {"large_cache.slots", "2"},
      {"large_cache.max_bytes", "8388608"},
      {"large_cache.ttl", "100ms"},
      {"decommit.policy", "eager"},
      {"decommit.delay", "0ms"},
      {"rings.capacity", "64"},
      {"guard.level", "1"}}},
    {"debug.toml",
     {{"guard.level", "3"},
      {"guard.on_error", "report"},
      {"guard.quarantine", "4194304"},
      {"large_cache.slots", "0"},
      {"large_cache.max_bytes", "0"},
      {"decommit.policy", "eager"}}},
    {"soak.toml",
     {{"introspect.enabled", "true"},
      {"introspect.listen", "127.0.0.1:9090"},
      {"decommit.policy", "delayed"},
      {"decommit.delay", "1000ms"},
      {"large_cache.ttl", "5000ms"},
      {"guard.level", "2"},
      {"guard.on_error", "report"}}},
};

/* Each sample loads without a report, every value it sets took effect with
 * source "file", and the knobs it does not set keep their defaults. */
START_TEST(test_sample_files)
{
    const struct sample *s = &samples[_i];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", SEFER_CONFIG_DIR, s->file);
    char *env[] = {config_env(path), "SEFER_CONFIG_STRICT=1", NULL};
    static struct run r;
    run_helper(&r, env, NULL);
    assert_ran(&r);
    ck_assert_msg(r.err[0] == 0, "%s: stderr %s", s->file, r.err);
    for (size_t k = 0; k < N_KNOBS; k++) {
        const char *want = NULL;
        for (int j = 0; s->values[j][0]; j++)
            if (!strcmp(s->values[j][0], knob_names[k]))
                want = s->values[j][1];
        if (want)
            ASSERT_KNOB(&r, knob_names[k], want, "file");
        else
            ASSERT_KNOB(&r, knob_names[k], defaults[k], "default");
    }
}
END_TEST

/* ---- suite ----------------------------------------------------------------------- */

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_file_error, 0, (int)(sizeof bad_lines / sizeof bad_lines[0]));
    tcase_add_test(tc, test_file_many_errors);
    tcase_add_test(tc, test_file_cr_at_end);
    tcase_add_test(tc, test_file_missing);
    tcase_add_test(tc, test_file_directory);
    tcase_add_test(tc, test_file_not_a_directory);
    tcase_add_test(tc, test_file_size_limit);
    tcase_add_test(tc, test_file_all_forms);
    tcase_add_test(tc, test_file_units);
    tcase_add_loop_test(tc, test_sample_files, 0, (int)(sizeof samples / sizeof samples[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("env");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_env_errors);
    tcase_add_test(tc, test_env_values);
    tcase_add_test(tc, test_precedence);
    tcase_add_test(tc, test_env_before_libc);
    tcase_add_test(tc, test_duplicate_then_env);
    tcase_add_test(tc, test_strict_file_error);
    tcase_add_test(tc, test_strict_env_error);
    tcase_add_test(tc, test_strict_missing_file);
    tcase_add_test(tc, test_strict_other);
    suite_add_tcase(s, tc);

    tc = tcase_create("api");
    tcase_add_test(tc, test_set_reasons);
    tcase_add_test(tc, test_error_per_thread);
    tcase_add_test(tc, test_sources);
    tcase_add_test(tc, test_set_units);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--helper"))
        return helper_main(argc, argv);
    return st_run_suite(config_suite());
}
