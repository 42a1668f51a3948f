/* client.h — bigtcpctl's transports: a blocking varlink client on the daemon's unix socket, and
 * the few D-Bus calls that --dbus supports. */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEFAULT_SOCKET "/run/bigtcpd/io.bigtcpd.Manager"
/* The largest reply bigtcpctl accepts (a ListDevices of ~100000 devices). */
#define CLIENT_REPLY_MAX (256u * 1024u * 1024u)

typedef struct Varlink Varlink;

/* -ENOENT/-ECONNREFUSED: nobody listens; -EACCES/-EPERM: not allowed to connect. */
int varlink_connect(const char *path, Varlink **ret);
void varlink_close(Varlink *v);
static inline void varlink_closep(Varlink **v) {
        if (*v)
                varlink_close(*v);
}

/* The socket, for poll() beside other fds; varlink_recv() with timeout 0 then reads what came. */
int varlink_fd(const Varlink *v);
/* Sends one call; takes ownership of `parameters` (may be NULL). */
int varlink_send(Varlink *v, const char *method, json_object *parameters, bool more);
/* The next reply, whole ({"parameters": …} or {"error": …, "parameters": …}). `timeout_ms` < 0
 * waits forever. -ECONNRESET when the daemon closed the connection, -ETIMEDOUT, -EBADMSG for a
 * reply that is not JSON or too large. */
int varlink_recv(Varlink *v, int timeout_ms, json_object **ret);
/* The same, unparsed: the message without its NUL, valid until the next call on `v`. */
int varlink_recv_raw(Varlink *v, int timeout_ms, const char **ret, size_t *ret_size);
int varlink_parse(const char *data, size_t size, json_object **ret);

/* D-Bus (the system bus, or $DBUS_SYSTEM_BUS_ADDRESS): io.bigtcpd1 /io/bigtcpd1
 * io.bigtcpd1.Manager.METHOD with one string argument (none when `arg` is NULL). With `ret`, the
 * method's one string result (GetStatusJSON and ListDevicesJSON return the varlink methods' JSON;
 * Reload the digest). On failure -errno (-ESRCH: bigtcpd is not running — nobody owns io.bigtcpd1
 * and the bus could not start it, because bigtcpd.service is not enabled, say, or the call timed
 * out with the name still unowned —, -EACCES,
 * -ENODEV, -EALREADY: nothing to do, -EINVAL: the policy has errors, -ENOMSG: no try runs
 * (Confirm, Revert), -EIO: another D-Bus error)
 * and the error's message (for -ESRCH: why it is not running) in `ret_error` (free() it). */
int dbus_call(const char *method, const char *arg, char **ret, char **ret_error);
/* The operations that answer with what they did (Reload, Rollback, Retry, Try, Confirm, Revert)
 * and Plan: *ret gets the reply as the varlink method's parameters (the typed results by their
 * varlink names, with the JSON `changes` merged in; Plan's JSON as it is). Errors as dbus_call()'s,
 * and -EBUSY: a try runs, -EXDEV: no policy file there (Try). */
typedef struct DbusOperationArgs {
        const char *arg;                    /* Rollback, Retry: the device ("": every one); Plan: the policy */
        const char *policy, *file, *target; /* Try ("": the main policy file) */
        uint64_t usec;                      /* Try: its timeout */
} DbusOperationArgs;
int dbus_call_operation(const char *method, const DbusOperationArgs *a, json_object **ret, char **ret_error);
/* Monitor over D-Bus: the Event signals of io.bigtcpd1 after Subscribe(), each to `fn` with its
 * JSON (as varlink's Monitor sends it); `fn` is also told when subscribed, when bigtcpd left the
 * bus and when it is back (subscribed again). Runs until `fn` returns non-zero (returned) or the
 * bus fails (-errno, as dbus_call()'s). */
typedef enum DbusMonitorWhat {
        DBUS_MONITOR_SUBSCRIBED,
        DBUS_MONITOR_EVENT,
        DBUS_MONITOR_GONE,
        DBUS_MONITOR_BACK,
} DbusMonitorWhat;
typedef int (*DbusMonitorFn)(DbusMonitorWhat what, json_object *event, void *userdata);
int dbus_monitor(DbusMonitorFn fn, void *userdata, char **ret_error);
/* Watch(ifname, duration_usec), which answers when the window ends: its JSON in *ret. */
int dbus_call_watch(const char *ifname, uint64_t duration_usec, char **ret, char **ret_error);
