/* fastpath.h - the same-thread malloc and free fast paths.
 *
 * Included by the files that define exported entry points (api.c,
 * override.c, override_new.c) so each entry point is one function with no
 * call on its fast path.  Neither path takes a lock, makes an atomic
 * read-modify-write or enters the kernel:
 *
 *   malloc: TLS heap -> direct[(n+15)/16] -> page -> pop page->free
 *   free:   segmap byte == 1 -> segment (mask) -> page (shift) -> owner is
 *           this thread's heap and page flags clear -> block-start and
 *           double-free checks (guard level 1) -> push page->local_free
 *
 * Anything else (sizes above 1 KiB, empty pages, other owners, spans,
 * suspected misuse) takes the generic path in alloc.c / free.c. */
#ifndef SEFER_FASTPATH_H
#define SEFER_FASTPATH_H

#include "internal.h"

SF_INLINE void *sf_malloc(size_t n) {
    sf_heap_t *heap = sf_tls_heap;
    if (likely(n <= DIRECT_MAX)) {
        sf_page_t *page = heap->direct[(n + 15) >> 4];
        sf_block_t *b = page->free;
        if (likely(b != NULL)) {
            page->free = b->next;
            SF_COUNT(page->used);
            SF_COUNT(heap->allocs);
            b->cookie = 0;
            return b;
        }
    }
    return sf_malloc_generic(heap, n);
}

SF_INLINE void sf_free(void *p) {
    if (likely(sf_segmap_is_head(p))) {
        sf_segment_t *seg = sf_segment_of(p);
        sf_page_t *page = sf_page_of(seg, p);
        sf_heap_t *heap = sf_tls_heap;
        sf_block_t *b = (sf_block_t *)p;
        if (likely(seg->heap == heap && SF_GET(page->flags) == 0 && sf_page_is_block_start(page, p) &&
                   b->cookie != (uintptr_t)page)) {
            b->next = page->local_free;
            b->cookie = (uintptr_t)page;
            page->local_free = b;
            SF_COUNT(heap->frees);
            if (likely(SF_UNCOUNT(page->used) != 0)) return;
            /* the only page of a small class stays (see sf_page_on_empty) */
            if (page->prev == NULL && page->next == NULL && page->class_idx <= SMALL_CLASS_MAX)
                return;
            sf_page_on_empty(heap, page);
            return;
        }
    }
    sf_free_generic(p);
}

#endif
