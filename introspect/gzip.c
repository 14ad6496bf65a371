/* gzip.c - the gzip container the pprof file travels in (pprof.c).
 *
 * Three ways, tried in this order; each library is opened with dlopen the
 * first time a profile is written, so that a process that never writes one
 * loads none of them:
 *
 *   libdeflate (libdeflate.so.0) at level 1: a one-shot compressor with no
 *     stream state.  On a 743 KB profile of 16 000 sites it took 3.1 ms
 *     where zlib's level 1 took 6.6 ms, and wrote 4 % less (224 against
 *     235 KB); deflate was half of a continuous profiler's scrape
 *     (docs/benchmarks.md, "A continuous profiler's scrapes").
 *   zlib's deflate (libz.so.1) at Z_BEST_SPEED, Go's own level for
 *     runtime/pprof's files.
 *   stored deflate blocks (RFC 1951 3.2.4) in the gzip container (RFC
 *     1952), written here: no compression, and every gzip reader takes it.
 *
 * Nothing here runs inside malloc: the libraries allocate with it. */
#include "gzip.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(SF_HAVE_ZLIB)
#include <zlib.h>
#endif

/* ---- libdeflate: its four functions, declared here (the library's ABI,
 * stable across its soname 0; no header is needed to build) ---------------- */

struct libdeflate_compressor;
static struct {
    struct libdeflate_compressor *(*alloc)(int level);
    size_t (*bound)(struct libdeflate_compressor *c, size_t n);
    size_t (*compress)(struct libdeflate_compressor *c, const void *in, size_t n, void *out, size_t room);
    void (*release)(struct libdeflate_compressor *c);
} deflate_lib;
static pthread_once_t deflate_once = PTHREAD_ONCE_INIT;

static void deflate_open(void) {
    void *lib = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return;
    deflate_lib.alloc = (__typeof__(deflate_lib.alloc))dlsym(lib, "libdeflate_alloc_compressor");
    deflate_lib.bound = (__typeof__(deflate_lib.bound))dlsym(lib, "libdeflate_gzip_compress_bound");
    deflate_lib.compress = (__typeof__(deflate_lib.compress))dlsym(lib, "libdeflate_gzip_compress");
    deflate_lib.release = (__typeof__(deflate_lib.release))dlsym(lib, "libdeflate_free_compressor");
    if (!deflate_lib.alloc || !deflate_lib.bound || !deflate_lib.compress || !deflate_lib.release)
        deflate_lib.alloc = NULL; /* (not the library we know: not used) */
}

static unsigned char *by_libdeflate(const void *p, size_t n, size_t *len) {
    pthread_once(&deflate_once, deflate_open);
    if (deflate_lib.alloc == NULL) return NULL;
    /* (a compressor a call: it holds no state worth keeping, and callers
     * on different threads then share nothing) */
    struct libdeflate_compressor *c = deflate_lib.alloc(1);
    if (c == NULL) return NULL;
    size_t room = deflate_lib.bound(c, n);
    unsigned char *out = malloc(room);
    size_t made = out != NULL ? deflate_lib.compress(c, p, n, out, room) : 0;
    deflate_lib.release(c);
    if (made == 0) { /* (0: no room, which the bound rules out; or no memory) */
        free(out);
        return NULL;
    }
    *len = made;
    return out;
}

/* ---- zlib ---------------------------------------------------------------- */

#if defined(SF_HAVE_ZLIB)
static struct {
    int (*init)(z_streamp, int, int, int, int, int, const char *, int);
    int (*deflate)(z_streamp, int);
    uLong (*bound)(z_streamp, uLong);
    int (*end)(z_streamp);
} zlib_lib;
static pthread_once_t zlib_once = PTHREAD_ONCE_INIT;

static void zlib_open(void) {
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return;
    zlib_lib.init = (__typeof__(zlib_lib.init))dlsym(lib, "deflateInit2_");
    zlib_lib.deflate = (__typeof__(zlib_lib.deflate))dlsym(lib, "deflate");
    zlib_lib.bound = (__typeof__(zlib_lib.bound))dlsym(lib, "deflateBound");
    zlib_lib.end = (__typeof__(zlib_lib.end))dlsym(lib, "deflateEnd");
    if (!zlib_lib.init || !zlib_lib.deflate || !zlib_lib.bound || !zlib_lib.end) zlib_lib.init = NULL;
}

static unsigned char *by_zlib(const void *p, size_t n, size_t *len) {
    pthread_once(&zlib_once, zlib_open);
    if (zlib_lib.init == NULL || n > UINT32_MAX / 2) return NULL; /* (avail_in is 32 bits) */
    z_stream z;
    memset(&z, 0, sizeof z);
    if (zlib_lib.init(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, (int)sizeof z) !=
        Z_OK)
        return NULL;
    /* (deflateBound covers the gzip header and trailer once the stream
     * knows it writes one, as it does after deflateInit2) */
    size_t cap = zlib_lib.bound(&z, (uLong)n);
    unsigned char *out = malloc(cap);
    if (out == NULL) {
        zlib_lib.end(&z);
        return NULL;
    }
    z.next_in = (unsigned char *)p;
    z.avail_in = (unsigned)n;
    z.next_out = out;
    z.avail_out = (unsigned)cap;
    int rc = zlib_lib.deflate(&z, Z_FINISH);
    *len = z.total_out;
    zlib_lib.end(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}
#else
static unsigned char *by_zlib(const void *p, size_t n, size_t *len) {
    (void)p, (void)n, (void)len;
    return NULL;
}
#endif

/* ---- stored blocks ------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_make(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, size_t n) {
    pthread_once(&crc_once, crc_table_make);
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static unsigned char *stored(const void *p, size_t n, size_t *len) {
    static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    size_t blocks = n / 65535 + 1; /* (an empty input still takes one, final) */
    unsigned char *out = malloc(sizeof head + blocks * 5 + n + 8), *o = out;
    if (out == NULL) return NULL;
    memcpy(o, head, sizeof head);
    o += sizeof head;
    const unsigned char *in = p;
    size_t at = 0;
    do {
        size_t k = n - at > 65535 ? 65535 : n - at;
        *o++ = at + k == n ? 1 : 0; /* BFINAL on the last, BTYPE 00 */
        *o++ = (unsigned char)k;
        *o++ = (unsigned char)(k >> 8);
        *o++ = (unsigned char)~k;
        *o++ = (unsigned char)(~k >> 8);
        memcpy(o, in + at, k);
        o += k;
        at += k;
    } while (at < n);
    uint32_t tail[2] = {crc32_of(in, n), (uint32_t)n}; /* CRC-32, ISIZE (n modulo 2^32) */
    for (int w = 0; w < 2; w++)
        for (int b = 0; b < 32; b += 8) *o++ = (unsigned char)(tail[w] >> b); /* (little-endian) */
    *len = (size_t)(o - out);
    return out;
}

unsigned char *sf_gzip_by(sf_gzip_way_t way, const void *p, size_t n, size_t *len) {
    switch (way) {
    case SF_GZIP_LIBDEFLATE: return by_libdeflate(p, n, len);
    case SF_GZIP_ZLIB: return by_zlib(p, n, len);
    case SF_GZIP_STORED: return stored(p, n, len);
    }
    return NULL;
}

unsigned char *sf_gzip(const void *p, size_t n, size_t *len) {
    for (int way = SF_GZIP_LIBDEFLATE; way <= SF_GZIP_STORED; way++) {
        unsigned char *z = sf_gzip_by((sf_gzip_way_t)way, p, n, len);
        if (z != NULL) return z;
    }
    return NULL;
}
