/* test_gzip.c - the gzip files the pprof profile travels in
 * (introspect/gzip.c), each way on its own: libdeflate, zlib, stored
 * blocks.  This links gzip.c itself and has `gzip -dc` (an independent
 * reader) decompress what each way made of inputs on both sides of the
 * stored blocks' 65535-byte limit, empty, incompressible and
 * profile-like; the bytes must come back the same.  The libdeflate and
 * zlib cases skip (77) where their library cannot be loaded; the stored
 * case, and sf_gzip's choice of the first way that works, always run. */
#include "../sefer_test.h"

#include <dlfcn.h>
#include <sys/wait.h>

#include "gzip.h"

/* What `gzip -dc` makes of z (len bytes), malloc'd, its length in *out_len;
 * NULL if gzip failed (its message on stderr). */
static unsigned char *gunzip(const unsigned char *z, size_t len, size_t *out_len)
{
    char in_path[] = "/tmp/sefer-gzip-in-XXXXXX", out_path[] = "/tmp/sefer-gzip-out-XXXXXX";
    int in = mkstemp(in_path), out = mkstemp(out_path);
    ck_assert(in >= 0 && out >= 0);
    ck_assert_int_eq(write(in, z, len), (ssize_t)len);
    close(in);
    close(out);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gzip -dc < %s > %s", in_path, out_path);
    int rc = system(cmd);
    unsigned char *back = NULL;
    if (rc == 0) {
        FILE *f = fopen(out_path, "rb");
        ck_assert(f != NULL);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        back = malloc((size_t)n + 1);
        ck_assert(back != NULL);
        ck_assert_int_eq(fread(back, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        *out_len = (size_t)n;
    }
    unlink(in_path);
    unlink(out_path);
    return back;
}

/* Inputs: sizes around the stored blocks' limit and a few others. */
static const size_t sizes[] = {0, 1, 65534, 65535, 65536, 65535 * 2 + 1, 300000, 1 << 20};

/* Byte i of an input of kind k: random (incompressible), or a profile's
 * shape (short varints of a small alphabet, repeating with variations). */
static unsigned char input_byte(int k, size_t i, uint64_t *rng)
{
    if (k == 0) {
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        return (unsigned char)*rng;
    }
    return (unsigned char)((i % 37) < 32 ? 1 + (i * 7 / 37) % 90 : i >> 9);
}

static void round_trips(sf_gzip_way_t way, const char *name)
{
    for (int k = 0; k < 2; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            unsigned char *p = malloc(n + 1);
            ck_assert(p != NULL);
            uint64_t rng = 0x9e3779b97f4a7c15ull + n;
            for (size_t i = 0; i < n; i++) p[i] = input_byte(k, i, &rng);
            size_t zlen = 0, back_len = 0;
            unsigned char *z = sf_gzip_by(way, p, n, &zlen);
            ck_assert_msg(z != NULL, "%s: no gzip of %zu bytes", name, n);
            ck_assert_msg(zlen >= 18 && z[0] == 0x1f && z[1] == 0x8b, "%s: %zu bytes: not a gzip file (%zu bytes)",
                          name, n, zlen);
            unsigned char *back = gunzip(z, zlen, &back_len);
            ck_assert_msg(back != NULL, "%s: gzip -dc refused the file of %zu bytes", name, n);
            ck_assert_msg(back_len == n && memcmp(back, p, n) == 0, "%s: %zu bytes came back as %zu, different", name,
                          n, back_len);
            /* (the profile-like input compresses but with stored blocks) */
            if (k == 1 && n >= 65536 && way != SF_GZIP_STORED)
                ck_assert_msg(zlen < n / 4, "%s: %zu profile-like bytes made %zu", name, n, zlen);
            free(back);
            free(z);
            free(p);
        }
}

START_TEST(test_libdeflate)
{
    round_trips(SF_GZIP_LIBDEFLATE, "libdeflate");
}
END_TEST

START_TEST(test_zlib)
{
    round_trips(SF_GZIP_ZLIB, "zlib");
}
END_TEST

START_TEST(test_stored)
{
    round_trips(SF_GZIP_STORED, "stored");
}
END_TEST

/* sf_gzip itself: the first way that works (libdeflate's file is the
 * smallest of the three on the profile-like input) */
START_TEST(test_first_way)
{
    size_t n = 300000, zlen = 0, back_len = 0;
    unsigned char *p = malloc(n);
    uint64_t rng = 1;
    for (size_t i = 0; i < n; i++) p[i] = input_byte(1, i, &rng);
    unsigned char *z = sf_gzip(p, n, &zlen);
    ck_assert(z != NULL);
    unsigned char *back = gunzip(z, zlen, &back_len);
    ck_assert(back != NULL && back_len == n && memcmp(back, p, n) == 0);
    for (int way = SF_GZIP_LIBDEFLATE; way <= SF_GZIP_STORED; way++) {
        size_t wlen = 0;
        unsigned char *w = sf_gzip_by((sf_gzip_way_t)way, p, n, &wlen);
        if (w == NULL) continue;
        ck_assert_msg(wlen == zlen && memcmp(w, z, zlen) == 0, "sf_gzip's file is not the first way's (%d)", way);
        free(w);
        break;
    }
    free(back);
    free(z);
    free(p);
}
END_TEST

/* Whether a way's library is there, asked apart from gzip.c (which would
 * answer NULL for a way that is broken too, and the broken way would be
 * skipped as missing): the library and its functions, loaded here. */
static const char *missing_library(const char *soname, const char *const *names, const char *why)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return why;
    for (const char *const *n = names; *n != NULL; n++)
        if (dlsym(lib, *n) == NULL)
            return why;
    return NULL; /* (left open: gzip.c opens the same library) */
}

static const char *libdeflate_why_not(void)
{
    static const char *const names[] = {"libdeflate_alloc_compressor", "libdeflate_gzip_compress_bound",
                                        "libdeflate_gzip_compress", "libdeflate_free_compressor", NULL};
    return missing_library("libdeflate.so.0", names, "libdeflate.so.0 not found (Debian: libdeflate0)");
}

static const char *zlib_why_not(void)
{
#if defined(SF_HAVE_ZLIB)
    static const char *const names[] = {"deflateInit2_", "deflate", "deflateBound", "deflateEnd", NULL};
    return missing_library("libz.so.1", names, "libz.so.1 not found (Debian: zlib1g)");
#else
    return "built without zlib.h (Debian: zlib1g-dev)";
#endif
}

int main(int argc, char **argv)
{
    Suite *s = suite_create("introspect-gzip");
    TCase *tc = tcase_create("gzip");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stored);
    tcase_add_test(tc, test_first_way);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "libdeflate", libdeflate_why_not);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_libdeflate);
    tc = st_optional_case(s, "zlib", zlib_why_not);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_zlib);
    return st_main(s, argc, argv);
}
