/* intern.h — strings that thousands of devices share (link kinds, policy names), kept once with a
 * reference count: 10000 veths hold one "veth", not 10000 copies of it. */
#pragma once

#include <stdbool.h>

/* `s` kept once: the shared copy, with one more reference; NULL for NULL, and NULL with errno
 * ENOMEM when it could not be stored. */
const char *intern_get(const char *s);
/* Drops a reference taken by intern_get(); the copy goes with the last one. NULL is a no-op. */
void intern_put(const char *s);
/* Replaces *dst (an interned string or NULL) with `src` interned; sets *changed when they differ. */
int intern_set(const char **dst, const char *src, bool *changed);
