/* client.h — bigtcpctl's transports: a blocking varlink client on the daemon's unix socket, and
 * the few D-Bus calls that --dbus supports. */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>

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

/* Sends one call; takes ownership of `parameters` (may be NULL). */
int varlink_send(Varlink *v, const char *method, json_object *parameters, bool more);
/* The next reply, whole ({"parameters": …} or {"error": …, "parameters": …}). `timeout_ms` < 0
 * waits forever. -ECONNRESET when the daemon closed the connection, -ETIMEDOUT, -EBADMSG for a
 * reply that is not JSON or too large. */
int varlink_recv(Varlink *v, int timeout_ms, json_object **ret);

/* D-Bus (system bus, or $DBUS_SYSTEM_BUS_ADDRESS): io.bigtcpd1 /io/bigtcpd1
 * io.bigtcpd1.Manager.GetStatusJSON() and ListDevicesJSON(s ifname, "" for all), which return
 * the same JSON as the varlink methods. On a D-Bus error, -errno and its name and message in
 * `ret_error` (free() it). */
int dbus_call_json(const char *method, const char *arg, json_object **ret, char **ret_error);
