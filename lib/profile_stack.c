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
 * libgcc's one-time set-up (a pthread_once inside it) is done from the
 * library constructor, outside malloc, by a first walk (warm-up).
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

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg) {
    struct walk *w = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0) return _URC_END_OF_STACK;
    if (w->top && ip >= w->lo && ip < w->hi) return _URC_NO_REASON;
    w->top = false;
    w->out[w->n++] = ip - 1;
    return w->n < w->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static SF_NOINLINE unsigned capture_libgcc(uintptr_t *out, unsigned max, uintptr_t lo, uintptr_t hi) {
    struct walk w = {out, 0, max, true, lo, hi};
    _Unwind_Backtrace(walk_frame, &w);
    return w.n;
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
    unsigned n;
    sf_prof_quiet(true);
    if (walk == SF_UNWINDER_LIBGCC) {
        n = capture_libgcc(out, max, lo, hi);
    } else if (walk == SF_UNWINDER_CHECK) {
        uintptr_t mine[SF_PROF_DEPTH_MAX];
        int nt = sf_unwind_table(mine, max < SF_PROF_DEPTH_MAX ? max : SF_PROF_DEPTH_MAX, lo, hi);
        if (nt < 0) __atomic_fetch_add(&unwind_fallbacks, 1, __ATOMIC_RELAXED);
        n = capture_libgcc(out, max, lo, hi);
        /* (with sefer's range unknown each walk keeps its own top frames) */
        if (lo != hi) check_walks(mine, nt, out, n);
    } else {
        int nt = sf_unwind_table(out, max, lo, hi);
        if (nt >= 0) {
            n = (unsigned)nt;
        } else {
            __atomic_fetch_add(&unwind_fallbacks, 1, __ATOMIC_RELAXED);
            n = capture_libgcc(out, max, lo, hi);
        }
    }
    sf_prof_quiet(false);
    return n;
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
    uintptr_t warm[4];
    if (can_unwind()) capture_libgcc(warm, 4, 0, 0); /* libgcc's set-up, for the fallbacks too */
}
