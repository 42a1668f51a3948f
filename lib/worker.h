/* worker.h — work that must not hold the event loop, done in a child process: parsing and planning
 * text that a caller sent. The child is forked when a slot is free, sees the daemon's memory as
 * it was at that moment (copy on write), closes every descriptor but the pipe it writes its
 * result to, runs under a seccomp filter that allows little more than memory and that pipe, and
 * exits. The parent reads the result from the loop, bounded in size and time.
 *
 * Slots are few and shared fairly: a UID other than 0 runs one job at a time and cannot take the
 * slot kept for root; jobs wait in order of submission, and a UID can queue only so many. It
 * knows nothing of bigtcpd. */
#pragma once

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#define WORKER_SLOTS_MAX 4u               /* children at once */
#define WORKER_SLOTS_ROOT_RESERVED 1u     /* of them, only for UID 0 */
#define WORKER_QUEUED_PER_UID_MAX 32u     /* jobs waiting or running per UID other than 0 */
#define WORKER_QUEUED_MAX 512u            /* in total */
#define WORKER_OUTPUT_MAX (64u << 20)     /* bytes of one result */
#define WORKER_TIMEOUT_USEC (10u * 1000000u)

typedef struct WorkerPool WorkerPool;
typedef struct WorkerJob WorkerJob;

/* Runs in the child: write the result to `fd` (blocking; worker_write_all() helps) and return
 * 0, or < 0 when it could not. Nothing else may be touched: no logging, no other descriptor. */
typedef int (*WorkerRunFn)(int fd, void *userdata);
/* Called once, from the loop: 0 with the bytes the child wrote, or -ETIMEDOUT (killed after
 * WORKER_TIMEOUT_USEC), -EFBIG (wrote more than WORKER_OUTPUT_MAX), -ECHILD (it failed, died or
 * could not be started), -ENOMEM. `data` is valid during the call. */
typedef void (*WorkerDoneFn)(int error, const char *data, size_t size, void *userdata);

typedef enum WorkerFlags {
        WORKER_FORK = 0,
        /* Tests and fuzzers: a job runs in this process, unconfined, when its turn comes in the
         * loop (never from inside worker_submit()); no timeout. */
        WORKER_IN_PROCESS = 1 << 0,
} WorkerFlags;

int worker_pool_new(struct event_base *base, WorkerFlags flags, WorkerPool **ret);
/* Kills and reaps every child; no callback is called. */
void worker_pool_free(WorkerPool *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(WorkerPool *, worker_pool_free);

/* Queue a job for `uid`. -EBUSY when the UID (or everyone) has too many queued. `run` and its
 * `userdata` must stay valid until `done` is called or the job is cancelled: the child may be
 * forked any time before. */
int worker_submit(WorkerPool *p, uid_t uid, WorkerRunFn run, WorkerDoneFn done, void *userdata, WorkerJob **ret);
/* The caller went away: kill the child (reaped later) or drop the waiting job; `done` is not
 * called. */
void worker_cancel(WorkerJob *j);

/* How long a child may run before it is killed (a test knob). */
void worker_pool_set_timeout(WorkerPool *p, uint64_t usec);

/* Jobs running and waiting. */
size_t worker_pool_running(const WorkerPool *p);
size_t worker_pool_queued(const WorkerPool *p);

/* For WorkerRunFn: write all of `data`, retrying short writes. 0 or -errno. */
int worker_write_all(int fd, const void *data, size_t size);
