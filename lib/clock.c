/* clock.c - the clocks sefer reads.
 *
 * sf_now_ms: milliseconds on CLOCK_MONOTONIC_COARSE, the clock of the
 * allocator's own deadlines (delayed decommit, the large cache's time to
 * live, the span quarantine's budget): cheap to read (no system call, a
 * read of the vDSO page) and precise to a few milliseconds, which is all
 * a deadline of tens of milliseconds needs.
 *
 * sf_now_ns: nanoseconds on CLOCK_MONOTONIC, for durations measured to
 * report them (phases, the snapshots' lock holds, the counter build).
 *
 * sf_clock_ms: milliseconds since the Unix epoch as a person reads them,
 * for the times sefer shows (events, /history, phases): the wall clock read
 * once at start-up (sf_clock_init), advanced by CLOCK_BOOTTIME since then,
 * so it never goes backwards when the wall clock is changed and it counts
 * the time the machine was suspended. */
#include "internal.h"

#include <time.h>

uint64_t sf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t sf_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Atomic uint64_t base_real_ms, base_boot_ms;

static uint64_t clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void sf_clock_init(void) {
    atomic_store_explicit(&base_boot_ms, clock_ms(CLOCK_BOOTTIME), memory_order_relaxed);
    atomic_store_explicit(&base_real_ms, clock_ms(CLOCK_REALTIME), memory_order_relaxed);
}

uint64_t sf_clock_ms(void) {
    return atomic_load_explicit(&base_real_ms, memory_order_relaxed) + clock_ms(CLOCK_BOOTTIME) -
           atomic_load_explicit(&base_boot_ms, memory_order_relaxed);
}
