/* sizeclass.c - the size-class table.
 *
 * 16-byte steps up to 128 B (every request is 16-byte aligned, as glibc's
 * malloc promises on x86-64), then four classes per power of two up to
 * SF_MEDIUM_MAX.  A class of size m * 2^k (m in 5..8) has blocks aligned to at
 * least 2^k when its page's first block is, so aligned requests are served by
 * picking the smallest class whose size is a multiple of the alignment; but
 * a medium class that is not a power of two has its pages coloured
 * (internal.h, sf_page_colour), its blocks aligned to 64 bytes only. */
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

/* floor(2^64 / s) + 1: ceil(2^64 / s), and one more where s divides 2^64,
 * so that m * s mod 2^64 (the step of the fast path's bound, types.h,
 * fast_carved) is never 0: in (0, s] for every class */
#define SF_DM_(s) ((s) ? UINT64_MAX / (s) + 1 + (((s) & ((s) - 1)) == 0) : UINT64_MAX)
const uint64_t sf_class_divmagic[256] = {
    SF_DM_(0), SF_DM_(16), SF_DM_(32), SF_DM_(48), SF_DM_(64), SF_DM_(80), SF_DM_(96), SF_DM_(112),
    SF_DM_(128), SF_DM_(160), SF_DM_(192), SF_DM_(224), SF_DM_(256), SF_DM_(320), SF_DM_(384), SF_DM_(448),
    SF_DM_(512), SF_DM_(640), SF_DM_(768), SF_DM_(896), SF_DM_(1024), SF_DM_(1280), SF_DM_(1536), SF_DM_(1792),
    SF_DM_(2048), SF_DM_(2560), SF_DM_(3072), SF_DM_(3584), SF_DM_(4096), SF_DM_(5120), SF_DM_(6144), SF_DM_(7168),
    SF_DM_(8192), SF_DM_(10240), SF_DM_(12288), SF_DM_(14336), SF_DM_(16384), SF_DM_(20480), SF_DM_(24576), SF_DM_(28672),
    SF_DM_(32768), SF_DM_(40960), SF_DM_(49152), SF_DM_(57344), SF_DM_(65536), SF_DM_(81920), SF_DM_(98304), SF_DM_(114688),
    SF_DM_(131072), SF_DM_(163840), SF_DM_(196608), SF_DM_(229376), SF_DM_(262144),
};
#undef SF_DM_

/* The medium classes by 2 KiB step (sf_medium_class_index): entry i is the
 * mdirect[] index of the class of a request of 2048 * i + 1 to
 * 2048 * (i + 1) bytes, sf_class_of's formula (SF_CLASS_ABOVE_128) on the
 * step's largest size
 * (every medium class size is a multiple of 2 KiB, so a step never holds
 * two classes; tests/test_size_table.c checks every size against
 * sf_class_of).  Entries
 * below the first medium step are never read. */
#define SF_MC_(i) ((i) < SF_SMALL_MAX / 2048 ? 0 : SF_CLASS_ABOVE_128(2048 * ((i) + 1)) - SF_MEDIUM_CLASS_MIN)
#define SF_MC8_(i) SF_MC_(i), SF_MC_(i + 1), SF_MC_(i + 2), SF_MC_(i + 3), SF_MC_(i + 4), SF_MC_(i + 5), SF_MC_(i + 6), SF_MC_(i + 7)
const uint8_t sf_medium_class_by_2k[SF_MEDIUM_MAX / 2048] = {
    SF_MC8_(0), SF_MC8_(8), SF_MC8_(16), SF_MC8_(24), SF_MC8_(32), SF_MC8_(40), SF_MC8_(48), SF_MC8_(56),
    SF_MC8_(64), SF_MC8_(72), SF_MC8_(80), SF_MC8_(88), SF_MC8_(96), SF_MC8_(104), SF_MC8_(112), SF_MC8_(120),
};
#undef SF_MC8_
#undef SF_MC_

/* Smallest class that holds n bytes and whose blocks are all aligned to
 * align (a power of two <= SF_MAX_ALIGN_FROM_CLASS): its size a multiple
 * of align, and past 64 bytes not a coloured class (sf_class_coloured:
 * aligned to 64 only); 0 if none (caller uses a span). */
unsigned sf_class_for_aligned(size_t n, size_t align) {
    if (n > SF_MEDIUM_MAX || align > SF_MAX_ALIGN_FROM_CLASS) return 0;
    for (unsigned c = sf_class_of(n < align ? align : n); c < SF_CLASS_COUNT; c++)
        if ((sf_class_size[c] & (align - 1)) == 0 && (align <= 64 || !sf_class_coloured(sf_class_size[c])))
            return c;
    return 0;
}
