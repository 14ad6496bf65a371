/* fastpath.h - the same-thread malloc and free fast paths.
 *
 * Included by the files that define exported entry points (api.c,
 * override.c, override_new.c) so each entry point is one function with no
 * call on its fast path.  Neither path takes a lock, makes an atomic
 * read-modify-write or enters the kernel:
 *
 *   malloc: TLS heap -> direct[(n+15)/16] -> page -> pop page->free
 *   free:   segmap byte == 1 (a small segment) -> page (shifts of the
 *           pointer) -> the page's fast owner is this thread's heap ->
 *           block-start and double-free checks (guard level 1) -> push
 *           page->local_free
 *
 * Anything else (sizes above 1 KiB, empty pages, other owners, spans,
 * suspected misuse) takes the generic path in alloc.c / free.c. */
#ifndef SEFER_FASTPATH_H
#define SEFER_FASTPATH_H

#include "internal.h"

/* Hands out b, the head of a list whose rest (next) becomes page->free:
 * the one place a block leaves an unguarded page. */
SF_INLINE void *sf_hand_out(sf_heap_t *heap, sf_page_t *page, sf_block_t *b, sf_block_t *next) {
    page->free = next;
    SF_COUNT(page->used);
    SF_COUNT(heap->allocs);
    b->cookie = 0; /* no longer free: see the double-free check in sf_free */
    return b;
}

SF_INLINE void *sf_malloc(size_t n) {
    sf_heap_t *heap = sf_tls_heap;
    if (likely(n <= DIRECT_MAX)) {
        sf_page_t *page = heap->direct[(n + 15) >> 4];
        sf_block_t *b = page->free;
        if (likely(b != NULL)) return sf_hand_out(heap, page, b, b->next);
    }
    return sf_malloc_generic(n, heap);
}

/* Small blocks only (the segment map says "small segment here"): their pages
 * are 64 KiB-aligned and start with their first block, so the page is found
 * with constant shifts and the offset in the page is the pointer's low 16
 * bits.  A multiple of the block size past the last block (the page's tail)
 * needs no bound check here: once the page is fully carved, that one
 * "block" carries the page's free cookie, so a free of it takes the generic
 * path, which rejects it; before that it is among the blocks not yet carved
 * (docs/design.md: what level 1 checks where). */
SF_INLINE sf_page_t *sf_small_owned_page(const void *p) {
    uintptr_t u = (uintptr_t)p;
    if (likely(sf_segmap_is_small_head(p))) {
        /* &seg->pages[(u >> 16) & 63 - 1], written so the index is scaled once */
        sf_page_t *page = (sf_page_t *)((u & ~(uintptr_t)SEG_MASK) |
                                        ((u >> (SMALL_PAGE_SHIFT - SF_PAGE_DESC_SHIFT)) &
                                         ((SMALL_PAGES - 1) << SF_PAGE_DESC_SHIFT)));
        uint64_t off = u & (((uintptr_t)1 << SMALL_PAGE_SHIFT) - 1);
        if (likely(SF_PEEK(page->fast_heap) == sf_tls_heap && off * page->divmagic < page->divmagic &&
                   ((const sf_block_t *)p)->cookie != sf_page_cookie(page)))
            return page;
    }
    return NULL;
}

SF_INLINE void sf_free(void *p) {
    sf_page_t *page = sf_small_owned_page(p);
    if (likely(page != NULL)) {
        sf_block_t *b = (sf_block_t *)p;
        b->next = page->local_free;
        b->cookie = sf_page_cookie(page);
        page->local_free = b;
        if (likely(SF_UNCOUNT(page->used) != 0)) return;
        /* the only page of its (small) class stays: see sf_page_on_empty */
        if (page->prev == NULL && page->next == NULL) return;
        sf_page_on_empty(page->fast_heap, page);
        return;
    }
    sf_free_generic(p);
}

/* Pops a block from the class's current page, if it has one ready. */
SF_INLINE void *sf_heap_pop(sf_heap_t *heap, unsigned class_idx) {
    sf_page_t *page = heap->queues[class_idx].first;
    sf_block_t *b;
    if (page == NULL || (b = page->free) == NULL || SF_GET(page->flags) != 0) return NULL;
    return sf_hand_out(heap, page, b, b->next);
}

SF_INLINE void *sf_calloc(size_t count, size_t size) {
    size_t n;
    if (unlikely(__builtin_mul_overflow(count, size, &n))) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = sf_malloc(n);
    if (unlikely(p == NULL) || (n > MEDIUM_MAX && sf_segmap_header(p)->fresh_zero))
        return p; /* failed, or a new or fully decommitted span: already zero */
    return memset(p, 0, n);
}

#endif
