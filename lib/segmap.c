/* segmap.c - "is this pointer sefer's?" in O(1).
 *
 * One byte per 4 MiB chunk of the 47-bit user address space: 32 MiB of
 * zero-initialised .bss, of which the kernel backs only the 4 KiB pages that
 * hold a non-zero byte (one page per 16 GiB of address space in use).
 *
 *   0      the chunk holds no live sefer segment: a pointer into it is foreign
 *   1      a segment (or span) header starts at this chunk
 *   k > 1  the chunk is inside a span whose header is k-1 chunks earlier
 *          (255 means "at least 254 earlier: step back and look again")
 *
 * The free fast path only asks "is the byte 1?"; the generic path follows
 * the back-distance to find the header of a pointer deep inside a huge span.
 * Entries are set before a segment is handed out and cleared before it is
 * cached or unmapped. */
#include "internal.h"

_Atomic uint8_t sf_segmap[SEGMAP_CHUNKS];

void sf_segmap_mark(void *seg, size_t chunks, bool present) {
    uintptr_t first = (uintptr_t)seg >> SEG_SHIFT;
    if (first + chunks > SEGMAP_CHUNKS) return;
    for (size_t i = 0; i < chunks; i++) {
        uint8_t v = present ? (uint8_t)(i + 1 > 255 ? 255 : i + 1) : 0;
        atomic_store_explicit(&sf_segmap[first + i], v, memory_order_release);
    }
}

sf_segment_t *sf_segmap_header(const void *p) {
    uintptr_t chunk = (uintptr_t)p >> SEG_SHIFT;
    if (chunk >= SEGMAP_CHUNKS) return NULL;
    for (;;) {
        uint8_t v = atomic_load_explicit(&sf_segmap[chunk], memory_order_acquire);
        if (v == 0) return NULL;
        if (v == 1) return (sf_segment_t *)(chunk << SEG_SHIFT);
        if (chunk < (uintptr_t)(v - 1)) return NULL;
        chunk -= (uintptr_t)(v - 1);
    }
}
