/* profile.h - what the heap profiler (lib/profile.c) shows the
 * introspection server and sefer_stats.
 *
 * Sites are call stacks, each stored once, numbered in order of first
 * sample and never removed, so a site's id is stable for the life of the
 * process.  Estimates are sums of per-sample weights (a sample of a block of
 * s bytes taken with probability p = 1 - exp(-s/rate) stands for 1/p blocks
 * and s/p bytes), summed per site before any other sum. */
#ifndef SEFER_PROFILE_H
#define SEFER_PROFILE_H

#include "internal.h"

#define SF_PROF_DEPTH_MAX 64      /* profile.depth's bound */
#define SF_PROF_OBJ_UNIT 65536.0  /* object estimates are kept in 1/65536 objects */

typedef struct {
    uint32_t id;        /* the site's number (stable) */
    uint32_t depth;     /* frames, innermost first */
    uint64_t frames_at; /* index of its first frame in the copied frames */
    uint64_t live_samples, samples;     /* sampled blocks live now, ever */
    uint64_t live_bytes, alloc_bytes;   /* estimated bytes live now, allocated ever */
    uint64_t live_objs, alloc_objs;     /* the same in blocks, x SF_PROF_OBJ_UNIT */
    uint64_t mark_bytes, mark_objs;     /* live estimates when the mark was set */
} sf_prof_site_t;

typedef struct {
    uint64_t rate;            /* profile.sample_bytes now */
    uint64_t rate_now;        /* the mean gap in force: rate, paced (profile.max_samples) */
    uint64_t samples;         /* samples recorded, ever */
    uint64_t dropped;         /* samples lost because the tables were full */
    uint64_t live_samples;    /* sampled blocks live now */
    uint64_t live_bytes;      /* estimated bytes in live blocks, all sites */
    uint64_t live_objs;       /* x SF_PROF_OBJ_UNIT */
    uint64_t bytes;           /* memory the profile's tables take (mapped) */
    uint64_t mark_ms;         /* when the mark was set (sf_now_ms), 0: never */
    uint64_t marks;           /* marks set so far */
    uint64_t sites, frames;   /* sites stored, frames stored */
    uint64_t unwinder;        /* profile.unwinder now (enum sf_unwinder) */
    uint64_t unwind_fallbacks, unwind_disagreements; /* profile_stack.c, cumulative */
} sf_prof_totals_t;

SF_HIDDEN void sf_prof_totals(sf_prof_totals_t *t);
SF_HIDDEN uint64_t sf_prof_rate_now(void); /* the mean gap between samples in force */
SF_HIDDEN void sf_prof_pace_redraw(sf_heap_t *heap);
SF_HIDDEN extern _Atomic uint32_t sf_prof_pace_epoch;
/* On a heap's refills: the samples' pace came down since it last looked
 * (profile.c, pacing), so a gap it drew at the slower pace is drawn again. */
SF_INLINE void sf_prof_pace_check(sf_heap_t *heap) {
    if (SF_UNLIKELY(heap->prof.pace_epoch != atomic_load_explicit(&sf_prof_pace_epoch, memory_order_relaxed)))
        sf_prof_pace_redraw(heap);
}
/* Copies every site and every frame (sites[i].frames_at indexes frames)
 * and the totals, under the profile's lock, without allocating.  False if
 * they do not fit: t->sites and t->frames say what is needed (try again
 * with more room; the tables only grow). */
SF_HIDDEN bool sf_prof_copy(sf_prof_site_t *sites, size_t max_sites, uintptr_t *frames, size_t max_frames,
                            sf_prof_totals_t *t);
/* Every site's live estimates become its baseline for growth. */
SF_HIDDEN void sf_prof_mark(void);
/* sefer's own code: frames inside it at the top of a stack are not the
 * program's (lo == hi: not known, as in a program linked statically). */
SF_HIDDEN void sf_prof_self_range(uintptr_t *lo, uintptr_t *hi);
/* The calling thread's allocations are not sampled while this is > 0
 * (the unwinder, and the introspection thread's symbolizer). */
SF_HIDDEN void sf_prof_quiet(bool on);

/* profile_stack.c */
SF_HIDDEN unsigned sf_prof_capture(uintptr_t *out, unsigned max);
SF_HIDDEN void sf_prof_stack_init(void);
/* captures the table walk gave to libgcc, and (profile.unwinder = check)
 * captures where the two walks differed: cumulative */
SF_HIDDEN uint64_t sf_prof_unwind_fallbacks(void);
SF_HIDDEN uint64_t sf_prof_unwind_disagreements(void);

/* unwind.c: the return addresses minus one of the caller's callers, at most
 * max, those in [skip_lo, skip_hi) at the top left out; -1 where the walk
 * cannot follow a frame (the caller then asks libgcc). */
SF_HIDDEN int sf_unwind_table(uintptr_t *out, unsigned max, uintptr_t skip_lo, uintptr_t skip_hi);
/* An object was unloaded: every rule derived so far is forgotten. */
SF_HIDDEN void sf_unwind_forget(void);
/* dlclose reaches sf_unwind_forget (override_dl.c): rules may be kept. */
SF_HIDDEN extern bool sf_unwind_sees_dlclose;

#endif
