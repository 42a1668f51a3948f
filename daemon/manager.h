/* manager.h — the daemon's one object: the event loop and everything it owns. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <sys/queue.h>
#include <sys/utsname.h>

#include "device.h"
#include "event.h"
#include "netlink.h"
#include "policy-watch.h"
#include "policy.h"

#define WRITE_INFLIGHT_MAX 256u
#define CORRECTION_WINDOW_USEC (60ull * 1000000ull)
#define CORRECTIONS_MAX 10u

struct json_object;

typedef struct ManagerConfig {
        const char *config_path; /* NULL: the standard files and drop-ins */
        const char *root;        /* prefix for the standard paths; "" in production */
        const char *runtime_dir;
        int netlink_rcvbuf;
        /* GSO/GRO size changes raise no rtnetlink event: re-read the links this often while
         * bigtcpd manages any device, to put back what others changed. 0 disables. */
        uint64_t verify_interval_usec;
} ManagerConfig;

typedef enum SyncPhase {
        SYNC_NONE,
        SYNC_LINKS,
        SYNC_ROUTES,
        _SYNC_PHASE_MAX,
        _SYNC_PHASE_INVALID = -1,
} SyncPhase;

typedef enum InflightKind {
        INFLIGHT_WRITE,    /* RTM_NEWLINK with sizes */
        INFLIGHT_REFRESH,  /* RTM_GETLINK: attributes again (a bridge's tso_max_size) */
        INFLIGHT_BASELINE, /* RTM_GETLINK with stats, just before a write under guards */
        INFLIGHT_SAMPLE,   /* RTM_GETLINK with stats, a probation sample */
        _INFLIGHT_KIND_MAX,
        _INFLIGHT_KIND_INVALID = -1,
} InflightKind;

typedef struct Manager {
        struct event_base *base;
        Netlink *nl;
        PolicyWatch *watch;
        DeviceTable devices;
        PolicySet *policy;
        ManagerConfig cfg;
        char *hostname;
        struct utsname uts;

        bool ipv4_supported;
        bool policy_uses_routes;

        SyncPhase sync;
        unsigned dump_epoch;      /* counts link dumps */
        bool sync_links_only;     /* a verification: links, not routes */
        bool resync_wanted;       /* events were lost during a sync: start over after it */
        bool route_resync_wanted; /* IPv4 flushes routes silently on link down */
        bool initial_sync_done;
        bool ready_sent;
        bool ready_pending; /* send READY=1 once every queued write is acknowledged */
        bool reconcile_pending; /* some device has need_reconcile: look at the next batch end */
        bool staged_pending;    /* some device may wait for a rollout slot */

        TAILQ_HEAD(, Device) queue;
        TAILQ_HEAD(, Device) probation; /* devices in probation */
        struct event *probation_timer;  /* armed only while the list is not empty */
        char **guard_warnings;          /* counters the policy's guards name that this kernel lacks */
        size_t n_guard_warnings;
        struct {
                uint32_t seq;
                int ifindex;
                InflightKind kind;
        } inflight[WRITE_INFLIGHT_MAX];
        unsigned inflight_head, inflight_count;

        bool state_dirty;       /* a save is scheduled */
        bool state_full;        /* the next save writes a new snapshot */
        uint64_t state_generation;
        size_t journal_lines;
        int *dirty;             /* ifindexes whose entries changed since the last save */
        size_t n_dirty, cap_dirty;
        int *forgotten;         /* ifindexes whose entries are to go */
        size_t n_forgotten, cap_forgotten;
        struct event *save_event;
        struct event *reload_event;
        struct event *throttle_timer;
        struct event *verify_timer;
        struct event *retry_timer;
        struct event *retry_event;
        struct event *stall_timer; /* a dump that stopped after lost events */
        uint64_t stall_mark;
        struct event *signals[4];

        struct {
                struct StateEntry *entries;
                size_t n;
        } loaded_state;

        /* Who watches what happens (Monitor streams, D-Bus signals, STATUS=). */
        EventList events;

        unsigned long long n_writes, n_write_failures, n_restores, n_rollbacks;
        int exit_code;

        /* systemd and D-Bus (dbus.c) */
        struct Dbus *dbus;
        struct event *watchdog_timer; /* WATCHDOG=1 at half of WatchdogSec=, only when enabled */
        struct event *status_timer;   /* STATUS= when the counts change, at most 4 times a second */
        char *status_sent;            /* the STATUS= text last sent */
        int status_fd;                /* connected to $NOTIFY_SOCKET for STATUS= updates; -1 */
} Manager;

int manager_new(const ManagerConfig *cfg, Manager **ret);
void manager_free(Manager *m);
/* Load the policy and the state file, connect to the kernel, start the initial sync. */
int manager_start(Manager *m);
int manager_run(Manager *m);

/* Read, check and print the policy; 0 when clean, -EINVAL with every error logged. */
int manager_check_config(const ManagerConfig *cfg);

/* Re-read the policy. `forced` (SIGHUP, Reload()) always reloads and announces it; otherwise
 * only a change of contents does. -EINVAL with every error in `ret_errs` (if given) when the new
 * policy is refused and the running one stays. */
int manager_reload(Manager *m, bool forced, PolicyErrors *ret_errs);

/* Shared by the daemon's files (manager.c, apply.c, sync.c). */
/* STATUS= line, after `prefix` (e.g. "READY=1\n"). */
void notify_status(Manager *m, const char *prefix);
/* READY=1 once a sync or reload is complete and every write it caused is acknowledged. */
void maybe_ready(Manager *m);
int save_state(Manager *m);
/* Write the state file soon, from the loop. */
void schedule_save(Manager *m);
/* The device's entry changed (or it lost its originals): journal it at the next save. */
void state_mark(Manager *m, Device *d);
/* The device is gone: drop its entry at the next save. */
void state_forget(Manager *m, int ifindex);
