/* phase.h - the phase measurements' schema (sefer_phase_begin/end,
 * /phases): what the generic paths count, the bounds, an open phase as
 * phase_count.c keeps it and as a snapshot shows it (phase.c has the
 * design; docs/api.md, "Phases"). */
#ifndef SEFER_PHASE_H
#define SEFER_PHASE_H

#include "sefer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum sf_phase_what { SF_PHASE_ALLOC, SF_PHASE_FREE, SF_PHASE_REALLOC, SF_PHASE_ALLOCATED };
#define SF_PHASE_FOLD ((int64_t)64 << 10) /* a heap's delta of block bytes goes shared past this */
#define SF_PHASES_OPEN_MAX 16             /* nested phases at once */
#define SF_PHASES_KEPT 64                 /* ended phases kept for /phases */
/* An open phase (phase_count.c's sf_phase_open[]): its entry figures, and
 * the peaks the folds raise. */
struct sf_open_phase {
    char name[64];
    uint64_t start_ns, start_ms;
    uint64_t bytes_entry, committed_entry;
    _Atomic int64_t bytes_peak;
    _Atomic uint64_t committed_peak;
    uint64_t allocs0, frees0, reallocs0, allocated0;
};
typedef struct {
    char name[64];
    uint64_t running_ns, start_ms, block_bytes_entry, block_bytes_peak;
} sf_phase_open_t;
typedef struct {
    struct sefer_phase done[SF_PHASES_KEPT]; /* oldest first */
    size_t ndone;
    uint64_t done_total; /* phases ended since the start */
    sf_phase_open_t open[SF_PHASES_OPEN_MAX]; /* outermost first */
    size_t nopen;
} sf_phase_snap_t;

#endif /* SEFER_PHASE_H */
