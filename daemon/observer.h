/* observer.h — the eBPF observer (observer.bpf.c): what the stack does to every device of every
 * namespace, counted in the kernel and read here once per tick: each entry when first asked for
 * in the tick, a map whole (in batches) only at scale. Devices are named by (the inode of their network namespace, ifindex). Without the
 * kernel's support (no BTF, no CAP_BPF/CAP_PERFMON, lockdown, an older kernel) it does not load,
 * and the daemon falls back on packet sockets and namespace-wide counters (the reason is kept
 * for status). Tests use a fake one, whose entries they set. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "observer-map.h"

typedef enum ObserverMode {
        OBSERVER_MODE_AUTO,          /* eBPF when it loads, else packet sockets */
        OBSERVER_MODE_EBPF,          /* eBPF or nothing: the daemon does not start without it */
        OBSERVER_MODE_PACKET_SOCKET, /* today's packet sockets and namespace-wide counters */
        _OBSERVER_MODE_MAX,
        _OBSERVER_MODE_INVALID = -EINVAL,
} ObserverMode;

const char *observer_mode_to_string(ObserverMode m);
ObserverMode observer_mode_from_string(const char *s);

typedef struct Observer Observer;

/* Load the object and attach its programs. On failure *ret_why (allocated) says why in words for
 * status ("the kernel has no BTF (/sys/kernel/btf/vmlinux)", "loading the eBPF object: Operation
 * not permitted (CAP_BPF and CAP_PERFMON needed)", …). `now_usec`: CLOCK_MONOTONIC. */
int observer_new(Observer **ret, char **ret_why);
/* observer_new() in two halves: the checks that need no time (BTF, the own namespace, the loader
 * there to run) here, and the object loaded by its loader meanwhile (observer-loader.h: ~90 ms,
 * the kernel's BTF read and parsed, the verifier, the maps made, in a process of its own) while
 * the caller goes on with its start; observer_wait() takes what it sent (waiting for it, at most a
 * minute) and says how the load went (as observer_new()). Nothing else may be called before that
 * but observer_free(), which waits for it. The loader is $BIGTCPD_OBSERVER_LOADER, else the one
 * beside the running program (a build tree), else the package's. */
int observer_start(Observer **ret, char **ret_why);
int observer_wait(Observer *o, char **ret_why);
/* For tests: a map in memory that observer_test_set() fills, never the kernel's. `own_netns` the
 * inode that stands for the daemon's own namespace. */
int observer_new_fake(uint32_t own_netns, Observer **ret);
void observer_free(Observer *o);

/* CLOCK_REALTIME, microseconds: when it was loaded (its counts begin); 0 for a fake one. */
uint64_t observer_loaded_usec(const Observer *o);
/* The inode of the daemon's own network namespace (a device of it has no NetnsId). */
uint32_t observer_own_netns(const Observer *o);

/* Start a new snapshot, the one the getters below answer from: each of its entries is read from
 * the kernel when first asked for (one lookup per key; past OBSERVER_FEW keys of a map, the map
 * whole in batches). `now_usec` CLOCK_MONOTONIC; with max_age_usec > 0 the snapshot stays when it
 * is younger. */
int observer_read(Observer *o, uint64_t now_usec, uint64_t max_age_usec);
/* observer_read(), told that `devices` devices' counts will be asked for in the snapshot: past
 * OBSERVER_FEW the devices' map is read whole at the first, not after OBSERVER_FEW lookups. */
int observer_read_for(Observer *o, uint64_t now_usec, uint64_t max_age_usec, size_t devices);
/* When the last snapshot began (CLOCK_MONOTONIC; 0: never), and how long the last whole read of a
 * map took. */
uint64_t observer_read_at(const Observer *o);
uint64_t observer_read_cost_usec(const Observer *o);
/* How many times a map was read whole (in batches) since it was loaded. */
uint64_t observer_whole_reads(const Observer *o);
/* How many single keys were looked up in the kernel since it was loaded (once per key and
 * snapshot, found or not). */
uint64_t observer_lookups(const Observer *o);
/* Entries in the kernel's maps: devices, (device, reason) drops, thresholds (counted in batches;
 * the snapshot is not filled by it). */
void observer_entries(Observer *o, size_t *ret_devs, size_t *ret_drops, size_t *ret_nears);
/* The bytes the daemon's snapshot of them takes (its arrays' room), for tests. */
size_t observer_snapshot_bytes(const Observer *o);
/* The bytes of kernel memory the maps hold (as the kernel reports them: memlock), 0 unknown. */
uint64_t observer_map_bytes(const Observer *o);

/* A device's counts at the last read; zeros (and -ENOENT) when it carried nothing yet. */
int observer_get(Observer *o, uint32_t netns, int ifindex, struct observer_dev *ret);
/* Its drops of one reason, or of every reason when `reason` is UINT32_MAX. */
uint64_t observer_drops(Observer *o, uint32_t netns, int ifindex, uint32_t reason);
/* Its thresholds' counts at the last read (-ENOENT: none set). */
int observer_near_get(Observer *o, uint32_t netns, int ifindex, struct observer_near *ret);
/* Count, from now, its packets longer than len[i] for size i (0: not counted), and the largest
 * above OBSERVER_BIG; the counts start from zero. */
int observer_near_set(Observer *o, uint32_t netns, int ifindex, const uint32_t len[static 4]);
/* Stop counting thresholds for it. */
void observer_near_clear(Observer *o, uint32_t netns, int ifindex);
/* Count, from now, what the device receives of packets longer than len[family] (OBSERVER_IPV6,
 * OBSERVER_IPV4; 0: not counted), and how many of those it dropped after receiving them: the peer
 * of a device whose GSO step is proven by delivery (struct observer_deliv). Counts start from
 * zero. -ENOSPC past OBSERVER_DELIVS_MAX devices. */
int observer_deliv_set(Observer *o, uint32_t netns, int ifindex, const uint32_t len[static 2]);
/* Its counts now (a lookup in the kernel, not the snapshot); -ENOENT when none was set. */
int observer_deliv_get(Observer *o, uint32_t netns, int ifindex, struct observer_deliv *ret);
void observer_deliv_clear(Observer *o, uint32_t netns, int ifindex);
/* How many devices' deliveries are counted. */
size_t observer_delivs(const Observer *o);
/* The device went: its entries go (kernel and snapshot). */
void observer_forget(Observer *o, uint32_t netns, int ifindex);

/* The kernel's drop reasons (enum skb_drop_reason, read from the running kernel's BTF), by their
 * names lower case without SKB_DROP_REASON_: "netfilter_drop" → 12. -ENOENT when unknown;
 * -EOPNOTSUPP when there is no BTF to read them from. The table is read once. */
int observer_drop_reason(const char *name, uint32_t *ret);
/* All of them (NULL-terminated, borrowed), for did-you-mean; NULL without BTF. */
const char *const *observer_drop_reason_names(size_t *ret_n);
/* Whether this kernel has BTF, without reading it (its reasons, once read, decide): parsing it
 * takes tens of milliseconds of a start, which only a drop reason named needs. */
bool observer_kernel_has_btf(void);

/* Benchmarks: `n` made-up devices of namespace `netns` (ifindex 1..n) in the kernel's maps, each
with counts and one drop reason, as a host with that many busy devices has. */
int observer_bench_fill(Observer *o, uint32_t netns, size_t n);

/* Tests: set a device's counts, drops, or the counts of its thresholds, as the kernel would. */
int observer_test_set(Observer *o, uint32_t netns, int ifindex, const struct observer_dev *v);
int observer_test_set_drops(Observer *o, uint32_t netns, int ifindex, uint32_t reason, uint64_t n);
int observer_test_set_deliv(Observer *o, uint32_t netns, int ifindex, const uint64_t received[static 2],
                            const uint64_t dropped[static 2]);
int observer_test_set_near(Observer *o, uint32_t netns, int ifindex, const uint64_t count[static 4],
                           const uint32_t largest[static 4]);
/* … and of the packets received near it, those dropped after ([family]) */
int observer_test_set_near_dropped(Observer *o, uint32_t netns, int ifindex, const uint64_t dropped[static 2]);
