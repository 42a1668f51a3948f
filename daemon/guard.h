/* guard.h — probation: the guards watching one device after a write, their baselines, and the
 * decision whether a counter rose too much. Pure bookkeeping; the caller reads the counters. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counters.h"
#include "device.h"
#include "policy.h"

typedef struct ProbationGuard {
        char *counter;
        GuardCounterKind kind;
        int offset; /* link counters: into struct rtnl_link_stats64 */
        char *per;
        GuardCounterKind per_kind;
        int per_offset;
        bool has_max_increase;
        uint64_t max_increase;
        bool has_max_ratio;
        double max_ratio;
        bool active;    /* false: a counter this kernel does not expose */
        bool have_base; /* link baselines arrive with the first stats after the write */
        uint64_t base, per_base;
} ProbationGuard;

typedef struct Probation {
        uint64_t until_usec;    /* CLOCK_BOOTTIME */
        uint64_t interval_usec;
        uint64_t window_usec;
        uint64_t next_usec;     /* next sample */
        ProbationGuard *guards;
        size_t n_guards;
        bool sample_pending;    /* a stats request is out; evaluate link guards on its answer */
        uint8_t stats[sizeof(uint64_t) * 32]; /* the latest stats64 of the device */
        size_t stats_len;
} Probation;

/* Guards of `spec` with their SNMP baselines from `snap` (NULL: none read); link baselines come
 * with probation_link_baseline(). Counters absent from `snap` make their guard inactive. */
int probation_new(const RollbackSpec *spec, const SnmpSnapshot *snap, uint64_t now_usec, Probation **ret);
void probation_free(Probation *p);

bool probation_has_link_guards(const Probation *p);
bool probation_has_snmp_guards(const Probation *p);

/* Take the link baselines from a stats64 blob; guards whose field the blob lacks go inactive. */
void probation_link_baseline(Probation *p, const void *stats, size_t size);

/* Evaluate the guards with the counters given (NULL: skip that kind). Returns 1 and fills
 * `ret` (counter, per, rise, per_rise, threshold, namespace_wide — strings borrowed from the
 * guard) for the first guard that trips, 0 when none does. */
int probation_check(const Probation *p, const SnmpSnapshot *snap, const void *stats, size_t size,
                    RollbackRecord *ret);

/* The counters a policy's guards use that this kernel does not expose: "counter" strings
 * appended to *warnings (strv). `snap` is a current reading; `stats_size` the size of the
 * kernel's stats64. */
int guard_spec_check(const RollbackSpec *spec, const SnmpSnapshot *snap, size_t stats_size, char ***warnings,
                     size_t *n_warnings);
