/* api.c - the prefixed API of sefer.h, for programs that link sefer. */
#include "fastpath.h"

/* levels 0-1's fast paths, which other modes leave at once (entry.c) */
SEFER_EXPORT void *sefer_malloc(size_t n) { return sf_malloc(n); }
SEFER_EXPORT void sefer_free(void *p) { sf_free_entry(p); }
SEFER_EXPORT void *sefer_calloc(size_t count, size_t size) { return sf_calloc(count, size); }
SEFER_EXPORT void *sefer_realloc(void *p, size_t n) { return sf_realloc(p, n); }
SEFER_EXPORT void *sefer_reallocarray(void *p, size_t count, size_t size) {
    return sf_reallocarray(p, count, size);
}
SEFER_EXPORT int sefer_posix_memalign(void **out, size_t align, size_t n) {
    return sf_posix_memalign(out, align, n);
}
SEFER_EXPORT void *sefer_aligned_alloc(size_t align, size_t n) { return sf_aligned_alloc(align, n); }
SEFER_EXPORT void *sefer_memalign(size_t align, size_t n) { return sf_memalign(align, n); }
SEFER_EXPORT size_t sefer_usable_size(const void *p) { return sf_usable_size(p); }
SEFER_EXPORT size_t sefer_trim(void) { return sf_trim(); }
