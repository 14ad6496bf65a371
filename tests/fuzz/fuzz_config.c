/* fuzz_config.c - libFuzzer target for the SEFER_CONFIG parser.
 *
 * The parser (lib/toml.c) is a pure function on a buffer; this
 * target feeds it any bytes and checks, besides "no crash, no sanitizer
 * report", what its callers rely on:
 *   - a value handed to set() is within the knob's bounds (an enum index
 *     names a choice, a boolean is 0 or 1, a string fits its buffer);
 *   - unset() only follows a set() of the same knob;
 *   - an error has a line within the input, a non-empty key and message,
 *     and neither contains a control character (one line on stderr);
 *   - parsing is deterministic.
 *
 * libFuzzer (clang, ASan + UBSan):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -D_GNU_SOURCE -Ilib -Iinclude tests/fuzz/fuzz_config.c lib/toml.c \
 *     lib/knob_table.c lib/str.c -o fuzz_config
 *   ./fuzz_config -max_total_time=600 -dict=tests/fuzz/config.dict \
 *     fuzz-work tests/fuzz/corpus
 * Without clang, fuzz_corpus.c (meson test "fuzz-corpus") replays the corpus. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

struct check {
    size_t lines;
    bool set[SF_KNOB_COUNT];
    unsigned errors, sets;
    uint64_t hash;
};

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_config: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                \
        }                                                                           \
    } while (0)

static void mix(struct check *c, uint64_t v) { c->hash = (c->hash ^ v) * 0x100000001b3ull; }

static void check_text(const char *s) {
    CHECK(s != NULL && *s != '\0');
    for (; *s; s++) CHECK((unsigned char)*s >= 0x20 && (unsigned char)*s != 0x7f);
}

static void on_set(void *ctx, int knob, uint64_t value, const char *str, unsigned line) {
    struct check *c = ctx;
    CHECK(knob >= 0 && knob < SF_KNOB_COUNT);
    CHECK(line >= 1 && line <= c->lines);
    CHECK(!c->set[knob]);
    const struct sf_knob_def *d = &sf_knob_defs[knob];
    switch (d->type) {
    case SF_KNOB_STRING:
        CHECK(str != NULL && strlen(str) < SF_KNOB_STR_MAX);
        for (const char *p = str; *p; p++) mix(c, (unsigned char)*p);
        break;
    case SF_KNOB_ENUM: {
        uint64_t n = 0;
        while (d->choices[n]) n++;
        CHECK(str == NULL && value < n);
        break;
    }
    case SF_KNOB_BOOL: CHECK(str == NULL && value <= 1); break;
    default: CHECK(str == NULL && value >= d->min && value <= d->max); break;
    }
    c->set[knob] = true;
    c->sets++;
    mix(c, (uint64_t)knob << 32 ^ value ^ line);
}

static void on_unset(void *ctx, int knob, unsigned line) {
    struct check *c = ctx;
    CHECK(knob >= 0 && knob < SF_KNOB_COUNT && c->set[knob]);
    CHECK(line >= 1 && line <= c->lines);
    c->set[knob] = false;
    mix(c, (uint64_t)knob * 31 + line);
}

static void on_error(void *ctx, unsigned line, const char *key, const char *msg) {
    struct check *c = ctx;
    CHECK(line >= 1 && line <= c->lines);
    check_text(key);
    check_text(msg);
    c->errors++;
    mix(c, line);
    for (const char *p = msg; *p; p++) mix(c, (unsigned char)*p);
}

/* For the corpus driver: the number of errors in the last input. */
unsigned fuzz_config_last_errors, fuzz_config_last_sets;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > SF_CONFIG_FILE_MAX) return 0; /* knobs.c refuses bigger files */
    struct check a, b;
    memset(&a, 0, sizeof a);
    a.lines = 1;
    for (size_t i = 0; i < size; i++) a.lines += data[i] == '\n';
    b = a;
    sf_config_sink_t sink_a = {&a, on_set, on_unset, on_error};
    sf_config_sink_t sink_b = {&b, on_set, on_unset, on_error};
    unsigned ea = sf_config_parse((const char *)data, size, &sink_a);
    unsigned eb = sf_config_parse((const char *)data, size, &sink_b);
    CHECK(ea == a.errors && eb == b.errors && ea == eb && a.hash == b.hash);
    /* with no sink at all it must behave too */
    CHECK(sf_config_parse((const char *)data, size, NULL) == ea);
    fuzz_config_last_errors = ea;
    fuzz_config_last_sets = a.sets;
    return 0;
}
