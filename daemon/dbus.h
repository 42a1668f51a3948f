/* dbus.h — io.bigtcpd1 on the D-Bus system bus (sd-bus), driven by the manager's event loop:
 * the control plane's operations as typed methods, properties that emit PropertiesChanged, and
 * a RolledBack signal. Without a system bus the daemon runs on varlink alone. */
#pragma once

#include <stdbool.h>

#include "manager.h"

#define DBUS_SERVICE_NAME "io.bigtcpd1"
#define DBUS_OBJECT_PATH "/io/bigtcpd1"
#define DBUS_MANAGER_INTERFACE "io.bigtcpd1.Manager"

/* Limits. */
#define DBUS_PENDING_CALLS_MAX 64u           /* privileged calls waiting for their caller's UID */
#define DBUS_MESSAGES_PER_WAKEUP 64u         /* messages dispatched per loop turn */
#define DBUS_CHANGED_DELAY_USEC 100000ull    /* PropertiesChanged: at most one per 100 ms */
#define DBUS_RECONNECT_MIN_USEC 1000000ull   /* no bus, or the bus went away: retry after 1 s, */
#define DBUS_RECONNECT_MAX_USEC 60000000ull  /*   doubling up to a minute */

typedef struct Dbus Dbus;

/* Connect to the system bus ($DBUS_SYSTEM_BUS_ADDRESS, else the standard socket) and serve
 * io.bigtcpd1. A missing or lost bus is not an error: it is logged once and retried in the
 * background. Fails only when out of memory. */
int dbus_new(Manager *m, Dbus **ret);
void dbus_free(Dbus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(Dbus *, dbus_free);

/* Connected and owning io.bigtcpd1. */
bool dbus_serving(const Dbus *b);
