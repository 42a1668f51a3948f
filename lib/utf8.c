/* utf8.c — checking and repairing UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* Length of the valid UTF-8 sequence at `s`, 0 if it is not one. */
size_t utf8_sequence(const unsigned char *s) {
        unsigned char c = s[0], lo = 0x80, hi = 0xbf;
        size_t n;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                if (c == 0xe0)
                        lo = 0xa0; /* overlong */
                else if (c == 0xed)
                        hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                if (c == 0xf0)
                        lo = 0x90;
                else if (c == 0xf4)
                        hi = 0x8f; /* above U+10FFFF */
        } else
                return 0;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if (s[i] < 0x80 || s[i] > 0xbf)
                        return 0;
        return n;
}

bool utf8_is_valid(const char *s) {
        const unsigned char *p = (const unsigned char *) (s ?: "");
        size_t n;

        while (*p && (n = utf8_sequence(p)) > 0)
                p += n;
        return *p == '\0';
}

const char *utf8_safe(const char *s, char **buf) {
        const unsigned char *p = (const unsigned char *) (s ?: "");
        size_t i = 0, n, len;
        char *c;

        while (p[i] && (n = utf8_sequence(p + i)) > 0)
                i += n;
        if (!p[i])
                return (const char *) p;
        len = strlen((const char *) p);
        c = malloc(len + 1);
        if (!c)
                return NULL;
        for (i = 0; i < len;) {
                n = utf8_sequence(p + i);
                if (n == 0) {
                        c[i++] = '?';
                        continue;
                }
                memcpy(c + i, p + i, n);
                i += n;
        }
        c[len] = '\0';
        *buf = c;
        return c;
}
