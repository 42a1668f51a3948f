/* manager.c — building the daemon, running its loop, and taking it apart. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "durable.h"
#include "log.h"
#include "manager.h"

/* machine-id(5), below the root like the policy's paths (a test's own machine). */
#define MACHINE_ID_FILE "/etc/machine-id"

static int machine_id_read(const char *root, char ret[static 33]) {
        _cleanup_(freep) char *path = NULL, *text = NULL;
        size_t n;
        int r;

        if (asprintf(&path, "%s" MACHINE_ID_FILE, root ?: "") < 0)
                return -ENOMEM;
        r = read_file_bounded(path, 64, READ_FILE_REGULAR, &text, &n);
        if (r < 0)
                return r == -EFBIG ? -EINVAL : r;
        return machine_id_parse(text, n, ret);
}

/* Every managed namespace holds descriptors (NETNS_FDS): the soft RLIMIT_NOFILE goes up to the
 * hard one, as systemd advises daemons that need many (the default soft 1024 is for select(),
 * which bigtcpd does not use; its workers are forked, never exec'ed). */
static void raise_nofile(void) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
                return;
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                log_warning_errno(errno, "Failed to raise RLIMIT_NOFILE from %llu to %llu: %m; at most about %llu "
                                         "namespaces are managed",
                                  (unsigned long long) was, (unsigned long long) rl.rlim_max,
                                  (unsigned long long) was / NETNS_FDS);
        else
                log_debug("RLIMIT_NOFILE raised from %llu to %llu", (unsigned long long) was,
                          (unsigned long long) rl.rlim_max);
}

/* How long a stop waits for the revert of a try to be written. */
#define STOP_REVERT_SEC 5
/* … and for a sync still running, before it leaves the sync's child behind (durable_stop()). */
#define STOP_SYNC_WAIT_USEC (2 * USEC_PER_SEC)

static void on_stop_event(const Event *e, void *userdata) {
        Manager *m = userdata;
        if (e->type == EVENT_SETTLED)
                event_base_loopbreak(m->base);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        log_warning("the revert of the try is not answered after %ds: stopping anyway", STOP_REVERT_SEC);
        event_base_loopbreak(m->base);
}

static void on_signal(evutil_socket_t sig, short what, void *userdata) {
        Manager *m = userdata;

        if (sig == SIGHUP) {
                log_info("SIGHUP: reloading the policy");
                (void) reloader_reload(m->reloader, true, NULL, NULL);
                return;
        }
        if (m->stop_watch != 0) {
                log_info("%s: stopping now", strsignal((int) sig));
                event_base_loopbreak(m->base);
                return;
        }
        log_info("%s: stopping", strsignal((int) sig));
        notify_stopping(m->notify);
        /* An unconfirmed policy never outlives the daemon: back to the policy that ran before,
         * and stop once the kernel has answered its writes (or after a bound). */
        if (policy_try_revert(m->trial, TRY_REASON_STOP) < 0) {
                event_base_loopbreak(m->base);
                return;
        }
        m->stop_watch = event_watch_add(netns_set_events(m->netns), on_stop_event, m);
        m->stop_timer = evtimer_new(m->base, on_stop_timer, m);
        if (m->stop_watch == 0 || !m->stop_timer ||
            evtimer_add(m->stop_timer, &(struct timeval){.tv_sec = STOP_REVERT_SEC}) < 0)
                event_base_loopbreak(m->base);
}

/* The observer cannot run (found at once, or once its load ended): --observer=ebpf makes that
 * fatal; else packet sockets count evidence and guards read namespace-wide counters. */
static int observer_cannot_run(Manager *m, int r) {
        if (m->cfg.observer == OBSERVER_MODE_EBPF)
                return log_error_errno(r, "--observer=ebpf: the eBPF observer cannot run: %s",
                                       m->observer_why ?: strerror(-r));
        log_warning("The eBPF observer cannot run (%s): evidence from packet sockets while devices are watched, "
                    "guards from namespace-wide counters",
                    m->observer_why ?: strerror(-r));
        return 0;
}

/* The observer's load, begun in manager_new(), is over before any engine applies anything (the
 * first engine whose first sync ends waits for it: meanwhile the state file was read and the
 * devices dumped): taken into use, or replaced by packet sockets in every engine made so far and
 * in what the namespaces found later are made with. */
static int observer_settle(Manager *m) {
        _cleanup_(freep) char *why = NULL;
        int r;

        if (!m->observer || m->observer_settled)
                return m->error;
        m->observer_settled = true;
        r = observer_wait(m->observer, &why);
        if (r >= 0) {
                log_info("The eBPF observer counts every device's packets, drops and TCP retransmits");
                return 0;
        }
        free(m->observer_why);
        m->observer_why = TAKE_PTR(why);
        r = observer_cannot_run(m, r);
        if (r < 0)
                return m->error = r;
        r = evidence_sockets_new(m->base, &m->packet_sockets);
        if (r < 0)
                return m->error = log_error_errno(r, "Failed to set up the packet sockets' helpers: %m");
        engine_observer_gone(m->host->engine, m->packet_sockets, m->observer_why);
        netns_set_observer_gone(m->netns, m->packet_sockets, m->observer_why);
        observer_free(m->observer);
        m->observer = NULL;
        return 0;
}

/* An engine's first sync ended (EngineConfig.settle): the observer's load is over before it applies
 * anything. A failure stops the daemon, as it would have stopped its start. */
static int on_engine_settle(void *userdata) {
        Manager *m = userdata;
        int r = observer_settle(m);

        if (r < 0)
                event_base_loopbreak(m->base);
        return r;
}

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        _cleanup_(manager_freep) Manager *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->cfg = *cfg;
        raise_nofile();
        if (uname(&m->uts) < 0)
                memset(&m->uts, 0, sizeof(m->uts));
        r = machine_id_read(cfg->root, m->machine_id);
        if (r < 0) {
                m->machine_id[0] = '\0';
                log_info_errno(r,
                               "No machine id in %s" MACHINE_ID_FILE " (%s): the cohorts of "
                               "rollout.hosts-percent come from the hostname \"%s\"",
                               cfg->root, r == -EINVAL ? "not 32 hex digits" : strerror(-r),
                               m->uts.nodename);
        }
        m->base = event_base_new();
        if (!m->base)
                return -ENOMEM;
        /* the syncs' child, forked before any device is loaded (durable.h) */
        r = durable_start();
        if (r < 0)
                log_warning_errno(r, "No process to sync the state file in yet (%m): the first save makes one");

        if (cfg->no_count_packets)
                m->observer_why = strdup("--no-count-packets");
        else if (cfg->observer == OBSERVER_MODE_PACKET_SOCKET)
                m->observer_why = strdup("--observer=packet-socket");
        else {
                /* its loader loads it while the state file is read and the devices are dumped: the
                 * first engine to end its first sync waits for it (observer_settle()) */
                r = observer_start(&m->observer, &m->observer_why);
                if (r < 0) {
                        r = observer_cannot_run(m, r);
                        if (r < 0)
                                return r;
                }
        }
        if (!cfg->no_count_packets && !m->observer) {
                r = evidence_sockets_new(m->base, &m->packet_sockets);
                if (r < 0)
                        return r;
        }
        /* bigtcpd's own namespace, made as every other one is */
        NamespaceConfig own = {
                .fd = -1,
                .home_fd = -1,
                .runtime_dir = cfg->runtime_dir,
                .engine = {
                        .hostname = m->uts.nodename,
                        .kernel_release = m->uts.release,
                        .machine_id = m->machine_id[0] ? m->machine_id : NULL,
                        .packet_sockets = m->packet_sockets,
                        .observer = m->observer,
                        .observer_why = m->observer_why,
                        .settle = on_engine_settle,
                        .settle_userdata = m,
                },
                .netlink_rcvbuf = cfg->netlink_rcvbuf,
                .verify_interval_usec = cfg->verify_interval_usec,
        };
        r = netns_new(m->base, &own, &m->host);
        if (r < 0)
                return log_error_errno(r, "Failed to open rtnetlink sockets: %m");
        NetnsConfig nc = {
                .engine = own.engine,
                .clock = own.clock,
                .dirs = cfg->netns_dirs,
                .n_dirs = cfg->n_netns_dirs,
                .runtime_dir = cfg->runtime_dir,
                .netlink_rcvbuf = cfg->netlink_rcvbuf,
                .verify_interval_usec = cfg->verify_interval_usec,
        };
        r = netns_set_new(m->base, &nc, m->host, &m->netns);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the network namespaces: %m");
        /* the running policy, above every namespace: each runs it (netns_set_reloader_ops) */
        r = reloader_new(m->base,
                         &(ReloadConfig){.config_path = cfg->config_path,
                                         .root = cfg->root,
                                         .runtime_dir = cfg->runtime_dir,
                                         .host = engine_host(m->host->engine)},
                         netns_set_events(m->netns), &netns_set_reloader_ops, m->netns, &m->reloader);
        if (r < 0)
                return r;
        r = policy_try_new(m->base, NULL, netns_set_events(m->netns), m->reloader, cfg->runtime_dir, &m->trial);
        if (r < 0)
                return r;
        r = worker_pool_new(m->base, WORKER_FORK, &m->workers);
        if (r < 0)
                return r;
        m->control = (Control){.netns = m->netns,
                               .reloader = m->reloader,
                               .workers = m->workers,
                               .trial = m->trial};
        *ret = TAKE_PTR(m);
        return 0;
}

void manager_free(Manager *m) {
        if (!m)
                return;
        /* the transports first: nothing may call into what goes after them */
        metrics_http_free(m->metrics);
        dbus_manager_free(m->dbus);
        varlink_manager_free(m->varlink);
        notify_free(m->notify);
        worker_pool_free(m->workers);
        for (size_t i = 0; i < ELEMENTSOF(m->signals); i++)
                if (m->signals[i])
                        event_free(m->signals[i]);
        if (m->stop_timer)
                event_free(m->stop_timer);
        if (m->stop_watch != 0)
                event_watch_remove(netns_set_events(m->netns), m->stop_watch);
        policy_try_free(m->trial);
        reloader_free(m->reloader);
        netns_set_free(m->netns);
        netns_free(m->host);
        evidence_sockets_free(m->packet_sockets); /* after every namespace's evidence */
        observer_free(m->observer);
        free(m->observer_why);
        if (m->base)
                event_base_free(m->base);
        /* last, after every save: the other children were reaped with their owners above */
        durable_stop(STOP_SYNC_WAIT_USEC);
        free(m);
}

/* The state in the runtime directory decides what is written to devices at the next start, and
 * the daemon writes files there: it must be the daemon's alone. */
static int open_runtime_dir(Manager *m) {
        const char *dir = m->cfg.runtime_dir;
        struct stat st = {};
        int r;

        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                log_warning_errno(errno, "Failed to create runtime directory %s: %m", dir);
        r = state_store_open_dir(m->host->engine->state, &st);
        if (r == -EPERM && st.st_uid != geteuid())
                return log_error_errno(r, "Runtime directory %s is owned by uid %u, not by bigtcpd's uid %u: "
                                          "refusing to keep state there",
                                       dir, (unsigned) st.st_uid, (unsigned) geteuid());
        if (r == -EPERM)
                return log_error_errno(r, "Runtime directory %s is writable by %s (mode %04o): refusing to keep "
                                          "state there; make it 0755 (a tmpfs mounted there needs mode=0755)",
                                       dir, st.st_mode & S_IWOTH ? "others" : "its group",
                                       (unsigned) (st.st_mode & 07777));
        if (r < 0)
                return log_error_errno(r, "Failed to open runtime directory %s: %m", dir);
        return 0;
}

/* What was wrong with a state file, in words (NULL: its errno says it). */
static const char *file_problem(int r) {
        switch (r) {
        case -ELOOP:
                return "a symlink (not followed)";
        case -EISDIR:
                return "a directory";
        case -EBADF:
                return "not a regular file";
        case -EFBIG:
                return "larger than bigtcpd ever writes it";
        default:
                return NULL;
        }
}

static void log_bad_file(const char *dir, const char *name, int error, bool moved, const char *then) {
        const char *what = file_problem(error);
        const char *aside = moved ? "moved aside as " : "and cannot be moved aside";

        if (what)
                log_warning("%s/%s is %s: %s%s%s, %s", dir, name, what, aside, moved ? name : "",
                            moved ? ".corrupt" : "", then);
        else
                log_warning_errno(error, "Failed to read %s/%s: %m; %s%s%s, %s", dir, name, aside,
                                  moved ? name : "", moved ? ".corrupt" : "", then);
}

static void log_load(Manager *m, int r, const StateLoadReport *rep, size_t n) {
        const char *dir = m->cfg.runtime_dir;

        if (rep->snapshot_error < 0) {
                /* the kernel's view is the truth now: devices at the policy's sizes stay, nothing
                 * is restored blindly */
                log_bad_file(dir, "state.json", rep->snapshot_error, rep->snapshot_moved,
                             "starting without recorded originals");
                return;
        }
        if (r < 0) {
                log_error_errno(r, "Failed to read the state in %s: %m", dir);
                return;
        }
        if (rep->journal_error < 0)
                log_bad_file(dir, "state.journal", rep->journal_error, rep->journal_moved,
                             "starting from state.json alone");
        state_load_log(dir, rep);
        if (n > 0)
                log_info("state: original sizes of %zu %s recorded by an earlier run", n, PLURAL(n, "device", "devices"));
}

int manager_start(Manager *m) {
        static const int sigs[] = {SIGHUP, SIGTERM, SIGINT};
        _cleanup_(freep) char *path = NULL;
        StateEntry *entries = NULL;
        StateLoadReport report;
        size_t n = 0;
        int r;

        /* first: the last policy that ran is recorded there */
        r = open_runtime_dir(m);
        if (r < 0)
                return r;
        r = reloader_load(m->reloader);
        if (r < 0)
                return r;
        /* a try of an earlier run is over: the configured policy just loaded is its revert */
        (void) policy_try_recover(m->trial);
        r = state_store_load(m->host->engine->state, &entries, &n, &report);
        log_load(m, r, &report, n);
        if (r == -ENOMEM)
                return r; /* starting without them would overwrite them */
        (void) signal(SIGPIPE, SIG_IGN);
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
                m->signals[i] = evsignal_new(m->base, sigs[i], on_signal, m);
                if (!m->signals[i] || evsignal_add(m->signals[i], NULL) < 0) {
                        state_entries_free(entries, n);
                        return log_error_errno(ENOMEM, "Failed to set up signal handling");
                }
        }
        r = notify_new(m->base, m->netns, m->reloader, &m->notify);
        if (r < 0) {
                state_entries_free(entries, n);
                return log_error_errno(r, "Failed to set up sd_notify and the watchdog: %m");
        }
        netns_start(m->host, entries, n);
        netns_set_start(m->netns);

        if (asprintf(&path, "%s/" VARLINK_INTERFACE, m->cfg.runtime_dir) < 0)
                return log_error_errno(ENOMEM, "Failed to set up: %m");
        r = varlink_manager_new(m->base, &m->control, path, &m->varlink);
        if (r < 0)
                /* Devices are what matter; a daemon without its control socket still keeps them
                 * safe. */
                log_error_errno(r, "Failed to listen on %s: %m; running without the varlink interface", path);
        else if (m->cfg.varlink_output_max > 0)
                varlink_server_set_output_max(varlink_manager_server(m->varlink), m->cfg.varlink_output_max);
        r = dbus_manager_new(m->base, &m->control, &m->dbus);
        if (r < 0)
                return log_error_errno(r, "Failed to set up D-Bus: %m");
        if (m->cfg.metrics_listen) {
                r = metrics_http_new(m->base, &m->control, m->cfg.metrics_listen, &m->metrics);
                if (r < 0)
                        /* as without the varlink socket: the devices are kept all the same */
                        log_error_errno(r, "Failed to listen on %s for /metrics: %m; running without it",
                                        m->cfg.metrics_listen);
                else
                        log_info("serving /metrics on http://%s", m->cfg.metrics_listen);
        }
        return 0;
}

int manager_run(Manager *m) {
        if (event_base_dispatch(m->base) < 0)
                return log_error_errno(EIO, "event loop failed");
        return m->error;
}

int manager_check_config(const ManagerConfig *cfg) {
        struct utsname uts;
        char id[33];

        if (uname(&uts) < 0)
                memset(&uts, 0, sizeof(uts));
        HostIdentity host = {
                .hostname = uts.nodename,
                .kernel_release = uts.release,
                .machine_id = machine_id_read(cfg->root, id) >= 0 ? id : NULL,
        };
        return reload_check_config(&(ReloadConfig){.config_path = cfg->config_path, .root = cfg->root},
                                   &host);
}
