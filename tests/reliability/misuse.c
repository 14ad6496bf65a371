/* misuse.c - the misuse suite: one heap misuse per process, under any
 * allocator.
 *
 * Linked with libc (and libstdc++, for operator new and delete) only, so the
 * same binary runs on glibc's malloc or under LD_PRELOAD of another
 * allocator.  tests/reliability/test_security.c runs every probe at every
 * sefer guard level and on glibc, each in a fresh process, and classifies
 * how it ended (docs/security.md, "The misuse suite").
 *
 *   misuse --list    one line per probe: name, group, kind, size, what it does
 *   misuse NAME      runs that probe
 *
 * The suite is parametric: each misuse kind runs at every block size of
 * `sizes` (both sides of the small/medium boundary at 8 KiB and of the
 * medium/large one at 256 KiB, and sizes between), and each kind that
 * writes where it must not (overflows and underflows of 1 byte, 32 bytes
 * and 1 MiB, directly, through memcpy, memset and the string functions;
 * writes after free, after reuse and after realloc moved the block) runs
 * with every follow-up of `follows`: the blocks freed and the program going
 * on, the process ending at once, one more allocation of that size, or a
 * burst of unrelated allocation.  The other kinds: double frees (plain,
 * delayed, interleaved, after the block was handed out again, realloc of a
 * freed block); invalid frees (near a block, far from any, unaligned,
 * interior, of a stack buffer, of alloca memory); reads after free;
 * properties (freed memory zeroed before its next owner sees it, malloc
 * returning zeroed memory, no immediate reuse of a freed block or of
 * realloc's old block); C++ sized delete with a larger and a smaller size
 * and new/delete[] mismatches; and, once, reads and writes of malloc(0)
 * (live and freed), an executable heap and impossibly large requests.
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
 * kills the process with the signal; an abort by the allocator is SIGABRT,
 * and an abort after "survived" (in an exit-time check) counts too: the
 * process did not reach its normal end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sefer.h"

#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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


/* A burst of allocation unrelated to the probe's blocks: other sizes, small
 * to large, half of them kept to the end, as a program's other work. */
static void busy(void)
{
    static void *keep[256];
    for (unsigned i = 0; i < 4096; i++) {
        size_t s = i % 512 == 511 ? 300000 : 16 + (size_t)(i * 2654435761u % 4000u);
        unsigned char *p = malloc(s);
        memset(p, 'u', s < 64 ? s : 64);
        unsigned k = i % 256;
        free(keep[k]);
        keep[k] = i % 2 ? p : NULL;
        if (i % 2 == 0)
            free(p);
    }
    escape(keep);
}

/* What the program does after a write where it must not. */
enum follow { F_FREE, F_EXIT, F_AGAIN, F_BUSY, FOLLOWS };

static const struct {
    const char *name, *what;
} follows[FOLLOWS] = {
    [F_FREE] = {"free", "the blocks freed, then that size allocated on"},
    [F_EXIT] = {"exit", "then the process ends"},
    [F_AGAIN] = {"again", "then one more malloc of that size, and the end"},
    [F_BUSY] = {"busy", "then unrelated allocation, and the end"},
};

/* held: the blocks the program still holds (NULL for none); reuse: after
 * F_FREE, go on allocating n until a freed block comes back (a write
 * after free is then found when the block is handed out again, if ever). */
static void follow_up(enum follow f, size_t n, void *a, void *b, int reuse)
{
    if (f == F_FREE) {
        free(a);
        free(b);
        if (reuse)
            churn(n, 4 * MIB);
        else
            carry_on(n);
    } else if (f == F_AGAIN) {
        unsigned char *r = malloc(n);
        dirty(r, 'r', n < 4096 ? n : 4096);
    } else if (f == F_BUSY) {
        busy();
    }
    escape(a);
    escape(b);
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

/* The second free comes after the next malloc of that size, which may have
 * handed the block out again (then it frees the new owner's block: only an
 * allocator that did not reuse it at once can tell). */
static void df_reused(size_t n)
{
    char *p = malloc(n);
    free(p);
    char *q = malloc(n);
    dirty(q, 'q', n);
    free(hide(p));
    carry_on(n);
    escape(q);
}

static void realloc_freed(size_t n)
{
    char *p = malloc(n);
    free(p);
    escape(realloc(hide(p), 2 * n));
}

/* ---- invalid frees --------------------------------------------------------- */

static void free_invalid_near(size_t n)
{
    char *p = malloc(n);
    dirty(p, 0, n);
    /* a page-aligned address near the block that no malloc returned: eight
     * pages on, or (256 KiB and up) a page past the block's end */
    uintptr_t q = n >= 256 * 1024 ? ((uintptr_t)p + n + 8191) & ~(uintptr_t)4095
                                  : ((uintptr_t)p & ~(uintptr_t)4095) + 8 * 4096;
    free(hide((void *)q));
}

/* An address far from any block: 1 GiB past this one, 16-byte aligned. */
static void free_invalid_far(size_t n)
{
    char *p = malloc(n);
    dirty(p, 0, n);
    free(hide(p + ((size_t)1 << 30)));
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
    free(hide(p + (n >= 32 ? n / 2 & ~(size_t)15 : 8)));
}

/* 32 zero bytes before the address, so that every allocator reads the same
 * "header" there (glibc: size 0, refused), not stack garbage, which made
 * glibc's outcome change from build to build. */
static void free_stack(size_t n)
{
    char area[n + 32];
    memset(area, 0, sizeof area);
    escape(area);
    free(hide(area + 32));
}

static void free_alloca(size_t n)
{
    char *area = alloca(n + 32);
    memset(area, 0, n + 32);
    escape(area);
    free(hide(area + 32));
}

/* ---- writes where the program must not ------------------------------------ */

enum how { DIRECT, MEMCPY, MEMSET, STRCPY, STRCAT };

/* Writes `amount` bytes past the end of a block of n (a second block of n
 * allocated right after it: its neighbour in most allocators); then the
 * follow-up. */
static void overflow(size_t n, size_t amount, enum how how, enum follow f)
{
    unsigned char *p = malloc(n), *q = malloc(n);
    dirty(p, 'a', n);
    dirty(q, 'b', n);
    unsigned char *src = how == DIRECT || how == MEMSET ? NULL : outside(n + amount, 'x');
    unsigned char *h = hide(p);
    if (how == STRCPY) { /* a string of n + amount - 1 characters and its NUL */
        src[n + amount - 1] = '\0';
        ACCESS(strcpy((char *)h, (const char *)src));
    } else if (how == STRCAT) { /* onto a string that fills half the block */
        h[n / 2] = '\0';
        src[n - n / 2 + amount - 1] = '\0';
        ACCESS(strcat((char *)h, (const char *)src));
    } else if (how == DIRECT)
        ACCESS(for (size_t i = 0; i < amount; i++)((volatile unsigned char *)h)[n + i] = 'x');
    else if (how == MEMCPY)
        ACCESS(memcpy(h, src, n + amount));
    else
        ACCESS(memset(h, 'x', n + amount));
    follow_up(f, n, p, q, 0);
}

/* Writes `amount` bytes before the second of two blocks (into the first, in
 * most allocators, or its metadata), downwards when direct; then the
 * follow-up. */
static void underflow(size_t n, size_t amount, enum how how, enum follow f)
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
    follow_up(f, n, q, p, 0);
}

/* Writes into a freed block: the byte in its middle changed (XOR-ed: a
 * write of what a byte already holds would be no misuse to find, and what
 * a freed block holds may be an encoded link, different in every run). */
static void uaf_write(size_t n, enum follow f)
{
    unsigned char *p = malloc(n);
    dirty(p, 'a', n);
    free(p);
    ACCESS(((volatile unsigned char *)hide(p))[n / 2] ^= 'x');
    follow_up(f, n, NULL, NULL, 1);
}

/* The same after the next malloc of that size: where it returned the freed
 * block, the write lands in the new owner's block (nothing to see). */
static void uaf_write_reuse(size_t n, enum follow f)
{
    unsigned char *p = malloc(n);
    dirty(p, 'a', n);
    free(p);
    unsigned char *q = malloc(n);
    dirty(q, 'b', n);
    ACCESS(((volatile unsigned char *)hide(p))[n / 2] ^= 'x');
    follow_up(f, n, q, NULL, 1);
}

/* Writes into a block's old memory after realloc moved it (a block of that
 * size allocated after it, so that it cannot grow in place).  Where realloc
 * did not move it the write is legitimate and the probe has nothing to
 * find. */
static void realloc_old_write(size_t n, enum follow f)
{
    unsigned char *p = malloc(n), *next = malloc(n);
    dirty(p, 'a', n);
    dirty(next, 'b', n);
    unsigned char *q = realloc(p, 4 * n);
    ACCESS(((volatile unsigned char *)hide(p))[n / 2] ^= 'x');
    free(next);
    follow_up(f, n, q, NULL, 1);
}

struct write_kind {
    const char *name, *group, *what;
    void (*flow)(size_t, size_t, enum how, enum follow);
    size_t amount;
    enum how how;
    void (*other)(size_t, enum follow);
};

static const struct write_kind write_kinds[] = {
    {"overflow-1", "overflow", "1 byte past the request, written", overflow, 1, DIRECT, NULL},
    {"overflow-32", "overflow", "32 bytes past the request, written", overflow, 32, DIRECT, NULL},
    {"overflow-1m", "overflow", "1 MiB past the request, written", overflow, MIB, DIRECT, NULL},
    {"overflow-1-memcpy", "overflow", "memcpy of the request + 1 byte into it", overflow, 1, MEMCPY, NULL},
    {"overflow-32-memcpy", "overflow", "memcpy of the request + 32 bytes into it", overflow, 32, MEMCPY, NULL},
    {"overflow-1m-memcpy", "overflow", "memcpy of the request + 1 MiB into it", overflow, MIB, MEMCPY, NULL},
    {"overflow-1-memset", "overflow", "memset of the request + 1 byte", overflow, 1, MEMSET, NULL},
    {"overflow-32-memset", "overflow", "memset of the request + 32 bytes", overflow, 32, MEMSET, NULL},
    {"overflow-1m-memset", "overflow", "memset of the request + 1 MiB", overflow, MIB, MEMSET, NULL},
    {"overflow-1-strcpy", "overflow", "strcpy of a string as long as the block (its NUL past it)", overflow, 1,
     STRCPY, NULL},
    {"overflow-32-strcpy", "overflow", "strcpy of a string 32 bytes longer than the block", overflow, 32, STRCPY,
     NULL},
    {"overflow-1-strcat", "overflow", "strcat onto half the block, its NUL past it", overflow, 1, STRCAT, NULL},
    {"overflow-32-strcat", "overflow", "strcat onto half the block, 32 bytes past it", overflow, 32, STRCAT, NULL},
    {"underflow-1", "underflow", "1 byte before a block, written", underflow, 1, DIRECT, NULL},
    {"underflow-32", "underflow", "32 bytes before a block, written downwards", underflow, 32, DIRECT, NULL},
    {"underflow-1m", "underflow", "1 MiB before a block, written downwards", underflow, MIB, DIRECT, NULL},
    {"underflow-1-memcpy", "underflow", "memcpy of 1 byte to just before a block", underflow, 1, MEMCPY, NULL},
    {"underflow-32-memcpy", "underflow", "memcpy of 32 bytes to just before a block", underflow, 32, MEMCPY, NULL},
    {"underflow-1m-memcpy", "underflow", "memcpy of 1 MiB to just before a block", underflow, MIB, MEMCPY, NULL},
    {"underflow-1-memset", "underflow", "memset of 1 byte just before a block", underflow, 1, MEMSET, NULL},
    {"underflow-32-memset", "underflow", "memset of 32 bytes just before a block", underflow, 32, MEMSET, NULL},
    {"underflow-1m-memset", "underflow", "memset of 1 MiB just before a block", underflow, MIB, MEMSET, NULL},
    {"uaf-write", "use after free", "a write into a freed block", NULL, 0, DIRECT, uaf_write},
    {"uaf-write-reuse", "use after free", "a write into a freed block after the next malloc of its size", NULL,
     0, DIRECT, uaf_write_reuse},
    {"realloc-old-write", "use after free", "a write into a block's old memory after realloc moved it", NULL,
     0, DIRECT, realloc_old_write},
};
#define WRITE_KINDS (sizeof write_kinds / sizeof write_kinds[0])

/* ---- reads ------------------------------------------------------------------- */

/* Whether q[0..n) holds `len` bytes in a row of `c`. */
static int holds_run_of(const unsigned char *q, size_t n, unsigned char c, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++)
        if ((run = q[i] == c ? run + 1 : 0) >= len)
            return 1;
    return 0;
}

/* A read of a freed block must not see what it held (8 bytes from its
 * middle): held if they differ from the old contents, or the read faults.
 * Seeing means 4 of the old bytes in a row: a freed block's encoded link,
 * different in every run, holds any one byte value often enough (1 read
 * in 30 of an 8-byte block at level 2) to make a single byte a coin. */
static void uaf_read(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 'S', n);
    free(p);
    unsigned char got[8];
    ACCESS(memcpy(got, (unsigned char *)hide(p) + n / 2, sizeof got));
    verdict(!holds_run_of(got, sizeof got, 'S', 4));
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
    verdict(!holds_run_of(got, sizeof got, 'T', 4) && !holds_run_of(got, sizeof got, 'S', 4));
    free(q);
}

/* ---- properties -------------------------------------------------------------- */

/* Freed contents never reach the next owner: allocations of that size (each
 * freed again) until the freed block comes back; none may hold its old
 * bytes (8 in a row: blocks under 8 bytes are filled with none). */
static void zero_after_free(size_t n)
{
    /* the blocks taken are kept until p comes back: an allocator that
     * hands the block freed last out first would show it at once, but
     * one with a list in front of its pages (sefer's class lists) hands
     * out another block while the list fills, and a malloc-free pair
     * after each would cycle through the list's top and never reach p */
    static unsigned char *taken[100000];
    unsigned char *p = malloc(n);
    dirty(p, 'S', n);
    free(p);
    int held = 1;
    size_t limit = (64 * MIB) / n < 100000 ? (64 * MIB) / n : 100000, k = 0;
    while (k < limit && held) {
        unsigned char *q = malloc(n);
        taken[k++] = q;
        held = !holds_run_of(q, n, 'S', 8);
        if (q == p)
            break;
    }
    for (size_t i = 0; i < k; i++)
        free(taken[i]);
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

/* Heap memory is not executable: a `ret` written into a block and called
 * must fault. */
static void exec_heap(size_t n)
{
    unsigned char *p = malloc(n);
    dirty(p, 0xc3, n < 64 ? n : 64);
    void (*fn)(void);
    void *h = hide(p);
    memcpy(&fn, &h, sizeof fn);
    ACCESS(fn());
    verdict(0);
    free(p);
}

/* ---- C++ ------------------------------------------------------------------------ */

static void sized_delete(size_t n, size_t told)
{
    void *p = _Znwm(n);
    dirty(p, 0, n);
    _ZdlPvm(hide(p), told);
    carry_on(n);
}

/* A derived object deleted through a base without a virtual destructor
 * passes the base's size: a smaller one. */
static void sized_delete_larger(size_t n) { sized_delete(n, 2 * n); }
static void sized_delete_smaller(size_t n) { sized_delete(n, n / 2); }

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

/* ---- once: zero-size blocks, impossible requests ------------------------------- */

static void zero_write(void)
{
    unsigned char *p = malloc(0);
    ACCESS(((volatile unsigned char *)hide(p))[0] = 'x');
    free(p);
    carry_on(16);
}

static void zero_read(void)
{
    unsigned char *p = malloc(0);
    unsigned char v = 0;
    ACCESS(v = ((volatile unsigned char *)hide(p))[0]);
    escape(&v);
    free(p);
}

static void zero_write_freed(void)
{
    unsigned char *p = malloc(0);
    free(p);
    ACCESS(((volatile unsigned char *)hide(p))[0] = 'x');
    carry_on(16);
}

static void zero_read_freed(void)
{
    unsigned char *p = malloc(0);
    free(p);
    unsigned char v = 0;
    ACCESS(v = ((volatile unsigned char *)hide(p))[0]);
    escape(&v);
}

/* A request no process can have must fail cleanly: NULL and ENOMEM. */
static int refused(void *p)
{
    int e = errno;
    free(p);
    return p == NULL && e == ENOMEM;
}

static const size_t impossible[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX + 1,
                                    (size_t)1 << 47};
#define IMPOSSIBLE (sizeof impossible / sizeof impossible[0])

static void huge_malloc(void)
{
    int held = 1;
    for (size_t i = 0; i < IMPOSSIBLE; i++) {
        errno = 0;
        held &= refused(malloc(*(volatile const size_t *)&impossible[i]));
    }
    verdict(held);
}

static void huge_calloc(void)
{
    volatile size_t big = SIZE_MAX / 2 + 2, half = (SIZE_MAX >> 4) + 1;
    int held = 1;
    errno = 0;
    held &= refused(calloc(big, 2)); /* the product overflows */
    errno = 0;
    held &= refused(calloc(half, 16));
    errno = 0;
    held &= refused(calloc((size_t)1 << 24, (size_t)1 << 24)); /* 256 TiB */
    verdict(held);
}

static void huge_realloc(void)
{
    int held = 1;
    for (size_t i = 0; i < IMPOSSIBLE; i++) {
        char *p = malloc(64);
        dirty(p, 'a', 64);
        errno = 0;
        char *q = realloc(p, *(volatile const size_t *)&impossible[i]);
        held &= q == NULL && errno == ENOMEM && p[63] == 'a'; /* the old block is intact */
        free(q ? q : p);
    }
    verdict(held);
}

static void huge_aligned(void)
{
    int held = 1;
    for (size_t i = 0; i < IMPOSSIBLE; i++) {
        size_t n = *(volatile const size_t *)&impossible[i] & ~(size_t)4095;
        void *r = NULL;
        held &= posix_memalign(&r, 4096, n) == ENOMEM && r == NULL;
        errno = 0;
        held &= refused(aligned_alloc(64, n & ~(size_t)63));
        errno = 0;
        held &= refused(memalign(1 << 20, n));
    }
    verdict(held);
}

/* ---- the table ------------------------------------------------------------------- */

struct kind {
    const char *name, *group, *what;
    void (*run)(size_t n);
};

static const struct kind sized_kinds[] = {
    {"double-free", "double free", "free twice in a row", df_plain},
    {"double-free-delayed", "double free", "free, other allocations, free again", df_delayed},
    {"double-free-interleaved", "double free", "free p, free q, free p", df_interleaved},
    {"double-free-reused", "double free", "free, malloc of that size, free the first again", df_reused},
    {"realloc-freed", "double free", "realloc of a freed block", realloc_freed},
    {"free-invalid-near", "invalid free", "free of a page-aligned address near a block, never returned",
     free_invalid_near},
    {"free-invalid-far", "invalid free", "free of an address 1 GiB past a block", free_invalid_far},
    {"free-unaligned", "invalid free", "free of a block's address + 1", free_unaligned},
    {"free-interior", "invalid free", "free of a pointer into the middle of a block", free_interior},
    {"free-stack", "invalid free", "free of a stack buffer of that size", free_stack},
    {"free-alloca", "invalid free", "free of alloca memory of that size", free_alloca},
    {"uaf-read", "use after free", "a read of a freed block sees none of its old bytes", uaf_read},
    {"uaf-read-reuse", "use after free", "a read of a freed block sees nothing of its next owner's",
     uaf_read_reuse},
    {"zero-after-free", "property", "freed contents never reach the block's next owner", zero_after_free},
    {"zero-on-malloc", "property", "malloc returns zeroed memory after blocks were freed dirty", zero_on_malloc},
    {"reuse-immediate", "property", "a freed block is not the next one malloc returns", reuse_immediate},
    {"reuse-realloc-grow", "property", "realloc to 4x: the old block is not the next malloc's",
     reuse_realloc_grow},
    {"reuse-realloc-shrink", "property", "realloc to 1/4: the old block is not the next malloc's",
     reuse_realloc_shrink},
    {"exec-heap", "property", "a block is not executable", exec_heap},
    {"sized-delete-larger", "c++", "operator delete(p, size) with twice the size new was given",
     sized_delete_larger},
    {"sized-delete-smaller", "c++", "operator delete(p, size) with half the size new was given",
     sized_delete_smaller},
    {"new-delete-array", "c++", "operator delete[] of a block from operator new", new_delete_array},
    {"new-array-delete", "c++", "operator delete of a block from operator new[]", new_array_delete},
};
#define SIZED_KINDS (sizeof sized_kinds / sizeof sized_kinds[0])

static const struct {
    const char *name, *group, *what;
    void (*run)(void);
} once_kinds[] = {
    {"zero-size-write", "zero size", "a write of one byte into malloc(0)", zero_write},
    {"zero-size-read", "zero size", "a read of one byte from malloc(0)", zero_read},
    {"zero-size-write-freed", "zero size", "a write of one byte into a freed malloc(0)", zero_write_freed},
    {"zero-size-read-freed", "zero size", "a read of one byte from a freed malloc(0)", zero_read_freed},
    {"huge-malloc", "property", "malloc of an impossible size: NULL and ENOMEM", huge_malloc},
    {"huge-calloc", "property", "calloc whose product overflows or is impossible: NULL and ENOMEM", huge_calloc},
    {"huge-realloc", "property", "realloc to an impossible size: NULL, ENOMEM, the block intact", huge_realloc},
    {"huge-aligned", "property", "posix_memalign, aligned_alloc, memalign of impossible sizes", huge_aligned},
};
#define ONCE_KINDS (sizeof once_kinds / sizeof once_kinds[0])

/* Both sides of the small/medium boundary (8 KiB) and of the medium/large
 * one (256 KiB), with sizes between and beyond. */
static const struct {
    const char *suffix;
    size_t n;
} sizes[] = {
    {"8", 8},         {"24", 24},         {"1k", 1024},       {"4k", 4096},        {"8k", 8192},
    {"8k+8", 8200},   {"16k", 16384},     {"64k", 65536},     {"256k", 262144},    {"256k+8", 262152},
    {"1m", 1 << 20},
};
#define SIZES (sizeof sizes / sizeof sizes[0])

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

/* Calls visit(name, group, row, size, what, run) for every probe; stops at
 * the first that returns non-zero.  `row` names the kind and follow-up
 * (the size left out), the unit docs/security.md counts by. */
struct probe_ref {
    const char *group, *size;
    char name[96], row[80], what[200];
    size_t n;
    int write_kind, follow, sized_kind, once_kind;
};

static int each_probe(int (*visit)(const struct probe_ref *, const char *), const char *arg)
{
    struct probe_ref r;
    for (size_t k = 0; k < WRITE_KINDS; k++)
        for (int f = 0; f < FOLLOWS; f++)
            for (size_t s = 0; s < SIZES; s++) {
                memset(&r, 0, sizeof r);
                r.group = write_kinds[k].group;
                r.size = sizes[s].suffix;
                r.n = sizes[s].n;
                r.write_kind = (int)k;
                r.follow = f;
                r.sized_kind = r.once_kind = -1;
                snprintf(r.row, sizeof r.row, "%s-%s", write_kinds[k].name, follows[f].name);
                snprintf(r.name, sizeof r.name, "%s-%s", r.row, sizes[s].suffix);
                snprintf(r.what, sizeof r.what, "%s, %s", write_kinds[k].what, follows[f].what);
                if (visit(&r, arg))
                    return 1;
            }
    for (size_t k = 0; k < SIZED_KINDS; k++)
        for (size_t s = 0; s < SIZES; s++) {
            memset(&r, 0, sizeof r);
            r.group = sized_kinds[k].group;
            r.size = sizes[s].suffix;
            r.n = sizes[s].n;
            r.write_kind = r.once_kind = -1;
            r.sized_kind = (int)k;
            snprintf(r.row, sizeof r.row, "%s", sized_kinds[k].name);
            snprintf(r.name, sizeof r.name, "%s-%s", r.row, sizes[s].suffix);
            snprintf(r.what, sizeof r.what, "%s", sized_kinds[k].what);
            if (visit(&r, arg))
                return 1;
        }
    for (size_t k = 0; k < ONCE_KINDS; k++) {
        memset(&r, 0, sizeof r);
        r.group = once_kinds[k].group;
        r.size = "-";
        r.write_kind = r.sized_kind = -1;
        r.once_kind = (int)k;
        snprintf(r.row, sizeof r.row, "%s", once_kinds[k].name);
        snprintf(r.name, sizeof r.name, "%s", once_kinds[k].name);
        snprintf(r.what, sizeof r.what, "%s", once_kinds[k].what);
        if (visit(&r, arg))
            return 1;
    }
    return 0;
}

static int list_one(const struct probe_ref *r, const char *arg)
{
    (void)arg;
    printf("%s\t%s\t%s\t%s\t%s\n", r->name, r->group, r->row, r->size, r->what);
    return 0;
}

static int run_one(const struct probe_ref *r, const char *name)
{
    if (strcmp(r->name, name) != 0)
        return 0;
    if (r->write_kind >= 0) {
        const struct write_kind *w = &write_kinds[r->write_kind];
        if (w->flow)
            w->flow(r->n, w->amount, w->how, (enum follow)r->follow);
        else
            w->other(r->n, (enum follow)r->follow);
    } else if (r->sized_kind >= 0)
        sized_kinds[r->sized_kind].run(r->n);
    else
        once_kinds[r->once_kind].run();
    printf("survived\n");
    sefer_report();
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0)
        return each_probe(list_one, NULL);
    if (argc != 2) {
        fprintf(stderr, "usage: misuse --list | misuse NAME\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0); /* before the misuse: no buffer to lose */
    install_fault_handler();
    if (each_probe(run_one, argv[1]))
        return 0;
    fprintf(stderr, "misuse: no probe %s\n", argv[1]);
    return 2;
}
