/* policy-parse.c — the YAML walk of format version 1: every key, its type and range, the
 * effective rollback of each policy, duplicate names; every error with its line and column, none
 * logged. A file that parses clean is added to the set, one with errors leaves it as it was. */

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <yaml.h>

#include "linux-compat.h"
#include "parse-util.h"
#include "policy.h"
#include "util.h"

/* Past this many errors in one file the rest is noise (and a hostile file could make millions). */
#define PARSE_ERRORS_MAX 100u
/* Room for a user string quoted into a message; longer ones are cut. */
#define QUOTE_MAX 96u
#define QUOTE_CUT 60u

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static void yaml_parser_deletep(yaml_parser_t *p) {
        yaml_parser_delete(p);
}

static void yaml_document_deletep(yaml_document_t *d) {
        yaml_document_delete(d);
}

/* A user string as it goes into a message: quoted, escaped, cut when long. */
static const char *quote(const char *s, char *buf, size_t size) {
        size_t o = 0, n = 0;

        /* size is QUOTE_MAX: room for QUOTE_CUT plain characters, or fewer escaped ones */
        buf[o++] = '"';
        for (; *s; s++, n++) {
                unsigned char c = (unsigned char) *s;
                if (n >= QUOTE_CUT || o + 10 >= size) {
                        memcpy(buf + o, "...", 3);
                        o += 3;
                        break;
                }
                if (c == '"' || c == '\\') {
                        buf[o++] = '\\';
                        buf[o++] = (char) c;
                } else if (c < 0x20 || c == 0x7f)
                        o += (size_t) snprintf(buf + o, size - o, "\\x%02x", c);
                else
                        buf[o++] = (char) c;
        }
        buf[o++] = '"';
        buf[o] = '\0';
        return buf;
}

typedef struct Parser {
        const char *file;
        const char *data;
        size_t size;
        yaml_document_t *doc;
        PolicyErrors *errs;
        size_t n_start; /* errs->n when this file began */
        size_t n_errors;
        int r; /* a hard failure (-ENOMEM) ends everything */
} Parser;

_printf_(4, 0) static void parser_verror(Parser *p, unsigned line, unsigned column, const char *fmt,
                                         va_list ap) {
        char *m;
        int r;

        if (p->r < 0 || p->n_errors > PARSE_ERRORS_MAX)
                return;
        if (p->n_errors == PARSE_ERRORS_MAX)
                m = strdup("too many errors, giving up");
        else if (vasprintf(&m, fmt, ap) < 0)
                m = NULL;
        if (!m) {
                p->r = -ENOMEM;
                return;
        }
        r = policy_errors_append(p->errs, p->file, line, column, m);
        if (r < 0) {
                free(m);
                p->r = r;
                return;
        }
        p->n_errors++;
}

_printf_(4, 5) static void parser_error_at(Parser *p, unsigned line, unsigned column, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        parser_verror(p, line, column, fmt, ap);
        va_end(ap);
}

_printf_(3, 4) static void perr(Parser *p, const yaml_node_t *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        parser_verror(p, (unsigned) n->start_mark.line + 1, (unsigned) n->start_mark.column + 1, fmt, ap);
        va_end(ap);
}

/* ---- YAML nodes ---- */

#define MAPPING_FOREACH(pair, node)                                                                         \
        for (yaml_node_pair_t *pair = (node)->data.mapping.pairs.start;                                     \
             pair < (node)->data.mapping.pairs.top; pair++)
#define SEQUENCE_FOREACH(item, node)                                                                        \
        for (yaml_node_item_t *item = (node)->data.sequence.items.start;                                    \
             item < (node)->data.sequence.items.top; item++)

static size_t sequence_length(const yaml_node_t *n) {
        return (size_t) (n->data.sequence.items.top - n->data.sequence.items.start);
}

static const char *scalar(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE ? (const char *) n->data.scalar.value : NULL;
}

static bool scalar_is_plain(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* YAML's null: an empty plain scalar, "~" or "null". */
static bool node_is_null(const yaml_node_t *n) {
        const char *v = scalar(n);
        if (!v || !scalar_is_plain(n))
                return false;
        return streq(v, "") || streq(v, "~") || streq(v, "null") || streq(v, "Null") || streq(v, "NULL");
}

/* Collect the values of a mapping by key; unknown and repeated keys are reported. Returns -EINVAL
 * (reported) when the node is no mapping. */
static int mapping_collect(Parser *p, yaml_node_t *n, const char *what, const char *const *keys,
                           size_t n_keys, yaml_node_t **values) {
        char q[QUOTE_MAX];

        for (size_t i = 0; i < n_keys; i++)
                values[i] = NULL;
        if (n->type != YAML_MAPPING_NODE) {
                if (what)
                        perr(p, n, "%s: expected a mapping", what);
                else
                        perr(p, n, "expected a mapping");
                return -EINVAL;
        }

        MAPPING_FOREACH(pair, n) {
                yaml_node_t *k = yaml_document_get_node(p->doc, pair->key);
                yaml_node_t *v = yaml_document_get_node(p->doc, pair->value);
                const char *ks = scalar(k);
                size_t i;

                if (!k || !v)
                        continue;
                if (!ks) {
                        perr(p, k, "expected a string as key");
                        continue;
                }
                for (i = 0; i < n_keys; i++)
                        if (strlen(keys[i]) == k->data.scalar.length && streq(ks, keys[i]))
                                break;
                if (i >= n_keys) {
                        perr(p, k, "unknown key %s", quote(ks, q, sizeof(q)));
                        continue;
                }
                if (values[i]) {
                        perr(p, k, "duplicate key %s", quote(ks, q, sizeof(q)));
                        continue;
                }
                values[i] = v;
        }
        return 0;
}

/* A scalar string of sane length without NUL bytes; borrowed from the document. */
static int get_string(Parser *p, yaml_node_t *n, const char *key, const char **ret) {
        const char *v = scalar(n);

        if (!v || node_is_null(n)) {
                perr(p, n, "%s: expected a string", key);
                return -EINVAL;
        }
        if (strlen(v) != n->data.scalar.length) {
                perr(p, n, "%s: string contains a NUL byte", key);
                return -EINVAL;
        }
        if (n->data.scalar.length > POLICY_STRING_MAX) {
                perr(p, n, "%s: string too long (max %u)", key, POLICY_STRING_MAX);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

static int strlist_append(StrList *l, const char *s) {
        char **t, *d;

        d = strdup(s);
        if (!d)
                return -ENOMEM;
        t = realloc(l->items, (l->n + 1) * sizeof(char *));
        if (!t) {
                free(d);
                return -ENOMEM;
        }
        l->items = t;
        l->items[l->n++] = d;
        return 0;
}

typedef enum ListKind {
        LIST_NAME,   /* interface name globs, "!" negates */
        LIST_HOSTS,  /* hostname globs */
        LIST_KIND,   /* link kinds */
        LIST_DRIVER, /* driver globs */
        LIST_MAC,    /* address globs, folded to lower case */
        LIST_ROUTE,  /* "default" or prefixes */
        _LIST_KIND_MAX,
        _LIST_KIND_INVALID = -1,
} ListKind;

static bool kind_is_valid(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++)
                if (!(islower((unsigned char) *s) || isdigit((unsigned char) *s) || *s == '_' || *s == '-'))
                        return false;
        return true;
}

/* Reports and returns false when the item is not valid for the list. */
static bool list_item_check(Parser *p, yaml_node_t *n, const char *key, ListKind kind, const char *s) {
        char q[QUOTE_MAX];
        int r;

        switch (kind) {
        case LIST_NAME:
                if (glob_is_valid(s[0] == '!' ? s + 1 : s))
                        return true;
                break;
        case LIST_HOSTS:
        case LIST_DRIVER:
        case LIST_MAC:
                if (glob_is_valid(s))
                        return true;
                break;
        case LIST_KIND:
                if (kind_is_valid(s))
                        return true;
                perr(p, n, "%s: bad kind %s", key, quote(s, q, sizeof(q)));
                return false;
        case LIST_ROUTE:
                r = route_prefix_parse(s, NULL);
                if (r >= 0)
                        return true;
                if (r == -EDOM)
                        perr(p, n, "%s: prefix %s has host bits set", key, quote(s, q, sizeof(q)));
                else
                        perr(p, n, "%s: bad prefix %s", key, quote(s, q, sizeof(q)));
                return false;
        case _LIST_KIND_MAX:
        case _LIST_KIND_INVALID:
                return false;
        }
        perr(p, n, "%s: bad glob %s", key, quote(s, q, sizeof(q)));
        return false;
}

/* A list of strings, or one string standing for a list of one. */
static void parse_strlist(Parser *p, yaml_node_t *n, const char *key, ListKind kind, StrList *l) {
        yaml_node_t *one[1];
        yaml_node_t **items;
        _cleanup_(freep) yaml_node_t **owned = NULL;
        size_t n_items;
        bool plain = false, all_ok = true;

        if (n->type == YAML_SCALAR_NODE && !node_is_null(n)) {
                one[0] = n;
                items = one;
                n_items = 1;
        } else if (n->type == YAML_SEQUENCE_NODE) {
                n_items = sequence_length(n);
                if (n_items == 0) {
                        perr(p, n, "%s: empty list", key);
                        return;
                }
                if (n_items > POLICY_LIST_MAX) {
                        perr(p, n, "%s: too many items (max %u)", key, POLICY_LIST_MAX);
                        return;
                }
                owned = calloc(n_items, sizeof(*owned));
                if (!owned) {
                        p->r = -ENOMEM;
                        return;
                }
                n_items = 0;
                SEQUENCE_FOREACH(item, n) {
                        owned[n_items++] = yaml_document_get_node(p->doc, *item);
                }
                items = owned;
        } else {
                perr(p, n, "%s: expected a string or a list of strings", key);
                return;
        }

        for (size_t i = 0; i < n_items; i++) {
                const char *s;
                int r;

                if (!items[i] || get_string(p, items[i], key, &s) < 0 ||
                    !list_item_check(p, items[i], key, kind, s)) {
                        all_ok = false;
                        continue;
                }
                if (kind == LIST_NAME && s[0] != '!')
                        plain = true;
                r = strlist_append(l, s);
                if (r < 0) {
                        p->r = r;
                        return;
                }
                if (kind == LIST_MAC)
                        for (char *c = l->items[l->n - 1]; *c; c++)
                                *c = (char) tolower((unsigned char) *c);
        }
        /* "!eth0" alone would match nothing at all: say so rather than ship a dead policy */
        if (kind == LIST_NAME && all_ok && !plain)
                perr(p, n, "%s: needs at least one glob without \"!\"", key);
}

/* ---- the policy format ---- */

/* What the parser keeps beside each policy of a file until the file is done. */
typedef struct ParsedPolicy {
        yaml_node_t *name_node;
        bool has_rollback;
        RollbackSpec rollback; /* the policy's own keys */
        yaml_node_t *rollback_node;
        bool rollback_ok; /* parsed without errors, so worth checking as a whole */
} ParsedPolicy;

typedef struct ParsedFile {
        bool has_rollback;
        RollbackSpec rollback;
        yaml_node_t *rollback_node;
        bool rollback_ok;
        Policy *policies; /* what goes into the set */
        ParsedPolicy *parsed; /* one for each of them */
        size_t n_policies;
} ParsedFile;

static void parsed_file_done(ParsedFile *f) {
        rollback_spec_done(&f->rollback);
        for (size_t i = 0; i < f->n_policies; i++) {
                policy_done(&f->policies[i]);
                rollback_spec_done(&f->parsed[i].rollback);
        }
        free(f->policies);
        free(f->parsed);
        *f = (ParsedFile){};
}

static void parse_size(Parser *p, yaml_node_t *n, const char *key, SizeSpec *ret) {
        const char *v = scalar(n);
        char q[QUOTE_MAX];

        if (v && streq(v, "max")) {
                *ret = (SizeSpec){.kind = SIZE_DEVICE_MAX};
                return;
        }
        if (v && streq(v, "legacy")) {
                *ret = (SizeSpec){.kind = SIZE_LEGACY};
                return;
        }
        /* integers only from plain scalars: "185000" in quotes is a string */
        if (v && scalar_is_plain(n) && strlen(v) == n->data.scalar.length &&
            (isdigit((unsigned char) v[0]) || (v[0] == '-' && isdigit((unsigned char) v[1])))) {
                const char *d = v[0] == '-' ? v + 1 : v;
                uint64_t x = 0;

                for (; isdigit((unsigned char) *d); d++)
                        if (x <= BT_GRO_MAX_SIZE)
                                x = x * 10 + (uint64_t) (*d - '0');
                if (*d == '\0') {
                        if (v[0] == '-' || x < 1 || x > BT_GRO_MAX_SIZE)
                                perr(p, n, "%s: %s is out of range (1..%u)", key,
                                     strlen(v) <= QUOTE_CUT ? v : quote(v, q, sizeof(q)), BT_GRO_MAX_SIZE);
                        else
                                *ret = (SizeSpec){.kind = SIZE_BYTES, .bytes = (uint32_t) x};
                        return;
                }
        }
        perr(p, n, "%s: expected a number of bytes, \"max\" or \"legacy\"", key);
}

enum { FAMILY_GSO, FAMILY_GRO, _FAMILY_KEY_MAX };
static const char *const family_keys[_FAMILY_KEY_MAX] = {
        [FAMILY_GSO] = "gso-max-size",
        [FAMILY_GRO] = "gro-max-size",
};

static void parse_family(Parser *p, yaml_node_t *n, const char *key, FamilySpec *ret) {
        yaml_node_t *v[_FAMILY_KEY_MAX];

        if (mapping_collect(p, n, key, family_keys, _FAMILY_KEY_MAX, v) < 0)
                return;
        if (!v[FAMILY_GSO] && !v[FAMILY_GRO]) {
                perr(p, n, "%s: missing key \"gso-max-size\" or \"gro-max-size\"", key);
                return;
        }
        ret->set = true;
        if (v[FAMILY_GSO])
                parse_size(p, v[FAMILY_GSO], family_keys[FAMILY_GSO], &ret->gso);
        if (v[FAMILY_GRO])
                parse_size(p, v[FAMILY_GRO], family_keys[FAMILY_GRO], &ret->gro);
}

static void parse_duration(Parser *p, yaml_node_t *n, const char *key, bool *has, uint64_t *ret) {
        char q[QUOTE_MAX];
        const char *s;

        if (get_string(p, n, key, &s) < 0)
                return;
        if (parse_duration_usec(s, ret) < 0) {
                perr(p, n, "%s: bad duration %s", key, quote(s, q, sizeof(q)));
                return;
        }
        *has = true;
}

enum { GUARD_COUNTER, GUARD_MAX_INCREASE, GUARD_MAX_RATIO, GUARD_PER, _GUARD_KEY_MAX };
static const char *const guard_keys[_GUARD_KEY_MAX] = {
        [GUARD_COUNTER] = "counter",
        [GUARD_MAX_INCREASE] = "max-increase",
        [GUARD_MAX_RATIO] = "max-ratio",
        [GUARD_PER] = "per",
};

static void parse_counter(Parser *p, yaml_node_t *n, const char *key, char **ret,
                          GuardCounterKind *ret_kind) {
        char q[QUOTE_MAX];
        const char *s;

        if (get_string(p, n, key, &s) < 0)
                return;
        if (guard_counter_parse(s, ret_kind) < 0) {
                perr(p, n, "%s: bad counter %s", key, quote(s, q, sizeof(q)));
                return;
        }
        *ret = strdup(s);
        if (!*ret)
                p->r = -ENOMEM;
}

static void parse_guard(Parser *p, yaml_node_t *n, Guard *g) {
        yaml_node_t *v[_GUARD_KEY_MAX];

        if (mapping_collect(p, n, "guards", guard_keys, _GUARD_KEY_MAX, v) < 0)
                return;

        if (!v[GUARD_COUNTER])
                perr(p, n, "missing key \"counter\"");
        else
                parse_counter(p, v[GUARD_COUNTER], "counter", &g->counter, &g->counter_kind);

        if (!v[GUARD_MAX_INCREASE] && !v[GUARD_MAX_RATIO])
                perr(p, n, "missing key \"max-increase\" or \"max-ratio\"");

        if (v[GUARD_MAX_INCREASE]) {
                const char *s = scalar(v[GUARD_MAX_INCREASE]);

                if (s && scalar_is_plain(v[GUARD_MAX_INCREASE]) && parse_uint64(s, &g->max_increase) >= 0)
                        g->has_max_increase = true;
                else
                        perr(p, v[GUARD_MAX_INCREASE], "max-increase: expected a non-negative integer");
        }

        if (v[GUARD_MAX_RATIO]) {
                const char *s = scalar(v[GUARD_MAX_RATIO]);

                if (s && scalar_is_plain(v[GUARD_MAX_RATIO]) && parse_ratio(s, &g->max_ratio) >= 0)
                        g->has_max_ratio = true;
                else
                        perr(p, v[GUARD_MAX_RATIO], "max-ratio: expected a non-negative number");
                if (!v[GUARD_PER])
                        perr(p, n, "missing key \"per\" (required with max-ratio)");
        }

        if (v[GUARD_PER]) {
                if (!v[GUARD_MAX_RATIO])
                        perr(p, v[GUARD_PER], "per: only allowed with max-ratio");
                else
                        parse_counter(p, v[GUARD_PER], "per", &g->per, &g->per_kind);
        }
}

enum { ROLLBACK_WINDOW, ROLLBACK_INTERVAL, ROLLBACK_GUARDS, _ROLLBACK_KEY_MAX };
static const char *const rollback_keys[_ROLLBACK_KEY_MAX] = {
        [ROLLBACK_WINDOW] = "window",
        [ROLLBACK_INTERVAL] = "interval",
        [ROLLBACK_GUARDS] = "guards",
};

static void parse_rollback(Parser *p, yaml_node_t *n, RollbackSpec *r) {
        yaml_node_t *v[_ROLLBACK_KEY_MAX];
        yaml_node_t *g;
        size_t n_guards;

        if (mapping_collect(p, n, "rollback", rollback_keys, _ROLLBACK_KEY_MAX, v) < 0)
                return;
        if (v[ROLLBACK_WINDOW])
                parse_duration(p, v[ROLLBACK_WINDOW], "window", &r->has_window, &r->window_usec);
        if (v[ROLLBACK_INTERVAL])
                parse_duration(p, v[ROLLBACK_INTERVAL], "interval", &r->has_interval, &r->interval_usec);

        g = v[ROLLBACK_GUARDS];
        if (!g)
                return;
        if (g->type != YAML_SEQUENCE_NODE) {
                perr(p, g, "guards: expected a list");
                return;
        }
        n_guards = sequence_length(g);
        if (n_guards > POLICY_GUARDS_MAX) {
                perr(p, g, "guards: too many items (max %u)", POLICY_GUARDS_MAX);
                return;
        }
        r->has_guards = true; /* an empty list turns the guards off */
        if (n_guards == 0)
                return;
        r->guards = calloc(n_guards, sizeof(Guard));
        if (!r->guards) {
                p->r = -ENOMEM;
                return;
        }
        SEQUENCE_FOREACH(item, g) {
                yaml_node_t *gn = yaml_document_get_node(p->doc, *item);
                if (gn)
                        parse_guard(p, gn, &r->guards[r->n_guards++]);
        }
}

/* Checked on the effective spec, where a window from one level meets an interval from another. */
static void check_rollback(Parser *p, yaml_node_t *at, const RollbackSpec *r) {
        char a[32], b[32];

        if (r->interval_usec > r->window_usec)
                perr(p, at, "rollback: interval %s is longer than window %s",
                     format_duration_usec(r->interval_usec, a, sizeof(a)),
                     format_duration_usec(r->window_usec, b, sizeof(b)));
}

enum { MATCH_NAME, MATCH_KIND, MATCH_DRIVER, MATCH_MAC, MATCH_ROUTE, _MATCH_KEY_MAX };
static const char *const match_keys[_MATCH_KEY_MAX] = {
        [MATCH_NAME] = "name", [MATCH_KIND] = "kind",   [MATCH_DRIVER] = "driver",
        [MATCH_MAC] = "mac",   [MATCH_ROUTE] = "route",
};

static void parse_match(Parser *p, yaml_node_t *n, PolicyMatch *m) {
        yaml_node_t *v[_MATCH_KEY_MAX];

        if (node_is_null(n)) /* `match:` with every key commented out: like {} */
                return;
        if (mapping_collect(p, n, "match", match_keys, _MATCH_KEY_MAX, v) < 0)
                return;
        if (v[MATCH_NAME])
                parse_strlist(p, v[MATCH_NAME], "name", LIST_NAME, &m->name);
        if (v[MATCH_KIND])
                parse_strlist(p, v[MATCH_KIND], "kind", LIST_KIND, &m->kind);
        if (v[MATCH_DRIVER])
                parse_strlist(p, v[MATCH_DRIVER], "driver", LIST_DRIVER, &m->driver);
        if (v[MATCH_MAC])
                parse_strlist(p, v[MATCH_MAC], "mac", LIST_MAC, &m->mac);
        if (v[MATCH_ROUTE]) {
                StrList l = {};

                parse_strlist(p, v[MATCH_ROUTE], "route", LIST_ROUTE, &l);
                if (l.n > 0) {
                        m->routes = calloc(l.n, sizeof(RoutePrefix));
                        if (!m->routes)
                                p->r = -ENOMEM;
                        else
                                for (size_t i = 0; i < l.n; i++)
                                        if (route_prefix_parse(l.items[i], &m->routes[m->n_routes]) >= 0)
                                                m->n_routes++;
                }
                strlist_done(&l);
        }
}

static bool policy_name_is_valid(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++)
                if (!(isalnum((unsigned char) *s) || strchr("._:@-", *s)))
                        return false;
        return true;
}

enum {
        POLICY_NAME,
        POLICY_HOSTS,
        POLICY_KERNEL,
        POLICY_MATCH,
        POLICY_IPV6,
        POLICY_IPV4,
        POLICY_ROLLBACK,
        POLICY_ROLLOUT,
        _POLICY_KEY_MAX
};
static const char *const policy_keys[_POLICY_KEY_MAX] = {
        [POLICY_NAME] = "name",         [POLICY_HOSTS] = "hosts", [POLICY_KERNEL] = "kernel",
        [POLICY_MATCH] = "match",       [POLICY_IPV6] = "ipv6",   [POLICY_IPV4] = "ipv4",
        [POLICY_ROLLBACK] = "rollback", [POLICY_ROLLOUT] = "rollout",
};

enum {
        ROLLOUT_MAX_PARALLEL,
        _ROLLOUT_KEY_MAX
};
static const char *const rollout_keys[_ROLLOUT_KEY_MAX] = {
        [ROLLOUT_MAX_PARALLEL] = "max-parallel",
};

static void parse_rollout(Parser *p, yaml_node_t *n, unsigned *ret) {
        yaml_node_t *v[_ROLLOUT_KEY_MAX];
        uint64_t x;

        if (mapping_collect(p, n, "rollout", rollout_keys, _ROLLOUT_KEY_MAX, v) < 0)
                return;
        if (!v[ROLLOUT_MAX_PARALLEL]) {
                perr(p, n, "missing key \"max-parallel\"");
                return;
        }
        const char *s = scalar(v[ROLLOUT_MAX_PARALLEL]);
        if (!s || !scalar_is_plain(v[ROLLOUT_MAX_PARALLEL]) || parse_uint64(s, &x) < 0 || x < 1 ||
            x > POLICY_MAX_PARALLEL_MAX) {
                perr(p, v[ROLLOUT_MAX_PARALLEL], "max-parallel: expected an integer between 1 and %u",
                     POLICY_MAX_PARALLEL_MAX);
                return;
        }
        *ret = (unsigned) x;
}

static void parse_policy(Parser *p, yaml_node_t *n, Policy *pol, ParsedPolicy *pp) {
        yaml_node_t *v[_POLICY_KEY_MAX];
        char q[QUOTE_MAX];
        const char *s;

        pol->line = (unsigned) n->start_mark.line + 1;
        pol->column = (unsigned) n->start_mark.column + 1;
        pol->file = strdup(p->file);
        if (!pol->file) {
                p->r = -ENOMEM;
                return;
        }
        if (mapping_collect(p, n, "policies", policy_keys, _POLICY_KEY_MAX, v) < 0)
                return;

        if (!v[POLICY_NAME])
                perr(p, n, "missing key \"name\"");
        else if (get_string(p, v[POLICY_NAME], "name", &s) >= 0) {
                if (!policy_name_is_valid(s))
                        perr(p, v[POLICY_NAME], "name: bad policy name %s", quote(s, q, sizeof(q)));
                else {
                        pol->name = strdup(s);
                        if (!pol->name)
                                p->r = -ENOMEM;
                        pp->name_node = v[POLICY_NAME];
                }
        }

        if (v[POLICY_HOSTS])
                parse_strlist(p, v[POLICY_HOSTS], "hosts", LIST_HOSTS, &pol->hosts);

        if (v[POLICY_KERNEL] && get_string(p, v[POLICY_KERNEL], "kernel", &s) >= 0) {
                int r = parse_kernel_reqs(s, &pol->kernel_reqs, &pol->n_kernel_reqs);
                if (r == -ENOMEM)
                        p->r = r;
                else if (r < 0)
                        perr(p, v[POLICY_KERNEL], "kernel: bad version requirement %s",
                             quote(s, q, sizeof(q)));
                else {
                        pol->kernel = strdup(s);
                        if (!pol->kernel)
                                p->r = -ENOMEM;
                }
        }

        if (v[POLICY_MATCH])
                parse_match(p, v[POLICY_MATCH], &pol->match);

        if (v[POLICY_IPV6])
                parse_family(p, v[POLICY_IPV6], "ipv6", &pol->ipv6);
        if (v[POLICY_IPV4])
                parse_family(p, v[POLICY_IPV4], "ipv4", &pol->ipv4);
        if (!v[POLICY_IPV6] && !v[POLICY_IPV4])
                perr(p, n, "missing key \"ipv6\" or \"ipv4\"");

        if (v[POLICY_ROLLBACK]) {
                size_t n_errors = p->n_errors;

                pp->has_rollback = true;
                pp->rollback_node = v[POLICY_ROLLBACK];
                parse_rollback(p, v[POLICY_ROLLBACK], &pp->rollback);
                pp->rollback_ok = p->n_errors == n_errors;
        }

        if (v[POLICY_ROLLOUT])
                parse_rollout(p, v[POLICY_ROLLOUT], &pol->max_parallel);

        /* until policy_set_scope() says otherwise */
        pol->applies_here = pol->hosts.n == 0 && pol->n_kernel_reqs == 0;
}

enum { TOP_VERSION, TOP_ROLLBACK, TOP_POLICIES, _TOP_KEY_MAX };
static const char *const top_keys[_TOP_KEY_MAX] = {
        [TOP_VERSION] = "version",
        [TOP_ROLLBACK] = "rollback",
        [TOP_POLICIES] = "policies",
};

static void parse_top(Parser *p, yaml_node_t *root, size_t n_existing, ParsedFile *f) {
        yaml_node_t *v[_TOP_KEY_MAX];
        yaml_node_t *l;
        size_t n;

        if (mapping_collect(p, root, NULL, top_keys, _TOP_KEY_MAX, v) < 0)
                return;

        if (!v[TOP_VERSION])
                perr(p, root, "missing key \"version\"");
        else if (!scalar_is_plain(v[TOP_VERSION]) || !streq(scalar(v[TOP_VERSION]), "1"))
                perr(p, v[TOP_VERSION], "version: expected 1");

        if (v[TOP_ROLLBACK]) {
                size_t n_errors = p->n_errors;

                f->has_rollback = true;
                f->rollback_node = v[TOP_ROLLBACK];
                parse_rollback(p, v[TOP_ROLLBACK], &f->rollback);
                f->rollback_ok = p->n_errors == n_errors;
        }

        l = v[TOP_POLICIES];
        if (!l) {
                perr(p, root, "missing key \"policies\"");
                return;
        }
        if (l->type != YAML_SEQUENCE_NODE) {
                perr(p, l, "policies: expected a list");
                return;
        }
        n = sequence_length(l);
        if (n_existing + n > POLICY_POLICIES_MAX) {
                perr(p, l, "policies: too many policies (max %u)", POLICY_POLICIES_MAX);
                return;
        }
        if (n == 0)
                return;
        f->policies = calloc(n, sizeof(Policy));
        f->parsed = calloc(n, sizeof(ParsedPolicy));
        if (!f->policies || !f->parsed) {
                p->r = -ENOMEM;
                return;
        }
        SEQUENCE_FOREACH(item, l) {
                yaml_node_t *pn = yaml_document_get_node(p->doc, *item);
                if (!pn)
                        continue;
                parse_policy(p, pn, &f->policies[f->n_policies], &f->parsed[f->n_policies]);
                f->n_policies++;
                if (p->r < 0)
                        return;
        }
}

/* Where a byte offset lies, for reader errors that come without a mark. */
static void offset_to_position(const char *data, size_t size, size_t offset, unsigned *line,
                               unsigned *column) {
        unsigned l = 1, c = 1;

        for (size_t i = 0; i < offset && i < size; i++) {
                if (data[i] == '\n') {
                        l++;
                        c = 1;
                } else
                        c++;
        }
        *line = l;
        *column = c;
}

static void report_yaml_error(Parser *p, const yaml_parser_t *y) {
        unsigned line = 0, column = 0;

        switch (y->error) {
        case YAML_MEMORY_ERROR:
                p->r = -ENOMEM;
                return;
        case YAML_READER_ERROR:
                offset_to_position(p->data, p->size, y->problem_offset, &line, &column);
                break;
        case YAML_SCANNER_ERROR:
        case YAML_PARSER_ERROR:
        case YAML_COMPOSER_ERROR:
        case YAML_WRITER_ERROR:
        case YAML_EMITTER_ERROR:
        case YAML_NO_ERROR:
                line = (unsigned) y->problem_mark.line + 1;
                column = (unsigned) y->problem_mark.column + 1;
                break;
        }
        parser_error_at(p, line, column, "syntax error: %s", y->problem ?: "malformed YAML");
}

/* The document API resolves aliases silently, so one small anchor could stand for a huge tree and
 * errors would point at the anchor. One pass over the events first rejects aliases and second
 * documents, and finds syntax errors with libyaml's own marks. */
static void prescan(Parser *p) {
        _cleanup_(yaml_parser_deletep) yaml_parser_t y = {};
        unsigned n_docs = 0;

        if (!yaml_parser_initialize(&y)) {
                p->r = -ENOMEM;
                return;
        }
        yaml_parser_set_input_string(&y, (const unsigned char *) p->data, p->size);
        for (;;) {
                yaml_event_t ev;
                yaml_event_type_t type;

                if (!yaml_parser_parse(&y, &ev)) {
                        report_yaml_error(p, &y);
                        return;
                }
                type = ev.type;
                if (type == YAML_ALIAS_EVENT)
                        parser_error_at(p, (unsigned) ev.start_mark.line + 1,
                                        (unsigned) ev.start_mark.column + 1, "aliases are not supported");
                else if (type == YAML_DOCUMENT_START_EVENT && ++n_docs == 2)
                        parser_error_at(p, (unsigned) ev.start_mark.line + 1,
                                        (unsigned) ev.start_mark.column + 1, "only one document is allowed");
                yaml_event_delete(&ev);
                if (type == YAML_STREAM_END_EVENT || p->r < 0)
                        return;
        }
}

static void sort_errors(PolicyErrors *e, size_t from) {
        /* insertion sort: stable, and a file holds at most PARSE_ERRORS_MAX + 1 errors */
        for (size_t i = from + 1; i < e->n; i++) {
                PolicyError t = e->items[i];
                size_t j = i;
                while (j > from && (e->items[j - 1].line > t.line ||
                                    (e->items[j - 1].line == t.line && e->items[j - 1].column > t.column))) {
                        e->items[j] = e->items[j - 1];
                        j--;
                }
                e->items[j] = t;
        }
}

static const Policy *policy_find(const PolicySet *s, const ParsedFile *f, size_t n_f, const char *name) {
        for (size_t i = 0; i < s->n_policies; i++)
                if (streq_ptr(s->policies[i].name, name))
                        return &s->policies[i];
        for (size_t i = 0; i < n_f; i++)
                if (streq_ptr(f->policies[i].name, name))
                        return &f->policies[i];
        return NULL;
}

/* Effective rollback specs, duplicate names: what needs the whole file and the set. */
static void finish_file(Parser *p, const PolicySet *s, ParsedFile *f, RollbackSpec *file_defaults) {
        char q[QUOTE_MAX];
        int r;

        if (f->has_rollback) {
                r = rollback_spec_builtin(file_defaults);
                if (r >= 0)
                        r = rollback_spec_merge(file_defaults, &f->rollback);
                if (r < 0) {
                        p->r = r;
                        return;
                }
                if (f->rollback_ok)
                        check_rollback(p, f->rollback_node, file_defaults);
        } else {
                /* a drop-in without its own defaults takes the first file's */
                r = rollback_spec_copy(&s->defaults, file_defaults);
                if (r < 0) {
                        p->r = r;
                        return;
                }
        }

        for (size_t i = 0; i < f->n_policies; i++) {
                Policy *pol = &f->policies[i];
                ParsedPolicy *pp = &f->parsed[i];
                const Policy *other;

                r = rollback_spec_copy(file_defaults, &pol->rollback);
                if (r >= 0 && pp->has_rollback)
                        r = rollback_spec_merge(&pol->rollback, &pp->rollback);
                if (r < 0) {
                        p->r = r;
                        return;
                }
                if (pp->has_rollback && pp->rollback_ok)
                        check_rollback(p, pp->rollback_node, &pol->rollback);

                if (!pol->name)
                        continue;
                other = policy_find(s, f, i, pol->name);
                if (other)
                        perr(p, pp->name_node, "name: duplicate policy %s (first defined at %s:%u:%u)",
                             quote(pol->name, q, sizeof(q)), other->file, other->line, other->column);
        }
}

int policy_parse_buffer(PolicySet *s, const char *file, const char *data, size_t size, PolicyErrors *errs) {
        _cleanup_(yaml_parser_deletep) yaml_parser_t y = {};
        _cleanup_(yaml_document_deletep) yaml_document_t doc = {};
        _cleanup_(rollback_spec_done) RollbackSpec file_defaults = {};
        _cleanup_(parsed_file_done) ParsedFile f = {};
        Parser p = {
                .file = file ?: "-",
                .data = data ?: "",
                .size = data ? size : 0,
                .errs = errs,
                .doc = &doc,
        };
        yaml_node_t *root;
        int r;

        if (!s || !errs)
                return -EINVAL;
        p.n_start = errs->n;

        if (p.size > POLICY_FILE_MAX) {
                parser_error_at(&p, 0, 0, "file too large (max %u bytes)", POLICY_FILE_MAX);
                return p.r < 0 ? p.r : -EINVAL;
        }

        prescan(&p);
        if (p.r < 0)
                goto fail;
        if (p.n_errors > 0)
                goto done;

        if (!yaml_parser_initialize(&y)) {
                p.r = -ENOMEM;
                goto fail;
        }
        yaml_parser_set_input_string(&y, (const unsigned char *) p.data, p.size);
        if (!yaml_parser_load(&y, &doc)) {
                report_yaml_error(&p, &y);
                goto done;
        }

        root = yaml_document_get_root_node(&doc);
        if (!root)
                parser_error_at(&p, 0, 0,
                                "empty document, expected a mapping with \"version\" and \"policies\"");
        else
                parse_top(&p, root, s->n_policies, &f);
        if (p.r < 0)
                goto fail;
        /* also with errors: duplicate names and rollback conflicts are worth reporting too */
        finish_file(&p, s, &f, &file_defaults);
        if (p.r < 0)
                goto fail;

done:
        if (p.r < 0)
                goto fail;
        if (p.n_errors > 0) {
                sort_errors(errs, p.n_start);
                return -EINVAL;
        }
        r = policy_set_add_file(s, p.file, p.data, p.size, f.policies, f.n_policies, &file_defaults);
        if (r < 0)
                return r;
        return 0;

fail:
        /* a hard failure leaves no half-reported file behind */
        while (errs->n > p.n_start) {
                errs->n--;
                free(errs->items[errs->n].file);
                free(errs->items[errs->n].message);
        }
        return p.r;
}
