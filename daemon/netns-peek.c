/* netns-peek.c — Plan's read-only look at namespaces bigtcpd has not entered: one namespace at a
 * time, a socket made in it, one link dump read from the loop (never waited for), the socket
 * closed. */
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ethtool.h"
#include "netlink-link.h"
#include "log.h"
#include "netns-peek.h"
#include "route.h"

#define PEEK_BUFFER_SIZE (64u << 10) /* a dump's part is at most 32 KiB */
#define PEEK_READS_PER_TURN 16u      /* then the loop's other events */
#define PEEK_RESTARTS_MAX 3u         /* dumps the kernel said were interrupted by a change */
#define PEEK_ROUTES_MAX 65536u /* route messages of one namespace (a router's full table is not read) */

struct NetnsPeek {
        struct event_base *base;
        NetnsSet *set;
        PeekedNetns *items;
        size_t n;
        size_t next; /* the one read now, or the next to open */
        int fd;      /* its socket, while it is read */
        uint32_t seq;
        bool want_routes; /* the plan's policy has match.route: the routes after the links */
        bool routes;      /* … and they are being read */
        size_t n_routes;
        unsigned restarts;
        uint8_t *buf;
        struct event *read_event, *step_event, *timer;
        bool finished;
        NetnsPeekDoneFn done;
        void *userdata;
};

static void close_socket(NetnsPeek *p) {
        if (p->read_event)
                event_free(p->read_event);
        p->read_event = NULL;
        p->fd = safe_close(p->fd);
}

/* The namespaces of p not begun yet (the current one is while its socket is open). */
static size_t not_begun(const NetnsPeek *p) {
        size_t never = 0;

        for (size_t i = p->next + (p->fd >= 0); i < p->n; i++)
                never += p->items[i].error == 0;
        return never;
}

void netns_peek_free(NetnsPeek *p) {
        if (!p)
                return;
        if (!p->finished && p->items) {
                /* its call went first: its caller hung up, or the daemon stops */
                size_t never = not_begun(p);
                log_debug("netns: a plan's looks ended with its call: %zu %s not looked into", never,
                          PLURAL(never, "namespace", "namespaces"));
        }
        close_socket(p);
        if (p->step_event)
                event_free(p->step_event);
        if (p->timer)
                event_free(p->timer);
        for (size_t i = 0; i < p->n; i++) {
                device_table_done(&p->items[i].devices);
                free(p->items[i].id.name);
        }
        free(p->items);
        free(p->buf);
        free(p);
}

size_t netns_peek_count(const NetnsPeek *p) {
        return p ? p->n : 0;
}

const PeekedNetns *netns_peek_get(const NetnsPeek *p, size_t i) {
        return p && i < p->n ? &p->items[i] : NULL;
}

const PeekedNetns *netns_peek_find(const NetnsPeek *p, const char *name) {
        for (size_t i = 0; p && i < p->n; i++)
                if (strcmp(p->items[i].id.name, name) == 0)
                        return &p->items[i];
        return NULL;
}

/* The one read now failed (or timed out): what it read goes, the next one's turn. */
static void fail_current(NetnsPeek *p, int error, bool dumped) {
        PeekedNetns *it = &p->items[p->next];

        close_socket(p);
        device_table_done(&it->devices);
        it->error = error;
        it->dumped = dumped;
        p->next++;
        event_active(p->step_event, EV_TIMEOUT, 0);
}

static int send_links_dump(NetnsPeek *p) {
        struct {
                struct nlmsghdr nlh;
                struct ifinfomsg ifi;
                struct rtattr rta;
                uint32_t ext_mask;
        } req = {
                .nlh = {.nlmsg_len = sizeof(req),
                        .nlmsg_type = RTM_GETLINK,
                        .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
                        .nlmsg_seq = ++p->seq},
                .ifi = {.ifi_family = AF_UNSPEC},
                .rta = {.rta_len = RTA_LENGTH(sizeof(uint32_t)), .rta_type = IFLA_EXT_MASK},
                .ext_mask = RTEXT_FILTER_SKIP_STATS,
        };

        p->routes = false;
        if (send(p->fd, &req, sizeof(req), MSG_DONTWAIT) < 0)
                return -errno;
        return 0;
}

static int send_routes_dump(NetnsPeek *p) {
        struct {
                struct nlmsghdr nlh;
                struct rtmsg rtm;
        } req = {
                .nlh = {.nlmsg_len = sizeof(req),
                        .nlmsg_type = RTM_GETROUTE,
                        .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
                        .nlmsg_seq = ++p->seq},
                .rtm = {.rtm_family = AF_UNSPEC},
        };

        p->routes = true;
        p->n_routes = 0;
        if (send(p->fd, &req, sizeof(req), MSG_DONTWAIT) < 0)
                return -errno;
        return 0;
}

/* The dumps are over: the drivers (match.driver) are asked now, while the socket is there. */
static void complete_current(NetnsPeek *p) {
        PeekedNetns *it = &p->items[p->next];
        Device *d;

        DEVICE_FOREACH(d, &it->devices, iter)
        (void) ethtool_driver(d, p->fd);
        close_socket(p);
        p->next++;
        event_active(p->step_event, EV_TIMEOUT, 0);
}

static int handle_link(NetnsPeek *p, struct nlmsghdr *nlh) {
        PeekedNetns *it = &p->items[p->next];
        unsigned changes;
        LinkMessage lm;
        Device *d;
        int r;

        r = link_message_parse(nlh, &lm);
        if (r == -EAFNOSUPPORT)
                return 0;
        if (r < 0) {
                log_debug("netns %s: malformed link message in a plan's dump, ignoring", it->id.name);
                return 0;
        }
        d = device_get(&it->devices, lm.ifindex);
        if (!d) {
                if (it->devices.n_devices >= NETNS_PEEK_DEVICES_MAX)
                        return -E2BIG;
                r = device_add(&it->devices, lm.ifindex, &d);
                if (r < 0)
                        return r;
                d->netns = &it->id;
        }
        return device_update(d, &lm, now_usec(), &changes);
}

/* 1: the dump is over; 0: more to come; < 0: it failed. */
static int handle_buffer(NetnsPeek *p, size_t len, bool *intr) {
        for (size_t off = 0; off + sizeof(struct nlmsghdr) <= len;) {
                struct nlmsghdr *nlh = (struct nlmsghdr *) (p->buf + off);
                int r;

                if (nlh->nlmsg_len < sizeof(*nlh) || nlh->nlmsg_len > len - off)
                        return -EBADMSG;
                off += NLMSG_ALIGN(nlh->nlmsg_len);

                if (nlh->nlmsg_seq != p->seq)
                        continue; /* an earlier dump's */
                if (nlh->nlmsg_flags & NLM_F_DUMP_INTR)
                        *intr = true;
                switch (nlh->nlmsg_type) {
                case NLMSG_DONE:
                        /* a dump that failed half-way says so here */
                        if (nlh->nlmsg_len >= NLMSG_LENGTH(sizeof(int)) &&
                            *(const int *) NLMSG_DATA(nlh) < 0)
                                return *(const int *) NLMSG_DATA(nlh);
                        return 1;
                case NLMSG_ERROR: {
                        const struct nlmsgerr *e = NLMSG_DATA(nlh);
                        if (nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
                                return -EBADMSG;
                        return e->error < 0 ? e->error : -EBADMSG;
                }
                case RTM_NEWLINK:
                        r = handle_link(p, nlh);
                        if (r < 0)
                                return r;
                        break;
                case RTM_NEWROUTE:
                        if (++p->n_routes > PEEK_ROUTES_MAX)
                                return -EOVERFLOW;
                        /* only routes out of a device of the table are kept */
                        if (route_message_handle(&p->items[p->next].devices, nlh, NULL, NULL) < 0)
                                log_debug("netns %s: malformed route message in a plan's dump, ignoring",
                                          p->items[p->next].id.name);
                        break;
                default:
                        break;
                }
        }
        return 0;
}

static void on_read(evutil_socket_t fd, short what, void *userdata) {
        NetnsPeek *p = userdata;
        bool intr = false;

        for (unsigned i = 0; i < PEEK_READS_PER_TURN; i++) {
                struct sockaddr_nl from = {};
                socklen_t from_len = sizeof(from);
                ssize_t n = recvfrom(p->fd, p->buf, PEEK_BUFFER_SIZE, MSG_DONTWAIT | MSG_TRUNC,
                                     (struct sockaddr *) &from, &from_len);
                int r;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return; /* the rest when it comes */
                if (n < 0) {
                        fail_current(p, -errno, true);
                        return;
                }
                if (from.nl_pid != 0)
                        continue; /* not the kernel's */
                if ((size_t) n > PEEK_BUFFER_SIZE) {
                        fail_current(p, -EMSGSIZE, true);
                        return;
                }
                r = handle_buffer(p, (size_t) n, &intr);
                if (r < 0) {
                        fail_current(p, r, true);
                        return;
                }
                if (r == 0)
                        continue;
                if (!intr && !p->routes && p->want_routes) {
                        r = send_routes_dump(p);
                        if (r < 0) {
                                fail_current(p, r, true);
                                return;
                        }
                        continue;
                }
                if (!intr) {
                        complete_current(p);
                        return;
                }
                /* the devices changed while the kernel dumped them: again, from the start */
                if (++p->restarts > PEEK_RESTARTS_MAX) {
                        fail_current(p, -EAGAIN, true);
                        return;
                }
                intr = false;
                device_table_done(&p->items[p->next].devices);
                r = device_table_init(&p->items[p->next].devices);
                if (r >= 0)
                        r = send_links_dump(p);
                if (r < 0) {
                        fail_current(p, r, true);
                        return;
                }
        }
}

/* Open the next namespace's socket and ask for its links; or, when none is left, done. */
static void on_step(evutil_socket_t fd, short what, void *userdata) {
        NetnsPeek *p = userdata;

        if (p->finished)
                return;
        while (p->next < p->n && p->items[p->next].error == 0) {
                PeekedNetns *it = &p->items[p->next];
                int r;

                p->restarts = 0;
                r = netns_set_peek(p->set, it->id.name, &p->fd, &it->id.ino, &it->id.cookie);
                if (r >= 0)
                        r = device_table_init(&it->devices);
                if (r >= 0) {
                        p->read_event = event_new(p->base, p->fd, EV_READ | EV_PERSIST, on_read, p);
                        r = p->read_event && event_add(p->read_event, NULL) >= 0 ? send_links_dump(p)
                                                                                 : -ENOMEM;
                }
                if (r >= 0) {
                        log_debug("netns %s: looking at its devices for a plan (read-only)", it->id.name);
                        return; /* on_read goes on */
                }
                log_debug_errno(r, "netns %s: not looked into for a plan: %m", it->id.name);
                close_socket(p);
                device_table_done(&it->devices);
                it->error = r;
                p->next++;
        }
        p->finished = true;
        event_del(p->timer);
        p->done(p, p->userdata);
}

static void on_timeout(evutil_socket_t fd, short what, void *userdata) {
        NetnsPeek *p = userdata;
        size_t never = not_begun(p);

        close_socket(p);
        for (size_t i = p->next; i < p->n; i++)
                if (p->items[i].error == 0) {
                        device_table_done(&p->items[i].devices);
                        p->items[i].error = -ETIMEDOUT;
                        p->items[i].dumped = i == p->next;
                }
        log_debug("netns: a plan's looks took over %u s: %zu %s not looked into", NETNS_PEEK_TIMEOUT_USEC / 1000000u,
                  never, PLURAL(never, "namespace", "namespaces"));
        p->next = p->n;
        event_active(p->step_event, EV_TIMEOUT, 0);
}

int netns_peek_new(struct event_base *base, NetnsSet *s, char *const *names, size_t n, bool routes,
                   NetnsPeekDoneFn done, void *userdata, NetnsPeek **ret) {
        _cleanup_(netns_peek_freep) NetnsPeek *p = calloc(1, sizeof(*p));
        struct timeval tv = {.tv_sec = NETNS_PEEK_TIMEOUT_USEC / USEC_PER_SEC,
                             .tv_usec = NETNS_PEEK_TIMEOUT_USEC % USEC_PER_SEC};

        if (!p)
                return -ENOMEM;
        *p = (NetnsPeek){
                .base = base, .set = s, .fd = -1, .want_routes = routes, .done = done, .userdata = userdata};
        p->items = calloc(n + 1, sizeof(*p->items));
        p->buf = malloc(PEEK_BUFFER_SIZE);
        p->step_event = event_new(base, -1, 0, on_step, p);
        p->timer = evtimer_new(base, on_timeout, p);
        if (!p->items || !p->buf || !p->step_event || !p->timer)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                PeekedNetns *it = &p->items[p->n];
                it->id.name = strdup(names[i]);
                if (!it->id.name)
                        return -ENOMEM;
                /* the others are named, not looked at */
                it->error = p->n >= NETNS_PEEK_MAX ? -E2BIG : 0;
                p->n++;
        }
        if (evtimer_add(p->timer, &tv) < 0)
                return -ENOMEM;
        event_active(p->step_event, EV_TIMEOUT, 0);
        *ret = TAKE_PTR(p);
        return 0;
}
