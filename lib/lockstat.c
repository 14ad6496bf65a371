/* lockstat.c - the counter build: how often each lock and each shared cache
 * line is taken (meson -Dlock_stats=true; docs/scaling.md).
 *
 * Compiled to nothing unless SEFER_LOCK_STATS is defined.  With it, the
 * hooks of internal.h land here:
 *
 *   sf_lock/sf_unlock   one acquisition of the lock, contended or not (a
 *                       failed trylock first), the time spent waiting and
 *                       the time held (first and second moments, the
 *                       longest, and a power-of-two histogram);
 *   sf_stat_add/sub     one read-modify-write of a process-wide counter in
 *                       sf_gstats, by field;
 *   SF_LS_RMW           one read-modify-write (or, for a CAS loop, one
 *                       attempt) on a line other threads also write (a
 *                       ring tail, a page's xfree word, ...).
 *
 * Counting must not itself become the shared line it measures, so each
 * thread counts with plain adds into a block of its own: the block of its
 * heap's registry slot (a heap has one owner at a time, and the registry's
 * ownerless stack orders one owner's adds before the next one's), or, for
 * a thread without a heap (before its first allocation, during its exit,
 * on the fallback heap) or past LS_BLOCKS slots, a shared block under a
 * spin lock (a few events per thread lifetime).
 *
 * Times are read with rdtsc on x86-64 (sf_now_ns elsewhere) and turned
 * into nanoseconds at exit with the tick rate seen between start-up and
 * exit.  The timer's own cost (about 10-20 ns a read) is inside every hold
 * it measures.
 *
 * At exit, if SEFER_LOCK_STATS is set ("stderr" or "1": standard error;
 * anything else: a file appended to), one line goes out:
 *   sefer-lockstats pid=.. ops=.. allocs=.. frees=.. ... lock.seg.acquired=..
 * (bench/scaling reads it).  Nothing here allocates. */
#include "internal.h"

#ifdef SEFER_LOCK_STATS

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

enum ls_lock { LS_SEG, LS_CACHE, LS_FALLBACK, LS_KNOB, LS_OTHER, LS_LOCKS };
static const char *const ls_lock_names[LS_LOCKS] = {"seg", "cache", "fallback", "knob", "other"};
#define LS_HIST 32 /* hold times: bucket k counts holds of [2^k, 2^(k+1)) ticks (k = 0: < 2) */
/* Holds of at least 2^21 ticks (about 0.9 ms at 2.4 GHz) are also kept out
 * of a second sum: on a machine with more runnable threads than CPUs such a
 * hold is mostly the holder being descheduled, and bench/scaling's model
 * wants the work done under the lock (docs/scaling.md). */
#define LS_LONG_HOLD ((uint64_t)1 << 21)
#define LS_BLOCKS 4096
#define LS_STATS (sizeof(struct sf_global_stats) / sizeof(uint64_t))

struct ls_lock_counts {
    uint64_t acquired, contended, wait_ticks, hold_ticks, hold_max;
    uint64_t short_holds, short_hold_ticks; /* holds below LS_LONG_HOLD */
    double hold_sq; /* sum of squared holds, ticks^2 */
    uint64_t hist[LS_HIST];
};

struct ls_block {
    struct ls_lock_counts lock[LS_LOCKS];
    uint64_t rmw[SF_RMW_KIND_COUNT];
    uint64_t stat[LS_STATS];
} __attribute__((aligned(128)));

static struct ls_block blocks[LS_BLOCKS]; /* .bss: only used slots' pages become resident */
static struct ls_block shared_block;
static atomic_flag shared_busy = ATOMIC_FLAG_INIT;

/* The locks this thread holds now, with the time each was taken. */
#define LS_DEPTH 8
static __thread struct {
    const pthread_mutex_t *m;
    uint64_t since;
} held[LS_DEPTH];
static __thread unsigned held_depth;

/* ---- time ---------------------------------------------------------------- */

static uint64_t ticks(void) {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return sf_now_ns();
#endif
}

static uint64_t start_ticks, start_ns;

/* A fork child counts from zero: its report is its own. */
static void ls_fork_child(void) {
    uint32_t slots = sf_heap_slots();
    memset(blocks, 0, (slots < LS_BLOCKS ? slots : LS_BLOCKS) * sizeof blocks[0]);
    memset(&shared_block, 0, sizeof shared_block);
    atomic_flag_clear(&shared_busy);
    held_depth = 0;
}

__attribute__((constructor(102))) static void ls_start(void) {
    start_ns = sf_now_ns();
    start_ticks = ticks();
    pthread_atfork(NULL, NULL, ls_fork_child);
}

/* ---- which block ------------------------------------------------------------ */

/* The calling thread's own block, or NULL: use the shared one. */
static struct ls_block *own_block(void) {
    sf_heap_t *heap = sf_tls_heap;
    if (heap->kind != SF_HEAP_REAL || heap->slot >= LS_BLOCKS) return NULL;
    return &blocks[heap->slot];
}

static struct ls_block *shared_enter(void) {
    while (atomic_flag_test_and_set_explicit(&shared_busy, memory_order_acquire)) {
    }
    return &shared_block;
}

static void shared_leave(void) { atomic_flag_clear_explicit(&shared_busy, memory_order_release); }

#define LS_WITH_BLOCK(b, body)                         \
    do {                                               \
        struct ls_block *b = own_block();              \
        if (b != NULL) {                               \
            body;                                      \
        } else {                                       \
            b = shared_enter();                        \
            body;                                      \
            shared_leave();                            \
        }                                              \
    } while (0)

/* ---- the hooks ---------------------------------------------------------------- */

static enum ls_lock lock_id(const pthread_mutex_t *m) {
    if (m == &sf_seg_lock) return LS_SEG;
    if (m == &sf_cache_lock) return LS_CACHE;
    if (m == &sf_fallback_lock) return LS_FALLBACK;
    if (m == &sf_knob_lock) return LS_KNOB;
    return LS_OTHER;
}


void sf_ls_lock(pthread_mutex_t *m) {
    uint64_t waited = 0;
    bool contended = pthread_mutex_trylock(m) != 0;
    if (contended) {
        uint64_t t0 = ticks();
        pthread_mutex_lock(m);
        waited = ticks() - t0;
    }
    enum ls_lock id = lock_id(m);
    LS_WITH_BLOCK(b, {
        b->lock[id].acquired++;
        b->lock[id].contended += contended;
        b->lock[id].wait_ticks += waited;
    });
    if (held_depth < LS_DEPTH) held[held_depth++] = (typeof(held[0])){m, ticks()};
}

static unsigned hist_bucket(uint64_t t) {
    unsigned k = t < 2 ? 0 : 63u - (unsigned)__builtin_clzll(t);
    return k < LS_HIST ? k : LS_HIST - 1;
}

static double ticks_per_ns(void) {
    uint64_t dn = sf_now_ns() - start_ns, dt = ticks() - start_ticks;
    return dn > 0 && dt > 0 ? (double)dt / (double)dn : 1.0;
}

void sf_ls_unlock(pthread_mutex_t *m) {
    uint64_t now = ticks(), hold = 0;
    bool timed = false;
    /* locks are released in any order (rarely): look m up among this thread's */
    for (unsigned i = held_depth; i-- > 0;) {
        if (held[i].m != m) continue;
        hold = now - held[i].since;
        held[i] = held[--held_depth];
        timed = true;
        break;
    }
    pthread_mutex_unlock(m);
    if (!timed) return;
    enum ls_lock id = lock_id(m);
    unsigned bucket = hist_bucket(hold);
    LS_WITH_BLOCK(b, {
        struct ls_lock_counts *c = &b->lock[id];
        c->hold_ticks += hold;
        if (hold < LS_LONG_HOLD) {
            c->short_holds++;
            c->short_hold_ticks += hold;
        }
        c->hold_sq += (double)hold * (double)hold;
        if (hold > c->hold_max) c->hold_max = hold;
        c->hist[bucket]++;
    });
}

void sf_ls_rmw(enum sf_ls_rmw kind) { LS_WITH_BLOCK(b, b->rmw[kind]++); }

void sf_ls_stat(const _Atomic uint64_t *counter) {
    size_t i = (size_t)(counter - (const _Atomic uint64_t *)&sf_gstats);
    if (i >= LS_STATS) return;
    LS_WITH_BLOCK(b, b->stat[i]++);
}

/* ---- the report at exit ------------------------------------------------------ */

/* sf_gstats' fields by offset, so a field added anywhere is still reported
 * (as stat.N) and never under another's name. */
#define LS_STAT_NAME(f) {offsetof(struct sf_global_stats, f) / sizeof(uint64_t), #f}
static const struct {
    size_t index;
    const char *name;
} stat_names[] = {
    LS_STAT_NAME(committed),      LS_STAT_NAME(reserved),       LS_STAT_NAME(metadata),
    LS_STAT_NAME(decommitted_total), LS_STAT_NAME(segments),   LS_STAT_NAME(segments_peak),
    LS_STAT_NAME(cache_bytes),    LS_STAT_NAME(cache_spans),    LS_STAT_NAME(cache_hits),
    LS_STAT_NAME(cache_misses),   LS_STAT_NAME(os_maps),        LS_STAT_NAME(enomem),
    LS_STAT_NAME(shared_allocs),  LS_STAT_NAME(shared_remote_frees), LS_STAT_NAME(fallback_allocs),
    LS_STAT_NAME(heap_fallbacks), LS_STAT_NAME(growth_shed), LS_STAT_NAME(memlimit_purges),
    LS_STAT_NAME(memlimit_refusals), LS_STAT_NAME(exited_waiting),
    LS_STAT_NAME(guard[SF_GUARD_INVALID]), LS_STAT_NAME(guard[SF_GUARD_INTERIOR]),
    LS_STAT_NAME(guard[SF_GUARD_DOUBLE]), LS_STAT_NAME(guard[SF_GUARD_OVERFLOW]),
    LS_STAT_NAME(guard[SF_GUARD_USE_AFTER_FREE]),
};

static const char *const rmw_names[SF_RMW_KIND_COUNT] = {
#define SF_LS_RMW_NAME_(id, name, what) name,
    SF_LS_RMW_KINDS(SF_LS_RMW_NAME_)
#undef SF_LS_RMW_NAME_
};

static void add_block(struct ls_block *sum, const struct ls_block *b) {
    for (unsigned l = 0; l < LS_LOCKS; l++) {
        struct ls_lock_counts *s = &sum->lock[l];
        const struct ls_lock_counts *c = &b->lock[l];
        s->acquired += c->acquired;
        s->contended += c->contended;
        s->wait_ticks += c->wait_ticks;
        s->hold_ticks += c->hold_ticks;
        s->short_holds += c->short_holds;
        s->short_hold_ticks += c->short_hold_ticks;
        s->hold_sq += c->hold_sq;
        if (c->hold_max > s->hold_max) s->hold_max = c->hold_max;
        for (unsigned k = 0; k < LS_HIST; k++) s->hist[k] += c->hist[k];
    }
    for (unsigned k = 0; k < SF_RMW_KIND_COUNT; k++) sum->rmw[k] += b->rmw[k];
    for (size_t k = 0; k < LS_STATS; k++) sum->stat[k] += b->stat[k];
}

static void kv(sf_str_t *s, const char *a, const char *b, const char *c, uint64_t v) {
    sf_str_add(s, " ");
    sf_str_add(s, a);
    sf_str_add(s, b);
    sf_str_add(s, c);
    sf_str_add(s, "=");
    sf_str_addu(s, v);
}

static void report_locks(sf_str_t *s, const struct ls_block *sum, double rate) {
    for (unsigned l = 0; l < LS_LOCKS; l++) {
        const struct ls_lock_counts *c = &sum->lock[l];
        const char *n = ls_lock_names[l];
        kv(s, "lock.", n, ".acquired", c->acquired);
        kv(s, "lock.", n, ".contended", c->contended);
        kv(s, "lock.", n, ".wait_ns", (uint64_t)((double)c->wait_ticks / rate));
        kv(s, "lock.", n, ".hold_ns", (uint64_t)((double)c->hold_ticks / rate));
        kv(s, "lock.", n, ".hold_max_ns", (uint64_t)((double)c->hold_max / rate));
        kv(s, "lock.", n, ".short_holds", c->short_holds);
        kv(s, "lock.", n, ".short_hold_ns", (uint64_t)((double)c->short_hold_ticks / rate));
        /* mean squared hold (ns^2): the second moment a queueing model needs */
        kv(s, "lock.", n, ".hold_sq_mean_ns2",
           c->acquired ? (uint64_t)(c->hold_sq / (rate * rate) / (double)c->acquired) : 0);
        sf_str_add(s, " lock.");
        sf_str_add(s, n);
        sf_str_add(s, ".hist_ticks=");
        for (unsigned k = 0; k < LS_HIST; k++) {
            if (k) sf_str_add(s, ",");
            sf_str_addu(s, c->hist[k]);
        }
    }
}

static void report_counters(sf_str_t *s, const struct ls_block *sum) {
    for (unsigned k = 0; k < SF_RMW_KIND_COUNT; k++) kv(s, "rmw.", rmw_names[k], "", sum->rmw[k]);
    for (size_t k = 0; k < LS_STATS; k++) {
        const char *name = NULL;
        for (size_t j = 0; j < sizeof stat_names / sizeof stat_names[0]; j++)
            if (stat_names[j].index == k) name = stat_names[j].name;
        if (name != NULL) {
            kv(s, "stat.", name, "", sum->stat[k]);
        } else {
            char num[24];
            sf_str_t t;
            sf_str_init(&t, num, sizeof num);
            sf_str_addu(&t, k);
            kv(s, "stat.", num, "", sum->stat[k]);
        }
    }
}

static int report_fd(const char *where) {
    if (strcmp(where, "stderr") == 0 || strcmp(where, "1") == 0) return 2;
    return open(where, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

__attribute__((destructor)) static void ls_report(void) {
    const char *where = getenv("SEFER_LOCK_STATS");
    if (where == NULL || where[0] == '\0' || !atomic_load(&sf_initialized)) return;
    double rate = ticks_per_ns();
    static struct ls_block sum; /* (static: too big for a thread's stack margin) */
    memset(&sum, 0, sizeof sum);
    uint32_t slots = sf_heap_slots();
    for (uint32_t i = 0; i < slots && i < LS_BLOCKS; i++) add_block(&sum, &blocks[i]);
    add_block(&sum, shared_enter());
    shared_leave();
    struct sefer_stats st; /* after the sums: its own lock holds are not counted */
    sf_stats_collect(&st);
    static char line[16384];
    sf_str_t s;
    sf_str_init(&s, line, sizeof line);
    sf_str_add(&s, "sefer-lockstats");
    kv(&s, "pid", "", "", (uint64_t)getpid());
    kv(&s, "ops", "", "", st.allocs + st.frees);
    kv(&s, "allocs", "", "", st.allocs);
    kv(&s, "frees", "", "", st.frees);
    kv(&s, "remote_frees", "", "", st.remote_frees);
    kv(&s, "remote_list_frees", "", "", st.remote_list_frees);
    kv(&s, "ring_pushes", "", "", st.ring_pushes);
    kv(&s, "ring_overflows", "", "", st.ring_overflows);
    kv(&s, "fallback_allocs", "", "", st.fallback_allocs);
    kv(&s, "heap_slots", "", "", st.heap_slots);
    kv(&s, "segments_peak", "", "", st.segments_peak);
    kv(&s, "bytes_metadata", "", "", st.bytes_metadata);
    kv(&s, "heap_bytes", "", "", sizeof(sf_heap_t));
    kv(&s, "ring_cell_bytes", "", "", sizeof(sf_ring_cell_t));
    kv(&s, "elapsed_ns", "", "", sf_now_ns() - start_ns);
    kv(&s, "ticks_per_ns_x1000", "", "", (uint64_t)(rate * 1000.0));
    report_locks(&s, &sum, rate);
    report_counters(&s, &sum);
    sf_str_add(&s, "\n");
    int fd = report_fd(where);
    if (fd < 0) return;
    for (size_t off = 0; off < s.len;) {
        ssize_t n = write(fd, s.buf + off, s.len - off);
        if (n <= 0) break;
        off += (size_t)n;
    }
    if (fd != 2) close(fd);
}

#else
typedef int sf_lockstat_off; /* (an empty file is not valid C) */
#endif /* SEFER_LOCK_STATS */
