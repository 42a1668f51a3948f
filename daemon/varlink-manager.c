/* varlink-manager.c — the methods of io.bigtcpd.Manager. */
#include <stdio.h>

#include "log.h"
#include "varlink-manager.h"

struct VarlinkManager {
        Control *control;
        VarlinkServer *server;
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

static int reply_policy_invalid(VarlinkCall *call, const PolicyErrors *errs) {
        return varlink_call_error(call, VARLINK_INTERFACE ".PolicyInvalid",
                                  varlink_params1("errors", control_errors_json(errs)));
}

static int reply_no_such_device(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, VARLINK_INTERFACE ".NoSuchDevice",
                                  varlink_params1("ifname", json_object_new_string(name ?: "")));
}

static int method_get_status(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        return varlink_call_reply(call, control_status_json(m->control));
}

/* Every device, sorted by ifindex, serialized one device at a time straight into the output
 * buffer. The reply is the same as one json-c tree would give, but with 10000 devices building
 * that tree, printing it and freeing it costs several times more (malloc churn over tens of
 * MiB) than this. */
static int reply_all_devices(VarlinkCall *call, Control *control) {
        static const char head[] = "{\"devices\":[", tail[] = "]}";
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(control, &l, &n);
        if (r < 0)
                return reply_errno(call, r);
        r = varlink_call_reply_begin(call);
        if (r >= 0)
                r = varlink_call_write(call, head, sizeof(head) - 1);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                _cleanup_(json_object_putp) json_object *o = control_device_json(control, l[i]);
                const char *text;
                size_t len;

                text = o ? json_object_to_json_string_length(
                                   o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
                         : NULL;
                if (!text)
                        return -ENOMEM; /* half a reply is queued: the connection cannot go on */
                if (i > 0)
                        r = varlink_call_write(call, ",", 1);
                if (r >= 0)
                        r = varlink_call_write(call, text, len);
        }
        if (r >= 0)
                r = varlink_call_write(call, tail, sizeof(tail) - 1);
        if (r >= 0)
                r = varlink_call_reply_end(call);
        return r;
}

static int reply_device(VarlinkCall *call, Control *control, const char *name) {
        json_object *o = NULL;
        int r;

        r = control_devices_json(control, name, &o);
        if (r == -ENODEV)
                return reply_no_such_device(call, name);
        if (r < 0)
                return reply_errno(call, r);
        return varlink_call_reply(call, o);
}

/* A ListDevices waiting for the kernel to be read. */
typedef struct PendingList {
        VarlinkManager *manager;
        VarlinkCall *call;
        ControlRequest *request;
        char *name; /* NULL: every device */
} PendingList;

static void pending_list_free(PendingList *p) {
        free(p->name);
        free(p);
}

static void on_list_cancel(void *userdata) {
        PendingList *p = userdata;
        control_request_cancel(p->request);
        pending_list_free(p);
}

static void on_list_read(int error, void *userdata) {
        PendingList *p = userdata;
        VarlinkCall *call = p->call;
        Control *control = p->manager->control;
        _cleanup_(freep) char *name = TAKE_PTR(p->name);

        varlink_call_set_cancel(call, NULL, NULL);
        pending_list_free(p);
        /* a read that failed still has the table to answer from; a device that went is gone */
        if (error == -ENODEV)
                (void) reply_no_such_device(call, name);
        else if (name)
                (void) reply_device(call, control, name);
        else
                (void) reply_all_devices(call, control);
}

static int method_list_devices(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"ifname", json_type_string, false},
                {"refresh", json_type_boolean, false},
        };
        VarlinkManager *m = userdata;
        json_object *v[ELEMENTSOF(spec)];
        const char *name;
        PendingList *p;
        int r;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = opt_string(v[0]);
        /* The kernel sends no event when only a size changes: one device is read before the
         * answer, every device when asked to. */
        if (!name && !(v[1] && json_object_get_boolean(v[1])))
                return reply_all_devices(call, m->control);
        p = calloc(1, sizeof(*p));
        if (!p || (name && !(p->name = strdup(name)))) {
                free(p);
                return reply_errno(call, -ENOMEM);
        }
        p->manager = m;
        p->call = call;
        r = control_read(m->control, name, on_list_read, p, &p->request);
        if (r < 0) {
                pending_list_free(p);
                return r == -ENODEV ? reply_no_such_device(call, name) : reply_errno(call, r);
        }
        varlink_call_set_cancel(call, on_list_cancel, p);
        return 0;
}

/* A Monitor stream: the call, and its watch of the engine's events. */
typedef struct MonitorStream {
        VarlinkManager *manager;
        VarlinkCall *call;
        unsigned watch_id;
} MonitorStream;

static void on_monitor_cancel(void *userdata) {
        MonitorStream *s = userdata;
        event_watch_remove(&s->manager->control->engine->events, s->watch_id);
        free(s);
}

static void on_event(const Event *e, void *userdata) {
        MonitorStream *s = userdata;
        json_object *o = control_event_json(e);

        if (o)
                (void) varlink_call_notify(s->call, o); /* a client that does not read is closed */
}

static int method_monitor(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        MonitorStream *s;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        if (!varlink_call_more(call))
                return varlink_call_error(call, "org.varlink.service.ExpectedMore", NULL);
        s = calloc(1, sizeof(*s));
        if (!s)
                return reply_errno(call, -ENOMEM);
        s->manager = m;
        s->call = call;
        s->watch_id = event_watch_add(&m->control->engine->events, on_event, s);
        if (s->watch_id == 0) {
                free(s);
                return reply_errno(call, -ENOMEM);
        }
        varlink_call_set_cancel(call, on_monitor_cancel, s);
        log_debug("varlink: pid %d uid %u is monitoring", (int) varlink_call_pid(call), (unsigned) varlink_call_uid(call));
        return varlink_call_notify(call, varlink_params1("event", json_object_new_string("subscribed")));
}

static bool source_too_long(VarlinkCall *call, json_object *v) {
        if (!v || strlen(json_object_get_string(v)) <= VARLINK_SOURCE_MAX)
                return false;
        (void) varlink_call_error(call, "org.varlink.service.InvalidParameter",
                                  varlink_params1("parameter", json_object_new_string("source")));
        return true;
}

static int method_plan(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, false},
                {"source", json_type_string, false},
        };
        VarlinkManager *m = userdata;
        json_object *v[ELEMENTSOF(spec)], *l = NULL;
        PolicyErrors errs = {};
        int r;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0 || source_too_long(call, v[1]))
                return 0;
        r = control_plan(m->control, opt_string(v[0]), opt_string(v[1]), &l, &errs);
        if (r == -EINVAL && errs.n > 0)
                r = reply_policy_invalid(call, &errs);
        else if (r < 0)
                r = reply_errno(call, r);
        else
                r = varlink_call_reply(call, varlink_params1("devices", l));
        policy_errors_clear(&errs);
        return r;
}

static int method_validate(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, true},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)], *p;
        PolicyErrors errs = {};
        int r;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0 || source_too_long(call, v[1]))
                return 0;
        r = control_validate(json_object_get_string(v[0]), opt_string(v[1]), &errs);
        if (r < 0 && !(r == -EINVAL && errs.n > 0)) {
                policy_errors_clear(&errs);
                return reply_errno(call, r);
        }
        p = json_object_new_object();
        if (p) {
                json_object_object_add(p, "valid", json_object_new_boolean(r >= 0));
                json_object_object_add(p, "errors", control_errors_json(&errs));
        }
        policy_errors_clear(&errs);
        return p ? varlink_call_reply(call, p) : -ENOMEM;
}

static int method_reload(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        PolicyErrors errs = {};
        char digest[17];
        int r;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        log_info("varlink: reload asked for by pid %d", (int) varlink_call_pid(call));
        r = control_reload(m->control, &errs);
        if (r == -EINVAL && errs.n > 0)
                r = reply_policy_invalid(call, &errs);
        else if (r < 0)
                r = reply_errno(call, r);
        else {
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) m->control->engine->policy->digest);
                r = varlink_call_reply(call, varlink_params1("digest", json_object_new_string(digest)));
        }
        policy_errors_clear(&errs);
        return r;
}

static int reply_device_op(VarlinkCall *call, int r, const char *name) {
        if (r == -ENODEV)
                return reply_no_such_device(call, name);
        if (r == -EALREADY)
                return varlink_call_error(call, VARLINK_INTERFACE ".NothingToDo",
                                          varlink_params1("ifname", name ? json_object_new_string(name) : NULL));
        if (r < 0)
                return reply_errno(call, r);
        return varlink_call_reply(call, NULL);
}

static int device_op(VarlinkCall *call, json_object *params, VarlinkManager *m, const char *what,
                     int (*op)(Control *c, const char *name)) {
        static const VarlinkParam spec[] = {{"ifname", json_type_string, false}};
        json_object *v[ELEMENTSOF(spec)];
        const char *name;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = opt_string(v[0]);
        log_info("varlink: %s of %s asked for by pid %d", what, name ?: "every device", (int) varlink_call_pid(call));
        return reply_device_op(call, op(m->control, name), name);
}

static int method_rollback(VarlinkCall *call, json_object *params, void *userdata) {
        return device_op(call, params, userdata, "rollback", control_rollback);
}

static int method_retry(VarlinkCall *call, json_object *params, void *userdata) {
        return device_op(call, params, userdata, "retry", control_retry);
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
};

int varlink_manager_new(struct event_base *base, Control *control, const char *path, VarlinkManager **ret) {
        _cleanup_(varlink_manager_freep) VarlinkManager *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->control = control;
        m->interfaces[0] = (VarlinkInterface){VARLINK_INTERFACE, varlink_interface_description,
                                              varlink_interface_description_size};
        m->info = (VarlinkServerInfo){
                .vendor = "bigtcpd",
                .product = "bigtcpd",
                .version = BIGTCPD_VERSION,
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
        free(m);
}

VarlinkServer *varlink_manager_server(VarlinkManager *m) {
        return m->server;
}
