/* knob_table.c - the knobs as data: the table SF_KNOBS declares (name,
 * type, default, bounds, runtime flag, meaning), lookups by name, the
 * SEFER_* variable of each, and text -> value conversion with the reason a
 * text is refused ("out of range 0-3").
 *
 * Pure: no global state, no allocation, no system call.  knobs.c keeps the
 * values, toml.c parses SEFER_CONFIG files with these conversions, and the
 * fuzz target (tests/fuzz/fuzz_config.c) and the docs generator
 * (tools/knobs-doc.c) link the three pure files (this one, toml.c, str.c)
 * alone. */
#include "internal.h"

/* ---- the knob table -------------------------------------------------------- */

static const char *const sf_decommit_names[] = {"never", "eager", "delayed", "adaptive", NULL};
static const char *const sf_on_error_names[] = {"abort", "report", NULL};
static const char *const sf_limit_action_names[] = {"purge", "fail", NULL};
static const char *const sf_thp_names[] = {"never", "madvise", "system", NULL};
static const char *const sf_unwinder_names[] = {"table", "libgcc", "check", NULL};
static const char *const sf_auto_names[] = {"auto", NULL}; /* (size knobs: SF_KNOB_AUTO) */

const struct sf_knob_def sf_knob_defs[SF_KNOB_COUNT] = {
#define SF_KNOB_DEF_(id, nm, ty, dflt, lo, hi, rt, ch, doc) \
    [SF_KNOB_##id] = {nm, ty, rt, (uint64_t)(dflt), (uint64_t)(lo), (uint64_t)(hi), ch, doc},
    SF_KNOBS(SF_KNOB_DEF_)
#undef SF_KNOB_DEF_
};

/* The table has no room for a string default; the only non-empty one. */
const char *sf_knob_default_string(int id) {
    return id == SF_KNOB_INTROSPECT_LISTEN ? "127.0.0.1:9090" : "";
}

int sf_knob_lookup(const char *name, size_t len) {
    if (name == NULL) return -1;
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        const char *n = sf_knob_defs[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return i;
    }
    return -1;
}

/* A table is the part of a knob name before its dot. */
bool sf_knob_table_known(const char *name, size_t len) {
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        const char *n = sf_knob_defs[i].name;
        if (strncmp(n, name, len) == 0 && n[len] == '.' && memchr(name, '.', len) == NULL)
            return true;
    }
    return false;
}

size_t sf_knob_env_name(int id, char *buf, size_t len) {
    sf_str_t s;
    sf_str_init(&s, buf, len);
    sf_str_add(&s, "SEFER_");
    for (const char *n = sf_knob_defs[id].name; *n; n++) {
        char c = *n;
        c = (char)(c == '.' ? '_' : (c >= 'a' && c <= 'z') ? c - 32 : c);
        sf_str_addn(&s, &c, 1);
    }
    return s.len;
}

/* ---- values ------------------------------------------------------------------ */

static const struct {
    const char *unit;
    uint64_t mul;
} size_units[] = {{"", 1},
                  {"B", 1},
                  {"K", 1ull << 10},
                  {"KB", 1ull << 10},
                  {"KiB", 1ull << 10},
                  {"M", 1ull << 20},
                  {"MB", 1ull << 20},
                  {"MiB", 1ull << 20},
                  {"G", 1ull << 30},
                  {"GB", 1ull << 30},
                  {"GiB", 1ull << 30},
                  {"T", 1ull << 40},
                  {"TB", 1ull << 40},
                  {"TiB", 1ull << 40}},
  ms_units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"min", 60000}};

enum { NUM_OK, NUM_MALFORMED, NUM_TOO_BIG };

/* An unsigned decimal with an optional unit suffix (sizes: B, K/KB/KiB ...
 * all powers of 1024; durations: ms, s, min; spaces allowed before the
 * unit; other types: no suffix). */
static int parse_number(const char *s, size_t len, uint8_t type, uint64_t *out) {
    const char *p = s, *end = s + len;
    uint64_t v = 0;
    bool big = false;
    if (p == end || *p < '0' || *p > '9') return NUM_MALFORMED;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) big = true;
        else v = v * 10 + (uint64_t)(*p - '0');
    }
    if (type == SF_KNOB_SIZE || type == SF_KNOB_MS)
        while (p < end && *p == ' ') p++;
    size_t ulen = (size_t)(end - p);
    uint64_t mul = 0;
    if (type == SF_KNOB_SIZE) {
        for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++)
            if (strlen(size_units[i].unit) == ulen && memcmp(size_units[i].unit, p, ulen) == 0)
                mul = size_units[i].mul;
    } else if (type == SF_KNOB_MS) {
        for (size_t i = 0; i < sizeof ms_units / sizeof ms_units[0]; i++)
            if (strlen(ms_units[i].unit) == ulen && memcmp(ms_units[i].unit, p, ulen) == 0)
                mul = ms_units[i].mul;
    } else if (ulen == 0) {
        mul = 1;
    }
    if (mul == 0) return NUM_MALFORMED;
    if (big || v > UINT64_MAX / mul) return NUM_TOO_BIG;
    *out = v * mul;
    return NUM_OK;
}

/* A value of the knob's type as a person would write it: sizes in the
 * largest binary unit that divides them, durations in min, s or ms. */
void sf_knob_format_human(uint8_t type, uint64_t v, sf_str_t *s) {
    if (type == SF_KNOB_SIZE && v == SF_KNOB_AUTO) {
        sf_str_add(s, "auto");
        return;
    }
    if (type == SF_KNOB_SIZE && v != 0) {
        static const char *const names[] = {"TiB", "GiB", "MiB", "KiB"};
        for (int i = 0; i < 4; i++) {
            unsigned shift = 40u - 10u * (unsigned)i;
            if ((v & ((1ull << shift) - 1)) == 0) {
                sf_str_addu(s, v >> shift);
                sf_str_add(s, names[i]);
                return;
            }
        }
        sf_str_addu(s, v);
        sf_str_add(s, "B");
        return;
    }
    if (type == SF_KNOB_MS && v != 0) {
        if (v % 60000 == 0) { sf_str_addu(s, v / 60000); sf_str_add(s, "min"); }
        else if (v % 1000 == 0) { sf_str_addu(s, v / 1000); sf_str_add(s, "s"); }
        else { sf_str_addu(s, v); sf_str_add(s, "ms"); }
        return;
    }
    sf_str_addu(s, v);
}

static void why_range(int id, sf_str_t *why) {
    const struct sf_knob_def *d = &sf_knob_defs[id];
    sf_str_add(why, "out of range ");
    sf_knob_format_human(d->type, d->min, why);
    sf_str_add(why, "-");
    sf_knob_format_human(d->type, d->max, why);
}

static void why_choices(int id, sf_str_t *why, bool quoted) {
    const char *const *c = sf_knob_defs[id].choices;
    sf_str_add(why, "one of ");
    for (int k = 0; c[k] != NULL; k++) {
        if (k) sf_str_add(why, c[k + 1] ? ", " : " or ");
        if (quoted) sf_str_add(why, "\"");
        sf_str_add(why, c[k]);
        if (quoted) sf_str_add(why, "\"");
    }
}

/* What a knob takes, as the end of "expected ...". */
void sf_knob_expected(int id, sf_str_t *why, bool toml) {
    switch (sf_knob_defs[id].type) {
    case SF_KNOB_UINT: sf_str_add(why, "an integer"); break;
    case SF_KNOB_SIZE: sf_str_add(why, sf_knob_defs[id].choices ? "a size or auto" : "a size"); break;
    case SF_KNOB_MS: sf_str_add(why, "a duration"); break;
    case SF_KNOB_BOOL: sf_str_add(why, toml ? "true or false" : "1/true/yes/on or 0/false/no/off"); break;
    case SF_KNOB_ENUM: why_choices(id, why, toml); break;
    default: sf_str_add(why, "a string"); break;
    }
}

/* Checks a number against the knob's bounds (neg: the text had a minus). */
bool sf_knob_check_number(int id, uint64_t v, bool neg, uint64_t *out, sf_str_t *why) {
    const struct sf_knob_def *d = &sf_knob_defs[id];
    if ((neg && v != 0) || v < d->min || v > d->max) {
        why_range(id, why);
        return false;
    }
    *out = v;
    return true;
}

bool sf_knob_convert_text(int id, const char *text, size_t len, uint64_t *out, sf_str_t *why) {
    const struct sf_knob_def *d = &sf_knob_defs[id];
    uint64_t v = 0;
    switch (d->type) {
    case SF_KNOB_BOOL: {
        static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
        for (int k = 0; k < 4; k++) {
            if (strlen(yes[k]) == len && memcmp(yes[k], text, len) == 0) { *out = 1; return true; }
            if (strlen(no[k]) == len && memcmp(no[k], text, len) == 0) { *out = 0; return true; }
        }
        break;
    }
    case SF_KNOB_ENUM:
        for (uint64_t c = 0; d->choices[c] != NULL; c++)
            if (strlen(d->choices[c]) == len && memcmp(d->choices[c], text, len) == 0) {
                *out = c;
                return true;
            }
        break;
    case SF_KNOB_STRING:
        if (len >= SF_KNOB_STR_MAX || memchr(text, '\0', len) != NULL) {
            sf_str_add(why, "too long (max ");
            sf_str_addu(why, SF_KNOB_STR_MAX - 1);
            sf_str_add(why, " bytes)");
            return false;
        }
        *out = 0;
        return true;
    default: {
        if (d->type == SF_KNOB_SIZE && d->choices != NULL && len == 4 && memcmp(text, "auto", 4) == 0) {
            *out = SF_KNOB_AUTO;
            return true;
        }
        bool neg = len > 1 && text[0] == '-' && text[1] >= '0' && text[1] <= '9';
        int rc = parse_number(text + neg, len - neg, d->type, &v);
        if (rc == NUM_OK) return sf_knob_check_number(id, v, neg, out, why);
        if (rc == NUM_TOO_BIG) { why_range(id, why); return false; }
        if (d->type == SF_KNOB_SIZE)
            sf_str_add(why, d->choices ? "not a size (a number, optionally followed by B, KiB, MiB, GiB or TiB) or auto"
                                       : "not a size (a number, optionally followed by B, KiB, MiB, GiB or TiB)");
        else if (d->type == SF_KNOB_MS)
            sf_str_add(why, "not a duration (a number, optionally followed by ms, s or min)");
        else
            sf_str_add(why, "not an integer");
        return false;
    }
    }
    sf_str_add(why, "expected ");
    sf_knob_expected(id, why, false);
    return false;
}

bool sf_knob_from_text(int id, const char *text, uint64_t *out, char *why, size_t whylen) {
    sf_str_t w;
    sf_str_init(&w, why, whylen);
    if (text == NULL) {
        sf_str_add(&w, "no value");
        return false;
    }
    return sf_knob_convert_text(id, text, strlen(text), out, &w);
}
