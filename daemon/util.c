/* util.c — the parts of util.h that are not inline: string lists, clocks, the bounded reader. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

void strv_free(char **l) {
        for (char **p = l; p && *p; p++)
                free(*p);
        free(l);
}

size_t strv_length(char *const *l) {
        size_t n = 0;
        while (l && l[n])
                n++;
        return n;
}

bool strv_contains(char *const *l, const char *s) {
        for (char *const *p = l; p && *p; p++)
                if (streq_ptr(*p, s))
                        return true;
        return false;
}

int strv_push_take(char ***l, size_t *n, char *s) {
        char **x = reallocarray(*l, *n + 2, sizeof(char *));
        if (!x)
                return -ENOMEM;
        *l = x;
        x[(*n)++] = s;
        x[*n] = NULL;
        return 0;
}

int strv_push(char ***l, size_t *n, const char *s) {
        char *c = strdup(s);
        int r;

        if (!c)
                return -ENOMEM;
        r = strv_push_take(l, n, c);
        if (r < 0)
                free(c);
        return r;
}

static uint64_t clock_usec(clockid_t id) {
        struct timespec ts;
        clock_gettime(id, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

uint64_t now_usec(void) {
        return clock_usec(CLOCK_MONOTONIC);
}

uint64_t boottime_usec(void) {
        return clock_usec(CLOCK_BOOTTIME);
}

uint64_t realtime_usec(void) {
        return clock_usec(CLOCK_REALTIME);
}

uint64_t clock_now(const Clock *c, int clock_id) {
        if (c && c->usec)
                return c->usec(c->userdata, clock_id);
        return clock_usec((clockid_t) clock_id);
}

int read_file_bounded(const char *path, size_t max, ReadFileFlags flags, char **ret, size_t *ret_size) {
        return read_file_bounded_at(AT_FDCWD, path, max, flags, ret, ret_size);
}

int read_file_bounded_at(int dir_fd, const char *path, size_t max, ReadFileFlags flags, char **ret,
                         size_t *ret_size) {
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) char *buf = NULL;
        size_t n = 0, cap = 0;
        struct stat st;

        /* O_NONBLOCK: a FIFO planted where a file should be must not hold the loop in open(). */
        fd = openat(dir_fd, path,
                    O_RDONLY | O_CLOEXEC | O_NOCTTY | (flags & READ_FILE_ANY_TYPE ? 0 : O_NONBLOCK) |
                            (flags & READ_FILE_NOFOLLOW ? O_NOFOLLOW : 0));
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (!S_ISREG(st.st_mode) && !(flags & READ_FILE_ANY_TYPE))
                return -EBADF;
        if (S_ISREG(st.st_mode) && (uint64_t) st.st_size > max)
                return -EFBIG;
        for (;;) {
                if (n == cap) {
                        /* one byte past `max` tells a file that grew past it */
                        size_t want = cap ? cap * 2 : (S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t) st.st_size + 1 : 4096);
                        if (cap > max)
                                return -EFBIG;
                        if (want > max + 1)
                                want = max + 1;
                        char *t = realloc(buf, want + 1);
                        if (!t)
                                return -ENOMEM;
                        buf = t;
                        cap = want;
                }
                ssize_t k = read(fd, buf + n, cap - n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        if (n > max)
                return -EFBIG;
        if (!buf && !(buf = malloc(1)))
                return -ENOMEM;
        buf[n] = '\0';
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = n;
        return 0;
}

int strextendf(char **s, const char *format, ...) {
        _cleanup_(freep) char *add = NULL;
        size_t old = *s ? strlen(*s) : 0, len;
        va_list ap;
        char *n;
        int r;

        va_start(ap, format);
        r = vasprintf(&add, format, ap);
        va_end(ap);
        if (r < 0) {
                add = NULL;
                return -ENOMEM;
        }
        len = (size_t) r;
        n = realloc(*s, old + len + 1);
        if (!n)
                return -ENOMEM;
        memcpy(n + old, add, len + 1);
        *s = n;
        return 0;
}
