/* dbus-manager.c — the io.bigtcpd1.Manager object: properties, PropertiesChanged, the RolledBack
 * signal, and the methods, each a call of control.h and its typed reply. */
#include <event2/event.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <sys/queue.h>
#include <systemd/sd-bus.h>

#include "dbus-manager.h"
#include "log.h"
#include "utf8.h"
#include "version.h"

#define DBUS_ERROR_NO_SUCH_DEVICE DBUS_MANAGER_INTERFACE ".NoSuchDevice"
#define DBUS_ERROR_POLICY_INVALID DBUS_MANAGER_INTERFACE ".PolicyInvalid"
#define DBUS_ERROR_NOTHING_TO_DO DBUS_MANAGER_INTERFACE ".NothingToDo"
#define DBUS_ERROR_FAILED DBUS_MANAGER_INTERFACE ".Failed"
#define DBUS_ERROR_TRY_RUNNING DBUS_MANAGER_INTERFACE ".TryRunning"
#define DBUS_ERROR_NO_TRY DBUS_MANAGER_INTERFACE ".NoTry"
#define DBUS_ERROR_TARGET_NOT_READ DBUS_MANAGER_INTERFACE ".TargetNotRead"

/* A device name: "IFNAME", or "NETNS/IFNAME" of another namespace. */
#define DEVICE_NAME_MAX (NAME_MAX + IFNAMSIZ)

/* What PropertiesChanged compares: the emitting properties' values when last announced. */
typedef struct Snapshot {
        unsigned state[_DEVICE_STATE_MAX];
        unsigned total;
        uint64_t digest;
        unsigned long long rollbacks;
        const char *overall; /* control_state(): a static string */
        bool reload_ok;
        uint64_t reload_usec;
} Snapshot;

typedef struct PendingRead PendingRead;
typedef struct PendingJob PendingJob;
typedef struct PendingWatch PendingWatch;

struct DbusManager {
        Control *control;
        Dbus *dbus;
        sd_bus *bus; /* while attached */
        sd_bus_slot *vtable_slot;
        unsigned watch_id;     /* of the daemon's events, while attached */
        struct event *changed; /* coalesces PropertiesChanged */
        Snapshot last;
        LIST_HEAD(, PendingRead) reads;
        size_t n_reads;
};

/* Arguments are checked for size before anything else is done for the call. */
static int check_name(const char *name, sd_bus_error *error) {
        if (strlen(name) > DEVICE_NAME_MAX)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "ifname: more than %u bytes",
                                         (unsigned) DEVICE_NAME_MAX);
        return 0;
}

static int check_policy(const char *policy, sd_bus_error *error) {
        if (strlen(policy) > POLICY_FILE_MAX)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "policy: more than %u MiB",
                                         POLICY_FILE_MAX >> 20);
        return 0;
}

/* `o` as a D-Bus string reply. */
static int reply_json(sd_bus_message *call, json_object *o) {
        _cleanup_(freep) char *buf = NULL;
        const char *text;

        if (!o)
                return -ENOMEM;
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (!text)
                return -ENOMEM;
        text = utf8_safe(text, &buf);
        if (!text)
                return -ENOMEM;
        return sd_bus_reply_method_return(call, "s", text);
}

/* Every error of a policy, one "file:line:column: message" per line. */
/* One "file:line:column: message" a line; then `warnings`' (a refused reload's), each
 * "file:line:column: warning: …". */
static char *errors_text(const PolicyErrors *errs, const PolicyErrors *warnings) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return NULL;
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *line = NULL;
                if (policy_error_format(&errs->items[i], &line) >= 0)
                        fprintf(f, "%s%s", i > 0 ? "\n" : "", line);
        }
        for (size_t i = 0; warnings && errs->n > 0 && i < warnings->n; i++) {
                _cleanup_(freep) char *line = NULL;
                if (policy_error_format(&warnings->items[i], &line) >= 0)
                        fprintf(f, "\n%s", line);
        }
        if (errs->n == 0)
                fputs("the policy has errors", f);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

static int reply_policy_invalid_warned(sd_bus_message *call, const PolicyErrors *errs, const PolicyErrors *warnings) {
        _cleanup_(freep) char *text = errors_text(errs, warnings), *buf = NULL;
        const char *safe = text ? utf8_safe(text, &buf) : NULL;

        if (!safe)
                return -ENOMEM;
        return sd_bus_reply_method_errorf(call, DBUS_ERROR_POLICY_INVALID, "%s", safe);
}

static int reply_policy_invalid(sd_bus_message *call, const PolicyErrors *errs) {
        return reply_policy_invalid_warned(call, errs, NULL);
}

/* Replies an -errno of a control_*() call with the interface's error names. */
static int reply_control_error(sd_bus_message *call, int r, const char *ifname) {
        _cleanup_(freep) char *buf = NULL;
        const char *name = ifname ? utf8_safe(ifname, &buf) : NULL;

        if (ifname && !name)
                return -ENOMEM;
        switch (r) {
        case -ENODEV:
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_NO_SUCH_DEVICE, "No device \"%s\"", name ?: "");
        case -EBUSY: /* Reload, Try */
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_TRY_RUNNING,
                                                  "A try runs: confirm or revert it first");
        case -EALREADY:
                if (name)
                        return sd_bus_reply_method_errorf(call, DBUS_ERROR_NOTHING_TO_DO,
                                                          "Nothing to do for \"%s\" in its state", name);
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_NOTHING_TO_DO, "Nothing to do");
        default:
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_FAILED, "%s", strerror(-r));
        }
}

/* The -errno of control_try(), _confirm() and _revert(). */
static int reply_try_error(sd_bus_message *call, int r) {
        switch (r) {
        case -ENOENT:
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_NO_TRY, "No try runs");
        case -EXDEV:
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_TARGET_NOT_READ,
                                                  "bigtcpd reads no policy file there");
        case -ERANGE:
                return sd_bus_reply_method_errorf(call, SD_BUS_ERROR_INVALID_ARGS, "timeout out of range (1s to 24h)");
        default:
                return reply_control_error(call, r, NULL);
        }
}

/* ---- properties ---- */

/* The counts cover every namespace bigtcpd runs. */
static void snapshot_take(const Control *c, Snapshot *ret) {
        const PolicySet *policy = control_policy(c);
        ControlCounts n;

        control_counts(c, &n);
        *ret = (Snapshot){
                .total = (unsigned) n.total,
                .digest = policy ? policy->digest : 0,
                .rollbacks = n.rollbacks,
                .overall = control_state(c),
        };
        memcpy(ret->state, n.state, sizeof(ret->state));
        const ReloadResult *last = reloader_last(c->reloader);
        if (last) {
                ret->reload_ok = last->ok;
                ret->reload_usec = last->realtime_usec;
        }
}

/* The device-count properties and the state each counts; _DEVICE_STATE_INVALID: all devices,
 * _DEVICE_STATE_MAX: every device not unmanaged. */
static const struct {
        const char *name;
        int state;
} count_properties[] = {
        {"DevicesTotal", _DEVICE_STATE_INVALID},
        {"DevicesManaged", _DEVICE_STATE_MAX},
        {"DevicesPending", DEVICE_PENDING},
        {"DevicesProbation", DEVICE_PROBATION},
        {"DevicesApplied", DEVICE_APPLIED},
        {"DevicesRolledBack", DEVICE_ROLLED_BACK},
        {"DevicesFailed", DEVICE_FAILED},
        {"DevicesUnsupported", DEVICE_UNSUPPORTED},
};

static unsigned snapshot_count(const Snapshot *s, int state) {
        if (state == _DEVICE_STATE_INVALID)
                return s->total;
        if (state == _DEVICE_STATE_MAX)
                return s->total - s->state[DEVICE_UNMANAGED];
        return s->state[state];
}

static void format_digest(uint64_t digest, char buf[static 17]) {
        snprintf(buf, 17, "%016llx", (unsigned long long) digest);
}

static int property_get_version(sd_bus *bus, const char *path, const char *interface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", bigtcpd_version);
}

static int property_get_digest(sd_bus *bus, const char *path, const char *interface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        char digest[17];

        format_digest(control_policy(b->control) ? control_policy(b->control)->digest : 0, digest);
        return sd_bus_message_append(reply, "s", digest);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        Snapshot s;

        snapshot_take(b->control, &s);
        for (size_t i = 0; i < ELEMENTSOF(count_properties); i++)
                if (streq_ptr(property, count_properties[i].name))
                        return sd_bus_message_append(reply, "u", snapshot_count(&s, count_properties[i].state));
        return -ENOENT;
}

static int property_get_rollbacks(sd_bus *bus, const char *path, const char *interface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        ControlCounts n;

        control_counts(b->control, &n);
        return sd_bus_message_append(reply, "t", (uint64_t) n.rollbacks);
}

static int property_get_state(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        return sd_bus_message_append(reply, "s", control_state(b->control));
}

static int property_get_last_reload(sd_bus *bus, const char *path, const char *interface, const char *property,
                                    sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        Snapshot s;

        snapshot_take(b->control, &s);
        if (streq_ptr(property, "LastReloadSuccessful"))
                return sd_bus_message_append(reply, "b", (int) s.reload_ok);
        return sd_bus_message_append(reply, "t", s.reload_usec);
}

static int property_get_ready(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        return sd_bus_message_append(reply, "b", (int) control_ready(b->control));
}

/* Announce what changed since the last announcement, in one signal. */
static void on_changed_timer(evutil_socket_t fd, short what, void *userdata) {
        DbusManager *b = userdata;
        const char *names[ELEMENTSOF(count_properties) + 6];
        size_t n = 0;
        Snapshot now;
        int r;

        if (!b->bus)
                return;
        snapshot_take(b->control, &now);
        for (size_t i = 0; i < ELEMENTSOF(count_properties); i++)
                if (snapshot_count(&now, count_properties[i].state) != snapshot_count(&b->last, count_properties[i].state))
                        names[n++] = count_properties[i].name;
        if (now.digest != b->last.digest)
                names[n++] = "PolicyDigest";
        if (now.rollbacks != b->last.rollbacks)
                names[n++] = "Rollbacks";
        if (!streq_ptr(now.overall, b->last.overall))
                names[n++] = "State";
        if (now.reload_ok != b->last.reload_ok)
                names[n++] = "LastReloadSuccessful";
        if (now.reload_usec != b->last.reload_usec)
                names[n++] = "LastReloadTimestamp";
        names[n] = NULL;
        b->last = now;
        if (n == 0)
                return;
        r = sd_bus_emit_properties_changed_strv(b->bus, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, (char **) names);
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to emit PropertiesChanged: %m, ignoring");
        dbus_kick(b->dbus);
}

static void schedule_changed(DbusManager *b) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t) DBUS_CHANGED_DELAY_USEC};
        if (!evtimer_pending(b->changed, NULL))
                (void) evtimer_add(b->changed, &tv);
}

/* ---- events from the control plane ---- */

static void on_control_event(const Event *e, void *userdata) {
        DbusManager *b = userdata;
        int r;

        if (!b->bus)
                return;
        if (e->type == EVENT_ROLLBACK) {
                _cleanup_(freep) char *buf1 = NULL, *buf2 = NULL, *full = control_device_name(e->device);
                const char *ifname = full ? utf8_safe(full, &buf1) : NULL;
                const char *counter = utf8_safe(e->rollback->counter ?: "", &buf2);

                if (ifname && counter) {
                        r = sd_bus_emit_signal(b->bus, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, "RolledBack", "sst",
                                               ifname, counter, e->rollback->rise);
                        if (r < 0)
                                log_debug_errno(r, "D-Bus: failed to emit RolledBack: %m, ignoring");
                        dbus_kick(b->dbus);
                }
        }
        schedule_changed(b);
}

/* ---- read methods ---- */

static int method_get_status_json(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        _cleanup_(json_object_putp) json_object *o = control_status_json(b->control);
        return reply_json(call, o);
}

/* ListDevices' JSON, for one device or (NULL) all. */
static int reply_devices_json(DbusManager *b, sd_bus_message *call, const char *name) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        int r;

        r = control_devices_json(b->control, name, &o);
        if (r < 0)
                return reply_control_error(call, r, name);
        return reply_json(call, o);
}

/* A read of the kernel before a reply: ListDevicesJSON(ifname) and GetDevice. */
typedef struct PendingRead PendingRead;
struct PendingRead {
        DbusManager *owner;
        sd_bus_message *call;
        ControlRequest *request;
        char *name;
        bool typed; /* GetDevice: the typed reply, not JSON */
        LIST_ENTRY(PendingRead) link;
};

static void pending_read_free(PendingRead *p) {
        LIST_REMOVE(p, link);
        p->owner->n_reads--;
        control_request_cancel(p->request);
        sd_bus_message_unref(p->call);
        free(p->name);
        free(p);
}

static int append_device(sd_bus_message *reply, const Control *c, const Device *d);

static int reply_device(DbusManager *b, sd_bus_message *call, const char *name, bool typed) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Device *d;
        int r;

        if (!typed)
                return reply_devices_json(b, call, name);
        d = control_find_device(b->control, name);
        if (!d)
                return reply_control_error(call, -ENODEV, name);
        r = sd_bus_message_new_method_return(call, &reply);
        if (r < 0)
                return r;
        r = append_device(reply, b->control, d);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static void on_device_read(int error, void *userdata) {
        PendingRead *p = userdata;
        DbusManager *b = p->owner;
        int r;

        p->request = NULL; /* over: not to be cancelled */
        r = error == -ENODEV ? reply_control_error(p->call, error, p->name) : reply_device(b, p->call, p->name, p->typed);
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply with %s: %m, ignoring", p->name);
        pending_read_free(p);
        dbus_kick(b->dbus);
}

/* The kernel sends no event when only a size changes: the device is read before the answer. */
static int read_then_reply(DbusManager *b, sd_bus_message *call, const char *name, bool typed) {
        PendingRead *p = calloc(1, sizeof(*p));
        int r;

        if (!p || !(p->name = strdup(name))) {
                free(p);
                return -ENOMEM;
        }
        p->owner = b;
        p->typed = typed;
        p->call = sd_bus_message_ref(call);
        LIST_INSERT_HEAD(&b->reads, p, link);
        b->n_reads++;
        r = control_read(b->control, name, on_device_read, p, &p->request);
        if (r < 0) {
                pending_read_free(p);
                return reply_control_error(call, r, name);
        }
        return 1;
}

static int method_list_devices_json(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        const char *ifname;
        int r;

        r = sd_bus_message_read(call, "s", &ifname);
        if (r < 0)
                return r;
        r = check_name(ifname, error);
        if (r < 0)
                return r;
        if (!strempty(ifname))
                return read_then_reply(b, call, ifname, false);
        return reply_devices_json(b, call, NULL);
}

/* (issss(uuuu)(uuuu)u(bttuutttti)): ifindex, ifname, kind ("" for none), state, policy ("" for
 * none), the current and the desired sizes (gso, gro, gso_ipv4, gro_ipv4; 0 where unknown),
 * tso_max_size, and its big packets (evidence.h; zeros when never counted): watching, tx, rx,
 * tx_largest, rx_largest, ipv6, ipv4, missed, since (CLOCK_REALTIME µs), effective (1 yes, 0 no,
 * -1 not known). */
#define DEVICE_SIGNATURE "(issss(uuuu)(uuuu)u(bttuutttti))"

static int append_device(sd_bus_message *reply, const Control *c, const Device *d) {
        _cleanup_(freep) char *b1 = NULL, *b2 = NULL, *b3 = NULL, *full = control_device_name(d);
        /* the typed struct keeps its signature: another namespace's device is "NETNS/IFNAME" */
        const char *ifname = full ? utf8_safe(full, &b1) : NULL, *kind = utf8_safe(d->kind, &b2),
                   *policy = utf8_safe(d->match.policy_name, &b3);
        bool managed = d->life.state != DEVICE_UNMANAGED && d->match.policy_name;
        const Sizes none = {}, *cur = &d->current, *want = managed ? &d->life.desired : &none;
        bool v4 = control_engine_of(c, d)->ipv4_supported;
        const Evidence *ev = d->evidence;
        const EvidenceCounts none_counted = {}, *n = ev ? &ev->counts : &none_counted;
        int32_t effective = !ev || ev->verdict == EVIDENCE_UNKNOWN ? -1 : ev->verdict == EVIDENCE_EFFECTIVE;

        if (!ifname || !kind || !policy)
                return -ENOMEM;
        return sd_bus_message_append(reply, DEVICE_SIGNATURE, (int32_t) d->ifindex, ifname, kind,
                                     device_state_to_string(d->life.state), policy, cur->gso_max_size, cur->gro_max_size,
                                     v4 ? cur->gso_ipv4_max_size : 0, v4 ? cur->gro_ipv4_max_size : 0,
                                     want->gso_max_size, want->gro_max_size, v4 ? want->gso_ipv4_max_size : 0,
                                     v4 ? want->gro_ipv4_max_size : 0, d->tso_max_size, (int) evidence_watching(d),
                                     n->tx, n->rx, n->tx_largest, n->rx_largest, n->by_family[EVIDENCE_IPV6],
                                     n->by_family[EVIDENCE_IPV4], n->missed, ev ? ev->since_usec : UINT64_C(0),
                                     effective);
}

static int method_list_devices(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(b->control, &l, &n);
        if (r < 0)
                return r;

        r = sd_bus_message_new_method_return(call, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', DEVICE_SIGNATURE);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = append_device(reply, b->control, l[i]);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_get_device(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        const char *ifname;
        int r;

        r = sd_bus_message_read(call, "s", &ifname);
        if (r < 0)
                return r;
        r = check_name(ifname, error);
        if (r < 0)
                return r;
        return read_then_reply(b, call, ifname, true);
}

/* A Plan or Validate: first the bus is asked who sent it (the worker's slots are counted by UID),
 * then the worker runs. Owned by dbus.c's DbusCall, which holds the call (and so the text). */
struct PendingJob {
        DbusManager *manager;
        DbusCall *dc;         /* from run_job() on, */
        sd_bus_message *call; /*   and its call */
        ControlJob *job;
        bool plan;
        const char *policy; /* in the call's message; NULL: the loaded one (Plan only) */
};

static void pending_job_free(void *userdata) {
        PendingJob *p = userdata;
        control_job_cancel(p->job);
        free(p);
}

static int reply_job_error(sd_bus_message *call, int r) {
        if (r == -EBUSY)
                return sd_bus_reply_method_errorf(call, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                                  "Too many Plan and Validate calls waiting (max %u), try again",
                                                  WORKER_QUEUED_PER_UID_MAX);
        return reply_control_error(call, r, NULL);
}

/* One a(suus) of errors (`warnings`: without the "warning: " that marks them in text). */
static int append_errors(sd_bus_message *reply, const PolicyErrors *errs, bool warnings) {
        int r = sd_bus_message_open_container(reply, 'a', "(suus)");
        for (size_t i = 0; r >= 0 && i < errs->n; i++) {
                _cleanup_(freep) char *b1 = NULL, *b2 = NULL;
                const char *m = errs->items[i].message ?: "";
                if (warnings && strncmp(m, "warning: ", 9) == 0)
                        m += 9;
                const char *file = utf8_safe(errs->items[i].file, &b1), *msg = utf8_safe(m, &b2);
                r = file && msg ? sd_bus_message_append(reply, "(suus)", file, errs->items[i].line,
                                                        errs->items[i].column, msg)
                                : -ENOMEM;
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        return r;
}

static int reply_validate(sd_bus_message *call, const PolicyErrors *errs, const PolicyErrors *warnings) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(call, &reply);
        if (r >= 0)
                r = append_errors(reply, errs, false);
        if (r >= 0)
                r = append_errors(reply, warnings, true);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* The worker's reply object as the string reply, as it is (it is checked to be UTF-8 by sd-bus). */
static int reply_plan(sd_bus_message *call, const char *plan, size_t size) {
        _cleanup_(freep) char *text = strndup(plan, size);

        if (!text)
                return -ENOMEM;
        return sd_bus_reply_method_return(call, "s", text);
}

static void on_job_done(int error, const PolicyErrors *errs, const PolicyErrors *warnings, const char *plan,
                        size_t size, void *userdata) {
        PendingJob *p = userdata;
        int r;

        p->job = NULL; /* over: not to be cancelled */
        if (p->plan)
                r = error == -EINVAL && errs->n > 0 ? reply_policy_invalid(p->call, errs)
                    : error < 0                     ? reply_job_error(p->call, error)
                                                    : reply_plan(p->call, plan, size);
        else
                r = error < 0 && !(error == -EINVAL && errs->n > 0) ? reply_job_error(p->call, error)
                                                                    : reply_validate(p->call, errs, warnings);
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to %s(): %m, ignoring", p->plan ? "Plan" : "Validate");
        DbusManager *b = p->manager;
        dbus_call_end(p->dc);
        dbus_kick(b->dbus);
}

static void run_job(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata) {
        PendingJob *p = userdata;
        DbusManager *b = p->manager;
        int r;

        p->dc = dc;
        p->call = call;
        r = (p->plan ? control_plan : control_validate)(b->control, uid, p->policy, "<policy>", on_job_done, p,
                                                          &p->job);
        if (r < 0) {
                (void) reply_job_error(call, r);
                dbus_call_end(dc);
        }
}

static int method_job(sd_bus_message *call, DbusManager *b, bool plan, sd_bus_error *error) {
        const char *policy;
        PendingJob *p;
        int r;

        r = sd_bus_message_read(call, "s", &policy);
        if (r < 0)
                return r;
        r = check_policy(policy, error);
        if (r < 0)
                return r;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (PendingJob){.manager = b, .plan = plan, .policy = plan && strempty(policy) ? NULL : policy};
        return dbus_call_identified(b->dbus, call, plan ? "Plan" : "Validate", false, strlen(policy), run_job, p,
                                    pending_job_free, error);
}

static int method_plan(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_job(call, userdata, true, error);
}

static int method_validate(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_job(call, userdata, false, error);
}

/* ---- privileged methods ---- */

typedef enum PrivilegedOp {
        PRIVILEGED_RELOAD,
        PRIVILEGED_ROLLBACK,
        PRIVILEGED_RETRY,
        PRIVILEGED_TRY,
        PRIVILEGED_CONFIRM,
        PRIVILEGED_REVERT,
        _PRIVILEGED_OP_MAX,
        _PRIVILEGED_OP_INVALID = -EINVAL,
} PrivilegedOp;

static const char *const privileged_op_table[_PRIVILEGED_OP_MAX] = {
        [PRIVILEGED_RELOAD] = "Reload",
        [PRIVILEGED_ROLLBACK] = "Rollback",
        [PRIVILEGED_RETRY] = "Retry",
        [PRIVILEGED_TRY] = "Try",
        [PRIVILEGED_CONFIRM] = "Confirm",
        [PRIVILEGED_REVERT] = "Revert",
};

/* What a privileged call carries while the bus is asked who sent it; the strings are in the
 * call's message, which dbus.c holds. */
typedef struct PrivilegedCall {
        DbusManager *manager;
        PrivilegedOp op;
        const char *ifname; /* NULL: Reload, or every device */
        /* Try */
        const char *policy, *file, *target;
        uint64_t timeout_usec;
} PrivilegedCall;

static int run_try(sd_bus_message *call, PrivilegedCall *p) {
        Control *c = p->manager->control;
        PolicyErrors errs = {};
        char digest[17];
        int r;

        r = control_try(c, p->policy, strlen(p->policy), p->file ?: "<policy>", p->target,
                        p->timeout_usec ?: TRY_TIMEOUT_DEFAULT_USEC, &errs);
        if (r == -EINVAL && errs.n > 0)
                r = reply_policy_invalid(call, &errs);
        else if (r < 0)
                r = reply_try_error(call, r);
        else {
                format_digest(control_policy(c)->digest, digest);
                r = sd_bus_reply_method_return(call, "sst", digest, c->trial->target, c->trial->deadline_realtime);
        }
        policy_errors_clear(&errs);
        return r;
}

static void run_privileged(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata) {
        PrivilegedCall *p = userdata;
        Control *c = p->manager->control;
        const char *sender = sd_bus_message_get_sender(call);
        PolicyErrors errs = {}, warnings = {};
        char digest[17];
        int r = -EINVAL; /* every case sets it; gcc -O2 cannot see that */

        log_info("D-Bus: %s(%s%s%s) from %s", privileged_op_table[p->op], p->ifname ? "\"" : "", p->ifname ?: "",
                 p->ifname ? "\"" : "", sender ?: "?");
        switch (p->op) {
        case PRIVILEGED_RELOAD:
                r = control_reload(c, &errs, &warnings);
                if (r == -EINVAL)
                        r = reply_policy_invalid_warned(call, &errs, &warnings);
                else if (r < 0)
                        r = reply_control_error(call, r, NULL);
                else {
                        format_digest(control_policy(c)->digest, digest);
                        r = sd_bus_reply_method_return(call, "s", digest);
                }
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                break;
        case PRIVILEGED_ROLLBACK:
                r = control_rollback(c, p->ifname, NULL, NULL);
                r = r < 0 ? reply_control_error(call, r, p->ifname) : sd_bus_reply_method_return(call, NULL);
                break;
        case PRIVILEGED_RETRY:
                r = control_retry(c, p->ifname, NULL, NULL);
                r = r < 0 ? reply_control_error(call, r, p->ifname) : sd_bus_reply_method_return(call, NULL);
                break;
        case PRIVILEGED_TRY:
                r = run_try(call, p);
                break;
        case PRIVILEGED_CONFIRM: {
                _cleanup_(freep) char *target = c->trial && c->trial->running ? strdup(c->trial->target) : NULL;
                r = control_confirm(c);
                r = r < 0 ? reply_try_error(call, r) : sd_bus_reply_method_return(call, "s", target ?: "");
                break;
        }
        case PRIVILEGED_REVERT:
                r = control_revert(c);
                r = r < 0 ? reply_try_error(call, r) : sd_bus_reply_method_return(call, NULL);
                break;
        case _PRIVILEGED_OP_MAX:
        case _PRIVILEGED_OP_INVALID:
                r = -EINVAL;
                break;
        }
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to %s(): %m, ignoring", privileged_op_table[p->op]);
        dbus_call_end(dc);
}

static int method_privileged(sd_bus_message *call, DbusManager *b, PrivilegedOp op, sd_bus_error *error) {
        const char *ifname = NULL, *policy = NULL, *file = NULL, *target = NULL;
        uint64_t timeout = 0;
        PrivilegedCall *p;
        int r;

        if (op == PRIVILEGED_TRY) {
                r = sd_bus_message_read(call, "stss", &policy, &timeout, &file, &target);
                if (r < 0)
                        return r;
                r = check_policy(policy, error);
                if (r < 0)
                        return r;
                if (timeout != 0 && (timeout < TRY_TIMEOUT_MIN_USEC || timeout > TRY_TIMEOUT_MAX_USEC))
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "timeout_usec: 1s to 24h, or 0");
                if (strlen(file) > 4096 || (!strempty(target) && (target[0] != '/' || strlen(target) > 4096)))
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "file or target");
        } else if (op != PRIVILEGED_RELOAD && op != PRIVILEGED_CONFIRM && op != PRIVILEGED_REVERT) {
                r = sd_bus_message_read(call, "s", &ifname);
                if (r < 0)
                        return r;
                r = check_name(ifname, error);
                if (r < 0)
                        return r;
                if (strempty(ifname))
                        ifname = NULL; /* every device */
        }
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (PrivilegedCall){.manager = b, .op = op, .ifname = ifname, .policy = policy,
                              .file = strempty(file) ? NULL : file, .target = strempty(target) ? NULL : target,
                              .timeout_usec = timeout};
        return dbus_call_identified(b->dbus, call, privileged_op_table[op], true,
                                    (policy ? strlen(policy) : 0) + (ifname ? strlen(ifname) : 0), run_privileged,
                                    p, free, error);
}

static int method_reload(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_RELOAD, error);
}

static int method_rollback(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_ROLLBACK, error);
}

static int method_retry(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_RETRY, error);
}

static int method_try(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_TRY, error);
}

static int method_confirm(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_CONFIRM, error);
}

static int method_revert(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_privileged(call, userdata, PRIVILEGED_REVERT, error);
}

/* ---- Watch: answered when control_watch() says ---- */

/* Owned by dbus.c's DbusCall, which holds the call (and so the name). */
struct PendingWatch {
        DbusManager *manager;
        DbusCall *dc;         /* from run_watch() on, */
        sd_bus_message *call; /*   and its call */
        const char *ifname;
        uint64_t duration_usec;
        ControlWatch *watch;
};

static void pending_watch_free(void *userdata) {
        PendingWatch *p = userdata;
        control_watch_cancel(p->watch);
        free(p);
}

static void on_watch_done(int error, const Device *d, void *userdata) {
        PendingWatch *p = userdata;
        DbusManager *b = p->manager;
        int r;

        p->watch = NULL; /* over: not to be cancelled */
        if (error < 0)
                r = reply_control_error(p->call, error, p->ifname);
        else {
                _cleanup_(json_object_putp) json_object *o = json_object_new_object();
                if (o)
                        json_object_object_add(o, "device", control_device_json(b->control, d));
                r = reply_json(p->call, o);
        }
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to Watch(): %m, ignoring");
        dbus_call_end(p->dc);
        dbus_kick(b->dbus);
}

static void run_watch(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata) {
        PendingWatch *p = userdata;
        DbusManager *b = p->manager;
        int r;

        p->dc = dc;
        p->call = call;
        r = control_watch(b->control, p->ifname, p->duration_usec, on_watch_done, p, &p->watch);
        if (r < 0) {
                r = reply_control_error(call, r, p->ifname);
                if (r < 0)
                        log_debug_errno(r, "D-Bus: failed to reply to Watch(): %m, ignoring");
                dbus_call_end(dc);
                return;
        }
        log_dev_info(control_find_device(b->control, p->ifname), "watching for %llus, asked for over D-Bus by %s",
                     (unsigned long long) (p->duration_usec / USEC_PER_SEC), sd_bus_message_get_sender(call) ?: "?");
}

static int method_watch(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        const char *ifname;
        uint64_t duration;
        PendingWatch *p;
        int r;

        r = sd_bus_message_read(call, "st", &ifname, &duration);
        if (r < 0)
                return r;
        r = check_name(ifname, error);
        if (r < 0)
                return r;
        if (duration > EVIDENCE_DURATION_MAX_USEC)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "duration_usec must be 1 to %llu",
                                         (unsigned long long) EVIDENCE_DURATION_MAX_USEC);
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (PendingWatch){.manager = b, .ifname = ifname, .duration_usec = duration ?: EVIDENCE_DURATION_DEFAULT_USEC};
        return dbus_call_identified(b->dbus, call, "Watch", true, strlen(ifname), run_watch, p, pending_watch_free,
                                    error);
}

/* Every method is UNPRIVILEGED for sd-bus, which would otherwise check CAP_SYS_ADMIN with a
 * synchronous call; Reload, Rollback, Retry, Try, Confirm, Revert and Watch check the caller
 * themselves. The bus policy
 * (io.bigtcpd1.conf) lets only root send them in the first place. */
static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("PolicyDigest", "s", property_get_digest, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesTotal", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesManaged", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesPending", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesProbation", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesApplied", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesRolledBack", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesFailed", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DevicesUnsupported", "u", property_get_count, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Rollbacks", "t", property_get_rollbacks, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        /* "starting", "ready" or "degraded" (a device is rolled back or failed) */
        SD_BUS_PROPERTY("State", "s", property_get_state, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        /* the last reload (or the first load): refused or not, and when (CLOCK_REALTIME, usec) */
        SD_BUS_PROPERTY("LastReloadSuccessful", "b", property_get_last_reload, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastReloadTimestamp", "t", property_get_last_reload, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        /* No event marks the end of the first reconcile: read it, it announces nothing. */
        SD_BUS_PROPERTY("Ready", "b", property_get_ready, 0, 0),

        SD_BUS_METHOD_WITH_ARGS("GetStatusJSON", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", status),
                                method_get_status_json, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListDevicesJSON", SD_BUS_ARGS("s", ifname), SD_BUS_RESULT("s", devices),
                                method_list_devices_json, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListDevices", SD_BUS_NO_ARGS, SD_BUS_RESULT("a" DEVICE_SIGNATURE, devices),
                                method_list_devices, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetDevice", SD_BUS_ARGS("s", ifname), SD_BUS_RESULT(DEVICE_SIGNATURE, device),
                                method_get_device, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Plan", SD_BUS_ARGS("s", policy), SD_BUS_RESULT("s", plan), method_plan,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Validate", SD_BUS_ARGS("s", policy),
                                SD_BUS_RESULT("a(suus)", errors, "a(suus)", warnings), method_validate,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reload", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", digest), method_reload,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Rollback", SD_BUS_ARGS("s", ifname), SD_BUS_NO_RESULT, method_rollback,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Retry", SD_BUS_ARGS("s", ifname), SD_BUS_NO_RESULT, method_retry,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        /* timeout_usec 0: 120 s; file, target "": "<policy>", the main policy file */
        SD_BUS_METHOD_WITH_ARGS("Try", SD_BUS_ARGS("s", policy, "t", timeout_usec, "s", file, "s", target),
                                SD_BUS_RESULT("s", digest, "s", target, "t", deadline_usec), method_try,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Confirm", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", target), method_confirm,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Revert", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_revert,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Watch", SD_BUS_ARGS("s", ifname, "t", duration_usec), SD_BUS_RESULT("s", device),
                                method_watch, SD_BUS_VTABLE_UNPRIVILEGED),

        SD_BUS_SIGNAL_WITH_ARGS("RolledBack", SD_BUS_ARGS("s", ifname, "s", counter, "t", rise), 0),
        SD_BUS_VTABLE_END,
};

/* ---- the connection's life ---- */

static int on_attach(void *userdata, sd_bus *bus) {
        DbusManager *b = userdata;
        int r;

        r = sd_bus_add_object_vtable(bus, &b->vtable_slot, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, manager_vtable, b);
        if (r < 0)
                return r;
        b->watch_id = event_watch_add(control_events(b->control), on_control_event, b);
        if (b->watch_id == 0) {
                b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
                return -ENOMEM;
        }
        b->bus = bus;
        snapshot_take(b->control, &b->last);
        return 0;
}

static void on_detach(void *userdata) {
        DbusManager *b = userdata;

        evtimer_del(b->changed);
        while (!LIST_EMPTY(&b->reads))
                pending_read_free(LIST_FIRST(&b->reads));
        if (b->watch_id != 0) {
                event_watch_remove(control_events(b->control), b->watch_id);
                b->watch_id = 0;
        }
        b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
        b->bus = NULL;
}

/* Reads of the kernel in flight: no more calls are read meanwhile. */
static bool on_busy(void *userdata) {
        const DbusManager *b = userdata;
        return b->n_reads >= DBUS_READS_MAX;
}

static const DbusOps manager_dbus_ops = {
        .attach = on_attach,
        .detach = on_detach,
        .busy = on_busy,
};

int dbus_manager_new(struct event_base *base, Control *control, DbusManager **ret) {
        _cleanup_(dbus_manager_freep) DbusManager *b = calloc(1, sizeof(*b));
        int r;

        if (!b)
                return -ENOMEM;
        b->control = control;
        LIST_INIT(&b->reads);
        b->changed = evtimer_new(base, on_changed_timer, b);
        if (!b->changed)
                return -ENOMEM;
        r = dbus_new(base, DBUS_SERVICE_NAME, &manager_dbus_ops, b, &b->dbus);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(b);
        return 0;
}

void dbus_manager_free(DbusManager *b) {
        if (!b)
                return;
        dbus_free(b->dbus); /* detaches first */
        if (b->changed)
                event_free(b->changed);
        free(b);
}

bool dbus_manager_serving(const DbusManager *b) {
        return b && dbus_serving(b->dbus);
}
