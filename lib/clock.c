/* clock.c - the clocks sefer reads.
 *
 * sf_now_ms: milliseconds on CLOCK_MONOTONIC_COARSE, the clock of the
 * allocator's own deadlines (delayed decommit, the large cache's time to
 * live, the span quarantine's budget): cheap to read (no system call, a
 * read of the vDSO page) and precise to a few milliseconds, which is all
 * a deadline of tens of milliseconds needs. */
#include "internal.h"

#include <time.h>

uint64_t sf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
