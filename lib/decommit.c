/* decommit.c - how much free memory stays committed: the adaptive policy.
 *
 * decommit.policy = delayed gives an empty page (or a cached span) back once
 * it has been empty for decommit.delay.  That is right for memory that
 * stays idle and wrong for memory a program needs again in bursts a little
 * further apart than the delay: every burst then faults in what the one
 * before gave back.  decommit.policy = adaptive (the default) remembers
 * the most memory in use at once in each of the last SF_REUSE_WINDOW
 * intervals of decommit.delay, and of the free memory past its delay it
 * keeps what would bring the program back to that recent peak; the rest
 * goes back to the OS, oldest first.  What the recent past used again stays,
 * what no recent peak needed goes, and once the program has stayed below
 * its old peak for the whole window the policy is delayed again.  A heap
 * counts its pages in use, the large cache the bytes of the spans and
 * segments it handed out and has not had back.
 *
 * Nothing here runs on a timer: peaks are noted when memory is taken, and
 * the purges that consult them run where they always did (page allocation,
 * cache operations, thread exit, sefer_trim), and, while the introspection
 * server runs, at each turn of its thread's loop (heap.c, sf_decommit_tick). */
#include "internal.h"

/* The interval number of `now`, and the window rolled forward to it. */
static void roll(sf_reuse_t *r, uint64_t now) {
    uint64_t len = sf_knob(SF_KNOB_DECOMMIT_DELAY);
    uint64_t epoch = now / (len ? len : 1);
    if (epoch == r->epoch) return;
    uint64_t gone = epoch - r->epoch < SF_REUSE_WINDOW ? epoch - r->epoch : SF_REUSE_WINDOW;
    for (uint64_t i = 1; i <= gone; i++) r->peak[(r->epoch + i) % SF_REUSE_WINDOW] = 0;
    r->epoch = epoch;
}

/* `in_use` is in use now: the interval's peak is at least that. */
void sf_reuse_level(sf_reuse_t *r, uint64_t now, uint64_t in_use) {
    roll(r, now);
    uint64_t *peak = &r->peak[r->epoch % SF_REUSE_WINDOW];
    if (in_use > *peak) *peak = in_use;
}

/* How much free memory past its delay stays committed with `in_use` in
 * use now: the way back to the window's peak (0 unless the policy is
 * adaptive). */
uint64_t sf_reuse_keep(sf_reuse_t *r, uint64_t now, uint64_t in_use) {
    if (sf_knob(SF_KNOB_DECOMMIT_POLICY) != SF_DECOMMIT_ADAPTIVE) return 0;
    roll(r, now);
    uint64_t most = 0;
    for (unsigned i = 0; i < SF_REUSE_WINDOW; i++)
        if (r->peak[i] > most) most = r->peak[i];
    return most > in_use ? most - in_use : 0;
}
