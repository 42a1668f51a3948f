/* log.h — the one logging path: stderr, or the journal's native protocol when stderr is the
 * journal (JOURNAL_STREAM), with the call site and the caller's own fields (log-fields.h has
 * bigtcpd's). Helpers do not log; the caller that decides logs once. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <syslog.h>

#include "util.h"

/* "device" or "devices": a count in words. */
#define PLURAL(n, one, many) ((n) == 1 ? (one) : (many))

extern int log_max_level;

void log_open(void);
int log_level_from_string(const char *s);

/* The fields of one journal entry beyond MESSAGE=, PRIORITY=, ERRNO= and the call site: a caller's
 * own struct, turned into KEY=value fields by its LogFieldsFn with log_entry_field(). A field that
 * does not fit is left out. */
typedef struct LogEntry LogEntry;
void log_entry_field(LogEntry *e, const char *format, ...) _printf_(2, 3);
typedef void (*LogFieldsFn)(LogEntry *e, const void *fields);
/* Logs at `level` when enabled; sets errno to `error` first so that "%m" names it. Always
 * returns -abs(error), so that `return log_error_errno(r, "…: %m");` works. `file`, `line` and
 * `func` are the call site (the macros below pass __FILE__, __LINE__, __func__), the journal
 * entry's CODE_FILE=, CODE_LINE= and CODE_FUNC=, as systemd's own log functions do. The caller's
 * fields (`fn` and `fields` NULL: none) are not shown on stderr. */
int log_fields_internal(int level, int error, const char *file, int line, const char *func, LogFieldsFn fn,
                        const void *fields, const char *format, ...) _printf_(8, 9);
/* The same without fields of the caller's. */
#define log_internal(level, error, file, line, func, ...)                                        \
        log_fields_internal(level, error, file, line, func, NULL, NULL, __VA_ARGS__)
/* Whether lines go to the journal (log_open() saw JOURNAL_STREAM name stderr). */
bool log_journal(void);

#define log_full_errno(level, error, ...)                                                        \
        ({                                                                                       \
                int _l_ = (level), _e_ = (error);                                                \
                (log_max_level >= _l_) ? log_internal(_l_, _e_, __FILE__, __LINE__, __func__, __VA_ARGS__) \
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
