/* guarded_span.c - guard levels 2 and 3: freed large blocks wait before reuse.
 *
 * A freed large or huge block (a span, segment.c) is not released to the
 * large cache at once: it waits in a process-wide FIFO of at most
 * SPAN_QUARANTINE_MAX spans and SPAN_QUARANTINE_BYTES of blocks, so the next
 * malloc of its size gets another span and a dangling pointer does not
 * point into someone else's block.  While it waits the block is made
 * inaccessible and its pages are dropped, in one system call
 * (sf_os_discard_protect): a write or read after free faults, and when the
 * span is reused it reads as zero.  Leaving the quarantine costs one more
 * call (mprotect back).
 *
 * Those two calls, and faulting the dropped pages in again when the span
 * is reused, are what a large malloc/free pair costs at these levels where
 * the quarantine protects: tens of microseconds for 256 KiB on a virtual
 * machine whose page-table changes are slow, milliseconds for a 4 MiB block
 * whose every page is touched, against well under a microsecond for a pair
 * that reuses a cached span.  Since the cost grows with the block, it is
 * rationed by bytes: guard.protect_rate bytes of freed blocks a second at
 * most (a token bucket holding one second's worth; 0: no limit).  A block freed beyond the rate waits accessible (and at level
 * 3 its old pages are zeroed when the span is reused: segment.c), still out
 * of reach of the next malloc; a program freeing fewer large blocks than
 * that a second has every one of them protected.
 *
 * The header page of a span stays accessible (the quarantine reads it);
 * the span is off the segment map while it waits, so a second free of it is
 * found here and reported as a double free (free.c). */
#include "internal.h"

#define SPAN_QUARANTINE_MAX 8
#define SPAN_QUARANTINE_BYTES ((size_t)32 << 20)

struct held {
    sf_segment_t *seg;
    size_t bytes;   /* the block's pages */
    bool protected; /* inaccessible (and its pages dropped) */
};

pthread_mutex_t sf_span_quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static struct held held[SPAN_QUARANTINE_MAX];
static size_t first, count, bytes;
static uint64_t tokens, refilled_ms;
static bool tokens_set;

/* Takes `cost` bytes from the budget if it has them (holds the quarantine's
 * lock, which guards the bucket). */
static bool budget_take(uint64_t cost) {
    uint64_t rate = sf_knob(SF_KNOB_GUARD_PROTECT_RATE), now = sf_now_ms();
    if (rate == 0) return true;
    if (!tokens_set) {
        tokens = rate;
        refilled_ms = now;
        tokens_set = true;
    }
    uint64_t add = (now - refilled_ms) * (rate / 1000);
    if (add > 0) { /* (a fraction of a token waits for the next look) */
        tokens = tokens + add < rate ? tokens + add : rate;
        refilled_ms = now;
    }
    if (tokens > rate) tokens = rate; /* (the knob lowered since) */
    if (tokens < cost) return false;
    tokens -= cost;
    return true;
}

/* The same bucket for guard level 1's freed large block (cache.c, "The
 * span freed last"): one rate for every protection of freed blocks. */
bool sf_protect_budget_take(uint64_t cost) {
    sf_lock(&sf_span_quarantine_lock);
    bool ok = budget_take(cost);
    sf_unlock(&sf_span_quarantine_lock);
    return ok;
}

static uint8_t *block_of(const sf_segment_t *seg) { return seg->pages[0].block_start; }

/* Makes the block of seg inaccessible, its pages dropped; its committed
 * bytes from then on run to the block's start (what lies past its end, the
 * old pages of an earlier and longer use, keeps them counted). */
static bool protect_block(sf_segment_t *seg) {
    uint8_t *block = block_of(seg);
    size_t len = seg->pages[0].span_bytes, lead = (size_t)(block - (uint8_t *)seg);
    if (!sf_os_discard_protect(block, len)) return false;
    if (seg->committed_bytes <= lead + len && seg->committed_bytes > lead) {
        size_t dropped = seg->committed_bytes - lead;
        SF_SET(seg->committed_bytes, lead);
        sf_stat_sub(&sf_gstats.committed, dropped);
        sf_stat_add(&sf_gstats.decommitted_total, dropped);
    }
    return true;
}

/* A span leaves the quarantine: accessible again, to the large cache. */
static void release(struct held h) {
    sf_span_release(h.seg, !h.protected || sf_os_protect(block_of(h.seg), h.bytes, true));
}

bool sf_span_quarantine_put(sf_segment_t *seg) {
    sf_page_t *page = &seg->pages[0];
    struct held h = {seg, page->span_bytes, false};
    if (h.bytes > SPAN_QUARANTINE_BYTES) return false; /* (huge: unmapped, which protects) */
    h.protected = sf_protect_budget_take(h.bytes) && protect_block(seg);
    struct held out[SPAN_QUARANTINE_MAX + 1];
    size_t n_out = 0;
    sf_lock(&sf_span_quarantine_lock);
    while (count > 0 && (count == SPAN_QUARANTINE_MAX || bytes + h.bytes > SPAN_QUARANTINE_BYTES)) {
        out[n_out++] = held[first];
        bytes -= held[first].bytes;
        first = (first + 1) % SPAN_QUARANTINE_MAX;
        count--;
    }
    held[(first + count) % SPAN_QUARANTINE_MAX] = h;
    count++;
    bytes += h.bytes;
    sf_unlock(&sf_span_quarantine_lock);
    for (size_t i = 0; i < n_out; i++) release(out[i]);
    return true;
}

bool sf_span_quarantine_holds(const void *p) {
    bool found = false;
    sf_lock(&sf_span_quarantine_lock);
    for (size_t i = 0; i < count && !found; i++) {
        const sf_segment_t *seg = held[(first + i) % SPAN_QUARANTINE_MAX].seg;
        found = (const uint8_t *)p >= (const uint8_t *)seg && (const uint8_t *)p < (const uint8_t *)seg + seg->span_size;
    }
    sf_unlock(&sf_span_quarantine_lock);
    return found;
}

/* Releases every waiting span (sefer_trim). */
void sf_span_quarantine_flush(void) {
    struct held out[SPAN_QUARANTINE_MAX];
    sf_lock(&sf_span_quarantine_lock);
    size_t n = count;
    for (size_t i = 0; i < n; i++) out[i] = held[(first + i) % SPAN_QUARANTINE_MAX];
    count = bytes = 0;
    sf_unlock(&sf_span_quarantine_lock);
    for (size_t i = 0; i < n; i++) release(out[i]);
}
