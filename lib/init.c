/* init.c - process start-up, fork and the version.
 *
 * Initialisation happens on the first slow-path call, whoever makes it (the
 * dynamic loader, a constructor that runs before ours, calloc inside
 * pthread_create), and again harmlessly from our constructor.  It reads the
 * knobs and creates the thread-exit key; none of it calls malloc.  The
 * constructor then registers fork handlers, which may allocate inside libc
 * and so must not run from inside malloc. */
#include "internal.h"

_Atomic int sf_initialized;
bool sf_fork_child;
pthread_key_t sf_thread_key;
bool sf_thread_key_ok;
static atomic_flag init_busy = ATOMIC_FLAG_INIT;

void sf_init_slow(void) {
    while (atomic_flag_test_and_set_explicit(&init_busy, memory_order_acquire)) {
    }
    if (!atomic_load_explicit(&sf_initialized, memory_order_relaxed)) {
        sf_clock_init();
        sf_knobs_init();
        sf_memlimit_refresh();
        sf_guard_level = (uint8_t)sf_knob(SF_KNOB_GUARD_LEVEL);
        sf_guard_init();
        sf_track_init();
        sf_l2_fast = sf_guard_level == 2 && !sf_tracked;
        sf_mem_checked = sf_guard_level >= 3 && !sf_tracked;
        sf_prof_init();
        sf_gsample_init();
        sf_entry_choose(); /* (after: the profile decides levels 0-1's free) */
        sf_thread_key_ok = pthread_key_create(&sf_thread_key, sf_heap_thread_done) == 0;
        atomic_store_explicit(&sf_initialized, 1, memory_order_release);
    }
    atomic_flag_clear_explicit(&init_busy, memory_order_release);
}

/* fork: hold every lock across the fork so the child sees them consistent;
 * the child releases them too and abandons the heaps of threads that did
 * not come along. */
static void fork_prepare(void) {
    sf_heaps_fork_prepare(); /* (first: a purge under it takes the cache's and segments' locks) */
    sf_lock(&sf_knob_lock);
    sf_lock(&sf_fallback_lock);
    sf_lock(&sf_span_quarantine_lock);
    sf_lock(&sf_cache_lock);
    sf_lock(&sf_seg_lock);
    sf_prof_fork_prepare();
    sf_gsample_fork_prepare();
}

static void fork_parent(void) {
    sf_gsample_fork_parent();
    sf_prof_fork_parent();
    sf_unlock(&sf_seg_lock);
    sf_unlock(&sf_cache_lock);
    sf_unlock(&sf_span_quarantine_lock);
    sf_unlock(&sf_fallback_lock);
    sf_unlock(&sf_knob_lock);
    sf_heaps_fork_parent();
}

/* The forking thread is the child's only thread and holds every lock, so
 * it can release them as the parent does. */
static void fork_child(void) {
    sf_fork_child = true;
    fork_parent();
    sf_heaps_after_fork_child();
    sf_events_after_fork_child();
    sf_memlimit_after_fork_child();
}

__attribute__((constructor(101))) static void sf_constructor(void) {
    sf_ensure_init();
#ifdef SF_INTERPOSE_MEM
    sf_mem_resolve();
#endif
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    sf_prof_constructor();
}

SEFER_EXPORT const char *sefer_version(void) { return SEFER_VERSION_STRING; }
