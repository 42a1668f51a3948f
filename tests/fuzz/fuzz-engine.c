/* fuzz-engine.c — the fake kernel, clock and directories of the engine fuzzers, and the
 * engine's invariants. */
#include <dirent.h>
#include <ftw.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz-engine.h"
#include "fuzz.h"
#include "device-lifecycle.h"
#include "netlink-link.h"
#include "linux-compat.h"
#include "reconcile.h"
#include "rollout.h"

/* ---- directories ---- */

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) ftw;
        if (flag == FTW_DP)
                (void) rmdir(path);
        else
                (void) unlink(path);
        return 0;
}

void fuzz_dir_remove(const char *dir) {
        (void) nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void fuzz_state_files_remove(const char *dir) {
        static const char *const names[] = {"state.json", "state.journal", ".state.json.tmp", "state.json.corrupt"};
        char path[4096];

        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
                (void) unlink(path);
        }
}

void fuzz_dir_new(const char *parent, const char *name, char *buf, size_t size) {
        char prefix[64];
        struct dirent *de;
        DIR *d;

        snprintf(prefix, sizeof(prefix), "bigtcpd-fuzz-%s.", name);
        d = opendir(parent);
        while (d && (de = readdir(d))) {
                char path[4096];
                int pid;
                if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
                    sscanf(de->d_name + strlen(prefix), "%d", &pid) != 1 || pid <= 0 ||
                    kill(pid, 0) == 0 || errno != ESRCH)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", parent, de->d_name);
                fuzz_dir_remove(path);
        }
        if (d)
                closedir(d);
        FUZZ_ASSERT((size_t) snprintf(buf, size, "%s/%s%d", parent, prefix, (int) getpid()) < size);
        fuzz_dir_remove(buf);
        if (mkdir(buf, 0755) < 0) {
                fprintf(stderr, "fuzz: cannot create %s: %m\n", buf);
                abort();
        }
        FUZZ_ASSERT(chmod(buf, 0755) == 0);
}

/* ---- clock ---- */

static uint64_t clock_read(void *userdata, int clock_id) {
        const FuzzClock *c = userdata;
        return clock_id == CLOCK_BOOTTIME ? c->boottime : clock_id == CLOCK_REALTIME ? c->realtime : c->monotonic;
}

void fuzz_clock_init(FuzzClock *c) {
        *c = (FuzzClock){
                .clock = {clock_read, c},
                .monotonic = 1000 * USEC_PER_SEC,
                .boottime = 1200 * USEC_PER_SEC,
                .realtime = UINT64_C(1764460800) * USEC_PER_SEC, /* 2025-11-30 */
        };
}

void fuzz_clock_advance(FuzzClock *c, uint64_t usec) {
        c->monotonic += usec;
        c->boottime += usec;
        c->realtime += usec;
}

/* ---- bigtcpd's own namespace ---- */

void fuzz_netns_new(struct event_base *base, Engine *e, Sync *s, PolicySet *policy, FuzzNetns *ret) {
        *ret = (FuzzNetns){};
        FUZZ_ASSERT(netns_new_played(e, s, &ret->own) == 0);
        FUZZ_ASSERT(netns_set_new_alone(base, ret->own, &ret->set) == 0);
        netns_set_reloader_ops.run(ret->set, policy);
        ret->control = (Control){.netns = ret->set};
}

void fuzz_netns_free(FuzzNetns *n) {
        netns_set_free(n->set);
        netns_free(n->own);
        *n = (FuzzNetns){};
}

/* ---- the kernel ---- */

static void check_write(const FuzzKernel *k, struct nlmsghdr *nlh, FuzzRequest *rq) {
        const Engine *e = k->engine;
        const Device *d;
        LinkMessage lm;
        uint32_t gso;

        FUZZ_ASSERT(link_message_parse(nlh, &lm) == 0);
        FUZZ_ASSERT(lm.has_sizes && lm.has_ipv4_sizes == e->ipv4_supported);
        d = device_get(&e->devices, lm.ifindex);
        FUZZ_ASSERT(d); /* only devices in the table are written */
        gso = gso_limit(d->tso_max_size);
        if (lm.sizes.gso_max_size > gso || lm.sizes.gro_max_size > BT_GRO_MAX_SIZE ||
            (lm.has_ipv4_sizes && (lm.sizes.gso_ipv4_max_size > gso || lm.sizes.gro_ipv4_max_size > BT_GRO_MAX_SIZE))) {
                fprintf(stderr,
                        "fuzz: write to %s (ifindex %d, tso_max_size %u, state %s) above what it takes: gso %u gro %u "
                        "gso_ipv4 %u gro_ipv4 %u (limits %u and %u)\n",
                        d->ifname[0] ? d->ifname : "?", d->ifindex, d->tso_max_size, device_state_to_string(d->life.state),
                        lm.sizes.gso_max_size, lm.sizes.gro_max_size, lm.sizes.gso_ipv4_max_size,
                        lm.sizes.gro_ipv4_max_size, gso, BT_GRO_MAX_SIZE);
                abort();
        }
        rq->sizes = lm.sizes;
        rq->ipv4 = lm.has_ipv4_sizes;
}

static int kernel_send(void *userdata, struct nl_msg *msg, uint32_t *ret_seq) {
        FuzzKernel *k = userdata;
        struct nlmsghdr *nlh = nlmsg_hdr(msg);
        FuzzRequest rq = {};
        struct ifinfomsg *ifi;

        /* the writer's bound on requests in flight, seen from the kernel */
        FUZZ_ASSERT(k->n < WRITER_INFLIGHT_MAX);
        FUZZ_ASSERT(nlmsg_valid_hdr(nlh, sizeof(struct ifinfomsg)));
        ifi = nlmsg_data(nlh);
        /* as netlink_send() does */
        if (++k->seq == 0)
                ++k->seq;
        nlh->nlmsg_seq = k->seq;
        nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
        rq = (FuzzRequest){.seq = k->seq, .type = nlh->nlmsg_type, .ifindex = ifi->ifi_index};
        switch (nlh->nlmsg_type) {
        case RTM_GETLINK: {
                struct nlattr *a = nlmsg_find_attr(nlh, sizeof(struct ifinfomsg), IFLA_EXT_MASK);
                rq.stats = !a || !(nla_get_u32(a) & RTEXT_FILTER_SKIP_STATS);
                break;
        }
        case RTM_NEWLINK:
                check_write(k, nlh, &rq);
                k->writes++;
                break;
        default:
                fprintf(stderr, "fuzz: the engine sent a message of type %u\n", nlh->nlmsg_type);
                abort();
        }
        k->pending[(k->head + k->n++) % WRITER_INFLIGHT_MAX] = rq;
        k->sent++;
        *ret_seq = rq.seq;
        return 0;
}

static int kernel_stats_dump(void *userdata) {
        FuzzKernel *k = userdata;

        if (k->stats_dump)
                return -EBUSY;
        k->stats_dump = true;
        k->stats_dumps++;
        return 0;
}

void fuzz_kernel_init(FuzzKernel *k) {
        *k = (FuzzKernel){.transport = {kernel_send, k, kernel_stats_dump}};
}

void fuzz_kernel_done(FuzzKernel *k) {
        free(k->links);
        k->links = NULL;
        k->n_links = 0;
}

FuzzLink *fuzz_kernel_add_link(FuzzKernel *k, const FuzzLink *l) {
        FuzzLink *x = reallocarray(k->links, k->n_links + 1, sizeof(FuzzLink));

        FUZZ_ASSERT(x);
        k->links = x;
        x[k->n_links] = *l;
        return &x[k->n_links++];
}

const FuzzRequest *fuzz_kernel_oldest(const FuzzKernel *k) {
        return k->n > 0 ? &k->pending[k->head] : NULL;
}

const FuzzRequest *fuzz_kernel_find(const FuzzKernel *k, uint32_t seq) {
        for (unsigned i = 0; i < k->n; i++)
                if (k->pending[(k->head + i) % WRITER_INFLIGHT_MAX].seq == seq)
                        return &k->pending[(k->head + i) % WRITER_INFLIGHT_MAX];
        return NULL;
}

void fuzz_kernel_acked(FuzzKernel *k, uint32_t seq) {
        if (!fuzz_kernel_find(k, seq))
                return;
        while (k->n > 0) {
                uint32_t s = k->pending[k->head].seq;
                k->head = (k->head + 1) % WRITER_INFLIGHT_MAX;
                k->n--;
                if (s == seq)
                        return;
        }
}

void fuzz_kernel_acks_lost(FuzzKernel *k) {
        k->head = k->n = 0;
}

FuzzLink *fuzz_kernel_link(FuzzKernel *k, int ifindex) {
        for (size_t i = 0; i < k->n_links; i++)
                if (k->links[i].ifindex == ifindex)
                        return &k->links[i];
        return NULL;
}

struct nl_msg *fuzz_link_message(const FuzzLink *l, int type, unsigned flags, uint32_t seq, const uint64_t *stats64) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = l->ifindex, .ifi_flags = l->flags};
        struct nl_msg *msg = nlmsg_alloc_simple(type, (int) flags);
        struct nlattr *info;

        FUZZ_ASSERT(msg);
        nlmsg_hdr(msg)->nlmsg_seq = seq;
        FUZZ_ASSERT(nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) == 0);
        FUZZ_ASSERT(nla_put_string(msg, IFLA_IFNAME, l->ifname) == 0);
        FUZZ_ASSERT(nla_put(msg, IFLA_ADDRESS, sizeof(l->mac), l->mac) == 0);
        if (l->kind) {
                FUZZ_ASSERT((info = nla_nest_start(msg, IFLA_LINKINFO)));
                FUZZ_ASSERT(nla_put_string(msg, IFLA_INFO_KIND, l->kind) == 0);
                FUZZ_ASSERT(nla_nest_end(msg, info) == 0);
        }
        FUZZ_ASSERT(nla_put_u32(msg, BT_IFLA_GSO_MAX_SIZE, l->sizes.gso_max_size) == 0);
        FUZZ_ASSERT(nla_put_u32(msg, BT_IFLA_GRO_MAX_SIZE, l->sizes.gro_max_size) == 0);
        FUZZ_ASSERT(nla_put_u32(msg, BT_IFLA_TSO_MAX_SIZE, l->tso_max_size) == 0);
        if (l->ipv4) {
                FUZZ_ASSERT(nla_put_u32(msg, BT_IFLA_GSO_IPV4_MAX_SIZE, l->sizes.gso_ipv4_max_size) == 0);
                FUZZ_ASSERT(nla_put_u32(msg, BT_IFLA_GRO_IPV4_MAX_SIZE, l->sizes.gro_ipv4_max_size) == 0);
        }
        if (stats64)
                FUZZ_ASSERT(nla_put(msg, IFLA_STATS64, 32 * sizeof(uint64_t), stats64) == 0);
        return msg;
}

static void deliver(Sync *s, struct nl_msg *msg, NetlinkSource source) {
        sync_netlink_ops.message(s, nlmsg_hdr(msg), source);
        nlmsg_free(msg);
}

/* The kernel takes a write: what it carries is what the link holds now. */
static int take_write(const FuzzRequest *rq, FuzzLink *l, const char **ret_extack) {
        *ret_extack = NULL;
        if (!l)
                return -ENODEV;
        if (l->refuse < 0) {
                *ret_extack = l->extack;
                return l->refuse;
        }
        l->sizes.gso_max_size = rq->sizes.gso_max_size;
        l->sizes.gro_max_size = rq->sizes.gro_max_size;
        if (l->ipv4 && rq->ipv4) {
                l->sizes.gso_ipv4_max_size = rq->sizes.gso_ipv4_max_size;
                l->sizes.gro_ipv4_max_size = rq->sizes.gro_ipv4_max_size;
        }
        return 0;
}

void fuzz_kernel_answer(FuzzKernel *k, Sync *s, const uint64_t *stats64) {
        for (unsigned round = 0;; round++) {
                int dump = sync_dump_running(s);
                unsigned n = k->n;

                /* the engine settles: a loop of requests that never ends is a finding */
                FUZZ_ASSERT(round < 10000);
                if (dump == RTM_GETLINK) {
                        for (size_t i = 0; i < k->n_links; i++)
                                deliver(s, fuzz_link_message(&k->links[i], RTM_NEWLINK, NLM_F_MULTI, 0, NULL),
                                        NETLINK_DUMP);
                        sync_netlink_ops.dump_done(s, RTM_GETLINK, 0, false);
                } else if (dump == RTM_GETROUTE)
                        sync_netlink_ops.dump_done(s, RTM_GETROUTE, 0, false);
                else if (k->stats_dump) {
                        /* one entry per link, every one with the counters the input gives */
                        static const uint64_t zero[32];
                        k->stats_dump = false;
                        for (size_t i = 0; i < k->n_links; i++) {
                                struct if_stats_msg ifsm = {
                                        .ifindex = (uint32_t) k->links[i].ifindex,
                                        .filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)};
                                struct nl_msg *msg = nlmsg_alloc_simple(RTM_NEWSTATS, NLM_F_MULTI);
                                FUZZ_ASSERT(msg);
                                FUZZ_ASSERT(nlmsg_append(msg, &ifsm, sizeof(ifsm), NLMSG_ALIGNTO) == 0);
                                FUZZ_ASSERT(nla_put(msg, IFLA_STATS_LINK_64, sizeof(zero), stats64 ?: zero) == 0);
                                sync_netlink_ops.stats(s, nlmsg_hdr(msg));
                                nlmsg_free(msg);
                        }
                        sync_netlink_ops.stats_done(s, 0);
                } else if (n == 0)
                        return;
                /* the requests sent before this wakeup, in order: a reply first, then the ack */
                for (unsigned i = 0; i < n && k->n > 0; i++) {
                        FuzzRequest rq = *fuzz_kernel_oldest(k);
                        FuzzLink *l = fuzz_kernel_link(k, rq.ifindex);
                        const char *extack = NULL;
                        int error = 0;

                        if (rq.type == RTM_GETLINK && l)
                                deliver(s, fuzz_link_message(l, RTM_NEWLINK, 0, rq.seq, rq.stats ? stats64 : NULL),
                                        NETLINK_REPLY);
                        else if (rq.type == RTM_GETLINK)
                                error = -ENODEV;
                        else
                                error = take_write(&rq, l, &extack);
                        fuzz_kernel_acked(k, rq.seq);
                        sync_netlink_ops.ack(s, rq.seq, error, extack);
                }
                sync_netlink_ops.batch_end(s);
        }
}

/* ---- invariants ---- */

static bool rollout_known(const Engine *e, const Rollout *r) {
        for (size_t i = 0; i < e->rollouts.n; i++)
                if (e->rollouts.items[i] == r)
                        return true;
        return false;
}

static void check_device(const Engine *e, const Device *d) {
        PendingReason why = lifecycle_pending_reason(d);

        FUZZ_ASSERT(d->ifindex > 0 && device_get(&e->devices, d->ifindex) == d);
        FUZZ_ASSERT(d->life.state >= 0 && d->life.state < _DEVICE_STATE_MAX && device_state_to_string(d->life.state));
        FUZZ_ASSERT((d->life.state == DEVICE_PENDING) == (why >= 0));
        FUZZ_ASSERT(why < 0 || pending_reason_to_string(why));
        if (d->life.state == DEVICE_PENDING &&
            !(d->write.phase != WRITE_IDLE || device_rollout_get(d)->phase == ROLLOUT_WAITING || device_history_get(d)->corrections.throttled ||
              (d->reconcile.owed && (!e->synced || !e->routes_complete)))) {
                /* `pending` says bigtcpd is on its way; here nothing is going to move it */
                fprintf(stderr,
                        "fuzz: %s (ifindex %d) is pending with nothing queued, in flight or waiting "
                        "(reconcile.owed %d, synced %d, routes_complete %d, held %d, policy %s)\n",
                        d->ifname[0] ? d->ifname : "?", d->ifindex, d->reconcile.owed, e->synced, e->routes_complete, d->life.held,
                        d->match.policy_name ?: "-");
                abort();
        }
        FUZZ_ASSERT(d->write.phase >= WRITE_IDLE && d->write.phase < _WRITE_PHASE_MAX);
        /* probation: the state says so exactly when the probation set has it */
        FUZZ_ASSERT(d->life.state != DEVICE_PROBATION || d->probation);
        FUZZ_ASSERT(!d->probation || d->life.state == DEVICE_PROBATION || d->life.state == DEVICE_PENDING);
        FUZZ_ASSERT(!d->life.held || d->life.state == DEVICE_ROLLED_BACK || d->life.state == DEVICE_PENDING ||
                    d->life.state == DEVICE_FAILED);
        FUZZ_ASSERT(d->record.has_original || (d->record.written == 0 && !d->life.held && !d->record.has_last_good));
        FUZZ_ASSERT((device_rollout_get(d)->phase == ROLLOUT_NONE) == (device_rollout_get(d)->of == NULL));
        FUZZ_ASSERT(!device_rollout_get(d)->of || rollout_known(e, device_rollout_get(d)->of));
        FUZZ_ASSERT(!d->rollout || d->rollout->of); /* a record only while in a rollout */
        /* a write's record exactly while the write is queued or in flight */
        FUZZ_ASSERT((d->write.phase == WRITE_IDLE) == (d->write.on == NULL));
        if (d->write.phase == WRITE_SENT) {
                const WriterRequest *rq = writer_lookup(e->writer, d->write.on->seq);
                FUZZ_ASSERT(rq && rq->device == d && rq->kind == REQUEST_WRITE);
        }
        FUZZ_ASSERT(strnlen(d->ifname, sizeof(d->ifname)) < IFNAMSIZ);
        FUZZ_ASSERT(d->mac_len <= 32 && d->perm_mac_len <= 32); /* MAX_ADDR_LEN */
}

void fuzz_engine_check(const Engine *e, const FuzzKernel *k) {
        size_t n = 0, queued = 0, sent = 0, in_probation = 0;
        const Device *d;

        DEVICE_FOREACH(d, &e->devices, it) {
                check_device(e, d);
                n++;
                queued += d->write.phase == WRITE_QUEUED;
                sent += d->write.phase == WRITE_SENT;
                in_probation += d->probation != NULL;
        }
        FUZZ_ASSERT(n == e->devices.n_devices);
        FUZZ_ASSERT(writer_queued(e->writer) == queued);
        FUZZ_ASSERT(writer_idle(e->writer) == (queued == 0 && sent == 0));
        FUZZ_ASSERT(writer_inflight(e->writer) <= WRITER_INFLIGHT_MAX);
        FUZZ_ASSERT(probation_count(e->probation) == in_probation);
        if (k) {
                /* the kernel's view of what is in flight is the writer's ring */
                FUZZ_ASSERT(writer_inflight(e->writer) == k->n);
                DEVICE_FOREACH(d, &e->devices, it) {
                        unsigned owned = 0;
                        for (unsigned i = 0; i < k->n; i++) {
                                const WriterRequest *rq = writer_lookup(e->writer, k->pending[(k->head + i) % WRITER_INFLIGHT_MAX].seq);
                                owned += rq && rq->device == d;
                        }
                        FUZZ_ASSERT(owned == d->write.n_requests);
                }
                for (unsigned i = 0; i < k->n; i++) {
                        const FuzzRequest *fr = &k->pending[(k->head + i) % WRITER_INFLIGHT_MAX];
                        const WriterRequest *rq = writer_lookup(e->writer, fr->seq);
                        FUZZ_ASSERT(rq);
                        /* a request belongs to the device it was sent for, or (gone) to none */
                        FUZZ_ASSERT(!rq->device || rq->device == device_get(&e->devices, fr->ifindex));
                }
        }
        for (size_t i = 0; i < e->rollouts.n; i++) {
                const Rollout *r = e->rollouts.items[i];
                unsigned active = 0, waiting = 0;
                DEVICE_FOREACH(d, &e->devices, it) {
                        active += device_rollout_get(d)->of == r && device_rollout_get(d)->phase == ROLLOUT_ACTIVE;
                        waiting += device_rollout_get(d)->of == r && device_rollout_get(d)->phase == ROLLOUT_WAITING;
                }
                FUZZ_ASSERT(r->active == active && r->waiting == waiting);
                FUZZ_ASSERT(r->active <= r->max_parallel);
        }
}

static void check_json(json_object *o) {
        FUZZ_ASSERT(o);
        fuzz_check_json(o);
        FUZZ_USE(strlen(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)));
        json_object_put(o);
}

void fuzz_check_event(const Event *ev, void *userdata) {
        const Engine *e = userdata;
        json_object *o;

        FUZZ_ASSERT(ev->type >= 0 && ev->type < _EVENT_TYPE_MAX);
        if (ev->device)
                FUZZ_ASSERT(device_get(&e->devices, ev->device->ifindex) == ev->device);
        if (ev->type == EVENT_STATE) {
                FUZZ_ASSERT(ev->device && ev->device->life.state == ev->state);
                if (!lifecycle_transition_allowed(ev->previous, ev->state)) {
                        fprintf(stderr, "fuzz: %s (ifindex %d): transition %s -> %s is not in the lifecycle\n",
                                ev->device->ifname ?: "?", ev->device->ifindex, device_state_to_string(ev->previous),
                                device_state_to_string(ev->state));
                        abort();
                }
        }
        {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                int r = control_event_write(ev, &w);
                FUZZ_ASSERT(r >= 0);
                if (r > 0) {
                        FUZZ_ASSERT(json_writer_text(&w));
                        o = json_tokener_parse(w.buf);
                        FUZZ_ASSERT(o); /* what Monitor sends parses */
                        check_json(o);
                }
        }
}

void fuzz_check_views(Control *c) {
        _cleanup_(freep) Device **all = NULL;
        size_t n = 0;

        FUZZ_ASSERT(control_sorted_devices(c, &all, &n) == 0);
        for (size_t i = 0; i < n; i++)
                check_json(control_device_json(c, all[i]));
        check_json(control_status_json(c));
}
