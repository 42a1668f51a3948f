/* netns-set-internal.h — what the files of the namespace set share, and nothing outside them
 * includes: the set itself (netns-set.c: one namespace's join and entry, letting go, devices
 * moving between namespaces, start/new/free), its scanning of the namespace directories
 * (netns-set-scan.c: inotify and the mount table, the names, the descriptor budget, the read-only
 * looks), the problems it reports (netns-set-problem.c) and devices' peers across namespaces
 * (netns-set-peer.c). */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "netns-set.h"

/* A device that left a namespace for another one (netns-set.c). */
typedef struct Moving Moving;

/* A state directory an earlier run left: <runtime_dir>/netns/<inode>-<cookie>. */
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

        /* netns-set-peer.c: the nsids namespaces give each other, as the kernel answered */
        struct PeerNsid *peer_nsids;
        size_t n_peer_nsids;
};

/* ---- netns-set.c ---- */

/* Enter the namespace of the file `dir`/`name` (inode `ino`): its sockets opened there, its state
 * directory taken, the running policy given, its originals of an earlier run loaded. */
int netns_set_enter(NetnsSet *s, const char *dir, const char *name, uint64_t ino, Netns **ret);
/* Into the managed ones, sorted by name; -EEXIST when one has the name. */
int netns_set_insert(NetnsSet *s, Netns *n);
/* Let the managed one at `i` go, its originals given back first; `why` is for the log. */
void netns_set_give_up(NetnsSet *s, size_t i, const char *why);
/* Whether an earlier run left a state directory for inode `ino`. */
bool netns_set_state_dir_exists(const NetnsSet *s, uint64_t ino);
/* The state directories an earlier run left, read once before the first scan. */
void netns_set_read_leftovers(NetnsSet *s);
/* No policy names another namespace, and none is managed, being let go, or has state left. */
bool netns_set_nothing_to_look_for(const NetnsSet *s);

/* ---- netns-set-scan.c ---- */

/* Forget the names the last scan saw. */
void netns_set_visible_clear(NetnsSet *s);
/* Stop watching the namespace directories and the mount table. */
void netns_set_stop_watching(NetnsSet *s);
/* The scan_event's callback: one scan (userdata: the set). */
void netns_set_on_scan(evutil_socket_t fd, short what, void *userdata);
/* The starved_timer's callback: a scan, for namespaces left for want of descriptors. */
void netns_set_on_starved_timer(evutil_socket_t fd, short what, void *userdata);
/* Watch and scan the directories when a policy names another namespace (or state is left), stop
 * watching them when none does: after every policy change once the set has started. */
void netns_set_look_for_namespaces(NetnsSet *s);

/* ---- netns-set-peer.c ---- */

/* What each engine of the set finds a device's peer with (userdata: the set). */
extern const PeerOps netns_set_peer_ops;
/* A namespace came or goes: the nsids known go (a gone namespace's may be given to the next). */
void netns_set_peers_forget(NetnsSet *s);

/* ---- netns-set-problem.c ---- */

/* Whether a problem of inode `ino` keeps it from being entered until the operator's next word. */
bool netns_set_is_refused(const NetnsSet *s, uint64_t ino);
/* Drop the problem at `i` (announced from the loop). */
void netns_set_problem_drop(NetnsSet *s, size_t i);
/* Forget the problems as Monitor and D-Bus were last told. */
void netns_set_announced_clear(NetnsSet *s);
/* The problems_event's callback: those that went, then those that came, each announced once. */
void netns_set_on_problems_changed(evutil_socket_t fd, short what, void *userdata);
/* Drop the problems for which keep() says no. */
void netns_set_problems_filter(NetnsSet *s, bool (*keep)(NetnsProblem *p, const void *userdata),
                               const void *userdata);
/* Record a problem of a namespace (replacing one of the same kind for its inode); `blocks` keeps it
 * from being entered again until the operator's next word. */
void netns_set_problem_add(NetnsSet *s, NetnsProblemKind kind, const char *name, uint64_t ino, int error,
                           size_t devices, bool blocks);
/* netns_set_problems_filter() keeps: all but those of descriptors (a scan finds those again). */
bool netns_set_keep_not_descriptors(NetnsProblem *p, const void *userdata);
/* netns_set_problems_filter() keeps: all but the not-restored one of inode *(const uint64_t *) userdata. */
bool netns_set_keep_other_than(NetnsProblem *p, const void *userdata);
/* netns_set_problems_filter() keeps after a policy change: what was not restored (no longer blocking). */
bool netns_set_keep_after_policy_change(NetnsProblem *p, const void *userdata);
