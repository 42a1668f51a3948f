/* sync.h — keeping the engine's device table in step with the kernel: link and route events, the
 * initial dumps, the re-dumps after lost events (ENOBUFS) or inconsistent dumps, and the periodic
 * link-only verification that finds sizes changed behind bigtcpd's back (the kernel raises no
 * event for those). It implements NetlinkOps for the engine's netlink sockets. */
#pragma once

#include <stdint.h>

#include "engine.h"
#include "netlink.h"
#include "state.h"

typedef struct Sync Sync;

/* Devices that move between namespaces (netns-set.c keeps their records across the move). */
typedef struct SyncMoveOps {
        /* `d` leaves this engine's namespace for the one with `nsid` here, where its ifindex is
         * `new_ifindex`; called before it is forgotten. */
        void (*leaving)(void *userdata, Engine *e, Device *d, int nsid, int new_ifindex);
        /* `d` is new in this engine's table (read, not reconciled yet). */
        void (*arrived)(void *userdata, Engine *e, Device *d);
} SyncMoveOps;

/* Takes over `nl`'s callbacks. `verify_interval_usec`: re-read every link this often while some
 * device is managed (0: never). `nl` NULL (the fuzzers): no sockets; the caller plays the kernel
 * through sync_netlink_ops and answers the dumps that sync_dump_running() names. */
int sync_new(Engine *e, Netlink *nl, uint64_t verify_interval_usec, Sync **ret);
void sync_free(Sync *s);
void sync_set_move_ops(Sync *s, const SyncMoveOps *ops, void *userdata);

/* Start the first sync; `entries` (the state file of an earlier run, taken over) are attached to
 * their devices when it is complete. */
void sync_start(Sync *s, StateEntry *entries, size_t n);
/* Re-read every link, after the sync that runs if one does. */
void sync_verify(Sync *s);

/* `fn` is called once every link has been read again by a dump that started after this call. */
typedef void (*SyncDoneFn)(void *userdata);
int sync_wait_links(Sync *s, SyncDoneFn fn, void *userdata, uint64_t *ret_id);
void sync_cancel_wait(Sync *s, uint64_t id);

/* For the fuzzer and the tests: the handlers the netlink sockets call. */
extern const NetlinkOps sync_netlink_ops;
/* The dump whose end (sync_netlink_ops.dump_done) the Sync waits for: RTM_GETLINK, RTM_GETROUTE,
 * or 0 when none runs. */
int sync_dump_running(const Sync *s);
