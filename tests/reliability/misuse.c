/* misuse.c - the misuse suite: one heap misuse per process, under any
 * allocator.
 *
 * Linked with libc (and libstdc++, for operator new and delete) only, so the
 * same binary runs on glibc's malloc or under LD_PRELOAD of another
 * allocator.  tests/reliability/test_security.c runs every probe at every
 * sefer guard level and on glibc, each in a fresh process, and classifies
 * how it ended (docs/security.md, "The misuse suite").
 *
 *   misuse --list    one line per probe: name, group, size, what it does
 *   misuse NAME      runs that probe
 *
 * Each probe is a misuse kind (double frees plain, delayed and interleaved;
 * invalid, unaligned, interior and stack frees; 1-byte, 32-byte and 1 MiB
 * overflows and underflows, written directly, through memcpy and through
 * memset; writes and reads after free with and without the block handed
 * out again; realloc of a freed block; C++ sized delete with the wrong size
 * and new/delete[] mismatches) or a property (freed memory zeroed before
 * its next owner sees it, malloc returning zeroed memory, no immediate reuse
 * of a freed block or of realloc's old block), at one block size: small (64
 * bytes), medium (20000) or large (300000); plus reads and writes of a
 * zero-size allocation.
 *
 * What the probe prints on stdout (the parent reads it):
 *   fault=access   the process faulted in the probe's own access to memory
 *                  (a guard page or an inaccessible block: the misuse was
 *                  stopped by the MMU); exit status 86
 *   verdict=held / verdict=broken   a property probe's finding
 *   survived       the probe ran to its end
 *   check=N counted=M   under sefer: sefer_check's problems and the guard
 *                  events counted (looked up with dlsym; absent otherwise)
 * A fault anywhere else (in the allocator, following a corrupt pointer)
 * kills the process with the signal; an abort by the allocator is SIGABRT. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sefer.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SMALL 64
#define MEDIUM 20000
#define LARGE 300000
#define MIB ((size_t)1 << 20)
#define FAULT_EXIT 86

/* C++ operators under their Itanium-ABI names (libstdc++ provides them). */
void *_Znwm(size_t n);
void *_Znam(size_t n);
void _ZdlPv(void *p);
void _ZdaPv(void *p);
void _ZdlPvm(void *p, size_t n);

/* ---- faults in the probe's own accesses ----------------------------------- */

static volatile sig_atomic_t in_access;

static void on_fault(int sig)
{
    if (in_access) {
        static const char msg[] = "fault=access\n";
        ssize_t w = write(1, msg, sizeof msg - 1);
        (void)w;
        _exit(FAULT_EXIT);
    }
    signal(sig, SIG_DFL); /* a fault elsewhere: let it kill the process */
}

static void install_fault_handler(void)
{
    static char alt[1 << 16];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

#define ACCESS(stmt)                                                                            \
    do {                                                                                        \
        in_access = 1;                                                                          \
        __asm__ __volatile__("" ::: "memory");                                                  \
        stmt;                                                                                   \
        __asm__ __volatile__("" ::: "memory");                                                  \
        in_access = 0;                                                                          \
    } while (0)

/* Keeps the compiler from reasoning about a pointer (and so about the
 * misuse), and from dropping an allocation. */
static void *hide(void *p)
{
    __asm__ __volatile__("" : "+r"(p));
    return p;
}

static void escape(const void *p)
{
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

/* Memory outside any allocator, for sources of big copies. */
static unsigned char *outside(size_t n, int fill)
{
    unsigned char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        _exit(3);
    memset(m, fill, n);
    return m;
}

/* Fills a block and keeps the compiler from dropping the fill as dead
 * (it is, to the program, when a free follows). */
static void dirty(void *p, int c, size_t n)
{
    memset(p, c, n);
    escape(p);
}

static void verdict(int held)
{
    printf("verdict=%s\n", held ? "held" : "broken");
}

/* Allocator activity after a misuse, as a program that goes on would make:
 * blocks of the probe's size and others come and go. */
static void carry_on(size_t n)
{
    static void *v[64];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 64; i++)
            v[i] = malloc(i % 2 ? n : 16 + (size_t)i * 8);
        for (int i = 0; i < 64; i++)
            free(v[i]);
    }
}

/* Enough allocations of size n, each freed again, that a freed block goes
 * through any quarantine and is handed out again. */
static void churn(size_t n, size_t bytes)
{
    static void *v[64];
    for (size_t done = 0; done < bytes; done += 64 * n) {
        for (int i = 0; i < 64; i++) {
            v[i] = malloc(n);
            memset(v[i], 'c', n < 64 ? n : 64);
        }
        for (int i = 0; i < 64; i++)
            free(v[i]);
    }
}

/* ---- double frees ---------------------------------------------------------- */

static void df_plain(size_t n)
{
    char *p = malloc(n);
    free(p);
    free(hide(p));
}

static void df_delayed(size_t n)
{
    char *p = malloc(n);
    free(p);
    carry_on(24); /* other sizes: p itself is not handed out again */
    free(hide(p));
}

static void df_interleaved(size_t n)
{
    char *p = malloc(n), *q = malloc(n);
    free(p);
    free(q);
    free(hide(p));
}

static void realloc_freed(size_t n)
{
    char *p = malloc(n);
    free(p);
    escape(realloc(hide(p), 2 * n));
}

/* ---- invalid frees --------------------------------------------------------- */

static void free_invalid(size_t n)
{
    char *p = malloc(n);
    dirty(p, 0, n);
    /* a page-aligned address near the block that no malloc returned: eight
     * pages on, or (large) a page past the block's end */
    uintptr_t q = n >= LARGE ? ((uintptr_t)p + n + 8191) & ~(uintptr_t)4095
                             : ((uintptr_t)p & ~(uintptr_t)4095) + 8 * 4096;
    free(hide((void *)q));
}

static void free_unaligned(size_t n)
{
    char *p = malloc(n);
    dirty(p, 0, n);
    free(hide(p + 1));
}

static void free_interior(size_t n)
{
    char *p = malloc(n);
    dirty(p, 0, n);
    free(hide(p + (n / 2 & ~(size_t)15)));
}

static void free_stack(size_t n)
{
    /* 32 zero bytes before the address, so that every allocator reads the
     * same "header" there (glibc: size 0, refused), not stack garbage,
     * which made glibc's outcome change from build to build */
    char area[n + 32];
    memset(area, 0, sizeof area);
    escape(area);
    free(hide(area + 32));
}

/* ---- overflows and underflows ---------------------------------------------- */

enum how { DIRECT, MEMCPY, MEMSET };

/* Writes `amount` bytes past the end of a block of n (a second block of n
 * allocated right after it: its neighbour in most allocators), then frees
 * both and goes on. */
static void overflow(size_t n, size_t amount, enum how how)
{
    unsigned char *p = malloc(n), *q = malloc(n);
    dirty(p, 'a', n);
    dirty(q, 'b', n);
    unsigned char *src = how == MEMCPY ? outside(n + amount, 'x') : NULL;
    unsigned char *h = hide(p);
    if (how == DIRECT)
        ACCESS(for (size_t i = 0; i < amount; i++)((volatile unsigned char *)h)[n + i] = 'x');
    else if (how == MEMCPY)
        ACCESS(memcpy(h, src, n + amount));
    else
        ACCESS(memset(h, 'x', n + amount));
    free(p);
    free(q);
    carry_on(n);
}

/* Writes `amount` bytes before the second of two blocks (into the first, in
 * most allocators, or its metadata), downwards when direct, then frees both
 * and goes on. */
static void underflow(size_t n, size_t amount, enum how how)
{
    unsigned char *p = malloc(n), *q = malloc(n);
    dirty(p, 'a', n);
    dirty(q, 'b', n);
    unsigned char *src = how == MEMCPY ? outside(amount, 'x') : NULL;
    unsigned char *h = hide(q);
    if (how == DIRECT)
        ACCESS(for (size_t i = 1; i <= amount; i++)((volatile unsigned char *)h)[-(ptrdiff_t)i] = 'x');
    else if (how == MEMCPY)
        ACCESS(memcpy(h - amount, src, amount));
    else
        ACCESS(memset(h - amount, 'x', amount));
    free(q);
    free(p);
    carry_on(n);
}

#define FLOW(name, fn, amount, how)                                                             \
    static void name(size_t n) { fn(n, amount, how); }
FLOW(over1, overflow, 1, DIRECT)
FLOW(over32, overflow, 32, DIRECT)
FLOW(over1m, overflow, MIB, DIRECT)
FLOW(over1_cpy, overflow, 1, MEMCPY)
FLOW(over32_cpy, overflow, 32, MEMCPY)
FLOW(over1m_cpy, overflow, MIB, MEMCPY)
FLOW(over1_set, overflow, 1, MEMSET)
FLOW(over32_set, overflow, 32, MEMSET)
FLOW(over1m_set, overflow, MIB, MEMSET)
FLOW(under1, underflow, 1, DIRECT)
FLOW(under32, underflow, 32, DIRECT)
FLOW(under1m, underflow, MIB, DIRECT)
FLOW(under1_cpy, underflow, 1, MEMCPY)
FLOW(under32_cpy, underflow, 32, MEMCPY)
FLOW(under1m_cpy, underflow, MIB, MEMCPY)
FLOW(under1_set, underflow, 1, MEMSET)
FLOW(under32_set, underflow, 32, MEMSET)
FLOW(under1m_set, underflow, MIB, MEMSET)

/* ---- zero-size allocations ------------------------------------------------- */

static void zero_write(size_t n)
{
    (void)n;
    unsigned char *p = malloc(0);
    ACCESS(((volatile unsigned char *)hide(p))[0] = 'x');
    free(p);
    carry_on(16);
}

static void zero_read(size_t n)
{
    (void)n;
    unsigned char *p = malloc(0);
    unsigned char v = 0;
    ACCESS(v = ((volatile unsigned char *)hide(p))[0]);
    escape(&v);
    free(p);
}

/* ---- use after free ---------------------------------------------------------- */

/* Writes into a freed block, then the program goes on allocating that size
 * until the block would have been handed out again. */
static void uaf_write(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'a', n);
    free(p);
    ACCESS(((volatile unsigned char *)hide(p))[n / 2] = 'x');
    churn(n, 4 * MIB);
}

/* The same after the next malloc of that size: where it returned the freed
 * block, the write lands in the new owner's block (nothing to see). */
static void uaf_write_reuse(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'a', n);
    free(p);
    unsigned char *q = malloc(n);
    dirty(q, 'b', n);
    ACCESS(((volatile unsigned char *)hide(p))[n / 2] = 'x');
    free(q);
    churn(n, 4 * MIB);
}

/* A read of a freed block must not see what it held (8 bytes from its
 * middle): held if they differ from the old contents, or the read faults. */
static void uaf_read(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'S', n);
    free(p);
    unsigned char got[8];
    ACCESS(memcpy(got, (unsigned char *)hide(p) + n / 2, sizeof got));
    verdict(memchr(got, 'S', sizeof got) == NULL);
}

/* ... nor what its next owner put there. */
static void uaf_read_reuse(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'S', n);
    free(p);
    unsigned char *q = malloc(n);
    dirty(q, 'T', n);
    unsigned char got[8];
    ACCESS(memcpy(got, (unsigned char *)hide(p) + n / 2, sizeof got));
    verdict(memchr(got, 'T', sizeof got) == NULL && memchr(got, 'S', sizeof got) == NULL);
    free(q);
}

/* ---- properties -------------------------------------------------------------- */

/* Whether a block holds 8 bytes in a row of `c`. */
static int holds_run(const unsigned char *q, size_t n, unsigned char c)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++)
        if ((run = q[i] == c ? run + 1 : 0) >= 8)
            return 1;
    return 0;
}

/* Freed contents never reach the next owner: allocations of that size (each
 * freed again) until the freed block comes back; none may hold its old
 * bytes. */
static void zero_after_free(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'S', n);
    free(p);
    int held = 1;
    size_t limit = (64 * MIB) / n < 100000 ? (64 * MIB) / n : 100000;
    for (size_t i = 0; i < limit && held; i++) {
        unsigned char *q = malloc(n);
        held = !holds_run(q, n, 'S');
        free(q);
        if (q == p)
            break;
    }
    verdict(held);
}

/* Every malloc returns zeroed memory, even after blocks of that size were
 * written and freed. */
static void zero_on_malloc(size_t n)
{
    enum { K = 16 };
    unsigned char *v[K];
    for (int i = 0; i < K; i++) {
        v[i] = malloc(n);
        dirty(v[i], 'S', n);
    }
    for (int i = 0; i < K; i++)
        free(v[i]);
    int held = 1;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < K; i++) {
            v[i] = malloc(n);
            for (size_t j = 0; j < n && held; j++)
                held = v[i][j] == 0;
        }
        for (int i = 0; i < K; i++)
            free(v[i]);
    }
    verdict(held);
}

static void reuse_immediate(size_t n)
{
    void *p = malloc(n);
    free(p);
    void *q = malloc(n);
    verdict(q != p);
    free(q);
}

/* realloc's old block is not the next block of its size handed out. */
static void reuse_realloc(size_t n, size_t to)
{
    void *p = malloc(n);
    dirty(p, 'a', n);
    void *q = realloc(p, to);
    void *r = malloc(n);
    verdict(q == p || r != p);
    free(r);
    free(q);
}

static void reuse_realloc_grow(size_t n) { reuse_realloc(n, 4 * n); }
static void reuse_realloc_shrink(size_t n) { reuse_realloc(n, n / 4); }

/* ---- C++ ------------------------------------------------------------------------ */

static void sized_delete_mismatch(size_t n)
{
    void *p = _Znwm(n);
    dirty(p, 0, n);
    _ZdlPvm(hide(p), 2 * n);
    carry_on(n);
}

static void new_delete_array(size_t n)
{
    void *p = _Znwm(n);
    dirty(p, 0, n);
    _ZdaPv(hide(p));
    carry_on(n);
}

static void new_array_delete(size_t n)
{
    void *p = _Znam(n);
    dirty(p, 0, n);
    _ZdlPv(hide(p));
    carry_on(n);
}

/* ---- the table ---------------------------------------------------------------- */

struct kind {
    const char *name, *group, *what;
    void (*run)(size_t n);
    int sized; /* run at the three sizes; else once */
};

static const struct kind kinds[] = {
    {"double-free", "double free", "free twice in a row", df_plain, 1},
    {"double-free-delayed", "double free", "free, other allocations, free again", df_delayed, 1},
    {"double-free-interleaved", "double free", "free p, free q, free p", df_interleaved, 1},
    {"realloc-freed", "double free", "realloc of a freed block", realloc_freed, 1},
    {"free-invalid", "invalid free", "free of a page-aligned address near a block, never returned",
     free_invalid, 1},
    {"free-unaligned", "invalid free", "free of a block's address + 1", free_unaligned, 1},
    {"free-interior", "invalid free", "free of a pointer into the middle of a block", free_interior, 1},
    {"free-stack", "invalid free", "free of a stack buffer of that size", free_stack, 1},
    {"overflow-1", "overflow", "1 byte past the request, written, then free", over1, 1},
    {"overflow-32", "overflow", "32 bytes past the request, written, then free", over32, 1},
    {"overflow-1m", "overflow", "1 MiB past the request, written, then free", over1m, 1},
    {"overflow-1-memcpy", "overflow", "memcpy of the request + 1 byte into it", over1_cpy, 1},
    {"overflow-32-memcpy", "overflow", "memcpy of the request + 32 bytes into it", over32_cpy, 1},
    {"overflow-1m-memcpy", "overflow", "memcpy of the request + 1 MiB into it", over1m_cpy, 1},
    {"overflow-1-memset", "overflow", "memset of the request + 1 byte", over1_set, 1},
    {"overflow-32-memset", "overflow", "memset of the request + 32 bytes", over32_set, 1},
    {"overflow-1m-memset", "overflow", "memset of the request + 1 MiB", over1m_set, 1},
    {"underflow-1", "underflow", "1 byte before a block, written, then free", under1, 1},
    {"underflow-32", "underflow", "32 bytes before a block, written downwards, then free", under32, 1},
    {"underflow-1m", "underflow", "1 MiB before a block, written downwards, then free", under1m, 1},
    {"underflow-1-memcpy", "underflow", "memcpy of 1 byte to just before a block", under1_cpy, 1},
    {"underflow-32-memcpy", "underflow", "memcpy of 32 bytes to just before a block", under32_cpy, 1},
    {"underflow-1m-memcpy", "underflow", "memcpy of 1 MiB to just before a block", under1m_cpy, 1},
    {"underflow-1-memset", "underflow", "memset of 1 byte just before a block", under1_set, 1},
    {"underflow-32-memset", "underflow", "memset of 32 bytes just before a block", under32_set, 1},
    {"underflow-1m-memset", "underflow", "memset of 1 MiB just before a block", under1m_set, 1},
    {"uaf-write", "use after free", "write into a freed block, then allocate that size on", uaf_write, 1},
    {"uaf-write-reuse", "use after free", "write into a freed block after the next malloc of its size",
     uaf_write_reuse, 1},
    {"uaf-read", "use after free", "a read of a freed block sees none of its old bytes", uaf_read, 1},
    {"uaf-read-reuse", "use after free", "a read of a freed block sees nothing of its next owner's",
     uaf_read_reuse, 1},
    {"zero-after-free", "property", "freed contents never reach the block's next owner", zero_after_free,
     1},
    {"zero-on-malloc", "property", "malloc returns zeroed memory after blocks were freed dirty",
     zero_on_malloc, 1},
    {"reuse-immediate", "property", "a freed block is not the next one malloc returns", reuse_immediate,
     1},
    {"reuse-realloc-grow", "property", "realloc to 4x: the old block is not the next malloc's",
     reuse_realloc_grow, 1},
    {"reuse-realloc-shrink", "property", "realloc to 1/4: the old block is not the next malloc's",
     reuse_realloc_shrink, 1},
    {"sized-delete", "c++", "operator delete(p, size) with twice the size new was given",
     sized_delete_mismatch, 1},
    {"new-delete-array", "c++", "operator delete[] of a block from operator new", new_delete_array, 1},
    {"new-array-delete", "c++", "operator delete of a block from operator new[]", new_array_delete, 1},
    {"zero-size-write", "zero size", "write of one byte into malloc(0)", zero_write, 0},
    {"zero-size-read", "zero size", "read of one byte from malloc(0)", zero_read, 0},
};
#define KINDS (sizeof kinds / sizeof kinds[0])

static const struct {
    const char *suffix;
    size_t n;
} sizes[] = {{"small", SMALL}, {"medium", MEDIUM}, {"large", LARGE}};

/* Under sefer: its consistency check and its guard event count. */
static void sefer_report(void)
{
    int (*check)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sefer_check");
    int (*stats)(struct sefer_stats *, size_t) =
        (int (*)(struct sefer_stats *, size_t))dlsym(RTLD_DEFAULT, "sefer_stats_get");
    if (check == NULL || stats == NULL)
        return;
    struct sefer_stats s;
    memset(&s, 0, sizeof s);
    s.size = (uint32_t)sizeof s;
    if (stats(&s, sizeof s) != 0)
        return;
    uint64_t counted = s.guard_invalid_free + s.guard_interior_free + s.guard_double_free + s.guard_overflow +
                       s.guard_use_after_free;
    printf("check=%d counted=%" PRIu64 "\n", check(), counted);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t k = 0; k < KINDS; k++)
            for (size_t s = 0; s < (kinds[k].sized ? 3u : 1u); s++)
                if (kinds[k].sized)
                    printf("%s-%s\t%s\t%s\t%s\n", kinds[k].name, sizes[s].suffix, kinds[k].group,
                           sizes[s].suffix, kinds[k].what);
                else
                    printf("%s\t%s\t-\t%s\n", kinds[k].name, kinds[k].group, kinds[k].what);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: misuse --list | misuse NAME\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0); /* before the misuse: no buffer to lose */
    install_fault_handler();
    for (size_t k = 0; k < KINDS; k++)
        for (size_t s = 0; s < (kinds[k].sized ? 3u : 1u); s++) {
            char name[96];
            if (kinds[k].sized)
                snprintf(name, sizeof name, "%s-%s", kinds[k].name, sizes[s].suffix);
            else
                snprintf(name, sizeof name, "%s", kinds[k].name);
            if (strcmp(name, argv[1]) != 0)
                continue;
            kinds[k].run(sizes[s].n);
            printf("survived\n");
            sefer_report();
            return 0;
        }
    fprintf(stderr, "misuse: no probe %s\n", argv[1]);
    return 2;
}
