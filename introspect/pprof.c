/* pprof.c - the heap profile as pprof's profile.proto, gzipped: what
 * /debug/pprof/heap, /debug/pprof/allocs and `sefer run --profile` give
 * (docs/introspection.md).
 *
 * The encoder is written here rather than generated with protobuf-c.  The
 * message is write-only, flat and small: six message types, fields of two
 * wire types (varint, length-delimited), no reading, no unknown fields, no
 * versioning.  protobuf-c would need the .proto in the tree, generated code
 * at build time, a runtime library loaded into every process that preloads
 * sefer, and the whole profile built as a tree of malloc'd structs before
 * packing; the writer below appends bytes to one buffer, and
 * tests/introspect's pprof test reads its output with Go's own pprof.
 *
 * Compression: gzip.c (libdeflate, else zlib, else stored blocks). */
#include "symbols.h"
#include "gzip.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---- a byte buffer and protobuf's two wire types ------------------------- */

typedef struct {
    unsigned char *b;
    size_t len, cap;
    bool failed;
} buf_t;

/* Room for n more bytes; false (and failed) if there is no memory. */
static bool reserve(buf_t *o, size_t n) {
    if (o->failed) return false;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n) cap *= 2;
        unsigned char *b = realloc(o->b, cap);
        if (b == NULL) {
            o->failed = true;
            return false;
        }
        o->b = b;
        o->cap = cap;
    }
    return true;
}

static void put(buf_t *o, const void *p, size_t n) {
    if (!reserve(o, n)) return;
    memcpy(o->b + o->len, p, n);
    o->len += n;
}

/* (written in place: a profile is mostly varints, and a memcpy call for
 * each took a sixth of a request's time on 16 000 sites) */
static void varint(buf_t *o, uint64_t v) {
    if (!reserve(o, 10)) return;
    unsigned char *p = o->b + o->len;
    while (v > 0x7f) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    o->len = (size_t)(p - o->b);
}

static void field_int(buf_t *o, unsigned field, uint64_t v) {
    varint(o, (uint64_t)field << 3);
    varint(o, v);
}

static void field_bytes(buf_t *o, unsigned field, const void *p, size_t n) {
    varint(o, (uint64_t)field << 3 | 2);
    varint(o, n);
    put(o, p, n);
}

static void field_msg(buf_t *o, unsigned field, buf_t *m) {
    if (m->failed) o->failed = true;
    field_bytes(o, field, m->b, m->len);
    m->len = 0;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    for (; v > 0x7f; v >>= 7) n++;
    return n;
}

/* A Sample (Profile field 2) of two packed fields, location ids and
 * values, written into o at once: no message buffered and copied for each
 * site (a scrape of 16 000 sites copied every site's bytes twice). */
static void sample_msg(buf_t *o, buf_t *ids, buf_t *vals) {
    if (ids->failed || vals->failed) o->failed = true;
    size_t inner = 2 + varint_len(ids->len) + ids->len + varint_len(vals->len) + vals->len;
    varint(o, 2 << 3 | 2);
    varint(o, inner);
    field_bytes(o, 1, ids->b, ids->len);
    field_bytes(o, 2, vals->b, vals->len);
    ids->len = vals->len = 0;
}

/* ---- the string table ------------------------------------------------------ */

typedef struct {
    buf_t out; /* the Profile message being built (string_table goes last) */
    buf_t strings;
    const char **keys;
    uint64_t *ids;
    size_t cap, count;
} strtab_t;

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* The index of s in the string table (0 is ""). */
static uint64_t str_id(strtab_t *t, const char *s) {
    if (s == NULL || *s == '\0') return 0;
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        const char **keys = calloc(cap, sizeof *keys);
        uint64_t *ids = calloc(cap, sizeof *ids);
        if (keys == NULL || ids == NULL) {
            free(keys);
            free(ids);
            t->out.failed = true;
            return 0;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (t->keys[i] == NULL) continue;
            size_t j = str_hash(t->keys[i]) & (cap - 1);
            while (keys[j] != NULL) j = (j + 1) & (cap - 1);
            keys[j] = t->keys[i];
            ids[j] = t->ids[i];
        }
        free(t->keys);
        free(t->ids);
        t->keys = keys;
        t->ids = ids;
        t->cap = cap;
    }
    size_t j = str_hash(s) & (t->cap - 1);
    for (; t->keys[j] != NULL; j = (j + 1) & (t->cap - 1))
        if (strcmp(t->keys[j], s) == 0) return t->ids[j];
    t->keys[j] = s; /* (the caller keeps s alive until the profile is done) */
    t->ids[j] = ++t->count;
    field_bytes(&t->strings, 6, s, strlen(s));
    return t->count;
}

/* ---- address -> location id ------------------------------------------------- */

typedef struct {
    uintptr_t *addr; /* 0: an empty slot */
    uint64_t *id;
    size_t cap, count;
    bool failed; /* no memory to grow: the profile is not written */
} locs_t;

/* The top bits of the product (Fibonacci hashing): every bit of the key
 * reaches them.  (The bits from 17 up, as before, depend on the key's low
 * bits alone while the table is small: a function's key is (name, file),
 * file in the low half, so every function of one file probed one chain,
 * 128 M probes for 16 000 functions.) */
static size_t loc_slot(uintptr_t a, size_t cap) {
    return (size_t)(((uint64_t)a * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_ctzll(cap)));
}

/* Room for one more key at a load of at most a half: the table starts at
 * 1024 slots and doubles.  (Sized up front by every frame of every site,
 * it took four callocs of 4 MiB a request for 8 000 sites whose frames
 * name a few dozen addresses: a third of the request's time zeroing.) */
static bool loc_room(locs_t *l) {
    if ((l->count + 1) * 2 <= l->cap) return true;
    size_t cap = l->cap ? l->cap * 2 : 1024;
    uintptr_t *addr = calloc(cap, sizeof *addr);
    uint64_t *id = calloc(cap, sizeof *id);
    if (addr == NULL || id == NULL) {
        free(addr);
        free(id);
        l->failed = true;
        return false;
    }
    for (size_t i = 0; i < l->cap; i++) {
        if (l->addr[i] == 0) continue;
        size_t j = loc_slot(l->addr[i], cap);
        while (addr[j] != 0) j = (j + 1) & (cap - 1);
        addr[j] = l->addr[i];
        id[j] = l->id[i];
    }
    free(l->addr);
    free(l->id);
    l->addr = addr;
    l->id = id;
    l->cap = cap;
    return true;
}

/* The id of key a (not 0), numbered from 1 in the order first seen;
 * *fresh: first seen now.  0 if the table could not grow. */
static uint64_t loc_id(locs_t *l, uintptr_t a, bool *fresh) {
    *fresh = false;
    if (!loc_room(l)) return 0;
    size_t j = loc_slot(a, l->cap);
    for (; l->addr[j] != 0; j = (j + 1) & (l->cap - 1))
        if (l->addr[j] == a) {
            *fresh = false;
            return l->id[j];
        }
    l->addr[j] = a;
    l->id[j] = ++l->count;
    *fresh = true;
    return l->count;
}

/* ---- the Profile message ------------------------------------------------------ */

static void value_type(strtab_t *t, unsigned field, const char *type, const char *unit, buf_t *m) {
    field_int(m, 1, str_id(t, type));
    field_int(m, 2, str_id(t, unit));
    field_msg(&t->out, field, m);
}

/* Functions are numbered by name: one per distinct (name, file). */
static uint64_t function_id(strtab_t *t, locs_t *funcs, const sf_sym_t *s, buf_t *m) {
    uint64_t name = str_id(t, s->function), file = str_id(t, s->file);
    bool fresh;
    /* (bit 63: never the empty slot's 0, even for an empty name and file) */
    uint64_t id = loc_id(funcs, (uintptr_t)((name << 32) | file | (1ull << 63)), &fresh);
    if (fresh) {
        field_int(m, 1, id);
        field_int(m, 2, name);
        field_int(m, 3, name);
        field_int(m, 4, file);
        field_msg(&t->out, 5, m);
    }
    return id;
}

/* A site's figures go out as pprof's int64s: the copy's fields are
 * unsigned, and a delta (sf_pprof_delta_reply) wraps a fall below zero, so
 * bytes are written as they are (varint of the two's complement) and
 * objects, kept in 1/SF_PROF_OBJ_UNIT, rounded as signed. */
static uint64_t objects(uint64_t fixed) {
    double x = (double)(int64_t)fixed / SF_PROF_OBJ_UNIT;
    return (uint64_t)(int64_t)(x < 0 ? x - 0.5 : x + 0.5); /* (to the nearest, halves away from 0) */
}

unsigned char *sf_pprof_encode(const sf_prof_copy_t *c, bool heap, int64_t duration_ns, size_t *len) {
    strtab_t t = {0};
    buf_t m = {0}, line = {0};
    locs_t locs = {0}, funcs = {0};
    unsigned char *result = NULL;
    field_bytes(&t.strings, 6, "", 0);
    value_type(&t, 1, "alloc_objects", "count", &m);
    value_type(&t, 1, "alloc_space", "bytes", &m);
    value_type(&t, 1, "inuse_objects", "count", &m);
    value_type(&t, 1, "inuse_space", "bytes", &m);
    size_t nmaps;
    const sf_mapping_t *maps = sf_sym_mappings(&nmaps);
    for (size_t k = 0; k < nmaps; k++) {
        field_int(&m, 1, k + 1);
        field_int(&m, 2, maps[k].start);
        field_int(&m, 3, maps[k].limit);
        field_int(&m, 4, maps[k].offset);
        field_int(&m, 5, str_id(&t, maps[k].path));
        field_int(&m, 6, str_id(&t, maps[k].build_id));
        field_int(&m, 7, 1); /* has_functions: every location names one where it can */
        field_msg(&t.out, 3, &m);
    }
    buf_t ids = {0}, vals = {0}; /* (a site's, reused) */
    for (size_t i = 0; i < c->nsites; i++) {
        const sf_prof_site_t *s = &c->sites[i];
        size_t first, n;
        sf_prof_site_frames(c, s, &first, &n);
        for (size_t f = first; f < first + n; f++) {
            uintptr_t a = c->frames[f];
            bool fresh;
            uint64_t id = loc_id(&locs, a, &fresh);
            varint(&ids, id);
            if (!fresh) continue;
            const sf_sym_t *sym = sf_sym_lookup(a);
            field_int(&m, 1, id);
            if (sym->mapping != UINT32_MAX) field_int(&m, 2, sym->mapping + 1);
            field_int(&m, 3, a);
            if (sym->function != NULL) {
                field_int(&line, 1, function_id(&t, &funcs, sym, &line));
                if (sym->line > 0) field_int(&line, 2, (uint64_t)sym->line);
                field_msg(&m, 4, &line);
            }
            field_msg(&t.out, 4, &m);
        }
        varint(&vals, objects(s->alloc_objs));
        varint(&vals, s->alloc_bytes);
        varint(&vals, objects(s->live_objs));
        varint(&vals, s->live_bytes);
        sample_msg(&t.out, &ids, &vals);
    }
    free(ids.b);
    free(vals.b);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    field_int(&t.out, 9, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    if (duration_ns > 0) field_int(&t.out, 10, (uint64_t)duration_ns); /* (a delta: ?seconds=N) */
    value_type(&t, 11, "space", "bytes", &m);
    field_int(&t.out, 12, c->totals.rate);
    field_int(&t.out, 14, str_id(&t, heap ? "inuse_space" : "alloc_space"));
    /* how the stacks were read, for whoever doubts one (go tool pprof
     * -comments; tests/preload/run_one.sh reads it) */
    const char *const *walks = sf_knob_defs[SF_KNOB_PROFILE_UNWINDER].choices;
    char note[160];
    snprintf(note, sizeof note, "sefer: samples=%llu unwinder=%s unwind_fallbacks=%llu unwind_disagreements=%llu",
             (unsigned long long)c->totals.samples,
             c->totals.unwinder <= SF_UNWINDER_CHECK ? walks[c->totals.unwinder] : "?",
             (unsigned long long)c->totals.unwind_fallbacks, (unsigned long long)c->totals.unwind_disagreements);
    field_int(&t.out, 13, str_id(&t, note));
    put(&t.out, t.strings.b, t.strings.len);
    if (!t.out.failed && !t.strings.failed && !m.failed && !locs.failed && !funcs.failed)
        result = sf_gzip(t.out.b, t.out.len, len);
    free(t.out.b);
    free(t.strings.b);
    free(t.keys);
    free(t.ids);
    free(m.b);
    free(line.b);
    free(locs.addr);
    free(locs.id);
    free(funcs.addr);
    free(funcs.id);
    return result;
}

void sf_pprof_tmp_path(char *out, size_t size, const char *path, pid_t writer) {
    snprintf(out, size, "%s.%ld.tmp", path, (long)writer);
}

int sf_pprof_write_file(const char *path) {
    sf_prof_copy_t c;
    if (!sf_prof_copy_take(&c)) {
        errno = ENOMEM;
        return -1;
    }
    sf_sym_begin();
    size_t len = 0;
    unsigned char *gz = sf_pprof_encode(&c, true, 0, &len);
    sf_sym_end();
    sf_prof_copy_free(&c);
    if (gz == NULL) {
        errno = ENOMEM;
        return -1;
    }
    char tmp[4200];
    sf_pprof_tmp_path(tmp, sizeof tmp, path, getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = -1, err = 0;
    if (fd >= 0) {
        size_t at = 0;
        while (at < len) {
            ssize_t w = write(fd, gz + at, len - at);
            if (w <= 0) break;
            at += (size_t)w;
        }
        err = errno;
        if (close(fd) == 0 && at == len && rename(tmp, path) == 0) rc = 0;
        else err = err ? err : errno;
        if (rc != 0) unlink(tmp);
    } else {
        err = errno;
    }
    free(gz);
    errno = err;
    return rc;
}
