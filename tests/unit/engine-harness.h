/* engine-harness.h — the decision engine driven without a kernel: an Engine on a fake clock, a
 * fake transport that records every request and a small fake kernel that answers them in order,
 * a Sync with no netlink socket fed the messages a kernel would send, a policy from YAML text, and
 * a recorder of the engine's events. No test sleeps: the clock is the harness's. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <event2/event.h>
#include <ftw.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>

#include "apply.h"
#include "control.h"
#include "engine.h"
#include "device-lifecycle.h"
#include "netlink-link.h"
#include "linux-compat.h"
#include "netns-set.h"
#include "policy-reload.h"
#include "policy-try.h"
#include "sync.h"
#include "test-helpers.h"

#define H_SIZES(a, b, c, d) ((Sizes){(a), (b), (c), (d)})
#define H_LEGACY H_SIZES(65536, 65536, 65536, 65536)
#define H_START_USEC (1000 * USEC_PER_SEC) /* the fake clocks start here, not at 0 */
#ifndef H_TMPDIR
#define H_TMPDIR "/tmp" /* where the runtime and /proc/net directories go (a test may want a tmpfs) */
#endif

/* ---- the fake kernel's links ---- */

typedef struct FakeLink {
        unsigned id; /* unique over the test: a link re-created with the same ifindex is another */
        bool present;
        int ifindex;
        char name[IFNAMSIZ];
        char kind[32];
        uint8_t mac[6], perm[6]; /* IFLA_ADDRESS, IFLA_PERM_ADDRESS when has_… */
        bool has_mac, has_perm;
        Sizes sizes;
        bool ipv4; /* the kernel reports gso/gro_ipv4_max_size */
        uint32_t tso;
        struct rtnl_link_stats64 stats;
} FakeLink;

/* ---- what the engine sent ---- */

typedef struct Request {
        uint32_t seq;
        RequestKind kind; /* REQUEST_WRITE, _READ or _STATS */
        int ifindex;
        unsigned link_id; /* the fake link that had the ifindex when it was sent (0: none) */
        Sizes sizes;      /* a write: what it carries */
        bool ipv4;        /* … including the IPv4 pair */
        bool answered;
} Request;

/* ---- what the engine said ---- */

typedef struct Recorded {
        EventType type;
        int ifindex;
        char ifname[IFNAMSIZ];
        DeviceState state, previous;
        WriteCause cause;
        bool has_sizes;
        Sizes from, to;
        int error;
        char counter[64]; /* EVENT_ROLLBACK */
        char policy[64];  /* EVENT_ROLLOUT */
        TryAction try_action; /* EVENT_TRY */
        TryReason try_reason;
} Recorded;

/* Every state change seen by any harness of this test program: the coverage of the lifecycle. */
static bool h_transitions_seen[_DEVICE_STATE_MAX][_DEVICE_STATE_MAX];

typedef struct Harness Harness;
struct Harness {
        struct event_base *base;
        Clock clock;
        uint64_t mono, boot, real;
        char runtime_dir[64];
        char proc_net[64];
        Engine *e;
        Sync *s;
        /* bigtcpd's own namespace run by e and s (which it owns), its one-namespace set, and the
         * Control of the daemon's API over them (no reloader, workers or try) */
        Netns *own;
        NetnsSet *set;
        Control control;
        PolicySet *policy; /* the harness's own, lent to the engine until a reloader's runs */
        bool started;

        FakeLink links[64];
        size_t n_links;
        unsigned next_link_id;

        Request reqs[4096];
        size_t n_reqs;
        size_t next_answer; /* the kernel answers in order */
        uint32_t next_seq;
        unsigned stats_dumps;     /* statistics dumps asked for */
        bool stats_dump_running;  /* … one not answered yet */
        int stats_dump_error;     /* how the next answer ends (0: every present link) */
        bool hold_baselines;      /* a dump for baselines only waits for the test (h_baselines()) */

        Recorded ev[4096];
        size_t n_ev;
        unsigned illegal; /* EVENT_STATE pairs the lifecycle table does not list */

        /* called after every request the engine sends (NULL: none) */
        void (*on_send)(Harness *h, const Request *r);
        /* IFLA_STATS64 of the next link announced by h_link_add…() (NULL: none) */
        const struct rtnl_link_stats64 *announce_stats;

        /* what the fake /proc/net/snmp and /proc/net/netstat say */
        uint64_t ip_in_hdr_errors, tcp_out_segs, tcp_retrans_segs, ipext_in_truncated;
};

/* ---- clock ---- */

static uint64_t h_clock_usec(void *userdata, int clock_id) {
        Harness *h = userdata;
        switch (clock_id) {
        case CLOCK_MONOTONIC:
                return h->mono;
        case CLOCK_BOOTTIME:
                return h->boot;
        case CLOCK_REALTIME:
                return h->real;
        default:
                fail_msg("unexpected clock %d", clock_id);
                return 0;
        }
}

static inline void h_advance(Harness *h, uint64_t usec) {
        h->mono += usec;
        h->boot += usec;
        h->real += usec;
}

/* ---- links ---- */

static inline FakeLink *h_link(Harness *h, int ifindex) {
        for (size_t i = h->n_links; i > 0; i--)
                if (h->links[i - 1].present && h->links[i - 1].ifindex == ifindex)
                        return &h->links[i - 1];
        return NULL;
}

static inline FakeLink *h_link_by_id(Harness *h, unsigned id) {
        for (size_t i = 0; i < h->n_links; i++)
                if (h->links[i].id == id)
                        return &h->links[i];
        return NULL;
}

static inline Device *h_dev(Harness *h, int ifindex) {
        return device_get(&h->e->devices, ifindex);
}

static inline DeviceState h_state(Harness *h, int ifindex) {
        Device *d = h_dev(h, ifindex);
        assert_non_null(d);
        return d->life.state;
}

/* A link message as the kernel builds it; `stats` (may be NULL) adds IFLA_STATS64. */
static inline struct nl_msg *h_link_msg(int type, const FakeLink *l, const struct rtnl_link_stats64 *stats,
                                        uint32_t seq) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = l->ifindex, .ifi_flags = IFF_UP};
        struct nl_msg *msg = nlmsg_alloc_simple(type, 0);

        assert_non_null(msg);
        nlmsg_hdr(msg)->nlmsg_seq = seq;
        assert_int_equal(nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO), 0);
        assert_int_equal(nla_put_string(msg, IFLA_IFNAME, l->name), 0);
        if (l->has_mac)
                assert_int_equal(nla_put(msg, IFLA_ADDRESS, sizeof(l->mac), l->mac), 0);
        if (l->has_perm)
                assert_int_equal(nla_put(msg, BT_IFLA_PERM_ADDRESS, sizeof(l->perm), l->perm), 0);
        if (l->kind[0]) {
                struct nlattr *li = nla_nest_start(msg, IFLA_LINKINFO);
                assert_int_equal(nla_put_string(msg, IFLA_INFO_KIND, l->kind), 0);
                nla_nest_end(msg, li);
        }
        assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_MAX_SIZE, l->sizes.gso_max_size), 0);
        assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_MAX_SIZE, l->sizes.gro_max_size), 0);
        if (l->ipv4) {
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_IPV4_MAX_SIZE, l->sizes.gso_ipv4_max_size), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_IPV4_MAX_SIZE, l->sizes.gro_ipv4_max_size), 0);
        }
        if (l->tso)
                assert_int_equal(nla_put_u32(msg, BT_IFLA_TSO_MAX_SIZE, l->tso), 0);
        if (stats)
                assert_int_equal(nla_put(msg, IFLA_STATS64, sizeof(*stats), stats), 0);
        return msg;
}

static inline void h_feed(Harness *h, int type, const FakeLink *l, const struct rtnl_link_stats64 *stats,
                          NetlinkSource source, uint32_t seq) {
        struct nl_msg *msg = h_link_msg(type, l, stats, seq);
        sync_netlink_ops.message(h->s, nlmsg_hdr(msg), source);
        nlmsg_free(msg);
}

static inline void h_answer_stats_dump(Harness *h);

/* A statistics dump only for the baselines of writes waiting for them is answered at once, as
 * the kernel would, unless the test holds it (hold_baselines). */
static inline void h_baselines(Harness *h) {
        while (!h->hold_baselines && h->stats_dump_running &&
               writer_stats_dump_serves(h->e->writer) == STATS_DUMP_BASELINES)
                h_answer_stats_dump(h);
}

static inline void h_batch_end(Harness *h) {
        sync_netlink_ops.batch_end(h->s);
        h_baselines(h);
}

/* What the loop does after a change that may queue writes. */
static inline void h_flush(Harness *h) {
        apply_flush(h->e);
        h_baselines(h);
}

/* A link dump, as the first sync and every re-read (a reload, the verify timer) do: every link,
 * then its end, in one batch. start() of sync.c counts dumps; with no netlink socket it is not
 * called, so the harness counts them as it would. */
static inline void h_dump(Harness *h) {
        h->e->dump_epoch++;
        for (size_t i = 0; i < h->n_links; i++)
                if (h->links[i].present)
                        h_feed(h, RTM_NEWLINK, &h->links[i], NULL, NETLINK_DUMP, 0);
        sync_netlink_ops.dump_done(h->s, RTM_GETLINK, 0, false);
        h_batch_end(h);
}

/* A link in the fake kernel, at 65536 everywhere; announced by an event once the engine runs
 * (before: found by the first dump). */
static inline FakeLink *h_link_add_full(Harness *h, int ifindex, const char *name, const char *kind,
                                        bool ipv4) {
        assert_true(h->n_links < ELEMENTSOF(h->links));
        /* The IPv4 sizes are the kernel's: every link has them (lo, the first, says whether), or
         * none has. A kernel without them is set up before the first sync. */
        if (h->n_links > 0 && !h->links[0].ipv4)
                ipv4 = false;
        for (size_t i = 0; !ipv4 && i < h->n_links; i++) {
                assert_false(h->started);
                h->links[i].ipv4 = false;
        }
        assert_null(h_link(h, ifindex));
        FakeLink *l = &h->links[h->n_links++];
        *l = (FakeLink){.id = ++h->next_link_id,
                        .present = true,
                        .ifindex = ifindex,
                        .sizes = H_LEGACY,
                        .ipv4 = ipv4,
                        .tso = 524280};
        snprintf(l->name, sizeof(l->name), "%s", name);
        snprintf(l->kind, sizeof(l->kind), "%s", kind ?: "");
        if (h->started) {
                h_feed(h, RTM_NEWLINK, l, h->announce_stats ?: &l->stats, NETLINK_EVENT, 0);
                h_batch_end(h);
        }
        return l;
}

static inline FakeLink *h_link_add(Harness *h, int ifindex, const char *name) {
        return h_link_add_full(h, ifindex, name, "veth", true);
}

static inline void h_link_rename(Harness *h, int ifindex, const char *name) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        snprintf(l->name, sizeof(l->name), "%s", name);
        h_feed(h, RTM_NEWLINK, l, NULL, NETLINK_EVENT, 0);
        h_batch_end(h);
}

static inline void h_link_del(Harness *h, int ifindex) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        l->present = false;
        h_feed(h, RTM_DELLINK, l, NULL, NETLINK_EVENT, 0);
        h_batch_end(h);
}

/* Someone else changes the sizes: the kernel sends no event for that. */
static inline void h_link_set_sizes(Harness *h, int ifindex, Sizes s) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        l->sizes = s;
}

/* ---- the fake transport ---- */

static int h_send(void *userdata, struct nl_msg *msg, uint32_t *ret_seq) {
        Harness *h = userdata;
        struct nlmsghdr *nlh = nlmsg_hdr(msg);
        Request *r;

        assert_true(h->n_reqs < ELEMENTSOF(h->reqs));
        r = &h->reqs[h->n_reqs++];
        *r = (Request){.seq = ++h->next_seq};
        nlh->nlmsg_seq = r->seq;
        if (nlh->nlmsg_type == RTM_NEWLINK) {
                LinkMessage lm;
                assert_int_equal(link_message_parse(nlh, &lm), 0);
                assert_true(lm.has_sizes);
                r->kind = REQUEST_WRITE;
                r->ifindex = lm.ifindex;
                r->sizes = lm.sizes;
                r->ipv4 = lm.has_ipv4_sizes;
        } else {
                const struct ifinfomsg *ifi = nlmsg_data(nlh);
                assert_int_equal(nlh->nlmsg_type, RTM_GETLINK);
                r->ifindex = ifi->ifi_index;
                /* a read skips the stats: they come from statistics dumps and events */
                assert_non_null(nlmsg_find_attr(nlh, sizeof(*ifi), IFLA_EXT_MASK));
                r->kind = REQUEST_READ;
        }
        FakeLink *l = h_link(h, r->ifindex);
        r->link_id = l ? l->id : 0;
        *ret_seq = r->seq;
        if (h->on_send)
                h->on_send(h, r);
        return 0;
}

static int h_stats_dump(void *userdata) {
        Harness *h = userdata;
        if (h->stats_dump_running)
                return -EBUSY;
        h->stats_dump_running = true;
        h->stats_dumps++;
        return 0;
}

/* The statistics dump asked for: one RTM_NEWSTATS per present link, then its end. */
static inline void h_answer_stats_dump(Harness *h) {
        assert_true(h->stats_dump_running);
        h->stats_dump_running = false;
        if (h->stats_dump_error == 0)
                for (size_t i = 0; i < h->n_links; i++) {
                        FakeLink *l = &h->links[i];
                        struct if_stats_msg ifsm = {.ifindex = (uint32_t) l->ifindex,
                                                    .filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)};
                        struct nl_msg *msg;
                        if (!l->present)
                                continue;
                        msg = nlmsg_alloc_simple(RTM_NEWSTATS, NLM_F_MULTI);
                        assert_non_null(msg);
                        assert_int_equal(nlmsg_append(msg, &ifsm, sizeof(ifsm), NLMSG_ALIGNTO), 0);
                        assert_int_equal(nla_put(msg, IFLA_STATS_LINK_64, sizeof(l->stats), &l->stats), 0);
                        sync_netlink_ops.stats(h->s, nlmsg_hdr(msg));
                        nlmsg_free(msg);
                }
        sync_netlink_ops.stats_done(h->s, h->stats_dump_error);
}

static inline Request *h_next_request(Harness *h) {
        return h->next_answer < h->n_reqs ? &h->reqs[h->next_answer] : NULL;
}

static inline size_t h_unanswered(const Harness *h) {
        return h->n_reqs - h->next_answer;
}

/* Answer the oldest request. A write is acked with `error`; on 0 the link it was sent to takes
 * its sizes (if that link is still there). A read is answered, on 0, with a reply carrying the
 * link's attributes (no stats), then acked. The reply comes from the link the request was sent
 * to, also after it is gone (a reply already queued). */
static inline void h_answer(Harness *h, int error) {
        Request *r = h_next_request(h);
        assert_non_null(r);
        h->next_answer++;
        r->answered = true;
        FakeLink *l = r->link_id ? h_link_by_id(h, r->link_id) : NULL;
        if (r->kind == REQUEST_WRITE) {
                if (error == 0 && l && l->present) {
                        l->sizes.gso_max_size = r->sizes.gso_max_size;
                        l->sizes.gro_max_size = r->sizes.gro_max_size;
                        if (r->ipv4 && l->ipv4) {
                                l->sizes.gso_ipv4_max_size = r->sizes.gso_ipv4_max_size;
                                l->sizes.gro_ipv4_max_size = r->sizes.gro_ipv4_max_size;
                        }
                }
        } else if (error == 0) {
                assert_non_null(l);
                h_feed(h, RTM_NEWLINK, l, NULL, NETLINK_REPLY, r->seq);
        }
        sync_netlink_ops.ack(h->s, r->seq, error, error < 0 ? "fake extack" : NULL);
}

/* What the kernel would say: done, or -ENODEV for a link that is gone. */
static inline void h_answer_kernel(Harness *h) {
        Request *r = h_next_request(h);
        assert_non_null(r);
        FakeLink *l = r->link_id ? h_link_by_id(h, r->link_id) : NULL;
        h_answer(h, l && l->present ? 0 : -ENODEV);
}

/* Answer everything, as the kernel would, batch after batch, until the engine sends nothing more. */
static inline void h_answer_all(Harness *h) {
        for (unsigned rounds = 0; h_unanswered(h) > 0 || h->stats_dump_running; rounds++) {
                assert_true(rounds < 1000);
                while (h_unanswered(h) > 0)
                        h_answer_kernel(h);
                if (h->stats_dump_running)
                        h_answer_stats_dump(h);
                h_batch_end(h);
        }
}

/* One fake timer tick of the probation set after `usec`, and the kernel's answers to it. */
static inline void h_tick(Harness *h, uint64_t usec) {
        h_advance(h, usec);
        probation_tick(h->e->probation);
        h_answer_all(h);
}

/* Let `usec` pass in ticks of `step`. */
static inline void h_run(Harness *h, uint64_t usec, uint64_t step) {
        for (uint64_t t = 0; t < usec; t += step)
                h_tick(h, step);
}

/* The device is read from the kernel again (what `show` does before it answers), and answered. */
static inline void h_read(Harness *h, int ifindex) {
        assert_int_equal(writer_request_read(h->e->writer, h_dev(h, ifindex), NULL, NULL, NULL), 0);
        h_answer_all(h);
}

/* The put-back throttle's timer fires (the fake clock is the test's to move first). */
static inline void h_fire_throttle(Harness *h) {
        assert_non_null(h->e->throttle_timer);
        event_active(h->e->throttle_timer, EV_TIMEOUT, 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
}

/* ---- requests, as the tests ask about them ---- */

static inline size_t h_count_writes(const Harness *h, int ifindex, size_t from) {
        size_t n = 0;
        for (size_t i = from; i < h->n_reqs; i++)
                n += h->reqs[i].kind == REQUEST_WRITE && (ifindex == 0 || h->reqs[i].ifindex == ifindex);
        return n;
}

static inline const Request *h_last_write(const Harness *h, int ifindex) {
        for (size_t i = h->n_reqs; i > 0; i--)
                if (h->reqs[i - 1].kind == REQUEST_WRITE && h->reqs[i - 1].ifindex == ifindex)
                        return &h->reqs[i - 1];
        return NULL;
}

#define assert_sizes_equal(a, b)                                                                            \
        do {                                                                                                \
                Sizes _a_ = (a), _b_ = (b);                                                                 \
                assert_int_equal(_a_.gso_max_size, _b_.gso_max_size);                                       \
                assert_int_equal(_a_.gro_max_size, _b_.gro_max_size);                                       \
                assert_int_equal(_a_.gso_ipv4_max_size, _b_.gso_ipv4_max_size);                             \
                assert_int_equal(_a_.gro_ipv4_max_size, _b_.gro_ipv4_max_size);                             \
        } while (0)

/* By name, so that a failure says which. */
#define assert_state(got, want)                                                                             \
        assert_string_equal(device_state_to_string(got), device_state_to_string(want))
#define assert_cause(got, want) assert_string_equal(write_cause_to_string(got), write_cause_to_string(want))

/* ---- the recorder ---- */

static void h_on_event(const Event *ev, void *userdata) {
        Harness *h = userdata;
        Recorded *r;

        assert_true(h->n_ev < ELEMENTSOF(h->ev));
        r = &h->ev[h->n_ev++];
        *r = (Recorded){.type = ev->type,
                        .state = ev->state,
                        .previous = ev->previous,
                        .cause = ev->cause,
                        .error = ev->error,
                        .try_action = ev->try_action,
                        .try_reason = ev->try_reason};
        if (ev->device) {
                r->ifindex = ev->device->ifindex;
                snprintf(r->ifname, sizeof(r->ifname), "%s", ev->device->ifname);
        }
        if (ev->from && ev->to) {
                r->has_sizes = true;
                r->from = *ev->from;
                r->to = *ev->to;
        }
        if (ev->rollback)
                snprintf(r->counter, sizeof(r->counter), "%s", ev->rollback->counter ?: "");
        if (ev->policy)
                snprintf(r->policy, sizeof(r->policy), "%s", ev->policy);
        if (ev->type == EVENT_STATE) {
                if (!lifecycle_transition_allowed(ev->previous, ev->state)) {
                        print_message("illegal transition of %s: %s → %s\n", r->ifname,
                                      device_state_to_string(ev->previous),
                                      device_state_to_string(ev->state));
                        h->illegal++;
                } else
                        h_transitions_seen[ev->previous][ev->state] = true;
        }
}

/* The states device `ifindex` entered since event `from`, as "pending probation applied". */
static inline const char *h_path(const Harness *h, int ifindex, size_t from, char *buf, size_t size) {
        size_t o = 0;
        buf[0] = '\0';
        for (size_t i = from; i < h->n_ev && o < size; i++)
                if (h->ev[i].type == EVENT_STATE && h->ev[i].ifindex == ifindex)
                        o += (size_t) snprintf(buf + o, size - o, "%s%s", o ? " " : "",
                                               device_state_to_string(h->ev[i].state));
        return buf;
}

#define assert_path(h, ifindex, from, want)                                                                 \
        do {                                                                                                \
                char _buf_[1024];                                                                           \
                assert_string_equal(h_path((h), (ifindex), (from), _buf_, sizeof(_buf_)), (want));          \
        } while (0)

/* The last event of `type` for `ifindex` since event `from`, or NULL. */
static inline const Recorded *h_find_event(const Harness *h, EventType type, int ifindex, size_t from) {
        for (size_t i = h->n_ev; i > from; i--)
                if (h->ev[i - 1].type == type && (ifindex == 0 || h->ev[i - 1].ifindex == ifindex))
                        return &h->ev[i - 1];
        return NULL;
}

static inline size_t h_count_events(const Harness *h, EventType type, int ifindex, size_t from) {
        size_t n = 0;
        for (size_t i = from; i < h->n_ev; i++)
                n += h->ev[i].type == type && (ifindex == 0 || h->ev[i].ifindex == ifindex);
        return n;
}

/* ---- SNMP files ---- */

static inline void h_write_file(const char *dir, const char *name, const char *text) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
}

/* Write the namespace's counters where the engine reads them (after changing h->ip_… etc.). */
static inline void h_write_snmp(Harness *h) {
        char buf[512];
        snprintf(buf, sizeof(buf),
                 "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n"
                 "Ip: 1 64 1000 %llu\n"
                 "Tcp: RtoAlgorithm OutSegs RetransSegs\n"
                 "Tcp: 1 %llu %llu\n",
                 (unsigned long long) h->ip_in_hdr_errors, (unsigned long long) h->tcp_out_segs,
                 (unsigned long long) h->tcp_retrans_segs);
        h_write_file(h->proc_net, "snmp", buf);
        snprintf(buf, sizeof(buf),
                 "IpExt: InNoRoutes InTruncatedPkts\n"
                 "IpExt: 0 %llu\n",
                 (unsigned long long) h->ipext_in_truncated);
        h_write_file(h->proc_net, "netstat", buf);
}

/* ---- policy ---- */

/* The host as the harness's policies are scoped for. */
#define H_HOST ((HostIdentity){.hostname = "host", .kernel_release = "6.8.0"})

static inline PolicySet *h_parse_policy(const char *yaml) {
        char *errors = NULL;
        PolicySet *set = parse_string(yaml, &errors);
        if (!set)
                fail_msg("policy does not parse:\n%s", errors);
        free(errors);
        policy_set_scope(set, &H_HOST);
        return set;
}

/* A reload: the new policy is swapped in, then every link is read again (as reloader_reload()
 * does with sync_verify()). */
static inline void h_reload(Harness *h, const char *yaml) {
        policy_set_free(h->policy);
        h->e->policy = h->policy = h_parse_policy(yaml);
        apply_policy_changed(h->e);
        h->e->settle_pending = true;
        h_dump(h);
}

/* A reloader's policy runs in the harness's one engine as it does in every namespace of the
 * daemon (netns.c, netns_run_policy()): lent, and once started every link read again. */
static inline void h_run_policy(void *userdata, PolicySet *set) {
        Harness *h = userdata;

        h->e->policy = set;
        apply_policy_changed(h->e);
        if (!h->started)
                return;
        h->e->settle_pending = true;
        sync_verify(h->s);
}

/* A refused forced reload: READY=1 follows. */
static inline void h_policy_unchanged(void *userdata) {
        Harness *h = userdata;

        h->e->settle_pending = true;
        engine_check_settled(h->e);
}

static const ReloaderOps h_reloader_ops = {.run = h_run_policy, .unchanged = h_policy_unchanged};

/* The policy file `config` loaded by a reloader, as at start, whose policy the engine runs from
 * now on, and a try beside it (its record in the runtime directory). */
static inline void h_reloader_new(Harness *h, const char *config, Reloader **ret_r, PolicyTry **ret_t) {
        assert_int_equal(reloader_new(h->base, &(ReloadConfig){.config_path = config, .root = "", .host = H_HOST},
                                      &h->e->events, &h_reloader_ops, h, ret_r),
                         0);
        assert_int_equal(reloader_load(*ret_r), 0);
        assert_int_equal(policy_try_new(h->base, &h->clock, &h->e->events, *ret_r, h->runtime_dir, ret_t), 0);
}

/* ---- set up, start, tear down ---- */

static int h_rm(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        return remove(path);
}

/* Take the runtime directory away: the state file cannot be written any more. */
static inline void h_break_runtime_dir(Harness *h) {
        assert_int_equal(nftw(h->runtime_dir, h_rm, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* The harness a test is using: freed by h_teardown() when the test fails before h_free(). */
static Harness *h_current;

static inline void h_destroy(Harness *h) {
        if (!h)
                return;
        netns_set_free(h->set);
        netns_free(h->own); /* its sync and engine */
        policy_set_free(h->policy);
        event_base_free(h->base);
        (void) nftw(h->runtime_dir, h_rm, 8, FTW_DEPTH | FTW_PHYS);
        (void) nftw(h->proc_net, h_rm, 8, FTW_DEPTH | FTW_PHYS);
        if (h_current == h)
                h_current = NULL;
        free(h);
}

static inline void h_free(Harness *h) {
        unsigned illegal = h->illegal;

        h_destroy(h);
        /* after the cleanup, so that a failure here leaks nothing */
        assert_int_equal(illegal, 0);
}

/* A cmocka teardown: a failed test leaves its harness behind; nothing of it may leak. */
static inline int h_teardown(void **state) {
        h_destroy(h_current);
        return 0;
}

static inline Harness *h_new(const char *yaml) {
        Harness *h = calloc(1, sizeof(Harness));
        assert_non_null(h);
        h->mono = h->boot = H_START_USEC;
        h->real = 1700000000 * USEC_PER_SEC;
        h->clock = (Clock){h_clock_usec, h};
        snprintf(h->runtime_dir, sizeof(h->runtime_dir), H_TMPDIR "/bigtcpd-unit-run-XXXXXX");
        snprintf(h->proc_net, sizeof(h->proc_net), H_TMPDIR "/bigtcpd-unit-net-XXXXXX");
        assert_non_null(mkdtemp(h->runtime_dir));
        assert_non_null(mkdtemp(h->proc_net));
        h_write_snmp(h);
        h->base = event_base_new();
        assert_non_null(h->base);

        EngineConfig cfg = {.runtime_dir = h->runtime_dir,
                            .proc_net = h->proc_net,
                            .hostname = "host",
                            .kernel_release = "6.8.0"};
        WriterTransport transport = {h_send, h, h_stats_dump};
        assert_int_equal(engine_new(h->base, &cfg, &h->clock, -1, &transport, &apply_writer_ops,
                                    &apply_probation_ops, &h->e),
                         0);
        assert_int_equal(sync_new(h->e, NULL, 0, &h->s), 0);
        assert_int_equal(netns_new_played(h->e, h->s, &h->own), 0);
        assert_int_equal(netns_set_new_alone(h->base, h->own, &h->set), 0);
        h->control = (Control){.netns = h->set};
        assert_true(event_watch_add(&h->e->events, h_on_event, h) > 0);
        /* every namespace has one */
        h_link_add_full(h, 1, "lo", NULL, true);
        h->e->policy = h->policy = h_parse_policy(yaml);
        apply_policy_changed(h->e);
        h_destroy(h_current); /* a test uses one at a time */
        h_current = h;
        return h;
}

/* The first sync: the links the fake kernel has are dumped, then the engine decides. */
static inline void h_start(Harness *h) {
        h->started = true;
        h_dump(h);
}

/* Both at once, and every answer given. */
static inline Harness *h_new_started(const char *yaml) {
        Harness *h = h_new(yaml);
        h_start(h);
        h_answer_all(h);
        return h;
}

/* The first sync of a run that finds `entries` (an earlier run's state file, taken over): the
 * link dump, the route dump, then the engine decides. */
static inline void h_start_from(Harness *h, StateEntry *entries, size_t n) {
        h->started = true;
        sync_start(h->s, entries, n); /* takes the entries */
        for (size_t i = 0; i < h->n_links; i++)
                h_feed(h, RTM_NEWLINK, &h->links[i], NULL, NETLINK_DUMP, 0);
        sync_netlink_ops.dump_done(h->s, RTM_GETLINK, 0, false);
        sync_netlink_ops.dump_done(h->s, RTM_GETROUTE, 0, false);
        h_batch_end(h);
}

/* A restart: the state file this run leaves (saved, as at a clean stop) is loaded, the harness
 * goes, and a new one on `yaml` starts from those entries with the same links, at the sizes the
 * kernel kept, as bigtcpd's next run would. Returns the new harness; `h` is freed. */
static inline Harness *h_restart(Harness *h, const char *yaml) {
        FakeLink links[ELEMENTSOF(h->links)];
        size_t n_links = h->n_links;
        StateEntry *entries = NULL;
        StateStore *peek;
        size_t n = 0;

        assert_int_equal(state_store_save(h->e->state), 0);
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &entries, &n, NULL), 0);
        state_store_free(peek);
        memcpy(links, h->links, sizeof(links));
        h_free(h);

        h = h_new(yaml);
        for (size_t i = 0; i < n_links; i++) {
                if (!links[i].present || links[i].ifindex == 1)
                        continue; /* lo: every harness has its own */
                FakeLink *l = h_link_add_full(h, links[i].ifindex, links[i].name, links[i].kind, links[i].ipv4);
                unsigned id = l->id;
                *l = links[i];
                l->id = id;
        }
        h_start_from(h, entries, n);
        return h;
}

/* A device's pending reason as the API shows it; "-" when it is not pending. */
static inline const char *h_pending_reason(Harness *h, int ifindex) {
        const char *s = pending_reason_to_string(lifecycle_pending_reason(h_dev(h, ifindex)));
        return s ?: "-";
}

static inline const char *h_state_name(Harness *h, int ifindex) {
        return device_state_to_string(h_state(h, ifindex));
}
