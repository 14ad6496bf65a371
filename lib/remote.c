/* remote.c - frees by a thread that does not own the block.
 *
 * Two channels, both lock-free and both lossless:
 *
 *   the page's list (page->xfree): the common case.  The freeing thread
 *     pushes the block onto a stack threaded through the blocks of that
 *     page with one CAS on the page's second cache line (the owner's fast
 *     paths never read it), and is done.  The owner takes the whole stack
 *     with one exchange when it next needs blocks from that page (its free
 *     and local lists ran dry), when it collects the heap, or before it
 *     decides a block is a double free.  Contention spreads over pages, and
 *     nothing is queued per block for the owner to drain.
 *
 *   the owner's ring (and its overflow list): for what the owner must be
 *     told about because it would not look at the page otherwise.  A full
 *     page is on the heap's full list, where the owner never looks: when the
 *     owner moves a page there, it sets SF_XFREE_NOTIFY in xfree (a CAS, so
 *     no block can slip in unseen), and the first remote free that finds the
 *     flag clears it and sends its block through the ring; draining it brings
 *     the page back to its class queue, and later remote frees go to the
 *     page's list again.  The ring also carries every remote free into a heap
 *     whose owner is gone (so frees into an abandoned heap make it collected
 *     now and then), into guarded pages (levels 2-3 and valgrind: their checks
 *     run when the owner drains), into the fallback heap (taken under its
 *     lock, never through xfree) and of a block that already carries its
 *     free mark (a suspected double free, checked by the owner).  A full ring
 *     spills onto the heap's overflow list.  The ring and the overflow list
 *     live in the heap slot, which is never unmapped.
 *
 * Why a page is never released under a pushing thread: a block on xfree is
 * still counted in page->used until the owner takes it, so the page, and
 * its segment, stay in use at least until the push is complete; the pusher
 * touches nothing of the page after its CAS succeeded.  This is also why
 * the notification goes through the heap and not the page: "the page has
 * new blocks" would have to be said after the block was published, when the
 * page may already be gone.
 *
 * The xfree links are plain pointers; at guard level 2, whose page lists
 * are encoded, the owner encodes them as it takes the list (level 3 and
 * valgrind's pages never use it). */
#include "internal.h"

/* ---- the ring path ---------------------------------------------------------- */

void sf_heap_remote_free(sf_heap_t *owner, sf_block_t *b) {
    if (sf_ring_push(&owner->ring, b)) {
        /* nobody drains an abandoned heap: collect it now and then */
        if (SF_UNLIKELY(atomic_load_explicit(&owner->state, memory_order_relaxed) ==
                     SF_HEAP_ABANDONED) &&
            sf_ring_pending(&owner->ring) >= 64)
            sf_heap_try_collect_abandoned(owner);
        return;
    }
    if (atomic_load_explicit(&owner->state, memory_order_relaxed) == SF_HEAP_ABANDONED &&
        sf_heap_try_collect_abandoned(owner) && sf_ring_push(&owner->ring, b))
        return;
    SF_LS_RMW(RING_OVERFLOWED);
    atomic_fetch_add_explicit(&owner->ring.overflowed, 1, memory_order_relaxed);
    sf_event_ring_overflow(owner); /* event.c: the first, then one a minute */
    sf_block_t *head = atomic_load_explicit(&owner->overflow, memory_order_relaxed);
    do {
        b->next = head;
        SF_LS_RMW(OVERFLOW_CAS);
    } while (!atomic_compare_exchange_weak_explicit(&owner->overflow, &head, b,
                                                    memory_order_release, memory_order_relaxed));
}

/* ---- the page path ------------------------------------------------------------ */

void sf_remote_free(sf_heap_t *owner, sf_page_t *page, sf_block_t *b) {
    uintptr_t cookie = sf_page_cookie(page);
    /* (guarded pages, all of them or none (sf_pages_checked): level 2's
     * take the page's list too, the freeing thread checked the block and
     * the owner encodes the links as it takes them; level 3's and
     * valgrind's never do) */
    if ((sf_pages_checked() && !sf_l2_fast) || b->cookie == cookie ||
        atomic_load_explicit(&owner->state, memory_order_relaxed) != SF_HEAP_LIVE) {
        sf_heap_remote_free(owner, b);
        return;
    }
    uintptr_t old = atomic_load_explicit(&page->xfree, memory_order_relaxed);
    for (;;) {
        if (old & SF_XFREE_NOTIFY) {
            /* the page is full: take the flag, then tell the owner */
            SF_LS_RMW(XFREE_NOTIFY);
            if (atomic_compare_exchange_weak_explicit(&page->xfree, &old, old & ~SF_XFREE_NOTIFY,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                sf_heap_remote_free(owner, b);
                return;
            }
            continue;
        }
        /* (the flag is clear here: the low bits are the list) */
        b->next = (sf_block_t *)(old & (SF_XFREE_ONE - 1));
        b->cookie = cookie; /* free from now on: a second free of it is suspect */
        SF_LS_RMW(XFREE_CAS);
        if (atomic_compare_exchange_weak_explicit(&page->xfree, &old,
                                                  ((old & ~(SF_XFREE_ONE - 1)) + SF_XFREE_ONE) | (uintptr_t)b,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
}

/* The links from first to last (plain, as pushed) become encoded ones
 * (sf_link_set), last's included. */
SF_NOINLINE static void encode_links(sf_page_t *page, sf_block_t *first, sf_block_t *last) {
    for (sf_block_t *b = first;;) {
        sf_block_t *next = b->next;
        sf_link_set(page, b, next);
        if (b == last) return;
        b = next;
    }
}

/* Takes the page's remote frees into its local free list (owner context).
 * Returns how many; a full page they arrive in goes back to its queue.
 * The freeing threads did not look at the page (free.c, free_remote_small):
 * here each block is checked to be a block start of it, and one that is
 * not (an interior or wild pointer freed by another thread) is reported
 * and left out. */
uint32_t sf_page_collect_remote(sf_heap_t *heap, sf_page_t *page) {
    if ((atomic_load_explicit(&page->xfree, memory_order_relaxed) & ~SF_XFREE_NOTIFY) == 0) return 0;
    SF_LS_RMW(XFREE_XCHG);
    uintptr_t got = atomic_exchange_explicit(&page->xfree, 0, memory_order_acquire);
    sf_block_t *list = sf_xfree_list(got), *first = NULL, *last = NULL;
    uint32_t n = 0;
    while (list != NULL) {
        sf_block_t *b = list;
        list = b->next;
        if (!sf_page_is_block_start(page, b)) {
            sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, b);
            continue;
        }
        if (n == sf_page_used(page)) { /* more blocks than are out: one was freed twice at once */
            sf_guard_report(SF_GUARD_DOUBLE, b);
            break; /* the rest of the list is lost, not followed round */
        }
        b->next = first;
        first = b;
        if (last == NULL) last = b;
        n++;
    }
    if (n == 0) {
        /* nothing valid came: a full page must keep asking to be told (the
         * exchange took the flag); if a block came meanwhile, take it */
        if ((page->flags & SF_PAGE_FULL) && !sf_page_set_notify(page)) return sf_page_collect_remote(heap, page);
        return 0;
    }
    last->next = page->local_free;
    if (SF_UNLIKELY(page->secret != 0)) encode_links(page, first, last); /* (guard level 2) */
    page->local_free = first;
    SF_SET(page->used, page->used - n);
    SF_SET(heap->remote_collected, heap->remote_collected + n); /* read by statistics */
    if (page->flags & SF_PAGE_FULL) sf_page_unfull(heap, page); /* (the exchange took the flag) */
    return n;
}

/* The owner is about to put a page with nothing left on its full list:
 * from now on the first remote free must tell it.  False if a remote free
 * came in first (collect it instead). */
bool sf_page_set_notify(sf_page_t *page) {
    uintptr_t empty = 0;
    SF_LS_RMW(XFREE_NOTIFY);
    return atomic_compare_exchange_strong_explicit(&page->xfree, &empty, SF_XFREE_NOTIFY,
                                                   memory_order_relaxed, memory_order_relaxed);
}

/* The owner freed into its full page itself and brings it back: the
 * remote frees that follow can use the page's list again. */
void sf_page_clear_notify(sf_page_t *page) {
    uintptr_t old = atomic_load_explicit(&page->xfree, memory_order_relaxed);
    if (old & SF_XFREE_NOTIFY) SF_LS_RMW(XFREE_NOTIFY); /* (and once per retry below) */
    while ((old & SF_XFREE_NOTIFY) &&
           !atomic_compare_exchange_weak_explicit(&page->xfree, &old, old & ~SF_XFREE_NOTIFY,
                                                  memory_order_relaxed, memory_order_relaxed)) {
        SF_LS_RMW(XFREE_NOTIFY);
    }
}

/* ---- draining the ring (owner or collector context) --------------------------- */

/* A block that came through the ring.  First whether it is a block start
 * of a page in use at all: the freeing thread's fast path (free.c,
 * free_remote_small) does not look at the page, and sends the pointer here
 * when the page is full or its owner gone, so an interior or wild pointer
 * freed by another thread arrives unchecked, as on the page's list
 * (sf_page_collect_remote checks those); taken as a block, it was handed
 * out by a later malloc, overlapping a live block (tests/test_guard.c,
 * cross-interior-full).  One that already carries its free mark was freed
 * twice if it is on the page's lists now (the page's remote frees are
 * taken first, so those count too): reported, and dropped.  (At level 3
 * every block arrives marked: its free set the mark with an atomic
 * exchange, which is where level 3 catches a second free.) */
static void drain_block(sf_heap_t *heap, sf_block_t *b) {
    sf_page_t *page = sf_page_of(sf_segment_of(b), b);
    if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, b)) {
        sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, b);
        return;
    }
    if (sf_guard_level < 3 && b->cookie == sf_page_cookie(page)) {
        sf_page_collect_remote(heap, page);
        if (sf_page_holds_free_block(page, b) || (sf_guard_level == 2 && sf_quarantine_holds(heap, b))) {
            sf_guard_report(SF_GUARD_DOUBLE, b);
            return;
        }
    }
    sf_heap_owner_free(heap, page, b);
}

void sf_heap_drain_remote(sf_heap_t *heap) {
    void *p;
    while ((p = sf_ring_pop(&heap->ring)) != NULL) drain_block(heap, p);
    if (atomic_load_explicit(&heap->overflow, memory_order_relaxed) == NULL) return;
    SF_LS_RMW(OVERFLOW_XCHG);
    sf_block_t *list = atomic_exchange_explicit(&heap->overflow, NULL, memory_order_acquire);
    while (list != NULL) {
        sf_block_t *next = list->next;
        drain_block(heap, list);
        list = next;
    }
}
