/* override_new.c - C++ operator new and delete, written in C under their
 * Itanium-ABI names so that libsefer.so does not depend on libstdc++.
 *
 * A failed `new` must call the installed new-handler and retry, and throw
 * std::bad_alloc when there is none.  Both come from libstdc++, which any
 * C++ program has loaded: sefer reaches them through weak references, and
 * this file is compiled with -fexceptions so the exception can unwind
 * through it.  Without libstdc++ (never the case for a C++ caller) a failed
 * new aborts. */
#include "fastpath.h"

#include <stdlib.h>

typedef void (*sf_new_handler_t)(void);
extern sf_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static void *new_failed(size_t n, size_t align, bool nothrow) {
    for (;;) {
        sf_new_handler_t handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
        if (handler == NULL) break;
        handler(); /* may throw; may free memory */
        void *p = align ? sf_malloc_aligned(align, n) : sf_malloc(n);
        if (p != NULL) return p;
    }
    if (nothrow) return NULL;
    if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
    abort();
}

SF_INLINE void *new_impl(size_t n, bool nothrow) {
    void *p = sf_malloc(n);
    return likely(p != NULL) ? p : new_failed(n, 0, nothrow);
}

SF_INLINE void *new_aligned_impl(size_t n, size_t align, bool nothrow) {
    void *p = sf_malloc_aligned(align, n);
    return likely(p != NULL) ? p : new_failed(n, align, nothrow);
}

#define NEW(name) SEFER_EXPORT void *name
#define DEL(name) SEFER_EXPORT void name

/* new, new[] (size_t) and their nothrow forms */
NEW(_Znwm)(size_t n) { return new_impl(n, false); }
NEW(_Znam)(size_t n) { return new_impl(n, false); }
NEW(_ZnwmRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return new_impl(n, true); }
NEW(_ZnamRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return new_impl(n, true); }
/* aligned (C++17 std::align_val_t) */
NEW(_ZnwmSt11align_val_t)(size_t n, size_t a) { return new_aligned_impl(n, a, false); }
NEW(_ZnamSt11align_val_t)(size_t n, size_t a) { return new_aligned_impl(n, a, false); }
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t)(size_t n, size_t a, const void *nt) {
    (void)nt;
    return new_aligned_impl(n, a, true);
}
NEW(_ZnamSt11align_val_tRKSt9nothrow_t)(size_t n, size_t a, const void *nt) {
    (void)nt;
    return new_aligned_impl(n, a, true);
}

/* delete, delete[]: plain, sized, aligned, sized+aligned, nothrow */
DEL(_ZdlPv)(void *p) { sf_free(p); }
DEL(_ZdaPv)(void *p) { sf_free(p); }
DEL(_ZdlPvm)(void *p, size_t n) { (void)n; sf_free(p); }
DEL(_ZdaPvm)(void *p, size_t n) { (void)n; sf_free(p); }
DEL(_ZdlPvSt11align_val_t)(void *p, size_t a) { (void)a; sf_free(p); }
DEL(_ZdaPvSt11align_val_t)(void *p, size_t a) { (void)a; sf_free(p); }
DEL(_ZdlPvmSt11align_val_t)(void *p, size_t n, size_t a) { (void)n; (void)a; sf_free(p); }
DEL(_ZdaPvmSt11align_val_t)(void *p, size_t n, size_t a) { (void)n; (void)a; sf_free(p); }
DEL(_ZdlPvRKSt9nothrow_t)(void *p, const void *nt) { (void)nt; sf_free(p); }
DEL(_ZdaPvRKSt9nothrow_t)(void *p, const void *nt) { (void)nt; sf_free(p); }
DEL(_ZdlPvSt11align_val_tRKSt9nothrow_t)(void *p, size_t a, const void *nt) {
    (void)a;
    (void)nt;
    sf_free(p);
}
DEL(_ZdaPvSt11align_val_tRKSt9nothrow_t)(void *p, size_t a, const void *nt) {
    (void)a;
    (void)nt;
    sf_free(p);
}
