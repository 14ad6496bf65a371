/* os.c - the only file that talks to the kernel about memory.
 *
 * Reservations are plain private anonymous mappings: Linux commits a page on
 * first touch, so "commit" costs nothing here and "decommit" is
 * madvise(MADV_DONTNEED), which drops the pages at once (RSS falls) and makes
 * them read back as zero. */
#include "internal.h"

#include <sys/mman.h>
#include <time.h>

static void *map_raw(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    sf_stat_add(&sf_gstats.os_maps, 1);
    return p;
}

/* Maps size bytes aligned to align (a power of two >= OS_PAGE).  Tries an
 * exact mapping first (the kernel often places consecutive mappings
 * contiguously, so this is usually aligned when the previous one was);
 * otherwise over-maps and trims both ends. */
void *sf_os_map_aligned(size_t size, size_t align) {
    void *p = map_raw(size);
    if (p == NULL) return NULL;
    if (((uintptr_t)p & (align - 1)) == 0) return p;
    munmap(p, size);
    if (size + align < size) return NULL;
    uint8_t *raw = map_raw(size + align);
    if (raw == NULL) return NULL;
    uint8_t *aligned = (uint8_t *)sf_align_up((uintptr_t)raw, align);
    size_t head = (size_t)(aligned - raw), tail = align - head;
    if (head) munmap(raw, head);
    if (tail) munmap(aligned + size, tail);
    return aligned;
}

void *sf_os_map_plain(size_t size) { return map_raw(sf_align_up(size, OS_PAGE)); }

void sf_os_unmap(void *p, size_t size) { munmap(p, size); }

void sf_os_decommit(void *p, size_t size) {
    if (size == 0) return;
    madvise(p, size, MADV_DONTNEED);
}

/* Guard pages (guard level >= 2): no access, or back to read-write. */
void sf_os_protect(void *p, size_t size, bool accessible) {
    mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
}

uint64_t sf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
