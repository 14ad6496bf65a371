/* free.c - the generic free path: spans, other owners, the fallback heap,
 * pages with flags set, and everything the fast path found suspicious.
 *
 * Guard level 1 checks live here: a pointer sefer does not own (its chunk
 * is not in the segment map), a pointer inside a block or into a page not in
 * use, and a double free (the block's cookie word equals its page address:
 * its free mark, cleared wherever a block is handed out, so at levels 0-2
 * the mark alone says so; level 3 also finds the block on the page's lists
 * or its quarantine before it says so). */
#include "fastpath.h"

#include <stdlib.h>

/* Whether the header of a live segment still holds its magic.  A wild write
 * that reached a segment's header (a 1 MiB underflow from a block of its
 * first page: tests/reliability/misuse.c) leaves every descriptor of the
 * segment untrustworthy: following its owner or page shift would crash far
 * from the cause, so a free that finds the magic gone stops the process. */
SF_INLINE bool segment_intact(const sf_segment_t *seg) {
    return seg->magic == (SF_SEG_MAGIC ^ (uintptr_t)seg) &&
           (seg->kind != SF_SEG_MEDIUM || sf_guard_level >= 2 || *sf_segment_end_mark(seg) == sf_segment_end_mark_value(seg));
}

static SF_NOINLINE void segment_damaged(const void *p) {
    sf_guard_report(SF_GUARD_INVALID, p);
    sf_write_stderr("sefer: the header of the segment holding that pointer is overwritten: aborting"
                    " (whatever guard.on_error says: nothing in that segment can be trusted)\n");
    abort();
}

/* Validates p for free/realloc.  Returns its page (and *seg_out), or NULL
 * after reporting the misuse (free of NULL returns NULL silently, and so
 * does the free of a level-3 malloc(0) slot, done here; realloc asks
 * about those before). */
sf_page_t *sf_free_check_block(const void *p, sf_segment_t **seg_out) {
    if (p == NULL) return NULL;
    sf_segment_t *seg = sf_segmap_header_near(p);
    if (seg != NULL && SF_UNLIKELY(!segment_intact(seg))) segment_damaged(p);
    if (seg == NULL) {
        /* level 3's malloc(0) slots lie in no segment: freed here (asked
         * first thing, it cost every level-3 free a call) */
        if (SF_UNLIKELY(sf_guard_level >= 3) && sf_zero_free((void *)p)) return NULL;
        /* a span that went to the large cache (or waits in the span
         * quarantine, guard level >= 2) was freed before */
        bool freed = sf_cache_holds(p) || (sf_guard_level >= 2 && sf_span_quarantine_holds(p));
        sf_guard_report(freed ? SF_GUARD_DOUBLE : SF_GUARD_INVALID, p);
        return NULL;
    }
    sf_page_t *page = sf_page_of(seg, p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        if (p != page->block_start) {
            sf_guard_report(SF_GUARD_INTERIOR, p);
            return NULL;
        }
    } else if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, p)) {
        sf_guard_report(SF_GET(page->in_use) ? SF_GUARD_INTERIOR : SF_GUARD_INVALID, p);
        return NULL;
    } else if (((const sf_block_t *)p)->cookie == sf_page_cookie(page) && seg->heap == sf_tls_heap &&
               (sf_guard_level < 3 || (sf_page_collect_remote(seg->heap, page), sf_page_holds_free_block(page, p) ||
                                       sf_quarantine_holds(seg->heap, p)))) {
        /* (levels 0-2: the mark alone says so, remote.c's drain_block has
         * why; the block's first free may wait in another thread's batch,
         * where no list of this heap's shows it) */
        sf_guard_report(SF_GUARD_DOUBLE, p);
        return NULL;
    }
    *seg_out = seg;
    return page;
}

static void free_to_fallback(sf_page_t *page, sf_block_t *b) {
    sf_lock(&sf_fallback_lock);
    if (b->cookie == sf_page_cookie(page) &&
        (sf_page_holds_free_block(page, b) ||
         (sf_guard_level >= 2 && sf_quarantine_holds(&sf_heap_fallback, b)))) {
        sf_unlock(&sf_fallback_lock);
        sf_guard_report(SF_GUARD_DOUBLE, b);
        return;
    }
    sf_heap_owner_free(&sf_heap_fallback, page, b);
    sf_unlock(&sf_fallback_lock);
}

static void count_remote(sf_heap_t *me) {
    if (me->kind == SF_HEAP_REAL) SF_COUNT(me->remote_frees);
    else sf_stat_add(&sf_gstats.shared_remote_frees, 1);
}

/* Whether the small block at u is on a page of sampled blocks (out of
 * line: inline, the compiler computed its page number on every remote
 * free, armed or not, two instructions). */
static SF_NOINLINE bool on_sampled_page(const sf_segment_t *seg, uintptr_t u) {
    return (SF_PEEK(seg->sampled_mask) >> ((u >> SF_SMALL_PAGE_SHIFT) & (SF_SMALL_PAGES - 1))) & 1;
}

/* A small block of another thread's heap, freed by a thread that does not
 * own it (the free fast path's ownership test failed): straight onto its
 * page's remote-free list (remote.c), or into this thread's batch for its
 * owner.  This path reads nothing of the page but its second line, where
 * that list lives: the owner's heap comes from the segment header, which
 * changes only when pages come and go, the block-start test from the
 * page's remote_bytes and remote_class (types.h), written when the page
 * is taken, and the guard level is global, so the freeing thread
 * does not pull the owner's hot descriptor line (free list, counts) away
 * from it on every free of a producer's blocks.  The owner checks again
 * when it takes the block in (drain_batched, sf_page_collect_remote).
 * False: the generic path sorts it out (the caller's own heap, the fallback
 * heap, guarded pages, a segment's header, a pointer that is not a block
 * start of a page in use, which it reports). */
SF_INLINE bool free_remote_small(void *p) {
    uintptr_t u = (uintptr_t)p, chunk = u >> SF_SEG_SHIFT;
    if (!sf_segmap_is_small_chunk(chunk) ||
        ((u >> SF_SMALL_PAGE_SHIFT) & (SF_SMALL_PAGES - 1)) == 0)
        return false; /* (page 0 of a small segment is its header) */
    const sf_segment_t *seg = (const sf_segment_t *)(chunk << SF_SEG_SHIFT);
    if (SF_UNLIKELY(!segment_intact(seg))) return false; /* (the checked path says so) */
    sf_heap_t *owner = SF_PEEK(seg->heap), *me = sf_tls_heap;
    /* (guarded pages: level >= 2; callers have ruled valgrind's tracking
     * out; with profiling on, a block of a sampled page, which
     * free_checked_uncounted tells the profile about: the page's bit is on
     * the header's line read just above, where before every remote free
     * took the checked path while the profile was armed, xmalloc at 0.66x
     * and prodcons at 0.74x of off at 2 MiB) */
    if (owner == me || owner == &sf_heap_fallback || sf_guard_level >= 2 ||
        (sf_prof_is_armed() && on_sampled_page(seg, u)))
        return false;
    sf_page_t *page = sf_small_page_desc(chunk, u);
    /* a block start of a page in use, before p is read or written: an
     * interior pointer would have its mark and link written into the live
     * block around it, and an address in a part of the segment no page has
     * opened would fault (the checked path reports both) */
    uint64_t off = u & (((uintptr_t)1 << SF_SMALL_PAGE_SHIFT) - 1), m = sf_class_divmagic[SF_PEEK(page->remote_class)];
    if (off >= SF_PEEK(page->remote_bytes) || off * m >= m) return false;
    if (me->kind == SF_HEAP_REAL) {
        SF_COUNT(me->remote_frees);
        if (sf_outbox_put(me, owner, p, sf_page_cookie(page))) return true;
    } else { /* (a thread without a heap of its own has no batches) */
        sf_stat_add(&sf_gstats.shared_remote_frees, 1);
    }
    sf_remote_free(owner, page, p);
    return true;
}

/* A medium block (8-256 KiB) of the calling thread's heap, on a page with
 * nothing unusual (its fast owner is this heap: not guarded, sampled, full,
 * nor in a phase): pushed as the small fast path pushes.  Without this
 * their every free took the checked path, most of the instructions of
 * random sizes from 8 to 64 KiB.  Anything doubtful (not a carved block
 * start, a free mark already set) goes on to the checked path.  seg: the
 * medium segment the segment map names for p.  False: not such a block. */
/* The page of p in medium segment seg: sf_page_of with a medium segment's
 * constants (pages[0] is page 0: one shift and mask to the descriptor's
 * offset, then one lea; the empty asm keeps the compiler from building the
 * address twice, from pages[] and from the segment). */
SF_INLINE sf_page_t *medium_page_desc(sf_segment_t *seg, uintptr_t u) {
    uintptr_t index = (u >> (SF_MEDIUM_PAGE_SHIFT - SF_PAGE_DESC_SHIFT)) & ((SF_MEDIUM_PAGES - 1) << SF_PAGE_DESC_SHIFT);
    __asm__("" : "+r"(index));
    return (sf_page_t *)((uintptr_t)seg + offsetof(sf_segment_t, pages) + index);
}

/* The push itself, `how` a constant in each caller (fastpath.h,
 * sf_free_as). */
SF_INLINE bool medium_push_owned(sf_heap_t *heap, sf_segment_t *seg, void *p, enum sf_free_how how) {
    uintptr_t u = (uintptr_t)p;
    sf_page_t *page = medium_page_desc(seg, u);
    /* the fast owner first: under valgrind's tracking no page has one, and
     * block_start is no-access to memcheck (track.c) */
    if (SF_PEEK(page->fast_heap) != heap) return false;
    /* A carved block's start: the small path's one compare with the page's
     * bound (fastpath.h, sf_offset_is_carved_start), which holds for a
     * medium page's offsets too (types.h, sf_page_fast_bound).  Below the
     * first block (the page's colour, the header) off wraps, and its
     * product lies above any bound.  Before (in 0e95ef5's library) a mulq
     * gave the block's index in its high half, compared with the
     * capacity: three instructions and a jump more on every medium free. */
    uint64_t off = (uint64_t)(u - (uintptr_t)page->block_start);
    if (!sf_offset_is_carved_start(page, off) || ((const sf_block_t *)p)->cookie == sf_page_cookie(page))
        return false;
    /* (a fast owner means level 0-1: the mark is there) */
    if (SF_UNLIKELY(*sf_segment_end_mark(seg) != sf_segment_end_mark_value(seg))) return false;
    if (how == SF_FREE_TOP) sf_free_owned(heap, page, p);
    else sf_quarantine_swap_one(heap, page, p);
    return true;
}

/* Level 2's owner free of a medium block b (checked by the caller): second
 * on its page's free list, right behind the head, so the next malloc of
 * the class takes the head and b only after it.  A freed block is still
 * never the next one handed out, and a class that frees and allocates in
 * turn cycles through two blocks without a refill.  On local_free, where
 * an empty free list sends it, every such malloc swapped the lists, and
 * the swap's held-back block made the page carve fresh ones: on random
 * sizes from 8 to 64 KiB in bursts of 8, 1.17 mispredicted branches and
 * 146 instructions a block, 0.33 and 137 this way (bench/instructions at
 * level 2).  Only behind a head marked free (a free list whose head a
 * stray write moved into a live block is not written through).  Small
 * blocks keep local_free: a small free of a page behind the
 * class's current one would read that page's head, a line the program
 * has usually not touched for long (churn of 64 B blocks ran at 0.62x
 * this way).  False: the caller puts b elsewhere. */
static bool l2_free_behind_head(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_block_t *head = page->free;
    uintptr_t cookie = sf_page_cookie(page);
    if (head == NULL || head->cookie != cookie) return false;
    b->next = head->next; /* (links are keyed, not placed: copied as they are) */
    sf_link_set(page, head, b);
    b->cookie = cookie;
    if (SF_LIKELY(SF_UNCOUNT(page->used) != 0)) return true;
    sf_page_on_empty(heap, page);
    return true;
}

/* Guard level 2's fast free of a medium block (sf_l2_free_owned, for the
 * small ones, says what it checks): its owner's guarded page, a carved
 * block start not marked free, its size word and canary (no end mark: at
 * level 2 a guard page is there, types.h).  Then it goes on its page's
 * local_free, as a small block's does (sf_l2_free_owned): the refill keeps
 * the block freed last back there (sf_page_guarded_swap), so the next
 * malloc of its size gets another, and a double free after the size was
 * allocated again still finds it free (tests/reliability/misuse.c,
 * double-free-reused).  Only where the refill would hand it back, alone on
 * a page carved to its end, is it held in the heap's one-block quarantine,
 * as every medium free was before: 60 instructions more a free.  Without this path every medium free at level 2 took the
 * checked path: 6-7 times level 1's time on random sizes from 8 to 256 KiB
 * (docs/benchmarks.md, "Guard levels"). */
static bool l2_medium_free_owned(void *p) {
    uintptr_t u = (uintptr_t)p;
    if (!sf_l2_fast || !sf_segmap_is_medium_chunk(u >> SF_SEG_SHIFT)) return false;
    sf_heap_t *heap = sf_tls_heap;
    sf_segment_t *seg = sf_segment_of(p);
    sf_page_t *page = medium_page_desc(seg, u);
    if (SF_PEEK(page->fast_heap) != (sf_heap_t *)((uintptr_t)heap + SF_L2_OWNER_TAG)) return false;
    sf_block_t *b = p;
    if (!sf_page_is_block_start(page, p) || b->cookie == sf_page_cookie(page) || !sf_l2_tail_ok(page, p))
        return false;
    if (l2_free_behind_head(heap, page, b)) return true;
    if (SF_UNLIKELY(page->local_free == NULL && page->capacity == page->reserved)) {
        /* alone on a page that cannot carve, the refill would hand it
         * straight back: held in the heap's quarantine instead (a medium
         * page has 3-8 blocks: a class that keeps all but one live) */
        sf_quarantine_push(heap, page, b);
        return true;
    }
    sf_link_set(page, b, page->local_free);
    sf_free_to_local(heap, page, b);
    return true;
}

/* Guard level 2: a block of another thread's heap, small or medium, on a
 * guarded page that takes fast frees (its fast owner is that heap, tagged:
 * not full, sampled, in a phase, nor the fallback heap's).  The checks the
 * checked path makes of a block it does not own (a carved block start not
 * marked free, its size word and canary, an intact segment header), then,
 * as at levels 0-1, a small block into this thread's batch for its owner
 * (the owner encodes its link as it takes it in, remote.c's
 * drain_batched), else onto its page's remote list (the owner encodes the
 * links as it takes them).  Without this every remote free at
 * level 2 took the checked path: the remote row of bench/instructions at
 * 342.5 instructions a block against level 1's 181.5, prodcons 2.44x level
 * 1's time (docs/benchmarks.md, "Guard levels").  False: the checked path
 * decides. */
static bool l2_remote_free(void *p) {
    uintptr_t u = (uintptr_t)p, chunk = u >> SF_SEG_SHIFT;
    sf_page_t *page;
    if (sf_segmap_is_small_chunk(chunk)) {
        if (((u >> SF_SMALL_PAGE_SHIFT) & (SF_SMALL_PAGES - 1)) == 0) return false; /* (the header) */
        page = sf_small_page_desc(chunk, u);
    } else if (sf_segmap_is_medium_chunk(chunk)) {
        page = medium_page_desc((sf_segment_t *)(chunk << SF_SEG_SHIFT), u);
    } else {
        return false;
    }
    const sf_segment_t *seg = (const sf_segment_t *)(chunk << SF_SEG_SHIFT);
    uintptr_t fast = (uintptr_t)SF_PEEK(page->fast_heap);
    sf_heap_t *owner = (sf_heap_t *)(fast - SF_L2_OWNER_TAG), *me = sf_tls_heap;
    if (!(fast & SF_L2_OWNER_TAG) || owner == me || owner == &sf_heap_fallback || !segment_intact(seg) ||
        SF_PEEK(seg->heap) != owner)
        return false;
    sf_block_t *b = p;
    if (!sf_page_is_block_start(page, p) || b->cookie == sf_page_cookie(page) || !sf_l2_tail_ok(page, p))
        return false;
    count_remote(me);
    /* a small block into the batch this thread fills for its owner, as at
     * levels 0-1 (free_remote_small): checked here, marked by the put */
    if (me->kind == SF_HEAP_REAL && sf_segmap_is_small_chunk(chunk) && sf_outbox_put(me, owner, b, sf_page_cookie(page)))
        return true;
    sf_remote_free(owner, page, b);
    return true;
}

SF_INLINE bool free_medium_owned(void *p) {
    uintptr_t chunk = (uintptr_t)p >> SF_SEG_SHIFT;
    return sf_segmap_is_medium_chunk(chunk) &&
           medium_push_owned(sf_tls_heap, (sf_segment_t *)(chunk << SF_SEG_SHIFT), p, SF_FREE_TOP);
}

/* free() of a pointer the segment map puts in a medium segment (its second
 * question, fastpath.h): the push above, without the generic path's
 * questions first (level 2's pages, phases and tracking leave no page with
 * this heap as its fast owner, so the push never takes their blocks).  One
 * function for each way sf_free_as pushes. */
SF_HOT void sf_free_medium_top(void *p, sf_heap_t *heap) {
    if (!medium_push_owned(heap, sf_segment_of(p), p, SF_FREE_TOP)) sf_free_generic(p);
}
SF_HOT void sf_free_medium_held(void *p, sf_heap_t *heap) {
    if (!medium_push_owned(heap, sf_segment_of(p), p, SF_FREE_HELD)) sf_free_generic(p);
}

static void free_checked_uncounted(void *p);

/* sf_free_generic and sf_free_checked under valgrind's tracking or in a
 * phase.  While a phase is open (phase.c) no page has a fast-path owner, so
 * every free comes to one of them, and is counted here with the bytes of
 * its block. */
static SF_NOINLINE void free_special(void *p) {
    if (!(sf_mode() & SF_MODE_PHASE)) return sf_tracked_free(p);
    /* the owner's small block on a page with nothing unusual: pushed as
     * the fast path would (it is off), counted with the page's block size */
    uintptr_t u = (uintptr_t)p, chunk = u >> SF_SEG_SHIFT;
    sf_heap_t *me = sf_tls_heap;
    if (sf_segmap_is_small_chunk(chunk) && ((u >> SF_SMALL_PAGE_SHIFT) & (SF_SMALL_PAGES - 1)) != 0 &&
        SF_PEEK(((sf_segment_t *)(chunk << SF_SEG_SHIFT))->heap) == me && !sf_pages_checked()) {
        sf_page_t *page = sf_small_page_desc(chunk, u);
        sf_block_t *b = p;
        if (SF_GET(page->flags) == 0 && SF_GET(page->in_use) && sf_page_is_block_start(page, p) &&
            b->cookie != sf_page_cookie(page)) {
            sf_phase_count(SF_PHASE_FREE, -(int64_t)page->block_size);
            sf_free_owned(me, page, b);
            return;
        }
    }
    size_t bytes = sf_block_bytes(p);
    if (bytes != 0) sf_phase_count(SF_PHASE_FREE, -(int64_t)bytes);
    if (SF_UNLIKELY(sf_tracked)) sf_tracked_free(p); /* (which ends in free_checked_uncounted) */
    else if (!free_remote_small(p)) free_checked_uncounted(p);
}

/* sf_free_generic and sf_free_checked past their first question. */
SF_INLINE void free_generic_rest(void *p) {
    /* level 2: its fast push first (callers other than free come straight
     * here; in a phase no page takes it, phase.c) */
    if (sf_l2_fast && (sf_l2_free_owned(p) || l2_medium_free_owned(p))) return;
    if (SF_UNLIKELY(sf_mode())) free_special(p); /* tracked or in a phase */
    else if (!free_remote_small(p) && !free_medium_owned(p) && !(sf_l2_fast && l2_remote_free(p)))
        free_checked_uncounted(p);
}

SF_INLINE void free_checked_rest(void *p) {
    /* (level 2's free of a medium block comes here first: out of its fast
     * path, which would otherwise save p across the call on every free) */
    if (l2_medium_free_owned(p)) return;
    if (SF_UNLIKELY(sf_mode())) return free_special(p);
    if (sf_l2_fast && l2_remote_free(p)) return;
    free_checked_uncounted(p);
}

/* The first free by a thread with no heap yet that reaches the generic or
 * the checked path (level 2's free, operator delete): if p is a block of a
 * heap whose thread exited, the thread adopts that heap (heap.c,
 * sf_heap_adopt_for_free) and frees p as its owner.  Out of line, behind
 * one compare: asked inside free_remote_small, the test and the call cost
 * every remote free 21 instructions (bench/instructions' remote row, whose
 * freeing thread has no heap). */
static SF_NOINLINE void free_first_of_heapless(void *p, bool checked) {
    sf_segment_t *seg = p != NULL ? sf_segmap_header(p) : NULL;
    /* (a damaged header: the path below reports it; a span, a fallback
     * block or free(NULL) decides nothing: the thread asks again) */
    if (seg != NULL && segment_intact(seg) && !(sf_mode() & SF_MODE_TRACKED) && sf_thread_key_ok) {
        sf_heap_t *owner = SF_PEEK(seg->heap);
        if (owner != NULL && owner != &sf_heap_fallback && !sf_heap_adopt_for_free(owner)) sf_heap_adopt_declined();
    }
    if (checked) free_checked_rest(p);
    else free_generic_rest(p);
}

void sf_free_generic(void *p) {
    if (SF_UNLIKELY(sf_tls_may_adopt)) return free_first_of_heapless(p, false);
    free_generic_rest(p);
}

void sf_free_checked(void *p) {
    /* (before any check: adopted, the block's double-free test is the
     * owner's; a thread with no heap skips it, and the remote path finds
     * it when the owner takes the block in) */
    if (SF_UNLIKELY(sf_tls_may_adopt)) return free_first_of_heapless(p, true);
    free_checked_rest(p);
}

void sf_free_tracked_tail(void *p) { free_checked_uncounted(p); }

static void free_checked_uncounted(void *p) {
    if (SF_UNLIKELY(sf_gsample_on) && sf_gsample_free(p)) return;   /* a sampled block */
    sf_segment_t *seg = NULL;
    sf_page_t *page = sf_free_check_block(p, &seg);
    if (page == NULL) return;
    if (sf_guard_level >= 2 && !sf_guarded_free_ok(seg, page, p, seg->heap == sf_tls_heap))
        return; /* canary or cross-thread double free: reported and refused */
    if (SF_UNLIKELY(SF_GET(page->flags) & SF_PAGE_SAMPLED)) sf_prof_freed(p);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        sf_span_free(seg);
        return;
    }
    sf_block_t *b = p;
    sf_heap_t *owner = seg->heap, *me = sf_tls_heap;
    if (owner == me) {
        /* a phase ended and left this page off the free fast path: back on
         * (before the free, which may release the page; not a page no fast
         * path takes, whose word stays NULL: every level 3 free came here
         * and wrote it again, 10 instructions) */
        if (SF_UNLIKELY(SF_PEEK(page->fast_heap) == NULL) && sf_page_flags_fast(page) && !sf_phase_on())
            sf_page_set_fast_owner(page, me);
        sf_page_note_unfull(me, page);
        sf_heap_owner_free(me, page, b); /* flags set: full or guarded page */
    } else if (owner == &sf_heap_fallback) {
        free_to_fallback(page, b);
    } else {
        count_remote(me);
        sf_remote_free(owner, page, b);
    }
}
