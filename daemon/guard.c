/* guard.c — the guards of one device in probation: baselines taken just before the write, and
 * the rise of each counter against its max-increase or, divided by the rise of `per`, against
 * its max-ratio. */
#include <linux/if_link.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "guard.h"
#include "intern.h"
#include "parse-util.h"
#include "util.h"

void guard_set_done(GuardSet *s) {
        for (size_t i = 0; i < s->n; i++) {
                intern_put(s->items[i].counter);
                intern_put(s->items[i].per);
        }
        s->n = 0;
}

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

bool guard_set_has_observer(const GuardSet *s) {
        for (size_t i = 0; i < s->n; i++)
                if (s->items[i].active && reads_observer(s->items[i].kind, s->items[i].per, s->items[i].per_kind))
                        return true;
        return false;
}

void guard_set_observer_baseline(GuardSet *s, const GuardObserver *g) {
        for (size_t i = 0; i < s->n; i++) {
                GuardState *gs = &s->items[i];
                if (!gs->active || gs->have_base || !reads_observer(gs->kind, gs->per, gs->per_kind))
                        continue;
                /* a drop reason this kernel lacks: never trips (validate said so) */
                if (!g || !g->observer || (gs->kind == GUARD_COUNTER_OBSERVER && strncmp(gs->counter, "drop.", 5) == 0 &&
                                           drop_reason(gs->counter, &gs->reason) < 0) ||
                    (gs->per && gs->per_kind == GUARD_COUNTER_OBSERVER && strncmp(gs->per, "drop.", 5) == 0 &&
                     drop_reason(gs->per, &gs->per_reason) < 0)) {
                        gs->active = false;
                        continue;
                }
                if (gs->kind == GUARD_COUNTER_OBSERVER)
                        (void) observer_value(g, gs->counter, gs->offset, gs->reason, &gs->base);
                if (gs->per && gs->per_kind == GUARD_COUNTER_OBSERVER)
                        (void) observer_value(g, gs->per, gs->per_offset, gs->per_reason, &gs->per_base);
                gs->have_base = true;
        }
}

int guard_counter_load(const char *name, const char **ret, GuardCounterKind *ret_kind, int *ret_offset) {
        GuardCounterKind k;

        if (!name || guard_counter_parse(name, &k) < 0)
                return -EBADMSG;
        *ret = intern_get(name);
        if (!*ret)
                return -ENOMEM;
        *ret_kind = k;
        *ret_offset = counter_offset(k, name);
        return 0;
}

int guard_set_init(GuardSet *s, GuardState *items, const RollbackSpec *spec, const SnmpSnapshot *snap) {
        GuardSet g = {.items = items};

        for (size_t i = 0; i < spec->n_guards; i++) {
                const Guard *sg = &spec->guards[i];
                GuardState *pg = &g.items[g.n++];

                *pg = (GuardState){.counter = intern_get(sg->counter), .per = intern_get(sg->per)};
                if (!pg->counter || (sg->per && !pg->per)) {
                        guard_set_done(&g);
                        return -ENOMEM;
                }
                pg->kind = sg->counter_kind;
                pg->per_kind = sg->per_kind;
                pg->offset = counter_offset(sg->counter_kind, sg->counter);
                pg->per_offset = sg->per ? counter_offset(sg->per_kind, sg->per) : -1;
                pg->has_max_increase = sg->has_max_increase;
                pg->max_increase = sg->max_increase;
                pg->has_max_ratio = sg->has_max_ratio;
                pg->max_ratio = sg->max_ratio;
                pg->active = true;

                bool snmp = pg->kind == GUARD_COUNTER_SNMP, per_snmp = pg->per && pg->per_kind == GUARD_COUNTER_SNMP;
                if ((snmp || per_snmp) && !snap)
                        pg->active = false;
                if (snmp && snap && snmp_get(snap, pg->counter, &pg->base) < 0)
                        pg->active = false;
                if (per_snmp && snap && snmp_get(snap, pg->per, &pg->per_base) < 0)
                        pg->active = false;
                /* all-SNMP guards have their baselines now; link ones wait for stats, the
                 * observer's for guard_set_observer_baseline() */
                pg->have_base = !reads_link(pg->kind, pg->per, pg->per_kind) &&
                                !reads_observer(pg->kind, pg->per, pg->per_kind);
        }
        *s = g;
        return 0;
}

static bool uses(const GuardState *g, GuardCounterKind kind) {
        return g->active && (g->kind == kind || (g->per && g->per_kind == kind));
}

bool guard_set_has_link(const GuardSet *s) {
        for (size_t i = 0; i < s->n; i++)
                if (uses(&s->items[i], GUARD_COUNTER_LINK))
                        return true;
        return false;
}

bool guard_set_has_snmp(const GuardSet *s) {
        for (size_t i = 0; i < s->n; i++)
                if (uses(&s->items[i], GUARD_COUNTER_SNMP))
                        return true;
        return false;
}

unsigned guard_set_snmp_files(const GuardSet *s) {
        unsigned files = 0;

        for (size_t i = 0; i < s->n; i++) {
                const GuardState *g = &s->items[i];
                if (!g->active)
                        continue;
                if (g->kind == GUARD_COUNTER_SNMP)
                        files |= snmp_files_of(g->counter);
                if (g->per && g->per_kind == GUARD_COUNTER_SNMP)
                        files |= snmp_files_of(g->per);
        }
        return files;
}

bool guard_set_has_baselines(const GuardSet *s) {
        /* the observer's take theirs at their first check (guard_set_check_observer()) */
        for (size_t i = 0; i < s->n; i++)
                if (!s->items[i].have_base && !reads_observer(s->items[i].kind, s->items[i].per, s->items[i].per_kind))
                        return false;
        return true;
}

void guard_set_link_baseline(GuardSet *s, const void *stats, size_t size) {
        for (size_t i = 0; i < s->n; i++) {
                GuardState *g = &s->items[i];
                if (!g->active || g->have_base || !reads_link(g->kind, g->per, g->per_kind))
                        continue;
                if (g->kind == GUARD_COUNTER_LINK && link_counter_get(stats, size, g->offset, &g->base) < 0) {
                        g->active = false;
                        continue;
                }
                if (g->per && g->per_kind == GUARD_COUNTER_LINK &&
                    link_counter_get(stats, size, g->per_offset, &g->per_base) < 0) {
                        g->active = false;
                        continue;
                }
                g->have_base = true;
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

/* Whether guard g trips with these values: fills `ret`. */
static bool trips(const GuardState *g, uint64_t v, uint64_t pv, RollbackRecord *ret) {
        /* a counter that went down was reset (device re-created, namespace counters do not go
         * down otherwise): no rise */
        uint64_t rise = v > g->base ? v - g->base : 0, per_rise = 0;
        bool namespace_wide = g->kind == GUARD_COUNTER_SNMP;

        if (g->per)
                per_rise = pv > g->per_base ? pv - g->per_base : 0;
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
        for (size_t i = 0; i < s->n; i++) {
                const GuardState *gs = &s->items[i];
                uint64_t v = 0, pv = 0;

                if (!gs->active || !gs->have_base || gs->kind != GUARD_COUNTER_OBSERVER)
                        continue;
                if (observer_value(g, gs->counter, gs->offset, gs->reason, &v) < 0)
                        continue;
                if (gs->per && observer_value(g, gs->per, gs->per_offset, gs->per_reason, &pv) < 0)
                        continue;
                if (trips(gs, v, pv, ret))
                        return 1;
        }
        return 0;
}

int guard_set_check(const GuardSet *s, const SnmpSnapshot *snap, const void *stats, size_t size,
                    RollbackRecord *ret) {
        for (size_t i = 0; i < s->n; i++) {
                const GuardState *g = &s->items[i];
                uint64_t v, pv = 0;

                if (!g->active || !g->have_base)
                        continue;
                if (value_of(g->kind, g->counter, g->offset, snap, stats, size, &v) < 0)
                        continue;
                if (g->per && value_of(g->per_kind, g->per, g->per_offset, snap, stats, size, &pv) < 0)
                        continue;
                if (trips(g, v, pv, ret))
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
