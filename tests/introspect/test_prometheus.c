/* test_prometheus.c - a real Prometheus scrapes this process.
 *
 * Starts Debian's `prometheus` (exit 77, skipped, if it is not installed)
 * with a config and a data directory of its own in a temporary folder and
 * its own free port, scraping this process's /metrics every second; after
 * a few scrapes it asks Prometheus' HTTP API:
 *
 *   - every metric family /metrics serves exists in Prometheus, with the
 *     type /metrics declares (/api/v1/metadata), and every series (the five
 *     kinds of guard detection included);
 *   - one scrape agrees with /stats read just before and just after it: the
 *     test reads /stats into static memory (so that it holds no block of
 *     its own while the scrape happens), waits without allocating until
 *     Prometheus has stored a scrape the server served after that read
 *     (its count of requests says so), reads /stats again, and takes that
 *     scrape; a counter then lies between the two reads, and so does a
 *     gauge, except the resident set, which the test's work moves
 *     (RSS_SLACK);
 *   - counters never go down from one scrape to the next.
 *
 * Prometheus is stopped at the end (SIGTERM; it dies with the test too:
 * PR_SET_PDEATHSIG) and its folder removed by main(), after the forked test,
 * pass or fail; its storage is kept small (an hour's retention, 16 MiB WAL
 * segments). */
#include "itest.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <sys/prctl.h>

#define RSS_SLACK (8 * ST_MIB)

/* /stats field, metric, label (kind="..."), type */
static const struct {
    const char *stat, *metric, *kind;
    bool counter;
} pairs[] = {
    {"bytes_in_blocks", "sefer_block_bytes", NULL, false},
    {"bytes_committed", "sefer_committed_bytes", NULL, false},
    {"bytes_reserved", "sefer_reserved_bytes", NULL, false},
    {"bytes_metadata", "sefer_metadata_bytes", NULL, false},
    {"bytes_decommitted_total", "sefer_decommitted_bytes_total", NULL, true},
    {"segments", "sefer_segments", NULL, false},
    {"segments_peak", "sefer_segments_peak", NULL, false},
    {"large_cache_bytes", "sefer_large_cache_bytes", NULL, false},
    {"large_cache_spans", "sefer_large_cache_spans", NULL, false},
    {"large_cache_hits", "sefer_large_cache_hits_total", NULL, true},
    {"large_cache_misses", "sefer_large_cache_misses_total", NULL, true},
    {"os_maps", "sefer_os_maps_total", NULL, true},
    {"allocs", "sefer_allocs_total", NULL, true},
    {"frees", "sefer_frees_total", NULL, true},
    {"remote_frees", "sefer_remote_frees_total", NULL, true},
    {"ring_pushes", "sefer_ring_pushes_total", NULL, true},
    {"ring_overflows", "sefer_ring_overflows_total", NULL, true},
    {"enomem", "sefer_enomem_total", NULL, true},
    {"heaps_live", "sefer_heaps_live", NULL, false},
    {"heaps_abandoned", "sefer_heaps_abandoned", NULL, false},
    {"fallback_allocs", "sefer_fallback_allocs_total", NULL, true},
    {"heap_fallbacks", "sefer_heap_fallbacks_total", NULL, true},
    {"bytes_shed_on_growth", "sefer_shed_on_growth_bytes_total", NULL, true},
    {"memory_limit", "sefer_memory_limit_bytes", NULL, false},
    {"memory_headroom", "sefer_memory_headroom_bytes", NULL, false},
    {"memory_limit_purges", "sefer_memory_limit_purges_total", NULL, true},
    {"memory_limit_refusals", "sefer_memory_limit_refusals_total", NULL, true},
    {"bytes_exited_waiting", "sefer_exited_waiting_bytes", NULL, false},
    {"bytes_remote_pending", "sefer_remote_pending_bytes", NULL, false},
    {"profile_unwind_fallbacks", "sefer_profile_unwind_fallbacks_total", NULL, true},
    {"profile_unwind_disagreements", "sefer_profile_unwind_disagreements_total", NULL, true},
    {"guard_samples", "sefer_guard_samples_total", NULL, true},
    {"guard_samples_live", "sefer_guard_samples_live", NULL, false},
    {"bytes_waiting", "sefer_waiting_bytes", NULL, false},
    {"cache_max_purges", "sefer_cache_max_purges_total", NULL, true},
    {"bytes_cache_max_purged", "sefer_cache_max_purged_bytes_total", NULL, true},
    {"remote_batch_frees", "sefer_remote_batch_frees_total", NULL, true},
    {"profile_sample_bytes_now", "sefer_profile_sample_bytes", NULL, false},
    {"guard_invalid_free", "sefer_guard_detections_total", "invalid_free", true},
    {"guard_interior_free", "sefer_guard_detections_total", "interior_free", true},
    {"guard_double_free", "sefer_guard_detections_total", "double_free", true},
    {"guard_overflow", "sefer_guard_detections_total", "overflow", true},
    {"guard_use_after_free", "sefer_guard_detections_total", "use_after_free", true},
    {"rss_bytes", "sefer_resident_bytes", NULL, false},
};
#define PAIRS (sizeof pairs / sizeof *pairs)

static char dir[64];
static pid_t prom = -1;
static int prom_port;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Stops Prometheus (the test's forked child does it; if the child dies
 * first, PR_SET_PDEATHSIG does). */
static void stop_prometheus(void)
{
    if (prom > 0) {
        kill(prom, SIGTERM);
        int status;
        for (int i = 0; i < 100 && waitpid(prom, &status, WNOHANG) == 0; i++)
            usleep(100000);
        kill(prom, SIGKILL);
        waitpid(prom, &status, 0);
        prom = -1;
    }
}

/* The folder is made and removed by main(), outside the forked test, so
 * that it goes even when the test fails. */
static void start_prometheus(int target)
{
    char path[128], data[160], listen[64], config[160];
    snprintf(path, sizeof path, "%s/prometheus.yml", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n  - job_name: sefer\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%d']\n",
            target);
    fclose(f);
    prom_port = it_free_port();
    snprintf(config, sizeof config, "--config.file=%s", path);
    snprintf(data, sizeof data, "--storage.tsdb.path=%s/data", dir);
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", prom_port);
    char *argv[] = {"prometheus", config, data, listen, "--storage.tsdb.retention.time=1h",
                    "--storage.tsdb.wal-segment-size=16MB", "--log.level=warn", NULL};
    fflush(stdout);
    fflush(stderr);
    prom = fork();
    ck_assert_int_ge(prom, 0);
    if (prom == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        execvp("prometheus", argv);
        _exit(127);
    }
}

/* GET on Prometheus; the parsed JSON of a 200.  HTTP/1.0, so that the
 * reply is not chunked (the test's client reads until the server closes). */
static void prom_raw(const char *path, it_resp_t *r)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    ck_assert(n > 0 && (size_t)n < sizeof req);
    it_raw(prom_port, req, (size_t)n, r);
}

static cJSON *prom_get(const char *path)
{
    it_resp_t r;
    prom_raw(path, &r);
    cJSON *j = r.status == 200 ? cJSON_ParseWithLength(r.body, r.len) : NULL;
    ck_assert_msg(j != NULL, "Prometheus GET %s: status %d: %.300s", path, r.status, r.body);
    it_free(&r);
    ck_assert_str_eq(it_str(j, "status"), "success");
    return j;
}

static void url_encode(const char *in, char *out, size_t len)
{
    size_t n = 0;
    for (; *in && n + 4 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_-.", c))
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, len - n, "%%%02X", c);
    }
    out[n] = '\0';
}

static cJSON *query(const char *promql)
{
    char enc[512], path[600];
    url_encode(promql, enc, sizeof enc);
    snprintf(path, sizeof path, "/api/v1/query?query=%s", enc);
    return prom_get(path);
}

static void wait_ready(void)
{
    uint64_t end = it_now_ms() + IT_WAIT_MS; /* (a hang guard: it returns once ready) */
    for (;;) {
        int fd = it_connect(prom_port);
        if (fd >= 0) {
            close(fd);
            it_resp_t r;
            prom_raw("/-/ready", &r);
            int status = r.status;
            it_free(&r);
            if (status == 200)
                return;
        }
        int st;
        ck_assert_msg(waitpid(prom, &st, WNOHANG) == 0, "prometheus exited (status %d)", st);
        ck_assert_msg(it_now_ms() < end, "prometheus not ready within %d s", IT_WAIT_MS / 1000);
        usleep(100000);
    }
}

/* The value of a one-element vector result (NAN if empty). */
static double scalar_of(cJSON *j)
{
    const cJSON *res = it_item(it_item(j, "data"), "result");
    if (cJSON_GetArraySize(res) == 0)
        return NAN;
    const cJSON *v = it_item(res->child, "value");
    return strtod(cJSON_GetArrayItem(v, 1)->valuestring, NULL);
}

static uint64_t stat_of(const cJSON *stats, const char *name)
{
    return it_u64(stats, name);
}

/* GET /stats into static memory: no block of this thread's is live while
 * the server reads the figures, nor after. */
static char stats_text[2][1 << 14];

static void read_stats(int port, char *out, size_t cap)
{
    static const char req[] = "GET /stats?pretty=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    int fd = it_connect(port);
    ck_assert(fd >= 0 && it_send(fd, req, sizeof req - 1));
    size_t n = 0;
    for (ssize_t got; n + 1 < cap && (got = recv(fd, out + n, cap - 1 - n, 0)) > 0;)
        n += (size_t)got;
    close(fd);
    out[n] = '\0';
    ck_assert_msg(strncmp(out, "HTTP/1.1 200", 12) == 0, "/stats: %.200s", out);
}

static cJSON *parse_stats(const char *text)
{
    const char *body = strstr(text, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    cJSON *j = cJSON_Parse(body + 4);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* While the test waits for a scrape between its two reads of /stats
 * nothing of this thread's may allocate (a block live while Prometheus
 * scrapes would move the gauges): this asks Prometheus with a raw request
 * into static memory and reads the answer with strstr and strtod. */
static char prom_text[1 << 16];

/* The timestamp of the first scrape Prometheus has stored whose
 * sefer_introspect_requests_total is above `requests`, or 0. */
static double stored_scrape_after(uint64_t requests)
{
    static const char req[] = "GET /api/v1/query?query=sefer_introspect_requests_total%5B30s%5D HTTP/1.0\r\n"
                              "Host: 127.0.0.1\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)prom_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t n = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && send(fd, req, sizeof req - 1, 0) > 0)
        for (ssize_t got; n + 1 < sizeof prom_text && (got = recv(fd, prom_text + n, sizeof prom_text - 1 - n, 0)) > 0;)
            n += (size_t)got;
    if (fd >= 0)
        close(fd);
    prom_text[n] = '\0';
    const char *v = strstr(prom_text, "\"values\":[");
    if (v == NULL)
        return 0;
    for (const char *p = v + 10; (p = strchr(p, '[')) != NULL; p++) { /* [time,"value"] */
        char *end;
        double t = strtod(p + 1, &end);
        if (end[0] != ',' || end[1] != '"')
            break;
        if (strtod(end + 2, NULL) > (double)requests)
            return t;
    }
    return 0;
}

/* The count of requests in a /stats reply read by read_stats (without
 * allocating, as above). */
static uint64_t requests_in(const char *text)
{
    const char *p = strstr(text, "\"introspect\":");
    p = p ? strstr(p, "\"requests\":") : NULL;
    ck_assert_msg(p != NULL, "no introspect.requests in /stats: %.300s", text);
    return strtoull(p + strlen("\"requests\":"), NULL, 10);
}

/* The metric families /metrics serves: "name type" lines of its TYPE
 * comments. */
static int families(int port, char names[][64], char types[][16], int max)
{
    it_resp_t r;
    it_get(port, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    int n = 0;
    for (const char *line = r.body; line && *line && n < max; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (sscanf(line, "# TYPE %63s %15s", names[n], types[n]) == 2)
            n++;
    }
    it_free(&r);
    return n;
}

/* The sample of series (metric, kind) at timestamp ts in a matrix result;
 * NAN if it has none.  Also checks that a counter's samples never go down. */
static double sample_at(const cJSON *result, const char *metric, const char *kind, double ts, bool counter)
{
    for (const cJSON *s = result->child; s; s = s->next) {
        const cJSON *m = it_item(s, "metric");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, "kind");
        if (strcmp(it_str(m, "__name__"), metric) != 0 || (kind == NULL) != (k == NULL) ||
            (kind && strcmp(k->valuestring, kind) != 0))
            continue;
        double found = NAN, prev = -1;
        for (const cJSON *v = it_item(s, "values")->child; v; v = v->next) {
            double t = cJSON_GetArrayItem(v, 0)->valuedouble;
            double x = strtod(cJSON_GetArrayItem(v, 1)->valuestring, NULL);
            if (counter)
                ck_assert_msg(x >= prev, "counter %s went down: %.0f after %.0f", metric, x, prev);
            prev = x;
            if (fabs(t - ts) < 1e-3)
                found = x;
        }
        return found;
    }
    return NAN;
}

START_TEST(test_prometheus_scrapes_sefer)
{
    int port = it_start();
    start_prometheus(port);
    wait_ready();
    /* a few scrapes */
    uint64_t end = it_now_ms() + IT_WAIT_MS; /* (a hang guard) */
    while (!(scalar_of(query("count_over_time(sefer_info[1m])")) >= 4)) {
        ck_assert_msg(it_now_ms() < end, "fewer than 4 scrapes of sefer within %d s", IT_WAIT_MS / 1000);
        usleep(250000);
    }
    /* (over the last minute: the latest scrape alone is 0 if it passed its
     * 900 ms timeout, which a busy machine can make it do) */
    cJSON *up = query("max_over_time(up{job=\"sefer\"}[1m])");
    ck_assert(scalar_of(up) == 1);
    cJSON_Delete(up);

    /* every family, with its type */
    char names[64][64], types[64][16];
    int nf = families(port, names, types, 64);
    ck_assert_int_ge(nf, 25);
    cJSON *meta = prom_get("/api/v1/metadata");
    const cJSON *data = it_item(meta, "data");
    for (int i = 0; i < nf; i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(data, names[i]);
        ck_assert_msg(m != NULL && cJSON_GetArraySize(m) > 0, "no metadata for %s in Prometheus", names[i]);
        ck_assert_msg(strcmp(it_str(m->child, "type"), types[i]) == 0, "%s: type %s in Prometheus, %s in /metrics",
                      names[i], it_str(m->child, "type"), types[i]);
    }
    cJSON_Delete(meta);
    cJSON *kinds = query("count(sefer_guard_detections_total)");
    ck_assert(scalar_of(kinds) == 5);
    cJSON_Delete(kinds);

    /* One scrape between two reads of /stats, this thread idle between
     * them.  Which scrape came between is told by the order in which the
     * server (one thread, one request at a time) served them, not by
     * clocks: its sefer_introspect_requests_total is above the first
     * read's count, so it was served after that read, and Prometheus had
     * stored it before the second read was sent, so it was served before.
     * Only a hang guard bounds the wait.  (This used to sleep 2.5 s between
     * the reads, give Prometheus 1.5 s to store its scrapes, and take one
     * stamped in the window less 0.3 s, five tries: guesses about how fast
     * the machine, Prometheus and its scrape ran.) */
    read_stats(port, stats_text[0], sizeof stats_text[0]);
    uint64_t r0 = requests_in(stats_text[0]);
    double ts = 0;
    for (uint64_t end = it_now_ms() + IT_WAIT_MS; ts == 0 && it_now_ms() < end;) {
        ts = stored_scrape_after(r0);
        if (ts == 0)
            usleep(100000);
    }
    read_stats(port, stats_text[1], sizeof stats_text[1]);
    ck_assert_msg(ts > 0, "Prometheus stored no scrape of sefer in %d s after a read of /stats: %.300s",
                  IT_WAIT_MS / 1000, prom_text);
    cJSON *s0 = parse_stats(stats_text[0]), *s1 = parse_stats(stats_text[1]);
    char promql[160];
    snprintf(promql, sizeof promql, "{__name__=~\"sefer_.+\"}[30s]");
    cJSON *range = query(promql);
    const cJSON *result = it_item(it_item(range, "data"), "result");
    for (size_t i = 0; i < PAIRS; i++) {
        double v = sample_at(result, pairs[i].metric, pairs[i].kind, ts, pairs[i].counter);
        ck_assert_msg(!isnan(v), "%s%s: no sample at the scrape %.3f", pairs[i].metric,
                      pairs[i].kind ? pairs[i].kind : "", ts);
        double a = (double)stat_of(s0, pairs[i].stat), b = (double)stat_of(s1, pairs[i].stat);
        double lo = a < b ? a : b, hi = a < b ? b : a;
        if (pairs[i].counter)
            ck_assert_msg(a <= v && v <= b, "%s: %.0f scraped, /stats %.0f before and %.0f after",
                          pairs[i].metric, v, a, b);
        else if (strcmp(pairs[i].stat, "rss_bytes") == 0)
            ck_assert_msg(v >= lo - RSS_SLACK && v <= hi + RSS_SLACK, "RSS %.0f scraped, /stats %.0f and %.0f", v, a, b);
        else
            ck_assert_msg(lo <= v && v <= hi, "gauge %s: %.0f scraped, /stats %.0f before and %.0f after",
                          pairs[i].metric, v, a, b);
    }
    double req = sample_at(result, "sefer_introspect_requests_total", NULL, ts, true);
    const cJSON *i0 = it_item(s0, "introspect"), *i1 = it_item(s1, "introspect");
    ck_assert(req >= (double)it_u64(i0, "requests") && req <= (double)it_u64(i1, "requests"));
    ck_assert(sample_at(result, "sefer_introspect_connections", NULL, ts, false) >= 1);
    printf("# scrape at %.3f between /stats reads; %d families checked against Prometheus\n", ts, nf);
    cJSON_Delete(range);
    cJSON_Delete(s0);
    cJSON_Delete(s1);
    stop_prometheus();
    sefer_introspect_stop();
}
END_TEST

int main(void)
{
    if (system("command -v prometheus >/dev/null 2>&1") != 0) {
        printf("SKIP: prometheus is not installed (Debian package prometheus; scripts/setup.sh installs it)\n");
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sefer-prometheus-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    Suite *s = suite_create("introspect-prometheus");
    TCase *tc = tcase_create("prometheus");
    tcase_set_timeout(tc, 240); /* (a hang guard, above its IT_WAIT_MS waits) */
    tcase_add_test(tc, test_prometheus_scrapes_sefer);
    suite_add_tcase(s, tc);
    int rc = st_run_suite(s);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
