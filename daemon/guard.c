/* guard.c — the guards of one device in probation: their rules, kept once per distinct guard list
 * (a table by content), baselines taken just before the write, and the rise of each counter
 * against its max-increase or, divided by the rise of `per`, against its max-ratio. */
#include <linux/if_link.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "guard.h"
#include "intern.h"
#include "parse-util.h"
#include "util.h"

_Static_assert(POLICY_GUARDS_MAX <= 64, "a bit of GuardSet.active and .have_base for each guard");

/* A guard whose counter, or the one its rise is divided by, is the device's own. */
static bool reads_link(GuardCounterKind kind, const char *per, GuardCounterKind per_kind) {
        return kind == GUARD_COUNTER_LINK || (per && per_kind == GUARD_COUNTER_LINK);
}

bool guard_spec_has_link(const RollbackSpec *spec) {
        for (size_t i = 0; i < spec->n_guards; i++)
                if (reads_link(spec->guards[i].counter_kind, spec->guards[i].per, spec->guards[i].per_kind))
                        return true;
        return false;
}

static bool reads_observer(GuardCounterKind kind, const char *per, GuardCounterKind per_kind) {
        return kind == GUARD_COUNTER_OBSERVER || (per && per_kind == GUARD_COUNTER_OBSERVER);
}

static int counter_offset(GuardCounterKind kind, const char *name) {
        switch (kind) {
        case GUARD_COUNTER_LINK:
                return link_counter_offset(name + strlen("link."));
        case GUARD_COUNTER_OBSERVER:
                return observer_tcp_counter(name); /* -ENOENT: drop.* */
        case GUARD_COUNTER_SNMP:
        case _GUARD_COUNTER_KIND_MAX:
        case _GUARD_COUNTER_KIND_INVALID:
                break;
        }
        return -1;
}

/* drop.<reason> → the kernel's value (drop.any: UINT32_MAX); -ENOENT when it has no such reason. */
static int drop_reason(const char *name, uint32_t *ret) {
        if (strcmp(name + 5, "any") == 0) {
                *ret = UINT32_MAX;
                return 0;
        }
        return observer_drop_reason(name + 5, ret);
}

static int observer_value(const GuardObserver *g, const char *name, int offset, uint32_t reason, uint64_t *ret) {
        struct observer_dev v;

        (void) observer_get(g->observer, g->netns, g->ifindex, &v);
        if (strncmp(name, "drop.", 5) == 0) {
                *ret = reason == UINT32_MAX ? v.drops : observer_drops(g->observer, g->netns, g->ifindex, reason);
                return 0;
        }
        switch ((ObserverTcpCounter) offset) {
        case OBSERVER_TCP_SENT:
                *ret = v.tcp_sent;
                return 0;
        case OBSERVER_TCP_SENT_BIG:
                *ret = v.tcp_sent_big;
                return 0;
        case OBSERVER_TCP_RETRANS:
                *ret = v.tcp_retrans;
                return 0;
        case OBSERVER_TCP_RETRANS_BIG:
                *ret = v.tcp_retrans_big;
                return 0;
        case _OBSERVER_TCP_MAX:
                break;
        }
        return -ENOENT;
}

int guard_observer_value(const GuardObserver *g, const char *name, uint64_t *ret) {
        uint32_t reason = 0;
        int r;

        if (!g->observer)
                return -EOPNOTSUPP;
        if (strncmp(name, "drop.", 5) == 0 && (r = drop_reason(name, &reason)) < 0)
                return r;
        return observer_value(g, name, observer_tcp_counter(name), reason, ret);
}

/* ---- the rules, shared by content ---- */

/* Buckets of the rule sets by their content's hash: a few distinct lists in a daemon's life, more
 * only from a hostile state file (a list per device), which then costs a chain's walk each. */
#define RULES_BUCKETS 64u
static GuardRules *rules_table[RULES_BUCKETS];

/* The content of a guard as its rule keeps it: a threshold it does not have counts as 0. */
static uint64_t max_increase_of(const Guard *g) {
        return g->has_max_increase ? g->max_increase : 0;
}
static double max_ratio_of(const Guard *g) {
        /* -0 is 0 (the state file writes it as "-0", which reads back as the integer 0) */
        return g->has_max_ratio && g->max_ratio != 0 ? g->max_ratio : 0.0;
}

static uint64_t spec_hash(const RollbackSpec *spec) {
        uint64_t h = FNV1A64_OFFSET;

        h = fnv1a64(h, &spec->window_usec, sizeof(spec->window_usec));
        h = fnv1a64(h, &spec->interval_usec, sizeof(spec->interval_usec));
        h = fnv1a64(h, &spec->n_guards, sizeof(spec->n_guards));
        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *g = &spec->guards[i];
                uint64_t inc = max_increase_of(g);
                double ratio = max_ratio_of(g);
                unsigned char flags =
                        (unsigned char) (g->has_max_increase | g->has_max_ratio << 1 | !!g->per << 2);
                h = fnv1a64(h, g->counter, strlen(g->counter) + 1);
                h = fnv1a64(h, &g->counter_kind, sizeof(g->counter_kind));
                if (g->per) {
                        h = fnv1a64(h, g->per, strlen(g->per) + 1);
                        h = fnv1a64(h, &g->per_kind, sizeof(g->per_kind));
                }
                h = fnv1a64(h, &flags, sizeof(flags));
                h = fnv1a64(h, &inc, sizeof(inc));
                h = fnv1a64(h, &ratio, sizeof(ratio));
        }
        return h;
}

static bool rule_is(const GuardRule *r, const Guard *g) {
        double ratio = max_ratio_of(g);
        return strcmp(r->counter, g->counter) == 0 && streq_ptr(r->per, g->per) &&
               r->kind == g->counter_kind && (!g->per || r->per_kind == g->per_kind) &&
               r->has_max_increase == g->has_max_increase && r->max_increase == max_increase_of(g) &&
               r->has_max_ratio == g->has_max_ratio && memcmp(&r->max_ratio, &ratio, sizeof(ratio)) == 0;
}

static bool rules_are(const GuardRules *r, uint64_t hash, const RollbackSpec *spec) {
        if (r->hash != hash || r->n != spec->n_guards || r->window_usec != spec->window_usec ||
            r->interval_usec != spec->interval_usec)
                return false;
        for (size_t i = 0; i < r->n; i++)
                if (!rule_is(&r->items[i], &spec->guards[i]))
                        return false;
        return true;
}

/* A drop.<reason> counter of the observer: its reason, resolved once for the rule (a kernel's
 * reasons do not change while it runs). false: this kernel has no such reason. */
static bool resolve_reason(GuardCounterKind kind, const char *name, uint32_t *ret) {
        if (kind != GUARD_COUNTER_OBSERVER || strncmp(name, "drop.", 5) != 0)
                return true;
        return drop_reason(name, ret) >= 0;
}

static void rules_free(GuardRules *r) {
        for (size_t i = 0; i < r->n; i++) {
                intern_put(r->items[i].counter);
                intern_put(r->items[i].per);
        }
        free(r);
}

static int rules_new(const RollbackSpec *spec, uint64_t hash, GuardRules **ret) {
        GuardRules *r = calloc(1, sizeof(GuardRules) + spec->n_guards * sizeof(GuardRule));

        if (!r)
                return -ENOMEM;
        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *g = &spec->guards[i];
                GuardRule *x = &r->items[r->n++];

                *x = (GuardRule){.counter = intern_get(g->counter), .per = intern_get(g->per)};
                if (!x->counter || (g->per && !x->per)) {
                        rules_free(r);
                        return -ENOMEM;
                }
                x->kind = g->counter_kind;
                x->offset = counter_offset(g->counter_kind, g->counter);
                x->per_kind = g->per ? g->per_kind : 0;
                x->per_offset = g->per ? counter_offset(g->per_kind, g->per) : -1;
                x->has_max_increase = g->has_max_increase;
                x->max_increase = max_increase_of(g);
                x->has_max_ratio = g->has_max_ratio;
                x->max_ratio = max_ratio_of(g);
                x->reason_unknown = !resolve_reason(x->kind, x->counter, &x->reason) ||
                                    (x->per && !resolve_reason(x->per_kind, x->per, &x->per_reason));
        }
        r->window_usec = spec->window_usec;
        r->interval_usec = spec->interval_usec;
        r->hash = hash;
        r->n_ref = 1;
        *ret = r;
        return 0;
}

int guard_rules_get(const RollbackSpec *spec, GuardRules **ret) {
        GuardRules **bucket, *r;
        uint64_t hash;
        int k;

        if (spec->n_guards > POLICY_GUARDS_MAX)
                return -E2BIG; /* a bit each */
        for (size_t i = 0; i < spec->n_guards; i++)
                if (!spec->guards[i].counter)
                        return -EINVAL; /* a partial set's (PolicySet.partial), never run */
        hash = spec_hash(spec);
        bucket = &rules_table[hash % RULES_BUCKETS];
        for (r = *bucket; r; r = r->next)
                if (rules_are(r, hash, spec)) {
                        *ret = guard_rules_ref(r);
                        return 0;
                }
        k = rules_new(spec, hash, &r);
        if (k < 0)
                return k;
        r->next = *bucket;
        *bucket = r;
        *ret = r;
        return 0;
}

GuardRules *guard_rules_ref(GuardRules *r) {
        if (r)
                r->n_ref++;
        return r;
}

void guard_rules_unref(GuardRules *r) {
        if (!r || --r->n_ref > 0)
                return;
        for (GuardRules **p = &rules_table[r->hash % RULES_BUCKETS]; *p; p = &(*p)->next)
                if (*p == r) {
                        *p = r->next;
                        break;
                }
        rules_free(r);
}

size_t guard_rules_count(void) {
        size_t n = 0;

        for (size_t i = 0; i < RULES_BUCKETS; i++)
                for (const GuardRules *r = rules_table[i]; r; r = r->next)
                        n++;
        return n;
}

/* ---- one device's guards ---- */

static void set_bit(uint64_t *bits, size_t i, bool on) {
        if (on)
                *bits |= UINT64_C(1) << i;
        else
                *bits &= ~(UINT64_C(1) << i);
}

void guard_set_done(GuardSet *s) {
        guard_rules_unref(s->rules);
        s->rules = NULL;
        s->active = s->have_base = 0;
}

bool guard_set_has_observer(const GuardSet *s) {
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                if (guard_set_active(s, i) && reads_observer(r->kind, r->per, r->per_kind))
                        return true;
        }
        return false;
}

void guard_set_observer_baseline(GuardSet *s, const GuardObserver *g) {
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                GuardBase *b = &s->items[i];
                if (!guard_set_active(s, i) || guard_set_have_base(s, i) ||
                    !reads_observer(r->kind, r->per, r->per_kind))
                        continue;
                /* a drop reason this kernel lacks: never trips (validate said so) */
                if (!g || !g->observer || r->reason_unknown) {
                        set_bit(&s->active, i, false);
                        continue;
                }
                if (r->kind == GUARD_COUNTER_OBSERVER)
                        (void) observer_value(g, r->counter, r->offset, r->reason, &b->base);
                if (r->per && r->per_kind == GUARD_COUNTER_OBSERVER)
                        (void) observer_value(g, r->per, r->per_offset, r->per_reason, &b->per_base);
                set_bit(&s->have_base, i, true);
        }
}

void guard_set_init(GuardSet *s, GuardRules *rules, const SnmpSnapshot *snap) {
        s->rules = rules;
        s->active = s->have_base = 0;
        for (size_t i = 0; i < s->rules->n; i++) {
                const GuardRule *x = &s->rules->items[i];
                GuardBase *b = &s->items[i];
                bool active = true;

                *b = (GuardBase){};
                bool snmp = x->kind == GUARD_COUNTER_SNMP,
                     per_snmp = x->per && x->per_kind == GUARD_COUNTER_SNMP;
                if ((snmp || per_snmp) && !snap)
                        active = false;
                if (snmp && snap && snmp_get(snap, x->counter, &b->base) < 0)
                        active = false;
                if (per_snmp && snap && snmp_get(snap, x->per, &b->per_base) < 0)
                        active = false;
                set_bit(&s->active, i, active);
                /* all-SNMP guards have their baselines now; link ones wait for stats, the
                 * observer's for guard_set_observer_baseline() */
                set_bit(&s->have_base, i,
                        !reads_link(x->kind, x->per, x->per_kind) &&
                                !reads_observer(x->kind, x->per, x->per_kind));
        }
}

static bool uses(const GuardSet *s, size_t i, GuardCounterKind kind) {
        const GuardRule *r = &s->rules->items[i];
        return guard_set_active(s, i) && (r->kind == kind || (r->per && r->per_kind == kind));
}

bool guard_set_has_link(const GuardSet *s) {
        for (size_t i = 0; i < guard_set_n(s); i++)
                if (uses(s, i, GUARD_COUNTER_LINK))
                        return true;
        return false;
}

bool guard_set_has_snmp(const GuardSet *s) {
        for (size_t i = 0; i < guard_set_n(s); i++)
                if (uses(s, i, GUARD_COUNTER_SNMP))
                        return true;
        return false;
}

unsigned guard_set_snmp_files(const GuardSet *s) {
        unsigned files = 0;

        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                if (!guard_set_active(s, i))
                        continue;
                if (r->kind == GUARD_COUNTER_SNMP)
                        files |= snmp_files_of(r->counter);
                if (r->per && r->per_kind == GUARD_COUNTER_SNMP)
                        files |= snmp_files_of(r->per);
        }
        return files;
}

bool guard_set_has_baselines(const GuardSet *s) {
        /* the observer's take theirs at their first check (guard_set_check_observer()) */
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                if (!guard_set_have_base(s, i) && !reads_observer(r->kind, r->per, r->per_kind))
                        return false;
        }
        return true;
}

void guard_set_link_baseline(GuardSet *s, const void *stats, size_t size) {
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                GuardBase *b = &s->items[i];
                if (!guard_set_active(s, i) || guard_set_have_base(s, i) ||
                    !reads_link(r->kind, r->per, r->per_kind))
                        continue;
                if (r->kind == GUARD_COUNTER_LINK &&
                    link_counter_get(stats, size, r->offset, &b->base) < 0) {
                        set_bit(&s->active, i, false);
                        continue;
                }
                if (r->per && r->per_kind == GUARD_COUNTER_LINK &&
                    link_counter_get(stats, size, r->per_offset, &b->per_base) < 0) {
                        set_bit(&s->active, i, false);
                        continue;
                }
                set_bit(&s->have_base, i, true);
        }
}

static int value_of(GuardCounterKind kind, const char *name, int offset, const SnmpSnapshot *snap,
                    const void *stats, size_t size, uint64_t *ret) {
        if (kind == GUARD_COUNTER_LINK)
                return stats ? link_counter_get(stats, size, offset, ret) : -EAGAIN;
        if (kind == GUARD_COUNTER_OBSERVER)
                return -EAGAIN; /* guard_set_check_observer() */
        return snap ? snmp_get(snap, name, ret) : -EAGAIN;
}

/* Whether rule g trips with these values against baselines b: fills `ret`. */
static bool trips(const GuardRule *g, const GuardBase *b, uint64_t v, uint64_t pv, RollbackRecord *ret) {
        /* a counter that went down was reset (device re-created, namespace counters do not go
         * down otherwise): no rise */
        uint64_t rise = v > b->base ? v - b->base : 0, per_rise = 0;
        bool namespace_wide = g->kind == GUARD_COUNTER_SNMP;

        if (g->per)
                per_rise = pv > b->per_base ? pv - b->per_base : 0;
        if (g->has_max_increase && rise > g->max_increase) {
                *ret = (RollbackRecord){.counter = (char *) g->counter, /* borrowed */ .rise = rise,
                                        .threshold = (double) g->max_increase, .namespace_wide = namespace_wide};
                return true;
        }
        /* a ratio of the device's own counters says nothing of a few segments (a retransmit of
         * a segment sent before the window, with none sent in it, is no infinite ratio) */
        if (g->has_max_ratio && g->per && (g->per_kind != GUARD_COUNTER_OBSERVER || per_rise >= GUARD_OBSERVER_PER_MIN)) {
                double ratio = per_rise > 0 ? (double) rise / (double) per_rise : (rise > 0 ? INFINITY : 0.0);
                if (ratio > g->max_ratio) {
                        *ret = (RollbackRecord){.counter = (char *) g->counter, /* borrowed */ .per = (char *) g->per,
                                                .rise = rise, .per_rise = per_rise, .threshold = g->max_ratio,
                                                .namespace_wide = namespace_wide};
                        return true;
                }
        }
        return false;
}

int guard_set_check_observer(GuardSet *s, const GuardObserver *g, RollbackRecord *ret) {
        guard_set_observer_baseline(s, g);
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                uint64_t v = 0, pv = 0;

                if (!guard_set_active(s, i) || !guard_set_have_base(s, i) ||
                    r->kind != GUARD_COUNTER_OBSERVER)
                        continue;
                if (observer_value(g, r->counter, r->offset, r->reason, &v) < 0)
                        continue;
                if (r->per && observer_value(g, r->per, r->per_offset, r->per_reason, &pv) < 0)
                        continue;
                if (trips(r, &s->items[i], v, pv, ret))
                        return 1;
        }
        return 0;
}

int guard_set_check(const GuardSet *s, const SnmpSnapshot *snap, const void *stats, size_t size,
                    RollbackRecord *ret) {
        for (size_t i = 0; i < guard_set_n(s); i++) {
                const GuardRule *r = &s->rules->items[i];
                uint64_t v, pv = 0;

                if (!guard_set_active(s, i) || !guard_set_have_base(s, i))
                        continue;
                if (value_of(r->kind, r->counter, r->offset, snap, stats, size, &v) < 0)
                        continue;
                if (r->per && value_of(r->per_kind, r->per, r->per_offset, snap, stats, size, &pv) < 0)
                        continue;
                if (trips(r, &s->items[i], v, pv, ret))
                        return 1;
        }
        return 0;
}

/* Once each: a counter several guards name is one warning. */
static int strv_add_once(char ***l, size_t *n, const char *s) {
        return strv_contains(*l, s) ? 0 : strv_push(l, n, s);
}

/* An observer counter this host can count: it can run the observer (its kernel has BTF: whether
 * the daemon may load it, CAP_BPF, is the daemon's to say in status), and a drop reason is the
 * kernel's. */
static bool observer_counter_exposed(const char *name) {
        uint32_t reason;
        if (strncmp(name, "drop.", 5) != 0)
                return observer_kernel_has_btf();
        return observer_drop_reason_names(NULL) && drop_reason(name, &reason) >= 0;
}

static bool counter_exposed(GuardCounterKind kind, const char *name, const SnmpSnapshot *snap, size_t stats_size) {
        uint64_t v;
        if (kind == GUARD_COUNTER_OBSERVER)
                return observer_counter_exposed(name);
        if (kind == GUARD_COUNTER_LINK) {
                int off = counter_offset(kind, name);
                return off >= 0 && (size_t) off + sizeof(uint64_t) <= stats_size;
        }
        return snmp_get(snap, name, &v) >= 0;
}

int guard_spec_check(const RollbackSpec *spec, const SnmpSnapshot *snap, size_t stats_size, char ***warnings,
                     size_t *n_warnings) {
        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *g = &spec->guards[i];
                int r = 0;
                if (!counter_exposed(g->counter_kind, g->counter, snap, stats_size))
                        r = strv_add_once(warnings, n_warnings, g->counter);
                if (r >= 0 && g->per && !counter_exposed(g->per_kind, g->per, snap, stats_size))
                        r = strv_add_once(warnings, n_warnings, g->per);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The same warning at the same place (a file's defaults reach every policy of it). The built-in
 * guards have no place: their counter tells them apart. */
static bool warned(const PolicyErrors *w, const char *file, unsigned line, unsigned column, const char *message) {
        for (size_t i = 0; i < w->n; i++)
                if (w->items[i].line == line && w->items[i].column == column && streq_ptr(w->items[i].file, file) &&
                    streq_ptr(w->items[i].message, message))
                        return true;
        return false;
}

static int counter_warning(const SnmpSnapshot *snap, const char *const *keys, const char *file, unsigned line,
                           unsigned column, const char *counter, PolicyErrors *ret) {
        const char *near = nearest_word_n(counter, keys, snap->n);
        char *m;
        int r;

        if (near)
                r = asprintf(&m,
                             "warning: guard counter \"%s\" is not on this host (did you mean \"%s\"?): guards "
                             "on it never trip",
                             counter, near);
        else
                r = asprintf(&m, "warning: guard counter \"%s\" is not on this host: guards on it never trip", counter);
        if (r < 0)
                return -ENOMEM;
        file = file ?: "<built-in>";
        if (warned(ret, file, line, column, m)) {
                free(m);
                return 0;
        }
        r = policy_errors_append(ret, file, line, column, m);
        if (r < 0)
                free(m);
        return r;
}

static int spec_warnings(const RollbackSpec *spec, const SnmpSnapshot *snap, const char *const *keys,
                         size_t stats_size, PolicyErrors *ret) {
        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *g = &spec->guards[i];
                int r = 0;
                /* no counter: a guard of a file with errors (PolicySet.partial), its error says why;
                 * the observer's are errors (guard_observer_errors()) */
                if (g->counter && g->counter_kind != GUARD_COUNTER_OBSERVER &&
                    !counter_exposed(g->counter_kind, g->counter, snap, stats_size))
                        r = counter_warning(snap, keys, g->file, g->line, g->column, g->counter, ret);
                if (r >= 0 && g->per && g->per_kind != GUARD_COUNTER_OBSERVER &&
                    !counter_exposed(g->per_kind, g->per, snap, stats_size))
                        r = counter_warning(snap, keys, g->file, g->per_line, g->per_column, g->per, ret);
                if (r < 0)
                        return r;
        }
        return 0;
}

int guard_counter_warnings(const PolicySet *set, const SnmpSnapshot *snap, size_t stats_size, PolicyErrors *ret) {
        _cleanup_(freep) const char **keys = calloc(snap->n + 1, sizeof(char *));
        int r;

        if (!keys)
                return -ENOMEM;
        for (size_t i = 0; i < snap->n; i++)
                keys[i] = snap->entries[i].key;
        r = spec_warnings(&set->defaults, snap, keys, stats_size, ret);
        for (size_t i = 0; r >= 0 && i < set->n_policies; i++)
                r = spec_warnings(&set->policies[i].rollback, snap, keys, stats_size, ret);
        return r;
}

int guard_counter_warnings_here(const PolicySet *set, const char *proc_net, PolicyErrors *ret) {
        SnmpSnapshot snap = {};
        int r = snmp_read(proc_net ?: "/proc/net", &snap);

        if (r >= 0)
                r = guard_counter_warnings(set, &snap, sizeof(struct rtnl_link_stats64), ret);
        snmp_done(&snap);
        return r;
}

static int observer_error(const char *file, unsigned line, unsigned column, const char *counter, PolicyErrors *ret) {
        const char *const *names = observer_drop_reason_names(NULL);
        char *m;
        int r;

        if (!names)
                r = asprintf(&m,
                             "guard counter \"%s\" is the device's own, counted by the eBPF observer, which this "
                             "host cannot run (its kernel has no BTF: /sys/kernel/btf/vmlinux); use link.* or "
                             "Group.Name counters here",
                             counter);
        else {
                const char *near = nearest_word(counter + 5, names);
                if (near)
                        r = asprintf(&m, "guard counter \"%s\": no drop reason of this kernel is \"%s\" (did you "
                                         "mean \"drop.%s\"?)", counter, counter + 5, near);
                else
                        r = asprintf(&m, "guard counter \"%s\": no drop reason of this kernel is \"%s\" (its "
                                         "enum skb_drop_reason, lower case, without SKB_DROP_REASON_)", counter,
                                     counter + 5);
        }
        if (r < 0)
                return -ENOMEM;
        r = policy_errors_append(ret, file ?: "<built-in>", line, column, m);
        if (r < 0)
                free(m);
        return r;
}

static int spec_observer_errors(const RollbackSpec *spec, PolicyErrors *ret, size_t *n) {
        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *g = &spec->guards[i];
                int r = 0;
                if (!g->file)
                        continue; /* a built-in guard: inactive where the observer does not run */
                if (g->counter && g->counter_kind == GUARD_COUNTER_OBSERVER && !observer_counter_exposed(g->counter)) {
                        r = observer_error(g->file, g->line, g->column, g->counter, ret);
                        (*n)++;
                }
                if (r >= 0 && g->per && g->per_kind == GUARD_COUNTER_OBSERVER && !observer_counter_exposed(g->per)) {
                        r = observer_error(g->file, g->per_line, g->per_column, g->per, ret);
                        (*n)++;
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

int guard_observer_errors(const PolicySet *set, PolicyErrors *ret) {
        size_t n = 0;
        int r = spec_observer_errors(&set->defaults, ret, &n);

        for (size_t i = 0; r >= 0 && i < set->n_policies; i++)
                r = spec_observer_errors(&set->policies[i].rollback, ret, &n);
        return r < 0 ? r : (int) n;
}
