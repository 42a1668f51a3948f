/* bigtcpctl-util.h — what every verb of bigtcpctl shares: the parsed global options, exit codes,
 * colours, small JSON readers, size and duration formatting, one-line errors. */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "json-read.h"
#include "util.h"

#define IFACE "io.bigtcpd.Manager"

/* Exit codes, documented in --help. */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,
        EXIT_USAGE = 2,
        EXIT_NOT_RUNNING = 3,
        EXIT_DENIED = 4,
};

#define ANSI_RED "\033[0;31m"
#define ANSI_GREEN "\033[0;32m"
#define ANSI_YELLOW "\033[0;33m"
#define ANSI_GREY "\033[0;90m"
#define ANSI_BOLD "\033[1m"
#define ANSI_RESET "\033[0m"

/* What every verb is handed: the global options as main() parsed them, and the varlink
 * connection once a call has opened it (main closes it). */
/* --json: "pretty" on a terminal and one line into a pipe (plain --json), or as asked. */
typedef enum JsonMode {
        JSON_OFF,
        JSON_AUTO,
        JSON_PRETTY,
        JSON_SHORT,
        _JSON_MODE_MAX,
        _JSON_MODE_INVALID = -1,
} JsonMode;

typedef struct Ctl {
        const char *socket;
        bool dbus;
        bool json; /* json_mode != JSON_OFF */
        JsonMode json_mode;
        bool pager; /* not --no-pager */
        size_t columns; /* what a table may take: the terminal's width, $COLUMNS, or 0 (no limit) */
        bool legend;
        bool all;
        const char *timeout; /* try --timeout */
        const char *to;      /* try --to */
        const char *for_duration; /* --for, for watch */
        bool color; /* stdout is a terminal and colour is not turned off */
        Varlink *conn;
} Ctl;

/* The four sizes, in the kernel's names and in the order of `ip -d link`. */
extern const char *const size_names[4];


/* "bigtcpctl: …" on stderr; returns `code`. */
int error_exit(int code, const char *format, ...) _printf_(2, 3);

/* The array `devices` of a ListDevices or Plan reply, or NULL. */
json_object *devices_of(json_object *reply);

/* Sets up the output once, before any is written: whether JSON is pretty (from c->json_mode and
 * whether stdout is a terminal), and whether the locale takes UTF-8 (else glyphs are ASCII). */
void output_init(const Ctl *c);
/* --json as output_init() said: pretty, or one line. */
void print_json(json_object *o);
/* --json that is one line: the daemon's bytes as they are; pretty: parsed and printed again. */
bool print_raw(const Ctl *c);

/* What bigtcpctl draws, in UTF-8 or, in another locale (LC_ALL=C), ASCII. */
typedef enum Glyph {
        GLYPH_ARROW,    /* "→" or "->" */
        GLYPH_BULLET,   /* "●" or "*" */
        GLYPH_ELLIPSIS, /* "…" or "..." */
        _GLYPH_MAX,
        _GLYPH_INVALID = -1,
} Glyph;
const char *glyph(Glyph g);
bool output_utf8(void);


/* `sgr` when the output is coloured, else "". */
const char *color(const Ctl *c, const char *sgr);
/* The colour of a device state, or NULL. */
const char *state_color(const char *state);


/* One policy of GetStatus's or Plan's `policies` that has rollout.hosts-percent, as a line:
 * "web-ipv4-canary: applies here, cohort 17 is below hosts-percent 25", "…: not here, cohort 37 is
 * not below hosts-percent 25", "…: not here (hosts), cohort …". Returns 1 with *ret set, 0 for a
 * policy without hosts-percent, -ENOMEM. */
int format_canary(const Ctl *c, json_object *p, char **ret);

/* "185000 (180.7K)". */
const char *format_size(char *buf, size_t size, int64_t v);
/* "58.4s", "2min 5s", "3h 12min", "2d 4h". */
const char *format_duration(char *buf, size_t size, int64_t usec);
