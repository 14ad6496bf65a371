/* remote.c - frees by a thread that does not own the block.
 *
 * Three channels, all lock-free and all lossless:
 *
 *   the freeing thread's batches (sf_batch_t): small blocks at levels 0-2
 *     freed by a thread with a heap of its own (and the thread key, whose
 *     destructor sends what it holds).  The pointer goes into an array of
 *     the freeing heap's, with the block's free mark written (a block
 *     already marked is a suspect and takes the ring) and its page
 *     untouched; the array goes whole onto the owner heap's inbox (one
 *     CAS) when it is full, when the thread frees another heap's block,
 *     enters its class slow path, collects its heap or exits; the owner
 *     takes the inbox with one exchange where it drains its ring, and
 *     frees each block as its owner (drain_batched).  The page's list
 *     moved a handed block's line between the cores three times, a batch
 *     twice (docs/design.md, "Batches").  The mark is what keeps a double
 *     free from handing out a block twice: the owner's free of a block
 *     that waits in a batch it cannot see finds the mark, and at levels
 *     0-2 the mark alone is a double free (free.c, sf_free_check_block).
 *     With all of a heap's batches in flight, the page's list.
 *
 *   the page's list (page->xfree): the rest of the common case.  The freeing thread
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
 *     now and then), into guarded pages at level 3 and under valgrind (their
 *     checks run when the owner drains), into the fallback heap (taken under its
 *     lock, never through xfree) and of a block that already carries its
 *     free mark (a suspect, tagged SF_REMOTE_SUSPECT: a double free, which
 *     the owner reports, drain_block).  A full ring spills onto the heap's
 *     overflow list.  The ring and the overflow list live in the heap slot,
 *     which is never unmapped.
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
#include "fastpath.h"

/* ---- the ring path ---------------------------------------------------------- */

/* b: a block, or a block tagged SF_REMOTE_SUSPECT (the tag travels in the
 * ring cell, and on the overflow list in the link that points to it). */
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
        sf_remote_untag(b)->next = head;
        SF_LS_RMW(OVERFLOW_CAS);
    } while (!atomic_compare_exchange_weak_explicit(&owner->overflow, &head, b,
                                                    memory_order_release, memory_order_relaxed));
}

/* ---- the page path ------------------------------------------------------------ */

void sf_remote_free(sf_heap_t *owner, sf_page_t *page, sf_block_t *b) {
    uintptr_t cookie = sf_page_cookie(page);
    /* A pointer off the blocks' 16-byte grid is no block start: reported
     * here, as its low bits would read as the suspect tag in the ring and
     * as the full-page flag on the page's list. */
    if (SF_UNLIKELY((uintptr_t)b & 15)) {
        sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, b);
        return;
    }
    /* (guarded pages, all of them or none (sf_pages_checked): level 2's
     * take the page's list too, the freeing thread checked the block and
     * the owner encodes the links as it takes them; level 3's and
     * valgrind's never do) */
    if (sf_pages_checked() && !sf_l2_fast) {
        sf_heap_remote_free(owner, b);
        return;
    }
    if (b->cookie == cookie) { /* marked free already: tell the owner so (drain_block) */
        sf_heap_remote_free(owner, (sf_block_t *)((uintptr_t)b | SF_REMOTE_SUSPECT));
        return;
    }
    /* Free from now on, whichever way it goes: a second free of it by any
     * thread finds the mark (a batch would otherwise take a block the
     * ring carries unmarked, and the owner free it twice). */
    b->cookie = cookie;
    if (atomic_load_explicit(&owner->state, memory_order_relaxed) != SF_HEAP_LIVE) {
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

/* ---- batches ------------------------------------------------------------------- */

/* Pushes the batch this heap's thread is filling onto its owner's inbox
 * (owner context of me: its thread, or a collector holding it).
 * may_collect: an owner found abandoned is collected now (its inbox is
 * drained there), as the ring's frees do; not from inside a collection. */
void sf_outbox_send(sf_heap_t *me, bool may_collect) {
    sf_batch_t *bt = me->outbox;
    if (bt == NULL) return;
    me->outbox = NULL;
    sf_heap_t *owner = me->outbox_to;
    atomic_store_explicit(&bt->in_flight, 1, memory_order_relaxed);
    sf_batch_t *head = atomic_load_explicit(&owner->inbox, memory_order_relaxed);
    do {
        bt->next = head;
        SF_LS_RMW(INBOX_CAS);
    } while (!atomic_compare_exchange_weak_explicit(&owner->inbox, &head, bt, memory_order_release,
                                                    memory_order_relaxed));
    /* (the push before the state's load: an owner that exits stores its
     * state, then looks at its inbox once more, sf_heap_thread_done; one
     * of the two sees the other) */
    atomic_thread_fence(memory_order_seq_cst);
    if (may_collect && atomic_load_explicit(&owner->state, memory_order_relaxed) == SF_HEAP_ABANDONED)
        sf_heap_try_collect_abandoned(owner);
}

bool sf_outbox_put_slow(sf_heap_t *me, sf_heap_t *owner, sf_block_t *b, uintptr_t cookie) {
    /* (without the thread key, nothing sends the batch when the thread
     * exits: its blocks would wait for ever) */
    if (me->kind != SF_HEAP_REAL || me == &sf_heap_fallback || !sf_thread_key_ok) return false;
    if (me->outbox != NULL && me->outbox->n == SF_BATCH_BLOCKS) sf_outbox_send(me, true); /* full: due */
    /* (a free into an exited thread's heap, or of a suspect, leaves a
     * batch still filling to go on filling) */
    if (atomic_load_explicit(&owner->state, memory_order_relaxed) != SF_HEAP_LIVE || b->cookie == cookie)
        return false;
    sf_outbox_send(me, true);
    if (me->batch_backoff != 0) { /* every batch was in flight a moment ago */
        me->batch_backoff--;
        return false;
    }
    if (SF_UNLIKELY(me->batches == NULL)) {
        /* (kept for the heap slot's life, as its ring: batches in flight
         * are read by their owners after this thread is gone) */
        me->batches = sf_os_map_plain(SF_BATCHES * sizeof(sf_batch_t));
        if (me->batches == NULL) return false;
        sf_stat_add(&sf_gstats.metadata, SF_BATCHES * sizeof(sf_batch_t));
    }
    /* From the one after the batch taken last: owners hand batches back
     * in the order they were sent, about.  With all of them in flight
     * (owners that have not drained: bench/mstress's, whose threads come
     * and go, had the scan of all 16 at a tenth of its remote frees), the
     * next SF_BATCHES frees take the page's list without a look. */
    for (unsigned k = 0; k < SF_BATCHES; k++) {
        unsigned i = (me->batch_next + k) % SF_BATCHES;
        sf_batch_t *bt = &me->batches[i];
        if (atomic_load_explicit(&bt->in_flight, memory_order_acquire) != 0) continue;
        b->cookie = cookie;
        bt->n = 1;
        bt->blocks[0] = b;
        me->outbox = bt;
        me->outbox_to = owner;
        me->batch_next = (uint16_t)((i + 1) % SF_BATCHES);
        return true;
    }
    me->batch_backoff = SF_BATCHES;
    return false;
}

/* ---- draining the ring (owner or collector context) --------------------------- */

/* Whether b is a block start of page, a page in use; if not, reported (an
 * interior pointer, or one into a page not in use) and false. */
static bool carved_block_or_report(const sf_page_t *page, const sf_block_t *b) {
    if (SF_GET(page->in_use) && sf_page_is_block_start(page, b)) return true;
    sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, b);
    return false;
}

/* A block that came through the ring (or its overflow list).  First
 * whether it is a block start of a page in use at all: the freeing
 * thread's fast path (free.c, free_remote_small) does not look at the page,
 * and sends the pointer here when the page is full or its owner gone, so
 * an interior or wild pointer freed by another thread arrives unchecked,
 * as on the page's list (sf_page_collect_remote checks those); taken as a
 * block, it was handed out by a later malloc, overlapping a live block
 * (tests/test_guard.c, cross-interior-full).
 *
 * suspect: the freeing thread found the block's free mark already written.
 * At levels 0-2 that is a double free whatever the block is now: still
 * free (on a list, or its first free waiting in a ring, an inbox or a
 * batch the owner cannot see), or handed out again since (its mark
 * cleared: freeing it now would free a live block, a limit of the design
 * before batches).  Every way a block leaves a free list clears its mark,
 * so a live block carries one only if the program wrote a page
 * descriptor's address into its second word.  Reported, and dropped.
 *
 * An entry that is no suspect was found unmarked by its sender, which
 * marked it (sf_remote_free): a first free, two frees at the very same
 * moment aside, taken without a walk of the page's lists (on a producer's
 * full pages, whose frees all come this way, that walk found nothing: a
 * million instructions of a 0.3 s callgrind run of bench/xmalloc).  Where
 * the sender sends the block as it came (valgrind's tracking), a marked
 * block is looked for on the page's lists: found, it was freed twice.
 * (Level 2 looked for every marked entry there and in its quarantine
 * until its frees took batches, whose waiting blocks no look finds; its
 * owner's free of a block still in the ring now finds the mark.)  At
 * level 3 every block arrives marked: its free set the mark with an
 * atomic exchange, which is where level 3 catches a second free. */
static void drain_block(sf_heap_t *heap, sf_block_t *b, bool suspect) {
    sf_page_t *page = sf_page_of(sf_segment_of(b), b);
    if (!carved_block_or_report(page, b)) return;
    if (suspect) { /* (levels 0-2: level 3 sends no suspects) */
        sf_guard_report(SF_GUARD_DOUBLE, b);
        return;
    }
    /* (only under valgrind's tracking, whose senders send blocks as they
     * come, marked or not) */
    if (sf_tracked && sf_guard_level < 3 && b->cookie == sf_page_cookie(page)) {
        sf_page_collect_remote(heap, page);
        if (sf_page_holds_free_block(page, b) || (sf_guard_level == 2 && sf_quarantine_holds(heap, b))) {
            sf_guard_report(SF_GUARD_DOUBLE, b);
            return;
        }
    }
    sf_heap_owner_free(heap, page, b);
}

/* A block that came in another thread's batch: marked by that thread,
 * which found it unmarked (sf_outbox_put), so not a double free unless two
 * frees raced.  The pointer was not checked when it was batched (at level
 * 2 its block was: free.c, l2_remote_free) and may
 * have waited while its segment went away, or became another heap's: the
 * segment map says first whether it is still one of this heap's small
 * segments (an invalid pointer is reported, never followed).  On a plain
 * page of this heap's (fast_carved set: no flags, levels 0-1; the free
 * fast path's one compare, fastpath.h, sf_offset_is_carved_start), or a
 * level-2 page that takes fast frees (its fast owner this heap, tagged), a carved
 * block start goes onto local_free as the owner's free pushes it (the
 * generic checks and sf_page_local_free_slow cost 77 instructions a block
 * against the page list's 34, bench/instructions' remoteheap row); the
 * rest takes those. */
static void drain_batched(sf_heap_t *heap, sf_block_t *b) {
    uintptr_t u = (uintptr_t)b, chunk = u >> SF_SEG_SHIFT;
    sf_segment_t *seg = (sf_segment_t *)(chunk << SF_SEG_SHIFT);
    if (!sf_segmap_is_small_chunk(chunk) || SF_PEEK(seg->heap) != heap) {
        sf_guard_report(SF_GUARD_INVALID, b);
        return;
    }
    sf_page_t *page = sf_page_of(seg, b);
    /* (a small page starts with its first block: the offset is the low bits) */
    uint64_t off = u & (((uintptr_t)1 << SF_SMALL_PAGE_SHIFT) - 1);
    if (SF_LIKELY(sf_offset_is_carved_start(page, off))) {
        b->next = page->local_free; /* (the mark is written: its sender's) */
        page->local_free = b;
        if (SF_UNLIKELY(SF_UNCOUNT(page->used) == 0)) sf_page_on_empty(heap, page);
        return;
    }
    /* (level 2's, whose fast_carved stays 0: the link encoded, as
     * sf_l2_free_owned pushes; the sender checked the size word and
     * canary, free.c's l2_remote_free) */
    uint64_t m = sf_page_divmagic(page);
    if (sf_l2_fast && SF_PEEK(page->fast_heap) == (sf_heap_t *)((uintptr_t)heap + SF_L2_OWNER_TAG) && off * m < m &&
        off < sf_page_carved_bytes(page)) {
        sf_link_set(page, b, page->local_free);
        b->cookie = sf_page_cookie(page); /* (again: a write after free may have cleared it while it waited) */
        page->local_free = b;
        if (SF_UNLIKELY(SF_UNCOUNT(page->used) == 0)) sf_page_on_empty(heap, page);
        return;
    }
    if (carved_block_or_report(page, b)) sf_heap_owner_free(heap, page, b);
}

void sf_heap_drain_remote(sf_heap_t *heap) {
    void *p;
    while ((p = sf_ring_pop(&heap->ring)) != NULL)
        drain_block(heap, sf_remote_untag(p), ((uintptr_t)p & SF_REMOTE_SUSPECT) != 0);
    if (atomic_load_explicit(&heap->inbox, memory_order_relaxed) != NULL) {
        SF_LS_RMW(INBOX_XCHG);
        sf_batch_t *bt = atomic_exchange_explicit(&heap->inbox, NULL, memory_order_acquire);
        while (bt != NULL) {
            sf_batch_t *next = bt->next; /* (read before the batch goes back) */
            uint32_t n = bt->n;
            for (uint32_t i = 0; i < n; i++) drain_batched(heap, bt->blocks[i]);
            atomic_store_explicit(&bt->in_flight, 0, memory_order_release);
            SF_SET(heap->remote_batched, heap->remote_batched + n); /* read by statistics */
            bt = next;
        }
    }
    if (atomic_load_explicit(&heap->overflow, memory_order_relaxed) == NULL) return;
    SF_LS_RMW(OVERFLOW_XCHG);
    sf_block_t *list = atomic_exchange_explicit(&heap->overflow, NULL, memory_order_acquire);
    while (list != NULL) {
        sf_block_t *b = sf_remote_untag(list), *next = b->next;
        drain_block(heap, b, ((uintptr_t)list & SF_REMOTE_SUSPECT) != 0);
        list = next;
    }
}
