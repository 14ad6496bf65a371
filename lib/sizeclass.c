/* sizeclass.c - the size-class table.
 *
 * 16-byte steps up to 128 B (every request is 16-byte aligned, as glibc's
 * malloc promises on x86-64), then four classes per power of two up to
 * SF_MEDIUM_MAX.  A class of size m * 2^k (m in 5..8) has blocks aligned to at
 * least 2^k when its page's first block is, so aligned requests are served by
 * picking the smallest class whose size is a multiple of the alignment. */
#include "internal.h"

const uint32_t sf_class_size[SF_CLASS_COUNT] = {
    0, 16, 32, 48, 64, 80, 96, 112,
    128, 160, 192, 224, 256, 320, 384, 448,
    512, 640, 768, 896, 1024, 1280, 1536, 1792,
    2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168,
    8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672,
    32768, 40960, 49152, 57344, 65536, 81920, 98304, 114688,
    131072, 163840, 196608, 229376, 262144,
};

/* Smallest class that holds n bytes and whose size is a multiple of align
 * (a power of two <= SF_MAX_ALIGN_FROM_CLASS); 0 if none (caller uses a span). */
unsigned sf_class_for_aligned(size_t n, size_t align) {
    if (n > SF_MEDIUM_MAX || align > SF_MAX_ALIGN_FROM_CLASS) return 0;
    for (unsigned c = sf_class_of(n < align ? align : n); c < SF_CLASS_COUNT; c++)
        if ((sf_class_size[c] & (align - 1)) == 0) return c;
    return 0;
}
