/* netlink.c — rtnetlink transport: socket set-up (groups subscribed before any dump, large
 * receive buffers, extended acks), non-blocking reads driven by libevent, dump bookkeeping and
 * ack matching. It knows nothing about policy. */
#include <linux/rtnetlink.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <limits.h>
#include <sys/socket.h>

#include "linux-compat.h"
#include "log.h"
#include "netlink.h"
#include "netlink-stats.h"

#define READ_BUDGET 256            /* datagrams per wakeup, so writes and acks interleave */
#define RECV_BUFFER (256u * 1024u) /* larger than any rtnetlink datagram */

/* One receive buffer for every Netlink of the process (one per network namespace managed): the
 * daemon has one thread, and a datagram is handled before the next is read, on any socket, so
 * they never need it at once; the pages a large dump touches are paid for once, not once per
 * namespace. */
static uint8_t *shared_buf;
static unsigned shared_users;

static uint8_t *buffer_ref(void) {
        if (!shared_buf)
                shared_buf = malloc(RECV_BUFFER);
        if (shared_buf)
                shared_users++;
        return shared_buf;
}

static void buffer_unref(uint8_t *b) {
        if (!b || --shared_users > 0)
                return;
        free(shared_buf);
        shared_buf = NULL;
}
#define WRITE_RCVBUF (8 * 1024 * 1024)

struct Netlink {
        struct nl_sock *ev_sk;
        struct nl_sock *wr_sk;
        struct nl_sock *st_sk;
        struct event *ev_event;
        struct event *wr_event;
        struct event *st_event;
        uint32_t stats_seq; /* of the statistics dump running, 0 when none */
        uint8_t *buf;
        const NetlinkOps *ops;
        void *userdata;
        uint32_t seq;
        uint32_t dump_seq;
        int dump_type;
        bool dump_intr;
        uint64_t dump_progress;
};

static void set_rcvbuf(int fd, int size) {
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

static int open_socket(struct nl_sock **ret) {
        struct nl_sock *sk = nl_socket_alloc();
        if (!sk)
                return -ENOMEM;
        nl_socket_disable_seq_check(sk);
        nl_socket_disable_auto_ack(sk);
        if (nl_connect(sk, NETLINK_ROUTE) < 0) {
                /* libnl's own code says only "failed": out of descriptors is worth telling */
                int e = errno;
                nl_socket_free(sk);
                return e == EMFILE || e == ENFILE ? -e : -EIO;
        }
        if (nl_socket_set_nonblocking(sk) < 0) {
                nl_socket_free(sk);
                return -EIO;
        }
        *ret = sk;
        return 0;
}

static const char *extack_message(struct nlmsghdr *nlh) {
        struct nlmsgerr *e = nlmsg_data(nlh);
        size_t off = sizeof(struct nlmsgerr);

        if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS))
                return NULL;
        if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
                off += e->msg.nlmsg_len - NLMSG_HDRLEN;
        if ((size_t) nlmsg_datalen(nlh) <= off)
                return NULL;
        struct nlattr *a;
        int rem = nlmsg_datalen(nlh) - (int) off;
        nla_for_each_attr(a, (struct nlattr *) ((uint8_t *) e + off), rem, rem) {
                if (nla_type(a) == NLMSGERR_ATTR_MSG && nla_len(a) > 0 &&
                    ((const char *) nla_data(a))[nla_len(a) - 1] == '\0')
                        return nla_data(a);
        }
        return NULL;
}

static void dump_finished(Netlink *nl, int error) {
        int type = nl->dump_type;
        bool intr = nl->dump_intr;
        nl->dump_seq = 0;
        nl->dump_type = 0;
        nl->dump_intr = false;
        nl->ops->dump_done(nl->userdata, type, error, intr);
}

static void handle_message(Netlink *nl, struct nlmsghdr *nlh, bool write_socket) {
        bool in_dump = !write_socket && nl->dump_seq != 0 && nlh->nlmsg_seq == nl->dump_seq;

        if (in_dump)
                nl->dump_progress++;
        if (in_dump && (nlh->nlmsg_flags & NLM_F_DUMP_INTR))
                nl->dump_intr = true;

        switch (nlh->nlmsg_type) {
        case NLMSG_DONE:
                if (in_dump) {
                        int err = 0;
                        if (nlmsg_datalen(nlh) >= (int) sizeof(int))
                                err = *(int *) nlmsg_data(nlh);
                        dump_finished(nl, err < 0 ? err : 0);
                }
                return;
        case NLMSG_ERROR: {
                if (!nlmsg_valid_hdr(nlh, sizeof(struct nlmsgerr))) {
                        log_warning("netlink: short error message, ignoring");
                        return;
                }
                int err = ((struct nlmsgerr *) nlmsg_data(nlh))->error;
                if (in_dump) {
                        dump_finished(nl, err < 0 ? err : -EIO);
                        return;
                }
                if (write_socket)
                        nl->ops->ack(nl->userdata, nlh->nlmsg_seq, err, extack_message(nlh));
                return;
        }
        case NLMSG_NOOP:
        case NLMSG_OVERRUN:
                return;
        case RTM_NEWLINK:
        case RTM_DELLINK:
        case RTM_NEWROUTE:
        case RTM_DELROUTE:
                nl->ops->message(nl->userdata, nlh,
                                 write_socket ? NETLINK_REPLY : in_dump ? NETLINK_DUMP : NETLINK_EVENT);
                return;
        default:
                log_debug("netlink: unexpected message type %u, ignoring", nlh->nlmsg_type);
                return;
        }
}

static void stats_finished(Netlink *nl, int error) {
        nl->stats_seq = 0;
        nl->ops->stats_done(nl->userdata, error);
}

static void handle_stats_message(Netlink *nl, struct nlmsghdr *nlh) {
        if (nl->stats_seq == 0 || nlh->nlmsg_seq != nl->stats_seq)
                return; /* of a dump given up on */
        switch (nlh->nlmsg_type) {
        case NLMSG_DONE: {
                int err = 0;
                if (nlmsg_datalen(nlh) >= (int) sizeof(int))
                        err = *(int *) nlmsg_data(nlh);
                stats_finished(nl, err < 0 ? err : 0);
                return;
        }
        case NLMSG_ERROR: {
                int err = nlmsg_valid_hdr(nlh, sizeof(struct nlmsgerr)) ? ((struct nlmsgerr *) nlmsg_data(nlh))->error : -EIO;
                stats_finished(nl, err < 0 ? err : -EIO);
                return;
        }
        case RTM_NEWSTATS:
                nl->ops->stats(nl->userdata, nlh);
                return;
        default:
                return;
        }
}

/* One datagram into nl->buf: its length, or -errno (-EAGAIN: none is waiting). `ret_trunc`: it
 * did not fit; `ret_kernel`: the kernel sent it. */
static ssize_t recv_datagram(Netlink *nl, int fd, bool *ret_trunc, bool *ret_kernel) {
        for (;;) {
                struct sockaddr_nl sa = {};
                struct iovec iov = {.iov_base = nl->buf, .iov_len = RECV_BUFFER};
                struct msghdr mh = {.msg_name = &sa, .msg_namelen = sizeof(sa), .msg_iov = &iov, .msg_iovlen = 1};
                ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                *ret_trunc = mh.msg_flags & MSG_TRUNC;
                *ret_kernel = sa.nl_pid == 0;
                return n;
        }
}

static void read_stats_socket(Netlink *nl) {
        int fd = nl_socket_get_fd(nl->st_sk);

        for (unsigned i = 0; i < READ_BUDGET; i++) {
                bool trunc = false, kernel = false;
                ssize_t n = recv_datagram(nl, fd, &trunc, &kernel);
                if (n == -EAGAIN)
                        break;
                if (n < 0) {
                        /* the dump's rest is lost: it is over, the next tick asks again */
                        log_debug_errno((int) n, "netlink: reading the statistics dump: %m");
                        if (nl->stats_seq != 0)
                                stats_finished(nl, (int) n);
                        continue;
                }
                if (trunc && nl->stats_seq != 0) {
                        stats_finished(nl, -EMSGSIZE);
                        continue;
                }
                if (!kernel)
                        continue;
                int left = (int) n;
                for (struct nlmsghdr *nlh = (struct nlmsghdr *) nl->buf; nlmsg_ok(nlh, left);
                     nlh = nlmsg_next(nlh, &left))
                        handle_stats_message(nl, nlh);
        }
}

static void read_socket(Netlink *nl, struct nl_sock *sk, bool write_socket, unsigned budget) {
        int fd = nl_socket_get_fd(sk);

        for (unsigned i = 0; i < budget; i++) {
                bool trunc = false, kernel = false;
                ssize_t n = recv_datagram(nl, fd, &trunc, &kernel);
                if (n == -EAGAIN)
                        break;
                if (n == -ENOBUFS) {
                        log_warning("netlink: receive buffer overrun (ENOBUFS) on the %s socket, events were lost; resynchronizing",
                                    write_socket ? "write" : "event");
                        if (write_socket)
                                nl->ops->acks_lost(nl->userdata);
                        nl->ops->lost(nl->userdata);
                        continue;
                }
                if (n < 0) {
                        log_error_errno((int) n, "netlink: recvmsg failed: %m");
                        break;
                }
                if (trunc) {
                        log_warning("netlink: truncated datagram; resynchronizing");
                        nl->ops->lost(nl->userdata);
                        continue;
                }
                if (!kernel)
                        continue; /* not from the kernel */

                int left = (int) n;
                for (struct nlmsghdr *nlh = (struct nlmsghdr *) nl->buf; nlmsg_ok(nlh, left);
                     nlh = nlmsg_next(nlh, &left))
                        handle_message(nl, nlh, write_socket);
        }
}

static void on_event_socket(evutil_socket_t fd, short what, void *userdata) {
        Netlink *nl = userdata;
        read_socket(nl, nl->ev_sk, false, READ_BUDGET);
        nl->ops->batch_end(nl->userdata);
}

static void on_write_socket(evutil_socket_t fd, short what, void *userdata) {
        Netlink *nl = userdata;
        /* The kernel queues a write's echo on the event socket before its ack on this one. Read
         * every event first, so that an ack never lets an older event look like someone else's
         * change made after our write. */
        read_socket(nl, nl->ev_sk, false, UINT_MAX);
        read_socket(nl, nl->wr_sk, true, READ_BUDGET);
        nl->ops->batch_end(nl->userdata);
}

static void on_stats_socket(evutil_socket_t fd, short what, void *userdata) {
        Netlink *nl = userdata;
        read_stats_socket(nl);
        nl->ops->batch_end(nl->userdata);
}

void netlink_free(Netlink *nl) {
        if (!nl)
                return;
        if (nl->ev_event)
                event_free(nl->ev_event);
        if (nl->wr_event)
                event_free(nl->wr_event);
        if (nl->st_event)
                event_free(nl->st_event);
        if (nl->st_sk)
                nl_socket_free(nl->st_sk);
        if (nl->ev_sk)
                nl_socket_free(nl->ev_sk);
        if (nl->wr_sk)
                nl_socket_free(nl->wr_sk);
        buffer_unref(nl->buf);
        free(nl);
}

int netlink_new(struct event_base *base, int event_rcvbuf, Netlink **ret) {
        Netlink *nl = calloc(1, sizeof(*nl));
        int r, one = 1;

        if (!nl)
                return -ENOMEM;
        nl->buf = buffer_ref();
        if (!nl->buf) {
                r = -ENOMEM;
                goto fail;
        }
        r = open_socket(&nl->ev_sk);
        if (r < 0)
                goto fail;
        r = open_socket(&nl->wr_sk);
        if (r < 0)
                goto fail;
        r = open_socket(&nl->st_sk);
        if (r < 0)
                goto fail;

        /* Subscribe before any dump, so nothing falls between the dump and the events. */
        if (nl_socket_add_memberships(nl->ev_sk, RTNLGRP_LINK, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, 0) < 0) {
                r = -EIO;
                goto fail;
        }
        set_rcvbuf(nl_socket_get_fd(nl->ev_sk), event_rcvbuf);
        set_rcvbuf(nl_socket_get_fd(nl->wr_sk), WRITE_RCVBUF);
        (void) setsockopt(nl_socket_get_fd(nl->wr_sk), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
        (void) setsockopt(nl_socket_get_fd(nl->wr_sk), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));

        nl->ev_event = event_new(base, nl_socket_get_fd(nl->ev_sk), EV_READ | EV_PERSIST, on_event_socket, nl);
        nl->wr_event = event_new(base, nl_socket_get_fd(nl->wr_sk), EV_READ | EV_PERSIST, on_write_socket, nl);
        nl->st_event = event_new(base, nl_socket_get_fd(nl->st_sk), EV_READ | EV_PERSIST, on_stats_socket, nl);
        if (!nl->ev_event || !nl->wr_event || !nl->st_event) {
                r = -ENOMEM;
                goto fail;
        }
        nl->seq = 1;
        *ret = nl;
        return 0;
fail:
        netlink_free(nl);
        return r;
}

void netlink_set_ops(Netlink *nl, const NetlinkOps *ops, void *userdata) {
        nl->ops = ops;
        nl->userdata = userdata;
        (void) event_add(nl->ev_event, NULL);
        (void) event_add(nl->wr_event, NULL);
        (void) event_add(nl->st_event, NULL);
}

/* Sequence numbers of every request, on any socket; never 0, which stands for "none" (a dump
 * not running). */
static uint32_t next_seq(Netlink *nl) {
        if (++nl->seq == 0)
                ++nl->seq;
        return nl->seq;
}

int netlink_stats_dump(Netlink *nl) {
        _cleanup_(nlmsg_freep) struct nl_msg *msg = NULL;
        int r;

        if (nl->stats_seq != 0)
                return -EBUSY;
        r = stats_dump_message(&msg);
        if (r < 0)
                return r;
        nlmsg_hdr(msg)->nlmsg_seq = next_seq(nl);
        if (nl_send(nl->st_sk, msg) < 0)
                return -EIO;
        nl->stats_seq = nlmsg_hdr(msg)->nlmsg_seq;
        return 0;
}

int netlink_stats_dump_request(void *userdata) {
        return netlink_stats_dump(userdata);
}

uint64_t netlink_dump_progress(const Netlink *nl) {
        return nl->dump_progress;
}

void netlink_dump_abandon(Netlink *nl) {
        nl->dump_seq = 0;
        nl->dump_type = 0;
        nl->dump_intr = false;
}

int netlink_dump(Netlink *nl, int type) {
        _cleanup_(nlmsg_freep) struct nl_msg *msg = NULL;

        if (nl->dump_seq != 0)
                return -EBUSY;
        msg = nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_DUMP);
        if (!msg)
                return -ENOMEM;
        if (type == RTM_GETLINK) {
                struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
                if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0 ||
                    nla_put_u32(msg, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS) < 0)
                        return -ENOMEM;
        } else {
                struct rtmsg rtm = {.rtm_family = AF_UNSPEC};
                if (nlmsg_append(msg, &rtm, sizeof(rtm), NLMSG_ALIGNTO) < 0)
                        return -ENOMEM;
        }
        nlmsg_hdr(msg)->nlmsg_seq = next_seq(nl);
        if (nl_send(nl->ev_sk, msg) < 0)
                return -EIO;
        nl->dump_seq = nlmsg_hdr(msg)->nlmsg_seq;
        nl->dump_type = type;
        nl->dump_intr = false;
        return 0;
}

int netlink_send(Netlink *nl, struct nl_msg *msg, uint32_t *ret_seq) {
        struct nlmsghdr *nlh = nlmsg_hdr(msg);
        int r;

        nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
        nlh->nlmsg_seq = next_seq(nl);
        r = nl_send(nl->wr_sk, msg);
        if (r < 0)
                return r == -NLE_NOMEM ? -ENOMEM : -EIO;
        if (ret_seq)
                *ret_seq = nlh->nlmsg_seq;
        return 0;
}

int netlink_send_request(void *userdata, struct nl_msg *msg, uint32_t *ret_seq) {
        return netlink_send(userdata, msg, ret_seq);
}

int netlink_ioctl_fd(const Netlink *nl) {
        return nl_socket_get_fd(nl->ev_sk);
}
