/* netns-peek.h — a read-only look at the devices of namespaces bigtcpd has not entered, for Plan:
 * one at a time, a NETLINK_ROUTE socket is made in the namespace (netns_set_peek), one
 * RTM_GETLINK dump (and an RTM_GETROUTE one, for match.route) is read from the loop, and the
 * socket is closed. Nothing is written and nothing
 * of the namespace is kept but the parsed devices. Bounded: at most NETNS_PEEK_MAX namespaces,
 * NETNS_PEEK_DEVICES_MAX devices each, NETNS_PEEK_TIMEOUT_USEC in all. */
#pragma once

#include <event2/event.h>

#include "device.h"
#include "netns-set.h"

#define NETNS_PEEK_MAX 64u
#define NETNS_PEEK_DEVICES_MAX 4096u
#define NETNS_PEEK_TIMEOUT_USEC (3u * 1000000u)

typedef struct NetnsPeek NetnsPeek;

typedef struct PeekedNetns {
        NetnsId id; /* what its devices' netns point to */
        /* 0: its devices are in `devices`. Else why not: -E2BIG (beyond NETNS_PEEK_MAX, or more
         * than NETNS_PEEK_DEVICES_MAX devices), -EOVERFLOW (too many routes to read), -ETIMEDOUT,
         * -ENOENT (gone), -EMFILE (descriptors),
         * -EPERM and the other errors of entering it, or what the dump failed with. */
        int error;
        bool dumped; /* the error came from the dump, not from entering */
        DeviceTable devices;
} PeekedNetns;

/* Called once, from the loop (never from inside netns_peek_new()), when every namespace is read
 * or has its error. */
typedef void (*NetnsPeekDoneFn)(NetnsPeek *p, void *userdata);

/* Look at the namespaces `names` (copied; distinct): their links, and with `routes` (match.route)
 * the routes out of each device too. */
int netns_peek_new(struct event_base *base, NetnsSet *s, char *const *names, size_t n, bool routes,
                   NetnsPeekDoneFn done, void *userdata, NetnsPeek **ret);
/* Cancels a look not done (its socket closed, `done` not called) and frees what it read. */
void netns_peek_free(NetnsPeek *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(NetnsPeek *, netns_peek_free);

size_t netns_peek_count(const NetnsPeek *p);
const PeekedNetns *netns_peek_get(const NetnsPeek *p, size_t i);
/* By name; NULL when it was not asked for. */
const PeekedNetns *netns_peek_find(const NetnsPeek *p, const char *name);
