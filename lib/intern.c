/* intern.c — a reference-counted set of shared strings. The set holds the link kinds the kernel
 * reports, the names of the policies and guard counters, and the proofs of `auto` (one for each
 * peer a step was delivered to: as many as the devices), so a hash table, grown as it fills. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "intern.h"
#include "util.h"

typedef struct Interned {
        struct Interned *next; /* in its bucket */
        uint32_t hash;
        unsigned refs;
        char s[];
} Interned;

#define BUCKETS_MIN 64u

static Interned **buckets;
static size_t n_buckets, n_interned, n_refs;

static Interned *entry_of(const char *s) {
        return (Interned *) (void *) (s - offsetof(Interned, s));
}

/* Twice the buckets, once there are as many strings as buckets; without memory the chains grow. */
static void grow(void) {
        size_t n = n_buckets ? 2 * n_buckets : BUCKETS_MIN;
        Interned **b;

        if (n_interned < n_buckets)
                return;
        b = calloc(n, sizeof(*b));
        if (!b)
                return;
        for (size_t k = 0; k < n_buckets; k++)
                for (Interned *i = buckets[k], *next; i; i = next) {
                        next = i->next;
                        i->next = b[i->hash & (n - 1)];
                        b[i->hash & (n - 1)] = i;
                }
        free(buckets);
        buckets = b;
        n_buckets = n;
}

const char *intern_get(const char *s) {
        size_t len;
        uint32_t h;

        if (!s)
                return NULL;
        h = fnv1a32_string(s, &len);
        if (buckets)
                for (Interned *i = buckets[h & (n_buckets - 1)]; i; i = i->next)
                        if (i->hash == h && strcmp(i->s, s) == 0)
                                return intern_ref(i->s);
        grow();
        if (!buckets) {
                errno = ENOMEM;
                return NULL;
        }
        Interned *i = malloc(sizeof(*i) + len + 1);
        if (!i) {
                errno = ENOMEM;
                return NULL;
        }
        memcpy(i->s, s, len + 1);
        i->hash = h;
        i->refs = 1;
        i->next = buckets[h & (n_buckets - 1)];
        buckets[h & (n_buckets - 1)] = i;
        n_interned++;
        n_refs++;
        return i->s;
}

const char *intern_ref(const char *s) {
        if (s) {
                entry_of(s)->refs++;
                n_refs++;
        }
        return s;
}

void intern_put(const char *s) {
        if (!s)
                return;
        Interned *e = entry_of(s);
        n_refs--;
        if (--e->refs > 0)
                return;
        for (Interned **p = &buckets[e->hash & (n_buckets - 1)]; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        free(e);
        if (--n_interned == 0) {
                /* nothing left: neither is the table (a process that ends holds none) */
                free(buckets);
                buckets = NULL;
                n_buckets = 0;
        }
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

size_t intern_refs(void) {
        return n_refs;
}
