/* unwind_frames.c - a library for tests/test_unwind.c, built twice with
 * frames of different sizes (UNWIND_FRAME: 256 or 4096 bytes) and nothing
 * else different, so that the two copies' code has the same layout while
 * the rules that step out of their frames do not: loaded one after the
 * other at the same address, a rule remembered from the first would walk
 * the second's stack wrong. */
#include <stddef.h>

typedef void *(*unwind_alloc_fn)(size_t);

__attribute__((noinline)) static void *descend(unwind_alloc_fn alloc, int depth, size_t size) {
    volatile char frame[UNWIND_FRAME];
    frame[0] = (char)depth;
    void *p = depth <= 1 ? alloc(size) : descend(alloc, depth - 1, size);
    __asm__ __volatile__("" : "+r"(p) : : "memory"); /* not a tail call */
    frame[1] = frame[0];
    return p;
}

/* `n` blocks of `size` bytes allocated `depth` frames deep in this library. */
void unwind_frames_alloc(unwind_alloc_fn alloc, void **out, int n, int depth, size_t size) {
    for (int i = 0; i < n; i++) out[i] = descend(alloc, depth, size);
}
