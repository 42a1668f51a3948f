/* dbus.h — one connection to the D-Bus system bus, driven by a libevent loop: connecting without
 * blocking, owning a well-known name, reconnecting when the bus goes away or comes back (waiting
 * for its socket with inotify, not a timer), and the check of calls only root may make (the
 * caller's UID asked of the bus asynchronously). What is served on it is given to it through
 * DbusOps (dbus-manager.c). Without a system bus nothing fails: it waits for one. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <systemd/sd-bus.h>
#include <sys/types.h>

#include "util.h"

/* Limits. */
#define DBUS_PENDING_CALLS_MAX 64u          /* calls waiting for their caller's UID, */
#define DBUS_PENDING_PER_SENDER_MAX 8u      /*   of them from one connection */
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

/* A call whose caller must be known: the bus is asked for the UID of the sender, and `run` is
 * called with it — for a `root_only` call only when it is 0; anyone else gets
 * org.freedesktop.DBus.Error.AccessDenied (and a log line, rate-limited). `free_userdata` (may be
 * NULL) frees `userdata` in every case, also when the connection goes first. Returns 1 (answered
 * later) or sets `error` (LimitsExceeded when too many calls wait for their UID, in total or of
 * this sender). */
typedef void (*DbusIdentifiedFn)(sd_bus_message *call, uid_t uid, void *userdata);
int dbus_call_identified(Dbus *b, sd_bus_message *call, const char *method, bool root_only, DbusIdentifiedFn run,
                         void *userdata, void (*free_userdata)(void *userdata), sd_bus_error *error);
