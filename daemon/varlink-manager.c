/* varlink-manager.c — the methods of io.bigtcpd.Manager. */
#include <limits.h>
#include <stdio.h>
#include <sys/queue.h>

#include "log.h"
#include "varlink-manager.h"
#include "version.h"

typedef struct MonitorStream MonitorStream;

struct VarlinkManager {
        Control *control;
        VarlinkServer *server;
        LIST_HEAD(, MonitorStream) streams;
        unsigned watch_id; /* of the daemon's events, while there are streams */
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

/* `warnings` (a refused reload's): beside the errors, in their own field. */
static int reply_policy_invalid_warned(VarlinkCall *call, const PolicyErrors *errs, const PolicyErrors *warnings) {
        json_object *p = varlink_params1("errors", control_errors_json(errs));
        if (p && warnings)
                json_object_object_add(p, "warnings", control_warnings_json(warnings));
        return varlink_call_error(call, VARLINK_INTERFACE ".PolicyInvalid", p);
}

static int reply_policy_invalid(VarlinkCall *call, const PolicyErrors *errs) {
        return reply_policy_invalid_warned(call, errs, NULL);
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

/* A Monitor stream. The manager watches the engine's events once for all of them, and each event
 * is serialized once, whatever the number of streams. */
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
        _cleanup_(json_object_putp) json_object *o = control_event_json(e);
        MonitorStream *s, *next;
        const char *text;
        size_t len;

        if (!o)
                return;
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!text)
                return;
        /* a client that does not read is closed, which takes its stream out of the list */
        for (s = LIST_FIRST(&m->streams); s; s = next) {
                next = LIST_NEXT(s, link);
                (void) varlink_call_notify_json(s->call, text, len);
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
        (void) varlink_call_error(call, "org.varlink.service.InvalidParameter",
                                  varlink_params1("parameter", json_object_new_string("source")));
        return true;
}

/* A Plan or Validate in a worker. */
typedef struct PendingJob {
        VarlinkCall *call;
        ControlJob *job;
        bool plan;
        json_object *policy; /* the text the job reads (control_plan() does not copy it) */
} PendingJob;

static void pending_job_free(PendingJob *p) {
        json_object_put(p->policy);
        free(p);
}

static void on_job_cancel(void *userdata) {
        PendingJob *p = userdata;
        control_job_cancel(p->job);
        pending_job_free(p);
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

static int reply_validate(VarlinkCall *call, int error, const PolicyErrors *errs, const PolicyErrors *warnings) {
        json_object *p = json_object_new_object();
        if (!p)
                return -ENOMEM;
        json_object_object_add(p, "valid", json_object_new_boolean(error >= 0));
        json_object_object_add(p, "errors", control_errors_json(errs));
        json_object_object_add(p, "warnings", control_warnings_json(warnings));
        return varlink_call_reply(call, p);
}

static int reply_job_error(VarlinkCall *call, int r) {
        if (r == -EBUSY)
                return varlink_call_error(call, VARLINK_INTERFACE ".Busy",
                                          varlink_params1("max", json_object_new_int(WORKER_QUEUED_PER_UID_MAX)));
        return reply_errno(call, r);
}

static void on_job_done(int error, const PolicyErrors *errs, const PolicyErrors *warnings, const char *plan_reply,
                        size_t size, void *userdata) {
        PendingJob *p = userdata;
        VarlinkCall *call = p->call;
        bool plan = p->plan;

        varlink_call_set_cancel(call, NULL, NULL);
        pending_job_free(p);
        if (error == -EINVAL && errs->n > 0)
                (void) (plan ? reply_policy_invalid(call, errs) : reply_validate(call, error, errs, warnings));
        else if (error < 0)
                (void) reply_job_error(call, error);
        else
                (void) (plan ? reply_plan(call, plan_reply, size) : reply_validate(call, 0, errs, warnings));
}

static int start_job(VarlinkCall *call, VarlinkManager *m, bool plan, json_object *policy, const char *source) {
        PendingJob *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return reply_errno(call, -ENOMEM);
        p->call = call;
        p->plan = plan;
        p->policy = json_object_get(policy);
        r = (plan ? control_plan : control_validate)(m->control, varlink_call_uid(call), opt_string(policy), source,
                                                     on_job_done, p, &p->job);
        if (r < 0) {
                pending_job_free(p);
                return reply_job_error(call, r);
        }
        varlink_call_set_cancel(call, on_job_cancel, p);
        return 0;
}

static int method_plan(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, false},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)];

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0 || source_too_long(call, v[1]))
                return 0;
        return start_job(call, userdata, true, v[0], opt_string(v[1]));
}

static int method_validate(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, true},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)];

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0 || source_too_long(call, v[1]))
                return 0;
        return start_job(call, userdata, false, v[0], opt_string(v[1]));
}

static int reply_try_running(VarlinkCall *call, const PolicyTry *t) {
        json_object *p = json_object_new_object();
        if (!p)
                return -ENOMEM;
        json_object_object_add(p, "file", json_object_new_string(t && t->file ? t->file : ""));
        json_object_object_add(p, "deadline_usec", json_object_new_int64(t ? (int64_t) t->deadline_realtime : 0));
        return varlink_call_error(call, VARLINK_INTERFACE ".TryRunning", p);
}

static int reply_no_try(VarlinkCall *call) {
        return varlink_call_error(call, VARLINK_INTERFACE ".NoTry", NULL);
}

static int invalid_parameter(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "org.varlink.service.InvalidParameter",
                                  varlink_params1("parameter", json_object_new_string(name)));
}

static int method_try(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"policy", json_type_string, true},
                {"timeout_usec", json_type_int, false},
                {"file", json_type_string, false},
                {"target", json_type_string, false},
        };
        VarlinkManager *m = userdata;
        json_object *v[ELEMENTSOF(spec)];
        PolicyErrors errs = {};
        const char *file, *target;
        uint64_t timeout = TRY_TIMEOUT_DEFAULT_USEC;
        char digest[17];
        int r;

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
        r = control_try(m->control, json_object_get_string(v[0]), (size_t) json_object_get_string_len(v[0]), file,
                        target, timeout, &errs);
        if (r == -EINVAL && errs.n > 0)
                r = reply_policy_invalid(call, &errs);
        else if (r == -EBUSY)
                r = reply_try_running(call, m->control->trial);
        else if (r == -EXDEV)
                r = varlink_call_error(call, VARLINK_INTERFACE ".TargetNotRead",
                                       varlink_params1("target", json_object_new_string(target ?: "")));
        else if (r == -ERANGE)
                r = invalid_parameter(call, "timeout_usec");
        else if (r < 0)
                r = reply_errno(call, r);
        else {
                json_object *p = json_object_new_object();
                const PolicyTry *t = m->control->trial;
                if (!p)
                        r = -ENOMEM;
                else {
                        snprintf(digest, sizeof(digest), "%016llx",
                                 (unsigned long long) control_policy(m->control)->digest);
                        json_object_object_add(p, "digest", json_object_new_string(digest));
                        json_object_object_add(p, "target", json_object_new_string(t->target));
                        json_object_object_add(p, "deadline_usec", json_object_new_int64((int64_t) t->deadline_realtime));
                        r = varlink_call_reply(call, p);
                }
        }
        policy_errors_clear(&errs);
        return r;
}

static int method_confirm(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        _cleanup_(freep) char *target = NULL;
        int r;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        log_info("varlink: confirm asked for by pid %d", (int) varlink_call_pid(call));
        if (m->control->trial && m->control->trial->running && !(target = strdup(m->control->trial->target)))
                return reply_errno(call, -ENOMEM);
        r = control_confirm(m->control);
        if (r == -ENOENT)
                return reply_no_try(call);
        if (r < 0 && policy_try_install_problem(r)) {
                json_object *p = json_object_new_object();
                if (!p)
                        return -ENOMEM;
                json_object_object_add(p, "errno", json_object_new_int(-r));
                json_object_object_add(p, "message", json_object_new_string(policy_try_install_problem(r)));
                return varlink_call_error(call, VARLINK_INTERFACE ".Failed", p);
        }
        if (r < 0)
                return reply_errno(call, r);
        return varlink_call_reply(call, varlink_params1("target", json_object_new_string(target ?: "")));
}

static int method_revert(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        int r;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        log_info("varlink: revert asked for by pid %d", (int) varlink_call_pid(call));
        r = control_revert(m->control);
        if (r == -ENOENT)
                return reply_no_try(call);
        if (r < 0)
                return reply_errno(call, r);
        return varlink_call_reply(call, NULL);
}

static int method_reload(VarlinkCall *call, json_object *params, void *userdata) {
        VarlinkManager *m = userdata;
        PolicyErrors errs = {}, warnings = {};
        char digest[17];
        int r;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        log_info("varlink: reload asked for by pid %d", (int) varlink_call_pid(call));
        r = control_reload(m->control, &errs, &warnings);
        if (r == -EINVAL && errs.n > 0)
                r = reply_policy_invalid_warned(call, &errs, &warnings);
        else if (r == -EBUSY)
                r = reply_try_running(call, m->control->trial);
        else if (r < 0)
                r = reply_errno(call, r);
        else {
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) control_policy(m->control)->digest);
                r = varlink_call_reply(call, varlink_params1("digest", json_object_new_string(digest)));
        }
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
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

/* A Watch: answered when control_watch() says (the device's window is over, or the call's own
 * time and the window goes on), or when the device goes. */
typedef struct PendingWatch {
        VarlinkManager *manager;
        VarlinkCall *call;
        ControlWatch *watch;
} PendingWatch;

static void on_watch_done(int error, const Device *d, void *userdata) {
        PendingWatch *p = userdata;
        VarlinkCall *call = p->call;
        json_object *o;

        varlink_call_set_cancel(call, NULL, NULL);
        if (error == -ENODEV)
                (void) reply_no_such_device(call, d->ifname);
        else {
                o = control_device_json(p->manager->control, d);
                (void) (o ? varlink_call_reply(call, varlink_params1("device", o)) : reply_errno(call, -ENOMEM));
        }
        free(p);
}

static void on_watch_cancel(void *userdata) {
        PendingWatch *p = userdata;
        control_watch_cancel(p->watch);
        free(p);
}

static int method_watch(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {
                {"ifname", json_type_string, true},
                {"duration_usec", json_type_int, false},
        };
        VarlinkManager *m = userdata;
        json_object *v[ELEMENTSOF(spec)];
        const char *name;
        int64_t duration = EVIDENCE_DURATION_DEFAULT_USEC;
        PendingWatch *p;
        Device *d;
        int r;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        name = json_object_get_string(v[0]);
        if (v[1])
                duration = json_object_get_int64(v[1]);
        if (duration <= 0 || (uint64_t) duration > EVIDENCE_DURATION_MAX_USEC)
                return varlink_call_error(call, "org.varlink.service.InvalidParameter",
                                          varlink_params1("parameter", json_object_new_string("duration_usec")));
        d = control_find_device(m->control, name);
        if (!d)
                return reply_no_such_device(call, name);
        p = calloc(1, sizeof(*p));
        if (!p)
                return reply_errno(call, -ENOMEM);
        *p = (PendingWatch){.manager = m, .call = call};
        r = control_watch(m->control, name, (uint64_t) duration, on_watch_done, p, &p->watch);
        if (r < 0) {
                free(p);
                log_dev_warning_errno(d, r, "cannot watch it: %m");
                return r == -ENODEV ? reply_no_such_device(call, name) : reply_errno(call, r);
        }
        log_dev_info(d, "watching for %llus, asked for over varlink by pid %d",
                     (unsigned long long) (duration / USEC_PER_SEC), (int) varlink_call_pid(call));
        varlink_call_set_cancel(call, on_watch_cancel, p);
        return 0;
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
        free(m);
}

VarlinkServer *varlink_manager_server(VarlinkManager *m) {
        return m->server;
}
