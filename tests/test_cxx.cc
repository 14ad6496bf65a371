// test_cxx.cc - every global operator new / delete form reaches sefer.
//
// Operators are called explicitly (::operator new(...)) so that each form is
// exercised exactly; allocation counts come from sefer_stats, read with no
// check assertion in between (an assertion itself allocates).
#include <check.h>
#include <malloc.h>
#include <sefer.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

void escape(const void *p)
{
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

sefer_stats now()
{
    sefer_stats s;
    std::memset(&s, 0, sizeof s);
    s.size = sizeof s;
    if (sefer_stats_get(&s, sizeof s) != 0)
        ck_abort_msg("sefer_stats_get: %s", std::strerror(errno));
    return s;
}

struct Delta {
    int64_t allocs, frees;
};

Delta delta(const sefer_stats &a, const sefer_stats &b)
{
    return Delta{int64_t(b.allocs - a.allocs), int64_t(b.frees - a.frees)};
}

// Checks one allocation made by `alloc` and released by `release`: one
// allocation and one free counted by sefer, pointer aligned and owned.
template <class Alloc, class Release>
void check_pair(const char *what, std::size_t size, std::size_t align, Alloc alloc,
                Release release)
{
    sefer_stats s0 = now();
    void *p = alloc();
    sefer_stats s1 = now();
    escape(p);
    ck_assert_msg(p != nullptr, "%s returned null", what);
    Delta d = delta(s0, s1);
    ck_assert_msg(d.allocs == 1 && d.frees == 0, "%s: sefer counted %lld allocs, %lld frees",
                  what, (long long)d.allocs, (long long)d.frees);
    ck_assert_msg(reinterpret_cast<uintptr_t>(p) % align == 0, "%s = %p not aligned to %zu",
                  what, p, align);
    std::size_t usable = malloc_usable_size(p);
    ck_assert_msg(usable >= size, "%s: malloc_usable_size %zu < %zu", what, usable, size);
    ck_assert_uint_eq(sefer_usable_size(p), usable);
    std::memset(p, 0x5C, size);
    s0 = now();
    release(p);
    s1 = now();
    d = delta(s0, s1);
    ck_assert_msg(d.frees == 1 && d.allocs == 0, "%s: release counted %lld frees, %lld allocs",
                  what, (long long)d.frees, (long long)d.allocs);
}

const std::size_t kSizes[] = {1, 24, 1000, 40000, 3 << 20};
const std::size_t kAligns[] = {32, 64, 256, 4096, 65536, 1 << 21};

} // namespace

START_TEST(test_plain_forms)
{
    for (std::size_t n : kSizes) {
        check_pair("operator new(n) / delete(p)", n, alignof(std::max_align_t),
                   [&] { return ::operator new(n); }, [](void *p) { ::operator delete(p); });
        check_pair("operator new[](n) / delete[](p)", n, alignof(std::max_align_t),
                   [&] { return ::operator new[](n); }, [](void *p) { ::operator delete[](p); });
        check_pair("operator new(n) / delete(p, n)", n, alignof(std::max_align_t),
                   [&] { return ::operator new(n); },
                   [&](void *p) { ::operator delete(p, n); });
        check_pair("operator new[](n) / delete[](p, n)", n, alignof(std::max_align_t),
                   [&] { return ::operator new[](n); },
                   [&](void *p) { ::operator delete[](p, n); });
        check_pair("operator new(n, nothrow) / delete(p, nothrow)", n, alignof(std::max_align_t),
                   [&] { return ::operator new(n, std::nothrow); },
                   [](void *p) { ::operator delete(p, std::nothrow); });
        check_pair("operator new[](n, nothrow) / delete[](p, nothrow)", n,
                   alignof(std::max_align_t), [&] { return ::operator new[](n, std::nothrow); },
                   [](void *p) { ::operator delete[](p, std::nothrow); });
    }
}
END_TEST

START_TEST(test_aligned_forms)
{
    for (std::size_t a : kAligns) {
        std::align_val_t al{a};
        for (std::size_t n : kSizes) {
            check_pair("operator new(n, al) / delete(p, al)", n, a,
                       [&] { return ::operator new(n, al); },
                       [&](void *p) { ::operator delete(p, al); });
            check_pair("operator new[](n, al) / delete[](p, al)", n, a,
                       [&] { return ::operator new[](n, al); },
                       [&](void *p) { ::operator delete[](p, al); });
            check_pair("operator new(n, al) / delete(p, n, al)", n, a,
                       [&] { return ::operator new(n, al); },
                       [&](void *p) { ::operator delete(p, n, al); });
            check_pair("operator new[](n, al) / delete[](p, n, al)", n, a,
                       [&] { return ::operator new[](n, al); },
                       [&](void *p) { ::operator delete[](p, n, al); });
            check_pair("operator new(n, al, nothrow) / delete(p, al, nothrow)", n, a,
                       [&] { return ::operator new(n, al, std::nothrow); },
                       [&](void *p) { ::operator delete(p, al, std::nothrow); });
            check_pair("operator new[](n, al, nothrow) / delete[](p, al, nothrow)", n, a,
                       [&] { return ::operator new[](n, al, std::nothrow); },
                       [&](void *p) { ::operator delete[](p, al, std::nothrow); });
        }
    }
}
END_TEST

namespace {
struct alignas(128) Cell {
    unsigned char bytes[640];
};
struct alignas(4096) PageObj {
    int v[10];
};
} // namespace

START_TEST(test_new_expressions)
{
    // new-expressions of over-aligned types use the aligned forms.
    sefer_stats s0 = now();
    std::vector<Cell *> cells;
    cells.reserve(2000);
    for (int i = 0; i < 2000; i++)
        cells.push_back(new Cell());
    PageObj *po = new PageObj[3];
    sefer_stats s1 = now();
    for (Cell *c : cells) {
        ck_assert_uint_eq(reinterpret_cast<uintptr_t>(c) % 128, 0);
        ck_assert_uint_eq(c->bytes[639], 0);
    }
    ck_assert_uint_eq(reinterpret_cast<uintptr_t>(po) % 4096, 0);
    ck_assert_int_ge(int64_t(s1.allocs - s0.allocs), 2001);
    ck_assert_int_le(int64_t(s1.segments - s0.segments), 4);
    for (Cell *c : cells)
        delete c;
    delete[] po;

    // Library types allocate through operator new too.
    s0 = now();
    std::string str(5000, 'x');
    std::vector<long> vec(10000, 7);
    s1 = now();
    ck_assert_int_ge(int64_t(s1.allocs - s0.allocs), 2);
    ck_assert_uint_ge(malloc_usable_size(vec.data()), 10000 * sizeof(long));
    ck_assert_uint_ge(malloc_usable_size(&str[0]), 5001);
}
END_TEST

START_TEST(test_impossible_sizes_throw)
{
    static const std::size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, std::size_t(PTRDIFF_MAX),
                                        std::size_t(1) << 48};
    for (std::size_t n : sizes) {
        bool threw = false;
        try {
            void *p = ::operator new(n);
            escape(p);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        ck_assert_msg(threw, "operator new(%zu) did not throw bad_alloc", n);

        threw = false;
        try {
            void *p = ::operator new[](n);
            escape(p);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        ck_assert_msg(threw, "operator new[](%zu) did not throw bad_alloc", n);

        threw = false;
        try {
            void *p = ::operator new(n, std::align_val_t(64));
            escape(p);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        ck_assert_msg(threw, "operator new(%zu, align 64) did not throw bad_alloc", n);

        threw = false;
        try {
            void *p = ::operator new[](n, std::align_val_t(4096));
            escape(p);
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        ck_assert_msg(threw, "operator new[](%zu, align 4096) did not throw bad_alloc", n);
    }

    // A new-expression whose element count overflows.
    volatile std::size_t count = SIZE_MAX / 4;
    bool threw = false;
    try {
        long *p = new long[count];
        escape(p);
    } catch (const std::bad_alloc &) { // bad_array_new_length is a bad_alloc
        threw = true;
    }
    ck_assert(threw);

    // Still works after.
    void *p = ::operator new(100);
    ck_assert_ptr_nonnull(p);
    ::operator delete(p);
}
END_TEST

START_TEST(test_nothrow_returns_null)
{
    static const std::size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, std::size_t(PTRDIFF_MAX),
                                        std::size_t(1) << 48};
    for (std::size_t n : sizes) {
        void *p = ::operator new(n, std::nothrow);
        ck_assert_msg(p == nullptr, "operator new(%zu, nothrow) = %p", n, p);
        p = ::operator new[](n, std::nothrow);
        ck_assert_msg(p == nullptr, "operator new[](%zu, nothrow) = %p", n, p);
        p = ::operator new(n, std::align_val_t(256), std::nothrow);
        ck_assert_msg(p == nullptr, "operator new(%zu, 256, nothrow) = %p", n, p);
        p = ::operator new[](n, std::align_val_t(256), std::nothrow);
        ck_assert_msg(p == nullptr, "operator new[](%zu, 256, nothrow) = %p", n, p);
    }
    // nullptr is fine for every delete.
    ::operator delete(nullptr);
    ::operator delete[](nullptr);
    ::operator delete(nullptr, std::align_val_t(64));
    ::operator delete(nullptr, std::nothrow);
}
END_TEST

namespace {
int handler_calls;
void counting_handler()
{
    // First call: pretend to free something; second: give up.
    if (++handler_calls >= 2)
        std::set_new_handler(nullptr);
}
} // namespace

START_TEST(test_new_handler_called)
{
    // [new.delete.single]: on failure operator new calls the installed
    // new_handler and retries; with no handler it throws bad_alloc.
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    bool threw = false;
    try {
        void *p = ::operator new(SIZE_MAX / 2 + 1);
        escape(p);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    std::set_new_handler(nullptr);
    ck_assert(threw);
    ck_assert_msg(handler_calls == 2, "new_handler called %d times, expected 2", handler_calls);

    // nothrow new also consults the handler, then returns null.
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    void *p = ::operator new(SIZE_MAX / 2 + 1, std::nothrow);
    std::set_new_handler(nullptr);
    ck_assert_ptr_null(p);
    ck_assert_msg(handler_calls == 2, "nothrow: new_handler called %d times, expected 2",
                  handler_calls);
}
END_TEST

static Suite *cxx_suite()
{
    Suite *s = suite_create("cxx");
    TCase *tc = tcase_create("operators");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_plain_forms);
    tcase_add_test(tc, test_aligned_forms);
    tcase_add_test(tc, test_new_expressions);
    tcase_add_test(tc, test_impossible_sizes_throw);
    tcase_add_test(tc, test_nothrow_returns_null);
    tcase_add_test(tc, test_new_handler_called);
    suite_add_tcase(s, tc);
    return s;
}

int main()
{
    SRunner *sr = srunner_create(cxx_suite());
    srunner_run_all(sr, std::getenv("CK_VERBOSITY") ? CK_ENV : CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
