/* apply.c — the decisions. apply_reconcile() is cut at its branches: a device matching nothing
 * gets its originals back, one held by a rollback stays where the rollback took it, one at its
 * policy's sizes stays, and one that is not goes through its rollout (or a throttle) to a write.
 * The kernel's answers and the guards' verdicts come back here and become lifecycle steps. */
#include <net/if.h>

#include "apply.h"
#include "auto-apply.h"
#include "intern.h"
#include "ethtool.h"
#include "guard.h"
#include "device-lifecycle.h"
#include "log-fields.h"
#include "policy-match.h"
#include "reconcile.h"
#include "route.h"

/* ---- matching ---- */

typedef struct MatchContext {
        int ioctl_fd;
        Device *device;
} MatchContext;

static const char *match_get_driver(void *userdata) {
        MatchContext *c = userdata;
        return ethtool_driver(c->device, c->ioctl_fd);
}

static bool match_has_route(void *userdata, const RoutePrefix *p) {
        MatchContext *c = userdata;
        return device_has_route(c->device, p);
}

#define MATCH_DEVICE_OF(netns_name, d, c, mac)                                                       \
        {                                                                                            \
                .ifname = (d)->ifname, .altnames = device_extra_get(d)->altnames,                    \
                .n_altnames = device_extra_get(d)->n_altnames, .kind = (d)->kind,                    \
                .loopback = (d)->flags & IFF_LOOPBACK,                                               \
                .mac = (d)->mac_len > 0 ? device_mac((d), (mac)) : NULL, .netns = (netns_name),      \
                .get_driver = match_get_driver, .has_route = match_has_route, .userdata = &(c),      \
        }

static const char *engine_netns(const Engine *e) {
        return e->cfg.netns ? e->cfg.netns->name : NULL;
}

const Policy *apply_match_in(const PolicySet *set, Device *d, const char *netns, int ioctl_fd) {
        MatchContext c = {ioctl_fd, d};
        char mac[DEVICE_MAC_STRLEN];
        MatchDevice md = MATCH_DEVICE_OF(netns, d, c, mac);
        return set ? policy_set_match(set, &md) : NULL;
}

const Policy *apply_match(Engine *e, const PolicySet *set, Device *d) {
        return apply_match_in(set, d, engine_netns(e), e->ioctl_fd);
}

int apply_match_explain(Engine *e, const Policy *p, Device *d, char **ret) {
        MatchContext c = {e->ioctl_fd, d};
        char mac[DEVICE_MAC_STRLEN];
        MatchDevice md = MATCH_DEVICE_OF(engine_netns(e), d, c, mac);
        return policy_match_explain(p, &md, ret);
}

bool apply_device_is_new(const Engine *e, const Device *d) {
        return d->appeared_usec > 0 && !d->carried_traffic && engine_now(e) - d->appeared_usec <= NEW_DEVICE_USEC;
}

/* A device's match is news, but ten thousand at once (a start, a reload, a burst of new links) are
 * noise that costs a start a tenth of a second and journald's own limit (10000 lines in 30 s a
 * service) would drop what follows them: past MATCH_LOG_BURST within MATCH_LOG_INTERVAL_USEC, in
 * every namespace together, a match is logged at debug, and the batch that made them says how
 * many in one line (apply_flush()). */
#define MATCH_LOG_BURST 100u
#define MATCH_LOG_INTERVAL_USEC (10 * USEC_PER_SEC)
static struct {
        LogRateLimit limit;
        unsigned demoted; /* since the last line that said so */
} match_log = {.limit = LOG_RATELIMIT_INIT(MATCH_LOG_INTERVAL_USEC, MATCH_LOG_BURST)};

static void note_match(Engine *e, Device *d, const Policy *p) {
        const char *name = p ? p->name : NULL;
        unsigned dropped;
        int level = LOG_INFO;

        if (d->reconcile.match_logged && streq_ptr(d->match.policy_name, name))
                return;
        if (!log_ratelimit(&match_log.limit, &dropped)) {
                level = LOG_DEBUG;
                match_log.demoted++;
        }
        if (p)
                log_dev_full_errno(d, level, 0, "matched policy \"%s\"", p->name);
        else
                log_dev_full_errno(d, level, 0, "matches no policy%s", d->reconcile.match_logged ? " any more" : "");
        d->reconcile.match_logged = true;
        if (intern_set(&d->match.policy_name, name, NULL) < 0) {
                intern_put(d->match.policy_name); /* no memory: no name, as for no policy */
                d->match.policy_name = NULL;
        }
        /* a place in another policy's rollout is not one in this one's */
        const Rollout *ro = device_rollout_get(d)->of;
        if (ro && !streq_ptr(ro->policy, name))
                (void) rollout_leave(d);
}

/* ---- rollouts ---- */

/* Slots may have come free: the devices waiting for them take their turn, in order. */
static void advance_rollouts(Engine *e) {
        if (e->advancing_rollouts)
                return; /* a reconcile below freed a slot: the walk that runs takes it */
        e->advancing_rollouts = true;
        for (size_t i = 0; i < e->rollouts.n; i++) {
                Rollout *r = e->rollouts.items[i];
                Device *d;
                while ((d = rollout_next(r))) {
                        apply_reconcile(e, d, REASON_SYNC);
                        if (rollout_next(r) == d)
                                break; /* it could not be decided now; it keeps its place */
                }
        }
        e->advancing_rollouts = false;
}

/* Halt the rollout of d's policy at once: its devices whose writes are queued but not sent go
 * back in line; those in flight or in probation finish. */
static void halt_rollout(Engine *e, Device *d) {
        Rollout *r = rollout_find(&e->rollouts, d->match.policy_name);
        Device *x, *next;

        if (!r || rollout_is_halted(r))
                return;
        rollout_halt(r, d);
        /* from the last: each goes to the head of the line, so they keep their order there */
        for (x = TAILQ_LAST(&r->active_list, RolloutDevices); x; x = next) {
                next = TAILQ_PREV(x, RolloutDevices, rollout->link);
                if (x->write.phase != WRITE_QUEUED)
                        continue;
                (void) rollout_wait_first(r, x); /* it holds a slot: its place is there already */
                lifecycle_wait(e, x, &x->life.desired, x->life.owned);
        }
        log_fields_full_errno(LOG_WARNING, 0,
                              &((LogFields){.message_id = LOG_ID_ROLLOUT_HALTED,
                                            .ifname = d->ifname[0] ? d->ifname : NULL,
                                            .netns = d->netns ? d->netns->name : NULL,
                                            .policy = r->policy}),
                              "rollout of policy \"%s\" halted: %s was rolled back; %u %s until the policy changes "
                              "or `bigtcpctl retry %s`",
                              r->policy, d->ifname[0] ? d->ifname : "?", r->waiting,
                              PLURAL(r->waiting, "device waits", "devices wait"), d->ifname[0] ? d->ifname : "?");
        event_emit(&e->events, &(Event){.type = EVENT_ROLLOUT, .device = d, .policy = r->policy});
}

/* ---- putting back what others changed, at most CORRECTIONS_MAX times a window ---- */

static void on_throttle_end(evutil_socket_t fd, short what, void *userdata) {
        Engine *e = userdata;
        Device *d;

        /* a new window: each throttled device gets its put-back (still a put-back) */
        DEVICE_FOREACH(d, &e->devices, it)
                if (d->history && d->history->corrections.throttled) {
                        d->history->corrections.since_usec = 0;
                        d->history->corrections.n = 0;
                        apply_reconcile(e, d, REASON_SIZES);
                }
        apply_flush(e);
}

/* Count one more put-back in the device's window; false when the window has had its share. */
static bool take_correction(const Engine *e, Device *d) {
        uint64_t now = engine_now(e);
        DeviceHistory *h = device_history(d);

        if (!h)
                return true; /* no memory to count them: put back */
        if (now - h->corrections.since_usec > CORRECTION_WINDOW_USEC) {
                h->corrections.since_usec = now;
                h->corrections.n = 0;
        }
        if (h->corrections.n >= CORRECTIONS_MAX)
                return false;
        h->corrections.n++;
        return true;
}

/* Stop putting back the device's sizes until its window ends (said once per window). */
static void throttle(Engine *e, Device *d) {
        struct timeval tv = {.tv_sec = (time_t) (CORRECTION_WINDOW_USEC / USEC_PER_SEC)};
        DeviceHistory *h = d->history; /* take_correction() made it */

        if (!h || h->corrections.throttled)
                return;
        log_dev_warning(d, "sizes changed behind bigtcpd's back %u times within %llus; not putting them back until "
                           "that window ends",
                        h->corrections.n, (unsigned long long) (CORRECTION_WINDOW_USEC / USEC_PER_SEC));
        h->corrections.throttled = true;
        if (!e->throttle_timer)
                e->throttle_timer = evtimer_new(e->base, on_throttle_end, e);
        if (e->throttle_timer && !evtimer_pending(e->throttle_timer, NULL))
                (void) evtimer_add(e->throttle_timer, &tv);
}

/* ---- `auto`: its timer and the ends of its watches ---- */

static void on_auto_timer(evutil_socket_t fd, short what, void *userdata);

/* The timer fires this long after the first search due, for those due meanwhile too: thousands
 * of idle searches spread over a wait (auto_apply_due()) wake the daemon at most 20 times a
 * second, not once each. */
#define AUTO_TIMER_SLACK_USEC (50 * USEC_PER_MSEC)
/* Searches one tick takes; the others are the next tick's, at once (the loop runs in between). */
#define AUTO_TICK_MAX 256u

/* The timer at the first search due (Engine.auto_queue). */
static void auto_arm_timer(Engine *e) {
        uint64_t due, now = clock_now(e->clock, CLOCK_REALTIME);

        if (!auto_queue_first(&e->auto_queue, &due)) {
                if (e->auto_timer)
                        evtimer_del(e->auto_timer);
                return;
        }
        if (!e->auto_timer && !(e->auto_timer = evtimer_new(e->base, on_auto_timer, e))) {
                log_warning("auto: no memory for its timer: searches wait for the next reconcile");
                return;
        }
        uint64_t left = due > now ? due - now + AUTO_TIMER_SLACK_USEC : 0;
        struct timeval tv = {.tv_sec = (time_t) (left / USEC_PER_SEC), .tv_usec = (suseconds_t) (left % USEC_PER_SEC)};
        (void) evtimer_add(e->auto_timer, &tv);
}

/* d's search may be due at another time (an idle watch, an aged ceiling, a target changed): its
 * place in the queue, and the timer at the first one. */
static void auto_arm(Engine *e, Device *d) {
        if (auto_queue_set(&e->auto_queue, d, auto_apply_due(d)) < 0)
                log_dev_warning(d, "auto: no memory to queue its search: it waits for the next reconcile");
        auto_arm_timer(e);
}

static void on_auto_timer(evutil_socket_t fd, short what, void *userdata) {
        Engine *e = userdata;
        uint64_t due, now = clock_now(e->clock, CLOCK_REALTIME);
        Device *batch[AUTO_TICK_MAX], *d;
        size_t n = 0;

        /* taken out first: a device whose tick leaves it due (a target changed) is the next
         * tick's, never this loop's again */
        while (n < AUTO_TICK_MAX && (d = auto_queue_first(&e->auto_queue, &due)) && due <= now) {
                auto_queue_remove(&e->auto_queue, d);
                batch[n++] = d;
        }
        for (size_t i = 0; i < n; i++) {
                if (auto_apply_tick(e, batch[i]))
                        apply_reconcile(e, batch[i], REASON_SYNC);
                if (auto_queue_set(&e->auto_queue, batch[i], auto_apply_due(batch[i])) < 0)
                        log_dev_warning(batch[i], "auto: no memory to queue its search: it waits for the next reconcile");
        }
        apply_flush(e);
        auto_arm_timer(e);
}

/* A watch the search asked for ended: reconciled from the timer, never inside the emitter (a
 * watch also ends inside a rollback or a give-back). */
static void on_auto_event(const Event *ev, void *userdata) {
        Engine *e = userdata;
        Device *d;

        if (ev->type != EVENT_EVIDENCE || !ev->device)
                return;
        d = device_get(&e->devices, ev->device->ifindex);
        if (d != ev->device || !d->autosize)
                return;
        (void) auto_apply_watch_ended(e, d);
        auto_arm(e, d); /* a step at once, or the next watch of an idle device */
}

static void auto_at_policy(Engine *e, Device *d, const Policy *p) {
        if (!d->autosize)
                return;
        if (!e->auto_watch_id)
                e->auto_watch_id = event_watch_add(&e->events, on_auto_event, e);
        auto_apply_at_policy(e, d, p);
        auto_arm(e, d);
}

/* ---- reconcile ---- */

/* No policy wants the device (or none it can have): what bigtcpd wrote goes back. */
static void give_back(Engine *e, Device *d, bool unsupported) {
        Sizes target;
        char buf[256];

        lifecycle_hold_ends(e, d);
        if (!d->record.has_original) {
                if (unsupported)
                        lifecycle_unsupported(e, d);
                else
                        lifecycle_unmanaged(e, d);
                return;
        }
        compute_restore(&d->record.original, d->record.written, &d->current, d->tso_max_size, e->ipv4_supported, &target);
        if (sizes_equal(&target, &d->current, e->ipv4_supported)) {
                log_dev_info(d, "already at its original sizes (%s), forgetting them",
                             sizes_format(&d->current, e->ipv4_supported, buf, sizeof(buf)));
                lifecycle_forget_originals(e, d);
                if (unsupported)
                        lifecycle_unsupported(e, d);
                return;
        }
        if (d->life.state == DEVICE_FAILED && sizes_equal(&target, &device_history_get(d)->failed_desired, e->ipv4_supported))
                return; /* refused before; waits for a reload or a retry */
        (void) lifecycle_stop(e, d); /* probation, rollout: over; its originals go back */
        evidence_stop(e->evidence, d);
        lifecycle_queue_write(e, d, WRITE_CAUSE_RESTORE, &target, 0);
}

/* Rolled back and held: where the rollback took it, also when that was cut short (a kill before
 * its write) or undone by someone else. */
static void hold(Engine *e, Device *d) {
        Sizes target;

        lifecycle_rollback_target(e, d, &target);
        if (sizes_equal(&target, &d->current, e->ipv4_supported)) {
                lifecycle_held(e, d, &target);
                return;
        }
        if (d->life.state == DEVICE_FAILED && sizes_equal(&target, &device_history_get(d)->failed_desired, e->ipv4_supported))
                return;
        if (d->life.state == DEVICE_ROLLED_BACK)
                log_dev_notice(d, "rolled back but not at its last-known-good sizes: writing them again");
        lifecycle_queue_write(e, d, WRITE_CAUSE_ROLLBACK, &target, d->record.written);
}

static WriteCause cause_of(const Engine *e, const Device *d, ReconcileReason reason, bool moved, const Sizes *want) {
        if (reason == REASON_RETRY)
                return WRITE_CAUSE_RETRY;
        if (moved && (d->life.state == DEVICE_APPLIED || d->life.state == DEVICE_PROBATION) &&
            sizes_equal(want, &d->life.desired, e->ipv4_supported))
                return WRITE_CAUSE_PUT_BACK;
        /* a put-back queued or throttled already stays one while the policy asks the same */
        if (d->life.state == DEVICE_PENDING && sizes_equal(want, &d->life.desired, e->ipv4_supported) &&
            ((d->write.phase == WRITE_QUEUED && d->write.cause == WRITE_CAUSE_PUT_BACK) ||
             device_history_get(d)->corrections.throttled))
                return WRITE_CAUSE_PUT_BACK;
        return apply_device_is_new(e, d) ? WRITE_CAUSE_NEW_DEVICE : WRITE_CAUSE_POLICY;
}

void apply_reconcile(Engine *e, Device *d, ReconcileReason reason) {
        const Policy *p;
        Desired want;
        char buf[256];

        /* Until the first sync is complete the recorded originals are not attached yet; while
         * routes are dumped again, the route table is incomplete. */
        if (!e->synced || !e->routes_complete) {
                d->reconcile.owed = true;
                e->reconcile_pending = true;
                d->reconcile.sizes_moved = d->reconcile.sizes_moved || reason == REASON_SIZES;
                return;
        }
        bool moved = d->reconcile.sizes_moved || reason == REASON_SIZES;
        d->reconcile.owed = false;
        d->reconcile.sizes_moved = false;
        if (!d->ifname[0] || !d->has_sizes)
                return; /* not yet fully known */
        if (e->policy->frozen)
                return; /* no policy runs: nothing is decided, what was written stays */
        p = apply_match(e, e->policy, d);
        if (d->write.phase == WRITE_SENT) {
                /* Reconciled again when its ack comes. A device that left its policy meanwhile
                 * stops at once what bigtcpd was doing with it; the write itself lands. */
                if (write_cause_is_policy(d->write.cause) && !streq_ptr(p ? p->name : NULL, d->match.policy_name)) {
                        lifecycle_write_orphaned(e, d);
                        note_match(e, d, p);
                }
                return;
        }
        note_match(e, d, p);
        if (!p) {
                auto_apply_none(e, d);
                auto_arm(e, d); /* out of the queue */
                give_back(e, d, false);
                return;
        }
        compute_desired(p, &d->current, &d->record.original, d->record.has_original ? d->record.written : 0, d->tso_max_size,
                        e->ipv4_supported, &want);
        auto_apply_desired(e, d, p, &want);
        auto_arm(e, d); /* its search may have begun, ticked, or gone with its last `auto` size */
        if (want.ipv4_unsupported)
                log_dev_debug(d, "policy \"%s\" sets IPv4 sizes, but this kernel has none: IPv4 part unsupported", p->name);
        if (want.families == 0) {
                give_back(e, d, true);
                return;
        }

        if (d->life.held) {
                if (sizes_equal(&want.sizes, &device_history_get(d)->held_desired, e->ipv4_supported)) {
                        hold(e, d);
                        return;
                }
                if (d->autosize)
                        /* a trip of a step: the search went back below it and goes on from there */
                        log_dev_info(d, "policy \"%s\" now asks for other sizes (its search of auto moved on): "
                                        "released from rolled-back", p->name);
                else
                        log_dev_info(d, "policy \"%s\" now asks for other sizes: released from rolled-back", p->name);
                (void) lifecycle_release(e, d);
        }

        if (sizes_equal(&want.sizes, &d->current, e->ipv4_supported)) {
                if (d->life.state != DEVICE_APPLIED && d->life.state != DEVICE_PROBATION)
                        log_dev_debug(d, "at the policy's sizes (%s)",
                                      sizes_format(&d->current, e->ipv4_supported, buf, sizeof(buf)));
                lifecycle_at_policy(e, d, &want.sizes, want.owned);
                auto_at_policy(e, d, p);
                return;
        }
        if (d->life.state == DEVICE_FAILED && sizes_equal(&want.sizes, &device_history_get(d)->failed_desired, e->ipv4_supported))
                return; /* refused before; waits for a different desire, a reload or a retry */

        WriteCause cause = cause_of(e, d, reason, moved, &want.sizes);
        if (cause == WRITE_CAUSE_PUT_BACK && !(d->write.phase == WRITE_QUEUED && d->write.cause == WRITE_CAUSE_PUT_BACK)) {
                if (!take_correction(e, d)) {
                        throttle(e, d);
                        lifecycle_wait(e, d, &want.sizes, want.owned);
                        return;
                }
                log_dev_notice(d, "sizes changed behind bigtcpd's back (%s); putting them back",
                               sizes_change_format(&d->life.desired, &d->current, e->ipv4_supported, buf, sizeof(buf)));
        }
        if (want.clamped)
                log_dev_info(d, "policy \"%s\" asks for more than the device takes:%s%s", p->name,
                             want.clamped & (CLAMP_GSO | CLAMP_GSO_IPV4) ? " GSO clamped to its tso_max_size" : "",
                             want.clamped & (CLAMP_GRO | CLAMP_GRO_IPV4) ? " GRO clamped to 524280" : "");

        /* Staged rollout: devices take turns, but a new one has no traffic to lose; a halt stops
         * every one. A put-back restores what the rollout wrote already. */
        Rollout *r = cause == WRITE_CAUSE_PUT_BACK ? NULL : rollout_find(&e->rollouts, p->name);
        if (r) {
                RolloutVerdict v = rollout_check(r, d);
                bool was_waiting = device_rollout_get(d)->phase == ROLLOUT_WAITING;
                if (v == ROLLOUT_HALTED || (v == ROLLOUT_NO_SLOT && cause != WRITE_CAUSE_NEW_DEVICE)) {
                        if (rollout_wait(r, d) < 0) {
                                /* out of line, it would never be woken: left as it is, as for
                                 * a reconcile that could not run */
                                log_dev_error(d, "out of memory: cannot wait for a rollout slot of policy \"%s\"", p->name);
                                return;
                        }
                        if (!was_waiting && v == ROLLOUT_HALTED)
                                log_dev_info(d, "waiting: the rollout of policy \"%s\" is halted", p->name);
                        else if (!was_waiting)
                                log_dev_info(d, "waiting for a rollout slot of policy \"%s\" (max-parallel %u)", p->name,
                                             r->max_parallel);
                        lifecycle_wait(e, d, &want.sizes, want.owned);
                        return;
                }
                /* a new device skips the bound: it does not take a slot either */
                if (v == ROLLOUT_GO && cause != WRITE_CAUSE_NEW_DEVICE && rollout_take_slot(r, d) < 0) {
                        /* written without a slot, the rollout's bound would not hold */
                        log_dev_error(d, "out of memory: cannot take a rollout slot of policy \"%s\"", p->name);
                        return;
                }
        }
        lifecycle_queue_write(e, d, cause, &want.sizes, want.owned);
}

static void watch_state_recovery(Engine *e);

void apply_flush(Engine *e) {
        WriteFlush f;

        if (match_log.demoted > 0) {
                log_info("%u more %s matched their policy, or none, at once: logged at debug only (more than %u "
                         "in %llu s)",
                         match_log.demoted, PLURAL(match_log.demoted, "device", "devices"), MATCH_LOG_BURST,
                         (unsigned long long) (MATCH_LOG_INTERVAL_USEC / USEC_PER_SEC));
                match_log.demoted = 0;
        }

        advance_rollouts(e);
        lifecycle_flush(e, &f);
        if (f.unrecorded)
                watch_state_recovery(e);
        /* The policy may want something else by now (a write that could not be sent failed). */
        for (size_t i = 0; i < f.n_reconsider; i++)
                apply_reconcile(e, f.reconsider[i], REASON_LINK);
        if (f.n_reconsider > 0) {
                /* what they queued goes now (nothing of it is at its target already, and a failed
                 * device is not written again until something changes: one more round at most) */
                lifecycle_flush(e, &f);
                if (f.unrecorded)
                        watch_state_recovery(e);
                for (size_t i = 0; i < f.n_reconsider; i++)
                        apply_reconcile(e, f.reconsider[i], REASON_LINK);
        }
        engine_check_settled(e);
}

/* ---- rollback and retry ---- */

static int roll_back(Engine *e, Device *d, const RollbackRecord *why, bool halt) {
        char buf[256];
        int r;

        r = lifecycle_roll_back(e, d, why);
        if (r == -EALREADY && why && d->life.state == DEVICE_APPLIED && !d->life.held)
                log_dev_warning(d, "%s rose by %llu, but it is at its last good sizes already: nothing to roll back to, "
                                   "its window ends", why->counter, (unsigned long long) why->rise);
        if (r < 0)
                return r;
        const RollbackRecord *rec = d->history->last_rollback; /* lifecycle_roll_back() recorded it */
        /* the one line of a rollback: what rose, by how much, against what, and where it goes */
        if (why)
                log_dev_fields_errno(d, LOG_WARNING, 0,
                                     LOG_DEV_FIELDS(d, .message_id = LOG_ID_ROLLBACK, .from = &d->current, .to = &rec->to,
                                                    .ipv4 = e->ipv4_supported, .counter = rec->counter,
                                                    .rise = (unsigned long long) rec->rise,
                                                    .threshold = rec->threshold),
                                     "rolling back: %s rose by %llu%s%s (threshold %g)%s; going back to %s",
                                     rec->counter, (unsigned long long) rec->rise, rec->per ? " per " : "",
                                     rec->per ?: "", rec->threshold,
                                     rec->namespace_wide ? ", a namespace-wide counter: every device in probation "
                                                           "whose window saw the rise goes back"
                                                         : "",
                                     sizes_format(&rec->to, e->ipv4_supported, buf, sizeof(buf)));
        else
                log_dev_fields_errno(d, LOG_NOTICE, 0,
                                     LOG_DEV_FIELDS(d, .message_id = LOG_ID_ROLLBACK, .from = &d->current, .to = &rec->to,
                                                    .ipv4 = e->ipv4_supported, .counter = "operator"),
                                     "rolling back on request to %s, the sizes before bigtcpd's last change",
                                     sizes_format(&rec->to, e->ipv4_supported, buf, sizeof(buf)));
        if (halt)
                halt_rollout(e, d);
        return 0;
}

int apply_rollback(Engine *e, Device *d, const RollbackRecord *why) {
        int r = roll_back(e, d, why, true);

        if (r < 0 || !d->life.held)
                return r;
        /* An operator's rollback in a step of `auto` ends the step: the operator's verdict on the
         * size tried, taken as a guard's trip (its ceiling until it ages, so that a retry does not
         * try it again at once). The hold stays: against the proven size its search asks for now,
         * or the next reconcile would find the policy asking for other sizes and release it. */
        Sizes held = device_history_get(d)->held_desired;
        if (auto_apply_rolled_back(e, d, &held)) {
                lifecycle_hold_against(e, d, &held);
                auto_arm(e, d);
        }
        return 0;
}

int apply_retry(Engine *e, Device *d) {
        DeviceState was = d->life.state;
        Rollout *ro;
        int r;

        if (was != DEVICE_ROLLED_BACK && was != DEVICE_FAILED && !d->life.held)
                return -EALREADY;
        r = lifecycle_release(e, d);
        if (r < 0)
                return r;
        log_dev_info(d, "released from %s on request: its policy applies again", device_state_to_string(was));
        ro = rollout_find(&e->rollouts, d->match.policy_name);
        if (ro && rollout_is_halted(ro) && ro->halted_by_ifindex == d->ifindex) {
                log_info("rollout of policy \"%s\" resumes: %s was retried", ro->policy, d->ifname[0] ? d->ifname : "?");
                rollout_resume(ro);
        }
        apply_reconcile(e, d, REASON_RETRY);
        return 0;
}

/* ---- devices refused because their originals could not be recorded ---- */

static void on_state_retry(evutil_socket_t fd, short what, void *userdata) {
        Engine *e = userdata;
        unsigned n = 0;
        Device *d;

        DEVICE_FOREACH(d, &e->devices, it)
                if (lifecycle_state_recovered(e, d)) {
                        apply_reconcile(e, d, REASON_SYNC);
                        n++;
                }
        if (n > 0)
                log_info("the state file is written again: trying again the %u devices whose original sizes could "
                         "not be recorded", n);
        apply_flush(e);
}

/* Called from within a save, perhaps one a write's begin makes: the retry runs from the loop. */
static void on_state_recovered(void *userdata) {
        Engine *e = userdata;

        if (e->state_retry_event)
                event_active(e->state_retry_event, EV_TIMEOUT, 0);
}

static void watch_state_recovery(Engine *e) {
        if (e->state_retry_event)
                return;
        e->state_retry_event = event_new(e->base, -1, 0, on_state_retry, e);
        state_store_on_recovered(e->state, on_state_recovered, e);
}

/* ---- the kernel's answers (WriterOps) ---- */

static void on_write_done(void *userdata, Device *d, int error, const char *extack, bool lost) {
        Engine *e = userdata;

        lifecycle_write_answered(e, d, error, extack, lost);
        if (lost)
                return; /* reconsidered once the kernel is read again */
        if (error >= 0 && d->life.state == DEVICE_PROBATION)
                auto_apply_window_begins(e, d); /* the window's packets may prove an auto step */
        /* The policy may want something else by now; a device rolled back meanwhile goes back. */
        apply_reconcile(e, d, REASON_LINK);
        engine_check_settled(e);
}

/* A write that opens a probation window with link guards takes the device's counters from just
 * before it. */
static bool on_wants_baseline(void *userdata, const Device *d) {
        Engine *e = userdata;
        const Policy *p;

        if (!write_cause_is_policy(d->write.cause) || d->write.cause == WRITE_CAUSE_PUT_BACK)
                return false;
        p = engine_policy(e, d->match.policy_name);
        return p && p->rollback.window_usec > 0 && guard_spec_has_link(&p->rollback);
}

const WriterOps apply_writer_ops = {
        .write_done = on_write_done,
        .wants_baseline = on_wants_baseline,
};

/* ---- the guards' verdicts (ProbationOps) ---- */

static void on_passed(void *userdata, Device *d) {
        Engine *e = userdata;
        char buf[256];

        log_dev_fields_errno(d, LOG_INFO, 0,
                             LOG_DEV_FIELDS(d, .message_id = LOG_ID_APPLIED, .to = &d->current, .ipv4 = e->ipv4_supported),
                             "probation passed, no guard tripped in %llus: %s is applied",
                     (unsigned long long) (probation_window_usec(d->probation) / USEC_PER_SEC),
                     sizes_format(&d->current, e->ipv4_supported, buf, sizeof(buf)));
        lifecycle_passed(e, d);
        if (auto_apply_passed(e, d))
                apply_reconcile(e, d, REASON_SYNC); /* the search's next step */
        apply_flush(e);
        auto_arm(e, d);
}

static void on_tripped(void *userdata, Device *d, const RollbackRecord *why) {
        Engine *e = userdata;
        _cleanup_(rollback_record_freep) RollbackRecord *copy = NULL;

        /* a step of `auto` that tripped is the search's answer: back, but no halt */
        bool step = auto_apply_tripped(e, d, why);

        /* the record's strings belong to d's probation, which the rollback ends */
        if (rollback_record_copy(why, &copy) < 0) {
                log_dev_error(d, "a guard tripped, but there is no memory to record it; rolling back anyway");
                (void) roll_back(e, d, &(RollbackRecord){.counter = (char *) "?"}, !step);
        } else
                (void) roll_back(e, d, copy, !step);
        apply_flush(e);
        auto_arm(e, d);
}

static void on_probation_changed(void *userdata, Device *d) {
        Engine *e = userdata;
        state_store_mark(e->state, d);
}

const ProbationOps apply_probation_ops = {
        .passed = on_passed,
        .tripped = on_tripped,
        .changed = on_probation_changed,
};

/* ---- policy and state ---- */

static void refresh_guard_warnings(Engine *e) {
        SnmpSnapshot snap = {};
        char **w = NULL;
        size_t n = 0;
        int r;

        r = engine_snmp_read(e, &snap);
        if (r < 0)
                log_warning_errno(r, "Failed to read the SNMP counters of this namespace, ignoring: %m");
        (void) guard_spec_check(&e->policy->defaults, &snap, sizeof(struct rtnl_link_stats64), &w, &n);
        for (size_t i = 0; i < e->policy->n_policies; i++)
                if (e->policy->policies[i].applies_here)
                        (void) guard_spec_check(&e->policy->policies[i].rollback, &snap,
                                                sizeof(struct rtnl_link_stats64), &w, &n);
        snmp_done(&snap);
        /* once per counter, not at every probation */
        for (size_t i = 0; i < n; i++)
                if (!strv_contains(e->guard_warnings, w[i]))
                        /* the kernel's counters are every namespace's: the daemon's own says it */
                        log_full_errno(e->cfg.netns ? LOG_DEBUG : LOG_WARNING, 0,
                                       "%s%sguard counter %s does not exist on this kernel: guards on it are inactive",
                                       e->cfg.netns ? e->cfg.netns->name : "", e->cfg.netns ? ": " : "", w[i]);
        strv_free(e->guard_warnings);
        e->guard_warnings = w;
        e->n_guard_warnings = n;
}

void apply_policy_changed(Engine *e) {
        Device *d;

        if (rollout_table_update(&e->rollouts, e->policy) < 0)
                log_error("out of memory for the rollouts of the new policy; keeping the old ones");
        e->policy_uses_routes = policy_set_uses_routes(e->policy);
        refresh_guard_warnings(e);
        /* A reload is the operator's word: retry what the kernel refused before. */
        DEVICE_FOREACH(d, &e->devices, it)
                if (d->life.state == DEVICE_FAILED && d->history)
                        d->history->failed_desired = (Sizes){};
}

void apply_loaded_state(Engine *e, StateEntry *entries, size_t n) {
        size_t windows = 0, searches = 0;

        for (size_t i = 0; i < n; i++) {
                StateEntry *s = &entries[i];
                Device *d = device_get(&e->devices, s->ifindex);
                const char *why = NULL;
                if (!d) {
                        log_info("%s: gone while bigtcpd was not running, forgetting its original sizes",
                                 s->ifname ?: "?");
                        continue;
                }
                if (!state_entry_is_device(s, d, &why)) {
                        char mac[DEVICE_MAC_STRLEN];
                        /* its ifindex was handed out again: the sizes in the entry are another's */
                        log_dev_notice(d, "not the device that had ifindex %d when the state file was written "
                                          "(%s, kind %s, MAC %s; now kind %s, MAC %s): another %s. Dropping the "
                                          "stale entry; this device gets none of its original sizes",
                                       s->ifindex, s->ifname ?: "?", strempty(s->kind) ? "none" : s->kind,
                                       strempty(s->mac) ? "none" : s->mac, d->kind ?: "none",
                                       strempty(device_identity_mac(d, mac)) ? "none" : mac, why);
                        continue;
                }
                lifecycle_resume(e, d, s);
                /* each device in the debug log, all of them in one line (10000 lines to the
                 * journal cost a restart over 10000 windows more than the rest of its start) */
                if (d->probation) {
                        log_dev_debug(d, "resuming probation begun by an earlier run");
                        windows++;
                }
                if (s->autosize) {
                        /* the searches go on where they were; a step whose window was cut short
                         * has lost its count of packets and proves nothing */
                        auto_device_free(d->autosize);
                        d->autosize = TAKE_PTR(s->autosize);
                        log_dev_debug(d, "resuming its search of auto");
                        searches++;
                        auto_arm(e, d);
                }
        }
        if (windows > 0)
                log_info("resuming %zu probation window%s begun by an earlier run", windows, windows == 1 ? "" : "s");
        if (searches > 0)
                log_info("resuming the searches of auto of %zu device%s", searches, searches == 1 ? "" : "s");
        probation_arm(e->probation);
        state_store_compact(e->state);
}
