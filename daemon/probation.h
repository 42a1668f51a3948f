/* probation.h — the daemon's side of guards: devices in probation, their sampling timer, the
 * end of a window (applied) or a guard tripping (rollback), and staged rollouts. */
#pragma once

#include "counters.h"
#include "manager.h"

/* Put the device under the policy's guards before its write is sent; `snap` is a reading of the
 * SNMP counters taken now (NULL when the policy has no SNMP guards). last_good becomes the
 * current sizes unless the device was already in probation. No-op without guards. */
int probation_start(Manager *m, Device *d, const Policy *p, const SnmpSnapshot *snap);
/* End probation without a verdict (device gone, write refused, a new write under another
 * policy). */
void probation_stop(Manager *m, Device *d);
/* (Re-)arm the sampling timer for the earliest device due; disarm when none is in probation. */
void probation_arm(Manager *m);
void probation_timer(evutil_socket_t fd, short what, void *userdata);

/* Stats arrived in a reply for a device in probation: the first ones are its link baselines. */
void probation_stats(Manager *m, Device *d, const void *stats, size_t size);
/* The answer to a probation sample request is complete: evaluate the link guards. */
void probation_sample_done(Manager *m, Device *d);

/* Staged rollouts: must this write wait for a free slot (rollout.max-parallel), or because the
 * rollout of the same sizes under this policy already rolled a device back? */
bool rollout_must_wait(Manager *m, Device *d, const Policy *p, const Sizes *want);
/* A slot may have been freed: reconsider waiting devices. */
void rollout_release(Manager *m);

/* The policy in force named `name`. */
const Policy *policy_by_name(const Manager *m, const char *name);
/* Check the running policy's guards against this kernel; warn once per missing counter. */
void guard_warnings_refresh(Manager *m);
