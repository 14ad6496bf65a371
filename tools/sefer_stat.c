/* sefer_stat.c - `sefer stat [URL]`: one screen about a running process,
 * from its /stats, /heaps and /rings endpoints; `sefer stat --sites [URL]`:
 * the top allocation sites of its heap profile (/profile/sites).
 *
 * The token (needed on a listener that is not loopback) comes from
 * SEFER_INTROSPECT_TOKEN, from --token-file FILE (its first line), or from
 * --token TOKEN, which every user of the machine can read in ps: the
 * first two are the ones to use. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sefer_cli.h"
#include "../lib/utf8.h" /* (header only: the command links no sefer object) */

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* "12.3 MiB" (or "n/a" for a missing figure) */
static const char *human(double v, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (v < 0) return "n/a";
    unsigned u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* s with every control character as '?': thread names, function names and
 * paths come from the monitored program, and an escape sequence in one
 * would drive the terminal that reads this.  The C0 bytes and DEL, the C1
 * controls U+0080-U+009F in UTF-8 (0xc2 0x80-0x9f, which some terminals
 * obey as CSI and the like: both bytes), and bytes 0x80-0x9f that are no
 * part of UTF-8 (a terminal reading Latin-1 would obey those); other
 * UTF-8 text stays.  Into buf (cut to fit, never inside a character). */
static const char *clean(const char *s, char *buf, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (u[i] != '\0' && i + 1 < len) {
        size_t n = sf_utf8_char(u + i);
        if (n <= 1) {
            buf[i] = u[i] < 0x20 || u[i] == 0x7f || (u[i] >= 0x80 && u[i] <= 0x9f) ? '?' : (char)u[i];
            i++;
            continue;
        }
        if (i + n >= len) break;
        bool c1 = n == 2 && u[i] == 0xc2 && u[i + 1] <= 0x9f;
        for (size_t k = 0; k < n; k++, i++) buf[i] = c1 ? '?' : (char)u[i];
    }
    buf[i] = '\0';
    return buf;
}

/* An error reply's body on one line: its runs of whitespace (sefer's JSON
 * errors are pretty-printed) as one space, folded in place, then clean()ed:
 * whatever answers at the URL wrote it.  Into buf (cut to fit). */
static const char *error_body(char *body, char *buf, size_t len) {
    size_t n = 0;
    for (const char *s = body; *s != '\0'; s++) {
        bool space = *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r';
        if (space && (n == 0 || body[n - 1] == ' ')) continue;
        body[n++] = space ? ' ' : *s;
    }
    while (n > 0 && body[n - 1] == ' ') n--;
    body[n] = '\0';
    return clean(body, buf, len);
}

static cJSON *fetch(const char *url, const char *path, const char *token) {
    char *body = NULL, err[256];
    size_t len = 0;
    int status = cli_http_get(url, path, token, &body, &len, err, sizeof err);
    if (status < 0) {
        fprintf(stderr, "sefer stat: %s\n", err);
        return NULL;
    }
    cJSON *j = status == 200 ? cJSON_ParseWithLength(body, len) : NULL;
    char shown[201];
    if (status != 200)
        fprintf(stderr, "sefer stat: %s: HTTP %d: %s\n", path, status, error_body(body, shown, sizeof shown));
    else if (j == NULL) fprintf(stderr, "sefer stat: %s: the reply is not JSON\n", path);
    free(body);
    return j;
}

/* A string field, or "?" (a server from before the field existed). */
static const char *text(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static void bytes_line(const cJSON *st, const char *label, const char *key) {
    char h[32];
    double v = num(st, key);
    printf("  %-22s %12s", label, human(v, h, sizeof h));
    if (v >= 0) printf("  (%.0f)", v);
    printf("\n");
}

static void print_stats(const cJSON *st) {
    printf("memory\n");
    bytes_line(st, "bytes in blocks", "bytes_in_blocks");
    bytes_line(st, "committed", "bytes_committed");
    bytes_line(st, "reserved", "bytes_reserved");
    bytes_line(st, "metadata", "bytes_metadata");
    bytes_line(st, "RSS (whole process)", "rss_bytes");
    bytes_line(st, "decommitted (total)", "bytes_decommitted_total");
    char h[32];
    double rate = num(st, "large_cache_hit_rate");
    printf("segments   %.0f now, %.0f peak; large cache %.0f spans, %s", num(st, "segments"),
           num(st, "segments_peak"), num(st, "large_cache_spans"),
           human(num(st, "large_cache_bytes"), h, sizeof h));
    if (rate >= 0) printf(", hit rate %.1f %%\n", rate * 100);
    else printf(", no lookups yet\n");
    printf("operations allocs %.0f, frees %.0f, remote frees %.0f, ring pushes %.0f, overflows %.0f, "
           "ENOMEM %.0f\n",
           num(st, "allocs"), num(st, "frees"), num(st, "remote_frees"), num(st, "ring_pushes"),
           num(st, "ring_overflows"), num(st, "enomem"));
    printf("guard      invalid %.0f, interior %.0f, double %.0f, overflow %.0f, use after free %.0f\n",
           num(st, "guard_invalid_free"), num(st, "guard_interior_free"), num(st, "guard_double_free"),
           num(st, "guard_overflow"), num(st, "guard_use_after_free"));
    const cJSON *srv = cJSON_GetObjectItemCaseSensitive(st, "introspect");
    printf("server     %.0f requests, %.0f auth failures, %.0f connections open\n", num(srv, "requests"),
           num(srv, "auth_failures"), num(srv, "connections_open"));
}

static int by_bytes(const void *a, const void *b) {
    double x = num(*(cJSON *const *)a, "bytes_in_blocks"), y = num(*(cJSON *const *)b, "bytes_in_blocks");
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The heaps holding the most, at most 8 lines. */
static void print_heaps(const cJSON *heaps) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(heaps, "heaps");
    int n = cJSON_GetArraySize(list), used = 0;
    cJSON **sorted = calloc((size_t)n + 1, sizeof *sorted);
    if (sorted == NULL) return;
    for (cJSON *h = list ? list->child : NULL; h; h = h->next)
        if (num(h, "bytes_in_blocks") > 0 || num(h, "allocs") > 0) sorted[used++] = h;
    qsort(sorted, (size_t)used, sizeof *sorted, by_bytes);
    printf("heaps      %.0f live, %.0f abandoned (of %.0f made + fallback)\n", num(heaps, "live"),
           num(heaps, "abandoned"), num(heaps, "total") - 1);
    for (int i = 0; i < used && i < 8; i++) {
        const cJSON *h = sorted[i], *t = cJSON_GetObjectItemCaseSensitive(h, "thread");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(h, "state");
        char b[32], tid[24] = "-", slot[24] = "fallback", nb[64];
        if (cJSON_IsObject(t)) snprintf(tid, sizeof tid, "%.0f", num(t, "tid"));
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "fallback")))
            snprintf(slot, sizeof slot, "%.0f", num(h, "slot"));
        printf("  slot %-8s %-9s tid %-7s %-16s %10s in blocks, %.0f allocs\n", slot,
               cJSON_IsString(state) ? state->valuestring : "?", tid,
               cJSON_IsString(name) ? clean(name->valuestring, nb, sizeof nb) : "", human(num(h, "bytes_in_blocks"), b, sizeof b),
               num(h, "allocs"));
    }
    free(sorted);
}

static void print_rings(const cJSON *rings) {
    printf("rings      %.0f pending, %.0f overflowed in all", num(rings, "pending"), num(rings, "overflowed"));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(rings, "rings");
    double worst = 0, cap = 0, slot = -1;
    for (cJSON *r = list ? list->child : NULL; r; r = r->next)
        if (num(r, "pending") > worst) worst = num(r, "pending"), cap = num(r, "capacity"), slot = num(r, "slot");
    if (slot >= 0) printf("; fullest: slot %.0f, %.0f of %.0f", slot, worst, cap);
    printf("\n");
}

/* A frame as "function (file:line)", "module+0xoffset" or the address. */
static void print_frame(const cJSON *f) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "function"),
                *mod = cJSON_GetObjectItemCaseSensitive(f, "module"),
                *file = cJSON_GetObjectItemCaseSensitive(f, "file");
    char b[512];
    if (cJSON_IsString(fn)) {
        printf("%s", clean(fn->valuestring, b, sizeof b));
    } else if (cJSON_IsString(mod)) {
        const char *base = strrchr(mod->valuestring, '/');
        printf("%s", clean(base ? base + 1 : mod->valuestring, b, sizeof b));
        printf("+%s", clean(text(f, "offset"), b, sizeof b));
    } else {
        printf("%s", clean(text(f, "address"), b, sizeof b));
    }
    if (cJSON_IsString(file)) printf(" (%s:%.0f)", clean(file->valuestring, b, sizeof b), num(f, "line"));
}

/* The top sites by live bytes, with their growth since the mark if one is set. */
static int print_sites(const char *url, const char *token) {
    cJSON *sites = fetch(url, "/profile/sites?pretty=0&limit=10", token);
    if (sites == NULL) return 1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sites, "totals"),
                *mark = cJSON_GetObjectItemCaseSensitive(sites, "mark");
    bool marked = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mark, "set"));
    cJSON *growth = marked ? fetch(url, "/profile/sites?pretty=0&limit=1000&since=mark", token) : NULL;
    char h1[32], h2[32];
    printf("heap profile at %s: one sample per %s allocated on average\n", url,
           human(num(sites, "rate"), h1, sizeof h1));
    printf("  %.0f samples (%.0f live, %.0f dropped), %.0f sites; estimated live %s, exact bytes in blocks %s\n",
           num(t, "samples"), num(t, "live_samples"), num(t, "dropped"), num(t, "sites"),
           human(num(t, "estimated_live_bytes"), h1, sizeof h1), human(num(t, "bytes_in_blocks"), h2, sizeof h2));
    if (num(sites, "rate") == 0) printf("  profiling is off (profile.sample_bytes = 0)\n");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(sites, "sites");
    int rank = 0;
    for (const cJSON *s = list ? list->child : NULL; s; s = s->next) {
        printf("%2d. %10s live in ~%.0f blocks (%.0f samples), %s allocated", ++rank,
               human(num(s, "live_bytes"), h1, sizeof h1), num(s, "live_objects"), num(s, "live_samples"),
               human(num(s, "allocated_bytes"), h2, sizeof h2));
        const cJSON *g = growth ? cJSON_GetObjectItemCaseSensitive(growth, "sites") : NULL;
        for (g = g ? g->child : NULL; g; g = g->next)
            if (num(g, "id") == num(s, "id")) {
                double d = num(g, "growth_bytes");
                printf(", %s%s since the mark", d < 0 ? "-" : "+", human(d < 0 ? -d : d, h1, sizeof h1));
                break;
            }
        printf("\n");
        const cJSON *frames = cJSON_GetObjectItemCaseSensitive(s, "frames");
        int n = 0;
        for (const cJSON *f = frames ? frames->child : NULL; f && n < 6; f = f->next, n++) {
            printf("      %s ", n ? "<-" : "at");
            print_frame(f);
            printf("\n");
        }
    }
    if (rank == 0) printf("  no live sampled blocks\n");
    cJSON_Delete(growth);
    cJSON_Delete(sites);
    return 0;
}

/* The first line of path, without its newline, into buf. */
static bool read_token_file(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        fprintf(stderr, "sefer stat: %s: %s\n", path, strerror(errno));
        return false;
    }
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    buf[ok ? strcspn(buf, "\r\n") : 0] = '\0';
    if (!ok) fprintf(stderr, "sefer stat: %s: empty\n", path);
    return ok;
}

int cli_stat(int argc, char **argv) {
    const char *url = SEFER_CLI_DEFAULT_URL, *token = getenv("SEFER_INTROSPECT_TOKEN");
    static char from_file[512];
    bool sites = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sites") == 0) {
            sites = true;
        } else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
            token = argv[++i];
        } else if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) {
            if (!read_token_file(argv[++i], from_file, sizeof from_file)) return 2;
            token = from_file;
        } else if (argv[i][0] != '-') {
            url = argv[i];
        } else {
            fprintf(stderr, "usage: sefer stat [--sites] [URL] [--token-file FILE | --token TOKEN]\n");
            return 2;
        }
    }
    if (token != NULL && *token == '\0') token = NULL;
    if (sites) return print_sites(url, token);
    cJSON *st = fetch(url, "/stats?pretty=0", token);
    if (st == NULL) return 1;
    cJSON *heaps = fetch(url, "/heaps?pretty=0", token), *rings = fetch(url, "/rings?pretty=0", token);
    printf("sefer at %s: build %s\n", url, text(st, "build"));
    printf("  build options: %s\n", text(st, "build_options"));
    print_stats(st);
    if (heaps) print_heaps(heaps);
    if (rings) print_rings(rings);
    cJSON_Delete(st);
    cJSON_Delete(heaps);
    cJSON_Delete(rings);
    return heaps && rings ? 0 : 1;
}
