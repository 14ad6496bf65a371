/* medium_shed.c - freed medium blocks give their memory back before a heap
 * touches fresh memory for another.
 *
 * A medium page (1 MiB) carves one block at a time and never uncarves, so
 * each medium class keeps resident the most blocks it ever had out at
 * once, freed or not.  A program whose medium sizes come in waves (a
 * compiler: 38 blocks of 48 KiB at one point, 94 of 64 KiB at another)
 * then holds the sum of its classes' peaks where a coalescing allocator
 * holds about the peak of the sum: gcc's cc1 held 6.9 MiB of free medium
 * blocks at its peak RSS (docs/design.md, "Growth").
 *
 * So when a heap carves a medium block (memory it has not touched before,
 * most likely), it first gives back the interior OS pages of as many bytes
 * of its other free medium blocks: the pages of a block past the one that
 * holds its link and cookie, and up to its last whole page.  Those pages
 * read as zero afterwards and fault in again if the block is handed out;
 * nothing else changes: the block stays carved, on its free list, with its
 * header intact, so every check of a free (double free, invalid pointer)
 * sees it as before.  The block each class hands out next is left alone,
 * and a mark in the block's third word says it was shed already, so no
 * block costs a system call twice.  A block handed out
 * and written keeps a stale mark only if its owner never wrote that word;
 * it is then not shed again, which costs memory, never correctness.
 *
 * sefer_trim sheds every free medium block of the calling thread's heap,
 * the list heads too, whatever the decommit policy.
 *
 * Only when the carving page's memory was not resident when its use began
 * (page.c asks: a page taken back resident carves over its old blocks),
 * at guard levels 0-1 (levels 2-3 check what a free block holds; nor on
 * the pages valgrind's memcheck tracks), where the decommit policy gives
 * memory back (delayed, adaptive), and with memory.thp = never (a 4 KiB
 * madvise splits a huge page).  The bytes counted are those advised: an
 * interior page the program never wrote was not resident to begin with. */
#include "internal.h"

#include <limits.h>

/* Links followed per carve at most: a heap with thousands of free medium
 * blocks, all shed already, must not walk them on every carve. */
#define SHED_VISIT_MAX 64u

/* The shed mark, in a free block's third word (medium blocks are at least
 * 10 KiB and start on a line, so it lies in the page that keeps the
 * block's header). */
static uintptr_t *shed_mark(sf_block_t *b) { return (uintptr_t *)b + 2; }
static uintptr_t shed_mark_value(const sf_block_t *b) { return (uintptr_t)0x5e3d5a1b0c4d9e27ull ^ (uintptr_t)b; }

/* Set once the kernel refused a shed (MADV_DONTNEED fails on locked pages,
 * under mlockall): no carve asks again. */
static _Atomic bool shed_refused;

/* Whether free medium blocks may be shed at all (sefer_trim asks this;
 * growth also asks the decommit policy).  Only with memory.thp = never:
 * under madvise, or system with the system's THP at always, a segment may
 * sit on huge pages, which a 4 KiB madvise splits. */
static bool shedding_possible(void) {
    return sf_guard_level < 2 && sf_knob(SF_KNOB_MEMORY_THP) == SF_THP_NEVER &&
           !atomic_load_explicit(&shed_refused, memory_order_relaxed);
}

static bool shedding_applies(void) {
    uint64_t policy = sf_knob(SF_KNOB_DECOMMIT_POLICY);
    return shedding_possible() && (policy == SF_DECOMMIT_DELAYED || policy == SF_DECOMMIT_ADAPTIVE);
}

/* Gives back the whole OS pages of free block `b` past its first; the
 * bytes it gave back (0 if it had none, was shed already, or the kernel
 * refused).  The lists' walks below leave guarded pages alone (guard level
 * 2 and above, or under valgrind's memcheck, which must not see sefer read
 * a free block's words). */
static size_t shed_block(const sf_page_t *page, sf_block_t *b) {
    if (*shed_mark(b) == shed_mark_value(b)) return 0;
    uintptr_t lo = sf_align_up((uintptr_t)b + sizeof(uintptr_t) * 3, SF_OS_PAGE);
    uintptr_t hi = ((uintptr_t)b + page->block_size) & ~(uintptr_t)(SF_OS_PAGE - 1);
    if (hi <= lo) return 0;
    /* (not sf_os_decommit: nothing relies on these pages reading as zero,
     * so a refusal needs no fallback) */
    if (!sf_os_shed((void *)lo, hi - lo)) {
        atomic_store_explicit(&shed_refused, true, memory_order_relaxed);
        return 0;
    }
    *shed_mark(b) = shed_mark_value(b);
    return hi - lo;
}

/* Whether `b`, met on one of the page's free lists, is one of its free
 * blocks: a carved block's start with the free cookie.  A write after free
 * into a block's link (which levels 0-1 do not check until the block is
 * handed out) must not send a shed to an address of its choosing: the
 * walk stops there. */
static bool free_block_of(const sf_page_t *page, const sf_block_t *b) {
    return sf_page_is_block_start(page, b) && b->cookie == sf_page_cookie(page);
}

/* Sheds the blocks of `list` (past its first if `keep_first`), until
 * `want` bytes are shed or `*budget` links followed (each link costs one). */
static size_t shed_list(const sf_page_t *page, sf_block_t *list, bool keep_first, size_t want, unsigned *budget) {
    size_t shed = 0;
    if (list == NULL || (page->flags & SF_PAGE_GUARDED)) return 0;
    for (sf_block_t *b = keep_first ? sf_link_decode(page, list) : list;
         b != NULL && shed < want && *budget > 0; b = sf_link_decode(page, b)) {
        --*budget;
        if (!free_block_of(page, b)) break;
        shed += shed_block(page, b);
    }
    return shed;
}

size_t sf_medium_shed_all(sf_heap_t *heap) {
    if (!shedding_possible()) return 0;
    size_t shed = 0;
    unsigned budget = UINT_MAX; /* (every block, each list's first too) */
    for (unsigned c = SF_MEDIUM_CLASS_MIN; c < SF_CLASS_COUNT; c++)
        for (sf_page_t *page = heap->queues[c].first; page != NULL; page = page->next)
            shed += shed_list(page, page->free, false, SIZE_MAX, &budget) +
                    shed_list(page, page->local_free, false, SIZE_MAX, &budget);
    if (shed != 0) sf_stat_add(&sf_gstats.decommitted_total, shed);
    return shed;
}

void sf_medium_shed(sf_heap_t *heap, const sf_page_t *carving, size_t bytes) {
    if (!shedding_applies()) return;
    size_t shed = 0;
    unsigned budget = SHED_VISIT_MAX;
    /* from the class after the last one looked at, round the medium
     * classes, so no class's blocks are always the first to go */
    unsigned n = SF_CLASS_COUNT - SF_MEDIUM_CLASS_MIN;
    unsigned i = 0;
    for (; i < n && shed < bytes && budget > 0; i++) {
        unsigned c = SF_MEDIUM_CLASS_MIN + (heap->shed_class + i) % n;
        for (sf_page_t *page = heap->queues[c].first; page != NULL && shed < bytes; page = page->next) {
            if (page == carving) continue;
            /* the one block kept: the class's next (its first page's
             * free list's head, or once that is empty, local_free's) */
            bool current = page == heap->queues[c].first;
            shed += shed_list(page, page->free, current, bytes - shed, &budget);
            if (shed < bytes)
                shed += shed_list(page, page->local_free, current && page->free == NULL, bytes - shed, &budget);
        }
    }
    /* the next carve starts past the last class looked at, so a class of
     * blocks all shed already does not take every walk's budget */
    heap->shed_class = (uint8_t)((heap->shed_class + (i ? i : 1)) % n);
    if (shed != 0) {
        sf_stat_add(&sf_gstats.growth_shed, shed);
        sf_stat_add(&sf_gstats.decommitted_total, shed);
    }
}
