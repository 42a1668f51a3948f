/* auto-queue.h — the engine's searches of `auto` by when each is next due: a binary min-heap of
 * devices, each holding its slot, so that the timer is armed from the first one and its tick
 * takes only the devices due, not a walk over every device (10000 searching devices). */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct Device;

typedef struct AutoQueueItem {
        uint64_t due; /* CLOCK_REALTIME */
        struct Device *device;
} AutoQueueItem;

typedef struct AutoQueue {
        AutoQueueItem *items;
        size_t n, allocated;
} AutoQueue;

/* `d` is due at `due`: in the queue, moved, or out of it for UINT64_MAX (never). -ENOMEM: it is
 * not in the queue. */
int auto_queue_set(AutoQueue *q, struct Device *d, uint64_t due);
/* Out of the queue (a device freed, or without a search); nothing when it is not in it. */
void auto_queue_remove(AutoQueue *q, struct Device *d);
/* The device due first, and when; NULL when the queue is empty. */
struct Device *auto_queue_first(const AutoQueue *q, uint64_t *ret_due);
void auto_queue_done(AutoQueue *q);
