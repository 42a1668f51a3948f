/* guard.h — the guards watching one device after a write: their baselines, and the decision
 * whether a counter rose too much. Pure bookkeeping; the caller reads the counters. */
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

typedef struct GuardState {
        /* every device in probation holds one per guard: no holes (96 -> 80 bytes) */
        const char *counter; /* interned (intern.h), as `per` */
        const char *per;
        GuardCounterKind kind;
        int offset; /* link counters: into struct rtnl_link_stats64 */
        GuardCounterKind per_kind;
        int per_offset;
        uint64_t max_increase;
        double max_ratio;
        uint32_t reason, per_reason; /* observer drop.<reason> counters: the kernel's value (UINT32_MAX: any) */
        bool has_max_increase;
        bool has_max_ratio;
        bool active;    /* false: a counter this kernel does not expose */
        bool have_base; /* link baselines arrive with the first stats after the write */
        uint64_t base, per_base;
} GuardState;

typedef struct GuardSet {
        GuardState *items;
        size_t n;
} GuardSet;

/* The guards of `spec`, in `items` (room for spec->n_guards: the caller's, kept with its
 * probation), with their SNMP baselines from `snap` (NULL: none read); link baselines come with
 * guard_set_link_baseline(). Counters absent from `snap` make their guard inactive. */
int guard_set_init(GuardSet *s, GuardState *items, const RollbackSpec *spec, const SnmpSnapshot *snap);
/* Drops what the guards hold; `items` stay the caller's. */
void guard_set_done(GuardSet *s);
/* For the state file's loader: a counter name as written (interned), with its kind and offset. */
int guard_counter_load(const char *name, const char **ret, GuardCounterKind *ret_kind, int *ret_offset);

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
