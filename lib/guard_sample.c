/* guard_sample.c - the sampled guard: one allocation in about
 * guard.sample_bytes bytes placed against an inaccessible page, at any
 * guard level (GWP-ASan's idea, as TCMalloc, Android and Chrome use it).
 *
 * A pool of SLOTS one-page slots is reserved at the first sample, each
 * page between two inaccessible ones:
 *
 *     [guard][slot 0][guard][slot 1][guard] ... [slot SLOTS-1][guard]
 *
 * A sampled block of n bytes (n <= one page) ends where its page ends,
 * rounded to malloc's 16-byte alignment, so a write past its end faults at
 * once, beyond the alignment's few bytes; those and the bytes before the
 * block are filled with a pattern checked on free (and at exit).  A freed
 * slot is made inaccessible again and is reused only when no slot was
 * never used, the one freed longest ago first: a read or write after free
 * faults for as long as possible.  Pages are made inaccessible with the
 * kernel's guard markers where it has them (Linux 6.13: no change to the
 * mapping, and the page's memory is given back), else with mprotect.  The fault handler (SIGSEGV, SIGBUS; a fault elsewhere goes
 * to the handler that was there before) names the slot's block, the stacks
 * that allocated and freed it (the heap profile's unwinder, profile_stack.c)
 * and the access, then stops the process as a guard detection does
 * (guard_report.c).  A double free or an invalid free of a slot is reported
 * with the same stacks.
 *
 * Which allocations: at levels 0-2 the bytes each heap allocates are
 * counted down to the nearer of the heap profile's next point and the
 * guard's, on the profile's countdown (profile.c, "one countdown, two
 * points"; the entry's malloc takes the counted path while the knob is
 * not 0: entry.c), the guard's drawn at random with mean
 * guard.sample_bytes (uniform in [1, 2R]); the allocation that reaches it
 * is sampled (sf_gsample_take) if it fits a page, a slot is free and
 * guard.sample_max_rate allows one now, where its path knows the request
 * (the counted pops, level 2's); a class's slow path passes the point on to
 * the next allocation, once.  At level 3, whose allocations meet that
 * countdown only on class paths, and for threads still on the shared heap
 * and allocations in a phase (served by class paths too), each thread
 * counts its requests' bytes down itself (entry.c, sf_gsample_thread_tick;
 * sf_gsample_thread_due below).  (An aligned request sampled is one for `align` bytes,
 * at most a page, so the block at the page's end is aligned.)  The pool is 2 * SLOTS + 1 pages of address space; at most
 * SLOTS pages (256 KiB) are ever resident, and the slots' records (stacks
 * included) are 17 KiB of .bss. */
#include "fastpath.h"
#include "profile.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS 64
#define SLOT_PAGE 4096
#define POOL_BYTES ((size_t)(2 * SLOTS + 1) * SLOT_PAGE)
#define STACK_MAX 16
#define FILL 0xa5

enum { SLOT_EMPTY, SLOT_LIVE, SLOT_FREED, SLOT_FILLING /* taken, being set up: not yet handed out */ };

struct slot {
    uint8_t state;
    uint32_t size;           /* the request */
    uintptr_t addr;          /* the block */
    uint64_t freed_seq;      /* when it was freed: the oldest is reused first */
    int alloc_tid, free_tid; /* threads */
    unsigned alloc_depth, free_depth;
    uintptr_t alloc_stack[STACK_MAX], free_stack[STACK_MAX];
};

bool sf_gsample_on;
static uint64_t sample_rate;
static uint8_t *pool;          /* NULL until the first sample */
static _Atomic int pool_state; /* 0 none, 1 being made, 2 ready, 3 failed */
static struct slot slots[SLOTS];
static uint64_t free_seq;
static uint64_t sampled, sampled_live; /* sefer_stats (written under pool_lock) */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_segv, old_bus;
static _Atomic uint64_t next_sample_us; /* guard.sample_max_rate: none before this */
static __thread bool drawn __attribute__((tls_model("initial-exec")));
static __thread bool busy __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

void sf_gsample_init(void) {
    sample_rate = sf_knob(SF_KNOB_GUARD_SAMPLE_BYTES);
    sf_gsample_on = sample_rate != 0 && !sf_tracked; /* (under memcheck, memcheck does this) */
}

static uint8_t *slot_page(unsigned i) { return pool + (size_t)(2 * i + 1) * SLOT_PAGE; }

/* The calling thread's id, for the report: its heap knows it (a system
 * call per sample and per free cost as much as the stack). */
static int my_tid(void) {
    sf_heap_t *heap = sf_tls_heap;
    int tid = heap->kind == SF_HEAP_REAL ? atomic_load_explicit(&heap->tid, memory_order_relaxed) : 0;
    return tid != 0 ? tid : (int)syscall(SYS_gettid);
}

bool sf_gsample_holds(const void *p) {
    uint8_t *base = __atomic_load_n(&pool, __ATOMIC_ACQUIRE);
    return base != NULL && (const uint8_t *)p >= base && (const uint8_t *)p < base + POOL_BYTES;
}

/* ---- reports ------------------------------------------------------------------ */

static void add_frames(sf_str_t *s, const uintptr_t *f, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        sf_str_add(s, "    #");
        sf_str_addu(s, i);
        sf_str_add(s, " ");
        sf_str_addx(s, f[i]);
        Dl_info info;
        if (dladdr((void *)f[i], &info) != 0 && info.dli_fname != NULL) {
            const char *name = strrchr(info.dli_fname, '/');
            sf_str_add(s, " ");
            sf_str_add(s, name != NULL ? name + 1 : info.dli_fname);
            sf_str_add(s, "+");
            sf_str_addx(s, f[i] - (uintptr_t)info.dli_fbase);
            if (info.dli_sname != NULL) {
                sf_str_add(s, " ");
                sf_str_add_clean(s, info.dli_sname, strlen(info.dli_sname), 80);
            }
        }
        sf_str_add(s, "\n");
    }
}

/* What the sampled guard saw, with the block's stacks, on stderr. */
static void describe(const char *what, uintptr_t at, const struct slot *sl) {
    /* static, not on the stack: the fault handler may run on a small
     * alternate signal stack.  One report at a time; another thread's
     * meanwhile says only its first line. */
    static char msg[6144];
    static _Atomic bool in_use;
    if (atomic_exchange(&in_use, true)) {
        sf_write_stderr("sefer: sampled guard: another detection (see above)\n");
        return;
    }
    sf_str_t s;
    sf_str_init(&s, msg, sizeof msg - 1);
    sf_str_add(&s, "sefer: sampled guard: ");
    sf_str_add(&s, what);
    sf_str_add(&s, " at ");
    sf_str_addx(&s, at);
    if (sl != NULL && (sl->state == SLOT_LIVE || sl->state == SLOT_FREED)) {
        sf_str_add(&s, ", block of ");
        sf_str_addu(&s, sl->size);
        sf_str_add(&s, " bytes at ");
        sf_str_addx(&s, sl->addr);
        if (at >= sl->addr + sl->size) {
            sf_str_add(&s, " (");
            sf_str_addu(&s, at - sl->addr - sl->size);
            sf_str_add(&s, " bytes past its end)");
        } else if (at < sl->addr) {
            sf_str_add(&s, " (");
            sf_str_addu(&s, sl->addr - at);
            sf_str_add(&s, " bytes before it)");
        }
        sf_str_add(&s, "\n  allocated by thread ");
        sf_str_addu(&s, (uint64_t)sl->alloc_tid);
        sf_str_add(&s, " at:\n");
        add_frames(&s, sl->alloc_stack, sl->alloc_depth);
        if (sl->state == SLOT_FREED) {
            sf_str_add(&s, "  freed by thread ");
            sf_str_addu(&s, (uint64_t)sl->free_tid);
            sf_str_add(&s, " at:\n");
            add_frames(&s, sl->free_stack, sl->free_depth);
        }
    } else {
        sf_str_add(&s, "\n");
    }
    msg[s.len] = '\0';
    sf_write_stderr(msg);
    atomic_store(&in_use, false);
}

/* ---- the fault handler ------------------------------------------------------ */

/* The slot an address in the pool concerns: its own page, or for a guard
 * page the nearer of the two slots beside it (an overflow of the one
 * before, whose block ends at the guard, or an underflow of the one
 * after). */
static int slot_near(uintptr_t a) {
    size_t page = (a - (uintptr_t)pool) / SLOT_PAGE;
    if (page % 2 == 1) return (int)(page / 2);
    size_t off = (a - (uintptr_t)pool) % SLOT_PAGE;
    int before = (int)(page / 2) - 1, after = (int)(page / 2);
    if (before < 0) return after;
    if (after >= SLOTS) return before;
    return off < SLOT_PAGE / 2 ? before : after;
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    if (sf_gsample_holds((void *)a)) {
        int i = slot_near(a);
        const struct slot *sl = &slots[i];
        bool freed = sl->state == SLOT_FREED && a >= (uintptr_t)slot_page((unsigned)i) &&
                     a < (uintptr_t)slot_page((unsigned)i) + SLOT_PAGE;
        enum sf_guard_kind kind = freed ? SF_GUARD_USE_AFTER_FREE : SF_GUARD_OVERFLOW;
        describe(freed ? "access to a freed block" : "access past a block's bounds", a, sl);
        sf_guard_report(kind, (void *)a); /* (aborts, unless guard.on_error = report) */
        /* report mode cannot refuse an access: the fault happens again, and
         * goes to whatever handled it before the pool was made */
        sigaction(sig, sig == SIGBUS ? &old_bus : &old_segv, NULL);
        return;
    }
    const struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction != NULL) {
        old->sa_sigaction(sig, si, uc);
    } else if (old->sa_handler == SIG_DFL || old->sa_handler == SIG_IGN) {
        sigaction(sig, old, NULL); /* the fault happens again, as if we were never here */
    } else {
        old->sa_handler(sig);
    }
}

/* ---- the pool --------------------------------------------------------------- */

/* Linux 6.13's guard regions: madvise puts a marker in a page's table
 * entry that makes any access fault, without changing the mapping.  An
 * mprotect per sample splits and merges the pool's mapping instead, which
 * took most of the 8.6 us a sampled malloc and free cost here. */
#define SF_MADV_GUARD_INSTALL 102
#define SF_MADV_GUARD_REMOVE 103
static bool light_guards; /* the pool is one read-write mapping with markers */

/* Makes a slot's page accessible (open) or not; a closed page's contents
 * are gone with the markers (a page reopened reads as zero). */
static bool set_access(uint8_t *page, bool open) {
    if (light_guards) return madvise(page, SLOT_PAGE, open ? SF_MADV_GUARD_REMOVE : SF_MADV_GUARD_INSTALL) == 0;
    return mprotect(page, SLOT_PAGE, open ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

/* The pool: every page faulting, by markers where the kernel has them, by
 * PROT_NONE where it does not. */
static uint8_t *pool_map(void) {
    void *m = mmap(NULL, POOL_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
        if (madvise(m, POOL_BYTES, SF_MADV_GUARD_INSTALL) == 0) {
            light_guards = true;
            return m;
        }
        munmap(m, POOL_BYTES);
    }
    return sf_os_reserve_none(POOL_BYTES);
}

static bool pool_ready(void) {
    int st = atomic_load_explicit(&pool_state, memory_order_acquire);
    if (st == 2) return true;
    if (st == 3) return false;
    int none = 0;
    if (st == 0 && atomic_compare_exchange_strong(&pool_state, &none, 1)) {
        uint8_t *p = pool_map();
        if (p != NULL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = on_fault;
            sa.sa_flags = SA_SIGINFO | SA_ONSTACK; /* (a fault inside it: killed by the kernel) */
            sigemptyset(&sa.sa_mask);
            sigaction(SIGSEGV, &sa, &old_segv);
            sigaction(SIGBUS, &sa, &old_bus);
            __atomic_store_n(&pool, p, __ATOMIC_RELEASE);
        }
        atomic_store_explicit(&pool_state, p != NULL ? 2 : 3, memory_order_release);
        return p != NULL;
    }
    return false; /* another thread is making it: this one is not sampled */
}

static void fill(uint8_t *from, uint8_t *to) {
    if (to > from) memset(from, FILL, (size_t)(to - from));
}

static bool filled(const uint8_t *from, const uint8_t *to) {
    uint64_t word;
    memset(&word, FILL, sizeof word);
    for (; from < to && ((uintptr_t)from & 7); from++)
        if (*from != FILL) return false;
    for (; from + 8 <= to; from += 8) {
        uint64_t w;
        memcpy(&w, from, sizeof w);
        if (w != word) return false;
    }
    for (; from < to; from++)
        if (*from != FILL) return false;
    return true;
}

static size_t placed(size_t n) { return ((n == 0 ? 1 : n) + 15) & ~(size_t)15; }

/* Whether a live slot's pattern around its block is intact. */
static bool slot_intact(unsigned i) {
    const struct slot *sl = &slots[i];
    uint8_t *page = slot_page(i), *p = (uint8_t *)sl->addr;
    return filled(page, p) && filled(p + sl->size, page + SLOT_PAGE);
}

static void *pool_alloc(size_t n) {
    if (!pool_ready()) return NULL;
    pthread_mutex_lock(&pool_lock);
    int pick = -1;
    for (int i = 0; i < SLOTS && pick < 0; i++) /* a slot never used */
        if (slots[i].state == SLOT_EMPTY) pick = i;
    if (pick < 0) /* else the one freed longest ago */
        for (int i = 0; i < SLOTS; i++)
            if (slots[i].state == SLOT_FREED && (pick < 0 || slots[i].freed_seq < slots[pick].freed_seq)) pick = i;
    if (pick < 0) { /* every slot holds a live block */
        pthread_mutex_unlock(&pool_lock);
        return NULL;
    }
    struct slot *sl = &slots[pick];
    uint8_t *page = slot_page((unsigned)pick);
    if (!set_access(page, true)) {
        pthread_mutex_unlock(&pool_lock);
        return NULL;
    }
    uint8_t *p = page + SLOT_PAGE - placed(n);
    sl->state = SLOT_FILLING; /* taken; the exit check and reports skip it until it is live */
    pthread_mutex_unlock(&pool_lock);
    fill(page, p);
    fill(p + n, page + SLOT_PAGE);
    uintptr_t stack[STACK_MAX];
    unsigned depth = sf_prof_capture(stack, STACK_MAX);
    pthread_mutex_lock(&pool_lock);
    sl->size = (uint32_t)n;
    sl->addr = (uintptr_t)p;
    sl->alloc_tid = my_tid();
    memcpy(sl->alloc_stack, stack, sizeof stack);
    sl->alloc_depth = depth;
    sl->free_depth = 0;
    sl->state = SLOT_LIVE;
    __atomic_store_n(&sampled, sampled + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&sampled_live, sampled_live + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool_lock);
    return p;
}

/* guard.sample_max_rate: a sample costs some microseconds (two page-table
 * changes, two stack captures, a page's fill and check), so a program that
 * allocates gigabytes a second would pay in proportion; past the cap a
 * sample falls to the next draw instead.  One sample per 1/cap s,
 * process-wide, on sf_now_ms's coarse clock (a few ms of resolution: never
 * more than the cap, fewer above a few hundred). */
static bool rate_allows(void) {
    uint64_t cap = sf_knob(SF_KNOB_GUARD_SAMPLE_MAX_RATE);
    if (cap == 0) return true;
    /* in microseconds, so that 1/cap s is not truncated to whole ms */
    uint64_t now = sf_now_ms() * 1000u, next = atomic_load_explicit(&next_sample_us, memory_order_relaxed);
    return now >= next && atomic_compare_exchange_strong_explicit(&next_sample_us, &next, now + 1000000u / cap,
                                                                  memory_order_relaxed, memory_order_relaxed);
}

int64_t sf_gsample_draw(void) {
    if (rng == 0) rng = ((uintptr_t)&rng ^ (uint64_t)sf_now_ms() * 0x9e3779b97f4a7c15ull) | 1;
    rng ^= rng >> 12; /* xorshift64 */
    rng ^= rng << 25;
    rng ^= rng >> 27;
    uint64_t draw = 1 + (rng * 0x2545f4914f6cdd1dull) % (2 * sample_rate);
    return draw > INT64_MAX ? INT64_MAX : (int64_t)draw;
}

/* The calling thread's allocations are not sampled while on (sefer's own
 * work that allocates through the program's malloc: loading libgcc's
 * unwinder, profile_stack.c); the old state back when off. */
bool sf_gsample_quiet(bool on) {
    bool was = busy;
    busy = on;
    return was;
}

void *sf_gsample_take(size_t n) {
    if (busy || n > SLOT_PAGE || !rate_allows()) return NULL;
    busy = true; /* (the unwinder may allocate) */
    void *p = pool_alloc(n);
    busy = false;
    return p;
}

void *sf_gsample_thread_due(size_t n, int64_t *left) {
    *left = sf_gsample_draw();
    bool first = !drawn; /* (a thread's first count only starts it) */
    drawn = true;
    return first ? NULL : sf_gsample_take(n);
}

/* ---- free, realloc, usable size ---------------------------------------------------- */

static int slot_of_block(const void *p) {
    size_t page = ((uintptr_t)p - (uintptr_t)pool) / SLOT_PAGE;
    return page % 2 == 1 ? (int)(page / 2) : -1;
}

bool sf_gsample_free(void *p) {
    if (!sf_gsample_holds(p)) return false;
    int i = slot_of_block(p);
    struct slot *sl = i >= 0 ? &slots[i] : NULL;
    uintptr_t stack[STACK_MAX];
    unsigned depth = 0;
    if (!busy) {
        busy = true;
        depth = sf_prof_capture(stack, STACK_MAX);
        busy = false;
    }
    pthread_mutex_lock(&pool_lock);
    if (sl == NULL || sl->state != SLOT_LIVE || sl->addr != (uintptr_t)p) {
        bool twice = sl != NULL && sl->state == SLOT_FREED && sl->addr == (uintptr_t)p;
        pthread_mutex_unlock(&pool_lock);
        describe(twice ? "double free" : "free of a pointer that is no sampled block", (uintptr_t)p, sl);
        sf_guard_report(twice ? SF_GUARD_DOUBLE : SF_GUARD_INTERIOR, p);
        return true; /* refused */
    }
    if (!slot_intact((unsigned)i)) {
        pthread_mutex_unlock(&pool_lock);
        describe("write past a block's bounds (found on free)", (uintptr_t)p, sl);
        sf_guard_report(SF_GUARD_OVERFLOW, p);
        return true; /* refused: the slot stays as it is */
    }
    sl->state = SLOT_FREED;
    sl->freed_seq = ++free_seq;
    __atomic_store_n(&sampled_live, sampled_live - 1, __ATOMIC_RELAXED);
    sl->free_tid = my_tid();
    memcpy(sl->free_stack, stack, sizeof stack);
    sl->free_depth = depth;
    set_access(slot_page((unsigned)i), false);
    pthread_mutex_unlock(&pool_lock);
    return true;
}

/* The slot of the live sampled block that starts at p, or NULL (freed,
 * inside one, a guard page, no slot). */
static const struct slot *live_slot(const void *p) {
    int i = slot_of_block(p);
    if (i < 0) return NULL;
    const struct slot *sl = &slots[i];
    return sl->state == SLOT_LIVE && sl->addr == (uintptr_t)p ? sl : NULL;
}

size_t sf_gsample_usable(const void *p) {
    const struct slot *sl = live_slot(p);
    return sl != NULL ? sl->size : 0;
}

void *sf_gsample_realloc(void *p, size_t n) {
    const struct slot *sl = live_slot(p);
    /* not a live sampled block: free reports it, and realloc refuses it as
     * it does any bad pointer (docs/api.md), where it handed out a new
     * block as if p were one of 0 bytes (a live block's size may be 0:
     * sf_gsample_usable's answer cannot tell them apart) */
    if (sl == NULL) {
        sf_gsample_free(p);
        errno = EINVAL;
        return NULL;
    }
    size_t old = sl->size;
    void *q = sf_malloc(n);
    if (q == NULL) return NULL;
    memcpy(q, p, old < n ? old : n);
    sf_gsample_free(p);
    return q;
}

/* The first live sampled block whose filled bytes were written, or NULL
 * (guard_exit.c). */
const void *sf_gsample_damaged(void) {
    if (!sf_gsample_holds(pool)) return NULL;
    const void *bad = NULL;
    if (!sf_lock_bounded(&pool_lock)) return NULL; /* (at exit) */
    for (unsigned i = 0; i < SLOTS && bad == NULL; i++)
        if (slots[i].state == SLOT_LIVE && !slot_intact(i)) bad = (const void *)slots[i].addr;
    pthread_mutex_unlock(&pool_lock);
    if (bad != NULL) describe("write past a block's bounds (found at exit)", (uintptr_t)bad, &slots[slot_of_block(bad)]);
    return bad;
}

void sf_gsample_counts(uint64_t *samples, uint64_t *live) {
    *samples = __atomic_load_n(&sampled, __ATOMIC_RELAXED);
    *live = __atomic_load_n(&sampled_live, __ATOMIC_RELAXED);
}

void sf_gsample_fork_prepare(void) { pthread_mutex_lock(&pool_lock); }
void sf_gsample_fork_parent(void) { pthread_mutex_unlock(&pool_lock); }
