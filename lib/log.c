/* log.c — writes log lines to stderr ("bigtcpd: info: …", the program's name); under journald (JOURNAL_STREAM names
 * stderr, as systemd sets it for a service) each is a journal entry of its own, sent with
 * sd_journal_sendv_with_location() with its priority, fields and call site (CODE_FILE=,
 * CODE_LINE=, CODE_FUNC= of the line that logged, not of this file). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "log.h"

/* The fields of one entry other than MESSAGE, all together. */
#define LOG_FIELDS_BUF 2048

int log_max_level = LOG_INFO;
static bool log_to_journal;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",
        [LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

void log_open(void) {
        const char *e = getenv("JOURNAL_STREAM");
        struct stat st;
        unsigned long long dev, ino;

        log_to_journal = false;
        if (e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0)
                log_to_journal = (unsigned long long) st.st_dev == dev &&
                                 (unsigned long long) st.st_ino == ino;
}

int log_level_from_string(const char *s) {
        for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                if (level_names[i] && strcasecmp(s, level_names[i]) == 0)
                        return (int) i;
        if (strcasecmp(s, "error") == 0)
                return LOG_ERR;
        return -EINVAL;
}

bool log_journal(void) {
        return log_to_journal;
}

/* The fields of one entry other than MESSAGE and the call site, as iovecs into one buffer: fields
 * are short (names, numbers); one that does not fit is left out. */
struct LogEntry {
        struct iovec iov[32];
        size_t n, used;
        char buf[LOG_FIELDS_BUF];
};

void log_entry_field(LogEntry *e, const char *format, ...) {
        size_t size = LOG_FIELDS_BUF - e->used;
        va_list ap;
        int k;

        if (e->n >= ELEMENTSOF(e->iov))
                return;
        va_start(ap, format);
        k = vsnprintf(e->buf + e->used, size, format, ap);
        va_end(ap);
        if (k < 0 || (size_t) k >= size)
                return;
        e->iov[e->n++] = (struct iovec){.iov_base = e->buf + e->used, .iov_len = (size_t) k};
        e->used += (size_t) k + 1;
}

/* Where a log line was written, from the log macros. */
typedef struct LogSite {
        const char *file, *func;
        int line;
} LogSite;

/* __FILE__ as the compiler was given it, relative to the build directory ("../daemon/apply.c"):
 * the path in the source tree ("daemon/apply.c"). */
static const char *source_path(const char *file) {
        for (;;)
                if (strncmp(file, "../", 3) == 0)
                        file += 3;
                else if (strncmp(file, "./", 2) == 0)
                        file += 2;
                else
                        return file;
}

/* The entry for the journal; false when it could not be sent (then stderr has the line). */
static bool send_journal(int level, int error, const LogSite *site, LogFieldsFn fn, const void *fields,
                         const char *line, int n) {
        char code_file[256], code_line[32];
        _cleanup_(freep) char *message = NULL;
        LogEntry entry = {.n = 0}, *e = &entry;

        if (asprintf(&message, "MESSAGE=%.*s", n, line) < 0)
                return false;
        e->iov[e->n++] = (struct iovec){.iov_base = message, .iov_len = strlen(message)};
        log_entry_field(e, "PRIORITY=%d", level);
        log_entry_field(e, "SYSLOG_IDENTIFIER=%s", program_invocation_short_name);
        if (error > 0)
                log_entry_field(e, "ERRNO=%d", error);
        if (fn && fields)
                fn(e, fields);
        (void) snprintf(code_file, sizeof(code_file), "CODE_FILE=%s", source_path(site->file));
        (void) snprintf(code_line, sizeof(code_line), "CODE_LINE=%d", site->line);
        return sd_journal_sendv_with_location(code_file, code_line, site->func, e->iov, (int) e->n) >= 0;
}

static int log_vfields(int level, int error, const LogSite *site, LogFieldsFn fn, const void *fields,
                       const char *format, va_list ap) {
        char line[4096];
        int n;

        if (error < 0)
                error = -error;
        errno = error;
        n = vsnprintf(line, sizeof(line), format, ap);
        if (n < 0)
                n = 0;
        if ((size_t) n >= sizeof(line))
                n = sizeof(line) - 1;

        if (log_to_journal && send_journal(level, error, site, fn, fields, line, n))
                return -error;
        if (log_to_journal)
                fprintf(stderr, "<%d>%.*s\n", level, n, line);
        else
                fprintf(stderr, "%s: %s: %.*s\n", program_invocation_short_name, level_names[level & 7], n, line);
        return -error;
}

int log_fields_internal(int level, int error, const char *file, int line, const char *func, LogFieldsFn fn,
                        const void *fields, const char *format, ...) {
        const LogSite site = {.file = file, .line = line, .func = func};
        va_list ap;
        int r;

        va_start(ap, format);
        r = log_vfields(level, error, &site, fn, fields, format, ap);
        va_end(ap);
        return r;
}

bool log_ratelimit(LogRateLimit *rl, unsigned *ret_suppressed) {
        uint64_t now = now_usec();

        if (rl->begin == 0 || now - rl->begin >= rl->interval_usec) {
                rl->begin = now;
                rl->n = 0;
        }
        if (rl->n >= rl->burst) {
                rl->suppressed++;
                return false;
        }
        rl->n++;
        *ret_suppressed = rl->suppressed;
        rl->suppressed = 0;
        return true;
}
