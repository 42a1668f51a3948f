/* netns-set.h — the network namespaces other than the daemon's own. They are found under the
 * namespace directories (inotify on them, and the mount table for the bind-mount that makes a
 * file there a namespace), entered once each to open what the daemon needs inside (its rtnetlink
 * sockets, its SNMP files), run each by an engine, a sync and a state directory of their own,
 * and let go when their file goes or no policy names them (what bigtcpd wrote given back first:
 * its sockets keep the namespace alive until then). The daemon's own namespace is the set's first
 * entry (the manager makes it, with the same constructor). Above them all, the set gives every
 * namespace alike the running policy (the reloader's, through netns_set_reloader_ops) and holds
 * the daemon's events: every namespace's device events, the policy's (reload, try) and
 * EVENT_SETTLED once every namespace has settled. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "netns.h"
#include "policy-reload.h"

/* Where namespaces are looked for when no --netns-dir is given. */
#define NETNS_DIRS_DEFAULT {"/run/netns", "/run/docker/netns"}
#define NETNS_DIRS_MAX 16u
/* The most namespaces managed at once; more are logged once and left alone. */
#define NETNS_MAX 8192u
/* The descriptors one namespace holds while it is managed: its three rtnetlink sockets (events,
 * writes, statistics; the ioctls go through the events one, which also names the namespace when
 * its evidence asks for a packet socket there), its three SNMP files and its state directory (a
 * watched device's socket is one more, of at most EVIDENCE_WATCHED_MAX). */
#define NETNS_FDS 7u


typedef struct NetnsConfig {
        /* What every namespace's engine shares with bigtcpd's own (the host as policies see it,
         * the packet sockets' helpers; netns.c fills in each one's paths), and their clock */
        EngineConfig engine;
        const Clock *clock;
        char *const *dirs; /* NULL: NETNS_DIRS_DEFAULT */
        size_t n_dirs;
        const char *runtime_dir; /* namespaces' state in <runtime_dir>/netns/<inode> */
        int netlink_rcvbuf;
        uint64_t verify_interval_usec;
} NetnsConfig;

/* What keeps a namespace a policy names (or one with state of an earlier run) from being
 * managed as it should. */
typedef enum NetnsProblemKind {
        NETNS_PROBLEM_CANNOT_ENTER, /* setns or its sockets failed (EPERM: no CAP_SYS_ADMIN); tried
                                     * again after the next policy change */
        NETNS_PROBLEM_DESCRIPTORS,  /* waits for free descriptors (RLIMIT_NOFILE) */
        NETNS_PROBLEM_NOT_RESTORED, /* let go with devices not at their originals: its state is kept */
        _NETNS_PROBLEM_MAX,
        _NETNS_PROBLEM_INVALID = -EINVAL,
} NetnsProblemKind;

typedef struct NetnsProblem {
        char *name;
        uint64_t ino;
        NetnsProblemKind kind;
        int error;      /* CANNOT_ENTER: what failed (negative errno) */
        size_t devices; /* NOT_RESTORED: how many */
        bool blocks;    /* not entered again while it is there (until the next policy change) */
        bool quiet;     /* not a problem to report (a file there that is no network namespace) */
} NetnsProblem;

const char *netns_problem_kind_to_string(NetnsProblemKind k);

/* `own` is the daemon's own namespace, the set's first entry (made by the caller, which frees it
 * after the set). Devices that move between any two namespaces of the set keep their records. */
int netns_set_new(struct event_base *base, const NetnsConfig *cfg, Netns *own, NetnsSet **ret);
/* A set of bigtcpd's own namespace alone (netns_new_played()'s, the unit tests' and the
 * fuzzers'), which names no directory: it opens no descriptor, and looks for, enters and peeks
 * into no other namespace. */
int netns_set_new_alone(struct event_base *base, Netns *own, NetnsSet **ret);
void netns_set_free(NetnsSet *s);

/* The daemon's events, which Monitor, D-Bus, sd_notify, reload and try watch and emit on:
 * the device events of every namespace, EVENT_SETTLED once every namespace's engine has settled
 * after one of them did (its first sync, a reload, a namespace entered or let go). */
EventList *netns_set_events(NetnsSet *s);
/* Every namespace has settled once: the daemon is ready (READY=1 was owed). */
bool netns_set_ready(const NetnsSet *s);

/* What the reloader gives the running policy to (userdata: the set). A new policy (or the first):
 * every namespace runs it, bigtcpd's own as every other, one reference each, and once started the
 * directories are scanned for namespaces it names. Namespaces with a state directory of an
 * earlier run are entered whatever the policy says, so that their originals can go back. */
extern const ReloaderOps netns_set_reloader_ops;
/* Once bigtcpd's own namespace has started (a policy runs): the other namespaces are looked for. */
void netns_set_start(NetnsSet *s);
/* The observer could not load after all: the namespaces found from now on count evidence with
 * packet sockets `k` (engine_observer_gone()); `why` borrowed. Before netns_set_start(). */
void netns_set_observer_gone(NetnsSet *s, EvidenceSockets *k, const char *why);

/* The problems to report, in the order they arose; at most NETNS_MAX. */
size_t netns_set_problem_count(const NetnsSet *s);
const NetnsProblem *netns_set_problem(const NetnsSet *s, size_t i);

/* Every namespace bigtcpd runs, for i < netns_set_all_count(): its own first, then the others by name
 * (netns_set_other_at(s, i - 1)). */
size_t netns_set_all_count(const NetnsSet *s);
Netns *netns_set_all_at(const NetnsSet *s, size_t i);

/* The names of every network namespace in the directories as the last scan saw them, sorted, one
 * per namespace, managed or not (none while the directories are not watched). */
size_t netns_set_visible_count(const NetnsSet *s);
const char *netns_set_visible(const NetnsSet *s, size_t i);

/* While the directories are not watched (no policy in force names another namespace), read the
 * names in them now, for netns_set_visible(); while they are, the scans keep those. */
void netns_set_look(NetnsSet *s);

/* A read-only look into the namespace of the file `name` under the directories (not entered by
 * the set, or entered: it does not matter): one NETLINK_ROUTE socket made in it, for the caller
 * to close, and the namespace's inode and cookie. -ENOENT when there is no such namespace (any
 * more); -EMFILE when the socket would take one of the descriptors kept for root's control
 * connections; -EPERM without CAP_SYS_ADMIN; -EMEDIUMTYPE when it is no network namespace. */
int netns_set_peek(NetnsSet *s, const char *name, int *ret_fd, uint64_t *ret_ino, uint64_t *ret_cookie);

/* The managed namespaces other than bigtcpd's own, sorted by name. */
size_t netns_set_others_count(const NetnsSet *s);
Netns *netns_set_other_at(const NetnsSet *s, size_t i);
Netns *netns_set_find(const NetnsSet *s, const char *name);

/* Is `name` a file name a namespace may have under the directories (printable ASCII, no blank,
 * not hidden, not "host")? Others are not looked at. */
bool netns_name_is_valid(const char *name);
