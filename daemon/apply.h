/* apply.h — one device's life under the policy (apply.c). */
#pragma once

#include <event2/event.h>

#include "manager.h"

typedef enum ReconcileReason {
        REASON_SYNC,   /* initial sync, resync, reload */
        REASON_LINK,   /* the device changed */
        REASON_SIZES,  /* its sizes changed, and we did not write them */
        REASON_ROUTES, /* routes out of it changed */
        _REASON_MAX,
        _REASON_INVALID = -1,
} ReconcileReason;

/* Decide what the device should hold and queue the write if it does not. */
void device_reconcile(Manager *m, Device *d, ReconcileReason reason);
void unqueue_device(Manager *m, Device *d);
/* Persist new originals, then send queued writes up to the in-flight bound. */
void manager_flush(Manager *m);
/* Ask the kernel for one link's attributes again (its reply is an ordinary RTM_NEWLINK). */
void request_refresh(Manager *m, int ifindex);
/* NetlinkOps.ack */
void apply_ack(void *userdata, uint32_t seq, int error, const char *extack);
/* NetlinkOps.acks_lost */
void apply_acks_lost(void *userdata);
void apply_throttle_timer(evutil_socket_t fd, short what, void *userdata);
