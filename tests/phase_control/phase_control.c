/* phase_control.c - the phase measurements' control program: keeps 4 KiB
 * alive, then in a phase allocates 64 KiB and frees it, and prints what
 * the phase measured.
 *
 *   LD_PRELOAD=build/lib/libsefer.so build/tests/phase_control/phase_control
 *
 * Like the bench programs it links against libc only; it finds
 * sefer_phase_begin and sefer_phase_end with dlsym, so under another
 * allocator (or none) it says so and exits 77.  Output (one line):
 *
 *   phase_control entry=E peak=P exit=X peak_error=B allocs=1 frees=1
 *     bytes_allocated=65536 committed_entry=... committed_peak=...
 *     committed_exit=...
 *
 * where E, P and X are bytes in allocated blocks, process-wide: P - E is
 * the 64 KiB block (the test phase-control checks P = E + 65536, X = E). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields of include/sefer.h's struct sefer_phase this program reads,
 * in its order (version 1); the rest of the struct is left to sefer. */
struct phase_v1 {
    uint32_t size, version, depth;
    char name[64];
    uint64_t duration_ns, start_ms, end_ms;
    uint64_t block_bytes_entry, block_bytes_peak, block_bytes_exit, block_bytes_peak_error;
    uint64_t committed_entry, committed_peak, committed_exit;
    uint64_t allocs, frees, reallocs, bytes_allocated;
};

static void *volatile launder; /* keeps the compiler from dropping the pair */

int main(void) {
    int (*begin)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "sefer_phase_begin");
    int (*end)(struct phase_v1 *) = (int (*)(struct phase_v1 *))dlsym(RTLD_DEFAULT, "sefer_phase_end");
    if (begin == NULL || end == NULL) {
        printf("phase_control: sefer_phase_begin/end not found (not running on sefer)\n");
        return 77;
    }
    void *keep = malloc(4096);
    launder = keep;
    struct phase_v1 ph;
    memset(&ph, 0, sizeof ph);
    ph.size = sizeof ph;
    if (begin("control") != 0) return 1;
    void *big = malloc(64 << 10);
    launder = big;
    memset(big, 1, 64 << 10);
    free(big);
    if (end(&ph) != 0) return 1;
    printf("phase_control entry=%llu peak=%llu exit=%llu peak_error=%llu allocs=%llu frees=%llu"
           " bytes_allocated=%llu committed_entry=%llu committed_peak=%llu committed_exit=%llu\n",
           (unsigned long long)ph.block_bytes_entry, (unsigned long long)ph.block_bytes_peak,
           (unsigned long long)ph.block_bytes_exit, (unsigned long long)ph.block_bytes_peak_error,
           (unsigned long long)ph.allocs, (unsigned long long)ph.frees,
           (unsigned long long)ph.bytes_allocated, (unsigned long long)ph.committed_entry,
           (unsigned long long)ph.committed_peak, (unsigned long long)ph.committed_exit);
    free(keep);
    return 0;
}
