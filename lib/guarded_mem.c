/* guarded_mem.c - guard level 3: memcpy, memmove and memset checked against
 * the bounds of sefer's blocks (built with -Doverride=true only).
 *
 * sefer exports these three names, as it exports malloc, so a program's
 * calls (and those of the libraries it loads) come here.  At guard level 3
 * (and not under valgrind's memcheck, which checks them itself) the
 * destination range must lie inside one live block's requested bytes when
 * it starts in sefer's memory, in the style of snmalloc's guarded memcpy:
 * a copy that would run past a block's end (or start before it, in its
 * neighbour, its metadata or a guard page), or that writes into a freed
 * block or into a malloc(0), is reported before a byte is written, and
 * refused with guard.on_error = report.  Destinations outside sefer's
 * memory (the stack, globals, other mappings) are not checked.  Sources
 * are not checked: reading past a block is not what corrupts a heap.
 *
 * At levels 0-2 each is a test of one flag and a tail call of glibc's own
 * routine (sf_libc_memcpy, ...: libc_mem.c).  Calls the compiler turned
 * into the _chk forms (fortified builds, a destination of known size) go
 * to glibc directly, checked by glibc against that size.  sefer's own
 * copies and fills reach glibc the same way (see internal.h), never the
 * checked entry points. */
#define SF_DEFINES_MEM_FUNCTIONS /* (internal.h: no renaming here) */
#include "internal.h"

/* Whether the live block holding d (in a small or medium page) ends its
 * request at or after d + n. */
static bool class_block_holds(const sf_page_t *page, const uint8_t *d, size_t n) {
    if (!SF_GET(page->in_use) || d < page->block_start) return false; /* (the metadata) */
    uint64_t off = (uint64_t)(d - page->block_start);
    if (off >= sf_page_carved_bytes(page)) return false;
    uint64_t index = (uint64_t)(((unsigned __int128)off * sf_page_divmagic(page)) >> 64);
    const uint8_t *b = page->block_start + index * page->block_size;
    if (b > d) b -= page->block_size; /* (divmagic rounds up) */
    const sf_block_t *blk = (const sf_block_t *)b;
    if (blk->cookie == sf_page_cookie(page) && sf_junk_intact(page, (sf_block_t *)blk)) return false; /* free */
    uint32_t w = *sf_size_word(page, b);
    if (!sf_size_word_ok(w, page->block_size)) return false;
    size_t room = (size_t)(b + (w & SF_SIZE_MASK) - d);
    return (w & SF_SIZE_MASK) >= (size_t)(d - b) && n <= room;
}

/* Whether [d, d + n) may be written (n > 0). */
static bool may_write(const void *dst, size_t n) {
    const uint8_t *d = dst;
    if (sf_zero_holds(d)) return false;
    sf_segment_t *seg = sf_segmap_header(d);
    if (seg == NULL) return true;
    sf_page_t *page = sf_page_of(seg, d);
    if (SF_GET(page->flags) & SF_PAGE_SPAN) {
        size_t req = sf_guarded_usable(seg, page, page->block_start);
        return sf_page_used(page) != 0 && d >= page->block_start && (size_t)(d - page->block_start) <= req &&
               n <= req - (size_t)(d - page->block_start);
    }
    return class_block_holds(page, d, n);
}

/* True: go ahead.  False: reported, and refused (guard.on_error = report). */
static bool checked(const void *d, size_t n) {
    if (n == 0 || may_write(d, n)) return true;
    sf_guard_report(SF_GUARD_BOUNDS, d);
    return false;
}

/* The checked forms, apart so that the unchecked ones stay a test and a
 * tail call (no stack frame). */
SF_NOINLINE static void *memcpy_checked(void *d, const void *s, size_t n) {
    return checked(d, n) ? sf_libc_memcpy(d, s, n) : d;
}
SF_NOINLINE static void *memmove_checked(void *d, const void *s, size_t n) {
    return checked(d, n) ? sf_libc_memmove(d, s, n) : d;
}
SF_NOINLINE static void *memset_checked(void *d, int c, size_t n) {
    return checked(d, n) ? sf_libc_memset(d, c, n) : d;
}

SEFER_EXPORT void *memcpy(void *d, const void *s, size_t n) {
    if (SF_UNLIKELY(sf_mem_checked)) return memcpy_checked(d, s, n);
    return sf_libc_memcpy(d, s, n);
}

SEFER_EXPORT void *memmove(void *d, const void *s, size_t n) {
    if (SF_UNLIKELY(sf_mem_checked)) return memmove_checked(d, s, n);
    return sf_libc_memmove(d, s, n);
}

SEFER_EXPORT void *memset(void *d, int c, size_t n) {
    if (SF_UNLIKELY(sf_mem_checked)) return memset_checked(d, c, n);
    return sf_libc_memset(d, c, n);
}
