/* ring.c - the remote-free ring: bounded, multi-producer, single-consumer.
 *
 * Each cell carries a sequence number (the bounded-queue scheme of
 * D. Vyukov).  A producer claims a position with one CAS on `tail` and
 * publishes the pointer by storing seq = pos + 1; the consumer (the heap's
 * owner) takes the cell when seq == pos + 1 and hands it back for the next lap
 * with seq = pos + capacity.  A producer never waits: if the cell at its
 * position is still unconsumed the ring is full and push returns false (the
 * caller takes the overflow list).  A cell claimed but not yet published
 * stops the consumer early; it is picked up on the next drain. */
#include "internal.h"

bool sf_ring_init(sf_ring_t *ring, size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    sf_ring_cell_t *cells = sf_os_map_plain(cap * sizeof *cells);
    if (cells == NULL) return false;
    sf_stat_add(&sf_gstats.metadata, sf_align_up(cap * sizeof *cells, OS_PAGE));
    for (size_t i = 0; i < cap; i++) atomic_store_explicit(&cells[i].seq, i, memory_order_relaxed);
    atomic_store_explicit(&ring->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&ring->head, 0, memory_order_relaxed);
    ring->mask = cap - 1;
    ring->cells = cells;
    return true;
}

bool sf_ring_push(sf_ring_t *ring, void *p) {
    uint64_t pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    for (;;) {
        sf_ring_cell_t *cell = &ring->cells[pos & ring->mask];
        uint64_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&ring->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                atomic_store_explicit(&cell->ptr, p, memory_order_relaxed);
                atomic_store_explicit(&cell->seq, pos + 1, memory_order_release);
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
    sf_ring_cell_t *cell = &ring->cells[pos & ring->mask];
    if (atomic_load_explicit(&cell->seq, memory_order_acquire) != pos + 1) return NULL;
    void *p = atomic_load_explicit(&cell->ptr, memory_order_relaxed);
    atomic_store_explicit(&cell->seq, pos + ring->mask + 1, memory_order_release);
    atomic_store_explicit(&ring->head, pos + 1, memory_order_relaxed);
    return p;
}
