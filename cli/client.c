/* client.c — bigtcpctl's transports: varlink (blocking, NUL-terminated JSON on a unix socket)
 * and the D-Bus calls behind --dbus. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "client.h"
#include "util.h"

struct Varlink {
        int fd;
        char *buf;
        size_t start, len, size;
        size_t scanned; /* buf[start, scanned) holds no NUL: a long reply is searched once, not at each read */
};

int varlink_connect(const char *path, Varlink **ret) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        Varlink *v;
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        v = calloc(1, sizeof(*v));
        if (!v) {
                close(fd);
                return -ENOMEM;
        }
        v->fd = fd;
        *ret = v;
        return 0;
}

void varlink_close(Varlink *v) {
        if (!v)
                return;
        if (v->fd >= 0)
                close(v->fd);
        free(v->buf);
        free(v);
}

int varlink_send(Varlink *v, const char *method, json_object *parameters, bool more) {
        json_object *o = json_object_new_object();
        const char *text;
        size_t len, done = 0;
        int r = 0;

        if (!o) {
                json_object_put(parameters);
                return -ENOMEM;
        }
        json_object_object_add(o, "method", json_object_new_string(method));
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        if (more)
                json_object_object_add(o, "more", json_object_new_boolean(true));
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                 &len);
        if (!text)
                r = -ENOMEM;
        len++; /* the NUL */
        while (r == 0 && done < len) {
                ssize_t n = send(v->fd, text + done, len - done, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        r = errno == EPIPE ? -ECONNRESET : -errno;
                else
                        done += (size_t) n;
        }
        json_object_put(o);
        return r;
}

int varlink_fd(const Varlink *v) {
        return v->fd;
}

int varlink_recv_raw(Varlink *v, int timeout_ms, const char **ret, size_t *ret_size) {
        for (;;) {
                size_t from = v->scanned > v->start ? v->scanned : v->start;
                char *nul = v->len > from ? memchr(v->buf + from, '\0', v->len - from) : NULL;
                if (nul) {
                        size_t size = (size_t) (nul - (v->buf + v->start));
                        *ret = v->buf + v->start;
                        *ret_size = size;
                        v->start += size + 1; /* the bytes stay until the next call */
                        v->scanned = v->start;
                        return 0;
                }
                v->scanned = v->len;
                if (v->len - v->start > CLIENT_REPLY_MAX)
                        return -EBADMSG;
                if (v->start > 0) {
                        memmove(v->buf, v->buf + v->start, v->len - v->start);
                        v->len -= v->start;
                        v->scanned -= v->start;
                        v->start = 0;
                }
                if (v->size - v->len < 65536) {
                        size_t want = v->size ? v->size * 2 : 256 * 1024;
                        char *b = realloc(v->buf, want);
                        if (!b)
                                return -ENOMEM;
                        v->buf = b;
                        v->size = want;
                }
                if (timeout_ms >= 0) {
                        struct pollfd p = {.fd = v->fd, .events = POLLIN};
                        int k = poll(&p, 1, timeout_ms);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0)
                                return -errno;
                        if (k == 0)
                                return -ETIMEDOUT;
                }
                ssize_t n = read(v->fd, v->buf + v->len, v->size - v->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ECONNRESET;
                v->len += (size_t) n;
        }
}

int varlink_parse(const char *data, size_t size, json_object **ret) {
        json_tokener *tok;
        json_object *o;

        if (size > INT32_MAX)
                return -EBADMSG;
        tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
        if (!tok)
                return -ENOMEM;
        o = json_tokener_parse_ex(tok, data, (int) size);
        if (!o || json_tokener_get_error(tok) != json_tokener_success ||
            json_tokener_get_parse_end(tok) != size || !json_object_is_type(o, json_type_object)) {
                json_tokener_free(tok);
                json_object_put(o);
                return -EBADMSG;
        }
        json_tokener_free(tok);
        *ret = o;
        return 0;
}

int varlink_recv(Varlink *v, int timeout_ms, json_object **ret) {
        const char *data;
        size_t size;
        int r = varlink_recv_raw(v, timeout_ms, &data, &size);
        return r < 0 ? r : varlink_parse(data, size, ret);
}

/* Whether an error from io.bigtcpd1 means that bigtcpd is not running: nobody owns the name, or
 * the bus could not start it. The bus (dbus-daemon) asks systemd to start
 * dbus-io.bigtcpd1.service, the alias that exists only while bigtcpd.service is enabled, and
 * passes systemd's answer on: NoSuchUnit for a disabled (or removed) bigtcpd. Returns the
 * reason for the user, with the bus's own message where it adds something (in *ret_detail). */
static const char *not_running_reason(const sd_bus_error *e, const char **ret_detail) {
        *ret_detail = NULL;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                return "io.bigtcpd1 is not on the system bus";
        if (sd_bus_error_has_name(e, "org.freedesktop.systemd1.NoSuchUnit"))
                return "io.bigtcpd1 is not on the system bus, and the bus starts it only while "
                       "bigtcpd.service is enabled";
        if (sd_bus_error_has_name(e, "org.freedesktop.systemd1.UnitMasked"))
                return "io.bigtcpd1 is not on the system bus, and bigtcpd.service is masked";
        /* dbus-daemon's own activation failures: the daemon exited or never took the name. */
        if (sd_bus_error_has_name(e, "org.freedesktop.DBus.Error.TimedOut") ||
            (e->name && strncmp(e->name, "org.freedesktop.DBus.Error.Spawn.", 33) == 0)) {
                *ret_detail = e->message;
                return "the system bus could not start it";
        }
        return NULL;
}

/* Whether io.bigtcpd1 has an owner now: 1, 0, or -errno. */
static int name_has_owner(sd_bus *bus) {
        sd_bus_message *reply = NULL;
        int r, owned = 0;

        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", NULL, &reply, "s", "io.bigtcpd1");
        if (r >= 0)
                r = sd_bus_message_read(reply, "b", &owned);
        sd_bus_message_unref(reply);
        return r < 0 ? r : !!owned;
}

/* A call that timed out while nobody owns io.bigtcpd1: the bus asked systemd to start bigtcpd and
 * the daemon never took the name (it exits at once, or is restarted again and again). systemd
 * sends no answer for a start that fails, so the bus waits until the caller gives up. */
static int timed_out_unstarted(sd_bus *bus, char **ret_reason) {
        uint64_t usec = 0;

        if (name_has_owner(bus) != 0)
                return 0;
        (void) sd_bus_get_method_call_timeout(bus, &usec);
        if (asprintf(ret_reason,
                     "the system bus could not start it: no answer within %llu s (journalctl -u bigtcpd says why)",
                     (unsigned long long) ((usec + 999999) / 1000000)) < 0)
                *ret_reason = NULL;
        return 1;
}

/* A failed call's -errno (see dbus_call()) and its message in *ret_error. */
static int call_failed(sd_bus *bus, int r, sd_bus_error *error, char **ret_error) {
        const char *reason, *detail;
        int k;

        if (r == -ETIMEDOUT && timed_out_unstarted(bus, ret_error))
                return -ESRCH;
        if (!sd_bus_error_is_set(error))
                return r;
        reason = not_running_reason(error, &detail);
        if (reason && detail)
                k = asprintf(ret_error, "%s: %s", reason, detail);
        else
                k = asprintf(ret_error, "%s", reason ?: error->message ?: error->name);
        if (k < 0)
                *ret_error = NULL;
        if (reason)
                return -ESRCH;
        if (sd_bus_error_has_name(error, SD_BUS_ERROR_ACCESS_DENIED))
                return -EACCES;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.NoSuchDevice"))
                return -ENODEV;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.NothingToDo"))
                return -EALREADY;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.PolicyInvalid"))
                return -EINVAL;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.NoTry"))
                return -ENOMSG;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.TryRunning"))
                return -EBUSY;
        if (sd_bus_error_has_name(error, "io.bigtcpd1.Manager.TargetNotRead"))
                return -EXDEV;
        return -EIO;
}

/* Appends a call's arguments. */
typedef int (*AppendFn)(sd_bus_message *call, const void *userdata);

/* io.bigtcpd1.Manager.METHOD. Root calls io.bigtcpd1.Root, where no other user's calls wait
 * before its own (io.bigtcpd1.conf); a bigtcpd without that name (an older one, or one the bus is
 * to start: it starts io.bigtcpd1) is called as io.bigtcpd1. */
static int call_bigtcpd(sd_bus *bus, const char *method, AppendFn append, const void *userdata, uint64_t timeout_usec,
                        sd_bus_error *error, sd_bus_message **ret) {
        int r = 0;

        for (int root = geteuid() == 0; root >= 0; root--) {
                sd_bus_message *call = NULL;

                r = sd_bus_message_new_method_call(bus, &call, root ? "io.bigtcpd1.Root" : "io.bigtcpd1",
                                                   "/io/bigtcpd1", "io.bigtcpd1.Manager", method);
                if (r >= 0 && append)
                        r = append(call, userdata);
                if (r >= 0)
                        r = sd_bus_call(bus, call, timeout_usec, error, ret);
                sd_bus_message_unref(call);
                if (r >= 0 || !root ||
                    !sd_bus_error_has_names(error, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        return r;
                sd_bus_error_free(error);
        }
        return r;
}

typedef struct FullArgs {
        const char *arg;
        const uint64_t *usec;
} FullArgs;

static int append_full(sd_bus_message *call, const void *userdata) {
        const FullArgs *a = userdata;

        if (!a->arg)
                return 0;
        return a->usec ? sd_bus_message_append(call, "st", a->arg, *a->usec) : sd_bus_message_append(call, "s", a->arg);
}

/* `usec` (with `arg`): a second argument, type t; `timeout_usec` 0: the bus's default. */
static int call_full(const char *method, const char *arg, const uint64_t *usec, uint64_t timeout_usec, char **ret,
                     char **ret_error) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus *bus = NULL;
        const char *text;
        int r;

        *ret_error = NULL;
        r = sd_bus_open_system(&bus);
        if (r < 0)
                return r;
        r = call_bigtcpd(bus, method, append_full, &(FullArgs){arg, usec}, timeout_usec, &error, &reply);
        if (r < 0) {
                r = call_failed(bus, r, &error, ret_error);
                goto finish;
        }
        if (ret) {
                r = sd_bus_message_read(reply, "s", &text);
                if (r < 0)
                        goto finish;
                *ret = strdup(text);
                if (!*ret) {
                        r = -ENOMEM;
                        goto finish;
                }
        }
        r = 0;
finish:
        sd_bus_error_free(&error);
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        return r;
}

/* The names of a method's typed results before its JSON `changes` (or Plan's JSON). */
static const char *const *result_names(const char *method) {
        static const char *const reload[] = {"digest", NULL}, *const try_[] = {"digest", "target", "deadline_usec", NULL},
                                 *const confirm[] = {"target", NULL}, *const none[] = {NULL};
        if (streq_ptr(method, "Reload"))
                return reload;
        if (streq_ptr(method, "Try"))
                return try_;
        if (streq_ptr(method, "Confirm"))
                return confirm;
        return none;
}

typedef struct OperationCall {
        const char *method;
        const DbusOperationArgs *a;
} OperationCall;

static int append_operation(sd_bus_message *call, const void *userdata) {
        const OperationCall *o = userdata;
        const DbusOperationArgs *a = o->a;

        if (streq_ptr(o->method, "Try"))
                return sd_bus_message_append(call, "stss", a->policy ?: "", a->usec, a->file ?: "", a->target ?: "");
        if (a && a->arg)
                return sd_bus_message_append(call, "s", a->arg);
        return 0;
}

int dbus_call_operation(const char *method, const DbusOperationArgs *a, json_object **ret, char **ret_error) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus *bus = NULL;
        json_object *o = NULL, *rest = NULL;
        const char *const *names = result_names(method);
        int r;

        *ret_error = NULL;
        r = sd_bus_open_system(&bus);
        if (r < 0)
                return r;
        r = call_bigtcpd(bus, method, append_operation, &(OperationCall){method, a}, 0, &error, &reply);
        if (r < 0) {
                r = call_failed(bus, r, &error, ret_error);
                goto finish;
        }
        o = json_object_new_object();
        if (!o) {
                r = -ENOMEM;
                goto finish;
        }
        /* the typed results by name, then the JSON (the changes, or Plan's reply) merged in */
        for (size_t i = 0; names[i]; i++) {
                const char *text;
                uint64_t t;
                if (streq_ptr(names[i], "deadline_usec")) {
                        r = sd_bus_message_read(reply, "t", &t);
                        if (r >= 0)
                                json_object_object_add(o, names[i], json_object_new_int64((int64_t) t));
                } else {
                        r = sd_bus_message_read(reply, "s", &text);
                        if (r >= 0)
                                json_object_object_add(o, names[i], json_object_new_string(text));
                }
                if (r <= 0) {
                        r = r < 0 ? r : -EBADMSG;
                        goto finish;
                }
        }
        const char *text;
        r = sd_bus_message_read(reply, "s", &text);
        if (r > 0 && varlink_parse(text, strlen(text), &rest) >= 0 && json_object_is_type(rest, json_type_object)) {
                json_object_object_foreach(rest, k, v)
                        json_object_object_add(o, k, json_object_get(v));
        } else if (r >= 0) {
                r = -EBADMSG;
                goto finish;
        }
        *ret = TAKE_PTR(o);
        r = 0;
finish:
        json_object_put(o);
        json_object_put(rest);
        sd_bus_error_free(&error);
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        return r;
}

typedef struct MonitorState {
        DbusMonitorFn fn;
        void *userdata;
        bool gone, back; /* io.bigtcpd1 lost its owner; has one again (subscribe anew) */
        char *owner;     /* the unique name that owns io.bigtcpd1: only its signals count */
        int error;       /* the callback's: stop */
} MonitorState;

static int on_event_signal(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        MonitorState *st = userdata;
        json_object *e = NULL;
        const char *text;

        /* anyone may send a signal with this path and name: only bigtcpd's are its events */
        if (!st->owner || !streq_ptr(sd_bus_message_get_sender(m), st->owner))
                return 0;
        if (sd_bus_message_read(m, "s", &text) <= 0 || varlink_parse(text, strlen(text), &e) < 0)
                return 0; /* not for us to judge: skipped */
        if (st->error == 0)
                st->error = st->fn(DBUS_MONITOR_EVENT, e, st->userdata);
        json_object_put(e);
        return 0;
}

static int on_owner_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        MonitorState *st = userdata;
        const char *name, *old, *new;

        if (sd_bus_message_read(m, "sss", &name, &old, &new) < 0 || !streq_ptr(name, "io.bigtcpd1"))
                return 0;
        free(st->owner);
        st->owner = strempty(new) ? NULL : strdup(new);
        if (strempty(new)) {
                st->gone = true;
                if (st->error == 0)
                        st->error = st->fn(DBUS_MONITOR_GONE, NULL, st->userdata);
        } else
                st->back = true;
        return 0;
}

/* Subscribe(), and who answered: the owner of io.bigtcpd1, whose signals are bigtcpd's. */
static int subscribe(sd_bus *bus, MonitorState *st, char **ret_error) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r = sd_bus_call_method(bus, "io.bigtcpd1", "/io/bigtcpd1", "io.bigtcpd1.Manager", "Subscribe", &error,
                                   &reply, "");
        if (r < 0)
                r = call_failed(bus, r, &error, ret_error);
        else {
                free(st->owner);
                st->owner = strdup(sd_bus_message_get_sender(reply) ?: "");
                r = st->owner ? 0 : -ENOMEM;
        }
        sd_bus_message_unref(reply);
        sd_bus_error_free(&error);
        return r;
}

int dbus_monitor(DbusMonitorFn fn, void *userdata, char **ret_error) {
        MonitorState st = {.fn = fn, .userdata = userdata};
        sd_bus *bus = NULL;
        int r;

        *ret_error = NULL;
        r = sd_bus_open_system(&bus);
        if (r < 0)
                return r;
        /* listening before subscribing: no event between the two is missed */
        r = sd_bus_add_match(bus, NULL,
                             "type='signal',path='/io/bigtcpd1',interface='io.bigtcpd1.Manager',member='Event'",
                             on_event_signal, &st);
        if (r >= 0)
                r = sd_bus_add_match(bus, NULL,
                                     "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                                     "member='NameOwnerChanged',arg0='io.bigtcpd1'",
                                     on_owner_changed, &st);
        if (r >= 0)
                r = subscribe(bus, &st, ret_error);
        if (r >= 0)
                r = fn(DBUS_MONITOR_SUBSCRIBED, NULL, userdata);
        while (r >= 0 && st.error == 0) {
                if (st.back) {
                        /* bigtcpd is back on the bus: subscribed again, and from then on shown */
                        st.back = st.gone = false;
                        r = subscribe(bus, &st, ret_error);
                        if (r >= 0)
                                r = fn(DBUS_MONITOR_BACK, NULL, userdata);
                        continue;
                }
                r = sd_bus_process(bus, NULL);
                if (r == 0)
                        r = sd_bus_wait(bus, UINT64_MAX);
        }
        sd_bus_flush_close_unref(bus);
        free(st.owner);
        return r < 0 ? r : st.error;
}

int dbus_call(const char *method, const char *arg, char **ret, char **ret_error) {
        return call_full(method, arg, NULL, 0, ret, ret_error);
}

int dbus_call_watch(const char *ifname, uint64_t duration_usec, char **ret, char **ret_error) {
        /* answered when the window ends */
        return call_full("Watch", ifname, &duration_usec, duration_usec + 60 * UINT64_C(1000000), ret, ret_error);
}
