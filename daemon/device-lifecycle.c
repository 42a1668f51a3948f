/* device-lifecycle.c — the legal transitions, and one function per step of a device's life. */
#include "device-lifecycle.h"
#include "auto-apply.h"
#include "log-fields.h"
#include "reconcile.h"
#include "rollout.h"

/* [from][to]: the transitions a device may make. Probation and failed are entered only from
 * pending (the answer to a write); rolled-back from pending (the rollback's write answered, or
 * the write it cut short dropped) or from failed (its write refused, then the kernel found at
 * its sizes): a rollback that would change nothing holds nothing;
 * unsupported only by a device bigtcpd holds no originals of (one with originals gives them back
 * first). */
static const bool transitions[_DEVICE_STATE_MAX][_DEVICE_STATE_MAX] = {
        [DEVICE_UNMANAGED] = {[DEVICE_PENDING] = true, [DEVICE_APPLIED] = true, [DEVICE_UNSUPPORTED] = true},
        [DEVICE_PENDING] = {[DEVICE_UNMANAGED] = true, [DEVICE_PROBATION] = true, [DEVICE_APPLIED] = true,
                            [DEVICE_ROLLED_BACK] = true, [DEVICE_FAILED] = true, [DEVICE_UNSUPPORTED] = true},
        [DEVICE_PROBATION] = {[DEVICE_UNMANAGED] = true, [DEVICE_PENDING] = true, [DEVICE_APPLIED] = true},
        [DEVICE_APPLIED] = {[DEVICE_UNMANAGED] = true, [DEVICE_PENDING] = true, [DEVICE_UNSUPPORTED] = true},
        [DEVICE_ROLLED_BACK] = {[DEVICE_UNMANAGED] = true, [DEVICE_PENDING] = true, [DEVICE_APPLIED] = true},
        [DEVICE_FAILED] = {[DEVICE_UNMANAGED] = true, [DEVICE_PENDING] = true, [DEVICE_APPLIED] = true,
                           [DEVICE_ROLLED_BACK] = true, [DEVICE_UNSUPPORTED] = true},
        [DEVICE_UNSUPPORTED] = {[DEVICE_UNMANAGED] = true, [DEVICE_PENDING] = true, [DEVICE_APPLIED] = true},
};

bool lifecycle_transition_allowed(DeviceState from, DeviceState to) {
        if (from < 0 || from >= _DEVICE_STATE_MAX || to < 0 || to >= _DEVICE_STATE_MAX)
                return false;
        return from == to || transitions[from][to];
}

/* The one place a device's state changes. */
static void enter(Engine *e, Device *d, DeviceState to) {
        DeviceState from = d->life.state;

        if (from == to)
                return;
        if (!lifecycle_transition_allowed(from, to))
                log_dev_error(d, "BUG: transition %s → %s is not in the lifecycle, taking it anyway",
                              device_state_to_string(from), device_state_to_string(to));
        d->life.state = to;
        if (d->record.has_original)
                state_store_mark(e->state, d); /* the state file keeps states across restarts */
        event_emit(&e->events, &(Event){.type = EVENT_STATE, .device = d, .state = to, .previous = from});
}

DeviceState lifecycle_counted_state(const Device *d) {
        /* held and pending: its rollback's write (or the write it cut short) is on its way */
        if (d->life.state == DEVICE_PENDING && d->life.held)
                return DEVICE_ROLLED_BACK;
        return d->life.state;
}

void lifecycle_count_states(const Engine *e, unsigned n[static _DEVICE_STATE_MAX]) {
        const Device *d;

        DEVICE_FOREACH(d, &e->devices, it) {
                DeviceState s = lifecycle_counted_state(d);
                if (s >= 0 && s < _DEVICE_STATE_MAX)
                        n[s]++;
        }
}

PendingReason lifecycle_pending_reason(const Device *d) {
        if (d->life.state != DEVICE_PENDING)
                return _PENDING_REASON_INVALID;
        if (d->write.phase == WRITE_QUEUED)
                return PENDING_QUEUED;
        if (d->write.phase == WRITE_SENT)
                return PENDING_IN_FLIGHT;
        const DeviceRollout *ro = device_rollout_get(d);
        if (ro->phase == ROLLOUT_WAITING)
                return ro->of && rollout_is_halted(ro->of) ? PENDING_ROLLOUT_HALTED : PENDING_ROLLOUT_SLOT;
        if (device_history_get(d)->corrections.throttled)
                return PENDING_THROTTLED;
        return PENDING_QUEUED;
}

/* The window a write in flight replaced does not come back when the write is refused. */
static void forget_window_before(Engine *e, Device *d) {
        if (d->write.on) {
                probation_drop(e->probation, d->write.on->txn.window_before);
                d->write.on->txn.window_before = NULL;
        }
}

bool lifecycle_stop(Engine *e, Device *d) {
        forget_window_before(e, d);
        writer_unqueue(e->writer, d);
        probation_end(e->probation, d);
        if (d->history)
                d->history->corrections.throttled = false;
        return rollout_leave(d);
}

static void record_originals(Device *d) {
        if (d->record.has_original)
                return;
        d->record.has_original = true;
        d->record.original_unsaved = true;
        d->record.original = d->current;
        d->record.written = 0;
        d->record.has_last_good = false;
        device_proven_clear(d);
}

static void refused(Engine *e, Device *d, int error, const char *extack, bool unrecorded);

/* The transaction starts (again, when retargeted in the queue): nothing of it is in effect. */
static int queue(Engine *e, Device *d, WriteCause cause, const Sizes *target, unsigned owned) {
        int r = writer_queue(e->writer, d, cause, target, owned);
        if (r < 0)
                return r;
        if (d->write.phase == WRITE_QUEUED) {
                probation_drop(e->probation, d->write.on->txn.window_before);
                d->write.on->txn = (WriteTxn){.step = WRITE_STEP_QUEUED};
        }
        return 0;
}

void lifecycle_queue_write(Engine *e, Device *d, WriteCause cause, const Sizes *target, unsigned owned) {
        if (write_cause_is_policy(cause)) {
                record_originals(d);
                d->life.owned = owned;
        }
        d->life.desired = *target;
        if (d->history)
                d->history->corrections.throttled = false;
        int r = queue(e, d, cause, target, owned);
        if (r < 0) {
                log_dev_error_errno(d, r, "failed to queue the write (%s): %m", write_cause_to_string(cause));
                refused(e, d, r, NULL, false);
                return;
        }
        enter(e, d, DEVICE_PENDING);
}

void lifecycle_wait(Engine *e, Device *d, const Sizes *target, unsigned owned) {
        writer_unqueue(e->writer, d);
        d->life.desired = *target;
        d->life.owned = owned;
        enter(e, d, DEVICE_PENDING);
}

void lifecycle_at_policy(Engine *e, Device *d, const Sizes *want, unsigned owned) {
        writer_unqueue(e->writer, d);
        d->life.desired = *want;
        d->life.owned = owned;
        if (d->history)
                d->history->corrections.throttled = false;
        RolloutPhase phase = device_rollout_get(d)->phase;
        if (phase == ROLLOUT_WAITING || (!d->probation && phase == ROLLOUT_ACTIVE))
                (void) rollout_leave(d); /* nothing to stage any more */
        enter(e, d, d->probation ? DEVICE_PROBATION : DEVICE_APPLIED);
}

void lifecycle_unmanaged(Engine *e, Device *d) {
        (void) lifecycle_stop(e, d);
        d->life.owned = 0;
        d->life.held = false;
        enter(e, d, DEVICE_UNMANAGED);
}

static void drop_originals(Engine *e, Device *d) {
        d->record.has_original = false;
        d->record.original_unsaved = false;
        d->record.written = 0;
        d->record.has_last_good = false;
        device_proven_clear(d);
        d->life.held = false;
        d->life.owned = 0;
        state_store_mark(e->state, d); /* a "forget" line */
}

void lifecycle_forget_originals(Engine *e, Device *d) {
        (void) lifecycle_stop(e, d);
        drop_originals(e, d);
        enter(e, d, DEVICE_UNMANAGED);
}

void lifecycle_unsupported(Engine *e, Device *d) {
        (void) lifecycle_stop(e, d);
        d->life.owned = 0;
        enter(e, d, DEVICE_UNSUPPORTED);
}

static void clear_error(Device *d) {
        DeviceHistory *h = d->history;

        if (!h)
                return;
        h->last_errno = 0;
        h->last_error = mfree(h->last_error);
        h->failed_desired = (Sizes){};
        device_history_trim(d);
}

/* ---- the write as one transaction ----
 *
 *   queued ──begin──► begun ──sent──► sent ──done──► its sizes: window armed, packets counted
 *     │                 │                  ├──refused──► undone: failed
 *     │                 └───── refused ────┘ (what a restart needs could not be saved, or it
 *     │                                      could not be sent)
 *     └─ refused (no room for its record): undone: failed
 *                                          └──lost──► read again, then reconsidered; nothing
 *                                                     undone (it may have landed)
 *
 * begin: before the write, what a restart needs to give everything back is on disk (originals,
 * every size it takes, its rollback target and baselines; a rollback itself); a change of the
 * policy's sizes (not a put-back, nor a write that takes sizes back) moves the rollback target
 * to the sizes the device has, if those are good, and sets up its probation window from the
 * baselines taken just before it. What begin did, a refusal undoes, in undo() alone. */

/* The sizes the device has now are good: they passed their window (or had none), or they are the
 * originals, or they passed a window before (one that began again for them does not make them
 * unproven: a try reverted and tried again, or a rollback retried, must not lose where a
 * rollback goes). */
static bool current_is_good(const Engine *e, const Device *d) {
        return !d->probation || sizes_equal(&d->current, &d->record.original, e->ipv4_supported) ||
               device_proven_contain(d, &d->current, e->ipv4_supported);
}

/* The rollback target moves to the sizes d has now, if those are good (undo() puts it back). */
static void move_rollback_target(Engine *e, Device *d) {
        DeviceWrite *o = d->write.on;

        if (!current_is_good(e, d) || (d->record.has_last_good && sizes_equal(&d->current, &d->record.last_good, e->ipv4_supported)))
                return; /* the last good sizes stay where a rollback goes */
        o->txn.last_good_moved = true;
        o->txn.had_last_good = d->record.has_last_good;
        o->txn.last_good = d->record.last_good;
        d->record.last_good = d->current;
        d->record.has_last_good = true;
}

/* Everything the write's transaction did goes back: no window for a write that did not happen, no
 * rollout slot, the rollback target where it was; and originals that never reached the disk
 * (`unrecorded`) are not kept: bigtcpd did not write the device. */
static void undo(Engine *e, Device *d, bool unrecorded) {
        DeviceWrite *o = d->write.on; /* NULL: no room for its record */

        if (o && o->txn.window_before) {
                /* the window that ran goes on (in its rollout slot): the sizes it watches are
                 * still the device's */
                probation_unshelve(e->probation, d, o->txn.window_before);
                o->txn.window_before = NULL;
                state_store_mark(e->state, d);
        } else if (write_cause_is_policy(d->write.cause)) {
                probation_end(e->probation, d);
                (void) rollout_leave(d);
        }
        if (o && o->txn.last_good_moved) {
                d->record.has_last_good = o->txn.had_last_good;
                d->record.last_good = o->txn.last_good;
                o->txn.last_good_moved = false;
                state_store_mark(e->state, d);
        }
        if (unrecorded && d->record.original_unsaved) {
                d->record.original_unsaved = false;
                d->record.has_original = false;
                d->record.has_last_good = false;
                device_proven_clear(d);
                d->record.written = 0;
                state_store_mark(e->state, d); /* nothing of it on disk: a "forget" line */
        }
}

static void refused(Engine *e, Device *d, int error, const char *extack, bool unrecorded) {
        e->counters.write_failures++;
        const DeviceWrite *o = d->write.on;
        DeviceHistory *h = device_history(d);
        if (h) {
                free(h->last_error);
                h->last_errno = error;
                h->last_error = extack ? strdup(extack) : NULL;
                h->failed_desired = o ? o->target : d->life.desired;
        } else
                log_dev_warning(d, "no memory to keep why its write was refused");
        undo(e, d, unrecorded);
        enter(e, d, DEVICE_FAILED);
}

static void reconsider_later(Engine *e, Device *d) {
        d->reconcile.owed = true;
        e->reconcile_pending = true;
}

static void log_write(const Engine *e, const Device *d) {
        char buf[256];
        bool rollback = d->write.cause == WRITE_CAUSE_ROLLBACK, restore = d->write.cause == WRITE_CAUSE_RESTORE;
        const char *what = rollback ? "rolling back:" : restore ? "restoring original sizes:" : "writing";

        /* a rollback's write: its decision said it in one line already (apply_rollback()) */
        log_dev_fields_errno(d, rollback ? LOG_DEBUG : LOG_INFO, 0,
                             LOG_DEV_FIELDS(d, .message_id = rollback  ? NULL
                                                             : restore ? LOG_ID_RESTORE
                                                                       : LOG_ID_WRITE,
                                            .cause = write_cause_to_string(d->write.cause), .from = &d->current,
                                            .to = &d->write.on->target, .ipv4 = e->ipv4_supported),
                             "%s %s (%s)", what,
                             sizes_change_format(&d->current, &d->write.on->target, e->ipv4_supported, buf,
                                                 sizeof(buf)),
                             write_cause_to_string(d->write.cause));
}

/* Does the write need its device's entry on disk before it is sent? One of the policy's sizes
 * does, whenever the entry on disk may not say all that a restart needs to give everything back:
 * originals not recorded yet, sizes the write takes that bigtcpd did not own (the entry saved
 * before the write owns them already: written_or_writing() in state.c), a new last-good and
 * new baselines (a new window). A put-back of sizes owned already needs nothing new. A write
 * that takes sizes back (a restore, a rollback) never does: what it writes is in the entry that
 * made bigtcpd own them. */
static bool needs_record(const Device *d) {
        if (!write_cause_is_policy(d->write.cause))
                return false;
        return d->record.original_unsaved || d->write.cause != WRITE_CAUSE_PUT_BACK || (d->write.owned & ~d->record.written) != 0;
}

/* The batch's writes that can go begin; those that must not go are taken out of it. */
static void begin(Engine *e, Device *const *batch, size_t n, WriteFlush *ret) {
        SnmpSnapshot snap = {};
        bool read_snap = false, have_snap = false, save = false;
        int r;

        for (size_t i = 0; i < n; i++) {
                Device *d = batch[i];
                if (d->write.phase != WRITE_QUEUED)
                        continue;
                if (sizes_equal(&d->write.on->target, &d->current, e->ipv4_supported)) {
                        /* got there meanwhile (someone else wrote it): nothing to send */
                        writer_unqueue(e->writer, d);
                        ret->reconsider[ret->n_reconsider++] = d;
                        continue;
                }
                /* a rollback is on disk before its write: a kill right after must not undo it */
                if (needs_record(d) || d->write.cause == WRITE_CAUSE_ROLLBACK) {
                        state_store_mark(e->state, d);
                        save = true;
                }
                d->write.epoch = e->dump_epoch;
                d->write.on->txn.step = WRITE_STEP_BEGUN;
                log_write(e, d);
                if (!write_cause_is_policy(d->write.cause) || d->write.cause == WRITE_CAUSE_PUT_BACK)
                        continue; /* takes sizes back, or puts back proven ones: no new window */

                move_rollback_target(e, d);
                d->write.on->txn.window_before = probation_shelve(e->probation, d);
                const Policy *p = engine_policy(e, d->match.policy_name);
                if (p && p->rollback.n_guards > 0 && !read_snap) {
                        /* one reading of the SNMP files serves every write of the batch */
                        r = engine_snmp_read(e, &snap);
                        if (r < 0)
                                log_warning_errno(r, "Failed to read the SNMP counters: %m; SNMP guards inactive for these writes");
                        read_snap = true;
                        have_snap = r >= 0;
                }
                /* The link baselines: from the message or the statistics dump the write waited
                 * for (writer_offer_baseline(), writer_stats_entry()). */
                const DeviceWrite *o = d->write.on;
                if (p && probation_begin(e->probation, d, &p->rollback, have_snap ? &snap : NULL,
                                         o->baseline_size > 0 ? o->baseline : NULL, o->baseline_size) < 0)
                        log_dev_warning(d, "failed to set up probation: out of memory; writing without guards");
                state_store_mark(e->state, d);
        }
        snmp_done(&snap);
        if (!save)
                return;

        /* What a restart needs goes to disk before the write, or the device is not written: a
         * daemon killed right after the write must still know its originals, every size it owns,
         * its last-good sizes and its baselines. Only these: what else changed goes with the next
         * save. A save that fails saved none of the batch's entries. */
        r = state_store_save_devices(e->state, batch, n);
        if (r >= 0) {
                for (size_t i = 0; i < n; i++)
                        batch[i]->record.original_unsaved = false;
                return;
        }
        unsigned n_refused = 0, rollbacks = 0;
        for (size_t i = 0; i < n; i++) {
                Device *d = batch[i];
                bool unsaved = d->record.original_unsaved;
                if (d->write.phase != WRITE_QUEUED) {
                        d->record.original_unsaved = false;
                        continue;
                }
                if (d->write.cause == WRITE_CAUSE_ROLLBACK) {
                        /* Not held back: sizes that trip a guard must go. A kill before the entry
                         * is saved loses the hold, not the originals (the entry owns the sizes). */
                        rollbacks++;
                        continue;
                }
                if (!needs_record(d))
                        continue;
                if (unsaved)
                        log_dev_error_errno(d, r, "failed to record the original sizes: %m; not writing");
                else
                        log_dev_error_errno(d, r, "failed to record what a restart needs to give its sizes "
                                                  "back: %m; not writing");
                refused(e, d, r, unsaved ? "cannot record original sizes" : "cannot record its state", true);
                writer_unqueue(e->writer, d);
                /* tried again once the state file can be written: lifecycle_state_recovered() */
                d->life.unrecorded = true;
                ret->unrecorded = true;
                n_refused++;
        }
        if (n_refused > 0)
                log_error_errno(r, "Failed to write the state file in %s: %m; %u devices are not written until it "
                                   "can be written again",
                                state_store_dir(e->state), n_refused);
        if (rollbacks > 0)
                log_error_errno(r, "Failed to write the state file in %s: %m; rolling back %u devices anyway (a kill "
                                   "before it is written again loses their hold)",
                                state_store_dir(e->state), rollbacks);
}

static void answered(Engine *e, Device *d, int error, const char *extack);

void lifecycle_flush(Engine *e, WriteFlush *ret) {
        Device *batch[WRITER_INFLIGHT_MAX];
        size_t n;

        ret->n_reconsider = 0;
        ret->unrecorded = false;
        n = writer_ready(e->writer, batch);
        if (n == 0)
                return;
        begin(e, batch, n, ret);
        for (size_t i = 0; i < n; i++) {
                Device *d = batch[i];
                if (d->write.phase != WRITE_QUEUED)
                        continue; /* taken out by begin() */
                int r = writer_send(e->writer, d);
                if (r == -EBUSY)
                        break; /* (not while the batch fits the room writer_ready() found) */
                if (r < 0) {
                        /* refused without the kernel: an answer all the same */
                        answered(e, d, r, NULL);
                        if (d->write.phase == WRITE_IDLE)
                                device_write_end(d);
                        ret->reconsider[ret->n_reconsider++] = d;
                        continue;
                }
                d->write.on->txn.step = WRITE_STEP_SENT;
        }
}

/* The kernel took the write: its sizes are the device's, and what its cause calls for follows. */
static void done(Engine *e, Device *d) {
        char buf[256];
        int r;

        forget_window_before(e, d); /* the sizes it watched are gone */
        e->counters.writes++;
        clear_error(d);
        /* The kernel sends no event for a size change: the ack is all it says. */
        d->current.gso_max_size = d->write.on->target.gso_max_size;
        d->current.gro_max_size = d->write.on->target.gro_max_size;
        if (e->ipv4_supported) {
                d->current.gso_ipv4_max_size = d->write.on->target.gso_ipv4_max_size;
                d->current.gro_ipv4_max_size = d->write.on->target.gro_ipv4_max_size;
        }
        d->current_usec = engine_now(e);

        switch (d->write.cause) {
        case WRITE_CAUSE_RESTORE:
                e->counters.restores++;
                (void) lifecycle_stop(e, d);
                drop_originals(e, d);
                enter(e, d, DEVICE_UNMANAGED);
                log_dev_info(d, "original sizes restored (%s)", sizes_format(&d->current, e->ipv4_supported, buf, sizeof(buf)));
                return;
        case WRITE_CAUSE_ROLLBACK:
                enter(e, d, DEVICE_ROLLED_BACK);
                /* the rollback's one line came with its decision */
                log_dev_debug(d, "rolled back to %s", sizes_format(&d->current, e->ipv4_supported, buf, sizeof(buf)));
                return;
        case WRITE_CAUSE_NEW_DEVICE:
        case WRITE_CAUSE_POLICY:
        case WRITE_CAUSE_PUT_BACK:
        case WRITE_CAUSE_RETRY:
                d->record.written = d->write.owned; /* the sizes it gave back are no longer bigtcpd's */
                state_store_mark(e->state, d);
                if (d->life.held || d->write.on->txn.orphaned)
                        return; /* rolled back, or out of its policy, while in flight: what follows */
                if (!d->probation) {
                        if (device_rollout_get(d)->phase == ROLLOUT_ACTIVE)
                                (void) rollout_leave(d); /* no window to wait for */
                        enter(e, d, DEVICE_APPLIED);
                        return;
                }
                enter(e, d, DEVICE_PROBATION);
                probation_arm(e->probation);
                size_t guards = guard_set_n(&d->probation->guards);
                log_dev_info(d, "in probation for %llus, %zu %s watching",
                             (unsigned long long) (probation_window_usec(d->probation) / USEC_PER_SEC), guards,
                             PLURAL(guards, "guard", "guards"));
                /* the window is also where the sizes prove themselves on packets */
                r = evidence_watch(e->evidence, d, probation_window_usec(d->probation));
                if (r == -EOPNOTSUPP)
                        ; /* counting is off (tests) */
                else if (r == -EUSERS)
                        log_dev_debug(d, "not counting its packets above 64 KiB: %u devices are counted already",
                                      EVIDENCE_WATCHED_MAX);
                else if (r < 0)
                        log_dev_warning_errno(d, r, "failed to count its packets above 64 KiB: %m, ignoring");
                return;
        case _WRITE_CAUSE_MAX:
        case _WRITE_CAUSE_INVALID:
                break;
        }
}

static void answered(Engine *e, Device *d, int error, const char *extack) {
        event_emit(&e->events, &(Event){.type = EVENT_WRITE, .device = d, .cause = d->write.cause,
                                        .from = &d->write.on->before, .to = &d->write.on->target, .ipv4 = e->ipv4_supported,
                                        .error = error, .extack = extack});
        if (error >= 0) {
                done(e, d);
                return;
        }
        log_dev_fields_errno(d, LOG_ERR, error,
                             LOG_DEV_FIELDS(d, .message_id = LOG_ID_WRITE_REFUSED, .cause = write_cause_to_string(d->write.cause),
                                            .from = &d->write.on->before, .to = &d->write.on->target,
                                            .ipv4 = e->ipv4_supported),
                             "write (%s) refused: %m%s%s%s", write_cause_to_string(d->write.cause), extack ? " (" : "",
                             extack ?: "", extack ? ")" : "");
        refused(e, d, error, extack, false);
}

void lifecycle_write_answered(Engine *e, Device *d, int error, const char *extack, bool lost) {
        if (lost) {
                /* It may have landed: its own window stands, and bigtcpd owns what it may have
                 * written (as the entry saved before it does), or a rollback and a give-back of
                 * sizes it did write would find nothing of bigtcpd's to undo. */
                forget_window_before(e, d);
                if (write_cause_is_policy(d->write.cause) && (d->write.owned & ~d->record.written)) {
                        d->record.written |= d->write.owned;
                        state_store_mark(e->state, d);
                }
                reconsider_later(e, d); /* the kernel is read again first */
        } else
                answered(e, d, error, extack);
}

void lifecycle_write_orphaned(Engine *e, Device *d) {
        d->write.on->txn.orphaned = true;
        (void) lifecycle_stop(e, d);
}

bool lifecycle_state_recovered(Engine *e, Device *d) {
        if (!d->life.unrecorded)
                return false;
        d->life.unrecorded = false;
        if (d->life.state != DEVICE_FAILED)
                return false; /* a reload or a retry got to it first */
        if (d->history)
                d->history->failed_desired = (Sizes){};
        return true;
}

void lifecycle_passed(Engine *e, Device *d) {
        device_proven_add(d, &d->current, e->ipv4_supported);
        probation_end(e->probation, d);
        (void) rollout_leave(d);
        /* a window that went on after a write was refused: proven, and still not where its
         * policy wants it */
        enter(e, d, d->life.state == DEVICE_FAILED ? DEVICE_FAILED : DEVICE_APPLIED);
        state_store_mark(e->state, d);
}

void lifecycle_rollback_target(const Engine *e, const Device *d, Sizes *ret) {
        compute_restore(d->record.has_last_good ? &d->record.last_good : &d->record.original, SIZE_BITS_ALL, &d->current, d->tso_max_size,
                        e->ipv4_supported, ret);
}

int lifecycle_roll_back(Engine *e, Device *d, const RollbackRecord *why) {
        const RollbackRecord operator = {.counter = (char *) "operator"};
        RollbackRecord *r;
        Sizes target;
        int k;

        DeviceHistory *h;

        if (!d->record.has_original || d->life.held)
                return -EALREADY;
        if (d->record.written == 0 && d->write.phase != WRITE_SENT)
                return -EALREADY; /* no write of bigtcpd's ever landed: nothing to undo */
        if (d->life.state == DEVICE_PENDING && d->write.cause == WRITE_CAUSE_RESTORE)
                return -EALREADY; /* its originals are going back already */
        lifecycle_rollback_target(e, d, &target);
        if (d->write.phase == WRITE_IDLE && sizes_equal(&target, &d->current, e->ipv4_supported)) {
                /* At its last good sizes already: a rollback would change nothing, and holds
                 * nothing. A guard's verdict on them ends their window all the same: they are not
                 * proven, and there is nowhere better to go. */
                if (why && d->probation) {
                        probation_end(e->probation, d);
                        (void) rollout_leave(d);
                        evidence_stop(e->evidence, d);
                        enter(e, d, d->life.state == DEVICE_FAILED ? DEVICE_FAILED : DEVICE_APPLIED);
                        state_store_mark(e->state, d);
                }
                return -EALREADY;
        }
        h = device_history(d);
        if (!h)
                return -ENOMEM;
        k = rollback_record_copy(why ?: &operator, &r);
        if (k < 0)
                return k;
        r->realtime_usec = clock_now(e->clock, CLOCK_REALTIME);
        r->from = d->write.phase == WRITE_SENT ? d->write.on->target : d->current;
        r->to = target;
        rollback_record_free(h->last_rollback);
        h->last_rollback = r;
        h->n_rollbacks++;
        e->counters.rollbacks++;
        k = engine_count_rollback(e, d->match.policy_name);
        if (k < 0)
                log_dev_warning_errno(d, k, "rollback not counted for policy \"%s\" (%m), only in the total",
                                      d->match.policy_name ?: "");

        /* Held against what the policy asks now: released when it asks for something else. */
        d->life.held = true;
        h->held_desired = d->life.desired;
        (void) lifecycle_stop(e, d);
        evidence_stop(e->evidence, d); /* a verdict on sizes it no longer has would mislead */
        state_store_mark(e->state, d);
        event_emit(&e->events, &(Event){.type = EVENT_ROLLBACK, .device = d, .rollback = r, .from = &r->from,
                                        .to = &r->to, .ipv4 = e->ipv4_supported});

        d->life.desired = target;
        if (d->write.phase == WRITE_SENT) {
                enter(e, d, DEVICE_PENDING); /* the write in flight lands first; then the rollback */
                return 0;
        }
        if (sizes_equal(&target, &d->current, e->ipv4_supported)) {
                enter(e, d, DEVICE_ROLLED_BACK);
                return 0;
        }
        k = queue(e, d, WRITE_CAUSE_ROLLBACK, &target, d->record.written);
        if (k < 0) {
                /* it must not stay where it is: tried again at the next reconcile */
                log_dev_error_errno(d, k, "failed to queue the rollback: %m; trying again");
                reconsider_later(e, d);
        }
        enter(e, d, DEVICE_PENDING);
        return 0;
}

void lifecycle_held(Engine *e, Device *d, const Sizes *target) {
        writer_unqueue(e->writer, d);
        d->life.desired = *target;
        enter(e, d, DEVICE_ROLLED_BACK);
}

void lifecycle_hold_against(Engine *e, Device *d, const Sizes *want) {
        if (!d->life.held || !d->history || sizes_equal(&d->history->held_desired, want, true))
                return;
        d->history->held_desired = *want;
        state_store_mark(e->state, d);
}

void lifecycle_hold_ends(Engine *e, Device *d) {
        d->life.held = false;
}

int lifecycle_release(Engine *e, Device *d) {
        if (!d->life.held && d->life.state != DEVICE_FAILED)
                return -EALREADY;
        d->life.held = false;
        if (d->history) {
                d->history->held_desired = (Sizes){};
                d->history->failed_desired = (Sizes){};
        }
        state_store_mark(e->state, d);
        return 0;
}

void lifecycle_adopt(Engine *e, Device *d, const Sizes *original, unsigned written, const Sizes *last_good,
                     const ProvenSizes *proven) {
        /* Not a step (and no event): the device's records follow it. On disk before any write. */
        d->record.has_original = true;
        d->record.original_unsaved = true;
        d->record.original = *original;
        d->record.written = written;
        d->record.has_last_good = last_good;
        if (last_good)
                d->record.last_good = *last_good;
        device_proven_set(d, proven);
        state_store_mark(e->state, d);
}

void lifecycle_resume(Engine *e, Device *d, StateEntry *entry) {
        /* Not a step of this run's lifecycle (and no event): the state an earlier run left,
         * taken as it was. */
        d->record.has_original = true;
        d->record.original = entry->original;
        d->record.written = entry->written;
        d->record.has_last_good = entry->has_last_good;
        d->record.last_good = entry->last_good;
        device_proven_set(d, &entry->proven);
        DeviceHistory *h = entry->last_rollback || entry->held ? device_history(d) : d->history;
        if (h) {
                rollback_record_free(h->last_rollback);
                h->last_rollback = TAKE_PTR(entry->last_rollback);
        } else if (entry->last_rollback || entry->held)
                log_dev_warning(d, "no memory for its last rollback%s", entry->held ? " (held)" : "");
        /* Until the policy says otherwise it is what bigtcpd last wrote. */
        d->life.desired = d->current;
        if (entry->held) {
                /* rolled back, or killed while its rollback write was out: held either way, and
                 * the reconcile after the first sync writes the rollback again if it is not there */
                d->life.held = true;
                if (h)
                        h->held_desired = entry->held_desired;
                d->life.state = DEVICE_ROLLED_BACK;
        } else if (entry->probation) {
                /* A window that was running goes on where it was; one that ended while bigtcpd was
                 * down is judged at the first tick, right away. */
                probation_resume(e->probation, d, TAKE_PTR(entry->probation));
                d->life.state = DEVICE_PROBATION;
        } else
                d->life.state = DEVICE_APPLIED;
        state_store_mark(e->state, d);
}

void lifecycle_gone(Engine *e, Device *d) {
        (void) lifecycle_stop(e, d);
        writer_cancel_device(e->writer, d);
        evidence_forget(e->evidence, d);
        auto_apply_gone(e, d);
        auto_queue_remove(&e->auto_queue, d);
        state_store_forget(e->state, d);
        event_emit(&e->events, &(Event){.type = EVENT_REMOVED, .device = d});
        device_remove(&e->devices, d);
        device_free(d);
}
