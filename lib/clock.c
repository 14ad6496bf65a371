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

#ifdef SEFER_FAULT_INJECTION
/* The test clock, in the fault-injection variant only (its clock.c is
 * compiled with the hook, like its os.c): sefer_test_clock_ms(ms) freezes
 * sf_now_ms() at ms (0: the real clock again), so that tests of what
 * depends on time (the delayed and adaptive decommit, the large cache's
 * ttl, guard.protect_rate) step it themselves instead of sleeping and
 * hoping the machine kept up. */
static _Atomic uint64_t test_clock; /* 0: the real clock */

SEFER_EXPORT void sefer_test_clock_ms(uint64_t ms) { atomic_store(&test_clock, ms); }
#endif

uint64_t sf_now_ms(void) {
#ifdef SEFER_FAULT_INJECTION
    uint64_t frozen = atomic_load_explicit(&test_clock, memory_order_relaxed);
    if (frozen != 0) return frozen;
#endif
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
