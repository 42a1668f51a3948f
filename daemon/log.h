/* log.h — the daemon's one logging path: stderr, with syslog priority prefixes when stderr is
 * the journal. Helpers do not log; the caller that decides logs once. */
#pragma once

#include <errno.h>
#include <syslog.h>

#include "util.h"

extern int log_max_level;

void log_open(void);
int log_level_from_string(const char *s);

/* Logs at `level` when enabled; sets errno to `error` first so that "%m" names it. Always
 * returns -abs(error), so that `return log_error_errno(r, "…: %m");` works. */
int log_internal(int level, int error, const char *format, ...) _printf_(3, 4);

#define log_full_errno(level, error, ...)                                                        \
        ({                                                                                       \
                int _l_ = (level), _e_ = (error);                                                \
                (log_max_level >= _l_) ? log_internal(_l_, _e_, __VA_ARGS__)                     \
                                       : -(_e_ < 0 ? -_e_ : _e_);                                \
        })

#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)

#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)

/* Device-scoped: every line starts with the device name, after its namespace's ("cni-1/eth0")
 * when that is not the daemon's own. */
#define log_dev_full_errno(d, level, e, fmt, ...)                                                \
        log_full_errno(level, e, "%s%s%s: " fmt, (d)->netns ? (d)->netns->name : "",             \
                       (d)->netns ? "/" : "", (d)->ifname[0] ? (d)->ifname : "?", ##__VA_ARGS__)
#define log_dev_debug(d, fmt, ...) log_dev_full_errno(d, LOG_DEBUG, 0, fmt, ##__VA_ARGS__)
#define log_dev_info(d, fmt, ...) log_dev_full_errno(d, LOG_INFO, 0, fmt, ##__VA_ARGS__)
#define log_dev_notice(d, fmt, ...) log_dev_full_errno(d, LOG_NOTICE, 0, fmt, ##__VA_ARGS__)
#define log_dev_warning(d, fmt, ...) log_dev_full_errno(d, LOG_WARNING, 0, fmt, ##__VA_ARGS__)
#define log_dev_warning_errno(d, e, fmt, ...) log_dev_full_errno(d, LOG_WARNING, e, fmt, ##__VA_ARGS__)
#define log_dev_error(d, fmt, ...) log_dev_full_errno(d, LOG_ERR, 0, fmt, ##__VA_ARGS__)
#define log_dev_error_errno(d, e, fmt, ...) log_dev_full_errno(d, LOG_ERR, e, fmt, ##__VA_ARGS__)

/* A rate limit for lines a caller can cause as often as it likes (refused calls): at most
 * `burst` lines per `interval_usec`. log_ratelimit() says whether a line may be logged now, and
 * in *ret_suppressed how many were dropped since the last one logged (for the line to say so). */
typedef struct LogRateLimit {
        uint64_t interval_usec;
        unsigned burst;
        uint64_t begin;
        unsigned n, suppressed;
} LogRateLimit;
#define LOG_RATELIMIT_INIT(interval, b) {.interval_usec = (interval), .burst = (b)}
bool log_ratelimit(LogRateLimit *rl, unsigned *ret_suppressed);
