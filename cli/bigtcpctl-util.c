/* bigtcpctl-util.c — what every verb of bigtcpctl shares: JSON readers, colours, size and
 * duration formatting, one-line errors (see bigtcpctl-util.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <langinfo.h>
#include <locale.h>
#include <unistd.h>

#include "bigtcpctl-util.h"

const char *const size_names[4] = {"gso_max_size", "gro_max_size", "gso_ipv4_max_size", "gro_ipv4_max_size"};

int error_exit(int code, const char *format, ...) {
        va_list ap;
        fputs("bigtcpctl: ", stderr);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputc('\n', stderr);
        return code;
}

json_object *devices_of(json_object *reply) {
        return jarray(reply, "devices");
}

static bool json_pretty;
static bool locale_utf8 = true;

void output_init(const Ctl *c) {
        const char *set = setlocale(LC_CTYPE, "");

        json_pretty = c->json_mode == JSON_PRETTY || (c->json_mode == JSON_AUTO && isatty(STDOUT_FILENO));
        /* as systemd's is_locale_utf8(): the codeset of the locale the environment names */
        locale_utf8 = set && streq_ptr(nl_langinfo(CODESET), "UTF-8");
}

bool output_utf8(void) {
        return locale_utf8;
}

const char *glyph(Glyph g) {
        static const char *const table[_GLYPH_MAX][2] = {
                [GLYPH_ARROW] = {"->", "→"},
                [GLYPH_BULLET] = {"*", "●"},
                [GLYPH_ELLIPSIS] = {"...", "…"},
        };
        return g >= 0 && g < _GLYPH_MAX ? table[g][locale_utf8] : "";
}

void print_json(json_object *o) {
        int flags = JSON_C_TO_STRING_NOSLASHESCAPE | (json_pretty ? JSON_C_TO_STRING_PRETTY : 0);
        size_t len;
        const char *s = json_object_to_json_string_length(
                o, flags | (flags & JSON_C_TO_STRING_PRETTY ? 0 : JSON_C_TO_STRING_PLAIN), &len);
        fwrite(s, 1, len, stdout);
        fputc('\n', stdout);
}

bool print_raw(const Ctl *c) {
        return c->json && !json_pretty;
}

const char *color(const Ctl *c, const char *sgr) {
        return c->color ? sgr : "";
}

const char *state_color(const char *state) {
        if (streq_ptr(state, "applied"))
                return ANSI_GREEN;
        if (streq_ptr(state, "pending") || streq_ptr(state, "probation"))
                return ANSI_YELLOW;
        if (streq_ptr(state, "failed") || streq_ptr(state, "rolled-back"))
                return ANSI_RED;
        if (streq_ptr(state, "unsupported") || streq_ptr(state, "unmanaged"))
                return ANSI_GREY;
        return NULL;
}

/* "185000 (180.7K)": exact bytes, then 1024-based with one decimal, truncated (never rounded
 * up), and no decimal when exact. Below 1024: bytes only. */
const char *format_size(char *buf, size_t size, int64_t v) {
        static const char suffix[] = {'K', 'M', 'G'};
        int64_t unit = 1024;
        size_t i = 0;

        if (v < 1024) {
                snprintf(buf, size, "%" PRId64, v);
                return buf;
        }
        while (i + 1 < sizeof(suffix) && v >= unit * 1024) {
                unit *= 1024;
                i++;
        }
        if (v % unit == 0)
                snprintf(buf, size, "%" PRId64 " (%" PRId64 "%c)", v, v / unit, suffix[i]);
        else {
                int64_t tenths = v * 10 / unit;
                snprintf(buf, size, "%" PRId64 " (%" PRId64 ".%" PRId64 "%c)", v, tenths / 10, tenths % 10,
                         suffix[i]);
        }
        return buf;
}

const char *format_duration(char *buf, size_t size, int64_t usec) {
        int64_t sec = usec / 1000000;
        if (sec >= 86400)
                snprintf(buf, size, "%" PRId64 "d %" PRId64 "h", sec / 86400, sec / 3600 % 24);
        else if (sec >= 3600)
                snprintf(buf, size, "%" PRId64 "h %" PRId64 "min", sec / 3600, sec / 60 % 60);
        else if (sec >= 60)
                snprintf(buf, size, "%" PRId64 "min %" PRId64 "s", sec / 60, sec % 60);
        else
                snprintf(buf, size, "%" PRId64 ".%" PRId64 "s", sec, usec / 100000 % 10);
        return buf;
}

int format_canary(const Ctl *c, json_object *p, char **ret) {
        _cleanup_(freep) char *s = NULL;
        const char *why = jstr(p, "not_here");
        int64_t cohort = jint(p, "cohort", -1), percent = jint(p, "hosts_percent", -1);
        int r;

        if (percent < 0 || cohort < 0)
                return 0;
        if (jbool(p, "applies"))
                r = strextendf(&s, "%s: %sapplies here%s", jstr(p, "name") ?: "?", color(c, ANSI_GREEN),
                               color(c, ANSI_RESET));
        else
                r = strextendf(&s, "%s: %snot here%s%s%s%s", jstr(p, "name") ?: "?", color(c, ANSI_YELLOW),
                               color(c, ANSI_RESET), why && !streq_ptr(why, "cohort") ? " (" : "",
                               why && !streq_ptr(why, "cohort") ? why : "",
                               why && !streq_ptr(why, "cohort") ? ")" : "");
        if (r >= 0)
                r = strextendf(&s, ", cohort %" PRId64 " %s below hosts-percent %" PRId64, cohort,
                               cohort < percent ? "is" : "is not", percent);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 1;
}
