/* closer.h — closing descriptors whose last close blocks, away from the loop. The last close of
 * an AF_PACKET socket waits for an RCU grace period in the kernel (synchronize_net() in
 * packet_release(): 16 ms median here, 35 ms at worst), which would stall the event loop at the
 * end of every evidence window. A child process, made when the evidence set is, takes such
 * descriptors over a socket pair (SCM_RIGHTS) and closes them; the daemon's own close is then
 * not the last one and returns at once. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <sys/types.h>

#include "sandbox.h"

typedef struct Closer Closer;

/* The child; -errno when it cannot be made (closes then block, as before). With `base`, the child
 * is reaped from the loop as soon as it dies (never a zombie), and `gone` (may be NULL) is told;
 * closes are done here until closer_restart() makes another. */
int closer_new(struct event_base *base, SandboxGoneFn gone, void *userdata, Closer **ret);
/* Closes `fd`, through the child when it takes it, else here. */
void closer_close(Closer *c, int fd);
/* Its child is there to take descriptors (not known dead). */
bool closer_running(const Closer *c);
/* Another child in place of one that is gone (one that is not quite reaped yet is killed and
 * waited for). -EBUSY while the one it has runs; -errno when it cannot be made. */
int closer_restart(Closer *c);
/* Ends the child, once it has closed what it was given. NULL is a no-op. */
void closer_free(Closer *c);
/* The child's pid (tests); -1 without one. */
pid_t closer_pid(const Closer *c);
