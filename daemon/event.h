/* event.h — what happens to devices and to the policy, as typed events, and the list of those who
 * watch them (Monitor streams, D-Bus signals, sd_notify STATUS=). Lower layers emit; each
 * transport turns an event into its own format. A watcher may remove itself or any other watcher
 * from inside a notification (iwd's watchlist). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auto-size.h"
#include "device.h"

struct PolicyErrors;

typedef enum EventType {
        EVENT_ADDED,     /* a device appeared (found by a dump or announced) */
        EVENT_REMOVED,   /* a device went away; `device` is still valid during the call */
        EVENT_STATE,     /* state, previous */
        EVENT_WRITE,     /* the kernel answered a write: cause, from, to, error, extack */
        EVENT_ROLLBACK,  /* a guard tripped, or an operator's rollback: rollback */
        EVENT_RELOAD,    /* the policy was re-read: ok, digest, errors (refused) */
        EVENT_ROLLOUT,   /* a policy's rollout was halted: policy, device (the one rolled back) */
        EVENT_RELOADING, /* a reload begins (for sd_notify; not an operator's event) */
        EVENT_SETTLED,   /* a sync or reload is complete and every write it caused answered */
        EVENT_TRY,       /* a tried policy: try_action, try_reason; file, target, deadline; digest */
        EVENT_EVIDENCE,  /* a watch of the device ended (d->evidence has its counts and verdict);
                          * ok: not found ineffective */
        EVENT_NETNS_PROBLEM, /* a namespace problem came (ok false) or went (ok true): netns,
                              * problem, error */
        EVENT_AUTO,          /* a search of `auto` moved: auto_size, auto_change, auto_search */
        _EVENT_TYPE_MAX,
        _EVENT_TYPE_INVALID = -EINVAL,
} EventType;

const char *event_type_to_string(EventType t);

typedef enum TryAction {
        TRY_STARTED,
        TRY_CONFIRMED, /* installed where the daemon reads its policy */
        TRY_REVERTED,  /* the policy that ran before is back */
        _TRY_ACTION_MAX,
        _TRY_ACTION_INVALID = -EINVAL,
} TryAction;

typedef enum TryReason {
        TRY_REASON_NONE,     /* started, confirmed */
        TRY_REASON_TIMEOUT,  /* the deadline passed unconfirmed */
        TRY_REASON_OPERATOR, /* Revert() */
        TRY_REASON_STOP,     /* the daemon is stopping (SIGTERM) */
        _TRY_REASON_MAX,
        _TRY_REASON_INVALID = -EINVAL,
} TryReason;

const char *try_action_to_string(TryAction a);
const char *try_reason_to_string(TryReason r);

typedef struct Event {
        EventType type;
        const Device *device;
        DeviceState state, previous;
        WriteCause cause;
        const Sizes *from, *to;
        bool ipv4; /* the sizes carry the IPv4 pair (the kernel has it) */
        int error; /* a refused write: -errno */
        const char *extack;
        const RollbackRecord *rollback;
        const char *policy;
        bool ok;
        uint64_t digest;
        const struct PolicyErrors *errors;
        TryAction try_action;
        TryReason try_reason;
        const char *file, *target; /* EVENT_TRY: the tried file (as the caller named it), its place */
        uint64_t deadline;         /* EVENT_TRY: CLOCK_REALTIME, µs */
        const char *netns, *problem; /* EVENT_NETNS_PROBLEM: the namespace's name, the problem's kind */
        unsigned auto_size;              /* EVENT_AUTO: the size searched (0..3) */
        AutoChange auto_change;          /* EVENT_AUTO: what moved it */
        const AutoSearch *auto_search;   /* EVENT_AUTO: where it stands now (borrowed for the call) */
} Event;

typedef void (*EventFn)(const Event *e, void *userdata);

typedef struct EventWatch {
        unsigned id;
        EventFn fn;
        void *userdata;
        bool stale; /* removed during a notification: pruned after it */
} EventWatch;

typedef struct EventList {
        EventWatch *items;
        size_t n, cap;
        unsigned next_id;
        unsigned depth; /* notifications running (they may nest) */
        bool has_stale;
} EventList;

/* Returns the watch's id (> 0), or 0 when out of memory. A watch added during a notification
 * sees the next event, not the current one. */
unsigned event_watch_add(EventList *l, EventFn fn, void *userdata);
/* Safe inside a notification: the watch is not called again, even by the event being sent. */
void event_watch_remove(EventList *l, unsigned id);
void event_emit(EventList *l, const Event *e);
/* Anyone watching? Lets an emitter skip building an event nobody reads. */
bool event_watched(const EventList *l);
/* How many watch `l` (for the fuzzers: what a session left behind). */
size_t event_watch_count(const EventList *l);
void event_list_done(EventList *l);
