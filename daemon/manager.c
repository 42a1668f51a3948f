/* manager.c — the event loop and the device life cycle: initial and recovery syncs, reconcile
 * of each device against the policy, the write queue with its bound on requests in flight,
 * originals and their restoration, reload, and the service manager notifications. */
#include <event2/event.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "linux-compat.h"
#include "log.h"
#include "manager.h"
#include "match.h"
#include "reconcile.h"
#include "route.h"
#include "state.h"

typedef enum ReconcileReason {
        REASON_SYNC,   /* initial sync, resync, reload */
        REASON_LINK,   /* the device changed */
        REASON_SIZES,  /* its sizes changed, and we did not write them */
        REASON_ROUTES, /* routes out of it changed */
        _REASON_MAX,
        _REASON_INVALID = -1,
} ReconcileReason;

static void device_reconcile(Manager *m, Device *d, ReconcileReason reason);
static void manager_flush(Manager *m);
static void start_sync(Manager *m, SyncPhase from);

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000ull + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- service manager ---- */

static unsigned count_state(const Manager *m, DeviceState s) {
        const Device *d;
        unsigned n = 0;
        DEVICE_FOREACH(d, &m->devices, it)
                n += d->state == s;
        return n;
}

static void notify_status(Manager *m, const char *prefix) {
        unsigned managed = (unsigned) m->devices.n_devices - count_state(m, DEVICE_UNMANAGED);
        (void) sd_notifyf(false, "%sSTATUS=managing %u of %zu devices, %u pending, %u failed", prefix ?: "",
                          managed, m->devices.n_devices, count_state(m, DEVICE_PENDING),
                          count_state(m, DEVICE_FAILED));
}

static void maybe_ready(Manager *m) {
        if (!m->ready_pending || m->sync != SYNC_NONE || !TAILQ_EMPTY(&m->queue) || m->inflight_count > 0)
                return;
        m->ready_pending = false;
        if (!m->ready_sent)
                log_info("initial reconcile done: %zu devices, %u managed", m->devices.n_devices,
                         (unsigned) m->devices.n_devices - count_state(m, DEVICE_UNMANAGED));
        m->ready_sent = true;
        notify_status(m, "READY=1\n");
}

/* ---- state file ---- */

static int save_state(Manager *m) {
        int r = state_save(m->cfg.runtime_dir, &m->devices);
        if (r < 0)
                return r;
        m->state_dirty = false;
        return 0;
}

static void on_save(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        if (m->state_dirty) {
                int r = save_state(m);
                if (r < 0)
                        log_error_errno(r, "Failed to write state file in %s: %m", m->cfg.runtime_dir);
        }
}

static void schedule_save(Manager *m) {
        m->state_dirty = true;
        event_active(m->save_event, EV_TIMEOUT, 0);
}

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

static const Policy *device_match(Manager *m, Device *d) {
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
        return m->policy ? policy_set_match(m->policy, &md) : NULL;
}

/* ---- write queue ---- */

static void queue_device(Manager *m, Device *d) {
        if (d->queued)
                return;
        d->queued = true;
        TAILQ_INSERT_TAIL(&m->queue, d, queue_link);
}

static void unqueue_device(Manager *m, Device *d) {
        if (!d->queued)
                return;
        TAILQ_REMOVE(&m->queue, d, queue_link);
        d->queued = false;
}

static void set_error(Device *d, int error, const char *text) {
        free(d->last_error);
        d->last_errno = error;
        d->last_error = text ? strdup(text) : NULL;
}

/* Originals go to disk before the first write of a device, or the device is not written. */
static void persist_new_originals(Manager *m) {
        Device *d;
        bool any = false;
        int r;

        TAILQ_FOREACH(d, &m->queue, queue_link)
                if (d->original_unsaved) {
                        any = true;
                        break;
                }
        if (!any)
                return;

        r = save_state(m);
        if (r >= 0) {
                TAILQ_FOREACH(d, &m->queue, queue_link)
                        d->original_unsaved = false;
                return;
        }
        log_error_errno(r, "Failed to record original sizes in %s/state.json: %m; not writing devices whose originals are not recorded",
                        m->cfg.runtime_dir);
        Device *next;
        for (d = TAILQ_FIRST(&m->queue); d; d = next) {
                next = TAILQ_NEXT(d, queue_link);
                if (!d->original_unsaved)
                        continue;
                unqueue_device(m, d);
                d->original_unsaved = false;
                d->has_original = false;
                d->written_families = 0;
                d->state = DEVICE_FAILED;
                d->failed_desired = d->desired;
                set_error(d, r, "cannot record original sizes");
                log_dev_error_errno(d, r, "not writing: original sizes cannot be recorded: %m");
        }
}

static void manager_flush(Manager *m) {
        Device *d;

        if (!TAILQ_EMPTY(&m->queue))
                persist_new_originals(m);

        while ((d = TAILQ_FIRST(&m->queue)) && m->inflight_count < WRITE_INFLIGHT_MAX) {
                struct nl_msg *msg = NULL;
                char buf[256];
                uint32_t seq;
                int r;

                unqueue_device(m, d);
                if (sizes_equal(&d->desired, &d->current, m->ipv4_supported)) {
                        device_reconcile(m, d, REASON_LINK);
                        continue;
                }
                r = link_write_message(d->ifindex, &d->desired, m->ipv4_supported, &msg);
                if (r >= 0) {
                        r = netlink_send(m->nl, msg, &seq);
                        nlmsg_free(msg);
                }
                if (r < 0) {
                        log_dev_error_errno(d, r, "cannot send write: %m");
                        d->state = DEVICE_FAILED;
                        d->failed_desired = d->desired;
                        set_error(d, r, NULL);
                        continue;
                }
                log_dev_info(d, "%s %s", d->restoring ? "restoring original sizes:" : "writing",
                             sizes_change_format(&d->current, &d->desired, m->ipv4_supported, buf, sizeof(buf)));
                d->inflight = true;
                d->write_epoch = m->dump_epoch;
                unsigned slot = (m->inflight_head + m->inflight_count) % WRITE_INFLIGHT_MAX;
                m->inflight[slot].seq = seq;
                m->inflight[slot].ifindex = d->ifindex;
                m->inflight[slot].refresh = false;
                m->inflight_count++;
        }
        maybe_ready(m);
}

/* Ask the kernel for one link's current attributes; the reply arrives as an RTM_NEWLINK. */
static void request_refresh(Manager *m, int ifindex) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
        struct nl_msg *msg;
        uint32_t seq;

        if (m->inflight_count >= WRITE_INFLIGHT_MAX)
                return; /* the next verification catches it */
        msg = nlmsg_alloc_simple(RTM_GETLINK, NLM_F_REQUEST);
        if (!msg)
                return;
        if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) >= 0 &&
            nla_put_u32(msg, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS) >= 0 && netlink_send(m->nl, msg, &seq) >= 0) {
                unsigned slot = (m->inflight_head + m->inflight_count) % WRITE_INFLIGHT_MAX;
                m->inflight[slot].seq = seq;
                m->inflight[slot].ifindex = ifindex;
                m->inflight[slot].refresh = true;
                m->inflight_count++;
        }
        nlmsg_free(msg);
}

static int inflight_take(Manager *m, uint32_t seq) {
        /* Acks come back in order; anything before `seq` was lost with the socket's buffer. */
        while (m->inflight_count > 0) {
                unsigned head = m->inflight_head;
                m->inflight_head = (head + 1) % WRITE_INFLIGHT_MAX;
                m->inflight_count--;
                if (m->inflight[head].seq == seq)
                        return m->inflight[head].refresh ? 0 : m->inflight[head].ifindex;
                if (m->inflight[head].refresh)
                        continue;
                Device *d = device_get(&m->devices, m->inflight[head].ifindex);
                if (d) {
                        d->inflight = false;
                        device_reconcile(m, d, REASON_LINK);
                }
        }
        return 0;
}

static void on_ack(void *userdata, uint32_t seq, int error, const char *extack) {
        Manager *m = userdata;
        char buf[256];
        int ifindex = inflight_take(m, seq);
        Device *d;

        if (ifindex <= 0) {
                maybe_ready(m);
                return;
        }
        d = device_get(&m->devices, ifindex);
        if (!d)
                return; /* deleted while its write was in flight */
        d->inflight = false;

        if (error < 0) {
                m->n_write_failures++;
                d->state = DEVICE_FAILED;
                d->failed_desired = d->desired;
                set_error(d, error, extack);
                log_dev_error_errno(d, error, "write refused: %m%s%s%s", extack ? " (" : "", extack ?: "",
                                    extack ? ")" : "");
                if (d->restoring)
                        d->restoring = false;
                maybe_ready(m);
                return;
        }

        m->n_writes++;
        set_error(d, 0, NULL);
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
        if (d->restoring) {
                m->n_restores++;
                d->restoring = false;
                d->has_original = false;
                d->written_families = 0;
                d->state = DEVICE_UNMANAGED;
                log_dev_info(d, "original sizes restored (%s)", sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
                schedule_save(m);
        } else
                d->state = DEVICE_APPLIED;

        if (d->recheck) {
                d->recheck = false;
                device_reconcile(m, d, REASON_LINK);
        }
        maybe_ready(m);
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

/* Re-read every link (a link-only sync) so that sizes changed behind our back are seen. */
static void start_verify(Manager *m) {
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

static void on_verify_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        if (manages_any(m))
                start_verify(m);
}

static void on_throttle_timer(evutil_socket_t fd, short what, void *userdata) {
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

static void device_reconcile(Manager *m, Device *d, ReconcileReason reason) {
        const Policy *p;
        char buf[256];

        /* Until the first sync is complete the recorded originals are not attached yet; while
         * routes are re-dumped, the route table is incomplete. */
        if (!m->initial_sync_done || m->sync == SYNC_ROUTES) {
                d->need_reconcile = true;
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

        p = device_match(m, d);
        set_policy_name(d, p);

        if (!p) {
                if (!d->has_original) {
                        unqueue_device(m, d);
                        d->state = DEVICE_UNMANAGED;
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
                        d->state = DEVICE_UNMANAGED;
                        log_dev_info(d, "already at its original sizes, forgetting them");
                        schedule_save(m);
                        return;
                }
                d->desired = target;
                d->restoring = true;
                d->state = DEVICE_PENDING;
                queue_device(m, d);
                return;
        }

        Desired want;
        compute_desired(p, &d->current, d->tso_max_size, m->ipv4_supported, &want);
        if (want.ipv4_unsupported)
                log_dev_debug(d, "policy \"%s\" sets IPv4 sizes, but this kernel has none: IPv4 part unsupported", p->name);
        if (want.families == 0) {
                unqueue_device(m, d);
                d->state = DEVICE_UNSUPPORTED;
                return;
        }

        bool same_as_before = sizes_equal(&want.sizes, &d->desired, m->ipv4_supported);
        DeviceState before = d->state;
        d->restoring = false;

        if (sizes_equal(&want.sizes, &d->current, m->ipv4_supported)) {
                unqueue_device(m, d);
                d->desired = want.sizes;
                d->families = want.families;
                if (d->state != DEVICE_APPLIED)
                        log_dev_debug(d, "already at the policy's sizes (%s)",
                                      sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
                d->state = DEVICE_APPLIED;
                return;
        }

        if (before == DEVICE_FAILED && sizes_equal(&want.sizes, &d->failed_desired, m->ipv4_supported))
                return; /* refused before; wait for a different desire or a reload */

        if (reason == REASON_SIZES && before == DEVICE_APPLIED && same_as_before) {
                if (!correction_allowed(m, d)) {
                        d->state = DEVICE_PENDING;
                        return;
                }
                log_dev_notice(d, "sizes changed behind bigtcpd's back (%s); putting them back",
                               sizes_change_format(&d->desired, &d->current, m->ipv4_supported, buf, sizeof(buf)));
        }

        if (want.clamped)
                log_dev_info(d, "policy \"%s\" asks for more than the device takes:%s%s", p->name,
                             want.clamped & (CLAMP_GSO | CLAMP_GSO_IPV4) ? " GSO clamped to its tso_max_size" : "",
                             want.clamped & (CLAMP_GRO | CLAMP_GRO_IPV4) ? " GRO clamped to 524280" : "");

        if (!d->has_original) {
                d->has_original = true;
                d->original_unsaved = true;
                d->original = d->current;
                d->written_families = 0;
        }
        d->written_families |= want.families;
        d->families = want.families;
        d->desired = want.sizes;
        d->state = DEVICE_PENDING;
        queue_device(m, d);
}

/* ---- kernel events ---- */

static void forget_device(Manager *m, Device *d) {
        unqueue_device(m, d);
        if (d->has_original) {
                log_dev_info(d, "device is gone, forgetting its original sizes");
                schedule_save(m);
        }
        device_remove(&m->devices, d);
        device_free(d);
}

static void on_route_changed(Device *d, void *userdata) {
        Manager *m = userdata;
        device_reconcile(m, d, REASON_ROUTES);
}

static void handle_link(Manager *m, struct nlmsghdr *nlh, bool in_dump) {
        LinkMessage lm;
        unsigned changes = 0;
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
        }
        /* A dump entry may predate a write sent while the dump runs: the ack is newer. */
        if (in_dump && d->write_epoch == m->dump_epoch)
                lm.has_sizes = false;
        int old_master = d->master;
        r = device_update(d, &lm, &changes);
        if (r < 0) {
                log_dev_error_errno(d, r, "cannot update: %m");
                return;
        }
        d->seen_in_dump = true;
        if ((changes & LINK_CHANGE_DOWN) && m->policy_uses_routes)
                m->route_resync_wanted = true;
        if (changes & LINK_CHANGE_MASTER) {
                /* A port joining or leaving moves the master's tso_max_size, and the master's
                 * own event may come before the kernel updated it. */
                if (d->master > 0)
                        request_refresh(m, d->master);
                if (old_master > 0 && old_master != d->master)
                        request_refresh(m, old_master);
        }
        if (changes & LINK_CHANGE_NAME)
                log_dev_debug(d, "name is now %s", d->ifname);
        if (changes == LINK_CHANGE_SIZES)
                device_reconcile(m, d, REASON_SIZES);
        else if (changes)
                device_reconcile(m, d, REASON_LINK);
}

static void on_message(void *userdata, struct nlmsghdr *nlh, bool in_dump) {
        Manager *m = userdata;

        switch (nlh->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK:
                handle_link(m, nlh, in_dump);
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
                        m->state_dirty = true;
                        continue;
                }
                d->has_original = true;
                d->original = e->original;
                d->written_families = e->written_families;
                /* Until the policy says otherwise it is what bigtcpd last wrote. */
                d->state = DEVICE_APPLIED;
                d->desired = d->current;
        }
        state_entries_free(m->loaded_state.entries, m->loaded_state.n);
        m->loaded_state.entries = NULL;
        m->loaded_state.n = 0;
        if (m->state_dirty)
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

static void start_sync(Manager *m, SyncPhase from) {
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
                m->resync_wanted = true;
                return;
        }
        start_sync(m, SYNC_LINKS);
}

static void on_retry_timer(evutil_socket_t fd, short what, void *userdata) {
        on_lost(userdata);
}

static void on_retry_event(evutil_socket_t fd, short what, void *userdata) {
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
        if (m->initial_sync_done && m->sync != SYNC_ROUTES) {
                DEVICE_FOREACH(d, &m->devices, it)
                        if (d->need_reconcile)
                                device_reconcile(m, d, d->sizes_moved ? REASON_SIZES : REASON_LINK);
        }
        manager_flush(m);
}

static const NetlinkOps netlink_ops = {
        .message = on_message,
        .dump_done = on_dump_done,
        .lost = on_lost,
        .ack = on_ack,
        .batch_end = on_batch_end,
};

/* ---- policy ---- */

/* `plain`: compiler style on stderr, one "file:line:column: message" per line (--check-config). */
static void log_policy_errors(const PolicyErrors *errs, bool plain) {
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&errs->items[i], &text) < 0)
                        log_error("%s: %s", errs->items[i].file, errs->items[i].message);
                else if (plain)
                        fprintf(stderr, "%s\n", text);
                else
                        log_error("%s", text);
        }
}

static int load_policy(const ManagerConfig *cfg, const char *hostname, const char *release, bool plain,
                       PolicySet **ret, char ***ret_paths, size_t *ret_n) {
        PolicyErrors errs = {};
        char **paths = NULL;
        PolicySet *set = NULL;
        int n, r;

        n = policy_discover(cfg->config_path, cfg->root, &paths);
        if (n < 0)
                return log_error_errno(n, "Failed to find policy files: %m");
        r = policy_load_files(paths, (size_t) n, &set, &errs);
        if (r < 0) {
                log_policy_errors(&errs, plain);
                policy_errors_clear(&errs);
                strv_free(paths);
                return r == -EINVAL ? r : log_error_errno(r, "Failed to load policy: %m");
        }
        policy_errors_clear(&errs);
        if (hostname)
                policy_set_scope(set, hostname, release);
        *ret = set;
        if (ret_paths) {
                *ret_paths = paths;
                *ret_n = (size_t) n;
        } else
                strv_free(paths);
        return 0;
}

static bool policy_set_uses_routes(const PolicySet *s) {
        for (size_t i = 0; i < s->n_policies; i++)
                if (s->policies[i].match.n_routes > 0)
                        return true;
        return false;
}

static void describe_policy(const PolicySet *s) {
        size_t here = 0;
        for (size_t i = 0; i < s->n_policies; i++)
                here += s->policies[i].applies_here;
        log_info("policy: %zu policies from %zu files (%zu apply to this host), digest %016llx", s->n_policies,
                 s->n_files, here, (unsigned long long) s->digest);
}

static void rearm_watch(Manager *m, char **paths, size_t n) {
        int r = config_watch_set(m->watch, paths, n, m->cfg.config_path, m->cfg.root);
        if (r < 0)
                log_warning_errno(r, "Failed to watch the policy files: %m; reload with SIGHUP");
}

static void manager_reload(Manager *m, bool forced) {
        PolicySet *set = NULL;
        char **paths = NULL;
        size_t n = 0;
        int r;

        r = load_policy(&m->cfg, m->hostname, m->uts.release, false, &set, &paths, &n);
        if (r < 0) {
                /* Keep watching: the next edit may fix it. */
                char **p = NULL;
                int k = policy_discover(m->cfg.config_path, m->cfg.root, &p);
                rearm_watch(m, p, k > 0 ? (size_t) k : 0);
                strv_free(p);
                log_error("refusing the new policy, keeping the running one (digest %016llx)",
                          (unsigned long long) m->policy->digest);
                if (forced) {
                        (void) sd_notifyf(false, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long) now_usec());
                        notify_status(m, "READY=1\n");
                }
                return;
        }
        rearm_watch(m, paths, n);
        strv_free(paths);

        if (!forced && set->digest == m->policy->digest) {
                policy_set_free(set);
                return;
        }
        (void) sd_notifyf(false, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long) now_usec());
        policy_set_free(m->policy);
        m->policy = set;
        m->policy_uses_routes = policy_set_uses_routes(set);
        describe_policy(set);

        /* A reload is the operator's word: retry what the kernel refused before. */
        Device *d;
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->state == DEVICE_FAILED)
                        d->failed_desired = (Sizes){};
        m->ready_pending = true;
        /* Reconcile against what the kernel holds now, not what it held at the last event. */
        start_verify(m);
}

static void on_config_changed(void *userdata) {
        Manager *m = userdata;
        event_active(m->reload_event, EV_TIMEOUT, 0);
}

static void on_reload_event(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        manager_reload(m, false);
}

/* ---- signals and life cycle ---- */

static void on_signal(evutil_socket_t sig, short what, void *userdata) {
        Manager *m = userdata;

        if (sig == SIGHUP) {
                log_info("SIGHUP: reloading the policy");
                manager_reload(m, true);
                return;
        }
        log_info("%s: stopping", strsignal((int) sig));
        (void) sd_notify(false, "STOPPING=1");
        event_base_loopbreak(m->base);
}

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        Manager *m = calloc(1, sizeof(*m));
        char host[256] = "";
        int r;

        if (!m)
                return -ENOMEM;
        m->cfg = *cfg;
        TAILQ_INIT(&m->queue);
        r = device_table_init(&m->devices);
        if (r < 0)
                goto fail;
        m->base = event_base_new();
        if (!m->base) {
                r = -ENOMEM;
                goto fail;
        }
        if (gethostname(host, sizeof(host) - 1) < 0)
                host[0] = '\0';
        m->hostname = strdup(host);
        if (uname(&m->uts) < 0)
                memset(&m->uts, 0, sizeof(m->uts));
        m->save_event = event_new(m->base, -1, 0, on_save, m);
        m->reload_event = event_new(m->base, -1, 0, on_reload_event, m);
        m->throttle_timer = evtimer_new(m->base, on_throttle_timer, m);
        m->verify_timer = event_new(m->base, -1, EV_PERSIST, on_verify_timer, m);
        m->retry_timer = evtimer_new(m->base, on_retry_timer, m);
        m->retry_event = event_new(m->base, -1, 0, on_retry_event, m);
        if (!m->hostname || !m->save_event || !m->reload_event || !m->throttle_timer || !m->verify_timer ||
            !m->retry_timer || !m->retry_event) {
                r = -ENOMEM;
                goto fail;
        }
        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

void manager_free(Manager *m) {
        if (!m)
                return;
        if (m->state_dirty && m->initial_sync_done)
                (void) save_state(m);
        for (size_t i = 0; i < ELEMENTSOF(m->signals); i++)
                if (m->signals[i])
                        event_free(m->signals[i]);
        if (m->save_event)
                event_free(m->save_event);
        if (m->reload_event)
                event_free(m->reload_event);
        if (m->throttle_timer)
                event_free(m->throttle_timer);
        if (m->verify_timer)
                event_free(m->verify_timer);
        if (m->retry_timer)
                event_free(m->retry_timer);
        if (m->retry_event)
                event_free(m->retry_event);
        config_watch_free(m->watch);
        netlink_free(m->nl);
        policy_set_free(m->policy);
        device_table_done(&m->devices);
        state_entries_free(m->loaded_state.entries, m->loaded_state.n);
        if (m->base)
                event_base_free(m->base);
        free(m->hostname);
        free(m);
}

int manager_start(Manager *m) {
        static const int sigs[] = {SIGHUP, SIGTERM, SIGINT};
        char **paths = NULL;
        size_t n = 0;
        int r;

        r = load_policy(&m->cfg, m->hostname, m->uts.release, false, &m->policy, &paths, &n);
        if (r < 0) {
                if (r == -EINVAL)
                        log_error("the policy has errors, not starting");
                return r;
        }
        m->policy_uses_routes = policy_set_uses_routes(m->policy);
        describe_policy(m->policy);

        if (mkdir(m->cfg.runtime_dir, 0755) < 0 && errno != EEXIST)
                log_warning_errno(errno, "Failed to create runtime directory %s: %m", m->cfg.runtime_dir);
        r = state_load(m->cfg.runtime_dir, &m->loaded_state.entries, &m->loaded_state.n);
        if (r < 0) {
                log_warning_errno(r, "Failed to read %s/state.json: %m; starting without recorded originals",
                                  m->cfg.runtime_dir);
                m->loaded_state.entries = NULL;
                m->loaded_state.n = 0;
        } else if (m->loaded_state.n > 0)
                log_info("state: original sizes of %zu devices recorded by an earlier run", m->loaded_state.n);

        r = config_watch_new(m->base, on_config_changed, m, &m->watch);
        if (r < 0) {
                strv_free(paths);
                return log_error_errno(r, "Failed to set up inotify: %m");
        }
        rearm_watch(m, paths, n);
        strv_free(paths);

        (void) signal(SIGPIPE, SIG_IGN);
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
                m->signals[i] = evsignal_new(m->base, sigs[i], on_signal, m);
                if (!m->signals[i] || evsignal_add(m->signals[i], NULL) < 0)
                        return log_error_errno(ENOMEM, "Failed to set up signal handling");
        }

        r = netlink_new(m->base, &netlink_ops, m, m->cfg.netlink_rcvbuf, &m->nl);
        if (r < 0)
                return log_error_errno(r, "Failed to open rtnetlink sockets: %m");
        start_sync(m, SYNC_LINKS);
        if (m->cfg.verify_interval_usec > 0) {
                struct timeval tv = {
                        .tv_sec = (time_t) (m->cfg.verify_interval_usec / 1000000ull),
                        .tv_usec = (suseconds_t) (m->cfg.verify_interval_usec % 1000000ull),
                };
                if (event_add(m->verify_timer, &tv) < 0)
                        return log_error_errno(ENOMEM, "Failed to arm the verification timer");
        }
        return 0;
}

int manager_run(Manager *m) {
        if (event_base_dispatch(m->base) < 0)
                return log_error_errno(EIO, "event loop failed");
        return m->exit_code;
}

int manager_check_config(const ManagerConfig *cfg) {
        PolicySet *set = NULL;
        struct utsname uts;
        char host[256] = "";
        int r;

        (void) gethostname(host, sizeof(host) - 1);
        if (uname(&uts) < 0)
                memset(&uts, 0, sizeof(uts));
        r = load_policy(cfg, host, uts.release, true, &set, NULL, NULL);
        if (r < 0)
                return r;
        describe_policy(set);
        policy_set_free(set);
        return 0;
}
