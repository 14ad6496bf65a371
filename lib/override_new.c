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

/* Guard levels 2 and 3 check that delete matches new (delete of a new[]
 * block, the wrong size to sized delete: lib/guarded.c); they need to know
 * which operator allocated a block, so the operators take their own route
 * there.  The level is tested only where levels 0-1 leave their fast paths
 * (which never serve a guarded page), so those stay the same as malloc's
 * and free's (fastpath.h).  Level 2 marks new's blocks with their family
 * in the size word its malloc wrote, and delete checks and clears it: a
 * small block here and the owner's small block in level 2's own free
 * (sf_l2_free_owned_as, fastpath.h), the rest in guarded.c (sf_new_mark,
 * sf_l2_delete_ok, which also reports). */
SF_INLINE void l2_new_mark(void *p, enum sf_family family) {
    uintptr_t u = (uintptr_t)p, chunk = u >> SF_SEG_SHIFT;
    if (SF_LIKELY(p != NULL && sf_segmap_is_small_chunk(chunk))) {
        *sf_size_word(sf_small_page_desc(chunk, u), p) |= (uint32_t)family << SF_SIZE_BITS;
        return;
    }
    sf_new_mark(p, family);
}

/* Level 2's, out of line: levels 0-1 run what they ran.  align: 0, or the
 * aligned forms'. */
static SF_NOINLINE void *new_l2(size_t n, size_t align, enum sf_family family, sf_heap_t *heap) {
    /* (level 2's paths inlined, as the exported malloc and free run them) */
    void *p = align ? sf_malloc_aligned(align, n) : sf_l2_fast ? sf_malloc_l2(n) : sf_malloc_entry_slow(n, heap);
    l2_new_mark(p, family);
    return p;
}

static SF_NOINLINE void delete_l2(void *p, enum sf_family family, size_t size) {
    /* (the owner's small block, its family and size checked with the
     * canary, the mark cleared as the free is taken) */
    if (SF_LIKELY(sf_l2_fast) && sf_l2_free_owned_as(p, (uint32_t)family << SF_SIZE_BITS, size)) return;
    if (!sf_l2_delete_ok(p, family, size)) return;
    if (sf_l2_fast) sf_free_l2(p);
    else sf_free_generic(p);
}

/* Levels 2 and 3 (one comparison on levels 0-1's way out of their fast
 * paths, as when level 3 alone checked: a second one there moved their
 * fast paths' code) */
SF_INLINE void *new_guarded(size_t n, size_t align, enum sf_family family, sf_heap_t *heap) {
    return sf_guard_level >= 3 ? sf_guarded_new(n, align, family) : new_l2(n, align, family, heap);
}
SF_INLINE void delete_guarded(void *p, enum sf_family family, size_t size) {
    if (sf_guard_level >= 3) sf_guarded_delete(p, family, size);
    else delete_l2(p, family, size);
}

SF_INLINE void *new_impl(size_t n, bool nothrow, enum sf_family family) {
    sf_heap_t *heap = sf_tls_heap;
    /* sf_malloc's fast path, within its bound (entry.c: the modes that
     * change malloc, the armed profile among them, take the slow path) */
    if (SF_LIKELY(n < SF_PEEK(sf_entry_bounds.small_end))) {
        sf_page_or_list_t *page = SF_PEEK(heap->direct[(n + 15) >> 4]); /* (phase.c writes it) */
        sf_block_t *b = page->free;
        if (SF_LIKELY(b != NULL)) return sf_hand_out(heap, page, b, b->next);
    }
    void *p = SF_UNLIKELY(sf_guard_level >= 2) ? new_guarded(n, 0, family, heap) : sf_malloc_entry_slow(n, heap);
    return SF_LIKELY(p != NULL) ? p : new_failed(n, 0, nothrow);
}

SF_INLINE void *new_aligned_impl(size_t n, size_t align, bool nothrow, enum sf_family family) {
    void *p = SF_UNLIKELY(sf_guard_level >= 2) ? new_guarded(n, align, family, sf_tls_heap)
                                               : sf_malloc_aligned(align, n);
    return SF_LIKELY(p != NULL) ? p : new_failed(n, align, nothrow);
}

/* size: what the sized forms pass (0: none). */
SF_INLINE void delete_impl(void *p, enum sf_family family, size_t size) {
    sf_heap_t *heap = sf_tls_heap;
    sf_page_t *page = sf_small_page_owned_by(p, heap);
    if (SF_LIKELY(page != NULL)) { /* sf_free's fast path */
        sf_free_owned_small(heap, page, p);
        return;
    }
    if (SF_UNLIKELY(sf_guard_level >= 2)) delete_guarded(p, family, size);
    else sf_free_generic(p);
}

#define NEW(name) SEFER_EXPORT void *name
#define DEL(name) SEFER_EXPORT void name

#define OBJ SF_FAMILY_NEW
#define ARR SF_FAMILY_NEW_ARRAY

/* new, new[] (size_t) and their nothrow forms */
NEW(_Znwm)(size_t n) { return new_impl(n, false, OBJ); }
NEW(_Znam)(size_t n) { return new_impl(n, false, ARR); }
NEW(_ZnwmRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return new_impl(n, true, OBJ); }
NEW(_ZnamRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return new_impl(n, true, ARR); }
/* aligned (C++17 std::align_val_t) */
NEW(_ZnwmSt11align_val_t)(size_t n, size_t a) { return new_aligned_impl(n, a, false, OBJ); }
NEW(_ZnamSt11align_val_t)(size_t n, size_t a) { return new_aligned_impl(n, a, false, ARR); }
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t)(size_t n, size_t a, const void *nt) {
    (void)nt;
    return new_aligned_impl(n, a, true, OBJ);
}
NEW(_ZnamSt11align_val_tRKSt9nothrow_t)(size_t n, size_t a, const void *nt) {
    (void)nt;
    return new_aligned_impl(n, a, true, ARR);
}

/* delete, delete[]: plain, sized, aligned, sized+aligned, nothrow */
DEL(_ZdlPv)(void *p) { delete_impl(p, OBJ, 0); }
DEL(_ZdaPv)(void *p) { delete_impl(p, ARR, 0); }
DEL(_ZdlPvm)(void *p, size_t n) { delete_impl(p, OBJ, n); }
DEL(_ZdaPvm)(void *p, size_t n) { delete_impl(p, ARR, n); }
DEL(_ZdlPvSt11align_val_t)(void *p, size_t a) { (void)a; delete_impl(p, OBJ, 0); }
DEL(_ZdaPvSt11align_val_t)(void *p, size_t a) { (void)a; delete_impl(p, ARR, 0); }
DEL(_ZdlPvmSt11align_val_t)(void *p, size_t n, size_t a) { (void)a; delete_impl(p, OBJ, n); }
DEL(_ZdaPvmSt11align_val_t)(void *p, size_t n, size_t a) { (void)a; delete_impl(p, ARR, n); }
DEL(_ZdlPvRKSt9nothrow_t)(void *p, const void *nt) { (void)nt; delete_impl(p, OBJ, 0); }
DEL(_ZdaPvRKSt9nothrow_t)(void *p, const void *nt) { (void)nt; delete_impl(p, ARR, 0); }
DEL(_ZdlPvSt11align_val_tRKSt9nothrow_t)(void *p, size_t a, const void *nt) {
    (void)a;
    (void)nt;
    delete_impl(p, OBJ, 0);
}
DEL(_ZdaPvSt11align_val_tRKSt9nothrow_t)(void *p, size_t a, const void *nt) {
    (void)a;
    (void)nt;
    delete_impl(p, ARR, 0);
}
