/* track.c - running under valgrind: memcheck sees sefer's blocks.
 *
 * Memcheck replaces every malloc it finds, sefer's included, unless told
 * not to (--soname-synonyms=somalloc=nouserintercepts); then sefer's own
 * malloc runs and memcheck sees nothing but its mappings: no leak report,
 * no "invalid read" in a freed block.  When sefer starts under memcheck
 * (checked once at initialisation; other valgrind tools are left alone) it
 * switches to tracked mode:
 *
 *   - every page is taken off the fast paths (like guard level 3's), so
 *     every allocation and free goes through the functions below;
 *   - each block handed out is announced with VALGRIND_MALLOCLIKE_BLOCK
 *     (its requested size: a read one byte past it is reported), each free
 *     with VALGRIND_FREELIKE_BLOCK (memcheck reports double and invalid
 *     frees itself, with the program's stack, before sefer's own checks);
 *   - a page's memory is marked no-access when it is given to a size
 *     class, so memcheck's leak search does not scan free blocks and
 *     sefer's links in them;
 *   - sefer's own work on freed memory (free-list links, cookies, junk) is
 *     done with error reporting off for the calling thread, so only the
 *     program's accesses are reported;
 *   - realloc always moves the block (the old one is freed through here)
 *     and copies what memcheck holds addressable: the old request.
 *
 * Nothing here runs outside valgrind: the fast paths never test for it
 * (pages are simply not on them), and the client requests are a few
 * no-op instructions natively.  docs/design.md ("Under valgrind"). */
#include "internal.h"

#if defined(SEFER_HAVE_VALGRIND)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_MALLOCLIKE_BLOCK(p, n, rz, zeroed) ((void)(p), (void)(n))
#define VALGRIND_FREELIKE_BLOCK(p, rz) ((void)(p))
#define VALGRIND_MAKE_MEM_NOACCESS(p, n) ((void)(p), (void)(n))
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#define VALGRIND_CHECK_MEM_IS_ADDRESSABLE(p, n) ((void)(p), (void)(n), 0)
#define VALGRIND_DISABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_ENABLE_ERROR_REPORTING ((void)0)
#endif

bool sf_tracked;

/* Whether the valgrind tool is memcheck: only memcheck keeps addressability,
 * so a byte made no-access reads back as such; under callgrind, cachegrind
 * and the rest both requests do nothing (and sefer must run its real fast
 * paths, which those tools are there to measure). */
static bool under_memcheck(void) {
    if (!RUNNING_ON_VALGRIND) return false;
    static char probe;
    VALGRIND_DISABLE_ERROR_REPORTING;
    VALGRIND_MAKE_MEM_NOACCESS(&probe, 1);
    bool memcheck = VALGRIND_CHECK_MEM_IS_ADDRESSABLE(&probe, 1) != 0;
    VALGRIND_MAKE_MEM_DEFINED(&probe, 1);
    VALGRIND_ENABLE_ERROR_REPORTING;
    return memcheck;
}

/* valgrind.track = false keeps the untracked behaviour under memcheck too. */
void sf_track_init(void) {
    sf_tracked = sf_knob(SF_KNOB_VALGRIND_TRACK) != 0 && under_memcheck();
    if (sf_tracked) __atomic_fetch_or(&sf_generic_mode, SF_MODE_TRACKED, __ATOMIC_RELAXED);
}

void sf_track_quiet_begin(void) {
    if (sf_tracked) VALGRIND_DISABLE_ERROR_REPORTING;
}

void sf_track_quiet_end(void) {
    if (sf_tracked) VALGRIND_ENABLE_ERROR_REPORTING;
}

void *sf_tracked_malloc(size_t n, size_t align) {
    VALGRIND_DISABLE_ERROR_REPORTING;
    void *p = align > 16 ? sf_malloc_aligned_slow(align, n) : sf_malloc_slow(n, sf_tls_heap);
    VALGRIND_ENABLE_ERROR_REPORTING;
    if (p != NULL) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, 0);
    return p;
}

void sf_tracked_free(void *p) {
    if (p == NULL) return;
    VALGRIND_FREELIKE_BLOCK(p, 0);
    VALGRIND_DISABLE_ERROR_REPORTING;
    sf_free_tracked_tail(p); /* (counted in a phase by the caller) */
    VALGRIND_ENABLE_ERROR_REPORTING;
}

/* How much of the block at p (usable bytes, of which the program asked
 * for a prefix) memcheck holds addressable: the request, for realloc's
 * copy. */
size_t sf_track_usable(const void *p, size_t usable) {
    VALGRIND_DISABLE_ERROR_REPORTING;
    uintptr_t bad = (uintptr_t)VALGRIND_CHECK_MEM_IS_ADDRESSABLE(p, usable);
    VALGRIND_ENABLE_ERROR_REPORTING;
    return bad == 0 ? usable : (size_t)(bad - (uintptr_t)p);
}

/* A fresh span's memory is zero: calloc skips its memset, so tell memcheck. */
void sf_track_zeroed(void *p, size_t n) { VALGRIND_MAKE_MEM_DEFINED(p, n); }

/* A segment's header just written: accessible, except the two fields of
 * each page that point at a block's first byte (page_start, block_start),
 * which memcheck's leak search would otherwise take for the program's own
 * pointers (every page's first block, and every large block, would look
 * reachable).  Only sefer reads them, with reporting off; writes to them
 * leave them no-access, so this holds for the segment's life. */
void sf_track_segment_header(sf_segment_t *seg) {
    VALGRIND_MAKE_MEM_DEFINED(seg, sizeof *seg + seg->page_count * sizeof(sf_page_t));
    for (unsigned i = 0; i < seg->page_count; i++) {
        VALGRIND_MAKE_MEM_NOACCESS(&seg->pages[i].page_start, sizeof seg->pages[i].page_start);
        VALGRIND_MAKE_MEM_NOACCESS(&seg->pages[i].block_start, sizeof seg->pages[i].block_start);
    }
}

/* A page just given to a size class: its blocks are not the program's. */
void sf_track_page_blocks(sf_page_t *page) {
    VALGRIND_MAKE_MEM_NOACCESS(page->page_start, page->page_bytes);
}
