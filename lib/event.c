/* event.c - the event timeline: what happened in the process, and when.
 *
 * Events (docs/introspection.md, /events) are recorded where they happen:
 * a knob set at run time, an ENOMEM, a guard detection, a ring overflow, a
 * trim, the introspection server starting, and (for later callers) heap
 * profile marks and phase boundaries.  Several of those places are inside
 * malloc and free slow paths, some with sefer locks held, in any thread,
 * maybe in a signal handler that interrupted one.  So recording allocates
 * nothing, takes no lock, never waits and calls nothing but clock_gettime:
 *
 *   - the events live in a fixed ring of SF_EVENT_CAP slots in static
 *     memory; the oldest are overwritten, and what was lost is counted;
 *   - a writer claims an event number with one fetch_add, then the slot
 *     (number mod capacity) with a CAS on the slot's sequence word, which is
 *     odd while the slot is being written; it stores the payload word by word
 *     (relaxed atomics) and publishes it by storing the even sequence word;
 *   - a writer that finds its slot being written by another (one lapped by
 *     a whole ring of newer events) or already holding a newer event drops
 *     its own and counts it: it never waits;
 *   - a reader (the introspection server) copies a slot and keeps the copy
 *     only if the sequence word said "event n, complete" before and after
 *     (a seqlock), so it never returns a torn event.
 *
 * Event times are milliseconds since the Unix epoch, counted from the
 * process's start on CLOCK_BOOTTIME (sf_clock_ms): they never go backwards
 * when the wall clock is changed, they include time the machine was
 * suspended, and /history uses the same clock, so marks and samples line
 * up (lib/clock.c). */
#include "internal.h"

#define SF_EVENT_WORDS (sizeof(sf_event_t) / sizeof(uint64_t))
_Static_assert(sizeof(sf_event_t) % sizeof(uint64_t) == 0, "an event is whole words");
_Static_assert((SF_EVENT_CAP & (SF_EVENT_CAP - 1)) == 0, "the event ring is a power of two");

typedef struct {
    _Atomic uint64_t seq; /* 0 empty; 2n - 1 event n being written; 2n event n complete */
    _Atomic uint64_t word[SF_EVENT_WORDS];
} sf_event_slot_t;

static sf_event_slot_t ring[SF_EVENT_CAP];
static _Atomic uint64_t claimed;  /* event numbers handed out (the last one) */
static _Atomic uint64_t collided; /* events dropped by their own writer */

/* ---- recording ------------------------------------------------------------------ */

void sf_event_record(sf_event_t *e) {
    uint64_t n = atomic_fetch_add_explicit(&claimed, 1, memory_order_relaxed) + 1;
    sf_event_slot_t *s = &ring[(n - 1) & (SF_EVENT_CAP - 1)];
    uint64_t cur = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if ((cur & 1) || cur >= 2 * n - 1 ||
        !atomic_compare_exchange_strong_explicit(&s->seq, &cur, 2 * n - 1, memory_order_acq_rel,
                                                 memory_order_relaxed)) {
        atomic_fetch_add_explicit(&collided, 1, memory_order_relaxed);
        return;
    }
    atomic_thread_fence(memory_order_release); /* the odd word before any of the payload */
    e->seq = n;
    e->time_ms = sf_clock_ms();
    uint64_t w[SF_EVENT_WORDS];
    memcpy(w, e, sizeof w);
    for (size_t i = 0; i < SF_EVENT_WORDS; i++)
        atomic_store_explicit(&s->word[i], w[i], memory_order_relaxed);
    atomic_store_explicit(&s->seq, 2 * n, memory_order_release);
}

/* The first `count` of a figure's events, then every 1000th. */
static bool worth_an_event(uint64_t count, uint64_t first) {
    return count <= first || count % 1000 == 0;
}

static void copy_text(sf_event_t *e, const char *text) {
    size_t i = 0;
    for (; text != NULL && text[i] != '\0' && i + 1 < sizeof e->text; i++)
        e->text[i] = text[i];
    e->text[i] = '\0';
}

void sf_event_knob(int knob, uint64_t old_value, uint64_t new_value, int old_source,
                   int new_source) {
    sf_event_t e = {.kind = SF_EVENT_KNOB,
                    .code = (uint32_t)knob,
                    .a = old_value,
                    .b = new_value,
                    .c = (uint64_t)old_source,
                    .d = (uint64_t)new_source};
    sf_event_record(&e);
}

void sf_event_enomem(uint64_t count, size_t size) {
    if (!worth_an_event(count, 1)) return;
    sf_event_t e = {.kind = SF_EVENT_ENOMEM, .a = count, .b = size};
    sf_event_record(&e);
}

void sf_event_guard(int kind, const void *p, uint64_t count) {
    if (!worth_an_event(count, SF_EVENT_GUARD_FIRST)) return;
    sf_event_t e = {.kind = SF_EVENT_GUARD, .code = (uint32_t)kind, .a = (uintptr_t)p, .b = count};
    sf_event_record(&e);
}

/* Ring overflows come in bursts of thousands, and a soak under cross-thread
 * load has them every few seconds for hours: an event per free, or even per
 * burst, would push everything else out of the ring within the hour.  So
 * the first overflow of the process makes an event, and then at most one
 * every SF_EVENT_RING_GAP_MS (process-wide) while they go on, each with
 * that ring's count so far; /history has the counter at every sample.
 * This runs on every overflowing remote free: one coarse clock read and one
 * load of a line written at most once a minute.  (Telling a burst's start
 * from its middle would need a time stamp written on every overflow, one
 * more line shared by every overflowing thread.) */
#define SF_EVENT_RING_GAP_MS 60000
static _Atomic uint64_t ring_quiet_until_ms;

void sf_event_ring_overflow(const sf_heap_t *owner) {
    uint64_t now = sf_now_ms();
    uint64_t until = atomic_load_explicit(&ring_quiet_until_ms, memory_order_relaxed);
    if (now < until || !atomic_compare_exchange_strong_explicit(
                           &ring_quiet_until_ms, &until, now + SF_EVENT_RING_GAP_MS,
                           memory_order_relaxed, memory_order_relaxed))
        return;
    sf_event_t e = {.kind = SF_EVENT_RING_OVERFLOW,
                    .code = owner->slot,
                    .a = atomic_load_explicit(&owner->ring.overflowed, memory_order_relaxed),
                    .b = owner->ring.mask + 1};
    sf_event_record(&e);
}

void sf_event_trim(size_t released) {
    sf_event_t e = {.kind = SF_EVENT_TRIM, .a = released};
    sf_event_record(&e);
}

void sf_event_memory_pressure(uint64_t committed, uint64_t limit, size_t released) {
    sf_event_t e = {.kind = SF_EVENT_MEMORY_PRESSURE, .a = committed, .b = limit, .c = released};
    sf_event_record(&e);
}

void sf_event_server_start(int port, int pid) {
    sf_event_t e = {.kind = SF_EVENT_SERVER_START, .a = (uint64_t)port, .b = (uint64_t)pid};
    sf_event_record(&e);
}

void sf_event_profile_mark(const char *name, uint64_t id) {
    sf_event_t e = {.kind = SF_EVENT_PROFILE_MARK, .a = id};
    copy_text(&e, name);
    sf_event_record(&e);
}

void sf_event_phase(bool begin, const char *name, uint64_t a, uint64_t b, uint64_t c) {
    sf_event_t e = {
        .kind = begin ? SF_EVENT_PHASE_BEGIN : SF_EVENT_PHASE_END, .a = a, .b = b, .c = c};
    copy_text(&e, name);
    sf_event_record(&e);
}

/* ---- reading ------------------------------------------------------------------ */

enum slot_state { SLOT_READ, SLOT_GONE, SLOT_PENDING };

/* Copies event n out of its slot: READ, GONE (overwritten by a newer
 * event, or dropped by its writer) or PENDING (claimed, not yet complete). */
static enum slot_state read_slot(uint64_t n, sf_event_t *out) {
    sf_event_slot_t *s = &ring[(n - 1) & (SF_EVENT_CAP - 1)];
    uint64_t before = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (before > 2 * n) return SLOT_GONE;
    if (before != 2 * n) return SLOT_PENDING;
    uint64_t w[SF_EVENT_WORDS];
    for (size_t i = 0; i < SF_EVENT_WORDS; i++)
        w[i] = atomic_load_explicit(&s->word[i], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != before) return SLOT_GONE;
    memcpy(out, w, sizeof w);
    return SLOT_READ;
}

/* An event still pending this long after a later one was complete is
 * taken as lost (its writer was dropped or stopped for good, say by a
 * fork() in the middle). */
#define SF_EVENT_PENDING_MS 1000

size_t sf_events_read(uint64_t after, sf_event_t *out, size_t max, sf_events_info_t *info) {
    uint64_t last = atomic_load_explicit(&claimed, memory_order_acquire);
    uint64_t oldest = last > SF_EVENT_CAP ? last - SF_EVENT_CAP + 1 : 1;
    info->recorded = last;
    info->dropped = oldest - 1 + atomic_load_explicit(&collided, memory_order_relaxed);
    info->capacity = SF_EVENT_CAP;
    info->complete_upto = after > oldest - 1 ? after : oldest - 1;
    size_t got = 0;
    uint64_t now = sf_clock_ms();
    for (uint64_t n = after + 1 > oldest ? after + 1 : oldest; n <= last && got < max; n++) {
        enum slot_state st = read_slot(n, &out[got]);
        if (st == SLOT_READ) {
            got++;
        } else if (st == SLOT_PENDING) {
            /* stop here (the next read returns it) unless a later event,
             * complete for a while already, says its writer is not coming */
            sf_event_t later;
            bool stale = false;
            for (uint64_t k = n + 1; k <= last && !stale; k++)
                stale =
                    read_slot(k, &later) == SLOT_READ && later.time_ms + SF_EVENT_PENDING_MS < now;
            if (!stale) break;
        }
        info->complete_upto = n;
    }
    return got;
}

/* In a fork() child, a slot that another thread was writing stays odd (the
 * thread did not come along), and every later writer of that slot would drop
 * its event.  Such a slot goes back to "older than the event it was
 * getting", which the next lap's writer may take. */
void sf_events_after_fork_child(void) {
    for (size_t i = 0; i < SF_EVENT_CAP; i++) {
        uint64_t seq = atomic_load_explicit(&ring[i].seq, memory_order_relaxed);
        if (seq & 1) atomic_store_explicit(&ring[i].seq, seq - 1, memory_order_relaxed);
    }
}
