/* test_memlimit.c - memory.limit (lib/memlimit.c): the limit read from a
 * cgroup, the soft threshold's purge, the hard limit's refusals (test
 * limits-memory).
 *
 * Links the fault-injection variant of libsefer: sefer_test_cgroup_files
 * points memory.limit = auto at a cgroup tree the test writes under a
 * temporary folder, and sefer_test_clock_ms stops sefer's clock, so that no
 * delayed decommit happens on its own and every figure below moves only
 * because of what the case does.
 *
 *   cgroup_v2          the smallest memory.max of the cgroup and its
 *                      ancestors ("max" is none)
 *   cgroup_v1          memory.limit_in_bytes of the memory controller's
 *                      line; v1's "no limit" (about 2^63) is none
 *   cgroup_none        no limit file anywhere: no limit, no headroom
 *   knob_text          a size, auto and 0 as values, and a refused text
 *   soft_purges        committed memory crossing memory.soft_percent of the
 *                      limit purges: the large cache, this heap's waiting
 *                      pages at once, another live thread's at its next
 *                      page allocation
 *   purges_sampled_pages  the purge also takes the pages a medium class
 *                      keeps for its sampled blocks (the profile at 1 B)
 *   hard_fails         memory.limit_action = fail: allocations that would
 *                      pass the limit return NULL with ENOMEM (spans and
 *                      pages both), are counted, and work again once
 *                      memory is freed; with purge nothing is refused
 *   thp (optional: test limits-memory-thp, skipped on a kernel without
 *                      transparent huge pages)  memory.thp: never marks a
 *                      new span's mapping no-huge-page (smaps' VmFlags
 *                      "nh"), madvise marks it huge-page ("hg"), system
 *                      neither
 *
 * Prefixed API only, so it runs in every build (the ASan build runs the
 * tests named limits*). */
#define _GNU_SOURCE
#include "sefer_test.h"

#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>

#ifndef SEFER_FAULT_INJECTION
#error "test_memlimit.c needs the fault-injection variant of libsefer (sefer_test_cgroup_files)"
#endif

/* ---- a cgroup tree of the test's own ---------------------------------------- */

static char tree[256];

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void tree_remove(void)
{
    nftw(tree, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh folder, removed when the case's process exits. */
static void tree_start(void)
{
    snprintf(tree, sizeof tree, "/tmp/sefer-memlimit-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tree));
    atexit(tree_remove);
}

/* Writes `text` to tree/rel, making the folders on the way. */
static void tree_write(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tree, rel);
    for (char *p = path + strlen(tree) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* memory.limit = auto, worked out again from the tree (proc: what
 * /proc/self/cgroup says); returns the limit it found. */
static uint64_t limit_from_tree(const char *proc)
{
    char proc_path[512], root[512];
    tree_write("proc-self-cgroup", proc);
    snprintf(proc_path, sizeof proc_path, "%s/proc-self-cgroup", tree);
    snprintf(root, sizeof root, "%s/sys-fs-cgroup", tree);
    sefer_test_cgroup_files(proc_path, root);
    ST_KNOB_SET("memory.limit", "auto");
    return st_stats().memory_limit;
}

START_TEST(test_memlimit_cgroup_v2)
{
    tree_start();
    tree_write("sys-fs-cgroup/svc/memory.max", "104857600\n");
    tree_write("sys-fs-cgroup/svc/worker/memory.max", "max\n");
    uint64_t got = limit_from_tree("0::/svc/worker\n");
    ck_assert_msg(got == 100 * ST_MIB, "v2, parent at 100 MiB, child max: limit %" PRIu64, got);
    tree_write("sys-fs-cgroup/svc/worker/memory.max", "52428800\n");
    got = limit_from_tree("0::/svc/worker\n");
    ck_assert_msg(got == 50 * ST_MIB, "v2, child at 50 MiB under 100: limit %" PRIu64, got);
    struct sefer_stats s = st_stats();
    ck_assert_uint_eq(s.memory_headroom, s.memory_limit - s.bytes_committed);
}
END_TEST

START_TEST(test_memlimit_cgroup_v1)
{
    tree_start();
    tree_write("sys-fs-cgroup/memory/svc/memory.limit_in_bytes", "73400320\n");
    uint64_t got = limit_from_tree("12:cpu,cpuacct:/other\n5:memory:/svc\n1:name=systemd:/x\n");
    ck_assert_msg(got == 70 * ST_MIB, "v1 memory line: limit %" PRIu64, got);
    tree_write("sys-fs-cgroup/memory/svc/memory.limit_in_bytes", "9223372036854771712\n");
    got = limit_from_tree("12:cpu,cpuacct:/other\n5:memory:/svc\n");
    ck_assert_msg(got == 0, "v1's no-limit value read as a limit of %" PRIu64, got);
}
END_TEST

START_TEST(test_memlimit_cgroup_none)
{
    tree_start();
    uint64_t got = limit_from_tree("0::/\n");
    ck_assert_msg(got == 0, "no limit file, yet a limit of %" PRIu64, got);
    ck_assert_uint_eq(st_stats().memory_headroom, 0);
    got = limit_from_tree("garbage without colons\n");
    ck_assert_msg(got == 0, "a malformed /proc/self/cgroup gave a limit of %" PRIu64, got);
}
END_TEST

START_TEST(test_memlimit_knob_text)
{
    char buf[64];
    ck_assert_int_eq(sefer_config_get("memory.limit", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "auto"); /* the default */
    ST_KNOB_SET("memory.limit", "64MiB");
    ck_assert_uint_eq(st_stats().memory_limit, 64 * ST_MIB);
    ck_assert_int_eq(sefer_config_get("memory.limit", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "67108864");
    ST_KNOB_SET("memory.limit", "0");
    ck_assert_uint_eq(st_stats().memory_limit, 0);
    errno = 0;
    ck_assert_int_eq(sefer_config_set("memory.limit", "lots"), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_msg(strstr(sefer_config_error(), "auto") != NULL, "the reason does not name auto: %s",
                  sefer_config_error());
    ck_assert_int_eq(sefer_config_set("memory.soft_percent", "5"), -1); /* below 10 */
}
END_TEST

/* ---- the soft threshold ------------------------------------------------------ */

#define BLOCK 256

static void **fill(size_t bytes, size_t size)
{
    size_t n = bytes / size;
    void **v = st_map(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        if ((v[i] = sefer_malloc(size)) == NULL)
            ck_abort_msg("block %zu of %zu B: NULL, errno %d", i, size, errno);
        memset(v[i], 0x33, size);
    }
    return v;
}

static pthread_barrier_t step;
static uint64_t other_before, other_after;

/* Another live thread: fills 24 MiB, frees it (its pages wait: the clock is
 * stopped), waits while the main thread grows past the soft threshold,
 * then allocates one block of a class it never used (a page allocation)
 * and waits again. */
static void *other_thread(void *arg)
{
    (void)arg;
    const size_t bytes = 24 * ST_MIB;
    void **v = fill(bytes, BLOCK);
    for (size_t i = 0; i < bytes / BLOCK; i++)
        sefer_free(v[i]);
    pthread_barrier_wait(&step); /* 1: its pages wait */
    pthread_barrier_wait(&step); /* 2: the main thread passed the threshold */
    other_before = st_stats().bytes_committed;
    void *p = sefer_malloc(3000);
    ck_assert_ptr_nonnull(p);
    other_after = st_stats().bytes_committed;
    sefer_free(p);
    pthread_barrier_wait(&step); /* 3 */
    return NULL;
}

START_TEST(test_memlimit_soft_purges)
{
    sefer_test_clock_ms(1000000000);
    ST_KNOB_SET("decommit.policy", "adaptive");
    ST_KNOB_SET("memory.limit", "96MiB");
    ST_KNOB_SET("memory.soft_percent", "50"); /* 48 MiB */
    pthread_barrier_init(&step, NULL, 2);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_barrier_wait(&step); /* 1 */
    struct sefer_stats s0 = st_stats();
    /* 32 MiB live in 64 KiB blocks (medium pages): committed passes 48 MiB */
    void **v = fill(32 * ST_MIB, 64 * 1024);
    struct sefer_stats s1 = st_stats();
    pthread_barrier_wait(&step); /* 2 */
    pthread_barrier_wait(&step); /* 3 */
    pthread_join(t, NULL);
    printf("committed %.1f MiB with the other thread's 24 MiB waiting, %.1f MiB after growing by 32 MiB; "
           "the other thread's page allocation took it from %.1f to %.1f MiB; %" PRIu64 " purges\n",
           (double)s0.bytes_committed / ST_MIB, (double)s1.bytes_committed / ST_MIB,
           (double)other_before / ST_MIB, (double)other_after / ST_MIB,
           s1.memory_limit_purges - s0.memory_limit_purges);
    fflush(stdout);
    ck_assert_msg(s0.bytes_committed >= 24 * ST_MIB, "the other thread's pages were not waiting (%" PRIu64 " B)",
                  s0.bytes_committed);
    ck_assert_msg(ST_DELTA(s1, s0, memory_limit_purges) >= 1, "committed %" PRIu64 " B passed 48 MiB: no purge",
                  s1.bytes_committed);
    /* the purge takes the other thread's waiting pages at once, through
     * its heap's segment lock (it sleeps on the barrier meanwhile) */
    ck_assert_msg(s1.bytes_committed + 16 * ST_MIB <= s0.bytes_committed + 32 * ST_MIB,
                  "the other thread kept its waiting pages past the purge: %" PRIu64 " B before, %" PRIu64
                  " B after growing by 32 MiB",
                  s0.bytes_committed, s1.bytes_committed);
    ck_assert_msg(other_after <= other_before + ST_MIB, "its next page allocation grew committed memory by %" PRIu64 " B",
                  other_after - other_before);
    for (size_t i = 0; i < 32 * ST_MIB / (64 * 1024); i++)
        sefer_free(v[i]);
}
END_TEST

/* The profile keeps a medium class's page for sampled blocks between
 * samples, also through a heap's collects (page.c, sf_page_collect_heap_ex),
 * but not through the soft threshold's purge: 12 such pages (1 MiB each,
 * committed) go back when this heap runs its purge at its next slow path. */
START_TEST(test_memlimit_purges_sampled_pages)
{
    sefer_test_clock_ms(1000000000);
    ST_KNOB_SET("decommit.policy", "adaptive");
    ST_KNOB_SET("profile.sample_bytes", "1"); /* every block sampled */
    static const size_t sizes[] = {10000, 12000, 14000, 16000, 20000, 24000,
                                   28000, 32000, 40000, 48000, 56000, 64000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = sefer_malloc(sizes[i]);
        ck_assert_ptr_nonnull(p);
        memset(p, 0x55, sizes[i]);
        sefer_free(p);
    }
    struct sefer_stats s0 = st_stats();
    /* a limit whose soft threshold (50 %) is already behind: the next page
     * committed purges, and this heap collects at its next slow path */
    char limit[32];
    snprintf(limit, sizeof limit, "%" PRIu64, s0.bytes_committed + 8 * ST_MIB);
    ST_KNOB_SET("memory.soft_percent", "50");
    ST_KNOB_SET("memory.limit", limit);
    void *a = sefer_malloc(90000); /* a class not used yet: a page committed */
    void *b = sefer_malloc(110000); /* the heap's next slow path: its purge */
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    struct sefer_stats s1 = st_stats();
    printf("sampled medium pages: committed %.1f MiB before the purge, %.1f MiB after (%" PRIu64 " purges)\n",
           (double)s0.bytes_committed / ST_MIB, (double)s1.bytes_committed / ST_MIB,
           s1.memory_limit_purges - s0.memory_limit_purges);
    fflush(stdout);
    ck_assert_int_ge(ST_DELTA(s1, s0, memory_limit_purges), 1);
    ck_assert_msg(s1.bytes_committed + 6 * ST_MIB <= s0.bytes_committed,
                  "the pages kept for sampled blocks outlived the purge: %" PRIu64 " B committed before, %" PRIu64
                  " B after",
                  s0.bytes_committed, s1.bytes_committed);
    sefer_free(a);
    sefer_free(b);
    ST_KNOB_SET("profile.sample_bytes", "0");
}
END_TEST

/* ---- the hard limit ---------------------------------------------------------- */

/* Allocates blocks of `size` until one is refused or `max` bytes were
 * given; returns how many were given (v has room for max / size). */
static size_t fill_until_refused(void **v, size_t size, size_t max, int *err)
{
    size_t n = 0;
    *err = 0;
    for (; n < max / size; n++) {
        errno = 0;
        if ((v[n] = sefer_malloc(size)) == NULL) {
            *err = errno;
            break;
        }
        memset(v[n], 0x44, size);
    }
    return n;
}

static void hard_limit_case(size_t size)
{
    ST_KNOB_SET("memory.limit", "48MiB");
    ST_KNOB_SET("memory.limit_action", "fail");
    void **v = st_map(96 * ST_MIB / size * sizeof *v);
    struct sefer_stats s0 = st_stats();
    int err = 0;
    size_t n = fill_until_refused(v, size, 96 * ST_MIB, &err);
    struct sefer_stats s1 = st_stats();
    printf("%zu B blocks under a hard limit of 48 MiB: %zu given (%.1f MiB), then errno %d; committed %.1f MiB\n",
           size, n, (double)(n * size) / ST_MIB, err, (double)s1.bytes_committed / ST_MIB);
    ck_assert_msg(err == ENOMEM, "no refusal after %zu blocks of %zu B (errno %d)", n, size, err);
    ck_assert_msg(s1.bytes_committed <= 48 * ST_MIB, "committed %" PRIu64 " B, past the limit", s1.bytes_committed);
    ck_assert_msg(n * size >= 40 * ST_MIB, "refused after only %zu bytes", n * size);
    /* one refused call, one refusal and one ENOMEM counted (at level 1,
     * where this runs; levels 2-3's class path once counted two refusals a
     * call, found by a review and checked by hand, 4b3a033) */
    ck_assert_int_eq(ST_DELTA(s1, s0, memory_limit_refusals), 1);
    ck_assert_int_eq(ST_DELTA(s1, s0, enomem), 1);
    for (size_t i = 0; i < n / 2; i++)
        sefer_free(v[i]);
    void *again = sefer_malloc(size);
    ck_assert_msg(again != NULL, "refused again after half was freed (errno %d)", errno);
    sefer_free(again);
    for (size_t i = n / 2; i < n; i++)
        sefer_free(v[i]);
    /* purge: the kernel decides, sefer refuses nothing */
    ST_KNOB_SET("memory.limit_action", "purge");
    n = fill_until_refused(v, size, 64 * ST_MIB, &err);
    ck_assert_msg(err == 0, "with memory.limit_action = purge %zu blocks were given, then errno %d", n, err);
    for (size_t i = 0; i < n; i++)
        sefer_free(v[i]);
}

START_TEST(test_memlimit_hard_fails_spans)
{
    hard_limit_case(3 * ST_MIB);
}
END_TEST

START_TEST(test_memlimit_hard_fails_pages)
{
    hard_limit_case(1024);
}
END_TEST

/* ---- memory.thp ----------------------------------------------------------------- */

/* The VmFlags line of the mapping holding p, from /proc/self/smaps. */
static void vmflags_of(const void *p, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_msg(f != NULL, "cannot read /proc/self/smaps: %s", strerror(errno));
    char line[512];
    bool inside = false;
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, len, "%s", line + 8);
            break;
        }
    }
    fclose(f);
    ck_assert_msg(out[0] != '\0', "no VmFlags for %p in /proc/self/smaps", p);
}

static bool has_flag(const char *flags, const char *flag)
{
    char padded[8];
    snprintf(padded, sizeof padded, " %s ", flag);
    char line[600];
    snprintf(line, sizeof line, " %s ", flags);
    for (char *c = line; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return strstr(line, padded) != NULL;
}

/* A span in a fresh mapping (the cache emptied first: a cached span keeps
 * the advice it was mapped with), under memory.thp = `mode`. */
static void thp_case(const char *mode, const char *want, const char *not_want)
{
    ST_KNOB_SET("memory.thp", mode);
    sefer_trim();
    void *p = sefer_malloc(40 * ST_MIB);
    ck_assert_ptr_nonnull(p);
    char flags[512];
    vmflags_of(p, flags, sizeof flags);
    printf("memory.thp = %s: VmFlags%s", mode, flags);
    if (want)
        ck_assert_msg(has_flag(flags, want), "memory.thp = %s: no %s in VmFlags:%s", mode, want, flags);
    if (not_want)
        ck_assert_msg(!has_flag(flags, not_want), "memory.thp = %s: %s in VmFlags:%s", mode, not_want, flags);
    sefer_free(p);
}

START_TEST(test_memlimit_thp)
{
    thp_case("never", "nh", "hg");
    thp_case("madvise", "hg", "nh");
    thp_case("system", NULL, "hg");
    thp_case("system", NULL, "nh");
}
END_TEST

static const char *why_no_thp(void)
{
    return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0
               ? NULL
               : "the kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)";
}

int main(int argc, char **argv)
{
    Suite *s = suite_create("limits-memory");
    TCase *tc = tcase_create("memlimit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_memlimit_cgroup_v2);
    tcase_add_test(tc, test_memlimit_cgroup_v1);
    tcase_add_test(tc, test_memlimit_cgroup_none);
    tcase_add_test(tc, test_memlimit_knob_text);
    tcase_add_test(tc, test_memlimit_soft_purges);
    tcase_add_test(tc, test_memlimit_purges_sampled_pages);
    tcase_add_test(tc, test_memlimit_hard_fails_spans);
    tcase_add_test(tc, test_memlimit_hard_fails_pages);
    suite_add_tcase(s, tc);
    TCase *thp = st_optional_case(s, "thp", why_no_thp);
    tcase_add_test(thp, test_memlimit_thp);
    return st_main(s, argc, argv);
}
