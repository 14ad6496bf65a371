/* webui.c - the dashboard's files: / and /ui/... (docs/dashboard.md).
 *
 * The HTML, JavaScript and CSS in webui/, with uPlot's dist files, are
 * compiled into the library at build time (webui/embed.py writes
 * webui_assets.c: a table of constant byte arrays and sf_webui_find), so a
 * process with nothing but libsefer.so serves the dashboard: no file is
 * read, nothing is fetched from elsewhere.
 *
 * Files are served from the constant data without a copy.  Each carries an
 * ETag (a hash of its bytes) and "Cache-Control: no-cache": a browser keeps
 * its copy but asks each time, and gets a 304 until a rebuilt library
 * serves different bytes.  The page's Content-Security-Policy allows
 * scripts, styles and fetches from this server only and no inline script or
 * style, so a thread name or any other text from the process can only ever
 * be shown as text.  The files hold nothing about the process: they are
 * served without the token even on a non-loopback listener (the page then
 * sends the token with its own requests). */
#include "introspect.h"

bool sf_webui_path(const char *path) {
    return strcmp(path, "/") == 0 || strncmp(path, "/ui/", 4) == 0;
}

/* Whether an If-None-Match header names etag ("*" or a list of tags). */
static bool etag_matches(const char *header, const char *etag) {
    if (header == NULL) return false;
    if (strcmp(header, "*") == 0) return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(header, etag); p != NULL; p = strstr(p + 1, etag)) {
        bool starts = p == header || p[-1] == ' ' || p[-1] == ',' || p[-1] == '/';
        bool ends = p[n] == '\0' || p[n] == ',' || p[n] == ' ';
        if (starts && ends) return true;
    }
    return false;
}

void sf_webui_reply(const char *path, const char *if_none_match, sf_reply_t *r) {
    const sf_webui_file_t *f = sf_webui_find(path);
    if (f == NULL) return sf_reply_error(r, 404, "not found", "no such file in the dashboard");
    r->type = f->type;
    r->etag = f->etag;
    r->page = true;
    r->static_body = true;
    if (etag_matches(if_none_match, f->etag)) {
        r->status = 304;
        r->body = NULL;
        r->len = 0;
        return;
    }
    r->status = 200;
    r->body = (char *)f->data; /* constant: static_body, never freed or written */
    r->len = f->len;
}
