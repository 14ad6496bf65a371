/* profile_copy.c - one copy of the heap profile, what every view of it
 * starts from (profile_views.c: the JSON views; pprof.c: the pprof file).
 *
 * lib/profile.c copies its tables under its lock into buffers allocated
 * here, before the lock is taken; if the tables grew meanwhile, the copy is
 * tried again with more room.  Nothing here runs inside malloc. */
#include "symbols.h"

#include <stdlib.h>

bool sf_prof_copy_take(sf_prof_copy_t *c) {
    memset(c, 0, sizeof *c);
    sf_prof_totals_t t;
    sf_prof_totals(&t);
    for (;;) {
        size_t ns = t.sites + t.sites / 4 + 16, nf = t.frames + t.frames / 4 + 256;
        c->sites = malloc(ns * sizeof *c->sites);
        c->frames = malloc(nf * sizeof *c->frames);
        if (c->sites == NULL || c->frames == NULL) {
            sf_prof_copy_free(c);
            return false;
        }
        if (sf_prof_copy(c->sites, ns, c->frames, nf, &t)) break;
        free(c->sites);
        free(c->frames);
    }
    c->totals = t;
    c->nsites = t.sites;
    return true;
}

void sf_prof_copy_free(sf_prof_copy_t *c) {
    free(c->sites);
    free(c->frames);
    c->sites = NULL;
    c->frames = NULL;
}

void sf_prof_site_frames(const sf_prof_copy_t *c, const sf_prof_site_t *s, size_t *first, size_t *n) {
    size_t f = s->frames_at, end = s->frames_at + s->depth;
    /* (keep the last frame even if it looks like sefer's: a stack is never empty) */
    while (f + 1 < end && sf_sym_is_allocator(c->frames[f], sf_sym_lookup(c->frames[f]))) f++;
    *first = f;
    *n = end - f;
}
