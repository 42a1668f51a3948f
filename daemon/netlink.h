/* netlink.h — the daemon's three rtnetlink sockets: one subscribed to link and route events that
 * also carries the link and route dumps, one for writes whose acks are matched by sequence
 * number, and one for the link statistics dumps of probation. */
#pragma once

#include <event2/event.h>
#include <linux/netlink.h>
#include <netlink/msg.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum NetlinkSource {
        NETLINK_EVENT, /* a multicast notification */
        NETLINK_DUMP,  /* part of the dump netlink_dump() started */
        NETLINK_REPLY, /* the answer to a request sent with netlink_send() */
        _NETLINK_SOURCE_MAX,
        _NETLINK_SOURCE_INVALID = -1,
} NetlinkSource;

typedef struct NetlinkOps {
        /* RTM_NEWLINK/DELLINK/NEWROUTE/DELROUTE. */
        void (*message)(void *userdata, struct nlmsghdr *nlh, NetlinkSource source);
        /* The dump started by netlink_dump() ended; `error` < 0 when it failed, `interrupted`
         * when the kernel flagged it inconsistent (NLM_F_DUMP_INTR). */
        void (*dump_done)(void *userdata, int type, int error, bool interrupted);
        /* Events were lost (ENOBUFS, truncation): the caller must re-dump. */
        void (*lost)(void *userdata);
        /* The kernel answered request `seq`: 0 or -errno, with the extended ack text if any. */
        void (*ack)(void *userdata, uint32_t seq, int error, const char *extack);
        /* Acks were lost (ENOBUFS on the write socket): forget what is in flight. */
        void (*acks_lost)(void *userdata);
        /* A burst of reading ended: a good moment to flush queued work. */
        void (*batch_end)(void *userdata);
        /* One RTM_NEWSTATS of the statistics dump netlink_stats_dump() started. */
        void (*stats)(void *userdata, struct nlmsghdr *nlh);
        /* That dump ended (0), or failed (-errno). */
        void (*stats_done)(void *userdata, int error);
} NetlinkOps;

typedef struct Netlink Netlink;

/* Nothing is read before netlink_set_ops() says where messages go. */
int netlink_new(struct event_base *base, int event_rcvbuf, Netlink **ret);
void netlink_set_ops(Netlink *nl, const NetlinkOps *ops, void *userdata);
void netlink_free(Netlink *nl);

/* Start a dump of RTM_GETLINK or RTM_GETROUTE (all families) on the event socket. One at a
 * time: -EBUSY while another runs. */
int netlink_dump(Netlink *nl, int type);
/* Messages the running dump has delivered so far: a dump that stops moving was lost. */
uint64_t netlink_dump_progress(const Netlink *nl);
/* Give up on the running dump: its remaining messages are taken as events, its end ignored. */
void netlink_dump_abandon(Netlink *nl);

/* Start a dump of every device's link statistics (netlink-stats.h) on the statistics socket.
 * One at a time: -EBUSY while another runs. */
int netlink_stats_dump(Netlink *nl);
/* netlink_stats_dump() as a WriterTransport's stats_dump. */
int netlink_stats_dump_request(void *userdata);

/* Send a request on the write socket with NLM_F_ACK; its ack comes through ops->ack. */
int netlink_send(Netlink *nl, struct nl_msg *msg, uint32_t *ret_seq);
/* netlink_send() as a WriterTransport's send. */
int netlink_send_request(void *userdata, struct nl_msg *msg, uint32_t *ret_seq);

/* A socket the daemon may run SIOCETHTOOL on (netlink sockets take generic device ioctls). */
int netlink_ioctl_fd(const Netlink *nl);
