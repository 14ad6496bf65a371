/* utf8.h - what a well-formed UTF-8 character is, for the code that shows
 * text from the program or from the network: the introspection server's
 * JSON strings (introspect/json.c, sf_json_string_item) and the `sefer`
 * command's terminal output (tools/sefer_stat.c, clean).  Header only and
 * libc-free, so the command, which links libc and cJSON alone, takes it
 * too. */
#ifndef SEFER_UTF8_H
#define SEFER_UTF8_H

#include <stddef.h>

/* The length of the well-formed UTF-8 character at s (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 if there is none
 * there.  Stops at the string's NUL, which no continuation byte equals. */
static inline size_t sf_utf8_char(const unsigned char *s) {
    unsigned char c = s[0], lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c < 0x80) return 1;
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (c == 0xe0) lo = 0xa0;
    else if (c == 0xed) hi = 0x9f;
    else if (c == 0xf0) lo = 0x90;
    else if (c == 0xf4) hi = 0x8f;
    if (n == 0 || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

#endif /* SEFER_UTF8_H */
