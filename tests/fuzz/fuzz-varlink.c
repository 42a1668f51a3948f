/* fuzz-varlink — whole varlink requests through the daemon's own server and methods: a client
 * connects to the socket of a VarlinkManager (varlink_manager_new(), as manager.c builds it),
 * writes the input, shuts its side down and reads every reply, while the server runs in the
 * daemon's event loop (accept, reads, NUL framing, JSON, dispatch, the io.bigtcpd.Manager methods,
 * replies, Monitor streams, closing). Nothing inside daemon/ is stubbed.
 *
 * Behind it is a real Engine with its Sync (made without a Netlink), a policy, and seven devices
 * the fake kernel of fuzz-engine.c announced and the engine itself took to their states, once,
 * at start: lo and br0 unmanaged, eth0 applied, eth1 rolled back (an operator's rollback through
 * control_rollback()), veth0 failed (the kernel refuses its write), and of veth1 and veth2, which
 * share a rollout of one slot, one in probation and one pending. The pump loop plays the kernel
 * for the engine: it answers the reads that ListDevices asks for (a reply, then the ack, through
 * sync_netlink_ops) and the dumps of a refresh, so that every call is answered; while a Monitor
 * stream is open it announces a device and takes it away again (real EVENT_ADDED and
 * EVENT_REMOVED, as Monitor's JSON).
 *
 * The client is the threat the server is built for, a local user other than root: it connects
 * with euid 65534 (SO_PEERCRED records the euid at connect()). Reload, Rollback and Retry are
 * then refused with PermissionDenied — so after every input every device is where it was, and no
 * request, stream or read is left over.
 *
 * Input: byte 0 picks the size of the pieces the client writes (1 + 61 * byte 0 bytes, so
 * messages arrive split and coalesced), the rest is the byte stream. Every complete reply must
 * be a JSON object with "parameters", and the connection must be gone afterwards. */
#include <event2/event.h>
#include <json-c/json.h>
#include <netlink/msg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "apply.h"
#include "control.h"
#include "fuzz-engine.h"
#include "fuzz.h"
#include "manager-varlink.h"

#define CLIENT_UID 65534
#define PUMP_SLACK 100000u /* event loop turns beyond the writes: a stuck connection is a finding */
#define MONITOR_EVENTS 4u  /* events a Monitor stream gets while it lasts */

static const char policy_yaml[] = "version: 1\n"
                                  "rollback:\n"
                                  "  window: 12h\n"
                                  "  interval: 1h\n"
                                  "  guards:\n"
                                  "    - { counter: link.tx_errors, max-increase: 0 }\n"
                                  "    - { counter: IpExt.InTruncatedPkts, max-increase: 100 }\n"
                                  "    - { counter: Tcp.RetransSegs, max-ratio: 0.02, per: Tcp.OutSegs }\n"
                                  "policies:\n"
                                  "  - name: fabric\n"
                                  "    match: { name: [\"eth*\"], kind: [device] }\n"
                                  "    ipv6: { gso-max-size: 185000, gro-max-size: 185000 }\n"
                                  "    ipv4: { gso-max-size: max, gro-max-size: max }\n"
                                  "    rollback: { guards: [] }\n"
                                  "  - name: containers\n"
                                  "    match: { kind: [veth] }\n"
                                  "    ipv6: { gro-max-size: max }\n"
                                  "    rollout: { max-parallel: 1 }\n";

#define IFF_UP_ 1
#define IFF_LOOPBACK_ 8
#define SIZES_64K {65536, 65536, 65536, 65536}

static const FuzzLink links[] = {
        {.ifindex = 1, .ifname = "lo", .flags = IFF_UP_ | IFF_LOOPBACK_, .sizes = SIZES_64K, .ipv4 = true,
         .tso_max_size = 524280},
        {.ifindex = 2, .ifname = "eth0", .flags = IFF_UP_, .mac = {0x0c, 0x42, 0xa1, 0, 0, 2}, .sizes = SIZES_64K,
         .ipv4 = true, .tso_max_size = 524280},
        {.ifindex = 3, .ifname = "eth1", .flags = IFF_UP_, .mac = {0x0c, 0x42, 0xa1, 0, 0, 3}, .sizes = SIZES_64K,
         .ipv4 = true, .tso_max_size = 524280},
        {.ifindex = 4, .ifname = "veth0", .kind = "veth", .flags = IFF_UP_, .mac = {0x02, 0, 0, 0, 0, 4},
         .sizes = SIZES_64K, .ipv4 = true, .tso_max_size = 524280, .refuse = -EINVAL,
         .extack = "gro_max_size too large"},
        {.ifindex = 5, .ifname = "veth1", .kind = "veth", .flags = IFF_UP_, .mac = {0x02, 0, 0, 0, 0, 5},
         .sizes = SIZES_64K, .ipv4 = true, .tso_max_size = 524280},
        {.ifindex = 6, .ifname = "br0", .kind = "bridge", .flags = IFF_UP_, .mac = {0x02, 0, 0, 0, 0, 6},
         .sizes = SIZES_64K, .ipv4 = true, .tso_max_size = 524280},
        {.ifindex = 7, .ifname = "veth2", .kind = "veth", .flags = IFF_UP_, .mac = {0x02, 0, 0, 0, 0, 7},
         .sizes = SIZES_64K, .ipv4 = true, .tso_max_size = 524280},
};

/* announced and taken away while a Monitor stream is open */
static const FuzzLink visitor = {.ifindex = 100, .ifname = "dummy0", .kind = "dummy", .flags = IFF_UP_,
                                 .mac = {0x02, 0, 0, 0, 0, 100}, .sizes = SIZES_64K, .ipv4 = true,
                                 .tso_max_size = 65536};

static struct event_base *base;
static FuzzKernel kernel;
static FuzzClock clock_;
static Engine *engine;
static Sync *sync_;
/* the engine's own watchers (the sync's, the set's) and the daemon's (the set's), which every
 * input leaves: a Monitor stream adds one to the daemon's */
static size_t engine_watches, daemon_watches;
static PolicySet *policy; /* the one every namespace runs */
static FuzzNetns ns;      /* bigtcpd's own namespace, run by engine and sync_, and its Control */
static WorkerPool *workers;
static VarlinkManager *manager;
static DeviceState states[ELEMENTSOF(links)];
static struct utsname uts;
static char dir[1024], sock_path[sizeof(dir) + 32];
static bool as_root;
static uint64_t stats64[32];

static void cleanup(void) {
        varlink_manager_free(manager); /* removes the socket file */
        manager = NULL;
        worker_pool_free(workers);
        workers = NULL;
        fuzz_netns_free(&ns); /* the engine and sync with it */
        sync_ = NULL;
        engine = NULL;
        policy_set_free(policy);
        policy = NULL;
        fuzz_kernel_done(&kernel);
        if (base)
                event_base_free(base);
        base = NULL;
        if (dir[0])
                fuzz_dir_remove(dir);
}

static void set_up_engine(void) {
        EngineConfig cfg = {.runtime_dir = dir, .hostname = "fuzz-host", .kernel_release = uts.release};
        static char proc_net[sizeof(dir) + 16];
        PolicyErrors errs = {};
        PolicySet *p;
        Device *d;

        /* no SNMP files: the namespace-wide guards are inactive (GetStatus names them) */
        snprintf(proc_net, sizeof(proc_net), "%s/no-proc-net", dir);
        cfg.proc_net = proc_net;
        fuzz_clock_init(&clock_);
        fuzz_kernel_init(&kernel);
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                fuzz_kernel_add_link(&kernel, &links[i]);
        FUZZ_ASSERT(engine_new(base, &cfg, &clock_.clock, -1, &kernel.transport, &apply_writer_ops,
                               &apply_probation_ops, &engine) == 0);
        kernel.engine = engine;
        p = policy_set_new();
        FUZZ_ASSERT(p);
        FUZZ_ASSERT(policy_parse_buffer(p, "/etc/bigtcpd/bigtcpd.yaml", policy_yaml, strlen(policy_yaml), &errs) == 0);
        policy_set_scope(p, &(HostIdentity){.hostname = cfg.hostname, .kernel_release = cfg.kernel_release});
        policy = p;
        FUZZ_ASSERT(sync_new(engine, NULL, 0, &sync_) == 0);
        fuzz_netns_new(base, engine, sync_, policy, &ns);
        engine_watches = event_watch_count(&engine->events);
        daemon_watches = event_watch_count(control_events(&ns.control));
        /* Plan and Validate in this process, where the sanitizers see them */
        FUZZ_ASSERT(worker_pool_new(base, WORKER_IN_PROCESS, &workers) == 0);
        ns.control.workers = workers;

        /* the first sync, and what the engine does with it */
        netns_start(ns.own, NULL, 0);
        fuzz_kernel_answer(&kernel, sync_, stats64);
        FUZZ_ASSERT(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
        /* an operator's rollback, as root would ask for it */
        FUZZ_ASSERT(control_rollback(&ns.control, "eth1", NULL, NULL) == 0);
        fuzz_kernel_answer(&kernel, sync_, stats64);
        FUZZ_ASSERT(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
        fuzz_engine_check(engine, &kernel);

        unsigned seen = 0;
        for (size_t i = 0; i < ELEMENTSOF(links); i++) {
                d = device_get(&engine->devices, links[i].ifindex);
                FUZZ_ASSERT(d);
                states[i] = d->life.state;
                seen |= 1u << d->life.state;
        }
        FUZZ_ASSERT(engine->settled_once);
        if (seen != ((1u << _DEVICE_STATE_MAX) - 1) - (1u << DEVICE_UNSUPPORTED)) {
                for (size_t i = 0; i < ELEMENTSOF(links); i++)
                        fprintf(stderr, "fuzz-varlink: %s is %s\n", links[i].ifname, device_state_to_string(states[i]));
                fprintf(stderr, "fuzz-varlink: the devices are not in the states this target is about\n");
                abort();
        }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        fuzz_quiet();
        as_root = geteuid() == 0;
        FUZZ_ASSERT(uname(&uts) == 0);
        for (size_t i = 0; i < ELEMENTSOF(stats64); i++)
                stats64[i] = i * 1000003u;
        base = event_base_new();
        FUZZ_ASSERT(base);
        /* 0755 on tmpfs (/dev/shm is 1777): the client connects as CLIENT_UID */
        fuzz_dir_new("/dev/shm", "varlink", dir, sizeof(dir));
        snprintf(sock_path, sizeof(sock_path), "%s/" VARLINK_INTERFACE, dir);
        atexit(cleanup);
        set_up_engine();
        if (varlink_manager_new(base, &ns.control, sock_path, &manager) < 0) {
                fprintf(stderr, "fuzz-varlink: cannot listen on %s\n", sock_path);
                abort();
        }
        return 0;
}

static int client_connect(void) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd, r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        FUZZ_ASSERT(fd >= 0);
        memcpy(sa.sun_path, sock_path, strlen(sock_path));
        if (as_root)
                FUZZ_ASSERT(seteuid(CLIENT_UID) == 0);
        r = connect(fd, (struct sockaddr *) &sa, sizeof(sa));
        if (r < 0)
                fprintf(stderr, "fuzz-varlink: cannot connect to %s as uid %d: %m\n", sock_path,
                        as_root ? CLIENT_UID : (int) geteuid());
        if (as_root)
                FUZZ_ASSERT(seteuid(0) == 0);
        FUZZ_ASSERT(r == 0);
        return fd;
}

/* Every NUL-terminated reply is a JSON object the protocol allows. A last piece without NUL
 * can be the error reply of a connection the server aborted without waiting: not checked. */
static void check_replies(const char *buf, size_t len) {
        size_t start = 0;

        for (size_t i = 0; i < len; i++) {
                if (buf[i] != '\0')
                        continue;
                json_object *o = json_tokener_parse(buf + start), *v;
                if (!o || !json_object_is_type(o, json_type_object)) {
                        fprintf(stderr, "fuzz-varlink: reply is not a JSON object: %.*s\n", (int) (i - start),
                                buf + start);
                        abort();
                }
                FUZZ_ASSERT(json_object_object_get_ex(o, "parameters", &v) && json_object_is_type(v, json_type_object));
                if (json_object_object_get_ex(o, "error", &v))
                        FUZZ_ASSERT(json_object_is_type(v, json_type_string));
                if (json_object_object_get_ex(o, "continues", &v))
                        FUZZ_ASSERT(json_object_is_type(v, json_type_boolean));
                fuzz_check_json(o);
                json_object_put(o);
                start = i + 1;
        }
}

/* The kernel announces the visitor, or takes it away: a link event through the real handler. */
static void visit(bool add) {
        struct nl_msg *msg = fuzz_link_message(&visitor, add ? RTM_NEWLINK : RTM_DELLINK, 0, 0, NULL);

        sync_netlink_ops.message(sync_, nlmsg_hdr(msg), NETLINK_EVENT);
        nlmsg_free(msg);
        sync_netlink_ops.batch_end(sync_);
}

static void pump(void) {
        FUZZ_ASSERT(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
        fuzz_kernel_answer(&kernel, sync_, stats64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *replies = NULL;
        size_t n_replies = 0, cap = 0, off = 1, chunk;
        unsigned events = 0;
        bool shut = false, closed = false;
        int fd;

        if (size < 1)
                return 0;
        chunk = 1 + 61 * (size_t) data[0];
        fd = client_connect();

        for (unsigned turn = 0; !closed; turn++) {
                if (turn >= size / chunk + PUMP_SLACK) {
                        fprintf(stderr, "fuzz-varlink: connection still open after %u loop turns\n", turn);
                        abort();
                }
                if (off < size) {
                        size_t n = size - off < chunk ? size - off : chunk;
                        ssize_t k = send(fd, data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
                        if (k > 0)
                                off += (size_t) k;
                        else if (k < 0 && errno != EAGAIN)
                                off = size; /* the server hung up on us (EPIPE, ECONNRESET) */
                } else if (!shut) {
                        (void) shutdown(fd, SHUT_WR);
                        shut = true;
                }
                pump();
                /* a Monitor stream sees a device come and go */
                if (event_watch_count(control_events(&ns.control)) > daemon_watches && events < MONITOR_EVENTS && turn % 4 == 0)
                        visit(events++ % 2 == 0);
                for (;;) {
                        if (cap - n_replies < 65536) {
                                cap = cap ? cap * 2 : 131072;
                                replies = realloc(replies, cap);
                                FUZZ_ASSERT(replies);
                        }
                        ssize_t k = recv(fd, replies + n_replies, cap - n_replies, MSG_DONTWAIT);
                        if (k > 0) {
                                n_replies += (size_t) k;
                                continue;
                        }
                        if (k == 0 || errno != EAGAIN)
                                closed = true;
                        break;
                }
        }
        close(fd);
        /* the server notices the close on its next turn, if it has not closed first */
        for (unsigned turn = 0; varlink_server_connections(varlink_manager_server(manager)) > 0; turn++) {
                FUZZ_ASSERT(turn < 1000);
                pump();
        }
        if (events % 2)
                visit(false);
        pump();

        /* no stream, read or request is left, and a client other than root changed nothing */
        FUZZ_ASSERT(event_watch_count(&engine->events) == engine_watches);
        FUZZ_ASSERT(event_watch_count(control_events(&ns.control)) == daemon_watches);
        FUZZ_ASSERT(worker_pool_running(workers) + worker_pool_queued(workers) == 0);
        FUZZ_ASSERT(kernel.n == 0 && writer_inflight(engine->writer) == 0 && writer_idle(engine->writer));
        FUZZ_ASSERT(engine->devices.n_devices == ELEMENTSOF(links) && !device_get(&engine->devices, visitor.ifindex));
        for (size_t i = 0; i < ELEMENTSOF(links); i++) {
                const Device *d = device_get(&engine->devices, links[i].ifindex);
                FUZZ_ASSERT(d && d->life.state == states[i]);
        }
        fuzz_engine_check(engine, &kernel);
        check_replies(replies, n_replies);
        free(replies);
        return 0;
}
