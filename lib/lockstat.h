/* lockstat.h - locks and shared-line read-modify-writes, as the counter
 * build counts them (-Dlock_stats=true, lib/lockstat.c, docs/scaling.md).
 *
 * With SEFER_LOCK_STATS, every sf_lock/sf_unlock is counted and timed per
 * lock, every sf_stat_add/sub per process-wide counter, and each
 * read-modify-write on a cache line other threads also write is counted at
 * its call site with SF_LS_RMW(KIND) (for a CAS loop: once per attempt).
 * Without it (every normal build) the hooks are nothing: SF_LS_RMW and
 * SF_LS_STAT are ((void)0).  X(KIND, "name", what is counted).
 *
 * The hooks are the one use of a file of lib/ that every layer may make
 * (docs/design.md, "Layers"). */
#ifndef SEFER_LOCKSTAT_H
#define SEFER_LOCKSTAT_H

#include "types.h"

#include <sched.h>

#define SF_LS_RMW_KINDS(X)                                                                 \
    X(RING_TAIL_CAS, "ring_tail_cas", "a producer claims a ring position (the owner's ring tail)") \
    X(RING_POP, "ring_pop", "the owner takes a ring cell (cell line and head, read by producers)") \
    X(RING_OVERFLOWED, "ring_overflowed", "fetch_add on ring.overflowed (a full ring)")   \
    X(OVERFLOW_CAS, "overflow_cas", "push onto the owner heap's overflow list")          \
    X(OVERFLOW_XCHG, "overflow_xchg", "the owner takes its overflow list")               \
    X(XFREE_CAS, "xfree_cas", "push onto a page's remote-free list (page->xfree)")        \
    X(XFREE_NOTIFY, "xfree_notify", "CAS on page->xfree setting or clearing the full-page flag") \
    X(XFREE_XCHG, "xfree_xchg", "the owner takes a page's remote-free list")             \
    X(INBOX_CAS, "inbox_cas", "push of a batch of remote frees onto the owner heap's inbox") \
    X(INBOX_XCHG, "inbox_xchg", "the owner takes its inbox of batches")                  \
    X(HEAP_STATE, "heap_state", "CAS or store on a heap's state (claim, collect, release)") \
    X(OWNERLESS_CAS, "ownerless_cas", "push or pop on the registry's ownerless-heap stack") \
    X(SLOT_MAKE, "slot_make", "fetch_add on the registry's slot count, CAS of a new chunk") \
    X(ABANDONED_FLAG, "abandoned_flag", "CAS on the registry's next look for abandoned purges") \
    X(SEG_RESERVE_CAS, "seg_reserve_cas", "CAS on stats.segments (and its peak) against segments.max") \
    X(SEGMAP_STORE, "segmap_store", "a segment map byte written (read by every free's fast path)")
enum sf_ls_rmw {
#define SF_LS_RMW_ENUM_(id, ...) SF_RMW_##id,
    SF_LS_RMW_KINDS(SF_LS_RMW_ENUM_)
#undef SF_LS_RMW_ENUM_
        SF_RMW_KIND_COUNT
};
#ifdef SEFER_LOCK_STATS
SF_HIDDEN void sf_ls_lock(pthread_mutex_t *m);
SF_HIDDEN void sf_ls_unlock(pthread_mutex_t *m);
SF_HIDDEN void sf_ls_rmw(enum sf_ls_rmw kind);
SF_HIDDEN void sf_ls_stat(const _Atomic uint64_t *counter);
#define SF_LS_RMW(kind) sf_ls_rmw(SF_RMW_##kind)
#define SF_LS_STAT(counter) sf_ls_stat(counter)
#else
#define SF_LS_RMW(kind) ((void)0)
#define SF_LS_STAT(counter) ((void)0)
#endif

/* Every lock of sefer is taken and released through these. */
#ifdef SEFER_LOCK_STATS
SF_INLINE void sf_lock(pthread_mutex_t *m) { sf_ls_lock(m); }
SF_INLINE void sf_unlock(pthread_mutex_t *m) { sf_ls_unlock(m); }
#else
SF_INLINE void sf_lock(pthread_mutex_t *m) { pthread_mutex_lock(m); }
SF_INLINE void sf_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
#endif

/* A lock taken at exit (guard.check_at_exit): a bounded wait, since the
 * exiting thread may hold it itself (exit() from a signal handler that
 * interrupted it inside sefer), and waiting for itself would hang the
 * exit.  False past the bound: the caller skips its work.  (Not counted by
 * the counter build; sf_unlock releases it as any other.) */
SF_INLINE bool sf_lock_bounded(pthread_mutex_t *m) {
    for (int i = 0; i < 20000; i++) {
        if (pthread_mutex_trylock(m) == 0) return true;
        sched_yield();
    }
    return false;
}

/* In a fork() child, for a lock not held across the fork (its holders
 * may work long, and the fork would wait for them): whether a thread held
 * it at the fork.  That thread is not in the child, so the lock is then
 * made anew, free, and what it guarded may be half changed: the caller
 * drops it.  False if the lock was free (released again).  (Raw calls, as
 * sf_lock_bounded's: not counted by the counter build.) */
SF_INLINE bool sf_lock_lost_at_fork(pthread_mutex_t *m) {
    if (pthread_mutex_trylock(m) == 0) {
        pthread_mutex_unlock(m);
        return false;
    }
    pthread_mutex_init(m, NULL);
    return true;
}

#endif /* SEFER_LOCKSTAT_H */
