/* json.c - cJSON helpers, a growing text buffer, replies and query values.
 *
 * cJSON stores every number as a double, which is exact only up to 2^53;
 * byte counts and counters are uint64_t.  Every integer therefore goes into
 * the tree as a raw item holding its decimal text (cJSON_CreateRaw), which
 * cJSON prints verbatim, so 18446744073709551615 comes out as written.
 * Keys are string literals, added without a copy (cJSON_AddItemToObjectCS).
 *
 * An item that cannot be made (cJSON_Create* returns NULL when malloc fails)
 * or added would leave a field out of a reply that still says 200; instead
 * the failure is remembered (json_failed, per thread) and the next
 * sf_reply_json gives no body, which the server answers with 503. */
#include "cjson_calls.h"
#include "utf8.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static __thread bool json_failed; /* a field of the reply being built is missing */

void sf_json_add(cJSON *obj, const char *key, cJSON *item) {
    bool added = obj != NULL && item != NULL &&
                 (cJSON_IsArray(obj) ? cJSON_AddItemToArray(obj, item)
                                     : cJSON_AddItemToObjectCS(obj, key, item));
    if (added) return;
    json_failed = true;
    if (item != NULL) cJSON_Delete(item);
}

cJSON *sf_json_u64_item(uint64_t v) {
    char text[24];
    snprintf(text, sizeof text, "%" PRIu64, v);
    return cJSON_CreateRaw(text);
}

void sf_json_u64(cJSON *obj, const char *key, uint64_t v) { sf_json_add(obj, key, sf_json_u64_item(v)); }

/* A string item that is valid UTF-8 whatever s holds.  cJSON prints a
 * string's bytes as they are, and text from the process or the request (a
 * thread name, a phase name cut at 63 bytes inside a character, a path in
 * profile.output, a query parameter's name in a 400's reason) need not be
 * UTF-8: the reply would not be JSON (RFC 8259 requires UTF-8; parsers
 * refuse it).  Each byte that starts no well-formed character becomes
 * U+FFFD. */
cJSON *sf_json_string_item(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0, len = 0;
    while (u != NULL && u[len]) {
        size_t n = sf_utf8_char(u + len);
        bad += n == 0;
        len += n ? n : 1;
    }
    if (bad == 0) return cJSON_CreateString(s);
    char *fixed = malloc(len + 2 * bad + 1), *w = fixed;
    if (fixed == NULL) return NULL;
    while (*u) {
        size_t n = sf_utf8_char(u);
        if (n == 0) memcpy(w, "\xef\xbf\xbd", 3); /* U+FFFD */
        else memcpy(w, u, n);
        w += n ? n : 3;
        u += n ? n : 1;
    }
    *w = '\0';
    cJSON *item = cJSON_CreateString(fixed);
    free(fixed);
    return item;
}

void sf_json_str(cJSON *obj, const char *key, const char *s) { sf_json_add(obj, key, sf_json_string_item(s)); }
void sf_json_bool(cJSON *obj, const char *key, bool v) { sf_json_add(obj, key, cJSON_CreateBool(v)); }
void sf_json_null(cJSON *obj, const char *key) { sf_json_add(obj, key, cJSON_CreateNull()); }

void sf_json_hex(cJSON *obj, const char *key, uintptr_t v) {
    char text[24];
    snprintf(text, sizeof text, "0x%" PRIxPTR, v);
    sf_json_add(obj, key, cJSON_CreateString(text));
}

/* A ratio: 6 significant digits, as raw text (cJSON's own printing of
 * doubles follows the locale's decimal point on some versions). */
void sf_json_double(cJSON *obj, const char *key, double v) {
    char text[32];
    snprintf(text, sizeof text, "%.6g", v);
    for (char *c = text; *c; c++)
        if (*c == ',') *c = '.';
    sf_json_add(obj, key, cJSON_CreateRaw(text));
}

/* ---- text ------------------------------------------------------------------ */

static bool text_room(sf_text_t *t, size_t more) {
    if (t->failed) return false;
    if (t->len + more + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1) cap *= 2;
    char *b = realloc(t->buf, cap);
    if (b == NULL) {
        t->failed = true;
        return false;
    }
    t->buf = b;
    t->cap = cap;
    return true;
}

void sf_text_add(sf_text_t *t, const char *s) {
    size_t n = strlen(s);
    if (!text_room(t, n)) return;
    memcpy(t->buf + t->len, s, n + 1);
    t->len += n;
}

void sf_text_addf(sf_text_t *t, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        sf_text_add(t, small);
        return;
    }
    if (!text_room(t, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* ---- replies ------------------------------------------------------------------ */

/* Every field of a reply: a malloc'ed body, no ETag, the endpoints' headers. */
static void reply_start(sf_reply_t *r, unsigned status, const char *type) {
    *r = (sf_reply_t){.status = status, .type = type};
}

void sf_reply_json(sf_reply_t *r, unsigned status, cJSON *root, bool pretty) {
    reply_start(r, status, "application/json");
    bool complete = root != NULL && !json_failed;
    json_failed = false;
    r->body = complete ? (pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
    r->len = r->body ? strlen(r->body) : 0;
    cJSON_Delete(root);
    if (r->body != NULL && pretty) { /* end with a newline, for curl in a terminal */
        char *b = realloc(r->body, r->len + 2);
        if (b != NULL) {
            b[r->len++] = '\n';
            b[r->len] = '\0';
            r->body = b;
        }
    }
}

void sf_reply_error(sf_reply_t *r, unsigned status, const char *error, const char *reason) {
    cJSON *root = cJSON_CreateObject();
    if (root != NULL) {
        sf_json_str(root, "error", error);
        if (reason != NULL) sf_json_str(root, "reason", reason);
        sf_json_u64(root, "status", status);
    }
    sf_reply_json(r, status, root, true);
}

void sf_reply_text(sf_reply_t *r, unsigned status, const char *type, sf_text_t *t) {
    reply_start(r, status, type);
    if (t->failed || t->buf == NULL) {
        free(t->buf);
        r->body = NULL;
        r->len = 0;
    } else {
        r->body = t->buf;
        r->len = t->len;
    }
    t->buf = NULL;
}

/* ---- query values ------------------------------------------------------------- */

static const char *query_get(const sf_query_t *q, const char *key, bool *present) {
    for (unsigned i = 0; i < q->count; i++)
        if (strcmp(q->key[i], key) == 0) {
            *present = true;
            return q->value[i];
        }
    *present = false;
    return NULL;
}

bool sf_query_u64(const sf_query_t *q, const char *key, uint64_t dflt, uint64_t max, uint64_t *out,
                  sf_reply_t *r) {
    bool present;
    const char *v = query_get(q, key, &present);
    *out = dflt;
    if (!present) return true;
    uint64_t x = 0;
    bool ok = v != NULL && *v != '\0' && strlen(v) <= 20;
    for (const char *c = v; ok && *c; c++) {
        ok = *c >= '0' && *c <= '9' && x <= (UINT64_MAX - 9) / 10;
        x = x * 10 + (uint64_t)(*c - '0');
    }
    if (!ok || x > max) {
        char why[160];
        snprintf(why, sizeof why, "query parameter %s must be an integer from 0 to %" PRIu64, key, max);
        sf_reply_error(r, 400, "bad request", why);
        return false;
    }
    *out = x;
    return true;
}

bool sf_query_name(const sf_query_t *q, const char *key, char *out, size_t size, sf_reply_t *r) {
    bool present;
    const char *v = query_get(q, key, &present);
    out[0] = '\0';
    if (!present) return true;
    bool ok = v != NULL && *v != '\0' && strlen(v) < size;
    for (const char *c = v; ok && *c; c++) ok = *c >= 0x20 && *c < 0x7f;
    if (!ok) {
        char why[160];
        snprintf(why, sizeof why, "query parameter %s must be 1 to %zu printable ASCII characters", key, size - 1);
        sf_reply_error(r, 400, "bad request", why);
        return false;
    }
    memcpy(out, v, strlen(v) + 1);
    return true;
}

bool sf_query_pretty(const sf_query_t *q, sf_reply_t *r, bool *pretty) {
    uint64_t v = 1;
    if (!sf_query_u64(q, "pretty", 1, 1, &v, r)) return false;
    *pretty = v != 0;
    return true;
}
