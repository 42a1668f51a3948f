/* device-lifecycle.h — the device lifecycle as an explicit state machine. The states are those of
 * bigtcpd(8), DEVICE STATES (device.h); the transitions the daemon may make between them are listed once, in device-lifecycle.c,
 * and each function below is one step: it does all the bookkeeping of that step — the writer, the
 * probation set, the rollout, the records, the state file, the event — so that no combination of
 * flags elsewhere has a meaning of its own. Which step to take is decided in apply.c. A write is
 * one transaction of the lifecycle's (queued, begun, sent; then done, refused or lost: below), and
 * a device's `life` and `record` are written here alone (check-layering.py).
 *
 *   unmanaged ──match──► pending ──ack──► probation ──window passed──► applied
 *       ▲                 │  ▲  └─refused─► failed        │ guard trips      │ operator
 *       │                 │  └──────── policy changes ────┼──────────────────┤
 *       └── restored ◄────┘                               ▼                  ▼
 *                                       pending (rollback write) ──ack──► rolled-back
 *
 * Leaving the match (or the device going away) ends everything in progress: the queued write, the
 * probation window, the rollout slot or place in line, a throttle. A write already in flight
 * cannot be recalled; its ack is taken as it comes and the device is reconsidered then. */
#pragma once

#include "engine.h"
#include "state.h"

/* May a device go from `from` to `to`? (Staying is always allowed.) */
bool lifecycle_transition_allowed(DeviceState from, DeviceState to);

/* The state a device is counted in (GetStatus, the D-Bus counts, STATUS=): its own, but a device
 * whose rollback is decided counts as rolled back from that moment, while the rollback's write is
 * on its way: its rollout halts at that moment too, and the halt and the counts change together. */
DeviceState lifecycle_counted_state(const Device *d);
/* Add the engine's devices, by lifecycle_counted_state(), to n. */
void lifecycle_count_states(const Engine *e, unsigned n[static _DEVICE_STATE_MAX]);

/* Why a pending device is not at its sizes yet; _PENDING_REASON_INVALID when it is not pending. */
PendingReason lifecycle_pending_reason(const Device *d);

/* End everything in progress for `d` (see above). Returns true when a rollout slot was freed. */
bool lifecycle_stop(Engine *e, Device *d);

/* → pending: a write of `cause` takes d to `target` (`owned`: the sizes of its policy it sets).
 * Before bigtcpd's first write its original sizes are recorded. */
void lifecycle_queue_write(Engine *e, Device *d, WriteCause cause, const Sizes *target, unsigned owned);
/* → pending: d wants `target` but waits (its rollout, a throttle); no write is queued. */
void lifecycle_wait(Engine *e, Device *d, const Sizes *target, unsigned owned);
/* → probation while its window runs, else applied: d holds what its policy asks. */
void lifecycle_at_policy(Engine *e, Device *d, const Sizes *want, unsigned owned);
/* → unmanaged: d matches no policy and bigtcpd has nothing of it to give back. */
void lifecycle_unmanaged(Engine *e, Device *d);
/* → unmanaged: d is at its originals already; bigtcpd forgets them. */
void lifecycle_forget_originals(Engine *e, Device *d);
/* → unsupported. */
void lifecycle_unsupported(Engine *e, Device *d);

/* ---- the write as one transaction (device-lifecycle.c has its steps) ----
 * lifecycle_queue_write() (and a rollback) queue it; lifecycle_flush() begins the writes that can
 * go and sends them; lifecycle_write_answered() ends each one. */

/* What a flush leaves to the decisions. */
typedef struct WriteFlush {
        /* got to their targets meanwhile (not written), or could not be sent (failed) */
        Device *reconsider[WRITER_INFLIGHT_MAX];
        size_t n_reconsider;
        /* some were refused because the state file cannot be written: tried again once it is
         * (lifecycle_state_recovered()) */
        bool unrecorded;
} WriteFlush;

/* Begin the queued writes that can go now — what a restart needs on disk first, the rollback
 * target, the probation window — and send them; a write whose begin cannot be saved is refused
 * and undone (d → failed). */
void lifecycle_flush(Engine *e, WriteFlush *ret);
/* The kernel answered d's write (d->write says what it carried): done → probation (its window
 * armed, its packets counted), applied, rolled-back or unmanaged (a restore), as its cause says;
 * refused → failed, what began undone. `lost`: the kernel is read again and d reconsidered then,
 * nothing undone (it may have landed). */
void lifecycle_write_answered(Engine *e, Device *d, int error, const char *extack, bool lost);
/* d left its policy while its write is in flight: what bigtcpd was doing with it stops now; the
 * write lands, and is then no step of the policy's. */
void lifecycle_write_orphaned(Engine *e, Device *d);
/* The state file is written again: true when d was refused because its record could not be
 * saved and may be tried now (its refusal forgotten). */
bool lifecycle_state_recovered(Engine *e, Device *d);

/* → applied: the window passed with no guard tripping. */
void lifecycle_passed(Engine *e, Device *d);

/* → pending (the rollback write) or rolled-back: d goes back to the sizes it had before
 * bigtcpd's most recent change and is held there against the sizes its policy asks now (until
 * those change, or an operator retries it). `why` is the guard that tripped (copied), NULL for an operator. -EALREADY when
 * bigtcpd never wrote d or it is rolled back (or going back) already. */
int lifecycle_roll_back(Engine *e, Device *d, const RollbackRecord *why);
/* Where a rollback of d goes: its last-known-good sizes (its originals after one change), all
 * four, clamped to what the device takes today. */
void lifecycle_rollback_target(const Engine *e, const Device *d, Sizes *ret);
/* → rolled-back: a held device is at its rollback target (one cut short by a kill, or undone and
 * written again, or the one the kernel already held). */
void lifecycle_held(Engine *e, Device *d, const Sizes *target);
/* d stays held, but what its policy asks moved under the hold (an operator's rollback ended a step
 * of `auto`: its search asks for its proven size now): held against `want` from here on. */
void lifecycle_hold_against(Engine *e, Device *d, const Sizes *want);
/* No policy wants d any more: a hold of it ends (its originals go back, or it was at them). */
void lifecycle_hold_ends(Engine *e, Device *d);
/* Release d from a hold or a failure (an operator's retry, or its policy asking for something
 * else). -EALREADY when it is neither held nor failed. The caller reconciles it. */
int lifecycle_release(Engine *e, Device *d);

/* d was found with an entry of the state file of an earlier run. Takes the entry's probation and
 * rollback record. */
void lifecycle_resume(Engine *e, Device *d, StateEntry *entry);
/* A device that came from another namespace, with the records bigtcpd kept for it there: its
 * sizes from before bigtcpd's first write, the sizes bigtcpd owned, the last-known-good ones
 * (NULL: none) and those that passed their windows. */
void lifecycle_adopt(Engine *e, Device *d, const Sizes *original, unsigned written, const Sizes *last_good,
                     const ProvenSizes *proven);
/* d went away: everything of it ends, EVENT_REMOVED, and it is freed. */
void lifecycle_gone(Engine *e, Device *d);
