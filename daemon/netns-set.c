/* netns-set.c — the other network namespaces: scanning the namespace directories, entering each
 * namespace once (setns there, open its sockets and SNMP files, setns back: the daemon has no
 * threads, and nothing but this file ever leaves its own namespace), an engine and a sync for
 * each, their state directories, and letting them go (their originals given back first) when
 * their file goes or no policy names them any more. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "device-lifecycle.h"
#include "log-fields.h"
#include "policy-match.h"
#include "netns-set.h"

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

typedef struct StateDirName {
        uint64_t ino, cookie;
} StateDirName;

struct NetnsSet {
        struct event_base *base;
        Netns *own;
        PolicySet *policy; /* what every namespace runs (the reloader's, a reference) */
        bool started;      /* netns_set_start(): the directories may be looked at */
        NetnsConfig cfg;
        char **dirs;
        size_t n_dirs;
        int *wd; /* inotify watch of each directory; -1 while it does not exist */
        char *state_root;
        int host_fd; /* the daemon's own namespace, to come back to */
        uint64_t nsfs_dev, host_ino;
        int inotify_fd;
        struct event *inotify_event;
        int mountinfo_fd; /* /proc/self/mountinfo: polls as "priority" once for each mount change */
        int mounts_fd;    /* an epoll of that for EPOLLPRI alone: readable only after a change */
        struct event *mounts_event;
        struct event *scan_event; /* one scan per loop iteration, however many events asked */
        bool watching;
        bool scanned;      /* the first scan is done: state directories of gone namespaces went */
        bool logged_limit; /* NETNS_MAX was reached */
        size_t fd_budget;  /* while a scan takes namespaces: descriptors it may still use */
        unsigned n_starved; /* namespaces the last scan left for want of descriptors */
        bool logged_starved;
        struct event *starved_timer; /* tries those again while descriptors may have freed up */
        Netns **items;     /* sorted by name */
        size_t n, cap;
        char **visible; /* every network namespace's name the last scan saw (one per namespace) */
        size_t n_visible;
        Netns **releasing; /* let go, giving back what bigtcpd wrote */
        size_t n_releasing;
        struct event *reap_event; /* frees the released ones, outside their engines' events */
        StateDirName *leftover; /* state directories of an earlier run, not taken yet */
        size_t n_leftover;
        bool read_leftover;
        NetnsProblem *problems; /* those that could not be entered are tried again only after the
                                 * next policy change, so a scan never logs them again */
        size_t n_problems;
        Moving *moving;
        size_t n_moving;
        struct event *moving_timer;

        /* The daemon's events: every namespace's engine forwards its device events here, its own
         * included; EVENT_SETTLED once every namespace has settled. */
        EventList events;
        /* The problems as Monitor and D-Bus were last told (EVENT_NETNS_PROBLEM): compared with
         * the list from the loop after it changes, so that one dropped and added again by the same
         * scan (descriptors) is no news. */
        NetnsProblem *announced;
        size_t n_announced;
        struct event *problems_event;
        /* The daemon owes an EVENT_SETTLED: it starts, runs a new policy, or a reload begins (a
         * namespace entered later settles on its own: no READY=1 for it) */
        bool settle_owed;
        unsigned reloading_watch; /* the set's own list, for EVENT_RELOADING */
        bool settled_once; /* every namespace has, once */
};

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
        return s ? s->n : 0;
}

Netns *netns_set_other_at(const NetnsSet *s, size_t i) {
        return s && i < s->n ? s->items[i] : NULL;
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

        if (!s || !name)
                return NULL;
        i = find_index(s, name, &found);
        return found ? s->items[i] : NULL;
}


/* ---- problems to report ---- */

static const char *const problem_kind_table[_NETNS_PROBLEM_MAX] = {
        [NETNS_PROBLEM_CANNOT_ENTER] = "cannot-enter",
        [NETNS_PROBLEM_DESCRIPTORS] = "descriptors",
        [NETNS_PROBLEM_NOT_RESTORED] = "not-restored",
};

const char *netns_problem_kind_to_string(NetnsProblemKind k) {
        return k >= 0 && k < _NETNS_PROBLEM_MAX ? problem_kind_table[k] : NULL;
}

static bool is_refused(const NetnsSet *s, uint64_t ino) {
        for (size_t i = 0; i < s->n_problems; i++)
                if (s->problems[i].ino == ino && s->problems[i].blocks)
                        return true;
        return false;
}

static void problems_changed(NetnsSet *s) {
        if (s->problems_event)
                event_active(s->problems_event, EV_TIMEOUT, 0);
}

static void problem_drop(NetnsSet *s, size_t i) {
        free(s->problems[i].name);
        memmove(s->problems + i, s->problems + i + 1, (s->n_problems - i - 1) * sizeof(*s->problems));
        s->n_problems--;
        problems_changed(s);
}

static const NetnsProblem *problem_find(const NetnsProblem *l, size_t n, const NetnsProblem *p) {
        for (size_t i = 0; i < n; i++)
                if (l[i].ino == p->ino && l[i].kind == p->kind && !l[i].quiet)
                        return &l[i];
        return NULL;
}

static void announce(NetnsSet *s, const NetnsProblem *p, bool went) {
        event_emit(&s->events, &(Event){.type = EVENT_NETNS_PROBLEM, .netns = p->name,
                                        .problem = netns_problem_kind_to_string(p->kind),
                                        .error = went ? 0 : p->error, .ok = went});
}

static void announced_clear(NetnsSet *s) {
        for (size_t i = 0; i < s->n_announced; i++)
                free(s->announced[i].name);
        free(s->announced);
        s->announced = NULL;
        s->n_announced = 0;
}

/* From the loop, once the list changed: those that went, then those that came, each once. */
static void on_problems_changed(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        NetnsProblem *now = s->n_problems > 0 ? calloc(s->n_problems, sizeof(*now)) : NULL;
        size_t n = 0;

        for (size_t i = 0; i < s->n_announced; i++)
                if (!problem_find(s->problems, s->n_problems, &s->announced[i]))
                        announce(s, &s->announced[i], true);
        for (size_t i = 0; i < s->n_problems; i++) {
                const NetnsProblem *p = &s->problems[i];
                if (p->quiet)
                        continue;
                if (!problem_find(s->announced, s->n_announced, p))
                        announce(s, p, false);
                char *name = now ? strdup(p->name) : NULL;
                if (name)
                        now[n++] = (NetnsProblem){.name = name, .ino = p->ino, .kind = p->kind};
        }
        /* out of memory: what is missing from the copy is announced again, never lost */
        announced_clear(s);
        s->announced = now;
        s->n_announced = n;
}

/* Drop those for which keep() says no. */
static void problems_filter(NetnsSet *s, bool (*keep)(NetnsProblem *p, const void *userdata), const void *userdata) {
        for (size_t i = s->n_problems; i > 0; i--)
                if (!keep(&s->problems[i - 1], userdata))
                        problem_drop(s, i - 1);
}

static void problem_add(NetnsSet *s, NetnsProblemKind kind, const char *name, uint64_t ino, int error,
                        size_t devices, bool blocks) {
        NetnsProblem *t;
        char *copy;

        for (size_t i = 0; i < s->n_problems; i++)
                if (s->problems[i].ino == ino && s->problems[i].kind == kind) {
                        problem_drop(s, i);
                        break;
                }
        if (s->n_problems >= NETNS_MAX || !(copy = strdup(name)))
                return;
        t = realloc(s->problems, (s->n_problems + 1) * sizeof(*t));
        if (!t) {
                free(copy);
                return;
        }
        s->problems = t;
        s->problems[s->n_problems++] = (NetnsProblem){.name = copy, .ino = ino, .kind = kind, .error = error,
                                                      .devices = devices, .blocks = blocks,
                                                      .quiet = kind == NETNS_PROBLEM_CANNOT_ENTER && error == -EMEDIUMTYPE};
        problems_changed(s);
}

size_t netns_set_problem_count(const NetnsSet *s) {
        size_t n = 0;

        for (size_t i = 0; s && i < s->n_problems; i++)
                n += !s->problems[i].quiet;
        return n;
}

const NetnsProblem *netns_set_problem(const NetnsSet *s, size_t i) {
        for (size_t j = 0; s && j < s->n_problems; j++)
                if (!s->problems[j].quiet && i-- == 0)
                        return &s->problems[j];
        return NULL;
}

static bool keep_not_descriptors(NetnsProblem *p, const void *userdata) {
        return p->kind != NETNS_PROBLEM_DESCRIPTORS;
}

static bool keep_other_than(NetnsProblem *p, const void *userdata) {
        const uint64_t *ino = userdata;
        return !(p->kind == NETNS_PROBLEM_NOT_RESTORED && p->ino == *ino);
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
static void read_leftovers(NetnsSet *s) {
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

static bool state_dir_exists(const NetnsSet *s, uint64_t ino) {
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
                problems_filter(s, keep_other_than, &n->id.ino); /* back: what was not restored is tried now */
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
        return s && s->settled_once;
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
        n->forward_watch = event_watch_add(&n->engine->events, on_netns_event, n);
        return n->forward_watch == 0 ? -ENOMEM : 0;
}

/* … and no more (bigtcpd's own, which outlives the set). */
static void leave(Netns *n) {
        sync_set_move_ops(n->sync, NULL, NULL);
        if (n->forward_watch)
                event_watch_remove(&n->engine->events, n->forward_watch);
        n->forward_watch = 0;
        n->set = NULL;
}

static int enter(NetnsSet *s, const char *dir, const char *name, uint64_t ino, Netns **ret) {
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

static int insert(NetnsSet *s, Netns *n) {
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
static void give_up(NetnsSet *s, size_t i, const char *why) {
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
                        give_up(s, i, "no policy names it");
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
        problem_add(s, NETNS_PROBLEM_NOT_RESTORED, what ?: "?", ino, 0, left, true);
        log_warning("netns %s: let go with %zu devices not at their original sizes; their state stays in %s/%s for "
                    "when the namespace is back",
                    what ?: "?", left, s->state_root, name);
}

static void stop_watching(NetnsSet *s);

/* No policy names another namespace, and none is managed, being let go, or has state left. */
static bool nothing_to_look_for(const NetnsSet *s) {
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
        if (nothing_to_look_for(s)) {
                log_debug("netns: no policy names another namespace and none is managed: the namespace directories "
                          "are not watched any more");
                stop_watching(s);
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
        return s ? s->n + 1 : 0;
}

Netns *netns_set_all_at(const NetnsSet *s, size_t i) {
        return !s ? NULL : i == 0 ? s->own : i <= s->n ? s->items[i - 1] : NULL;
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
                     .proven = d->record.proven,
                     .deadline_usec = clock_now(s->cfg.clock, CLOCK_MONOTONIC) + MOVE_WAIT_USEC};
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

/* ---- scanning ---- */

static void watch_dirs(NetnsSet *s) {
        for (size_t i = 0; i < s->n_dirs; i++)
                if (s->wd[i] < 0)
                        /* a directory made later (ip netns makes /run/netns at its first use) is
                         * found by the scan its mount causes */
                        s->wd[i] = inotify_add_watch(s->inotify_fd, s->dirs[i],
                                                     IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                                             IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                                                             IN_ONLYDIR | IN_EXCL_UNLINK);
}

/* Inode → pointer, open addressing: a scan looks up every entry of the directories in it, so
 * that a scan costs O(entries), not O(entries × namespaces). Inode 0 marks a free slot (nsfs
 * never hands it out). */
typedef struct InoMap {
        uint64_t *keys;
        void **values;
        size_t cap, n;
} InoMap;

static size_t ino_slot(const InoMap *m, uint64_t k) {
        size_t i = (size_t) ((k * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);

        while (m->keys[i] != 0 && m->keys[i] != k)
                i = (i + 1) & (m->cap - 1);
        return i;
}

static void *ino_map_get(const InoMap *m, uint64_t k) {
        if (m->cap == 0 || k == 0)
                return NULL;
        size_t i = ino_slot(m, k);
        return m->keys[i] == k ? m->values[i] : NULL;
}

static int ino_map_put(InoMap *m, uint64_t k, void *v) {
        if (k == 0)
                return -EINVAL;
        if ((m->n + 1) * 2 > m->cap) {
                InoMap g = {.cap = m->cap ? m->cap * 2 : 64};
                g.keys = calloc(g.cap, sizeof(*g.keys));
                g.values = calloc(g.cap, sizeof(*g.values));
                if (!g.keys || !g.values) {
                        free(g.keys);
                        free(g.values);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < m->cap; i++)
                        if (m->keys[i]) {
                                size_t j = ino_slot(&g, m->keys[i]);
                                g.keys[j] = m->keys[i];
                                g.values[j] = m->values[i];
                                g.n++;
                        }
                free(m->keys);
                free(m->values);
                *m = g;
        }
        size_t i = ino_slot(m, k);
        if (m->keys[i] == 0)
                m->n++;
        m->keys[i] = k;
        m->values[i] = v;
        return 0;
}

static void ino_map_done(InoMap *m) {
        free(m->keys);
        free(m->values);
        *m = (InoMap){};
}

typedef struct Seen {
        InoMap seen;  /* every namespace the scan found (value: itself, unused) */
        InoMap known; /* the managed ones by inode, from before the scan */
} Seen;

static void seen_add(Seen *v, uint64_t ino) {
        (void) ino_map_put(&v->seen, ino, v);
}

static bool seen_has(const Seen *v, uint64_t ino) {
        return ino_map_get(&v->seen, ino) != NULL;
}

/* After a scan: one that could not be entered and went may come back as another namespace; one let
 * go with devices not restored whose file went may be entered again when it is back. */
static bool keep_seen(NetnsProblem *p, const void *userdata) {
        const Seen *seen = userdata;

        if (seen_has(seen, p->ino))
                return true;
        p->blocks = false;
        return p->kind == NETNS_PROBLEM_NOT_RESTORED;
}

/* The operator's word: those that could not be entered are tried again. */
static bool keep_after_policy_change(NetnsProblem *p, const void *userdata) {
        p->blocks = false;
        return p->kind == NETNS_PROBLEM_NOT_RESTORED;
}


/* One name in a namespace directory: the file of a network namespace (a bind-mount of nsfs) other
 * than the daemon's own. A namespace may have several; a name names one namespace at a time, which
 * a later mount over it may change. */
typedef struct Name {
        const char *dir; /* s->dirs[dir_index] */
        size_t dir_index;
        char *name;
        uint64_t ino;
} Name;

typedef struct Names {
        Name *items;
        size_t n;
} Names;

static void names_done(Names *v) {
        for (size_t i = 0; i < v->n; i++)
                free(v->items[i].name);
        free(v->items);
        *v = (Names){};
}

static void visible_clear(NetnsSet *s) {
        for (size_t i = 0; i < s->n_visible; i++)
                free(s->visible[i]);
        s->n_visible = 0;
}

static void visible_add(NetnsSet *s, const char *name) {
        char **t, *copy;

        if (s->n_visible >= NETNS_MAX || !(copy = strdup(name)))
                return;
        t = realloc(s->visible, (s->n_visible + 1) * sizeof(*t));
        if (!t) {
                free(copy);
                return;
        }
        s->visible = t;
        s->visible[s->n_visible++] = copy;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

size_t netns_set_visible_count(const NetnsSet *s) {
        return s ? s->n_visible : 0;
}

const char *netns_set_visible(const NetnsSet *s, size_t i) {
        return s && i < s->n_visible ? s->visible[i] : NULL;
}

static void scan_dir(NetnsSet *s, size_t dir_index, Names *out) {
        _cleanup_(closep) int fd = open(s->dirs[dir_index], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;

        if (fd < 0)
                return;
        d = fdopendir(dup(fd));
        if (!d)
                return;
        while ((de = readdir(d))) {
                struct stat st;
                char *name;

                if (!netns_name_is_valid(de->d_name))
                        continue;
                /* a namespace's file is a bind-mount of nsfs; before the mount it is an empty file */
                if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || (uint64_t) st.st_dev != s->nsfs_dev ||
                    (uint64_t) st.st_ino == s->host_ino)
                        continue;
                Name *t = realloc(out->items, (out->n + 1) * sizeof(*t));
                if (!t)
                        break;
                out->items = t;
                if (!(name = strdup(de->d_name)))
                        break;
                t[out->n++] = (Name){.dir = s->dirs[dir_index], .dir_index = dir_index, .name = name,
                                     .ino = st.st_ino};
        }
        closedir(d);
}

static int cmp_name(const void *a, const void *b) {
        const Name *x = a, *y = b;
        int c = strcmp(x->name, y->name);

        return c != 0 ? c : x->dir_index < y->dir_index ? -1 : x->dir_index > y->dir_index;
}

static int cmp_ino(const void *a, const void *b) {
        const Name *x = a, *y = b;

        return x->ino < y->ino ? -1 : x->ino > y->ino ? 1 : cmp_name(a, b);
}

/* Every name of every directory, each once, sorted by name: where two directories have one, the
 * first directory's (whose file enter() and netns_set_peek() open). */
static void collect(NetnsSet *s, Names *v) {
        size_t k = 0;

        for (size_t i = 0; i < s->n_dirs; i++)
                scan_dir(s, i, v);
        if (v->n > 1)
                qsort(v->items, v->n, sizeof(*v->items), cmp_name);
        for (size_t i = 0; i < v->n; i++) {
                if (k > 0 && streq_ptr(v->items[k - 1].name, v->items[i].name)) {
                        free(v->items[i].name); /* a later directory's */
                        continue;
                }
                v->items[k++] = v->items[i];
        }
        v->n = k;
}

/* The namespace a name names now (collect()'s order), or 0. */
static uint64_t named(const Names *v, const char *name) {
        size_t lo = 0, hi = v->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(v->items[mid].name, name);
                if (c == 0)
                        return v->items[mid].ino;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return 0;
}

/* Of the `n` names of one namespace (sorted), the one it goes by: that of the Netns `known` that
 * has it (managed, or being let go) while it is one of them; else the first a policy takes, so
 * that whatever order a directory lists them in, a namespace any of whose names a policy takes
 * is managed; else the first. */
static const Name *pick_name(const NetnsSet *s, const Name *names, size_t n, const Netns *known) {
        for (size_t i = 0; known && i < n; i++)
                if (streq_ptr(names[i].name, known->id.name))
                        return &names[i];
        for (size_t i = 0; i < n; i++)
                if (policy_set_takes_netns(s->policy, names[i].name))
                        return &names[i];
        return &names[0];
}

/* The names by namespace (sorted by inode, v reordered): each namespace once in the visible names
 * (under pick_name()) and in `seen`; those not known yet that a policy takes (or that have state
 * of an earlier run) into `found`, when it is given. */
static void by_namespace(NetnsSet *s, Names *v, Seen *seen, Names *found) {
        if (v->n > 1)
                qsort(v->items, v->n, sizeof(*v->items), cmp_ino);
        for (size_t i = 0, j; i < v->n; i = j) {
                uint64_t ino = v->items[i].ino;
                Netns *known = ino_map_get(&seen->known, ino);

                for (j = i + 1; j < v->n && v->items[j].ino == ino; j++)
                        ;
                const Name *pick = pick_name(s, v->items + i, j - i, known);
                seen_add(seen, ino);
                visible_add(s, pick->name);
                if (!found || known)
                        continue;
                if (!policy_set_takes_netns(s->policy, pick->name) && !state_dir_exists(s, ino))
                        continue;
                if (is_refused(s, ino))
                        continue;
                Name *t = realloc(found->items, (found->n + 1) * sizeof(*t));
                if (!t)
                        break;
                found->items = t;
                t[found->n] = *pick;
                t[found->n].name = strdup(pick->name);
                if (t[found->n].name)
                        found->n++;
        }
}

/* ---- descriptors: each namespace holds NETNS_FDS of them for as long as it is managed; the
 * namespaces never take the last FDS_RESERVE of RLIMIT_NOFILE, which stay for root's control
 * connections, the state files and the workers. A namespace left for want of them is tried again
 * when a namespace goes, and every STARVED_RETRY_SEC while some wait. ---- */

#define FDS_RESERVE 64u
#define STARVED_RETRY_SEC 5

static int count_open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d)))
                n += de->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

/* What the namespaces taken by this scan may use: the soft limit less what is open and the
 * reserve (SIZE_MAX when that cannot be told: then EMFILE itself says it). */
static size_t fd_budget(void) {
        struct rlimit rl;
        int open_now = count_open_fds();

        if (open_now < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                return SIZE_MAX;
        if (rl.rlim_cur <= (rlim_t) open_now + FDS_RESERVE)
                return 0;
        return (size_t) (rl.rlim_cur - (rlim_t) open_now - FDS_RESERVE);
}

static void starve(NetnsSet *s, const char *name, uint64_t ino) {
        struct rlimit rl = {};

        s->n_starved++;
        problem_add(s, NETNS_PROBLEM_DESCRIPTORS, name, ino, -EMFILE, 0, false);
        if (s->logged_starved)
                return;
        s->logged_starved = true;
        (void) getrlimit(RLIMIT_NOFILE, &rl);
        log_warning("netns %s: not managed for now: its %u descriptors would leave fewer than %u of bigtcpd's "
                    "%llu (RLIMIT_NOFILE) free; it is tried again when descriptors free up (raise LimitNOFILE= "
                    "of bigtcpd.service)",
                    name, NETNS_FDS, FDS_RESERVE, (unsigned long long) rl.rlim_cur);
}

static void on_starved_timer(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

static void take(NetnsSet *s, const Name *c) {
        Netns *n = NULL;
        int r;

        if (netns_set_find(s, c->name))
                return; /* one that could not be let go (out of memory) keeps its name */
        if (s->n >= NETNS_MAX) {
                if (!s->logged_limit)
                        log_warning("netns %s: already managing %u namespaces; leaving the others alone", c->name,
                                    NETNS_MAX);
                s->logged_limit = true;
                return;
        }
        if (s->fd_budget < NETNS_FDS) {
                starve(s, c->name, c->ino);
                return;
        }
        r = enter(s, c->dir, c->name, c->ino, &n);
        if (r == -ENOENT)
                return; /* gone again */
        if (r == -EMFILE || r == -ENFILE) {
                s->fd_budget = 0; /* the count was wrong: nothing more this scan */
                starve(s, c->name, c->ino);
                return;
        }
        if (s->fd_budget != SIZE_MAX)
                s->fd_budget -= NETNS_FDS;
        if (r < 0) {
                problem_add(s, NETNS_PROBLEM_CANNOT_ENTER, c->name, c->ino, r, 0, true);
                if (r == -EPERM)
                        log_error_errno(r, "netns %s: failed to enter it: %m; bigtcpd needs CAP_SYS_ADMIN for other "
                                           "namespaces (see NETWORK NAMESPACES in bigtcpd(8))",
                                        c->name);
                else if (r != -EMEDIUMTYPE) /* not a network namespace: nothing to say */
                        log_warning_errno(r, "netns %s: failed to enter it: %m; ignoring", c->name);
                return;
        }
        if (insert(s, n) < 0) {
                netns_free(n);
                return;
        }
        n->seen = true;
        log_info("netns %s: managing it (%s/%s)", n->id.name, c->dir, n->id.name);
}

/* ---- read-only looks (Plan's): one socket, for a moment, in a namespace not entered ---- */

void netns_set_look(NetnsSet *s) {
        Names names = {};
        Seen seen = {};

        if (!s || s->watching)
                return; /* the scans keep the names */
        visible_clear(s);
        collect(s, &names);
        by_namespace(s, &names, &seen, NULL);
        if (s->n_visible > 1)
                qsort(s->visible, s->n_visible, sizeof(*s->visible), cmp_names);
        names_done(&names);
        ino_map_done(&seen.seen);
        ino_map_done(&seen.known);
}

int netns_set_peek(NetnsSet *s, const char *name, int *ret_fd, uint64_t *ret_ino, uint64_t *ret_cookie) {
        if (!s || !netns_name_is_valid(name))
                return -ENOENT;
        /* its file and the socket, for a moment: never out of the reserve */
        if (fd_budget() < 2)
                return -EMFILE;
        for (size_t i = 0; i < s->n_dirs; i++) {
                _cleanup_(freep) char *path = NULL;
                _cleanup_(closep) int fd = -1;
                struct stat st;
                int r;

                if (asprintf(&path, "%s/%s", s->dirs[i], name) < 0)
                        return -ENOMEM;
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
                if (fd < 0 && (errno == EMFILE || errno == ENFILE))
                        return -errno;
                if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t) st.st_dev != s->nsfs_dev ||
                    (uint64_t) st.st_ino == s->host_ino)
                        continue; /* not here, not mounted (yet), or the daemon's own */
                r = netns_peek_socket(fd, s->host_fd, st.st_dev, st.st_ino, ret_fd, ret_cookie);
                if (r >= 0)
                        *ret_ino = st.st_ino;
                return r;
        }
        return -ENOENT;
}

/* State directories of namespaces not visible at start: the namespace may live on without a
 * file here (a bind-mount elsewhere, a later mount, another --netns-dir), and nothing tells a
 * gone one from that but a namespace that has its inode with another cookie (prepare_state_dir).
 * They stay, and are used when their namespace appears. */
static void log_unseen_state(NetnsSet *s, const Seen *seen) {
        for (size_t i = 0; i < s->n_leftover; i++)
                if (!seen_has(seen, s->leftover[i].ino))
                        log_info("netns: the namespace of inode %" PRIu64 " (cookie %" PRIu64 ") that bigtcpd wrote "
                                 "to before is not in the namespace directories; keeping its state for when it is",
                                 s->leftover[i].ino, s->leftover[i].cookie);
}

static void scan(NetnsSet *s) {
        Names found = {};
        Names names = {};
        Seen seen = {};

        watch_dirs(s);
        collect(s, &names);
        /* a managed one is there while its name names it: a name that names another namespace now
         * (a mount over it) is that one's, and the one it named goes as when its file goes (while
         * it is let go, another name of it does not enter it again) */
        for (size_t i = 0; i < s->n; i++) {
                Netns *n = s->items[i];
                n->seen = named(&names, n->id.name) == n->id.ino;
                (void) ino_map_put(&seen.known, n->id.ino, n);
        }
        /* one being let go is not entered again before that is done (a scan follows) */
        for (size_t i = 0; i < s->n_releasing; i++)
                (void) ino_map_put(&seen.known, s->releasing[i]->id.ino, s->releasing[i]);
        /* those that went first: a name deleted and made again is a new namespace */
        for (size_t i = s->n; i > 0; i--)
                if (!s->items[i - 1]->seen)
                        give_up(s, i - 1,
                                named(&names, s->items[i - 1]->id.name) ? "its name names another namespace now"
                                                                         : "its file is gone");
        visible_clear(s);
        by_namespace(s, &names, &seen, &found);
        names_done(&names);
        if (s->n_visible > 1)
                qsort(s->visible, s->n_visible, sizeof(*s->visible), cmp_names);
        s->n_starved = 0;
        problems_filter(s, keep_not_descriptors, NULL);
        s->fd_budget = found.n > 0 ? fd_budget() : 0;
        for (size_t i = 0; i < found.n; i++)
                take(s, &found.items[i]);
        names_done(&found);
        if (s->n_starved > 0)
                evtimer_add(s->starved_timer, &(struct timeval){.tv_sec = STARVED_RETRY_SEC});
        else {
                if (s->logged_starved)
                        log_info("netns: no namespace waits for descriptors any more");
                s->logged_starved = false;
                evtimer_del(s->starved_timer);
        }
        problems_filter(s, keep_seen, &seen);
        if (!s->scanned)
                log_unseen_state(s, &seen);
        s->scanned = true;
        ino_map_done(&seen.seen);
        ino_map_done(&seen.known);
}

static void on_scan(evutil_socket_t fd, short what, void *userdata) {
        scan(userdata);
}

static void on_inotify(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        for (;;) {
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k <= 0)
                        break;
                for (char *p = buf; p < buf + k;) {
                        const struct inotify_event *ev = (const struct inotify_event *) p;
                        if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))
                                for (size_t i = 0; i < s->n_dirs; i++)
                                        if (s->wd[i] == ev->wd) {
                                                if (!(ev->mask & IN_IGNORED))
                                                        (void) inotify_rm_watch(s->inotify_fd, ev->wd);
                                                s->wd[i] = -1;
                                        }
                        p += sizeof(*ev) + ev->len;
                }
        }
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

/* The mount table polls as readable always, and as "priority, error" once after each change
 * (its poll consumes the change). libevent asks only for readable, so the mount table is watched
 * through an epoll of its own that asks for EPOLLPRI alone: that one is readable once per change
 * and rests otherwise. Whoever polls first consumes the change (the loop's poll of the inner
 * epoll, here), so the inner epoll_wait() may report nothing: it only drains. */
static void on_mounts(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        struct epoll_event ev[4];

        while (epoll_wait(s->mounts_fd, ev, ELEMENTSOF(ev), 0) > 0)
                ;
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

static int watch_mounts(NetnsSet *s) {
        struct epoll_event ev = {.events = EPOLLPRI};

        s->mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        if (s->mountinfo_fd < 0)
                return -errno;
        s->mounts_fd = epoll_create1(EPOLL_CLOEXEC);
        if (s->mounts_fd < 0)
                return -errno;
        if (epoll_ctl(s->mounts_fd, EPOLL_CTL_ADD, s->mountinfo_fd, &ev) < 0)
                return -errno;
        s->mounts_event = event_new(s->base, s->mounts_fd, EV_READ | EV_PERSIST, on_mounts, s);
        if (!s->mounts_event || event_add(s->mounts_event, NULL) < 0)
                return -ENOMEM;
        return 0;
}

static void stop_watching(NetnsSet *s) {
        if (s->inotify_event)
                event_free(s->inotify_event);
        if (s->mounts_event)
                event_free(s->mounts_event);
        s->inotify_event = s->mounts_event = NULL;
        s->inotify_fd = safe_close(s->inotify_fd);
        s->mounts_fd = safe_close(s->mounts_fd);
        s->mountinfo_fd = safe_close(s->mountinfo_fd);
        for (size_t i = 0; i < s->n_dirs; i++)
                s->wd[i] = -1;
        visible_clear(s); /* not known any more */
        s->watching = false;
}

static int start_watching(NetnsSet *s) {
        int r;

        if (s->watching)
                return 0;
        s->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (s->inotify_fd < 0)
                return -errno;
        s->inotify_event = event_new(s->base, s->inotify_fd, EV_READ | EV_PERSIST, on_inotify, s);
        if (!s->inotify_event || event_add(s->inotify_event, NULL) < 0) {
                stop_watching(s);
                return -ENOMEM;
        }
        r = watch_mounts(s);
        if (r == -ENOMEM) {
                stop_watching(s);
                return r;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to watch /proc/self/mountinfo: %m; namespaces are found when their "
                                     "files appear, not when they are mounted");
                if (s->mounts_event)
                        event_free(s->mounts_event);
                s->mounts_event = NULL;
                s->mounts_fd = safe_close(s->mounts_fd);
                s->mountinfo_fd = safe_close(s->mountinfo_fd);
        }
        s->watching = true;
        return 0;
}

/* The namespaces the policy names, and those with state of an earlier run: looked for once the
 * set has started, after every policy change. */
static void look_for_namespaces(NetnsSet *s) {
        int r;

        if (!s->read_leftover) {
                read_leftovers(s);
                s->read_leftover = true;
        }
        if (nothing_to_look_for(s)) {
                /* the directories are not even watched */
                if (s->watching)
                        log_debug("netns: no policy names another namespace: the namespace directories are not "
                                  "watched any more");
                stop_watching(s);
                return;
        }
        r = start_watching(s);
        if (r < 0)
                log_error_errno(r, "Failed to watch the namespace directories: %m; other namespaces are not managed");
        else
                scan(s);
}

/* ReloaderOps.run: every namespace, bigtcpd's own as any other, runs `set`. */
static void run_policy(void *userdata, PolicySet *set) {
        NetnsSet *s = userdata;
        PolicySet *old = s->policy;

        s->policy = policy_set_ref(set);
        s->settle_owed = true; /* READY=1 once every namespace runs it */
        problems_filter(s, keep_after_policy_change, NULL);
        for (size_t i = 0; i < netns_set_all_count(s); i++)
                netns_run_policy(netns_set_all_at(s, i), set, true);
        policy_set_free(old);
        check_settled(s); /* every namespace may have it already (none has to write) */
        if (s->started)
                look_for_namespaces(s);
}

/* ReloaderOps.unchanged: a refused forced reload settles as soon as every namespace has. */
static void policy_unchanged(void *userdata) {
        check_settled(userdata);
}

const ReloaderOps netns_set_reloader_ops = {.run = run_policy, .unchanged = policy_unchanged};

void netns_set_start(NetnsSet *s) {
        s->started = true;
        check_settled(s);
        look_for_namespaces(s);
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
        s->host_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (s->host_fd < 0 || fstat(s->host_fd, &st) < 0) {
                int r = -errno;
                netns_set_free(s);
                return r;
        }
        s->nsfs_dev = st.st_dev;
        s->host_ino = st.st_ino;
        s->scan_event = event_new(base, -1, 0, on_scan, s);
        s->moving_timer = evtimer_new(base, on_moving_timer, s);
        s->starved_timer = evtimer_new(base, on_starved_timer, s);
        s->reap_event = event_new(base, -1, 0, on_reap, s);
        s->problems_event = event_new(base, -1, 0, on_problems_changed, s);
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

void netns_set_free(NetnsSet *s) {
        if (!s)
                return;
        if (s->own && s->own->set == s)
                leave(s->own);
        if (s->problems_event)
                event_free(s->problems_event);
        s->problems_event = NULL; /* nothing is announced any more */
        while (s->n_problems > 0)
                problem_drop(s, s->n_problems - 1);
        announced_clear(s);
        free(s->problems);
        free(s->leftover);
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
        visible_clear(s);
        free(s->visible);
        if (s->reap_event)
                event_free(s->reap_event);
        if (s->scan_event)
                event_free(s->scan_event);
        stop_watching(s);
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
