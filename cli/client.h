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
/* Watch(ifname, duration_usec), which answers when the window ends: its JSON in *ret. */
int dbus_call_watch(const char *ifname, uint64_t duration_usec, char **ret, char **ret_error);
