/* segmap.c - "is this pointer sefer's?" in O(1).
 *
 * One byte per 4 MiB chunk of the 47-bit user address space: 32 MiB of
 * zero-initialised .bss, of which the kernel backs only the 4 KiB pages that
 * hold a non-zero byte (one page per 16 GiB of address space in use).
 *
 *   0      the chunk holds no live sefer segment: a pointer into it is foreign
 *   1      a small segment's header starts at this chunk
 *   2      a span's header starts at this chunk
 *   3      a medium segment's header starts at this chunk
 *   k > 3  the chunk is inside a span whose header is k-3 chunks earlier
 *          (255 means "at least 252 earlier: step back and look again")
 *
 * The free fast path only asks "is the byte 1?" (small blocks are the hot
 * ones, and knowing the kind saves loading the page size from the header),
 * and when it is not, "is it 3?" (the medium blocks' push, free.c);
 * the generic path follows the back-distance to find the header of a
 * pointer deep inside a huge span.
 * Entries are set before a segment is handed out and cleared before it is
 * cached or unmapped. */
#include "internal.h"

_Atomic uint8_t sf_segmap[SF_SEGMAP_CHUNKS];

void sf_segmap_mark(void *seg, size_t chunks, uint8_t head) {
    uintptr_t first = (uintptr_t)seg >> SF_SEG_SHIFT;
    if (first + chunks > SF_SEGMAP_CHUNKS) return;
    for (size_t i = 0; i < chunks; i++) {
        uint8_t v = head;
        if (head != SF_SEGMAP_NONE && i > 0) v = sf_segmap_back_value(i);
        SF_LS_RMW(SEGMAP_STORE);
        atomic_store_explicit(&sf_segmap[first + i], v, memory_order_release);
    }
}

sf_segment_t *sf_segmap_header(const void *p) {
    uintptr_t chunk = (uintptr_t)p >> SF_SEG_SHIFT;
    if (chunk >= SF_SEGMAP_CHUNKS) return NULL;
    for (;;) {
        uint8_t v = atomic_load_explicit(&sf_segmap[chunk], memory_order_acquire);
        if (v == SF_SEGMAP_NONE) return NULL;
        if (v < SF_SEGMAP_BACK0) return (sf_segment_t *)(chunk << SF_SEG_SHIFT);
        if (chunk < (uintptr_t)(v - SF_SEGMAP_BACK_BIAS)) return NULL;
        chunk -= (uintptr_t)(v - SF_SEGMAP_BACK_BIAS);
    }
}
