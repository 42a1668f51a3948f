/* dbus.h — one connection to the D-Bus system bus, driven by a libevent loop: connecting without
 * blocking, owning a well-known name, reconnecting when the bus goes away or comes back (waiting
 * for its socket with inotify, not a timer), and the check of calls only root may make (the
 * caller's UID asked of the bus asynchronously). What is served on it is given to it through
 * DbusOps (dbus-manager.c). Without a system bus nothing fails: it waits for one. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <systemd/sd-bus.h>

#include "util.h"

/* Limits. */
#define DBUS_PENDING_CALLS_MAX 64u          /* privileged calls waiting for their caller's UID */
#define DBUS_MESSAGES_PER_WAKEUP 64u        /* messages dispatched per loop turn */
#define DBUS_RECONNECT_MIN_USEC 1000000ull  /* no bus, or the bus went away: retry after 1 s, */
#define DBUS_RECONNECT_MAX_USEC 60000000ull /*   doubling up to a minute */

typedef struct Dbus Dbus;

typedef struct DbusOps {
        /* A new connection, before its name is requested: add what it serves. */
        int (*attach)(void *userdata, sd_bus *bus);
        /* The connection goes: drop everything tied to it (slots, calls waiting for a reply). */
        void (*detach)(void *userdata);
} DbusOps;

/* Connect to the system bus ($DBUS_SYSTEM_BUS_ADDRESS, else the standard socket) and own `name`.
 * A missing or lost bus is not an error: it is logged once and retried in the background. Fails
 * only when out of memory. */
int dbus_new(struct event_base *base, const char *name, const DbusOps *ops, void *userdata, Dbus **ret);
void dbus_free(Dbus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(Dbus *, dbus_free);

/* Connected and owning the name. */
bool dbus_serving(const Dbus *b);
/* After sending from outside the bus's own dispatch: the loop flushes it, and a send error is
 * seen there rather than inside whoever sent. */
void dbus_kick(Dbus *b);

/* A call only root may make: the bus is asked who sent it; `run` is called for UID 0, anyone else
 * gets org.freedesktop.DBus.Error.AccessDenied. `free_userdata` (may be NULL) frees `userdata` in
 * every case, also when the connection goes first. Returns 1 (answered later) or sets `error`. */
typedef void (*DbusPrivilegedFn)(sd_bus_message *call, void *userdata);
int dbus_call_privileged(Dbus *b, sd_bus_message *call, const char *method, DbusPrivilegedFn run,
                         void *userdata, void (*free_userdata)(void *userdata), sd_bus_error *error);
