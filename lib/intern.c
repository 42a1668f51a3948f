/* intern.c — a reference-counted set of shared strings. The set holds the link kinds the kernel
 * reports and the names of the policies: a few dozen strings at most, so a list, looked up only
 * when a device's kind or policy changes. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "intern.h"

typedef struct Interned {
        struct Interned *next;
        unsigned refs;
        char s[];
} Interned;

static Interned *interned;

static Interned *entry_of(const char *s) {
        return (Interned *) (void *) (s - offsetof(Interned, s));
}

const char *intern_get(const char *s) {
        if (!s)
                return NULL;
        for (Interned *i = interned; i; i = i->next)
                if (strcmp(i->s, s) == 0) {
                        i->refs++;
                        return i->s;
                }
        size_t len = strlen(s);
        Interned *i = malloc(sizeof(*i) + len + 1);
        if (!i) {
                errno = ENOMEM;
                return NULL;
        }
        memcpy(i->s, s, len + 1);
        i->refs = 1;
        i->next = interned;
        interned = i;
        return i->s;
}

void intern_put(const char *s) {
        if (!s)
                return;
        Interned *e = entry_of(s);
        if (--e->refs > 0)
                return;
        for (Interned **p = &interned; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        free(e);
}

int intern_set(const char **dst, const char *src, bool *changed) {
        /* interned strings are equal exactly when their pointers are; `src` is not interned */
        if (*dst == src || (*dst && src && strcmp(*dst, src) == 0))
                return 0;
        const char *n = intern_get(src);
        if (src && !n)
                return -ENOMEM;
        intern_put(*dst);
        *dst = n;
        if (changed)
                *changed = true;
        return 0;
}
