/* symbols.h - names of code addresses (symbols.c) and what the heap
 * profile's views share (profile_copy.c, used by profile_views.c and
 * pprof.c). */
#ifndef SEFER_SYMBOLS_H
#define SEFER_SYMBOLS_H

#include "profile.h"

typedef struct {
    const char *function; /* NULL: not known */
    const char *file;     /* NULL: no line information */
    int line;
    uint32_t mapping;     /* index in sf_sym_mappings(), UINT32_MAX: none */
    uintptr_t module_offset; /* the address's offset in its module's file */
    bool allocator_name;  /* function names one of the allocator's entry points
                             or sefer's own (sf_sym_is_allocator): decided once,
                             when the address is named */
} sf_sym_t;

typedef struct {
    uintptr_t start, limit, offset; /* an executable mapping of a file */
    char path[1024];
    char build_id[80]; /* hex, "" if none */
    bool main;         /* the program itself (listed first) */
} sf_mapping_t;

/* Lookups happen between begin and end (one thread at a time; the
 * calling thread's allocations are not sampled meanwhile). */
SF_HIDDEN void sf_sym_begin(void);
SF_HIDDEN void sf_sym_end(void);
SF_HIDDEN const sf_sym_t *sf_sym_lookup(uintptr_t addr);
SF_HIDDEN const sf_mapping_t *sf_sym_mappings(size_t *n);
SF_HIDDEN bool sf_sym_is_allocator(uintptr_t addr, const sf_sym_t *s);

/* ---- a copy of the profile (profile_copy.c) ---- */
typedef struct {
    sf_prof_totals_t totals;
    sf_prof_site_t *sites;
    uintptr_t *frames;
    size_t nsites;
} sf_prof_copy_t;
/* false: out of memory */
SF_HIDDEN bool sf_prof_copy_take(sf_prof_copy_t *c);
SF_HIDDEN void sf_prof_copy_free(sf_prof_copy_t *c);
/* The site's frames without sefer's own at the top: *first, *n. */
SF_HIDDEN void sf_prof_site_frames(const sf_prof_copy_t *c, const sf_prof_site_t *s, size_t *first, size_t *n);

/* ---- pprof.c ---- */
/* A gzipped profile.proto of the copy (heap: default sample type
 * inuse_space; else alloc_space).  The sites' figures are read as signed
 * (a delta's may have fallen); duration_ns > 0 is the profile's duration
 * (a delta's).  Call between sf_sym_begin and end.  NULL: out of memory. */
SF_HIDDEN unsigned char *sf_pprof_encode(const sf_prof_copy_t *c, bool heap, int64_t duration_ns, size_t *len);
/* Writes the profile to path (atomically: a temporary file renamed).
 * 0, or -1 with errno. */
SF_HIDDEN int sf_pprof_write_file(const char *path);
/* The name sf_pprof_write_file writes to before renaming it to path, in
 * the process `writer`. */
SF_HIDDEN void sf_pprof_tmp_path(char *out, size_t size, const char *path, pid_t writer);

#endif
