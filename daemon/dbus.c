/* dbus.c — io.bigtcpd1 on the system bus: the sd-bus connection driven from the libevent loop,
 * its reconnection, the object /io/bigtcpd1 with interface io.bigtcpd1.Manager, the privilege
 * check of Reload/Rollback/Retry, PropertiesChanged and the RolledBack signal.
 *
 * Nothing here blocks the loop: the connection, its authentication and the name request are
 * asynchronous, and the caller's UID for a privileged call is asked of the bus asynchronously
 * (sd_bus_query_sender_creds() would make a synchronous round trip to dbus-daemon, which
 * attaches no credentials to messages). */
#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/inotify.h>
#include <sys/queue.h>
#include <systemd/sd-bus.h>

#include "control.h"
#include "dbus.h"
#include "log.h"

#define DBUS_ERROR_NO_SUCH_DEVICE DBUS_MANAGER_INTERFACE ".NoSuchDevice"
#define DBUS_ERROR_POLICY_INVALID DBUS_MANAGER_INTERFACE ".PolicyInvalid"
#define DBUS_ERROR_NOTHING_TO_DO DBUS_MANAGER_INTERFACE ".NothingToDo"
#define DBUS_ERROR_FAILED DBUS_MANAGER_INTERFACE ".Failed"

/* What PropertiesChanged compares: the emitting properties' values when last announced. */
typedef struct Snapshot {
        unsigned state[_DEVICE_STATE_MAX];
        unsigned total;
        uint64_t digest;
        unsigned long long rollbacks;
} Snapshot;

typedef enum PrivilegedOp {
        PRIVILEGED_RELOAD,
        PRIVILEGED_ROLLBACK,
        PRIVILEGED_RETRY,
        _PRIVILEGED_OP_MAX,
        _PRIVILEGED_OP_INVALID = -1,
} PrivilegedOp;

static const char *const privileged_op_table[_PRIVILEGED_OP_MAX] = {
        [PRIVILEGED_RELOAD] = "Reload",
        [PRIVILEGED_ROLLBACK] = "Rollback",
        [PRIVILEGED_RETRY] = "Retry",
};

/* A privileged call waiting for the bus to say who sent it. Owned by Dbus; freed when the
 * answer comes or the connection goes. */
typedef struct PendingCall PendingCall;
struct PendingCall {
        Dbus *owner;
        sd_bus_message *call;
        sd_bus_slot *slot; /* the GetConnectionUnixUser() call */
        PrivilegedOp op;
        char *ifname; /* NULL: Reload, or Rollback of every device */
        TAILQ_ENTRY(PendingCall) link;
};

struct Dbus {
        Manager *m;
        sd_bus *bus; /* NULL while disconnected */
        sd_bus_slot *vtable_slot;
        sd_bus_slot *name_slot;
        struct event *io;        /* the bus fd and sd-bus's own timeout */
        struct event *reconnect; /* timer while disconnected, when the socket cannot be watched */
        struct event *appear;    /* inotify: the bus socket's directory, while disconnected */
        int appear_fd;
        struct event *changed;   /* coalesces PropertiesChanged */
        uint64_t backoff_usec;
        bool serving;   /* the name is ours */
        bool ever_up;   /* a connection was up once: a loss is worth a warning */
        bool logged_absent;
        unsigned watch_id; /* of the manager's events, while connected */
        Snapshot last;
        TAILQ_HEAD(, PendingCall) pending;
        size_t n_pending;
};

static void bus_lost(Dbus *b, int error);
static void on_bus_io(evutil_socket_t fd, short what, void *userdata);

/* After sending from outside the bus's own dispatch: let on_bus_io() see whether the message
 * went out whole (else it waits for POLLOUT) and whether the connection still stands. Errors of
 * a send are never handled on the spot, which may be inside sd_bus_process(). */
static void kick(Dbus *b) {
        event_active(b->io, EV_TIMEOUT, 0);
}

/* ---- strings ---- */

/* Length of the valid UTF-8 sequence at `s`, 0 if it is not one. */
static size_t utf8_sequence(const unsigned char *s) {
        unsigned char c = s[0], lo = 0x80, hi = 0xbf;
        size_t n;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                if (c == 0xe0)
                        lo = 0xa0; /* overlong */
                else if (c == 0xed)
                        hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                if (c == 0xf0)
                        lo = 0x90;
                else if (c == 0xf4)
                        hi = 0x8f; /* above U+10FFFF */
        } else
                return 0;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if (s[i] < 0x80 || s[i] > 0xbf)
                        return 0;
        return n;
}

/* D-Bus strings must be UTF-8; interface names, file names and JSON built from them need not be.
 * Returns `s` when it is valid, else a copy in *buf with every bad byte as '?' (NULL: ENOMEM). */
static const char *utf8_safe(const char *s, char **buf) {
        const unsigned char *p = (const unsigned char *) (s ?: "");
        size_t i = 0, n, len;
        char *c;

        while (p[i] && (n = utf8_sequence(p + i)) > 0)
                i += n;
        if (!p[i])
                return (const char *) p;
        len = strlen((const char *) p);
        c = malloc(len + 1);
        if (!c)
                return NULL;
        for (i = 0; i < len;) {
                n = utf8_sequence(p + i);
                if (n == 0) {
                        c[i++] = '?';
                        continue;
                }
                memcpy(c + i, p + i, n);
                i += n;
        }
        c[len] = '\0';
        *buf = c;
        return c;
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
static char *errors_text(const PolicyErrors *errs) {
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
        if (errs->n == 0)
                fputs("the policy has errors", f);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

static int reply_policy_invalid(sd_bus_message *call, const PolicyErrors *errs) {
        _cleanup_(freep) char *text = errors_text(errs), *buf = NULL;
        const char *safe = text ? utf8_safe(text, &buf) : NULL;

        if (!safe)
                return -ENOMEM;
        return sd_bus_reply_method_errorf(call, DBUS_ERROR_POLICY_INVALID, "%s", safe);
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
        case -EALREADY:
                if (name)
                        return sd_bus_reply_method_errorf(call, DBUS_ERROR_NOTHING_TO_DO,
                                                          "Nothing to do for \"%s\" in its state", name);
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_NOTHING_TO_DO, "Nothing to do");
        default:
                return sd_bus_reply_method_errorf(call, DBUS_ERROR_FAILED, "%s", strerror(-r));
        }
}

/* ---- properties ---- */

static void snapshot_take(const Manager *m, Snapshot *ret) {
        const Device *d;

        *ret = (Snapshot){
                .total = (unsigned) m->devices.n_devices,
                .digest = m->policy ? m->policy->digest : 0,
                .rollbacks = m->n_rollbacks,
        };
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->state >= 0 && d->state < _DEVICE_STATE_MAX)
                        ret->state[d->state]++;
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
        return sd_bus_message_append(reply, "s", BIGTCPD_VERSION);
}

static int property_get_digest(sd_bus *bus, const char *path, const char *interface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        char digest[17];

        format_digest(b->m->policy ? b->m->policy->digest : 0, digest);
        return sd_bus_message_append(reply, "s", digest);
}

static int property_get_count(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        Snapshot s;

        snapshot_take(b->m, &s);
        for (size_t i = 0; i < ELEMENTSOF(count_properties); i++)
                if (streq_ptr(property, count_properties[i].name))
                        return sd_bus_message_append(reply, "u", snapshot_count(&s, count_properties[i].state));
        return -ENOENT;
}

static int property_get_rollbacks(sd_bus *bus, const char *path, const char *interface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        return sd_bus_message_append(reply, "t", (uint64_t) b->m->n_rollbacks);
}

static int property_get_ready(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        return sd_bus_message_append(reply, "b", (int) b->m->ready_sent);
}

/* Announce what changed since the last announcement, in one signal. */
static void on_changed_timer(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        const char *names[ELEMENTSOF(count_properties) + 3];
        size_t n = 0;
        Snapshot now;
        int r;

        if (!b->bus)
                return;
        snapshot_take(b->m, &now);
        for (size_t i = 0; i < ELEMENTSOF(count_properties); i++)
                if (snapshot_count(&now, count_properties[i].state) != snapshot_count(&b->last, count_properties[i].state))
                        names[n++] = count_properties[i].name;
        if (now.digest != b->last.digest)
                names[n++] = "PolicyDigest";
        if (now.rollbacks != b->last.rollbacks)
                names[n++] = "Rollbacks";
        names[n] = NULL;
        b->last = now;
        if (n == 0)
                return;
        r = sd_bus_emit_properties_changed_strv(b->bus, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, (char **) names);
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to emit PropertiesChanged: %m, ignoring");
        kick(b);
}

static void schedule_changed(Dbus *b) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t) DBUS_CHANGED_DELAY_USEC};
        if (!evtimer_pending(b->changed, NULL))
                (void) evtimer_add(b->changed, &tv);
}

/* ---- events from the control plane ---- */

static void on_control_event(const Event *e, void *userdata) {
        Dbus *b = userdata;
        int r;

        if (!b->bus)
                return;
        if (e->type == EVENT_ROLLBACK) {
                _cleanup_(freep) char *buf1 = NULL, *buf2 = NULL;
                const char *ifname = utf8_safe(e->device->ifname ?: "", &buf1);
                const char *counter = utf8_safe(e->rollback->counter ?: "", &buf2);

                if (ifname && counter) {
                        r = sd_bus_emit_signal(b->bus, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, "RolledBack", "sst",
                                               ifname, counter, e->rollback->rise);
                        if (r < 0)
                                log_debug_errno(r, "D-Bus: failed to emit RolledBack: %m, ignoring");
                        kick(b);
                }
        }
        schedule_changed(b);
}

/* ---- read methods ---- */

static int method_get_status_json(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        _cleanup_(json_object_putp) json_object *o = control_status_json(b->m);
        return reply_json(call, o);
}

static int method_list_devices_json(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_object *devices = NULL;
        const char *ifname;
        int r;

        r = sd_bus_message_read(call, "s", &ifname);
        if (r < 0)
                return r;
        r = control_list_devices(b->m, strempty(ifname) ? NULL : ifname, &devices);
        if (r < 0)
                return reply_control_error(call, r, ifname);
        o = json_object_new_object();
        if (!o) {
                json_object_put(devices);
                return -ENOMEM;
        }
        json_object_object_add(o, "devices", devices);
        return reply_json(call, o);
}

/* (issss(uuuu)(uuuu)u): ifindex, ifname, kind ("" for none), state, policy ("" for none), the
 * current and the desired sizes (gso, gro, gso_ipv4, gro_ipv4; 0 where unknown), tso_max_size. */
#define DEVICE_SIGNATURE "(issss(uuuu)(uuuu)u)"

static int append_device(sd_bus_message *reply, const Manager *m, const Device *d) {
        _cleanup_(freep) char *b1 = NULL, *b2 = NULL, *b3 = NULL;
        const char *ifname = utf8_safe(d->ifname, &b1), *kind = utf8_safe(d->kind, &b2),
                   *policy = utf8_safe(d->policy_name, &b3);
        bool managed = d->state != DEVICE_UNMANAGED && d->policy_name;
        const Sizes none = {}, *cur = &d->current, *want = managed ? &d->desired : &none;
        bool v4 = m->ipv4_supported;

        if (!ifname || !kind || !policy)
                return -ENOMEM;
        return sd_bus_message_append(reply, DEVICE_SIGNATURE, (int32_t) d->ifindex, ifname, kind,
                                     device_state_to_string(d->state), policy, cur->gso_max_size, cur->gro_max_size,
                                     v4 ? cur->gso_ipv4_max_size : 0, v4 ? cur->gro_ipv4_max_size : 0,
                                     want->gso_max_size, want->gro_max_size, v4 ? want->gso_ipv4_max_size : 0,
                                     v4 ? want->gro_ipv4_max_size : 0, d->tso_max_size);
}

static int method_list_devices(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(b->m, &l, &n);
        if (r < 0)
                return r;

        r = sd_bus_message_new_method_return(call, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', DEVICE_SIGNATURE);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = append_device(reply, b->m, l[i]);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_get_device(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *ifname;
        Device *d;
        int r;

        r = sd_bus_message_read(call, "s", &ifname);
        if (r < 0)
                return r;
        d = device_get_by_name(&b->m->devices, ifname);
        if (!d)
                return reply_control_error(call, -ENODEV, ifname);
        r = sd_bus_message_new_method_return(call, &reply);
        if (r < 0)
                return r;
        r = append_device(reply, b->m, d);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_plan(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        Dbus *b = userdata;
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_object *devices = NULL;
        PolicyErrors errs = {};
        const char *policy;
        int r;

        r = sd_bus_message_read(call, "s", &policy);
        if (r < 0)
                return r;
        r = control_plan(b->m, strempty(policy) ? NULL : policy, "<policy>", &devices, &errs);
        if (r == -EINVAL) {
                r = reply_policy_invalid(call, &errs);
                policy_errors_clear(&errs);
                return r;
        }
        policy_errors_clear(&errs);
        if (r < 0)
                return reply_control_error(call, r, NULL);
        o = json_object_new_object();
        if (!o) {
                json_object_put(devices);
                return -ENOMEM;
        }
        json_object_object_add(o, "devices", devices);
        return reply_json(call, o);
}

static int method_validate(sd_bus_message *call, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        PolicyErrors errs = {};
        const char *policy;
        int r;

        r = sd_bus_message_read(call, "s", &policy);
        if (r < 0)
                return r;
        r = control_validate(policy, "<policy>", &errs);
        if (r < 0 && r != -EINVAL) {
                policy_errors_clear(&errs);
                return reply_control_error(call, r, NULL);
        }
        r = sd_bus_message_new_method_return(call, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(suus)");
        for (size_t i = 0; r >= 0 && i < errs.n; i++) {
                _cleanup_(freep) char *b1 = NULL, *b2 = NULL;
                const char *file = utf8_safe(errs.items[i].file, &b1), *msg = utf8_safe(errs.items[i].message, &b2);
                r = file && msg ? sd_bus_message_append(reply, "(suus)", file, errs.items[i].line,
                                                        errs.items[i].column, msg)
                                : -ENOMEM;
        }
        policy_errors_clear(&errs);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* ---- privileged methods ---- */

static void pending_call_free(PendingCall *p) {
        if (!p)
                return;
        if (p->owner) {
                TAILQ_REMOVE(&p->owner->pending, p, link);
                p->owner->n_pending--;
        }
        sd_bus_slot_unref(p->slot);
        sd_bus_message_unref(p->call);
        free(p->ifname);
        free(p);
}

static void run_privileged(Dbus *b, PendingCall *p) {
        Manager *m = b->m;
        const char *sender = sd_bus_message_get_sender(p->call);
        PolicyErrors errs = {};
        char digest[17];
        int r = -EINVAL; /* every case sets it; gcc -O2 cannot see that */

        log_info("D-Bus: %s(%s%s%s) from %s", privileged_op_table[p->op], p->ifname ? "\"" : "", p->ifname ?: "",
                 p->ifname ? "\"" : "", sender ?: "?");
        switch (p->op) {
        case PRIVILEGED_RELOAD:
                r = control_reload(m, &errs);
                if (r == -EINVAL)
                        r = reply_policy_invalid(p->call, &errs);
                else if (r < 0)
                        r = reply_control_error(p->call, r, NULL);
                else {
                        format_digest(m->policy->digest, digest);
                        r = sd_bus_reply_method_return(p->call, "s", digest);
                }
                policy_errors_clear(&errs);
                break;
        case PRIVILEGED_ROLLBACK:
                r = control_rollback(m, p->ifname);
                r = r < 0 ? reply_control_error(p->call, r, p->ifname) : sd_bus_reply_method_return(p->call, NULL);
                break;
        case PRIVILEGED_RETRY:
                r = control_retry(m, p->ifname);
                r = r < 0 ? reply_control_error(p->call, r, p->ifname) : sd_bus_reply_method_return(p->call, NULL);
                break;
        case _PRIVILEGED_OP_MAX:
        case _PRIVILEGED_OP_INVALID:
                r = -EINVAL;
                break;
        }
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to reply to %s(): %m, ignoring", privileged_op_table[p->op]);
}

static int on_sender_uid(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        PendingCall *p = userdata;
        Dbus *b = p->owner;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *method = privileged_op_table[p->op];
        uint32_t uid = UINT32_MAX;
        int r = 0;

        if (!e)
                r = sd_bus_message_read(reply, "u", &uid);
        if (e || r < 0) {
                /* NoReply: the connection went away (sd-bus answers every pending call so). */
                log_full_errno(e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) ? LOG_DEBUG : LOG_WARNING, 0,
                               "D-Bus: cannot tell who called %s(): %s", method, e ? e->message : strerror(-r));
                (void) sd_bus_reply_method_errorf(p->call, SD_BUS_ERROR_ACCESS_DENIED,
                                                  "Cannot identify the caller of %s()", method);
        } else if (uid != 0) {
                log_notice("D-Bus: %s() refused to %s (uid %u): root only", method,
                           sd_bus_message_get_sender(p->call) ?: "?", uid);
                (void) sd_bus_reply_method_errorf(p->call, SD_BUS_ERROR_ACCESS_DENIED, "%s() needs root", method);
        } else
                run_privileged(b, p);
        pending_call_free(p);
        return 0;
}

/* Ask the bus for the caller's UID (the effective UID it connected with, from SO_PEERCRED) and
 * answer once it is known. A unique name is never reused, so an answer about it is about the
 * caller even when the caller is gone by then. */
static int method_privileged(sd_bus_message *call, Dbus *b, PrivilegedOp op, sd_bus_error *error) {
        const char *sender = sd_bus_message_get_sender(call), *ifname = NULL;
        PendingCall *p;
        int r;

        if (op != PRIVILEGED_RELOAD) {
                r = sd_bus_message_read(call, "s", &ifname);
                if (r < 0)
                        return r;
                if (strempty(ifname)) {
                        if (op == PRIVILEGED_RETRY)
                                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "Retry() needs a device name");
                        ifname = NULL;
                }
        }
        if (!sender)
                return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED, "Caller without a bus name");
        if (b->n_pending >= DBUS_PENDING_CALLS_MAX)
                return sd_bus_error_set(error, SD_BUS_ERROR_LIMITS_EXCEEDED, "Too many calls in progress, try again");

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->op = op;
        p->call = sd_bus_message_ref(call);
        if (ifname && !(p->ifname = strdup(ifname))) {
                pending_call_free(p);
                return -ENOMEM;
        }
        r = sd_bus_call_method_async(b->bus, &p->slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetConnectionUnixUser", on_sender_uid, p, "s", sender);
        if (r < 0) {
                pending_call_free(p);
                return r;
        }
        p->owner = b;
        TAILQ_INSERT_TAIL(&b->pending, p, link);
        b->n_pending++;
        return 1; /* answered later */
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

/* Every method is UNPRIVILEGED for sd-bus, which would otherwise check CAP_SYS_ADMIN with a
 * synchronous call; Reload, Rollback and Retry check the caller themselves. The bus policy
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
        SD_BUS_METHOD_WITH_ARGS("Validate", SD_BUS_ARGS("s", policy), SD_BUS_RESULT("a(suus)", errors),
                                method_validate, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reload", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", digest), method_reload,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Rollback", SD_BUS_ARGS("s", ifname), SD_BUS_NO_RESULT, method_rollback,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Retry", SD_BUS_ARGS("s", ifname), SD_BUS_NO_RESULT, method_retry,
                                SD_BUS_VTABLE_UNPRIVILEGED),

        SD_BUS_SIGNAL_WITH_ARGS("RolledBack", SD_BUS_ARGS("s", ifname, "s", counter, "t", rise), 0),
        SD_BUS_VTABLE_END,
};

/* ---- the connection ---- */

static void rearm(Dbus *b) {
        struct timeval tv, *timeout = NULL;
        uint64_t until, now;
        short what = 0;
        int fd, events, r;

        fd = sd_bus_get_fd(b->bus);
        if (fd < 0) {
                bus_lost(b, fd);
                return;
        }
        events = sd_bus_get_events(b->bus);
        if (events < 0) {
                bus_lost(b, events);
                return;
        }
        r = sd_bus_get_timeout(b->bus, &until);
        if (r < 0) {
                bus_lost(b, r);
                return;
        }
        if (events & POLLIN)
                what |= EV_READ;
        if (events & POLLOUT)
                what |= EV_WRITE;
        if (until != UINT64_MAX) {
                now = now_usec();
                until = until > now ? until - now : 0;
                tv.tv_sec = (time_t) (until / 1000000ull);
                tv.tv_usec = (suseconds_t) (until % 1000000ull);
                timeout = &tv;
        }
        event_del(b->io);
        if (event_assign(b->io, b->m->base, fd, what, on_bus_io, b) < 0 ||
            event_add(b->io, timeout) < 0)
                bus_lost(b, -ENOMEM);
}

static void on_bus_io(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        int r;

        if (!b->bus)
                return;
        for (unsigned i = 0; i < DBUS_MESSAGES_PER_WAKEUP; i++) {
                r = sd_bus_process(b->bus, NULL);
                if (r < 0) {
                        bus_lost(b, r);
                        return;
                }
                if (!b->bus) /* a handler lost the connection */
                        return;
                if (r == 0)
                        break;
        }
        /* A broken connection turns into a local Disconnected message, not an error. */
        if (sd_bus_is_open(b->bus) <= 0) {
                bus_lost(b, -ECONNRESET);
                return;
        }
        rearm(b);
}

static int on_name_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Dbus *b = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint32_t result = 0;
        int r = 0;

        b->name_slot = sd_bus_slot_unref(b->name_slot);
        if (!e)
                r = sd_bus_message_read(reply, "u", &result);
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY)) {
                log_debug("D-Bus: no answer to RequestName(): %s", e->message);
                return 0;
        }
        if (e || r < 0 || (result != 1 && result != 4)) {
                /* 1: primary owner, 4: already the owner; 3: someone else has it. */
                log_warning("D-Bus: cannot own %s: %s; the D-Bus interface is off (is io.bigtcpd1.conf installed in "
                            "the bus's system.d?)",
                            DBUS_SERVICE_NAME,
                            e ? e->message : r < 0 ? strerror(-r) : result == 3 ? "another process has it" : "refused");
                return 0;
        }
        b->serving = true;
        b->ever_up = true;
        b->backoff_usec = DBUS_RECONNECT_MIN_USEC;
        log_info("D-Bus: serving %s on the system bus", DBUS_SERVICE_NAME);
        return 0;
}

static int bus_connect(Dbus *b) {
        _cleanup_(sd_bus_close_unrefp) sd_bus *bus = NULL;
        int r;

        r = sd_bus_open_system_with_description(&bus, "bigtcpd");
        if (r < 0)
                return r;
        r = sd_bus_add_object_vtable(bus, &b->vtable_slot, DBUS_OBJECT_PATH, DBUS_MANAGER_INTERFACE, manager_vtable, b);
        if (r < 0)
                return r;
        r = sd_bus_request_name_async(bus, &b->name_slot, DBUS_SERVICE_NAME, 0, on_name_reply, b);
        if (r < 0) {
                b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
                return r;
        }
        b->watch_id = event_watch_add(&b->m->events, on_control_event, b);
        if (b->watch_id == 0) {
                b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
                b->name_slot = sd_bus_slot_unref(b->name_slot);
                return -ENOMEM;
        }
        b->bus = TAKE_PTR(bus);
        snapshot_take(b->m, &b->last);
        rearm(b);
        return 0;
}

/* Drop the connection and everything tied to it. Calls waiting for their caller's UID go
 * unanswered: their callers lose the bus too, or get a disconnect error from it. */
static void bus_disconnect(Dbus *b) {
        PendingCall *p;

        event_del(b->io);
        evtimer_del(b->changed);
        while ((p = TAILQ_FIRST(&b->pending)))
                pending_call_free(p);
        if (b->watch_id != 0) {
                event_watch_remove(&b->m->events, b->watch_id);
                b->watch_id = 0;
        }
        b->vtable_slot = sd_bus_slot_unref(b->vtable_slot);
        b->name_slot = sd_bus_slot_unref(b->name_slot);
        b->bus = sd_bus_close_unref(b->bus);
        b->serving = false;
}

/* The system bus socket's path, from $DBUS_SYSTEM_BUS_ADDRESS ("unix:path=…") or the default. */
static char *bus_socket_path(void) {
        const char *a = getenv("DBUS_SYSTEM_BUS_ADDRESS");
        const char *p;

        if (!a)
                return strdup("/run/dbus/system_bus_socket");
        p = strstr(a, "unix:path=");
        if (!p)
                return NULL; /* abstract sockets, tcp, …: nothing to watch */
        p += strlen("unix:path=");
        return strndup(p, strcspn(p, ",;"));
}

static void stop_watching(Dbus *b) {
        if (b->appear) {
                event_free(b->appear);
                b->appear = NULL;
        }
        closep(&b->appear_fd);
        b->appear_fd = -1;
}

static void try_connect(Dbus *b);
static bool watch_for_socket(Dbus *b);

static void on_appear(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        uint8_t buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        while (read(fd, buf, sizeof(buf)) > 0)
                ;
        /* Something was created on the way to the socket: look again (connect, or watch the
         * next directory down). */
        stop_watching(b);
        _cleanup_(freep) char *path = bus_socket_path();
        if (path && access(path, F_OK) == 0)
                try_connect(b);
        else if (!watch_for_socket(b))
                try_connect(b);
}

/* Wait for the bus socket without waking up: an inotify watch on the deepest existing
 * directory of its path. False when that is not possible (then a timer retries). */
static bool watch_for_socket(Dbus *b) {
        _cleanup_(freep) char *path = bus_socket_path();
        struct stat st;

        if (!path || path[0] != '/')
                return false;
        b->appear_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (b->appear_fd < 0)
                return false;
        for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
                if (slash == path)
                        slash[1] = '\0';
                else
                        *slash = '\0';
                if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                        if (inotify_add_watch(b->appear_fd, path, IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR) < 0)
                                break;
                        b->appear = event_new(b->m->base, b->appear_fd, EV_READ | EV_PERSIST, on_appear, b);
                        if (!b->appear || event_add(b->appear, NULL) < 0)
                                break;
                        return true;
                }
                if (slash == path)
                        break;
        }
        stop_watching(b);
        return false;
}

static void schedule_reconnect(Dbus *b) {
        _cleanup_(freep) char *path = bus_socket_path();

        /* No socket yet: wait for it to appear. A socket that refuses us (the broker is
         * stopping or starting): retry with a growing delay. */
        if (path && access(path, F_OK) < 0 && errno == ENOENT && watch_for_socket(b))
                return;
        struct timeval tv = {
                .tv_sec = (time_t) (b->backoff_usec / 1000000ull),
                .tv_usec = (suseconds_t) (b->backoff_usec % 1000000ull),
        };
        (void) evtimer_add(b->reconnect, &tv);
        b->backoff_usec = b->backoff_usec * 2 > DBUS_RECONNECT_MAX_USEC ? DBUS_RECONNECT_MAX_USEC : b->backoff_usec * 2;
}

static void bus_lost(Dbus *b, int error) {
        if (!b->bus)
                return;
        if (b->ever_up && b->serving)
                log_warning_errno(error, "D-Bus: lost the system bus: %m; reconnecting in the background");
        else
                log_debug_errno(error, "D-Bus: connection failed: %m");
        bus_disconnect(b);
        schedule_reconnect(b);
}

static void try_connect(Dbus *b) {
        stop_watching(b);
        int r = bus_connect(b);
        if (r >= 0)
                return;
        if (!b->logged_absent && !b->ever_up) {
                /* Said once: a host without a system bus is normal; varlink is the interface. */
                log_full_errno(LOG_NOTICE, r,
                               "D-Bus: no system bus (%m); running on varlink alone, connecting when one appears");
                b->logged_absent = true;
        } else
                log_debug_errno(r, "D-Bus: still no system bus: %m");
        schedule_reconnect(b);
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *userdata) {
        try_connect(userdata);
}

int dbus_new(Manager *m, Dbus **ret) {
        Dbus *b = calloc(1, sizeof(*b));

        if (!b)
                return -ENOMEM;
        b->m = m;
        TAILQ_INIT(&b->pending);
        b->backoff_usec = DBUS_RECONNECT_MIN_USEC;
        b->io = event_new(m->base, -1, 0, on_bus_io, b);
        b->appear_fd = -1;
        b->reconnect = evtimer_new(m->base, on_reconnect_timer, b);
        b->changed = evtimer_new(m->base, on_changed_timer, b);
        if (!b->io || !b->reconnect || !b->changed) {
                dbus_free(b);
                return -ENOMEM;
        }
        try_connect(b);
        *ret = b;
        return 0;
}

void dbus_free(Dbus *b) {
        if (!b)
                return;
        if (b->bus)
                bus_disconnect(b);
        if (b->io)
                event_free(b->io);
        if (b->reconnect)
                event_free(b->reconnect);
        stop_watching(b);
        if (b->changed)
                event_free(b->changed);
        free(b);
}

bool dbus_serving(const Dbus *b) {
        return b && b->serving;
}
