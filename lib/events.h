/* events.h - the event timeline's schema: the kinds of event and what
 * their fields mean, as /events shows them (event.c records and reads them;
 * docs/introspection.md). */
#ifndef SEFER_EVENTS_H
#define SEFER_EVENTS_H

#include <stdint.h>

/* Recording is safe anywhere: inside malloc and free slow paths with sefer
 * locks held, in any thread, in a signal handler (no malloc, no lock, no
 * waiting).  a, b, c, d and code mean, per kind:
 *   SERVER_START   a port, b pid
 *   KNOB           code knob, a old value, b new value, c old source, d new source
 *   ENOMEM         a refusals so far, b bytes asked for (the first, then every 1000th)
 *   GUARD          code enum sf_guard_kind, a address, b detections of the kind so far
 *                  (the first SF_EVENT_GUARD_FIRST of a kind, then every 1000th)
 *   RING_OVERFLOW  code heap slot, a its ring's overflows so far, b ring capacity
 *                  (the first overflow, then at most one a minute while they go on)
 *   TRIM           a bytes released
 *   PROFILE_MARK   text name, a id (for the heap profiler, issue 11)
 *   PHASE_BEGIN/END text name, a b c the phase's figures (for phases, issue 12)
 *   MEMORY_PRESSURE a committed bytes, b memory.limit, c bytes the purge released */
enum sf_event_kind {
    SF_EVENT_NONE,
    SF_EVENT_SERVER_START,
    SF_EVENT_KNOB,
    SF_EVENT_ENOMEM,
    SF_EVENT_GUARD,
    SF_EVENT_RING_OVERFLOW,
    SF_EVENT_TRIM,
    SF_EVENT_PROFILE_MARK,
    SF_EVENT_PHASE_BEGIN,
    SF_EVENT_PHASE_END,
    SF_EVENT_MEMORY_PRESSURE,
    SF_EVENT_KINDS
};
#define SF_EVENT_CAP 1024      /* events kept; older ones are dropped (counted) */
#define SF_EVENT_GUARD_FIRST 10 /* guard detections recorded one by one, per kind */
typedef struct {
    uint64_t seq;     /* event number, from 1 */
    uint64_t time_ms; /* sf_clock_ms() */
    uint32_t kind, code;
    uint64_t a, b, c, d;
    char text[64];
} sf_event_t;
typedef struct {
    uint64_t recorded;      /* events numbered so far */
    uint64_t dropped;       /* of those, no longer (or never) readable */
    uint64_t capacity;      /* SF_EVENT_CAP */
    uint64_t complete_upto; /* every event up to this number was returned or is gone */
} sf_events_info_t;

#endif /* SEFER_EVENTS_H */
