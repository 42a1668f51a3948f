/* varlink-call.c — the call a varlink connection answers: its replies (the last, a stream's with
 * `more`, one written in pieces, errors), its parameters checked against a method's spec, the
 * messages they are made of, the methods of org.varlink.service (GetInfo, GetInterfaceDescription)
 * and the lookup of a called method. The connection, its loop and its limits are varlink.c's. */
#include <json-c/json.h>

#include "log.h"
#include "varlink-internal.h"
#include "varlink.h"

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

json_object *varlink_error_new(const char *error, json_object *parameters) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(parameters);
                return NULL;
        }
        json_object_object_add(o, "error", json_object_new_string(error));
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        return o;
}

json_object *varlink_params1(const char *key, json_object *value) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(value);
                return NULL;
        }
        json_object_object_add(o, key, value);
        return o;
}

/* ---- calls ---- */

bool varlink_call_more(const VarlinkCall *c) {
        return c->more;
}

uid_t varlink_call_uid(const VarlinkCall *c) {
        return c->connection->uid;
}

pid_t varlink_call_pid(const VarlinkCall *c) {
        return c->connection->pid;
}

void varlink_call_set_cancel(VarlinkCall *c, void (*fn)(void *userdata), void *userdata) {
        c->cancel = fn;
        c->cancel_userdata = userdata;
}

/* The call is over: a call given later resumes the connection's queue. */
static void call_done(VarlinkCall *call) {
        Connection *c = call->connection;
        bool was_deferred = call->phase == CALL_DEFERRED;

        call->phase = CALL_IDLE;
        call->cancel = NULL;
        call->cancel_userdata = NULL;
        if (was_deferred)
                event_active(c->process_event, EV_TIMEOUT, 0);
}

/* Queue one message of the call (nothing for oneway calls). -ECONNRESET when the connection had
 * to be closed (from a reply given later, where nobody else would close it). */
static int call_send(VarlinkCall *call, json_object *msg, bool last) {
        Connection *c = call->connection;
        bool inside = call->phase == CALL_RUNNING; /* from the method itself, not later */
        int r = 0;

        if (call->oneway)
                json_object_put(msg);
        else
                r = varlink_connection_send(c, msg);
        if (last)
                call_done(call);
        if (r < 0) {
                if (inside)
                        return r; /* connection_handle() closes it */
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        if (!inside)
                (void) varlink_connection_update_events(c);
        return 0;
}

int varlink_call_reply(VarlinkCall *c, json_object *parameters) {
        return call_send(c, reply_new(parameters, false), true);
}

int varlink_call_error(VarlinkCall *c, const char *error, json_object *parameters) {
        return call_send(c, varlink_error_new(error, parameters), true);
}

/* A stream the client does not read is cut off: root's at the output cap, others' much earlier,
 * and also when their UID (or everyone but root) holds too much. */
static bool stream_over(const Connection *c) {
        const VarlinkServer *s = c->server;
        if (varlink_out_pending(c) > s->output_max)
                return true;
        return c->uid != 0 && (varlink_out_pending(c) > VARLINK_STREAM_UNPRIVILEGED_MAX ||
                               c->usage->out_bytes > VARLINK_OUTPUT_UID_MAX ||
                               s->unprivileged_out > VARLINK_OUTPUT_UNPRIVILEGED_MAX);
}

int varlink_call_notify_json(VarlinkCall *call, const char *parameters, size_t size) {
        static const char head[] = "{\"parameters\":", tail[] = ",\"continues\":true}";
        Connection *c = call->connection;
        int r;

        if (stream_over(c)) {
                log_warning("varlink: pid %d uid %u does not read its Monitor stream (%zu bytes unread), "
                            "closing it",
                            (int) c->pid, (unsigned) c->uid, varlink_out_pending(c));
                if (call->phase == CALL_RUNNING)
                        return -ENOBUFS;
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        if (call->oneway)
                return 0;
        r = varlink_connection_write(c, head, sizeof(head) - 1);
        if (r >= 0)
                r = varlink_connection_write(c, parameters, size);
        if (r >= 0)
                r = varlink_connection_append(c, tail, sizeof(tail) - 1);
        if (r < 0) {
                /* half a message may be queued: the connection cannot go on */
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                if (call->phase == CALL_RUNNING)
                        return r;
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        if (call->phase != CALL_RUNNING)
                (void) varlink_connection_update_events(c);
        return 0;
}

int varlink_call_notify(VarlinkCall *call, json_object *parameters) {
        _cleanup_(json_object_putp) json_object *o = parameters ?: json_object_new_object();
        const char *text;
        size_t len;

        text = o ? json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
                 : NULL;
        if (!text)
                return -ENOMEM;
        return varlink_call_notify_json(call, text, len);
}

int varlink_call_reply_begin(VarlinkCall *call) {
        static const char head[] = "{\"parameters\":";
        return call->oneway ? 0 : varlink_connection_write(call->connection, head, sizeof(head) - 1);
}

int varlink_call_write(VarlinkCall *call, const char *json, size_t size) {
        return call->oneway ? 0 : varlink_connection_write(call->connection, json, size);
}

int varlink_call_reply_end(VarlinkCall *call) {
        Connection *c = call->connection;
        bool inside = call->phase == CALL_RUNNING;
        int r = call->oneway ? 0 : varlink_connection_append(c, "}", 1);

        call_done(call);
        if (r < 0 && !inside) {
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        if (r >= 0 && !inside)
                (void) varlink_connection_update_events(c);
        return r;
}

static json_object *invalid_parameter(const char *name) {
        return varlink_error_new("org.varlink.service.InvalidParameter",
                                 varlink_params1("parameter", json_object_new_string(name)));
}

static json_object *check_params(json_object *params, const VarlinkParam *spec, size_t n,
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

int varlink_call_check(VarlinkCall *c, json_object *parameters, const VarlinkParam *spec, size_t n,
                       json_object **values) {
        json_object *e = check_params(parameters, spec, n, values);
        if (!e)
                return 0;
        (void) call_send(c, e, true);
        return -EINVAL;
}

/* ---- org.varlink.service ---- */

static int method_get_info(VarlinkCall *call, json_object *params, void *userdata) {
        const VarlinkServerInfo *info = call->connection->server->info;
        json_object *p, *l;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        p = json_object_new_object();
        l = json_object_new_array();
        if (!p || !l) {
                json_object_put(p);
                json_object_put(l);
                return -ENOMEM;
        }
        json_object_object_add(p, "vendor", json_object_new_string(info->vendor));
        json_object_object_add(p, "product", json_object_new_string(info->product));
        json_object_object_add(p, "version", json_object_new_string(info->version));
        json_object_object_add(p, "url", json_object_new_string(info->url));
        for (size_t i = 0; i < info->n_interfaces; i++)
                json_object_array_add(l, json_object_new_string(info->interfaces[i].name));
        json_object_array_add(l, json_object_new_string(SERVICE_INTERFACE));
        json_object_object_add(p, "interfaces", l);
        return varlink_call_reply(call, p);
}

static int method_get_interface_description(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {{"interface", json_type_string, true}};
        const VarlinkServerInfo *info = call->connection->server->info;
        json_object *v[ELEMENTSOF(spec)];
        const char *iface, *text = NULL;
        size_t len = 0;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        iface = json_object_get_string(v[0]);
        for (size_t i = 0; i < info->n_interfaces && !text; i++)
                if (streq_ptr(iface, info->interfaces[i].name)) {
                        text = info->interfaces[i].description;
                        len = info->interfaces[i].description_size;
                }
        if (!text && streq_ptr(iface, SERVICE_INTERFACE)) {
                text = service_interface_description;
                len = sizeof(service_interface_description) - 1;
        }
        if (!text)
                return varlink_call_error(call, SERVICE_INTERFACE ".InterfaceNotFound",
                                          varlink_params1("interface", json_object_new_string(iface)));
        return varlink_call_reply(call, varlink_params1("description", json_object_new_string_len(text, (int) len)));
}

static const VarlinkMethod service_methods[] = {
        {SERVICE_INTERFACE, "GetInfo", false, method_get_info},
        {SERVICE_INTERFACE, "GetInterfaceDescription", false, method_get_interface_description},
};

static bool interface_known(const VarlinkServerInfo *info, const char *name, size_t len) {
        if (len == strlen(SERVICE_INTERFACE) && strncmp(name, SERVICE_INTERFACE, len) == 0)
                return true;
        for (size_t i = 0; i < info->n_methods; i++)
                if (strlen(info->methods[i].interface) == len && strncmp(name, info->methods[i].interface, len) == 0)
                        return true;
        return false;
}

const VarlinkMethod *varlink_method_lookup(const VarlinkServerInfo *info, const char *name,
                                           bool *ret_no_interface) {
        const char *dot = strrchr(name, '.');

        *ret_no_interface = false;
        if (!dot)
                return NULL;
        size_t len = (size_t) (dot - name);
        for (size_t k = 0; k < 2; k++) {
                const VarlinkMethod *table = k == 0 ? service_methods : info->methods;
                size_t n = k == 0 ? ELEMENTSOF(service_methods) : info->n_methods;
                for (size_t i = 0; i < n; i++)
                        if (strlen(table[i].interface) == len && strncmp(name, table[i].interface, len) == 0 &&
                            streq_ptr(dot + 1, table[i].name))
                                return &table[i];
        }
        *ret_no_interface = !interface_known(info, name, len);
        return NULL;
}
