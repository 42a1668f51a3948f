/* manager-varlink.c — the methods of io.bigtcpd.Manager: each checks its parameters and runs an
 * operation (operation.h) whose result it encodes. */
#include <limits.h>
#include <stdio.h>
#include <sys/queue.h>

#include "log-fields.h"
#include "manager-varlink.h"
#include "version.h"

typedef struct MonitorStream MonitorStream;

struct VarlinkManager {
        Control *control;
        VarlinkServer *server;
        LIST_HEAD(, MonitorStream) streams;
        unsigned watch_id; /* of the daemon's events, while there are streams */
        JsonWriter event_text; /* the event being streamed */
        VarlinkInterface interfaces[1];
        VarlinkServerInfo info; /* the server's, for its life */
};

static const char *opt_string(json_object *v) {
        return v ? json_object_get_string(v) : NULL;
}

static int reply_errno(VarlinkCall *call, int r) {
        json_object *p = json_object_new_object();
        if (!p)
                return -ENOMEM;
        json_object_object_add(p, "errno", json_object_new_int(abs(r)));
        json_object_object_add(p, "message", json_object_new_string(strerror(abs(r))));
        return varlink_call_error(call, VARLINK_INTERFACE ".Failed", p);
}

static int invalid_parameter(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "org.varlink.service.InvalidParameter",
                                  varlink_params1("parameter", json_object_new_string(name)));
}

static int method_get_status(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        return varlink_call_reply(call, control_status_json(m->control));
}

/* Every device, sorted by ifindex, written as JSON text (control_device_write()) straight into the
 * output buffer, a few dozen devices at a time. The reply is the same as one json-c tree would
 * give, but with 10000 devices building a tree, printing it and freeing it costs several times
 * more (malloc churn over tens of MiB) than this. */
#define LIST_CHUNK (64u * 1024u)
static int reply_all_devices(VarlinkCall *call, Control *control) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(control, &l, &n);
        if (r < 0)
                return reply_errno(call, r);
        r = varlink_call_reply_begin(call);
        json_writer_object_begin(&w);
        json_writer_key(&w, "devices");
        json_writer_array_begin(&w);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                if (control_device_write(control, l[i], &w) < 0)
                        return -ENOMEM; /* half a reply is queued: the connection cannot go on */
                if (w.len >= LIST_CHUNK || i + 1 == n) {
                        r = varlink_call_write(call, w.buf, w.len);
                        json_writer_sent(&w);
                }
        }
        json_writer_array_end(&w);
        json_writer_object_end(&w);
        if (r >= 0)
                r = json_writer_error(&w);
        if (r >= 0)
                r = varlink_call_write(call, w.buf, w.len);
        if (r >= 0)
                r = varlink_call_reply_end(call);
        return r;
}

/* ListDevices of one device (with what chose its policy), from the table. */
static int reply_device(VarlinkCall *call, Control *control, const char *name) {
        json_object *o = NULL;
        int r;

        r = control_devices_json(control, name, &o);
        if (r == -ENODEV)
                return varlink_call_error(call, VARLINK_INTERFACE ".NoSuchDevice",
                                          varlink_params1("ifname", json_object_new_string(name ?: "")));
        if (r < 0)
                return reply_errno(call, r);
        return varlink_call_reply(call, o);
}

/* The worker's reply object as the parameters, as it is. */
static int reply_plan(VarlinkCall *call, const char *plan, size_t size) {
        int r = varlink_call_reply_begin(call);
        if (r >= 0)
                r = varlink_call_write(call, plan, size);
        if (r >= 0)
                r = varlink_call_reply_end(call);
        return r;
}

/* An operation's result as the call's reply. */
static int reply_result(VarlinkCall *call, Control *control, const OperationResult *r) {
        json_object *o;

        if (r->error != OPERATION_OK)
                return varlink_call_error(call, operation_error_varlink(r->error), operation_error_json(r));
        switch (r->kind) {
        case OPERATION_READ:
                return r->device ? reply_device(call, control, r->ifname)
                                 : reply_all_devices(call, control);
        case OPERATION_WATCH:
                o = control_device_json(control, r->device);
                return o ? varlink_call_reply(call, varlink_params1("device", o)) : reply_errno(call, -ENOMEM);
        case OPERATION_PLAN:
                return reply_plan(call, r->plan, r->plan_size);
        default:
                o = operation_reply_json(r);
                return o ? varlink_call_reply(call, o) : reply_errno(call, -ENOMEM);
        }
}

static void on_operation_done(Operation *op, const OperationResult *r, void *userdata) {
        VarlinkCall *call = userdata;

        varlink_call_set_cancel(call, NULL, NULL);
        (void) reply_result(call, operation_control(op), r);
        operation_free(op);
}

static void keep_free(void *keep) {
        json_object_put(keep);
}

/* Runs the operation for the call: it answers the call when it completes, and goes with the
 * call when its caller goes first. `params` is kept while it runs: the strings of `args` are
 * its. */
static int run(VarlinkCall *call, VarlinkManager *m, OperationKind kind, OperationArgs args, json_object *params) {
        Operation *op;
        int r;

        args.keep = json_object_get(params);
        args.keep_free = keep_free;
        r = operation_new(m->control, kind, &args, &op);
        if (r < 0)
                return reply_errno(call, r);
        r = operation_start(op, on_operation_done, call);
        if (r < 0) {
                operation_free(op);
                return reply_errno(call, r);
        }
        varlink_call_set_cancel(call, operation_freep_void, op);
        return 0;
}

static int method_list_devices(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"ifname", json_type_string, false},
                {"refresh", json_type_boolean, false},
        };
        VarlinkManager *m = userdata;
        json_object *v[ELEMENTSOF(spec)];
        const char *name;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = opt_string(v[0]);
        /* The kernel sends no event when only a size changes: one device is read before the
         * answer, every device when asked to. */
        if (!name && !(v[1] && json_object_get_boolean(v[1])))
                return reply_all_devices(call, m->control);
        return run(call, m, OPERATION_READ, (OperationArgs){.ifname = name}, params);
}

/* A Monitor stream. The manager watches the engine's events once for all of them, and each event
 * is written once as text (into the manager's buffer, kept from one event to the next), whatever
 * the number of streams. */
struct MonitorStream {
        VarlinkManager *manager;
        VarlinkCall *call;
        LIST_ENTRY(MonitorStream) link;
};

static void on_monitor_cancel(void *userdata) {
        MonitorStream *s = userdata;
        VarlinkManager *m = s->manager;

        LIST_REMOVE(s, link);
        free(s);
        if (LIST_EMPTY(&m->streams)) {
                event_watch_remove(control_events(m->control), m->watch_id);
                m->watch_id = 0;
        }
}

static void on_event(const Event *e, void *userdata) {
        VarlinkManager *m = userdata;
        MonitorStream *s, *next;

        json_writer_reset(&m->event_text);
        if (control_event_write(e, &m->event_text) <= 0)
                return;
        /* a client that does not read is closed, which takes its stream out of the list */
        for (s = LIST_FIRST(&m->streams); s; s = next) {
                next = LIST_NEXT(s, link);
                (void) varlink_call_notify_json(s->call, m->event_text.buf, m->event_text.len);
        }
}

static int method_monitor(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        MonitorStream *s;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        if (!varlink_call_more(call))
                return varlink_call_error(call, "org.varlink.service.ExpectedMore", NULL);
        if (m->watch_id == 0) {
                m->watch_id = event_watch_add(control_events(m->control), on_event, m);
                if (m->watch_id == 0)
                        return reply_errno(call, -ENOMEM);
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                if (LIST_EMPTY(&m->streams)) {
                        event_watch_remove(control_events(m->control), m->watch_id);
                        m->watch_id = 0;
                }
                return reply_errno(call, -ENOMEM);
        }
        s->manager = m;
        s->call = call;
        LIST_INSERT_HEAD(&m->streams, s, link);
        varlink_call_set_cancel(call, on_monitor_cancel, s);
        log_debug("varlink: pid %d uid %u is monitoring", (int) varlink_call_pid(call), (unsigned) varlink_call_uid(call));
        return varlink_call_notify(call, varlink_params1("event", json_object_new_string("subscribed")));
}

static bool source_too_long(VarlinkCall *call, json_object *v) {
        if (!v || strlen(json_object_get_string(v)) <= VARLINK_SOURCE_MAX)
                return false;
        (void) invalid_parameter(call, "source");
        return true;
}

/* Plan and Validate: a policy (required for Validate; Plan without one plans the running one)
 * and its source's name. */
static int method_policy_check(VarlinkCall *call, json_object *params, void *userdata, OperationKind kind,
                               bool policy_required) {
        const VarlinkParam spec[] = {
                {"policy", json_type_string, policy_required},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)];

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0 || source_too_long(call, v[1]))
                return 0;
        return run(call, userdata, kind,
                   (OperationArgs){.policy = opt_string(v[0]), .source = opt_string(v[1]), .uid = varlink_call_uid(call)},
                   params);
}

static int method_plan(VarlinkCall *call, json_object *params, void *userdata) {
        return method_policy_check(call, params, userdata, OPERATION_PLAN, false);
}

static int method_validate(VarlinkCall *call, json_object *params, void *userdata) {
        return method_policy_check(call, params, userdata, OPERATION_VALIDATE, true);
}

static int method_try(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, true},
                {"timeout_usec", json_type_int, false},
                {"file", json_type_string, false},
                {"target", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)];
        const char *file, *target;
        uint64_t timeout = TRY_TIMEOUT_DEFAULT_USEC;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        if (v[1]) {
                int64_t t = json_object_get_int64(v[1]);
                if (t < (int64_t) TRY_TIMEOUT_MIN_USEC || t > (int64_t) TRY_TIMEOUT_MAX_USEC)
                        return invalid_parameter(call, "timeout_usec");
                timeout = (uint64_t) t;
        }
        file = opt_string(v[2]) ?: "<policy>";
        target = opt_string(v[3]);
        if (strlen(file) > VARLINK_SOURCE_MAX)
                return invalid_parameter(call, "file");
        /* JSON may carry a NUL ("\u0000"); a policy file cannot */
        if (strlen(json_object_get_string(v[0])) != (size_t) json_object_get_string_len(v[0]))
                return invalid_parameter(call, "policy");
        if (target && (target[0] != '/' || strlen(target) > PATH_MAX))
                return invalid_parameter(call, "target");
        log_info("varlink: try of %s asked for by pid %d", file, (int) varlink_call_pid(call));
        return run(call, userdata, OPERATION_TRY,
                   (OperationArgs){.policy = json_object_get_string(v[0]),
                                   .policy_size = (size_t) json_object_get_string_len(v[0]),
                                   .source = file,
                                   .target = target,
                                   .usec = timeout},
                   params);
}

/* Reload, Confirm, Revert: no parameters. */
static int method_plain(VarlinkCall *call, json_object *params, VarlinkManager *m, OperationKind kind) {
        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        log_info("varlink: %s asked for by pid %d", operation_kind_to_string(kind), (int) varlink_call_pid(call));
        return run(call, m, kind, (OperationArgs){}, params);
}

static int method_confirm(VarlinkCall *call, json_object *params, void *userdata) {
        return method_plain(call, params, userdata, OPERATION_CONFIRM);
}

static int method_revert(VarlinkCall *call, json_object *params, void *userdata) {
        return method_plain(call, params, userdata, OPERATION_REVERT);
}

static int method_reload(VarlinkCall *call, json_object *params, void *userdata) {
        return method_plain(call, params, userdata, OPERATION_RELOAD);
}

/* Rollback, Retry: one device, or (null) every device. */
static int device_op(VarlinkCall *call, json_object *params, VarlinkManager *m, OperationKind kind) {
        static const VarlinkParam spec[] = {{"ifname", json_type_string, false}};
        json_object *v[ELEMENTSOF(spec)];
        const char *name;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = opt_string(v[0]);
        log_info("varlink: %s of %s asked for by pid %d", operation_kind_to_string(kind), name ?: "every device",
                 (int) varlink_call_pid(call));
        return run(call, m, kind, (OperationArgs){.ifname = name}, params);
}

static int method_rollback(VarlinkCall *call, json_object *params, void *userdata) {
        return device_op(call, params, userdata, OPERATION_ROLLBACK);
}

static int method_retry(VarlinkCall *call, json_object *params, void *userdata) {
        return device_op(call, params, userdata, OPERATION_RETRY);
}

/* A Watch: answered when the device's window is over, or the call's own time and the window
 * goes on, or when the device goes. */
static int method_watch(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"ifname", json_type_string, true},
                {"duration_usec", json_type_int, false},
        };
        json_object *v[ELEMENTSOF(spec)];
        const char *name;
        int64_t duration = EVIDENCE_DURATION_DEFAULT_USEC;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = json_object_get_string(v[0]);
        if (v[1])
                duration = json_object_get_int64(v[1]);
        if (duration <= 0 || (uint64_t) duration > EVIDENCE_DURATION_MAX_USEC)
                return invalid_parameter(call, "duration_usec");
        Device *d = control_find_device(((VarlinkManager *) userdata)->control, name);
        if (d)
                log_dev_info(d, "watching for %llus, asked for over varlink by pid %d",
                             (unsigned long long) (duration / USEC_PER_SEC), (int) varlink_call_pid(call));
        return run(call, userdata, OPERATION_WATCH, (OperationArgs){.ifname = name, .usec = (uint64_t) duration},
                   params);
}

static const VarlinkMethod methods[] = {
        {VARLINK_INTERFACE, "GetStatus", false, method_get_status},
        {VARLINK_INTERFACE, "ListDevices", false, method_list_devices},
        {VARLINK_INTERFACE, "Monitor", false, method_monitor},
        {VARLINK_INTERFACE, "Plan", false, method_plan},
        {VARLINK_INTERFACE, "Validate", false, method_validate},
        {VARLINK_INTERFACE, "Reload", true, method_reload},
        {VARLINK_INTERFACE, "Rollback", true, method_rollback},
        {VARLINK_INTERFACE, "Retry", true, method_retry},
        {VARLINK_INTERFACE, "Try", true, method_try},
        {VARLINK_INTERFACE, "Confirm", true, method_confirm},
        {VARLINK_INTERFACE, "Revert", true, method_revert},
        {VARLINK_INTERFACE, "Watch", true, method_watch},
};

int varlink_manager_new(struct event_base *base, Control *control, const char *path, VarlinkManager **ret) {
        _cleanup_(varlink_manager_freep) VarlinkManager *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->control = control;
        LIST_INIT(&m->streams);
        m->interfaces[0] = (VarlinkInterface){VARLINK_INTERFACE, varlink_interface_description,
                                              varlink_interface_description_size};
        m->info = (VarlinkServerInfo){
                .vendor = "bigtcpd",
                .product = "bigtcpd",
                .version = bigtcpd_version,
                .url = "https://github.com/bigtcpd/bigtcpd",
                .interfaces = m->interfaces,
                .n_interfaces = ELEMENTSOF(m->interfaces),
                .methods = methods,
                .n_methods = ELEMENTSOF(methods),
                .error_interface = VARLINK_INTERFACE,
                .userdata = m,
        };
        r = varlink_server_new(base, path, &m->info, &m->server);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

void varlink_manager_free(VarlinkManager *m) {
        if (!m)
                return;
        varlink_server_free(m->server);
        json_writer_done(&m->event_text);
        free(m);
}

VarlinkServer *varlink_manager_server(VarlinkManager *m) {
        return m->server;
}
