/* bigtcpctl-call.h — calls to bigtcpd: varlink on its socket (client.c) or D-Bus with --dbus; a
 * failed call is printed as one line and turned into an exit code. */
#pragma once

#include <json-c/json.h>

#include "bigtcpctl-util.h"
#include "client.h"

/* Every function below returns 0 on success, or an exit code once the problem is printed.
 * `what` is the verb, for messages ("permission denied: reload needs root"). */

/* Opens the varlink connection (c->conn) unless it is open, and checks that bigtcpd answers on
 * it (GetInfo) within a few seconds: exit 3 (EXIT_NOT_RUNNING) when it does not. */
int call_connect(Ctl *c);
/* The same, waiting `timeout_ms` for the answer (< 0: as long as it takes). */
int call_connect_answered(Ctl *c, int timeout_ms);
/* The exit code for a failed varlink send or receive (-errno). */
int call_recv_exit(int r);
/* The exit code for a varlink error reply. */
int call_error_exit(const char *what, json_object *reply);

/* One varlink call; takes `params` (may be NULL). On success *ret gets the reply's parameters;
 * with `ret` NULL they are printed as they came (--json). */
int call_method(Ctl *c, const char *what, const char *method, json_object *params, json_object **ret);

/* The exit code for a failed D-Bus call (-errno of client.h's dbus_*(); `err` its message). */
int call_dbus_exit(int r, const char *err, const char *what, const char *ifname);
/* An operation (Reload, Rollback, Retry, Try, Confirm, Revert) or Plan, over varlink (`params`,
 * taken) or D-Bus (`dargs`): *ret gets the varlink reply's parameters either way (over D-Bus
 * dbus_call_operation() builds them), what the operation did included. */
int call_operation(Ctl *c, const char *what, const char *method, json_object *params, const DbusOperationArgs *dargs,
                   json_object **ret);

/* Watch: count DEV's packets above 64 KiB for `duration_usec`; *ret gets the reply once the
 * window is over ({"device": {...}}), over varlink or D-Bus. */
int call_watch(Ctl *c, const char *ifname, uint64_t duration_usec, json_object **ret);

/* GetStatus, over varlink or D-Bus. */
int fetch_status(Ctl *c, json_object **ret);
/* ListDevices ({"devices": [...]}) of every device, or of the one named (which bigtcpd reads
 * from the kernel first), over varlink or D-Bus; with `ret` NULL, printed (--json). `refresh`:
 * bigtcpd reads every device from the kernel first, if it can (over varlink, and not a bigtcpd
 * from before ListDevices took `refresh`). */
int fetch_devices(Ctl *c, const char *ifname, bool refresh, json_object **ret);
