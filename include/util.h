/* util.h — small helpers shared by every part of bigtcpd: cleanup attributes, hand-off,
 * array sizes. Nothing here allocates on its own. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Hand the value out of a _cleanup_ variable so that the cleanup does nothing. */
#define TAKE_PTR(p)                                                                              \
        ({                                                                                       \
                __typeof__(p) _p_ = (p);                                                         \
                (p) = NULL;                                                                      \
                _p_;                                                                             \
        })
#define TAKE_FD(fd)                                                                              \
        ({                                                                                       \
                int _fd_ = (fd);                                                                 \
                (fd) = -1;                                                                       \
                _fd_;                                                                            \
        })

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                  \
        static inline void func##p(type *p) {                                                    \
                if (*p)                                                                          \
                        func(*p);                                                                \
        }

static inline void freep(void *p) {
        free(*(void **) p);
}

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}

static inline bool strempty(const char *s) {
        return !s || !*s;
}
