/* knobs.c - every tunable, declared once (SF_KNOBS in internal.h).
 *
 * The table gives each knob its name, type, default, bounds, whether it may
 * change while the program runs, and a one-line meaning.  Values live in an
 * array of 64-bit atomics so the allocator reads them without locks; strings
 * live in fixed buffers.  Everything here runs without calling malloc: it is
 * used during early initialisation. */
#include "internal.h"

#include <stdlib.h>

static const char *const sf_decommit_names[] = {"never", "eager", "delayed", NULL};
static const char *const sf_on_error_names[] = {"abort", "report", NULL};

struct sf_knob_def {
    const char *name;
    uint8_t type;
    uint8_t runtime;
    uint64_t def, min, max;
    const char *const *choices;
    const char *meaning;
};

static const struct sf_knob_def knob_defs[SF_KNOB_COUNT] = {
#define SF_KNOB_DEF_(id, nm, ty, dflt, lo, hi, rt, ch, doc) \
    [SF_KNOB_##id] = {nm, ty, rt, (uint64_t)(dflt), (uint64_t)(lo), (uint64_t)(hi), ch, doc},
    SF_KNOBS(SF_KNOB_DEF_)
#undef SF_KNOB_DEF_
};

#define SF_KNOB_STR_MAX 128
_Atomic uint64_t sf_knob_value[SF_KNOB_COUNT];
static uint8_t knob_source[SF_KNOB_COUNT];
static char knob_strings[SF_KNOB_COUNT][SF_KNOB_STR_MAX];
pthread_mutex_t sf_knob_lock = PTHREAD_MUTEX_INITIALIZER;

static int knob_find(const char *name) {
    if (name == NULL) return -1;
    for (int i = 0; i < SF_KNOB_COUNT; i++)
        if (strcmp(knob_defs[i].name, name) == 0) return i;
    return -1;
}

const char *sf_knob_string(enum sf_knob_id id) { return knob_strings[id]; }

/* Parses an unsigned decimal with an optional unit suffix.  Sizes take
 * B, KiB, MiB, GiB, TiB (and K/M/G/T, KB/MB/GB meaning the same powers of
 * 1024); durations take ms, s, min.  Returns false on anything else. */
static bool parse_number(const char *s, uint8_t type, uint64_t *out) {
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    while (*p == ' ') p++;
    uint64_t mul = 1;
    if (type == SF_KNOB_SIZE) {
        static const struct { const char *u; uint64_t m; } units[] = {
            {"", 1}, {"B", 1}, {"K", 1ull << 10}, {"KB", 1ull << 10}, {"KiB", 1ull << 10},
            {"M", 1ull << 20}, {"MB", 1ull << 20}, {"MiB", 1ull << 20}, {"G", 1ull << 30},
            {"GB", 1ull << 30}, {"GiB", 1ull << 30}, {"T", 1ull << 40}, {"TB", 1ull << 40},
            {"TiB", 1ull << 40}};
        bool found = false;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (strcmp(p, units[i].u) == 0) { mul = units[i].m; found = true; break; }
        if (!found) return false;
    } else if (type == SF_KNOB_MS) {
        if (strcmp(p, "") == 0 || strcmp(p, "ms") == 0) mul = 1;
        else if (strcmp(p, "s") == 0) mul = 1000;
        else if (strcmp(p, "min") == 0) mul = 60000;
        else return false;
    } else if (*p != '\0') {
        return false;
    }
    if (mul != 1 && v > UINT64_MAX / mul) return false;
    *out = v * mul;
    return true;
}

/* Converts text to a knob value; false (errno EINVAL) if malformed or out of
 * bounds.  The caller holds sf_knob_lock or runs before threads exist. */
static bool knob_parse(int i, const char *text, uint64_t *out) {
    const struct sf_knob_def *d = &knob_defs[i];
    switch (d->type) {
    case SF_KNOB_BOOL:
        if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on"))
            *out = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "off"))
            *out = 0;
        else return false;
        return true;
    case SF_KNOB_ENUM:
        for (uint64_t c = 0; d->choices[c] != NULL; c++)
            if (strcmp(d->choices[c], text) == 0) { *out = c; return true; }
        return false;
    case SF_KNOB_STRING:
        return strlen(text) < SF_KNOB_STR_MAX;
    default:
        return parse_number(text, d->type, out) && *out >= d->min && *out <= d->max;
    }
}

static bool knob_apply(int i, const char *text, uint8_t source) {
    uint64_t v = 0;
    if (!knob_parse(i, text, &v)) return false;
    if (knob_defs[i].type == SF_KNOB_STRING) {
        size_t n = strlen(text);
        memcpy(knob_strings[i], text, n + 1);
    } else {
        atomic_store_explicit(&sf_knob_value[i], v, memory_order_relaxed);
    }
    knob_source[i] = source;
    return true;
}

/* Environment name of a knob: SEFER_ + name upper-cased, '.' -> '_'. */
static void knob_env_name(int i, char *buf, size_t len) {
    const char *n = knob_defs[i].name;
    size_t j = 0;
    for (const char *pre = "SEFER_"; *pre && j + 1 < len; pre++) buf[j++] = *pre;
    for (; *n && j + 1 < len; n++) {
        char c = *n;
        buf[j++] = (char)(c == '.' ? '_' : (c >= 'a' && c <= 'z') ? c - 32 : c);
    }
    buf[j] = '\0';
}

static void report_bad_env(const char *var, const char *value) {
    char msg[256];
    size_t n = 0;
    const char *parts[] = {"sefer: ", var, "=", value, ": invalid value (default kept)\n"};
    for (size_t k = 0; k < 5; k++)
        for (const char *c = parts[k]; *c && n + 1 < sizeof msg; c++) msg[n++] = *c;
    msg[n] = '\0';
    sf_write_stderr(msg);
}

/* Defaults, then SEFER_* environment overrides.  (The SEFER_CONFIG file
 * layer slots in between; see docs/configuration.md.)  Uses getenv, which
 * does not allocate. */
void sf_knobs_init(void) {
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        atomic_store_explicit(&sf_knob_value[i], knob_defs[i].def, memory_order_relaxed);
        knob_source[i] = SF_SRC_DEFAULT;
    }
    memcpy(knob_strings[SF_KNOB_INTROSPECT_LISTEN], "127.0.0.1:9090", 15);
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        char var[64];
        knob_env_name(i, var, sizeof var);
        const char *value = getenv(var);
        if (value != NULL && !knob_apply(i, value, SF_SRC_ENV)) report_bad_env(var, value);
    }
}

static int format_value(int i, char *buf, size_t len) {
    const struct sf_knob_def *d = &knob_defs[i];
    uint64_t v = sf_knob((enum sf_knob_id)i);
    char tmp[48];
    const char *text = tmp;
    if (d->type == SF_KNOB_STRING) {
        text = knob_strings[i];
    } else if (d->type == SF_KNOB_ENUM) {
        text = d->choices[v];
    } else if (d->type == SF_KNOB_BOOL) {
        text = v ? "true" : "false";
    } else {
        char digits[24];
        int n = 0;
        do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
        int j = 0;
        while (n) tmp[j++] = digits[--n];
        if (d->type == SF_KNOB_MS) { tmp[j++] = 'm'; tmp[j++] = 's'; }
        tmp[j] = '\0';
    }
    size_t n = strlen(text);
    if (buf == NULL || n + 1 > len) { errno = ERANGE; return -1; }
    memcpy(buf, text, n + 1);
    return 0;
}

SEFER_EXPORT int sefer_config_get(const char *name, char *buf, size_t len) {
    sf_ensure_init();
    int i = knob_find(name);
    if (i < 0) { errno = ENOENT; return -1; }
    sf_lock(&sf_knob_lock);
    int rc = format_value(i, buf, len);
    sf_unlock(&sf_knob_lock);
    return rc;
}

SEFER_EXPORT int sefer_config_set(const char *name, const char *value) {
    sf_ensure_init();
    int i = knob_find(name);
    if (i < 0) { errno = ENOENT; return -1; }
    if (!knob_defs[i].runtime) { errno = EPERM; return -1; }
    if (value == NULL) { errno = EINVAL; return -1; }
    sf_lock(&sf_knob_lock);
    bool ok = knob_apply(i, value, SF_SRC_RUNTIME);
    sf_unlock(&sf_knob_lock);
    if (!ok) { errno = EINVAL; return -1; }
    return 0;
}
