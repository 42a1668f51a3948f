/* apply.h — one device's life under the policy (apply.c). */
#pragma once

#include <event2/event.h>

#include "manager.h"

typedef enum ReconcileReason {
        REASON_SYNC,   /* initial sync, resync, reload */
        REASON_LINK,   /* the device changed */
        REASON_SIZES,  /* its sizes changed, and we did not write them */
        REASON_ROUTES, /* routes out of it changed */
        REASON_RETRY,  /* an operator released it */
        _REASON_MAX,
        _REASON_INVALID = -1,
} ReconcileReason;

/* The policy of `set` that the device matches, or NULL. */
const Policy *device_match_in(Manager *m, const PolicySet *set, Device *d);
/* Change state and tell the control plane. */
void device_set_state(Manager *m, Device *d, DeviceState state);

/* Write the device back to its last-known-good sizes (its originals if it has been written only
 * once) and hold it there until its policy asks for something else or it is retried. `why` is
 * the guard that tripped (copied), NULL for an operator's rollback. -EALREADY when bigtcpd never
 * wrote the device. */
int apply_rollback(Manager *m, Device *d, const RollbackRecord *why);
/* Release a rolled-back or failed device and reconcile it. -EALREADY when it is neither. */
int apply_retry(Manager *m, Device *d);

/* Decide what the device should hold and queue the write if it does not. */
void device_reconcile(Manager *m, Device *d, ReconcileReason reason);
void unqueue_device(Manager *m, Device *d);
/* Persist new originals, then send queued writes up to the in-flight bound. */
void manager_flush(Manager *m);
/* Ask the kernel for one link's attributes again (its reply is an ordinary RTM_NEWLINK). */
int request_refresh(Manager *m, int ifindex, InflightKind kind);
/* NetlinkOps.ack */
void apply_ack(void *userdata, uint32_t seq, int error, const char *extack);
/* NetlinkOps.acks_lost */
void apply_acks_lost(void *userdata);
void apply_throttle_timer(evutil_socket_t fd, short what, void *userdata);
