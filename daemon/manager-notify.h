/* manager-notify.h — what systemd is told (the sd_notify protocol): READY=1 after the first full reconcile
 * and after each reload, RELOADING=1 when one begins, STATUS= when the counts change, and
 * WATCHDOG=1 from a loop timer at half of WatchdogSec=. It watches the daemon's events (every
 * namespace's, through the set); nothing calls it. Never blocking: on a non-blocking socket of its
 * own, what must be said waits for room in the receiver's queue, a WATCHDOG=1 without room is
 * dropped (and logged once). */
#pragma once

#include <event2/event.h>

#include "netns-set.h"
#include "policy-reload.h"

typedef struct Notify Notify;

/* Does nothing (and allocates nothing but itself) without $NOTIFY_SOCKET. `reloader` (may be
 * NULL): where the running policy comes from, for STATUS=. */
int notify_new(struct event_base *base, NetnsSet *set, const Reloader *reloader, Notify **ret);
void notify_free(Notify *n);
/* STOPPING=1 (`n` may be NULL: sent if there is room at once, or not at all). */
void notify_stopping(Notify *n);
/* "managing 12 of 40 devices, 1 in probation", over every namespace, and when the policy files
 * have errors "; the policy files have errors: the last policy that ran runs on" (or ": no
 * policy runs"). */
char *notify_status_text(const NetnsSet *s, PolicySource source);
