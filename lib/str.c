/* str.c - text without malloc: a bounded string builder, the texts of a
 * few errnos, and writes to stderr.
 *
 * Everything that reports (start-up errors, guard detections, malloc_stats,
 * sefer_check, the counter build) builds its lines here, inside malloc,
 * maybe before sefer is initialised: no allocation, no stdio, no locale. */
#include "internal.h"

#include <unistd.h>

void sf_str_init(sf_str_t *s, char *buf, size_t cap) {
    s->buf = buf;
    s->cap = cap;
    s->len = 0;
    if (cap) buf[0] = '\0';
}

void sf_str_addn(sf_str_t *s, const char *text, size_t n) {
    if (s->cap == 0) return;
    size_t room = s->cap - 1 - s->len;
    if (n > room) n = room;
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

void sf_str_add(sf_str_t *s, const char *text) { sf_str_addn(s, text, strlen(text)); }

void sf_str_addu(sf_str_t *s, uint64_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) sf_str_addn(s, &digits[--n], 1);
}

/* Appends text with every byte outside printable ASCII shown as '?', and at
 * most max bytes of it ("..." marks a cut): user text in a message stays on
 * one line. */
void sf_str_add_clean(sf_str_t *s, const char *text, size_t n, size_t max) {
    for (size_t i = 0; i < n && i < max; i++) {
        char c = text[i];
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) c = '?';
        sf_str_addn(s, &c, 1);
    }
    if (n > max) sf_str_add(s, "...");
}

void sf_str_addx(sf_str_t *s, uintptr_t v) {
    char digits[16];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    sf_str_add(s, "0x");
    while (n) sf_str_addn(s, &digits[--n], 1);
}

void sf_write_stderr(const char *msg) {
    size_t n = strlen(msg);
    while (n > 0) {
        ssize_t w = write(2, msg, n);
        if (w <= 0) return;
        msg += w;
        n -= (size_t)w;
    }
}

/* strerror() may allocate (translations): the texts of the errnos opening a
 * file can give. */
const char *sf_errno_text(int e) {
    switch (e) {
    case ENOENT: return "No such file or directory";
    case EACCES: return "Permission denied";
    case EISDIR: return "Is a directory";
    case ENOTDIR: return "Not a directory";
    case ELOOP: return "Too many levels of symbolic links";
    case ENAMETOOLONG: return "File name too long";
    case EMFILE: return "Too many open files";
    case ENFILE: return "Too many open files in system";
    case EIO: return "Input/output error";
    case ENOMEM: return "Cannot allocate memory";
    case EPERM: return "Operation not permitted";
    case ENXIO: return "No such device or address";
    case EOVERFLOW: return "Value too large for defined data type";
    case EINTR: return "Interrupted system call";
    case EAGAIN: return "Resource temporarily unavailable";
    default: return "error";
    }
}
