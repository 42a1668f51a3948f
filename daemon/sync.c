/* sync.c — what the kernel tells the engine: link and route events, dumps, replies to the
 * writer's requests, and the re-reads that keep the table true. Devices come and go here (their
 * lifecycle ends in lifecycle_gone()); every change is handed to apply_reconcile(). */
#include <malloc.h>
#include <net/if.h>
#include <sys/socket.h>

#include "apply.h"
#include "device-lifecycle.h"
#include "netlink-link.h"
#include "log-fields.h"
#include "route.h"
#include "netlink-stats.h"
#include "sync.h"

typedef enum SyncPhase {
        SYNC_NONE,
        SYNC_LINKS,
        SYNC_ROUTES,
        _SYNC_PHASE_MAX,
        _SYNC_PHASE_INVALID = -EINVAL,
} SyncPhase;

typedef struct SyncWaiter {
        uint64_t id;
        unsigned epoch; /* fired when a link dump of this epoch or later is complete */
        SyncDoneFn fn;
        void *userdata;
} SyncWaiter;

struct Sync {
        Engine *engine;
        Netlink *nl;
        uint64_t verify_interval_usec;
        SyncPhase phase;
        bool links_only;          /* a verification: links, not routes */
        bool resync_wanted;       /* events were lost during a sync: start over after it */
        bool route_resync_wanted; /* IPv4 flushes routes silently on link down */
        unsigned done_epoch;      /* the last link dump that completed */
        struct event *verify_timer;
        struct event *retry_timer;
        struct event *retry_event;
        struct event *stall_timer; /* a dump that stopped after lost events */
        uint64_t stall_mark;
        StateEntry *loaded;
        size_t n_loaded;
        SyncWaiter *waiters;
        size_t n_waiters;
        uint64_t next_waiter_id;
        const SyncMoveOps *move_ops;
        void *move_userdata;
        unsigned events_watch; /* the engine's events: a device managed from now on arms verify_timer */
};

void sync_set_move_ops(Sync *s, const SyncMoveOps *ops, void *userdata) {
        s->move_ops = ops;
        s->move_userdata = userdata;
}

static void start(Sync *s, SyncPhase from);

/* A Sync made without a Netlink (the fuzzers) has no socket: a dump counts as asked for, and
 * whoever drives sync_netlink_ops answers it (sync_dump_running()). */
static int dump_request(Sync *s, int type) {
        return s->nl ? netlink_dump(s->nl, type) : 0;
}

static uint64_t dump_progress(const Sync *s) {
        return s->nl ? netlink_dump_progress(s->nl) : 0;
}

static bool manages_any(const Engine *e) {
        const Device *d;
        DEVICE_FOREACH(d, &e->devices, it)
                if (d->record.has_original)
                        return true;
        return false;
}

/* Armed while bigtcpd manages some device, however it came to (present at a sync, or written
 * later: on_engine_event()): an idle host with nothing managed sees no wakeup at all. */
static void verify_arm(Sync *s) {
        if (s->verify_interval_usec == 0 || evtimer_pending(s->verify_timer, NULL))
                return;
        struct timeval tv = {
                .tv_sec = (time_t) (s->verify_interval_usec / USEC_PER_SEC),
                .tv_usec = (suseconds_t) (s->verify_interval_usec % USEC_PER_SEC),
        };
        (void) evtimer_add(s->verify_timer, &tv);
}

void sync_verify(Sync *s) {
        if (s->phase != SYNC_NONE) {
                s->resync_wanted = true;
                return;
        }
        start(s, SYNC_LINKS);
        s->links_only = true;
}

static void on_verify_timer(evutil_socket_t fd, short what, void *userdata) {
        Sync *s = userdata;
        if (!manages_any(s->engine))
                return;
        sync_verify(s);
        verify_arm(s);
}

/* A device bigtcpd wrote (its originals recorded) or that changed state with them, from a sync or
 * an event: from now on the verification runs, if it did not already. */
static void on_engine_event(const Event *ev, void *userdata) {
        Sync *s = userdata;

        if ((ev->type == EVENT_WRITE || ev->type == EVENT_STATE) && ev->device && ev->device->record.has_original)
                verify_arm(s);
}

int sync_wait_links(Sync *s, SyncDoneFn fn, void *userdata, uint64_t *ret_id) {
        SyncWaiter *x = reallocarray(s->waiters, s->n_waiters + 1, sizeof(SyncWaiter));

        if (!x)
                return -ENOMEM;
        s->waiters = x;
        /* A dump that runs now may have passed some devices already: the next one counts. */
        sync_verify(s);
        x[s->n_waiters++] = (SyncWaiter){.id = ++s->next_waiter_id, .fn = fn, .userdata = userdata,
                                         .epoch = s->engine->dump_epoch + (s->phase == SYNC_LINKS && s->resync_wanted)};
        if (ret_id)
                *ret_id = s->next_waiter_id;
        return 0;
}

void sync_cancel_wait(Sync *s, uint64_t id) {
        for (size_t i = 0; i < s->n_waiters; i++)
                if (s->waiters[i].id == id) {
                        s->waiters[i] = s->waiters[--s->n_waiters];
                        return;
                }
}

static void fire_waiters(Sync *s) {
        /* A waiter may add or cancel waiters: take the list first. */
        SyncWaiter *due = NULL;
        size_t n_due = 0, k = 0;

        for (size_t i = 0; i < s->n_waiters; i++)
                if (s->waiters[i].epoch <= s->done_epoch)
                        n_due++;
        if (n_due == 0)
                return;
        due = calloc(n_due, sizeof(SyncWaiter));
        if (!due)
                return; /* they wait for the next one */
        n_due = 0;
        for (size_t i = 0; i < s->n_waiters; i++) {
                if (s->waiters[i].epoch <= s->done_epoch)
                        due[n_due++] = s->waiters[i];
                else
                        s->waiters[k++] = s->waiters[i];
        }
        s->n_waiters = k;
        for (size_t i = 0; i < n_due; i++)
                due[i].fn(due[i].userdata);
        free(due);
}

/* ---- kernel events ---- */

static void on_route_changed(Device *d, void *userdata) {
        apply_reconcile(userdata, d, REASON_ROUTES);
}

/* A reply to one of the writer's requests: for its own device only. */
static Device *reply_owner(const Engine *e, const struct nlmsghdr *nlh, const LinkMessage *lm,
                           bool *ret_stale_sizes) {
        const WriterRequest *rq = writer_lookup(e->writer, nlh->nlmsg_seq);

        if (!rq || !rq->device || rq->device->ifindex != lm->ifindex)
                return NULL; /* its device went away: whatever has this ifindex now is another one */
        /* asked before the device's write in flight: it shows the sizes before that write */
        *ret_stale_sizes = rq->device->write.phase == WRITE_SENT && seq_before(rq->seq, rq->device->write.on->seq);
        return rq->device;
}

static void handle_link(Sync *s, struct nlmsghdr *nlh, NetlinkSource source) {
        Engine *e = s->engine;
        bool added = false, stale = false;
        unsigned changes = 0;
        LinkMessage lm;
        Device *d;
        int r;

        r = link_message_parse(nlh, &lm);
        if (r == -EAFNOSUPPORT)
                return;
        if (r < 0) {
                log_warning("netlink: malformed link message, ignoring");
                return;
        }
        if (source == NETLINK_REPLY) {
                d = reply_owner(e, nlh, &lm, &stale);
                if (!d)
                        return;
        } else
                d = device_get(&e->devices, lm.ifindex);
        if (nlh->nlmsg_type == RTM_DELLINK) {
                if (d && lm.moved && source == NETLINK_EVENT && s->move_ops) {
                        log_dev_debug(d, "moves to another namespace (nsid %d, ifindex %d there)", lm.new_netnsid,
                                      lm.new_ifindex);
                        s->move_ops->leaving(s->move_userdata, e, d, lm.new_netnsid, lm.new_ifindex);
                        lifecycle_gone(e, d);
                } else if (d) {
                        if (d->record.has_original)
                                log_dev_info(d, "device is gone, forgetting its original sizes");
                        else
                                log_dev_debug(d, "removed");
                        lifecycle_gone(e, d);
                }
                return;
        }
        if (!d) {
                r = device_add(&e->devices, lm.ifindex, &d);
                if (r < 0) {
                        log_error_errno(r, "Failed to track link %d: %m", lm.ifindex);
                        return;
                }
                d->netns = e->cfg.netns;
                /* created while bigtcpd watches: new, until it carries traffic or time passes */
                if (e->synced && source == NETLINK_EVENT)
                        d->appeared_usec = engine_now(e);
                added = true;
        }
        /* A dump entry may predate a write sent while the dump runs: the ack is newer. */
        if (source == NETLINK_DUMP && d->write.epoch == e->dump_epoch)
                lm.has_sizes = false;
        if (stale)
                lm.has_sizes = false;
        int old_master = d->master;
        r = device_update(d, &lm, engine_now(e), &changes);
        if (r < 0) {
                log_dev_error_errno(d, r, "failed to update: %m");
                return;
        }
        d->sync.seen_in_dump = true;
        if (added)
                event_emit(&e->events, &(Event){.type = EVENT_ADDED, .device = d});
        if (added && s->move_ops)
                s->move_ops->arrived(s->move_userdata, e, d);
        if ((changes & LINK_CHANGE_DOWN) && e->policy_uses_routes)
                s->route_resync_wanted = true;
        if (changes & LINK_CHANGE_MASTER) {
                /* A port joining or leaving moves the master's tso_max_size, and the master's own
                 * event may come before the kernel updated it. */
                Device *m = d->master > 0 ? device_get(&e->devices, d->master) : NULL;
                Device *old = old_master > 0 && old_master != d->master ? device_get(&e->devices, old_master) : NULL;
                if (m)
                        (void) writer_request_read(e->writer, m, NULL, NULL, NULL);
                if (old)
                        (void) writer_request_read(e->writer, old, NULL, NULL, NULL);
        }
        if (changes & LINK_CHANGE_NAME)
                log_dev_debug(d, "name is now %s", d->ifname);
        /* the state file's entry says who the device is (name, kind, MAC): a restart tells it from
         * another one with its ifindex by that */
        if ((changes & (LINK_CHANGE_NAME | LINK_CHANGE_MATCH)) && d->record.has_original)
                state_store_mark(e->state, d);
        if (changes == LINK_CHANGE_SIZES)
                apply_reconcile(e, d, REASON_SIZES);
        else if (changes)
                apply_reconcile(e, d, REASON_LINK);
        /* The counters the kernel read as it built this message, just now: the baselines of a
         * write that waits for them (a new device's, queued by its own announcement, never needs
         * more). */
        if (lm.stats64 && source != NETLINK_REPLY)
                writer_offer_baseline(e->writer, d, lm.stats64, lm.stats64_len);
}

static void on_message(void *userdata, struct nlmsghdr *nlh, NetlinkSource source) {
        Sync *s = userdata;

        switch (nlh->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK:
                handle_link(s, nlh, source);
                break;
        case RTM_NEWROUTE:
        case RTM_DELROUTE:
                if (route_message_handle(&s->engine->devices, nlh, on_route_changed, s->engine) < 0)
                        log_warning("netlink: malformed route message, ignoring");
                break;
        default:
                break;
        }
}

static void set_ipv4(Engine *e) {
        bool ipv4 = false;
        Device *d;

        DEVICE_FOREACH(d, &e->devices, it)
                ipv4 = ipv4 || d->has_ipv4_sizes;
        /* said once for the kernel, by the daemon's own namespace, not once for each pod */
        if (!e->synced || ipv4 != e->ipv4_supported)
                log_full_errno(e->cfg.netns ? LOG_DEBUG : LOG_INFO, 0,
                               "%s%skernel %s IPv4 BIG TCP sizes (gso/gro_ipv4_max_size)%s",
                               e->cfg.netns ? e->cfg.netns->name : "", e->cfg.netns ? ": " : "",
                               ipv4 ? "has" : "lacks", ipv4 ? "" : ": IPv4 parts of the policy are unsupported");
        e->ipv4_supported = ipv4;
        writer_set_ipv4(e->writer, ipv4);
}

static void finish(Sync *s) {
        Engine *e = s->engine;
        Device *d;

        if (!e->synced && e->cfg.settle && e->cfg.settle(e->cfg.settle_userdata) < 0)
                return; /* the daemon stops */
        s->phase = SYNC_NONE;
        e->sync_running = false;
        e->routes_complete = true;
        set_ipv4(e);
        if (!e->synced) {
                e->synced = true;
                e->settle_pending = true;
                apply_loaded_state(e, s->loaded, s->n_loaded);
                state_entries_free(s->loaded, s->n_loaded);
                s->loaded = NULL;
                s->n_loaded = 0;
                /* what loading the state file took (tens of MB at ten thousand devices, the
                 * JSON's tree and then its entries) is free now: give it back */
                (void) malloc_trim(0);
        }
        DEVICE_FOREACH(d, &e->devices, it) {
                bool moved = d->reconcile.sizes_moved;
                d->reconcile.sizes_moved = false;
                apply_reconcile(e, d, moved ? REASON_SIZES : REASON_SYNC);
        }
        e->reconcile_pending = false;
        if (manages_any(e))
                verify_arm(s);
        apply_flush(e);
        fire_waiters(s);
        /* Another sync is owed (events lost meanwhile, or the dump was inconsistent): it starts
         * from the next batch, after this one's writes went out. */
        if (s->resync_wanted)
                event_active(s->retry_event, EV_TIMEOUT, 0);
}

static void start(Sync *s, SyncPhase from) {
        Engine *e = s->engine;
        int r;

        if (from == SYNC_LINKS && s->phase == SYNC_NONE)
                s->links_only = false;
        if (from == SYNC_LINKS) {
                Device *d;
                DEVICE_FOREACH(d, &e->devices, it)
                        d->sync.seen_in_dump = false;
                e->dump_epoch++;
        } else {
                route_forget_all(&e->devices, NULL, NULL);
                e->routes_complete = false;
        }
        s->phase = from;
        e->sync_running = true;
        r = dump_request(s, from == SYNC_LINKS ? RTM_GETLINK : RTM_GETROUTE);
        if (r < 0) {
                struct timeval tv = {.tv_sec = 1};
                log_error_errno(r, "Failed to request %s dump: %m; retrying in 1s", from == SYNC_LINKS ? "link" : "route");
                s->phase = SYNC_NONE;
                e->sync_running = false;
                s->resync_wanted = true;
                evtimer_add(s->retry_timer, &tv);
        }
}

/* Whatever the dump did not show is gone. */
static void sweep(Sync *s) {
        Engine *e = s->engine;
        _cleanup_(freep) Device **gone = NULL;
        size_t n = 0;
        Device *d;

        DEVICE_FOREACH(d, &e->devices, it)
                n += !d->sync.seen_in_dump;
        if (n == 0)
                return;
        gone = calloc(n, sizeof(Device *));
        if (!gone) {
                s->resync_wanted = true; /* the next dump sweeps them */
                return;
        }
        n = 0;
        DEVICE_FOREACH(d, &e->devices, it)
                if (!d->sync.seen_in_dump)
                        gone[n++] = d;
        for (size_t i = 0; i < n; i++) {
                log_dev_debug(gone[i], "not in the link dump: gone");
                lifecycle_gone(e, gone[i]);
        }
}

static void on_dump_done(void *userdata, int type, int error, bool interrupted) {
        Sync *s = userdata;
        Engine *e = s->engine;

        if (error == -EBUSY) {
                /* an abandoned dump is still running in the kernel: after it */
                struct timeval tv = {.tv_usec = 100000};
                s->phase = SYNC_NONE;
                e->sync_running = false;
                s->resync_wanted = true;
                evtimer_add(s->retry_timer, &tv);
                return;
        }
        if (error < 0) {
                log_warning_errno(error, "%s dump failed: %m; dumping again", type == RTM_GETLINK ? "link" : "route");
                start(s, s->phase == SYNC_ROUTES ? SYNC_ROUTES : SYNC_LINKS);
                return;
        }
        if (interrupted && s->phase == SYNC_LINKS) {
                /* Links came or went while dumping (a burst). What the dump showed is right, and
                 * events cover what it missed; only absence cannot be trusted, so no sweep now. */
                log_debug("link dump was inconsistent; dumping again once this sync is done");
                s->resync_wanted = true;
                if (!e->synced || !s->links_only) {
                        start(s, SYNC_ROUTES);
                        return;
                }
                finish(s);
                return;
        }
        if (interrupted) {
                log_debug("route dump was inconsistent; dumping again");
                start(s, SYNC_ROUTES);
                return;
        }
        if (s->phase == SYNC_LINKS) {
                sweep(s);
                s->done_epoch = e->dump_epoch;
                if (s->resync_wanted) {
                        s->resync_wanted = false;
                        start(s, SYNC_LINKS);
                        return;
                }
                if (!s->links_only || s->route_resync_wanted) {
                        s->route_resync_wanted = false;
                        start(s, SYNC_ROUTES);
                        return;
                }
        }
        finish(s);
}

static void on_lost(void *userdata) {
        Sync *s = userdata;

        if (s->phase != SYNC_NONE) {
                /* Start over once this sync is done. The overrun may also have cost the dump
                 * itself its next part: if it does not move for a second, it is abandoned. */
                s->resync_wanted = true;
                if (!evtimer_pending(s->stall_timer, NULL)) {
                        struct timeval tv = {.tv_sec = 1};
                        s->stall_mark = dump_progress(s);
                        evtimer_add(s->stall_timer, &tv);
                }
                return;
        }
        start(s, SYNC_LINKS);
}

static void on_stall_timer(evutil_socket_t fd, short what, void *userdata) {
        Sync *s = userdata;
        struct timeval tv = {.tv_sec = 1};

        if (s->phase == SYNC_NONE)
                return;
        if (dump_progress(s) != s->stall_mark) {
                s->stall_mark = dump_progress(s);
                evtimer_add(s->stall_timer, &tv);
                return;
        }
        log_warning("%s dump made no progress for 1s after events were lost; starting over",
                    s->phase == SYNC_LINKS ? "link" : "route");
        if (s->nl)
                netlink_dump_abandon(s->nl);
        s->phase = SYNC_NONE;
        s->engine->sync_running = false;
        s->resync_wanted = false;
        start(s, SYNC_LINKS);
}

static void on_retry_timer(evutil_socket_t fd, short what, void *userdata) {
        on_lost(userdata);
}

static void on_retry_event(evutil_socket_t fd, short what, void *userdata) {
        Sync *s = userdata;
        if (s->phase == SYNC_NONE && s->resync_wanted) {
                s->resync_wanted = false;
                start(s, SYNC_LINKS);
        }
}

static void on_ack(void *userdata, uint32_t seq, int error, const char *extack) {
        Sync *s = userdata;
        writer_ack(s->engine->writer, seq, error, extack);
}

static void on_acks_lost(void *userdata) {
        Sync *s = userdata;
        /* What those writes did is unknown until the re-dump that the loss also starts. */
        writer_acks_lost(s->engine->writer);
}

static void on_batch_end(void *userdata) {
        Sync *s = userdata;
        Engine *e = s->engine;
        Device *d;

        if (s->phase == SYNC_NONE && s->route_resync_wanted) {
                s->route_resync_wanted = false;
                start(s, SYNC_ROUTES);
        }
        if (s->phase == SYNC_NONE && s->resync_wanted) {
                s->resync_wanted = false;
                start(s, SYNC_LINKS);
        }
        /* The scan is O(devices): only when something asked for it. */
        if (e->reconcile_pending && e->synced && e->routes_complete) {
                e->reconcile_pending = false;
                DEVICE_FOREACH(d, &e->devices, it)
                        if (d->reconcile.owed)
                                apply_reconcile(e, d, d->reconcile.sizes_moved ? REASON_SIZES : REASON_LINK);
        }
        apply_flush(e);
}

/* An entry of a statistics dump: for the writes waiting for baselines, for probation's
 * samples, or both. */
static void on_stats(void *userdata, struct nlmsghdr *nlh) {
        Sync *s = userdata;
        Engine *e = s->engine;
        StatsMessage sm;
        Device *d;

        if (stats_message_parse(nlh, &sm) < 0) {
                log_debug("netlink: malformed statistics message, ignoring");
                return;
        }
        d = device_get(&e->devices, sm.ifindex);
        if (!d)
                return;
        writer_stats_entry(e->writer, d, sm.stats64, sm.stats64_len);
        if (d->probation && (writer_stats_dump_serves(e->writer) & STATS_DUMP_SAMPLES))
                probation_sample(e->probation, d, sm.stats64, sm.stats64_len);
}

static void on_stats_done(void *userdata, int error) {
        Sync *s = userdata;
        Engine *e = s->engine;
        unsigned failed;
        int failed_error;
        unsigned done = writer_stats_dump_done(e->writer, &failed, &failed_error);

        if (done & STATS_DUMP_SAMPLES)
                probation_samples_done(e->probation, error);
        if (failed & STATS_DUMP_SAMPLES)
                probation_samples_done(e->probation, failed_error);
        if ((done | failed) & STATS_DUMP_BASELINES)
                apply_flush(e); /* the writes that waited for it */
}

const NetlinkOps sync_netlink_ops = {
        .message = on_message,
        .dump_done = on_dump_done,
        .lost = on_lost,
        .ack = on_ack,
        .acks_lost = on_acks_lost,
        .batch_end = on_batch_end,
        .stats = on_stats,
        .stats_done = on_stats_done,
};

int sync_new(Engine *e, Netlink *nl, uint64_t verify_interval_usec, Sync **ret) {
        Sync *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->engine = e;
        s->nl = nl;
        s->verify_interval_usec = verify_interval_usec;
        s->verify_timer = evtimer_new(e->base, on_verify_timer, s);
        s->retry_timer = evtimer_new(e->base, on_retry_timer, s);
        s->retry_event = event_new(e->base, -1, 0, on_retry_event, s);
        s->stall_timer = evtimer_new(e->base, on_stall_timer, s);
        s->events_watch = event_watch_add(&e->events, on_engine_event, s);
        if (!s->verify_timer || !s->retry_timer || !s->retry_event || !s->stall_timer || s->events_watch == 0) {
                sync_free(s);
                return -ENOMEM;
        }
        if (nl)
                netlink_set_ops(nl, &sync_netlink_ops, s);
        *ret = s;
        return 0;
}

void sync_free(Sync *s) {
        if (!s)
                return;
        if (s->events_watch)
                event_watch_remove(&s->engine->events, s->events_watch);
        if (s->verify_timer)
                event_free(s->verify_timer);
        if (s->retry_timer)
                event_free(s->retry_timer);
        if (s->retry_event)
                event_free(s->retry_event);
        if (s->stall_timer)
                event_free(s->stall_timer);
        state_entries_free(s->loaded, s->n_loaded);
        /* the dump they wait for never comes: they are answered now (with what the table has) */
        SyncWaiter *waiters = TAKE_PTR(s->waiters);
        size_t n_waiters = s->n_waiters;
        s->n_waiters = 0;
        for (size_t i = 0; i < n_waiters; i++)
                waiters[i].fn(waiters[i].userdata);
        free(waiters);
        free(s);
}

int sync_dump_running(const Sync *s) {
        switch (s->phase) {
        case SYNC_LINKS:
                return RTM_GETLINK;
        case SYNC_ROUTES:
                return RTM_GETROUTE;
        case SYNC_NONE:
        case _SYNC_PHASE_MAX:
        case _SYNC_PHASE_INVALID:
                break;
        }
        return 0;
}

void sync_start(Sync *s, StateEntry *entries, size_t n) {
        s->loaded = entries;
        s->n_loaded = n;
        start(s, SYNC_LINKS);
}
