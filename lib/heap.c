/* heap.c - per-thread heaps, the heap registry and remote frees.
 *
 * The registry is a fixed table of heap slots.  A thread claims one with a
 * CAS on its first allocation (preferring a slot abandoned by an exited
 * thread, so it adopts that memory) and gives it back from a pthread key
 * destructor.  A slot is never destroyed: at thread exit its empty pages are
 * returned, and if blocks are still live the slot becomes ABANDONED with its
 * pages, ring and counters intact.  Frees into an abandoned heap keep
 * arriving through its ring; when the ring fills, the freeing thread
 * collects the heap itself (state COLLECTING) so that nothing piles up
 * waiting for an owner that may never come.
 *
 * A thread that finds no free slot, or that allocates after its teardown
 * (a later thread-local destructor), uses the fallback heap under a lock.
 *
 * Remote frees: a block freed by a thread that does not own its page goes
 * into the owner's ring; if the ring is full, onto the owner's overflow list
 * (an atomic stack threaded through the blocks themselves).  Both are
 * drained by the owner on its allocation slow path.  The overflow list lives
 * in the heap slot, which is never unmapped, so a producer never touches a
 * page or segment that the owner might be releasing concurrently. */
#include "internal.h"

#include <sys/syscall.h>
#include <unistd.h>

/* Static so that the fast path of a thread's very first malloc (before any
 * initialisation) finds the empty page and falls through to the slow path. */
#define SF_HEAP_STATIC_INIT(k)                                                                     \
    {.direct = {[0 ... DIRECT_COUNT - 1] = &sf_empty_page},                                         \
     .gdirect = {[0 ... DIRECT_COUNT - 1] = &sf_empty_page},                                        \
     .kind = (k)}

__thread sf_heap_t *sf_tls_heap __attribute__((tls_model("initial-exec"))) = &sf_heap_unclaimed;
sf_heap_t sf_heap_unclaimed = SF_HEAP_STATIC_INIT(SF_HEAP_UNCLAIMED);
sf_heap_t sf_heap_shared = SF_HEAP_STATIC_INIT(SF_HEAP_SHARED);
sf_heap_t sf_heap_fallback = SF_HEAP_STATIC_INIT(SF_HEAP_REAL);
sf_heap_t sf_registry[SF_REGISTRY_SLOTS];
pthread_mutex_t sf_fallback_lock = PTHREAD_MUTEX_INITIALIZER;

static void heap_init_direct(sf_heap_t *heap) {
    for (unsigned i = 0; i < DIRECT_COUNT; i++) heap->direct[i] = heap->gdirect[i] = &sf_empty_page;
}

/* A block returns to its owner (owner or collector context). */
void sf_heap_owner_free(sf_heap_t *heap, sf_page_t *page, sf_block_t *b) {
    if (sf_guard_level >= 3) sf_quarantine_push(heap, page, b);
    else sf_page_local_free_slow(heap, page, b);
}

static void drain_block(sf_heap_t *heap, sf_block_t *b) {
    sf_segment_t *seg = sf_segment_of(b);
    sf_heap_owner_free(heap, sf_page_of(seg, b), b);
}

void sf_heap_drain_remote(sf_heap_t *heap) {
    void *p;
    while ((p = sf_ring_pop(&heap->ring)) != NULL) drain_block(heap, p);
    if (atomic_load_explicit(&heap->overflow, memory_order_relaxed) == NULL) return;
    sf_block_t *list = atomic_exchange_explicit(&heap->overflow, NULL, memory_order_acquire);
    while (list != NULL) {
        sf_block_t *next = list->next;
        drain_block(heap, list);
        list = next;
    }
}

/* Pages in use, or pages waiting for their delayed decommit: a heap that
 * has either stays abandoned (adoptable, and purged by sf_heaps_purge_abandoned)
 * rather than free. */
static bool heap_has_pages(sf_heap_t *heap) {
    return heap->pages_in_use != 0 || heap->purge.first != NULL;
}

/* Leaves a heap nobody owns: abandoned if it still has pages, else free. */
static void heap_set_ownerless(sf_heap_t *heap) {
    atomic_store(&heap->state, heap_has_pages(heap) ? SF_HEAP_ABANDONED : SF_HEAP_FREE);
}

/* Takes an abandoned heap for a collection on its absent owner's behalf
 * (end it with heap_set_ownerless); false if someone else has it. */
static bool heap_claim_to_collect(sf_heap_t *heap) {
    int expected = SF_HEAP_ABANDONED;
    return atomic_compare_exchange_strong(&heap->state, &expected, SF_HEAP_COLLECTING);
}

/* Some abandoned heap may have pages waiting for their decommit deadline. */
static _Atomic bool abandoned_purges;

/* Decommits the pages of abandoned heaps whose deadline has passed (their
 * owners are gone, so nobody else would).  Called now and then from page
 * allocation; cheap when no abandoned heap waits. */
void sf_heaps_purge_abandoned(void) {
    if (!atomic_load_explicit(&abandoned_purges, memory_order_relaxed)) return;
    atomic_store_explicit(&abandoned_purges, false, memory_order_relaxed);
    bool pending = false;
    uint64_t now = sf_now_ms();
    for (unsigned i = 0; i < SF_REGISTRY_SLOTS; i++) {
        sf_heap_t *heap = &sf_registry[i];
        if (atomic_load_explicit(&heap->state, memory_order_relaxed) != SF_HEAP_ABANDONED) continue;
        if (!heap_claim_to_collect(heap)) continue;
        if (heap->purge.first != NULL && heap->purge.first->purge_at <= now)
            sf_segment_collect_purges(heap, false);
        pending |= heap->purge.first != NULL;
        heap_set_ownerless(heap);
    }
    if (pending) atomic_store_explicit(&abandoned_purges, true, memory_order_relaxed);
}

/* Collects an abandoned heap on behalf of its absent owner; gives the slot
 * back to the registry if nothing is left in it. */
static bool heap_try_collect_abandoned(sf_heap_t *heap) {
    if (!heap_claim_to_collect(heap)) return false;
    sf_heap_collect(heap, true);
    heap_set_ownerless(heap);
    return true;
}

size_t sf_heaps_collect_abandoned(void) {
    size_t n = 0;
    for (unsigned i = 0; i < SF_REGISTRY_SLOTS; i++)
        if (atomic_load_explicit(&sf_registry[i].state, memory_order_relaxed) == SF_HEAP_ABANDONED)
            n += heap_try_collect_abandoned(&sf_registry[i]);
    return n;
}

void sf_heap_remote_free(sf_heap_t *owner, sf_block_t *b) {
    if (sf_ring_push(&owner->ring, b)) {
        /* nobody drains an abandoned heap: collect it now and then */
        if (unlikely(atomic_load_explicit(&owner->state, memory_order_relaxed) ==
                     SF_HEAP_ABANDONED) &&
            sf_ring_pending(&owner->ring) >= 64)
            heap_try_collect_abandoned(owner);
        return;
    }
    if (atomic_load_explicit(&owner->state, memory_order_relaxed) == SF_HEAP_ABANDONED &&
        heap_try_collect_abandoned(owner) && sf_ring_push(&owner->ring, b))
        return;
    atomic_fetch_add_explicit(&owner->ring.overflowed, 1, memory_order_relaxed);
    sf_event_ring_overflow(owner); /* event.c: the first, then one a minute */
    sf_block_t *head = atomic_load_explicit(&owner->overflow, memory_order_relaxed);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&owner->overflow, &head, b,
                                                    memory_order_release, memory_order_relaxed));
}

static bool heap_claim(sf_heap_t *heap, int from) {
    int expected = from;
    if (!atomic_compare_exchange_strong(&heap->state, &expected, SF_HEAP_LIVE)) return false;
    if (heap->kind != SF_HEAP_REAL) { /* first use of this slot */
        if (!sf_ring_init(&heap->ring, (size_t)sf_knob(SF_KNOB_RINGS_CAPACITY))) {
            atomic_store(&heap->state, from);
            return false;
        }
        heap_init_direct(heap);
        heap->slot = (uint32_t)(heap - sf_registry);
        /* publishes the ring to statistics readers */
        __atomic_store_n(&heap->kind, SF_HEAP_REAL, __ATOMIC_RELEASE);
    }
    atomic_store_explicit(&heap->tid, (int)syscall(SYS_gettid), memory_order_relaxed);
    return true;
}

/* Claims a registry slot for the calling thread: an abandoned one first. */
static sf_heap_t *heap_acquire(void) {
    static const int order[2] = {SF_HEAP_ABANDONED, SF_HEAP_FREE};
    for (int pass = 0; pass < 2; pass++)
        for (unsigned i = 0; i < SF_REGISTRY_SLOTS; i++) {
            sf_heap_t *heap = &sf_registry[i];
            if (atomic_load_explicit(&heap->state, memory_order_relaxed) == order[pass] &&
                heap_claim(heap, order[pass]))
                return heap;
        }
    return NULL;
}

/* The heap the calling thread should allocate from: its own (claimed now
 * if need be) or &sf_heap_fallback (the caller must hold sf_fallback_lock). */
sf_heap_t *sf_heap_for_thread(void) {
    sf_ensure_init();
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind == SF_HEAP_REAL) return heap;
    if (heap->kind == SF_HEAP_UNCLAIMED) {
        heap = heap_acquire();
        if (heap != NULL) {
            sf_tls_heap = heap;
            if (sf_thread_key_ok) pthread_setspecific(sf_thread_key, heap);
            sf_heap_drain_remote(heap);
            return heap;
        }
        sf_tls_heap = &sf_heap_shared;
    }
    return &sf_heap_fallback;
}

/* pthread key destructor: the thread is exiting. */
void sf_heap_thread_done(void *value) {
    sf_heap_t *heap = value;
    sf_tls_heap = &sf_heap_shared; /* later destructors use the fallback heap */
    if (heap == NULL || heap->kind != SF_HEAP_REAL) return;
    sf_track_quiet_begin(); /* under valgrind: sefer's own walk of freed blocks */
    /* every empty page goes back to its segment, but decommits keep their
     * deadline: the next thread usually adopts this heap within it and
     * reuses the pages without faulting them in again */
    sf_heap_collect_ex(heap, true, false);
    sf_track_quiet_end();
    atomic_store_explicit(&heap->tid, 0, memory_order_relaxed);
    if (heap->purge.first != NULL) atomic_store(&abandoned_purges, true);
    heap_set_ownerless(heap);
}

/* In the child after fork: only the forking thread exists; every other live
 * heap is abandoned (and adoptable), and interrupted collections end. */
void sf_heaps_after_fork_child(void) {
    sf_heap_t *mine = sf_tls_heap;
    for (unsigned i = 0; i < SF_REGISTRY_SLOTS; i++) {
        sf_heap_t *heap = &sf_registry[i];
        int st = atomic_load(&heap->state);
        if (heap == mine) {
            atomic_store_explicit(&heap->tid, (int)syscall(SYS_gettid), memory_order_relaxed);
            continue;
        }
        if (st == SF_HEAP_LIVE || st == SF_HEAP_COLLECTING) {
            atomic_store(&heap->tid, 0);
            atomic_store(&heap->state, SF_HEAP_ABANDONED);
        }
    }
}
