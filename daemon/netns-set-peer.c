/* netns-set-peer.c — a device's peer (a veth's other end) among the namespaces bigtcpd runs, for
 * `auto`'s proof by delivery. The device's IFLA_LINK names the peer's ifindex, its
 * IFLA_LINK_NETNSID the peer's namespace by the nsid the device's namespace gives it (absent: the
 * same namespace). An nsid means nothing outside the namespace that gave it, so it is mapped to a
 * namespace of the set by asking the kernel there: RTM_GETNSID with NETNSA_FD (each namespace of
 * the set, named by SIOCGSKNS on its own socket) on one socket made in the device's namespace,
 * once for all of them, when an nsid is first asked for. The answers are kept until a namespace
 * comes or goes (a namespace that goes frees its nsids, which the kernel may give to the next);
 * an nsid the kernel gave since (a veth made later) asks again. */
#include <errno.h>
#include <fcntl.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "netns-set-internal.h"

/* The nsids a namespace's kernel gives to namespaces of the set, and those it gives to none the
 * set runs (`is` NULL) once asked. */
struct PeerNsid {
        Netns *in;
        int nsid;
        Netns *is;
};

/* An nsfs descriptor of n's namespace, for NETNSA_FD or entering it (closed by the caller); -errno. */
static int netns_fd_of(NetnsSet *s, Netns *n) {
        int fd;

        if (n->own)
                return s->host_fd >= 0 ? fcntl(s->host_fd, F_DUPFD_CLOEXEC, 3) : -EBADF;
        if (!n->nl)
                return -EBADF; /* played (tests): no socket in it */
        fd = ioctl(netlink_ioctl_fd(n->nl), SIOCGSKNS);
        return fd < 0 ? -errno : fd;
}

/* A NETLINK_ROUTE socket in n's namespace (non-blocking). */
static int socket_in(NetnsSet *s, Netns *n, int *ret) {
        _cleanup_(closep) int fd = -1;
        uint64_t cookie;

        if (n->own) {
                int sk = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
                if (sk < 0)
                        return -errno;
                *ret = sk;
                return 0;
        }
        fd = netns_fd_of(s, n);
        if (fd < 0)
                return fd;
        return netns_peek_socket(fd, s->host_fd, n->id.dev, n->id.ino, ret, &cookie);
}

/* The nsid the namespace of socket `sk` gives the namespace of `target_fd`: >= 0, -ENOENT when it
 * gives none, -errno. The kernel answers while the request is sent: nothing is waited for. */
static int ask_nsid(int sk, int target_fd, uint32_t seq) {
        static struct nla_policy policy[NETNSA_MAX + 1] = {[NETNSA_NSID] = {.type = NLA_U32}};
        _cleanup_(nlmsg_freep) struct nl_msg *msg = nlmsg_alloc_simple(RTM_GETNSID, NLM_F_REQUEST);
        struct rtgenmsg g = {.rtgen_family = AF_UNSPEC};
        union {
                struct nlmsghdr h;
                uint8_t bytes[1024];
        } buf;
        struct nlattr *tb[NETNSA_MAX + 1];
        struct nlmsghdr *h;
        ssize_t n;

        if (!msg || nlmsg_append(msg, &g, sizeof(g), NLMSG_ALIGNTO) < 0 ||
            nla_put_u32(msg, NETNSA_FD, (uint32_t) target_fd) < 0)
                return -ENOMEM;
        h = nlmsg_hdr(msg);
        h->nlmsg_seq = seq;
        if (send(sk, h, h->nlmsg_len, 0) < 0)
                return -errno;
        n = recv(sk, &buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0)
                return -errno;
        h = &buf.h;
        if (!nlmsg_ok(h, (int) n) || h->nlmsg_seq != seq)
                return -EBADMSG;
        if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = nlmsg_data(h);
                return h->nlmsg_len >= (uint32_t) nlmsg_size(sizeof(*e)) && e->error < 0 ? e->error : -EBADMSG;
        }
        if (h->nlmsg_type != RTM_NEWNSID || nlmsg_parse(h, sizeof(struct rtgenmsg), tb, NETNSA_MAX, policy) < 0 ||
            !tb[NETNSA_NSID])
                return -EBADMSG;
        int32_t id = (int32_t) nla_get_u32(tb[NETNSA_NSID]);
        return id >= 0 ? id : -ENOENT;
}

static struct PeerNsid *cached(NetnsSet *s, const Netns *in, int nsid) {
        for (size_t i = 0; i < s->n_peer_nsids; i++)
                if (s->peer_nsids[i].in == in && s->peer_nsids[i].nsid == nsid)
                        return &s->peer_nsids[i];
        return NULL;
}

static int remember(NetnsSet *s, Netns *in, int nsid, Netns *is) {
        struct PeerNsid *c = cached(s, in, nsid);

        if (c) {
                c->is = is;
                return 0;
        }
        if (s->n_peer_nsids >= NETNS_MAX * 4u)
                netns_set_peers_forget(s); /* bounded: started over */
        struct PeerNsid *t = reallocarray(s->peer_nsids, s->n_peer_nsids + 1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        s->peer_nsids = t;
        s->peer_nsids[s->n_peer_nsids++] = (struct PeerNsid){in, nsid, is};
        return 0;
}

/* Ask the kernel of `in` the nsid of `n` on socket `sk`, and remember the answer. */
static int ask_one(NetnsSet *s, Netns *in, int sk, Netns *n, uint32_t seq) {
        _cleanup_(closep) int fd = -1;
        int r;

        fd = netns_fd_of(s, n);
        if (fd < 0)
                return 0;
        r = ask_nsid(sk, fd, seq);
        if (r >= 0 && remember(s, in, r, n) < 0)
                return -ENOMEM;
        return 0;
}

/* Ask the kernel of `in` the nsid of other namespaces of the set, and remember the answers: the
 * daemon's own first, where a pod's peer is (one question for each pod, not one for each other
 * namespace: the set's every pod asking about every other was quadratic), then, unless that was
 * `nsid`, every other. */
static int ask_all(NetnsSet *s, Netns *in, int nsid) {
        _cleanup_(closep) int sk = -1;
        uint32_t seq = 0;
        int r;

        r = socket_in(s, in, &sk);
        if (r < 0)
                return r;
        if (s->own && s->own != in) {
                r = ask_one(s, in, sk, s->own, ++seq);
                if (r < 0)
                        return r;
                if (cached(s, in, nsid))
                        return 0;
        }
        for (size_t i = 0; i < netns_set_all_count(s); i++) {
                Netns *n = netns_set_all_at(s, i);

                if (n == in || n == s->own)
                        continue;
                r = ask_one(s, in, sk, n, ++seq);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The namespace of the set that `in` calls `nsid`: -ENXIO when none is. */
static int netns_of_nsid(NetnsSet *s, Netns *in, int nsid, Netns **ret) {
        struct PeerNsid *c = cached(s, in, nsid);
        int r;

        if (!c) {
                if (netns_set_all_count(s) < 2)
                        return -ENXIO; /* no other namespace to ask about */
                r = ask_all(s, in, nsid);
                if (r < 0) {
                        log_debug_errno(r, "netns: asking the nsids of %s's namespaces failed: %m",
                                        in->own ? "host" : in->id.name);
                        return -ENXIO;
                }
                c = cached(s, in, nsid);
                if (!c) {
                        /* none of the set: not asked again until a namespace comes or goes */
                        if (remember(s, in, nsid, NULL) < 0)
                                return -ENOMEM;
                        return -ENXIO;
                }
        }
        if (!c->is)
                return -ENXIO;
        *ret = c->is;
        return 0;
}

static Netns *netns_of_engine(const NetnsSet *s, const Engine *e) {
        for (size_t i = 0; i < netns_set_all_count(s); i++)
                if (netns_set_all_at(s, i)->engine == e)
                        return netns_set_all_at(s, i);
        return NULL;
}

static bool is_veth(const Device *d) {
        return streq_ptr(d->kind, "veth");
}

static int peer_of(void *userdata, Engine *e, const Device *d, DevicePeer *ret) {
        NetnsSet *s = userdata;
        Netns *in = netns_of_engine(s, e), *there = in;
        Device *p;
        int r;

        /* a vlan, macvlan or ipvlan links to its lower device, which is no peer */
        if (!in || !is_veth(d) || d->link <= 0)
                return -ENOENT;
        if (d->link_netnsid >= 0) {
                r = netns_of_nsid(s, in, d->link_netnsid, &there);
                if (r < 0)
                        return r;
        }
        /* its peer links back to it, from the other namespace by an nsid, from the same by none */
        p = device_get(&there->engine->devices, d->link);
        if (!p || !is_veth(p) || p->link != d->ifindex || (p->link_netnsid >= 0) == (there == in))
                return -ESTALE;
        *ret = (DevicePeer){.engine = there->engine, .device = p};
        return 0;
}

const PeerOps netns_set_peer_ops = {.peer_of = peer_of};

void netns_set_peers_forget(NetnsSet *s) {
        free(s->peer_nsids);
        s->peer_nsids = NULL;
        s->n_peer_nsids = 0;
}
