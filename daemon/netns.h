/* netns.h — one network namespace as bigtcpd runs it: its rtnetlink sockets (events and
 * dumps, writes, statistics), its SNMP files, the engine that decides for its devices and the
 * sync that keeps that engine's table the kernel's, and its state directory. The daemon's own
 * namespace and every other one are made by the one constructor here; only a namespace other
 * than the daemon's own is entered (setns there, open, setns back: the daemon has no threads,
 * and nothing but this file ever leaves its own namespace). What the set of them does (finding
 * them, letting them go, devices moving between them) is netns-set.c's. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "counters.h"
#include "engine.h"
#include "netlink.h"
#include "sync.h"

typedef struct NetnsSet NetnsSet;

typedef struct Netns {
        NetnsId id; /* first: devices point to it (only those of namespaces not the daemon's own) */
        bool own;   /* the daemon's own: its devices carry no NetnsId, its SNMP files are /proc/net */
        Netlink *nl;
        Engine *engine;
        Sync *sync;
        SnmpFiles snmp;
        char *state_dir;
        PolicySet *policy; /* what its engine runs (a reference; lent to the engine) */
        bool started;      /* its first sync began */

        /* The set's (netns-set.c) */
        NetnsSet *set;
        unsigned forward_watch;
        bool seen; /* by the scan that runs */
        /* Let go: its file went, or no policy names it and bigtcpd holds nothing of it. What bigtcpd
         * wrote goes back first (its sockets keep the namespace and its devices alive meanwhile);
         * it is out of the set's list from then on. */
        bool releasing;
        bool released; /* … and that is done (freed from the loop, not from its own event) */
        struct event *release_timer;
} Netns;

typedef struct NamespaceConfig {
        /* The namespace: an nsfs file of it open in `fd`, with the daemon's own in `home_fd` to
         * come back to, its file name and the dev/inode of its file; fd -1 for the daemon's own. */
        int fd, home_fd;
        const char *name;
        uint64_t dev, ino;
        /* The state: the daemon's own keeps it in `runtime_dir`, another namespace in
         * <runtime_dir>/netns/<inode>-<cookie> (made by the caller). */
        const char *runtime_dir;
        /* The host as policies see it, shared by every namespace, and the helpers that make and
         * close every namespace's packet sockets (NULL: none counted). The engine's paths, its
         * namespace and the namespace's descriptor for its packet sockets are filled in here. */
        EngineConfig engine;
        const Clock *clock;
        int netlink_rcvbuf;
        uint64_t verify_interval_usec;
} NamespaceConfig;

/* -ENOENT: the file is not that namespace any more; -EMEDIUMTYPE: not a network namespace;
 * -EPERM: no CAP_SYS_ADMIN to enter it; -EMFILE: out of descriptors. */
int netns_new(struct event_base *base, const NamespaceConfig *cfg, Netns **ret);
/* bigtcpd's own namespace run by an engine and a sync the caller made on a kernel it plays (the
 * unit tests' and the fuzzers': their WriterTransport, the messages they feed sync_netlink_ops):
 * no socket or file is opened, no namespace entered. Both are taken, also when this fails
 * (netns_free() frees them); its state directory is the engine's runtime directory. */
int netns_new_played(Engine *e, Sync *s, Netns **ret);
void netns_free(Netns *n);

/* A read-only look into another namespace (Plan's, of one bigtcpd has not entered): one
 * NETLINK_ROUTE socket made in it, non-blocking and close-on-exec, and nothing else kept of it;
 * its cookie (0 before Linux 5.14). The namespace is that of `fd`, the file of dev/ino; `home_fd`
 * is the daemon's own to come back to. Errors as netns_new's. */
int netns_peek_socket(int fd, int home_fd, uint64_t dev, uint64_t ino, int *ret_fd, uint64_t *ret_cookie);
DEFINE_TRIVIAL_CLEANUP_FUNC(Netns *, netns_free);

/* The namespace runs `set` from now on (a reference taken; nothing when it runs it already).
 * Once started, its engine owes a settle, and with `verify` every link is read again, so that it
 * reconciles against what the kernel holds now rather than at the last event. */
void netns_run_policy(Netns *n, PolicySet *set, bool verify);
/* Its first sync, with the state an earlier run recorded (taken). A policy runs already. */
void netns_start(Netns *n, StateEntry *entries, size_t n_entries);

/* "<inode>-<cookie>", the name of another namespace's state directory. */
void netns_state_dir_name(uint64_t ino, uint64_t cookie, char buf[static 48]);

/* The namespace a device lives in (NULL for one of the daemon's own). */
static inline Netns *netns_of_device(const Device *d) {
        return (Netns *) d->netns; /* NetnsId is Netns's first member */
}
