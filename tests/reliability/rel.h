/* rel.h - what the reliability suites share beyond tests/sefer_test.h.
 *
 * Worker threads cannot use check's assertions (they only work in the
 * test's own thread), and while memory is deliberately exhausted or the OS
 * layer made to fail, nothing may allocate: a failure is recorded with
 * rel_fail (the first message kept in a static buffer, every one counted)
 * and asserted later with REL_ASSERT_NO_FAILURES. */
#ifndef SEFER_REL_H
#define SEFER_REL_H

#include "sefer_test.h"

#include <stdarg.h>
#include <stdatomic.h>

static atomic_long rel_failures;
static char rel_first_failure[512];

__attribute__((format(printf, 1, 2))) static inline void rel_fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&rel_failures, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel_first_failure, sizeof rel_first_failure, fmt, ap);
    va_end(ap);
}

#define REL_ASSERT_NO_FAILURES()                                                              \
    ck_assert_msg(atomic_load(&rel_failures) == 0, "%ld failure(s); the first: %s",          \
                  atomic_load(&rel_failures), rel_first_failure)

/* The seed of a randomised test: the environment variable `var` if set
 * (to replay a failure), else `def`.  Printed, so a log shows how to replay. */
static inline uint64_t rel_seed(const char *var, uint64_t def)
{
    const char *s = getenv(var);
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : def;
    printf("%s=%#" PRIx64 "\n", var, seed);
    fflush(stdout);
    return seed;
}

/* sefer_check() must find nothing (its report is on stderr). */
#define REL_ASSERT_CONSISTENT(when)                                                           \
    do {                                                                                      \
        int problems_ = sefer_check();                                                        \
        ck_assert_msg(problems_ == 0, "sefer_check found %d problem(s) %s (see stderr)",      \
                      problems_, (when));                                                     \
    } while (0)

#endif /* SEFER_REL_H */
