/* apply.c — one device's life under the policy: matching, the decision (write, restore, leave
 * alone, put back), the write queue with its bound on requests in flight, acks, and the
 * original sizes that go to the state file before the first write. */
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "apply.h"
#include "sync.h"
#include "guard.h"
#include "probation.h"
#include "linux-compat.h"
#include "log.h"
#include "match.h"
#include "reconcile.h"
#include "route.h"

/* ---- matching ---- */

static const char *match_get_driver(void *userdata) {
        Device *d = ((void **) userdata)[0];
        Manager *m = ((void **) userdata)[1];
        struct ethtool_drvinfo info = {.cmd = ETHTOOL_GDRVINFO};
        struct ifreq ifr = {};

        if (d->driver_looked_up)
                return d->driver;
        d->driver_looked_up = true;
        if (!d->ifname || strlen(d->ifname) >= IFNAMSIZ)
                return NULL;
        memcpy(ifr.ifr_name, d->ifname, strlen(d->ifname));
        ifr.ifr_data = (void *) &info;
        if (ioctl(netlink_ioctl_fd(m->nl), SIOCETHTOOL, &ifr) < 0) {
                log_dev_debug(d, "no driver name from ethtool: %m");
                return NULL;
        }
        info.driver[sizeof(info.driver) - 1] = '\0';
        d->driver = strdup(info.driver);
        return d->driver;
}

static bool match_has_route(void *userdata, const RoutePrefix *p) {
        return device_has_route(((void **) userdata)[0], p);
}

const Policy *device_match_in(Manager *m, const PolicySet *set, Device *d) {
        void *ud[2] = {d, m};
        MatchDevice md = {
                .ifname = d->ifname,
                .altnames = d->altnames,
                .n_altnames = d->n_altnames,
                .kind = d->kind,
                .loopback = d->flags & IFF_LOOPBACK,
                .mac = d->mac[0] ? d->mac : NULL,
                .get_driver = match_get_driver,
                .has_route = match_has_route,
                .userdata = ud,
        };
        return set ? policy_set_match(set, &md) : NULL;
}

static const Policy *device_match(Manager *m, Device *d) {
        return device_match_in(m, m->policy, d);
}

void device_set_state(Manager *m, Device *d, DeviceState state) {
        if (d->state == state)
                return;
        DeviceState previous = d->state;
        d->state = state;
        if (d->has_original)
                state_mark(m, d); /* the state file keeps states across restarts */
        event_emit(&m->events, &(Event){.type = EVENT_STATE, .device = d, .state = state, .previous = previous});
}

static void emit_write(Manager *m, Device *d, const Sizes *from, int error, const char *extack) {
        event_emit(&m->events, &(Event){.type = EVENT_WRITE, .device = d, .cause = d->write_cause, .from = from,
                                        .to = &d->desired, .ipv4 = m->ipv4_supported, .error = error,
                                        .extack = extack});
}

/* ---- write queue ---- */

static void queue_device(Manager *m, Device *d) {
        if (d->queued)
                return;
        d->queued = true;
        TAILQ_INSERT_TAIL(&m->queue, d, queue_link);
}

void unqueue_device(Manager *m, Device *d) {
        if (!d->queued)
                return;
        TAILQ_REMOVE(&m->queue, d, queue_link);
        d->queued = false;
        d->prepared = false;
}

static void set_error(Device *d, int error, const char *text) {
        free(d->last_error);
        d->last_errno = error;
        d->last_error = text ? strdup(text) : NULL;
}

/* Originals (and probation baselines) go to disk before the write, or the device is not
 * written: a daemon killed right after the write must still know both. */
static void persist_before_write(Manager *m, unsigned n) {
        Device *d, *next;
        unsigned i = 0;
        int r;

        r = save_state(m);
        if (r >= 0) {
                TAILQ_FOREACH(d, &m->queue, queue_link)
                        d->original_unsaved = false;
                return;
        }
        log_error_errno(r, "Failed to write %s/state.json: %m; not writing devices whose originals are not recorded",
                        m->cfg.runtime_dir);
        for (d = TAILQ_FIRST(&m->queue); d && i < n; d = next, i++) {
                next = TAILQ_NEXT(d, queue_link);
                if (!d->original_unsaved)
                        continue;
                unqueue_device(m, d);
                probation_stop(m, d);
                d->original_unsaved = false;
                d->has_original = false;
                d->has_last_good = false;
                d->written_families = 0;
                device_set_state(m, d, DEVICE_FAILED);
                d->failed_desired = d->desired;
                set_error(d, r, "cannot record original sizes");
                log_dev_error_errno(d, r, "not writing: original sizes cannot be recorded: %m");
        }
}

static void inflight_push(Manager *m, uint32_t seq, int ifindex, InflightKind kind) {
        unsigned slot = (m->inflight_head + m->inflight_count) % WRITE_INFLIGHT_MAX;
        m->inflight[slot].seq = seq;
        m->inflight[slot].ifindex = ifindex;
        m->inflight[slot].kind = kind;
        m->inflight_count++;
}

static void rollback_write(Manager *m, Device *d);

/* Is the queued write of `d` one of the policy's (not a restore or a rollback)? */
static bool policy_write(const Device *d) {
        return !d->restoring && !d->rolling_back;
}

void manager_flush(Manager *m) {
        SnmpSnapshot snap = {};
        bool have_snap = false, save = false;
        unsigned n = 0, room;
        Device *d;

        /* Every write may need a stats request for its baselines: two slots each. */
        room = (WRITE_INFLIGHT_MAX - m->inflight_count) / 2;
        TAILQ_FOREACH(d, &m->queue, queue_link) {
                if (n >= room)
                        break;
                n++;
                d->prepared = true;
                if (d->original_unsaved)
                        state_mark(m, d);
                save = save || d->original_unsaved;
                if (!policy_write(d) || d->correcting || sizes_equal(&d->desired, &d->current, m->ipv4_supported))
                        continue;
                const Policy *p = policy_by_name(m, d->policy_name);
                if (p && p->rollback.n_guards > 0 && !have_snap) {
                        /* one reading of the SNMP files serves every device of this flush */
                        int r = snmp_read("/proc/net", &snap);
                        if (r < 0)
                                log_warning_errno(r, "Failed to read the SNMP counters: %m; SNMP guards inactive for this write");
                        have_snap = r >= 0;
                }
                if (probation_start(m, d, p, have_snap ? &snap : NULL) < 0)
                        log_dev_warning(d, "cannot set up probation: out of memory; writing without guards");
                if (d->probation) {
                        state_mark(m, d);
                        save = true;
                }
        }
        snmp_done(&snap);
        if (save)
                persist_before_write(m, n);

        /* Only what was prepared above: its probation and originals are on disk. */
        while ((d = TAILQ_FIRST(&m->queue)) && d->prepared && m->inflight_count + 2 <= WRITE_INFLIGHT_MAX) {
                struct nl_msg *msg = NULL;
                char buf[256];
                uint32_t seq;
                int r;

                unqueue_device(m, d);
                d->prepared = false;
                if (sizes_equal(&d->desired, &d->current, m->ipv4_supported)) {
                        device_reconcile(m, d, REASON_LINK);
                        continue;
                }
                /* Baselines of link counters: the kernel answers this before it handles the write. */
                if (policy_write(d) && d->probation && probation_has_link_guards(d->probation))
                        (void) request_refresh(m, d->ifindex, INFLIGHT_BASELINE);
                r = link_write_message(d->ifindex, &d->desired, m->ipv4_supported, &msg);
                if (r >= 0) {
                        r = netlink_send(m->nl, msg, &seq);
                        nlmsg_free(msg);
                }
                if (r < 0) {
                        log_dev_error_errno(d, r, "cannot send write: %m");
                        probation_stop(m, d);
                        device_set_state(m, d, DEVICE_FAILED);
                        d->failed_desired = d->desired;
                        set_error(d, r, NULL);
                        continue;
                }
                log_dev_info(d, "%s %s",
                             d->rolling_back ? "rolling back:" : d->restoring ? "restoring original sizes:" : "writing",
                             sizes_change_format(&d->current, &d->desired, m->ipv4_supported, buf, sizeof(buf)));
                d->inflight = true;
                d->write_epoch = m->dump_epoch;
                d->before_write = d->current;
                inflight_push(m, seq, d->ifindex, INFLIGHT_WRITE);
        }
        maybe_ready(m);
}

/* Ask the kernel for one link's attributes (with its stats for baselines and samples); the
 * reply arrives as an RTM_NEWLINK on the write socket. */
int request_refresh(Manager *m, int ifindex, InflightKind kind) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
        struct nl_msg *msg;
        uint32_t seq;
        int r = -ENOMEM;

        if (m->inflight_count >= WRITE_INFLIGHT_MAX)
                return -EBUSY; /* the next verification or sample catches it */
        msg = nlmsg_alloc_simple(RTM_GETLINK, NLM_F_REQUEST);
        if (!msg)
                return -ENOMEM;
        if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) >= 0 &&
            (kind != INFLIGHT_REFRESH || nla_put_u32(msg, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS) >= 0)) {
                r = netlink_send(m->nl, msg, &seq);
                if (r >= 0)
                        inflight_push(m, seq, ifindex, kind);
        }
        nlmsg_free(msg);
        return r;
}

static void request_done(Manager *m, int ifindex, InflightKind kind, bool lost) {
        Device *d = device_get(&m->devices, ifindex);

        if (!d)
                return;
        switch (kind) {
        case INFLIGHT_WRITE:
                if (lost) {
                        d->inflight = false;
                        d->need_reconcile = true;
                        m->reconcile_pending = true;
                }
                break;
        case INFLIGHT_SAMPLE:
                if (lost && d->probation)
                        d->probation->sample_pending = false;
                else
                        probation_sample_done(m, d);
                break;
        case INFLIGHT_REFRESH:
        case INFLIGHT_BASELINE:
                break;
        case _INFLIGHT_KIND_MAX:
        case _INFLIGHT_KIND_INVALID:
                break;
        }
}

/* The oldest request in flight, taken off the ring. */
static unsigned inflight_pop(Manager *m) {
        unsigned head = m->inflight_head;
        m->inflight_head = (head + 1) % WRITE_INFLIGHT_MAX;
        m->inflight_count--;
        return head;
}

/* The request `seq` was answered. Acks come in order; entries before it were lost. Returns
 * the device of a write, 0 for other requests. */
static int inflight_take(Manager *m, uint32_t seq) {
        while (m->inflight_count > 0) {
                unsigned head = inflight_pop(m);
                int ifindex = m->inflight[head].ifindex;
                InflightKind kind = m->inflight[head].kind;
                if (m->inflight[head].seq == seq) {
                        if (kind == INFLIGHT_WRITE)
                                return ifindex;
                        request_done(m, ifindex, kind, false);
                        return 0;
                }
                request_done(m, ifindex, kind, true);
                if (kind == INFLIGHT_WRITE) {
                        Device *d = device_get(&m->devices, ifindex);
                        if (d)
                                device_reconcile(m, d, REASON_LINK);
                }
        }
        return 0;
}

void apply_ack(void *userdata, uint32_t seq, int error, const char *extack) {
        Manager *m = userdata;
        char buf[256];
        int ifindex = inflight_take(m, seq);
        Device *d;

        if (ifindex <= 0) {
                maybe_ready(m);
                return;
        }
        d = device_get(&m->devices, ifindex);
        if (!d) {
                maybe_ready(m); /* deleted while its write was in flight */
                return;
        }
        d->inflight = false;

        if (error < 0) {
                m->n_write_failures++;
                device_set_state(m, d, DEVICE_FAILED);
                d->failed_desired = d->desired;
                set_error(d, error, extack);
                log_dev_error_errno(d, error, "write refused: %m%s%s%s", extack ? " (" : "", extack ?: "",
                                    extack ? ")" : "");
                emit_write(m, d, &d->before_write, error, extack);
                if (policy_write(d))
                        probation_stop(m, d);
                if (d->rollback_pending) {
                        /* the refused write changed nothing: the device is where the rollback goes */
                        d->rollback_pending = false;
                        device_set_state(m, d, DEVICE_ROLLED_BACK);
                }
                d->restoring = false;
                d->rolling_back = false;
                maybe_ready(m);
                return;
        }

        m->n_writes++;
        set_error(d, 0, NULL);
        verify_arm(m);
        emit_write(m, d, &d->before_write, 0, NULL);
        /* The event socket was drained before this ack was read, so the kernel's echo of the write
         * has been applied to `current` unless it was lost; in that case the ack is the truth. */
        if (!sizes_equal(&d->current, &d->desired, m->ipv4_supported)) {
                /* Size changes raise no link event: the ack is all the kernel says. */
                d->current.gso_max_size = d->desired.gso_max_size;
                d->current.gro_max_size = d->desired.gro_max_size;
                if (m->ipv4_supported) {
                        d->current.gso_ipv4_max_size = d->desired.gso_ipv4_max_size;
                        d->current.gro_ipv4_max_size = d->desired.gro_ipv4_max_size;
                }
        }
        if (d->rollback_pending) {
                rollback_write(m, d);
                maybe_ready(m);
                return;
        } else if (d->rolling_back) {
                d->rolling_back = false;
                device_set_state(m, d, DEVICE_ROLLED_BACK);
                log_dev_notice(d, "rolled back to %s", sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
        } else if (d->restoring) {
                m->n_restores++;
                d->restoring = false;
                d->has_original = false;
                d->written_families = 0;
                device_set_state(m, d, DEVICE_UNMANAGED);
                log_dev_info(d, "original sizes restored (%s)", sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
                state_mark(m, d);
        } else if (d->probation) {
                d->is_new = false;
                device_set_state(m, d, DEVICE_PROBATION);
                log_dev_info(d, "in probation for %llus, %zu guards watching",
                             (unsigned long long) (d->probation->window_usec / 1000000ull), d->probation->n_guards);
                probation_arm(m);
        } else {
                d->is_new = false;
                device_set_state(m, d, DEVICE_APPLIED);
        }

        if (d->recheck) {
                d->recheck = false;
                device_reconcile(m, d, REASON_LINK);
        }
        maybe_ready(m);
}

static RollbackRecord *rollback_record_copy(const RollbackRecord *r) {
        RollbackRecord *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        *c = *r;
        c->counter = r->counter ? strdup(r->counter) : NULL;
        c->per = r->per ? strdup(r->per) : NULL;
        return c;
}

static void emit_rollback(Manager *m, Device *d) {
        event_emit(&m->events, &(Event){.type = EVENT_ROLLBACK, .device = d, .rollback = d->last_rollback,
                                        .from = &d->last_rollback->from, .to = &d->last_rollback->to,
                                        .ipv4 = m->ipv4_supported});
}

/* Where a rollback goes: last_good (the originals when there is none), all four sizes, clamped
 * to what the device takes today. */
static void rollback_target(const Manager *m, const Device *d, Sizes *ret) {
        compute_restore(d->has_last_good ? &d->last_good : &d->original, FAMILY_IPV6 | FAMILY_IPV4, &d->current,
                        d->tso_max_size, m->ipv4_supported, ret);
}

/* Queue the write back to the rollback target. */
static void rollback_write(Manager *m, Device *d) {
        Sizes target;

        rollback_target(m, d, &target);
        d->rollback_pending = false;
        if (d->last_rollback)
                d->last_rollback->to = target;
        if (sizes_equal(&target, &d->current, m->ipv4_supported)) {
                unqueue_device(m, d);
                device_set_state(m, d, DEVICE_ROLLED_BACK);
                return;
        }
        d->desired = target;
        d->rolling_back = true;
        d->restoring = false;
        d->write_cause = WRITE_CAUSE_ROLLBACK;
        queue_device(m, d);
}

int apply_rollback(Manager *m, Device *d, const RollbackRecord *why) {
        RollbackRecord manual = {.counter = (char *) "operator"};
        struct timespec ts;
        char buf[256];

        if (!d->has_original || d->state == DEVICE_ROLLED_BACK || d->rolling_back || d->rollback_pending)
                return -EALREADY;

        RollbackRecord *r = rollback_record_copy(why ?: &manual);
        if (!r)
                return -ENOMEM;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->realtime_usec = (uint64_t) ts.tv_sec * 1000000ull + (uint64_t) ts.tv_nsec / 1000;
        r->from = d->inflight ? d->desired : d->current;
        r->to = d->has_last_good ? d->last_good : d->original;
        rollback_record_free(d->last_rollback);
        d->last_rollback = r;
        d->n_rollbacks++;
        m->n_rollbacks++;

        /* held: not retried while the policy asks for these sizes */
        d->held_desired = d->restoring ? d->current : d->desired;
        probation_stop(m, d);
        if (why)
                log_dev_warning(d, "rolling back: %s rose by %llu%s%s (threshold %g)%s; going back to %s", r->counter,
                                (unsigned long long) r->rise, r->per ? " per " : "", r->per ?: "", r->threshold,
                                r->namespace_wide ? ", a namespace-wide counter" : "",
                                sizes_format(&r->to, m->ipv4_supported, buf, sizeof(buf)));
        else
                log_dev_notice(d, "rolling back on request to %s", sizes_format(&r->to, m->ipv4_supported, buf, sizeof(buf)));
        emit_rollback(m, d);
        state_mark(m, d);

        if (d->inflight) {
                /* the write in flight lands first; its ack sends the rollback */
                d->rollback_pending = true;
                return 0;
        }
        rollback_write(m, d);
        return 0;
}

int apply_retry(Manager *m, Device *d) {
        if (d->state != DEVICE_ROLLED_BACK && d->state != DEVICE_FAILED)
                return -EALREADY;
        log_dev_info(d, "released by request from %s", device_state_to_string(d->state));
        d->held_desired = (Sizes){};
        d->failed_desired = (Sizes){};
        device_set_state(m, d, DEVICE_PENDING);
        state_mark(m, d);
        device_reconcile(m, d, REASON_RETRY);
        return 0;
}

void apply_acks_lost(void *userdata) {
        Manager *m = userdata;

        /* The kernel could not queue some acks: what those writes did is unknown until the
         * re-dump that the loss of events also starts. */
        while (m->inflight_count > 0) {
                unsigned head = inflight_pop(m);
                request_done(m, m->inflight[head].ifindex, m->inflight[head].kind, true);
        }
}

/* ---- reconcile ---- */

static bool correction_allowed(Manager *m, Device *d) {
        uint64_t now = now_usec();

        if (now - d->corrections_since_usec > CORRECTION_WINDOW_USEC) {
                d->corrections_since_usec = now;
                d->n_corrections = 0;
        }
        if (d->n_corrections < CORRECTIONS_MAX) {
                d->n_corrections++;
                return true;
        }
        if (!d->throttled) {
                log_dev_warning(d, "sizes changed behind bigtcpd's back %u times within %llus; not putting them back until that window ends",
                                d->n_corrections, CORRECTION_WINDOW_USEC / 1000000ull);
                d->throttled = true;
                struct timeval tv = {.tv_sec = (time_t) (CORRECTION_WINDOW_USEC / 1000000ull)};
                if (!evtimer_pending(m->throttle_timer, NULL))
                        evtimer_add(m->throttle_timer, &tv);
        }
        return false;
}

void apply_throttle_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        Device *d;
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->throttled) {
                        d->throttled = false;
                        d->corrections_since_usec = 0;
                        device_reconcile(m, d, REASON_LINK);
                }
        manager_flush(m);
}

static void set_policy_name(Device *d, const Policy *p) {
        const char *name = p ? p->name : NULL;

        if (d->logged_match && streq_ptr(d->policy_name, name))
                return;
        if (p)
                log_dev_info(d, "matched policy \"%s\"", p->name);
        else
                log_dev_info(d, "matches no policy%s", d->logged_match ? " any more" : "");
        d->logged_match = true;
        free(d->policy_name);
        d->policy_name = name ? strdup(name) : NULL;
}

void device_reconcile(Manager *m, Device *d, ReconcileReason reason) {
        const Policy *p;
        char buf[256];

        /* Until the first sync is complete the recorded originals are not attached yet; while
         * routes are re-dumped, the route table is incomplete. */
        if (!m->initial_sync_done || m->sync == SYNC_ROUTES) {
                d->need_reconcile = true;
                m->reconcile_pending = true;
                d->sizes_moved = d->sizes_moved || reason == REASON_SIZES;
                return;
        }
        d->need_reconcile = false;
        d->sizes_moved = false;
        if (!d->ifname || !d->has_sizes)
                return; /* not yet fully known */
        if (d->inflight) {
                d->recheck = true;
                return;
        }
        if (d->rolling_back || d->rollback_pending)
                return; /* the rollback goes out first; reconciled again after its ack */

        p = device_match(m, d);
        set_policy_name(d, p);

        if (!p) {
                if (!d->has_original) {
                        unqueue_device(m, d);
                        device_set_state(m, d, DEVICE_UNMANAGED);
                        return;
                }
                Sizes target;
                compute_restore(&d->original, d->written_families, &d->current, d->tso_max_size,
                                m->ipv4_supported, &target);
                if (sizes_equal(&target, &d->current, m->ipv4_supported)) {
                        unqueue_device(m, d);
                        d->has_original = false;
                        d->written_families = 0;
                        d->restoring = false;
                        device_set_state(m, d, DEVICE_UNMANAGED);
                        log_dev_info(d, "already at its original sizes, forgetting them");
                        state_mark(m, d);
                        return;
                }
                d->desired = target;
                d->restoring = true;
                d->write_cause = WRITE_CAUSE_RESTORE;
                device_set_state(m, d, DEVICE_PENDING);
                queue_device(m, d);
                return;
        }

        Desired want;
        compute_desired(p, &d->current, d->tso_max_size, m->ipv4_supported, &want);
        if (want.ipv4_unsupported)
                log_dev_debug(d, "policy \"%s\" sets IPv4 sizes, but this kernel has none: IPv4 part unsupported", p->name);
        if (want.families == 0) {
                unqueue_device(m, d);
                device_set_state(m, d, DEVICE_UNSUPPORTED);
                return;
        }

        if (d->state == DEVICE_ROLLED_BACK) {
                if (sizes_equal(&want.sizes, &d->held_desired, m->ipv4_supported)) {
                        /* Held until the policy asks for something else, or a retry — and held
                         * where it belongs: a rollback cut short (a kill before its write) or
                         * undone by someone else is written again. */
                        Sizes target;
                        rollback_target(m, d, &target);
                        if (!sizes_equal(&target, &d->current, m->ipv4_supported)) {
                                log_dev_notice(d, "rolled back but not at its last-known-good sizes: writing them again");
                                rollback_write(m, d);
                        }
                        return;
                }
                log_dev_info(d, "policy \"%s\" now asks for other sizes: released from rolled-back", p->name);
                d->held_desired = (Sizes){};
        }

        bool same_as_before = sizes_equal(&want.sizes, &d->desired, m->ipv4_supported);
        DeviceState before = d->state;
        d->restoring = false;

        if (sizes_equal(&want.sizes, &d->current, m->ipv4_supported)) {
                unqueue_device(m, d);
                d->desired = want.sizes;
                d->families = want.families;
                d->staged = false;
                if (d->probation) {
                        /* the window goes on (after a restart, or the sizes were put back) */
                        device_set_state(m, d, DEVICE_PROBATION);
                        return;
                }
                if (d->state != DEVICE_APPLIED)
                        log_dev_debug(d, "already at the policy's sizes (%s)",
                                      sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
                device_set_state(m, d, DEVICE_APPLIED);
                return;
        }

        if (before == DEVICE_FAILED && sizes_equal(&want.sizes, &d->failed_desired, m->ipv4_supported))
                return; /* refused before; wait for a different desire or a reload */

        if (reason == REASON_SIZES && (before == DEVICE_APPLIED || before == DEVICE_PROBATION) && same_as_before) {
                if (!correction_allowed(m, d)) {
                        device_set_state(m, d, DEVICE_PENDING);
                        return;
                }
                log_dev_notice(d, "sizes changed behind bigtcpd's back (%s); putting them back",
                               sizes_change_format(&d->desired, &d->current, m->ipv4_supported, buf, sizeof(buf)));
                d->correcting = before == DEVICE_APPLIED;
        } else
                d->correcting = false;

        if (want.clamped)
                log_dev_info(d, "policy \"%s\" asks for more than the device takes:%s%s", p->name,
                             want.clamped & (CLAMP_GSO | CLAMP_GSO_IPV4) ? " GSO clamped to its tso_max_size" : "",
                             want.clamped & (CLAMP_GRO | CLAMP_GRO_IPV4) ? " GRO clamped to 524280" : "");

        /* Staged rollout: existing devices take turns; new ones carry no traffic yet. */
        if (p->max_parallel > 0 && !d->is_new && rollout_must_wait(m, d, p, &want.sizes)) {
                unqueue_device(m, d);
                d->staged = true;
                m->staged_pending = true;
                d->desired = want.sizes;
                device_set_state(m, d, DEVICE_PENDING);
                return;
        }
        d->staged = false;

        if (!d->has_original) {
                d->has_original = true;
                d->original_unsaved = true;
                d->original = d->current;
                d->written_families = 0;
        }
        d->written_families |= want.families;
        d->families = want.families;
        d->desired = want.sizes;
        d->write_cause = d->correcting || (reason == REASON_SIZES && same_as_before) ? WRITE_CAUSE_PUT_BACK
                         : reason == REASON_RETRY                                  ? WRITE_CAUSE_RETRY
                         : d->is_new                                               ? WRITE_CAUSE_NEW_DEVICE
                                                                                   : WRITE_CAUSE_POLICY;
        device_set_state(m, d, DEVICE_PENDING);
        queue_device(m, d);
}

