/* os.c - the only file that talks to the kernel about memory.
 *
 * Reservations are plain private anonymous mappings: Linux commits a page on
 * first touch, so "commit" costs nothing here and "decommit" is
 * madvise(MADV_DONTNEED), which drops the pages at once (RSS falls) and makes
 * them read back as zero.
 *
 * What callers may rely on, even when a system call fails:
 *
 *   map       NULL if the kernel refused (the caller fails with ENOMEM);
 *   decommit  the range reads back as zero afterwards.  The large cache and
 *             segment reuse skip clearing memory they know was decommitted,
 *             and calloc of a reused span skips its memset, so this is a
 *             promise, not a hint.  madvise can fail (EINVAL on pages locked
 *             by mlockall, for one): the range is then replaced by a fresh
 *             mapping, and if even that fails it is cleared by hand;
 *   unmap     the range is never used again.  If munmap fails the address
 *             space stays mapped (leaked, said once on stderr) but its pages
 *             are dropped, so RSS does not keep them;
 *   protect   making a guard page accessible again falls back to a fresh
 *             mapping, so a reused span never meets a stale guard page;
 *   discard-protect  (a quarantined large block) either happens whole or
 *             not at all.
 *
 * Fault injection (built with -DSEFER_FAULT_INJECTION: meson option
 * fault_injection, and always in the library variant tests/reliability links):
 * sefer_test_fail_os(ops, nth, count) makes the nth call from now of any of
 * the selected operations fail, and the count - 1 such calls after it; see
 * docs/reliability.md.  The same variant has a test clock (lib/clock.c,
 * sefer_test_clock_ms). */
#include "internal.h"

#include <sys/mman.h>

/* ---- fault injection ------------------------------------------------------ */

#ifdef SEFER_FAULT_INJECTION
static _Atomic unsigned fail_ops;
static _Atomic unsigned long fail_skip;    /* selected calls that still succeed first */
static _Atomic unsigned long fail_left;    /* failures still to inject after those */
static _Atomic unsigned long fail_done[4]; /* failures injected so far, per operation */

SEFER_EXPORT void sefer_test_fail_os(unsigned ops, unsigned long nth, unsigned long count) {
    atomic_store(&fail_ops, 0u); /* disarmed while the plan changes */
    atomic_store(&fail_skip, nth > 0 ? nth - 1 : 0);
    atomic_store(&fail_left, count);
    if (count > 0) atomic_store(&fail_ops, ops);
}

SEFER_EXPORT unsigned long sefer_test_os_failures(unsigned ops) {
    unsigned long n = 0;
    for (unsigned i = 0; i < 4; i++)
        if (ops & (1u << i)) n += atomic_load(&fail_done[i]);
    return n;
}

/* Whether this call of operation `op` is one the plan says must fail (with
 * errno set to err). */
static bool injected(unsigned op, int err) {
    if (!(atomic_load_explicit(&fail_ops, memory_order_relaxed) & op)) return false;
    unsigned long n = atomic_load(&fail_skip);
    while (n > 0)
        if (atomic_compare_exchange_weak(&fail_skip, &n, n - 1)) return false;
    n = atomic_load(&fail_left);
    while (n > 0)
        if (atomic_compare_exchange_weak(&fail_left, &n, n - 1)) {
            atomic_fetch_add(&fail_done[__builtin_ctz(op)], 1);
            errno = err;
            return true;
        }
    return false;
}
#else
#define injected(op, err) false
#endif

/* The four system calls, each a point where a fault can be injected. */
static void *os_mmap(void *hint, size_t size, int flags) {
    if (injected(SEFER_OS_MMAP, ENOMEM)) return MAP_FAILED;
    return mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
}

static int os_munmap(void *p, size_t size) {
    return injected(SEFER_OS_MUNMAP, ENOMEM) ? -1 : munmap(p, size);
}

static int os_madvise(void *p, size_t size, int advice) {
    return injected(SEFER_OS_MADVISE, EINVAL) ? -1 : madvise(p, size, advice);
}

static int os_mprotect(void *p, size_t size, int prot) {
    return injected(SEFER_OS_MPROTECT, ENOMEM) ? -1 : mprotect(p, size, prot);
}

/* ---- mapping ----------------------------------------------------------------- */

static void *map_raw(size_t size) {
    void *p = os_mmap(NULL, size, 0);
    if (p == MAP_FAILED) return NULL;
    sf_stat_add(&sf_gstats.os_maps, 1);
    return p;
}

/* Maps size bytes aligned to align (a power of two >= SF_OS_PAGE).  Tries an
 * exact mapping first (the kernel often places consecutive mappings
 * contiguously, so this is usually aligned when the previous one was);
 * otherwise over-maps and trims both ends. */
static void *map_aligned(size_t size, size_t align) {
    void *p = map_raw(size);
    if (p == NULL) return NULL;
    if (((uintptr_t)p & (align - 1)) == 0) return p;
    sf_os_unmap(p, size);
    if (size + align < size) return NULL;
    uint8_t *raw = map_raw(size + align);
    if (raw == NULL) return NULL;
    uint8_t *aligned = (uint8_t *)sf_align_up((uintptr_t)raw, align);
    size_t head = (size_t)(aligned - raw), tail = align - head;
    if (head) sf_os_unmap(raw, head);
    if (tail) sf_os_unmap(aligned + size, tail);
    return aligned;
}

/* Transparent huge pages (memory.thp) for a new segment or span.  A heap's
 * segment of 4 MiB holds pages of 64 KiB of many classes, a few of them in
 * use by a thread that allocates little; backed by 2 MiB huge pages (the
 * system's THP = always) each such thread would hold 2 MiB per huge page
 * it touched (jemalloc's users report 100 threads costing 181-283 MB with
 * THP always against 12-17 MB without).  So by default sefer asks for none
 * (MADV_NOHUGEPAGE, whatever the system says); `madvise` asks for them
 * (MADV_HUGEPAGE: a program with a large, dense heap gains TLB reach);
 * `system` leaves the choice to /sys/kernel/mm/transparent_hugepage.  The
 * advice is a hint: a kernel without THP refuses it, and nothing changes.
 * (Called directly, not through os_madvise: it is no decommit, and a
 * test's injected madvise failures count decommits.) */
static void advise_thp(void *p, size_t size) {
    uint64_t thp = sf_knob(SF_KNOB_MEMORY_THP);
    if (thp == SF_THP_SYSTEM) return;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    madvise(p, size, thp == SF_THP_MADVISE ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)p, (void)size;
#endif
}

/* A segment's or span's mapping: map_aligned, with memory.thp's advice. */
void *sf_os_map_aligned(size_t size, size_t align) {
    void *p = map_aligned(size, align);
    if (p != NULL) advise_thp(p, size);
    return p;
}

/* Which OS pages of [p, p + size) are resident: one byte per page into
 * vec, bit 0 set if resident; false if the kernel cannot say. */
bool sf_os_resident(const void *p, size_t size, unsigned char *vec) {
    return mincore((void *)p, size, vec) == 0;
}

void *sf_os_map_plain(size_t size) {
    return map_raw(sf_align_up(size, SF_OS_PAGE));
}

/* Address space no access is allowed to (guard level 3's malloc(0)). */
void *sf_os_reserve_none(size_t size) {
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Makes [p, p + size) read as zero by replacing it with a fresh mapping;
 * false if the kernel refused. */
static bool remap_fresh(void *p, size_t size) {
    return os_mmap(p, size, MAP_FIXED) == p;
}

static _Atomic bool unmap_failure_reported;

void sf_os_unmap(void *p, size_t size) {
    if (os_munmap(p, size) == 0) return;
    /* still mapped: at least give the pages back (never used again, so they
     * need not read as zero: guard pages in it are left alone) */
    if (!atomic_exchange(&unmap_failure_reported, true))
        sf_write_stderr("sefer: munmap failed: address space leaked, its pages dropped "
                        "(reported once)\n");
    sf_os_decommit_try(p, size);
}

/* Decommit without the last resort of clearing by hand (which would fault
 * on a guard page in the range): false if the range still holds its pages. */
bool sf_os_decommit_try(void *p, size_t size) {
    return size == 0 || os_madvise(p, size, MADV_DONTNEED) == 0 || remap_fresh(p, size);
}

/* (madvise itself, not os_madvise: a test's injected madvise failures
 * count decommits, and this is none: a refusal needs no fallback) */
bool sf_os_shed(void *p, size_t size) {
    return madvise(p, size, MADV_DONTNEED) == 0;
}

void sf_os_decommit(void *p, size_t size) {
    if (sf_os_decommit_try(p, size)) return;
    memset(p, 0, size); /* the promise "reads as zero" must hold */
}

/* Guard pages (guard level >= 2): no access, or back to read-write.  A
 * guard page that cannot be set up is simply missing; one that cannot be
 * made accessible again is replaced (its contents do not matter).  False:
 * neither worked (the range may still be inaccessible). */
bool sf_os_protect(void *p, size_t size, bool accessible) {
    if (os_mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0) return true;
    return !accessible || remap_fresh(p, size);
}

/* Makes [p, p + size) no-access; false if the kernel refused (its
 * mappings at vm.max_map_count, say): nothing changed. */
bool sf_os_no_access(void *p, size_t size) { return os_mprotect(p, size, PROT_NONE) == 0; }

/* A freed large block entering the quarantine (guard level >= 2): makes
 * [p, p + size) inaccessible and drops its pages in one call, a fresh
 * no-access mapping over it (so it also reads as zero once made accessible
 * again).  False if the kernel refused: nothing changed. */
bool sf_os_discard_protect(void *p, size_t size) {
    if (injected(SEFER_OS_MPROTECT, ENOMEM)) return false;
    return mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == p;
}
