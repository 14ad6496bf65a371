/* test_profile.c - heap profiling with every allocation sampled.
 *
 * Run with profile.sample_bytes = 1 (tests/meson.build sets
 * SEFER_PROFILE_SAMPLE_BYTES=1 for the whole process, so the first
 * allocations of the process are sampled too): a block of s >= 32 bytes is
 * then sampled with probability 1 - exp(-32) or more, so every block the
 * test allocates is sampled (the chance that one of the ~10^6 blocks here
 * is not is below 10^-7).  What is checked, through the sefer_* API only so
 * that the suite runs in the ASan and TSan builds too (its name contains
 * "tsan"):
 *
 *   - no sample is lost or counted twice: after threads allocate through
 *     every entry point and free each other's blocks (also after the
 *     allocating thread exited), freeing the K blocks still held takes
 *     exactly K off the live samples, and none was dropped;
 *   - no deadlock: fork from a process whose threads are sampling (the
 *     child samples and frees at once), thread churn;
 *   - the same at guard levels 0, 2 and 3 (each in a fresh process: the
 *     level is fixed at start-up);
 *   - a class in a steady state is sampled at its rate (fresh processes at
 *     64 KiB per sample, armed at start-up and at run time): a malloc/free
 *     pair that never leaves the fast path, a queue whose frees land on
 *     pages behind the class's current one, and at level 2 a class of
 *     2 KiB blocks, whose refills keep a block back (each a way a count of
 *     blocks charged at refills, sefer's design before the byte countdown,
 *     went wrong);
 *   - a large block that realloc grows or shrinks in place is sampled as a
 *     block of its new size (a fresh process at 1 MiB per sample: 100
 *     blocks of 300 KiB, each sampled with p = 0.25, grown to 3.5 MiB in
 *     place, p = 0.97, then shrunk back; the live samples follow, within 5
 *     deviations, where they stayed near 25 before);
 *   - the spread of the estimates over 24 seeds is the binomial's (fresh
 *     processes at 64 KiB per sample, profile.seed 1 to 24);
 *   - libgcc's unwinder is loaded only when stacks are wanted: not in a
 *     process with the profile off (this C test does not link libgcc_s),
 *     and once profile.sample_bytes is set at run time, before the first
 *     sample (test_unwind has libgcc's walk give a signal frame's
 *     stack). */
#include "sefer_test.h"

#include <math.h>
#include <stdatomic.h>

#define SLOTS 2048
static void *_Atomic slots[SLOTS];
static atomic_bool stop;

static uint64_t live_samples(void) { return st_stats().profile_live_samples; }

/* A block from one of the allocation entry points, 32 B .. 300 KiB. */
static void *alloc_any(uint64_t *rng) {
    uint64_t r = st_rand(rng);
    size_t n = 32 + (size_t)(r >> 40) % 3000;
    if ((r & 63) == 0) n = 20000 + (size_t)(r >> 20) % 100000;    /* medium */
    else if ((r & 255) == 1) n = 150000 + (size_t)(r >> 24) % 150000; /* span */
    void *p = NULL;
    switch ((r >> 8) % 6) {
    case 0: p = sefer_malloc(n); break;
    case 1: p = sefer_calloc(1, n); break;
    case 2:
        p = sefer_realloc(NULL, n / 2 + 32);
        if (p != NULL) p = sefer_realloc(p, n);
        break;
    case 3: p = sefer_aligned_alloc((size_t)64 << ((r >> 12) % 4), n); break;
    case 4:
        if (sefer_posix_memalign(&p, 32, n) != 0) p = NULL;
        break;
    default: p = sefer_memalign(256, n); break;
    }
    ck_assert_ptr_nonnull(p);
    ((volatile char *)p)[0] = 1;
    return p;
}

static void put(uint64_t *rng, void *p) {
    void *old = atomic_exchange(&slots[st_rand(rng) % SLOTS], p);
    if (old == NULL) return;
    if (st_rand(rng) & 1) sefer_free(old);
    else ck_assert_ptr_null(sefer_realloc(old, 0)); /* realloc to 0 frees */
}

static void *worker(void *arg) {
    uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    unsigned n = 0;
    while ((n < 20000 || !atomic_load(&stop)) && n < 2000000) {
        put(&rng, alloc_any(&rng));
        n++;
    }
    return NULL;
}

static void *short_worker(void *arg) {
    uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 7;
    for (int i = 0; i < 60; i++) put(&rng, alloc_any(&rng));
    return NULL;
}

/* Frees what the slots still hold: exactly that many live samples go. */
static void drain_and_check(void) {
    struct sefer_stats s = st_stats();
    ck_assert_uint_eq(s.profile_dropped, 0);
    ck_assert_uint_gt(s.profile_samples, 0);
    size_t k = 0;
    uint64_t before = live_samples();
    for (size_t i = 0; i < SLOTS; i++) {
        void *p = atomic_exchange(&slots[i], NULL);
        if (p != NULL) {
            sefer_free(p);
            k++;
        }
    }
    uint64_t after = live_samples();
    ck_assert_msg(before - after == k, "freeing %zu sampled blocks took %llu off the live samples", k,
                  (unsigned long long)(before - after));
    ck_assert_int_eq(sefer_check(), 0);
}

static void run_threads(unsigned threads) {
    pthread_t t[8];
    atomic_store(&stop, true);
    for (unsigned i = 0; i < threads; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
    for (unsigned i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

START_TEST(test_threads_cross_frees) {
    ck_assert_uint_eq(st_knob_ull("profile.sample_bytes"), 1);
    run_threads(4);
    drain_and_check();
}
END_TEST

START_TEST(test_thread_churn) {
    for (unsigned round = 0; round < 40; round++) {
        pthread_t t[4];
        for (unsigned i = 0; i < 4; i++)
            ck_assert_int_eq(pthread_create(&t[i], NULL, short_worker, (void *)(uintptr_t)(round * 4 + i + 1)), 0);
        for (unsigned i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    drain_and_check();
}
END_TEST

/* The child of a fork taken while other threads sample: it samples, frees,
 * and its counts agree. */
static int child_after_fork(void) {
    st_hang_guard(30); /* a deadlock ends the child, and the test fails */
    void *p[200];
    uint64_t before = live_samples();
    for (int i = 0; i < 200; i++) p[i] = sefer_malloc(48 + (size_t)i * 8);
    if (live_samples() - before != 200) return 2;
    for (int i = 0; i < 200; i++) sefer_free(p[i]);
    /* (no sefer_check here: a heap the fork cut in the middle of a page
     * move, abandoned in the child, can fail it with or without profiling) */
    return live_samples() == before ? 0 : 3;
}

START_TEST(test_fork_busy) {
    pthread_t t[3];
    atomic_store(&stop, false);
    for (unsigned i = 0; i < 3; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 11)), 0);
    for (int f = 0; f < 12; f++) {
        pid_t pid = fork();
        /* the child calls nothing of libcheck's: its lock may have been
         * taken at the fork (the child hung in ck_assert under TSan) */
        if (pid == 0) _exit(child_after_fork());
        ck_assert_int_ge(pid, 0);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: status %#x", status);
    }
    atomic_store(&stop, true);
    for (unsigned i = 0; i < 3; i++) pthread_join(t[i], NULL);
    drain_and_check();
}
END_TEST

/* This program again in a fresh process, with `name`=`value` in its
 * environment, running only the case named `mode`. */
/* This program again as `mode`, with name=value and name2=value2 (if
 * name2) set. */
static void run_child2(const char *mode, const char *name, const char *value, const char *name2, const char *value2) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv(name, value, 1);
        if (name2 != NULL) setenv(name2, value2, 1);
        execl("/proc/self/exe", "test_profile", mode, (char *)NULL);
        _exit(127);
    }
    ck_assert_int_ge(pid, 0);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s with %s=%s: status %#x", mode, name, value,
                  status);
}

static void run_child(const char *mode, const char *name, const char *value) {
    run_child2(mode, name, value, NULL, NULL);
}

/* Guard levels 0, 2, 3: this program again, in a child process. */
START_TEST(test_guard_levels) {
    static const char *const levels[] = {"0", "2", "3"};
    for (unsigned i = 0; i < 3; i++) run_child("levels-child", "SEFER_GUARD_LEVEL", levels[i]);
}
END_TEST

START_TEST(test_levels_child_body) {
    char want[8];
    snprintf(want, sizeof want, "%s", getenv("SEFER_GUARD_LEVEL"));
    ck_assert_str_eq(st_knob_get("guard.level"), want);
    run_threads(2);
    drain_and_check();
}
END_TEST

/* ---- a class in a steady state, at 64 KiB per sample ---------------------------- */

#define STEADY_RATE 65536.0
#define STEADY_PAIRS 2000000

/* K samples of n blocks of s bytes each: within 5 deviations of n p. */
static void check_samples(const char *what, uint64_t k, double n, double s) {
    double p = 1 - exp(-s / STEADY_RATE), want = n * p, sd = sqrt(n * p * (1 - p));
    ck_assert_msg(fabs((double)k - want) <= 5 * sd, "%s: %llu samples, %.0f expected (+-%.0f)", what,
                  (unsigned long long)k, want, 5 * sd);
}

static uint64_t samples(void) { return st_stats().profile_samples; }

static void malloc_free_pairs(int n) {
    for (int i = 0; i < n; i++) {
        void *p = sefer_malloc(64);
        __asm__ __volatile__("" : "+r"(p) : : "memory");
        sefer_free(p);
    }
}

/* malloc(64) + free with one block kept, through free() (its own entry)
 * and through realloc to 0 (the free every other entry point shares). */
static void steady_pairs(void) {
    void *keep = sefer_malloc(64);
    uint64_t k0 = samples();
    malloc_free_pairs(STEADY_PAIRS);
    uint64_t k1 = samples();
    check_samples("malloc(64) + free", k1 - k0, STEADY_PAIRS, 64);
    for (int i = 0; i < STEADY_PAIRS; i++) {
        void *p = sefer_malloc(64);
        __asm__ __volatile__("" : "+r"(p) : : "memory");
        if (sefer_realloc(p, 0) != NULL) abort(); /* (not ck_assert: its mark of the line allocates) */
    }
    check_samples("malloc(64) + realloc(p, 0)", samples() - k1, STEADY_PAIRS, 64);
    sefer_free(keep);
}

/* A queue: the oldest block freed for each new one, so nearly every free
 * lands on a page behind the class's current one (20 pages of 64 B
 * blocks in the window), and the fast path hands out blocks of page after
 * page. */
#define FIFO_WINDOW 20000
START_TEST(test_fifo_child_body) {
    ck_assert_uint_eq(st_knob_ull("profile.sample_bytes"), 65536);
    static void *window[FIFO_WINDOW];
    for (int i = 0; i < FIFO_WINDOW; i++) window[i] = sefer_malloc(64);
    uint64_t k0 = samples();
    for (int i = 0; i < STEADY_PAIRS; i++) {
        sefer_free(window[i % FIFO_WINDOW]);
        window[i % FIFO_WINDOW] = sefer_malloc(64);
        if (window[i % FIFO_WINDOW] == NULL) abort();
    }
    check_samples("a queue of 64 B blocks", samples() - k0, STEADY_PAIRS, 64);
    for (int i = 0; i < FIFO_WINDOW; i++) sefer_free(window[i]);
}
END_TEST

START_TEST(test_steady_class) {
    run_child("steady-child", "SEFER_PROFILE_SAMPLE_BYTES", "64KiB"); /* armed at start-up */
    run_child("armed-later-child", "SEFER_PROFILE_SAMPLE_BYTES", "0"); /* armed by a knob change */
    run_child("fifo-child", "SEFER_PROFILE_SAMPLE_BYTES", "64KiB");
    run_child("steady-l2-child", "SEFER_GUARD_LEVEL", "2");
}
END_TEST

/* Guard level 2, a class of 2 KiB blocks (carved one at a time) with one
 * block kept: each refill keeps the block freed last back on local_free
 * (page.c, sf_page_guarded_swap), and a count that charged it too sampled
 * the class at about twice its rate. */
#define STEADY_L2_PAIRS 500000
START_TEST(test_steady_l2_child_body) {
    ck_assert_str_eq(st_knob_get("guard.level"), "2");
    ck_assert_int_eq(sefer_config_set("profile.sample_bytes", "65536"), 0);
    void *keep = sefer_malloc(2000);
    for (int i = 0; i < 1000; i++) sefer_free(sefer_malloc(2000)); /* (a steady state first) */
    uint64_t k0 = samples();
    for (int i = 0; i < STEADY_L2_PAIRS; i++) {
        void *p = sefer_malloc(2000);
        __asm__ __volatile__("" : "+r"(p) : : "memory");
        sefer_free(p);
    }
    check_samples("level 2, malloc(2000) + free", samples() - k0, STEADY_L2_PAIRS, 2000);
    sefer_free(keep);
}
END_TEST

START_TEST(test_steady_child_body) {
    ck_assert_uint_eq(st_knob_ull("profile.sample_bytes"), 65536);
    steady_pairs();
}
END_TEST

START_TEST(test_armed_later_child_body) {
    ck_assert_uint_eq(st_knob_ull("profile.sample_bytes"), 0);
    malloc_free_pairs(100000); /* a steady state without the profile first: its lists are on top */
    ck_assert_int_eq(sefer_config_set("profile.sample_bytes", "65536"), 0);
    steady_pairs();
}
END_TEST

/* ---- aligned requests when the countdown runs out ------------------------------ */

/* The countdown can run out on the pop that serves an aligned request from
 * its aligned class (sf_heap_pop): the sample, or the request served
 * unsampled, must come from that class.  Sent the long way as a plain
 * request of the class's size instead (the first version), a medium size
 * under eager decommit became a span, aligned to 4 KiB only (sefer-soak
 * found it with the profile off: the countdown's 16 MiB refills). */
#define ALIGNED_ROUNDS 600
START_TEST(test_aligned_child_body) {
    ck_assert_str_eq(st_knob_get("decommit.policy"), "eager");
    uint64_t rng = 0x5eed;
    static void *v[16];
    for (int r = 0; r < ALIGNED_ROUNDS; r++) {
        for (int i = 0; i < 16; i++) {
            size_t align = (size_t)16 << (st_rand(&rng) % 10), n = 1000 + (size_t)(st_rand(&rng) % 250000);
            ck_assert_int_eq(sefer_posix_memalign(&v[i], align, n), 0);
            ck_assert_msg((uintptr_t)v[i] % align == 0, "posix_memalign(%zu, %zu) gave %p", align, n, v[i]);
            ((volatile char *)v[i])[n - 1] = 1;
        }
        for (int i = 0; i < 16; i++) sefer_free(v[i]);
    }
    /* alignments of the largest medium classes, which malloc serves as
     * spans under eager decommit (4 KiB-aligned: a bug before the
     * countdown, found in its review) */
    for (int r = 0; r < 64; r++) {
        size_t align = (size_t)128 << (10 + r % 2), n = align / 2 + (size_t)(st_rand(&rng) % (align / 2));
        ck_assert_int_eq(sefer_posix_memalign(&v[0], align, n), 0);
        ck_assert_msg((uintptr_t)v[0] % align == 0, "posix_memalign(%zu, %zu) gave %p", align, n, v[0]);
        sefer_free(v[0]);
    }
    ck_assert_int_eq(sefer_check(), 0);
}
END_TEST

START_TEST(test_aligned_countdown) {
    run_child2("aligned-child", "SEFER_DECOMMIT_POLICY", "eager", "SEFER_PROFILE_SAMPLE_BYTES", "0");
    run_child2("aligned-child", "SEFER_DECOMMIT_POLICY", "eager", "SEFER_PROFILE_SAMPLE_BYTES", "64KiB");
}
END_TEST

/* ---- realloc in place, at 1 MiB per sample ------------------------------------- */

#define RESIZE_RATE 1048576.0
#define RESIZE_BLOCKS 100
#define RESIZE_SMALL ((size_t)300 << 10) /* a span: above the 256 KiB classes */
#define RESIZE_BIG ((size_t)3584 << 10)  /* still inside the small one's 4 MiB span */

/* The live samples of n blocks of s bytes: within 5 deviations of n p. */
static void check_live(const char *what, uint64_t k, double n, double s) {
    double p = 1 - exp(-s / RESIZE_RATE), want = n * p, sd = sqrt(n * p * (1 - p));
    ck_assert_msg(fabs((double)k - want) <= 5 * sd + 0.5, "%s: %llu live samples, %.1f expected (+-%.1f)", what,
                  (unsigned long long)k, want, 5 * sd);
    printf("%s: %llu live samples, %.1f expected\n", what, (unsigned long long)k, want);
}

START_TEST(test_realloc_child_body) {
    ck_assert_uint_eq(st_knob_ull("profile.sample_bytes"), (uint64_t)RESIZE_RATE);
    static void *v[RESIZE_BLOCKS];
    uint64_t base = live_samples();
    for (int i = 0; i < RESIZE_BLOCKS; i++) {
        v[i] = sefer_malloc(RESIZE_SMALL);
        ck_assert_ptr_nonnull(v[i]);
    }
    check_live("300 KiB blocks", live_samples() - base, RESIZE_BLOCKS, (double)RESIZE_SMALL);
    for (int i = 0; i < RESIZE_BLOCKS; i++) {
        void *q = sefer_realloc(v[i], RESIZE_BIG);
        ck_assert_ptr_eq(q, v[i]); /* (in place: the point of the test) */
    }
    check_live("grown in place to 3.5 MiB", live_samples() - base, RESIZE_BLOCKS, (double)RESIZE_BIG);
    for (int i = 0; i < RESIZE_BLOCKS; i++) ck_assert_ptr_eq(sefer_realloc(v[i], RESIZE_SMALL), v[i]);
    check_live("shrunk back in place", live_samples() - base, RESIZE_BLOCKS, (double)RESIZE_SMALL);
    for (int i = 0; i < RESIZE_BLOCKS; i++) sefer_free(v[i]);
    ck_assert_uint_eq(live_samples(), base);
}
END_TEST

START_TEST(test_realloc_in_place) {
    run_child("realloc-child", "SEFER_PROFILE_SAMPLE_BYTES", "1MiB");
}
END_TEST

/* ---- the spread over seeds --------------------------------------------------- */

#define SEED_RATE 65536.0
#define SEED_BLOCKS 40000
#define SEED_SIZE 448 /* a class nothing else here uses */
#define SEEDS 24

START_TEST(test_seed_child_body) {
    static void *v[SEED_BLOCKS];
    ST_KNOB_SET("profile.sample_bytes", "65536");
    uint64_t base = live_samples();
    for (int i = 0; i < SEED_BLOCKS; i++) {
        v[i] = sefer_malloc(SEED_SIZE);
        if (v[i] == NULL) abort();
    }
    uint64_t k = live_samples() - base;
    for (int i = 0; i < SEED_BLOCKS; i++) sefer_free(v[i]);
    ck_assert_uint_eq(live_samples(), base);
    printf("seed-samples=%llu\n", (unsigned long long)k);
    fflush(stdout);
}
END_TEST

/* The samples of SEED_BLOCKS blocks with profile.seed = seed, from a child. */
static long seed_samples(unsigned seed) {
    char env[32], out[4096];
    snprintf(env, sizeof env, "SEFER_PROFILE_SEED=%u", seed);
    char *const extra_env[] = {env, NULL}, *const args[] = {"seed-child", NULL};
    int status = st_run_self(extra_env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "seed %u: status %#x: %s", seed, status, out);
    const char *at = strstr(out, "seed-samples=");
    ck_assert_msg(at != NULL, "seed %u: no count in %s", seed, out);
    return strtol(at + strlen("seed-samples="), NULL, 10);
}

/* Over 24 seeds the count of samples is Binomial(N, p): each within 5
 * deviations of N p, and their spread that of the binomial (the sample
 * variance over N p (1 - p) is chi-square with 23 degrees of freedom over
 * 23: below 0.25 or above 2.6 with a chance under 1e-4).  A sampler that
 * fired at the same blocks whatever the seed, or one that sampled by a
 * fixed stride, would have no spread. */
START_TEST(test_seeds_spread) {
    double p = 1 - exp(-(double)SEED_SIZE / SEED_RATE), mean = SEED_BLOCKS * p, var = mean * (1 - p);
    double sum = 0, sum2 = 0;
    for (unsigned seed = 1; seed <= SEEDS; seed++) {
        long k = seed_samples(seed);
        ck_assert_msg(fabs((double)k - mean) <= 5 * sqrt(var), "seed %u: %ld samples, %.1f expected (+-%.1f)", seed,
                      k, mean, 5 * sqrt(var));
        sum += (double)k;
        sum2 += (double)k * (double)k;
    }
    double m = sum / SEEDS, s2 = (sum2 - SEEDS * m * m) / (SEEDS - 1);
    printf("seeds: mean %.1f samples (binomial %.1f), variance %.1f (binomial %.1f)\n", m, mean, s2, var);
    ck_assert_msg(s2 / var >= 0.25 && s2 / var <= 2.6, "the spread over %d seeds: variance %.1f, binomial %.1f",
                  SEEDS, s2, var);
}
END_TEST

/* Whether libgcc_s is mapped in this process. */
static bool libgcc_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) found = strstr(line, "libgcc_s") != NULL;
    fclose(f);
    return found;
}

/* A child with the profile off at start-up: libgcc_s is not mapped; armed
 * at run time, it is, and the walks agree on what is sampled next. */
START_TEST(test_libgcc_child_body) {
    printf("at-start=%d\n", libgcc_mapped());
    ck_assert_int_eq(sefer_config_set("profile.unwinder", "check"), 0);
    ck_assert_int_eq(sefer_config_set("profile.sample_bytes", "1"), 0);
    printf("armed=%d\n", libgcc_mapped());
    uint64_t s0 = st_stats().profile_samples;
    for (int i = 0; i < 100; i++) sefer_free(sefer_malloc(100));
    printf("samples=%llu disagreements=%llu\n", (unsigned long long)(st_stats().profile_samples - s0),
           (unsigned long long)st_stats().profile_unwind_disagreements);
    fflush(stdout);
}
END_TEST

START_TEST(test_libgcc_only_when_wanted) {
    char out[4096];
    char *const extra_env[] = {"SEFER_PROFILE_SAMPLE_BYTES=0", NULL}, *const args[] = {"libgcc-child", NULL};
    int status = st_run_self(extra_env, args, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, out);
    /* (a sanitizer's runtime maps it in every build but the release one) */
    const char *san = getenv("ST_B_SANITIZE");
    if (san == NULL || strcmp(san, "none") == 0)
        ck_assert_msg(strstr(out, "at-start=0") != NULL, "libgcc_s mapped with the profile off: %s", out);
    ck_assert_msg(strstr(out, "armed=1") != NULL, "libgcc_s not loaded when the profile was armed: %s", out);
    unsigned long long samples = 0, differ = 1;
    const char *at = strstr(out, "samples=");
    ck_assert_msg(at != NULL && sscanf(at, "samples=%llu disagreements=%llu", &samples, &differ) == 2 &&
                      samples >= 50 && differ == 0,
                  "sampled after arming: %s", out);
    /* and in this process, armed from the start, it is there */
    ck_assert(libgcc_mapped());
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("rate1");
    tcase_set_timeout(tc, 240);
    if (argc > 1 && strcmp(argv[1], "levels-child") == 0) {
        tcase_add_test(tc, test_levels_child_body);
    } else if (argc > 1 && strcmp(argv[1], "steady-child") == 0) {
        tcase_add_test(tc, test_steady_child_body);
    } else if (argc > 1 && strcmp(argv[1], "armed-later-child") == 0) {
        tcase_add_test(tc, test_armed_later_child_body);
    } else if (argc > 1 && strcmp(argv[1], "realloc-child") == 0) {
        tcase_add_test(tc, test_realloc_child_body);
    } else if (argc > 1 && strcmp(argv[1], "steady-l2-child") == 0) {
        tcase_add_test(tc, test_steady_l2_child_body);
    } else if (argc > 1 && strcmp(argv[1], "fifo-child") == 0) {
        tcase_add_test(tc, test_fifo_child_body);
    } else if (argc > 1 && strcmp(argv[1], "aligned-child") == 0) {
        tcase_add_test(tc, test_aligned_child_body);
    } else if (argc > 1 && strcmp(argv[1], "seed-child") == 0) {
        tcase_add_test(tc, test_seed_child_body);
    } else if (argc > 1 && strcmp(argv[1], "libgcc-child") == 0) {
        tcase_add_test(tc, test_libgcc_child_body);
    } else {
        tcase_add_test(tc, test_libgcc_only_when_wanted);
        tcase_add_test(tc, test_seeds_spread);
        tcase_add_test(tc, test_steady_class);
        tcase_add_test(tc, test_realloc_in_place);
        tcase_add_test(tc, test_aligned_countdown);
        tcase_add_test(tc, test_threads_cross_frees);
        tcase_add_test(tc, test_thread_churn);
        tcase_add_test(tc, test_fork_busy);
        tcase_add_test(tc, test_guard_levels);
    }
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
