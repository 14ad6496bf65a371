/* stats.c - statistics: the process-wide atomics (sf_gstats, globals.c;
 * slow paths only) plus the per-heap plain counters, summed on demand. */
#include "profile.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void add_heap(struct sefer_stats *out, sf_heap_t *heap) {
    out->allocs += sf_heap_allocs(heap);
    out->remote_frees += SF_GET(heap->remote_frees);
    out->remote_list_frees += SF_GET(heap->remote_collected);
    out->remote_batch_frees += SF_GET(heap->remote_batched);
    if (heap->ring.cells) {
        out->ring_pushes += LOAD(heap->ring.tail);
        out->ring_overflows += LOAD(heap->ring.overflowed);
    }
}

/* Blocks handed out and their bytes, read page by page from the live
 * segments (blocks waiting in a ring or a batch still count: their owner
 * has not taken them back); and the bytes of blocks other threads freed that wait on
 * their pages' remote lists (free, but their pages cannot go back). */
static void live_blocks(uint64_t *blocks, uint64_t *bytes, uint64_t *pending_bytes) {
    *blocks = *bytes = *pending_bytes = 0;
    sf_lock(&sf_seg_lock);
    for (sf_segment_t *seg = sf_all_segments; seg != NULL; seg = seg->all_next) {
        for (unsigned i = 0; i < seg->page_count; i++) {
            sf_page_t *page = &seg->pages[i];
            if (SF_GET(page->flags) & SF_PAGE_SPAN) {
                *blocks += 1;
                *bytes += SF_GET(page->span_bytes);
            } else if (SF_GET(page->in_use)) {
                uint32_t pending;
                uint64_t used = sf_page_blocks_out(page, &pending), size = SF_GET(page->block_size);
                *blocks += used;
                *bytes += used * size;
                *pending_bytes += pending * size;
            }
        }
    }
    sf_unlock(&sf_seg_lock);
}

void sf_stats_collect(struct sefer_stats *out) {
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    out->version = SEFER_STATS_VERSION;
    uint32_t slots = sf_heap_slots();
    /* blocks on the heaps' class lists are free, though their pages count
     * them out (page.c, "Class lists"), and so are the blocks levels 2-3
     * hold in their quarantines (guarded.c): taken off the pages' figures
     * below */
    uint64_t held_blocks = 0, held_bytes = 0;
    for (uint32_t i = 0; i < slots; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || __atomic_load_n(&heap->kind, __ATOMIC_ACQUIRE) != SF_HEAP_REAL) continue;
        int st = atomic_load_explicit(&heap->state, memory_order_relaxed);
        add_heap(out, heap);
        uint64_t blocks, bytes;
        sf_cl_count(heap, &blocks, &bytes);
        held_blocks += blocks + SF_GET(heap->quarantine_count);
        held_bytes += bytes + SF_GET(heap->quarantine_bytes);
        out->heaps_live += st == SF_HEAP_LIVE;
        out->heaps_abandoned += st == SF_HEAP_ABANDONED || st == SF_HEAP_COLLECTING;
    }
    add_heap(out, &sf_heap_fallback);
    held_blocks += SF_GET(sf_heap_fallback.quarantine_count);
    held_bytes += SF_GET(sf_heap_fallback.quarantine_bytes);
    out->heap_slots = slots;
    out->allocs += LOAD(sf_gstats.shared_allocs);
    out->remote_frees += LOAD(sf_gstats.shared_remote_frees);
    /* frees are not counted on the fast path: every block handed out is
     * either live or was freed (and taken back by its owner) */
    uint64_t live = 0;
    live_blocks(&live, &out->bytes_in_blocks, &out->bytes_remote_pending);
    live = live > held_blocks ? live - held_blocks : 0;
    out->bytes_in_blocks = out->bytes_in_blocks > held_bytes ? out->bytes_in_blocks - held_bytes : 0;
    out->frees = out->allocs > live ? out->allocs - live : 0;
    out->bytes_committed = LOAD(sf_gstats.committed);
    out->bytes_reserved = LOAD(sf_gstats.reserved);
    out->bytes_metadata = LOAD(sf_gstats.metadata); /* heap chunks and rings included */
    out->bytes_decommitted_total = LOAD(sf_gstats.decommitted_total);
    out->segments = LOAD(sf_gstats.segments);
    out->segments_peak = LOAD(sf_gstats.segments_peak);
    /* the peak is raised just after the count: never show it below the count */
    if (out->segments_peak < out->segments) out->segments_peak = out->segments;
    out->large_cache_bytes = LOAD(sf_gstats.cache_bytes);
    out->large_cache_spans = LOAD(sf_gstats.cache_spans);
    out->large_cache_hits = LOAD(sf_gstats.cache_hits);
    out->large_cache_misses = LOAD(sf_gstats.cache_misses);
    out->os_maps = LOAD(sf_gstats.os_maps);
    out->enomem = LOAD(sf_gstats.enomem);
    out->fallback_allocs = LOAD(sf_gstats.fallback_allocs);
    out->heap_fallbacks = LOAD(sf_gstats.heap_fallbacks);
    out->bytes_shed_on_growth = LOAD(sf_gstats.growth_shed);
    out->bytes_exited_waiting = LOAD(sf_gstats.exited_waiting);
    out->bytes_waiting = LOAD(sf_gstats.heaps_waiting);
    out->cache_max_purges = LOAD(sf_gstats.cache_max_purges);
    out->bytes_cache_max_purged = LOAD(sf_gstats.cache_max_purged);
    out->memory_limit = sf_memlimit_bytes();
    out->memory_headroom = out->memory_limit > out->bytes_committed ? out->memory_limit - out->bytes_committed : 0;
    out->memory_limit_purges = LOAD(sf_gstats.memlimit_purges);
    out->memory_limit_refusals = LOAD(sf_gstats.memlimit_refusals);
    out->guard_invalid_free = LOAD(sf_gstats.guard[SF_GUARD_INVALID]) + LOAD(sf_gstats.guard[SF_GUARD_MISMATCH]);
    out->guard_interior_free = LOAD(sf_gstats.guard[SF_GUARD_INTERIOR]);
    out->guard_double_free = LOAD(sf_gstats.guard[SF_GUARD_DOUBLE]);
    out->guard_overflow = LOAD(sf_gstats.guard[SF_GUARD_OVERFLOW]) + LOAD(sf_gstats.guard[SF_GUARD_BOUNDS]);
    out->guard_use_after_free = LOAD(sf_gstats.guard[SF_GUARD_USE_AFTER_FREE]);
    sf_prof_totals_t prof;
    sf_prof_totals(&prof);
    out->profile_samples = prof.samples;
    out->profile_dropped = prof.dropped;
    out->profile_live_samples = prof.live_samples;
    out->profile_bytes = prof.bytes;
    out->profile_unwind_fallbacks = prof.unwind_fallbacks;
    out->profile_unwind_disagreements = prof.unwind_disagreements;
    out->profile_sample_bytes_now = prof.rate_now; /* (0 off) */
    sf_gsample_counts(&out->guard_samples, &out->guard_samples_live);
}

SEFER_EXPORT int sefer_stats_get(struct sefer_stats *out, size_t size) {
    if (out == NULL || size < 2 * sizeof(uint32_t)) {
        errno = EINVAL;
        return -1;
    }
    sf_ensure_init();
    struct sefer_stats full;
    sf_stats_collect(&full);
    if (size > sizeof full) size = sizeof full;
    full.size = (uint32_t)size;
    memcpy(out, &full, size);
    return 0;
}

/* malloc_stats(): one line per statistic on stderr, without allocating. */
void sf_print_stats(void) {
    struct sefer_stats st;
    sf_ensure_init();
    sf_stats_collect(&st);
    sf_write_stderr("sefer " SEFER_VERSION_STRING " statistics\n");
#define SF_PRINT_STAT_(name, doc)                 \
    {                                             \
        char line[96];                            \
        sf_str_t out;                             \
        sf_str_init(&out, line, sizeof line);     \
        sf_str_add(&out, "  " #name " ");         \
        sf_str_addu(&out, st.name);               \
        sf_str_add(&out, "\n");                   \
        sf_write_stderr(line);                    \
    }
    SEFER_STATS_FIELDS(SF_PRINT_STAT_)
#undef SF_PRINT_STAT_
}
