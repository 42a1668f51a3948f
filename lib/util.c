/* util.c — the parts of util.h that are not inline: string lists, clocks, the bounded reader,
 * the atomic writer. */
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/random.h>
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

int open_file_bounded_at(int dir_fd, const char *path, size_t max, ReadFileFlags flags, struct stat *ret_st) {
        _cleanup_(closep) int fd = -1;
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
        if (ret_st)
                *ret_st = st;
        return TAKE_FD(fd);
}

int read_fd_bounded(int fd, off_t at, size_t max, size_t first, bool short_is_end, char **buf, size_t *cap,
                    size_t *ret_len) {
        size_t n = 0;

        for (;;) {
                if (n == *cap) {
                        /* one byte past `max` tells a file that grew past it */
                        size_t want = *cap ? *cap * 2 : (first ?: 4096);
                        if (*cap > max)
                                return -EFBIG;
                        if (want > max + 1)
                                want = max + 1;
                        char *t = realloc(*buf, want + 1);
                        if (!t)
                                return -ENOMEM;
                        *buf = t;
                        *cap = want;
                }
                ssize_t k = at < 0 ? read(fd, *buf + n, *cap - n) : pread(fd, *buf + n, *cap - n, at + (off_t) n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
                if (short_is_end && n < *cap)
                        break;
        }
        if (n > max)
                return -EFBIG;
        (*buf)[n] = '\0';
        *ret_len = n;
        return 0;
}

int read_file_bounded_at(int dir_fd, const char *path, size_t max, ReadFileFlags flags, char **ret,
                         size_t *ret_size) {
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) char *buf = NULL;
        size_t n = 0, cap = 0;
        struct stat st;
        int r;

        fd = open_file_bounded_at(dir_fd, path, max, flags, &st);
        if (fd < 0)
                return fd;
        r = read_fd_bounded(fd, -1, max, S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t) st.st_size + 1 : 4096,
                            false, &buf, &cap, &n);
        if (r < 0)
                return r;
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

void random_bytes(void *buf, size_t n) {
        uint8_t *p = buf;

        if (getrandom(buf, n, GRND_NONBLOCK) == (ssize_t) n)
                return;
        /* no entropy yet (early boot) */
        for (size_t i = 0; i < n; i += sizeof(uint64_t)) {
                struct timespec ts;
                (void) clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t x = ((uint64_t) ts.tv_nsec << 32) ^ (uint64_t) ts.tv_sec ^ ((uint64_t) getpid() << 16) ^
                             (uintptr_t) &x ^ (uint64_t) i * UINT64_C(0x9e3779b97f4a7c15);
                memcpy(p + i, &x, n - i < sizeof(x) ? n - i : sizeof(x));
        }
}

#define SIP_ROTL(x, b) (uint64_t) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3)                                                                          \
        do {                                                                                               \
                v0 += v1, v1 = SIP_ROTL(v1, 13), v1 ^= v0, v0 = SIP_ROTL(v0, 32);                          \
                v2 += v3, v3 = SIP_ROTL(v3, 16), v3 ^= v2;                                                 \
                v0 += v3, v3 = SIP_ROTL(v3, 21), v3 ^= v0;                                                 \
                v2 += v1, v1 = SIP_ROTL(v1, 17), v1 ^= v2, v2 = SIP_ROTL(v2, 32);                          \
        } while (0)

uint64_t fnv1a64(uint64_t h, const void *data, size_t size) {
        const uint8_t *p = data;

        for (size_t i = 0; i < size; i++) {
                h ^= p[i];
                h *= UINT64_C(0x100000001b3);
        }
        return h;
}

uint32_t fnv1a32_string(const char *s, size_t *ret_len) {
        uint32_t h = UINT32_C(2166136261);
        const char *p = s;

        for (; *p; p++)
                h = (h ^ (unsigned char) *p) * UINT32_C(16777619);
        if (ret_len)
                *ret_len = (size_t) (p - s);
        return h;
}

static uint64_t le64(const uint8_t *p) {
        uint64_t x = 0;
        for (unsigned i = 0; i < 8; i++)
                x |= (uint64_t) p[i] << (8 * i);
        return x;
}

uint64_t siphash24(const void *data, size_t size, const uint8_t key[16]) {
        const uint8_t *p = data;
        uint64_t k0 = le64(key), k1 = le64(key + 8);
        uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0, v1 = UINT64_C(0x646f72616e646f6d) ^ k1,
                 v2 = UINT64_C(0x6c7967656e657261) ^ k0, v3 = UINT64_C(0x7465646279746573) ^ k1;
        uint64_t last = (uint64_t) size << 56;
        size_t whole = size - size % 8;

        for (size_t i = 0; i < whole; i += 8) {
                uint64_t m = le64(p + i);
                v3 ^= m;
                SIP_ROUND(v0, v1, v2, v3);
                SIP_ROUND(v0, v1, v2, v3);
                v0 ^= m;
        }
        for (size_t i = whole; i < size; i++)
                last |= (uint64_t) p[i] << (8 * (i - whole));
        v3 ^= last;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= last;
        v2 ^= 0xff;
        for (unsigned i = 0; i < 4; i++)
                SIP_ROUND(v0, v1, v2, v3);
        return v0 ^ v1 ^ v2 ^ v3;
}

/* A name no one can guess: another user who may not write the directory cannot, and one who
 * could would be refused before (write_file_atomic()); O_EXCL refuses whatever is there anyway. */
static int temp_name(const char *base, char **ret) {
        uint64_t x;

        random_bytes(&x, sizeof(x));
        /* hidden: policy discovery and the watch's "*.yaml" never take it for a drop-in */
        return asprintf(ret, ".#%s.%016llx", base, (unsigned long long) x) < 0 ? -ENOMEM : 0;
}

int write_file_atomic(const char *path, const char *data, size_t size, mode_t mode) {
        _cleanup_(freep) char *dir_copy = NULL, *base_copy = NULL, *tmp = NULL;
        _cleanup_(closep) int dir_fd = -1, fd = -1;
        struct stat st;
        const char *dir, *base;
        int r = 0;

        if (!path || (size > 0 && !data))
                return -EINVAL;
        dir_copy = strdup(path);
        base_copy = strdup(path);
        if (!dir_copy || !base_copy)
                return -ENOMEM;
        dir = dirname(dir_copy);
        base = basename(base_copy);
        if (strempty(base) || streq_ptr(base, "/") || streq_ptr(base, ".") || streq_ptr(base, ".."))
                return -EINVAL;
        dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd < 0)
                return -errno;
        /* Whoever else may write the directory could swap the file between the write and the
         * rename, or put a symlink where it goes: only root's (or the daemon's own user's). */
        if (fstat(dir_fd, &st) < 0)
                return -errno;
        if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)))
                return -EPERM;
        if (fstatat(dir_fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                /* a symlink is another's file (a Kubernetes ConfigMap mount is a farm of them):
                 * neither replaced by a file nor written through */
                if (S_ISLNK(st.st_mode))
                        return -ELOOP;
                if (S_ISDIR(st.st_mode))
                        return -EISDIR;
                if (S_ISREG(st.st_mode))
                        mode = st.st_mode & 07777;
        } else if (errno != ENOENT)
                return -errno;
        for (unsigned attempt = 0;; attempt++) {
                tmp = mfree(tmp);
                r = temp_name(base, &tmp);
                if (r < 0)
                        return r;
                fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd >= 0)
                        break;
                if (errno != EEXIST || attempt >= 16)
                        return -errno;
        }
        for (size_t done = 0; done < size;) {
                ssize_t k = write(fd, data + done, size - done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                done += (size_t) k;
        }
        if (r >= 0 && fchmod(fd, mode) < 0)
                r = -errno;
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        if (r >= 0 && renameat(dir_fd, tmp, dir_fd, base) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlinkat(dir_fd, tmp, 0);
                return r;
        }
        /* the rename itself durable */
        if (fsync(dir_fd) < 0)
                return -errno;
        return 0;
}
