/* closer.h — closing descriptors whose last close blocks, away from the loop. The last close of
 * an AF_PACKET socket waits for an RCU grace period in the kernel (synchronize_net() in
 * packet_release(): 16 ms median here, 35 ms at worst), which would stall the event loop at the
 * end of every evidence window. A child process, made when the evidence set is, takes such
 * descriptors over a socket pair (SCM_RIGHTS) and closes them; the daemon's own close is then
 * not the last one and returns at once. */
#pragma once

#include <sys/types.h>

typedef struct Closer Closer;

/* The child; -errno when it cannot be made (closes then block, as before). */
int closer_new(Closer **ret);
/* Closes `fd`, through the child when it takes it, else here. */
void closer_close(Closer *c, int fd);
/* Ends the child, once it has closed what it was given. NULL is a no-op. */
void closer_free(Closer *c);
/* The child's pid (tests); -1 without one. */
pid_t closer_pid(const Closer *c);
