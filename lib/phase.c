/* phase.c - phase measurements (sefer_phase_begin / sefer_phase_end).
 *
 * A phase is a stretch of a program's run (a preparation, a request batch,
 * a scoring pass) whose memory a harness wants: bytes in allocated blocks
 * and committed bytes at its entry, peak and exit, and the allocations,
 * frees, reallocs and bytes allocated during it, process-wide.  Phases nest:
 * they form one process-wide stack, begin pushes and end pops the innermost.
 *
 * Outside a phase nothing here runs and the fast paths are what they always
 * are.  A phase turns the fast paths off instead of adding a test to them:
 * every heap's direct tables point at the empty page and every page's
 * fast-path owner word is cleared, so every malloc and free, whatever its
 * entry point (malloc, calloc, realloc, the aligned forms, operator new, the
 * level 2 paths), goes through the generic paths, which count.  The owners
 * keep it so while phases are on (sf_page_update_direct and
 * sf_page_set_fast_owner consult sf_phase_depth, after a fence that pairs
 * with the one in fast_paths_off: either the owner sees the phase, or the
 * phase's sweep sees the owner's write), and put their fast paths back by
 * themselves once the last phase ended (the generic paths restore a direct
 * entry or an owner word they find cleared).  The cost inside a phase is
 * that of the generic paths (docs/api.md has the figure).
 *
 * The peak is the peak of the process-wide sum, without a shared atomic on
 * every operation: each heap keeps its own running delta of block bytes and
 * adds it to the shared figure once it has moved by SF_PHASE_FOLD bytes
 * either way; the shared figure is then compared with every open phase's
 * peak.  At any moment the shared figure differs from the true sum by the
 * deltas not yet added, each below SF_PHASE_FOLD, so a phase's peak is
 * within (heaps that allocated in it) x SF_PHASE_FOLD of the true peak of
 * the sum; the phase reports that bound.  Entry and exit are exact: they
 * are read by walking the pages (sf_stats_collect), as /stats does.
 *
 * The counting (sf_phase_count, sf_phase_committed) is phase_count.c, the
 * one part the allocation paths call; this file opens and ends phases. */
#include "internal.h"

#include <stdio.h>

static pthread_mutex_t phase_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork(): a thread in sefer_phase_begin or _end holds phase_lock while it
 * waits for the allocator's locks, which fork()'s prepare handler holds
 * (lib/init.c); the introspection server's thread holds it for /phases.
 * So it is held across the fork too, or a child could find it held by a
 * thread that is not there.  These handlers are installed at its first
 * use, after sefer's own: prepare handlers run last-installed first, so
 * phase_lock is taken before the allocator's locks, in the order its
 * holders take them. */
static void phase_fork_prepare(void) { sf_lock(&phase_lock); }
static void phase_fork_release(void) { sf_unlock(&phase_lock); }
static void phase_fork_install(void) { pthread_atfork(phase_fork_prepare, phase_fork_release, phase_fork_release); }
static pthread_once_t phase_fork_once = PTHREAD_ONCE_INIT;

static void phase_lock_take(void) {
    pthread_once(&phase_fork_once, phase_fork_install);
    sf_lock(&phase_lock);
}

/* The last phases that ended, for /phases (SF_PHASES_KEPT, oldest dropped). */
static struct sefer_phase ended[SF_PHASES_KEPT];
static uint64_t ended_count;

/* The counts so far, summed over every heap (relaxed reads: a few
 * operations of other threads may be on either side). */
static void sum_counts(uint64_t out[4]) {
    for (int k = 0; k < 4; k++) out[k] = atomic_load_explicit(&sf_phase_orphan_counts[k], memory_order_relaxed);
    uint32_t slots = sf_heap_slots();
    for (uint32_t i = 0; i < slots; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || __atomic_load_n(&heap->kind, __ATOMIC_ACQUIRE) != SF_HEAP_REAL) continue;
        for (int k = 0; k < 4; k++) out[k] += SF_GET(heap->phase_counts[k]);
    }
}

/* ---- fast paths off and on ------------------------------------------------ */

/* Every heap's direct tables to the empty page, every page's owner word
 * cleared.  Runs with sf_phase_depth already raised (see the top). */
static void fast_paths_off(void) {
    atomic_thread_fence(memory_order_seq_cst);
    uint32_t slots = sf_heap_slots();
    for (uint32_t i = 0; i < slots; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || __atomic_load_n(&heap->kind, __ATOMIC_ACQUIRE) != SF_HEAP_REAL) continue;
        sf_heap_tables_empty(heap);
    }
    sf_lock(&sf_fallback_lock);
    sf_heap_tables_empty(&sf_heap_fallback);
    sf_unlock(&sf_fallback_lock);
    sf_lock(&sf_seg_lock);
    /* Every bound first, then every constant: the level 0-1 free fast
     * path's test, off * constant < bound, fails every offset once the
     * bound is 0, but passes every offset while the constant is 0 and the
     * bound is not, so the constants wait for all the bounds.  An owner
     * carving meanwhile writes its page's bound and then, after a fence,
     * asks whether a phase is on (page.c, carved_bound_follows), as
     * sf_page_set_fast_owner does. */
    for (sf_segment_t *seg = sf_all_segments; seg != NULL; seg = seg->all_next)
        for (unsigned p = 0, n = SF_GET(seg->pages_ready); p < n; p++) { /* (the rest: 0 and NULL) */
            SF_SET(seg->pages[p].fast_carved, 0);
            SF_SET(seg->pages[p].fast_heap, NULL);
        }
    atomic_thread_fence(memory_order_seq_cst);
    for (sf_segment_t *seg = sf_all_segments; seg != NULL; seg = seg->all_next)
        for (unsigned p = 0, n = SF_GET(seg->pages_ready); p < n; p++) SF_SET(seg->pages[p].fast_divmagic, 0);
    sf_unlock(&sf_seg_lock);
}

/* ---- /phases --------------------------------------------------------------- */

void sf_phase_snapshot(sf_phase_snap_t *out) {
    phase_lock_take();
    size_t k = ended_count < SF_PHASES_KEPT ? (size_t)ended_count : SF_PHASES_KEPT;
    for (size_t i = 0; i < k; i++) out->done[i] = ended[(ended_count - k + i) % SF_PHASES_KEPT];
    out->ndone = k;
    out->done_total = ended_count;
    int depth = atomic_load(&sf_phase_depth);
    for (int i = 0; i < depth; i++) {
        sf_phase_open_t *o = &out->open[i];
        memcpy(o->name, sf_phase_open[i].name, sizeof o->name);
        o->running_ns = sf_now_ns() - sf_phase_open[i].start_ns;
        o->start_ms = sf_phase_open[i].start_ms;
        o->block_bytes_entry = sf_phase_open[i].bytes_entry;
        int64_t peak = atomic_load(&sf_phase_open[i].bytes_peak);
        o->block_bytes_peak = peak > 0 ? (uint64_t)peak : 0;
    }
    out->nopen = (size_t)depth;
    sf_unlock(&phase_lock);
}

static void phase_record(const struct sefer_phase *r) {
    ended[ended_count % SF_PHASES_KEPT] = *r;
    ended_count++;
}

/* ---- the API ------------------------------------------------------------- */

SEFER_EXPORT int sefer_phase_begin(const char *name) {
    sf_ensure_init();
    phase_lock_take();
    int depth = atomic_load(&sf_phase_depth);
    if (depth >= SF_PHASES_OPEN_MAX) {
        sf_unlock(&phase_lock);
        errno = EBUSY;
        return -1;
    }
    if (depth == 0) {
        atomic_store(&sf_phase_depth, 1);
        __atomic_fetch_or(&sf_generic_mode, SF_MODE_PHASE, __ATOMIC_SEQ_CST);
        fast_paths_off();
    } else {
        atomic_store(&sf_phase_depth, depth + 1);
    }
    /* entry: exact (every heap's fast path is off: nothing moves unseen);
     * the shared sum restarts from it, the deltas kept so far folded */
    struct sefer_stats st;
    sf_stats_collect(&st);
    struct sf_open_phase *ph = &sf_phase_open[depth];
    memset(ph->name, 0, sizeof ph->name);
    if (name != NULL) snprintf(ph->name, sizeof ph->name, "%s", name);
    ph->start_ns = sf_now_ns();
    ph->start_ms = sf_clock_ms();
    ph->bytes_entry = st.bytes_in_blocks;
    ph->committed_entry = st.bytes_committed;
    if (depth == 0) {
        atomic_store(&sf_phase_shared_bytes, (int64_t)st.bytes_in_blocks);
        atomic_store(&sf_phase_counting, 0);
        atomic_fetch_add(&sf_phase_epoch, 1);
    }
    atomic_store(&ph->bytes_peak, (int64_t)st.bytes_in_blocks);
    atomic_store(&ph->committed_peak, st.bytes_committed);
    uint64_t c[4];
    sum_counts(c);
    ph->allocs0 = c[SF_PHASE_ALLOC];
    ph->frees0 = c[SF_PHASE_FREE];
    ph->reallocs0 = c[SF_PHASE_REALLOC];
    ph->allocated0 = c[SF_PHASE_ALLOCATED];
    atomic_store_explicit(&sf_phase_open_count, depth + 1, memory_order_release);
    sf_unlock(&phase_lock);
    sf_event_phase(true, ph->name, st.bytes_in_blocks, st.bytes_committed, (uint64_t)depth + 1);
    return 0;
}

SEFER_EXPORT int sefer_phase_end(struct sefer_phase *out) {
    sf_ensure_init();
    phase_lock_take();
    int depth = atomic_load(&sf_phase_depth);
    if (depth == 0) {
        sf_unlock(&phase_lock);
        errno = ENOENT;
        return -1;
    }
    struct sf_open_phase *ph = &sf_phase_open[depth - 1];
    struct sefer_stats st;
    sf_stats_collect(&st);
    uint64_t c[4];
    sum_counts(c);
    struct sefer_phase r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.version = SEFER_PHASE_VERSION;
    memcpy(r.name, ph->name, sizeof r.name);
    r.depth = (uint32_t)depth;
    r.duration_ns = sf_now_ns() - ph->start_ns;
    r.start_ms = ph->start_ms;
    r.end_ms = sf_clock_ms();
    r.block_bytes_entry = ph->bytes_entry;
    r.block_bytes_exit = st.bytes_in_blocks;
    int64_t peak = atomic_load(&ph->bytes_peak);
    /* the peak is never below entry or exit, which are exact */
    r.block_bytes_peak = (uint64_t)(peak > 0 ? peak : 0);
    if (r.block_bytes_peak < r.block_bytes_entry) r.block_bytes_peak = r.block_bytes_entry;
    if (r.block_bytes_peak < r.block_bytes_exit) r.block_bytes_peak = r.block_bytes_exit;
    /* every heap that counted may hold a delta below a fold (+1: the
     * threads without a heap fold at once, but one may be mid-way) */
    r.block_bytes_peak_error = (atomic_load(&sf_phase_counting) + 1) * SF_PHASE_FOLD;
    r.committed_entry = ph->committed_entry;
    r.committed_exit = st.bytes_committed;
    r.committed_peak = atomic_load(&ph->committed_peak);
    if (r.committed_peak < r.committed_exit) r.committed_peak = r.committed_exit;
    r.allocs = c[SF_PHASE_ALLOC] - ph->allocs0;
    r.frees = c[SF_PHASE_FREE] - ph->frees0;
    r.reallocs = c[SF_PHASE_REALLOC] - ph->reallocs0;
    r.bytes_allocated = c[SF_PHASE_ALLOCATED] - ph->allocated0;
    atomic_store_explicit(&sf_phase_open_count, depth - 1, memory_order_release);
    atomic_store(&sf_phase_depth, depth - 1); /* at 0: the owners put their fast paths back */
    if (depth == 1) __atomic_fetch_and(&sf_generic_mode, (uint8_t)~SF_MODE_PHASE, __ATOMIC_SEQ_CST);
    phase_record(&r);
    sf_unlock(&phase_lock);
    sf_event_phase(false, r.name, r.block_bytes_entry, r.block_bytes_peak, r.block_bytes_exit);
    if (out != NULL) {
        /* size 0: a caller of this version that left it unset.  Below 4
         * bytes nothing is written: those bytes are the size field's own,
         * and r's would tell the caller that all of r was written (1 byte
         * of it read back as 192) */
        size_t n = out->size && out->size < sizeof r ? out->size : sizeof r;
        if (n >= sizeof out->size) {
            memcpy(out, &r, n);
            out->size = (uint32_t)n;
        }
    }
    return 0;
}
