/* test_unwind.c - the heap profile's two stack walks give the same frames.
 *
 * Every allocation is sampled (profile.sample_bytes = 1, tests/meson.build)
 * with profile.unwinder = check: each stack is read by sefer's table walk
 * (lib/unwind.c) and by libgcc's unwinder, and any difference is counted in
 * profile_unwind_disagreements.  Cases:
 *
 *   - depths 1 to 60 below a test function, frames of every size, from the
 *     main thread and from other threads;
 *   - in a fork child;
 *   - in a signal handler: the signal frame is what the table walk leaves
 *     to libgcc (a fallback, counted), with the same frames;
 *   - across dlclose: a library allocates (its blocks stay live and
 *     sampled), is unloaded, and a copy with other frame sizes but the same
 *     code layout is loaded, usually at the same address; the rules of the
 *     first must not be used for the second, and the first's blocks leave
 *     the profile when freed;
 *   - the default walk (table) keeps the stacks libgcc would give.
 *
 * Through the sefer_* API only, so that the ASan and TSan builds run it too
 * (its name contains "tsan"). */
#include "sefer_test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

static uint64_t disagreements(void) { return st_stats().profile_unwind_disagreements; }

static void *alloc64(size_t n) { return sefer_malloc(n); }

/* Frames of different sizes on the way down, then an allocation. */
__attribute__((noinline)) static void *down(int depth, int width) {
    volatile char pad[16 + (depth % 4) * 96];
    pad[0] = (char)width;
    void *p;
    if (depth <= 1) {
        p = sefer_malloc(64 + (size_t)width);
    } else if (depth % 3 == 0) {
        char *big = __builtin_alloca(32 + (size_t)(depth * width) % 512); /* a frame with rbp as its CFA */
        big[0] = pad[0];
        p = down(depth - 1, width + big[0] % 2);
    } else {
        p = down(depth - 1, width);
    }
    __asm__ __volatile__("" : "+r"(p) : : "memory"); /* not a tail call */
    pad[1] = pad[0];
    return p;
}

static void walk_depths(void) {
    for (int depth = 1; depth <= 60; depth++) {
        for (int k = 0; k < 4; k++) {
            void *p = down(depth, k);
            ck_assert_ptr_nonnull(p);
            sefer_free(p);
        }
    }
}

START_TEST(test_depths) {
    ST_KNOB_SET("profile.unwinder", "check");
    uint64_t s0 = st_stats().profile_samples;
    walk_depths();
    struct sefer_stats st = st_stats();
    ck_assert_uint_ge(st.profile_samples - s0, 240);
    ck_assert_uint_eq(st.profile_unwind_disagreements, 0);
    ck_assert_uint_eq(st.profile_unwind_fallbacks, 0);
}
END_TEST

static void *thread_body(void *arg) {
    (void)arg;
    walk_depths();
    return NULL;
}

START_TEST(test_threads) {
    ST_KNOB_SET("profile.unwinder", "check");
    pthread_t t[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, thread_body, NULL), 0);
    walk_depths();
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    ck_assert_uint_eq(disagreements(), 0);
}
END_TEST

START_TEST(test_fork_child) {
    ST_KNOB_SET("profile.unwinder", "check");
    walk_depths(); /* rules known before the fork */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        walk_depths();
        _exit(disagreements() == 0 ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: status %#x", status);
}
END_TEST

static void *volatile from_handler;

static void on_signal(int sig) {
    (void)sig;
    from_handler = down(5, 1);
}

START_TEST(test_signal_frame) {
    ST_KNOB_SET("profile.unwinder", "check");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    uint64_t f0 = st_stats().profile_unwind_fallbacks;
    ck_assert_int_eq(raise(SIGUSR1), 0);
    ck_assert_ptr_nonnull(from_handler);
    sefer_free(from_handler);
    struct sefer_stats st = st_stats();
    ck_assert_uint_eq(st.profile_unwind_disagreements, 0);
#if !defined(__SANITIZE_THREAD__)
    /* (TSan runs handlers later, outside the signal frame) */
    ck_assert_msg(st.profile_unwind_fallbacks > f0, "the signal frame was not left to libgcc");
#else
    (void)f0;
#endif
}
END_TEST

#define LIB_BLOCKS 64

typedef void (*lib_alloc_fn)(void *(*)(size_t), void **, int, int, size_t);

static void *load(const char *env, lib_alloc_fn *fn, uintptr_t *base) {
    const char *path = getenv(env);
    ck_assert_msg(path != NULL, "%s is not set (tests/meson.build)", env);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
    *fn = (lib_alloc_fn)(uintptr_t)dlsym(h, "unwind_frames_alloc");
    ck_assert_ptr_nonnull((void *)(uintptr_t)*fn);
    Dl_info info;
    ck_assert_int_ne(dladdr((void *)(uintptr_t)*fn, &info), 0);
    *base = (uintptr_t)info.dli_fbase;
    return h;
}

START_TEST(test_dlclose) {
    ST_KNOB_SET("profile.unwinder", "check");
    static void *a_blocks[LIB_BLOCKS], *b_blocks[LIB_BLOCKS];
    lib_alloc_fn fa, fb;
    uintptr_t base_a, base_b;
    uint64_t live0 = st_stats().profile_live_samples;
    void *ha = load("UNWIND_LIB_A", &fa, &base_a);
    fa(alloc64, a_blocks, LIB_BLOCKS, 12, 64);
    ck_assert_int_eq(dlclose(ha), 0);
    void *hb = load("UNWIND_LIB_B", &fb, &base_b);
    fb(alloc64, b_blocks, LIB_BLOCKS, 12, 64);
    if (base_a != base_b)
        fprintf(stderr, "note: the second library loaded at %#lx, the first at %#lx: the same rules were "
                "not at stake\n", (unsigned long)base_b, (unsigned long)base_a);
    ck_assert_uint_eq(disagreements(), 0);
    /* (dlopen's own allocations are sampled too: count by differences) */
    uint64_t live1 = st_stats().profile_live_samples;
    ck_assert_uint_ge(live1, live0 + 2 * LIB_BLOCKS);
    /* the unloaded library's blocks leave the profile as any other */
    for (int i = 0; i < LIB_BLOCKS; i++) sefer_free(a_blocks[i]);
    ck_assert_uint_eq(st_stats().profile_live_samples, live1 - LIB_BLOCKS);
    for (int i = 0; i < LIB_BLOCKS; i++) sefer_free(b_blocks[i]);
    ck_assert_uint_eq(st_stats().profile_live_samples, live1 - 2 * LIB_BLOCKS);
    ck_assert_int_eq(dlclose(hb), 0);
}
END_TEST

/* The default walk gives, frame for frame, what check mode compared. */
START_TEST(test_table_default) {
    ck_assert_str_eq(st_knob_get("profile.unwinder"), "table");
    uint64_t s0 = st_stats().profile_samples;
    walk_depths();
    struct sefer_stats st = st_stats();
    ck_assert_uint_ge(st.profile_samples - s0, 240);
    ck_assert_uint_eq(st.profile_unwind_fallbacks, 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("unwind");
    TCase *tc = tcase_create("check");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_depths);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_fork_child);
    tcase_add_test(tc, test_signal_frame);
    tcase_add_test(tc, test_dlclose);
    tcase_add_test(tc, test_table_default);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
