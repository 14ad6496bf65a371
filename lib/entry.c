/* entry.c - which fast paths the exported malloc and free run.
 *
 * Guard level 2 has fast paths of its own (fastpath.h: sf_malloc_l2,
 * sf_free_l2) so that its checks cost a few instructions, not a trip through
 * the generic paths; the heap profile once armed counts bytes on each
 * malloc (its countdown, fastpath.h), and the sampled guard counts on the
 * same countdown (profile.c, "one countdown, two points").  Every
 * entry point's malloc (fastpath.h, sf_malloc) and the exported free are
 * levels 0-1's fast paths themselves, with their bounds read from
 * sf_entry_bounds (internal.h): a mode that changes malloc (level 2, the
 * sampled guard, the armed profile) zeroes malloc's bounds here, one that
 * changes free (levels 2 and 3) free's, and what the entry meets past them runs
 * that mode's paths: level 2's and the profile's counted malloc inlined
 * there (fastpath.h, sf_malloc and sf_free_entry_tail), the rest in the
 * slow paths below.  They were an indirect jump through a
 * pointer to the chosen pair: a jump that never missed and still cost
 * levels 0-1 a fifth of their throughput on random sizes (docs/design.md,
 * "The exported entry points").  Before
 * initialisation the bounds are levels 0-1's, whose first call falls
 * through to the generic path and initialises.  The other entry points
 * that free (operator delete, realloc, ...) run levels 0-1's inline free
 * at every level: at level 2 it finds no page that takes it and goes
 * generic, which applies level 2's checks. */
#include "fastpath.h"

/* The sampled guard's count of the thread's own bytes (guard_sample.c):
 * at levels 0-2 the guard's point is on the heap's countdown (profile.c,
 * "one countdown, two points"), but allocations that meet no countdown
 * that knows the request's size count here: every one at level 3 (whose
 * allocations meet the heap's on the class paths only), those of threads
 * without a heap of their own and those made in a phase (alloc.c, both
 * served by class paths). */
static __thread int64_t sample_left __attribute__((tls_model("initial-exec")));
/* (the subtraction unsigned, read back signed: the same two instructions
 * without signed overflow; a request above 2^63 that lifts the count
 * instead fails with ENOMEM anyway, and only that thread's samples wait) */
static bool sample_due(size_t n) {
    int64_t left = (int64_t)((uint64_t)sample_left - n);
    sample_left = left;
    return left < 0;
}
void *sf_gsample_thread_tick(size_t n) {
    return SF_UNLIKELY(sample_due(n)) ? sf_gsample_thread_due(n, &sample_left) : NULL;
}
static void *malloc_level3_sampled(size_t n) {
    void *p = sf_gsample_thread_tick(n);
    return p != NULL ? p : sf_malloc_counted(n);
}

sf_entry_bounds_t sf_entry_bounds = {.small_end = SF_DIRECT_MAX + 1, .medium_span = SF_MEDIUM_MAX - SF_DIRECT_MAX, .chunk_end = SF_SEGMAP_CHUNKS};

/* Where every entry's malloc (fastpath.h, sf_malloc; operator new's pop)
 * goes past its bounds when neither inlined path (level 2's, the counted
 * one of the armed profile and the sampled guard) takes it: every request
 * at level 3 with the sampled guard on, a dry free list or a large size at
 * levels 0-1 (three questions more before
 * sf_malloc_generic, which copes with a caller that read the bounds while
 * sf_entry_choose changed them).  Direct calls: no indirect jump. */
SF_HOT void *sf_malloc_entry_slow(size_t n, sf_heap_t *heap) {
    if (sf_l2_fast) return sf_malloc_l2(n);
    if (sf_gsample_on && sf_guard_level >= 3) return malloc_level3_sampled(n);
    if (sf_prof_is_armed() || sf_gsample_on) return sf_malloc_counted(n);
    /* level 3: its own checked path at once (through sf_malloc_generic,
     * sf_malloc_slow and malloc_slow_guarded, which have nothing for it,
     * 49 instructions a malloc more); not in a phase or under valgrind's
     * tracking, which the generic path counts */
    if (sf_guard_level >= 3 && !sf_mode()) return sf_guarded_malloc(n, 16);
    return sf_malloc_generic(n, heap);
}

/* Where the exported free goes past its bound when the inlined path did
 * not take it: pointers above the segment map's reach (never sefer's), a
 * thread that read the new bound but the old flag while sf_entry_choose
 * ran at start-up, and every free at level 3, whose pages no fast or
 * generic push takes: the checked path at once (through the inlined push
 * and the generic path's questions, 54 instructions a free more). */
SF_HOT void sf_free_entry_slow(void *p) {
    if (sf_l2_fast) sf_free_l2(p);
    else if (sf_guard_level >= 3) sf_free_checked(p);
    else sf_free_generic(p);
}

/* At start-up, and again when the heap profile is armed at run time:
 * from then on every entry's malloc takes the counted path.  A thread that
 * read the old bounds a moment before allocates once more uncounted,
 * which moves a sample point by a block, nothing else.  (At level 2, a
 * thread that read the old bounds takes levels 0-1's path once: its
 * malloc finds no page there, its pages being guarded, and goes to
 * sf_malloc_entry_slow, then level 2's path; its free finds no page that
 * takes a fast free and goes generic, which applies level 2's checks.) */
void sf_entry_choose(void) {
    bool malloc_other = sf_l2_fast || sf_gsample_on || sf_prof_is_armed();
    bool free_other = sf_l2_fast || sf_guard_level >= 3;
    /* (the sampled guard counts on the profile's countdown, but at level 3:
     * sf_malloc_entry_slow) */
    bool counted = sf_gsample_on ? sf_guard_level < 3 : sf_prof_is_armed();
    uint8_t mode = sf_l2_fast ? SF_ENTRY_L2 : counted ? SF_ENTRY_COUNTED : SF_ENTRY_PLAIN;
    __atomic_store_n(&sf_entry_bounds.malloc_mode, mode, __ATOMIC_RELAXED);
    __atomic_store_n(&sf_entry_bounds.free_l2, sf_l2_fast, __ATOMIC_RELAXED);
    if (malloc_other) {
        __atomic_store_n(&sf_entry_bounds.small_end, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sf_entry_bounds.medium_span, 0, __ATOMIC_RELAXED);
    }
    if (free_other) __atomic_store_n(&sf_entry_bounds.chunk_end, 0, __ATOMIC_RELAXED);
}
