/* fuzz-netlink — rtnetlink datagrams into the daemon's own handlers. Each input gets a new Engine
 * (device table, the policy below, writer, probation set, rollouts, state store on tmpfs) and its
 * Sync, made without a Netlink; the fuzzer plays the kernel and calls only sync_netlink_ops, the
 * way daemon/netlink.c calls them. The engine's requests go to a recording WriterTransport
 * (fuzz-engine.c), which checks every write it is sent against the device's limits.
 *
 * A new engine for every input, not one reset between inputs: an engine carries a lot across
 * inputs (devices, originals, rollouts, probations, the ring and its sequence numbers, counters),
 * and a finding must replay from its input alone. It costs a few allocations.
 *
 * Input: what recvmsg() returns, nlmsghdr-framed messages back to back, walked with
 * nlmsg_ok()/nlmsg_next() like netlink.c read_socket(); each message is handed over in a heap copy
 * of exactly nlmsg_len bytes, so that a read past it is caught. The engine starts as the daemon
 * does (sync_start()): when the input begins with a part of a link dump it answers that first
 * sync itself, else the first sync finds an empty namespace. Then, message by message:
 *   RTM_NEWLINK with the sequence number of a read the engine sent (and the kernel has not
 *     answered)                                               its reply (NETLINK_REPLY)
 *   RTM_NEWLINK (RTM_NEWROUTE) with NLM_F_MULTI while a link (route) dump runs   a dump part
 *   RTM_NEWLINK, RTM_DELLINK, RTM_NEWROUTE, RTM_DELROUTE otherwise              an event
 *   RTM_NEWSTATS                      an entry of a statistics dump
 *   NLMSG_DONE while a dump runs      its end (a link or route dump's before a statistics one's); an int payload below 0 is the dump's error, and
 *                                     NLM_F_DUMP_INTR on it or a part marks it inconsistent
 *   NLMSG_ERROR                       the ack of the oldest request in flight, with its error
 *                                     (and, after struct nlmsgerr, a NUL-terminated extack)
 *   NLMSG_NOOP                        events lost (ENOBUFS on the event socket)
 *   NLMSG_OVERRUN                     acks lost too (ENOBUFS on the write socket)
 * A datagram ends after a message without NLM_F_MULTI and after NLMSG_DONE (the kernel sends
 * every event, reply and ack in a datagram of its own): then batch_end, one turn of the event
 * loop (the state file is saved there), and 10 ms pass on the engine's clock.
 *
 * After the input, the engine's invariants (fuzz_engine_check()), every device and the status as
 * the control API shows them, and during it every event as Monitor sends it and every state
 * change a transition of the lifecycle. */
#include <event2/event.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"
#include "control.h"
#include "fuzz-engine.h"
#include "fuzz.h"
#include "linux-compat.h"

/* Matching on everything a link or route message can carry; guards of every kind (their
 * windows long enough that no timer fires within an input); a staged rollout. */
static const char policy_yaml[] =
        "version: 1\n"
        "rollback:\n"
        "  window: 10m\n"
        "  interval: 1m\n"
        "  guards:\n"
        "    - { counter: link.tx_errors, max-increase: 0 }\n"
        "    - { counter: link.rx_dropped, max-increase: 100 }\n"
        "    - { counter: Ip.InHdrErrors, max-increase: 100 }\n"
        "    - { counter: Tcp.RetransSegs, max-ratio: 0.02, per: Tcp.OutSegs }\n"
        "policies:\n"
        "  - name: routed\n"
        "    match: { route: [default, \"10.0.0.0/8\", \"2001:db8::/32\", \"fd00::/8\"] }\n"
        "    ipv6: { gso-max-size: max, gro-max-size: max }\n"
        "    ipv4: { gso-max-size: max, gro-max-size: 185000 }\n"
        "  - name: by-mac\n"
        "    match: { mac: [\"02:*\", \"0c:42:a1:*\"], kind: [device, veth] }\n"
        "    ipv6: { gso-max-size: 185000, gro-max-size: 185000 }\n"
        "    rollback: { guards: [] }\n"
        "  - name: by-name\n"
        "    match: { name: [\"veth*\", \"br*\", \"!*-mgmt\", \"alt-*\"], kind: [veth, bridge, vxlan, tun, "
        "dummy] }\n"
        "    ipv6: { gso-max-size: legacy, gro-max-size: 524280 }\n"
        "    ipv4: { gso-max-size: 100000 }\n"
        "    rollout: { max-parallel: 2 }\n"
        "  - name: loopback\n"
        "    match: { kind: loopback }\n"
        "    ipv6: { gro-max-size: max }\n"
        "  - name: rest\n"
        "    match: { driver: [\"virtio*\"] }\n"
        "    ipv4: { gso-max-size: legacy, gro-max-size: legacy }\n";

#define DATAGRAM_USEC (10 * USEC_PER_MSEC)

static struct event_base *base;
static PolicySet *policy;
static char dir[1024], proc_net[1100];

static void cleanup(void) {
        if (dir[0])
                fuzz_dir_remove(dir);
        policy_set_free(policy);
}

static PolicySet *load_policy(void) {
        PolicyErrors errs = {};
        PolicySet *p = policy_set_new();

        FUZZ_ASSERT(p);
        if (policy_parse_buffer(p, "fuzz-netlink.yaml", policy_yaml, strlen(policy_yaml), &errs) != 0) {
                for (size_t i = 0; i < errs.n; i++)
                        fprintf(stderr, "fuzz-netlink.yaml:%u:%u: %s\n", errs.items[i].line, errs.items[i].column,
                                errs.items[i].message);
                abort();
        }
        policy_set_scope(p, &(HostIdentity){.hostname = "fuzz", .kernel_release = "6.8.0"});
        return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet();
        base = event_base_new();
        FUZZ_ASSERT(base);
        policy = load_policy();
        fuzz_dir_new("/dev/shm", "netlink", dir, sizeof(dir));
        /* no SNMP files: the namespace-wide guards are inactive, as on a kernel without them */
        snprintf(proc_net, sizeof(proc_net), "%s/no-proc-net", dir);
        atexit(cleanup);
        return 0;
}

typedef struct Run {
        Engine *engine;
        Sync *sync;
        FuzzKernel kernel;
        FuzzClock clock;
        bool dump_intr;
} Run;

static int kernel_error(int32_t e) {
        /* the kernel answers 0 or -errno */
        return e >= -4095 && e <= 0 ? e : -(int) ((uint32_t) e % 4095 + 1);
}

static void take(Run *r, struct nlmsghdr *m) {
        const FuzzRequest *rq;
        int dump = sync_dump_running(r->sync);

        switch (m->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK:
        case RTM_NEWROUTE:
        case RTM_DELROUTE: {
                NetlinkSource source = NETLINK_EVENT;
                bool multi = m->nlmsg_flags & NLM_F_MULTI;

                rq = fuzz_kernel_find(&r->kernel, m->nlmsg_seq);
                if (m->nlmsg_type == RTM_NEWLINK && rq && rq->type == RTM_GETLINK)
                        source = NETLINK_REPLY;
                else if (multi && ((dump == RTM_GETLINK && m->nlmsg_type == RTM_NEWLINK) ||
                                   (dump == RTM_GETROUTE && m->nlmsg_type == RTM_NEWROUTE))) {
                        source = NETLINK_DUMP;
                        r->dump_intr = r->dump_intr || (m->nlmsg_flags & NLM_F_DUMP_INTR);
                }
                sync_netlink_ops.message(r->sync, m, source);
                break;
        }
        case RTM_NEWSTATS:
                /* an entry of a statistics dump: handed over whether one runs or not, more than
                 * netlink.c lets through (only those of the dump it runs) */
                sync_netlink_ops.stats(r->sync, m);
                break;
        case NLMSG_DONE: {
                int32_t e = 0;
                bool intr = r->dump_intr || (m->nlmsg_flags & NLM_F_DUMP_INTR);

                if (nlmsg_datalen(m) >= (int) sizeof(e))
                        memcpy(&e, nlmsg_data(m), sizeof(e));
                if (!dump && r->kernel.stats_dump) {
                        r->kernel.stats_dump = false;
                        sync_netlink_ops.stats_done(r->sync, intr ? -EINTR : e < 0 ? kernel_error(e) : 0);
                        break;
                }
                if (!dump)
                        break; /* netlink.c: not the end of a dump it runs */
                r->dump_intr = false;
                sync_netlink_ops.dump_done(r->sync, dump, e < 0 ? kernel_error(e) : 0, intr);
                break;
        }
        case NLMSG_ERROR: {
                struct nlmsgerr err;
                const char *extack = NULL;
                uint32_t seq;

                if (!nlmsg_valid_hdr(m, sizeof(err)))
                        break;
                rq = fuzz_kernel_oldest(&r->kernel);
                if (!rq)
                        break; /* the kernel acks only what was sent */
                memcpy(&err, nlmsg_data(m), sizeof(err));
                if ((size_t) nlmsg_datalen(m) > sizeof(err)) {
                        const char *t = (const char *) nlmsg_data(m) + sizeof(err);
                        size_t n = (size_t) nlmsg_datalen(m) - sizeof(err);
                        if (memchr(t, '\0', n))
                                extack = t;
                }
                seq = rq->seq;
                fuzz_kernel_acked(&r->kernel, seq);
                sync_netlink_ops.ack(r->sync, seq, kernel_error(err.error), extack);
                break;
        }
        case NLMSG_NOOP:
                sync_netlink_ops.lost(r->sync);
                break;
        case NLMSG_OVERRUN:
                /* netlink.c on ENOBUFS on the write socket */
                fuzz_kernel_acks_lost(&r->kernel);
                sync_netlink_ops.acks_lost(r->sync);
                sync_netlink_ops.lost(r->sync);
                break;
        default:
                break;
        }
}

static void batch_end(Run *r) {
        sync_netlink_ops.batch_end(r->sync);
        FUZZ_ASSERT(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
        fuzz_clock_advance(&r->clock, DATAGRAM_USEC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        EngineConfig cfg = {.runtime_dir = dir, .proc_net = proc_net, .hostname = "fuzz", .kernel_release = "6.8.0"};
        Run r = {};
        bool open_batch = false;
        int left = (int) size;

        if (size > 256 * 1024) /* the daemon's receive buffer */
                return 0;
        fuzz_clock_init(&r.clock);
        fuzz_kernel_init(&r.kernel);
        FUZZ_ASSERT(engine_new(base, &cfg, &r.clock.clock, -1, &r.kernel.transport, &apply_writer_ops,
                               &apply_probation_ops, &r.engine) == 0);
        r.kernel.engine = r.engine;
        FUZZ_ASSERT(sync_new(r.engine, NULL, 0, &r.sync) == 0);
        /* One policy for every input, a reference each: parsing it was most of an input's cost,
         * and the engine only reads its policy (a reload replaces it whole). */
        FuzzNetns ns;
        fuzz_netns_new(base, r.engine, r.sync, policy, &ns);
        FUZZ_ASSERT(event_watch_add(&r.engine->events, fuzz_check_event, r.engine) > 0);

        /* aligned like the daemon's malloc'd receive buffer */
        uint8_t *buf = malloc(size ? size : 1);
        FUZZ_ASSERT(buf);
        memcpy(buf, data, size);

        netns_start(ns.own, NULL, 0);
        struct nlmsghdr *first = (struct nlmsghdr *) buf;
        if (!(nlmsg_ok(first, left) && first->nlmsg_type == RTM_NEWLINK && (first->nlmsg_flags & NLM_F_MULTI))) {
                /* an empty namespace: no links, no routes */
                sync_netlink_ops.dump_done(r.sync, RTM_GETLINK, 0, false);
                sync_netlink_ops.dump_done(r.sync, RTM_GETROUTE, 0, false);
                batch_end(&r);
                FUZZ_ASSERT(r.engine->synced);
        }

        for (struct nlmsghdr *nlh = first; nlmsg_ok(nlh, left); nlh = nlmsg_next(nlh, &left)) {
                struct nlmsghdr *m = malloc(nlh->nlmsg_len);
                FUZZ_ASSERT(m);
                memcpy(m, nlh, nlh->nlmsg_len);
                take(&r, m);
                open_batch = (m->nlmsg_flags & NLM_F_MULTI) && m->nlmsg_type != NLMSG_DONE;
                if (!open_batch)
                        batch_end(&r);
                free(m);
        }
        if (open_batch)
                batch_end(&r);

        fuzz_engine_check(r.engine, &r.kernel);
        fuzz_check_views(&ns.control);

        fuzz_netns_free(&ns); /* the engine and sync with it */
        /* every timer and deferred event went with its owner */
        FUZZ_ASSERT(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE) == 0);
        fuzz_state_files_remove(dir);
        free(buf);
        return 0;
}
