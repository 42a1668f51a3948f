/* varlink.c — the varlink server: the listening socket, one non-blocking connection per client
 * in the manager's event loop, the wire protocol (NUL-terminated JSON calls and replies, `more`,
 * `oneway`, pipelining), org.varlink.service, and io.bigtcpd.Manager on top of control.h.
 *
 * A client can only hurt itself: its input is capped per message, its unread replies are capped
 * (above a high-water mark its further calls are not read, so the kernel's socket buffer pushes
 * back on it), connections are capped in total and per UID, and bad input ends its connection
 * with an error reply sent without waiting. */
#include <event2/event.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "control.h"
#include "log.h"
#include "varlink.h"

#define READ_CHUNK (64u * 1024u)
#define READS_PER_WAKEUP 4u
#define ACCEPTS_PER_WAKEUP 64u
#define BUFFER_KEEP_MAX (256u * 1024u) /* larger buffers are freed once empty */

static const char service_interface_description[] =
        "# The Varlink Service Interface is provided by every varlink service. It\n"
        "# describes the service and the interfaces it implements.\n"
        "interface org.varlink.service\n"
        "\n"
        "# Get a list of all the interfaces a service provides and information\n"
        "# about the implementation.\n"
        "method GetInfo() -> (\n"
        "  vendor: string,\n"
        "  product: string,\n"
        "  version: string,\n"
        "  url: string,\n"
        "  interfaces: []string\n"
        ")\n"
        "\n"
        "# Get the description of an interface that is implemented by this service.\n"
        "method GetInterfaceDescription(interface: string) -> (description: string)\n"
        "\n"
        "# The requested interface was not found.\n"
        "error InterfaceNotFound (interface: string)\n"
        "\n"
        "# The requested method was not found\n"
        "error MethodNotFound (method: string)\n"
        "\n"
        "# The interface defines the requested method, but the service does not\n"
        "# implement it.\n"
        "error MethodNotImplemented (method: string)\n"
        "\n"
        "# One of the passed parameters is invalid.\n"
        "error InvalidParameter (parameter: string)\n"
        "\n"
        "# Client is denied access\n"
        "error PermissionDenied ()\n"
        "\n"
        "# Method is expected to be called with 'more' set to true, but wasn't\n"
        "error ExpectedMore ()\n";

typedef struct Connection Connection;

struct VarlinkServer {
        Manager *m;
        int fd;
        char *path; /* the socket file we bound and remove at the end; NULL when activated */
        struct event *accept_event;
        struct event *accept_retry; /* accept paused after EMFILE/ENFILE */
        LIST_HEAD(, Connection) connections;
        size_t n_connections;
        unsigned long long n_refused;
        size_t output_max;
};

struct Connection {
        VarlinkServer *server;
        int fd;
        uid_t uid;
        pid_t pid;
        struct event *read_event, *write_event, *process_event;
        bool reading, writing;

        /* Unprocessed input is in[in_start, in_len); in[in_start, in_scanned) has no NUL. */
        char *in;
        size_t in_start, in_scanned, in_len, in_size;
        /* Replies not yet sent: out[out_start, out_len). */
        char *out;
        size_t out_start, out_len, out_size;

        bool monitoring;   /* a Monitor stream owns the connection */
        unsigned watch_id; /* its watch of the manager's events */
        bool eof;        /* the client shut down its side */

        LIST_ENTRY(Connection) link;
};

typedef enum VarlinkMethod {
        METHOD_GET_INFO,
        METHOD_GET_INTERFACE_DESCRIPTION,
        METHOD_GET_STATUS,
        METHOD_LIST_DEVICES,
        METHOD_MONITOR,
        METHOD_PLAN,
        METHOD_VALIDATE,
        METHOD_RELOAD,
        METHOD_ROLLBACK,
        METHOD_RETRY,
        _METHOD_MAX,
        _METHOD_INVALID = -1,
} VarlinkMethod;

static const struct {
        const char *interface;
        const char *name;
        bool root_only;
} method_table[_METHOD_MAX] = {
        [METHOD_GET_INFO] = {"org.varlink.service", "GetInfo", false},
        [METHOD_GET_INTERFACE_DESCRIPTION] = {"org.varlink.service", "GetInterfaceDescription", false},
        [METHOD_GET_STATUS] = {VARLINK_INTERFACE, "GetStatus", false},
        [METHOD_LIST_DEVICES] = {VARLINK_INTERFACE, "ListDevices", false},
        [METHOD_MONITOR] = {VARLINK_INTERFACE, "Monitor", false},
        [METHOD_PLAN] = {VARLINK_INTERFACE, "Plan", false},
        [METHOD_VALIDATE] = {VARLINK_INTERFACE, "Validate", false},
        [METHOD_RELOAD] = {VARLINK_INTERFACE, "Reload", true},
        [METHOD_ROLLBACK] = {VARLINK_INTERFACE, "Rollback", true},
        [METHOD_RETRY] = {VARLINK_INTERFACE, "Retry", true},
};

static size_t out_pending(const Connection *c) {
        return c->out_len - c->out_start;
}

/* ---- connection life cycle ---- */

static void on_event(const Event *e, void *userdata);

static void connection_free(Connection *c) {
        if (!c)
                return;
        log_debug("varlink: connection of pid %d uid %u closed", (int) c->pid, (unsigned) c->uid);
        if (c->monitoring)
                event_watch_remove(&c->server->m->events, c->watch_id);
        LIST_REMOVE(c, link);
        c->server->n_connections--;
        if (c->read_event)
                event_free(c->read_event);
        if (c->write_event)
                event_free(c->write_event);
        if (c->process_event)
                event_free(c->process_event);
        if (c->fd >= 0)
                close(c->fd);
        free(c->in);
        free(c->out);
        free(c);
}

/* Sends what it can without waiting. 0, or -errno when the connection is broken. */
static int connection_flush(Connection *c) {
        while (out_pending(c) > 0) {
                ssize_t n = send(c->fd, c->out + c->out_start, out_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                c->out_start += (size_t) n;
        }
        if (c->out_start == c->out_len) {
                c->out_start = c->out_len = 0;
                /* An idle connection keeps no big buffer from a big reply. */
                if (c->out_size > BUFFER_KEEP_MAX) {
                        free(c->out);
                        c->out = NULL;
                        c->out_size = 0;
                }
        }
        return 0;
}

/* Queues bytes of a message; `connection_append()` queues a whole one, with its NUL. */
static int connection_write(Connection *c, const char *data, size_t size) {
        if (size == 0)
                return 0;
        /* Compact first: the start of the buffer is sent already. */
        if (c->out_start > 0 && c->out_len + size > c->out_size) {
                memmove(c->out, c->out + c->out_start, out_pending(c));
                c->out_len -= c->out_start;
                c->out_start = 0;
        }
        if (c->out_len + size > c->out_size) {
                size_t want = c->out_size ? c->out_size : 4096;
                while (want < c->out_len + size)
                        want *= 2;
                char *n = realloc(c->out, want);
                if (!n)
                        return -ENOMEM;
                c->out = n;
                c->out_size = want;
        }
        memcpy(c->out + c->out_len, data, size);
        c->out_len += size;
        return 0;
}

static int connection_append(Connection *c, const char *data, size_t size) {
        int r = connection_write(c, data, size);
        return r < 0 ? r : connection_write(c, "", 1);
}

/* Appends one message; takes ownership of `msg`. */
static int connection_send(Connection *c, json_object *msg) {
        _cleanup_(json_object_putp) json_object *o = msg;
        const char *text;
        size_t len;

        if (!o)
                return -ENOMEM;
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                 &len);
        if (!text)
                return -ENOMEM;
        return connection_append(c, text, len);
}

static json_object *reply_new(json_object *parameters, bool continues) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(parameters);
                return NULL;
        }
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        if (continues)
                json_object_object_add(o, "continues", json_object_new_boolean(true));
        return o;
}

static json_object *error_new(const char *error, json_object *parameters) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(parameters);
                return NULL;
        }
        json_object_object_add(o, "error", json_object_new_string(error));
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        return o;
}

static json_object *params1(const char *key, json_object *value) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(value);
                return NULL;
        }
        json_object_object_add(o, key, value);
        return o;
}

static int connection_update_events(Connection *c);

/* End the connection after one error reply, sent if the socket takes it now: a client that has
 * misbehaved gets no buffer and no time. */
static void connection_abort(Connection *c, const char *error, json_object *parameters) {
        (void) connection_send(c, error_new(error, parameters));
        (void) connection_flush(c);
        connection_free(c);
}

/* Returns -ECONNRESET when it had to close the connection. */
static int connection_update_events(Connection *c) {
        /* Monitor streams keep reading, to see the client go away; their input is not parsed
         * and stays capped. Others stop reading while replies pile up or calls wait. */
        bool want_read = !c->eof && c->in_len - c->in_start <= VARLINK_MESSAGE_MAX &&
                         (c->monitoring || out_pending(c) < VARLINK_OUTPUT_HIGH_WATER);
        bool want_write = out_pending(c) > 0;

        /* event_add() and event_del() of a valid event fail only when out of memory. */
        if (want_read != c->reading) {
                if ((want_read ? event_add(c->read_event, NULL) : event_del(c->read_event)) < 0)
                        goto fail;
                c->reading = want_read;
        }
        if (want_write != c->writing) {
                if ((want_write ? event_add(c->write_event, NULL) : event_del(c->write_event)) < 0)
                        goto fail;
                c->writing = want_write;
        }
        return 0;
fail:
        log_warning("varlink: cannot watch the connection of pid %d, closing it", (int) c->pid);
        connection_free(c);
        return -ECONNRESET;
}

/* ---- parameters ---- */

typedef struct ParamSpec {
        const char *name;
        json_type type;
        bool required;
} ParamSpec;

static json_object *invalid_parameter(const char *name) {
        return error_new("org.varlink.service.InvalidParameter",
                         params1("parameter", json_object_new_string(name)));
}

/* Checks `params` against `spec`: no unknown keys, required ones present, types right, strings
 * without NUL bytes. Fills `values` (NULL for absent or null optional ones). Returns NULL, or
 * the error reply. */
static json_object *check_params(json_object *params, const ParamSpec *spec, size_t n,
                                 json_object **values) {
        if (params) {
                json_object_object_foreach(params, key, val) {
                        bool known = false;
                        (void) val;
                        for (size_t i = 0; i < n && !known; i++)
                                known = streq_ptr(key, spec[i].name);
                        if (!known)
                                return invalid_parameter(key);
                }
        }
        for (size_t i = 0; i < n; i++) {
                json_object *v = params ? json_object_object_get(params, spec[i].name) : NULL;
                values[i] = NULL;
                if (!v) {
                        if (spec[i].required)
                                return invalid_parameter(spec[i].name);
                        continue;
                }
                if (!json_object_is_type(v, spec[i].type))
                        return invalid_parameter(spec[i].name);
                if (spec[i].type == json_type_string &&
                    strlen(json_object_get_string(v)) != (size_t) json_object_get_string_len(v))
                        return invalid_parameter(spec[i].name);
                values[i] = v;
        }
        return NULL;
}

static const char *opt_string(json_object *v) {
        return v ? json_object_get_string(v) : NULL;
}

/* ---- methods ---- */

typedef struct Call {
        Connection *c;
        VarlinkMethod method;
        json_object *params; /* NULL when absent */
        bool more;
        bool sent;      /* the method queued its reply itself */
        int send_error; /* … and failed half-way: the connection is broken */
} Call;

static json_object *errno_error(int r) {
        json_object *p = json_object_new_object();
        if (!p)
                return NULL;
        json_object_object_add(p, "errno", json_object_new_int(abs(r)));
        json_object_object_add(p, "message", json_object_new_string(strerror(abs(r))));
        return error_new(VARLINK_INTERFACE ".Failed", p);
}

static json_object *policy_invalid(const PolicyErrors *errs) {
        return error_new(VARLINK_INTERFACE ".PolicyInvalid", params1("errors", control_errors_json(errs)));
}

static json_object *method_get_info(Call *call) {
        json_object *p = json_object_new_object(), *l = json_object_new_array();
        json_object *e = check_params(call->params, NULL, 0, NULL);

        if (e || !p || !l) {
                json_object_put(p);
                json_object_put(l);
                return e;
        }
        json_object_object_add(p, "vendor", json_object_new_string("bigtcpd"));
        json_object_object_add(p, "product", json_object_new_string("bigtcpd"));
        json_object_object_add(p, "version", json_object_new_string(BIGTCPD_VERSION));
        json_object_object_add(p, "url", json_object_new_string("https://github.com/bigtcpd/bigtcpd"));
        json_object_array_add(l, json_object_new_string(VARLINK_INTERFACE));
        json_object_array_add(l, json_object_new_string("org.varlink.service"));
        json_object_object_add(p, "interfaces", l);
        return reply_new(p, false);
}

static json_object *method_get_interface_description(Call *call) {
        static const ParamSpec spec[] = {{"interface", json_type_string, true}};
        json_object *v[ELEMENTSOF(spec)];
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        const char *iface, *text;
        size_t len;

        if (e)
                return e;
        iface = json_object_get_string(v[0]);
        if (streq_ptr(iface, VARLINK_INTERFACE)) {
                text = varlink_interface_description;
                len = varlink_interface_description_size;
        } else if (streq_ptr(iface, "org.varlink.service")) {
                text = service_interface_description;
                len = sizeof(service_interface_description) - 1;
        } else
                return error_new("org.varlink.service.InterfaceNotFound",
                                 params1("interface", json_object_new_string(iface)));
        return reply_new(params1("description", json_object_new_string_len(text, (int) len)), false);
}

static json_object *method_get_status(Call *call) {
        json_object *e = check_params(call->params, NULL, 0, NULL);
        if (e)
                return e;
        return reply_new(control_status_json(call->c->server->m), false);
}

static json_object *no_such_device(const char *ifname) {
        return error_new(VARLINK_INTERFACE ".NoSuchDevice",
                         params1("ifname", json_object_new_string(ifname)));
}

/* Every device, sorted by ifindex, serialized one device at a time straight into the output
 * buffer. The reply is the same as one json-c tree would give, but with 10000 devices building
 * that tree, printing it and freeing it costs several times more (malloc churn over tens of
 * MiB) than this. */
static int send_all_devices(Connection *c) {
        static const char head[] = "{\"parameters\":{\"devices\":[", tail[] = "]}}";
        const Manager *m = c->server->m;
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(m, &l, &n);
        if (r < 0)
                return r;
        r = connection_write(c, head, sizeof(head) - 1);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                _cleanup_(json_object_putp) json_object *o = control_device_json(m, l[i]);
                const char *text;
                size_t len;

                text = o ? json_object_to_json_string_length(
                                   o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
                         : NULL;
                if (!text)
                        return -ENOMEM;
                if (i > 0)
                        r = connection_write(c, ",", 1);
                if (r >= 0)
                        r = connection_write(c, text, len);
        }
        if (r >= 0)
                r = connection_append(c, tail, sizeof(tail) - 1);
        return r;
}

static json_object *method_list_devices(Call *call) {
        static const ParamSpec spec[] = {{"ifname", json_type_string, false}};
        json_object *v[ELEMENTSOF(spec)], *l = NULL;
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        int r;

        if (e)
                return e;
        if (!v[0]) {
                call->sent = true;
                call->send_error = send_all_devices(call->c);
                return NULL;
        }
        r = control_list_devices(call->c->server->m, opt_string(v[0]), &l);
        if (r == -ENODEV)
                return no_such_device(opt_string(v[0]));
        if (r < 0)
                return errno_error(r);
        return reply_new(params1("devices", l), false);
}

static json_object *method_monitor(Call *call) {
        json_object *e = check_params(call->params, NULL, 0, NULL);
        Connection *c = call->c;

        if (e)
                return e;
        if (!call->more)
                return error_new("org.varlink.service.ExpectedMore", NULL);
        c->watch_id = event_watch_add(&c->server->m->events, on_event, c);
        if (c->watch_id == 0)
                return errno_error(-ENOMEM);
        c->monitoring = true;
        log_debug("varlink: pid %d uid %u is monitoring", (int) c->pid, (unsigned) c->uid);
        return reply_new(params1("event", json_object_new_string("subscribed")), true);
}

static json_object *check_source(json_object *v) {
        if (v && strlen(json_object_get_string(v)) > VARLINK_SOURCE_MAX)
                return invalid_parameter("source");
        return NULL;
}

static json_object *method_plan(Call *call) {
        static const ParamSpec spec[] = {
                {"policy", json_type_string, false},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)], *l = NULL;
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        PolicyErrors errs = {};
        int r;

        if (e || (e = check_source(v[1])))
                return e;
        r = control_plan(call->c->server->m, opt_string(v[0]), opt_string(v[1]), &l, &errs);
        if (r == -EINVAL && errs.n > 0)
                e = policy_invalid(&errs);
        else if (r < 0)
                e = errno_error(r);
        else
                e = reply_new(params1("devices", l), false);
        policy_errors_clear(&errs);
        return e;
}

static json_object *method_validate(Call *call) {
        static const ParamSpec spec[] = {
                {"policy", json_type_string, true},
                {"source", json_type_string, false},
        };
        json_object *v[ELEMENTSOF(spec)], *p;
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        PolicyErrors errs = {};
        int r;

        if (e || (e = check_source(v[1])))
                return e;
        r = control_validate(json_object_get_string(v[0]), opt_string(v[1]), &errs);
        if (r < 0 && !(r == -EINVAL && errs.n > 0)) {
                policy_errors_clear(&errs);
                return errno_error(r);
        }
        p = json_object_new_object();
        if (p) {
                json_object_object_add(p, "valid", json_object_new_boolean(r >= 0));
                json_object_object_add(p, "errors", control_errors_json(&errs));
        }
        policy_errors_clear(&errs);
        return reply_new(p, false);
}

static json_object *method_reload(Call *call) {
        json_object *e = check_params(call->params, NULL, 0, NULL);
        Manager *m = call->c->server->m;
        PolicyErrors errs = {};
        char digest[17];
        int r;

        if (e)
                return e;
        log_info("varlink: reload asked for by pid %d", (int) call->c->pid);
        r = control_reload(m, &errs);
        if (r == -EINVAL && errs.n > 0)
                e = policy_invalid(&errs);
        else if (r < 0)
                e = errno_error(r);
        else {
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) m->policy->digest);
                e = reply_new(params1("digest", json_object_new_string(digest)), false);
        }
        policy_errors_clear(&errs);
        return e;
}

static json_object *device_op_result(int r, const char *ifname) {
        if (r == -ENODEV)
                return no_such_device(ifname ?: "");
        if (r == -EALREADY)
                return error_new(VARLINK_INTERFACE ".NothingToDo",
                                 params1("ifname", ifname ? json_object_new_string(ifname) : NULL));
        if (r < 0)
                return errno_error(r);
        return reply_new(NULL, false);
}

static json_object *method_rollback(Call *call) {
        static const ParamSpec spec[] = {{"ifname", json_type_string, false}};
        json_object *v[ELEMENTSOF(spec)];
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        const char *ifname;

        if (e)
                return e;
        ifname = opt_string(v[0]);
        log_info("varlink: rollback of %s asked for by pid %d", ifname ?: "every device",
                 (int) call->c->pid);
        return device_op_result(control_rollback(call->c->server->m, ifname), ifname);
}

static json_object *method_retry(Call *call) {
        static const ParamSpec spec[] = {{"ifname", json_type_string, true}};
        json_object *v[ELEMENTSOF(spec)];
        json_object *e = check_params(call->params, spec, ELEMENTSOF(spec), v);
        const char *ifname;

        if (e)
                return e;
        ifname = json_object_get_string(v[0]);
        log_info("varlink: retry of %s asked for by pid %d", ifname, (int) call->c->pid);
        return device_op_result(control_retry(call->c->server->m, ifname), ifname);
}

static json_object *dispatch(Call *call) {
        switch (call->method) {
        case METHOD_GET_INFO:
                return method_get_info(call);
        case METHOD_GET_INTERFACE_DESCRIPTION:
                return method_get_interface_description(call);
        case METHOD_GET_STATUS:
                return method_get_status(call);
        case METHOD_LIST_DEVICES:
                return method_list_devices(call);
        case METHOD_MONITOR:
                return method_monitor(call);
        case METHOD_PLAN:
                return method_plan(call);
        case METHOD_VALIDATE:
                return method_validate(call);
        case METHOD_RELOAD:
                return method_reload(call);
        case METHOD_ROLLBACK:
                return method_rollback(call);
        case METHOD_RETRY:
                return method_retry(call);
        case _METHOD_MAX:
        case _METHOD_INVALID:
                break;
        }
        return error_new("org.varlink.service.MethodNotImplemented", NULL);
}

/* ---- events (Monitor) ---- */

static void on_event(const Event *e, void *userdata) {
        Connection *c = userdata;
        json_object *event;

        if (out_pending(c) > c->server->output_max) {
                log_warning("varlink: pid %d uid %u does not read its Monitor stream (%zu bytes unread), "
                            "closing it",
                            (int) c->pid, (unsigned) c->uid, out_pending(c));
                connection_free(c);
                return;
        }
        event = control_event_json(e);
        if (!event)
                return;
        if (connection_send(c, reply_new(event, true)) < 0) {
                connection_free(c);
                return;
        }
        (void) connection_update_events(c);
}

/* ---- the wire protocol ---- */

static VarlinkMethod method_lookup(const char *name, const char **ret_interface_error) {
        const char *dot = strrchr(name, '.');

        *ret_interface_error = NULL;
        if (!dot)
                return _METHOD_INVALID;
        for (VarlinkMethod i = 0; i < _METHOD_MAX; i++) {
                size_t n = strlen(method_table[i].interface);
                if ((size_t) (dot - name) == n && strncmp(name, method_table[i].interface, n) == 0 &&
                    streq_ptr(dot + 1, method_table[i].name))
                        return i;
        }
        for (VarlinkMethod i = 0; i < _METHOD_MAX; i++) {
                size_t n = strlen(method_table[i].interface);
                if ((size_t) (dot - name) == n && strncmp(name, method_table[i].interface, n) == 0)
                        return _METHOD_INVALID; /* the interface exists, the method does not */
        }
        *ret_interface_error = dot;
        return _METHOD_INVALID;
}

static json_object *protocol_error(const char *reason) {
        return params1("reason", json_object_new_string(reason));
}

static bool get_bool(json_object *msg, const char *key, bool *ret) {
        json_object *v = json_object_object_get(msg, key);
        if (!v || json_object_is_type(v, json_type_null)) {
                *ret = false;
                return true;
        }
        if (!json_object_is_type(v, json_type_boolean))
                return false;
        *ret = json_object_get_boolean(v);
        return true;
}

/* Handles one message (without its NUL). Returns 0, or -ECONNRESET when the connection was
 * closed. */
static int connection_handle(Connection *c, const char *data, size_t size) {
        _cleanup_(json_object_putp) json_object *msg = NULL;
        json_tokener *tok;
        enum json_tokener_error jerr;
        json_object *method, *params, *reply;
        const char *name, *iface_end;
        bool oneway, more, upgrade;
        size_t end;
        Call call = {.c = c};

        if (size > INT32_MAX) /* cannot happen with VARLINK_MESSAGE_MAX; json-c takes an int */
                return -EINVAL;
        tok = json_tokener_new_ex(VARLINK_DEPTH_MAX);
        if (!tok) {
                connection_free(c);
                return -ECONNRESET;
        }
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        msg = json_tokener_parse_ex(tok, data, (int) size);
        jerr = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);

        if (!msg || jerr != json_tokener_success || end != size) {
                const char *why = jerr == json_tokener_error_depth ? "JSON nested too deep"
                                  : jerr == json_tokener_continue  ? "incomplete JSON"
                                  : jerr != json_tokener_success   ? json_tokener_error_desc(jerr)
                                                                   : "trailing data after the JSON value";
                log_debug("varlink: invalid message from pid %d: %s, closing", (int) c->pid, why);
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError", protocol_error(why));
                return -ECONNRESET;
        }
        if (!json_object_is_type(msg, json_type_object)) {
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError",
                                 protocol_error("a call must be a JSON object"));
                return -ECONNRESET;
        }
        method = json_object_object_get(msg, "method");
        if (!method || !json_object_is_type(method, json_type_string)) {
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError",
                                 protocol_error("a call needs a \"method\" string"));
                return -ECONNRESET;
        }
        params = json_object_object_get(msg, "parameters");
        if (params && json_object_is_type(params, json_type_null))
                params = NULL;
        if (params && !json_object_is_type(params, json_type_object)) {
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError",
                                 protocol_error("\"parameters\" must be an object"));
                return -ECONNRESET;
        }
        if (!get_bool(msg, "oneway", &oneway) || !get_bool(msg, "more", &more) ||
            !get_bool(msg, "upgrade", &upgrade)) {
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError",
                                 protocol_error("\"oneway\", \"more\" and \"upgrade\" must be booleans"));
                return -ECONNRESET;
        }
        if (upgrade) {
                connection_abort(c, VARLINK_INTERFACE ".ProtocolError",
                                 protocol_error("no method supports \"upgrade\""));
                return -ECONNRESET;
        }

        name = json_object_get_string(method);
        call.method = method_lookup(name, &iface_end);
        call.params = params;
        call.more = more;
        if (call.method < 0) {
                if (iface_end)
                        reply = error_new("org.varlink.service.InterfaceNotFound",
                                          params1("interface", json_object_new_string_len(
                                                                       name, (int) (iface_end - name))));
                else
                        reply = error_new("org.varlink.service.MethodNotFound",
                                          params1("method", json_object_new_string(name)));
        } else if (method_table[call.method].root_only && c->uid != 0) {
                log_notice("varlink: %s refused to pid %d uid %u: needs root", name, (int) c->pid,
                           (unsigned) c->uid);
                reply = error_new("org.varlink.service.PermissionDenied", NULL);
        } else if (oneway && !method_table[call.method].root_only)
                reply = NULL; /* a question nobody waits for the answer to: nothing to do */
        else
                reply = dispatch(&call);

        if (oneway) {
                json_object_put(reply);
                return 0;
        }
        if (call.sent) {
                if (call.send_error >= 0)
                        return 0;
                /* Half a reply is queued: nothing can follow it. */
                log_warning_errno(call.send_error,
                                  "varlink: cannot answer pid %d: %m, closing the connection", (int) c->pid);
                connection_free(c);
                return -ECONNRESET;
        }
        if (connection_send(c, reply) < 0) {
                connection_free(c);
                return -ECONNRESET;
        }
        return 0;
}

static void connection_process(Connection *c) {
        unsigned n = 0;

        while (!c->monitoring && out_pending(c) < VARLINK_OUTPUT_HIGH_WATER) {
                char *nul = c->in_len > c->in_scanned
                                    ? memchr(c->in + c->in_scanned, '\0', c->in_len - c->in_scanned)
                                    : NULL;
                size_t size;

                if (!nul) {
                        c->in_scanned = c->in_len;
                        break;
                }
                size = (size_t) (nul - (c->in + c->in_start));
                if (size > VARLINK_MESSAGE_MAX) {
                        c->in_scanned = (size_t) (nul - c->in); /* refused below */
                        break;
                }
                if (n++ >= VARLINK_CALLS_PER_WAKEUP) {
                        /* Let others have the loop; carry on in the next turn. */
                        event_active(c->process_event, EV_TIMEOUT, 0);
                        break;
                }
                c->in_start += size + 1;
                c->in_scanned = c->in_start;
                if (connection_handle(c, nul - size, size) < 0)
                        return;
        }

        if (c->in_scanned - c->in_start > VARLINK_MESSAGE_MAX) {
                log_debug("varlink: pid %d sent a message over %u bytes, closing", (int) c->pid,
                          VARLINK_MESSAGE_MAX);
                connection_abort(c, VARLINK_INTERFACE ".MessageTooLarge",
                                 params1("max", json_object_new_int64(VARLINK_MESSAGE_MAX)));
                return;
        }
        /* Keep the buffer small: drop what was handled. */
        if (c->in_start > 0) {
                memmove(c->in, c->in + c->in_start, c->in_len - c->in_start);
                c->in_len -= c->in_start;
                c->in_scanned -= c->in_start;
                c->in_start = 0;
        }
        if (c->in_len == 0 && c->in_size > BUFFER_KEEP_MAX) {
                free(c->in);
                c->in = NULL;
                c->in_size = 0;
        }
        /* The client hung up: a Monitor stream ends; otherwise close once every complete call
         * is answered (half a message will not be completed). */
        if (c->eof && (c->monitoring ||
                       (out_pending(c) == 0 && (c->in_len == 0 || !memchr(c->in, '\0', c->in_len))))) {
                connection_free(c);
                return;
        }
        (void) connection_update_events(c);
}

static void on_process(evutil_socket_t fd, short what, void *userdata) {
        connection_process(userdata);
}

static void on_readable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;

        for (unsigned i = 0; i < READS_PER_WAKEUP; i++) {
                ssize_t n;

                if (c->in_size - c->in_len < READ_CHUNK) {
                        size_t want = c->in_size ? c->in_size * 2 : READ_CHUNK;
                        while (want - c->in_len < READ_CHUNK)
                                want *= 2;
                        char *p = realloc(c->in, want);
                        if (!p) {
                                connection_free(c);
                                return;
                        }
                        c->in = p;
                        c->in_size = want;
                }
                n = read(c->fd, c->in + c->in_len, READ_CHUNK);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        log_debug_errno(errno, "varlink: reading from pid %d: %m", (int) c->pid);
                        connection_free(c);
                        return;
                }
                if (n == 0) {
                        c->eof = true;
                        break;
                }
                c->in_len += (size_t) n;
                /* Enough for one message of the largest size: handle that first. */
                if (c->in_len - c->in_start > VARLINK_MESSAGE_MAX)
                        break;
        }
        if (c->monitoring && c->in_len - c->in_start > VARLINK_MESSAGE_MAX) {
                log_debug("varlink: pid %d sends calls into its Monitor stream, closing", (int) c->pid);
                connection_abort(c, VARLINK_INTERFACE ".MessageTooLarge",
                                 params1("max", json_object_new_int64(VARLINK_MESSAGE_MAX)));
                return;
        }
        connection_process(c);
}

static void on_writable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;
        bool was_high = out_pending(c) >= VARLINK_OUTPUT_HIGH_WATER;
        int r;

        r = connection_flush(c);
        if (r < 0) {
                log_debug_errno(r, "varlink: writing to pid %d: %m", (int) c->pid);
                connection_free(c);
                return;
        }
        if (was_high && out_pending(c) < VARLINK_OUTPUT_HIGH_WATER)
                connection_process(c); /* calls were left waiting for room */
        else if (c->eof && !c->monitoring && out_pending(c) == 0)
                connection_process(c); /* answered everything: close */
        else
                (void) connection_update_events(c);
}

/* ---- accepting ---- */

static size_t connections_of(const VarlinkServer *s, uid_t uid) {
        const Connection *c;
        size_t n = 0;
        LIST_FOREACH(c, &s->connections, link)
        n += c->uid == uid;
        return n;
}

/* Best effort, then close: a refused client gets a reason if its socket takes it now. */
static void refuse(int fd, const struct ucred *cred, unsigned max) {
        _cleanup_(json_object_putp) json_object *o = error_new(
                VARLINK_INTERFACE ".TooManyConnections", params1("max", json_object_new_int((int) max)));
        const char *text;
        size_t len;

        log_debug("varlink: refusing a connection of pid %d uid %u: %u connections", (int) cred->pid,
                  (unsigned) cred->uid, max);
        text = o ? json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len) : NULL;
        if (text)
                (void) send(fd, text, len + 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
}

/* Takes `fd`, also on failure. */
static int connection_new(VarlinkServer *s, int fd, const struct ucred *cred) {
        Connection *c = calloc(1, sizeof(*c));

        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->server = s;
        c->fd = fd;
        c->uid = cred->uid;
        c->pid = cred->pid;
        LIST_INSERT_HEAD(&s->connections, c, link);
        s->n_connections++;
        c->read_event = event_new(s->m->base, fd, EV_READ | EV_PERSIST, on_readable, c);
        c->write_event = event_new(s->m->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
        c->process_event = event_new(s->m->base, -1, 0, on_process, c);
        if (!c->read_event || !c->write_event || !c->process_event) {
                connection_free(c);
                return -ENOMEM;
        }
        if (connection_update_events(c) < 0)
                return -ENOMEM;
        log_debug("varlink: connection of pid %d uid %u (%zu open)", (int) c->pid, (unsigned) c->uid,
                  s->n_connections);
        return 0;
}

static void on_accept_retry(evutil_socket_t fd, short what, void *userdata) {
        VarlinkServer *s = userdata;
        if (event_add(s->accept_event, NULL) < 0)
                log_error("varlink: cannot watch the socket again; no more connections are accepted");
}

static void on_accept(evutil_socket_t lfd, short what, void *userdata) {
        VarlinkServer *s = userdata;

        for (unsigned i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
                struct ucred cred = {};
                socklen_t len = sizeof(cred);
                int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), r;

                if (fd < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        if (errno == ECONNABORTED || errno == EPROTO)
                                continue;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                /* The pending connection stays in the backlog: try again later
                                 * instead of spinning on it. */
                                struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
                                log_warning_errno(errno, "varlink: cannot accept connections: %m; pausing");
                                (void) event_del(s->accept_event);
                                (void) event_add(s->accept_retry, &tv);
                                return;
                        }
                        log_warning_errno(errno, "varlink: accept failed: %m, ignoring");
                        return;
                }
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || len != sizeof(cred)) {
                        log_debug_errno(errno,
                                        "varlink: no credentials of a new connection: %m, closing it");
                        close(fd);
                        continue;
                }
                if (cred.uid == 0 ? s->n_connections >= VARLINK_CONNECTIONS_MAX
                                  : s->n_connections >=
                                            VARLINK_CONNECTIONS_MAX - VARLINK_CONNECTIONS_ROOT_RESERVED) {
                        if (s->n_refused++ == 0)
                                log_warning("varlink: %zu connections open, refusing more",
                                            s->n_connections);
                        refuse(fd, &cred, VARLINK_CONNECTIONS_MAX);
                        continue;
                }
                if (cred.uid != 0 && connections_of(s, cred.uid) >= VARLINK_CONNECTIONS_PER_UID_MAX) {
                        if (s->n_refused++ == 0)
                                log_warning("varlink: uid %u has %u connections open, refusing more",
                                            (unsigned) cred.uid, VARLINK_CONNECTIONS_PER_UID_MAX);
                        refuse(fd, &cred, VARLINK_CONNECTIONS_PER_UID_MAX);
                        continue;
                }
                r = connection_new(s, fd, &cred);
                if (r < 0)
                        log_warning_errno(r, "varlink: cannot set up a connection: %m, closing it");
        }
}

/* ---- the server ---- */

static int listen_activated(void) {
        char **names = NULL;
        int n = sd_listen_fds_with_names(0, &names), fd = -ENOENT;

        for (int i = 0; i < n; i++) {
                if (fd < 0 && streq_ptr(names[i], "varlink") &&
                    sd_is_socket_unix(SD_LISTEN_FDS_START + i, SOCK_STREAM, 1, NULL, 0) > 0)
                        fd = SD_LISTEN_FDS_START + i;
        }
        for (int i = 0; names && i < n; i++)
                free(names[i]);
        free(names);
        if (fd >= 0) {
                int fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                        return -errno;
        }
        return fd;
}

static int listen_path(const char *path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        _cleanup_(closep) int fd = -1;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (unlink(path) < 0 && errno != ENOENT)
                return -errno;
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        /* Everyone may read status; the methods that change things check the caller. */
        if (chmod(path, 0666) < 0 || listen(fd, SOMAXCONN) < 0) {
                int r = -errno;
                (void) unlink(path);
                return r;
        }
        return TAKE_FD(fd);
}

int varlink_server_new(Manager *m, const char *path, VarlinkServer **ret) {
        _cleanup_(varlink_server_freep) VarlinkServer *s = NULL;
        int fd;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->m = m;
        s->fd = -1;
        s->output_max = VARLINK_OUTPUT_MAX;
        LIST_INIT(&s->connections);

        fd = listen_activated();
        if (fd == -ENOENT) {
                fd = listen_path(path);
                if (fd < 0)
                        return fd;
                s->fd = fd;
                s->path = strdup(path);
                if (!s->path)
                        return -ENOMEM;
                log_info("varlink: listening on %s", path);
        } else if (fd < 0)
                return fd;
        else {
                s->fd = fd;
                log_info("varlink: listening on the socket passed by systemd");
        }

        s->accept_event = event_new(m->base, s->fd, EV_READ | EV_PERSIST, on_accept, s);
        s->accept_retry = evtimer_new(m->base, on_accept_retry, s);
        if (!s->accept_event || !s->accept_retry || event_add(s->accept_event, NULL) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(s);
        return 0;
}

void varlink_server_free(VarlinkServer *s) {
        if (!s)
                return;
        while (!LIST_EMPTY(&s->connections))
                connection_free(LIST_FIRST(&s->connections));
        if (s->accept_event)
                event_free(s->accept_event);
        if (s->accept_retry)
                event_free(s->accept_retry);
        if (s->fd >= 0)
                close(s->fd);
        if (s->path)
                (void) unlink(s->path);
        free(s->path);
        free(s);
}

void varlink_server_set_output_max(VarlinkServer *s, size_t max) {
        s->output_max = max;
}

size_t varlink_server_connections(const VarlinkServer *s) {
        return s ? s->n_connections : 0;
}
