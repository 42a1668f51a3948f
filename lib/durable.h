/* durable.h — fsync(2) and fdatasync(2) that the loop waits for only so long. A disk can take
 * seconds to sync (or, failing, forever); the sync runs in a child process of its own (the loop
 * has no threads), sent the descriptor over a socket pair (SCM_RIGHTS), and the loop waits for its
 * answer at most `timeout_usec`: a sync still running then is -ETIMEDOUT (not known to be on disk:
 * the caller acts as for a failed one), and every sync asked for until its answer comes fails at
 * once with -EBUSY. One child for the process (syncs are taken one at a time anyway), made at the
 * start (durable_start()) or else by the first sync, killed with the daemon (durable_stop(), or
 * else its parent-death signal); it keeps no descriptor of the daemon's but its socket, and a
 * seccomp filter leaves it the sync, its socket and its exit. It knows nothing of bigtcpd. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* 0, the sync's -errno, -ETIMEDOUT, -EBUSY (one timed out and still runs), -EIO (the child went
 * during the sync), or the -errno of making the child or sending it the job. `fd` stays the
 * caller's (the child syncs what it was sent). `gate_fd` is for tests, -1 otherwise: a socket the
 * child reads one byte from before the sync and writes one byte to after it (a disk held until the
 * test lets it go, and an event once it synced). */
int durable_sync(int fd, bool data_only, uint64_t timeout_usec, int gate_fd);
/* Makes the child now, while the process is small and before it holds anything else: a child
 * forked later shares the pages of every device the daemon holds then, and each one the daemon
 * writes or frees afterwards becomes a private copy of the child's (7.5 MiB of it at 10000
 * devices, forked at their first save); and made in the middle of a burst of namespaces it left
 * one socket more at the burst's end. 0 or the -errno of making it (then the first sync tries
 * again). */
int durable_start(void);
/* The child's pid (tests); -1 before the first sync (or durable_start()). */
pid_t durable_pid(void);
/* At exit: the child killed and reaped, so that it is gone before the process is (a service
 * manager that cannot signal the unit's processes itself — systemd in a container whose cgroup it
 * may not kill — counts the unit as running while any is left). Waits at most `timeout_usec` for
 * a sync in progress, which no signal ends; one still running then dies when it returns. */
void durable_stop(uint64_t timeout_usec);
