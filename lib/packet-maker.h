/* packet-maker.h — packet sockets made ahead, away from the loop. Setting up an AF_PACKET
 * socket's ring (PACKET_RX_RING) waits for an RCU grace period in the kernel (synchronize_net()
 * in packet_set_ring(): 3-22 ms here), which stalled the event loop at the start of every watch.
 * A child process, made once for every namespace, makes them to a recipe (a classic BPF filter,
 * locked; TPACKET_V3; a receive ring) in the network namespace whose descriptor comes with each
 * request — a packet socket belongs to the namespace it was made in — and sends them back over a
 * socket pair (SCM_RIGHTS). What is left to the daemon, mmap(2) and bind(2) of a socket that
 * receives nothing yet (protocol 0), does not wait. Answers come on the loop, in the order asked.
 * A seccomp filter leaves the child recvmsg, sendmsg, setns, socket, setsockopt, close and exit. */
#pragma once

#include <event2/event.h>
#include <linux/filter.h>
#include <linux/if_packet.h>

#include "closer.h"

typedef struct PacketRecipe {
        const struct sock_fprog *filter;
        struct tpacket_req3 ring;
} PacketRecipe;

/* A socket made to `recipe` here and now (the child's work; also the fallback without one), in
 * the caller's network namespace. -errno. */
int packet_socket_make(const PacketRecipe *recipe);

typedef struct PacketMaker PacketMaker;

/* `fd`: the socket, the callee's to keep or close; or -errno. */
typedef void (*PacketMade)(int fd, void *userdata);

/* The child, and its end of the pair watched on `base`. Sockets that nobody takes any more go to
 * `closer` (their last close waits for the kernel too). The child is reaped from the loop as soon
 * as it dies (never a zombie): the answers owed fail (-EPIPE), then `gone` (may be NULL) is told;
 * no request is taken until packet_maker_restart() makes another. `recipe` stays the caller's, and
 * valid while the maker lives. -errno. */
int packet_maker_new(struct event_base *base, const PacketRecipe *recipe, Closer *closer, SandboxGoneFn gone,
                     void *userdata, PacketMaker **ret);
/* Ends the child; the answers still owed are not made. NULL is a no-op. */
void packet_maker_free(PacketMaker *m);
/* Its child takes requests (not known dead). */
bool packet_maker_running(const PacketMaker *m);
/* Another child in place of one that is gone (one not quite reaped yet is killed and waited for).
 * -EBUSY while the one it has runs; -errno when it cannot be made. */
int packet_maker_restart(PacketMaker *m);
/* Ask for one socket made in the namespace of `netns_fd` (-1: the daemon's own); `done` comes
 * later, from the loop, never from inside this call. -EAGAIN when the child cannot take the
 * request now, -EPIPE when it is gone. */
int packet_maker_ask(PacketMaker *m, int netns_fd, PacketMade done, void *userdata);
/* The answers owed to `userdata` are not given to it: their sockets are closed (through the
 * closer). For a requester that goes away. */
void packet_maker_forget(PacketMaker *m, void *userdata);
/* Requests asked and not yet answered. */
size_t packet_maker_pending(const PacketMaker *m);
/* The child's pid; -1 while it has none running. */
pid_t packet_maker_pid(const PacketMaker *m);
