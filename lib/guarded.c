/* guarded.c - guard levels 2 and 3: the checked allocation paths.
 *
 * At guard level 2 the fast paths of fastpath.h (sf_malloc_l2, sf_free_l2)
 * serve the common case and everything else comes here and through the
 * generic paths; at level 3 every malloc and free does (its pages are on
 * no fast path).  On top of level 1:
 *
 *   level 2  a canary in the last 8 bytes of each small or medium block
 *            (the block's address XOR its page's canary key), written on
 *            malloc and checked on free: a write past the usable size is
 *            found, reported and the free refused; spans keep the size
 *            asked for in their page and the canary right after it;
 *            free-list links XOR-ed with a per-page secret and checked to
 *            stay inside their page when followed (page.c, fastpath.h);
 *            guard pages after each segment's metadata and at its end, and
 *            around a span's block (segment.c).
 *   level 3  the canary moves right after the requested bytes, with the
 *            request size in the block's last 4 bytes, so even a 1-byte
 *            overflow into the rounding slack is found;
 *            freed small and medium blocks filled with junk, checked when the
 *            block is handed out again, or when its page empties first (a
 *            write after free is reported and the block never reused);
 *            a quarantine: freed blocks wait in a per-heap FIFO of at most
 *            guard.quarantine bytes before they can be reused;
 *            cross-thread double frees: the free cookie is set with an atomic
 *            exchange by whichever thread frees, so a second free from any
 *            thread finds it set.
 *
 * Canaries differ per block and cannot be computed from a free-list link
 * (the link key and the canary key come from independent secrets). */
#include "fastpath.h"

#include <sys/syscall.h>
#include <unistd.h>

bool sf_mem_checked;
uintptr_t sf_guard_secret, sf_canary_secret;

/* Two independent random secrets (guard level >= 2): one encodes free-list
 * links, one keys the canaries, so a link read after free (whose target is
 * guessable) does not reveal what a canary must hold. */
void sf_guard_init(void) {
    uintptr_t s[2] = {0, 0};
    if (syscall(SYS_getrandom, s, sizeof s, 1 /* GRND_NONBLOCK */) != (long)sizeof s) {
        for (int i = 0; i < 2; i++) {
            unsigned lo, hi;
            __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
            s[i] ^= ((uintptr_t)hi << 32 | lo) ^ (uintptr_t)&s ^ (0x9e3779b97f4a7c15ull * (uintptr_t)(i + 1));
        }
    }
    sf_guard_secret = s[0] | 1;
    sf_canary_secret = s[1] | 1; /* (odd: a canary's first byte is odd, internal.h) */
}

static bool is_span(const sf_page_t *page) { return SF_GET(page->flags) & SF_PAGE_SPAN; }

/* The canary right after a block's request: address XOR the page's key
 * (small and medium blocks) or XOR a key made from the span's address. */
static uint64_t canary_as(const sf_segment_t *seg, const sf_page_t *page, const void *p, bool span) {
    uintptr_t key = span ? sf_canary_secret ^ (uintptr_t)seg : page->canary_key;
    return (uint64_t)((uintptr_t)p ^ key); /* (bit 0 set: see sf_canary_value) */
}
static uint64_t canary_of(const sf_segment_t *seg, const sf_page_t *page, const void *p) {
    return canary_as(seg, page, p, is_span(page));
}

/* Spans keep the request size in page->requested, and how the block was
 * allocated (malloc, new, new[]) in its top bits. */
#define SPAN_FAMILY_SHIFT 62
static size_t span_requested(const sf_page_t *page) {
    return page->requested & (((size_t)1 << SPAN_FAMILY_SHIFT) - 1);
}

/* (span: whether page is a span's, told by the caller, which knows) */
static void set_tail(sf_segment_t *seg, sf_page_t *page, void *p, size_t n, bool span) {
    if (span) page->requested = n;
    else *sf_size_word(page, p) = (uint32_t)n;
    uint64_t canary = canary_as(seg, page, p, span);
    memcpy((uint8_t *)p + n, &canary, sizeof canary);
}

/* A block of class c: sf_alloc_class's, or, for a thread with a heap of
 * its own while the profile is unarmed, its class path at once (what
 * sf_alloc_class would call after its questions; level 3's every malloc
 * comes here), refused as sf_alloc_class refuses (not asked twice: a
 * memory.limit refusal then purged twice and counted two refusals). */
static void *class_block(unsigned c) {
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind != SF_HEAP_REAL || heap == &sf_heap_fallback || sf_prof_is_armed()) return sf_alloc_class(c);
    void *p = sf_page_malloc_class(heap, c);
    return SF_LIKELY(p != NULL) ? p : sf_alloc_class_refused(c);
}

void *sf_guarded_malloc(size_t n, size_t align) {
    if (n == 0 && align <= 16 && sf_guard_level >= 3) {
        void *z = sf_zero_alloc();
        if (z != NULL) return z;
    }
    if (n > PTRDIFF_MAX - 2 * SF_GUARD_TAIL) {
        sf_event_enomem(atomic_fetch_add_explicit(&sf_gstats.enomem, 1, memory_order_relaxed) + 1, n);
        errno = ENOMEM;
        return NULL;
    }
    size_t need = n + SF_GUARD_TAIL; /* (a span's tail is only the canary, and fits) */
    if (need < SF_GUARD_MIN_BLOCK) need = SF_GUARD_MIN_BLOCK;
    unsigned c = align <= 16 ? (need <= SF_MEDIUM_MAX ? sf_class_of(need) : 0)
                             : sf_class_for_aligned(need, align);
    void *p = c != 0 ? class_block(c) : sf_alloc_span(need, align <= 16 ? 0 : align);
    if (p == NULL) return NULL;
    if (c != 0 && sf_guard_level >= 3) ((sf_block_t *)p)->next = NULL; /* zero from end to end */
    /* (a class's block: its segment's header is where the mask says) */
    sf_segment_t *seg = c != 0 ? sf_segment_of(p) : sf_segmap_header(p);
    set_tail(seg, sf_page_of(seg, p), p, n, c == 0);
    return p;
}

/* What the caller may use of a live block: the request size, SIZE_MAX if
 * its size word is not one (overwritten). */
static size_t requested_size_as(const sf_page_t *page, void *p, bool span) {
    if (span) return span_requested(page);
    uint32_t w = *sf_size_word(page, p);
    return sf_size_word_ok(w, page->block_size) ? (w & SF_SIZE_MASK) : SIZE_MAX;
}
static size_t requested_size(const sf_page_t *page, void *p) { return requested_size_as(page, p, is_span(page)); }

size_t sf_guarded_usable(sf_segment_t *seg, sf_page_t *page, const void *p) {
    (void)seg;
    size_t n = requested_size(page, (void *)p);
    return n == SIZE_MAX ? 0 : n;
}

/* Whether a live block's tail is as malloc left it: a size word that can
 * be one and the canary after the request.  For the exit sweep (check.c),
 * which may meet a block another thread freed a moment ago: canary bytes
 * inside the first 8 (a request under 8 bytes) are not compared, since a
 * remote free's link is written there. */
bool sf_guarded_tail_intact(const sf_segment_t *seg, const sf_page_t *page, const void *p) {
    size_t n = requested_size(page, (void *)p);
    if (n == SIZE_MAX) return false;
    uint64_t want = canary_of(seg, page, p), got = 0;
    memcpy(&got, (const uint8_t *)p + n, sizeof got);
    if (!is_span(page) && n < sizeof(sf_block_t *)) {
        if (n == 0) return true;
        uint64_t keep = ~(uint64_t)0 << (8 * (sizeof(sf_block_t *) - n)); /* bytes at offset >= 8 */
        return (want & keep) == (got & keep);
    }
    return want == got;
}

/* The fill stops short of the block's size word: no request reaches it
 * (the program never sees it), and the owner may be reading it as the word
 * of the block before its neighbour (block_before_intact) while another
 * thread frees this block. */
void sf_junk_fill(sf_page_t *page, sf_block_t *b) {
    memset((uint8_t *)b + sizeof *b, SF_JUNK, page->block_size - sizeof *b - sizeof(uint32_t));
}

bool sf_junk_intact(const sf_page_t *page, const sf_block_t *b) {
    /* Fills of 2 KiB and more: 16-byte words OR-ed, four a step, and one
     * test at the end (a dirty block is rare, and still found): only the
     * block is read.  Below: memcmp against zeros, whose call costs less
     * there than such a loop's set-up (two tries, 8- and 16-byte words:
     * 64-byte blocks 22 and -2 instructions a pair, 200-byte +7).  memcmp
     * read a page of zeros beside every medium block: by hand, level 3,
     * `bench/fastpath mixed -k 8` pinned, 3 interleaved pairs, ns a block:
     * 2-8 KiB 237-241 -> 220-228, 8-64 KiB 1359-1413 -> 1200-1247, 64-256
     * KiB 7827-8244 -> 7560-8292.  From 1 KiB, 16-2048 B bursts ran
     * 0.964x (bench/ab, 0127856): memcmp is the faster below 2 KiB.  (A
     * loop of 8-byte words with a branch each ran the medium blocks at
     * about half memcmp's speed.) */
    static const uint8_t zeros[2048];
    _Static_assert(SF_JUNK == 0, "the fill is zero");
    _Static_assert(SF_GUARD_MIN_BLOCK > sizeof(sf_block_t) + sizeof(uint32_t), "a guarded block has a fill");
    const uint8_t *q = (const uint8_t *)b + sizeof *b;
    size_t left = page->block_size - sizeof *b - sizeof(uint32_t);
    if (left >= sizeof zeros) {
        typedef uint64_t v2 __attribute__((vector_size(16)));
        const uint8_t *end = q + left;
        v2 any = {0, 0}, w0, w1, w2, w3;
        for (; q + 4 * sizeof w0 <= end; q += 4 * sizeof w0) {
            memcpy(&w0, q, sizeof w0);
            memcpy(&w1, q + sizeof w0, sizeof w0);
            memcpy(&w2, q + 2 * sizeof w0, sizeof w0);
            memcpy(&w3, q + 3 * sizeof w0, sizeof w0);
            any |= (w0 | w1) | (w2 | w3);
        }
        for (; q + sizeof w0 <= end; q += sizeof w0) {
            memcpy(&w0, q, sizeof w0);
            any |= w0;
        }
        memcpy(&w0, end - sizeof w0, sizeof w0); /* (the last bytes, overlapping) */
        any |= w0;
        return (any[0] | any[1]) == 0;
    }
    return memcmp(q, zeros, left) == 0;
}

/* The block before p in its page (if any) must end with a size word: a
 * write before p (an underflow) lands there first.  Read by the page's
 * owner only, the one thread that writes size words (on allocation): a
 * thread freeing another's block would read it while the owner hands that
 * neighbour out.  An underflow freed from another thread is found when the
 * block before is freed, whose own word it overwrote. */
static bool block_before_intact(const sf_page_t *page, const void *p) {
    if ((const uint8_t *)p == page->block_start) return true;
    return sf_size_word_ok(((const uint32_t *)p)[-1], page->block_size);
}

/* Checks a block being freed (already known to be a live block start): its
 * size word and canary, the size word of the block before it, and at level
 * 3 marks it free with an atomic exchange (a second free from any thread
 * finds the mark) and fills it with zeros.  false: reported and the free
 * must be refused. */
bool sf_guarded_free_ok(sf_segment_t *seg, sf_page_t *page, void *p, bool owner) {
    bool span = is_span(page);
    sf_block_t *b = p;
    /* level 3, another thread's block: already marked free means freed
     * before (its zero fill would also fail the canary: say what it is) */
    if (sf_guard_level >= 3 && !owner && !span &&
        __atomic_load_n(&b->cookie, __ATOMIC_ACQUIRE) == sf_page_cookie(page)) {
        sf_guard_report(SF_GUARD_DOUBLE, p);
        return false;
    }
    size_t n = requested_size_as(page, p, span);
    uint64_t canary = 0;
    if (n != SIZE_MAX) memcpy(&canary, (uint8_t *)p + n, sizeof canary);
    if (n == SIZE_MAX || canary != canary_as(seg, page, p, span) || (!span && owner && !block_before_intact(page, p))) {
        sf_guard_report(SF_GUARD_OVERFLOW, p);
        return false;
    }
    if (sf_guard_level < 3 || span) return true;
    if (!owner) { /* two threads freeing at once: only one wins the exchange */
        uintptr_t old = __atomic_exchange_n(&b->cookie, sf_page_cookie(page), __ATOMIC_ACQ_REL);
        if (old == sf_page_cookie(page)) {
            sf_guard_report(SF_GUARD_DOUBLE, p);
            return false;
        }
    }
    sf_junk_fill(page, b);
    return true;
}

/* Level 3: a page whose blocks are all free is about to go back to its
 * segment (page.c, page_release), where carving would fill them again.
 * Since its last fill a block was read only if it was handed out again
 * (page_pop), so this is the allocator's last look at what a write after
 * free left there: every carved block's free mark, zero fill and size word.
 * True: all clean, the page may go.  Otherwise each dirty block is reported
 * and, as page_pop does with one, never reused: the page stays, its clean
 * blocks become its free list and the dirty ones stay counted in use (with
 * guard.on_error = report the program goes on, and a stale pointer must not
 * reach memory carved for a new block).  (A block page_pop found dirty
 * stays counted in use, so it is never on an empty page.) */
bool sf_guarded_check_empty_page(sf_page_t *page) {
    uint32_t dirty = 0;
    sf_block_t *clean = NULL;
    for (uint32_t i = page->capacity; i-- > 0;) {
        sf_block_t *b = (sf_block_t *)(page->block_start + (size_t)i * page->block_size);
        enum sf_guard_kind fault = sf_guarded_freed_fault(page, b);
        if (fault != SF_GUARD_KINDS) {
            sf_guard_report(fault, b);
            dirty++;
        } else {
            sf_link_set(page, b, clean);
            clean = b;
        }
    }
    if (dirty == 0) return true;
    /* (in address order: after a finding, order is the least concern) */
    page->free = clean;
    page->local_free = NULL;
    SF_SET(page->used, (page->used & SF_USED_BIAS) | dirty); /* (a class's current page keeps its bias) */
    return false;
}

/* ---- level 3: no predictable order ------------------------------------------- */

/* A thread's random stream (xorshift64*), seeded from the guard secret and
 * the thread's stack address: unpredictable without reading the process. */
static __thread uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t x = rng_state;
    if (x == 0) x = sf_guard_secret ^ (uintptr_t)&x ^ 0x2545f4914f6cdd1dull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* order[0..n) := a random permutation of 0..n-1 (the order freshly carved
 * blocks are handed out in). */
void sf_guarded_shuffle(uint16_t *order, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) order[i] = (uint16_t)i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(rng_next() % i);
        uint16_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* ---- quarantine (levels 2-3) ------------------------------------------------ */

/* Level 3 holds freed blocks back in a FIFO of their addresses: a ring in
 * memory of the heap's own (heap->qring), not a list threaded through the
 * blocks.  Threaded, each release followed a link the program could have
 * written after free, and looked it up in the segment map before trusting
 * it: about 85 instructions a free.  A held block keeps its free mark and
 * a NULL first word, both checked as it leaves, and the first word of the
 * newest again at the next free (a write after free into those 16 bytes,
 * which the zero fill does not cover, is found there; one further in when
 * the block is handed out again, page_pop, or its page empties first).
 * The ring is mapped at the heap's first level-3 free with QRING_MIN
 * entries and doubles whenever it is full while the heap holds fewer bytes
 * than guard.quarantine, up to QRING_MAX (past which the oldest block
 * leaves whatever the bytes): 32-byte blocks at the default 256 KiB take
 * 8192 entries, 64 KiB.  It stays with the heap slot. */
#define QRING_MIN 512u
#define QRING_MAX (1u << 21)

/* The entry i places after the oldest. */
static sf_block_t **qring_at(const sf_heap_t *heap, size_t i) {
    return &heap->qring[(heap->qring_first + i) & (heap->qring_cap - 1)];
}

/* Twice the entries (QRING_MIN the first time), the held ones kept at
 * their places from qring_first.  False: at QRING_MAX already, or no
 * memory. */
static bool qring_grow(sf_heap_t *heap) {
    size_t old_cap = heap->qring_cap, cap = old_cap ? old_cap * 2 : QRING_MIN;
    if (cap > QRING_MAX) return false;
    sf_block_t **fresh = sf_os_map_plain(cap * sizeof *fresh), **old = heap->qring;
    if (fresh == NULL) return false;
    /* The entries where both the old size and the new one find them
     * (positions as they were, and those past the old end again at
     * first + i), so that each store below leaves a ring a fork's child
     * can read: the pointer first, then the size; qring_first stays. */
    for (size_t i = 0; i < old_cap; i++) fresh[i] = old[i];
    for (size_t i = 0; i < heap->quarantine_count; i++)
        fresh[(heap->qring_first + i) & (cap - 1)] = *qring_at(heap, i);
    heap->qring = fresh;
    heap->qring_cap = (uint32_t)cap;
    if (old != NULL) {
        sf_os_unmap(old, old_cap * sizeof *fresh);
        sf_stat_sub(&sf_gstats.metadata, old_cap * sizeof *fresh);
    }
    sf_stat_add(&sf_gstats.metadata, cap * sizeof *fresh);
    return true;
}

/* b, of page, leaves the quarantine (its caller uncounts it): onto its
 * page's free list if its first 16 bytes are as its free left them, else
 * reported as a write after free and never reused (it stays counted in
 * use).  Its zero fill is read once, not here: when the block would be
 * handed out again (page.c, page_pop), or when its page empties first
 * (sf_guarded_check_empty_page); read here as well, the fill of every
 * reused block was read twice, a third of level 3's time on blocks of
 * 64-256 KiB. */
static void quarantine_release_on(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    if (SF_UNLIKELY(b->next != NULL || b->cookie != sf_page_cookie(page))) {
        sf_guard_report(SF_GUARD_USE_AFTER_FREE, b);
        return;
    }
    /* Level 3 has no fast path: its every malloc pops the class's page's
     * free list (sf_page_malloc_class), so the block goes there, where on
     * local_free each malloc after a release refilled the page through the
     * whole slow path (16-256 B pairs: 836 -> 785 instructions).  The
     * quarantine has kept it from coming straight back already.  (Level 2
     * flushes its one block to local_free, as its frees do: its fast path
     * pops the free list.) */
    if (sf_guard_level >= 3 && !(page->flags & SF_PAGE_FULL)) {
        sf_link_set(page, b, page->free);
        sf_free_onto(heap, page, b, &page->free);
        return;
    }
    sf_page_local_free_slow(heap, page, b);
}

/* The same for a block of the ring (level 3), its bytes uncounted here
 * (the one-block quarantine sets its own). */
static void quarantine_release(sf_heap_t *heap, sf_block_t *b) {
    sf_page_t *page = sf_page_of(sf_segment_of(b), b);
    SF_OWN_SET(heap->quarantine_bytes, heap->quarantine_bytes - (heap->quarantine_bytes >= page->block_size
                                                                     ? page->block_size
                                                                     : heap->quarantine_bytes));
    quarantine_release_on(heap, page, b);
}

static void quarantine_release_oldest(sf_heap_t *heap) {
    sf_block_t *b = *qring_at(heap, 0);
    heap->qring_first = (heap->qring_first + 1) & (heap->qring_cap - 1);
    SF_UNCOUNT(heap->quarantine_count);
    quarantine_release(heap, b);
}

/* The one-block quarantine: the block freed last, held until the next
 * arrives (heap->quarantine_head, count 1, its page in held_page), checked
 * as it leaves like a level-3 block.  Level 2's for the frees of its
 * checked path (a FIFO's general code cost each such free some 110
 * instructions more), and levels 0-1's for realloc's old block, the
 * owner's (alloc.c, realloc_move), which so is not the next block of its
 * size, and a write into whose first 16 bytes meanwhile is reported.  The
 * page is kept beside the block rather than looked up again: through
 * sf_quarantine_push, which looks it up and asks the level, realloc paid
 * 22 instructions a move over the plain free onto local_free this
 * replaced, 14 directly (bench/fastpath realloc, 16 -> 1024 B in 16 B
 * steps, callgrind: 110.8, 133.4 and 124.4 a realloc; 120.8 with a copy
 * of this function for levels 0-1 that skipped level 3's question on the
 * way out). */
void sf_quarantine_swap_one(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    sf_block_t *old = heap->quarantine_head;
    sf_page_t *old_page = heap->held_page;
    b->next = NULL;
    b->cookie = sf_page_cookie(page);
    heap->quarantine_head = b;
    heap->held_page = page;
    SF_OWN_SET(heap->quarantine_count, 1);
    if (old != NULL) quarantine_release_on(heap, old_page, old);
    SF_OWN_SET(heap->quarantine_bytes, page->block_size);
}

void sf_quarantine_push(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    if (sf_guard_level == 2) {
        sf_quarantine_swap_one(heap, page, b);
        return;
    }
    b->next = NULL;
    b->cookie = sf_page_cookie(page);
    /* the block freed before b: a write into its first word since then is
     * found now, not only when it leaves (it leaves now, unused) */
    if (heap->quarantine_count != 0) {
        sf_block_t *newest = *qring_at(heap, heap->quarantine_count - 1);
        if (SF_UNLIKELY(newest->next != NULL)) {
            SF_UNCOUNT(heap->quarantine_count);
            quarantine_release(heap, newest);
        }
    }
    size_t budget = (size_t)sf_knob(SF_KNOB_GUARD_QUARANTINE);
    if (heap->quarantine_count == heap->qring_cap &&
        (heap->quarantine_bytes >= budget || !qring_grow(heap))) {
        if (heap->quarantine_count == 0) { /* no ring (no memory for one): not held */
            quarantine_release(heap, b);
            return;
        }
        quarantine_release_oldest(heap);
    }
    *qring_at(heap, heap->quarantine_count) = b;
    SF_COUNT(heap->quarantine_count);
    SF_ADD(heap->quarantine_bytes, page->block_size);
    while (heap->quarantine_bytes > budget) quarantine_release_oldest(heap);
}

void sf_quarantine_flush(sf_heap_t *heap) {
    if (heap->quarantine_head != NULL) { /* the one-block quarantine */
        sf_block_t *b = heap->quarantine_head;
        heap->quarantine_head = NULL;
        SF_OWN_SET(heap->quarantine_count, 0);
        quarantine_release_on(heap, heap->held_page, b);
    }
    while (heap->quarantine_count != 0) quarantine_release_oldest(heap);
    SF_OWN_SET(heap->quarantine_bytes, 0);
}

const sf_block_t *sf_quarantine_at(const sf_heap_t *heap, size_t i) {
    return heap->quarantine_head != NULL ? (i == 0 ? heap->quarantine_head : NULL)
                                         : i < heap->quarantine_count ? *qring_at(heap, i) : NULL;
}

bool sf_quarantine_holds(const sf_heap_t *heap, const void *b) {
    const sf_block_t *q;
    for (size_t i = 0; (q = sf_quarantine_at(heap, i)) != NULL; i++)
        if (q == b) return true;
    return false;
}

/* ---- level 3: malloc(0) ------------------------------------------------------ */

/* malloc(0) returns a unique pointer to no accessible memory: a slot of a
 * no-access reservation (ZERO_SLOTS slots of 16 bytes: 16 MiB of address
 * space, reserved at the first malloc(0) and never touched).  Slots are
 * handed out round the reservation, so a freed one comes back only after
 * ZERO_SLOTS - 1 others; a bitmap says which are out (a free of one that is
 * not is a double free). */
#define ZERO_SLOT 16
#define ZERO_SLOTS ((size_t)1 << 20)
enum { ZERO_NONE, ZERO_MAKING, ZERO_READY, ZERO_FAILED };
static _Atomic int zero_state;
static uint8_t *zero_base;
static _Atomic uint64_t *zero_out; /* one bit per slot */
static _Atomic size_t zero_cursor;

static bool zero_ready(void) {
    int st = atomic_load_explicit(&zero_state, memory_order_acquire);
    while (st != ZERO_READY && st != ZERO_FAILED) {
        int none = ZERO_NONE;
        if (st == ZERO_NONE && atomic_compare_exchange_strong(&zero_state, &none, ZERO_MAKING)) {
            zero_base = sf_os_reserve_none(ZERO_SLOTS * ZERO_SLOT);
            zero_out = zero_base ? sf_os_map_plain(ZERO_SLOTS / 8) : NULL;
            atomic_store_explicit(&zero_state, zero_out ? ZERO_READY : ZERO_FAILED, memory_order_release);
        }
        st = atomic_load_explicit(&zero_state, memory_order_acquire);
    }
    return st == ZERO_READY;
}

void *sf_zero_alloc(void) {
    if (!zero_ready()) return NULL;
    for (unsigned tries = 0; tries < 64; tries++) {
        size_t i = atomic_fetch_add_explicit(&zero_cursor, 1, memory_order_relaxed) % ZERO_SLOTS;
        uint64_t bit = (uint64_t)1 << (i % 64);
        if (!(atomic_fetch_or(&zero_out[i / 64], bit) & bit)) return zero_base + i * ZERO_SLOT;
    }
    return NULL; /* (a million of them live: an ordinary block then) */
}

bool sf_zero_holds(const void *p) {
    return atomic_load_explicit(&zero_state, memory_order_acquire) == ZERO_READY &&
           (const uint8_t *)p >= zero_base && (const uint8_t *)p < zero_base + ZERO_SLOTS * ZERO_SLOT;
}

/* Frees p if it is a malloc(0) slot (reporting a misuse of one); false if
 * it is not one. */
bool sf_zero_free(void *p) {
    if (!sf_zero_holds(p)) return false;
    size_t off = (size_t)((uint8_t *)p - zero_base), i = off / ZERO_SLOT;
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (off % ZERO_SLOT != 0) sf_guard_report(SF_GUARD_INTERIOR, p);
    else if (!(atomic_fetch_and(&zero_out[i / 64], ~bit) & bit)) sf_guard_report(SF_GUARD_DOUBLE, p);
    return true;
}

/* ---- levels 2-3: operator new and delete ---------------------------------------- */

/* The live block at p and its request size and family; NULL if p is no
 * live block (the free that follows sorts that out). */
static sf_page_t *live_block(void *p, sf_segment_t **seg_out) {
    sf_segment_t *seg = sf_segmap_header_near(p);
    if (seg == NULL) return NULL;
    sf_page_t *page = sf_page_of(seg, p);
    if (is_span(page)) {
        if (p != page->block_start || sf_page_used(page) == 0) return NULL;
    } else if (!SF_GET(page->in_use) || !sf_page_is_block_start(page, p) ||
               ((sf_block_t *)p)->cookie == sf_page_cookie(page)) {
        return NULL;
    }
    *seg_out = seg;
    return page;
}

static unsigned family_of(const sf_page_t *page, void *p) {
    if (is_span(page)) return (unsigned)(page->requested >> SPAN_FAMILY_SHIFT);
    return *sf_size_word(page, p) >> SF_SIZE_BITS;
}

/* Marks the block new or new[] just got with its family (levels 2-3). */
void sf_new_mark(void *p, enum sf_family family) {
    sf_segment_t *seg = NULL;
    sf_page_t *page = p != NULL ? live_block(p, &seg) : NULL;
    if (page == NULL) return; /* (NULL, a malloc(0) slot, a sampled block) */
    if (is_span(page)) page->requested |= (size_t)family << SPAN_FAMILY_SHIFT;
    else *sf_size_word(page, p) |= (uint32_t)family << SF_SIZE_BITS;
}

void *sf_guarded_new(size_t n, size_t align, enum sf_family family) {
    void *p = sf_guarded_malloc(n, align);
    sf_new_mark(p, family);
    return p;
}

/* Level 2's delete of a block its own free did not take with the check
 * (override_new.c: another thread's small block, a medium one, a span, or
 * a mismatch): the same check as level 3's below, and the mark taken off
 * before level 2's free, whose paths read the size word whole. */
bool sf_l2_delete_ok(void *p, enum sf_family family, size_t size) {
    sf_segment_t *seg = NULL;
    sf_page_t *page = p != NULL ? live_block(p, &seg) : NULL;
    if (page == NULL) return true; /* (the free's own checks) */
    unsigned got = family_of(page, p);
    size_t n = requested_size(page, p);
    /* (an overwritten size word, a family past new[] included: the free
     * reports it) */
    if (got == SF_FAMILY_MALLOC || got > SF_FAMILY_NEW_ARRAY || n == SIZE_MAX) return true;
    if (got != family || (size != 0 && size != n)) {
        sf_guard_report(SF_GUARD_MISMATCH, p);
        return false;
    }
    if (is_span(page)) page->requested = n;
    else *sf_size_word(page, p) = (uint32_t)n;
    return true;
}

/* operator delete (family SF_FAMILY_NEW) or delete[] (NEW_ARRAY), with the
 * size the sized forms pass (0: none).  A block from new freed by delete[]
 * (or the reverse), or a size that is not the one new was given, is
 * reported and the free refused; blocks from malloc are not checked (a
 * program that frees them with delete is wrong, but common, and harmless
 * to sefer). */
void sf_guarded_delete(void *p, enum sf_family family, size_t size) {
    sf_segment_t *seg = NULL;
    sf_page_t *page = p != NULL ? live_block(p, &seg) : NULL;
    if (page != NULL) {
        unsigned got = family_of(page, p);
        size_t n = requested_size(page, p);
        if (got != SF_FAMILY_MALLOC && (got != family || (size != 0 && size != n))) {
            sf_guard_report(SF_GUARD_MISMATCH, p);
            return;
        }
    }
    sf_free_checked(p);
}
