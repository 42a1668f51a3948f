/* dbus.h — one connection to the D-Bus system bus, driven by a libevent loop: connecting without
 * blocking, owning a well-known name, reconnecting when the bus goes away or comes back (waiting
 * for its socket with inotify, not a timer), and who sent a call: the caller's UID, asked of the
 * bus asynchronously on a second connection of its own, cached by unique name, with limits per
 * UID and the check of calls only root may make. What is served on it is given to it through
 * DbusOps (manager-dbus.c). Without a system bus nothing fails: it waits for one.
 *
 * Nothing a caller sends is held without a bound: calls that expect no reply are dropped as they
 * are read, calls wait for their caller's UID only so many (then no more is read until the bus
 * has answered), a UID other than 0 has only so many calls in progress, and no more calls are
 * read while sd-bus holds too many replies the bus has not taken yet. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <systemd/sd-bus.h>
#include <sys/types.h>

#include "util.h"

/* Limits. */
#define DBUS_WAITING_MAX 64u                  /* calls waiting for their caller's UID, */
#define DBUS_WAITING_BYTES_MAX (8u << 20)     /*   or their bytes: no more calls read */
#define DBUS_CALLS_PER_UID_MAX 32u            /* calls in progress per UID other than 0, */
#define DBUS_BYTES_PER_UID_MAX (8u << 20)     /*   their bytes; beyond: LimitsExceeded */
#define DBUS_CALLS_UNPRIVILEGED_MAX 512u      /* of all UIDs other than 0 together, */
#define DBUS_BYTES_UNPRIVILEGED_MAX (32u << 20) /*   their bytes */
#define DBUS_SENDERS_CACHED 1024u             /* unique names whose UID is remembered */
#define DBUS_LOOKUP_TIMEOUT_USEC 10000000ull /* a UID the bus did not give in 10 s */
#define DBUS_LOOKUP_ATTEMPTS 3u               /*   is asked for again, three times in all */
#define DBUS_WRITE_QUEUE_MAX 256u             /* replies sd-bus holds: no more calls read */
#define DBUS_MESSAGES_PER_WAKEUP 64u          /* messages dispatched per loop turn, */
#define DBUS_WAKEUP_BUDGET_USEC 10000ull      /*   or fewer once they took 10 ms */
#define DBUS_RECONNECT_MIN_USEC 1000000ull  /* no bus, or the bus went away: retry after 1 s, */
#define DBUS_RECONNECT_MAX_USEC 60000000ull /*   doubling up to a minute */

typedef struct Dbus Dbus;

typedef struct DbusOps {
        /* A new connection, before its name is requested: add what it serves. */
        int (*attach)(void *userdata, sd_bus *bus);
        /* The connection goes: drop everything tied to it (slots, calls waiting for a reply). */
        void (*detach)(void *userdata);
        /* What is served holds as much as it may of calls in progress: read no more calls until
         * dbus_kick() (asked before each message; may be NULL). */
        bool (*busy)(void *userdata);
        /* A second connection beside another one to the same bus: that one says when there is no
         * bus or it is lost (this one logs it at debug level). */
        bool second;
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

/* A call whose caller must be known. The bus is asked for the UID of the sender (once per unique
 * name: names are never reused on a bus) and `run` is called with it — for a `root_only` call
 * only when it is 0; anyone else gets org.freedesktop.DBus.Error.AccessDenied. A UID other than
 * 0 gets LimitsExceeded beyond DBUS_CALLS_PER_UID_MAX calls or DBUS_BYTES_PER_UID_MAX bytes in
 * progress (`bytes`: what the call holds, its strings). From `run` on the call is in progress
 * until dbus_call_end(): `run` or what it starts answers the call, then ends it. `free_userdata`
 * (may be NULL) frees `userdata` in every case: at dbus_call_end(), when the call is refused,
 * when its caller is gone before it was identified, and when the connection goes (the call
 * unanswered). `method` is a static string. Returns 1 (answered later) or < 0 (then `userdata`
 * is freed already and `error` may be set). */
typedef struct DbusCall DbusCall;
typedef void (*DbusIdentifiedFn)(DbusCall *dc, sd_bus_message *call, uid_t uid, void *userdata);
int dbus_call_identified(Dbus *b, sd_bus_message *call, const char *method, bool root_only, size_t bytes,
                         DbusIdentifiedFn run, void *userdata, void (*free_userdata)(void *userdata),
                         sd_bus_error *error);
/* The call is answered (or dropped): its userdata freed, its share of its UID's limits back,
 * and the loop kicked (a reply sent from outside the bus's dispatch is flushed). */
void dbus_call_end(DbusCall *dc);
/* The call's message (valid until dbus_call_end()). */
sd_bus_message *dbus_call_message(const DbusCall *dc);
