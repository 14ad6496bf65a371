/* profile_stack.c - the call stack of a sampled allocation.
 *
 * Most of Debian is built without frame pointers (python3, perl, gcc,
 * sqlite3...), so a frame-pointer walk would stop, or wander, after the
 * first frame of such code.  The stack is read from the unwind tables
 * (.eh_frame, which x86-64 code always carries), by one of two walks
 * (profile.unwinder):
 *
 *   - "table" (the default): sefer's own walk (unwind.c), a rule per return
 *     address derived once from the tables and kept in a lock-free cache;
 *     where it cannot describe a frame (signal frames, CFA expressions, code
 *     in no loaded object) the whole stack is taken again by libgcc's walk,
 *     and counted (profile_unwind_fallbacks);
 *   - "libgcc": libgcc's unwinder, _Unwind_Backtrace, the one C++
 *     exceptions use, about 0.3 us a frame;
 *   - "check": both, compared frame by frame; a difference is counted
 *     (profile_unwind_disagreements) and reported on stderr, and libgcc's
 *     stack is kept.  For tests.
 *
 * libgcc's walk never calls malloc for code loaded by the dynamic linker:
 * it finds a frame's tables with glibc's _dl_find_object (glibc 2.35+,
 * lock-free, no dl_iterate_phdr and so no loader lock) and keeps no cache
 * of its own.  Code registered at run time (__register_frame, JITs) is the
 * exception: its first lookup sorts its tables with malloc.  Whatever the
 * unwinder allocates is never sampled (sf_prof_quiet), and the capture runs
 * with no lock of sefer's held, so such a malloc cannot wait for itself.
 * libgcc's one-time set-up (a pthread_once inside it) is done where it is
 * loaded, outside malloc, by a first walk (warm-up).
 *
 * libgcc_s is looked up, not linked (sf_prof_libgcc_load): a C program
 * does not load it by itself, and as a NEEDED of libsefer.so it cost every
 * process 120 KiB of resident pages for a walk that only the heap profile
 * and the sampled guard take, and only where the table walk gives up.  It
 * is loaded by the library constructor when the process starts with one
 * of them on (or profile.unwinder other than "table"), or by
 * sefer_config_set before it turns one on; a program that already has it
 * (C++: libstdc++ needs it) shares that copy.  Without it, a stack the table
 * walk gives up on has no frames.
 *
 * Frames in sefer's own code at the top of the stack are dropped, so
 * profile.depth counts the program's frames.  That code's range comes from
 * the constructor too (dl_iterate_phdr, outside malloc); before it is known
 * (the first allocations of a process) and in a program linked with
 * libsefer.a the frames are kept, and the introspection server drops them
 * when it names them.
 *
 * Each frame is stored as its return address minus one, so it points into
 * the call instruction (what symbolizers and pprof expect).  docs/design.md
 * ("Heap profiling") has the cost of one capture. */
#include "profile.h"

#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

static uintptr_t self_lo, self_hi;

/* Whether the unwinder can read sefer's own frames: it needs the object's
 * PT_GNU_EH_FRAME, which a program linked with -static lacks (gcc passes
 * --eh-frame-hdr only to dynamic links), and libgcc's unwinder aborts the
 * process when it cannot find the first frame's tables.  _dl_find_object
 * answers without a lock and without allocating.  1 yes, -1 no, 0 not
 * asked yet.  Without it a sample has no frames. */
static int unwind_state;

static bool can_unwind(void) {
    int s = __atomic_load_n(&unwind_state, __ATOMIC_RELAXED);
    if (s == 0) {
        struct dl_find_object dlfo;
        s = _dl_find_object((void *)(uintptr_t)sf_prof_capture, &dlfo) == 0 && dlfo.dlfo_eh_frame != NULL ? 1 : -1;
        __atomic_store_n(&unwind_state, s, __ATOMIC_RELAXED);
    }
    return s > 0;
}

void sf_prof_self_range(uintptr_t *lo, uintptr_t *hi) {
    *lo = __atomic_load_n(&self_lo, __ATOMIC_ACQUIRE);
    *hi = __atomic_load_n(&self_hi, __ATOMIC_ACQUIRE);
}

struct walk {
    uintptr_t *out;
    unsigned n, max;
    bool top; /* still in sefer's frames */
    uintptr_t lo, hi;
};

/* libgcc's two entry points, once loaded (set before gcc_backtrace is
 * published: whoever reads that pointer reads gcc_getip after it) */
typedef _Unwind_Reason_Code backtrace_fn(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr getip_fn(struct _Unwind_Context *);
static backtrace_fn *gcc_backtrace;
static getip_fn *gcc_getip;

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg) {
    struct walk *w = arg;
    uintptr_t ip = gcc_getip(ctx);
    if (ip == 0) return _URC_END_OF_STACK;
    if (w->top && ip >= w->lo && ip < w->hi) return _URC_NO_REASON;
    w->top = false;
    w->out[w->n++] = ip - 1;
    return w->n < w->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* The frames libgcc's walk found, or -1 if it is not loaded (not wanted
 * when the process started, or not yet: allocations made before the
 * library constructor ran, by other libraries' constructors) */
static SF_NOINLINE int capture_libgcc(uintptr_t *out, unsigned max, uintptr_t lo, uintptr_t hi) {
    backtrace_fn *backtrace = __atomic_load_n(&gcc_backtrace, __ATOMIC_ACQUIRE);
    if (backtrace == NULL) return -1;
    struct walk w = {out, 0, max, true, lo, hi};
    backtrace(walk_frame, &w);
    return (int)w.n;
}

/* Finds libgcc's unwinder in the process, or loads libgcc_s.so.1, and
 * sets it up.  Calls the dynamic loader, which may call malloc: only from
 * outside malloc (the constructor, sefer_config_set), and only when stacks
 * are wanted (two dlsym walks of every loaded object's symbols are no
 * start-up cost for a process that takes no stack).  Two threads at once
 * both look it up and store the same pointers; the handle is never
 * closed.  Whether it is there now. */
bool sf_prof_libgcc_load(void) {
    if (__atomic_load_n(&gcc_backtrace, __ATOMIC_ACQUIRE) != NULL) return true;
    /* (what the loader allocates is sefer's, not the program's: neither
     * profiled nor given a sampled guard's slot, where it would stay) */
    sf_prof_quiet(true);
    bool guard_was = sf_gsample_quiet(true);
    void *bt = dlsym(RTLD_DEFAULT, "_Unwind_Backtrace"), *ip = dlsym(RTLD_DEFAULT, "_Unwind_GetIP");
    if (bt == NULL || ip == NULL) {
        void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) {
            bt = dlsym(h, "_Unwind_Backtrace");
            ip = dlsym(h, "_Unwind_GetIP");
        }
    }
    sf_gsample_quiet(guard_was);
    sf_prof_quiet(false);
    if (bt == NULL || ip == NULL) return false;
    __atomic_store_n(&gcc_getip, (getip_fn *)ip, __ATOMIC_RELAXED);
    __atomic_store_n(&gcc_backtrace, (backtrace_fn *)bt, __ATOMIC_RELEASE);
    uintptr_t warm[4];
    if (can_unwind()) (void)capture_libgcc(warm, 4, 0, 0); /* libgcc's set-up, for the fallbacks too */
    return true;
}

static uint64_t unwind_fallbacks, unwind_disagreements;

uint64_t sf_prof_unwind_fallbacks(void) { return __atomic_load_n(&unwind_fallbacks, __ATOMIC_RELAXED); }
uint64_t sf_prof_unwind_disagreements(void) { return __atomic_load_n(&unwind_disagreements, __ATOMIC_RELAXED); }

/* profile.unwinder = check: the table's stack against libgcc's.  Where the
 * table gave up there is nothing of its own to compare. */
static void check_walks(const uintptr_t *table, int nt, const uintptr_t *gcc, unsigned ng) {
    if (nt < 0) return;
    unsigned i = 0;
    while (i < (unsigned)nt && i < ng && table[i] == gcc[i]) i++;
    if (i == (unsigned)nt && i == ng) return;
    uint64_t seen = __atomic_fetch_add(&unwind_disagreements, 1, __ATOMIC_RELAXED);
    if (seen >= 8) return; /* the first few tell the story */
    char line[192];
    sf_str_t s;
    sf_str_init(&s, line, sizeof line);
    sf_str_add(&s, "sefer: profile.unwinder=check: the walks differ at frame ");
    sf_str_addu(&s, i);
    sf_str_add(&s, ": table ");
    if (i < (unsigned)nt) sf_str_addx(&s, table[i]);
    else sf_str_add(&s, "(end)");
    sf_str_add(&s, ", libgcc ");
    if (i < ng) sf_str_addx(&s, gcc[i]);
    else sf_str_add(&s, "(end)");
    sf_str_add(&s, " (frames: table ");
    sf_str_addu(&s, (uint64_t)nt);
    sf_str_add(&s, ", libgcc ");
    sf_str_addu(&s, ng);
    sf_str_add(&s, ")\n");
    sf_write_stderr(line);
}

SF_NOINLINE unsigned sf_prof_capture(uintptr_t *out, unsigned max) {
    if (max == 0 || !can_unwind()) return 0;
    uintptr_t lo, hi;
    sf_prof_self_range(&lo, &hi);
    unsigned walk = (unsigned)sf_knob(SF_KNOB_PROFILE_UNWINDER);
    int n;
    sf_prof_quiet(true);
    if (walk == SF_UNWINDER_LIBGCC) {
        n = capture_libgcc(out, max, lo, hi);
        if (n < 0) n = sf_unwind_table(out, max, lo, hi); /* (libgcc not loaded yet) */
    } else if (walk == SF_UNWINDER_CHECK) {
        uintptr_t mine[SF_PROF_DEPTH_MAX];
        int nt = sf_unwind_table(mine, max < SF_PROF_DEPTH_MAX ? max : SF_PROF_DEPTH_MAX, lo, hi);
        if (nt < 0) __atomic_fetch_add(&unwind_fallbacks, 1, __ATOMIC_RELAXED);
        n = capture_libgcc(out, max, lo, hi);
        if (n < 0) { /* (libgcc not loaded yet: nothing to compare with) */
            n = nt;
            if (nt > 0) memcpy(out, mine, (size_t)nt * sizeof *out);
        } else if (lo != hi) { /* (with sefer's range unknown each walk keeps its own top frames) */
            check_walks(mine, nt, out, (unsigned)n);
        }
    } else {
        n = sf_unwind_table(out, max, lo, hi);
        if (n < 0) {
            __atomic_fetch_add(&unwind_fallbacks, 1, __ATOMIC_RELAXED);
            n = capture_libgcc(out, max, lo, hi);
        }
    }
    sf_prof_quiet(false);
    return n > 0 ? (unsigned)n : 0;
}

/* The executable PT_LOAD of the object holding this function; left empty
 * when that object is the program itself (static linking: sefer's code is
 * not apart from the program's). */
static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me < lo || me >= hi) continue;
        if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
            __atomic_store_n(&self_hi, hi, __ATOMIC_RELAXED);
            __atomic_store_n(&self_lo, lo, __ATOMIC_RELEASE);
        }
        return 1;
    }
    return 0;
}

void sf_prof_stack_init(void) {
    dl_iterate_phdr(find_self, (void *)(uintptr_t)sf_prof_capture);
    if (sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES) != 0 || sf_gsample_on ||
        sf_knob(SF_KNOB_PROFILE_UNWINDER) != SF_UNWINDER_TABLE)
        sf_prof_libgcc_load();
}
