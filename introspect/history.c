/* history.c - tiers of samples in fixed memory (history.h says what). */
#include "history.h"

#include <string.h>

static size_t tier_words(const sf_hist_tier_conf_t *c, uint32_t fields) {
    size_t per_point = 1 + (size_t)fields * (c->step_ms ? 3 : 1); /* time + last (+ min + max) */
    return (size_t)c->capacity * per_point;
}

size_t sf_history_size(const sf_hist_conf_t *conf) {
    size_t words = 0;
    for (unsigned k = 0; k < SF_HIST_TIERS; k++)
        words += tier_words(&conf->tier[k], conf->fields);
    return words * sizeof(uint64_t);
}

void sf_history_init(sf_history_t *h, const sf_hist_conf_t *conf, void *mem) {
    memset(h, 0, sizeof *h);
    h->fields = conf->fields;
    uint64_t *w = mem;
    size_t cells;
    for (unsigned k = 0; k < SF_HIST_TIERS; k++) {
        sf_hist_tier_t *t = &h->tier[k];
        t->conf = conf->tier[k];
        cells = (size_t)t->conf.capacity * conf->fields;
        t->t = w;
        w += t->conf.capacity;
        t->last = w;
        w += cells;
        if (t->conf.step_ms) {
            t->min = w;
            w += cells;
            t->max = w;
            w += cells;
        }
    }
}

static uint32_t slot_of(const sf_hist_tier_t *t, uint32_t i) {
    return (t->head + i) % t->conf.capacity;
}

/* A new newest point (the oldest goes if the tier is full); its slot. */
static uint32_t tier_push(sf_hist_tier_t *t) {
    if (t->count == t->conf.capacity) {
        t->head = (t->head + 1) % t->conf.capacity;
        t->count--;
    }
    return slot_of(t, t->count++);
}

static void bucket_start(sf_hist_tier_t *t, uint32_t s, uint32_t fields, const uint64_t *v) {
    uint64_t *mn = &t->min[(size_t)s * fields], *mx = &t->max[(size_t)s * fields];
    for (uint32_t f = 0; f < fields; f++)
        mn[f] = mx[f] = v[f];
}

/* Figures that could not be had (SF_HIST_NULL) count for neither the
 * minimum nor the maximum, only for the last value. */
static void bucket_merge(sf_hist_tier_t *t, uint32_t s, uint32_t fields, const uint64_t *v) {
    uint64_t *mn = &t->min[(size_t)s * fields], *mx = &t->max[(size_t)s * fields];
    for (uint32_t f = 0; f < fields; f++) {
        if (v[f] == SF_HIST_NULL) continue;
        if (mn[f] == SF_HIST_NULL || v[f] < mn[f]) mn[f] = v[f];
        if (mx[f] == SF_HIST_NULL || v[f] > mx[f]) mx[f] = v[f];
    }
}

static void tier_add(sf_hist_tier_t *t, uint32_t fields, uint64_t t_ms, const uint64_t *v) {
    if (t->conf.capacity == 0) return;
    uint32_t s;
    if (t->conf.step_ms == 0) {
        s = tier_push(t);
    } else {
        uint64_t bucket = t_ms / t->conf.step_ms;
        bool same = t->count > 0 && bucket == t->bucket;
        s = same ? slot_of(t, t->count - 1) : tier_push(t);
        t->bucket = bucket;
        if (same)
            bucket_merge(t, s, fields, v);
        else
            bucket_start(t, s, fields, v);
    }
    t->t[s] = t_ms;
    memcpy(&t->last[(size_t)s * fields], v, fields * sizeof *v);
}

void sf_history_add(sf_history_t *h, uint64_t t_ms, const uint64_t *values) {
    for (unsigned k = 0; k < SF_HIST_TIERS; k++)
        tier_add(&h->tier[k], h->fields, t_ms, values);
    if (h->samples++ == 0) h->first_ms = t_ms;
    h->last_ms = t_ms;
}

uint64_t sf_history_point(const sf_history_t *h, unsigned tier, uint32_t i, const uint64_t **last,
                          const uint64_t **min, const uint64_t **max) {
    const sf_hist_tier_t *t = &h->tier[tier];
    uint32_t s = slot_of(t, i);
    size_t at = (size_t)s * h->fields;
    *last = &t->last[at];
    *min = t->min ? &t->min[at] : NULL;
    *max = t->max ? &t->max[at] : NULL;
    return t->t[s];
}

/* The first point of a tier at or after t_ms (count if none). */
static uint32_t first_at(const sf_hist_tier_t *t, uint64_t t_ms) {
    uint32_t lo = 0, hi = t->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->t[slot_of(t, mid)] < t_ms)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

unsigned sf_history_parts(const sf_history_t *h, uint64_t since_ms,
                          sf_hist_part_t out[SF_HIST_TIERS]) {
    sf_hist_part_t found[SF_HIST_TIERS];
    unsigned n = 0;
    uint64_t until = UINT64_MAX; /* where the finer tiers' points begin */
    for (unsigned k = 0; k < SF_HIST_TIERS; k++) {
        const sf_hist_tier_t *t = &h->tier[k];
        if (t->count == 0) continue;
        uint32_t from = first_at(t, since_ms),
                 to = until == UINT64_MAX ? t->count : first_at(t, until);
        if (to > from) found[n++] = (sf_hist_part_t){k, from, to - from};
        uint64_t oldest = t->t[slot_of(t, 0)];
        if (oldest < until) until = oldest;
    }
    for (unsigned i = 0; i < n; i++)
        out[i] = found[n - 1 - i];
    return n;
}
