/* guard.h — the guards watching one device after a write: their rules, resolved once for every
 * device of a guard list and shared, each device's own baselines, and the decision whether a
 * counter rose too much. Pure bookkeeping; the caller reads the counters. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counters.h"
#include "device.h"
#include "observer.h"
#include "policy.h"

/* A ratio whose `per` is one of the observer's counters is judged once `per` rose this much. */
#define GUARD_OBSERVER_PER_MIN UINT64_C(100)

/* One guard's rule, resolved from its Guard (policy.h): what it reads and when it trips. The same
 * for every device in probation under one guard list, so kept once for all of them (GuardRules). */
typedef struct GuardRule {
        const char *counter; /* interned (intern.h), as `per` */
        const char *per;
        GuardCounterKind kind;
        int offset; /* link counters: into struct rtnl_link_stats64; the observer's tcp.*: which */
        GuardCounterKind per_kind;
        int per_offset;
        uint64_t max_increase; /* 0 without has_max_increase */
        double max_ratio;      /* 0 without has_max_ratio */
        /* observer drop.<reason> counters: the kernel's value (UINT32_MAX: any), resolved with the rule */
        uint32_t reason, per_reason;
        bool has_max_increase;
        bool has_max_ratio;
        bool reason_unknown; /* a drop.<reason> of counter or per this kernel does not have: never trips */
} GuardRule;

/* The rules of one guard list, with the window and interval they watch a device over: immutable,
 * reference-counted, one for each distinct content (the next device of a spec, a probation resumed
 * from the state file, a reload that keeps the list and its window all get the one already made).
 * A probation holds a reference, so a rule set outlives the policy it came from while a window
 * begun under it runs. The window and interval are the same for every device of a policy: kept
 * here once, not in each of ten thousand probations; guard.c itself does not read them. */
typedef struct GuardRules {
        unsigned n_ref;
        uint64_t hash;           /* of the content, the table's key */
        struct GuardRules *next; /* in the table's bucket */
        uint64_t window_usec;    /* the spec's, as given */
        uint64_t interval_usec;
        size_t n;
        GuardRule items[];
} GuardRules;

/* The rules of `spec`'s guards and its window and interval with one more reference: the set of
 * the same content if there is one, else a new one. -ENOMEM; -E2BIG: more than POLICY_GUARDS_MAX
 * guards (a bit each in GuardSet). The strings of `spec` are only read. */
int guard_rules_get(const RollbackSpec *spec, GuardRules **ret);
GuardRules *guard_rules_ref(GuardRules *r);
/* Drops a reference; the set goes with the last. NULL is a no-op. */
void guard_rules_unref(GuardRules *r);
/* How many rule sets there are (tests: none is left behind, devices share theirs). */
size_t guard_rules_count(void);

/* A device's own part of one guard: its baselines, taken just before its write. */
typedef struct GuardBase {
        uint64_t base, per_base;
} GuardBase;

/* The guards watching one device: the shared rules, and its own flags and baselines. The
 * baselines follow the set in the room its owner made for them (GUARD_SET_SIZE(): a probation's
 * are the end of its record), so the set keeps no pointer to them. */
typedef struct GuardSet {
        GuardRules *rules;  /* one reference; NULL: no guards */
        uint64_t active;    /* bit i: guard i counts (not: a counter this kernel does not expose) */
        uint64_t have_base; /* bit i: guard i has its baselines (link ones arrive with the first
                             * stats after the write) */
        GuardBase items[];  /* rules->n of them */
} GuardSet;

/* The bytes of a set with room for `n` guards' baselines. */
#define GUARD_SET_SIZE(n) (sizeof(GuardSet) + (n) * sizeof(GuardBase))

static inline size_t guard_set_n(const GuardSet *s) {
        return s->rules ? s->rules->n : 0;
}
static inline bool guard_set_active(const GuardSet *s, size_t i) {
        return (s->active >> i) & 1u;
}
static inline bool guard_set_have_base(const GuardSet *s, size_t i) {
        return (s->have_base >> i) & 1u;
}

/* The guards of `rules` (guard_rules_get(); takes the reference) in `s`, which has room for the
 * baselines of rules->n (GUARD_SET_SIZE()), with their SNMP baselines from `snap` (NULL: none
 * read); link baselines come with guard_set_link_baseline(). Counters absent from `snap` make
 * their guard inactive. */
void guard_set_init(GuardSet *s, GuardRules *rules, const SnmpSnapshot *snap);
/* Drops the reference to the rules; the room stays the caller's. */
void guard_set_done(GuardSet *s);

bool guard_set_has_link(const GuardSet *s);
/* Some guard of `spec` reads the device's own link counters (its writes want link baselines). */
bool guard_spec_has_link(const RollbackSpec *spec);
bool guard_set_has_snmp(const GuardSet *s);
/* The /proc/net files its active namespace-wide counters are in (snmp_files_of()). */
unsigned guard_set_snmp_files(const GuardSet *s);
/* Every guard has its baselines. */
bool guard_set_has_baselines(const GuardSet *s);

/* Take the link baselines from a stats64 blob; guards whose field the blob lacks go inactive. */
void guard_set_link_baseline(GuardSet *s, const void *stats, size_t size);

/* The device whose own counters (the observer's: drop.*, tcp.*) its guards read. */
typedef struct GuardObserver {
        Observer *observer; /* NULL: there is none; such guards are inactive */
        uint32_t netns;
        int ifindex;
} GuardObserver;

bool guard_set_has_observer(const GuardSet *s);
/* Take the baselines of the observer's guards that have none (from the observer's last read): at
 * the write, and after a restart (a new observer counts from zero). No observer: they go inactive. */
void guard_set_observer_baseline(GuardSet *s, const GuardObserver *g);
/* Evaluate the observer's guards (the device's own counters, observer_read() done): 1 and `ret`
 * for the first that trips (namespace_wide false), else 0. Those without a baseline take it. */
int guard_set_check_observer(GuardSet *s, const GuardObserver *g, RollbackRecord *ret);
/* The value of one of the observer's counters for the device (tests, status). -ENOENT for a
 * drop reason this kernel does not have. */
int guard_observer_value(const GuardObserver *g, const char *name, uint64_t *ret);

/* Evaluate the guards with the counters given (NULL: skip that kind). Returns 1 and fills `ret`
 * (counter, per, rise, per_rise, threshold, namespace_wide — strings borrowed from the guard) for
 * the first guard that trips, 0 when none does. */
int guard_set_check(const GuardSet *s, const SnmpSnapshot *snap, const void *stats, size_t size,
                    RollbackRecord *ret);

/* The counters a policy's guards use that this kernel does not expose: "counter" strings
 * appended once each to *warnings (strv). `snap` is a current reading; `stats_size` the size of
 * the kernel's stats64. */
/* The guard counters of `set` (its defaults and every policy) that this host does not expose, as
 * warnings at the place each is written (once per place): "guard counter \"Tcp.RetransSeg\" is not
 * on this host (did you mean \"Tcp.RetransSegs\"?): guards on it never trip". For validate and
 * --check-config, which have no running daemon to ask. */
int guard_counter_warnings(const PolicySet *set, const SnmpSnapshot *snap, size_t stats_size, PolicyErrors *ret);
/* The same against this host: the SNMP counters below `proc_net` (NULL: /proc/net) and the
 * kernel's stats64. Each message starts "warning: ". */
int guard_counter_warnings_here(const PolicySet *set, const char *proc_net, PolicyErrors *ret);

/* The observer's counters (drop.*, tcp.*) of `set` that this host cannot count (no BTF to run the
 * observer; a drop reason its kernel lacks, with did-you-mean), as errors: validate and
 * --check-config refuse such a policy. Returns how many. */
int guard_observer_errors(const PolicySet *set, PolicyErrors *ret);

int guard_spec_check(const RollbackSpec *spec, const SnmpSnapshot *snap, size_t stats_size, char ***warnings,
                     size_t *n_warnings);
