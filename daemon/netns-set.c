/* netns-set.c — the other network namespaces: entering each namespace once (setns there, open
 * its sockets and SNMP files, setns back: the daemon has no threads, and nothing but this file ever
 * leaves its own namespace), an engine and a sync for each, their state directories, the devices
 * that move between them, and letting them go (their originals given back first) when their file
 * goes or no policy names them any more. Scanning the namespace directories is netns-set-scan.c's, the
 * problems to report netns-set-problem.c's. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "device-lifecycle.h"
#include "log-fields.h"
#include "policy-match.h"
#include "netns-set-internal.h"

/* How long the records of a device that left wait for it to show up in another namespace. The
 * kernel announces the arrival before the move returns, so this only covers the daemon reading
 * the two sockets in either order. */
#define MOVE_WAIT_USEC (1 * USEC_PER_SEC)
#define MOVING_MAX 4096u
static const struct timeval moving_tick = {.tv_sec = 0, .tv_usec = 200000};

/* A device that left a namespace for another one, with what bigtcpd recorded for it. */
typedef struct Moving {
        char *from; /* the namespace it left, for the log */
        char *ifname;
        char mac[DEVICE_MAC_STRLEN];
        int new_ifindex;
        Sizes original, last_good;
        ProvenSizes proven;
        unsigned written;
        bool has_last_good;
        uint64_t deadline_usec;
} Moving;

bool netns_name_is_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;

        /* hidden files are a tool's temporary ones; "host" is the daemon's own in a policy */
        if (n == 0 || n > NAME_MAX || name[0] == '.' || streq_ptr(name, "host"))
                return false;
        /* the name goes into logs, JSON, D-Bus and metric labels: printable ASCII, no blank (what
         * ip netns, CNI plugins and Docker make) */
        for (const char *c = name; *c; c++)
                if (*c <= ' ' || *c > '~' || *c == '/')
                        return false;
        return true;
}

size_t netns_set_others_count(const NetnsSet *s) {
        return s->n;
}

Netns *netns_set_other_at(const NetnsSet *s, size_t i) {
        return i < s->n ? s->items[i] : NULL;
}

static size_t find_index(const NetnsSet *s, const char *name, bool *ret_found) {
        size_t lo = 0, hi = s->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(s->items[mid]->id.name, name);
                if (c == 0) {
                        *ret_found = true;
                        return mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *ret_found = false;
        return lo;
}

Netns *netns_set_find(const NetnsSet *s, const char *name) {
        bool found;
        size_t i;

        if (!name)
                return NULL;
        i = find_index(s, name, &found);
        return found ? s->items[i] : NULL;
}

/* ---- state directories: <runtime_dir>/netns/<inode>-<cookie>. The inode is what a scan sees
 * without entering; the cookie tells the namespace from a later one that got its inode (the
 * kernel hands inode numbers out again, cookies never while the host runs). ---- */

static int remove_state_dir(const char *root, const char *name) {
        _cleanup_(closep) int fd = -1;
        struct dirent *de;
        DIR *d;

        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sub < 0)
                return errno == ENOENT ? 0 : -errno;
        d = fdopendir(sub);
        if (!d) {
                close(sub);
                return -errno;
        }
        while ((de = readdir(d)))
                if (!streq_ptr(de->d_name, ".") && !streq_ptr(de->d_name, ".."))
                        (void) unlinkat(sub, de->d_name, 0);
        closedir(d);
        if (unlinkat(fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

/* The state directories an earlier run left, read once before the first scan. */
void netns_set_read_leftovers(NetnsSet *s) {
        DIR *d = opendir(s->state_root);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                unsigned long long ino, cookie;
                char tail;

                if (sscanf(de->d_name, "%llu-%llu%c", &ino, &cookie, &tail) != 2) {
                        if (de->d_name[0] != '.')
                                (void) remove_state_dir(s->state_root, de->d_name); /* not ours to keep */
                        continue;
                }
                StateDirName *t = realloc(s->leftover, (s->n_leftover + 1) * sizeof(*t));
                if (!t)
                        break;
                s->leftover = t;
                s->leftover[s->n_leftover++] = (StateDirName){ino, cookie};
        }
        closedir(d);
}

bool netns_set_state_dir_exists(const NetnsSet *s, uint64_t ino) {
        for (size_t i = 0; i < s->n_leftover; i++)
                if (s->leftover[i].ino == ino)
                        return true;
        return false;
}

static void leftover_drop(NetnsSet *s, size_t i, bool remove) {
        char name[48];

        if (remove) {
                netns_state_dir_name(s->leftover[i].ino, s->leftover[i].cookie, name);
                (void) remove_state_dir(s->state_root, name);
        }
        s->leftover[i] = s->leftover[--s->n_leftover];
}

/* Make the namespace's state directory, or take the one an earlier run left for it; one left
 * by a namespace that had its inode before goes. */
static int prepare_state_dir(NetnsSet *s, Netns *n) {
        for (size_t i = s->n_leftover; i > 0; i--) {
                StateDirName *l = &s->leftover[i - 1];
                if (l->ino != n->id.ino)
                        continue;
                if (l->cookie != n->id.cookie)
                        log_info("netns %s: the state bigtcpd kept for inode %" PRIu64 " is of a namespace that is "
                                 "gone; dropping it",
                                 n->id.name, l->ino);
                leftover_drop(s, i - 1, l->cookie != n->id.cookie);
                netns_set_problems_filter(s, netns_set_keep_other_than,
                                          &n->id.ino); /* back: what was not restored is tried now */
        }
        if (mkdir(s->cfg.runtime_dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (mkdir(s->state_root, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (mkdir(n->state_dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static const SyncMoveOps move_ops;

/* ---- one namespace ---- */

/* Device events reach the watchers of the daemon (Monitor, D-Bus, sd_notify); a namespace's own
 * settling is the set's to sum up (check_settled). */
static void schedule_reap(Netns *n);
static void maybe_release(Netns *n);

/* EVENT_SETTLED for the daemon, once one is owed and every namespace has settled: READY=1 and the
 * end of a reload wait for all of them, bigtcpd's own being one of them. */
static void check_settled(NetnsSet *s) {
        if (!s->settle_owed)
                return;
        for (size_t i = 0; i < netns_set_all_count(s); i++) {
                const Engine *e = netns_set_all_at(s, i)->engine;
                if (!e->settled_once || e->settle_pending)
                        return;
        }
        s->settle_owed = false;
        s->settled_once = true;
        event_emit(&s->events, &(Event){.type = EVENT_SETTLED});
}

EventList *netns_set_events(NetnsSet *s) {
        return &s->events;
}

bool netns_set_ready(const NetnsSet *s) {
        return s->settled_once;
}

static void on_reloading(const Event *ev, void *userdata) {
        NetnsSet *s = userdata;
        if (ev->type == EVENT_RELOADING)
                s->settle_owed = true;
}

static void on_netns_event(const Event *ev, void *userdata) {
        Netns *n = userdata;
        NetnsSet *s = n->set;

        switch (ev->type) {
        case EVENT_ADDED:
        case EVENT_REMOVED:
        case EVENT_STATE:
        case EVENT_WRITE:
        case EVENT_ROLLBACK:
        case EVENT_ROLLOUT:
        case EVENT_EVIDENCE:
        case EVENT_AUTO:
                event_emit(&s->events, ev);
                break;
        case EVENT_SETTLED:
                if (n->releasing) {
                        schedule_reap(n);
                        break;
                }
                if (!n->own)
                        maybe_release(n);
                check_settled(s);
                break;
        case EVENT_RELOAD:
        case EVENT_RELOADING:
        case EVENT_TRY: /* the daemon's, emitted on the set's list itself */
        case EVENT_NETNS_PROBLEM:
        case _EVENT_TYPE_MAX:
        case _EVENT_TYPE_INVALID:
                break;
        }
}

/* One of the set's, bigtcpd's own as every other: its device events are the daemon's, its devices
 * may move to and from the others. */
static int join(NetnsSet *s, Netns *n) {
        n->set = s;
        sync_set_move_ops(n->sync, &move_ops, s);
        n->engine->peer_ops = &netns_set_peer_ops;
        n->engine->peer_userdata = s;
        netns_set_peers_forget(s);
        n->forward_watch = event_watch_add(&n->engine->events, on_netns_event, n);
        return n->forward_watch == 0 ? -ENOMEM : 0;
}

/* … and no more (bigtcpd's own, which outlives the set). */
static void leave(Netns *n) {
        sync_set_move_ops(n->sync, NULL, NULL);
        n->engine->peer_ops = NULL;
        n->engine->peer_userdata = NULL;
        if (n->set)
                netns_set_peers_forget(n->set);
        if (n->forward_watch)
                event_watch_remove(&n->engine->events, n->forward_watch);
        n->forward_watch = 0;
        n->set = NULL;
}

int netns_set_enter(NetnsSet *s, const char *dir, const char *name, uint64_t ino, Netns **ret) {
        _cleanup_(netns_freep) Netns *n = NULL;
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) char *path = NULL;
        StateEntry *entries = NULL;
        StateLoadReport report;
        size_t n_entries = 0;
        int r, k;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        NamespaceConfig nc = {
                .fd = fd,
                .home_fd = s->host_fd,
                .name = name,
                .dev = s->nsfs_dev,
                .ino = ino,
                .runtime_dir = s->cfg.runtime_dir,
                .engine = s->cfg.engine,
                .clock = s->cfg.clock,
                .netlink_rcvbuf = s->cfg.netlink_rcvbuf,
                .verify_interval_usec = s->cfg.verify_interval_usec,
        };
        r = netns_new(s->base, &nc, &n);
        if (r < 0)
                return r;
        r = prepare_state_dir(s, n);
        if (r < 0)
                return log_error_errno(r, "netns %s: failed to set up its state directory: %m", name);

        netns_run_policy(n, s->policy, false);
        r = join(s, n);
        if (r < 0)
                return r;

        r = state_store_open_dir(n->engine->state, NULL);
        if (r < 0)
                return log_error_errno(r, "netns %s: failed to open %s: %m", name, n->state_dir);
        k = state_store_load(n->engine->state, &entries, &n_entries, &report);
        if (k == -ENOMEM)
                return k;
        if (k < 0 || report.snapshot_error < 0)
                log_warning_errno(k < 0 ? k : report.snapshot_error,
                                  "netns %s: failed to read its state in %s: %m; starting without recorded originals",
                                  name, n->state_dir);
        else if (n_entries > 0)
                log_info("netns %s: original sizes of %zu %s recorded by an earlier run", name, n_entries,
                         PLURAL(n_entries, "device", "devices"));
        netns_start(n, entries, n_entries);
        *ret = TAKE_PTR(n);
        return 0;
}

int netns_set_insert(NetnsSet *s, Netns *n) {
        bool found;
        size_t i = find_index(s, n->id.name, &found);

        if (found)
                return -EEXIST;
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 16;
                Netns **t = realloc(s->items, cap * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                s->items = t;
                s->cap = cap;
        }
        memmove(s->items + i + 1, s->items + i, (s->n - i) * sizeof(*s->items));
        s->items[i] = n;
        s->n++;
        return 0;
}

/* ---- letting a namespace go ---- */

#define RELEASE_TIMEOUT_SEC 10

static size_t count_originals(const Engine *e) {
        const Device *d;
        size_t n = 0;

        DEVICE_FOREACH(d, &e->devices, it)
                n += d->record.has_original;
        return n;
}

static void schedule_reap(Netns *n) {
        n->released = true;
        event_active(n->set->reap_event, EV_TIMEOUT, 0);
}

static void on_release_timeout(evutil_socket_t fd, short what, void *userdata) {
        Netns *n = userdata;

        log_warning("netns %s: its original sizes are not all back after %ds; letting it go anyway", n->id.name,
                    RELEASE_TIMEOUT_SEC);
        schedule_reap(n);
}

/* Out of the list, and what bigtcpd wrote goes back: the engine runs a policy of nothing, which
 * gives every device its originals. Done once the engine settles (or after a bound). */
void netns_set_give_up(NetnsSet *s, size_t i, const char *why) {
        Netns *n = s->items[i];
        size_t held = count_originals(n->engine);
        PolicySet *none;
        Device *d;

        Netns **t = realloc(s->releasing, (s->n_releasing + 1) * sizeof(*t));
        if (!t) {
                log_error("netns %s: out of memory; keeping it", n->id.name);
                return;
        }
        s->releasing = t;
        memmove(s->items + i, s->items + i + 1, (s->n - i - 1) * sizeof(*s->items));
        s->n--;
        s->releasing[s->n_releasing++] = n;
        n->releasing = true;
        netns_set_peers_forget(s); /* it gives no device a peer any more */
        if (held > 0)
                log_info("netns %s: %s; giving its %zu devices bigtcpd wrote their original sizes back before letting "
                         "it go",
                         n->id.name, why, held);
        else
                log_info("netns %s: %s; letting it go", n->id.name, why);
        n->release_timer = evtimer_new(s->base, on_release_timeout, n);
        none = policy_set_new();
        if (held == 0 || !none || !n->release_timer ||
            evtimer_add(n->release_timer, &(struct timeval){.tv_sec = RELEASE_TIMEOUT_SEC}) < 0) {
                policy_set_free(none);
                schedule_reap(n);
                return;
        }
        netns_run_policy(n, none, false); /* settles once its devices are reconciled here */
        policy_set_free(none);
        DEVICE_FOREACH(d, &n->engine->devices, it)
                apply_reconcile(n->engine, d, REASON_SYNC);
        apply_flush(n->engine);
        engine_check_settled(n->engine); /* nothing to write after all: schedule_reap() */
        check_settled(s);                /* it may have been the one the daemon waited for */
}

/* A namespace no policy names any more, once it holds nothing of bigtcpd's (its originals given
 * back, or those of an earlier run, for which it was entered). */
static void maybe_release(Netns *n) {
        NetnsSet *s = n->set;

        if (policy_set_takes_netns(s->policy, n->id.name) || count_originals(n->engine) > 0)
                return;
        for (size_t i = 0; i < s->n; i++)
                if (s->items[i] == n) {
                        netns_set_give_up(s, i, "no policy names it");
                        return;
                }
}

static void leftover_keep(NetnsSet *s, uint64_t ino, uint64_t cookie) {
        StateDirName *t = realloc(s->leftover, (s->n_leftover + 1) * sizeof(*t));

        if (!t)
                return;
        s->leftover = t;
        s->leftover[s->n_leftover++] = (StateDirName){ino, cookie};
}

/* Its devices go; its state directory with them when they are all at their originals, else it
 * stays for the namespace coming back (same inode and cookie). */
static void reap_one(NetnsSet *s, Netns *n) {
        _cleanup_(freep) Device **devs = NULL;
        size_t n_devs = 0, left = count_originals(n->engine);
        uint64_t ino = n->id.ino, cookie = n->id.cookie;
        char name[48];

        if (device_table_sorted(&n->engine->devices, &devs, &n_devs) >= 0)
                for (size_t j = 0; j < n_devs; j++) {
                        /* reads in flight for it (bigtcpctl show) are answered: the device is gone */
                        writer_cancel_device(n->engine->writer, devs[j]);
                        event_emit(&s->events, &(Event){.type = EVENT_REMOVED, .device = devs[j]});
                }
        netns_state_dir_name(ino, cookie, name);
        _cleanup_(freep) char *what = strdup(n->id.name);
        netns_free(n);
        if (left == 0) {
                (void) remove_state_dir(s->state_root, name);
                log_info("netns %s: let go (%zu devices, none left at sizes of bigtcpd's)", what ?: "?", n_devs);
                return;
        }
        leftover_keep(s, ino, cookie);
        /* not entered again while its file is there, before the operator's next word */
        netns_set_problem_add(s, NETNS_PROBLEM_NOT_RESTORED, what ?: "?", ino, 0, left, true);
        log_warning("netns %s: let go with %zu devices not at their original sizes; their state stays in %s/%s for "
                    "when the namespace is back",
                    what ?: "?", left, s->state_root, name);
}

/* No policy names another namespace, and none is managed, being let go, or has state left. */
bool netns_set_nothing_to_look_for(const NetnsSet *s) {
        return !policy_set_wants_other_netns(s->policy) && s->n_leftover == 0 && s->n == 0 &&
               s->n_releasing == 0;
}

static void on_reap(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        bool any = false;

        for (size_t i = s->n_releasing; i > 0; i--) {
                Netns *n = s->releasing[i - 1];
                if (!n->released)
                        continue;
                s->releasing[i - 1] = s->releasing[--s->n_releasing];
                reap_one(s, n);
                any = true;
        }
        if (!any)
                return;
        if (netns_set_nothing_to_look_for(s)) {
                log_debug("netns: no policy names another namespace and none is managed: the namespace directories "
                          "are not watched any more");
                netns_set_stop_watching(s);
        } else if (s->watching)
                event_active(s->scan_event, EV_TIMEOUT, 0); /* a file that came back; descriptors free */
        check_settled(s);
}

/* ---- devices that move between namespaces ---- */

static void moving_done(Moving *m) {
        free(m->from);
        free(m->ifname);
}

static void moving_drop(NetnsSet *s, size_t i) {
        moving_done(&s->moving[i]);
        memmove(s->moving + i, s->moving + i + 1, (s->n_moving - i - 1) * sizeof(*s->moving));
        s->n_moving--;
}

static const char *engine_netns_name(const Engine *e) {
        return e->cfg.netns ? e->cfg.netns->name : "host";
}

static void adopt(Engine *e, Device *d, const Moving *m) {
        lifecycle_adopt(e, d, &m->original, m->written, m->has_last_good ? &m->last_good : NULL, &m->proven);
        log_dev_info(d, "moved here from %s (ifindex %d there): its original sizes came with it", m->from,
                     m->new_ifindex);
}

size_t netns_set_all_count(const NetnsSet *s) {
        return s->n + 1;
}

Netns *netns_set_all_at(const NetnsSet *s, size_t i) {
        return i == 0 ? s->own : i <= s->n ? s->items[i - 1] : NULL;
}

static void on_moving_timer(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        uint64_t now = clock_now(s->cfg.clock, CLOCK_MONOTONIC);

        for (size_t i = s->n_moving; i > 0; i--) {
                Moving *m = &s->moving[i - 1];
                if (m->deadline_usec > now)
                        continue;
                log_warning("%s/%s: moved to a namespace bigtcpd does not manage; its original sizes are lost "
                            "(gso_max_size %u, gro_max_size %u, gso_ipv4_max_size %u, gro_ipv4_max_size %u)",
                            m->from, m->ifname ?: "?", m->original.gso_max_size, m->original.gro_max_size,
                            m->original.gso_ipv4_max_size, m->original.gro_ipv4_max_size);
                moving_drop(s, i - 1);
        }
        if (s->n_moving > 0)
                evtimer_add(s->moving_timer, &moving_tick);
}

static void on_leaving(void *userdata, Engine *from, Device *d, int nsid, int new_ifindex) {
        NetnsSet *s = userdata;
        char mac[DEVICE_MAC_STRLEN];
        Moving m = {};

        if (!d->record.has_original)
                return; /* nothing of bigtcpd's goes with it */
        device_identity_mac(d, mac);
        m = (Moving){.new_ifindex = new_ifindex, .original = d->record.original, .written = d->record.written,
                     .last_good = d->record.last_good, .has_last_good = d->record.has_last_good,
                     .deadline_usec = clock_now(s->cfg.clock, CLOCK_MONOTONIC) + MOVE_WAIT_USEC};
        device_proven_get(d, &m.proven);
        snprintf(m.mac, sizeof(m.mac), "%s", mac);
        m.from = strdup(engine_netns_name(from));
        m.ifname = strdup(d->ifname);
        if (!m.from || !m.ifname) {
                moving_done(&m);
                log_dev_error(d, "out of memory: the original sizes of the device that left are lost");
                return;
        }
        /* read there already? (the sockets of two namespaces are read in no set order) */
        for (size_t i = 0; i <= s->n; i++) {
                Engine *e = netns_set_all_at(s, i)->engine;
                Device *there = e == from ? NULL : device_get(&e->devices, new_ifindex);
                char mac2[DEVICE_MAC_STRLEN];

                if (!there || !streq_ptr(device_identity_mac(there, mac2), m.mac))
                        continue;
                adopt(e, there, &m);
                moving_done(&m);
                apply_reconcile(e, there, REASON_SYNC);
                apply_flush(e);
                return;
        }
        if (s->n_moving >= MOVING_MAX) {
                log_dev_warning(d, "moved to another namespace while %u other moves wait: its original sizes are lost",
                                MOVING_MAX);
                moving_done(&m);
                return;
        }
        Moving *t = realloc(s->moving, (s->n_moving + 1) * sizeof(*t));
        if (!t) {
                moving_done(&m);
                return;
        }
        s->moving = t;
        s->moving[s->n_moving++] = m;
        if (!evtimer_pending(s->moving_timer, NULL))
                evtimer_add(s->moving_timer, &moving_tick);
}

static void on_arrived(void *userdata, Engine *e, Device *d) {
        NetnsSet *s = userdata;
        char mac[DEVICE_MAC_STRLEN];

        if (s->n_moving == 0)
                return;
        device_identity_mac(d, mac);
        for (size_t i = 0; i < s->n_moving; i++)
                if (s->moving[i].new_ifindex == d->ifindex && streq_ptr(s->moving[i].mac, mac)) {
                        adopt(e, d, &s->moving[i]);
                        moving_drop(s, i);
                        return;
                }
}

static const SyncMoveOps move_ops = {
        .leaving = on_leaving,
        .arrived = on_arrived,
};

/* ReloaderOps.run: every namespace, bigtcpd's own as any other, runs `set`. */
static void run_policy(void *userdata, PolicySet *set) {
        NetnsSet *s = userdata;
        PolicySet *old = s->policy;

        s->policy = policy_set_ref(set);
        s->settle_owed = true; /* READY=1 once every namespace runs it */
        netns_set_problems_filter(s, netns_set_keep_after_policy_change, NULL);
        for (size_t i = 0; i < netns_set_all_count(s); i++)
                netns_run_policy(netns_set_all_at(s, i), set, true);
        policy_set_free(old);
        check_settled(s); /* every namespace may have it already (none has to write) */
        if (s->started)
                netns_set_look_for_namespaces(s);
}

/* ReloaderOps.unchanged: a refused forced reload settles as soon as every namespace has. */
static void policy_unchanged(void *userdata) {
        check_settled(userdata);
}

const ReloaderOps netns_set_reloader_ops = {.run = run_policy, .unchanged = policy_unchanged};

void netns_set_observer_gone(NetnsSet *s, EvidenceSockets *k, const char *why) {
        engine_config_without_observer(&s->cfg.engine, k, why);
}

void netns_set_start(NetnsSet *s) {
        s->started = true;
        check_settled(s);
        netns_set_look_for_namespaces(s);
}

int netns_set_new(struct event_base *base, const NetnsConfig *cfg, Netns *own, NetnsSet **ret) {
        static const char *const defaults[] = NETNS_DIRS_DEFAULT;
        NetnsSet *s = calloc(1, sizeof(*s));
        struct stat st;

        if (!s)
                return -ENOMEM;
        *s = (NetnsSet){.base = base, .own = own, .cfg = *cfg, .host_fd = -1, .inotify_fd = -1, .mountinfo_fd = -1,
                         .mounts_fd = -1, .settle_owed = true /* the first: READY=1 */};
        s->n_dirs = cfg->dirs ? cfg->n_dirs : ELEMENTSOF(defaults);
        s->dirs = calloc(s->n_dirs + 1, sizeof(char *));
        s->wd = calloc(s->n_dirs + 1, sizeof(int));
        if (!s->dirs || !s->wd || asprintf(&s->state_root, "%s/netns", cfg->runtime_dir) < 0) {
                s->state_root = NULL;
                netns_set_free(s);
                return -ENOMEM;
        }
        for (size_t i = 0; i < s->n_dirs; i++) {
                s->wd[i] = -1;
                s->dirs[i] = strdup(cfg->dirs ? cfg->dirs[i] : defaults[i]);
                if (!s->dirs[i]) {
                        netns_set_free(s);
                        return -ENOMEM;
                }
        }
        s->cfg.dirs = s->dirs;
        /* what another namespace is entered from and told from the daemon's own by; a set that
         * names no directory (the unit tests', the fuzzers') never enters or looks into one */
        if (s->n_dirs > 0) {
                s->host_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
                if (s->host_fd < 0 || fstat(s->host_fd, &st) < 0) {
                        int r = -errno;
                        netns_set_free(s);
                        return r;
                }
                s->nsfs_dev = st.st_dev;
                s->host_ino = st.st_ino;
        }
        s->scan_event = event_new(base, -1, 0, netns_set_on_scan, s);
        s->moving_timer = evtimer_new(base, on_moving_timer, s);
        s->starved_timer = evtimer_new(base, netns_set_on_starved_timer, s);
        s->reap_event = event_new(base, -1, 0, on_reap, s);
        s->problems_event = event_new(base, -1, 0, netns_set_on_problems_changed, s);
        if (!s->scan_event || !s->moving_timer || !s->starved_timer || !s->reap_event || !s->problems_event) {
                netns_set_free(s);
                return -ENOMEM;
        }
        s->reloading_watch = event_watch_add(&s->events, on_reloading, s);
        if (join(s, own) < 0 || s->reloading_watch == 0) {
                netns_set_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

int netns_set_new_alone(struct event_base *base, Netns *own, NetnsSet **ret) {
        static char *const no_dirs[] = {NULL};

        return netns_set_new(base,
                             &(NetnsConfig){.engine = own->engine->cfg,
                                            .clock = own->engine->clock,
                                            .dirs = no_dirs,
                                            .n_dirs = 0,
                                            .runtime_dir = own->state_dir},
                             own, ret);
}

void netns_set_free(NetnsSet *s) {
        if (!s)
                return;
        if (s->own && s->own->set == s)
                leave(s->own);
        if (s->problems_event)
                event_free(s->problems_event);
        s->problems_event = NULL; /* nothing is announced any more */
        while (s->n_problems > 0)
                netns_set_problem_drop(s, s->n_problems - 1);
        netns_set_announced_clear(s);
        free(s->problems);
        free(s->leftover);
        netns_set_peers_forget(s);
        for (size_t i = 0; i < s->n_moving; i++)
                moving_done(&s->moving[i]);
        free(s->moving);
        if (s->moving_timer)
                event_free(s->moving_timer);
        if (s->starved_timer)
                event_free(s->starved_timer);
        for (size_t i = 0; i < s->n; i++)
                netns_free(s->items[i]);
        free(s->items);
        for (size_t i = 0; i < s->n_releasing; i++)
                netns_free(s->releasing[i]);
        free(s->releasing);
        netns_set_visible_clear(s);
        free(s->visible);
        if (s->reap_event)
                event_free(s->reap_event);
        if (s->scan_event)
                event_free(s->scan_event);
        netns_set_stop_watching(s);
        if (s->host_fd >= 0)
                close(s->host_fd);
        for (size_t i = 0; s->dirs && i < s->n_dirs; i++)
                free(s->dirs[i]);
        free(s->dirs);
        free(s->wd);
        free(s->state_root);
        policy_set_free(s->policy);
        event_list_done(&s->events);
        free(s);
}
