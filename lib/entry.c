/* entry.c - which fast paths the exported malloc and free run.
 *
 * Guard level 2 has fast paths of its own (fastpath.h: sf_malloc_l2,
 * sf_free_l2) so that its checks cost a few instructions, not a trip through
 * the generic paths.  The level is fixed at start-up, so the choice is made
 * once, in sf_init_slow, by pointing these two at one pair or the other;
 * malloc and free (override.c, api.c) are a single indirect jump through
 * them.  Before initialisation they name levels 0-1's paths, whose first
 * call falls through to the generic path and initialises.  Every other
 * entry point (calloc, realloc, operator new, ...) runs levels 0-1's inline
 * paths at every level: at level 2 they find no page on those paths and take
 * the generic ones, which apply level 2's checks. */
#include "fastpath.h"

SF_HOT static void *malloc_levels01(size_t n) { return sf_malloc(n); }
SF_HOT static void free_levels01(void *p) { sf_free_as(p, SF_FREE_TOP); }
SF_HOT static void free_levels01_profiled(void *p) { sf_free_as(p, SF_FREE_COUNTED); }
SF_HOT static void *malloc_level2(size_t n) { return sf_malloc_l2(n); }
SF_HOT static void free_level2(void *p) { sf_free_l2(p); }

/* The sampled guard on (guard_sample.c): the same, after counting the
 * thread's bytes down to its next sample. */
static __thread int64_t sample_left __attribute__((tls_model("initial-exec")));
/* (the subtraction unsigned, read back signed: the same two instructions
 * without signed overflow; a request above 2^63 that lifts the count
 * instead fails with ENOMEM anyway, and only that thread's samples wait) */
static bool sample_due(size_t n) {
    int64_t left = (int64_t)((uint64_t)sample_left - n);
    sample_left = left;
    return left < 0;
}
SF_HOT static void *malloc_levels01_sampled(size_t n) {
    if (SF_UNLIKELY(sample_due(n))) return sf_gsample_malloc(n, &sample_left);
    return sf_malloc(n);
}
SF_HOT static void *malloc_level2_sampled(size_t n) {
    if (SF_UNLIKELY(sample_due(n))) return sf_gsample_malloc(n, &sample_left);
    return sf_malloc_l2(n);
}

void *(*sf_entry_malloc)(size_t) = malloc_levels01;
void (*sf_entry_free)(void *) = free_levels01;

/* At start-up, and again when the heap profile is armed at run time: from
 * then on levels 0-1's free() counts what it pushes on top against the
 * class's sampling count (fastpath.h, sf_free_owned_counted).  A thread
 * that read the old pointer a moment before pushes once more uncounted,
 * which moves a sample point by a block or two, nothing else: both pushes
 * leave a valid page. */
void sf_entry_choose(void) {
    if (sf_l2_fast) {
        __atomic_store_n(&sf_entry_malloc, sf_gsample_on ? malloc_level2_sampled : malloc_level2, __ATOMIC_RELAXED);
        __atomic_store_n(&sf_entry_free, free_level2, __ATOMIC_RELAXED);
    } else {
        if (sf_gsample_on) __atomic_store_n(&sf_entry_malloc, malloc_levels01_sampled, __ATOMIC_RELAXED);
        if (sf_prof_is_armed()) __atomic_store_n(&sf_entry_free, free_levels01_profiled, __ATOMIC_RELAXED);
    }
}
