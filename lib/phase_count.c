/* phase_count.c - what the generic paths count while phases are open
 * (phase.c has the design; docs/api.md, "Phases").
 *
 * alloc.c, free.c and segment.c call in here on every operation of a
 * phase; phase.c, which opens and ends phases, resets this state when the
 * first phase begins and reads it when one ends.  The state is defined
 * here, with the counting, so that the allocation paths depend on nothing
 * but this file. */
#include "internal.h"

_Atomic int64_t sf_phase_shared_bytes;
_Atomic uint32_t sf_phase_epoch;
_Atomic uint64_t sf_phase_counting;
struct sf_open_phase sf_phase_open[SF_PHASES_OPEN_MAX];
_Atomic int sf_phase_open_count;
_Atomic uint64_t sf_phase_orphan_counts[4];

static void raise_to(_Atomic int64_t *peak, int64_t v) {
    int64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(peak, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

static void raise_to_u(_Atomic uint64_t *peak, uint64_t v) {
    uint64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(peak, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* Adds a delta to the shared sum and to every open phase's peak. */
static void fold(int64_t delta) {
    int64_t v = atomic_fetch_add_explicit(&sf_phase_shared_bytes, delta, memory_order_relaxed) + delta;
    int n = atomic_load_explicit(&sf_phase_open_count, memory_order_acquire);
    for (int i = 0; i < n; i++) raise_to(&sf_phase_open[i].bytes_peak, v);
}

static SF_NOINLINE void count_orphan(enum sf_phase_what what, int64_t bytes) {
    atomic_fetch_add_explicit(&sf_phase_orphan_counts[what], 1, memory_order_relaxed);
    if (what == SF_PHASE_ALLOC)
        atomic_fetch_add_explicit(&sf_phase_orphan_counts[SF_PHASE_ALLOCATED], (uint64_t)bytes, memory_order_relaxed);
    if (bytes != 0) fold(bytes);
}

/* The first count of a heap since phases began: its delta starts at zero. */
static SF_NOINLINE void join_epoch(sf_heap_t *heap, uint32_t e) {
    heap->phase_epoch = e;
    heap->phase_delta = 0;
    atomic_fetch_add_explicit(&sf_phase_counting, 1, memory_order_relaxed);
}

void sf_phase_count(enum sf_phase_what what, int64_t bytes) {
    sf_heap_t *heap = sf_tls_heap;
    if (SF_UNLIKELY(heap->kind != SF_HEAP_REAL)) return count_orphan(what, bytes); /* markers: no heap */
    SF_SET(heap->phase_counts[what], heap->phase_counts[what] + 1);
    if (what == SF_PHASE_ALLOC)
        SF_SET(heap->phase_counts[SF_PHASE_ALLOCATED], heap->phase_counts[SF_PHASE_ALLOCATED] + (uint64_t)bytes);
    uint32_t e = atomic_load_explicit(&sf_phase_epoch, memory_order_relaxed);
    if (SF_UNLIKELY(heap->phase_epoch != e)) join_epoch(heap, e);
    int64_t d = heap->phase_delta + bytes;
    if (SF_UNLIKELY(d >= SF_PHASE_FOLD || d <= -SF_PHASE_FOLD)) {
        fold(d);
        d = 0;
    }
    heap->phase_delta = d;
}

void sf_phase_committed(uint64_t committed) {
    int n = atomic_load_explicit(&sf_phase_open_count, memory_order_acquire);
    for (int i = 0; i < n; i++) raise_to_u(&sf_phase_open[i].committed_peak, committed);
}

