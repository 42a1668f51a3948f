/* probation.h — the devices in probation: after a write a device is watched through its
 * policy's guards for a window, sampled every interval (the SNMP files read once and the link
 * statistics dumped once for every device due at a tick), and its verdict — the window passed,
 * or a guard tripped — goes up through ProbationOps. Each device is judged against its own
 * baselines, taken just before its own write: a rise that came before a device's write never
 * trips it. One timer, armed only while some device is in probation; a device is sampled at the
 * first tick less than 3/4 of a tick before its due time: first at most 1.25 intervals after its
 * write, then at every tick, so that a loop running late still keeps its samples within 1.5. */
#pragma once

#include <sys/queue.h>

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "counters.h"
#include "device.h"
#include "guard.h"
#include "policy.h"
#include "writer.h"

typedef struct Probation {
        uint64_t until_usec; /* CLOCK_BOOTTIME */
        /* next sample; PROBATION_SAMPLING while it waits for its link statistics from the dump
         * running (the next is then counted from the tick that asked for it) */
        uint64_t next_usec;
        uint64_t last_usec; /* the last one (or the write) */
        union {
                TAILQ_ENTRY(Device) link; /* among the set's devices (a device's own only while it is in) */
                LIST_ENTRY(Probation) shelf; /* set aside (probation_shelve()) */
        };
        /* Last: its baselines end the record. Its rules are never NULL: their count is the room
         * made for the baselines, and they have the window and interval (the spec's, the same for
         * all its devices). */
        GuardSet guards;
} Probation;

#define PROBATION_SAMPLING UINT64_MAX

static inline uint64_t probation_window_usec(const Probation *p) {
        return p->guards.rules->window_usec;
}
static inline uint64_t probation_interval_usec(const Probation *p) {
        return p->guards.rules->interval_usec;
}

/* A record under `rules` (it takes the reference; NULL without memory, the reference dropped)
 * with room for their guards' baselines, all else zero. Up to PROBATION_POOLED_GUARDS guards it
 * comes from a pool (pool.h), as devices do: ten thousand of them come and go with a burst. The
 * shipped policy has 6. */
#define PROBATION_POOLED_GUARDS 8
Probation *probation_alloc(GuardRules *rules);
int probation_new(const RollbackSpec *spec, const SnmpSnapshot *snap, uint64_t now_usec, Probation **ret);
void probation_free(Probation *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(Probation *, probation_free);

typedef struct ProbationOps {
        /* The window ended and no guard tripped. The device is still in the set. */
        void (*passed)(void *userdata, Device *d);
        /* A guard tripped (strings of `why` are borrowed). The device is still in the set. */
        void (*tripped)(void *userdata, Device *d, const RollbackRecord *why);
        /* The device's link baselines came in late (from its first sample): worth putting on disk. */
        void (*changed)(void *userdata, Device *d);
} ProbationOps;

typedef struct ProbationSet ProbationSet;

/* `snmp`: where the namespace's SNMP files are ("/proc/net"); the fds stay the caller's. */
int probation_set_new(struct event_base *base, Writer *writer, const SnmpFiles *snmp, const Clock *clock,
                      const ProbationOps *ops, void *userdata, ProbationSet **ret);
/* Ends every probation (the devices stay). */
void probation_set_free(ProbationSet *s);
/* The eBPF observer, whose counters guards of the device's own (drop.*, tcp.*) read; without it
 * they are inactive. */
void probation_set_observer(ProbationSet *s, Observer *o);

/* Put `d` under `spec`'s guards, before its write is sent; `snap` is a reading of the SNMP
 * counters taken now (NULL when none was read), `stats` (`size` bytes of struct
 * rtnl_link_stats64; NULL: none could be read, the first sample stands in) the device's own from
 * just before the write. A probation already running is replaced. 0 with no probation when the
 * spec has no guards or no window. */
int probation_begin(ProbationSet *s, Device *d, const RollbackSpec *spec, const SnmpSnapshot *snap,
                    const void *stats, size_t size);
/* A probation begun by an earlier run (state file): judged at the first tick. Takes `p`. */
void probation_resume(ProbationSet *s, Device *d, Probation *p);
/* End it without a verdict (passed, tripped, device gone, leaving the match). */
void probation_end(ProbationSet *s, Device *d);
/* Set d's window aside (NULL: it has none), unjudged, while a write that begins another may still
 * be refused: probation_unshelve() ends d's window and lets that one go on (judged at the next
 * tick), probation_drop() frees it. The set frees what is still aside when it is freed. */
Probation *probation_shelve(ProbationSet *s, Device *d);
void probation_unshelve(ProbationSet *s, Device *d, Probation *p);
void probation_drop(ProbationSet *s, Probation *p);
/* (Re-)arm the timer for the earliest device due; disarm it when none is in probation. */
void probation_arm(ProbationSet *s);
/* The timer's work: sample the devices that are due. Tests call it with a fake clock. */
void probation_tick(ProbationSet *s);

/* One device's entry of the statistics dump a tick asked for (any device: those not waiting for
 * a sample are ignored). */
void probation_sample(ProbationSet *s, Device *d, const void *stats, size_t size);
/* The dump is over (0) or failed: the verdicts of the tick go up. */
void probation_samples_done(ProbationSet *s, int error);

size_t probation_count(const ProbationSet *s);
/* Since the set was last empty: the longest time between two samples of one device (the first
 * counted from its write), and the statistics dumps asked for. */
void probation_figures(const ProbationSet *s, uint64_t *ret_gap_max_usec, uint64_t *ret_dumps);
/* Its timer is armed (for tests: it is off whenever no device is in probation). */
bool probation_armed(const ProbationSet *s);
/* Time left of d's window. */
uint64_t probation_left_usec(const ProbationSet *s, const Device *d);
