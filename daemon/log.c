/* log.c — writes log lines to stderr; under journald (JOURNAL_STREAM names stderr) each line
 * carries a "<N>" priority prefix instead of a level word. */
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>

#include "log.h"

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

int log_internal(int level, int error, const char *format, ...) {
        char line[4096];
        va_list ap;
        int n;

        if (error < 0)
                error = -error;
        errno = error;
        va_start(ap, format);
        n = vsnprintf(line, sizeof(line), format, ap);
        va_end(ap);
        if (n < 0)
                n = 0;
        if ((size_t) n >= sizeof(line))
                n = sizeof(line) - 1;

        if (log_to_journal)
                fprintf(stderr, "<%d>%.*s\n", level, n, line);
        else
                fprintf(stderr, "bigtcpd: %s: %.*s\n", level_names[level & 7], n, line);
        return -error;
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
