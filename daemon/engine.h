/* engine.h — the decision engine of one network namespace: its device table, the policy it runs
 * (lent), the writer, the probation set, the rollouts, the state store and the events. It is
 * data plus construction; the decisions live in apply.c and device-lifecycle.c, the kernel's side in
 * sync.c. Lower parts reach back up only through the ops structs given here (WriterOps,
 * ProbationOps) and through events. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "auto-queue.h"
#include "device.h"
#include "event.h"
#include "evidence.h"
#include "policy.h"
#include "probation.h"
#include "rollout.h"
#include "state.h"
#include "writer.h"

typedef struct EngineConfig {
        const char *runtime_dir; /* the state file */
        const char *proc_net;    /* the namespace's SNMP files; "/proc/net" */
        const SnmpFiles *snmp;   /* instead: opened in another namespace (netns-set.c); NULL: proc_net */
        const char *hostname;    /* for scoping policies (plan) */
        const char *kernel_release;
        const char *machine_id; /* for cohorts (rollout.hosts-percent); NULL: the hostname */
        const NetnsId *netns;   /* the namespace (match.netns, logs, IPC); NULL: the daemon's own */
        /* count the big packets of watched devices with real packet sockets (evidence.h), made by
         * these helpers (shared by every namespace) in the namespace of the socket `netns_socket`
         * (-1: the daemon's own; kept open by its owner). NULL in the tests and fuzzers, whose
         * devices are not the host's: a socket bound to ifindex 2 there would watch the host's own
         * device */
        EvidenceSockets *packet_sockets;
        int netns_socket;
        /* the eBPF observer (observer.h), every namespace's, in place of packet sockets; NULL:
         * none, and `observer_why` says why (status) */
        Observer *observer;
        const char *observer_why;
        /* Called as each engine's first sync ends, before it applies anything: what the daemon
         * began at its start and every engine needs (the observer's load) goes on while the state
         * file is read and the kernel's devices are dumped, and is waited for here. < 0: the
         * daemon stops, and the engine applies nothing. NULL: nothing to wait for. */
        int (*settle)(void *userdata);
        void *settle_userdata;
} EngineConfig;

/* The observer could not load after all: packet sockets `k` in its place, `why` (borrowed) said. */
static inline void engine_config_without_observer(EngineConfig *c, EvidenceSockets *k, const char *why) {
        c->observer = NULL;
        c->observer_why = why;
        c->packet_sockets = k;
}

struct Engine;

/* A device's peer (a veth's other end) in a namespace bigtcpd runs, and that namespace's engine. */
typedef struct DevicePeer {
        struct Engine *engine;
        Device *device;
} DevicePeer;

/* How an engine finds a device's peer among every namespace bigtcpd runs (netns-set-peer.c; the
 * set gives it to each engine it runs). */
typedef struct PeerOps {
        /* -ENOENT: d has no peer (not a veth, no IFLA_LINK); -ENXIO: its peer's namespace is not
         * one bigtcpd runs (or the kernel names it by no nsid); -ESTALE: the device there is not
         * d's peer (gone, moved, or not a veth whose link is d). */
        int (*peer_of)(void *userdata, struct Engine *e, const Device *d, DevicePeer *ret);
} PeerOps;

/* Rollbacks of one policy's devices since start. Kept when the policy leaves the set, so that a
 * counter never goes back (a canary's rollbacks are still counted after it was taken out). */
typedef struct PolicyCounter {
        char *policy; /* "" for a device that no policy matched any more */
        unsigned long long rollbacks;
} PolicyCounter;

/* Names counted at most; one name comes only with a rollback of its devices. */
#define ENGINE_POLICY_COUNTERS_MAX 4096u

typedef struct EngineCounters {
        unsigned long long writes, write_failures, restores, rollbacks;
        PolicyCounter *by_policy; /* in the order of their first rollback */
        size_t n_by_policy;
} EngineCounters;

typedef struct Engine {
        struct event_base *base;
        EngineConfig cfg;
        const Clock *clock; /* NULL: the system's */
        int ioctl_fd;       /* for SIOCETHTOOL (driver names); -1 when there is none */

        DeviceTable devices;
        /* The running policy, never NULL once started: lent by what runs the engine, which holds
         * it (netns.c, netns_run_policy()); the engine never keeps or frees one. */
        const PolicySet *policy;
        bool ipv4_supported;
        bool policy_uses_routes;
        char **guard_warnings; /* counters the policy's guards name that this kernel lacks */
        size_t n_guard_warnings;

        Writer *writer;
        ProbationSet *probation;
        EvidenceSet *evidence;
        RolloutTable rollouts;
        StateStore *state;
        EventList events;
        EngineCounters counters;

        /* What the kernel's side (sync.c) tells the decisions. */
        bool synced;          /* the first full sync is done: recorded originals are attached */
        bool routes_complete; /* false while the routes are dumped again */
        bool sync_running;
        bool reconcile_pending; /* some device has reconcile.owed */
        unsigned dump_epoch;    /* counts link dumps */
        bool settle_pending;    /* EVENT_SETTLED once no sync runs and the writer is idle */
        bool settled_once;      /* the first full reconcile is done */

        struct event *throttle_timer;    /* apply.c: the end of a put-back throttle */
        struct event *state_retry_event; /* apply.c: the state file is written again */
        bool advancing_rollouts;         /* apply.c: a walk over the waiting devices runs */
        struct event *auto_timer;        /* apply.c: the next idle watch or aged ceiling of `auto` */
        unsigned auto_watch_id;          /* apply.c: the ends of the watches `auto` asked for */
        AutoQueue auto_queue;            /* apply.c: the searches with a due time, the first first */

        /* a device's peer (NULL: none is ever known); set by what runs the engine */
        const PeerOps *peer_ops;
        void *peer_userdata;
} Engine;

/* `transport` sends requests; `writer_ops` and `probation_ops` are the decisions above that
 * answers and verdicts go to (their userdata is the engine). */
int engine_new(struct event_base *base, const EngineConfig *cfg, const Clock *clock, int ioctl_fd,
               const WriterTransport *transport, const WriterOps *writer_ops, const ProbationOps *probation_ops,
               Engine **ret);
/* Saves the state file if a save is owed. */
void engine_free(Engine *e);
/* The observer it was made with could not load after all (observer_start()): its evidence from
 * packet sockets `k` from now on, guards on namespace-wide counters; `why` for status (borrowed).
 * Before any device is known. */
void engine_observer_gone(Engine *e, EvidenceSockets *k, const char *why);

/* Where this namespace's SNMP counters are read. */
static inline SnmpFiles engine_snmp_files(const Engine *e) {
        return e->cfg.snmp ? *e->cfg.snmp : (SnmpFiles){.dir = e->cfg.proc_net ?: "/proc/net"};
}

static inline int engine_snmp_read(const Engine *e, SnmpSnapshot *ret) {
        SnmpFiles f = engine_snmp_files(e);
        return snmp_read_files(&f, ret);
}

uint64_t engine_now(const Engine *e);     /* CLOCK_MONOTONIC */
uint64_t engine_boottime(const Engine *e); /* CLOCK_BOOTTIME */

/* This host as the policy's scope sees it. */
static inline HostIdentity engine_host(const Engine *e) {
        return (HostIdentity){e->cfg.hostname, e->cfg.kernel_release, e->cfg.machine_id};
}

/* The running policy's entry named `name`, or NULL. */
const Policy *engine_policy(const Engine *e, const char *name);

/* Count a rollback of a device of `policy` (NULL: of none): -E2BIG past
 * ENGINE_POLICY_COUNTERS_MAX names, -ENOMEM. The total is counted by the caller either way. */
int engine_count_rollback(Engine *e, const char *policy);

/* d's peer (PeerOps.peer_of); -ENOENT when the engine is given no way to find one. */
static inline int engine_peer_of(Engine *e, const Device *d, DevicePeer *ret) {
        return e->peer_ops ? e->peer_ops->peer_of(e->peer_userdata, e, d, ret) : -ENOENT;
}

/* Emit EVENT_SETTLED when one is owed and nothing is left to wait for. */
void engine_check_settled(Engine *e);
