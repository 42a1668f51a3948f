/* dbus-manager.h — io.bigtcpd1 on the system bus: the object /io/bigtcpd1 with interface
 * io.bigtcpd1.Manager — the control surface's operations as typed methods (the reads answer after
 * reading the kernel, like varlink's), properties that emit PropertiesChanged, and a RolledBack
 * signal for each rollback. Reload, Rollback and Retry are root's. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

#include "control.h"
#include "dbus.h"

#define DBUS_SERVICE_NAME "io.bigtcpd1"
#define DBUS_OBJECT_PATH "/io/bigtcpd1"
#define DBUS_MANAGER_INTERFACE "io.bigtcpd1.Manager"
#define DBUS_CHANGED_DELAY_USEC 100000ull /* PropertiesChanged: at most one per 100 ms */
#define DBUS_READS_MAX 64u /* ListDevicesJSON(ifname), GetDevice: reads of the kernel at once */

typedef struct DbusManager DbusManager;

/* Fails only when out of memory: without a system bus it waits for one. */
int dbus_manager_new(struct event_base *base, Control *control, DbusManager **ret);
void dbus_manager_free(DbusManager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(DbusManager *, dbus_manager_free);
bool dbus_manager_serving(const DbusManager *m);
