/* maps_access.h - what /proc/self/maps says of an address, and whether a
 * write there kills a child: for tests of the memory sefer keeps no-access
 * at guard levels 0-1 (test_unused_no_access.c, test_freed_blocks.c).  The
 * maps are read with read(2) into a static buffer: no allocation of the
 * reader's own, so that a thread's heap holds only the test's blocks. */
#ifndef SEFER_TEST_MAPS_ACCESS_H
#define SEFER_TEST_MAPS_ACCESS_H

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "sefer_test.h"
#include "internal.h"

struct region {
    uintptr_t from, to;
    char perms[5];
};

static struct region regions[8192];
static size_t nregions;

static char maps_text[1 << 20];

static void read_maps(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, maps_text + got, sizeof maps_text - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    ck_assert_uint_lt(got, sizeof maps_text - 1);
    maps_text[got] = 0;
    nregions = 0;
    for (char *line = maps_text; *line && nregions < sizeof regions / sizeof regions[0];) {
        char *end = strchr(line, '\n');
        if (end != NULL)
            *end = 0;
        unsigned long a, b;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &a, &b, perms) == 3) {
            regions[nregions].from = a;
            regions[nregions].to = b;
            memcpy(regions[nregions].perms, perms, sizeof perms);
            nregions++;
        }
        if (end == NULL)
            break;
        line = end + 1;
    }
}

enum access { UNMAPPED, NO_ACCESS, READ_WRITE, OTHER };

static enum access access_at(uintptr_t a)
{
    for (size_t i = 0; i < nregions; i++) {
        if (a < regions[i].from || a >= regions[i].to)
            continue;
        if (strncmp(regions[i].perms, "---", 3) == 0)
            return NO_ACCESS;
        if (strncmp(regions[i].perms, "rw", 2) == 0)
            return READ_WRITE;
        return OTHER;
    }
    return UNMAPPED;
}

static const char *access_name(enum access a)
{
    static const char *const names[] = {"unmapped", "no-access", "read-write", "other"};
    return names[a];
}

/* Every OS page of [base + from, base + to) has access `want` (maps read
 * before). */
static void expect_access(const void *base, size_t from, size_t to, enum access want, const char *what)
{
    for (size_t o = from; o < to; o += SF_OS_PAGE) {
        enum access got = access_at((uintptr_t)base + o);
        ck_assert_msg(got == want, "%s: offset %#zx of the segment at %p is %s, not %s", what, o, base,
                      access_name(got), access_name(want));
    }
}

/* One byte written or read at p (in a child). */
static inline void write_one(void *p)
{
    *(volatile unsigned char *)p = 1;
}

static inline void read_one(void *p)
{
    (void)*(volatile unsigned char *)p;
}

/* Whether fn (write_one or read_one) at p kills a child with SIGSEGV (it
 * must either do that or exit cleanly). */
static bool access_faults(void (*fn)(void *), void *p)
{
    int status = st_run_child(fn, p, NULL, 0, 30);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return false;
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "the access at %p: %s", p,
                  st_describe_status(status));
    return true;
}

static bool write_faults(void *p) { return access_faults(write_one, p); }

#endif
