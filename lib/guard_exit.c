/* guard_exit.c - guard levels 2 and 3 at exit: the blocks still allocated
 * checked once more, as their free would have checked them.
 *
 * Levels 2 and 3 find an overflow when the block (or the one after it) is
 * freed, and level 3 a write after free when the block is handed out
 * again or its page empties.  A program that writes past a block
 * and then ends without freeing it, or writes into a freed block and ends
 * before the block comes back, was never told.  So at exit (a destructor:
 * it runs after the program's own atexit handlers and destructors, which
 * may free) every block of the heaps no running thread owns is checked:
 * live blocks' size words and canaries, and at level 3 the zero fill of
 * free and quarantined blocks (check.c, sf_guard_sweep).  Spans are checked
 * only when no other thread runs: they have no owner, and one freed this
 * instant would be read while it is made inaccessible.  Not read: the
 * fallback heap (its blocks get their tails after its lock is released),
 * and in the child of a fork every heap but the forking thread's (the
 * parent's other threads may have left a block half handed out).  The
 * locks are taken with a bounded wait (exit() from a signal handler may
 * run in a thread that holds one): past it the check is skipped.  The
 * sampled guard's blocks (guard_sample.c) are checked too, at any level.  A damaged block is
 * reported like one found by free: aborting by default, which a test
 * harness (or the shell) sees as the process not ending normally.
 *
 * guard.check_at_exit turns it off.  Its cost is a pass over every block
 * of those heaps, once. */
#include "internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* Threads in the process (field 20 of /proc/self/stat); 0 if unknown.
 * Nothing here allocates: the heap is what is being checked. */
static long thread_count(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* (the command name may hold anything) */
    if (p == NULL) return 0;
    int field = 2;
    for (; *p != '\0' && field < 20; p++)
        if (*p == ' ') field++;
    return strtol(p, NULL, 10);
}

/* Says what was found (a guard report says each kind once: this may be a
 * block already reported and refused), then reports it. */
static void found(enum sf_guard_kind kind, const void *p) {
    char msg[160];
    sf_str_t s;
    sf_str_init(&s, msg, sizeof msg);
    sf_str_add(&s, "sefer: guard.check_at_exit: ");
    sf_str_add(&s, kind == SF_GUARD_OVERFLOW ? "a write past a block" : "a write into a freed block");
    sf_str_add(&s, " at ");
    sf_str_addx(&s, (uintptr_t)p);
    sf_str_add(&s, ", found as the process ended\n");
    sf_write_stderr(msg);
    sf_guard_report(kind, p);
}

__attribute__((destructor)) static void guard_check_at_exit(void) {
    if (!sf_knob(SF_KNOB_GUARD_CHECK_AT_EXIT)) return;
    const void *sampled = sf_gsample_on ? sf_gsample_damaged() : NULL; /* (any level) */
    if (sampled != NULL) found(SF_GUARD_OVERFLOW, sampled);
    if (sf_guard_level < 2) return;
    const void *overflow = NULL, *uaf = NULL;
    sf_track_quiet_begin(); /* under memcheck: reads freed blocks and hidden fields */
    sf_guard_sweep(thread_count() == 1, &overflow, &uaf);
    sf_track_quiet_end();
    if (overflow != NULL) found(SF_GUARD_OVERFLOW, overflow);
    if (uaf != NULL) found(SF_GUARD_USE_AFTER_FREE, uaf);
}
