/* test_profile_views.c - the heap profile's figures and views over real HTTP.
 *
 * Run with profile.sample_bytes = 64 KiB and a fixed seed
 * (tests/introspect/meson.build), so the figures repeat from run to run.
 *
 * The bound.  A site of N blocks of s bytes each, sampled at rate R, has
 * K ~ Binomial(N, p) samples with p = 1 - exp(-s/R), and its estimate is
 * K * s / p bytes (K / p blocks): unbiased, with relative standard
 * deviation sqrt((1 - p) / (N p)).  Each estimate must lie within 4 of
 * those deviations of the truth (a chance of about 6e-5 per site to fail
 * with another seed; with this seed the figures are fixed):
 *
 *   site             truth                         N p    4 sd
 *   hold_1k          64 MiB in 1 KiB blocks        1016   12.5 %
 *   hold_100         8 MiB in 100 B (112 B blocks)  143   33 %
 *   churn_4k         1 GiB of 4 KiB blocks, freed  15886  3.1 % (allocated)
 *   leak_256         16 MiB in 256 B blocks         255   25 %
 *
 * Bytes are block bytes (what bytes_in_blocks counts): the 100-byte site
 * holds 8 MiB / 100 * 112 bytes.  A site whose blocks were all freed holds
 * exactly 0 (its samples were all freed).  After POST /profile/mark, the
 * leaking site comes first in /profile/sites?since=mark.
 *
 * ?seconds=N (a delta, as Go's net/http/pprof serves it):
 *   delta-limits  0, -1, "2s" and 3601 are 400s; a client that shuts its
 *                 side down while it waits is answered 503 at once; with
 *                 SF_PPROF_DELTAS_MAX waiting a fifth is 503 and /stats
 *                 still answers; a stop
 *                 with deltas waiting returns and closes them (it must
 *                 resume them: libmicrohttpd aborts on a suspended one)
 *
 * Paced (profile.max_samples, its own run with the cap at 1000 a second:
 * tests/introspect/meson.build; every other case runs unpaced, the rate
 * fixed, for the bounds above):
 *   paced       64 MiB held in 1 KiB blocks as fast as one thread can: the
 *               process samples faster than the cap, the mean gap in force
 *               (profile_sample_bytes_now) rises above profile.sample_bytes,
 *               and the estimate is still within 4 deviations of the truth,
 *               the deviation taken at twice the highest gap seen (each
 *               block was sampled at a gap at most that: the gap doubles at
 *               most once between two looks, 256 blocks apart).  A sample
 *               weighed at profile.sample_bytes instead of the gap it was
 *               drawn at would read a fraction of the truth.  Allocating
 *               slowly after that, the gap comes back to sample_bytes.
 *
 * Optional cases (exit 77 without Go's pprof, package golang-go):
 *   pprof-live  `go tool pprof -top` on /debug/pprof/heap of this process
 *   pprof-many  /debug/pprof/allocs after 640 sites, each a function of
 *               its own (more than the encoder's tables hold at first),
 *               read back field by field: each address in one location,
 *               each name and file in one function (runs without Go)
 *   pprof-file  the same on the file `sefer run --profile FILE` writes
 *   pprof-abort the same when the program aborts on a double free
 *   pprof-delta /debug/pprof/heap?seconds=2 taken while one site grows and
 *               another is freed: the growing site alone allocated, the
 *               freed one negative in use, a duration of 2 s */
#include "itest.h"

#include <math.h>

#define RATE 65536.0
#define N_1K 65536
#define N_100 83886
#define N_CHURN 262144
#define N_LEAK 65536

static void *held_1k[N_1K], *held_100[N_100], *leaked[N_LEAK];

/* One function per site; the empty asm after the call keeps it from being a
 * tail call (which would leave no frame of the site on the stack). */
#define SITE(name, size)                                                   \
    __attribute__((noinline, used)) void *name(void) {                     \
        void *p = malloc(size);                                            \
        __asm__ __volatile__("" : "+r"(p) : : "memory");                  \
        return p;                                                          \
    }
SITE(hold_1k, 1024)
SITE(hold_100, 100)
SITE(churn_4k, 4096)
SITE(leak_256, 256)

static void make_sites(void) {
    for (int i = 0; i < N_1K; i++) held_1k[i] = hold_1k();
    for (int i = 0; i < N_100; i++) held_100[i] = hold_100();
    void *batch[256];
    for (int i = 0; i < N_CHURN; i += 256) {
        for (int j = 0; j < 256; j++) batch[j] = churn_4k();
        for (int j = 0; j < 256; j++) free(batch[j]);
    }
}

/* The site whose innermost frame is function fn, in a /profile/sites reply. */
static const cJSON *site_named(const cJSON *reply, const char *fn) {
    const cJSON *sites = it_item(reply, "sites");
    for (const cJSON *s = sites->child; s; s = s->next) {
        const cJSON *f = it_item(s, "frames")->child;
        const cJSON *name = f ? cJSON_GetObjectItemCaseSensitive(f, "function") : NULL;
        if (cJSON_IsString(name) && strcmp(name->valuestring, fn) == 0) return s;
    }
    return NULL;
}

static void check_estimate(const char *what, double got, double n, double s) {
    double p = 1 - exp(-s / RATE), truth = n * s, sd = sqrt((1 - p) / (n * p));
    ck_assert_msg(fabs(got - truth) <= 4 * sd * truth, "%s: estimated %.0f bytes, truth %.0f, bound +-%.1f %%", what,
                  got, truth, 400 * sd);
}

START_TEST(test_accuracy) {
    int port = it_start();
    make_sites();
    cJSON *j = it_json(port, "/profile/sites?limit=1000&by=allocated");
    ck_assert_uint_eq(it_u64(j, "rate"), (uint64_t)RATE);
    const cJSON *a = site_named(j, "hold_1k"), *b = site_named(j, "hold_100"), *c = site_named(j, "churn_4k");
    ck_assert_msg(a && b && c, "the three sites are not all in /profile/sites");
    check_estimate("hold_1k live", (double)it_u64(a, "live_bytes"), N_1K, 1024);
    check_estimate("hold_100 live", (double)it_u64(b, "live_bytes"), N_100, 112);
    check_estimate("churn_4k allocated", (double)it_u64(c, "allocated_bytes"), N_CHURN, 4096);
    ck_assert_uint_eq(it_u64(c, "live_bytes"), 0);
    ck_assert_uint_eq(it_u64(c, "live_samples"), 0);
    ck_assert_uint_gt(it_u64(c, "samples"), 0);
    /* each frame says where it is */
    const cJSON *f = it_item(a, "frames")->child;
    ck_assert_str_eq(it_str(f, "function"), "hold_1k");
    ck_assert_ptr_nonnull(strstr(it_str(f, "module"), "test_introspect_profile"));
    const cJSON *t = it_item(j, "totals");
    ck_assert_uint_eq(it_u64(t, "dropped"), 0);
    ck_assert_uint_ge(it_u64(t, "estimated_live_bytes"), it_u64(a, "live_bytes") + it_u64(b, "live_bytes"));
    ck_assert_uint_gt(it_u64(t, "bytes_in_blocks"), (uint64_t)N_1K * 1024);
    cJSON_Delete(j);

    /* the leak hunt: mark, leak, the leaking site first */
    it_resp_t r;
    it_request(port, "POST", "/profile/mark?name=before-leak", "Bearer profile-test", "", &r);
    ck_assert_msg(r.status == 200, "POST /profile/mark: %d %s", r.status, r.body);
    ck_assert_msg(strstr(r.body, "\"before-leak\"") != NULL, "mark reply: %s", r.body);
    it_free(&r);
    /* the mark is an event on the timeline, with its name */
    j = it_json(port, "/events");
    bool seen = false;
    for (const cJSON *e = it_item(j, "events")->child; e; e = e->next)
        if (strcmp(it_str(e, "kind"), "profile_mark") == 0) seen = strcmp(it_str(e, "name"), "before-leak") == 0;
    ck_assert_msg(seen, "no profile_mark event named before-leak in /events");
    cJSON_Delete(j);
    it_request(port, "POST", "/profile/mark?name=%01", "Bearer profile-test", "", &r);
    ck_assert_int_eq(r.status, 400);
    it_free(&r);
    it_request(port, "POST", "/profile/mark", NULL, "", &r);
    ck_assert_int_eq(r.status, 401);
    it_free(&r);
    for (int i = 0; i < N_LEAK; i++) leaked[i] = leak_256();
    j = it_json(port, "/profile/sites?since=mark&limit=5");
    const cJSON *first = it_item(j, "sites")->child;
    ck_assert_ptr_nonnull(first);
    ck_assert_str_eq(it_str(it_item(first, "frames")->child, "function"), "leak_256");
    check_estimate("leak_256 growth", (double)it_u64(first, "growth_bytes"), N_LEAK, 256);
    ck_assert(cJSON_IsTrue(it_item(it_item(j, "mark"), "set")));
    cJSON_Delete(j);

    /* the flame graph's input: stacks from main inwards */
    j = it_json(port, "/profile/stacks");
    const cJSON *st = it_item(j, "stacks")->child;
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_gt(it_u64(st, "bytes"), 0);
    cJSON_Delete(j);
    it_get(port, "/profile/sites?by=nothing", &r);
    ck_assert_int_eq(r.status, 400);
    it_free(&r);
}
END_TEST

static const char *unpaced_why_not(void) {
    const char *cap = getenv("SEFER_PROFILE_MAX_SAMPLES");
    return cap != NULL && strcmp(cap, "0") != 0 ? NULL : "run with SEFER_PROFILE_MAX_SAMPLES set (tests/introspect/meson.build)";
}

START_TEST(test_paced) {
    int port = it_start();
    uint64_t gap_max = 0;
    for (int i = 0; i < N_1K; i++) {
        held_1k[i] = hold_1k();
        if (i % 256 == 255) {
            uint64_t gap = st_stats().profile_sample_bytes_now;
            if (gap > gap_max) gap_max = gap;
        }
    }
    ck_assert_msg(gap_max > (uint64_t)RATE, "the gap in force never rose above profile.sample_bytes (%" PRIu64 ")",
                  gap_max);
    cJSON *j = it_json(port, "/profile/sites?limit=1000");
    ck_assert_uint_eq(it_u64(j, "rate"), (uint64_t)RATE);
    ck_assert_uint_ge(it_u64(j, "rate_now"), (uint64_t)RATE);
    const cJSON *a = site_named(j, "hold_1k");
    ck_assert_msg(a != NULL, "hold_1k is not in /profile/sites");
    double got = (double)it_u64(a, "live_bytes"), truth = (double)N_1K * 1024;
    double p = 1 - exp(-1024.0 / (2.0 * (double)gap_max)), sd = sqrt((1 - p) / (N_1K * p));
    ck_assert_msg(fabs(got - truth) <= 4 * sd * truth,
                  "paced: estimated %.0f bytes, truth %.0f, bound +-%.1f %% (gap up to %" PRIu64 " B, %" PRIu64
                  " live samples)",
                  got, truth, 400 * sd, gap_max, it_u64(a, "live_samples"));
    cJSON_Delete(j);
    for (int i = 0; i < N_1K; i++) free(held_1k[i]);
    /* allocating slowly, the gap comes back down to profile.sample_bytes:
     * 8 KiB a millisecond at most, 125 samples a second at the unpaced gap,
     * half of the quarter of the cap under which a window halves it
     * (waited for, up to 30 000 rounds of at least 1 ms) */
    uint64_t gap = 0;
    for (int round = 0; round < 30000 && (gap = st_stats().profile_sample_bytes_now) != (uint64_t)RATE; round++) {
        for (int i = 0; i < 8; i++) free(hold_1k());
        usleep(1000);
    }
    ck_assert_msg(gap == (uint64_t)RATE, "the gap in force stayed at %" PRIu64 " B", gap);
}
END_TEST

/* /metrics and /stats carry the profile's counters. */
START_TEST(test_counters) {
    int port = it_start();
    for (int i = 0; i < 1000; i++) held_1k[i] = hold_1k();
    it_resp_t r;
    it_get(port, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "sefer_profile_samples_total "));
    ck_assert_ptr_nonnull(strstr(r.body, "sefer_profile_dropped_total 0"));
    ck_assert_ptr_nonnull(strstr(r.body, "sefer_profile_bytes "));
    it_free(&r);
    cJSON *j = it_json(port, "/stats");
    ck_assert_uint_gt(it_u64(j, "profile_samples"), 0);
    ck_assert_uint_gt(it_u64(j, "profile_bytes"), 0);
    cJSON_Delete(j);
}
END_TEST

/* ---- Go's pprof ---------------------------------------------------------------- */

static const char *go_why_not(void) {
    return system("go version >/dev/null 2>&1") == 0 ? NULL : "no `go` (Debian package golang-go)";
}

/* Runs argv with stdout and stderr into out; returns the exit status. */
static int run_capture(char *const argv[], char *out, size_t cap) {
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        alarm(60);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd[0], out + n, cap - 1 - n)) > 0) n += (size_t)got;
    out[n] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

/* pprof's -top lists hold_1k and hold_100 as the first two functions. */
static void check_top(const char *source) {
    static char out[1 << 16];
    char tmp[] = "/tmp/sefer-pprof-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    setenv("PPROF_TMPDIR", tmp, 1);
    setenv("HOME", tmp, 1);
    char *argv[] = {"go", "tool", "pprof", "-top", "-nodecount=3", (char *)source, NULL};
    int status = run_capture(argv, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "go tool pprof %s failed:\n%s", source, out);
    const char *table = strstr(out, "flat%");
    ck_assert_msg(table != NULL, "no table in:\n%s", out);
    const char *first = strstr(table, "hold_1k"), *second = strstr(table, "hold_100");
    ck_assert_msg(first && second && first < second, "hold_1k, then hold_100, expected at the top:\n%s", out);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_pprof_live) {
    int port = it_start();
    for (int i = 0; i < N_1K; i++) held_1k[i] = hold_1k();
    for (int i = 0; i < N_100; i++) held_100[i] = hold_100();
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/debug/pprof/heap", port);
    check_top(url);
    it_resp_t r;
    it_get(port, "/debug/pprof/allocs", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert(r.len > 2 && (unsigned char)r.body[0] == 0x1f && (unsigned char)r.body[1] == 0x8b); /* gzip */
    it_free(&r);
}
END_TEST

/* ---- many sites -------------------------------------------------------------------- */

/* 640 sites, each its own function with its own call of malloc: more
 * locations and functions than the encoder's tables hold at first (1024
 * slots at a load of a half), so they grow while the profile is written
 * (introspect/pprof.c, loc_room). */
#define MANY_SIZE 65536
#define MANY_SITE(a, b, c) SITE(many_##a##b##c, MANY_SIZE)
#define MANY_TEN(a, b)                                                                             \
    MANY_SITE(a, b, 0) MANY_SITE(a, b, 1) MANY_SITE(a, b, 2) MANY_SITE(a, b, 3) MANY_SITE(a, b, 4) \
    MANY_SITE(a, b, 5) MANY_SITE(a, b, 6) MANY_SITE(a, b, 7) MANY_SITE(a, b, 8) MANY_SITE(a, b, 9)
#define MANY_HUNDRED(a)                                                                            \
    MANY_TEN(a, 0) MANY_TEN(a, 1) MANY_TEN(a, 2) MANY_TEN(a, 3) MANY_TEN(a, 4) MANY_TEN(a, 5)      \
    MANY_TEN(a, 6) MANY_TEN(a, 7) MANY_TEN(a, 8) MANY_TEN(a, 9)
MANY_HUNDRED(0) MANY_HUNDRED(1) MANY_HUNDRED(2) MANY_HUNDRED(3) MANY_HUNDRED(4) MANY_HUNDRED(5)
MANY_TEN(6, 0) MANY_TEN(6, 1) MANY_TEN(6, 2) MANY_TEN(6, 3)
#undef MANY_SITE
#define MANY_SITE(a, b, c) many_##a##b##c,
static void *(*const many_sites[])(void) = {
    MANY_HUNDRED(0) MANY_HUNDRED(1) MANY_HUNDRED(2) MANY_HUNDRED(3) MANY_HUNDRED(4) MANY_HUNDRED(5)
    MANY_TEN(6, 0) MANY_TEN(6, 1) MANY_TEN(6, 2) MANY_TEN(6, 3)};
#define N_MANY (sizeof many_sites / sizeof many_sites[0])
#define MANY_CALLS 8 /* a site unsampled: exp(-8 * 64 KiB / 64 KiB), 3e-4 */

/* The fields of a protobuf message: calls each(field, value, body, len) for
 * every field (value: a varint's; body: a length-delimited one's). */
typedef void pb_field_fn(unsigned field, uint64_t value, const unsigned char *body, size_t len, void *arg);
static uint64_t pb_varint(const unsigned char **p, const unsigned char *end) {
    uint64_t v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    ck_abort_msg("a varint runs past its message");
    return 0;
}
static void pb_fields(const unsigned char *p, size_t len, pb_field_fn *each, void *arg) {
    const unsigned char *end = p + len;
    while (p < end) {
        uint64_t key = pb_varint(&p, end), v = 0;
        const unsigned char *body = NULL;
        size_t n = 0;
        switch (key & 7) {
        case 0: v = pb_varint(&p, end); break;
        case 1: ck_assert(end - p >= 8); p += 8; break;
        case 2:
            n = (size_t)pb_varint(&p, end);
            ck_assert_msg(n <= (size_t)(end - p), "a field of %zu bytes runs past its message", n);
            body = p;
            p += n;
            break;
        case 5: ck_assert(end - p >= 4); p += 4; break;
        default: ck_abort_msg("wire type %u", (unsigned)(key & 7));
        }
        each((unsigned)(key >> 3), v, body, n, arg);
    }
}

typedef struct {
    uint64_t id, address, name, file; /* (a Location's id and address, a Function's id, name and file) */
} pb_entry_t;
typedef struct {
    pb_entry_t locs[4096], funcs[4096];
    size_t nlocs, nfuncs;
} pb_profile_t;
static void pb_location(unsigned field, uint64_t value, const unsigned char *body, size_t len, void *arg) {
    (void)body, (void)len;
    pb_entry_t *e = arg;
    if (field == 1) e->id = value;
    if (field == 3) e->address = value;
}
static void pb_function(unsigned field, uint64_t value, const unsigned char *body, size_t len, void *arg) {
    (void)body, (void)len;
    pb_entry_t *e = arg;
    if (field == 1) e->id = value;
    if (field == 2) e->name = value;
    if (field == 4) e->file = value;
}
static void pb_top(unsigned field, uint64_t value, const unsigned char *body, size_t len, void *arg) {
    (void)value;
    pb_profile_t *pr = arg;
    if (field == 4) { /* Location */
        ck_assert_uint_lt(pr->nlocs, 4096);
        pb_fields(body, len, pb_location, &pr->locs[pr->nlocs++]);
    } else if (field == 5) { /* Function */
        ck_assert_uint_lt(pr->nfuncs, 4096);
        pb_fields(body, len, pb_function, &pr->funcs[pr->nfuncs++]);
    }
}

static const char *gzip_why_not(void) {
    return system("gzip --version >/dev/null 2>&1") == 0 ? NULL : "no `gzip`";
}

START_TEST(test_pprof_many) {
    ck_assert_uint_eq(N_MANY, 640);
    int port = it_start();
    for (size_t i = 0; i < N_MANY; i++)
        for (int k = 0; k < MANY_CALLS; k++) free(many_sites[i]());
    it_resp_t r;
    it_get(port, "/debug/pprof/allocs", &r);
    ck_assert_int_eq(r.status, 200);
    /* gunzipped by gzip(1) (go tool pprof would merge what is written twice,
     * which is what this looks for) */
    char gz[] = "/tmp/sefer-pprof-many-XXXXXX";
    it_save_body(&r, gz);
    it_free(&r);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "gzip -dc < %s", gz);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    static unsigned char raw[1 << 22];
    size_t n = fread(raw, 1, sizeof raw, f);
    ck_assert_int_eq(pclose(f), 0);
    unlink(gz);
    ck_assert_msg(n > 0 && n < sizeof raw, "%zu bytes of profile", n);
    static pb_profile_t pr;
    memset(&pr, 0, sizeof pr);
    pb_fields(raw, n, pb_top, &pr);
    /* every address in one location, every (name, file) in one function
     * (a name alone may have two: a function with code inlined from
     * another file), and the ids 1, 2, ... in order: a table that lost its
     * keys as it grew would number the frames every site shares (this
     * test's, the runner's) again */
    for (size_t i = 0; i < pr.nlocs; i++) {
        ck_assert_uint_eq(pr.locs[i].id, i + 1);
        for (size_t k = 0; k < i; k++)
            ck_assert_msg(pr.locs[k].address != pr.locs[i].address, "address %#llx in locations %zu and %zu",
                          (unsigned long long)pr.locs[i].address, k + 1, i + 1);
    }
    for (size_t i = 0; i < pr.nfuncs; i++) {
        ck_assert_uint_eq(pr.funcs[i].id, i + 1);
        for (size_t k = 0; k < i; k++)
            ck_assert_msg(pr.funcs[k].name != pr.funcs[i].name || pr.funcs[k].file != pr.funcs[i].file,
                          "name %llu, file %llu in functions %zu and %zu", (unsigned long long)pr.funcs[i].name,
                          (unsigned long long)pr.funcs[i].file, k + 1, i + 1);
    }
    /* more keys than the tables' first 1024 slots hold at a half: a site's
     * malloc call each, and a function each */
    ck_assert_msg(pr.nlocs > N_MANY && pr.nfuncs > N_MANY, "%zu locations, %zu functions for %zu sites", pr.nlocs,
                  pr.nfuncs, N_MANY);
}
END_TEST

/* ---- ?seconds=N ------------------------------------------------------------------ */

struct delta_req {
    int port;
    char path[64];
    it_resp_t r;
};

static void *delta_get(void *arg)
{
    struct delta_req *d = arg;
    it_get(d->port, d->path, &d->r);
    return NULL;
}

static uint64_t requests_counted(int port)
{
    cJSON *j = it_json(port, "/stats");
    uint64_t n = it_u64(it_item(j, "introspect"), "requests");
    cJSON_Delete(j);
    return n;
}

/* Sends d->path from a thread and returns once the server has taken it in
 * (it counts a request as it begins it, and has copied the profile before
 * it answers the next: one thread serves them in turn), with `others`
 * requests of other threads in flight counted too. */
static pthread_t start_delta(struct delta_req *d)
{
    uint64_t base = requests_counted(d->port); /* (itself included) */
    pthread_t t = st_spawn(delta_get, d, 0);
    for (uint64_t mine = 1;; mine++) {
        if (requests_counted(d->port) > base + mine)
            return t;
        ck_assert_msg(mine < 100000, "the server never took %s in", d->path);
        usleep(1000);
    }
}

START_TEST(test_delta_limits) {
    int port = it_start();
    const char *bad[] = {"0", "-1", "2s", "3601", ""};
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[64];
        snprintf(path, sizeof path, "/debug/pprof/heap?seconds=%s", bad[i]);
        cJSON *j = it_json_status(port, path, 400);
        ck_assert_msg(strstr(it_str(j, "reason"), "seconds") != NULL, "%s: %s", path, it_str(j, "reason"));
        cJSON_Delete(j);
    }
    /* a client that gives up (shuts its side down) frees its place at once */
    int fd = it_connect(port);
    ck_assert_int_ge(fd, 0);
    const char req[] = "GET /debug/pprof/heap?seconds=600 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ck_assert(it_send(fd, req, sizeof req - 1));
    shutdown(fd, SHUT_WR);
    it_resp_t gone;
    it_read_response(fd, &gone);
    close(fd);
    ck_assert_msg(gone.status == 503 && strstr(gone.body, "closed its side") != NULL, "a client that gave up: %d %s",
                  gone.status, gone.body);
    it_free(&gone);
    static struct delta_req d[5];
    pthread_t t[5];
    for (int i = 0; i < 4; i++) {
        d[i].port = port;
        snprintf(d[i].path, sizeof d[i].path, "/debug/pprof/%s?seconds=600", i % 2 ? "heap" : "allocs");
        t[i] = start_delta(&d[i]);
    }
    cJSON *j = it_json_status(port, "/debug/pprof/heap?seconds=1", 503);
    ck_assert_msg(strstr(it_str(j, "reason"), "already") != NULL, "%s", it_str(j, "reason"));
    cJSON_Delete(j);
    it_resp_t r;
    it_get(port, "/debug/pprof/heap", &r); /* without seconds: at once */
    ck_assert_int_eq(r.status, 200);
    it_free(&r);
    sefer_introspect_stop(); /* with four waiting */
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(d[i].r.status == 503 || d[i].r.status == IT_CLOSED, "a delta waiting at the stop: %d",
                      d[i].r.status);
        it_free(&d[i].r);
    }
}
END_TEST

/* The sign of fn's flat figure in `go tool pprof -top` output: 1, -1, or 0
 * if fn is not there. */
static int flat_sign(const char *out, const char *fn)
{
    const char *at = strstr(out, fn);
    if (at == NULL)
        return 0;
    while (at > out && at[-1] != '\n')
        at--;
    while (*at == ' ')
        at++;
    return *at == '-' ? -1 : 1;
}

START_TEST(test_pprof_delta) {
    int port = it_start();
    for (int i = 0; i < N_1K; i++) held_1k[i] = hold_1k();
    static struct delta_req d;
    d.port = port;
    snprintf(d.path, sizeof d.path, "/debug/pprof/heap?seconds=2");
    pthread_t t = start_delta(&d);
    for (int i = 0; i < N_LEAK; i++) leaked[i] = leak_256();
    for (int i = 0; i < N_1K; i++) free(held_1k[i]);
    pthread_join(t, NULL);
    ck_assert_int_eq(d.r.status, 200);
    char dir[] = "/tmp/sefer-delta-XXXXXX", file[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/delta.pb.gz", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(d.r.body, 1, d.r.len, f), d.r.len);
    fclose(f);
    it_free(&d.r);
    static char out[1 << 16];
    setenv("HOME", dir, 1);
    setenv("PPROF_TMPDIR", dir, 1);
    char *alloc[] = {"go", "tool", "pprof", "-top", "-sample_index=alloc_space", file, NULL};
    int status = run_capture(alloc, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "go tool pprof failed:\n%s", out);
    ck_assert_msg(strstr(out, "Duration: 2") != NULL, "no duration of 2 s:\n%s", out);
    ck_assert_msg(strstr(out, "leak_256") != NULL && strstr(out, "hold_1k") == NULL,
                  "allocated meanwhile: leak_256 only, expected:\n%s", out);
    char *inuse[] = {"go", "tool", "pprof", "-top", "-sample_index=inuse_space", file, NULL};
    status = run_capture(inuse, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "go tool pprof failed:\n%s", out);
    ck_assert_msg(flat_sign(out, "leak_256") > 0 && flat_sign(out, "hold_1k") < 0,
                  "in use meanwhile: leak_256 up, hold_1k (freed) down expected:\n%s", out);
    for (int i = 0; i < N_LEAK; i++) free(leaked[i]);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* `sefer run --profile FILE -- this program MODE`: its exit status, the
 * file's path in file (in a new directory), what it printed in out. */
static int run_profiled(const char *mode, char *dir, char *file, size_t file_size, char *out, size_t out_size) {
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, file_size, "%s/heap.pb.gz", dir);
    char *argv[] = {getenv("SEFER_TEST_CLI"), "run", "--listen", "127.0.0.1:0", "--profile", file, "--",
                    "/proc/self/exe", (char *)mode, NULL};
    ck_assert_ptr_nonnull(argv[0]);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    argv[7] = self;
    return run_capture(argv, out, out_size);
}

START_TEST(test_pprof_file) {
    char dir[] = "/tmp/sefer-prof-XXXXXX", file[96], out[8192];
    int status = run_profiled("hold", dir, file, sizeof file, out, sizeof out);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sefer run failed:\n%s", out);
    ck_assert_msg(access(file, R_OK) == 0, "no %s after the program exited:\n%s", file, out);
    check_top(file);
    unlink(file);
    rmdir(dir);
}
END_TEST

/* A guard detection aborts the program (a double free, guard.on_error =
 * abort): no exit handler runs, and the file is there all the same, with
 * what was live when it died. */
START_TEST(test_pprof_abort) {
    char dir[] = "/tmp/sefer-prof-XXXXXX", file[96], out[8192];
    int status = run_profiled("hold-abort", dir, file, sizeof file, out, sizeof out);
    ck_assert_msg(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the program did not abort:\n%s", out);
    ck_assert_msg(strstr(out, "double free") != NULL, "no report of the double free:\n%s", out);
    ck_assert_msg(access(file, R_OK) == 0, "no %s after the program aborted:\n%s", file, out);
    check_top(file);
    unlink(file);
    rmdir(dir);
}
END_TEST

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "hold") == 0 || strcmp(argv[1], "hold-abort") == 0)) {
        /* the program `sefer run --profile` runs */
        for (int i = 0; i < N_1K; i++) held_1k[i] = hold_1k();
        for (int i = 0; i < N_100; i++) held_100[i] = hold_100();
        if (strcmp(argv[1], "hold-abort") == 0) {
            void *p = st_launder(malloc(64));
            free(p);
            free(p); /* (guard level 1 detects it and aborts) */
        }
        return 0;
    }
    Suite *s = suite_create("introspect-profile");
    TCase *tc = tcase_create("profile");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_accuracy);
    tcase_add_test(tc, test_counters);
    tcase_add_test(tc, test_delta_limits);
    suite_add_tcase(s, tc);
    tc = st_optional_case(s, "paced", unpaced_why_not);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_paced);
    tc = st_optional_case(s, "pprof-live", go_why_not);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_pprof_live);
    tc = st_optional_case(s, "pprof-many", gzip_why_not);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pprof_many);
    tc = st_optional_case(s, "pprof-file", go_why_not);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_pprof_file);
    tc = st_optional_case(s, "pprof-abort", go_why_not);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_pprof_abort);
    tc = st_optional_case(s, "pprof-delta", go_why_not);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_pprof_delta);
    return st_main(s, argc, argv);
}
