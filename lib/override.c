/* override.c - the standard malloc family, exported for LD_PRELOAD and for
 * programs linked with -lsefer.  Built unless meson's `override` option is
 * off (sanitizer builds that must keep the sanitizer's own malloc). */
#include "fastpath.h"

#include <malloc.h>
#include <stdlib.h>

#pragma GCC diagnostic ignored "-Wmissing-attributes"
#define SF_ALIAS(target) __attribute__((alias(#target), visibility("default")))

/* levels 0-1's fast paths, which other modes leave at once (entry.c) */
SEFER_EXPORT SF_HOT void *malloc(size_t n) { return sf_malloc(n); }
SEFER_EXPORT SF_HOT void free(void *p) { sf_free_entry(p); }
SEFER_EXPORT void *calloc(size_t count, size_t size) { return sf_calloc(count, size); }
SEFER_EXPORT void *realloc(void *p, size_t n) { return sf_realloc(p, n); }
SEFER_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
    return sf_reallocarray(p, count, size);
}
SEFER_EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    return sf_posix_memalign(out, align, n);
}
SEFER_EXPORT void *aligned_alloc(size_t align, size_t n) { return sf_aligned_alloc(align, n); }
SEFER_EXPORT void *memalign(size_t align, size_t n) { return sf_memalign(align, n); }
SEFER_EXPORT void *valloc(size_t n) { return sf_valloc(n); }
SEFER_EXPORT void *pvalloc(size_t n) { return sf_pvalloc(n); }
SEFER_EXPORT size_t malloc_usable_size(void *p) { return sf_usable_size(p); }
SEFER_EXPORT void cfree(void *p) { sf_free(p); }
/* C23: the size and alignment are hints sefer does not need. */
SEFER_EXPORT void free_sized(void *p, size_t size) {
    (void)size;
    sf_free(p);
}
SEFER_EXPORT void free_aligned_sized(void *p, size_t align, size_t size) {
    (void)align;
    (void)size;
    sf_free(p);
}

/* glibc-internal names some programs and libraries call directly. */
void *__libc_malloc(size_t n) SF_ALIAS(malloc);
void __libc_free(void *p) SF_ALIAS(free);
void *__libc_calloc(size_t count, size_t size) SF_ALIAS(calloc);
void *__libc_realloc(void *p, size_t n) SF_ALIAS(realloc);
void *__libc_memalign(size_t align, size_t n) SF_ALIAS(memalign);
void *__libc_valloc(size_t n) SF_ALIAS(valloc);
void *__libc_pvalloc(size_t n) SF_ALIAS(pvalloc);
void __libc_cfree(void *p) SF_ALIAS(cfree);

/* Answer from sefer's own state, not glibc's idle arenas. */
SEFER_EXPORT int malloc_trim(size_t pad) {
    (void)pad;
    return sf_trim() > 0;
}

SEFER_EXPORT struct mallinfo2 mallinfo2(void) {
    struct sefer_stats st;
    sf_ensure_init();
    sf_stats_collect(&st);
    struct mallinfo2 mi = {0};
    mi.arena = st.bytes_committed;
    mi.hblks = st.segments;
    mi.hblkhd = st.bytes_reserved;
    mi.uordblks = st.bytes_in_blocks;
    mi.fordblks = st.bytes_committed > st.bytes_in_blocks ? st.bytes_committed - st.bytes_in_blocks : 0;
    mi.keepcost = st.large_cache_bytes;
    return mi;
}

static int clamp_int(size_t v) { return v > 0x7fffffff ? 0x7fffffff : (int)v; }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
SEFER_EXPORT struct mallinfo mallinfo(void) {
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo mi = {0};
    mi.arena = clamp_int(m2.arena);
    mi.hblks = clamp_int(m2.hblks);
    mi.hblkhd = clamp_int(m2.hblkhd);
    mi.uordblks = clamp_int(m2.uordblks);
    mi.fordblks = clamp_int(m2.fordblks);
    mi.keepcost = clamp_int(m2.keepcost);
    return mi;
}
#pragma GCC diagnostic pop

SEFER_EXPORT void malloc_stats(void) { sf_print_stats(); }

/* glibc tunes its own arenas with these; sefer's knobs are in sefer.h. */
SEFER_EXPORT int mallopt(int param, int value) {
    (void)param;
    (void)value;
    return 1;
}
