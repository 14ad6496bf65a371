/* libc_mem.c - glibc's memcpy, memmove and memset, for sefer's own use
 * where sefer exports those names (-Doverride=true; guarded_mem.c).
 *
 * They are reached through pointers (sf_libc_memcpy, ...), set to glibc's
 * routines by sf_mem_resolve with dlsym(RTLD_NEXT) when the library starts
 * (glibc's memcpy cannot be named from here: the exported one would
 * answer); until then, and in a program linked statically, they point to
 * glibc's _chk forms (__memcpy_chk, ...) with no size limit, entries glibc
 * exports that sefer does not replace.  internal.h routes every call in
 * sefer to them. */
#define SF_DEFINES_MEM_FUNCTIONS /* (internal.h: no renaming here) */
#include "internal.h"

#include <dlfcn.h>

extern void *__memcpy_chk(void *d, const void *s, size_t n, size_t dlen);
extern void *__memmove_chk(void *d, const void *s, size_t n, size_t dlen);
extern void *__memset_chk(void *d, int c, size_t n, size_t dlen);

/* "No limit" for the _chk forms, hidden from the compiler: it would turn
 * a call with a constant (size_t)-1 back into memcpy, that is, into us. */
static inline size_t no_limit(void) {
    size_t v = SIZE_MAX;
    __asm__("" : "+r"(v));
    return v;
}

SF_HIDDEN void *sf_raw_memcpy(void *d, const void *s, size_t n) { return __memcpy_chk(d, s, n, no_limit()); }
SF_HIDDEN void *sf_raw_memmove(void *d, const void *s, size_t n) { return __memmove_chk(d, s, n, no_limit()); }
SF_HIDDEN void *sf_raw_memset(void *d, int c, size_t n) { return __memset_chk(d, c, n, no_limit()); }

void *(*sf_libc_memcpy)(void *, const void *, size_t) = sf_raw_memcpy;
void *(*sf_libc_memmove)(void *, const void *, size_t) = sf_raw_memmove;
void *(*sf_libc_memset)(void *, int, size_t) = sf_raw_memset;

/* glibc's own routines, from the library constructor (init.c): after
 * relocation, with sefer initialised (should dlsym allocate, malloc works). */
void sf_mem_resolve(void) {
    void *cpy = dlsym(RTLD_NEXT, "memcpy"), *mov = dlsym(RTLD_NEXT, "memmove"), *set = dlsym(RTLD_NEXT, "memset");
    if (cpy == NULL || mov == NULL || set == NULL) return; /* (static: keep the _chk forms) */
    sf_libc_memcpy = (void *(*)(void *, const void *, size_t))cpy;
    sf_libc_memmove = (void *(*)(void *, const void *, size_t))mov;
    sf_libc_memset = (void *(*)(void *, int, size_t))set;
}
