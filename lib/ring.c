/* ring.c - the remote-free ring: bounded, multi-producer, single-consumer.
 *
 * Each cell carries a sequence number (the bounded-queue scheme of
 * D. Vyukov).  A producer claims a position with one CAS on `tail` and
 * publishes the pointer by storing seq = pos + 1; the consumer (the heap's
 * owner) takes the cell when seq == pos + 1 and hands it back for the next lap
 * with seq = pos + capacity.  A producer never waits: if the cell at its
 * position is still unconsumed the ring is full and push returns false (the
 * caller takes the overflow list).  A cell claimed but not yet published
 * stops the consumer early; it is picked up on the next drain.
 *
 * A cell stores its sequence number minus its own index, so the initial
 * state (seq = index) is all zero: a ring fresh from mmap needs no set-up
 * and its pages are faulted in only as positions reach them, and an empty,
 * quiet ring is reset by dropping its pages (sf_ring_reset).  With one
 * ring per heap and thousands of heaps, that is the difference between 16
 * KiB and nothing per idle heap. */
#include "internal.h"

static void cell_set_seq(sf_ring_t *ring, uint64_t pos, uint64_t seq) {
    atomic_store_explicit(&ring->cells[pos & ring->mask].seq, seq - (pos & ring->mask),
                          memory_order_release);
}

static size_t cells_bytes(const sf_ring_t *ring) {
    return sf_align_up((ring->mask + 1) * sizeof(sf_ring_cell_t), SF_OS_PAGE);
}

bool sf_ring_init(sf_ring_t *ring, size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    sf_ring_cell_t *cells = sf_os_map_plain(cap * sizeof *cells);
    if (cells == NULL) return false;
    atomic_store_explicit(&ring->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&ring->head, 0, memory_order_relaxed);
    ring->mask = cap - 1;
    ring->cells = cells;
    sf_stat_add(&sf_gstats.metadata, cells_bytes(ring));
    return true;
}

/* Only when no producer can be pushing (the heap owns no block) and the
 * ring is empty: back to position 0, cells back to the OS (they read as
 * zero again, the initial state). */
void sf_ring_reset(sf_ring_t *ring) {
    if (ring->cells == NULL || atomic_load_explicit(&ring->tail, memory_order_relaxed) == 0) return;
    sf_os_decommit(ring->cells, cells_bytes(ring));
    atomic_store_explicit(&ring->head, 0, memory_order_relaxed);
    atomic_store_explicit(&ring->tail, 0, memory_order_release);
}

bool sf_ring_push(sf_ring_t *ring, void *p) {
    uint64_t pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    for (;;) {
        int64_t dif = (int64_t)(sf_ring_seq(ring, pos) - pos);
        if (dif == 0) {
            SF_LS_RMW(RING_TAIL_CAS);
            if (atomic_compare_exchange_weak_explicit(&ring->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                atomic_store_explicit(&ring->cells[pos & ring->mask].ptr, p, memory_order_relaxed);
                cell_set_seq(ring, pos, pos + 1);
                return true;
            }
        } else if (dif < 0) {
            return false; /* full */
        } else {
            pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        }
    }
}

void *sf_ring_pop(sf_ring_t *ring) {
    if (ring->cells == NULL) return NULL;
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    if (sf_ring_seq(ring, pos) != pos + 1) return NULL;
    void *p = atomic_load_explicit(&ring->cells[pos & ring->mask].ptr, memory_order_relaxed);
    SF_LS_RMW(RING_POP);
    cell_set_seq(ring, pos, pos + ring->mask + 1);
    atomic_store_explicit(&ring->head, pos + 1, memory_order_relaxed);
    return p;
}
