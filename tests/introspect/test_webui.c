/* test_webui.c - the dashboard's files as the server sends them
 * (introspect/webui.c, the table webui/embed.py generates):
 *
 *   - / is the page: text/html, Cache-Control no-cache, an ETag, and a
 *     Content-Security-Policy that allows scripts and styles from the
 *     server only (no 'unsafe-inline'; in style-src one hash, of the
 *     stylesheet d3-flame-graph injects: webui/embed.py), nosniff, no
 *     framing;
 *   - every file the page names (src=, href=) and every module app.js
 *     imports, followed from module to module, is served with the type its
 *     extension says; uPlot's, d3's and d3-flame-graph's files and
 *     licences are there;
 *   - an unknown /ui/ path, /ui/ itself and a path with ".." are 404;
 *   - If-None-Match with the ETag gives 304 and no body; HEAD gives no body;
 *     POST is 405 with Allow; a query string is ignored;
 *   - the JSON endpoints keep Cache-Control no-store. */
#include "itest.h"

static int port;

static void setup(void) { port = it_start(); }
static void teardown(void) { sefer_introspect_stop(); }

static const char *type_for(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (dot == NULL || strcmp(path, "/") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".txt") == 0)
        return "text/plain; charset=utf-8";
    ck_abort_msg("no type expected for %s", path);
    return NULL;
}

/* GET path: 200, the right type, no-cache, an ETag; returns the body. */
static char *get_file(const char *path, size_t *len)
{
    it_resp_t r;
    it_get(port, path, &r);
    ck_assert_msg(r.status == 200, "GET %s: %d %.200s", path, r.status, r.body);
    const char *ct = it_header(&r, "Content-Type");
    ck_assert_msg(ct && strcmp(ct, type_for(path)) == 0, "GET %s: Content-Type %s", path, ct ? ct : "(none)");
    const char *cc = it_header(&r, "Cache-Control");
    ck_assert_msg(cc && strcmp(cc, "no-cache") == 0, "GET %s: Cache-Control %s", path, cc ? cc : "(none)");
    ck_assert_msg(it_header(&r, "ETag") != NULL, "GET %s: no ETag", path);
    ck_assert_msg(r.len > 0, "GET %s: empty", path);
    if (len)
        *len = r.len;
    return r.body;
}

START_TEST(test_page_headers)
{
    it_resp_t r;
    it_get(port, "/", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(it_header(&r, "Content-Type"), "text/html; charset=utf-8");
    ck_assert_str_eq(it_header(&r, "X-Content-Type-Options"), "nosniff");
    ck_assert_str_eq(it_header(&r, "X-Frame-Options"), "DENY");
    const char *csp = it_header(&r, "Content-Security-Policy");
    ck_assert_ptr_nonnull(csp);
    ck_assert_msg(strstr(csp, "default-src 'none'") && strstr(csp, "script-src 'self'") &&
                      strstr(csp, "style-src 'self'") && strstr(csp, "connect-src 'self'") &&
                      strstr(csp, "frame-ancestors 'none'") && !strstr(csp, "unsafe"),
                  "CSP: %s", csp);
    /* style-src: 'self' and exactly one SHA-256 (44 base64 characters) */
    const char *style = strstr(csp, "style-src 'self' 'sha256-");
    ck_assert_msg(style != NULL, "CSP: %s", csp);
    const char *hash = style + strlen("style-src 'self' 'sha256-");
    size_t b64 = strspn(hash, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");
    ck_assert_msg(b64 == 44 && strncmp(hash + b64, "';", 2) == 0, "style-src: %.120s", style);
    ck_assert_msg(strstr(r.body, "<!doctype html>") && strstr(r.body, "/ui/app.js"), "page: %.200s", r.body);
    ck_assert_msg(strstr(r.body, "<script>") == NULL && strstr(r.body, " style=") == NULL,
                  "the page has inline script or style");
    it_free(&r);
}
END_TEST

/* Every quoted /ui/ path after attr= in text, fetched and checked. */
static int fetch_referenced(const char *text, const char *attr)
{
    int n = 0;
    char needle[16];
    snprintf(needle, sizeof needle, "%s=\"/ui/", attr);
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) {
        char path[128];
        const char *start = p + strlen(attr) + 2;
        snprintf(path, sizeof path, "%.*s", (int)strcspn(start, "\""), start);
        free(get_file(path, NULL));
        n++;
    }
    return n;
}

START_TEST(test_everything_the_page_names_is_served)
{
    char *page = get_file("/", NULL);
    int n = fetch_referenced(page, "src") + fetch_referenced(page, "href");
    ck_assert_msg(n >= 5, "only %d /ui/ files named by the page", n);
    ck_assert_msg(strstr(page, "/ui/uPlot.iife.min.js") && strstr(page, "/ui/uPlot.min.css"), "uPlot not named");
    free(page);

    /* the modules, from app.js on: "from './NAME.js'" */
    char queue[16][64] = {"/ui/app.js"};
    int have = 1;
    for (int i = 0; i < have; i++) {
        char *js = get_file(queue[i], NULL);
        for (const char *p = strstr(js, "from './"); p; p = strstr(p + 1, "from './")) {
            char path[64];
            snprintf(path, sizeof path, "/ui/%.*s", (int)strcspn(p + 8, "'"), p + 8);
            bool seen = false;
            for (int k = 0; k < have; k++)
                seen |= strcmp(queue[k], path) == 0;
            if (!seen && have < 16)
                snprintf(queue[have++], sizeof queue[0], "%s", path);
        }
        free(js);
    }
    ck_assert_msg(have >= 6, "only %d modules reached from app.js", have);

    size_t len;
    char *uplot = get_file("/ui/uPlot.iife.min.js", &len);
    ck_assert_msg(len > 20000 && strstr(uplot, "uPlot"), "uPlot: %zu bytes", len);
    free(uplot);
    char *lic = get_file("/ui/uPlot-LICENSE.txt", NULL);
    ck_assert_msg(strstr(lic, "MIT License") != NULL, "licence: %.100s", lic);
    free(lic);
    char *d3 = get_file("/ui/d3.min.js", &len);
    ck_assert_msg(len > 100000 && strstr(d3, "d3js.org"), "d3: %zu bytes", len);
    free(d3);
    char *flame = get_file("/ui/d3-flamegraph.min.js", &len);
    ck_assert_msg(len > 5000 && strstr(flame, "d3-flame-graph"), "d3-flame-graph: %zu bytes", len);
    free(flame);
    lic = get_file("/ui/d3-LICENSE.txt", NULL);
    ck_assert_msg(strstr(lic, "Mike Bostock") != NULL, "d3 licence: %.100s", lic);
    free(lic);
    lic = get_file("/ui/d3-flame-graph-LICENSE.txt", NULL);
    ck_assert_msg(strstr(lic, "Apache License") != NULL, "d3-flame-graph licence: %.100s", lic);
    free(lic);
}
END_TEST

START_TEST(test_unknown_paths_are_404)
{
    const char *paths[] = {"/ui/nope.js", "/ui/", "/ui/../stats", "/ui/app.js/", "/ui/APP.JS", "/index.html",
                           "/ui//app.js"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        it_resp_t r;
        it_get(port, paths[i], &r);
        ck_assert_msg(r.status == 404, "GET %s: %d", paths[i], r.status);
        ck_assert_str_eq(it_header(&r, "Content-Type"), "application/json");
        it_free(&r);
    }
}
END_TEST

START_TEST(test_etag_head_methods_query)
{
    it_resp_t r;
    it_get(port, "/ui/app.js", &r);
    char etag[600];
    snprintf(etag, sizeof etag, "%s", it_header(&r, "ETag"));
    it_free(&r);

    char req[800];
    snprintf(req, sizeof req, "GET /ui/app.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIf-None-Match: %s\r\n\r\n",
             etag);
    it_raw(port, req, strlen(req), &r);
    ck_assert_msg(r.status == 304 && r.len == 0, "If-None-Match: %d, %zu bytes", r.status, r.len);
    ck_assert_str_eq(it_header(&r, "ETag"), etag);
    it_free(&r);
    const char other[] = "GET /ui/app.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIf-None-Match: \"0\"\r\n\r\n";
    it_raw(port, other, sizeof other - 1, &r);
    ck_assert_int_eq(r.status, 200);
    it_free(&r);

    it_request(port, "HEAD", "/", NULL, NULL, &r);
    ck_assert_msg(r.status == 200 && r.len == 0, "HEAD: %d, %zu bytes", r.status, r.len);
    it_free(&r);
    it_request(port, "POST", "/", NULL, "x", &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(it_header(&r, "Allow"), "GET, HEAD");
    it_free(&r);
    it_get(port, "/?interval=5&x", &r);
    ck_assert_int_eq(r.status, 200);
    it_free(&r);
    it_get(port, "/stats", &r);
    ck_assert_str_eq(it_header(&r, "Cache-Control"), "no-store");
    ck_assert_msg(it_header(&r, "ETag") == NULL, "/stats has an ETag");
    it_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-webui");
    TCase *tc = tcase_create("webui");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_page_headers);
    tcase_add_test(tc, test_everything_the_page_names_is_served);
    tcase_add_test(tc, test_unknown_paths_are_404);
    tcase_add_test(tc, test_etag_head_methods_query);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
