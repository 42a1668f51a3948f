/* durable.h — fsync(2) and fdatasync(2) that the loop waits for only so long. A disk can take
 * seconds to sync (or, failing, forever); the sync runs in a thread of its own, and the loop waits
 * for it at most `timeout_usec`: a sync still running then is -ETIMEDOUT (not known to be on
 * disk: the caller acts as for a failed one), and every sync asked for until it returns fails at
 * once with -EBUSY. One thread for the process (syncs are taken one at a time anyway), started
 * by the first sync. It knows nothing of bigtcpd. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The sync itself (tests put in one of theirs, to be slow or fail); it returns what fsync(2) does,
 * errno set. NULL: fsync(2), or fdatasync(2) when `data_only`. It runs in the sync thread. */
typedef int (*DurableSyncFn)(void *userdata, int fd, bool data_only);

/* 0, the sync's -errno, -ETIMEDOUT, -EBUSY (one timed out and still runs), -ENOMEM, or the
 * -errno of dup(2) or pthread_create(3). `fd` stays the caller's (the thread syncs a duplicate). */
int durable_sync(int fd, bool data_only, uint64_t timeout_usec, DurableSyncFn fn, void *userdata);
