/* cache.c - the large cache: freed spans kept for reuse.
 *
 * Holds both freed large spans and empty small/medium segments (a one-segment
 * span), so a program that frees and reallocates big buffers, or whose pages
 * come and go, swaps pointers instead of calling mmap and faulting pages in.
 *
 * A request takes the smallest cached span that holds it (segment.c asks
 * first for one whose pages it needs may all be resident: span_take).  A
 * bigger one is split at a segment boundary: the front is handed out and
 * the rest stays cached, with its resident pages, for the next request
 * (dropping the unused tail instead, as this cache once did, made a loop
 * over buffers of varying sizes fault the same pages in again and again).
 * A span put back merges with a cached span it touches, so the pieces of
 * a split come together again once both are free.
 * Process-wide budget: large_cache.slots entries and large_cache.max_bytes
 * bytes; entries older than large_cache.ttl are unmapped on the next cache
 * operation or trim.  With decommit.policy = eager a span is decommitted as
 * it enters; with delayed, after decommit.delay; with never, it stays
 * resident until it is evicted.
 *
 * A large block's span just freed is not handed out again at once (guard
 * level >= 1): it stays apart ("cooling", not merged) until the next span is
 * put back, and takes skip it, so a free followed by a malloc of the same
 * size gets a different block (a loop of them alternates two spans).  At
 * level 1 it is also shut while it cools: no-access past its header page
 * (and past its hole), within guard.protect_rate, so a write or read
 * through a dangling pointer faults, as one into a block glibc unmapped
 * at free does; it opens again as the next span takes its place (two
 * mprotect calls a freed block, 19 us for 256 KiB and 48 us for 1 MiB of
 * resident pages on this project's machines, hence the rate; the pages
 * stay, and no fault follows).  At
 * guard level >= 2 spans carry guard pages (segment.c): a page at 60 KiB,
 * the same in every span, and one after the block, whose offset the entry
 * keeps (`guard`) so that a span reused for a block of the same size needs
 * no mprotect; spans are then neither split nor merged (a guard page would
 * end up inside a block).  At levels 0-1 a large block's span may be
 * no-access past its block and in its second page, below the block
 * (segment.c, "The unused part of a segment"): the entry keeps how much of
 * it is open and whether it has that hole, for the same reason, and what
 * lies past the open part was never written since it was closed, so it
 * holds no page.  A split shares the open part out and leaves the hole
 * with the front; a span joins the one below it only once that one is open
 * to its end, and its own hole is open.
 *
 * Cached spans stay counted in stats.segments (they are mapped), but their
 * segmap entries are clear: a free of a pointer into one is foreign. */
#include "internal.h"

#define CACHE_SLOTS_MAX 64

struct cache_entry {
    uint8_t *base;
    size_t size;
    uint64_t since_ms;
    size_t committed; /* from its start, an upper bound of what may be
                         resident (what lies past it reads as zero) */
    size_t counted;   /* of it, counted in stats.bytes_committed: what was
                         committed when its pieces came in, less what was
                         decommitted since (at most `committed`; a join
                         counts no hole, as `committed` must) */
    sf_span_access_t access; /* (its open part at least `committed`) */
    bool cooling;     /* the span freed last: not handed out, not merged */
    bool shut;        /* cooling, and no-access from shut_from(): level 1 */
    bool pages;       /* some of it was a released segment (small or medium
                         pages), not a large block's span */
};

pthread_mutex_t sf_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_entry entries[CACHE_SLOTS_MAX];
static size_t entry_count;
static sf_reuse_t reuse; /* bytes handed out lately (decommit.c) */
static uint64_t out_bytes; /* spans and segments handed out (hit or miss) and not put back */

/* Spans carry guard pages (guard level >= 2): neither split nor merged. */
static bool guarded_spans(void) { return sf_guard_level >= 2; }

/* Where a shut span's no-access part begins: past its header page and its
 * hole (which stays closed); it ends where its open part does. */
static size_t shut_from(sf_span_access_t access) { return (access.hole ? 2 : 1) * SF_OS_PAGE; }

/* Shuts the span of a large block freed just now (level 1: see the top of
 * the file) if guard.protect_rate allows; true if it is shut. */
static bool shut_freed(uint8_t *base, sf_span_access_t access) {
    size_t from = shut_from(access);
    if (access.open <= from || !sf_protect_budget_take(access.open - from)) return false;
    return sf_os_protect(base + from, access.open - from, false);
}

/* Opens a shut entry again; false if the kernel refused (it cannot be
 * used: the caller unmaps it).  (sf_os_protect remaps the range fresh if
 * mprotect fails: it then reads as zero, which its `committed` allows.) */
static bool entry_reopen(struct cache_entry *e) {
    if (!e->shut) return true;
    size_t from = shut_from(e->access);
    if (!sf_os_protect(e->base + from, e->access.open - from, true)) return false;
    e->shut = false;
    return true;
}

static void entry_remove(size_t i) {
    sf_stat_sub(&sf_gstats.cache_bytes, entries[i].size);
    sf_stat_sub(&sf_gstats.cache_spans, 1);
    entries[i] = entries[--entry_count];
}

static size_t entry_unmap(size_t i) {
    struct cache_entry e = entries[i];
    entry_remove(i);
    sf_os_unmap(e.base, e.size);
    sf_stat_sub(&sf_gstats.committed, e.counted);
    sf_stat_sub(&sf_gstats.reserved, e.size);
    sf_stat_add(&sf_gstats.decommitted_total, e.counted);
    sf_release_segments(e.size >> SF_SEG_SHIFT);
    return e.size;
}

/* Decommits the last `bytes` (at most) of entry i's committed prefix, so
 * what stays committed is still a prefix; returns the counted bytes given
 * back. */
static size_t entry_decommit_tail(size_t i, size_t bytes) {
    struct cache_entry *e = &entries[i];
    size_t keep = e->committed > bytes ? sf_align_up(e->committed - bytes, SF_OS_PAGE) : 0;
    if (keep >= e->committed) return 0;
    size_t n = e->committed - keep;
    uint8_t *at = e->base + keep;
    size_t len = keep == 0 ? e->size : n;
    /* (never cleared by hand where part of it is no-access: guard pages,
     * the hole, the closed tail) */
    bool sealed = guarded_spans() || e->access.hole || e->access.open < e->size || e->shut;
    if (!sealed) sf_os_decommit(at, len);
    else if (!sf_os_decommit_try(at, len)) return 0;
    e->committed = keep;
    size_t drop = e->counted > keep ? e->counted - keep : 0;
    e->counted -= drop;
    sf_stat_sub(&sf_gstats.committed, drop);
    sf_stat_add(&sf_gstats.decommitted_total, drop);
    return drop;
}

static size_t entry_decommit(size_t i) { return entry_decommit_tail(i, SIZE_MAX); }

/* The oldest entry still committed and cached for at least `delay`, or
 * SIZE_MAX; with pages_only, of the entries holding released segments'
 * memory (never a large block's span, so never the one freed last, which
 * a loop of large blocks takes next). */
static size_t oldest_committed(uint64_t now, uint64_t delay, bool pages_only) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < entry_count; i++)
        if (entries[i].counted != 0 && now - entries[i].since_ms >= delay && (!pages_only || entries[i].pages) &&
            (best == SIZE_MAX || entries[i].since_ms < entries[best].since_ms))
            best = i;
    return best;
}

/* Applies ttl and the delayed or adaptive decommit: spans cached for
 * decommit.delay are decommitted, oldest first, down to what would bring
 * the cache's hand-outs back to their recent peak (decommit.c; nothing
 * kept unless adaptive), the last one of them maybe in part.  Holds
 * sf_cache_lock. */
static size_t expire_locked(uint64_t now, bool all) {
    size_t freed = 0, resident = 0;
    uint64_t ttl = sf_knob(SF_KNOB_LARGE_CACHE_TTL), policy = sf_knob(SF_KNOB_DECOMMIT_POLICY);
    for (size_t i = entry_count; i-- > 0;)
        if (all || now - entries[i].since_ms >= ttl) freed += entry_unmap(i);
        else resident += entries[i].counted;
    if (policy != SF_DECOMMIT_DELAYED && policy != SF_DECOMMIT_ADAPTIVE) return freed;
    uint64_t keep = sf_reuse_keep(&reuse, now, out_bytes), delay = sf_knob(SF_KNOB_DECOMMIT_DELAY);
    size_t i;
    while (resident > keep && (i = oldest_committed(now, delay, false)) != SIZE_MAX) {
        size_t n = entry_decommit_tail(i, resident - keep);
        if (n == 0) break; /* less than a page over */
        resident -= n;
        freed += n;
    }
    return freed;
}

/* Cuts entry i to its part from `at` bytes on; returns what was in front:
 * the caller's now (its committed share no longer counted by the cache). */
static struct cache_entry entry_split_front(size_t i, size_t at) {
    struct cache_entry *e = &entries[i], front = *e;
    front.size = at;
    front.committed = e->committed < at ? e->committed : at;
    front.counted = e->counted < front.committed ? e->counted : front.committed;
    front.access.guard = 0; /* (no guards where spans are split) */
    front.access.open = e->access.open < at ? e->access.open : at;
    e->access.open -= front.access.open;
    e->access.hole = false; /* (the hole stays with the front) */
    e->base += at;
    e->size -= at;
    e->committed -= front.committed;
    e->counted -= front.counted;
    sf_stat_sub(&sf_gstats.cache_bytes, at);
    sf_stat_sub(&sf_gstats.committed, front.counted);
    return front;
}

/* Takes a cached span of at least min_size bytes: the smallest that holds
 * it, whole if it is at most max_size, else its first min_size bytes (see
 * the top of the file).  *committed_out: how many bytes from its start may
 * still be resident (0: it all reads as zero); *access_out: what of it is
 * no-access (the taker opens what it uses). */
void *sf_cache_take(size_t min_size, size_t max_size, size_t resident_min, size_t *size_out,
                    size_t *committed_out, sf_span_access_t *access_out, bool *pages_out) {
    uint64_t now = sf_now_ms();
    sf_lock(&sf_cache_lock);
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < entry_count; i++) {
        size_t s = entries[i].size;
        if (entries[i].cooling || (guarded_spans() && s > max_size)) continue;
        if (s < min_size || entries[i].committed < resident_min) continue;
        /* The smallest.  Of two the same size, asked for resident memory,
         * the one with the least more than that (a large block's warm span
         * before a released segment, whose pages past the new block would
         * go back: segment.c, sf_span_alloc); asked for any, the one with
         * the most (the fewest faults). */
        if (best == SIZE_MAX || s < entries[best].size) {
            best = i;
        } else if (s == entries[best].size && entries[i].committed != entries[best].committed &&
                   (entries[i].committed < entries[best].committed) == (resident_min != 0)) {
            best = i;
        }
    }
    if (best == SIZE_MAX && resident_min != 0) { /* (the caller asks again) */
        sf_unlock(&sf_cache_lock);
        return NULL;
    }
    out_bytes += min_size; /* hit or miss: that much is in use now */
    sf_reuse_level(&reuse, now, out_bytes);
    void *p = NULL;
    if (best != SIZE_MAX) {
        struct cache_entry e;
        if (entries[best].size > max_size) {
            e = entry_split_front(best, min_size);
        } else {
            e = entries[best];
            entry_remove(best);
            /* the new owner counts what it uses; the span's old pages that
             * are still resident are not "handed out" until it does */
            sf_stat_sub(&sf_gstats.committed, e.counted);
        }
        p = e.base;
        *size_out = e.size;
        *committed_out = e.committed; /* 0: all zero, as mapped or decommitted */
        *access_out = e.access;
        *pages_out = e.pages;
        sf_stat_add(&sf_gstats.cache_hits, 1);
    } else {
        sf_stat_add(&sf_gstats.cache_misses, 1);
    }
    expire_locked(now, false); /* after the take: what it took is not idle */
    sf_unlock(&sf_cache_lock);
    return p;
}

/* The committed figure of two adjacent spans joined (lo, then hi): an upper
 * bound of the resident prefix, so a resident upper part makes the whole
 * lower part count.  (Refusing joins that would count a hole made a loop
 * over large blocks of 5-25 MiB 1.5x slower, its spans no longer merging;
 * a segment cut from such a span asks the kernel which of its pages are
 * resident instead: segment.c, segment_create.) */
static size_t joined_committed(const struct cache_entry *lo, const struct cache_entry *hi) {
    return hi->committed > 0 ? lo->size + hi->committed : lo->committed;
}

/* Makes a span's no-access tail accessible, so that the span above it can
 * join it with one open prefix; false if the kernel refused.  (What it
 * opens holds no page: no fault is added.) */
static bool entry_open_tail(struct cache_entry *e) {
    if (e->access.open >= e->size) return true;
    if (!sf_os_protect(e->base + e->access.open, e->size - e->access.open, true)) return false;
    e->access.open = e->size;
    return true;
}

/* The same for its hole, so that it can join the span below it (where the
 * hole would be inside the whole). */
static bool entry_open_hole(struct cache_entry *e) {
    if (!e->access.hole) return true;
    if (!sf_os_protect(e->base + SF_OS_PAGE, SF_OS_PAGE, true)) return false;
    e->access.hole = false;
    return true;
}

/* Joins the freed span `e` to the cached spans it touches, below and above,
 * if there are any and the budget allows the whole: the neighbours leave
 * their slots and the whole takes one.  False if it touches none.  Holds
 * sf_cache_lock. */
static bool merge_locked(struct cache_entry e) {
    if (guarded_spans()) return false;
    size_t below = SIZE_MAX, above = SIZE_MAX;
    for (size_t i = 0; i < entry_count; i++) {
        if (entries[i].cooling) continue;
        if (entries[i].base + entries[i].size == e.base) below = i;
        if (e.base + e.size == entries[i].base) above = i;
    }
    if (below == SIZE_MAX && above == SIZE_MAX) return false;
    if (atomic_load(&sf_gstats.cache_bytes) + e.size > sf_knob(SF_KNOB_LARGE_CACHE_MAX_BYTES)) return false;
    if (above != SIZE_MAX && (!entry_open_tail(&e) || !entry_open_hole(&entries[above]))) above = SIZE_MAX;
    if (below != SIZE_MAX && (!entry_open_tail(&entries[below]) || !entry_open_hole(&e))) below = SIZE_MAX;
    if (below == SIZE_MAX && above == SIZE_MAX) return false;
    if (above != SIZE_MAX) {
        struct cache_entry hi = entries[above];
        e.counted += hi.counted;
        e.pages |= hi.pages;
        e.committed = joined_committed(&e, &hi);
        e.access.open = e.size + hi.access.open;
        e.size += hi.size;
    }
    if (below != SIZE_MAX) {
        struct cache_entry lo = entries[below];
        e.counted += lo.counted;
        e.pages |= lo.pages;
        e.committed = joined_committed(&lo, &e);
        e.access.open = lo.size + e.access.open;
        e.access.hole = lo.access.hole;
        e.base = lo.base;
        e.size += lo.size;
    }
    /* the higher slot first, so that removing it cannot move the other */
    size_t first = below != SIZE_MAX && (above == SIZE_MAX || below > above) ? below : above;
    size_t second = first == below ? above : below;
    entry_remove(first);
    if (second != SIZE_MAX) entry_remove(second);
    entries[entry_count] = e;
    sf_stat_add(&sf_gstats.cache_bytes, e.size);
    sf_stat_add(&sf_gstats.cache_spans, 1);
    if (sf_knob(SF_KNOB_DECOMMIT_POLICY) == SF_DECOMMIT_EAGER) entry_decommit(entry_count);
    entry_count++;
    return true;
}

/* The span cooling so far becomes an ordinary entry (merged with its
 * neighbours where it touches them).  Holds sf_cache_lock. */
static void uncool_locked(void) {
    for (size_t i = 0; i < entry_count; i++)
        if (entries[i].cooling) {
            if (!entry_reopen(&entries[i])) {
                entry_unmap(i);
                return;
            }
            struct cache_entry e = entries[i];
            e.cooling = false;
            entry_remove(i);
            if (!merge_locked(e)) {
                entries[entry_count++] = e;
                sf_stat_add(&sf_gstats.cache_bytes, e.size);
                sf_stat_add(&sf_gstats.cache_spans, 1);
            }
            return;
        }
}

/* Offers a span (its segmap entries already clear; `counted` of its bytes
 * counted in stats.bytes_committed, all within its first `resident`;
 * `access`: what of it is no-access).
 * `freed_block`: a large block's span freed just now, to cool (see the top
 * of the file).  Returns false if the budget refuses it: the caller unmaps. */
bool sf_cache_put(void *base, size_t size, size_t resident, size_t counted, sf_span_access_t access,
                  bool freed_block) {
    uint64_t slots = sf_knob(SF_KNOB_LARGE_CACHE_SLOTS);
    uint64_t budget = sf_knob(SF_KNOB_LARGE_CACHE_MAX_BYTES);
    if (slots > CACHE_SLOTS_MAX) slots = CACHE_SLOTS_MAX;
    uint64_t now = sf_now_ms();
    bool cool = freed_block && sf_guard_level >= 1;
    /* (before the lock: no one else sees the span yet) */
    bool shut = cool && !guarded_spans() && shut_freed(base, access);
    sf_lock(&sf_cache_lock);
    out_bytes -= size < out_bytes ? size : out_bytes; /* back, cached or not */
    if (size > budget || slots == 0) {
        sf_unlock(&sf_cache_lock);
        return false;
    }
    expire_locked(now, false);
    if (cool) uncool_locked();
    struct cache_entry fresh = {base, size, now, resident, counted, access, cool, shut, !freed_block};
    if (!cool && merge_locked(fresh)) {
        sf_unlock(&sf_cache_lock);
        return true;
    }
    /* make room: evict the oldest entries */
    while (entry_count > 0 &&
           (entry_count >= slots || atomic_load(&sf_gstats.cache_bytes) + size > budget)) {
        size_t oldest = 0;
        for (size_t i = 1; i < entry_count; i++)
            if (entries[i].since_ms < entries[oldest].since_ms) oldest = i;
        entry_unmap(oldest);
    }
    entries[entry_count] = fresh;
    sf_stat_add(&sf_gstats.cache_bytes, size);
    sf_stat_add(&sf_gstats.cache_spans, 1);
    if (sf_knob(SF_KNOB_DECOMMIT_POLICY) == SF_DECOMMIT_EAGER) entry_decommit(entry_count);
    entry_count++;
    sf_unlock(&sf_cache_lock);
    return true;
}

/* Memory not resident is about to be used for `bytes`: cached spans give
 * back up to that much of their resident pages at once, oldest first,
 * whatever their age (segment.c, "Growth"); with pages_only, only the
 * memory of released segments.  Returns the bytes given back. */
size_t sf_cache_shed(size_t bytes, bool pages_only) {
    size_t freed = 0, i;
    if (atomic_load_explicit(&sf_gstats.cache_spans, memory_order_relaxed) == 0) return 0;
    sf_lock(&sf_cache_lock);
    while (freed < bytes && (i = oldest_committed(sf_now_ms(), 0, pages_only)) != SIZE_MAX) {
        size_t n = entry_decommit_tail(i, bytes - freed);
        if (n == 0) break;
        freed += n;
    }
    sf_unlock(&sf_cache_lock);
    return freed;
}

/* Whether p points into a cached span: a free of it is a free of a span
 * already freed (error path only). */
bool sf_cache_holds(const void *p) {
    bool found = false;
    sf_lock(&sf_cache_lock);
    for (size_t i = 0; i < entry_count && !found; i++)
        found = (const uint8_t *)p >= entries[i].base && (const uint8_t *)p < entries[i].base + entries[i].size;
    sf_unlock(&sf_cache_lock);
    return found;
}

/* Unmaps expired entries (all of them if `all`); returns bytes released. */
size_t sf_cache_purge(bool all) {
    sf_lock(&sf_cache_lock);
    size_t freed = expire_locked(sf_now_ms(), all);
    sf_unlock(&sf_cache_lock);
    return freed;
}
