/* policy-yaml.c — reading a policy's YAML safely: one document without aliases, syntax errors at
 * libyaml's marks, mappings with unknown and repeated keys reported, strings, lists, sizes,
 * durations and counter names checked at their node; every error kept with its line and column,
 * sorted, and never logged. The keys of the format are policy-parse.c's. */

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "linux-compat.h"
#include "parse-util.h"
#include "policy-yaml.h"

/* Past this many errors in one file the rest is noise (and a hostile file could make millions). */
#define PARSE_ERRORS_MAX 100u
/* Plain characters of a user string quoted into a message; the rest is cut. */
#define QUOTE_CUT 60u

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static void yaml_parser_deletep(yaml_parser_t *p) {
        yaml_parser_delete(p);
}

/* ---- errors ---- */

const char *parser_quote(const char *s, char *buf, size_t size) {
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

void parser_error_at(Parser *p, unsigned line, unsigned column, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        parser_verror(p, line, column, fmt, ap);
        va_end(ap);
}

void parser_error(Parser *p, const yaml_node_t *n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        parser_verror(p, (unsigned) n->start_mark.line + 1, (unsigned) n->start_mark.column + 1, fmt, ap);
        va_end(ap);
}

/* ---- nodes to values ---- */

int parser_mapping(Parser *p, yaml_node_t *n, const char *what, const char *const *keys, size_t n_keys,
                   yaml_node_t **values) {
        char q[QUOTE_MAX];

        for (size_t i = 0; i < n_keys; i++)
                values[i] = NULL;
        if (n->type != YAML_MAPPING_NODE) {
                if (what)
                        parser_error(p, n, "%s: expected a mapping", what);
                else
                        parser_error(p, n, "expected a mapping");
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
                        parser_error(p, k, "expected a string as key");
                        continue;
                }
                for (i = 0; i < n_keys; i++)
                        if (strlen(keys[i]) == k->data.scalar.length && streq(ks, keys[i]))
                                break;
                if (i >= n_keys) {
                        const char *near = nearest_word_n(ks, keys, n_keys);
                        if (near)
                                parser_error(p, k, "unknown key %s (did you mean \"%s\"?)",
                                             parser_quote(ks, q, sizeof(q)), near);
                        else
                                parser_error(p, k, "unknown key %s", parser_quote(ks, q, sizeof(q)));
                        continue;
                }
                if (values[i]) {
                        parser_error(p, k, "duplicate key %s", parser_quote(ks, q, sizeof(q)));
                        continue;
                }
                values[i] = v;
        }
        return 0;
}

int parser_string(Parser *p, yaml_node_t *n, const char *key, const char **ret) {
        const char *v = scalar(n);

        if (!v || node_is_null(n)) {
                parser_error(p, n, "%s: expected a string", key);
                return -EINVAL;
        }
        if (strlen(v) != n->data.scalar.length) {
                parser_error(p, n, "%s: string contains a NUL byte", key);
                return -EINVAL;
        }
        if (n->data.scalar.length > POLICY_STRING_MAX) {
                parser_error(p, n, "%s: string too long (max %u)", key, POLICY_STRING_MAX);
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
        case LIST_NETNS:
                if (!glob_is_valid(s[0] == '!' ? s + 1 : s))
                        break;
                if (!strchr(s, '/'))
                        return true;
                /* a namespace is named by its file name under the namespace directories */
                parser_error(p, n, "%s: %s is a path; name the namespace by its file name", key,
                             parser_quote(s, q, sizeof(q)));
                return false;
        case LIST_HOSTS:
        case LIST_DRIVER:
        case LIST_MAC:
                if (glob_is_valid(s))
                        return true;
                break;
        case LIST_KIND: {
                const char *near;
                if (!kind_is_valid(s)) {
                        parser_error(p, n, "%s: bad kind %s", key, parser_quote(s, q, sizeof(q)));
                        return false;
                }
                if (link_kind_is_known(s))
                        return true;
                /* a kind no link has matches nothing: a typo, or a word for what has no kind */
                near = link_kind_suggest(s);
                if (streq_ptr(near, "device"))
                        parser_error(p, n,
                                     "%s: unknown kind %s (did you mean \"device\"? a physical NIC has no "
                                     "link kind)",
                                     key, parser_quote(s, q, sizeof(q)));
                else if (near)
                        parser_error(p, n, "%s: unknown kind %s (did you mean \"%s\"?)", key,
                                     parser_quote(s, q, sizeof(q)), near);
                else
                        parser_error(p, n, "%s: unknown kind %s (the kernel's link kinds, \"device\" or "
                                     "\"loopback\"; see bigtcpd.yaml(5))",
                                     key, parser_quote(s, q, sizeof(q)));
                return false;
        }
        case LIST_ROUTE:
                r = route_prefix_parse(s, NULL);
                if (r >= 0)
                        return true;
                if (r == -EDOM)
                        parser_error(p, n, "%s: prefix %s has host bits set", key,
                                     parser_quote(s, q, sizeof(q)));
                else
                        parser_error(p, n, "%s: bad prefix %s", key, parser_quote(s, q, sizeof(q)));
                return false;
        case _LIST_KIND_MAX:
        case _LIST_KIND_INVALID:
                return false;
        }
        parser_error(p, n, "%s: bad glob %s", key, parser_quote(s, q, sizeof(q)));
        return false;
}

void parser_strlist(Parser *p, yaml_node_t *n, const char *key, ListKind kind, StrList *l) {
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
                        parser_error(p, n, "%s: empty list", key);
                        return;
                }
                if (n_items > POLICY_LIST_MAX) {
                        parser_error(p, n, "%s: too many items (max %u)", key, POLICY_LIST_MAX);
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
                parser_error(p, n, "%s: expected a string or a list of strings", key);
                return;
        }

        for (size_t i = 0; i < n_items; i++) {
                const char *s;
                int r;

                if (!items[i] || parser_string(p, items[i], key, &s) < 0 ||
                    !list_item_check(p, items[i], key, kind, s)) {
                        all_ok = false;
                        continue;
                }
                if ((kind == LIST_NAME || kind == LIST_NETNS) && s[0] != '!')
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
        if ((kind == LIST_NAME || kind == LIST_NETNS) && all_ok && !plain)
                parser_error(p, n, "%s: needs at least one glob without \"!\"", key);
}

/* A number of bytes, 1..BT_GRO_MAX_SIZE, from a plain scalar: 1 when `n` is one, -1 when it is an
 * integer out of range (reported), 0 when it is no integer at all (nothing reported). */
static int parser_bytes(Parser *p, yaml_node_t *n, const char *key, uint32_t *ret) {
        const char *v = scalar(n);
        char q[QUOTE_MAX];

        /* integers only from plain scalars: "185000" in quotes is a string */
        if (!v || !scalar_is_plain(n) || strlen(v) != n->data.scalar.length ||
            !(isdigit((unsigned char) v[0]) || (v[0] == '-' && isdigit((unsigned char) v[1]))))
                return 0;

        const char *d = v[0] == '-' ? v + 1 : v;
        uint64_t x = 0;

        for (; isdigit((unsigned char) *d); d++)
                if (x <= BT_GRO_MAX_SIZE)
                        x = x * 10 + (uint64_t) (*d - '0');
        if (*d != '\0')
                return 0;
        if (v[0] == '-' || x < 1 || x > BT_GRO_MAX_SIZE) {
                parser_error(p, n, "%s: %s is out of range (1..%u)", key,
                             strlen(v) <= QUOTE_CUT ? v : parser_quote(v, q, sizeof(q)), BT_GRO_MAX_SIZE);
                return -1;
        }
        *ret = (uint32_t) x;
        return 1;
}

enum { AUTO_MIN, AUTO_MAX, AUTO_CEILING_AGE, _AUTO_KEY_MAX };
static const char *const auto_keys[_AUTO_KEY_MAX] = {
        [AUTO_MIN] = "min",
        [AUTO_MAX] = "max",
        [AUTO_CEILING_AGE] = "ceiling-age",
};

/* `auto: {min, max, ceiling-age}` (every key optional; `auto:` alone is `auto`). */
static void parser_auto(Parser *p, yaml_node_t *n, const char *key, SizeSpec *ret) {
        SizeSpec s = {
                .kind = SIZE_AUTO,
                .auto_min = AUTO_SIZE_MIN_DEFAULT,
                .ceiling_age_usec = AUTO_CEILING_AGE_DEFAULT_USEC,
        };
        yaml_node_t *v[_AUTO_KEY_MAX] = {};
        size_t n_start = p->n_errors;

        if (n && !node_is_null(n) && parser_mapping(p, n, "auto", auto_keys, _AUTO_KEY_MAX, v) < 0)
                return;
        if (v[AUTO_MIN] && parser_bytes(p, v[AUTO_MIN], "min", &s.auto_min) == 0)
                parser_error(p, v[AUTO_MIN], "min: expected a number of bytes");
        if (v[AUTO_MAX] && parser_bytes(p, v[AUTO_MAX], "max", &s.auto_max) == 0)
                parser_error(p, v[AUTO_MAX], "max: expected a number of bytes");
        if (v[AUTO_CEILING_AGE]) {
                bool has = false;
                parser_duration(p, v[AUTO_CEILING_AGE], "ceiling-age", &has, &s.ceiling_age_usec);
                if (has && (s.ceiling_age_usec < AUTO_CEILING_AGE_MIN_USEC ||
                            s.ceiling_age_usec > AUTO_CEILING_AGE_MAX_USEC))
                        parser_error(p, v[AUTO_CEILING_AGE], "ceiling-age: out of range (1s..720h)");
        }
        if (p->n_errors != n_start)
                return;
        if (s.auto_min < AUTO_SIZE_MIN_DEFAULT) {
                parser_error(p, v[AUTO_MIN], "%s: auto: min %u is below %u, the size before BIG TCP", key,
                             (unsigned) s.auto_min, AUTO_SIZE_MIN_DEFAULT);
                return;
        }
        if (s.auto_max != 0 && s.auto_max < s.auto_min) {
                parser_error(p, v[AUTO_MAX], "%s: auto: max %u is below min %u", key, (unsigned) s.auto_max,
                             (unsigned) s.auto_min);
                return;
        }
        *ret = s;
}

void parser_size(Parser *p, yaml_node_t *n, const char *key, SizeSpec *ret) {
        const char *v = scalar(n);
        uint32_t bytes = 0;

        if (v && streq(v, "max")) {
                *ret = (SizeSpec){.kind = SIZE_DEVICE_MAX};
                return;
        }
        if (v && streq(v, "legacy")) {
                *ret = (SizeSpec){.kind = SIZE_LEGACY};
                return;
        }
        if (v && streq(v, "auto")) {
                parser_auto(p, NULL, key, ret);
                return;
        }
        if (n && n->type == YAML_MAPPING_NODE) {
                yaml_node_pair_t *pair = n->data.mapping.pairs.start;
                yaml_node_t *k = pair < n->data.mapping.pairs.top ? yaml_document_get_node(p->doc, pair->key) : NULL;

                if (pair + 1 == n->data.mapping.pairs.top && streq_ptr(scalar(k), "auto")) {
                        parser_auto(p, yaml_document_get_node(p->doc, pair->value), key, ret);
                        return;
                }
        }
        int r = parser_bytes(p, n, key, &bytes);
        if (r > 0)
                *ret = (SizeSpec){.kind = SIZE_BYTES, .bytes = bytes};
        if (r != 0)
                return;
        parser_error(p, n, "%s: expected a number of bytes, \"max\", \"legacy\" or \"auto\"", key);
}

void parser_duration(Parser *p, yaml_node_t *n, const char *key, bool *has, uint64_t *ret) {
        char q[QUOTE_MAX];
        const char *s;

        if (parser_string(p, n, key, &s) < 0)
                return;
        if (parse_duration_usec(s, ret) < 0) {
                parser_error(p, n, "%s: bad duration %s", key, parser_quote(s, q, sizeof(q)));
                return;
        }
        *has = true;
}

void parser_counter(Parser *p, yaml_node_t *n, const char *key, char **ret, GuardCounterKind *ret_kind) {
        char q[QUOTE_MAX];
        const char *s;

        if (parser_string(p, n, key, &s) < 0)
                return;
        if (guard_counter_parse(s, ret_kind) < 0) {
                const char *near = strncmp(s, "link.", 5) == 0 ? link_stats_field_suggest(s + 5) : NULL;
                const char *tcp = strncmp(s, "tcp.", 4) == 0 ? nearest_word(s, observer_tcp_counters) : NULL;
                if (near)
                        parser_error(p, n, "%s: bad counter %s (did you mean \"link.%s\"?)", key,
                                     parser_quote(s, q, sizeof(q)), near);
                else if (tcp)
                        parser_error(p, n, "%s: bad counter %s (did you mean \"%s\"?)", key,
                                     parser_quote(s, q, sizeof(q)), tcp);
                else if (strncmp(s, "tcp.", 4) == 0)
                        parser_error(p, n, "%s: bad counter %s (the observer's are tcp.sent, tcp.sent-big, "
                                           "tcp.retrans, tcp.retrans-big)", key, parser_quote(s, q, sizeof(q)));
                else
                        parser_error(p, n, "%s: bad counter %s", key, parser_quote(s, q, sizeof(q)));
                return;
        }
        *ret = strdup(s);
        if (!*ret)
                p->r = -ENOMEM;
}

/* ---- the document ---- */

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

/* A standard tag that a plain or quoted scalar may carry as it is ("!!str 100"): the others
 * (!!python/object/apply:…, local tags) say something the policy format has no word for. */
static bool tag_is_standard(const unsigned char *tag) {
        static const char *const ok[] = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:int",
                                         "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
                                         "tag:yaml.org,2002:null", "tag:yaml.org,2002:seq",
                                         "tag:yaml.org,2002:map"};
        for (size_t i = 0; i < ELEMENTSOF(ok); i++)
                if (streq_ptr((const char *) tag, ok[i]))
                        return true;
        return false;
}

/* The document API resolves aliases silently, so one small anchor could stand for a huge tree and
 * errors would point at the anchor. One pass over the events first rejects aliases, second
 * documents and tags, finds syntax errors with libyaml's own marks, and stops at the first
 * collection nested deeper than POLICY_DEPTH_MAX: libyaml's scanner costs the square of the
 * nesting depth, so a deep document is refused before it costs anything. */
static void prescan(Parser *p) {
        _cleanup_(yaml_parser_deletep) yaml_parser_t y = {};
        unsigned n_docs = 0, depth = 0;

        if (!yaml_parser_initialize(&y)) {
                p->r = -ENOMEM;
                return;
        }
        yaml_parser_set_input_string(&y, (const unsigned char *) p->data, p->size);
        for (;;) {
                yaml_event_t ev;
                yaml_event_type_t type;
                const unsigned char *tag = NULL;
                bool too_deep = false;

                if (!yaml_parser_parse(&y, &ev)) {
                        report_yaml_error(p, &y);
                        return;
                }
                type = ev.type;
                unsigned line = (unsigned) ev.start_mark.line + 1, column = (unsigned) ev.start_mark.column + 1;
                switch (type) {
                case YAML_ALIAS_EVENT:
                        parser_error_at(p, line, column, "aliases are not supported");
                        break;
                case YAML_DOCUMENT_START_EVENT:
                        if (++n_docs == 2)
                                parser_error_at(p, line, column, "only one document is allowed");
                        break;
                case YAML_SCALAR_EVENT:
                        if (!ev.data.scalar.plain_implicit && !ev.data.scalar.quoted_implicit)
                                tag = ev.data.scalar.tag;
                        break;
                case YAML_SEQUENCE_START_EVENT:
                        too_deep = ++depth > POLICY_DEPTH_MAX;
                        if (!ev.data.sequence_start.implicit)
                                tag = ev.data.sequence_start.tag;
                        break;
                case YAML_MAPPING_START_EVENT:
                        too_deep = ++depth > POLICY_DEPTH_MAX;
                        if (!ev.data.mapping_start.implicit)
                                tag = ev.data.mapping_start.tag;
                        break;
                case YAML_SEQUENCE_END_EVENT:
                case YAML_MAPPING_END_EVENT:
                        depth--;
                        break;
                case YAML_NO_EVENT:
                case YAML_STREAM_START_EVENT:
                case YAML_STREAM_END_EVENT:
                case YAML_DOCUMENT_END_EVENT:
                        break;
                }
                if (tag && !tag_is_standard(tag)) {
                        char buf[QUOTE_MAX];
                        parser_error_at(p, line, column, "YAML tags are not supported (%s)",
                                        parser_quote((const char *) tag, buf, sizeof(buf)));
                }
                yaml_event_delete(&ev);
                if (too_deep) {
                        parser_error_at(p, line, column, "nested more than %u levels deep", POLICY_DEPTH_MAX);
                        return;
                }
                if (type == YAML_STREAM_END_EVENT || p->r < 0)
                        return;
        }
}

int parser_load(Parser *p) {
        _cleanup_(yaml_parser_deletep) yaml_parser_t y = {};

        prescan(p);
        if (p->r < 0)
                return p->r;
        if (p->n_errors > 0)
                return -EINVAL;

        if (!yaml_parser_initialize(&y))
                return (p->r = -ENOMEM);
        yaml_parser_set_input_string(&y, (const unsigned char *) p->data, p->size);
        if (!yaml_parser_load(&y, p->doc)) {
                report_yaml_error(p, &y);
                return p->r < 0 ? p->r : -EINVAL;
        }
        return 0;
}

void parser_sort_errors(Parser *p) {
        PolicyErrors *e = p->errs;
        size_t from = p->n_start;

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

void parser_drop_errors(Parser *p) {
        while (p->errs->n > p->n_start) {
                p->errs->n--;
                free(p->errs->items[p->errs->n].file);
                free(p->errs->items[p->errs->n].message);
        }
}
