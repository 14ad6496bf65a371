/* heap.c - per-thread heaps: the heap registry and a heap's lifetime.
 *
 * Every thread that allocates gets a heap of its own, up to the registry's
 * capacity: SF_HEAP_SLOTS_MAX heaps (2^20) owned at once.  Heaps live in a
 * registry that grows in chunks of SF_HEAP_CHUNK heaps, each chunk mapped
 * from the OS the first time one of its slots is needed and never unmapped
 * (the table of chunk pointers is static, sized for the capacity): a heap
 * slot, once made, exists until the process ends, so another thread may
 * always touch a heap it found through a block (its ring, its overflow
 * list, its state).
 *
 * Claiming a heap takes no lock.  At thread exit the heap gives back its
 * empty pages and becomes ownerless: ABANDONED if blocks are still live in
 * it (their pages stay where they are and stay valid), else FREE.  Ownerless
 * heaps wait on one lock-free stack (a Treiber stack of slot numbers whose
 * top word carries a tag against ABA), and a new thread pops the most
 * recently released heap first, adopting its pages and its warm memory; only
 * when the stack is empty is a new slot made.  So the number of heaps follows
 * the peak number of threads alive at once, not the number of threads ever
 * started.
 *
 * Nothing waits for an absent owner: a heap that stays abandoned is
 * collected by whoever frees into it often enough (remote.c), its delayed
 * decommits are done from other threads' page allocations
 * (sf_heaps_purge_abandoned), and sefer_trim collects all of them.
 *
 * A thread that allocates after its own heap was released (a thread-local
 * destructor running after ours), or that cannot get a heap at all (every
 * one of the SF_HEAP_SLOTS_MAX heaps owned by a live thread, or no memory
 * for a new chunk or a ring), uses the fallback heap under a lock: an
 * ordinary heap, so its blocks are allocated, freed (by any thread) and
 * checked as any other's.  A thread that could not get a heap stays on the
 * fallback heap until it exits (it does not ask again: heaps released later
 * go to new threads); each such thread is counted once in heap_fallbacks
 * (/stats, /metrics), and the first one made because the registry was full
 * says so on stderr.
 *
 * Memory per heap: sizeof(sf_heap_t) (about 9.9 KiB: direct[] 4 KiB of
 * it, the class lists 1 KiB and their records 1 KiB) in its chunk, and its ring's cells
 * (rings.capacity x 16 bytes of address space, touched only as they are
 * used and given back when the heap becomes FREE). */
#include "internal.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Static so that the fast path of a thread's very first malloc (before any
 * initialisation) finds the empty page and falls through to the slow path. */
#define SF_HEAP_STATIC_INIT(k)                                                                     \
    {.direct = {[0 ... SF_DIRECT_COUNT - 1] = &sf_empty_page},                                         \
     .gdirect = {[0 ... SF_GDIRECT_COUNT - 1] = &sf_empty_page},                                       \
     .mdirect = {[0 ... SF_MDIRECT_COUNT - 1] = &sf_empty_page},                                       \
     .gdirect_hi = {[0 ... SF_GDIRECT_HI_COUNT - 1] = &sf_empty_page},                                       \
     .gmdirect = {[0 ... SF_MDIRECT_COUNT - 1] = &sf_empty_page},                                       \
     .kind = (k),                                                                                   \
     .slot = SF_HEAP_FALLBACK_SLOT}

__thread sf_heap_t *sf_tls_heap __attribute__((tls_model("initial-exec"))) = &sf_heap_unclaimed;
sf_heap_t sf_heap_unclaimed = SF_HEAP_STATIC_INIT(SF_HEAP_UNCLAIMED);
/* True while the thread has no heap and has not yet freed a registry
 * heap's block: its next generic free may adopt the heap it frees into
 * (free.c, sf_heap_adopt_for_free).  Cleared when the thread gets a heap
 * or a marker other than sf_heap_unclaimed, and when that first free adopts
 * nothing.  A flag, where a second marker with the same empty tables used
 * to say "declined": a marker is 10 KiB of pointers relocated at load,
 * resident in every process. */
__thread bool sf_tls_may_adopt __attribute__((tls_model("initial-exec"))) = true;
sf_heap_t sf_heap_shared = SF_HEAP_STATIC_INIT(SF_HEAP_SHARED);
sf_heap_t sf_heap_fallback = SF_HEAP_STATIC_INIT(SF_HEAP_REAL);
pthread_mutex_t sf_fallback_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the registry: chunks of heap slots ------------------------------------ */

_Static_assert(SF_HEAP_SLOTS_MAX >= SF_HEAP_CHUNK && SF_HEAP_SLOTS_MAX % SF_HEAP_CHUNK == 0,
               "the registry is whole chunks");
#define CHUNKS_MAX (SF_HEAP_SLOTS_MAX / SF_HEAP_CHUNK)
static sf_heap_t *_Atomic chunks[CHUNKS_MAX];
static _Atomic uint32_t slots_made; /* slot numbers handed out (may pass the max by the
                                       threads that raced for the last one) */
static _Atomic uint32_t chunks_mapped;

uint32_t sf_heap_slots(void) {
    uint32_t n = atomic_load_explicit(&slots_made, memory_order_acquire);
    return n < SF_HEAP_SLOTS_MAX ? n : SF_HEAP_SLOTS_MAX;
}

sf_heap_t *sf_heap_at(uint32_t slot) {
    if (slot >= SF_HEAP_SLOTS_MAX) return NULL;
    sf_heap_t *chunk = atomic_load_explicit(&chunks[slot >> SF_HEAP_CHUNK_SHIFT], memory_order_acquire);
    return chunk != NULL ? &chunk[slot & (SF_HEAP_CHUNK - 1)] : NULL;
}

int64_t sf_heap_slot_of(const void *p) {
    uint32_t n = (sf_heap_slots() + SF_HEAP_CHUNK - 1) >> SF_HEAP_CHUNK_SHIFT;
    for (uint32_t c = 0; c < n; c++) {
        sf_heap_t *chunk = atomic_load_explicit(&chunks[c], memory_order_acquire);
        uintptr_t off = (uintptr_t)p - (uintptr_t)chunk;
        if (chunk != NULL && (uintptr_t)p >= (uintptr_t)chunk && off < SF_HEAP_CHUNK * sizeof(sf_heap_t))
            return off % sizeof(sf_heap_t) == 0 ? (int64_t)((c << SF_HEAP_CHUNK_SHIFT) + off / sizeof(sf_heap_t))
                                                 : -1;
    }
    return -1;
}

size_t sf_heap_registry_bytes(void) {
    return (size_t)atomic_load_explicit(&chunks_mapped, memory_order_relaxed) *
           sf_align_up(SF_HEAP_CHUNK * sizeof(sf_heap_t), SF_OS_PAGE);
}

/* The chunk that holds `slot`, mapped now if nobody has yet. */
static sf_heap_t *chunk_for(uint32_t slot) {
    _Atomic(sf_heap_t *) *cell = &chunks[slot >> SF_HEAP_CHUNK_SHIFT];
    sf_heap_t *chunk = atomic_load_explicit(cell, memory_order_acquire);
    if (chunk != NULL) return chunk;
    size_t bytes = sf_align_up(SF_HEAP_CHUNK * sizeof(sf_heap_t), SF_OS_PAGE);
    sf_heap_t *fresh = sf_os_map_plain(bytes);
    if (fresh == NULL) return NULL;
    SF_LS_RMW(SLOT_MAKE);
    if (!atomic_compare_exchange_strong_explicit(cell, &chunk, fresh, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        sf_os_unmap(fresh, bytes); /* another thread mapped it first */
        return chunk;
    }
    atomic_fetch_add_explicit(&chunks_mapped, 1, memory_order_relaxed);
    sf_stat_add(&sf_gstats.metadata, bytes);
    return fresh;
}

/* ---- ownerless heaps: a tagged lock-free stack ------------------------------ */

/* top: (tag << 24) | (slot + 1); 0 in the low bits: empty.  Each push and
 * pop bumps the tag, so a pop that read a heap's link before another thread
 * popped and pushed that heap again fails its CAS. */
#define STACK_SLOT_BITS 24
#define STACK_SLOT_MASK ((1ull << STACK_SLOT_BITS) - 1)
_Static_assert(SF_HEAP_SLOTS_MAX < STACK_SLOT_MASK, "slot numbers fit the stack word");
static _Atomic uint64_t ownerless_top;

static uint64_t stack_word(uint64_t old, uint64_t slot_plus_one) {
    return (((old >> STACK_SLOT_BITS) + 1) << STACK_SLOT_BITS) | slot_plus_one;
}

static void ownerless_push(sf_heap_t *heap) {
    uint64_t top = atomic_load_explicit(&ownerless_top, memory_order_relaxed);
    do {
        atomic_store_explicit(&heap->next_ownerless, (uint32_t)(top & STACK_SLOT_MASK), memory_order_relaxed);
        SF_LS_RMW(OWNERLESS_CAS);
    } while (!atomic_compare_exchange_weak_explicit(&ownerless_top, &top, stack_word(top, heap->slot + 1ull),
                                                    memory_order_release, memory_order_relaxed));
}

static sf_heap_t *ownerless_pop(void) {
    uint64_t top = atomic_load_explicit(&ownerless_top, memory_order_acquire);
    while ((top & STACK_SLOT_MASK) != 0) {
        sf_heap_t *heap = sf_heap_at((uint32_t)(top & STACK_SLOT_MASK) - 1);
        uint32_t next = atomic_load_explicit(&heap->next_ownerless, memory_order_relaxed);
        SF_LS_RMW(OWNERLESS_CAS);
        if (atomic_compare_exchange_weak_explicit(&ownerless_top, &top, stack_word(top, next),
                                                  memory_order_acquire, memory_order_acquire)) {
            atomic_store(&heap->in_ownerless, false); /* (before the caller reads its state) */
            return heap;
        }
    }
    return NULL;
}

/* Puts an ownerless heap on the stack unless it is there already: a heap
 * adopted by a free (sf_heap_adopt_for_free) stays on the stack, stale,
 * and its entry serves again when the heap is left again.  A slot is on
 * the stack once at most (its link is in the heap).  The heap's state is
 * stored before (heap_set_ownerless): a thread popping the stale entry
 * clears the flag, then reads the state; whichever order the two threads
 * meet in, the heap ends up on the stack or claimed by that thread. */
static void ownerless_offer(sf_heap_t *heap) {
    if (!atomic_exchange(&heap->in_ownerless, true)) ownerless_push(heap);
}

/* ---- a heap's states --------------------------------------------------------- */

/* Every fast-path table of heap to the empty page: a new heap, and every
 * heap when a phase begins (phase.c), whose owner may be reading them. */
void sf_heap_tables_empty(sf_heap_t *heap) {
    for (unsigned i = 0; i < SF_DIRECT_COUNT; i++) SF_SET(heap->direct[i], &sf_empty_page);
    for (unsigned i = 0; i < SF_GDIRECT_COUNT; i++) SF_SET(heap->gdirect[i], &sf_empty_page);
    for (unsigned i = 0; i < SF_MDIRECT_COUNT; i++) SF_SET(heap->mdirect[i], &sf_empty_page);
    for (unsigned i = 0; i < SF_GDIRECT_HI_COUNT; i++) SF_SET(heap->gdirect_hi[i], &sf_empty_page);
    for (unsigned i = 0; i < SF_MDIRECT_COUNT; i++) SF_SET(heap->gmdirect[i], &sf_empty_page);
}

/* A block returns to its owner (owner or collector context). */
void sf_heap_owner_free(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    if (sf_guard_level >= 2) sf_quarantine_push(heap, page, b);
    else sf_page_local_free_slow(heap, page, b);
}

/* Pages in use, or pages waiting for their delayed decommit: a heap that
 * has either stays abandoned (adoptable, and purged by sf_heaps_purge_abandoned)
 * rather than free. */
static bool heap_has_pages(sf_heap_t *heap) {
    /* (purge_bytes, not the queue: another thread may be purging it; a
     * page on the queue is committed, so the two say the same) */
    return heap->pages_in_use != 0 || SF_GET(heap->purge_bytes) != 0;
}

/* Empty pages of heaps whose thread is gone.  They wait, as any heap's
 * do, for the thread that adopts the heap, which reuses them without a
 * fault; but nobody else can, and a program whose threads come and go each
 * held the pages of its last several generations (rounds of threads that
 * each allocate 4 MiB and leave half of it to the next round: twice
 * tcmalloc's memory, growing over the rounds).  So all ownerless heaps
 * together keep at most decommit.exited_keep of them: past it, the heap
 * being left decommits its oldest waiting pages at once.  The count is
 * kept in sf_gstats.exited_waiting; a heap's share leaves it when a thread
 * adopts the heap.  (Owner or collector context: the heap is held.) */
static void exited_pages_bound(sf_heap_t *heap) {
    sf_segment_lock(heap); /* (another thread may be purging its pages) */
    uint64_t keep = sf_knob(SF_KNOB_DECOMMIT_EXITED_KEEP);
    uint64_t others = atomic_load_explicit(&sf_gstats.exited_waiting, memory_order_relaxed) - heap->exited_counted;
    uint64_t room = keep > others ? keep - others : 0;
    if (heap->purge_bytes > room) sf_segment_purge_oldest(heap, heap->purge_bytes - room);
    /* (others may leave meanwhile: the count is exact, the bound a target;
     * the difference may be negative: added modulo 2^64) */
    atomic_fetch_add_explicit(&sf_gstats.exited_waiting, heap->purge_bytes - heap->exited_counted,
                              memory_order_relaxed);
    heap->exited_counted = heap->purge_bytes;
    sf_segment_unlock(heap);
}

/* Leaves a heap nobody owns: abandoned if it still has pages, else free.
 * A free heap can receive no remote free (it owns no block), so its ring
 * is empty and quiet: its pages go back to the OS. */
static void heap_set_ownerless(sf_heap_t *heap) {
    exited_pages_bound(heap);
    bool pages = heap_has_pages(heap);
    if (!pages && sf_ring_pending(&heap->ring) == 0) sf_ring_reset(&heap->ring);
    SF_LS_RMW(HEAP_STATE);
    atomic_store(&heap->state, pages ? SF_HEAP_ABANDONED : SF_HEAP_FREE);
}

/* Takes an abandoned heap for a collection on its absent owner's behalf
 * (end it with heap_set_ownerless); false if someone else has it. */
static bool heap_claim_to_collect(sf_heap_t *heap) {
    int expected = SF_HEAP_ABANDONED;
    SF_LS_RMW(HEAP_STATE);
    return atomic_compare_exchange_strong(&heap->state, &expected, SF_HEAP_COLLECTING);
}

/* Some abandoned heap may have pages waiting for their decommit deadline;
 * and the earliest time worth looking again. */
static _Atomic bool abandoned_purges;
static _Atomic uint64_t abandoned_next_look;

/* Decommits the pages of abandoned heaps whose deadline has passed (their
 * owners are gone, so nobody else would).  Called now and then from page
 * allocation; cheap when no abandoned heap waits, and the walk over every
 * slot is made at most every decommit.delay / 2. */
void sf_heaps_purge_abandoned(void) {
    if (!atomic_load_explicit(&abandoned_purges, memory_order_relaxed)) return;
    uint64_t now = sf_now_ms(), next = atomic_load_explicit(&abandoned_next_look, memory_order_relaxed);
    if (now < next ||
        (SF_LS_RMW(ABANDONED_FLAG),
         !atomic_compare_exchange_strong(&abandoned_next_look, &next, now + sf_knob(SF_KNOB_DECOMMIT_DELAY) / 2)))
        return;
    atomic_store_explicit(&abandoned_purges, false, memory_order_relaxed);
    bool pending = false;
    uint32_t n = sf_heap_slots();
    for (uint32_t i = 0; i < n; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || atomic_load_explicit(&heap->state, memory_order_relaxed) != SF_HEAP_ABANDONED)
            continue;
        if (!heap_claim_to_collect(heap)) continue;
        sf_segment_collect_purges(heap, false); /* (its pages are read under its lock) */
        pending |= SF_GET(heap->purge_bytes) != 0;
        heap_set_ownerless(heap);
    }
    if (pending) atomic_store_explicit(&abandoned_purges, true, memory_order_relaxed);
}

/* Held by a purge of other threads' heaps, and across a fork. */
static pthread_mutex_t shed_lock = PTHREAD_MUTEX_INITIALIZER;

/* segments.max or memory.limit is reached: every heap decommits its
 * waiting pages now, so the segments kept only for them (segment.c,
 * segment_waits) go back.  The calling thread's heap and abandoned ones as
 * their holder; other threads' heaps through their segment lock, skipped
 * if it is held this instant (their owners purge at their next slow path:
 * memlimit.c).  Before the segment lock, live threads' heaps were theirs
 * alone, and a thread that slept kept its pages through any pressure. */
void sf_heaps_release_waiting(void) {
    /* (under shed_lock: a fork must not cut a purge of another heap in
     * half, fork_prepare takes it) */
    sf_lock(&shed_lock);
    sf_heap_t *me = sf_tls_heap;
    if (me->kind == SF_HEAP_REAL && me != &sf_heap_fallback) sf_segment_collect_purges(me, true);
    uint32_t n = sf_heap_slots();
    for (uint32_t i = 0; i < n; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL || heap == me || heap->kind != SF_HEAP_REAL || SF_GET(heap->purge_bytes) == 0) continue;
        if (atomic_load_explicit(&heap->state, memory_order_relaxed) == SF_HEAP_ABANDONED &&
            heap_claim_to_collect(heap)) {
            sf_segment_collect_purges(heap, true);
            heap_set_ownerless(heap);
        } else {
            sf_segment_shed(heap, UINT64_MAX, UINT64_MAX);
        }
    }
    sf_unlock(&shed_lock);
}

/* ---- threads.cache_max: what all heaps keep waiting ------------------------ */

/* Empty pages wait on their heap's purge queue for decommit.delay (and,
 * under adaptive, as long as the heap's recent peak may come back) so that
 * the heap reuses them without a fault.  Each heap judged that for itself,
 * and only when it next took a page: a thread that freed 60 MiB and went
 * to sleep kept 60 MiB committed for as long as it slept, and memory.limit
 * could not reach it either.  threads.cache_max bounds them all together
 * (sf_gstats.heaps_waiting counts them exactly): a thread whose page
 * operation finds the count past the bound purges, from every heap its
 * own included (segment.c, sf_segment_shed), the waiting pages whose
 * deadline has passed, oldest first in each heap, until the count is an
 * eighth below the bound.
 *
 * Pages within their delay stay, whatever the count: they are the ones a
 * heap is about to take again.  Taking them too (the other threads'
 * first, then the caller's own) made bench/phases, whose two threads each
 * free 100 MiB and allocate it again in another size, run at 0.45x: every
 * phase faulted its memory in anew.  So while the count stays past the
 * bound because of such pages, the walk is made again only once
 * decommit.delay / 4 has passed (some may have come due) or the count has
 * grown by another eighth: not at every page. */
static _Atomic uint64_t shed_next_ms, shed_next_bytes; /* the gate, after a walk short of its target */
static uint32_t shed_cursor; /* (under shed_lock) where the walk starts */

/* threads.cache_max was set: the next page operation past it walks at once. */
void sf_heaps_shed_refresh(void) {
    atomic_store(&shed_next_ms, 0);
    atomic_store(&shed_next_bytes, 0);
}

static uint64_t waiting_now(void) { return atomic_load_explicit(&sf_gstats.heaps_waiting, memory_order_relaxed); }

/* One walk over the heaps (the fallback heap first, then the registry
 * from the cursor), purging pages due by `now`. */
static size_t shed_walk(uint64_t target, uint64_t now) {
    size_t freed = 0;
    uint32_t n = sf_heap_slots();
    for (uint32_t k = 0; k <= n; k++) {
        uint64_t waiting = waiting_now();
        if (waiting <= target) break;
        sf_heap_t *heap = k == 0 ? &sf_heap_fallback : sf_heap_at((shed_cursor + k - 1) % (n ? n : 1));
        if (heap == NULL || (heap != &sf_heap_fallback && heap->kind != SF_HEAP_REAL)) continue;
        if (SF_GET(heap->purge_bytes) == 0) continue;
        /* (counted heap by heap, not at the walk's end: a /stats reader
         * saw heaps_waiting fall by pages whose purge the count did not
         * show yet, for the whole walk) */
        size_t shed = sf_segment_shed(heap, waiting - target, now);
        sf_stat_add(&sf_gstats.cache_max_purged, shed);
        freed += shed;
    }
    shed_cursor = n ? (shed_cursor + 1) % n : 0;
    return freed;
}

void sf_heaps_shed_waiting(void) {
    uint64_t now = sf_now_ms(), waiting = waiting_now();
    if (now < atomic_load_explicit(&shed_next_ms, memory_order_relaxed) &&
        waiting < atomic_load_explicit(&shed_next_bytes, memory_order_relaxed))
        return;
    if (pthread_mutex_trylock(&shed_lock) != 0) return; /* another thread is at it */
    uint64_t max = sf_knob(SF_KNOB_THREADS_CACHE_MAX);
    uint64_t step = max / 8 > ((uint64_t)1 << 20) ? max / 8 : (uint64_t)1 << 20;
    uint64_t target = max > step ? max - step : 0;
    if (sf_heaps_over_cache_max()) {
        size_t freed = shed_walk(target, now);
        sf_stat_add(&sf_gstats.cache_max_purges, freed != 0);
    }
    uint64_t left = waiting_now(), quarter = sf_knob(SF_KNOB_DECOMMIT_DELAY) / 4;
    atomic_store(&shed_next_ms, left > target ? now + (quarter ? quarter : 1) : 0);
    atomic_store(&shed_next_bytes, left > target ? left + step : 0);
    pthread_mutex_unlock(&shed_lock);
}

/* The one caller on a clock: the introspection server's thread, at each
 * turn of its loop (introspect/loop.c, at least once a second).  Without
 * it, what decommit.delay, large_cache.ttl and threads.cache_max would
 * give back waits for some thread's next page or cache operation, and a
 * process all of whose threads sleep keeps it.  Cheap when there is
 * nothing to do: two loads and compares. */
void sf_decommit_tick(void) {
    if (sf_heaps_over_cache_max()) sf_heaps_shed_waiting();
    if (atomic_load_explicit(&sf_gstats.cache_spans, memory_order_relaxed) > 0) sf_cache_purge(false);
}

void sf_heaps_fork_prepare(void) { sf_lock(&shed_lock); }
void sf_heaps_fork_parent(void) { sf_unlock(&shed_lock); }

/* Collects an abandoned heap on behalf of its absent owner: every empty
 * page goes back to its segment, and its delayed decommits keep their
 * deadlines (done later by sf_heaps_purge_abandoned, or by the thread that
 * adopts the heap) unless purge_now; the slot goes back to the registry if
 * nothing is left in it.  (Collecting here used to decommit at once: a
 * workload whose threads free the blocks of threads that exited refaulted
 * the pages the next thread adopted.) */
static bool heap_collect_abandoned(sf_heap_t *heap, bool purge_now) {
    if (!heap_claim_to_collect(heap)) return false;
    sf_page_collect_heap_ex(heap, true, purge_now);
    if (SF_GET(heap->purge_bytes) != 0) atomic_store(&abandoned_purges, true);
    heap_set_ownerless(heap);
    return true;
}

bool sf_heap_try_collect_abandoned(sf_heap_t *heap) { return heap_collect_abandoned(heap, false); }

size_t sf_heaps_collect_abandoned(bool purge_now) {
    size_t n = 0;
    uint32_t slots = sf_heap_slots();
    for (uint32_t i = 0; i < slots; i++) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap != NULL && atomic_load_explicit(&heap->state, memory_order_relaxed) == SF_HEAP_ABANDONED)
            n += heap_collect_abandoned(heap, purge_now);
    }
    return n;
}

static __thread int8_t main_asked __attribute__((tls_model("initial-exec"))); /* 0: not asked yet, 1, -1 */

/* Whether the calling thread is the process's first. */
static bool is_main_thread(void) {
    if (main_asked == 0) main_asked = syscall(SYS_gettid) == syscall(SYS_getpid) ? 1 : -1;
    return main_asked > 0;
}

/* Whether a heap the calling thread claims with no pages starts small
 * (docs/design.md, "Small heaps"): once the process has had
 * threads.small_from heaps at once (slots made: the registry reuses
 * ownerless heaps first), where a page of every class per thread adds up;
 * never the process's first thread's (a single-threaded program keeps the
 * classes it had), nor at guard levels 2-3 or under valgrind's tracking,
 * whose tables are others. */
static bool starts_small(void) {
    uint64_t from = sf_knob(SF_KNOB_THREADS_SMALL_FROM);
    return from != 0 && atomic_load_explicit(&slots_made, memory_order_relaxed) >= from && !sf_pages_checked() &&
           !is_main_thread();
}

/* The rest of making an ownerless heap, now LIVE, the calling thread's. */
static void heap_claimed(sf_heap_t *heap) {
    atomic_store_explicit(&heap->tid, (int)syscall(SYS_gettid), memory_order_relaxed);
    if (heap->pages_in_use == 0) {
        bool small = starts_small();
        if (small != heap->small) sf_page_set_small(heap, small); /* (direct[] rewritten only then) */
    }
    heap->refills = 0; /* a new thread: no carving ahead until it shows it allocates often (page.c) */
    memset(heap->unfulls, 0, sizeof heap->unfulls); /* (page.c, "Picky page switches") */
    /* its waiting pages are a live thread's again (exited_pages_bound);
     * under its segment lock: a purge by another thread may be taking
     * them out of the count this instant (purge_queue_remove) */
    sf_segment_lock(heap);
    atomic_fetch_sub_explicit(&sf_gstats.exited_waiting, heap->exited_counted, memory_order_relaxed);
    heap->exited_counted = 0;
    sf_segment_unlock(heap);
}

enum claim { CLAIM_OK, CLAIM_NO_RING, CLAIM_TAKEN };

/* Makes an ownerless heap the calling thread's.  A collection in progress
 * is short (it holds no lock and waits for nothing): wait for its end.
 * CLAIM_TAKEN: another thread has it (a stale stack entry of a heap a free
 * adopted). */
static enum claim heap_claim(sf_heap_t *heap) {
    for (;;) {
        int st = atomic_load(&heap->state);
        if (st == SF_HEAP_COLLECTING) {
            sched_yield();
            continue;
        }
        if (st == SF_HEAP_LIVE) return CLAIM_TAKEN;
        SF_LS_RMW(HEAP_STATE);
        if (atomic_compare_exchange_strong(&heap->state, &st, SF_HEAP_LIVE)) break;
    }
    if (heap->kind != SF_HEAP_REAL) { /* first use of this slot */
        if (!sf_ring_init(&heap->ring, (size_t)sf_knob(SF_KNOB_RINGS_CAPACITY))) {
            atomic_store(&heap->state, SF_HEAP_FREE);
            return CLAIM_NO_RING;
        }
        sf_heap_tables_empty(heap);
        /* publishes the ring to statistics readers */
        __atomic_store_n(&heap->kind, SF_HEAP_REAL, __ATOMIC_RELEASE);
    }
    heap_claimed(heap);
    return CLAIM_OK;
}

/* A heap slot never used before, or NULL if none can be made.  Once the
 * registry is full the counter is only read: every later thread adding one
 * would wrap it after 2^32 of them and hand out slot 0 again. */
static sf_heap_t *heap_make(void) {
    if (atomic_load_explicit(&slots_made, memory_order_relaxed) >= SF_HEAP_SLOTS_MAX) return NULL;
    SF_LS_RMW(SLOT_MAKE);
    uint32_t slot = atomic_fetch_add_explicit(&slots_made, 1, memory_order_acq_rel);
    if (slot >= SF_HEAP_SLOTS_MAX) return NULL;
    sf_heap_t *chunk = chunk_for(slot);
    if (chunk == NULL) return NULL; /* that slot number stays unused */
    sf_heap_t *heap = &chunk[slot & (SF_HEAP_CHUNK - 1)];
    heap->slot = slot;
    return heap;
}

/* Claims a heap for the calling thread: the latest ownerless one, or a new
 * slot.  NULL: the thread uses the fallback heap. */
static sf_heap_t *heap_acquire(void) {
    sf_heap_t *heap;
    enum claim got = CLAIM_TAKEN;
    while (got == CLAIM_TAKEN && (heap = ownerless_pop()) != NULL) got = heap_claim(heap);
    if (got == CLAIM_TAKEN) { /* (no ownerless heap, or only stale entries) */
        heap = heap_make();
        if (heap == NULL) return NULL;
        got = heap_claim(heap);
    }
    if (got == CLAIM_OK) return heap;
    ownerless_offer(heap); /* its ring could not be mapped: keep the slot for later */
    return NULL;
}

void sf_heap_adopt_declined(void) { sf_tls_may_adopt = false; }

/* A thread with no heap yet frees a block of `owner`, a heap whose thread
 * exited: it adopts that heap, rather than the one on top of the ownerless
 * stack when it first allocates.  A thread that takes over an exited
 * thread's work (the next round of a pool, a thread-per-request server's
 * next thread) usually frees what its predecessor left before allocating:
 * with the heap its own, those frees are owner frees, and the pages they
 * empty, and the pages the heap kept waiting, serve its own allocations.
 * Through the stack it got another exited thread's heap, while the pages
 * its frees emptied waited in a heap nobody used (rounds of 8 threads each
 * freeing what the last round's thread left: 48 MiB of RSS against
 * tcmalloc's 31, docs/design.md, "Exited threads").  The heap stays on the
 * ownerless stack, stale, until a pop finds it taken (heap_claim) or it is
 * left again (ownerless_offer).  Asked at a thread's first free of a
 * registry heap's block only (sf_heap_adopt_declined), and not without the
 * thread key (no destructor would leave the heap again).  A free made in
 * glibc's last round of thread-key destructors still adopts, and the heap
 * stays LIVE under a dead thread, as a malloc there claims one (known
 * limit).  False: not adopted (someone else has it or is collecting it, or
 * this thread already has a heap). */
bool sf_heap_adopt_for_free(sf_heap_t *owner) {
    if (!sf_tls_may_adopt || sf_tls_heap != &sf_heap_unclaimed ||
        atomic_load_explicit(&owner->state, memory_order_relaxed) != SF_HEAP_ABANDONED)
        return false;
    int expected = SF_HEAP_ABANDONED;
    SF_LS_RMW(HEAP_STATE);
    if (!atomic_compare_exchange_strong(&owner->state, &expected, SF_HEAP_LIVE)) return false;
    heap_claimed(owner);
    sf_tls_heap = owner;
    sf_tls_may_adopt = false;
    if (sf_thread_key_ok) pthread_setspecific(sf_thread_key, owner);
    sf_heap_drain_remote(owner);
    return true;
}

/* A thread that asked for a heap and got none: counted, and, the first
 * time the reason is a full registry, said on stderr (once per process:
 * every thread past the capacity would say it again). */
static _Atomic bool full_reported;

static void heap_fallback_thread(void) {
    sf_stat_add(&sf_gstats.heap_fallbacks, 1);
    if (atomic_load_explicit(&slots_made, memory_order_relaxed) < SF_HEAP_SLOTS_MAX ||
        atomic_exchange(&full_reported, true))
        return;
    char line[256];
    sf_str_t out;
    sf_str_init(&out, line, sizeof line);
    sf_str_add(&out, "sefer: all ");
    sf_str_addu(&out, SF_HEAP_SLOTS_MAX);
    sf_str_add(&out, " heaps are owned by live threads: this thread, and every other that finds no free "
                     "heap, allocates from the locked fallback heap (counted in heap_fallbacks; reported "
                     "once)\n");
    sf_write_stderr(line);
}

/* The heap a new thread would adopt holds blocks of an exited thread: the
 * new thread takes it at once, so that its frees of those blocks (a
 * thread-per-request server's successor freeing what its predecessor
 * left) are its own, not frees into an abandoned heap. */
static bool ownerless_holds_blocks(void) {
    uint64_t top = atomic_load_explicit(&ownerless_top, memory_order_acquire);
    if ((top & STACK_SLOT_MASK) == 0) return false;
    sf_heap_t *heap = sf_heap_at((uint32_t)(top & STACK_SLOT_MASK) - 1);
    return atomic_load_explicit(&heap->state, memory_order_relaxed) == SF_HEAP_ABANDONED;
}

/* A thread that allocates rarely (threads.heap_after, docs/design.md,
 * "Threads that allocate rarely"): its allocations in the current second,
 * and when that second began. */
static __thread uint32_t rare_count __attribute__((tls_model("initial-exec")));
static __thread uint64_t rare_since_ms __attribute__((tls_model("initial-exec")));

/* True while the calling thread (with no heap yet) should allocate from the
 * shared heap: it has made at most threads.heap_after allocations in the
 * current second.  The process's first thread gets its heap at once: there
 * is one of it, and a single-threaded program keeps exactly the paths it
 * had.  Guard levels 2-3 and valgrind's tracking give every thread its heap
 * at once too (their checks at exit and their reports read heaps, not the
 * shared one). */
static bool allocates_rarely(void) {
    uint64_t after = sf_knob(SF_KNOB_THREADS_HEAP_AFTER);
    if (after == 0 || sf_pages_checked()) return false;
    if (is_main_thread() || ownerless_holds_blocks()) return false;
    uint64_t now = sf_now_ms();
    if (now - rare_since_ms >= 1000) {
        rare_since_ms = now;
        rare_count = 0;
    }
    return ++rare_count <= after;
}

/* The heap the calling thread should allocate from: its own (claimed now
 * if need be) or &sf_heap_fallback (the caller must hold sf_fallback_lock). */
sf_heap_t *sf_heap_for_thread(void) {
    sf_ensure_init();
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind == SF_HEAP_REAL) return heap;
    if (heap->kind == SF_HEAP_UNCLAIMED && allocates_rarely()) return &sf_heap_fallback;
    if (heap->kind == SF_HEAP_UNCLAIMED) {
        heap = heap_acquire();
        sf_tls_may_adopt = false;
        if (heap != NULL) {
            sf_tls_heap = heap;
            if (sf_thread_key_ok) pthread_setspecific(sf_thread_key, heap);
            sf_heap_drain_remote(heap);
            return heap;
        }
        sf_tls_heap = &sf_heap_shared;
        heap_fallback_thread();
    }
    return &sf_heap_fallback;
}

/* pthread key destructor: the thread is exiting. */
void sf_heap_thread_done(void *value) {
    sf_heap_t *heap = value;
    sf_tls_heap = &sf_heap_shared; /* later destructors use the fallback heap */
    sf_tls_may_adopt = false;
    if (heap == NULL || heap->kind != SF_HEAP_REAL) return;
    sf_track_quiet_begin(); /* under valgrind: sefer's own walk of freed blocks */
    sf_outbox_send(heap, true); /* other heaps' blocks it was gathering (remote.c) */
    /* every empty page goes back to its segment, but decommits keep their
     * deadline: the next thread usually adopts this heap within it and
     * reuses the pages without faulting them in again */
    sf_page_collect_heap_ex(heap, true, false);
    sf_track_quiet_end();
    atomic_store_explicit(&heap->tid, 0, memory_order_relaxed);
    if (SF_GET(heap->purge_bytes) != 0) atomic_store(&abandoned_purges, true);
    heap_set_ownerless(heap);
    ownerless_offer(heap);
    /* a batch another thread pushed after the collection above, having
     * read the state before it changed: taken now (remote.c,
     * sf_outbox_send, makes the other half of this fence) */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&heap->inbox, memory_order_relaxed) != NULL) sf_heap_try_collect_abandoned(heap);
}

/* In the child after fork: only the forking thread exists.  Every other
 * live heap is abandoned and goes on the ownerless stack (adoptable), and
 * interrupted collections end.  The stack is rebuilt from the states, so a
 * push or pop the fork cut in half leaves nothing behind. */
void sf_heaps_after_fork_child(void) {
    sf_heap_t *mine = sf_tls_heap;
    atomic_store(&ownerless_top, 0);
    /* segment locks: other threads' holds did not come along (a purge by
     * another thread cannot have been under way: sf_heaps_fork_prepare) */
    atomic_store(&sf_heap_fallback.seg_busy, 0);
    sf_heap_fallback.seg_depth = 0;
    uint32_t n = sf_heap_slots();
    for (uint32_t i = n; i-- > 0;) {
        sf_heap_t *heap = sf_heap_at(i);
        if (heap == NULL) continue;
        heap->slot = i; /* (a slot being made when the parent forked) */
        atomic_store(&heap->seg_busy, 0);
        heap->seg_depth = 0;
        if (heap == mine) {
            atomic_store_explicit(&heap->tid, (int)syscall(SYS_gettid), memory_order_relaxed);
            atomic_store(&heap->in_ownerless, false);
            continue;
        }
        /* the batch its thread was filling: the fork may have cut a put in
         * half, so its count cannot be trusted; its blocks stay out (a
         * leak of at most SF_BATCH_BLOCKS per thread of the parent) */
        heap->outbox = NULL;
        /* the block its realloc or level 2's free held (the quarantine of
         * one): the fork may have cut the swap in half, the block written
         * and its page not, and the release would then report a write
         * after free that never happened; it stays out (one block a thread
         * of the parent) */
        if (heap->quarantine_head != NULL) {
            heap->quarantine_head = NULL;
            heap->held_page = NULL;
            SF_OWN_SET(heap->quarantine_count, 0);
            SF_OWN_SET(heap->quarantine_bytes, 0);
        }
        /* a sample its thread was taking: not its adopter's next allocation */
        heap->prof.force = SF_PROF_FORCE_NONE;
        int st = atomic_load(&heap->state);
        if (st == SF_HEAP_LIVE || st == SF_HEAP_COLLECTING) {
            /* its owner changes its pages and lists without locks, and the
             * fork may have cut one change in half: a page's count a block
             * off, a class list's room, a segment's free mask.  Nothing
             * reachable is damaged (the block in flight went to a thread the
             * child does not have), but the counts may disagree for as long
             * as the heap lives, so sefer_check reads it as it reads a
             * running thread's (check.c) */
            heap->cut_by_fork = true;
            atomic_store(&heap->tid, 0);
            atomic_store(&heap->state, SF_HEAP_ABANDONED);
        }
        atomic_store(&heap->in_ownerless, true);
        ownerless_push(heap);
    }
}
