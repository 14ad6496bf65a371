/* profile.c - sampled heap profiling: which call stacks hold memory.
 *
 * Sampling (docs/design.md, "Heap profiling", has the argument in full).
 * profile.sample_bytes = R puts sample points on the bytes each heap
 * allocates as a Poisson process of rate 1/R: the gaps between points are
 * exponential with mean R, independent of each other.  An allocation is
 * sampled when its bytes hold a point, so a block counted with s bytes is
 * sampled with p = 1 - exp(-s/R), independently of every other block.
 * Each heap counts down the gap to its next point (the high part of
 * sf_heap_t.countdown, internal.h, "The countdown word"; it runs to the
 * sampled guard's point instead where that is nearer: "one countdown, two
 * points" below):
 *
 *   - while the profile is armed (or the sampled guard on) every
 *     allocation subtracts its bytes once: a counted pop (fastpath.h,
 *     sf_sample_tick_counting; the entry points' malloc is sent to the
 *     counted one by sf_entry_choose) the request's size plus one (so that
 *     malloc(0) takes a byte: the word's count of allocations relies on
 *     it), level 2's pops the same, the slow path (page.c,
 *     sf_page_malloc_class) the class's, since it is not told the
 *     request; the slow paths count on or off;
 *   - below zero, a point fell in the allocation: prof_decide draws
 *     the next gap from the allocation's end (the process forgets its past)
 *     and says it is a sample; the fast pop hands nothing out and
 *     sf_sample_take serves the request from a page of sampled blocks
 *     (flag SF_PAGE_SAMPLED: off every free fast path, so its free comes to
 *     sf_prof_freed), where sf_alloc_class records it;
 *   - the first time a heap looks, and in the thread that set the knob,
 *     the process starts afresh at the allocation's start; another heap
 *     finishes the gap it drew at the old rate; with the profile off the
 *     countdown runs out every SF_SAMPLE_IDLE bytes of the slow paths'
 *     allocations to look at the knob;
 *   - spans (no list, no fast path) are sampled one by one with probability
 *     p (sf_prof_span).
 *
 * A sample counted with s bytes, of a block of b bytes, weighs b/p bytes
 * and 1/p blocks, kept with it, so every estimate is unbiased per site
 * whatever the rate was when each sample was taken, and whichever of the
 * two sizes the path counted.  (Until 0.1.0's third round the count was
 * of blocks per class, charged when the slow path handed a free list to
 * the fast one, and the frees counted themselves: 20 instructions a
 * malloc/free pair, docs/design.md.)
 *
 * Storage: every table is mapped from the OS (never malloc) and together
 * they stay under profile.max_bytes.  Sites (stacks stored once, found by a
 * hash of their frames) and their frames grow by doubling and are never
 * removed; live sampled blocks sit in an open-addressing table by address.
 * A sample that finds no room is counted in `dropped`.  One mutex
 * (prof_lock) guards them; it is taken last, holds no other lock and never
 * waits inside, and the stack is captured before it is taken. */
#include "profile.h"
#include "fastpath.h"

#include <sys/types.h>
#include <time.h>
#include <unistd.h>

bool sf_prof_armed;

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread unsigned prof_quiet __attribute__((tls_model("initial-exec")));
static __thread uint64_t prof_due_rate __attribute__((tls_model("initial-exec")));
static uint64_t base_seed;
static _Atomic uint64_t span_rng;

void sf_prof_quiet(bool on) {
    if (on) prof_quiet++;
    else prof_quiet--;
}

/* ---- numbers without libm --------------------------------------------------- */

/* Natural logarithm of x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), and
 * log m = 2 atanh((m-1)/(m+1)) by its series (error below 1e-10). */
static double prof_log(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & ((1ull << 52) - 1)) | (1023ull << 52);
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1) / (m + 1), s2 = s * s;
    double series = 1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11)))));
    return e * 0.6931471805599453 + 2 * s * series;
}

/* 1 - exp(-x) for x >= 0, accurate also for small x. */
static double prof_p_of(double x) {
    if (x < 1e-5) return x * (1 - x * (0.5 - x / 6));
    if (x > 700) return 1;
    int k = (int)(x / 0.6931471805599453 + 0.5);
    double r = x - k * 0.6931471805599453; /* |r| <= ln2 / 2 */
    double term = 1, sum = 1;
    for (int i = 1; i < 18; i++) {
        term *= -r / i;
        sum += term;
    }
    for (int i = 0; i < k; i++) sum *= 0.5;
    return 1 - sum;
}

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in (0, 1]. */
static double unit_of(uint64_t r) { return (double)((r >> 11) + 1) * 0x1p-53; }

static uint64_t heap_random(sf_heap_t *heap) {
    uint64_t *s = &heap->prof.rng;
    if (*s == 0) *s = splitmix(base_seed ^ ((uint64_t)heap->slot + 1) * 0xd1b54a32d192ed03ull) | 1;
    uint64_t x = *s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* The profile off: the countdown's refill, after which a heap looks at
 * profile.sample_bytes again (the latency of a rate set at run time). */
#define SF_SAMPLE_IDLE ((int64_t)16 << 20)
#define GAP_MAX ((int64_t)1 << 62)

/* A gap between sample points: exponential with mean `rate` bytes. */
static int64_t draw_gap(sf_heap_t *heap, uint64_t rate) {
    double e = -prof_log(unit_of(heap_random(heap))) * (double)rate;
    return e >= (double)GAP_MAX ? GAP_MAX : (int64_t)e;
}

/* ---- the samples' pace: profile.max_samples ----------------------------------
 *
 * A sample costs a stack capture and the tables' lock, about half a
 * microsecond; at a fixed rate a program that allocates gigabytes a second
 * takes thousands a second (bench/mixed's bursts of 64-256 KiB blocks at
 * one sample per 2 MiB: 3.6 million a second, 2.7x the time of the
 * profile off), and the cost grows with the allocation rate, not with
 * what the profile learns.  So the samples are paced (pace_sample,
 * below): once a window has seen more than its share of
 * profile.max_samples, the mean gap in force doubles (pace_shift: the gap
 * is profile.sample_bytes << pace_shift), and a window that saw under a
 * quarter of its share halves it back, down to profile.sample_bytes.  Every gap is drawn at the rate then in force and
 * each sample is weighed at the rate its gap was drawn at (above), so the
 * chance of every allocation is known when it is made and the estimates
 * stay unbiased while paced: only their spread grows, with the gap. */
#define PACE_WINDOW_MIN_MS 100
#define PACE_SHIFT_MAX 12 /* the gap at most 4096x profile.sample_bytes (8 GiB at 2 MiB) */
static _Atomic uint64_t pace_window_start; /* sf_now_ms of the window's start */
static _Atomic uint64_t pace_count;        /* samples in it */
static _Atomic uint32_t pace_shift;
_Atomic uint32_t sf_prof_pace_epoch; /* one more each time the gap comes down (sf_prof_pace_check) */

/* The mean gap in force: profile.sample_bytes `rate`, paced. */
static uint64_t paced_rate(uint64_t rate) {
    unsigned s = atomic_load_explicit(&pace_shift, memory_order_relaxed);
    if (s == 0) return rate;
    return rate >= ((uint64_t)GAP_MAX >> s) ? (uint64_t)GAP_MAX : rate << s;
}

/* (0 with the profile off) */
uint64_t sf_prof_rate_now(void) { return paced_rate(sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES)); }

/* The gap comes down to shift s (below the one in force): the heaps look
 * again at their next refill (sf_prof_pace_check). */
static void pace_lower(unsigned s) {
    atomic_store_explicit(&pace_shift, s, memory_order_relaxed);
    atomic_fetch_add_explicit(&sf_prof_pace_epoch, 1, memory_order_relaxed);
}

/* A window's length: 100 ms, longer where the cap would allow under four
 * samples in it (a share of zero or one doubled the gap at every sample). */
static uint64_t pace_window_ms(uint64_t cap) {
    uint64_t w = 4000 / cap;
    return w > PACE_WINDOW_MIN_MS ? w : PACE_WINDOW_MIN_MS;
}

/* One sample more: the window's count, and the pace from it.  The sample
 * that takes the count past the window's share doubles the gap and starts
 * a new window (so that the next judgement is of a whole window at the new
 * pace: a count started again inside the old one read as a quiet window
 * and halved the gap straight back); the first sample after a window
 * closes halves the gap while the closed window, over all the time since
 * it opened, saw under a quarter of its share (each halving would have
 * doubled that count), and tells the heaps (sf_prof_pace_epoch). */
static void pace_sample(void) {
    uint64_t cap = sf_knob(SF_KNOB_PROFILE_MAX_SAMPLES);
    if (cap == 0) {
        if (atomic_load_explicit(&pace_shift, memory_order_relaxed) != 0) pace_lower(0);
        return;
    }
    uint64_t window = pace_window_ms(cap), now = sf_now_ms();
    uint64_t start = atomic_load_explicit(&pace_window_start, memory_order_relaxed);
    if (now < start) { /* (a test clock set back) */
        atomic_store_explicit(&pace_window_start, now, memory_order_relaxed);
        start = now;
    }
    if (now - start >= window &&
        atomic_compare_exchange_strong_explicit(&pace_window_start, &start, now, memory_order_relaxed,
                                                memory_order_relaxed)) {
        uint64_t seen = atomic_exchange_explicit(&pace_count, 0, memory_order_relaxed);
        uint64_t share = cap * (now - start); /* x 1000: samples the cap allows in that time */
        unsigned s = atomic_load_explicit(&pace_shift, memory_order_relaxed), was = s;
        while (s > 0 && seen * 4000 < share) {
            s--;
            seen *= 2;
        }
        if (s != was) pace_lower(s);
    }
    uint64_t limit = cap * window / 1000;
    if (atomic_fetch_add_explicit(&pace_count, 1, memory_order_relaxed) + 1 == limit + 1) {
        /* (exactly one sample crosses the share) */
        unsigned s = atomic_load_explicit(&pace_shift, memory_order_relaxed);
        if (s < PACE_SHIFT_MAX) atomic_store_explicit(&pace_shift, s + 1, memory_order_relaxed);
        atomic_store_explicit(&pace_window_start, now, memory_order_relaxed);
        atomic_store_explicit(&pace_count, 0, memory_order_relaxed);
    }
}

/* ---- one countdown, two points ------------------------------------------------
 *
 * The sampled guard (guard.sample_bytes, guard_sample.c) picks its
 * allocations by the bytes a heap allocates too, so it counts on the same
 * countdown: sf_heap_t.countdown runs to the nearer of the profile's
 * next point and the guard's, and each lies prof_extra or guard_extra
 * bytes past it (constants while the countdown runs, since every count
 * subtracts from all three alike).  With the guard off guard_extra is
 * unused and prof_extra 0: the countdown is the profile's.  (The guard
 * had a count of its own on every malloc, behind a bound that sent every
 * request to the slow entry: a malloc(64) + free 79 instructions against
 * the armed profile's 65.) */

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Whether the guard's point is on the heaps' countdowns: not at level 3,
 * whose allocations meet them only on the class paths (entry.c). */
static bool guard_counts(void) { return sf_gsample_on && sf_guard_level < 3; }

/* The countdown from the distances (bytes, >= 0: both are draws, 0, or
 * what is left of one while the countdown is not below zero) to the
 * profile's point and the guard's. */
static void countdown_set(sf_heap_t *heap, int64_t prof, int64_t guard) {
    bool with_guard = guard_counts();
    /* (the word holds at most SF_COUNTDOWN_MAX: a farther point is reached
     * by a run-out that finds neither due, and a set again) */
    int64_t m = sf_countdown_set(heap, with_guard && guard < prof ? guard : prof);
    heap->prof.prof_extra = prof - m;
    heap->prof.guard_extra = with_guard ? guard - m : 0;
}

/* The profile's point moves to `prof` bytes ahead; the guard's stays. */
static void prof_left_set(sf_heap_t *heap, int64_t prof) {
    countdown_set(heap, prof, sat_add(sf_countdown_left(heap), heap->prof.guard_extra));
}

/* The gap came down since heap last looked (sf_prof_pace_check, on its
 * refills): a gap it drew at a slower pace is drawn again at the pace in
 * force.  What is left of an exponential gap is exponential with the same
 * mean whatever has elapsed, and the redraw is decided by the process-wide
 * pace alone, not by what is left of this gap, so the sample points stay a
 * Poisson process at the rate in force and every weight stays right; a
 * heap that drew a gap of gigabytes in a storm no longer waits those
 * gigabytes for its next sample once the storm is over. */
void sf_prof_pace_redraw(sf_heap_t *heap) {
    heap->prof.pace_epoch = atomic_load_explicit(&sf_prof_pace_epoch, memory_order_relaxed);
    uint64_t rate = sf_prof_rate_now(), drawn_at = heap->prof.rate;
    if (rate == 0 || drawn_at == 0 || drawn_at == UINT64_MAX || rate >= drawn_at) return;
    heap->prof.rate = rate;
    prof_left_set(heap, draw_gap(heap, rate));
}

/* ---- the allocation paths' side (fastpath.h, page.c) ------------------------ */

static __thread uint64_t prof_due_size __attribute__((tls_model("initial-exec")));

/* The profile's point fell in the allocation that counted `size` bytes:
 * whether that allocation is a sample; *next: the bytes to the profile's
 * next point from its end. */
static bool prof_decide(sf_heap_t *heap, uint64_t size, int64_t *next) {
    uint64_t rate = sf_prof_rate_now();
    if (rate == 0) {
        heap->prof.rate = 0;
        *next = SF_SAMPLE_IDLE;
        return false;
    }
    uint64_t drawn_at = heap->prof.rate;
    if (drawn_at == 0 || drawn_at == UINT64_MAX) {
        /* the first look, the profile off until now, or this thread set
         * the knob: a process that starts at this allocation's first byte */
        heap->prof.rate = rate;
        drawn_at = rate;
        int64_t gap = draw_gap(heap, rate);
        if ((uint64_t)gap >= size) {
            *next = gap - (int64_t)size;
            return false;
        }
    }
    /* a point of the process drawn at `drawn_at` fell inside this
     * allocation: a sample at that rate (another thread may have set a new
     * one since; the next gap is the new rate's) */
    heap->prof.rate = rate;
    *next = draw_gap(heap, rate);
    if (SF_UNLIKELY(prof_quiet)) return false; /* (inside the unwinder: served unsampled) */
    prof_due_rate = drawn_at;
    prof_due_size = size;
    pace_sample();
    return true;
}

enum sf_count_out sf_countdown_out(sf_heap_t *heap, uint64_t size, bool guard_here) {
    int64_t left = sf_countdown_left(heap);
    int64_t prof = sat_add(left, heap->prof.prof_extra), guard = sat_add(left, heap->prof.guard_extra);
    bool guard_due = false;
    if (guard_counts() && guard < 0) {
        guard_due = heap->prof.guard_drawn; /* (the first run-out only starts its count) */
        heap->prof.guard_drawn = 1;
        guard = sf_gsample_draw();
    }
    enum sf_count_out out = SF_COUNT_OUT_NONE;
    if (prof < 0 && prof_decide(heap, size, &prof)) out = SF_COUNT_OUT_PROFILE;
    if (guard_due) {
        /* the guard's allocation is the next one that counts, where this
         * one is the profile's (the profile needs its every point taken:
         * the guard picks any allocation near its point) or its path cannot
         * place a block of the request's size; that once only (a heap whose
         * allocations all took such paths, aligned ones, would run out on
         * every one): the next time the guard's point is drawn again */
        if (out == SF_COUNT_OUT_PROFILE) {
            guard = 0;
        } else if (!guard_here) {
            if (!heap->prof.guard_passed) guard = 0;
            heap->prof.guard_passed = !heap->prof.guard_passed;
        } else {
            out = SF_COUNT_OUT_GUARD;
            heap->prof.guard_passed = 0;
        }
    }
    countdown_set(heap, prof, guard);
    return out;
}

/* A pop's countdown ran out on a request of n bytes, for which it took
 * `counted` bytes. */
static void *sample_take(size_t n, uint64_t counted, sf_heap_t *heap) {
    enum sf_count_out out = sf_countdown_out(heap, counted, true);
    if (out == SF_COUNT_OUT_GUARD) {
        void *p = sf_gsample_take(n);
        if (p != NULL) return p;
    }
    if (out != SF_COUNT_OUT_PROFILE) {
        /* not due (a first look, the profile off, the unwinder, a guard
         * sample the guard could not place): the request again by its fast
         * path, which counts it again, so not twice.  (Not
         * sf_malloc_generic: its swaps take the page's free list to be
         * empty, which it need not be here, and overwrote it.) */
        SF_ADD(heap->countdown, (int64_t)(counted << SF_COUNTDOWN_SHIFT));
        return sf_l2_fast ? sf_malloc_l2(n) : sf_malloc_counted(n);
    }
    /* the class's slow path takes it from a page of sampled blocks (at
     * level 2 through sf_guarded_malloc, which writes its canary) */
    heap->prof.force = SF_PROF_FORCE_SAMPLE;
    void *p = sf_guard_level >= 2 ? sf_guarded_malloc(n, 16) : sf_alloc_class(sf_class_of(n));
    heap->prof.force = SF_PROF_FORCE_NONE;
    return p;
}

void *sf_sample_take(size_t n, sf_heap_t *heap) { return sample_take(n, n, heap); }

void *sf_sample_take_counted(size_t n, sf_heap_t *heap) {
    /* (the allocation is counted by the path that serves it, the class
     * path or the counting pop again; a guard slot's is no heap's, as
     * before the word) */
    SF_ADD(heap->countdown, -1);
    return sample_take(n, (uint64_t)n + 1, heap);
}

void *sf_sample_take_class(unsigned c, sf_heap_t *heap) {
    bool due = sf_countdown_out(heap, sf_class_size[c], false) == SF_COUNT_OUT_PROFILE;
    heap->prof.force = due ? SF_PROF_FORCE_SAMPLE : SF_PROF_FORCE_COUNTED;
    void *p = sf_alloc_class(c);
    heap->prof.force = SF_PROF_FORCE_NONE;
    return p;
}

/* ---- the tables --------------------------------------------------------------- */

typedef struct {
    uint64_t hash;
    uint64_t frames_at;
    uint32_t depth, pad;
    uint64_t live_samples, samples, live_bytes, alloc_bytes, live_objs, alloc_objs, mark_bytes, mark_objs;
} prof_stack_t;

typedef struct {
    uintptr_t addr; /* 0: empty slot */
    uint32_t stack, pad;
    uint64_t w_bytes, w_objs;
} prof_live_t;

static struct {
    prof_stack_t *stacks;
    size_t nstacks, stacks_cap;
    uintptr_t *frames;
    size_t nframes, frames_cap;
    uint32_t *index; /* stack number + 1 by hash; 0: empty */
    size_t index_cap;
    prof_live_t *live;
    size_t nlive, live_cap;
    size_t bytes; /* mapped for all of the above */
    uint64_t samples, dropped, live_bytes, live_objs, mark_ms, marks;
} T;

static uint64_t hash_frames(const uintptr_t *f, unsigned n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ n;
    for (unsigned i = 0; i < n; i++) h = splitmix(h ^ f[i]);
    return h;
}

static size_t slot_of_addr(uintptr_t a, size_t mask) { return (size_t)(splitmix(a) & mask); }

/* Maps a table of `bytes` if the budget allows one of that size in place
 * of one of `old_bytes`. */
static void *table_map(size_t bytes, size_t old_bytes) {
    bytes = sf_align_up(bytes, SF_OS_PAGE);
    if (T.bytes - sf_align_up(old_bytes, SF_OS_PAGE) + bytes > sf_knob(SF_KNOB_PROFILE_MAX_BYTES)) return NULL;
    void *p = sf_os_map_plain(bytes);
    if (p != NULL) T.bytes += bytes;
    return p;
}

static void table_unmap(void *p, size_t bytes) {
    if (p == NULL) return;
    bytes = sf_align_up(bytes, SF_OS_PAGE);
    sf_os_unmap(p, bytes);
    T.bytes -= bytes;
}

/* Grows an array of elements of `size` bytes to hold `need` (doubling). */
static bool array_reserve(void **arr, size_t *cap, size_t size, size_t need, size_t first) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : first;
    while (n < need) n *= 2;
    void *fresh = table_map(n * size, 0);
    if (fresh == NULL) return false;
    if (*arr != NULL) memcpy(fresh, *arr, *cap * size);
    table_unmap(*arr, *cap * size);
    *arr = fresh;
    *cap = n;
    return true;
}

static bool index_grow(void) {
    size_t n = T.index_cap ? T.index_cap * 2 : 1024;
    uint32_t *fresh = table_map(n * sizeof *fresh, 0);
    if (fresh == NULL) return false;
    for (size_t i = 0; i < T.nstacks; i++) {
        size_t j = T.stacks[i].hash & (n - 1);
        while (fresh[j] != 0) j = (j + 1) & (n - 1);
        fresh[j] = (uint32_t)i + 1;
    }
    table_unmap(T.index, T.index_cap * sizeof *T.index);
    T.index = fresh;
    T.index_cap = n;
    return true;
}

/* The site of this stack, added if new; -1 if there is no room. */
static int64_t stack_find_or_add(const uintptr_t *f, unsigned n) {
    uint64_t h = hash_frames(f, n);
    if (T.index_cap != 0) {
        for (size_t j = h & (T.index_cap - 1); T.index[j] != 0; j = (j + 1) & (T.index_cap - 1)) {
            prof_stack_t *s = &T.stacks[T.index[j] - 1];
            if (s->hash == h && s->depth == n && memcmp(&T.frames[s->frames_at], f, n * sizeof *f) == 0)
                return T.index[j] - 1;
        }
    }
    if ((T.nstacks + 1) * 2 > T.index_cap && !index_grow()) return -1;
    if (!array_reserve((void **)&T.stacks, &T.stacks_cap, sizeof *T.stacks, T.nstacks + 1, 256) ||
        !array_reserve((void **)&T.frames, &T.frames_cap, sizeof *T.frames, T.nframes + n, 4096))
        return -1;
    prof_stack_t *s = &T.stacks[T.nstacks];
    memset(s, 0, sizeof *s);
    s->hash = h;
    s->depth = n;
    s->frames_at = T.nframes;
    memcpy(&T.frames[T.nframes], f, n * sizeof *f);
    T.nframes += n;
    size_t j = h & (T.index_cap - 1);
    while (T.index[j] != 0) j = (j + 1) & (T.index_cap - 1);
    T.index[j] = (uint32_t)T.nstacks + 1;
    return (int64_t)T.nstacks++;
}

static void live_put(prof_live_t *table, size_t cap, const prof_live_t *e) {
    size_t j = slot_of_addr(e->addr, cap - 1);
    while (table[j].addr != 0) j = (j + 1) & (cap - 1);
    table[j] = *e;
}

static bool live_grow(void) {
    size_t n = T.live_cap ? T.live_cap * 2 : 1024;
    prof_live_t *fresh = table_map(n * sizeof *fresh, 0);
    if (fresh == NULL) return false;
    for (size_t i = 0; i < T.live_cap; i++)
        if (T.live[i].addr != 0) live_put(fresh, n, &T.live[i]);
    table_unmap(T.live, T.live_cap * sizeof *T.live);
    T.live = fresh;
    T.live_cap = n;
    return true;
}

static void site_add(prof_stack_t *s, const prof_live_t *e, bool alloc) {
    s->live_samples++;
    s->live_bytes += e->w_bytes;
    s->live_objs += e->w_objs;
    T.live_bytes += e->w_bytes;
    T.live_objs += e->w_objs;
    if (!alloc) return;
    s->samples++;
    s->alloc_bytes += e->w_bytes;
    s->alloc_objs += e->w_objs;
}

static void site_sub(prof_stack_t *s, const prof_live_t *e) {
    s->live_samples--;
    s->live_bytes -= e->w_bytes;
    s->live_objs -= e->w_objs;
    T.live_bytes -= e->w_bytes;
    T.live_objs -= e->w_objs;
}

/* Removes the live sample at slot i (backward-shift deletion: no tombstones). */
static void live_remove_at(size_t i) {
    size_t mask = T.live_cap - 1;
    for (size_t j = (i + 1) & mask; T.live[j].addr != 0; j = (j + 1) & mask) {
        size_t home = slot_of_addr(T.live[j].addr, mask);
        bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            T.live[i] = T.live[j];
            i = j;
        }
    }
    T.live[i].addr = 0;
    T.nlive--;
}

static size_t live_find(uintptr_t a) {
    if (T.live_cap == 0) return SIZE_MAX;
    size_t mask = T.live_cap - 1;
    for (size_t j = slot_of_addr(a, mask); T.live[j].addr != 0; j = (j + 1) & mask)
        if (T.live[j].addr == a) return j;
    return SIZE_MAX;
}

/* A sampled block of `size` bytes, counted with `counted` bytes at `rate`:
 * its stack and weight. */
static void record(void *p, uint64_t size, uint64_t counted, uint64_t rate) {
    uintptr_t frames[SF_PROF_DEPTH_MAX];
    unsigned depth = (unsigned)sf_knob(SF_KNOB_PROFILE_DEPTH);
    if (depth > SF_PROF_DEPTH_MAX) depth = SF_PROF_DEPTH_MAX;
    unsigned n = sf_prof_capture(frames, depth);
    double prob = prof_p_of((double)(counted ? counted : 1) / (double)(rate ? rate : 1));
    prof_live_t e = {(uintptr_t)p, 0, 0, (uint64_t)((double)size / prob + 0.5),
                     (uint64_t)(SF_PROF_OBJ_UNIT / prob + 0.5)};
    sf_lock(&prof_lock);
    size_t old = live_find(e.addr);
    if (old != SIZE_MAX) { /* (its free was never seen: a double free's aftermath) */
        site_sub(&T.stacks[T.live[old].stack], &T.live[old]);
        live_remove_at(old);
    }
    int64_t site = stack_find_or_add(frames, n);
    if (site < 0 || ((T.nlive + 1) * 2 > T.live_cap && !live_grow())) {
        T.dropped++;
    } else {
        e.stack = (uint32_t)site;
        live_put(T.live, T.live_cap, &e);
        T.nlive++;
        T.samples++;
        site_add(&T.stacks[site], &e, true);
    }
    sf_unlock(&prof_lock);
}

void sf_prof_after_class_alloc(void *p) {
    sf_page_t *page = sf_page_of(sf_segment_of(p), p);
    if (!(SF_GET(page->flags) & SF_PAGE_SAMPLED)) return;
    record(p, page->block_size, prof_due_size, prof_due_rate);
}

void *sf_prof_span(void *p) {
    uint64_t rate = sf_prof_rate_now();
    if (rate == 0 || prof_quiet) return p;
    sf_page_t *page = sf_page_of(sf_segment_of(p), p);
    uint64_t size = page->span_bytes;
    uint64_t r = splitmix(atomic_fetch_add_explicit(&span_rng, 0x9e3779b97f4a7c15ull, memory_order_relaxed));
    if (unit_of(r) > prof_p_of((double)size / (double)rate)) return p;
    pace_sample();
    SF_SET(page->flags, (uint8_t)(page->flags | SF_PAGE_SAMPLED));
    record(p, size, size, rate);
    return p;
}

/* A span realloc resized in place: for the profile, the free of the old
 * block and the allocation of the new one (at the realloc's stack), so that
 * its chance of being sampled and its weight are those of its new size.
 * (Left as it was, a block that grew from 300 KiB to 3.5 MiB kept the
 * chance of the small one, a quarter at 1 MiB per sample, and a sample's
 * weight: realloc chains of the soak workload made the estimate of live
 * bytes 40 % short.) */
void sf_prof_span_resized(sf_page_t *page) {
    void *p = page->block_start;
    if (SF_GET(page->flags) & SF_PAGE_SAMPLED) {
        sf_prof_freed(p);
        SF_SET(page->flags, (uint8_t)(page->flags & ~SF_PAGE_SAMPLED));
    }
    if (sf_prof_is_armed()) sf_prof_span(p);
}

void sf_prof_freed(const void *p) {
    sf_lock(&prof_lock);
    size_t i = live_find((uintptr_t)p);
    if (i != SIZE_MAX) {
        site_sub(&T.stacks[T.live[i].stack], &T.live[i]);
        live_remove_at(i);
    }
    sf_unlock(&prof_lock);
}

/* ---- what introspection reads ------------------------------------------------- */

static void totals_locked(sf_prof_totals_t *t) {
    t->rate = sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES);
    t->rate_now = sf_prof_rate_now();
    t->samples = T.samples;
    t->dropped = T.dropped;
    t->live_samples = T.nlive;
    t->live_bytes = T.live_bytes;
    t->live_objs = T.live_objs;
    t->bytes = T.bytes;
    t->mark_ms = T.mark_ms;
    t->marks = T.marks;
    t->sites = T.nstacks;
    t->frames = T.nframes;
    t->unwinder = sf_knob(SF_KNOB_PROFILE_UNWINDER);
    t->unwind_fallbacks = sf_prof_unwind_fallbacks();
    t->unwind_disagreements = sf_prof_unwind_disagreements();
}

void sf_prof_totals(sf_prof_totals_t *t) {
    sf_lock(&prof_lock);
    totals_locked(t);
    sf_unlock(&prof_lock);
}

bool sf_prof_copy(sf_prof_site_t *sites, size_t max_sites, uintptr_t *frames, size_t max_frames,
                  sf_prof_totals_t *t) {
    sf_lock(&prof_lock);
    totals_locked(t);
    bool fits = T.nstacks <= max_sites && T.nframes <= max_frames;
    if (fits) {
        for (size_t i = 0; i < T.nstacks; i++) {
            const prof_stack_t *s = &T.stacks[i];
            sites[i] = (sf_prof_site_t){(uint32_t)i,    s->depth,      s->frames_at,   s->live_samples,
                                        s->samples,     s->live_bytes, s->alloc_bytes, s->live_objs,
                                        s->alloc_objs,  s->mark_bytes, s->mark_objs};
        }
        if (T.nframes) memcpy(frames, T.frames, T.nframes * sizeof *frames);
    }
    sf_unlock(&prof_lock);
    return fits;
}

void sf_prof_mark(void) {
    sf_lock(&prof_lock);
    for (size_t i = 0; i < T.nstacks; i++) {
        T.stacks[i].mark_bytes = T.stacks[i].live_bytes;
        T.stacks[i].mark_objs = T.stacks[i].live_objs;
    }
    T.mark_ms = sf_now_ms();
    if (T.mark_ms == 0) T.mark_ms = 1;
    T.marks++;
    sf_unlock(&prof_lock);
}

/* ---- start-up, run-time changes, fork ---------------------------------------- */

void sf_prof_init(void) {
    uint64_t seed = sf_knob(SF_KNOB_PROFILE_SEED);
    if (seed == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = splitmix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40));
    }
    base_seed = seed;
    atomic_store_explicit(&span_rng, splitmix(seed ^ 0x5350414eull), memory_order_relaxed);
    if (sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES) != 0) __atomic_store_n(&sf_prof_armed, true, __ATOMIC_RELAXED);
}

/* profile.sample_bytes was set: the calling thread's heap starts afresh at
 * its next allocation (a rate it cannot have drawn with); every other heap
 * at the end of its current gap, or within SF_SAMPLE_IDLE bytes if the
 * profile was off (only the owner writes a heap's countdown). */
void sf_prof_knob_changed(void) {
    /* a new rate starts its pace afresh (the heaps redraw at their refills) */
    if (atomic_load_explicit(&pace_shift, memory_order_relaxed) != 0) pace_lower(0);
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind == SF_HEAP_REAL) {
        heap->prof.rate = UINT64_MAX;
        prof_left_set(heap, 0);
    }
    if (sf_knob(SF_KNOB_PROFILE_SAMPLE_BYTES) == 0 || sf_prof_is_armed()) return;
    __atomic_store_n(&sf_prof_armed, true, __ATOMIC_RELAXED);
    sf_entry_choose(); /* every entry's malloc on the counted path from now on */
}

void sf_prof_constructor(void) { sf_prof_stack_init(); }

void sf_prof_fork_prepare(void) { sf_lock(&prof_lock); }
void sf_prof_fork_parent(void) { sf_unlock(&prof_lock); }
