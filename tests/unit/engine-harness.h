/* engine-harness.h — the decision engine driven without a kernel: an Engine on a fake clock, a
 * fake transport that records every request and a small fake kernel that answers them in order,
 * a Sync with no netlink socket fed the messages a kernel would send, bigtcpd's own namespace and
 * its one-namespace set around them (the Control the daemon's API reads), a policy from YAML
 * text, and a recorder of the engine's events. No test sleeps: the clock is the harness's.
 * Compiled once (engine-harness.c, a static library of tests/unit/meson.build) and linked by the
 * tests that include this. */
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
#include <sys/stat.h>
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

/* Where h_new() makes its runtime and /proc/net directories: "/tmp" unless the test sets another
 * before (test-model.c wants a tmpfs). */
extern const char *h_tmpdir;

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
        int link;          /* IFLA_LINK when not 0 (a veth's peer) */
        int link_netnsid;  /* IFLA_LINK_NETNSID when has_link_netnsid */
        bool has_link_netnsid;
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
extern bool h_transitions_seen[_DEVICE_STATE_MAX][_DEVICE_STATE_MAX];

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

/* ---- set up, start, tear down ---- */

/* A harness running `yaml` (which must parse), with lo (ifindex 1) in its fake kernel, not
 * started: the one the test uses from now on (the one before goes; h_teardown() frees it if the
 * test fails). */
Harness *h_new(const char *yaml);
/* The first sync: the links the fake kernel has are dumped, then the engine decides. */
void h_start(Harness *h);
/* The first sync of a run that finds `entries` (an earlier run's state file, taken over): the
 * link dump, the route dump, then the engine decides. */
void h_start_from(Harness *h, StateEntry *entries, size_t n);
/* A restart: the state file this run leaves (saved, as at a clean stop) is loaded, the harness
 * goes, and a new one on `yaml` starts from those entries with the same links, at the sizes the
 * kernel kept, as bigtcpd's next run would. Returns the new harness; `h` is freed. */
Harness *h_restart(Harness *h, const char *yaml);
/* Everything of the harness goes; then no illegal transition may have been seen. */
void h_free(Harness *h);
/* A cmocka teardown: a failed test leaves its harness behind; nothing of it may leak. */
int h_teardown(void **state);
/* An nftw() callback that removes what it is given (FTW_DEPTH | FTW_PHYS: a whole tree). */
int h_rm(const char *path, const struct stat *st, int type, struct FTW *ftw);
/* Take the runtime directory away: the state file cannot be written any more. */
void h_break_runtime_dir(Harness *h);

/* ---- clock ---- */

/* Every clock moves `usec` on; nothing fires by itself (h_tick() does). */
void h_advance(Harness *h, uint64_t usec);
/* One fake timer tick of the probation set after `usec`, and the kernel's answers to it. */
void h_tick(Harness *h, uint64_t usec);
/* Let `usec` pass in ticks of `step`. */
void h_run(Harness *h, uint64_t usec, uint64_t step);
/* The put-back throttle's timer fires (the fake clock is the test's to move first). */
void h_fire_throttle(Harness *h);

/* ---- links ---- */

/* The present link with `ifindex` (NULL: none), a link by its FakeLink id (gone or not). */
FakeLink *h_link(Harness *h, int ifindex);
FakeLink *h_link_by_id(Harness *h, unsigned id);
/* The engine's device of `ifindex` (NULL: none), and its state (it must be there). */
Device *h_dev(Harness *h, int ifindex);
DeviceState h_state(Harness *h, int ifindex);
/* A device's pending reason as the API shows it; "-" when it is not pending. */
const char *h_pending_reason(Harness *h, int ifindex);

/* A link in the fake kernel, at 65536 everywhere; announced by an event once the engine runs
 * (before: found by the first dump). h_link_add(): a veth that reports the IPv4 sizes. */
FakeLink *h_link_add_full(Harness *h, int ifindex, const char *name, const char *kind, bool ipv4);
FakeLink *h_link_add(Harness *h, int ifindex, const char *name);
/* The kernel renames or deletes the link, and says so. */
void h_link_rename(Harness *h, int ifindex, const char *name);
void h_link_del(Harness *h, int ifindex);
/* Someone else changes the sizes: the kernel sends no event for that. */
void h_link_set_sizes(Harness *h, int ifindex, Sizes s);

/* The kernel's message about `l` (RTM_NEWLINK, RTM_DELLINK), with IFLA_STATS64 when `stats` is
 * given, fed to the sync as coming from `source` with `seq`. */
void h_feed(Harness *h, int type, const FakeLink *l, const struct rtnl_link_stats64 *stats,
            NetlinkSource source, uint32_t seq);
/* The end of a batch of messages, as the loop ends one. */
void h_batch_end(Harness *h);
/* What the loop does after a change that may queue writes. */
void h_flush(Harness *h);
/* A link dump, as the first sync and every re-read (a reload, the verify timer) do: every link,
 * then its end, in one batch. start() of sync.c counts dumps; with no netlink socket it is not
 * called, so the harness counts them as it would. */
void h_dump(Harness *h);

/* ---- the kernel's answers ---- */

/* The oldest request not answered (NULL: none), and how many are not. */
Request *h_next_request(Harness *h);
size_t h_unanswered(const Harness *h);
/* Answer the oldest request. A write is acked with `error`; on 0 the link it was sent to takes
 * its sizes (if that link is still there). A read is answered, on 0, with a reply carrying the
 * link's attributes (no stats), then acked. The reply comes from the link the request was sent
 * to, also after it is gone (a reply already queued). */
void h_answer(Harness *h, int error);
/* What the kernel would say: done, or -ENODEV for a link that is gone. */
void h_answer_kernel(Harness *h);
/* Answer everything, as the kernel would, batch after batch, until the engine sends nothing more. */
void h_answer_all(Harness *h);
/* The statistics dump asked for: one RTM_NEWSTATS per present link, then its end. */
void h_answer_stats_dump(Harness *h);
/* The device is read from the kernel again (what `show` does before it answers), and answered. */
void h_read(Harness *h, int ifindex);

/* ---- requests, as the tests ask about them ---- */

/* The writes to `ifindex` (0: any) sent since request `from`; the last one to it (NULL: none). */
size_t h_count_writes(const Harness *h, int ifindex, size_t from);
const Request *h_last_write(const Harness *h, int ifindex);

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

/* The states device `ifindex` entered since event `from`, as "pending probation applied". */
const char *h_path(const Harness *h, int ifindex, size_t from, char *buf, size_t size);

#define assert_path(h, ifindex, from, want)                                                                 \
        do {                                                                                                \
                char _buf_[1024];                                                                           \
                assert_string_equal(h_path((h), (ifindex), (from), _buf_, sizeof(_buf_)), (want));          \
        } while (0)

/* The last event of `type` for `ifindex` (0: any) since event `from`, or NULL; how many there
 * are. */
const Recorded *h_find_event(const Harness *h, EventType type, int ifindex, size_t from);
size_t h_count_events(const Harness *h, EventType type, int ifindex, size_t from);

/* ---- files ---- */

/* `text` into dir/name, made or emptied first. */
void h_write_file(const char *dir, const char *name, const char *text);
/* Write the namespace's counters where the engine reads them (after changing h->ip_… etc.). */
void h_write_snmp(Harness *h);

/* ---- policy ---- */

/* The host as the harness's policies are scoped for. */
#define H_HOST ((HostIdentity){.hostname = "host", .kernel_release = "6.8.0"})

/* `yaml` parsed (it must) and scoped for H_HOST. */
PolicySet *h_parse_policy(const char *yaml);
/* A reload: the new policy is swapped in, then every link is read again (as reloader_reload()
 * does with sync_verify()). */
void h_reload(Harness *h, const char *yaml);
/* The policy file `config` loaded by a reloader, as at start, whose policy the engine runs from
 * now on, and a try beside it (its record in the runtime directory). */
void h_reloader_new(Harness *h, const char *config, Reloader **ret_r, PolicyTry **ret_t);
