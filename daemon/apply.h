/* apply.h — the decisions: for one device, which step of its lifecycle the policy and the kernel
 * call for (reconcile), what a rollback and a retry do, what the kernel's answers and the guards'
 * verdicts lead to (apply.c implements WriterOps and ProbationOps), the staged rollouts and the
 * rate limit on putting back what others changed. */
#pragma once

#include "engine.h"
#include "state.h"

/* A device that appeared by an event this long ago or less, and has carried no traffic, is new:
 * it skips its policy's max-parallel bound (it has nothing to lose yet). */
#define NEW_DEVICE_USEC (5 * USEC_PER_SEC)
#define CORRECTION_WINDOW_USEC (60 * USEC_PER_SEC)
#define CORRECTIONS_MAX 10u

typedef enum ReconcileReason {
        REASON_SYNC,   /* initial sync, resync, reload */
        REASON_LINK,   /* the device changed, or its write was answered */
        REASON_SIZES,  /* its sizes changed, and bigtcpd did not write them */
        REASON_ROUTES, /* routes out of it changed */
        REASON_RETRY,  /* an operator released it */
        _REASON_MAX,
        _REASON_INVALID = -EINVAL,
} ReconcileReason;

extern const WriterOps apply_writer_ops;
extern const ProbationOps apply_probation_ops;

/* The policy of `set` that the device matches, or NULL. */
const Policy *apply_match(Engine *e, const PolicySet *set, Device *d);
/* … of a device no engine runs (Plan's look into a namespace not entered): in the namespace
 * `netns` (NULL: the daemon's own), its driver asked through `ioctl_fd` when not looked up yet. */
const Policy *apply_match_in(const PolicySet *set, Device *d, const char *netns, int ioctl_fd);
/* Which keys of `p` (a policy that matches `d`) chose it, in words (policy_match_explain()). */
int apply_match_explain(Engine *e, const Policy *p, Device *d, char **ret);
bool apply_device_is_new(const Engine *e, const Device *d);

/* Decide what the device should hold and take the step that gets it there. */
void apply_reconcile(Engine *e, Device *d, ReconcileReason reason);
/* Send what is queued (lifecycle_flush()), reconsider what could not go; emit EVENT_SETTLED when that
 * was all. */
void apply_flush(Engine *e);

/* Back to the sizes before bigtcpd's most recent change, held there; a rollback halts the rollout
 * of the device's policy. `why` NULL: an operator's. -EALREADY when there is nothing to undo. */
int apply_rollback(Engine *e, Device *d, const RollbackRecord *why);
/* Release a rolled-back or failed device and apply its policy again (a halt it caused ends).
 * -EALREADY when it is neither. */
int apply_retry(Engine *e, Device *d);

/* A new policy is in force: rollouts follow it, refused writes are tried again, missing guard
 * counters are looked up. The caller then re-reads the links, which reconciles every device. */
void apply_policy_changed(Engine *e);

/* The first sync is done: attach what the state file of an earlier run recorded. */
void apply_loaded_state(Engine *e, StateEntry *entries, size_t n);
