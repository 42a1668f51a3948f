/* policy-parse.c — the keys of format version 1: what each holds, which are required, the
 * effective rollback of each policy, duplicate names. A file that parses clean is added to the set;
 * one with errors leaves it as it was, every error with its line and column, none logged. Reading
 * the YAML itself is policy-yaml.c's. */

#include <ctype.h>
#include <stdio.h>
#include <yaml.h>

#include "parse-util.h"
#include "policy-yaml.h"
#include "policy.h"
#include "util.h"

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static void yaml_document_deletep(yaml_document_t *d) {
        yaml_document_delete(d);
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
        Policy *policies;     /* what goes into the set */
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

enum { FAMILY_GSO, FAMILY_GRO, _FAMILY_KEY_MAX };
static const char *const family_keys[_FAMILY_KEY_MAX] = {
        [FAMILY_GSO] = "gso-max-size",
        [FAMILY_GRO] = "gro-max-size",
};

static void parse_family(Parser *p, yaml_node_t *n, const char *key, FamilySpec *ret) {
        yaml_node_t *v[_FAMILY_KEY_MAX];

        if (parser_mapping(p, n, key, family_keys, _FAMILY_KEY_MAX, v) < 0)
                return;
        if (!v[FAMILY_GSO] && !v[FAMILY_GRO]) {
                parser_error(p, n, "%s: missing key \"gso-max-size\" or \"gro-max-size\"", key);
                return;
        }
        ret->set = true;
        if (v[FAMILY_GSO])
                parser_size(p, v[FAMILY_GSO], family_keys[FAMILY_GSO], &ret->gso);
        if (v[FAMILY_GRO])
                parser_size(p, v[FAMILY_GRO], family_keys[FAMILY_GRO], &ret->gro);
}

enum { GUARD_COUNTER, GUARD_MAX_INCREASE, GUARD_MAX_RATIO, GUARD_PER, _GUARD_KEY_MAX };
static const char *const guard_keys[_GUARD_KEY_MAX] = {
        [GUARD_COUNTER] = "counter",
        [GUARD_MAX_INCREASE] = "max-increase",
        [GUARD_MAX_RATIO] = "max-ratio",
        [GUARD_PER] = "per",
};

static void parse_guard(Parser *p, yaml_node_t *n, Guard *g) {
        yaml_node_t *v[_GUARD_KEY_MAX];

        if (parser_mapping(p, n, "guards", guard_keys, _GUARD_KEY_MAX, v) < 0)
                return;
        g->file = strdup(p->file ?: "");
        if (!g->file) {
                p->r = -ENOMEM;
                return;
        }
        if (v[GUARD_COUNTER]) {
                g->line = (unsigned) v[GUARD_COUNTER]->start_mark.line + 1;
                g->column = (unsigned) v[GUARD_COUNTER]->start_mark.column + 1;
        }
        if (v[GUARD_PER]) {
                g->per_line = (unsigned) v[GUARD_PER]->start_mark.line + 1;
                g->per_column = (unsigned) v[GUARD_PER]->start_mark.column + 1;
        }

        if (!v[GUARD_COUNTER])
                parser_error(p, n, "missing key \"counter\"");
        else
                parser_counter(p, v[GUARD_COUNTER], "counter", &g->counter, &g->counter_kind);

        if (!v[GUARD_MAX_INCREASE] && !v[GUARD_MAX_RATIO])
                parser_error(p, n, "missing key \"max-increase\" or \"max-ratio\"");

        if (v[GUARD_MAX_INCREASE]) {
                const char *s = scalar(v[GUARD_MAX_INCREASE]);

                if (s && scalar_is_plain(v[GUARD_MAX_INCREASE]) && parse_uint64(s, &g->max_increase) >= 0)
                        g->has_max_increase = true;
                else
                        parser_error(p, v[GUARD_MAX_INCREASE],
                                     "max-increase: expected a non-negative integer");
        }

        if (v[GUARD_MAX_RATIO]) {
                const char *s = scalar(v[GUARD_MAX_RATIO]);

                if (s && scalar_is_plain(v[GUARD_MAX_RATIO]) && parse_ratio(s, &g->max_ratio) >= 0)
                        g->has_max_ratio = true;
                else
                        parser_error(p, v[GUARD_MAX_RATIO], "max-ratio: expected a non-negative number");
                if (!v[GUARD_PER])
                        parser_error(p, n, "missing key \"per\" (required with max-ratio)");
        }

        if (v[GUARD_PER]) {
                if (!v[GUARD_MAX_RATIO])
                        parser_error(p, v[GUARD_PER], "per: only allowed with max-ratio");
                else
                        parser_counter(p, v[GUARD_PER], "per", &g->per, &g->per_kind);
                /* the observer's counters are the device's own: divided by its own only */
                if (g->counter && g->per && (g->counter_kind == GUARD_COUNTER_OBSERVER) != (g->per_kind == GUARD_COUNTER_OBSERVER))
                        parser_error(p, v[GUARD_PER], "per: a counter of the observer (drop.*, tcp.*) is divided by "
                                                      "another of the observer (tcp.sent, tcp.sent-big), and no "
                                                      "other counter by one");
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

        if (parser_mapping(p, n, "rollback", rollback_keys, _ROLLBACK_KEY_MAX, v) < 0)
                return;
        if (v[ROLLBACK_WINDOW])
                parser_duration(p, v[ROLLBACK_WINDOW], "window", &r->has_window, &r->window_usec);
        if (v[ROLLBACK_INTERVAL])
                parser_duration(p, v[ROLLBACK_INTERVAL], "interval", &r->has_interval, &r->interval_usec);

        g = v[ROLLBACK_GUARDS];
        if (!g)
                return;
        if (g->type != YAML_SEQUENCE_NODE) {
                parser_error(p, g, "guards: expected a list");
                return;
        }
        n_guards = sequence_length(g);
        if (n_guards > POLICY_GUARDS_MAX) {
                parser_error(p, g, "guards: too many items (max %u)", POLICY_GUARDS_MAX);
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
                parser_error(p, at, "rollback: interval %s is longer than window %s",
                             format_duration_usec(r->interval_usec, a, sizeof(a)),
                             format_duration_usec(r->window_usec, b, sizeof(b)));
}

enum { MATCH_NAME, MATCH_KIND, MATCH_DRIVER, MATCH_MAC, MATCH_ROUTE, MATCH_NETNS, _MATCH_KEY_MAX };
static const char *const match_keys[_MATCH_KEY_MAX] = {
        [MATCH_NAME] = "name", [MATCH_KIND] = "kind",   [MATCH_DRIVER] = "driver",
        [MATCH_MAC] = "mac",   [MATCH_ROUTE] = "route", [MATCH_NETNS] = "netns",
};

static void parse_match(Parser *p, yaml_node_t *n, PolicyMatch *m) {
        yaml_node_t *v[_MATCH_KEY_MAX];

        if (node_is_null(n)) /* `match:` with every key commented out: like {} */
                return;
        if (parser_mapping(p, n, "match", match_keys, _MATCH_KEY_MAX, v) < 0)
                return;
        if (v[MATCH_NAME])
                parser_strlist(p, v[MATCH_NAME], "name", LIST_NAME, &m->name);
        if (v[MATCH_KIND])
                parser_strlist(p, v[MATCH_KIND], "kind", LIST_KIND, &m->kind);
        if (v[MATCH_DRIVER])
                parser_strlist(p, v[MATCH_DRIVER], "driver", LIST_DRIVER, &m->driver);
        if (v[MATCH_MAC])
                parser_strlist(p, v[MATCH_MAC], "mac", LIST_MAC, &m->mac);
        if (v[MATCH_NETNS])
                parser_strlist(p, v[MATCH_NETNS], "netns", LIST_NETNS, &m->netns);
        if (v[MATCH_ROUTE]) {
                StrList l = {};

                parser_strlist(p, v[MATCH_ROUTE], "route", LIST_ROUTE, &l);
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

enum { ROLLOUT_MAX_PARALLEL, ROLLOUT_HOSTS_PERCENT, _ROLLOUT_KEY_MAX };
static const char *const rollout_keys[_ROLLOUT_KEY_MAX] = {
        [ROLLOUT_MAX_PARALLEL] = "max-parallel",
        [ROLLOUT_HOSTS_PERCENT] = "hosts-percent",
};

static void parse_rollout(Parser *p, yaml_node_t *n, Policy *pol) {
        yaml_node_t *v[_ROLLOUT_KEY_MAX];
        const char *s;
        uint64_t x;

        if (parser_mapping(p, n, "rollout", rollout_keys, _ROLLOUT_KEY_MAX, v) < 0)
                return;
        if (!v[ROLLOUT_MAX_PARALLEL] && !v[ROLLOUT_HOSTS_PERCENT]) {
                parser_error(p, n, "missing key \"max-parallel\" or \"hosts-percent\"");
                return;
        }
        if (v[ROLLOUT_MAX_PARALLEL]) {
                s = scalar(v[ROLLOUT_MAX_PARALLEL]);
                if (!s || !scalar_is_plain(v[ROLLOUT_MAX_PARALLEL]) || parse_uint64(s, &x) < 0 || x < 1 ||
                    x > POLICY_MAX_PARALLEL_MAX)
                        parser_error(p, v[ROLLOUT_MAX_PARALLEL],
                                     "max-parallel: expected an integer between 1 and %u",
                                     POLICY_MAX_PARALLEL_MAX);
                else
                        pol->max_parallel = (unsigned) x;
        }
        if (v[ROLLOUT_HOSTS_PERCENT]) {
                /* whole percents only: "5%" or 2.5 would suggest a precision the cohorts lack */
                s = scalar(v[ROLLOUT_HOSTS_PERCENT]);
                if (!s || !scalar_is_plain(v[ROLLOUT_HOSTS_PERCENT]) || parse_uint64(s, &x) < 0 ||
                    x > POLICY_COHORTS)
                        parser_error(p, v[ROLLOUT_HOSTS_PERCENT],
                                     "hosts-percent: expected an integer between 0 and %u", POLICY_COHORTS);
                else {
                        pol->has_hosts_percent = true;
                        pol->hosts_percent = (unsigned) x;
                }
        }
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
        if (parser_mapping(p, n, "policies", policy_keys, _POLICY_KEY_MAX, v) < 0)
                return;

        if (!v[POLICY_NAME])
                parser_error(p, n, "missing key \"name\"");
        else if (parser_string(p, v[POLICY_NAME], "name", &s) >= 0) {
                if (!policy_name_is_valid(s))
                        parser_error(p, v[POLICY_NAME], "name: bad policy name %s",
                                     parser_quote(s, q, sizeof(q)));
                else {
                        pol->name = strdup(s);
                        if (!pol->name)
                                p->r = -ENOMEM;
                        pp->name_node = v[POLICY_NAME];
                }
        }

        if (v[POLICY_HOSTS])
                parser_strlist(p, v[POLICY_HOSTS], "hosts", LIST_HOSTS, &pol->hosts);

        if (v[POLICY_KERNEL] && parser_string(p, v[POLICY_KERNEL], "kernel", &s) >= 0) {
                int r = parse_kernel_reqs(s, &pol->kernel_reqs, &pol->n_kernel_reqs);
                if (r == -ENOMEM)
                        p->r = r;
                else if (r < 0)
                        parser_error(p, v[POLICY_KERNEL], "kernel: bad version requirement %s",
                                     parser_quote(s, q, sizeof(q)));
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
                parser_error(p, n, "missing key \"ipv6\" or \"ipv4\"");

        if (v[POLICY_ROLLBACK]) {
                size_t n_errors = p->n_errors;

                pp->has_rollback = true;
                pp->rollback_node = v[POLICY_ROLLBACK];
                parse_rollback(p, v[POLICY_ROLLBACK], &pp->rollback);
                pp->rollback_ok = p->n_errors == n_errors;
        }

        if (v[POLICY_ROLLOUT])
                parse_rollout(p, v[POLICY_ROLLOUT], pol);

        /* until policy_set_scope() says otherwise: known only where nothing depends on the host */
        pol->applies_here = pol->hosts.n == 0 && pol->n_kernel_reqs == 0 &&
                            (!pol->has_hosts_percent || pol->hosts_percent == POLICY_COHORTS);
        pol->scope = pol->applies_here ? POLICY_SCOPE_HERE : POLICY_SCOPE_UNSCOPED;
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

        if (parser_mapping(p, root, NULL, top_keys, _TOP_KEY_MAX, v) < 0)
                return;

        if (!v[TOP_VERSION])
                parser_error(p, root, "missing key \"version\"");
        else if (!scalar_is_plain(v[TOP_VERSION]) || !streq(scalar(v[TOP_VERSION]), "1"))
                parser_error(p, v[TOP_VERSION], "version: expected 1");

        if (v[TOP_ROLLBACK]) {
                size_t n_errors = p->n_errors;

                f->has_rollback = true;
                f->rollback_node = v[TOP_ROLLBACK];
                parse_rollback(p, v[TOP_ROLLBACK], &f->rollback);
                f->rollback_ok = p->n_errors == n_errors;
        }

        l = v[TOP_POLICIES];
        if (!l) {
                parser_error(p, root, "missing key \"policies\"");
                return;
        }
        if (l->type != YAML_SEQUENCE_NODE) {
                parser_error(p, l, "policies: expected a list");
                return;
        }
        n = sequence_length(l);
        if (n_existing + n > POLICY_POLICIES_MAX) {
                parser_error(p, l, "policies: too many policies (max %u)", POLICY_POLICIES_MAX);
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
                        parser_error(p, pp->name_node,
                                     "name: duplicate policy %s (first defined at %s:%u:%u)",
                                     parser_quote(pol->name, q, sizeof(q)), other->file, other->line,
                                     other->column);
        }
}

int policy_parse_buffer(PolicySet *s, const char *file, const char *data, size_t size, PolicyErrors *errs) {
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

        r = parser_load(&p);
        if (r == -EINVAL)
                goto done;
        if (r < 0)
                goto fail;

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
                parser_sort_errors(&p);
                if (s->partial) {
                        r = policy_set_add_file(s, p.file, p.data, p.size, f.policies, f.n_policies, &file_defaults);
                        if (r < 0)
                                return r;
                }
                return -EINVAL;
        }
        r = policy_set_add_file(s, p.file, p.data, p.size, f.policies, f.n_policies, &file_defaults);
        if (r < 0)
                return r;
        return 0;

fail:
        /* a hard failure leaves no half-reported file behind */
        parser_drop_errors(&p);
        return p.r;
}
