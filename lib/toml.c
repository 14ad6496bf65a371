/* toml.c - the parser of SEFER_CONFIG files (the subset of TOML a config
 * needs), on a buffer: each key = value is checked against the knob table
 * (knob_table.c) and handed to a sink (knobs.c's, the fuzz target's).
 *
 * Pure: no global state, no allocation, no system call.
 *
 * The parser is line-oriented (nothing in the subset spans lines) and
 * reports at most one error per line, then skips to the next line:
 *
 *   # comment                      blank lines, comments (also after values)
 *   [guard]                        a table: one of the knob prefixes
 *   level = 2                      integer: decimal, '_' between digits
 *   on_error = "report"            basic string: \" \\ \n \t escapes
 *   token = 'abc'                  literal string (no escapes)
 *   enabled = true                 boolean
 *   decommit.delay = "250ms"       dotted key (relative to the table)
 *
 * Arrays, inline tables, floats, dates, multi-line strings, quoted keys,
 * other escapes, duplicate keys, unknown tables or keys, a wrong type, a
 * bound violated and anything after a value are errors. */
#include "internal.h"

enum val_kind { VAL_INT, VAL_BOOL, VAL_STRING };
static const char *const kind_name[] = {"an integer", "a boolean", "a string"};

#define KEY_MAX 96

struct parser {
    const char *p, *end;
    unsigned line;
    unsigned errors;
    const sf_config_sink_t *sink;
    enum { TABLE_ROOT, TABLE_KNOWN, TABLE_BAD } table;
    char prefix[KEY_MAX]; /* "guard." inside [guard] */
    size_t prefix_len;
    uint64_t tables_seen; /* bit per knob whose table header was seen, by first knob */
    unsigned first_line[SF_KNOB_COUNT]; /* line a knob was first set on, 0: not yet */
    bool applied[SF_KNOB_COUNT];
    /* the value of the current line */
    enum val_kind kind;
    uint64_t num;
    bool neg;
    char str[SF_KNOB_STR_MAX];
    size_t str_len;
    bool str_long;
};

static void error(struct parser *ps, const char *key, const char *msg) {
    ps->errors++;
    if (ps->sink && ps->sink->error) ps->sink->error(ps->sink->ctx, ps->line, key, msg);
}

static bool at_eol(const struct parser *ps) {
    return ps->p == ps->end || *ps->p == '\n' || (*ps->p == '\r' && ps->p + 1 < ps->end && ps->p[1] == '\n');
}

/* At a carriage return that is not a CRLF's, the only place TOML allows one
 * (a file with CR line ends, a stray CR at the end of the last line)? */
#define LONE_CR "a carriage return not followed by a newline"
static bool at_lone_cr(const struct parser *ps) {
    return ps->p < ps->end && *ps->p == '\r' && !at_eol(ps);
}

static void skip_ws(struct parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t')) ps->p++;
}

/* Past the next newline (or to the end). */
static void next_line(struct parser *ps) {
    const char *nl = memchr(ps->p, '\n', (size_t)(ps->end - ps->p));
    ps->p = nl ? nl + 1 : ps->end;
    ps->line++;
}

/* Spaces, an optional comment, then the end of the line? */
static bool rest_is_blank(struct parser *ps) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '#') {
        const char *nl = memchr(ps->p, '\n', (size_t)(ps->end - ps->p));
        ps->p = nl ? nl : ps->end;
        return true;
    }
    return at_eol(ps);
}

static bool bare_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* A byte no key can hold, where a key stops: not ASCII (a UTF-8 letter), or a
 * control character other than the tab and the line end's. */
static bool foreign_char(char c) {
    unsigned char u = (unsigned char)c;
    return u >= 0x7f || (u < 0x20 && c != '\t' && c != '\n' && c != '\r');
}

/* The key from start as written, to the '=', a comment or the end of the
 * line, for a report: with '?' for what is not printable ASCII. */
static void written_key(const struct parser *ps, const char *start, char *out) {
    const char *e = start;
    while (e < ps->end && *e != '=' && *e != '#' && *e != '\n' && *e != '\r') e++;
    while (e > start && (e[-1] == ' ' || e[-1] == '\t')) e--;
    sf_str_t s;
    sf_str_init(&s, out, KEY_MAX);
    sf_str_add_clean(&s, start, (size_t)(e - start), KEY_MAX - 4);
}

/* A bare or dotted key ("level", "guard.level", "guard . level") into out,
 * dots kept, spaces dropped.  *long_out: it did not fit.  Returns false
 * (with an error message in *msg) if malformed; out then holds the key as
 * written if a byte no key can hold is what is wrong (written_key), else "". */
static bool parse_key(struct parser *ps, char *out, bool *long_out, const char **msg) {
    const char *key = ps->p;
    size_t n = 0;
    *long_out = false;
    for (;;) {
        if (ps->p < ps->end && (*ps->p == '"' || *ps->p == '\'')) {
            *msg = "quoted keys are not supported";
            out[0] = '\0';
            return false;
        }
        const char *start = ps->p;
        while (ps->p < ps->end && bare_char(*ps->p)) ps->p++;
        size_t seg = (size_t)(ps->p - start);
        const char *save = ps->p;
        skip_ws(ps);
        if (ps->p < ps->end && foreign_char(*ps->p)) {
            *msg = "malformed key (holds a character other than ASCII letters, digits, '_' and '-')";
            written_key(ps, key, out);
            *long_out = false; /* (written_key marks its own cut) */
            return false;
        }
        if (seg == 0) {
            *msg = "malformed key (expected letters, digits, '_' or '-')";
            out[0] = '\0';
            return false;
        }
        if (n + seg + 1 < KEY_MAX) {
            memcpy(out + n, start, seg);
            n += seg;
        } else { /* as much as fits, so that the report shows which key */
            memcpy(out + n, start, KEY_MAX - 2 - n);
            n = KEY_MAX - 2;
            *long_out = true;
        }
        if (ps->p < ps->end && *ps->p == '.') {
            ps->p++;
            skip_ws(ps);
            if (n + 2 < KEY_MAX) out[n++] = '.';
            else *long_out = true;
            continue;
        }
        ps->p = save;
        out[n] = '\0';
        return true;
    }
}

/* A basic ("...") or literal ('...') single-line string into ps->str. */
static bool parse_string(struct parser *ps, const char **msg) {
    char q = *ps->p;
    if (ps->end - ps->p >= 3 && ps->p[1] == q && ps->p[2] == q) {
        *msg = "multi-line strings are not supported";
        return false;
    }
    ps->p++;
    ps->str_len = 0;
    ps->str_long = false;
    for (;;) {
        if (at_eol(ps)) {
            *msg = "unterminated string";
            return false;
        }
        unsigned char c = (unsigned char)*ps->p++;
        if (c == (unsigned char)q) break;
        if (q == '"' && c == '\\') {
            if (at_eol(ps)) {
                *msg = "unterminated string";
                return false;
            }
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case 'b': case 'f': case 'r': case 'e': case 'u': case 'U':
                *msg = "unsupported escape in string (only \\\" \\\\ \\n \\t)";
                return false;
            default:
                *msg = "invalid escape in string (only \\\" \\\\ \\n \\t)";
                return false;
            }
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            *msg = "control character in string";
            return false;
        }
        if (ps->str_len + 1 < sizeof ps->str) ps->str[ps->str_len++] = (char)c;
        else ps->str_long = true;
    }
    ps->str[ps->str_len] = '\0';
    return true;
}

/* An integer: [+-] decimal digits, '_' only between digits. */
static bool parse_integer(struct parser *ps, const char **msg) {
    const char *s = ps->p;
    bool sign = false;
    ps->neg = false;
    if (*s == '+' || *s == '-') {
        ps->neg = *s == '-';
        sign = true;
        s++;
    }
    const char *digits = s;
    if (s + 1 < ps->end && s[0] == '0' && (s[1] == 'x' || s[1] == 'o' || s[1] == 'b')) {
        *msg = "hexadecimal, octal and binary integers are not supported";
        return false;
    }
    uint64_t v = 0;
    bool big = false, bad_underscore = false;
    while (s < ps->end && ((*s >= '0' && *s <= '9') || *s == '_')) {
        if (*s == '_') {
            if (s == digits || s + 1 >= ps->end || s[1] < '0' || s[1] > '9') bad_underscore = true;
        } else if (v > (UINT64_MAX - 9) / 10) {
            big = true;
        } else {
            v = v * 10 + (uint64_t)(*s - '0');
        }
        s++;
    }
    if (s < ps->end && (*s == '.' || *s == 'e' || *s == 'E')) {
        *msg = "floats are not supported";
        return false;
    }
    if (s < ps->end && !sign && (*s == '-' || *s == ':')) {
        *msg = "dates and times are not supported";
        return false;
    }
    if (s == digits) {
        *msg = "expected a value";
        return false;
    }
    if (bad_underscore) {
        *msg = "malformed integer ('_' must sit between digits)";
        return false;
    }
    if (digits[0] == '0' && s - digits > 1) {
        *msg = "leading zeros are not allowed";
        return false;
    }
    if (big || v > (uint64_t)INT64_MAX + ps->neg) {
        *msg = "integer too large (TOML integers are 64-bit)";
        return false;
    }
    ps->num = v;
    ps->p = s;
    return true;
}

/* The value after '=' into ps->kind/num/neg/str. */
static bool parse_value(struct parser *ps, const char **msg) {
    if (at_eol(ps) || *ps->p == '#') {
        *msg = "missing value";
        return false;
    }
    if (at_lone_cr(ps)) {
        *msg = LONE_CR;
        return false;
    }
    char c = *ps->p;
    if (c == '"' || c == '\'') {
        ps->kind = VAL_STRING;
        return parse_string(ps, msg);
    }
    if (c == '[') {
        *msg = "arrays are not supported";
        return false;
    }
    if (c == '{') {
        *msg = "inline tables are not supported";
        return false;
    }
    if ((c >= '0' && c <= '9') || c == '+' || c == '-') {
        const char *w = ps->p + (c == '+' || c == '-');
        if (ps->end - w >= 3 && (memcmp(w, "inf", 3) == 0 || memcmp(w, "nan", 3) == 0)) {
            *msg = "floats are not supported";
            return false;
        }
        ps->kind = VAL_INT;
        return parse_integer(ps, msg);
    }
    const char *w = ps->p;
    while (w < ps->end && bare_char(*w)) w++;
    size_t wl = (size_t)(w - ps->p);
    if (wl == 4 && memcmp(ps->p, "true", 4) == 0) ps->num = 1;
    else if (wl == 5 && memcmp(ps->p, "false", 5) == 0) ps->num = 0;
    else if ((wl == 3 && (memcmp(ps->p, "inf", 3) == 0 || memcmp(ps->p, "nan", 3) == 0))) {
        *msg = "floats are not supported";
        return false;
    } else {
        *msg = wl ? "expected a value (strings need quotes)" : "expected a value";
        return false;
    }
    ps->kind = VAL_BOOL;
    ps->p = w;
    return true;
}

/* The parsed value as knob id's value, or why not. */
static bool convert_value(struct parser *ps, int id, uint64_t *out, sf_str_t *why) {
    const struct sf_knob_def *d = &sf_knob_defs[id];
    switch (ps->kind) {
    case VAL_INT:
        if (d->type == SF_KNOB_UINT || d->type == SF_KNOB_SIZE || d->type == SF_KNOB_MS)
            return sf_knob_check_number(id, ps->num, ps->neg, out, why);
        break;
    case VAL_BOOL:
        if (d->type == SF_KNOB_BOOL) {
            *out = ps->num;
            return true;
        }
        break;
    case VAL_STRING:
        if (ps->str_long && (d->type == SF_KNOB_STRING || d->type == SF_KNOB_ENUM)) {
            sf_str_add(why, "too long (max ");
            sf_str_addu(why, SF_KNOB_STR_MAX - 1);
            sf_str_add(why, " bytes)");
            return false;
        }
        if (d->type == SF_KNOB_SIZE || d->type == SF_KNOB_MS || d->type == SF_KNOB_ENUM ||
            d->type == SF_KNOB_STRING) {
            if (ps->str_long) {
                sf_str_add(why, d->type == SF_KNOB_SIZE ? "not a size" : "not a duration");
                return false;
            }
            if (d->type == SF_KNOB_STRING) {
                *out = 0;
                return true;
            }
            return sf_knob_convert_text(id, ps->str, ps->str_len, out, why);
        }
        break;
    }
    sf_str_add(why, "expected ");
    sf_knob_expected(id, why, true);
    sf_str_add(why, ", not ");
    sf_str_add(why, kind_name[ps->kind]);
    return false;
}

static void parse_header(struct parser *ps) {
    const char *msg = NULL;
    char name[KEY_MAX], key[KEY_MAX + 5]; /* "[" name "...]" */
    bool too_long = false;
    ps->p++;
    ps->table = TABLE_BAD;
    if (ps->p < ps->end && *ps->p == '[') {
        error(ps, "-", "arrays of tables are not supported; keys up to the next [table] are ignored");
        return;
    }
    skip_ws(ps);
    if (!parse_key(ps, name, &too_long, &msg)) {
        error(ps, "-", "malformed table header; keys up to the next [table] are ignored");
        return;
    }
    skip_ws(ps);
    if (ps->p == ps->end || *ps->p != ']') {
        error(ps, "-", "malformed table header (expected ']'); keys up to the next [table] are ignored");
        return;
    }
    ps->p++;
    sf_str_t k;
    sf_str_init(&k, key, sizeof key);
    sf_str_add(&k, "[");
    sf_str_add(&k, name);
    sf_str_add(&k, too_long ? "...]" : "]");
    if (!rest_is_blank(ps)) {
        error(ps, key, at_lone_cr(ps) ? LONE_CR "; keys up to the next [table] are ignored"
                                      : "unexpected text after the table header; keys up to the next [table] are ignored");
        return;
    }
    size_t n = strlen(name);
    if (too_long || !sf_knob_table_known(name, n)) {
        char msg[256];
        sf_str_t m;
        sf_str_init(&m, msg, sizeof msg);
        sf_str_add(&m, "unknown table (known:");
        for (int i = 0; i < SF_KNOB_COUNT; i++) {
            const char *kn = sf_knob_defs[i].name, *dot = strchr(kn, '.');
            if (i > 0 && strncmp(sf_knob_defs[i - 1].name, kn, (size_t)(dot - kn + 1)) == 0) continue;
            sf_str_add(&m, i ? ", " : " ");
            sf_str_addn(&m, kn, (size_t)(dot - kn));
        }
        sf_str_add(&m, "); keys up to the next [table] are ignored");
        error(ps, key, msg);
        return;
    }
    memcpy(ps->prefix, name, n);
    ps->prefix[n] = '.';
    ps->prefix_len = n + 1;
    ps->table = TABLE_KNOWN;
    /* remember the header by the first knob of its table */
    for (int i = 0; i < SF_KNOB_COUNT; i++) {
        if (strncmp(sf_knob_defs[i].name, ps->prefix, ps->prefix_len) == 0) {
            if (ps->tables_seen & (1ull << (i & 63))) error(ps, key, "table defined twice (its keys still apply)");
            ps->tables_seen |= 1ull << (i & 63);
            break;
        }
    }
}

/* A key whose value could not be read (a float, text after the value) still
 * counts as given: a key given twice leaves the knob at its default whichever
 * of the two is malformed, and a good first value does not stay behind a
 * second, malformed one reported as "(default kept)". */
static void count_unread(struct parser *ps, const char *full, size_t len, bool too_long) {
    int id = ps->table == TABLE_BAD || too_long ? -1 : sf_knob_lookup(full, len);
    if (id < 0) return;
    if (ps->first_line[id] == 0) ps->first_line[id] = ps->line;
    else if (ps->applied[id] && ps->sink && ps->sink->unset) ps->sink->unset(ps->sink->ctx, id, ps->line);
    ps->applied[id] = false;
}

static void parse_keyval(struct parser *ps) {
    const char *msg = NULL;
    char rel[KEY_MAX], full[2 * KEY_MAX + 4];
    bool too_long = false;
    bool key_ok = parse_key(ps, rel, &too_long, &msg);
    if (!key_ok && rel[0] == '\0') {
        error(ps, "-", msg);
        return;
    }
    sf_str_t f;
    sf_str_init(&f, full, sizeof full);
    if (ps->table == TABLE_KNOWN) sf_str_addn(&f, ps->prefix, ps->prefix_len);
    sf_str_add(&f, rel);
    if (too_long) sf_str_add(&f, "...");
    if (!key_ok) { /* shown as written: which character is wrong */
        error(ps, full, msg);
        return;
    }
    skip_ws(ps);
    if (ps->p == ps->end || *ps->p != '=') {
        error(ps, full, at_lone_cr(ps) ? LONE_CR : "expected '=' after the key");
        return;
    }
    ps->p++;
    skip_ws(ps);
    if (!parse_value(ps, &msg)) {
        error(ps, full, msg);
        count_unread(ps, full, f.len, too_long);
        return;
    }
    if (!rest_is_blank(ps)) {
        error(ps, full, at_lone_cr(ps) ? LONE_CR : "unexpected text after the value");
        count_unread(ps, full, f.len, too_long);
        return;
    }
    if (ps->table == TABLE_BAD) return; /* reported with its header */
    int id = too_long ? -1 : sf_knob_lookup(full, f.len);
    if (id < 0) {
        error(ps, full, "unknown key");
        return;
    }
    if (ps->first_line[id]) {
        char why[96];
        sf_str_t w;
        sf_str_init(&w, why, sizeof why);
        sf_str_add(&w, "set twice (first on line ");
        sf_str_addu(&w, ps->first_line[id]);
        sf_str_add(&w, "): both ignored");
        error(ps, full, why);
        if (ps->applied[id] && ps->sink && ps->sink->unset) ps->sink->unset(ps->sink->ctx, id, ps->line);
        ps->applied[id] = false;
        return;
    }
    ps->first_line[id] = ps->line;
    char why[160];
    sf_str_t w;
    sf_str_init(&w, why, sizeof why);
    uint64_t v = 0;
    if (!convert_value(ps, id, &v, &w)) {
        error(ps, full, why);
        return;
    }
    ps->applied[id] = true;
    if (ps->sink && ps->sink->set)
        ps->sink->set(ps->sink->ctx, id, v, sf_knob_defs[id].type == SF_KNOB_STRING ? ps->str : NULL, ps->line);
}

unsigned sf_config_parse(const char *buf, size_t len, const sf_config_sink_t *sink) {
    struct parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = buf;
    ps.end = buf + len;
    ps.line = 1;
    ps.sink = sink;
    ps.table = TABLE_ROOT;
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) ps.p += 3; /* UTF-8 byte order mark */
    while (ps.p < ps.end) {
        skip_ws(&ps);
        if (ps.p == ps.end) break;
        char c = *ps.p;
        if (c == '[') {
            parse_header(&ps);
        } else if (bare_char(c) || c == '"' || c == '\'' || (unsigned char)c >= 0x80) { /* (a UTF-8 letter) */
            parse_keyval(&ps);
        } else if (!rest_is_blank(&ps)) {
            error(&ps, "-", at_lone_cr(&ps) ? LONE_CR
                            : c == '=' ? "missing key before '='"
                                       : "expected a key, [table], comment or blank line");
        }
        next_line(&ps);
    }
    return ps.errors;
}
