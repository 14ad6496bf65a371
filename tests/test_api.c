/* test_api.c - conformance of every function sefer exports, against the
 * behaviour glibc documents, plus the prefixed API, statistics, knobs and
 * guard level 1.  Links libsefer.so, which interposes the malloc family for
 * the whole process. */
#define _GNU_SOURCE
#include "sefer_test.h"

#include <malloc.h>
#include <stdbool.h>

/* Functions glibc 2.36 does not declare (or no longer declares). */
void cfree(void *ptr);
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);
void *__libc_malloc(size_t size);
void __libc_free(void *ptr);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *ptr, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
void __libc_cfree(void *ptr);

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Writes a block end to end (or its first/last MiB when it is big). */
static void touch(void *p, size_t n, int c)
{
    if (n <= 2 * ST_MIB) {
        memset(p, c, n);
    } else {
        memset(p, c, ST_MIB);
        memset((char *)p + n - ST_MIB, c, ST_MIB);
    }
}

/* Refusals since the test's last expect_refusals_counted: each one is
 * counted in sefer_stats' enomem, wherever it was refused (before, calloc's
 * and reallocarray's overflows and aligned requests above PTRDIFF_MAX were
 * not). */
static uint64_t refusals, enomem_before;

static void expect_enomem_ptr(void *p, const char *what)
{
    int e = errno;
    ck_assert_msg(p == NULL, "%s: expected NULL, got %p", what, p);
    ck_assert_msg(e == ENOMEM, "%s: expected errno ENOMEM, got %d (%s)", what, e, strerror(e));
    refusals++;
}

static void expect_refusals_counted(void)
{
    uint64_t now = st_stats().enomem;
    ck_assert_msg(now - enomem_before == refusals, "%llu refusals, %llu counted in enomem",
                  (unsigned long long)refusals, (unsigned long long)(now - enomem_before));
    refusals = 0;
    enomem_before = now;
}

/* ======================================================================
 * sizes: zero, huge, overflow
 * ==================================================================== */

START_TEST(test_malloc_zero)
{
    void *a = malloc(0);
    void *b = malloc(0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    free(a);
    free(b);

    void *c = calloc(0, 0), *d = calloc(0, 16), *e = calloc(16, 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_ne(c, d);
    free(c);
    free(d);
    free(e);

    void *r = realloc(NULL, 0);
    ck_assert_ptr_nonnull(r);
    free(r);

    void *al = aligned_alloc(64, 0);
    if (al) {
        ck_assert_uint_eq((uintptr_t)al % 64, 0);
        free(al);
    }
    void *pm = (void *)0x1;
    ck_assert_int_eq(posix_memalign(&pm, 64, 0), 0);
    if (pm)
        ck_assert_uint_eq((uintptr_t)pm % 64, 0);
    free(pm);

    void *sp = sefer_malloc(0);
    ck_assert_ptr_nonnull(sp);
    sefer_free(sp);
}
END_TEST

START_TEST(test_free_null)
{
    struct sefer_stats before = st_stats();
    free(NULL);
    cfree(NULL);
    free_sized(NULL, 0);
    free_aligned_sized(NULL, 64, 0);
    sefer_free(NULL);
    __libc_free(NULL);
    struct sefer_stats after = st_stats();
    ck_assert_int_eq(ST_DELTA(after, before, frees), 0);
    ck_assert_int_eq(ST_DELTA(after, before, guard_invalid_free), 0);
}
END_TEST

static const size_t huge_sizes[] = {
    SIZE_MAX,
    SIZE_MAX - 1,
    SIZE_MAX - 4096,
    SIZE_MAX / 2 + 1, /* PTRDIFF_MAX + 1 */
    (size_t)PTRDIFF_MAX,
    (size_t)1 << 48, /* more than the user address space */
};

START_TEST(test_malloc_huge_enomem)
{
    expect_refusals_counted();
    char what[96];
    for (size_t i = 0; i < sizeof huge_sizes / sizeof huge_sizes[0]; i++) {
        size_t n = huge_sizes[i];
        snprintf(what, sizeof what, "malloc(%zu)", n);
        errno = 0;
        void *p = malloc(n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "sefer_malloc(%zu)", n);
        errno = 0;
        p = sefer_malloc(n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "calloc(1, %zu)", n);
        errno = 0;
        p = calloc(1, n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "aligned_alloc(64, %zu)", n);
        errno = 0;
        p = aligned_alloc(64, n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "memalign(4096, %zu)", n);
        errno = 0;
        p = memalign(4096, n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "valloc(%zu)", n);
        errno = 0;
        p = valloc(n);
        expect_enomem_ptr(p, what);

        snprintf(what, sizeof what, "pvalloc(%zu)", n);
        errno = 0;
        p = pvalloc(n);
        expect_enomem_ptr(p, what);

        void *out = (void *)0x1234;
        int rc = posix_memalign(&out, 64, n);
        ck_assert_msg(rc == ENOMEM, "posix_memalign(64, %zu) returned %d, expected ENOMEM", n, rc);
        ck_assert_ptr_eq(out, (void *)0x1234);
        refusals++;
    }
    expect_refusals_counted();
    /* The allocator still works. */
    void *p = malloc(100);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, 100);
    free(p);
}
END_TEST

START_TEST(test_calloc_overflow)
{
    static const size_t pairs[][2] = {
        {SIZE_MAX / 2 + 1, 2},
        {2, SIZE_MAX / 2 + 1},
        {(size_t)1 << 32, (size_t)1 << 32},
        {SIZE_MAX, SIZE_MAX},
        {(size_t)1 << 40, (size_t)1 << 25},
        {(SIZE_MAX / 2 + 1) / 2, 2}, /* no overflow but PTRDIFF_MAX + 1 */
        {3, SIZE_MAX / 3 + 1},
    };
    expect_refusals_counted();
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "calloc(%zu, %zu)", pairs[i][0], pairs[i][1]);
        errno = 0;
        expect_enomem_ptr(calloc(pairs[i][0], pairs[i][1]), what);
        snprintf(what, sizeof what, "sefer_calloc(%zu, %zu)", pairs[i][0], pairs[i][1]);
        errno = 0;
        expect_enomem_ptr(sefer_calloc(pairs[i][0], pairs[i][1]), what);
        snprintf(what, sizeof what, "__libc_calloc(%zu, %zu)", pairs[i][0], pairs[i][1]);
        errno = 0;
        expect_enomem_ptr(__libc_calloc(pairs[i][0], pairs[i][1]), what);
    }
    expect_refusals_counted();
}
END_TEST

START_TEST(test_reallocarray_overflow)
{
    unsigned char *p = malloc(64);
    ck_assert_ptr_nonnull(p);
    st_pat_fill(p, 64, 11);
    expect_refusals_counted();

    errno = 0;
    expect_enomem_ptr(reallocarray(p, SIZE_MAX / 2 + 1, 2), "reallocarray(p, SIZE_MAX/2+1, 2)");
    errno = 0;
    expect_enomem_ptr(reallocarray(p, (size_t)1 << 33, (size_t)1 << 33),
                      "reallocarray(p, 2^33, 2^33)");
    errno = 0;
    expect_enomem_ptr(reallocarray(NULL, SIZE_MAX, 3), "reallocarray(NULL, SIZE_MAX, 3)");
    errno = 0;
    expect_enomem_ptr(sefer_reallocarray(p, SIZE_MAX / 2 + 1, 2),
                      "sefer_reallocarray(p, SIZE_MAX/2+1, 2)");
    expect_refusals_counted();
    /* The original block is untouched and still owned by the caller. */
    ck_assert(st_pat_ok(p, 64, 11));

    unsigned char *q = reallocarray(p, 100, 10);
    ck_assert_ptr_nonnull(q);
    ck_assert(st_pat_ok(q, 64, 11));
    ck_assert_uint_ge(malloc_usable_size(q), 1000);
    memset(q + 64, 7, 1000 - 64);
    q = sefer_reallocarray(q, 10, 10);
    ck_assert_ptr_nonnull(q);
    ck_assert(st_pat_ok(q, 64, 11));

    void *r = reallocarray(NULL, 3, 5);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_ge(malloc_usable_size(r), 15);
    free(r);
    free(q);
}
END_TEST

START_TEST(test_realloc_huge_keeps_block)
{
    for (size_t i = 0; i < sizeof huge_sizes / sizeof huge_sizes[0]; i++) {
        unsigned char *p = malloc(200);
        ck_assert_ptr_nonnull(p);
        st_pat_fill(p, 200, 5 + i);
        errno = 0;
        void *q = realloc(p, huge_sizes[i]);
        expect_enomem_ptr(q, "realloc(p, huge)");
        ck_assert_msg(st_pat_ok(p, 200, 5 + i), "realloc failure damaged the block");
        errno = 0;
        q = sefer_realloc(p, huge_sizes[i]);
        expect_enomem_ptr(q, "sefer_realloc(p, huge)");
        ck_assert(st_pat_ok(p, 200, 5 + i));
        free(p);
    }
    /* Same from a large block. */
    unsigned char *p = malloc(8 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    st_pat_fill(p, 4096, 99);
    errno = 0;
    expect_enomem_ptr(realloc(p, SIZE_MAX / 2 + 1), "realloc(large, PTRDIFF_MAX+1)");
    ck_assert(st_pat_ok(p, 4096, 99));
    free(p);
}
END_TEST

/* ======================================================================
 * calloc zeroes, also over dirty reused memory
 * ==================================================================== */

static void check_zero(const unsigned char *p, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            ck_abort_msg("%s: byte %zu of %zu is 0x%02x, not zero", what, i, n, p[i]);
}

static void calloc_dirty_round(size_t size, size_t count, const char *what)
{
    void **v = st_map(count * sizeof *v);
    for (size_t i = 0; i < count; i++) {
        v[i] = malloc(size);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], 0xA5, malloc_usable_size(v[i]));
    }
    for (size_t i = 0; i < count; i++)
        free(v[i]);
    for (size_t i = 0; i < count; i++) {
        v[i] = calloc(1, size);
        ck_assert_ptr_nonnull(v[i]);
        check_zero(v[i], size, what);
    }
    /* The other factorisation of the same request. */
    for (size_t i = 0; i < count; i++) {
        memset(v[i], 0x5A, size);
        free(v[i]);
    }
    for (size_t i = 0; i < count; i++) {
        v[i] = calloc(size >= 8 ? size / 8 : size, size >= 8 ? 8 : 1);
        ck_assert_ptr_nonnull(v[i]);
        check_zero(v[i], size >= 8 ? size / 8 * 8 : size, what);
    }
    for (size_t i = 0; i < count; i++)
        free(v[i]);
    st_unmap(v, count * sizeof *v);
}

START_TEST(test_calloc_zeroed)
{
    unsigned char *p = calloc(1000, 7);
    ck_assert_ptr_nonnull(p);
    check_zero(p, 7000, "fresh calloc(1000,7)");
    free(p);

    calloc_dirty_round(24, 4000, "small 24");
    calloc_dirty_round(48, 2000, "small 48");
    calloc_dirty_round(1000, 500, "small 1000");
    calloc_dirty_round(SEFER_SMALL_MAX, 64, "small max");
    calloc_dirty_round(SEFER_SMALL_MAX + 1, 64, "medium min");
    calloc_dirty_round(100 * ST_KIB, 16, "medium 100K");
    calloc_dirty_round(SEFER_MEDIUM_MAX, 8, "medium max");
    calloc_dirty_round(SEFER_MEDIUM_MAX + 1, 4, "large min");
    calloc_dirty_round(8 * ST_MIB, 2, "large 8M");
    calloc_dirty_round(20 * ST_MIB + 123, 1, "large 20M");
}
END_TEST

START_TEST(test_calloc_zeroed_after_realloc_shrink)
{
    /* Memory given back by a shrinking realloc must be zero when calloc
     * hands it out again. */
    unsigned char *p = malloc(12 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    memset(p, 0xEE, 12 * ST_MIB);
    p = realloc(p, 4096);
    ck_assert_ptr_nonnull(p);
    unsigned char *q = calloc(1, 8 * ST_MIB);
    ck_assert_ptr_nonnull(q);
    check_zero(q, 8 * ST_MIB, "calloc after shrink");
    free(q);
    free(p);
}
END_TEST

/* ======================================================================
 * alignment
 * ==================================================================== */

enum alloc_fn { FN_POSIX_MEMALIGN, FN_ALIGNED_ALLOC, FN_MEMALIGN, FN_LIBC_MEMALIGN,
                FN_SEFER_POSIX_MEMALIGN, FN_SEFER_ALIGNED_ALLOC, FN_SEFER_MEMALIGN, FN_COUNT };
static const char *const fn_names[] = {"posix_memalign", "aligned_alloc", "memalign",
                                       "__libc_memalign", "sefer_posix_memalign",
                                       "sefer_aligned_alloc", "sefer_memalign"};

static void *alloc_aligned(enum alloc_fn fn, size_t align, size_t size, int *rc)
{
    void *p = NULL;
    *rc = 0;
    switch (fn) {
    case FN_POSIX_MEMALIGN:
        *rc = posix_memalign(&p, align, size);
        break;
    case FN_SEFER_POSIX_MEMALIGN:
        *rc = sefer_posix_memalign(&p, align, size);
        break;
    case FN_ALIGNED_ALLOC:
        p = aligned_alloc(align, size);
        break;
    case FN_SEFER_ALIGNED_ALLOC:
        p = sefer_aligned_alloc(align, size);
        break;
    case FN_MEMALIGN:
        p = memalign(align, size);
        break;
    case FN_LIBC_MEMALIGN:
        p = __libc_memalign(align, size);
        break;
    case FN_SEFER_MEMALIGN:
        p = sefer_memalign(align, size);
        break;
    default:
        break;
    }
    return p;
}

/* Loop test: _i selects the function. */
START_TEST(test_alignment_all_powers)
{
    enum alloc_fn fn = (enum alloc_fn)_i;
    unsigned first_shift = (fn == FN_POSIX_MEMALIGN || fn == FN_SEFER_POSIX_MEMALIGN) ? 3 : 0;
    for (unsigned shift = first_shift; shift <= 26; shift++) {
        size_t align = (size_t)1 << shift;
        const size_t sizes[] = {1, 8, 100, align > 1 ? align - 1 : 1, align, align + 1,
                                3 * align / 2 + 3};
        void *keep[sizeof sizes / sizeof sizes[0]];
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t size = sizes[k];
            int rc;
            void *p = alloc_aligned(fn, align, size, &rc);
            ck_assert_msg(rc == 0 && p != NULL, "%s(align %zu, size %zu) failed: rc %d errno %d",
                          fn_names[fn], align, size, rc, errno);
            ck_assert_msg((uintptr_t)p % align == 0, "%s(align %zu, size %zu) = %p: misaligned",
                          fn_names[fn], align, size, p);
            size_t usable = sefer_usable_size(p);
            ck_assert_msg(usable >= size, "%s(align %zu, size %zu): usable %zu", fn_names[fn],
                          align, size, usable);
            ck_assert_uint_eq(malloc_usable_size(p), usable);
            touch(p, size, 0x3C);
            keep[k] = p;
        }
        /* All still writable and distinct while live together. */
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (size_t j = k + 1; j < sizeof sizes / sizeof sizes[0]; j++)
                ck_assert_ptr_ne(keep[k], keep[j]);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            if (fn >= FN_SEFER_POSIX_MEMALIGN)
                sefer_free(keep[k]);
            else
                free(keep[k]);
        }
    }
}
END_TEST

/* Loop test: _i selects the function.  A request of 0 bytes with an
 * alignment no class has (a span's): a block sefer owns like any other,
 * one of its own, that malloc_usable_size sees and realloc and free take.
 * (aligned_alloc(4 MiB, 0) returned the address just past its span,
 * which every free then refused as not sefer's, aborting at level 1.) */
START_TEST(test_alignment_zero_size)
{
    enum alloc_fn fn = (enum alloc_fn)_i;
    for (unsigned shift = 18; shift <= 24; shift++) {
        size_t align = (size_t)1 << shift;
        int rc;
        void *p = alloc_aligned(fn, align, 0, &rc), *q = alloc_aligned(fn, align, 0, &rc);
        ck_assert_msg(rc == 0 && p != NULL && q != NULL, "%s(align %zu, 0) failed: rc %d",
                      fn_names[fn], align, rc);
        ck_assert_ptr_ne(p, q);
        ck_assert_msg((uintptr_t)p % align == 0, "%s(align %zu, 0) = %p: misaligned",
                      fn_names[fn], align, p);
        ck_assert_msg(malloc_usable_size(p) > 0, "%s(align %zu, 0) = %p: usable 0, not a block",
                      fn_names[fn], align, p);
        errno = 0;
        void *r = realloc(p, 100);
        ck_assert_msg(r != NULL, "realloc of %s(align %zu, 0) = %p: NULL errno %d",
                      fn_names[fn], align, p, errno);
        memset(r, 1, 100);
        free(r);
        free(q);
    }
}
END_TEST

/* The failure mode of the Rust original: 640-byte cells aligned to 128 must
 * come from a size class, not a segment each. */
START_TEST(test_alignment_from_classes)
{
    const size_t n = 10000;
    void **v = st_map(n * sizeof *v);
    struct sefer_stats before = st_stats();
    for (size_t i = 0; i < n; i++) {
        v[i] = aligned_alloc(128, 640);
        if (!v[i] || (uintptr_t)v[i] % 128)
            ck_abort_msg("aligned_alloc(128, 640) #%zu = %p", i, v[i]);
        memset(v[i], (int)i, 640);
    }
    struct sefer_stats mid = st_stats();
    ck_assert_msg(ST_DELTA(mid, before, segments) <= 8,
                  "10000 x aligned_alloc(128, 640) (6.4 MB) took %" PRId64 " segments",
                  ST_DELTA(mid, before, segments));
    for (size_t i = 0; i < n; i++)
        free(v[i]);

    before = st_stats();
    for (size_t i = 0; i < 2000; i++) {
        int rc = posix_memalign(&v[i], 4096, 4096);
        if (rc || (uintptr_t)v[i] % 4096)
            ck_abort_msg("posix_memalign(4096, 4096) #%zu rc %d p %p", i, rc, v[i]);
        memset(v[i], 1, 4096);
    }
    mid = st_stats();
    ck_assert_msg(ST_DELTA(mid, before, segments) <= 8,
                  "2000 x posix_memalign(4096, 4096) (8 MiB) took %" PRId64 " segments",
                  ST_DELTA(mid, before, segments));
    for (size_t i = 0; i < 2000; i++)
        free(v[i]);

    before = st_stats();
    for (size_t i = 0; i < 100; i++) {
        v[i] = memalign(SEFER_MEDIUM_MAX, SEFER_MEDIUM_MAX);
        if (!v[i] || (uintptr_t)v[i] % SEFER_MEDIUM_MAX)
            ck_abort_msg("memalign(MEDIUM_MAX, MEDIUM_MAX) #%zu = %p", i, v[i]);
        memset(v[i], 2, SEFER_MEDIUM_MAX);
    }
    mid = st_stats();
    ck_assert_msg(ST_DELTA(mid, before, segments) <= 12,
                  "100 x memalign(128K, 128K) (12.5 MiB) took %" PRId64 " segments",
                  ST_DELTA(mid, before, segments));
    for (size_t i = 0; i < 100; i++)
        free(v[i]);
    st_unmap(v, n * sizeof *v);
}
END_TEST

START_TEST(test_alignment_invalid)
{
    static const size_t bad_posix[] = {0, 1, 2, 4, 3, 12, 24, 48, 96, 4095, 4097,
                                       SIZE_MAX, SIZE_MAX / 2 + 2};
    for (size_t i = 0; i < sizeof bad_posix / sizeof bad_posix[0]; i++) {
        void *out = (void *)0x77;
        errno = 4242;
        int rc = posix_memalign(&out, bad_posix[i], 64);
        ck_assert_msg(rc == EINVAL, "posix_memalign(align %zu) returned %d, not EINVAL",
                      bad_posix[i], rc);
        ck_assert_msg(errno == 4242, "posix_memalign(align %zu) changed errno to %d",
                      bad_posix[i], errno);
        ck_assert_ptr_eq(out, (void *)0x77);
        errno = 4242;
        rc = sefer_posix_memalign(&out, bad_posix[i], 64);
        ck_assert_msg(rc == EINVAL, "sefer_posix_memalign(align %zu) returned %d", bad_posix[i],
                      rc);
        ck_assert_int_eq(errno, 4242);
        ck_assert_ptr_eq(out, (void *)0x77);
    }

    static const size_t bad_aligned[] = {0, 3, 12, 24, 48, 96, 4095, SIZE_MAX,
                                         SIZE_MAX / 2 + 2};
    for (size_t i = 0; i < sizeof bad_aligned / sizeof bad_aligned[0]; i++) {
        errno = 0;
        void *p = aligned_alloc(bad_aligned[i], 64);
        ck_assert_msg(p == NULL && errno == EINVAL,
                      "aligned_alloc(align %zu) = %p errno %d, expected NULL/EINVAL",
                      bad_aligned[i], p, errno);
        errno = 0;
        p = sefer_aligned_alloc(bad_aligned[i], 64);
        ck_assert_msg(p == NULL && errno == EINVAL,
                      "sefer_aligned_alloc(align %zu) = %p errno %d", bad_aligned[i], p, errno);
    }

    /* aligned_alloc accepts a size that is not a multiple of the alignment
     * (C17 DR 460, and glibc). */
    void *p = aligned_alloc(64, 100);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    free(p);

    /* memalign: an alignment above SIZE_MAX/2+1 is EINVAL ... */
    errno = 0;
    p = memalign(SIZE_MAX, 64);
    ck_assert_msg(p == NULL && errno == EINVAL, "memalign(SIZE_MAX) = %p errno %d", p, errno);
    errno = 0;
    p = memalign(SIZE_MAX / 2 + 2, 64);
    ck_assert_msg(p == NULL && errno == EINVAL, "memalign(SIZE_MAX/2+2) = %p errno %d", p, errno);
    errno = 0;
    p = sefer_memalign(SIZE_MAX, 64);
    ck_assert_msg(p == NULL && errno == EINVAL, "sefer_memalign(SIZE_MAX) = %p errno %d", p,
                  errno);
}
END_TEST

START_TEST(test_memalign_rounds_up)
{
    /* glibc: memalign with a non-power-of-two alignment rounds it up to the
     * next power of two; 0 (or anything not above the minimum) acts like
     * malloc. */
    static const size_t cases[][2] = {{0, 1},      {1, 1},       {3, 4},       {5, 8},
                                      {24, 32},    {48, 64},     {100, 128},   {200, 256},
                                      {1000, 1024}, {3000, 4096}, {5000, 8192}, {65537, 131072},
                                      {(3 << 20), (4 << 20)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int f = 0; f < 3; f++) {
            errno = 0;
            void *p = f == 0 ? memalign(cases[i][0], 300)
                      : f == 1 ? __libc_memalign(cases[i][0], 300)
                               : sefer_memalign(cases[i][0], 300);
            ck_assert_msg(p != NULL, "memalign variant %d(%zu, 300) failed errno %d", f,
                          cases[i][0], errno);
            ck_assert_msg((uintptr_t)p % cases[i][1] == 0,
                          "memalign variant %d(%zu, 300) = %p not aligned to %zu", f, cases[i][0],
                          p, cases[i][1]);
            ck_assert_uint_ge(malloc_usable_size(p), 300);
            memset(p, 9, 300);
            free(p);
        }
    }
    /* alignments up to SIZE_MAX/2+1 are taken and rounded up as glibc
     * does (2^63 and those that round to it included): no process has the
     * room, so ENOMEM, not EINVAL (that is for those above, which have no
     * power of two to round to: test_alignment_invalid) */
    static const size_t unplaceable[] = {((size_t)1 << 62) + 1, (size_t)3 << 61, SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < sizeof unplaceable / sizeof unplaceable[0]; i++) {
        for (int f = 0; f < 3; f++) {
            errno = 0;
            void *p = f == 0 ? memalign(unplaceable[i], 300)
                      : f == 1 ? __libc_memalign(unplaceable[i], 300)
                               : sefer_memalign(unplaceable[i], 300);
            int e = errno;
            ck_assert_msg(p == NULL && e == ENOMEM, "memalign variant %d(%#zx, 300) = %p errno %d, not ENOMEM",
                          f, unplaceable[i], p, e);
        }
    }
}
END_TEST

START_TEST(test_valloc_pvalloc)
{
    size_t pg = page_size();
    static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 10000, 100000, 3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        for (int f = 0; f < 2; f++) {
            void *p = f ? __libc_valloc(n) : valloc(n);
            ck_assert_ptr_nonnull(p);
            ck_assert_msg((uintptr_t)p % pg == 0, "valloc(%zu) = %p not page aligned", n, p);
            ck_assert_uint_ge(malloc_usable_size(p), n);
            memset(p, 0x11, n);
            free(p);

            size_t rounded = (n + pg - 1) / pg * pg;
            void *q = f ? __libc_pvalloc(n) : pvalloc(n);
            ck_assert_ptr_nonnull(q);
            ck_assert_msg((uintptr_t)q % pg == 0, "pvalloc(%zu) = %p not page aligned", n, q);
            ck_assert_msg(malloc_usable_size(q) >= rounded,
                          "pvalloc(%zu): usable %zu below the page-rounded size %zu", n,
                          malloc_usable_size(q), rounded);
            memset(q, 0x22, rounded);
            free(q);
        }
    }
    /* pvalloc(0) still gives one page in glibc; at least it must not fail. */
    void *z = pvalloc(0);
    ck_assert_ptr_nonnull(z);
    ck_assert_uint_eq((uintptr_t)z % pg, 0);
    free(z);
    /* Rounding up must not wrap. */
    errno = 0;
    expect_enomem_ptr(pvalloc(SIZE_MAX - pg / 2), "pvalloc(SIZE_MAX - pg/2)");
}
END_TEST

/* ======================================================================
 * usable size
 * ==================================================================== */

START_TEST(test_usable_size)
{
    ck_assert_uint_eq(malloc_usable_size(NULL), 0);
    ck_assert_uint_eq(sefer_usable_size(NULL), 0);

    /* Writing all of the usable size must not touch the neighbours. */
    size_t n = 1;
    while (n <= 3 * SEFER_MEDIUM_MAX) {
        unsigned char *a = malloc(n), *b = malloc(n), *c = malloc(n);
        ck_assert(a && b && c);
        size_t ua = malloc_usable_size(a), ub = malloc_usable_size(b),
               uc = malloc_usable_size(c);
        ck_assert_msg(ua >= n && ub >= n && uc >= n, "usable below request %zu: %zu %zu %zu", n,
                      ua, ub, uc);
        ck_assert_uint_eq(sefer_usable_size(b), ub);
        st_pat_fill(a, ua, 1);
        st_pat_fill(c, uc, 3);
        memset(b, 0xFF, ub);
        ck_assert_msg(st_pat_ok(a, ua, 1) && st_pat_ok(c, uc, 3),
                      "writing usable size %zu of a %zu-byte block hit a neighbour", ub, n);
        free(b);
        ck_assert_msg(st_pat_ok(a, ua, 1) && st_pat_ok(c, uc, 3),
                      "free of a %zu-byte block damaged a neighbour", n);
        free(a);
        free(c);
        n = n < 64 ? n + 1 : n + n / 7 + 1;
    }
}
END_TEST

/* ======================================================================
 * realloc
 * ==================================================================== */

START_TEST(test_realloc_null_and_zero)
{
    void *p = realloc(NULL, 100);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(malloc_usable_size(p), 100);
    memset(p, 1, 100);

    struct sefer_stats before = st_stats();
    void *q = realloc(p, 0);
    struct sefer_stats after = st_stats();
    /* glibc: realloc(p, 0) frees p and returns NULL. */
    ck_assert_ptr_null(q);
    ck_assert_int_eq(ST_DELTA(after, before, frees), 1);
    ck_assert_int_eq(ST_DELTA(after, before, allocs), 0);

    p = sefer_realloc(NULL, 50);
    ck_assert_ptr_nonnull(p);
    before = st_stats();
    q = sefer_realloc(p, 0);
    after = st_stats();
    ck_assert_ptr_null(q);
    ck_assert_int_eq(ST_DELTA(after, before, frees), 1);

    p = __libc_realloc(NULL, 30);
    ck_assert_ptr_nonnull(p);
    free(p);

    /* Same for a large block. */
    p = malloc(6 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    before = st_stats();
    q = realloc(p, 0);
    after = st_stats();
    ck_assert_ptr_null(q);
    ck_assert_int_eq(ST_DELTA(after, before, frees), 1);
}
END_TEST

struct walk {
    unsigned char *p;
    size_t len; /* bytes that hold the pattern */
    uint64_t seed;
    size_t moves;
};

static void walk_to(struct walk *w, size_t n, bool sefer)
{
    unsigned char *q = sefer ? sefer_realloc(w->p, n) : realloc(w->p, n);
    ck_assert_msg(q != NULL, "realloc(%p, %zu) failed: %s", (void *)w->p, n, strerror(errno));
    size_t keep = w->len < n ? w->len : n;
    size_t bad = st_pat_check_range(q, 0, keep, w->seed);
    ck_assert_msg(bad == SIZE_MAX,
                  "realloc from %zu to %zu bytes (%p -> %p): byte %zu not preserved", w->len, n,
                  (void *)w->p, (void *)q, bad);
    size_t usable = sefer_usable_size(q);
    ck_assert_msg(usable >= n, "realloc to %zu: usable size %zu", n, usable);
    if (q != w->p)
        w->moves++;
    w->p = q;
    if (n > keep)
        st_pat_fill_range(q, keep, n, w->seed);
    w->len = n;
}

/* Walks 1 .. 2*SEFER_MEDIUM_MAX through every usable-size change, then on
 * into large and huge sizes and all the way back down. */
static void realloc_walk(bool sefer)
{
    struct walk w = {NULL, 0, 0xC0FFEE ^ (uint64_t)sefer, 0};
    size_t *classes = st_map(65536 * sizeof *classes);
    size_t nclasses = 0;

    w.p = sefer ? sefer_malloc(1) : malloc(1);
    ck_assert_ptr_nonnull(w.p);
    st_pat_fill(w.p, 1, w.seed);
    w.len = 1;
    size_t n = 1;
    while (n <= 2 * SEFER_MEDIUM_MAX) {
        walk_to(&w, n, sefer);
        size_t usable = sefer_usable_size(w.p);
        if (!nclasses || classes[nclasses - 1] != usable) {
            ck_assert_uint_lt(nclasses, 65536);
            classes[nclasses++] = usable;
        }
        if (usable > n && usable <= 2 * SEFER_MEDIUM_MAX) {
            /* Growing within the usable size must not move the block. */
            unsigned char *before = w.p;
            walk_to(&w, usable, sefer);
            ck_assert_msg(w.p == before, "realloc(%p, %zu) within usable size %zu moved to %p",
                          (void *)before, usable, usable, (void *)w.p);
        }
        n = usable + 1;
    }
    ck_assert_msg(nclasses >= 24, "only %zu distinct usable sizes up to %zu", nclasses,
                  2 * SEFER_MEDIUM_MAX);

    /* large, huge */
    walk_to(&w, 1 * ST_MIB, sefer);
    walk_to(&w, 8 * ST_MIB, sefer);
    walk_to(&w, 40 * ST_MIB, sefer);
    walk_to(&w, 300 * ST_MIB, sefer);
    /* and back down */
    walk_to(&w, 40 * ST_MIB + 17, sefer);
    walk_to(&w, 8 * ST_MIB, sefer);
    walk_to(&w, 1 * ST_MIB, sefer);
    for (size_t i = nclasses; i-- > 0;) {
        walk_to(&w, classes[i], sefer);
        if (classes[i] > 1)
            walk_to(&w, classes[i] - 1, sefer);
    }
    walk_to(&w, 1, sefer);
    ck_assert_uint_gt(w.moves, 0);
    if (sefer)
        sefer_free(w.p);
    else
        free(w.p);
    st_unmap(classes, 65536 * sizeof *classes);
}

START_TEST(test_realloc_walk)
{
    realloc_walk(false);
}
END_TEST

START_TEST(test_realloc_walk_sefer)
{
    realloc_walk(true);
}
END_TEST

START_TEST(test_realloc_large_in_place)
{
    /* Shrinking a large block a little, or growing it within its usable
     * size, must not move it. */
    unsigned char *p = malloc(40 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    st_pat_fill(p, 40 * ST_MIB, 77);
    unsigned char *q = realloc(p, 39 * ST_MIB);
    ck_assert_msg(q == p, "realloc(40 MiB -> 39 MiB) moved the block");
    ck_assert(st_pat_ok(q, 39 * ST_MIB, 77));
    size_t u = malloc_usable_size(q);
    ck_assert_uint_ge(u, 39 * ST_MIB);
    q = realloc(q, u);
    ck_assert_msg(q == p, "realloc within usable size moved a large block");
    ck_assert(st_pat_ok(q, 39 * ST_MIB, 77));
    free(q);
}
END_TEST

START_TEST(test_realloc_aligned_blocks)
{
    /* realloc of blocks that came from the aligned entry points (classes
     * and spans) keeps the contents, both ways. */
    static const size_t cases[][2] = {{64, 640},          {4096, 4096},
                                      {SEFER_MEDIUM_MAX, 1000}, {ST_MIB, 3 * ST_MIB},
                                      {8 * ST_MIB, 100},  {64, 10 * ST_MIB}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t al = cases[i][0], n = cases[i][1];
        unsigned char *p = aligned_alloc(al, n);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % al, 0);
        st_pat_fill(p, n, i);
        size_t up = n * 4 + 12345;
        unsigned char *q = realloc(p, up);
        ck_assert_ptr_nonnull(q);
        ck_assert_msg(st_pat_ok(q, n, i), "aligned (%zu, %zu) grown to %zu lost data", al, n, up);
        st_pat_fill_range(q, n, up, i);
        unsigned char *r = realloc(q, n / 3 + 1);
        ck_assert_ptr_nonnull(r);
        ck_assert_msg(st_pat_ok(r, n / 3 + 1, i), "aligned (%zu, %zu) shrunk lost data", al, n);
        free(r);
    }
}
END_TEST

START_TEST(test_realloc_many_blocks)
{
    /* Several blocks growing in turn (so none can simply extend into free
     * space behind it) keep their contents. */
    enum { N = 64 };
    unsigned char *b[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = 1 + (size_t)i;
        b[i] = malloc(len[i]);
        ck_assert_ptr_nonnull(b[i]);
        st_pat_fill(b[i], len[i], (uint64_t)i);
    }
    for (int round = 0; round < 14; round++) {
        for (int i = 0; i < N; i++) {
            size_t n = len[i] * 2 + (size_t)round;
            unsigned char *q = realloc(b[i], n);
            ck_assert_ptr_nonnull(q);
            ck_assert_msg(st_pat_ok(q, len[i], (uint64_t)i), "block %d round %d lost data", i,
                          round);
            st_pat_fill_range(q, len[i], n, (uint64_t)i);
            b[i] = q;
            len[i] = n;
        }
    }
    for (int i = 0; i < N; i++) {
        ck_assert(st_pat_ok(b[i], len[i], (uint64_t)i));
        free(b[i]);
    }
}
END_TEST

/* ======================================================================
 * other entry points
 * ==================================================================== */

START_TEST(test_entry_points_reach_sefer)
{
    struct sefer_stats s0, s1;
    void *p;

#define EXPECT_ALLOC(expr, n)                                                              \
    do {                                                                                   \
        s0 = st_stats();                                                                   \
        p = (expr);                                                                        \
        s1 = st_stats();                                                                   \
        ck_assert_msg(p != NULL, #expr " returned NULL");                                  \
        ck_assert_msg(ST_DELTA(s1, s0, allocs) == 1, #expr ": allocs grew by %" PRId64,   \
                      ST_DELTA(s1, s0, allocs));                                           \
        ck_assert_msg(sefer_usable_size(p) >= (n), #expr ": sefer_usable_size %zu",        \
                      sefer_usable_size(p));                                               \
        memset(p, 0x6B, (n));                                                              \
    } while (0)
#define EXPECT_FREE(stmt)                                                                  \
    do {                                                                                   \
        s0 = st_stats();                                                                   \
        stmt;                                                                              \
        s1 = st_stats();                                                                   \
        ck_assert_msg(ST_DELTA(s1, s0, frees) == 1, #stmt ": frees grew by %" PRId64,     \
                      ST_DELTA(s1, s0, frees));                                            \
    } while (0)

    EXPECT_ALLOC(malloc(100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(calloc(10, 10), 100);
    EXPECT_FREE(cfree(p));
    EXPECT_ALLOC(realloc(NULL, 100), 100);
    EXPECT_FREE(free_sized(p, 100));
    EXPECT_ALLOC(reallocarray(NULL, 10, 10), 100);
    EXPECT_FREE(sefer_free(p));
    EXPECT_ALLOC(aligned_alloc(256, 512), 512);
    EXPECT_FREE(free_aligned_sized(p, 256, 512));
    EXPECT_ALLOC(memalign(64, 64), 64);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(valloc(100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(pvalloc(100), 100);
    EXPECT_FREE(free(p));
    {
        void *out = NULL;
        s0 = st_stats();
        int rc = posix_memalign(&out, 128, 300);
        s1 = st_stats();
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(ST_DELTA(s1, s0, allocs), 1);
        ck_assert_uint_ge(sefer_usable_size(out), 300);
        p = out;
        EXPECT_FREE(free(p));
    }
    EXPECT_ALLOC(__libc_malloc(100), 100);
    EXPECT_FREE(__libc_free(p));
    EXPECT_ALLOC(__libc_calloc(4, 25), 100);
    EXPECT_FREE(__libc_cfree(p));
    EXPECT_ALLOC(__libc_realloc(NULL, 100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(__libc_memalign(4096, 100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(__libc_valloc(100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(__libc_pvalloc(100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(sefer_malloc(100), 100);
    EXPECT_FREE(free(p));
    EXPECT_ALLOC(sefer_calloc(5, 20), 100);
    EXPECT_FREE(sefer_free(p));
    EXPECT_ALLOC(sefer_aligned_alloc(64, 100), 100);
    EXPECT_FREE(sefer_free(p));
    EXPECT_ALLOC(sefer_memalign(64, 100), 100);
    EXPECT_FREE(sefer_free(p));
    /* Big ones through the sized frees too. */
    EXPECT_ALLOC(malloc(5 * ST_MIB), 5 * ST_MIB);
    EXPECT_FREE(free_sized(p, 5 * ST_MIB));
    EXPECT_ALLOC(aligned_alloc(ST_MIB, 3 * ST_MIB), 3 * ST_MIB);
    EXPECT_FREE(free_aligned_sized(p, ST_MIB, 3 * ST_MIB));
#undef EXPECT_ALLOC
#undef EXPECT_FREE
}
END_TEST

START_TEST(test_calloc_realloc_libc_aliases)
{
    unsigned char *p = __libc_calloc(100, 3);
    ck_assert_ptr_nonnull(p);
    check_zero(p, 300, "__libc_calloc");
    st_pat_fill(p, 300, 4);
    p = __libc_realloc(p, 50000);
    ck_assert_ptr_nonnull(p);
    ck_assert(st_pat_ok(p, 300, 4));
    p = __libc_realloc(p, 10);
    ck_assert_ptr_nonnull(p);
    ck_assert(st_pat_ok(p, 10, 4));
    __libc_free(p);
}
END_TEST

START_TEST(test_sized_frees_reuse)
{
    /* Memory given back through free_sized / cfree is reused: a loop that
     * frees that way does not grow. */
    struct sefer_stats before = st_stats();
    for (int i = 0; i < 20000; i++) {
        void *a = malloc(200), *b = aligned_alloc(512, 1000), *c = malloc(3000);
        ck_assert(a && b && c);
        free_sized(a, 200);
        free_aligned_sized(b, 512, 1000);
        cfree(c);
    }
    struct sefer_stats after = st_stats();
    ck_assert_int_le(ST_DELTA(after, before, segments), 2);
    ck_assert_int_eq(ST_DELTA(after, before, allocs), ST_DELTA(after, before, frees));
}
END_TEST

START_TEST(test_malloc_trim_mallinfo_stats)
{
    int r = malloc_trim(0);
    ck_assert_msg(r == 0 || r == 1, "malloc_trim returned %d", r);

    struct mallinfo2 m0 = mallinfo2();
    const size_t n = 4000, sz = 2500;
    void **v = st_map(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(sz);
        ck_assert_ptr_nonnull(v[i]);
    }
    struct mallinfo2 m1 = mallinfo2();
    ck_assert_msg(m1.uordblks >= m0.uordblks + n * sz,
                  "mallinfo2 uordblks %zu -> %zu after allocating %zu bytes", m0.uordblks,
                  m1.uordblks, n * sz);
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    struct mallinfo2 m2 = mallinfo2();
    ck_assert_msg(m2.uordblks < m1.uordblks, "uordblks did not fall after free: %zu -> %zu",
                  m1.uordblks, m2.uordblks);
    st_unmap(v, n * sizeof *v);

    r = malloc_trim(0);
    ck_assert_msg(r == 0 || r == 1, "malloc_trim returned %d", r);
    r = malloc_trim(SIZE_MAX);
    ck_assert_msg(r == 0 || r == 1, "malloc_trim(SIZE_MAX) returned %d", r);

    struct st_capture cap;
    static char out[8192];
    st_capture_begin(&cap);
    malloc_stats();
    size_t len = st_capture_end(&cap, out, sizeof out);
    ck_assert_msg(len > 0, "malloc_stats wrote nothing to stderr");
}
END_TEST

START_TEST(test_version)
{
    const char *v = sefer_version();
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(v, SEFER_VERSION_STRING);
}
END_TEST

/* sefer_build() says what scripts/build-id.sh says about the source tree
 * now (meson test rebuilds first, and the build reads the commit at every
 * build); sefer_build_options() names the configuration. */
START_TEST(test_build)
{
    const char *b = sefer_build(), *src = getenv("SEFER_TEST_SRCDIR");
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(src);
    char cmd[1024], want[128] = "";
    snprintf(cmd, sizeof cmd, "sh '%s/scripts/build-id.sh' '%s'", src, src);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    if (fgets(want, sizeof want, f) == NULL)
        want[0] = '\0';
    want[strcspn(want, "\n")] = '\0';
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_msg(strcmp(b, want) == 0, "sefer_build() \"%s\", scripts/build-id.sh \"%s\"", b, want);
    const char *o = sefer_build_options();
    static const char *const keys[] = {"buildtype=", " optimization=", " b_sanitize=", " override=true",
                                       " introspect=", " cc=", " fault_injection=false",
                                       " valgrind_requests="};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        ck_assert_msg(strstr(o, keys[i]) != NULL, "no \"%s\" in \"%s\"", keys[i], o);
#if defined(__SANITIZE_ADDRESS__)
    ck_assert_ptr_nonnull(strstr(o, " b_sanitize=address"));
#elif defined(__SANITIZE_THREAD__)
    ck_assert_ptr_nonnull(strstr(o, " b_sanitize=thread"));
#endif
}
END_TEST

START_TEST(test_prefixed_api)
{
    unsigned char *p = sefer_malloc(1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(sefer_usable_size(p), 1000);
    st_pat_fill(p, 1000, 8);
    p = sefer_realloc(p, 100000);
    ck_assert_ptr_nonnull(p);
    ck_assert(st_pat_ok(p, 1000, 8));
    p = sefer_reallocarray(p, 10, 100);
    ck_assert_ptr_nonnull(p);
    ck_assert(st_pat_ok(p, 1000, 8));
    sefer_free(p);

    unsigned char *z = sefer_calloc(300, 10);
    ck_assert_ptr_nonnull(z);
    check_zero(z, 3000, "sefer_calloc");
    sefer_free(z);

    void *out = NULL;
    ck_assert_int_eq(sefer_posix_memalign(&out, 1024, 10), 0);
    ck_assert_uint_eq((uintptr_t)out % 1024, 0);
    sefer_free(out);

    /* Pointers from the standard names and the prefixed ones are the same
     * allocator's. */
    void *a = malloc(77);
    ck_assert_uint_ge(sefer_usable_size(a), 77);
    sefer_free(a);
    void *b = sefer_malloc(77);
    ck_assert_uint_eq(malloc_usable_size(b), sefer_usable_size(b));
    free(b);

    errno = 0;
    expect_enomem_ptr(sefer_calloc(SIZE_MAX, 2), "sefer_calloc overflow");
    errno = 0;
    void *q = sefer_aligned_alloc(3, 8);
    ck_assert(q == NULL && errno == EINVAL);
}
END_TEST

START_TEST(test_sefer_trim)
{
    /* Freed large blocks sit in the large cache; sefer_trim purges it and
     * reports the bytes it returned. */
    void *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = malloc(8 * ST_MIB);
        ck_assert_ptr_nonnull(v[i]);
        memset(v[i], 1, 8 * ST_MIB);
    }
    for (int i = 0; i < 4; i++)
        free(v[i]);
    struct sefer_stats before = st_stats();
    size_t got = sefer_trim();
    struct sefer_stats after = st_stats();
    ck_assert_msg(before.large_cache_bytes == 0 || got > 0,
                  "sefer_trim returned 0 with %" PRIu64 " bytes in the large cache",
                  before.large_cache_bytes);
    ck_assert_uint_eq(after.large_cache_bytes, 0);
    ck_assert_uint_eq(after.large_cache_spans, 0);
    ck_assert_uint_ge(after.bytes_decommitted_total, before.bytes_decommitted_total + got);
    ck_assert_uint_le(after.segments, before.segments);
    /* Still works. */
    void *p = malloc(8 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    memset(p, 2, 8 * ST_MIB);
    free(p);
}
END_TEST

/* ======================================================================
 * statistics
 * ==================================================================== */

START_TEST(test_stats_get_contract)
{
    struct sefer_stats s;
    errno = 0;
    ck_assert_int_eq(sefer_stats_get(NULL, sizeof s), -1);
    ck_assert_int_eq(errno, EINVAL);
    memset(&s, 0, sizeof s);
    s.size = 0;
    errno = 0;
    ck_assert_int_eq(sefer_stats_get(&s, 0), -1);
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_int_eq(sefer_stats_get(&s, 4), -1);
    ck_assert_int_eq(errno, EINVAL);

    /* A bigger caller struct (a newer header) is fine; only sizeof is
     * filled. */
    unsigned char big[sizeof s + 64];
    memset(big, 0xCD, sizeof big);
    struct sefer_stats *bs = (struct sefer_stats *)big;
    bs->size = (uint32_t)sizeof big;
    ck_assert_int_eq(sefer_stats_get(bs, sizeof big), 0);
    ck_assert_uint_eq(bs->version, SEFER_STATS_VERSION);

    memset(&s, 0, sizeof s);
    s.size = (uint32_t)sizeof s;
    ck_assert_int_eq(sefer_stats_get(&s, sizeof s), 0);
    ck_assert_uint_eq(s.version, SEFER_STATS_VERSION);
    ck_assert_uint_gt(s.allocs, 0);
    ck_assert_uint_ge(s.heaps_live, 1);
    ck_assert_uint_ge(s.segments_peak, s.segments);
    ck_assert_uint_ge(s.segments, 1);
    ck_assert_uint_le(s.bytes_committed, s.bytes_reserved);
    ck_assert_uint_ge(s.bytes_reserved, s.segments * SEFER_SEGMENT_SIZE / 2);
    ck_assert_uint_gt(s.bytes_metadata, 0);
    ck_assert_uint_ge(s.os_maps, 1);
    ck_assert_uint_ge(s.allocs, s.frees);
}
END_TEST

START_TEST(test_stats_counts)
{
    enum { N = 1000, SZ = 1000 };
    static void *v[N];
    struct sefer_stats s0 = st_stats();
    for (int i = 0; i < N; i++)
        v[i] = malloc(SZ);
    struct sefer_stats s1 = st_stats();
    size_t usable_sum = 0;
    for (int i = 0; i < N; i++)
        usable_sum += v[i] ? malloc_usable_size(v[i]) : 0;
    for (int i = 0; i < N; i++)
        free(v[i]);
    struct sefer_stats s2 = st_stats();

    for (int i = 0; i < N; i++)
        ck_assert_ptr_nonnull(v[i]);
    ck_assert_int_eq(ST_DELTA(s1, s0, allocs), N);
    ck_assert_int_eq(ST_DELTA(s1, s0, frees), 0);
    ck_assert_int_eq(ST_DELTA(s2, s1, frees), N);
    ck_assert_int_eq(ST_DELTA(s2, s1, allocs), 0);

    int64_t grew = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(grew >= (int64_t)N * SZ && grew <= (int64_t)(N * SZ * 5 / 4) + 65536,
                  "bytes_in_blocks grew by %" PRId64 " for %d x %d bytes", grew, N, SZ);
    ck_assert_msg(grew >= (int64_t)usable_sum - 65536 && grew <= (int64_t)usable_sum + 65536,
                  "bytes_in_blocks grew by %" PRId64 ", usable sizes sum to %zu", grew,
                  usable_sum);
    int64_t back = ST_DELTA(s2, s0, bytes_in_blocks);
    ck_assert_msg(back > -65536 && back < 65536,
                  "bytes_in_blocks %" PRId64 " away from where it started after freeing all",
                  back);
    ck_assert_uint_le(s1.bytes_in_blocks, s1.bytes_committed);

    /* A large block counts its whole size. */
    s0 = st_stats();
    void *big = malloc(12 * ST_MIB);
    s1 = st_stats();
    ck_assert_ptr_nonnull(big);
    grew = ST_DELTA(s1, s0, bytes_in_blocks);
    ck_assert_msg(grew >= (int64_t)(12 * ST_MIB) && grew <= (int64_t)(16 * ST_MIB),
                  "bytes_in_blocks grew by %" PRId64 " for a 12 MiB block", grew);
    free(big);
    s2 = st_stats();
    back = ST_DELTA(s2, s0, bytes_in_blocks);
    ck_assert_msg(back > -65536 && back < 65536, "large free left %" PRId64, back);
}
END_TEST

/* ======================================================================
 * knobs
 * ==================================================================== */

static const char *const all_knobs[] = {
    "segments.max",     "large_cache.slots", "large_cache.max_bytes", "large_cache.ttl",
    "decommit.policy",  "decommit.delay",    "rings.capacity",        "guard.level",
    "guard.on_error",   "introspect.enabled", "introspect.listen",    "introspect.token",
};
#define N_KNOBS (sizeof all_knobs / sizeof all_knobs[0])

/* Parses "64MiB", "65536KiB", "67108864", "64 MiB" ... into bytes. */
static bool parse_size(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    while (*end == ' ')
        end++;
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},          {"B", 1},         {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20},
                 {"GiB", 1ULL << 30}, {"TiB", 1ULL << 40}, {"K", 1ULL << 10}, {"M", 1ULL << 20},
                 {"G", 1ULL << 30}, {"KB", 1000},      {"MB", 1000000},    {"GB", 1000000000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            *out = v * units[i].mul;
            return true;
        }
    return false;
}

/* Parses "250ms", "0.25s"-free integer forms, "250000us", "1s" into ms. */
static bool parse_ms(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s)
        return false;
    while (*end == ' ')
        end++;
    if (strcmp(end, "ms") == 0 || strcmp(end, "") == 0)
        *out = v;
    else if (strcmp(end, "s") == 0)
        *out = v * 1000;
    else if (strcmp(end, "us") == 0)
        *out = v / 1000;
    else if (strcmp(end, "ns") == 0)
        *out = v / 1e6;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        *out = v * 60000;
    else
        return false;
    return true;
}

START_TEST(test_config_get_all)
{
    char buf[512];
    for (size_t i = 0; i < N_KNOBS; i++) {
        memset(buf, 0x7F, sizeof buf);
        int rc = sefer_config_get(all_knobs[i], buf, sizeof buf);
        ck_assert_msg(rc == 0, "sefer_config_get(%s) failed: %s", all_knobs[i], strerror(errno));
        ck_assert_msg(memchr(buf, 0, sizeof buf) != NULL, "%s: value not NUL-terminated",
                      all_knobs[i]);
    }
    /* Values that have a known shape. */
    char pol[512];
    snprintf(pol, sizeof pol, "%s", st_knob_get("decommit.policy"));
    ck_assert_msg(!strcmp(pol, "never") || !strcmp(pol, "eager") || !strcmp(pol, "delayed") || !strcmp(pol, "adaptive"),
                  "decommit.policy = \"%s\"", pol);
    const char *oe = st_knob_get("guard.on_error");
    ck_assert_msg(!strcmp(oe, "abort"), "guard.on_error default is \"%s\", not abort", oe);
    const char *gl = st_knob_get("guard.level");
    ck_assert_msg(!strcmp(gl, "1"), "guard.level default is \"%s\", not 1", gl);
    unsigned long long segmax = st_knob_ull("segments.max");
    ck_assert_uint_gt(segmax, 0);
    unsigned long long bytes;
    ck_assert_msg(parse_size(st_knob_get("large_cache.max_bytes"), &bytes),
                  "large_cache.max_bytes = \"%s\"", st_knob_get("large_cache.max_bytes"));
    double ms;
    ck_assert_msg(parse_ms(st_knob_get("large_cache.ttl"), &ms), "large_cache.ttl = \"%s\"",
                  st_knob_get("large_cache.ttl"));
    ck_assert_msg(parse_ms(st_knob_get("decommit.delay"), &ms), "decommit.delay = \"%s\"",
                  st_knob_get("decommit.delay"));
    ck_assert_uint_gt(st_knob_ull("rings.capacity"), 0);

    /* Buffer too small. */
    errno = 0;
    ck_assert_int_eq(sefer_config_get("decommit.policy", buf, 1), -1);
    ck_assert_int_eq(errno, ERANGE);
    errno = 0;
    ck_assert_int_eq(sefer_config_get("decommit.policy", buf, 0), -1);
    ck_assert_int_eq(errno, ERANGE);
    size_t need = strlen(pol);
    errno = 0;
    ck_assert_int_eq(sefer_config_get("decommit.policy", buf, need), -1); /* no room for NUL */
    ck_assert_int_eq(errno, ERANGE);
    ck_assert_int_eq(sefer_config_get("decommit.policy", buf, need + 1), 0);
}
END_TEST

START_TEST(test_config_unknown)
{
    static const char *const bad[] = {"no.such.knob", "segments", "segments.max.extra",
                                      "", ".", "segments.", ".max", "decommit.policyy",
                                      "large_cache", "ring.capacity"};
    char buf[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        ck_assert_msg(sefer_config_get(bad[i], buf, sizeof buf) == -1 && errno == ENOENT,
                      "get(\"%s\") errno %d, expected ENOENT", bad[i], errno);
        errno = 0;
        ck_assert_msg(sefer_config_set(bad[i], "1") == -1 && errno == ENOENT,
                      "set(\"%s\") errno %d, expected ENOENT", bad[i], errno);
    }
}
END_TEST

START_TEST(test_config_malformed)
{
    static const char *const bad[][2] = {
        {"segments.max", "abc"},
        {"segments.max", ""},
        {"segments.max", "12x"},
        {"segments.max", "-5"},
        {"segments.max", "99999999999999999999999999"},
        {"segments.max", "1.5"},
        {"large_cache.slots", "-1"},
        {"large_cache.slots", "many"},
        {"large_cache.max_bytes", "64 parsecs"},
        {"large_cache.max_bytes", "MiB"},
        {"large_cache.max_bytes", "-1MiB"},
        {"large_cache.max_bytes", "99999999999999999999GiB"},
        {"large_cache.ttl", "fast"},
        {"large_cache.ttl", "10 fortnights"},
        {"large_cache.ttl", "-5ms"},
        {"decommit.delay", "soon"},
        {"decommit.delay", ""},
        {"decommit.policy", "sometimes"},
        {"decommit.policy", ""},
        {"decommit.policy", "eager2"},
        {"guard.on_error", "explode"},
        {"guard.on_error", ""},
    };
    char before[256], after[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sefer_config_get(bad[i][0], before, sizeof before), 0);
        errno = 0;
        int rc = sefer_config_set(bad[i][0], bad[i][1]);
        int e = errno;
        ck_assert_msg(rc == -1 && e == EINVAL, "set(%s, \"%s\") = %d errno %d, expected EINVAL",
                      bad[i][0], bad[i][1], rc, e);
        ck_assert_int_eq(sefer_config_get(bad[i][0], after, sizeof after), 0);
        ck_assert_msg(strcmp(before, after) == 0, "failed set(%s, \"%s\") changed \"%s\" to \"%s\"",
                      bad[i][0], bad[i][1], before, after);
    }
}
END_TEST

START_TEST(test_config_startup_only)
{
    char before[256], after[256];
    static const char *const names[] = {"rings.capacity", "guard.level", "introspect.enabled",
                                        "introspect.listen", "introspect.token"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ck_assert_int_eq(sefer_config_get(names[i], before, sizeof before), 0);
        const char *value;
        if (!strcmp(names[i], "rings.capacity"))
            value = strcmp(before, "16") ? "16" : "32";
        else if (!strcmp(names[i], "guard.level"))
            value = strcmp(before, "2") ? "2" : "0";
        else if (!strcmp(names[i], "introspect.enabled"))
            value = (!strcmp(before, "false") || !strcmp(before, "0")) ? "true" : "false";
        else if (!strcmp(names[i], "introspect.listen"))
            value = "127.0.0.1:19999";
        else
            value = "some-other-token";
        errno = 0;
        int rc = sefer_config_set(names[i], value);
        int e = errno;
        ck_assert_msg(rc == -1 && e == EPERM, "set(%s, \"%s\") = %d errno %d, expected EPERM",
                      names[i], value, rc, e);
        ck_assert_int_eq(sefer_config_get(names[i], after, sizeof after), 0);
        ck_assert_str_eq(before, after);
    }
}
END_TEST

START_TEST(test_config_roundtrip)
{
    static const char *const exact[][2] = {
        {"segments.max", "64"},       {"segments.max", "1000"},     {"large_cache.slots", "7"},
        {"large_cache.slots", "0"},   {"decommit.policy", "eager"}, {"decommit.policy", "never"},
        {"decommit.policy", "delayed"}, {"guard.on_error", "report"}, {"guard.on_error", "abort"},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        ST_KNOB_SET(exact[i][0], exact[i][1]);
        ck_assert_str_eq(st_knob_get(exact[i][0]), exact[i][1]);
    }

    static const struct {
        const char *name, *value;
        unsigned long long bytes;
    } sizes[] = {{"large_cache.max_bytes", "64MiB", 64ULL << 20},
                 {"large_cache.max_bytes", "1GiB", 1ULL << 30},
                 {"large_cache.max_bytes", "12582912", 12ULL << 20},
                 {"large_cache.max_bytes", "8MiB", 8ULL << 20}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ST_KNOB_SET(sizes[i].name, sizes[i].value);
        unsigned long long got = 0;
        const char *v = st_knob_get(sizes[i].name);
        ck_assert_msg(parse_size(v, &got) && got == sizes[i].bytes,
                      "set %s = %s, get gives \"%s\"", sizes[i].name, sizes[i].value, v);
    }

    static const struct {
        const char *name, *value;
        double ms;
    } durs[] = {{"large_cache.ttl", "250ms", 250},  {"large_cache.ttl", "2s", 2000},
                {"decommit.delay", "250ms", 250},   {"decommit.delay", "10ms", 10},
                {"decommit.delay", "1s", 1000}};
    for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++) {
        ST_KNOB_SET(durs[i].name, durs[i].value);
        double got = -1;
        const char *v = st_knob_get(durs[i].name);
        ck_assert_msg(parse_ms(v, &got) && got > durs[i].ms - 0.001 && got < durs[i].ms + 0.001,
                      "set %s = %s, get gives \"%s\"", durs[i].name, durs[i].value, v);
    }

    /* Every runtime knob accepts what get prints, and the value is stable. */
    static const char *const runtime[] = {"segments.max",    "large_cache.slots",
                                          "large_cache.max_bytes", "large_cache.ttl",
                                          "decommit.policy", "decommit.delay", "guard.on_error"};
    char first[256];
    for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; i++) {
        ck_assert_int_eq(sefer_config_get(runtime[i], first, sizeof first), 0);
        ck_assert_msg(sefer_config_set(runtime[i], first) == 0,
                      "set(%s, \"%s\") (its own value) failed: %s", runtime[i], first,
                      strerror(errno));
        ck_assert_str_eq(st_knob_get(runtime[i]), first);
    }
}
END_TEST

/* Helper mode for the environment tests: the re-executed program prints
 * knob values, one per line, or runs a small workload. */
static int helper_main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--print-knobs")) {
        char buf[512];
        for (int i = 2; i < argc; i++) {
            if (sefer_config_get(argv[i], buf, sizeof buf) != 0)
                printf("%s=<error %d>\n", argv[i], errno);
            else
                printf("%s=%s\n", argv[i], buf);
        }
        errno = 0;
        int rc = sefer_config_set("rings.capacity", "8");
        printf("set-rings=%d/%d\n", rc, rc ? errno : 0);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--workload")) {
        /* Correct program: must run clean at every guard level. */
        enum { N = 2000 };
        static void *v[N];
        uint64_t r = 12345;
        for (int round = 0; round < 10; round++) {
            for (int i = 0; i < N; i++) {
                uint64_t x = st_rand(&r);
                size_t n = 1 + x % 4000;
                if (x % 16 == 0)
                    n = 1 + x % 120000;
                if (x % 256 == 0)
                    n = ST_MIB + x % 4096;
                v[i] = malloc(n);
                if (!v[i])
                    return 2;
                st_block_fill(v[i], n);
                if (st_rand(&r) % 3 == 0) {
                    if (!st_block_ok(v[i], n))
                        return 3;
                    free(v[i]);
                    v[i] = calloc(1, n);
                    if (!v[i])
                        return 4;
                }
            }
            for (int i = 0; i < N; i++)
                free(v[i]);
        }
        printf("workload-ok\n");
        return 0;
    }
    return -1;
}

static const char *find_line(const char *out, const char *key)
{
    static char val[256];
    size_t kl = strlen(key);
    for (const char *l = out; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        if (len > kl && !strncmp(l, key, kl) && l[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl >= sizeof val)
                vl = sizeof val - 1;
            memcpy(val, l + kl + 1, vl);
            val[vl] = 0;
            return val;
        }
        l = nl ? nl + 1 : NULL;
    }
    return NULL;
}

START_TEST(test_config_env)
{
    static char out[8192];
    char *env[] = {"SEFER_SEGMENTS_MAX=64",
                   "SEFER_RINGS_CAPACITY=16",
                   "SEFER_DECOMMIT_POLICY=eager",
                   "SEFER_LARGE_CACHE_MAX_BYTES=64MiB",
                   "SEFER_LARGE_CACHE_SLOTS=3",
                   "SEFER_DECOMMIT_DELAY=250ms",
                   "SEFER_GUARD_LEVEL=2",
                   "SEFER_GUARD_ON_ERROR=report",
                   NULL};
    char *args[] = {"--print-knobs", "segments.max", "rings.capacity", "decommit.policy",
                    "large_cache.max_bytes", "large_cache.slots", "decommit.delay",
                    "guard.level", "guard.on_error", NULL};
    int st = st_run_self(env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "helper %s; output:\n%s",
                  st_describe_status(st), out);
    const char *v;
    ck_assert_msg((v = find_line(out, "segments.max")) && !strcmp(v, "64"), "output:\n%s", out);
    ck_assert_msg((v = find_line(out, "rings.capacity")) && !strcmp(v, "16"), "output:\n%s", out);
    ck_assert_msg((v = find_line(out, "decommit.policy")) && !strcmp(v, "eager"), "output:\n%s",
                  out);
    unsigned long long b = 0;
    ck_assert_msg((v = find_line(out, "large_cache.max_bytes")) && parse_size(v, &b) &&
                      b == 64ULL << 20,
                  "output:\n%s", out);
    ck_assert_msg((v = find_line(out, "large_cache.slots")) && !strcmp(v, "3"), "output:\n%s", out);
    double ms = -1;
    ck_assert_msg((v = find_line(out, "decommit.delay")) && parse_ms(v, &ms) && ms == 250,
                  "output:\n%s", out);
    ck_assert_msg((v = find_line(out, "guard.level")) && !strcmp(v, "2"), "output:\n%s", out);
    ck_assert_msg((v = find_line(out, "guard.on_error")) && !strcmp(v, "report"), "output:\n%s",
                  out);
    /* start-up knob still refuses a runtime change */
    ck_assert_msg((v = find_line(out, "set-rings")) && !strcmp(v, "-1/" "1"),
                  "set rings.capacity at runtime: %s (expected -1/EPERM=1)", v ? v : "?");
}
END_TEST

START_TEST(test_config_env_malformed_keeps_default)
{
    static char out[4096];
    char defmax[512], defpol[512];
    snprintf(defmax, sizeof defmax, "%s", st_knob_get("segments.max"));
    snprintf(defpol, sizeof defpol, "%s", st_knob_get("decommit.policy"));
    char *env[] = {"SEFER_SEGMENTS_MAX=lots", "SEFER_DECOMMIT_POLICY=sometimes", NULL};
    char *args[] = {"--print-knobs", "segments.max", "decommit.policy", NULL};
    int st = st_run_self(env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "a malformed SEFER_* variable stopped the program: %s", st_describe_status(st));
    const char *v;
    ck_assert_msg((v = find_line(out, "segments.max")) && !strcmp(v, defmax),
                  "segments.max after a bad env value: %s (default %s)", v ? v : "?", defmax);
    ck_assert_msg((v = find_line(out, "decommit.policy")) && !strcmp(v, defpol),
                  "decommit.policy after a bad env value: %s (default %s)", v ? v : "?", defpol);
}
END_TEST

START_TEST(test_guard_levels_clean_run)
{
    /* A correct program runs clean (no report, exit 0) at every guard
     * level; _i is the level. */
    static char out[4096];
    char lvl[32];
    snprintf(lvl, sizeof lvl, "SEFER_GUARD_LEVEL=%d", _i);
    char *env[] = {lvl, NULL};
    char *args[] = {"--workload", NULL};
    int st = st_run_self(env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "guard level %d: workload %s", _i,
                  st_describe_status(st));
    ck_assert_msg(strstr(out, "workload-ok") != NULL, "guard level %d: output \"%s\"", _i, out);
}
END_TEST

/* ======================================================================
 * guard level 1
 * ==================================================================== */

enum bad_free {
    BAD_DOUBLE_SMALL,
    BAD_DOUBLE_MEDIUM,
    BAD_DOUBLE_LARGE,
    BAD_INTERIOR_SMALL,
    BAD_INTERIOR_MEDIUM,
    BAD_INTERIOR_LARGE,
    BAD_INTERIOR_HUGE,
    BAD_STACK,
    BAD_MMAP,
    BAD_MMAP_SEGMENT_ALIGNED,
    BAD_UNMAPPED,
    BAD_SEGMENT_BASE,
    BAD_COUNT
};
static const char *const bad_names[] = {"double free (small)",    "double free (medium)",
                                        "double free (large)",    "interior free (small)",
                                        "interior free (medium)", "interior free (large)",
                                        "interior free (huge)",   "stack pointer",          "mmap pointer",
                                        "segment-aligned mmap pointer", "unmapped address",
                                        "segment base"};

/* Does the bad free of the given kind; returns the pointer passed to free. */
static void *do_bad_free(enum bad_free kind)
{
    static const size_t sizes[] = {48, 20000, 3 << 20};
    switch (kind) {
    case BAD_DOUBLE_SMALL:
    case BAD_DOUBLE_MEDIUM:
    case BAD_DOUBLE_LARGE: {
        size_t n = sizes[kind - BAD_DOUBLE_SMALL];
        void *keep = malloc(n); /* so the page is not simply emptied */
        void *p = malloc(n);
        memset(p, 1, n);
        free(p);
        free(st_launder(p));
        st_escape(keep);
        return p;
    }
    case BAD_INTERIOR_SMALL:
    case BAD_INTERIOR_MEDIUM:
    case BAD_INTERIOR_LARGE: {
        size_t n = sizes[kind - BAD_INTERIOR_SMALL];
        char *p = malloc(n);
        memset(p, 1, n);
        char *in = p + (n > 8192 ? 4096 : 16);
        free(st_launder(in));
        return in;
    }
    case BAD_INTERIOR_HUGE: {
        size_t n = 200 * ST_MIB;
        char *p = malloc(n);
        p[0] = 1;
        char *in = p + 3 * ST_MIB + 64;
        free(st_launder(in));
        return in;
    }
    case BAD_STACK: {
        char buf[256];
        memset(buf, 0, sizeof buf);
        void *p = st_launder(buf + 64);
        free(p);
        return p;
    }
    case BAD_MMAP: {
        char *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(m, 0x42, 65536);
        free(st_launder(m + 4096));
        return m + 4096;
    }
    case BAD_MMAP_SEGMENT_ALIGNED: {
        /* Foreign memory at a segment-aligned address, full of junk that a
         * careless header check might believe. */
        size_t len = 3 * SEFER_SEGMENT_SIZE;
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char *a = (char *)(((uintptr_t)m + SEFER_SEGMENT_SIZE - 1) & ~(SEFER_SEGMENT_SIZE - 1));
        uint64_t r = 99;
        for (size_t i = 0; i < 65536; i += 8) {
            uint64_t w = st_rand(&r);
            memcpy(a + i, &w, 8);
        }
        free(st_launder(a + 1024));
        return a + 1024;
    }
    case BAD_UNMAPPED: {
        /* An address with nothing mapped: the check must not touch it. */
        size_t len = 2 * SEFER_SEGMENT_SIZE;
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(m, len);
        char *a = (char *)(((uintptr_t)m + SEFER_SEGMENT_SIZE - 1) & ~(SEFER_SEGMENT_SIZE - 1));
        free(st_launder(a + 256));
        return a + 256;
    }
    case BAD_SEGMENT_BASE: {
        char *p = malloc(64);
        memset(p, 3, 64);
        char *base = (char *)((uintptr_t)p & ~(SEFER_SEGMENT_SIZE - 1));
        free(st_launder(base));
        return base;
    }
    default:
        return NULL;
    }
}

static void child_bad_free(void *arg)
{
    enum bad_free kind = (enum bad_free)(intptr_t)arg;
    do_bad_free(kind);
    _exit(0); /* reached only if nothing was detected */
}

START_TEST(test_guard_abort)
{
    enum bad_free kind = (enum bad_free)_i;
    static char err[8192];
    int st = st_run_child(child_bad_free, (void *)(intptr_t)kind, err, sizeof err, 20);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "%s with guard.on_error=abort: child %s, stderr: %s", bad_names[kind],
                  st_describe_status(st), err);
    ck_assert_msg(err[0] != 0, "%s: nothing reported on stderr before abort", bad_names[kind]);
}
END_TEST

START_TEST(test_guard_report)
{
    enum bad_free kind = (enum bad_free)_i;
    ST_KNOB_SET("guard.on_error", "report");

    static char err[8192];
    struct st_capture cap;
    struct sefer_stats s0 = st_stats();
    st_capture_begin(&cap);
    void *addr = do_bad_free(kind);
    st_capture_end(&cap, err, sizeof err);
    struct sefer_stats s1 = st_stats();

    int64_t dbl = ST_DELTA(s1, s0, guard_double_free);
    int64_t intr = ST_DELTA(s1, s0, guard_interior_free);
    int64_t inval = ST_DELTA(s1, s0, guard_invalid_free);
    switch (kind) {
    case BAD_DOUBLE_SMALL:
    case BAD_DOUBLE_MEDIUM:
    case BAD_DOUBLE_LARGE:
        ck_assert_msg(dbl == 1 && intr == 0 && inval == 0,
                      "%s: counters double %" PRId64 " interior %" PRId64 " invalid %" PRId64,
                      bad_names[kind], dbl, intr, inval);
        break;
    case BAD_INTERIOR_SMALL:
    case BAD_INTERIOR_MEDIUM:
    case BAD_INTERIOR_LARGE:
    case BAD_INTERIOR_HUGE:
        ck_assert_msg(dbl == 0 && intr == 1 && inval == 0,
                      "%s: counters double %" PRId64 " interior %" PRId64 " invalid %" PRId64,
                      bad_names[kind], dbl, intr, inval);
        break;
    case BAD_SEGMENT_BASE:
        ck_assert_msg(dbl == 0 && intr + inval == 1,
                      "%s: counters double %" PRId64 " interior %" PRId64 " invalid %" PRId64,
                      bad_names[kind], dbl, intr, inval);
        break;
    default:
        ck_assert_msg(dbl == 0 && intr == 0 && inval == 1,
                      "%s: counters double %" PRId64 " interior %" PRId64 " invalid %" PRId64,
                      bad_names[kind], dbl, intr, inval);
        break;
    }
    ck_assert_msg(err[0] != 0, "%s: nothing reported on stderr", bad_names[kind]);
    ck_assert_msg(st_mentions_address(err, addr), "%s: report does not name address %p: %s",
                  bad_names[kind], addr, err);
    ck_assert_int_eq(ST_DELTA(s1, s0, frees), kind <= BAD_DOUBLE_LARGE ? 1 : 0);

    /* The program goes on and the allocator still works. */
    enum { N = 2000 };
    static void *v[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)i * 37 % 30000;
        v[i] = malloc(n);
        ck_assert_ptr_nonnull(v[i]);
        st_block_fill(v[i], n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)i * 37 % 30000;
        ck_assert(st_block_ok(v[i], n));
        free(v[i]);
    }
    void *big = malloc(5 * ST_MIB);
    ck_assert_ptr_nonnull(big);
    memset(big, 5, 5 * ST_MIB);
    free(big);
}
END_TEST

START_TEST(test_guard_double_free_refused)
{
    /* A reported double free must not put the block on a free list twice:
     * the next two allocations of that size are different blocks. */
    ST_KNOB_SET("guard.on_error", "report");
    static const size_t sizes[] = {16, 48, 256, 4000, 20000, 100000, 3 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        void *keep = malloc(n);
        void *p = malloc(n);
        ck_assert(keep && p);
        free(p);
        struct st_capture cap;
        static char err[4096];
        st_capture_begin(&cap);
        free(st_launder(p));
        st_capture_end(&cap, err, sizeof err);
        void *a = malloc(n), *b = malloc(n), *c = malloc(n);
        ck_assert(a && b && c);
        ck_assert_msg(a != b && b != c && a != c,
                      "size %zu: after a refused double free malloc returned %p %p %p", n, a, b,
                      c);
        memset(a, 1, n);
        memset(b, 2, n);
        memset(c, 3, n);
        ck_assert_uint_eq(((unsigned char *)a)[n - 1], 1);
        ck_assert_uint_eq(((unsigned char *)b)[n - 1], 2);
        free(a);
        free(b);
        free(c);
        free(keep);
    }
    /* (how the large one is classified is test_guard_report's business) */
    struct sefer_stats s = st_stats();
    ck_assert_uint_ge(s.guard_double_free, sizeof sizes / sizeof sizes[0] - 1);
    ck_assert_uint_ge(s.guard_double_free + s.guard_invalid_free, sizeof sizes / sizeof sizes[0]);
}
END_TEST

START_TEST(test_guard_interior_refused)
{
    /* A refused interior free leaves the block alive and intact. */
    ST_KNOB_SET("guard.on_error", "report");
    static const size_t sizes[] = {64, 3000, 50000, 2 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *p = malloc(n);
        ck_assert_ptr_nonnull(p);
        st_pat_fill(p, n, k);
        struct st_capture cap;
        static char err[4096];
        st_capture_begin(&cap);
        free(st_launder(p + n / 2));
        st_capture_end(&cap, err, sizeof err);
        void *others[8];
        for (int i = 0; i < 8; i++) {
            others[i] = malloc(n);
            ck_assert_ptr_nonnull(others[i]);
            memset(others[i], 0xEE, n);
        }
        ck_assert_msg(st_pat_ok(p, n, k), "size %zu: block damaged after a refused interior free",
                      n);
        for (int i = 0; i < 8; i++)
            free(others[i]);
        free(p);
    }
}
END_TEST

START_TEST(test_guard_report_then_abort_again)
{
    /* on_error is runtime: report, then back to abort, and the next bad
     * free aborts. */
    ST_KNOB_SET("guard.on_error", "report");
    static char err[4096];
    struct st_capture cap;
    st_capture_begin(&cap);
    do_bad_free(BAD_STACK);
    st_capture_end(&cap, err, sizeof err);
    ST_KNOB_SET("guard.on_error", "abort");
    int st = st_run_child(child_bad_free, (void *)(intptr_t)BAD_DOUBLE_SMALL, err, sizeof err, 20);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child %s",
                  st_describe_status(st));
}
END_TEST

START_TEST(test_guard_page_tail_refused)
{
    /* A 64 KiB page of 48-byte blocks holds 1365 of them and a 16-byte tail;
     * the address one block past the last one is a multiple of the block
     * size inside the page but was never handed out: freeing it must be
     * refused, not accepted as a block (the free fast path has no bound
     * check; the tail carries a cookie instead). */
    ST_KNOB_SET("guard.on_error", "report");
    enum { N = 3 * 1365 };
    unsigned char **blocks = st_map(N * sizeof *blocks);
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(48);
        ck_assert_ptr_nonnull(blocks[i]);
    }
    /* find a page whose last block (offset 1364 * 48) we hold: fully carved */
    unsigned char *tail = NULL;
    int last = -1;
    for (int i = 0; i < N && tail == NULL; i++)
        if (((uintptr_t)blocks[i] & 0xffff) == 1364 * 48) {
            tail = blocks[i] + 48;
            last = i;
        }
    ck_assert_msg(tail != NULL, "no fully carved page of 48-byte blocks found");
    /* a full page takes the checked path anyway: give one block back so the
     * page is in its class queue and frees into it take the fast path */
    free(blocks[last]);
    blocks[last] = NULL;
    ck_assert_uint_eq(((uintptr_t)tail & 0xffff), 65520);
    struct sefer_stats s0 = st_stats();
    struct st_capture cap;
    static char err[4096];
    st_capture_begin(&cap);
    free(st_launder(tail));
    st_capture_end(&cap, err, sizeof err);
    struct sefer_stats s1 = st_stats();
    ck_assert_msg(ST_DELTA(s1, s0, guard_interior_free) == 1, "tail free not refused: %s", err);
    /* the page still hands out only real blocks */
    void *again[64];
    for (int i = 0; i < 64; i++) {
        again[i] = malloc(48);
        ck_assert_ptr_ne(again[i], tail);
    }
    for (int i = 0; i < 64; i++)
        free(again[i]);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    st_unmap(blocks, N * sizeof *blocks);
}
END_TEST

START_TEST(test_full_pages_leave_and_rejoin_class_queue)
{
    /* Regression: pages that fill up leave their class queue; when one of
     * them empties again and is given back to its segment, the fast path must
     * not keep handing out blocks from it (it may be re-made for another
     * size class).  Fill three pages of one class, free a middle page's
     * blocks, reuse the space with another class, and check every block of
     * both classes is distinct and intact. */
    enum { PER_PAGE = 65536 / 112, N = 4 * PER_PAGE };
    unsigned char **a = st_map(N * sizeof *a), **b = st_map(N * sizeof *b);
    for (int i = 0; i < N; i++) {
        a[i] = malloc(100); /* class 112 */
        ck_assert_ptr_nonnull(a[i]);
        st_pat_fill(a[i], 100, (uint64_t)i);
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            if (a[i] && (i / PER_PAGE) % 2 == round % 2) {
                free(a[i]);
                a[i] = NULL;
            }
        for (int i = 0; i < N; i++) {
            b[i] = malloc(i % 2 ? 200 : 100);
            ck_assert_ptr_nonnull(b[i]);
            st_pat_fill(b[i], i % 2 ? 200 : 100, (uint64_t)i + 1000000);
        }
        for (int i = 0; i < N; i++) {
            if (a[i]) ck_assert_msg(st_pat_ok(a[i], 100, (uint64_t)i), "block a[%d] damaged", i);
            ck_assert_msg(st_pat_ok(b[i], i % 2 ? 200 : 100, (uint64_t)i + 1000000),
                          "block b[%d] damaged", i);
        }
        for (int i = 0; i < N; i++) {
            if (a[i] == NULL) {
                a[i] = malloc(100);
                st_pat_fill(a[i], 100, (uint64_t)i);
            }
            free(b[i]);
        }
    }
    for (int i = 0; i < N; i++)
        free(a[i]);
    st_unmap(a, N * sizeof *a);
    st_unmap(b, N * sizeof *b);
}
END_TEST

/* ====================================================================== */

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc;

    tc = tcase_create("sizes");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_malloc_zero);
    tcase_add_test(tc, test_free_null);
    tcase_add_test(tc, test_malloc_huge_enomem);
    tcase_add_test(tc, test_calloc_overflow);
    tcase_add_test(tc, test_reallocarray_overflow);
    tcase_add_test(tc, test_realloc_huge_keeps_block);
    tcase_add_test(tc, test_calloc_zeroed);
    tcase_add_test(tc, test_calloc_zeroed_after_realloc_shrink);
    suite_add_tcase(s, tc);

    tc = tcase_create("alignment");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_alignment_all_powers, 0, FN_COUNT);
    tcase_add_loop_test(tc, test_alignment_zero_size, 0, FN_COUNT);
    tcase_add_test(tc, test_alignment_from_classes);
    tcase_add_test(tc, test_alignment_invalid);
    tcase_add_test(tc, test_memalign_rounds_up);
    tcase_add_test(tc, test_valloc_pvalloc);
    tcase_add_test(tc, test_usable_size);
    suite_add_tcase(s, tc);

    tc = tcase_create("realloc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_realloc_null_and_zero);
    tcase_add_test(tc, test_realloc_walk);
    tcase_add_test(tc, test_realloc_walk_sefer);
    tcase_add_test(tc, test_realloc_large_in_place);
    tcase_add_test(tc, test_realloc_many_blocks);
    tcase_add_test(tc, test_realloc_aligned_blocks);
    suite_add_tcase(s, tc);

    tc = tcase_create("entry_points");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_entry_points_reach_sefer);
    tcase_add_test(tc, test_calloc_realloc_libc_aliases);
    tcase_add_test(tc, test_sized_frees_reuse);
    tcase_add_test(tc, test_malloc_trim_mallinfo_stats);
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_build);
    tcase_add_test(tc, test_prefixed_api);
    tcase_add_test(tc, test_sefer_trim);
    suite_add_tcase(s, tc);

    tc = tcase_create("stats");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_stats_get_contract);
    tcase_add_test(tc, test_stats_counts);
    suite_add_tcase(s, tc);

    tc = tcase_create("config");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config_get_all);
    tcase_add_test(tc, test_config_unknown);
    tcase_add_test(tc, test_config_malformed);
    tcase_add_test(tc, test_config_startup_only);
    tcase_add_test(tc, test_config_roundtrip);
    tcase_add_test(tc, test_config_env);
    tcase_add_test(tc, test_config_env_malformed_keeps_default);
    tcase_add_loop_test(tc, test_guard_levels_clean_run, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("guard");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_guard_abort, 0, BAD_COUNT);
    tcase_add_loop_test(tc, test_guard_report, 0, BAD_COUNT);
    tcase_add_test(tc, test_guard_double_free_refused);
    tcase_add_test(tc, test_guard_interior_refused);
    tcase_add_test(tc, test_guard_report_then_abort_again);
    tcase_add_test(tc, test_guard_page_tail_refused);
    tcase_add_test(tc, test_full_pages_leave_and_rejoin_class_queue);
    suite_add_tcase(s, tc);

    return s;
}

int main(int argc, char **argv)
{
    if (argc >= 2) {
        int rc = helper_main(argc, argv);
        if (rc >= 0)
            return rc;
    }
    return st_run_suite(api_suite());
}
