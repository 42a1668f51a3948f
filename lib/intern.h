/* intern.h — strings that thousands of devices share (link kinds, policy names, guard counters,
 * the words of `auto`'s proofs), kept once with a reference count: 10000 veths hold one "veth",
 * not 10000 copies of it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* `s` kept once: the shared copy, with one more reference; NULL for NULL, and NULL with errno
 * ENOMEM when it could not be stored. */
const char *intern_get(const char *s);
/* One more reference to `s`, which intern_get() returned (NULL: NULL): a copy that owns it. */
const char *intern_ref(const char *s);
/* Drops a reference taken by intern_get() or intern_ref(); the copy goes with the last one. NULL
 * is a no-op. */
void intern_put(const char *s);
/* Replaces *dst (an interned string or NULL) with `src` interned; sets *changed when they differ. */
int intern_set(const char **dst, const char *src, bool *changed);
/* The references held, over every string: 0 once everything that took one dropped it (tests). */
size_t intern_refs(void);
