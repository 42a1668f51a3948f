/* engine-harness.c — the decision engine driven without a kernel (engine-harness.h): the fake
 * clock, kernel and transport, the recorder, and the harness's life. */
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "engine-harness.h"

const char *h_tmpdir = "/tmp";
bool h_transitions_seen[_DEVICE_STATE_MAX][_DEVICE_STATE_MAX];

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

void h_advance(Harness *h, uint64_t usec) {
        h->mono += usec;
        h->boot += usec;
        h->real += usec;
}

FakeLink *h_link(Harness *h, int ifindex) {
        for (size_t i = h->n_links; i > 0; i--)
                if (h->links[i - 1].present && h->links[i - 1].ifindex == ifindex)
                        return &h->links[i - 1];
        return NULL;
}

FakeLink *h_link_by_id(Harness *h, unsigned id) {
        for (size_t i = 0; i < h->n_links; i++)
                if (h->links[i].id == id)
                        return &h->links[i];
        return NULL;
}

Device *h_dev(Harness *h, int ifindex) {
        return device_get(&h->e->devices, ifindex);
}

DeviceState h_state(Harness *h, int ifindex) {
        Device *d = h_dev(h, ifindex);
        assert_non_null(d);
        return d->life.state;
}

/* A link message as the kernel builds it; `stats` (may be NULL) adds IFLA_STATS64. */
static struct nl_msg *h_link_msg(int type, const FakeLink *l, const struct rtnl_link_stats64 *stats,
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
        if (l->link)
                assert_int_equal(nla_put_u32(msg, IFLA_LINK, (uint32_t) l->link), 0);
        if (l->has_link_netnsid)
                assert_int_equal(nla_put_u32(msg, IFLA_LINK_NETNSID, (uint32_t) l->link_netnsid), 0);
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

void h_feed(Harness *h, int type, const FakeLink *l, const struct rtnl_link_stats64 *stats,
            NetlinkSource source, uint32_t seq) {
        struct nl_msg *msg = h_link_msg(type, l, stats, seq);
        sync_netlink_ops.message(h->s, nlmsg_hdr(msg), source);
        nlmsg_free(msg);
}

/* A statistics dump only for the baselines of writes waiting for them is answered at once, as
 * the kernel would, unless the test holds it (hold_baselines). */
static void h_baselines(Harness *h) {
        while (!h->hold_baselines && h->stats_dump_running &&
               writer_stats_dump_serves(h->e->writer) == STATS_DUMP_BASELINES)
                h_answer_stats_dump(h);
}

void h_batch_end(Harness *h) {
        sync_netlink_ops.batch_end(h->s);
        h_baselines(h);
}

void h_flush(Harness *h) {
        apply_flush(h->e);
        h_baselines(h);
}

void h_dump(Harness *h) {
        h->e->dump_epoch++;
        for (size_t i = 0; i < h->n_links; i++)
                if (h->links[i].present)
                        h_feed(h, RTM_NEWLINK, &h->links[i], NULL, NETLINK_DUMP, 0);
        sync_netlink_ops.dump_done(h->s, RTM_GETLINK, 0, false);
        h_batch_end(h);
}

FakeLink *h_link_add_full(Harness *h, int ifindex, const char *name, const char *kind, bool ipv4) {
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

FakeLink *h_link_add(Harness *h, int ifindex, const char *name) {
        return h_link_add_full(h, ifindex, name, "veth", true);
}

void h_link_rename(Harness *h, int ifindex, const char *name) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        snprintf(l->name, sizeof(l->name), "%s", name);
        h_feed(h, RTM_NEWLINK, l, NULL, NETLINK_EVENT, 0);
        h_batch_end(h);
}

void h_link_del(Harness *h, int ifindex) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        l->present = false;
        h_feed(h, RTM_DELLINK, l, NULL, NETLINK_EVENT, 0);
        h_batch_end(h);
}

void h_link_set_sizes(Harness *h, int ifindex, Sizes s) {
        FakeLink *l = h_link(h, ifindex);
        assert_non_null(l);
        l->sizes = s;
}

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

void h_answer_stats_dump(Harness *h) {
        assert_true(h->stats_dump_running);
        h->stats_dump_running = false;
        if (h->stats_dump_error == 0)
                for (size_t i = 0; i < h->n_links; i++) {
                        FakeLink *l = &h->links[i];
                        struct if_stats_msg ifsm = {.ifindex = (uint32_t) l->ifindex,
                                                    .filter_mask =
                                                            IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)};
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

Request *h_next_request(Harness *h) {
        return h->next_answer < h->n_reqs ? &h->reqs[h->next_answer] : NULL;
}

size_t h_unanswered(const Harness *h) {
        return h->n_reqs - h->next_answer;
}

void h_answer(Harness *h, int error) {
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

void h_answer_kernel(Harness *h) {
        Request *r = h_next_request(h);
        assert_non_null(r);
        FakeLink *l = r->link_id ? h_link_by_id(h, r->link_id) : NULL;
        h_answer(h, l && l->present ? 0 : -ENODEV);
}

void h_answer_all(Harness *h) {
        for (unsigned rounds = 0; h_unanswered(h) > 0 || h->stats_dump_running; rounds++) {
                assert_true(rounds < 1000);
                while (h_unanswered(h) > 0)
                        h_answer_kernel(h);
                if (h->stats_dump_running)
                        h_answer_stats_dump(h);
                h_batch_end(h);
        }
}

void h_tick(Harness *h, uint64_t usec) {
        h_advance(h, usec);
        probation_tick(h->e->probation);
        h_answer_all(h);
}

void h_run(Harness *h, uint64_t usec, uint64_t step) {
        for (uint64_t t = 0; t < usec; t += step)
                h_tick(h, step);
}

void h_read(Harness *h, int ifindex) {
        assert_int_equal(writer_request_read(h->e->writer, h_dev(h, ifindex), NULL, NULL, NULL), 0);
        h_answer_all(h);
}

void h_fire_throttle(Harness *h) {
        assert_non_null(h->e->throttle_timer);
        event_active(h->e->throttle_timer, EV_TIMEOUT, 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
}

size_t h_count_writes(const Harness *h, int ifindex, size_t from) {
        size_t n = 0;
        for (size_t i = from; i < h->n_reqs; i++)
                n += h->reqs[i].kind == REQUEST_WRITE && (ifindex == 0 || h->reqs[i].ifindex == ifindex);
        return n;
}

const Request *h_last_write(const Harness *h, int ifindex) {
        for (size_t i = h->n_reqs; i > 0; i--)
                if (h->reqs[i - 1].kind == REQUEST_WRITE && h->reqs[i - 1].ifindex == ifindex)
                        return &h->reqs[i - 1];
        return NULL;
}

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

const char *h_path(const Harness *h, int ifindex, size_t from, char *buf, size_t size) {
        size_t o = 0;
        buf[0] = '\0';
        for (size_t i = from; i < h->n_ev && o < size; i++)
                if (h->ev[i].type == EVENT_STATE && h->ev[i].ifindex == ifindex)
                        o += (size_t) snprintf(buf + o, size - o, "%s%s", o ? " " : "",
                                               device_state_to_string(h->ev[i].state));
        return buf;
}

const Recorded *h_find_event(const Harness *h, EventType type, int ifindex, size_t from) {
        for (size_t i = h->n_ev; i > from; i--)
                if (h->ev[i - 1].type == type && (ifindex == 0 || h->ev[i - 1].ifindex == ifindex))
                        return &h->ev[i - 1];
        return NULL;
}

size_t h_count_events(const Harness *h, EventType type, int ifindex, size_t from) {
        size_t n = 0;
        for (size_t i = from; i < h->n_ev; i++)
                n += h->ev[i].type == type && (ifindex == 0 || h->ev[i].ifindex == ifindex);
        return n;
}

void h_write_file(const char *dir, const char *name, const char *text) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
}

void h_write_snmp(Harness *h) {
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

PolicySet *h_parse_policy(const char *yaml) {
        char *errors = NULL;
        PolicySet *set = parse_string(yaml, &errors);
        if (!set)
                fail_msg("policy does not parse:\n%s", errors);
        free(errors);
        policy_set_scope(set, &H_HOST);
        return set;
}

void h_reload(Harness *h, const char *yaml) {
        policy_set_free(h->policy);
        h->e->policy = h->policy = h_parse_policy(yaml);
        apply_policy_changed(h->e);
        h->e->settle_pending = true;
        h_dump(h);
}

/* A reloader's policy runs in the harness's one engine as it does in every namespace of the
 * daemon (netns.c, netns_run_policy()): lent, and once started every link read again. */
static void h_run_policy(void *userdata, PolicySet *set) {
        Harness *h = userdata;

        h->e->policy = set;
        apply_policy_changed(h->e);
        if (!h->started)
                return;
        h->e->settle_pending = true;
        sync_verify(h->s);
}

/* A refused forced reload: READY=1 follows. */
static void h_policy_unchanged(void *userdata) {
        Harness *h = userdata;

        h->e->settle_pending = true;
        engine_check_settled(h->e);
}

static const ReloaderOps h_reloader_ops = {.run = h_run_policy, .unchanged = h_policy_unchanged};

void h_reloader_new(Harness *h, const char *config, Reloader **ret_r, PolicyTry **ret_t) {
        assert_int_equal(reloader_new(h->base,
                                      &(ReloadConfig){.config_path = config, .root = "", .host = H_HOST},
                                      &h->e->events, &h_reloader_ops, h, ret_r),
                         0);
        assert_int_equal(reloader_load(*ret_r), 0);
        assert_int_equal(policy_try_new(h->base, &h->clock, &h->e->events, *ret_r, h->runtime_dir, ret_t),
                         0);
}

int h_rm(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        return remove(path);
}

void h_break_runtime_dir(Harness *h) {
        assert_int_equal(nftw(h->runtime_dir, h_rm, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* The harness a test is using: freed by h_teardown() when the test fails before h_free(). */
static Harness *h_current;

static void h_destroy(Harness *h) {
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

void h_free(Harness *h) {
        unsigned illegal = h->illegal;

        h_destroy(h);
        /* after the cleanup, so that a failure here leaks nothing */
        assert_int_equal(illegal, 0);
}

int h_teardown(void **state) {
        h_destroy(h_current);
        return intern_none_left(state);
}

Harness *h_new(const char *yaml) {
        Harness *h = calloc(1, sizeof(Harness));
        assert_non_null(h);
        h->mono = h->boot = H_START_USEC;
        h->real = 1700000000 * USEC_PER_SEC;
        h->clock = (Clock){h_clock_usec, h};
        assert_true((size_t) snprintf(h->runtime_dir, sizeof(h->runtime_dir), "%s/bigtcpd-unit-run-XXXXXX",
                                      h_tmpdir) < sizeof(h->runtime_dir));
        assert_true((size_t) snprintf(h->proc_net, sizeof(h->proc_net), "%s/bigtcpd-unit-net-XXXXXX",
                                      h_tmpdir) < sizeof(h->proc_net));
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

void h_start(Harness *h) {
        h->started = true;
        h_dump(h);
}

void h_start_from(Harness *h, StateEntry *entries, size_t n) {
        h->started = true;
        sync_start(h->s, entries, n); /* takes the entries */
        for (size_t i = 0; i < h->n_links; i++)
                h_feed(h, RTM_NEWLINK, &h->links[i], NULL, NETLINK_DUMP, 0);
        sync_netlink_ops.dump_done(h->s, RTM_GETLINK, 0, false);
        sync_netlink_ops.dump_done(h->s, RTM_GETROUTE, 0, false);
        h_batch_end(h);
}

Harness *h_restart(Harness *h, const char *yaml) {
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
                FakeLink *l =
                        h_link_add_full(h, links[i].ifindex, links[i].name, links[i].kind, links[i].ipv4);
                unsigned id = l->id;
                *l = links[i];
                l->id = id;
        }
        h_start_from(h, entries, n);
        return h;
}

const char *h_pending_reason(Harness *h, int ifindex) {
        const char *s = pending_reason_to_string(lifecycle_pending_reason(h_dev(h, ifindex)));
        return s ?: "-";
}
