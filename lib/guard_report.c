/* guard_report.c - what happens when a misuse is detected.
 *
 * Each detection is counted by kind; the first of each kind is written to
 * stderr with the address; then the process aborts (guard.on_error =
 * "abort", the default) or the caller refuses the operation and goes on
 * ("report").  At guard level 0 a detection (the fast path's checks run at
 * every level: they protect sefer's own lists) is counted and refused
 * silently.  Nothing here allocates; before an abort, the hook the
 * introspection side sets (the heap profile written to profile.output)
 * runs once, in a child process of its own (profile_views.c says why). */
#include "internal.h"

#include <stdlib.h>

static const char *const kind_text[SF_GUARD_KINDS] = {
    [SF_GUARD_INVALID] = "free of a pointer sefer does not own",
    [SF_GUARD_INTERIOR] = "free of a pointer inside a block",
    [SF_GUARD_DOUBLE] = "double free",
    [SF_GUARD_OVERFLOW] = "write past the end of a block (canary or size word overwritten)",
    [SF_GUARD_USE_AFTER_FREE] = "write into a freed block",
    [SF_GUARD_MISMATCH] = "operator delete that does not match the allocation (new/new[], or size)",
    [SF_GUARD_BOUNDS] = "memcpy/memmove/memset out of a block's bounds",
};
_Static_assert(SF_GUARD_KINDS == SF_GUARD_KINDS_COUNTED, "one counter per kind");
static _Atomic bool reported[SF_GUARD_KINDS];

void (*sf_guard_abort_hook)(void);

/* The hook once, by the first thread to abort: a detection inside it (or
 * in another thread meanwhile) aborts at once. */
static void before_abort(void) {
    static _Atomic bool ran;
    void (*hook)(void) = __atomic_load_n(&sf_guard_abort_hook, __ATOMIC_ACQUIRE);
    if (hook != NULL && !atomic_exchange(&ran, true)) hook();
}

void sf_guard_report(enum sf_guard_kind kind, const void *p) {
    sf_event_guard(kind, p, atomic_fetch_add_explicit(&sf_gstats.guard[kind], 1, memory_order_relaxed) + 1);
    if (sf_guard_level == 0) return;
    bool abort_now = sf_knob(SF_KNOB_GUARD_ON_ERROR) == SF_ON_ERROR_ABORT;
    if (!atomic_exchange(&reported[kind], true) || abort_now) {
        char msg[192];
        sf_str_t s;
        sf_str_init(&s, msg, sizeof msg);
        sf_str_add(&s, "sefer: ");
        sf_str_add(&s, kind_text[kind]);
        sf_str_add(&s, " at ");
        sf_str_addx(&s, (uintptr_t)p);
        sf_str_add(&s, abort_now ? ": aborting (guard.on_error = abort)\n"
                                 : ": refused (guard.on_error = report; reported once)\n");
        sf_write_stderr(msg);
    }
    if (abort_now) {
        before_abort();
        abort();
    }
}
