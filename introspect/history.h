/* history.h - the figures' history: samples kept in tiers of fixed memory.
 *
 * Pure data structure (history.c): no allocation, no lock, no clock.  The
 * caller (sampler.c) gives it memory, once, and samples with their times;
 * /history (timeline.c) reads it.  Tests drive it alone, with short tiers
 * (tests/introspect/test_history.c).
 *
 * Tier 0 keeps every sample (the raw tier).  Each coarser tier cuts time
 * into buckets of step_ms (aligned to multiples of step_ms since the epoch)
 * and keeps, per bucket and figure, the minimum, the maximum and the last
 * value, so a spike between two points survives downsampling.  Every tier
 * takes every sample, and each is a ring of `capacity` points: a tier's
 * oldest point goes when it is full.  A point's time is the time of its
 * last sample, so the points of every tier are in time order. */
#ifndef SEFER_HISTORY_H
#define SEFER_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SF_HIST_TIERS 3
#define SF_HIST_NULL UINT64_MAX /* a figure that could not be had (JSON null) */

typedef struct {
    uint64_t step_ms;  /* 0: the raw tier (a point per sample); else the bucket width */
    uint32_t capacity; /* points kept (0: the tier is not used) */
} sf_hist_tier_conf_t;

typedef struct {
    uint32_t fields; /* figures per sample */
    sf_hist_tier_conf_t tier[SF_HIST_TIERS];
} sf_hist_conf_t;

typedef struct {
    sf_hist_tier_conf_t conf;
    uint64_t *t;                /* [capacity]: time of the point's last sample */
    uint64_t *last, *min, *max; /* [capacity][fields]; min and max NULL in the raw tier */
    uint32_t head, count;       /* oldest point's index; points held */
    uint64_t bucket;            /* bucket number of the newest point */
} sf_hist_tier_t;

typedef struct {
    uint32_t fields;
    uint64_t samples;           /* taken so far */
    uint64_t first_ms, last_ms; /* times of the first and latest samples */
    sf_hist_tier_t tier[SF_HIST_TIERS];
} sf_history_t;

/* Bytes of memory a history of this shape needs. */
size_t sf_history_size(const sf_hist_conf_t *conf);
/* Lays the history out in mem (sf_history_size(conf) bytes, zeroed). */
void sf_history_init(sf_history_t *h, const sf_hist_conf_t *conf, void *mem);
/* Adds a sample: values[fields] (SF_HIST_NULL: not available) at t_ms,
 * which must be later than the previous sample's time. */
void sf_history_add(sf_history_t *h, uint64_t t_ms, const uint64_t *values);

/* What to show from `since` on: runs of points of different tiers that do
 * not overlap, coarsest (oldest) first; each tier's run ends where the next
 * finer tier's points begin. */
typedef struct {
    unsigned tier;
    uint32_t first, count; /* points first .. first + count - 1 of the tier, oldest = 0 */
} sf_hist_part_t;
unsigned sf_history_parts(const sf_history_t *h, uint64_t since_ms,
                          sf_hist_part_t out[SF_HIST_TIERS]);

/* Point i (0: the oldest) of a tier: its time, and its figures (min and
 * max are NULL in the raw tier, where a point is one sample). */
uint64_t sf_history_point(const sf_history_t *h, unsigned tier, uint32_t i, const uint64_t **last,
                          const uint64_t **min, const uint64_t **max);

#endif /* SEFER_HISTORY_H */
