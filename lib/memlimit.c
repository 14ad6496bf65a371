/* memlimit.c - the process's memory limit (memory.limit) and what sefer does
 * as its committed memory nears it.
 *
 * A service in a container is killed by the OOM killer when its cgroup's
 * memory passes memory.max (v2) or memory.limit_in_bytes (v1), whether or
 * not the allocator holds freed pages it would have given back a moment
 * later.  So sefer learns the limit (memory.limit = auto, the default:
 * the cgroup's, read at start-up and whenever the knob is set; or a size;
 * 0 for none) and watches its committed memory (stats.bytes_committed, what
 * it has made resident and not given back) against it:
 *
 *   soft  memory.soft_percent of the limit.  Crossing it purges at once:
 *         the large cache is emptied, the calling thread's and abandoned
 *         heaps' waiting pages are decommitted, and every heap returns its
 *         empty pages and decommits its waiting ones at its next
 *         allocation slow path (a new pressure epoch; no thread may touch
 *         another's heap).  Counted in memory_limit_purges and recorded
 *         as a memory_pressure event.
 *         While committed memory stays above the threshold, the next purge
 *         waits until it has grown by 1/32 of the limit more, so a program
 *         living near its limit does not purge on every page.
 *   hard  the limit itself.  With memory.limit_action = fail, memory that
 *         would take committed memory past it is refused (after a purge):
 *         the allocation fails with ENOMEM, like segments.max, and is
 *         counted in memory_limit_refusals.  With purge (the default) sefer
 *         only purges, and the kernel decides.
 *
 * What the cgroup counts and sefer does not: the program's code, stacks,
 * page cache and memory from other allocators.  The soft threshold's
 * margin (10 % by default) is for those; a program with large other uses
 * should set memory.limit itself.
 *
 * The checks sit where memory becomes committed (segment.c: commit_add and
 * the callers that can still refuse), never on the fast paths: a page is
 * committed once per 64 KiB or 1 MiB of blocks. */
#include "internal.h"

#include <fcntl.h>
#include <unistd.h>

/* committed memory above this: sf_memlimit_pressure (UINT64_MAX: no limit) */
_Atomic uint64_t sf_memlimit_next = UINT64_MAX;
_Atomic uint64_t sf_memlimit_hard = UINT64_MAX;
_Atomic uint32_t sf_memlimit_epoch;
static _Atomic uint64_t limit_bytes; /* 0: none */
static _Atomic uint64_t soft_bytes;
static _Atomic bool refusal_reported;
/* One purge at a time (a thread that finds one running goes on: it is
 * purging for it).  Plain pthread calls, not sf_lock: lock statistics
 * count the locks that guard data, and this one guards none. */
static pthread_mutex_t purge_lock = PTHREAD_MUTEX_INITIALIZER;

#define CGROUP_PATH_MAX 4096

static const char *proc_cgroup_file = "/proc/self/cgroup";
static const char *cgroup_root = "/sys/fs/cgroup";

#ifdef SEFER_FAULT_INJECTION
/* Tests point the reader at a cgroup tree of their own. */
SEFER_EXPORT void sefer_test_cgroup_files(const char *proc_cgroup, const char *root) {
    proc_cgroup_file = proc_cgroup ? proc_cgroup : "/proc/self/cgroup";
    cgroup_root = root ? root : "/sys/fs/cgroup";
}
#endif

/* Reads a small file whole (NUL-terminated); its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len) {
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

/* A limit file's value: bytes, or 0 for none ("max", v1's "no limit" of
 * about 2^63, a file that is missing or malformed). */
static uint64_t read_limit_file(const char *path) {
    char text[64];
    if (read_small(path, text, sizeof text) <= 0) return 0;
    if (strncmp(text, "max", 3) == 0) return 0;
    uint64_t v = 0;
    const char *p = text;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    return v >= (1ull << 62) ? 0 : v;
}

/* The smallest limit of the cgroup at `dir` (under the root) and its
 * ancestors: a parent's limit binds its children too. */
static uint64_t limit_up_the_tree(const char *mount, const char *dir, const char *file) {
    char path[CGROUP_PATH_MAX];
    uint64_t best = 0;
    size_t dlen = strlen(dir);
    while (dlen > 0 && dir[dlen - 1] == '/') dlen--;
    for (;;) {
        sf_str_t s;
        sf_str_init(&s, path, sizeof path);
        sf_str_add(&s, mount);
        sf_str_addn(&s, dir, dlen);
        sf_str_add(&s, "/");
        sf_str_add(&s, file);
        if (s.len + 1 < sizeof path) {
            uint64_t v = read_limit_file(path);
            if (v != 0 && (best == 0 || v < best)) best = v;
        }
        if (dlen == 0) break;
        while (dlen > 0 && dir[dlen - 1] != '/') dlen--; /* the parent */
        while (dlen > 0 && dir[dlen - 1] == '/') dlen--;
    }
    return best;
}

/* Whether the comma-separated list [list, end) names `name`. */
static bool list_has(const char *list, const char *end, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        if ((size_t)(e - p) == n && memcmp(p, name, n) == 0) return true;
        p = e + 1;
    }
    return false;
}

/* The cgroup's memory limit in bytes (v2, else v1), 0 for none or unknown. */
static uint64_t cgroup_limit(void) {
    char text[CGROUP_PATH_MAX], mount[CGROUP_PATH_MAX];
    if (read_small(proc_cgroup_file, text, sizeof text) <= 0) return 0;
    uint64_t v2 = 0, v1 = 0;
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        /* "ID:CONTROLLERS:PATH" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 != NULL && c2[1] == '/') {
            sf_str_t s;
            sf_str_init(&s, mount, sizeof mount);
            sf_str_add(&s, cgroup_root);
            if (c2 == c1 + 1) { /* v2: "0::/path" */
                v2 = limit_up_the_tree(mount, c2 + 1, "memory.max");
            } else if (list_has(c1 + 1, c2, "memory")) {
                sf_str_add(&s, "/memory");
                v1 = limit_up_the_tree(mount, c2 + 1, "memory.limit_in_bytes");
            }
        }
        if (!nl) break;
        line = nl + 1;
    }
    return v2 ? v2 : v1;
}

/* Works out the limit from the knobs (at start-up and when memory.limit,
 * memory.soft_percent or memory.limit_action is set). */
void sf_memlimit_refresh(void) {
    uint64_t knob = sf_knob(SF_KNOB_MEMORY_LIMIT);
    uint64_t limit = knob == SF_KNOB_AUTO ? cgroup_limit() : knob;
    uint64_t soft = limit / 100 * sf_knob(SF_KNOB_MEMORY_SOFT_PERCENT);
    atomic_store(&limit_bytes, limit);
    atomic_store(&soft_bytes, soft);
    atomic_store(&sf_memlimit_next, limit ? soft : UINT64_MAX);
    bool fail = limit != 0 && sf_knob(SF_KNOB_MEMORY_LIMIT_ACTION) == SF_LIMIT_FAIL;
    atomic_store(&sf_memlimit_hard, fail ? limit : UINT64_MAX);
}

uint64_t sf_memlimit_bytes(void) { return atomic_load_explicit(&limit_bytes, memory_order_relaxed); }

/* Purges what can be purged from here; returns the bytes given back. */
static size_t purge_all(void) {
    uint64_t before = atomic_load(&sf_gstats.decommitted_total);
    atomic_fetch_add(&sf_memlimit_epoch, 1); /* every heap, at its next slow path */
    sf_heaps_release_waiting();               /* this thread's heap and abandoned ones */
    sf_cache_purge(true);
    return (size_t)(atomic_load(&sf_gstats.decommitted_total) - before);
}

/* Committed memory passed sf_memlimit_next (commit_add). */
void sf_memlimit_pressure(uint64_t committed) {
    if (pthread_mutex_trylock(&purge_lock) != 0) return; /* another thread is purging */
    uint64_t limit = atomic_load(&limit_bytes), soft = atomic_load(&soft_bytes);
    if (limit != 0 && committed > atomic_load(&sf_memlimit_next)) {
        size_t released = purge_all();
        sf_stat_add(&sf_gstats.memlimit_purges, 1);
        uint64_t now = atomic_load(&sf_gstats.committed);
        sf_event_memory_pressure(committed, limit, released);
        /* the next purge: at the threshold again once below it, else after
         * another 1/32 of the limit */
        atomic_store(&sf_memlimit_next, now < soft ? soft : now + limit / 32);
    }
    pthread_mutex_unlock(&purge_lock);
}

/* Whether `bytes` more may be committed (memory.limit_action = fail). */
bool sf_memlimit_admit_slow(size_t bytes) {
    uint64_t limit = atomic_load(&sf_memlimit_hard);
    if (limit == UINT64_MAX) return true;
    pthread_mutex_lock(&purge_lock);
    purge_all();
    sf_stat_add(&sf_gstats.memlimit_purges, 1);
    pthread_mutex_unlock(&purge_lock);
    uint64_t c = atomic_load(&sf_gstats.committed);
    if (c <= limit && bytes <= limit - c) return true;
    sf_stat_add(&sf_gstats.memlimit_refusals, 1);
    if (!atomic_exchange(&refusal_reported, true))
        sf_write_stderr("sefer: memory.limit reached: allocations fail with ENOMEM until memory is freed "
                        "(memory.limit_action = fail; reported once)\n");
    return false;
}

/* The child of a fork: a purge another thread was running did not come
 * along, and its lock guards no data. */
void sf_memlimit_after_fork_child(void) { pthread_mutex_init(&purge_lock, NULL); }
