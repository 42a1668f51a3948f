/* manager-dbus.h — io.bigtcpd1 on the system bus: the object /io/bigtcpd1 with interface
 * io.bigtcpd1.Manager — the operations (operation.h) as typed methods, each call's operation
 * owned by its DbusCall (dbus.h) and encoded when it completes; properties that emit
 * PropertiesChanged, a RolledBack signal for each rollback, and Monitor's events as Event
 * signals while someone has subscribed. Reload, Rollback, Retry, Try, Confirm, Revert and Watch
 * are root's. The object is served under io.bigtcpd1 and, on a second connection, under
 * io.bigtcpd1.Root (root's alone); signals come from io.bigtcpd1. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

#include "control.h"
#include "operation.h"
#include "dbus.h"

#define DBUS_SERVICE_NAME "io.bigtcpd1"
/* The same object on a connection of its own, which only root may call (io.bigtcpd1.conf): the
 * bus queues everyone's calls to io.bigtcpd1 in one line, which another user can fill faster than
 * the bus passes it on; root's calls to this name wait behind root's alone. bigtcpctl --dbus
 * calls it as root. */
#define DBUS_ROOT_NAME "io.bigtcpd1.Root"
#define DBUS_OBJECT_PATH "/io/bigtcpd1"
#define DBUS_MANAGER_INTERFACE "io.bigtcpd1.Manager"
#define DBUS_CHANGED_DELAY_USEC 100000ull /* PropertiesChanged: at most one per 100 ms */
#define DBUS_READS_MAX 64u /* reads of the kernel in flight (operation_reads_in_flight()): no more calls read */
#define DBUS_SUBSCRIBERS_MAX 64u /* unique names of UIDs other than 0 subscribed to Event at once */

typedef struct DbusManager DbusManager;

/* Fails only when out of memory: without a system bus it waits for one. */
int dbus_manager_new(struct event_base *base, Control *control, DbusManager **ret);
void dbus_manager_free(DbusManager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(DbusManager *, dbus_manager_free);
bool dbus_manager_serving(const DbusManager *m);
