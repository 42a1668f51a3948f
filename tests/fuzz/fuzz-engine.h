/* fuzz-engine.h — what the fuzzers that run the daemon's engine share: a runtime directory on
 * tmpfs, a fake clock, a fake kernel (the WriterTransport the engine sends its requests to, and
 * the links that answer them and the engine's dumps), and the invariants of an engine. The
 * engine, its Sync and everything above them are the daemon's own; only the kernel is played. */
#pragma once

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>

#include "control.h"
#include "engine.h"
#include "netns-set.h"
#include "sync.h"

/* The directory <parent>/bigtcpd-fuzz-<name>.<pid> (mode 0755), made empty; those of fuzzers
 * that are gone (a crash ends the process without atexit()) are removed first. */
void fuzz_dir_new(const char *parent, const char *name, char *buf, size_t size);
/* Remove the directory and what is in it. */
void fuzz_dir_remove(const char *dir);
/* Remove the state files (state.json, state.journal) a StateStore wrote into `dir`. */
void fuzz_state_files_remove(const char *dir);

/* A clock the engine reads (EngineConfig's Clock): it moves only when told, so that a run is
 * the same every time. */
typedef struct FuzzClock {
        Clock clock;
        uint64_t monotonic, boottime, realtime;
} FuzzClock;

void fuzz_clock_init(FuzzClock *c);
void fuzz_clock_advance(FuzzClock *c, uint64_t usec);

/* A request the engine sent and the kernel has not answered: the writer's ring, as seen from the
 * kernel's side. */
typedef struct FuzzRequest {
        uint32_t seq;
        uint16_t type; /* RTM_NEWLINK (a write) or RTM_GETLINK */
        int ifindex;
        bool stats; /* RTM_GETLINK without RTEXT_FILTER_SKIP_STATS */
        Sizes sizes; /* what a write carries */
        bool ipv4;   /* … with the IPv4 pair */
} FuzzRequest;

/* A link of the fake kernel. */
typedef struct FuzzLink {
        int ifindex;
        char ifname[IFNAMSIZ];
        const char *kind;
        unsigned flags;
        uint8_t mac[6];
        Sizes sizes;
        bool ipv4; /* reports gso/gro_ipv4_max_size */
        uint32_t tso_max_size;
        int refuse; /* -errno that writes to it are answered with; 0: they are taken */
        const char *extack;
} FuzzLink;

typedef struct FuzzKernel {
        WriterTransport transport; /* for engine_new() */
        Engine *engine;            /* sent writes are checked against its devices */
        uint32_t seq;
        FuzzRequest pending[WRITER_INFLIGHT_MAX];
        unsigned head, n;
        unsigned long long sent, writes;
        FuzzLink *links;
        size_t n_links;
        bool stats_dump; /* a statistics dump asked for and not answered yet */
        unsigned long long stats_dumps;
} FuzzKernel;

void fuzz_kernel_init(FuzzKernel *k);
void fuzz_kernel_done(FuzzKernel *k);
FuzzLink *fuzz_kernel_add_link(FuzzKernel *k, const FuzzLink *l);
/* The oldest request not answered, or NULL. */
const FuzzRequest *fuzz_kernel_oldest(const FuzzKernel *k);
const FuzzRequest *fuzz_kernel_find(const FuzzKernel *k, uint32_t seq);
/* Request `seq` was acked; those before it never will be (as writer_ack() takes it). */
void fuzz_kernel_acked(FuzzKernel *k, uint32_t seq);
/* Every ack was lost (ENOBUFS on the write socket). */
void fuzz_kernel_acks_lost(FuzzKernel *k);
FuzzLink *fuzz_kernel_link(FuzzKernel *k, int ifindex);

/* The kernel's RTM_NEWLINK (or RTM_DELLINK) for `l`: what a dump part, an event or a reply
 * carries; with `stats`, IFLA_STATS64 (`stats64`, 32 counters). Free with nlmsg_free(). */
struct nl_msg *fuzz_link_message(const FuzzLink *l, int type, unsigned flags, uint32_t seq, const uint64_t *stats64);

/* Play the kernel until the engine waits for nothing: every request answered in order (a reply
 * first for a read, then the ack; a write changes the link's sizes unless the link refuses it),
 * every dump answered with the links (and no routes), each batch ended with batch_end. */
void fuzz_kernel_answer(FuzzKernel *k, Sync *s, const uint64_t *stats64);

/* bigtcpd's own namespace run by an engine and a sync the fuzzer made on its FuzzKernel (both
 * taken), in a set of its own (netns_set_new_alone(): no descriptor opened, no other namespace
 * looked for), running `policy` as the daemon gives it to every namespace (netns_set_reloader_ops:
 * a reference each, so one parsed policy serves every input); `control` is the daemon's Control
 * over them (no reloader, workers or try: the fuzzer sets what it calls). */
typedef struct FuzzNetns {
        Netns *own;
        NetnsSet *set;
        Control control;
} FuzzNetns;

void fuzz_netns_new(struct event_base *base, Engine *e, Sync *s, PolicySet *policy, FuzzNetns *ret);
/* The set, then the namespace with its engine and sync. */
void fuzz_netns_free(FuzzNetns *n);

/* The engine's invariants; `k` (may be NULL) is what it sent. Aborts on a broken one. */
void fuzz_engine_check(const Engine *e, const FuzzKernel *k);
/* An EventFn (userdata: the Engine): every state change is a transition of the lifecycle, on a
 * device in the table, and every event formats as Monitor sends it. */
void fuzz_check_event(const Event *ev, void *userdata);
/* Every device and the status as the control API shows them: valid JSON, no NaN. */
void fuzz_check_views(Control *c);
