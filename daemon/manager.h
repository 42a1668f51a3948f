/* manager.h — the composition root: the event loop, signals, and every part of the daemon built
 * and wired together — bigtcpd's own namespace (sockets, engine, sync) and the set of them, the
 * running policy's reloader, the control surface, sd_notify, and the varlink, D-Bus and metrics
 * transports. */
#pragma once

#include <event2/event.h>
#include <stdint.h>
#include <sys/utsname.h>

#include "control.h"
#include "manager-dbus.h"
#include "engine.h"
#include "metrics-http.h"
#include "netlink.h"
#include "netns-set.h"
#include "manager-notify.h"
#include "policy-reload.h"
#include "sync.h"
#include "policy-try.h"
#include "manager-varlink.h"

typedef struct ManagerConfig {
        const char *config_path; /* NULL: the standard files and drop-ins */
        const char *root;        /* prefix for the standard paths; "" in production */
        const char *runtime_dir;
        int netlink_rcvbuf;
        /* GSO/GRO size changes raise no rtnetlink event: re-read the links this often while
         * bigtcpd manages any device, to put back what others changed. 0 disables. */
        uint64_t verify_interval_usec;
        size_t varlink_output_max; /* 0: the default cap on unread replies */
        char **netns_dirs; /* --netns-dir; NULL: NETNS_DIRS_DEFAULT */
        bool no_count_packets; /* --no-count-packets: no evidence, no packet socket, no observer */
        ObserverMode observer;  /* --observer */
        const char *metrics_listen; /* --metrics-listen ADDR:PORT; NULL: no /metrics */
        size_t n_netns_dirs;
} ManagerConfig;

typedef struct Manager {
        struct event_base *base;
        ManagerConfig cfg;
        struct utsname uts;
        char machine_id[33]; /* "" when the host has none: cohorts come from the hostname */
        EvidenceSockets *packet_sockets; /* every namespace's evidence: made and closed in children */
        Observer *observer;              /* … or counted by the eBPF observer (then no packet socket) */
        char *observer_why;              /* why not: for status */
        bool observer_settled;           /* its load is over (observer_settle()) */
        int error;                       /* the loop stopped on it: manager_run()'s */
        Netns *host; /* bigtcpd's own namespace, the set's first entry */
        NetnsSet *netns; /* the other namespaces */
        Reloader *reloader;
        PolicyTry *trial;
        WorkerPool *workers;
        Control control;
        Notify *notify;
        VarlinkManager *varlink;
        DbusManager *dbus;
        MetricsHttp *metrics;
        struct event *signals[3];
        struct event *stop_timer; /* stopping: the bound on waiting for a try's revert */
        unsigned stop_watch;      /* … and the watch for its writes to be answered */
} Manager;

int manager_new(const ManagerConfig *cfg, Manager **ret);
void manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);
/* Load the policy and the state file, connect to the kernel, start the first sync, listen. */
int manager_start(Manager *m);
int manager_run(Manager *m);

/* --check-config: 0 when the policy is clean, -EINVAL with every error printed. */
int manager_check_config(const ManagerConfig *cfg);
