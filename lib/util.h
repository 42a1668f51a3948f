/* util.h — small helpers shared by every part of bigtcpd: cleanup attributes and hand-off for
 * every owned type (memory, fds, FILE, DIR, nl_msg, json_object, libevent events), array sizes,
 * clocks, string lists and the one bounded file reader. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <string.h>
#include <unistd.h>

struct event;
struct nl_msg;
struct json_object;

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

#define USEC_PER_MSEC UINT64_C(1000)
#define USEC_PER_SEC UINT64_C(1000000)

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

/* func##p(&x) calls func(x) unless x is NULL: for _cleanup_(funcp). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                  \
        static inline void func##p(type *p) {                                                    \
                if (*p)                                                                          \
                        func(*p);                                                                \
        }

static inline void *mfree(void *p) {
        free(p);
        return NULL;
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

/* Close `fd` if it is one; -1 to store back. */
static inline int safe_close(int fd) {
        closep(&fd);
        return -1;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);
DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir);

/* The libraries' own free functions, declared here so that users need not include every
 * library's headers to clean up after it. */
void nlmsg_free(struct nl_msg *msg);
int json_object_put(struct json_object *o);
void event_free(struct event *ev);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nl_msg *, nlmsg_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct json_object *, json_object_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct event *, event_free);

static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}

static inline bool strempty(const char *s) {
        return !s || !*s;
}

/* NULL-terminated string lists. */
void strv_free(char **l);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free);
size_t strv_length(char *const *l);
bool strv_contains(char *const *l, const char *s);
/* Append a copy of `s` (or take `s` itself with strv_push_take); *n is kept as the length. */
int strv_push(char ***l, size_t *n, const char *s);
int strv_push_take(char ***l, size_t *n, char *s);

/* Appends to *s (NULL: empty), growing it as needed: no fixed buffer for what the kernel or
 * the policy sizes (names, extack messages, counters). -ENOMEM, and *s unchanged, on failure. */
int strextendf(char **s, const char *format, ...) _printf_(2, 3);

/* Clocks, in microseconds: CLOCK_MONOTONIC (timers, rate limits), CLOCK_BOOTTIME (deadlines
 * that must count suspended time and survive a daemon restart), CLOCK_REALTIME (for humans). */
uint64_t now_usec(void);
uint64_t boottime_usec(void);
uint64_t realtime_usec(void);

/* A clock the decisions read, so that tests can drive time: NULL (or a NULL `usec`) is the
 * system's clocks. */
typedef struct Clock {
        uint64_t (*usec)(void *userdata, int clock_id);
        void *userdata;
} Clock;
uint64_t clock_now(const Clock *c, int clock_id);

typedef enum ReadFileFlags {
        READ_FILE_REGULAR = 0,       /* the daemon: anything but a regular file is refused */
        READ_FILE_ANY_TYPE = 1 << 0, /* a command line: pipes and FIFOs too (it may wait for them) */
        READ_FILE_NOFOLLOW = 1 << 1, /* a symlink is refused (-ELOOP), never followed */
} ReadFileFlags;

/* Read a whole file of at most `max` bytes into a NUL-terminated buffer. Unless flags say
 * READ_FILE_ANY_TYPE, never blocks on a FIFO or device (opened non-blocking, then refused):
 * -EBADF for anything that is not a regular file. -EISDIR for a directory, -EFBIG above `max`.
 * Works for /proc files (which report size 0). */
int read_file_bounded(const char *path, size_t max, ReadFileFlags flags, char **ret, size_t *ret_size);
/* Replace `path` with `data` so that a reader (or a crash) sees the old file or the new one,
 * never a part: a hidden temporary file of a name no one can guess in the same directory (made
 * with O_EXCL), fsync, rename over `path`, fsync of the directory. `mode` for a new file; a file
 * that exists keeps its mode. -EPERM: the directory is not root's (or the caller's user's), or
 * its group or others may write it; -ELOOP: `path` is a symlink, which is neither replaced nor
 * written through (its file is another's to manage: a Kubernetes ConfigMap mount is such a farm);
 * -EISDIR: it is a directory. */
int write_file_atomic(const char *path, const char *data, size_t size, mode_t mode);
/* The same, `path` relative to the directory `dir_fd` (or AT_FDCWD). */
int read_file_bounded_at(int dir_fd, const char *path, size_t max, ReadFileFlags flags, char **ret,
                         size_t *ret_size);
/* The rest of the file open at `fd`, at most `max` bytes, into *buf (of *cap bytes, grown as
 * needed from `first`, kept by the caller to read the next file into; NUL-terminated): from the
 * descriptor's position (at < 0, read(2)), or from offset `at` on (pread(2), the position left as
 * it was). With short_is_end a read that leaves room ends it (a file generated whole by each read
 * from its start, a seq_file of one record: no second read for the 0 that would say so).
 * -EFBIG above `max`. */
int read_fd_bounded(int fd, off_t at, size_t max, size_t first, bool short_is_end, char **buf, size_t *cap,
                    size_t *ret_len);
/* Open it for reading as read_file_bounded_at() would, the same checks made: a descriptor (and
 * in `ret_st`, may be NULL, what fstat(2) said), or the same errors. For a file read in pieces. */
int open_file_bounded_at(int dir_fd, const char *path, size_t max, ReadFileFlags flags, struct stat *ret_st);

/* FNV-1a, 64 bits: `h` (FNV1A64_OFFSET to begin with) carried on over `size` bytes of `data`. Its
 * values are kept (the policy's digest, the cohorts): the algorithm is fixed. Not for what a
 * caller chooses and an attacker could make collide (siphash24() is). */
#define FNV1A64_OFFSET UINT64_C(0xcbf29ce484222325)
uint64_t fnv1a64(uint64_t h, const void *data, size_t size);
/* FNV-1a, 32 bits, of the string `s` (a hash table's bucket); its length into *ret_len unless NULL. */
uint32_t fnv1a32_string(const char *s, size_t *ret_len);

/* SipHash-2-4 of `data` under the 16-byte `key`: a hash that whoever does not know the key cannot
 * make collide (names a pod chooses go into what is hashed). */
uint64_t siphash24(const void *data, size_t size, const uint8_t key[16]);
/* `n` bytes no one can guess: getrandom(2), or early in boot (no entropy yet) the clocks and
 * addresses mixed, unguessable enough for what uses it (a key, a name made with O_EXCL). */
void random_bytes(void *buf, size_t n);
