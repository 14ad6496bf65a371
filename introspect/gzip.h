/* gzip.h - the gzip container the pprof file travels in (gzip.c). */
#ifndef SEFER_GZIP_H
#define SEFER_GZIP_H

#include <stddef.h>

#ifndef SF_HIDDEN
#define SF_HIDDEN __attribute__((visibility("hidden")))
#endif

/* The ways to make it, in the order sf_gzip tries them. */
typedef enum { SF_GZIP_LIBDEFLATE, SF_GZIP_ZLIB, SF_GZIP_STORED } sf_gzip_way_t;

/* p's n bytes as a gzip file made `way`, malloc'd, its length in *len;
 * NULL if that way is not available in this process (its library is not
 * installed, or this build has no zlib.h) or memory ran out. */
SF_HIDDEN unsigned char *sf_gzip_by(sf_gzip_way_t way, const void *p, size_t n, size_t *len);

/* The same made the first way that works. */
SF_HIDDEN unsigned char *sf_gzip(const void *p, size_t n, size_t *len);

#endif
