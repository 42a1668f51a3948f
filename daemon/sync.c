/* sync.c — what the kernel tells us: link and route events, the initial dumps, the re-dumps
 * after lost events (ENOBUFS) or inconsistent dumps, and the periodic link-only verification
 * that finds sizes changed behind our back (the kernel raises no event for those). */
#include <net/if.h>
#include <sys/socket.h>

#include "apply.h"
#include "probation.h"
#include "log.h"
#include "route.h"
#include "state.h"
#include "sync.h"

/* Re-read every link (a link-only sync) so that sizes changed behind our back are seen. */
void start_verify(Manager *m) {
        if (m->sync != SYNC_NONE) {
                m->resync_wanted = true;
                return;
        }
        start_sync(m, SYNC_LINKS);
        m->sync_links_only = true;
}

static bool manages_any(const Manager *m) {
        const Device *d;
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->has_original)
                        return true;
        return false;
}

/* Armed only while bigtcpd manages some device: an idle host with nothing managed sees no
 * wakeup at all. */
void verify_arm(Manager *m) {
        if (m->cfg.verify_interval_usec == 0 || evtimer_pending(m->verify_timer, NULL))
                return;
        struct timeval tv = {
                .tv_sec = (time_t) (m->cfg.verify_interval_usec / 1000000ull),
                .tv_usec = (suseconds_t) (m->cfg.verify_interval_usec % 1000000ull),
        };
        (void) evtimer_add(m->verify_timer, &tv);
}

void sync_verify_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        if (!manages_any(m))
                return;
        start_verify(m);
        verify_arm(m);
}


/* ---- kernel events ---- */

static void forget_device(Manager *m, Device *d) {
        unqueue_device(m, d);
        probation_stop(m, d);
        if (d->has_original) {
                log_dev_info(d, "device is gone, forgetting its original sizes");
                state_forget(m, d->ifindex);
        }
        event_emit(&m->events, &(Event){.type = EVENT_REMOVED, .device = d});
        device_remove(&m->devices, d);
        device_free(d);
}

static void on_route_changed(Device *d, void *userdata) {
        Manager *m = userdata;
        device_reconcile(m, d, REASON_ROUTES);
}

static void handle_link(Manager *m, struct nlmsghdr *nlh, NetlinkSource source) {
        bool in_dump = source == NETLINK_DUMP;
        LinkMessage lm;
        unsigned changes = 0;
        bool added = false;
        Device *d;
        int r;

        r = link_message_parse(nlh, &lm);
        if (r == -EAFNOSUPPORT)
                return;
        if (r < 0) {
                log_warning("netlink: malformed link message, ignoring");
                return;
        }
        d = device_get(&m->devices, lm.ifindex);
        if (nlh->nlmsg_type == RTM_DELLINK) {
                if (d) {
                        log_dev_debug(d, "removed");
                        forget_device(m, d);
                }
                return;
        }
        if (!d) {
                r = device_add(&m->devices, lm.ifindex, &d);
                if (r < 0) {
                        log_error_errno(r, "Failed to track link %d: %m", lm.ifindex);
                        return;
                }
                /* created while we watch: it carries no traffic yet */
                d->is_new = m->initial_sync_done && source == NETLINK_EVENT;
                added = true;
        }
        /* A dump entry may predate a write sent while the dump runs: the ack is newer. */
        if (in_dump && d->write_epoch == m->dump_epoch)
                lm.has_sizes = false;
        /* A reply to a request sent before our write in flight shows the sizes before it. */
        if (source == NETLINK_REPLY && d->inflight)
                lm.has_sizes = false;
        if (source == NETLINK_REPLY && d->probation && lm.stats64)
                probation_stats(m, d, lm.stats64, lm.stats64_len);
        int old_master = d->master;
        r = device_update(d, &lm, &changes);
        if (r < 0) {
                log_dev_error_errno(d, r, "cannot update: %m");
                return;
        }
        d->seen_in_dump = true;
        if (added)
                event_emit(&m->events, &(Event){.type = EVENT_ADDED, .device = d});
        if ((changes & LINK_CHANGE_DOWN) && m->policy_uses_routes)
                m->route_resync_wanted = true;
        if (changes & LINK_CHANGE_MASTER) {
                /* A port joining or leaving moves the master's tso_max_size, and the master's
                 * own event may come before the kernel updated it. */
                if (d->master > 0)
                        (void) request_refresh(m, d->master, INFLIGHT_REFRESH);
                if (old_master > 0 && old_master != d->master)
                        (void) request_refresh(m, old_master, INFLIGHT_REFRESH);
        }
        if (changes & LINK_CHANGE_NAME)
                log_dev_debug(d, "name is now %s", d->ifname);
        if (changes == LINK_CHANGE_SIZES)
                device_reconcile(m, d, REASON_SIZES);
        else if (changes)
                device_reconcile(m, d, REASON_LINK);
}

static void on_message(void *userdata, struct nlmsghdr *nlh, NetlinkSource source) {
        Manager *m = userdata;

        switch (nlh->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK:
                handle_link(m, nlh, source);
                break;
        case RTM_NEWROUTE:
        case RTM_DELROUTE:
                if (route_message_handle(&m->devices, nlh, on_route_changed, m) < 0)
                        log_warning("netlink: malformed route message, ignoring");
                break;
        default:
                break;
        }
}

static void apply_loaded_state(Manager *m) {
        for (size_t i = 0; i < m->loaded_state.n; i++) {
                StateEntry *e = &m->loaded_state.entries[i];
                Device *d = device_get(&m->devices, e->ifindex);
                if (!d) {
                        log_info("%s: gone while bigtcpd was not running, forgetting its original sizes",
                                 e->ifname ?: "?");
                        m->state_full = true;
                        continue;
                }
                d->has_original = true;
                d->original = e->original;
                d->written_families = e->written_families;
                d->has_last_good = e->has_last_good;
                d->last_good = e->last_good;
                d->last_rollback = e->last_rollback;
                e->last_rollback = NULL;
                /* Until the policy says otherwise it is what bigtcpd last wrote. */
                d->state = DEVICE_APPLIED;
                d->desired = d->current;
                if (e->state == DEVICE_ROLLED_BACK) {
                        d->state = DEVICE_ROLLED_BACK;
                        d->held_desired = e->held_desired;
                } else if (e->probation) {
                        /* A window that was running goes on where it was; one that ended while we
                         * were down is judged at the first sample, right away. */
                        d->probation = e->probation;
                        e->probation = NULL;
                        d->probation->next_usec = 0;
                        d->probation->sample_pending = false;
                        TAILQ_INSERT_TAIL(&m->probation, d, probation_link);
                        d->state = DEVICE_PROBATION;
                        log_dev_info(d, "resuming probation begun by an earlier run");
                }
        }
        probation_arm(m);
        if (manages_any(m))
                verify_arm(m);
        state_entries_free(m->loaded_state.entries, m->loaded_state.n);
        m->loaded_state.entries = NULL;
        m->loaded_state.n = 0;
        if (m->state_full)
                schedule_save(m);
}

static void finish_sync(Manager *m) {
        bool ipv4 = false;
        Device *d;

        m->sync = SYNC_NONE;
        DEVICE_FOREACH(d, &m->devices, it)
                ipv4 = ipv4 || d->has_ipv4_sizes;
        if (!m->initial_sync_done || ipv4 != m->ipv4_supported)
                log_info("kernel %s IPv4 BIG TCP sizes (gso/gro_ipv4_max_size)%s", ipv4 ? "has" : "lacks",
                         ipv4 ? "" : ": IPv4 parts of the policy are unsupported");
        m->ipv4_supported = ipv4;
        if (!m->initial_sync_done) {
                apply_loaded_state(m);
                m->initial_sync_done = true;
                m->ready_pending = true;
        }
        DEVICE_FOREACH(d, &m->devices, it) {
                bool moved = d->sizes_moved;
                d->sizes_moved = false;
                device_reconcile(m, d, moved ? REASON_SIZES : REASON_SYNC);
        }
        manager_flush(m);
        /* Another sync is owed (events lost meanwhile, or the dump was inconsistent): it starts
         * from the next batch, after this one's writes went out. */
        if (m->resync_wanted)
                event_active(m->retry_event, EV_TIMEOUT, 0);
}

void start_sync(Manager *m, SyncPhase from) {
        int r;

        if (from == SYNC_LINKS && m->sync == SYNC_NONE)
                m->sync_links_only = false;

        if (from == SYNC_LINKS) {
                Device *d;
                DEVICE_FOREACH(d, &m->devices, it)
                        d->seen_in_dump = false;
                m->dump_epoch++;
        } else
                route_forget_all(&m->devices, NULL, NULL);
        m->sync = from;
        r = netlink_dump(m->nl, from == SYNC_LINKS ? RTM_GETLINK : RTM_GETROUTE);
        if (r < 0) {
                struct timeval tv = {.tv_sec = 1};
                log_error_errno(r, "Failed to request %s dump: %m; retrying in 1s",
                                from == SYNC_LINKS ? "link" : "route");
                m->sync = SYNC_NONE;
                m->resync_wanted = true;
                evtimer_add(m->retry_timer, &tv);
        }
}

static void on_dump_done(void *userdata, int type, int error, bool interrupted) {
        Manager *m = userdata;

        if (error == -EBUSY) {
                /* an abandoned dump is still running in the kernel: after it */
                struct timeval tv = {.tv_usec = 100000};
                m->sync = SYNC_NONE;
                m->resync_wanted = true;
                evtimer_add(m->retry_timer, &tv);
                return;
        }
        if (error < 0) {
                log_warning_errno(error, "%s dump failed: %m; dumping again", type == RTM_GETLINK ? "link" : "route");
                start_sync(m, m->sync == SYNC_ROUTES ? SYNC_ROUTES : SYNC_LINKS);
                return;
        }
        if (interrupted && m->sync == SYNC_LINKS) {
                /* Links came or went while dumping (a burst). What the dump showed is right, and
                 * events cover what it missed; only absence cannot be trusted, so no sweep now. */
                log_debug("link dump was inconsistent; dumping again once this sync is done");
                m->resync_wanted = true;
                if (!m->initial_sync_done || !m->sync_links_only) {
                        start_sync(m, SYNC_ROUTES);
                        return;
                }
                finish_sync(m);
                return;
        }
        if (interrupted) {
                log_debug("route dump was inconsistent; dumping again");
                start_sync(m, SYNC_ROUTES);
                return;
        }
        if (m->sync == SYNC_LINKS) {
                Device *d, *gone[64];
                size_t n;
                /* Whatever the dump did not show is gone. */
                do {
                        n = 0;
                        DEVICE_FOREACH(d, &m->devices, it)
                                if (!d->seen_in_dump && n < ELEMENTSOF(gone))
                                        gone[n++] = d;
                        for (size_t i = 0; i < n; i++)
                                forget_device(m, gone[i]);
                } while (n == ELEMENTSOF(gone));
                if (m->resync_wanted) {
                        m->resync_wanted = false;
                        start_sync(m, SYNC_LINKS);
                        return;
                }
                if (!m->sync_links_only || m->route_resync_wanted) {
                        m->route_resync_wanted = false;
                        start_sync(m, SYNC_ROUTES);
                        return;
                }
        }
        finish_sync(m);
}

static void on_lost(void *userdata) {
        Manager *m = userdata;

        if (m->sync != SYNC_NONE) {
                /* Start over once this sync is done. The overrun may also have cost the dump
                 * itself its next part: if it does not move for a second, it is abandoned. */
                m->resync_wanted = true;
                if (!evtimer_pending(m->stall_timer, NULL)) {
                        struct timeval tv = {.tv_sec = 1};
                        m->stall_mark = netlink_dump_progress(m->nl);
                        evtimer_add(m->stall_timer, &tv);
                }
                return;
        }
        start_sync(m, SYNC_LINKS);
}

void sync_stall_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        struct timeval tv = {.tv_sec = 1};

        if (m->sync == SYNC_NONE)
                return;
        if (netlink_dump_progress(m->nl) != m->stall_mark) {
                m->stall_mark = netlink_dump_progress(m->nl);
                evtimer_add(m->stall_timer, &tv);
                return;
        }
        log_warning("%s dump made no progress for 1s after events were lost; starting over",
                    m->sync == SYNC_LINKS ? "link" : "route");
        netlink_dump_abandon(m->nl);
        m->sync = SYNC_NONE;
        m->resync_wanted = false;
        start_sync(m, SYNC_LINKS);
}

void sync_retry_timer(evutil_socket_t fd, short what, void *userdata) {
        on_lost(userdata);
}

void sync_retry_event(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        if (m->sync == SYNC_NONE && m->resync_wanted) {
                m->resync_wanted = false;
                start_sync(m, SYNC_LINKS);
        }
}

static void on_batch_end(void *userdata) {
        Manager *m = userdata;
        Device *d;

        if (m->sync == SYNC_NONE && m->route_resync_wanted) {
                m->route_resync_wanted = false;
                start_sync(m, SYNC_ROUTES);
        }
        if (m->sync == SYNC_NONE && m->resync_wanted) {
                m->resync_wanted = false;
                start_sync(m, SYNC_LINKS);
        }
        /* The scan is O(devices): only when something asked for it. */
        if (m->reconcile_pending && m->initial_sync_done && m->sync != SYNC_ROUTES) {
                m->reconcile_pending = false;
                DEVICE_FOREACH(d, &m->devices, it)
                        if (d->need_reconcile)
                                device_reconcile(m, d, d->sizes_moved ? REASON_SIZES : REASON_LINK);
        }
        manager_flush(m);
}

const NetlinkOps sync_netlink_ops = {
        .message = on_message,
        .dump_done = on_dump_done,
        .lost = on_lost,
        .ack = apply_ack,
        .acks_lost = apply_acks_lost,
        .batch_end = on_batch_end,
};

