/* manager.c — the daemon's one object: the event loop, signals, the policy and its reload,
 * the state file, and what systemd is told. Devices live in apply.c, kernel events in sync.c. */
#include <event2/event.h>
#include <linux/sockios.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "apply.h"
#include "probation.h"
#include "control.h"
#include "dbus.h"
#include "log.h"
#include "manager.h"
#include "policy-files.h"
#include "state.h"
#include "sync.h"

/* ---- service manager ---- */

static unsigned count_state(const Manager *m, DeviceState s) {
        const Device *d;
        unsigned n = 0;
        DEVICE_FOREACH(d, &m->devices, it)
                n += d->state == s;
        return n;
}

/* "managing 12 of 40 devices, 1 in probation": the states that need attention, when non-zero. */
static char *status_text(const Manager *m) {
        static const struct {
                DeviceState state;
                const char *what;
        } parts[] = {
                {DEVICE_PROBATION, "in probation"}, {DEVICE_PENDING, "pending"},
                {DEVICE_ROLLED_BACK, "rolled back"}, {DEVICE_FAILED, "failed"},
                {DEVICE_UNSUPPORTED, "unsupported"},
        };
        unsigned n[_DEVICE_STATE_MAX] = {};
        char *text = NULL;
        size_t size = 0;
        const Device *d;
        FILE *f;

        DEVICE_FOREACH(d, &m->devices, it)
                if (d->state >= 0 && d->state < _DEVICE_STATE_MAX)
                        n[d->state]++;
        f = open_memstream(&text, &size);
        if (!f)
                return NULL;
        fprintf(f, "managing %zu of %zu devices", m->devices.n_devices - n[DEVICE_UNMANAGED], m->devices.n_devices);
        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                if (n[parts[i].state] > 0)
                        fprintf(f, ", %u %s", n[parts[i].state], parts[i].what);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

/* A STATUS= update must never stall the loop, nor fill the receiver's queue: sd_notify() blocks
 * while that queue is full (net.unix.max_dgram_qlen datagrams, 10 by default), and a queue full
 * of STATUS= lines would then block the READY=1 or RELOADING=1 that follows. So plain updates go
 * out non-blocking on a socket of their own, and only when the previous one has been read
 * (SIOCOUTQ: the kernel charges an unread datagram to its sender); otherwise they wait. */
static int notify_status_only(Manager *m, const char *text) {
        const char *path = getenv("NOTIFY_SOCKET");
        _cleanup_(freep) char *msg = NULL;
        int unread = 0;

        if (m->status_fd < 0) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                size_t n = path ? strlen(path) : 0;

                if (n < 2 || (path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
                        return 0; /* no service manager, or one we cannot reach: nothing to say */
                memcpy(sa.sun_path, path, n);
                if (path[0] == '@')
                        sa.sun_path[0] = '\0';
                _cleanup_(closep) int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0 || connect(fd, (struct sockaddr *) &sa,
                                      (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n)) < 0)
                        return 0;
                m->status_fd = TAKE_FD(fd);
        }
        if (ioctl(m->status_fd, SIOCOUTQ, &unread) < 0 || unread > 0)
                return -EAGAIN;
        if (asprintf(&msg, "STATUS=%s", text) < 0)
                return -ENOMEM;
        if (send(m->status_fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                return errno == EAGAIN ? -EAGAIN : 0;
        return 0;
}

static void schedule_status(Manager *m, unsigned usec) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t) usec};
        if (m->status_timer && !evtimer_pending(m->status_timer, NULL))
                (void) evtimer_add(m->status_timer, &tv);
}

/* With a prefix (READY=1) always sent; alone only when the text changed. */
void notify_status(Manager *m, const char *prefix) {
        char *text = status_text(m);

        if (!text || (!prefix && streq_ptr(text, m->status_sent))) {
                free(text);
                return;
        }
        if (prefix)
                (void) sd_notifyf(false, "%sSTATUS=%s", prefix, text);
        else if (notify_status_only(m, text) == -EAGAIN) {
                /* The last update is still unread: say it later, once. */
                free(text);
                schedule_status(m, 1000000 - 1);
                return;
        }
        free(m->status_sent);
        m->status_sent = text;
}

static void on_status_timer(evutil_socket_t fd, short what, void *userdata) {
        notify_status(userdata, NULL);
}

/* Any event may change the counts: look again soon, once for a burst. */
static void on_event_for_status(const Event *e, void *userdata) {
        Manager *m = userdata;
        if (m->ready_sent)
                schedule_status(m, 250000);
}

static void on_watchdog(evutil_socket_t fd, short what, void *userdata) {
        (void) sd_notify(false, "WATCHDOG=1");
}

/* WATCHDOG=1 from a loop timer at half the interval systemd asks for: a stuck loop misses it. */
static int start_watchdog(Manager *m) {
        uint64_t usec = 0;
        struct timeval tv;

        if (sd_watchdog_enabled(false, &usec) <= 0 || usec == 0)
                return 0;
        usec /= 2;
        tv.tv_sec = (time_t) (usec / 1000000ull);
        tv.tv_usec = (suseconds_t) (usec % 1000000ull);
        m->watchdog_timer = event_new(m->base, -1, EV_PERSIST, on_watchdog, m);
        if (!m->watchdog_timer || event_add(m->watchdog_timer, &tv) < 0)
                return -ENOMEM;
        log_debug("watchdog: WATCHDOG=1 every %llu ms", (unsigned long long) (usec / 1000));
        return 0;
}

void maybe_ready(Manager *m) {
        if (!m->ready_pending || m->sync != SYNC_NONE || !TAILQ_EMPTY(&m->queue) || m->inflight_count > 0)
                return;
        m->ready_pending = false;
        if (!m->ready_sent)
                log_info("initial reconcile done: %zu devices, %u managed", m->devices.n_devices,
                         (unsigned) m->devices.n_devices - count_state(m, DEVICE_UNMANAGED));
        m->ready_sent = true;
        notify_status(m, "READY=1\n");
}

/* ---- state file ---- */

/* Changed devices go to the journal, one line each; a new snapshot when the journal has grown
 * to the size of the device table (or something dropped entries wholesale). */
int save_state(Manager *m) {
        size_t limit = m->devices.n_devices * 2 > 1024 ? m->devices.n_devices * 2 : 1024;
        int r;

        if (m->state_full || m->journal_lines + m->n_dirty + m->n_forgotten > limit) {
                r = state_save(m->cfg.runtime_dir, &m->devices, m->state_generation + 1);
                if (r < 0)
                        return r;
                m->state_generation++;
                m->journal_lines = 0;
                m->state_full = false;
        } else if (m->n_dirty + m->n_forgotten > 0) {
                _cleanup_(freep) const Device **devs = calloc(m->n_dirty + 1, sizeof(Device *));
                _cleanup_(freep) int *gone = calloc(m->n_forgotten + m->n_dirty + 1, sizeof(int));
                size_t n = 0, n_gone = 0;
                if (!devs || !gone)
                        return -ENOMEM;
                for (size_t i = 0; i < m->n_dirty; i++) {
                        Device *d = device_get(&m->devices, m->dirty[i]);
                        if (d)
                                devs[n++] = d;
                        else
                                gone[n_gone++] = m->dirty[i];
                }
                for (size_t i = 0; i < m->n_forgotten; i++)
                        gone[n_gone++] = m->forgotten[i];
                r = state_append(m->cfg.runtime_dir, m->state_generation, devs, n, gone, n_gone);
                if (r < 0)
                        return r;
                m->journal_lines += n + n_gone;
        }
        for (size_t i = 0; i < m->n_dirty; i++) {
                Device *d = device_get(&m->devices, m->dirty[i]);
                if (d)
                        d->state_dirty = false;
        }
        m->n_dirty = m->n_forgotten = 0;
        m->state_dirty = false;
        return 0;
}

static int push_ifindex(int **l, size_t *n, size_t *cap, int ifindex) {
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 64;
                int *x = reallocarray(*l, c, sizeof(int));
                if (!x)
                        return -ENOMEM;
                *l = x;
                *cap = c;
        }
        (*l)[(*n)++] = ifindex;
        return 0;
}

void state_mark(Manager *m, Device *d) {
        if (!d->state_dirty) {
                if (push_ifindex(&m->dirty, &m->n_dirty, &m->cap_dirty, d->ifindex) < 0)
                        m->state_full = true; /* no memory for the list: write everything */
                else
                        d->state_dirty = true;
        }
        schedule_save(m);
}

void state_forget(Manager *m, int ifindex) {
        if (push_ifindex(&m->forgotten, &m->n_forgotten, &m->cap_forgotten, ifindex) < 0)
                m->state_full = true;
        schedule_save(m);
}

static void on_save(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        if (m->state_dirty) {
                int r = save_state(m);
                if (r < 0)
                        log_error_errno(r, "Failed to write state file in %s: %m", m->cfg.runtime_dir);
        }
}

void schedule_save(Manager *m) {
        m->state_dirty = true;
        event_active(m->save_event, EV_TIMEOUT, 0);
}

/* ---- policy ---- */

/* `plain`: compiler style on stderr, one "file:line:column: message" per line (--check-config). */
static void log_policy_errors(const PolicyErrors *errs, bool plain) {
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&errs->items[i], &text) < 0)
                        log_error("%s: %s", errs->items[i].file, errs->items[i].message);
                else if (plain)
                        fprintf(stderr, "%s\n", text);
                else
                        log_error("%s", text);
        }
}

static int load_policy(const ManagerConfig *cfg, const char *hostname, const char *release, bool plain,
                       PolicySet **ret, char ***ret_paths, size_t *ret_n, PolicyErrors *ret_errs) {
        PolicyErrors errs = {};
        char **paths = NULL;
        PolicySet *set = NULL;
        int n, r;

        n = policy_discover(cfg->config_path, cfg->root, &paths);
        if (n < 0)
                return log_error_errno(n, "Failed to find policy files: %m");
        r = policy_load_files(paths, (size_t) n, &set, &errs);
        if (r < 0) {
                log_policy_errors(&errs, plain);
                if (ret_errs) {
                        *ret_errs = errs;
                        errs = (PolicyErrors){};
                }
                policy_errors_clear(&errs);
                strv_free(paths);
                return r == -EINVAL ? r : log_error_errno(r, "Failed to load policy: %m");
        }
        policy_errors_clear(&errs);
        if (hostname)
                policy_set_scope(set, hostname, release);
        *ret = set;
        if (ret_paths) {
                *ret_paths = paths;
                *ret_n = (size_t) n;
        } else
                strv_free(paths);
        return 0;
}

static bool policy_set_uses_routes(const PolicySet *s) {
        for (size_t i = 0; i < s->n_policies; i++)
                if (s->policies[i].match.n_routes > 0)
                        return true;
        return false;
}

static void describe_policy(const PolicySet *s) {
        size_t here = 0;
        for (size_t i = 0; i < s->n_policies; i++)
                here += s->policies[i].applies_here;
        log_info("policy: %zu policies from %zu files (%zu apply to this host), digest %016llx", s->n_policies,
                 s->n_files, here, (unsigned long long) s->digest);
}

static void rearm_watch(Manager *m, char **paths, size_t n) {
        int r = policy_watch_set(m->watch, paths, n, m->cfg.config_path, m->cfg.root);
        if (r < 0)
                log_warning_errno(r, "Failed to watch the policy files: %m; reload with SIGHUP");
}

static void emit_reload(Manager *m, bool ok, const PolicyErrors *errs) {
        event_emit(&m->events, &(Event){.type = EVENT_RELOAD, .ok = ok, .digest = m->policy->digest, .errors = errs});
}

static void notify_reloading(void) {
        (void) sd_notifyf(false, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long) now_usec());
}

/* `forced`: asked for (SIGHUP), so it is announced before the files are read and always ends
 * with READY=1; a file change reloads only when the contents differ from the running policy. */
int manager_reload(Manager *m, bool forced, PolicyErrors *ret_errs) {
        PolicyErrors errs = {};
        PolicySet *set = NULL;
        char **paths = NULL;
        size_t n = 0;
        int r;

        if (forced)
                notify_reloading();
        r = load_policy(&m->cfg, m->hostname, m->uts.release, false, &set, &paths, &n, &errs);
        if (r < 0) {
                /* Keep watching: the next edit may fix it. */
                char **p = NULL;
                int k = policy_discover(m->cfg.config_path, m->cfg.root, &p);
                rearm_watch(m, p, k > 0 ? (size_t) k : 0);
                strv_free(p);
                log_error("refusing the new policy, keeping the running one (digest %016llx)",
                          (unsigned long long) m->policy->digest);
                if (forced)
                        notify_status(m, "READY=1\n");
                emit_reload(m, false, &errs);
                if (ret_errs)
                        *ret_errs = errs;
                else
                        policy_errors_clear(&errs);
                return r;
        }
        rearm_watch(m, paths, n);
        strv_free(paths);

        if (!forced && set->digest == m->policy->digest) {
                policy_set_free(set);
                return 0;
        }
        if (!forced)
                notify_reloading();
        policy_set_free(m->policy);
        m->policy = set;
        m->policy_uses_routes = policy_set_uses_routes(set);
        describe_policy(set);
        guard_warnings_refresh(m);

        /* A reload is the operator's word: retry what the kernel refused before. */
        Device *d;
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->state == DEVICE_FAILED)
                        d->failed_desired = (Sizes){};
        m->ready_pending = true;
        /* Reconcile against what the kernel holds now, not what it held at the last event. */
        start_verify(m);
        emit_reload(m, true, NULL);
        return 0;
}

static void on_config_changed(void *userdata) {
        Manager *m = userdata;
        event_active(m->reload_event, EV_TIMEOUT, 0);
}

static void on_reload_event(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        manager_reload(m, false, NULL);
}

/* ---- signals and life cycle ---- */

static void on_signal(evutil_socket_t sig, short what, void *userdata) {
        Manager *m = userdata;

        if (sig == SIGHUP) {
                log_info("SIGHUP: reloading the policy");
                manager_reload(m, true, NULL);
                return;
        }
        log_info("%s: stopping", strsignal((int) sig));
        (void) sd_notify(false, "STOPPING=1");
        event_base_loopbreak(m->base);
}

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        Manager *m = calloc(1, sizeof(*m));
        char host[256] = "";
        int r;

        if (!m)
                return -ENOMEM;
        m->cfg = *cfg;
        TAILQ_INIT(&m->queue);
        m->status_fd = -1;
        r = device_table_init(&m->devices);
        if (r < 0)
                goto fail;
        m->base = event_base_new();
        if (!m->base) {
                r = -ENOMEM;
                goto fail;
        }
        if (gethostname(host, sizeof(host) - 1) < 0)
                host[0] = '\0';
        m->hostname = strdup(host);
        if (uname(&m->uts) < 0)
                memset(&m->uts, 0, sizeof(m->uts));
        m->save_event = event_new(m->base, -1, 0, on_save, m);
        m->reload_event = event_new(m->base, -1, 0, on_reload_event, m);
        m->throttle_timer = evtimer_new(m->base, apply_throttle_timer, m);
        m->verify_timer = evtimer_new(m->base, sync_verify_timer, m);
        m->retry_timer = evtimer_new(m->base, sync_retry_timer, m);
        m->retry_event = event_new(m->base, -1, 0, sync_retry_event, m);
        m->stall_timer = evtimer_new(m->base, sync_stall_timer, m);
        m->probation_timer = evtimer_new(m->base, probation_timer, m);
        TAILQ_INIT(&m->probation);
        if (!m->hostname || !m->save_event || !m->reload_event || !m->throttle_timer || !m->verify_timer ||
            !m->retry_timer || !m->retry_event || !m->probation_timer || !m->stall_timer) {
                r = -ENOMEM;
                goto fail;
        }
        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

void manager_free(Manager *m) {
        if (!m)
                return;
        if (m->state_dirty && m->initial_sync_done)
                (void) save_state(m);
        dbus_free(m->dbus);
        if (m->watchdog_timer)
                event_free(m->watchdog_timer);
        if (m->status_timer)
                event_free(m->status_timer);
        free(m->status_sent);
        if (m->status_fd >= 0)
                close(m->status_fd);
        for (size_t i = 0; i < ELEMENTSOF(m->signals); i++)
                if (m->signals[i])
                        event_free(m->signals[i]);
        if (m->save_event)
                event_free(m->save_event);
        if (m->reload_event)
                event_free(m->reload_event);
        if (m->throttle_timer)
                event_free(m->throttle_timer);
        if (m->verify_timer)
                event_free(m->verify_timer);
        if (m->retry_timer)
                event_free(m->retry_timer);
        if (m->retry_event)
                event_free(m->retry_event);
        if (m->stall_timer)
                event_free(m->stall_timer);
        if (m->probation_timer)
                event_free(m->probation_timer);
        strv_free(m->guard_warnings);
        policy_watch_free(m->watch);
        netlink_free(m->nl);
        policy_set_free(m->policy);
        device_table_done(&m->devices);
        state_entries_free(m->loaded_state.entries, m->loaded_state.n);
        event_list_done(&m->events);
        free(m->dirty);
        free(m->forgotten);
        if (m->base)
                event_base_free(m->base);
        free(m->hostname);
        free(m);
}

int manager_start(Manager *m) {
        static const int sigs[] = {SIGHUP, SIGTERM, SIGINT};
        char **paths = NULL;
        size_t n = 0;
        int r;

        r = load_policy(&m->cfg, m->hostname, m->uts.release, false, &m->policy, &paths, &n, NULL);
        if (r < 0) {
                if (r == -EINVAL)
                        log_error("the policy has errors, not starting");
                return r;
        }
        m->policy_uses_routes = policy_set_uses_routes(m->policy);
        describe_policy(m->policy);
        guard_warnings_refresh(m);

        if (mkdir(m->cfg.runtime_dir, 0755) < 0 && errno != EEXIST)
                log_warning_errno(errno, "Failed to create runtime directory %s: %m", m->cfg.runtime_dir);
        r = state_load(m->cfg.runtime_dir, &m->loaded_state.entries, &m->loaded_state.n, &m->state_generation);
        /* the first save after a start compacts snapshot and journal into a new snapshot */
        m->state_full = true;
        if (r < 0) {
                /* Keep the broken file for whoever investigates; the kernel's view is the truth
                 * now: devices at the policy's sizes stay, nothing is restored blindly. */
                _cleanup_(freep) char *from = NULL, *to = NULL;
                if (asprintf(&from, "%s/state.json", m->cfg.runtime_dir) >= 0 &&
                    asprintf(&to, "%s/state.json.corrupt", m->cfg.runtime_dir) >= 0)
                        (void) rename(from, to);
                log_warning_errno(r, "Failed to read %s/state.json: %m; kept as state.json.corrupt, starting "
                                  "without recorded originals", m->cfg.runtime_dir);
                m->loaded_state.entries = NULL;
                m->loaded_state.n = 0;
        } else if (m->loaded_state.n > 0)
                log_info("state: original sizes of %zu devices recorded by an earlier run", m->loaded_state.n);

        r = policy_watch_new(m->base, on_config_changed, m, &m->watch);
        if (r < 0) {
                strv_free(paths);
                return log_error_errno(r, "Failed to set up inotify: %m");
        }
        rearm_watch(m, paths, n);
        strv_free(paths);

        (void) signal(SIGPIPE, SIG_IGN);
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
                m->signals[i] = evsignal_new(m->base, sigs[i], on_signal, m);
                if (!m->signals[i] || evsignal_add(m->signals[i], NULL) < 0)
                        return log_error_errno(ENOMEM, "Failed to set up signal handling");
        }

        r = netlink_new(m->base, &sync_netlink_ops, m, m->cfg.netlink_rcvbuf, &m->nl);
        if (r < 0)
                return log_error_errno(r, "Failed to open rtnetlink sockets: %m");
        start_sync(m, SYNC_LINKS);
        r = start_watchdog(m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the watchdog: %m");
        if (getenv("NOTIFY_SOCKET")) {
                m->status_timer = evtimer_new(m->base, on_status_timer, m);
                if (!m->status_timer || event_watch_add(&m->events, on_event_for_status, m) == 0)
                        return log_error_errno(ENOMEM, "Failed to set up status notifications");
        }
        r = dbus_new(m, &m->dbus);
        if (r < 0)
                return log_error_errno(r, "Failed to set up D-Bus: %m");
        return 0;
}

int manager_run(Manager *m) {
        if (event_base_dispatch(m->base) < 0)
                return log_error_errno(EIO, "event loop failed");
        return m->exit_code;
}

int manager_check_config(const ManagerConfig *cfg) {
        PolicySet *set = NULL;
        struct utsname uts;
        char host[256] = "";
        int r;

        (void) gethostname(host, sizeof(host) - 1);
        if (uname(&uts) < 0)
                memset(&uts, 0, sizeof(uts));
        r = load_policy(cfg, host, uts.release, true, &set, NULL, NULL, NULL);
        if (r < 0)
                return r;
        describe_policy(set);
        policy_set_free(set);
        return 0;
}
