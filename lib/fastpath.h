/* fastpath.h - the same-thread malloc and free fast paths.
 *
 * Included by the files that define exported entry points (api.c,
 * override.c, override_new.c) so each entry point is one function with no
 * call on its fast path.  Neither path takes a lock, makes an atomic
 * read-modify-write or enters the kernel:
 *
 *   malloc: TLS heap -> direct[(n+15)/16] -> page (or the class's list,
 *           shaped as one) -> pop its free list
 *   free:   segmap byte == 1 (a small segment) -> page (shifts of the
 *           pointer) -> the page's fast owner is this thread's heap ->
 *           block-start and double-free checks (guard level 1) -> push
 *           on top of the class's list (page->cl), count its room down
 *           (page.c, "Class lists")
 *
 * The table covers every small size (up to 8 KiB) and the free asks no
 * question whose answer is random on random sizes (a full list, its room
 * below zero, is rare and not at random; a class's current page never
 * empties on a free: SF_USED_BIAS, types.h).  Anything else (medium sizes,
 * a dry free list, other owners, spans, suspected misuse) takes the generic
 * path in alloc.c / free.c. */
#ifndef SEFER_FASTPATH_H
#define SEFER_FASTPATH_H

#include "internal.h"

/* Hands out b, the head of a list whose rest (next) becomes page->free:
 * the one place a block leaves an unguarded page.  _uncounted: where the
 * countdown word counted the allocation (sf_sample_tick_counting). */
SF_INLINE void *sf_hand_out_uncounted(sf_page_or_list_t *page, sf_block_t *b, sf_block_t *next) {
    page->free = next;
    SF_COUNT(page->used);
    b->cookie = 0; /* no longer free: see the double-free check in sf_free */
    return b;
}

SF_INLINE void *sf_hand_out(sf_heap_t *heap, sf_page_or_list_t *page, sf_block_t *b, sf_block_t *next) {
    SF_COUNT(heap->allocs);
    return sf_hand_out_uncounted(page, b, next);
}

/* Subtracts step from the countdown word (internal.h, "The countdown
 * word"); true if its bytes ran out. */
SF_INLINE bool sf_countdown_sub(sf_heap_t *heap, uint64_t step) {
    /* (unsigned arithmetic read back signed: no signed overflow; the store
     * atomic under ThreadSanitizer: sf_heap_allocs reads the word) */
    int64_t w = (int64_t)((uint64_t)heap->countdown - step);
    SF_OWN_SET(heap->countdown, w);
    return SF_UNLIKELY(w < 0);
}

/* The heap profile's countdown (profile.c, "Sampling"; the sampled
 * guard's point is on it too: "one countdown, two points"): `bytes` more
 * allocated from the heap; true if they reach its next point, and then the
 * caller hands nothing out: sf_sample_take serves the request.  Every
 * allocation meets a countdown once while the profile is armed or the
 * sampled guard on: the counted fast paths and level 2's pops
 * (sf_sample_tick_counting, below), the generic swaps, sf_heap_pop and the
 * slow path's sf_page_malloc_class here, a shift, a subtraction from
 * memory and a jump on the sign.
 * The entry points' own fast path (sf_malloc) does not count: arming the
 * profile sends it to the counted one (entry.c), so that off it costs
 * nothing (the two instructions on every malloc cost churn of 16-64 B
 * blocks 7-8 %).  The slow paths count on or off (off, the countdown runs
 * out every SF_SAMPLE_IDLE bytes to look at the knob). */
SF_INLINE bool sf_sample_tick(sf_heap_t *heap, uint64_t bytes) {
    return sf_countdown_sub(heap, bytes << SF_COUNTDOWN_SHIFT);
}

/* The same for a request of n bytes, and the allocation counted in the
 * word's low part (internal.h, "The countdown word"): its hand-out is
 * uncounted, and a run-out goes to sf_sample_take_counted.  n + 1 bytes,
 * so that malloc(0) takes one (the count's bound relies on it).  The
 * counted fast paths' (the armed profile's and the sampled guard's) and
 * level 2's pops'. */
SF_INLINE bool sf_sample_tick_counting(sf_heap_t *heap, size_t n) {
    /* ((n + 1) << SHIFT) - 1 as n * 2^SHIFT + (2^SHIFT - 1): a multiply
     * and an add (compilers shift: a copy, a shift and an add) */
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
    uint64_t step;
    bool out;
    __asm__("imulq %[unit], %[n], %[step]\n\t"
            "addq %[low], %[step]\n\t"
            "subq %[step], %[w]"
            : [step] "=&r"(step), [w] "+m"(heap->countdown), "=@ccs"(out)
            : [n] "r"(n), [unit] "i"((int64_t)1 << SF_COUNTDOWN_SHIFT),
              [low] "i"(((int64_t)1 << SF_COUNTDOWN_SHIFT) - 1));
    return SF_UNLIKELY(out);
#else
    return sf_countdown_sub(heap, (((uint64_t)n + 1) << SF_COUNTDOWN_SHIFT) - 1);
#endif
}

/* sf_hand_out for a request of n bytes, after the countdown. */
SF_INLINE void *sf_hand_out_ticked(sf_heap_t *heap, sf_page_or_list_t *page, sf_block_t *b, size_t n) {
    if (sf_sample_tick_counting(heap, n)) return sf_sample_take_counted(n, heap);
    return sf_hand_out_uncounted(page, b, b->next);
}

/* A medium size (SF_DIRECT_MAX < n <= SF_MEDIUM_MAX): a block of its
 * class's current page, as the fast path pops a small one, or NULL.
 * (mdirect[] holds only the empty page where direct[] does: guarded pages,
 * valgrind's tracking, phases, the markers; and for the classes above
 * SF_EAGER_MEDIUM_MAX under eager decommit, whose requests are spans.) */
SF_INLINE void *sf_medium_pop(sf_heap_t *heap, size_t n, bool counted) {
    sf_page_t *page = SF_PEEK(heap->mdirect[sf_medium_class_index(n)]);
    sf_block_t *b = page->free;
    if (SF_UNLIKELY(b == NULL)) return NULL;
    return counted ? sf_hand_out_ticked(heap, page, b, n) : sf_hand_out(heap, page, b, b->next);
}

SF_INLINE void *sf_malloc_l2(size_t n); /* (level 2's, below) */

/* The armed profile's malloc and the sampled guard's (one countdown for
 * both: profile.c): the fast path with constant bounds, counted (sf_sample_tick_counting),
 * else sf_malloc_generic.  What sf_malloc below runs past its first
 * comparison while the profile is armed or the sampled guard on (but at
 * level 3), and what the modes' paths behind
 * sf_malloc_entry_slow call (sf_malloc there would come back). */
SF_INLINE void *sf_malloc_counted_in(sf_heap_t *heap, size_t n) {
    sf_page_or_list_t *page;
    if (SF_LIKELY(n <= SF_DIRECT_MAX)) page = SF_PEEK(heap->direct[(n + 15) >> 4]);
    else if (n <= SF_MEDIUM_MAX) page = SF_PEEK(heap->mdirect[sf_medium_class_index(n)]);
    else return sf_malloc_generic(n, heap);
    /* (one pop for both: a sample's request then returns from here, where
     * sf_medium_pop's NULL for it would go on to the generic path, and the
     * path pay a frame: 9 instructions a pair) */
    sf_block_t *b = page->free;
    if (SF_LIKELY(b != NULL)) return sf_hand_out_ticked(heap, page, b, n);
    return sf_malloc_generic(n, heap);
}

SF_INLINE void *sf_malloc_counted(size_t n) { return sf_malloc_counted_in(sf_tls_heap, n); }

/* Every entry point's malloc (malloc, calloc, realloc, aligned requests,
 * sefer_malloc): the fast path for requests below the bounds of direct[]
 * and mdirect[] that sf_entry_choose set (internal.h, sf_entry_bounds),
 * uncounted; past them level 2's path or the armed profile's, inlined,
 * else sf_malloc_entry_slow.  Off, the profile costs this path nothing
 * (counted here, two instructions, churn of 16-64 B blocks ran 7-8 %
 * slower). */
SF_INLINE void *sf_malloc(size_t n) {
    sf_heap_t *heap = sf_tls_heap;
    if (SF_LIKELY(n < SF_PEEK(sf_entry_bounds.small_end))) {
        /* (the bound is never above it: told, calloc's question about
         * large sizes goes from its small path, 2 instructions) */
        if (n > SF_DIRECT_MAX) __builtin_unreachable();
        /* (another thread writes it when a phase begins: phase.c) */
        sf_page_or_list_t *page = SF_PEEK(heap->direct[(n + 15) >> 4]);
        sf_block_t *b = page->free;
        if (SF_LIKELY(b != NULL)) return sf_hand_out(heap, page, b, b->next);
    } else {
        /* level 2's path and the counted one (the armed profile's and the
         * sampled guard's), before the medium sizes: their every call comes
         * here.  One comparison sorts the three modes (their order,
         * internal.h): the counted path is two instructions from here,
         * level 2's three, the medium sizes' three.  (A test of both flags
         * for zero, then of the counted one, took 4 on each mode's path and
         * 2 on the medium sizes': the armed malloc(64) + free 66.2
         * instructions, now 64.1; level 2's 99.6, now 98.6; a 20000-byte
         * pair 78.0, now 79.0) */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
        /* (its address as a constant, rip-relative: an "m" operand had
         * the compiler form it in a register ahead of the small sizes'
         * comparison, one instruction more on their path) */
        __asm__ goto("cmpb %[counted], %c[mode](%%rip)\n\t"
                     "je %l[counted_path]\n\t"
                     "ja %l[l2_path]"
                     :
                     : [mode] "i"(&sf_entry_bounds.malloc_mode), [counted] "i"(SF_ENTRY_COUNTED)
                     : "cc"
                     : counted_path, l2_path);
#else
        uint8_t mode = sf_entry_malloc_mode();
        if (SF_UNLIKELY(mode == SF_ENTRY_COUNTED)) goto counted_path;
        if (SF_UNLIKELY(mode > SF_ENTRY_COUNTED)) goto l2_path;
#endif
        /* (the atomic load: a plain one the compiler reads ahead of the
         * first comparison, one instruction more on the small path) */
        if (n - (SF_DIRECT_MAX + 1) < __atomic_load_n(&sf_entry_bounds.medium_span, __ATOMIC_RELAXED)) {
            /* (here rather than in sf_malloc_generic: its own questions
             * first cost a medium malloc 6 instructions) */
            void *b = sf_medium_pop(heap, n, false);
            if (SF_LIKELY(b != NULL)) return b;
        }
    }
    return sf_malloc_entry_slow(n, heap);
counted_path:
    return sf_malloc_counted_in(heap, n);
l2_path:
    return sf_malloc_l2(n);
}

/* off (a pointer's distance from its page's first block: a small page's,
 * below 64 KiB, or a medium page's, below 4 MiB or wrapped below the
 * first block) is the start of one of the blocks the page has carved, and
 * the page is a plain fast page: off * m < fast_carved (types.h,
 * sf_page_fast_bound: exact, and false for every offset while the bound
 * is 0).  On x86-64 written as
 * two instructions that read the words from memory; compilers load the
 * constant into a register first, one instruction more on every free. */
SF_INLINE bool sf_offset_is_carved_start(const sf_page_t *page, uint64_t off) {
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
    bool below;
    __asm__("imulq %[m], %[off]\n\tcmpq %[bound], %[off]"
            : "=@ccb"(below), [off] "+r"(off)
            : [m] "m"(page->fast_divmagic), [bound] "m"(page->fast_carved));
    return below;
#else
    return off * SF_PEEK(page->fast_divmagic) < SF_PEEK(page->fast_carved);
#endif
}

/* Small blocks only (the segment map says "small segment here"): their pages
 * are 64 KiB-aligned and start with their first block, so the page is found
 * with constant shifts and the offset in the page is the pointer's low 16
 * bits.  `owner` is the page ownership word the caller's fast path accepts
 * (sf_page_set_fast_owner).  A multiple of the block size past the blocks
 * carved (the uncarved part, and the page's tail) fails the block-start
 * test's bound and takes the generic path, which rejects it
 * (docs/design.md: what level 1 checks where). */
/* The descriptor of the small page holding u (in 4 MiB chunk `chunk`, a
 * small segment): &seg->pages[(u >> 16) & 63 - 1], written so the index is
 * scaled once and the segment comes from the chunk already in a register
 * (the empty asm hides chunk's origin: else the compiler rebuilds the
 * segment as a copy of u masked, one instruction more). */
SF_INLINE sf_page_t *sf_small_page_desc(uintptr_t chunk, uintptr_t u) {
    __asm__("" : "+r"(chunk));
    return (sf_page_t *)((chunk << SF_SEG_SHIFT) |
                         ((u >> (SF_SMALL_PAGE_SHIFT - SF_PAGE_DESC_SHIFT)) & ((SF_SMALL_PAGES - 1) << SF_PAGE_DESC_SHIFT)));
}

/* The test of a small block's free at levels 0-1, without reading fast_heap:
 * the segment header says whose the page is (a line written only when
 * pages come and go), and fast_carved, 0 unless the page is its owner's
 * plain fast page, fails every other page.  A thread freeing another's
 * block so reads nothing the owner writes on every malloc and free (the
 * owner's descriptor line moved between the cores on each such free). */
SF_INLINE bool sf_small_takes_free(uintptr_t seg, const sf_page_t *page, const sf_heap_t *owner, const void *p,
                                   uint64_t off) {
    return SF_PEEK(((const sf_segment_t *)seg)->heap) == owner && sf_offset_is_carved_start(page, off) &&
           ((const sf_block_t *)p)->cookie != sf_page_cookie(page);
}

/* A small segment's address from its chunk, and the descriptor of its page
 * holding u from that address (as sf_small_page_desc: the empty asm keeps
 * the compiler from rebuilding the segment from u, one instruction more). */
SF_INLINE uintptr_t sf_small_seg(uintptr_t chunk) {
    __asm__("" : "+r"(chunk));
    return chunk << SF_SEG_SHIFT;
}
SF_INLINE sf_page_t *sf_small_page_in(uintptr_t seg, uintptr_t u) {
    return (sf_page_t *)(seg | ((u >> (SF_SMALL_PAGE_SHIFT - SF_PAGE_DESC_SHIFT)) &
                                ((SF_SMALL_PAGES - 1) << SF_PAGE_DESC_SHIFT)));
}

/* The page of p if it is a small block `owner` (the calling thread's heap)
 * may push at levels 0-1; NULL otherwise. */
SF_INLINE sf_page_t *sf_small_page_owned_by(const void *p, const sf_heap_t *owner) {
    uintptr_t u = (uintptr_t)p;
    uintptr_t chunk = u >> SF_SEG_SHIFT;
    if (SF_LIKELY(sf_segmap_is_small_chunk(chunk))) {
        uintptr_t seg = sf_small_seg(chunk);
        sf_page_t *page = sf_small_page_in(seg, u);
        uint64_t off = u & (((uintptr_t)1 << SF_SMALL_PAGE_SHIFT) - 1);
        if (SF_LIKELY(sf_small_takes_free(seg, page, owner, p, off))) return page;
    }
    return NULL;
}

SF_INLINE sf_page_t *sf_small_owned_page(const void *p) { return sf_small_page_owned_by(p, sf_tls_heap); }

/* The ends of the owner's free onto a page (a medium block, a realloc's
 * old block, a small block its class list had no room for: a small
 * block's free goes to the list first, sf_free_owned_small below): b goes
 * to one of its page's lists (link already stored by the caller); a page
 * left empty goes back to its segment.  Returns the blocks still out
 * (with the bias), 0 when the page emptied (it may be gone).  A class's
 * current page never reaches zero here (SF_USED_BIAS, types.h), so the
 * test is taken only by pages behind it, whose emptying is rare and not
 * at random: no misprediction on random sizes.
 *
 * Levels 0-1 push on top of page->free, so the next malloc of the class
 * takes the block freed last: a class in a steady state keeps reusing the
 * few blocks (and cache lines) it just used, as the thread caches of
 * jemalloc and tcmalloc do (docs/design.md, "Cache misses").  Level 2
 * pushes on local_free instead, which the fast path reaches only through a
 * swap on a slow path, so that a freed block is not the next one handed
 * out. */
SF_INLINE uint32_t sf_free_onto(sf_heap_t *heap, sf_page_t *page, sf_block_t *b, sf_block_t **list) {
    b->cookie = sf_page_cookie(page);
    *list = b;
    uint32_t left = SF_UNCOUNT(page->used);
    if (SF_LIKELY(left != 0)) return left;
    sf_page_on_empty(heap, page);
    return 0;
}

SF_INLINE void sf_free_to_local(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_free_onto(heap, page, b, &page->local_free);
}

/* An owner's free of a block of an unguarded page at levels 0-1: on top
 * (realloc's old block, which went to local_free, is held instead:
 * sf_quarantine_swap_one). */
SF_INLINE uint32_t sf_free_owned(sf_heap_t *heap, sf_page_t *page, void *p) {
    sf_block_t *b = (sf_block_t *)p;
    b->next = page->free;
    return sf_free_onto(heap, page, b, &page->free);
}

/* The owner's free of a block of an unguarded small page at levels 0-1:
 * onto its class list (page.c, "Class lists"), ahead of the page, while
 * the list has room, so that the next malloc of the class takes the block
 * freed last whatever page it is on.  A full list (its room counted below
 * zero: a subtraction and a jump on the sign) sends the block to its page
 * and the class's malloc to the list (a tail call: the push saves no
 * registers). */
SF_INLINE void sf_free_owned_small(sf_heap_t *heap, sf_page_t *page, void *p) {
    sf_page_or_list_t *cl = page->cl;
    if (SF_UNLIKELY((int32_t)SF_UNCOUNT(cl->used) < 0)) {
        sf_cl_full(heap, page, p);
        return;
    }
    sf_block_t *b = (sf_block_t *)p;
    b->cookie = sf_page_cookie(page); /* (the page's free mark: double frees are found as before) */
    b->next = cl->free;
    cl->free = b;
}

/* How free() at levels 0-1 pushes the owner's block (a constant in each
 * caller): on top, or held in its heap's one-block quarantine (realloc's
 * move: the old block is not the next one handed out; guarded.c,
 * sf_quarantine_swap_one). */
enum sf_free_how { SF_FREE_HELD, SF_FREE_TOP };

/* The fast path for a pointer in a chunk below chunk_end, else slow(p)
 * (SF_SEGMAP_CHUNKS and sf_free_generic but for the exported free). */
SF_INLINE void sf_free_bounded(void *p, enum sf_free_how how, uintptr_t chunk_end, void (*slow)(void *)) {
    sf_heap_t *heap = sf_tls_heap;
    uintptr_t chunk = (uintptr_t)p >> SF_SEG_SHIFT;
    if (SF_LIKELY(chunk < chunk_end)) {
        if (SF_LIKELY(sf_segmap_byte(chunk) == SF_SEGMAP_SMALL_HEAD)) {
            uintptr_t seg = sf_small_seg(chunk);
            sf_page_t *page = sf_small_page_in(seg, (uintptr_t)p);
            uint64_t off = (uintptr_t)p & (((uintptr_t)1 << SF_SMALL_PAGE_SHIFT) - 1);
            if (SF_LIKELY(sf_small_takes_free(seg, page, heap, p, off))) {
                if (how == SF_FREE_TOP) sf_free_owned_small(heap, page, p);
                else sf_quarantine_swap_one(heap, page, p);
                return;
            }
        } else if (sf_segmap_medium_at(chunk)) {
            /* (the rest of its checks, out of line) */
            if (how == SF_FREE_TOP) sf_free_medium_top(p, heap);
            else sf_free_medium_held(p, heap);
            return;
        }
    } else {
        slow(p);
        return;
    }
    sf_free_generic(p);
}

SF_INLINE void sf_free_as(void *p, enum sf_free_how how) { sf_free_bounded(p, how, SF_SEGMAP_CHUNKS, sf_free_generic); }

SF_INLINE void sf_free_entry_tail(void *p);

/* The exported free: on top, within the bound sf_entry_choose set. */
SF_INLINE void sf_free_entry(void *p) {
    sf_free_bounded(p, SF_FREE_TOP, SF_PEEK(sf_entry_bounds.chunk_end), sf_free_entry_tail);
}

/* Every other entry point's free (operator delete, cfree, free_sized,
 * realloc to 0): levels 0-1's push, else the generic path. */
SF_INLINE void sf_free(void *p) {
    sf_heap_t *heap = sf_tls_heap;
    sf_page_t *page = sf_small_page_owned_by(p, heap);
    if (SF_LIKELY(page != NULL)) {
        sf_free_owned_small(heap, page, p);
        return;
    }
    sf_free_generic(p);
}

/* ---- guard level 2: the same paths with its checks (docs/configuration.md,
 * "Guard levels").  Chosen once at start-up for every entry's malloc and
 * the exported free (entry.c); the other entry points that free (operator
 * delete, realloc, ...) run the level 0-1 free, find no page there, and
 * the generic paths try these same pushes first.  On top of levels 0-1:
 * links XOR-ed with the page secret and required to stay in their 64 KiB
 * page when followed; the canary right after the request and the request
 * size in the block's last 4 bytes (internal.h, "guarded.c"), written on
 * malloc and checked on free.  Anything unusual, including a failed check,
 * goes to the generic path, which reports it. */
/* The head of `page`'s free list (a gdirect, gdirect_hi or gmdirect
 * entry) if its link checks out, its decoded successor in *next; NULL
 * otherwise (empty page, or a bad link: the checked path reports it).
 * page_shift: the page's size (SF_SMALL_PAGE_SHIFT, or
 * SF_MEDIUM_PAGE_SHIFT from gmdirect), which a link must stay within. */
SF_INLINE sf_block_t *sf_l2_ready(sf_page_t *page, unsigned page_shift, sf_block_t **next_out) {
    sf_block_t *b = page->free;
    if (SF_LIKELY(b != NULL)) {
#if defined(__x86_64__)
        __asm__("" : "+a"(b)); /* b in the return register: saves a final mov */
#endif
        sf_block_t *next = sf_link_decode(page, b);
        /* (empty asm: else the compiler keeps the encoded link and the
         * secret alive to test next == NULL as link == secret: 2 movs) */
        __asm__("" : "+r"(next));
        *next_out = next;
        if (SF_LIKELY(((uintptr_t)next ^ (uintptr_t)b) < ((uintptr_t)1 << page_shift) || next == NULL)) return b;
    }
    return NULL;
}

/* Hands out b (sf_l2_ready's) for a request of n bytes, which the
 * countdown word counted: its canary and size word written. */
SF_INLINE void *sf_l2_give(sf_page_t *page, sf_block_t *b, sf_block_t *next, size_t n) {
    uint64_t value = sf_canary_value(page, b);
    uint32_t *size = sf_size_word(page, b);
    sf_hand_out_uncounted(page, b, next); /* clears the cookie word first: */
    memcpy((uint8_t *)b + n, &value, sizeof value); /* a short request's canary is there */
    *size = (uint32_t)n;
    return b;
}

/* Both, after the heap profile's countdown; dry(n, heap, page,
 * page_shift) when nothing is ready (a constant in each caller).  (The
 * fallback passed in rather than a NULL the caller tests: a sample's
 * request is then returned from here, where its NULL would go on to the
 * fallback, and every path pay a frame: 10 instructions a medium pair.) */
typedef void *sf_l2_dry_fn(size_t n, sf_heap_t *heap, sf_page_t *page, unsigned page_shift);
SF_INLINE void *sf_l2_pop_or(sf_heap_t *heap, sf_page_t *page, size_t n, unsigned page_shift, sf_l2_dry_fn *dry) {
    sf_block_t *next, *b = sf_l2_ready(page, page_shift, &next);
    if (SF_UNLIKELY(b == NULL)) return dry(n, heap, page, page_shift);
    if (sf_sample_tick_counting(heap, n)) return sf_sample_take_counted(n, heap);
    return sf_l2_give(page, b, next, n);
}

SF_INLINE void *sf_l2_none(size_t n, sf_heap_t *heap, sf_page_t *page, unsigned page_shift) {
    (void)n, (void)heap, (void)page, (void)page_shift;
    return NULL;
}

/* NULL: nothing ready (or the sample's request failed). */
SF_INLINE void *sf_l2_pop(sf_heap_t *heap, sf_page_t *page, size_t n, unsigned page_shift) {
    return sf_l2_pop_or(heap, page, n, page_shift, sf_l2_none);
}

/* The gdirect index of a request: by its size with the tail; the smallest
 * entries name the SF_GUARD_MIN_BLOCK class (sf_page_update_direct). */
SF_INLINE size_t sf_l2_index(size_t n) { return (n + SF_GUARD_TAIL + 15) >> 4; }

/* The gdirect_hi index of a request above SF_GDIRECT_MAX - tail: by its
 * size with the tail, in 256-byte steps. */
SF_INLINE size_t sf_l2_hi_index(size_t n) { return (n + SF_GUARD_TAIL + 255) >> 8; }

/* The gmdirect index of a request above SF_SMALL_MAX - tail, up to
 * SF_MEDIUM_MAX - tail: its class with the tail (guarded.c's choice). */
SF_INLINE size_t sf_l2_medium_index(size_t n) { return sf_class_of(n + SF_GUARD_TAIL) - SF_MEDIUM_CLASS_MIN; }

SF_HIDDEN void *sf_malloc_l2_hi(size_t n, sf_heap_t *heap);     /* alloc.c */
SF_HIDDEN void *sf_malloc_l2_medium(size_t n, sf_heap_t *heap); /* alloc.c */
SF_HIDDEN void *sf_malloc_l2_refill(size_t n, sf_heap_t *heap); /* alloc.c */

/* The page level 2's fast path pops from for a request of n bytes: gdirect
 * to SF_GDIRECT_MAX, gdirect_hi above it to SF_SMALL_MAX, gmdirect to
 * SF_MEDIUM_MAX; NULL beyond.  *page_shift: its pages' size. */
SF_INLINE sf_page_t *sf_l2_page(sf_heap_t *heap, size_t n, unsigned *page_shift) {
    *page_shift = SF_SMALL_PAGE_SHIFT;
    if (SF_LIKELY(n <= SF_GDIRECT_MAX - SF_GUARD_TAIL)) return heap->gdirect[sf_l2_index(n)];
    if (n <= SF_SMALL_MAX - SF_GUARD_TAIL) return heap->gdirect_hi[sf_l2_hi_index(n)];
    *page_shift = SF_MEDIUM_PAGE_SHIFT;
    if (n <= SF_MEDIUM_MAX - SF_GUARD_TAIL) return heap->gmdirect[sf_l2_medium_index(n)];
    return NULL;
}

/* (sf_malloc_l2_refill finds the page again: passed, the call's
 * arguments cost the small sizes' dry path two moves) */
SF_INLINE void *sf_l2_refill_small(size_t n, sf_heap_t *heap, sf_page_t *page, unsigned page_shift) {
    (void)page, (void)page_shift;
    return sf_malloc_l2_refill(n, heap);
}

SF_INLINE void *sf_malloc_l2(size_t n) {
    sf_heap_t *heap = sf_tls_heap;
    /* (the larger sizes out of line: inlined, the compiler merged the two
     * pops and the small sizes paid three moves) */
    if (SF_LIKELY(n <= SF_GDIRECT_MAX - SF_GUARD_TAIL)) {
        return sf_l2_pop_or(heap, heap->gdirect[sf_l2_index(n)], n, SF_SMALL_PAGE_SHIFT, sf_l2_refill_small);
    } else if (n <= SF_SMALL_MAX - SF_GUARD_TAIL) {
        return sf_malloc_l2_hi(n, heap);
    } else if (n <= SF_MEDIUM_MAX - SF_GUARD_TAIL) {
        return sf_malloc_l2_medium(n, heap);
    }
    return sf_malloc_generic(n, heap);
}

/* Whether a small block on a level-2 page has its size word and canary
 * intact.  (The size word of the block before is checked by the checked
 * path only: an underflow of this block overwrote that word, which the
 * block before's own free checks, on whichever path.) */
/* For operator delete (override_new.c, a constant 0 for free: the same
 * code as without them) the size word must hold `mark` (new's or new[]'s
 * family, shifted) over the request, and the request be `size` where the
 * sized forms give one (0: any).  Any other family leaves more than a
 * block's size once the mark is taken off, or wraps: the caller's slower
 * check then says which. */
SF_INLINE bool sf_l2_tail_ok_marked(const sf_page_t *page, const void *p, uint32_t mark, size_t size) {
    uint32_t bsize = page->block_size, n = *sf_size_word(page, p) - mark;
    /* (64-bit: an overflow that wrote 0xff over the size word must not wrap
     * the sum and send the canary read 4 GiB away) */
    if (SF_UNLIKELY((uint64_t)n + SF_GUARD_TAIL > bsize) || (size != 0 && size != n)) return false;
    uint64_t canary;
    memcpy(&canary, (const uint8_t *)p + n, sizeof canary);
    return SF_LIKELY(canary == sf_canary_value(page, p));
}
SF_INLINE bool sf_l2_tail_ok(const sf_page_t *page, const void *p) { return sf_l2_tail_ok_marked(page, p, 0, 0); }

/* Frees p if it is a small block of this thread's, on a guarded page that
 * takes fast frees, with its size word and canary intact; false: the
 * caller takes the checked path (whose first question is the same for a
 * medium block: sf_free_checked, free.c).  mark, size: 0 for free;
 * operator delete's (sf_l2_tail_ok_marked), whose mark a free taken here
 * clears, as malloc left the word. */
SF_INLINE bool sf_l2_free_owned_as(void *p, uint32_t mark, size_t size) {
    sf_heap_t *heap = sf_tls_heap;
    const sf_heap_t *tagged = (sf_heap_t *)((uintptr_t)heap + SF_L2_OWNER_TAG);
    uintptr_t u = (uintptr_t)p, chunk = u >> SF_SEG_SHIFT;
    if (!sf_segmap_is_small_chunk(chunk)) return false;
    sf_page_t *page = sf_small_page_desc(chunk, u);
    /* (the class's constant, which a tagged page keeps in fast_divmagic,
     * 0 on every other and on the page at the segment's end guard page,
     * internal.h, sf_page_tagged_keeps_constant: level 2's block-start
     * test, without the bound, which is level 0-1's and 0 here, so that
     * their test fails every offset of this page) */
    uint64_t off = u & (((uintptr_t)1 << SF_SMALL_PAGE_SHIFT) - 1), m = SF_PEEK(page->fast_divmagic);
    if (SF_LIKELY(SF_PEEK(page->fast_heap) == tagged && off * m < m &&
                  ((const sf_block_t *)p)->cookie != sf_page_cookie(page) &&
                  sf_l2_tail_ok_marked(page, p, mark, size))) {
        if (mark != 0) *sf_size_word(page, p) -= mark;
        sf_block_t *b = (sf_block_t *)p;
        sf_link_set(page, b, page->local_free);
        sf_free_to_local(heap, page, b);
        return true;
    }
    return false;
}
SF_INLINE bool sf_l2_free_owned(void *p) { return sf_l2_free_owned_as(p, 0, 0); }

SF_INLINE void sf_free_l2(void *p) {
    if (SF_LIKELY(sf_l2_free_owned(p))) return;
    sf_free_checked(p); /* (which tries it once more, harmlessly) */
}

/* Where the exported free goes past its bound: level 2's free, inlined
 * here, else the slow path.  (Through a call to sf_free_entry_slow, which
 * holds the same, level 2 ran 0.82-0.93x its time before e5f5168 on
 * bursts, inlined 0.95-1.02x.) */
SF_INLINE void sf_free_entry_tail(void *p) {
    if (SF_PEEK(sf_entry_bounds.free_l2)) sf_free_l2(p);
    else sf_free_entry_slow(p);
}

/* Pops a block from the class's current page, if it has one ready (its
 * free list, else the blocks its owner freed since: the swap
 * sf_malloc_generic makes for the direct sizes). */
SF_INLINE void *sf_heap_pop(sf_heap_t *heap, unsigned class_idx) {
    sf_page_t *page = heap->queues[class_idx].first;
    if (page == NULL || SF_GET(page->flags) != 0) return NULL;
    sf_block_t *b = page->free;
    if (b == NULL && page->local_free == NULL) return NULL;
    /* (before the swap: a sample leaves the lists as they are) */
    if (sf_sample_tick(heap, page->block_size)) return sf_sample_take_class(class_idx, heap);
    if (b == NULL) {
        b = page->local_free;
        page->local_free = NULL;
    }
    return sf_hand_out(heap, page, b, b->next);
}

/* A block of small class c from the top of its class list, as malloc's
 * pop would take it when direct[] names the list; NULL if the list is
 * empty (a heap without lists: the fallback heap's and the unclaimed
 * marker's stay empty).  For paths that choose the class themselves
 * (aligned requests), so that their frees, which go on the list, come
 * back to them (page.c, "Class lists"). */
SF_INLINE void *sf_cl_pop(sf_heap_t *heap, unsigned c) {
    sf_page_or_list_t *cl = sf_cl_of(heap, c);
    sf_block_t *b = cl->free;
    if (b == NULL) return NULL;
    if (sf_sample_tick(heap, sf_class_size[c])) return sf_sample_take_class(c, heap);
    return sf_hand_out(heap, cl, b, b->next);
}

SF_INLINE void *sf_calloc(size_t count, size_t size) {
    size_t n;
    if (SF_UNLIKELY(__builtin_mul_overflow(count, size, &n))) return sf_alloc_refused(SIZE_MAX);
    void *p = sf_malloc(n);
    if (SF_UNLIKELY(p == NULL)) return p;
    if (n > SF_MEDIUM_MAX && sf_segmap_header(p)->fresh_zero) {
        if (SF_UNLIKELY(sf_tracked)) sf_track_zeroed(p, n);
        return p; /* a new or fully decommitted span: already zero */
    }
    return memset(p, 0, n);
}

#endif
