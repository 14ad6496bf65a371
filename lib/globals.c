/* globals.c - the process-wide flags and counters every layer reads.
 *
 * They are set by the files that own the decision (init.c at start-up,
 * phase.c when a phase begins or ends) and read by the allocation and free
 * paths, the reporting and the inspection code.  Defined here, below all of
 * them, so that reading a flag or bumping a counter makes no file depend on
 * the one that sets it (docs/design.md, "Layers"). */
#include "internal.h"

/* copied from guard.level at start-up (init.c) */
uint8_t sf_guard_level;
/* guard level 2's fast paths are the entry points (init.c) */
bool sf_l2_fast;
/* SF_MODE_TRACKED (init.c) | SF_MODE_PHASE (phase.c) */
uint8_t sf_generic_mode;
/* phases open now (phase.c); the fast paths are off while it is not 0 */
_Atomic int sf_phase_depth;
/* the process-wide counters, summed into sefer_stats by stats.c */
struct sf_global_stats sf_gstats;
