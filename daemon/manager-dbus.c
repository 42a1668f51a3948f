/* manager-dbus.c — the io.bigtcpd1.Manager object: properties, PropertiesChanged, the RolledBack
 * signal, and the methods, each a call of control.h and its typed reply. */
#include <event2/event.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <sys/queue.h>
#include <systemd/sd-bus.h>

#include "manager-dbus.h"
#include "evidence.h"
#include "log-fields.h"
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


struct DbusManager {
        Control *control;
        Dbus *dbus;
        sd_bus *bus; /* while attached */
        sd_bus_slot *vtable_slot;
        Dbus *root; /* DBUS_ROOT_NAME's connection: methods only */
        sd_bus *root_bus; /* while attached */
        sd_bus_slot *root_vtable_slot;
        unsigned watch_id;     /* of the daemon's events, while attached */
        struct event *changed; /* coalesces PropertiesChanged */
        Snapshot last;
        sd_bus_track *subscribers;      /* of the Event signal (Subscribe()), UIDs other than 0; NULL: none */
        sd_bus_track *root_subscribers; /* … root's */
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

/* `o` as JSON text, made valid UTF-8 for a D-Bus string (in *buf when it had to be mended); NULL
 * when out of memory (`o` NULL too: its maker ran out). */
static const char *json_text(json_object *o, char **buf) {
        const char *text = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                                         JSON_C_TO_STRING_NOSLASHESCAPE)
                             : NULL;
        return text ? utf8_safe(text, buf) : NULL;
}

/* `o` as a D-Bus string reply. */
static int reply_json(sd_bus_message *call, json_object *o) {
        _cleanup_(freep) char *buf = NULL;
        const char *text = json_text(o, &buf);

        return text ? sd_bus_reply_method_return(call, "s", text) : -ENOMEM;
}

/* A JSON text as a string argument of `m`. */
static int append_json(sd_bus_message *m, json_object *o) {
        _cleanup_(freep) char *buf = NULL;
        const char *text = json_text(o, &buf);

        return text ? sd_bus_message_append(m, "s", text) : -ENOMEM;
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

/* Someone listens for the Event signal. */
static bool subscribed(const DbusManager *b) {
        return sd_bus_track_count(b->subscribers) > 0 || sd_bus_track_count(b->root_subscribers) > 0;
}

static void on_control_event(const Event *e, void *userdata) {
        DbusManager *b = userdata;
        int r;

        if (!b->bus)
                return;
        if (subscribed(b)) {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
                _cleanup_(freep) char *buf = NULL;
                r = control_event_write(e, &w);
                if (r != 0) {
                        const char *text = r > 0 ? json_writer_text(&w) : NULL;
                        r = text && (text = utf8_safe(text, &buf)) ? 0 : -ENOMEM;
                        if (r >= 0)
                                r = sd_bus_message_new_signal(b->bus, &m, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, "Event");
                        if (r >= 0)
                                r = sd_bus_message_append(m, "s", text);
                        if (r >= 0)
                                r = sd_bus_send(b->bus, m, NULL);
                        if (r < 0)
                                log_debug_errno(r, "D-Bus: failed to emit Event: %m, ignoring");
                        dbus_kick(b->dbus);
                }
        }
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
static int reply_devices_json(Control *c, sd_bus_message *call, const char *name) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        int r;

        if (!name) { /* every device: written as text, not built as a tree */
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                _cleanup_(freep) char *buf = NULL;
                const char *text;

                r = control_devices_write(c, &w);
                if (r >= 0 && (!(text = json_writer_text(&w)) || !(text = utf8_safe(text, &buf))))
                        r = -ENOMEM;
                if (r < 0)
                        return sd_bus_reply_method_errorf(call, operation_error_dbus(OPERATION_FAILED), "%s",
                                                          strerror(-r));
                return sd_bus_reply_method_return(call, "s", text);
        }
        r = control_devices_json(c, name, &o);
        if (r == -ENODEV)
                return sd_bus_reply_method_errorf(call, operation_error_dbus(OPERATION_NO_SUCH_DEVICE),
                                                  "No device \"%s\"", name);
        if (r < 0)
                return sd_bus_reply_method_errorf(call, operation_error_dbus(OPERATION_FAILED), "%s", strerror(-r));
        return reply_json(call, o);
}

/* (issss(uuuu)(uuuu)u(bttuutttti)): ifindex, ifname, kind ("" for none), state, policy ("" for
 * none), the current and the desired sizes (gso, gro, gso_ipv4, gro_ipv4; 0 where unknown),
 * tso_max_size, and its big packets (evidence.h; the eBPF observer's since it loaded when never
 * watched, as ListDevicesJSON has them; zeros when nothing counted them): watching, tx, rx,
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
        EvidenceView v = {.verdict = EVIDENCE_UNKNOWN}; /* zeros when nothing counted it */
        const EvidenceCounts *n = &v.counts;
        int32_t effective;

        if (!ifname || !kind || !policy)
                return -ENOMEM;
        (void) control_device_evidence(c, d, &v); /* its watch's, else the observer's: as ListDevicesJSON */
        effective = v.verdict == EVIDENCE_UNKNOWN ? -1 : v.verdict == EVIDENCE_EFFECTIVE;
        return sd_bus_message_append(reply, DEVICE_SIGNATURE, (int32_t) d->ifindex, ifname, kind,
                                     device_state_to_string(d->life.state), policy, cur->gso_max_size, cur->gro_max_size,
                                     v4 ? cur->gso_ipv4_max_size : 0, v4 ? cur->gro_ipv4_max_size : 0,
                                     want->gso_max_size, want->gro_max_size, v4 ? want->gso_ipv4_max_size : 0,
                                     v4 ? want->gro_ipv4_max_size : 0, d->tso_max_size, (int) v.watching,
                                     n->tx, n->rx, n->tx_largest, n->rx_largest, n->by_family[EVIDENCE_IPV6],
                                     n->by_family[EVIDENCE_IPV4], n->missed, v.since_usec,
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

/* The reply of an operation: its typed results, then what changed as JSON. */
static int reply_changes(sd_bus_message *call, const OperationResult *res) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(json_object_putp) json_object *changes = operation_changes_json(res);
        char digest[17];
        int r;

        r = sd_bus_message_new_method_return(call, &reply);
        if (r < 0)
                return r;
        format_digest(res->digest, digest);
        switch (res->kind) {
        case OPERATION_RELOAD:
                r = sd_bus_message_append(reply, "s", digest);
                break;
        case OPERATION_TRY:
                r = sd_bus_message_append(reply, "sst", digest, res->target ?: "", res->deadline_usec);
                break;
        case OPERATION_CONFIRM:
                r = sd_bus_message_append(reply, "s", res->target ?: "");
                break;
        default:
                break;
        }
        if (r >= 0)
                r = append_json(reply, changes);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int reply_result(Control *c, sd_bus_message *call, const OperationResult *res) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(freep) char *message = NULL;
        int r;

        if (res->error != OPERATION_OK) {
                message = operation_error_message(res);
                if (!message)
                        return -ENOMEM;
                return sd_bus_reply_method_errorf(call, operation_error_dbus(res->error), "%s", message);
        }
        switch (res->kind) {
        case OPERATION_READ:
                if (!streq_ptr(sd_bus_message_get_member(call), "GetDevice"))
                        return reply_devices_json(c, call, res->ifname);
                r = sd_bus_message_new_method_return(call, &reply);
                if (r >= 0)
                        r = append_device(reply, c, res->device);
                return r < 0 ? r : sd_bus_send(NULL, reply, NULL);
        case OPERATION_WATCH: {
                _cleanup_(json_object_putp) json_object *o = json_object_new_object();
                if (o)
                        json_object_object_add(o, "device", control_device_json(c, res->device));
                return reply_json(call, o);
        }
        case OPERATION_PLAN:
                return reply_plan(call, res->plan, res->plan_size);
        case OPERATION_VALIDATE:
                return reply_validate(call, res->errors, res->warnings);
        default:
                return reply_changes(call, res);
        }
}

static void on_operation_done(Operation *op, const OperationResult *res, void *userdata) {
        DbusCall *dc = userdata;
        sd_bus_message *call = dbus_call_message(dc);
        int r;

        r = reply_result(operation_control(op), call, res);
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to %s(): %m, ignoring", sd_bus_message_get_member(call));
        dbus_call_end(dc); /* frees op */
}

static bool privileged(OperationKind k) {
        return k != OPERATION_READ && k != OPERATION_PLAN && k != OPERATION_VALIDATE;
}

/* The caller is known: the operation runs, and answers the call when it completes. */
static void run_operation(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata) {
        Operation *op = userdata;
        OperationKind kind = operation_kind(op);
        const OperationArgs *a = operation_args(op);
        Control *c = operation_control(op);
        const char *sender = sd_bus_message_get_sender(call) ?: "?";
        int r;

        if (kind == OPERATION_WATCH) {
                Device *d = control_find_device(c, a->ifname);
                if (d)
                        log_dev_info(d, "watching for %llus, asked for over D-Bus by %s",
                                     (unsigned long long) ((a->usec ?: EVIDENCE_DURATION_DEFAULT_USEC) / USEC_PER_SEC),
                                     sender);
        } else if (privileged(kind))
                log_info("D-Bus: %s(%s%s%s) from %s", sd_bus_message_get_member(call), a->ifname ? "\"" : "",
                         a->ifname ?: "", a->ifname ? "\"" : "", sender);
        operation_set_uid(op, uid);
        r = operation_start(op, on_operation_done, dc);
        if (r < 0) {
                r = sd_bus_reply_method_errorf(call, operation_error_dbus(OPERATION_FAILED), "%s", strerror(-r));
                if (r < 0)
                        log_debug_errno(r, "D-Bus: failed to reply: %m, ignoring");
                dbus_call_end(dc);
        }
}

/* The connection a call came on. */
static Dbus *dbus_of(const DbusManager *b, sd_bus_message *call) {
        return b->root_bus && sd_bus_message_get_bus(call) == b->root_bus ? b->root : b->dbus;
}

/* Asks the bus who sent the call, then runs the operation; the operation is the call's, and
 * goes with it (dbus.c's DbusCall frees it). `args`' strings are in the call's message. */
static int start_operation(sd_bus_message *call, DbusManager *b, OperationKind kind, const OperationArgs *args,
                           sd_bus_error *error) {
        Operation *op;
        int r;

        r = operation_new(b->control, kind, args, &op);
        if (r < 0)
                return r;
        return dbus_call_identified(dbus_of(b, call), call, operation_kind_to_string(kind), privileged(kind),
                                    (args->policy ? strlen(args->policy) : 0) + (args->ifname ? strlen(args->ifname) : 0),
                                    run_operation, op, operation_freep_void, error);
}

/* The one argument of a method that takes a device name, checked. */
static int read_name(sd_bus_message *call, const char **ret, sd_bus_error *error) {
        int r = sd_bus_message_read(call, "s", ret);
        return r < 0 ? r : check_name(*ret, error);
}

static int method_list_devices_json(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        const char *ifname;
        int r;

        r = read_name(call, &ifname, error);
        if (r < 0)
                return r;
        /* The kernel sends no event when only a size changes: one device is read before the answer. */
        if (!strempty(ifname))
                return start_operation(call, b, OPERATION_READ, &(OperationArgs){.ifname = ifname}, error);
        return reply_devices_json(b->control, call, NULL);
}

static int method_get_device(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        const char *ifname;
        int r;

        r = read_name(call, &ifname, error);
        if (r < 0)
                return r;
        return start_operation(call, userdata, OPERATION_READ, &(OperationArgs){.ifname = ifname}, error);
}

/* Plan, Validate: in a worker, whose slots are counted by the caller's UID. */
static int method_job(sd_bus_message *call, DbusManager *b, OperationKind kind, sd_bus_error *error) {
        const char *policy;
        int r;

        r = sd_bus_message_read(call, "s", &policy);
        if (r < 0)
                return r;
        r = check_policy(policy, error);
        if (r < 0)
                return r;
        return start_operation(call, b, kind,
                               &(OperationArgs){.policy = kind == OPERATION_PLAN && strempty(policy) ? NULL : policy,
                                                .source = "<policy>"},
                               error);
}

static int method_plan(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_job(call, userdata, OPERATION_PLAN, error);
}

static int method_validate(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_job(call, userdata, OPERATION_VALIDATE, error);
}

static int method_plain(sd_bus_message *call, void *userdata, OperationKind kind, sd_bus_error *error) {
        return start_operation(call, userdata, kind, &(OperationArgs){}, error);
}

static int method_reload(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_plain(call, userdata, OPERATION_RELOAD, error);
}

static int method_confirm(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_plain(call, userdata, OPERATION_CONFIRM, error);
}

static int method_revert(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_plain(call, userdata, OPERATION_REVERT, error);
}

/* Rollback, Retry: one device, or ("") every device. */
static int method_device_op(sd_bus_message *call, void *userdata, OperationKind kind, sd_bus_error *error) {
        const char *ifname;
        int r;

        r = read_name(call, &ifname, error);
        if (r < 0)
                return r;
        return start_operation(call, userdata, kind, &(OperationArgs){.ifname = strempty(ifname) ? NULL : ifname},
                               error);
}

static int method_rollback(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_device_op(call, userdata, OPERATION_ROLLBACK, error);
}

static int method_retry(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        return method_device_op(call, userdata, OPERATION_RETRY, error);
}

static int method_try(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        const char *policy, *file, *target;
        uint64_t timeout;
        int r;

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
        return start_operation(call, userdata, OPERATION_TRY,
                               &(OperationArgs){.policy = policy,
                                                .policy_size = strlen(policy),
                                                .source = strempty(file) ? NULL : file,
                                                .target = strempty(target) ? NULL : target,
                                                .usec = timeout},
                               error);
}

/* Watch: answered when the device's window is over, or the call's own time and the window goes
 * on, or when the device goes. */
static int method_watch(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        const char *ifname;
        uint64_t duration;
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
        return start_operation(call, userdata, OPERATION_WATCH, &(OperationArgs){.ifname = ifname, .usec = duration},
                               error);
}

/* ---- Monitor's events: the Event signal, while someone has subscribed ---- */

static int on_subscribers_gone(sd_bus_track *t, void *userdata) {
        DbusManager *b = userdata;

        if (t == b->subscribers)
                b->subscribers = sd_bus_track_unref(b->subscribers);
        else
                b->root_subscribers = sd_bus_track_unref(b->root_subscribers);
        if (!subscribed(b))
                log_debug("D-Bus: no one subscribed any more: no Event signals");
        return 0;
}

/* The caller is known: root's names are tracked apart, so that others filling their share
 * never refuse root. */
static void run_subscribe(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata) {
        DbusManager *b = userdata;
        sd_bus_track **t = uid == 0 ? &b->root_subscribers : &b->subscribers;
        const char *sender = sd_bus_message_get_sender(call);
        int r = 0;

        if (!*t)
                r = sd_bus_track_new(b->bus, t, on_subscribers_gone, b);
        if (r >= 0 && uid != 0 && sd_bus_track_count(*t) >= DBUS_SUBSCRIBERS_MAX && !sd_bus_track_contains(*t, sender))
                r = sd_bus_reply_method_errorf(call, SD_BUS_ERROR_LIMITS_EXCEEDED, "%u subscribers already",
                                               DBUS_SUBSCRIBERS_MAX);
        else {
                if (r >= 0)
                        r = sd_bus_track_add_sender(*t, call);
                if (r >= 0) {
                        log_debug("D-Bus: %s subscribed to Event", sender ?: "?");
                        r = sd_bus_reply_method_return(call, NULL);
                } else
                        r = sd_bus_reply_method_errorf(call, operation_error_dbus(OPERATION_FAILED), "%s", strerror(-r));
        }
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to Subscribe(): %m, ignoring");
        dbus_call_end(dc);
}

static int method_subscribe(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;
        return dbus_call_identified(dbus_of(b, call), call, "Subscribe", false, 0, run_subscribe, b, NULL, error);
}

static int method_unsubscribe(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        DbusManager *b = userdata;

        if (b->subscribers)
                (void) sd_bus_track_remove_sender(b->subscribers, call);
        if (b->root_subscribers)
                (void) sd_bus_track_remove_sender(b->root_subscribers, call);
        return sd_bus_reply_method_return(call, NULL);
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
        /* `changes`: what the operation moved, refused, holds, released and left pending, as JSON
         * (the fields of io.bigtcpd.Manager.varlink's replies) */
        SD_BUS_METHOD_WITH_ARGS("Reload", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", digest, "s", changes), method_reload,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Rollback", SD_BUS_ARGS("s", ifname), SD_BUS_RESULT("s", changes), method_rollback,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Retry", SD_BUS_ARGS("s", ifname), SD_BUS_RESULT("s", changes), method_retry,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        /* timeout_usec 0: 120 s; file, target "": "<policy>", the main policy file */
        SD_BUS_METHOD_WITH_ARGS("Try", SD_BUS_ARGS("s", policy, "t", timeout_usec, "s", file, "s", target),
                                SD_BUS_RESULT("s", digest, "s", target, "t", deadline_usec, "s", changes),
                                method_try, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Confirm", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", target, "s", changes), method_confirm,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Revert", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", changes), method_revert,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Watch", SD_BUS_ARGS("s", ifname, "t", duration_usec), SD_BUS_RESULT("s", device),
                                method_watch, SD_BUS_VTABLE_UNPRIVILEGED),

        /* Monitor on D-Bus: after Subscribe(), every event Monitor streams on varlink comes as an
         * Event signal (its JSON), until the subscriber calls Unsubscribe() or leaves the bus */
        SD_BUS_METHOD_WITH_ARGS("Subscribe", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_subscribe,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Unsubscribe", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_unsubscribe,
                                SD_BUS_VTABLE_UNPRIVILEGED),

        SD_BUS_SIGNAL_WITH_ARGS("RolledBack", SD_BUS_ARGS("s", ifname, "s", counter, "t", rise), 0),
        SD_BUS_SIGNAL_WITH_ARGS("Event", SD_BUS_ARGS("s", event), 0),
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
        b->subscribers = sd_bus_track_unref(b->subscribers);
        b->root_subscribers = sd_bus_track_unref(b->root_subscribers);
        if (b->watch_id != 0) {
                event_watch_remove(control_events(b->control), b->watch_id);
                b->watch_id = 0;
        }
        b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
        b->bus = NULL;
}

/* Reads of the kernel in flight: no more calls are read meanwhile. */
static bool on_busy(void *userdata) {
        return operation_reads_in_flight() >= DBUS_READS_MAX;
}

static const DbusOps manager_dbus_ops = {
        .attach = on_attach,
        .detach = on_detach,
        .busy = on_busy,
};

/* DBUS_ROOT_NAME's connection: the methods and properties, no signals. */
static int on_root_attach(void *userdata, sd_bus *bus) {
        DbusManager *b = userdata;
        int r;

        r = sd_bus_add_object_vtable(bus, &b->root_vtable_slot, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE,
                                     manager_vtable, b);
        if (r < 0)
                return r;
        b->root_bus = bus;
        return 0;
}

static void on_root_detach(void *userdata) {
        DbusManager *b = userdata;

        b->root_vtable_slot = sd_bus_slot_unref(b->root_vtable_slot);
        b->root_bus = NULL;
}

static const DbusOps root_dbus_ops = {
        .attach = on_root_attach,
        .detach = on_root_detach,
        .busy = on_busy,
        .second = true,
};

int dbus_manager_new(struct event_base *base, Control *control, DbusManager **ret) {
        _cleanup_(dbus_manager_freep) DbusManager *b = calloc(1, sizeof(*b));
        int r;

        if (!b)
                return -ENOMEM;
        b->control = control;
        b->changed = evtimer_new(base, on_changed_timer, b);
        if (!b->changed)
                return -ENOMEM;
        r = dbus_new(base, DBUS_SERVICE_NAME, &manager_dbus_ops, b, &b->dbus);
        if (r < 0)
                return r;
        r = dbus_new(base, DBUS_ROOT_NAME, &root_dbus_ops, b, &b->root);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(b);
        return 0;
}

void dbus_manager_free(DbusManager *b) {
        if (!b)
                return;
        dbus_free(b->root); /* each detaches first */
        dbus_free(b->dbus);
        if (b->changed)
                event_free(b->changed);
        free(b);
}

bool dbus_manager_serving(const DbusManager *b) {
        return b && dbus_serving(b->dbus);
}
