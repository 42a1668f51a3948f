/* auto-queue.c — the searching devices in a min-heap by due time; Device.auto_slot is each one's
 * index + 1 (0: not queued), so that moving or removing one is O(log n) without a search. */
#include <errno.h>
#include <stdlib.h>

#include "auto-queue.h"
#include "device.h"

static void put(AutoQueue *q, size_t i, AutoQueueItem item) {
        q->items[i] = item;
        item.device->auto_slot = (unsigned) i + 1;
}

static void sift_up(AutoQueue *q, size_t i) {
        AutoQueueItem item = q->items[i];

        while (i > 0) {
                size_t parent = (i - 1) / 2;
                if (q->items[parent].due <= item.due)
                        break;
                put(q, i, q->items[parent]);
                i = parent;
        }
        put(q, i, item);
}

static void sift_down(AutoQueue *q, size_t i) {
        AutoQueueItem item = q->items[i];

        for (;;) {
                size_t child = 2 * i + 1;
                if (child >= q->n)
                        break;
                if (child + 1 < q->n && q->items[child + 1].due < q->items[child].due)
                        child++;
                if (item.due <= q->items[child].due)
                        break;
                put(q, i, q->items[child]);
                i = child;
        }
        put(q, i, item);
}

void auto_queue_remove(AutoQueue *q, Device *d) {
        size_t i;

        if (!d || d->auto_slot == 0)
                return;
        i = d->auto_slot - 1;
        d->auto_slot = 0;
        if (i == --q->n)
                return;
        put(q, i, q->items[q->n]); /* the last one, into the hole: up or down from there */
        if (i > 0 && q->items[i].due < q->items[(i - 1) / 2].due)
                sift_up(q, i);
        else
                sift_down(q, i);
}

int auto_queue_set(AutoQueue *q, Device *d, uint64_t due) {
        if (due == UINT64_MAX) {
                auto_queue_remove(q, d);
                return 0;
        }
        if (d->auto_slot != 0) {
                size_t i = d->auto_slot - 1;
                uint64_t was = q->items[i].due;

                q->items[i].due = due;
                if (due < was)
                        sift_up(q, i);
                else
                        sift_down(q, i);
                return 0;
        }
        if (q->n == q->allocated) {
                size_t m = q->allocated ? q->allocated * 2 : 16;
                AutoQueueItem *items = reallocarray(q->items, m, sizeof(*items));
                if (!items)
                        return -ENOMEM;
                q->items = items;
                q->allocated = m;
        }
        q->items[q->n] = (AutoQueueItem){.due = due, .device = d};
        sift_up(q, q->n++);
        return 0;
}

Device *auto_queue_first(const AutoQueue *q, uint64_t *ret_due) {
        if (q->n == 0)
                return NULL;
        if (ret_due)
                *ret_due = q->items[0].due;
        return q->items[0].device;
}

void auto_queue_done(AutoQueue *q) {
        for (size_t i = 0; i < q->n; i++)
                q->items[i].device->auto_slot = 0;
        free(q->items);
        *q = (AutoQueue){};
}
