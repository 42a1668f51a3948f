/* device.h — one network device as bigtcpd knows it, and the table of them (a hash on ifindex).
 * The struct is grouped by owner, each group a member named for it: what the kernel said (sync.c,
 * the device's own fields), its step and records (`life` and `record`: device-lifecycle.c), the match
 * and a reconcile owed (apply.c), and the parts the writer, the probation set, the evidence, the
 * rollouts and the state store keep for their own bookkeeping. Only the owner of a group writes it
 * (tests/layering/check-layering.py holds the lifecycle's to it). */
#pragma once

#include <linux/if_link.h>
#include <sys/queue.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sizes.h"
#include "util.h"

/* The device states, as bigtcpd(8) DEVICE STATES names them for operators. The legal transitions between
 * them are listed once, in device-lifecycle.c. */
typedef enum DeviceState {
        DEVICE_UNMANAGED,   /* matches no policy; bigtcpd has not written it (or restored it) */
        DEVICE_PENDING,     /* bigtcpd wants other sizes: a write is queued, in flight or waiting */
        DEVICE_PROBATION,   /* written; guards are watching until the window ends */
        DEVICE_APPLIED,     /* at the policy's sizes, and the window passed */
        DEVICE_ROLLED_BACK, /* back at the sizes before bigtcpd's change, held there */
        DEVICE_FAILED,      /* the kernel refused the write */
        DEVICE_UNSUPPORTED, /* the kernel or device cannot take what the policy asks */
        _DEVICE_STATE_MAX,
        _DEVICE_STATE_INVALID = -EINVAL,
} DeviceState;

const char *device_state_to_string(DeviceState s);
DeviceState device_state_from_string(const char *s);

/* Why bigtcpd writes a device. */
typedef enum WriteCause {
        WRITE_CAUSE_NEW_DEVICE, /* the policy's sizes, to a device that appeared moments ago */
        WRITE_CAUSE_POLICY,     /* the policy's sizes (a reload, a rename, a start) */
        WRITE_CAUSE_PUT_BACK,   /* someone else changed them: bigtcpd's own go back */
        WRITE_CAUSE_RETRY,      /* an operator released a rolled-back or failed device */
        WRITE_CAUSE_ROLLBACK,   /* a guard tripped, or an operator rolled it back */
        WRITE_CAUSE_RESTORE,    /* it stopped matching: its original sizes go back */
        _WRITE_CAUSE_MAX,
        _WRITE_CAUSE_INVALID = -EINVAL,
} WriteCause;

const char *write_cause_to_string(WriteCause c);

/* A write of the policy's sizes (as opposed to one that takes sizes back). */
static inline bool write_cause_is_policy(WriteCause c) {
        return c == WRITE_CAUSE_NEW_DEVICE || c == WRITE_CAUSE_POLICY || c == WRITE_CAUSE_PUT_BACK ||
               c == WRITE_CAUSE_RETRY;
}

/* Where a device's write is (writer.c). */
typedef enum WritePhase {
        WRITE_IDLE,
        WRITE_QUEUED, /* in the writer's queue, not sent */
        WRITE_SENT,   /* sent; its ack has not come */
        _WRITE_PHASE_MAX,
        _WRITE_PHASE_INVALID = -EINVAL,
} WritePhase;

/* Where a device is in its policy's staged rollout (rollout.c). */
typedef enum RolloutPhase {
        ROLLOUT_NONE,
        ROLLOUT_WAITING, /* wants to be written; no slot free, or the rollout is halted */
        ROLLOUT_ACTIVE,  /* holds a slot: written, or in probation */
        _ROLLOUT_PHASE_MAX,
        _ROLLOUT_PHASE_INVALID = -EINVAL,
} RolloutPhase;

/* Why a pending device is not at its sizes yet. */
typedef enum PendingReason {
        PENDING_QUEUED,
        PENDING_IN_FLIGHT,
        PENDING_ROLLOUT_SLOT,
        PENDING_ROLLOUT_HALTED,
        PENDING_THROTTLED,
        _PENDING_REASON_MAX,
        _PENDING_REASON_INVALID = -EINVAL,
} PendingReason;

const char *pending_reason_to_string(PendingReason r);

typedef struct RouteEntry {
        uint8_t family;
        uint8_t dst_len;
        uint8_t tos;
        uint32_t table;
        uint32_t priority;
        uint8_t dst[16];
} RouteEntry;

/* Why a device was rolled back, kept for the status API and the state file. */
typedef struct RollbackRecord {
        char *counter;          /* the guard's counter, e.g. "link.tx_dropped"; "operator" */
        char *per;              /* with max-ratio: the counter the rise is divided by */
        uint64_t rise;          /* of `counter` since the baseline */
        uint64_t per_rise;      /* of `per` */
        double threshold;       /* max-increase, or max-ratio when `per` is set */
        bool namespace_wide;    /* an SNMP counter of the namespace */
        uint64_t realtime_usec; /* when (CLOCK_REALTIME) */
        Sizes from;             /* what the device held (or was being written) */
        Sizes to;               /* where it went back to */
} RollbackRecord;

int rollback_record_copy(const RollbackRecord *r, RollbackRecord **ret);
void rollback_record_free(RollbackRecord *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(RollbackRecord *, rollback_record_free);

/* A network namespace other than the daemon's own, as its devices name it: one for each managed
 * namespace (netns-set.c owns it), and every device of it points to it. */
typedef struct NetnsId {
        char *name;         /* its file name under the namespace directories */
        uint64_t cookie;    /* SO_NETNS_COOKIE: never handed out again while the host runs */
        uint64_t dev, ino;  /* of its nsfs file (stat) */
} NetnsId;

struct Probation;
struct Rollout;
struct Evidence;
typedef struct Device Device;

/* What few devices have (a veth of a pod has none of it): altnames, the routes that leave through
 * it (kept while a policy has match.route), its driver (looked up when a policy has match.driver).
 * Not part of every device: read it with device_extra_get() (all empty when there is none), write
 * it through device_extra(); it goes when nothing is left in it (device_extra_trim()). */
typedef struct DeviceExtra {
        char **altnames;
        RouteEntry *routes; /* routes whose output is this device (match.route) */
        char *driver;       /* ethtool.c, looked up when a policy asks */
        uint32_t n_routes;  /* (device_route_add() refuses more) */
        uint16_t n_altnames; /* (device_update() refuses more) */
        bool driver_looked_up;
} DeviceExtra;

/* What went wrong with a device and what was done about it: rollbacks, refused writes, sizes
 * someone else keeps changing. Most devices never need one, so it is not part of every device:
 * read it with device_history_get() (all zero when there is none), write it through
 * device_history(). */
typedef struct DeviceHistory {
        Sizes held_desired; /* while held: the policy's sizes when it was rolled back */
        Sizes failed_desired; /* the sizes of the last refused write */
        RollbackRecord *last_rollback;
        char *last_error;
        int last_errno; /* of the last refused write, kept until a write succeeds */
        unsigned n_rollbacks;
        /* apply.c: putting back what others changed, rate-limited */
        struct {
                uint64_t since_usec;
                unsigned n;
                bool throttled;
        } corrections;
} DeviceHistory;

/* The last sizes that passed their probation windows, distinct, the most recent last (the
 * oldest goes when a new one does not fit). */
#define PROVEN_SIZES_MAX 4
typedef struct ProvenSizes {
        Sizes items[PROVEN_SIZES_MAX];
        unsigned n;
} ProvenSizes;

void proven_sizes_add(ProvenSizes *p, const Sizes *s, bool ipv4);

/* A write's steps as one transaction (device-lifecycle.c, which says what each does). */
typedef enum WriteStep {
        WRITE_STEP_QUEUED, /* in the writer's queue: nothing of it is on disk or in effect yet */
        WRITE_STEP_BEGUN,  /* what a restart needs is on disk; the rollback target and window are its */
        WRITE_STEP_SENT,   /* in flight */
        _WRITE_STEP_MAX,
        _WRITE_STEP_INVALID = -EINVAL,
} WriteStep;

/* The write as device-lifecycle.c's transaction: its step, and what a refusal undoes. */
typedef struct WriteTxn {
        WriteStep step;
        bool orphaned; /* the device left its policy while this write was in flight */
        /* the rollback target it moved (and what it was), the window its own replaced (set aside
         * in the probation set; NULL: none) */
        bool last_good_moved, had_last_good;
        Sizes last_good;
        struct Probation *window_before;
} WriteTxn;

/* A write on its way: from writer_queue() until its ack has been handled. Only a device being
 * written needs one, so it is not part of every device. Grouped by owner, as Device is. */
typedef struct DeviceWrite {
        /* ---- writer.c: the request ---- */
        Sizes target;    /* what the queued or sent write carries */
        Sizes before;    /* `current` when it was sent */
        uint32_t seq;    /* of the sent write */
        unsigned baseline_dump; /* the statistics dump it waits for (0: none asked yet) */
        TAILQ_ENTRY(Device) link; /* in the queue, or among those waiting for baselines */
        bool waiting; /* among those waiting for baselines (else in the queue) */
        /* the device's link counters (struct rtnl_link_stats64 as the kernel gave it, cut to the
         * size this build knows) from just before the write; 0 bytes: none */
        uint16_t baseline_size;
        unsigned char baseline[sizeof(struct rtnl_link_stats64)];

        /* ---- device-lifecycle.c: the transaction ---- */
        WriteTxn txn;
} DeviceWrite;

/* The record of a write, made when the write is queued (NULL without memory) and dropped when it
 * is over (writer.c): in a pool, as devices are. */
DeviceWrite *device_write_begin(Device *d);
void device_write_end(Device *d);

/* A device's step of its lifecycle: device-lifecycle.c alone writes it (apply.c decides which step). */
typedef struct DeviceLife {
        /* its small members in the four bytes before `desired` (20 bytes in all, not 28) */
        DeviceState state : 8;
        uint8_t owned;  /* SizeMask: the sizes its policy names (SIZE_BITS_ALL fits a byte) */
        bool held;      /* rolled back, held against the policy's sizes of then (history->held_desired) */
        /* not written: its record could not be saved (tried again once the state file is written
         * again: lifecycle_state_recovered()) */
        bool unrecorded;
        Sizes desired;  /* where bigtcpd takes it: the policy's sizes, the originals, a rollback */
} DeviceLife;

/* What bigtcpd must give back, and where a rollback goes: device-lifecycle.c alone writes them (the
 * write's transaction, a pass, a rollback, a restart's resume, a move between namespaces); the
 * state file keeps them. */
typedef struct DeviceRecord {
        Sizes original;  /* before bigtcpd's first write, kept until given back */
        Sizes last_good; /* before bigtcpd's most recent change: where a rollback goes */
        /* sizes that passed a window since the originals were recorded: still good when the
         * device has them again (a try reverted and tried again, a rollback retried), though
         * their new window has not ended. A ProvenSizes, cut for the common case: nearly every
         * device has none or one, so the most recent is kept here and only the older ones (up to
         * PROVEN_SIZES_MAX - 1) are allocated. Read and written through device_proven_*(). */
        Sizes proven_last;    /* n_proven >= 1 */
        Sizes *proven_older;  /* n_proven >= 2: the n_proven - 1 before proven_last, the oldest first */
        unsigned written; /* SizeMask: the sizes bigtcpd owns on the device now */
        bool has_original;
        bool original_unsaved; /* not on disk yet: the device must not be written before */
        bool has_last_good;
        uint8_t n_proven;
} DeviceRecord;

/* Two Ethernet addresses fit in the device itself; longer ones (InfiniBand: 20 bytes) are
 * allocated. */
#define DEVICE_ADDR_INLINE 16
#define DEVICE_IFNAMSIZ 16 /* IFNAMSIZ, which device.c checks: <net/if.h> is not for every includer */

struct Device {
        /* ---- what the kernel said (sync.c, through device_update()) ----
         * (the widest members first, so that the group ends on the bytes and `life` follows them
         * without a hole) */
        const NetnsId *netns; /* NULL: the daemon's own namespace */
        const char *kind; /* interned (intern.h); NULL: no IFLA_INFO_KIND */
        struct DeviceExtra *extra; /* altnames, routes, driver: NULL while it has none (device_extra_get()) */
        uint64_t current_usec;  /* CLOCK_MONOTONIC when `current` was last read from the kernel */
        uint64_t appeared_usec; /* announced by an event while bigtcpd watched: when; else 0 */
        Sizes current;
        /* the link address, then the permanent one (IFLA_PERM_ADDRESS), up to MAX_ADDR_LEN bytes
         * each (length 0: none): in `inline_` while both fit, else in `heap`; read them through
         * device_mac() and device_identity_mac() */
        union {
                uint8_t inline_[DEVICE_ADDR_INLINE];
                uint8_t *heap;
        } addr;
        int ifindex;
        unsigned flags;
        int master;
        /* the device it is linked to (a veth's peer: IFLA_LINK, 0 none) and that one's namespace
         * as this device's namespace names it (IFLA_LINK_NETNSID, -1: the same namespace) */
        int link;
        int link_netnsid;
        uint32_t tso_max_size; /* 0: the kernel does not report it (before 5.19): GSO stays legacy */
        char ifname[DEVICE_IFNAMSIZ]; /* "" until the kernel names it */
        uint8_t mac_len, perm_mac_len;
        bool has_sizes;       /* the kernel reported the sizes at least once */
        bool has_ipv4_sizes;  /* … and attributes 63/64 */
        bool carried_traffic; /* some stats of it counted packets */

        /* ---- device-lifecycle.c: its step, and the records the state file keeps ---- */
        DeviceLife life;
        DeviceRecord record;
        struct DeviceHistory *history; /* NULL until something went wrong: device_history() */

        /* ---- apply.c: the policy it matched (its reconcile owed is further down) ---- */
        struct {
                const char *policy_name; /* interned: the policy that matched at the last reconcile */
        } match;
        /* ---- writer.c (its enums in a byte each: the groups below fill no padding) ---- */
        struct {
                struct DeviceWrite *on; /* while queued or sent, until its ack is handled */
                unsigned owned; /* the sizes of its policy it sets */
                unsigned epoch; /* the link dump epoch it was sent in */
                unsigned n_requests; /* requests of any kind in flight for this device */
                WritePhase phase : 8;
                WriteCause cause : 8;
        } write;

        /* ---- state.c: an entry to save, and what is on disk ---- */
        struct {
                bool dirty;
                uint32_t dirty_index;
                uint64_t saved; /* the store's keyed hash of its entry on disk; 0: none */
        } store;

        /* ---- apply.c: a reconcile owed (sync.c holds it back until the sync is done) ---- */
        struct {
                bool owed;
                bool sizes_moved; /* … and its sizes changed meanwhile */
                /* the match (or none) was said: here in a byte of the padding rather than beside
                 * match.policy_name, where it took 8 */
                bool match_logged;
        } reconcile;

        /* ---- sync.c ---- */
        struct {
                bool seen_in_dump;
        } sync;

        unsigned auto_slot; /* auto-queue.c: its place in Engine.auto_queue + 1; 0: not queued */

        /* ---- probation.c ---- */
        struct Probation *probation; /* non-NULL while guards watch it (and links it in the set) */

        /* ---- evidence.c: allocated when it is watched; freed by it (evidence_forget(), evidence_release(), and
         * with the observer after a window of nothing) ---- */
        struct Evidence *evidence;

        /* ---- auto-apply.c: the searches of `auto` (NULL: none of its sizes is `auto`), freed with it ---- */
        struct AutoDevice *autosize;

        /* ---- rollout.c: NULL unless in a staged rollout (device_rollout_get()) ---- */
        struct DeviceRollout *rollout;

        Device *hash_next;
};

/* "host" for the daemon's own namespace. */
static inline const char *device_netns_name(const Device *d) {
        return d->netns ? d->netns->name : "host";
}

typedef struct DeviceTable {
        Device **buckets;
        size_t n_buckets;
        size_t n_devices;
} DeviceTable;

int device_table_init(DeviceTable *t);
void device_table_done(DeviceTable *t);
Device *device_get(const DeviceTable *t, int ifindex);
/* By name, altname, or (all digits) ifindex. */
Device *device_find(const DeviceTable *t, const char *name);
int device_add(DeviceTable *t, int ifindex, Device **ret);
void device_remove(DeviceTable *t, Device *d);
void device_free(Device *d);

typedef struct DeviceIter {
        size_t bucket;
        Device *next;
} DeviceIter;
Device *device_iter_next(const DeviceTable *t, DeviceIter *it);
#define DEVICE_FOREACH(d, t, it) for (DeviceIter it = {}; ((d) = device_iter_next((t), &it));)

/* Every device, sorted by ifindex so that output is stable; free the array, not the devices. */
int device_table_sorted(const DeviceTable *t, Device ***ret, size_t *ret_n);

struct LinkMessage;

/* What changed when a link message was applied. */
typedef enum LinkChange {
        LINK_CHANGE_NAME = 1 << 0,
        LINK_CHANGE_SIZES = 1 << 1,
        LINK_CHANGE_TSO = 1 << 2,
        LINK_CHANGE_MATCH = 1 << 3, /* kind, mac, altnames */
        LINK_CHANGE_MASTER = 1 << 4,
        LINK_CHANGE_DOWN = 1 << 5, /* IFF_UP cleared: IPv4 drops its routes silently */
} LinkChange;

/* Where a device is in its policy's staged rollout: only the devices of a policy with max-parallel
 * are ever in one, so it is not part of every device. rollout.c makes it when the device takes a
 * slot or a place in line and frees it when it leaves; read it with device_rollout_get(). */
typedef struct DeviceRollout {
        struct Rollout *of;
        TAILQ_ENTRY(Device) link; /* the rollout's active or waiting list */
        RolloutPhase phase;
} DeviceRollout;

/* … for reading: never NULL (ROLLOUT_NONE, of NULL, when in none). */
static inline const DeviceRollout *device_rollout_get(const Device *d) {
        static const DeviceRollout none;
        return d->rollout ?: &none;
}

/* A device's extra part, made when first needed; NULL when there is no memory for it. */
DeviceExtra *device_extra(Device *d);
/* Frees it when nothing is left in it. */
void device_extra_trim(Device *d);
/* … for reading: never NULL. */
static inline const DeviceExtra *device_extra_get(const Device *d) {
        static const DeviceExtra none;
        return d->extra ?: &none;
}

/* A device's history, made when first needed; NULL when there is no memory for it. */
DeviceHistory *device_history(Device *d);
/* Frees it when nothing is left in it. */
void device_history_trim(Device *d);
/* … for reading: never NULL. */
static inline const DeviceHistory *device_history_get(const Device *d) {
        static const DeviceHistory none;
        return d->history ?: &none;
}

/* An address as text ("aa:bb:…", lower case; "" for none) in `buf`, which it returns. */
#define DEVICE_MAC_STRLEN (3 * 32)
const char *device_mac_format(const uint8_t *addr, size_t len, char buf[static DEVICE_MAC_STRLEN]);
static inline const uint8_t *device_addr_bytes(const Device *d) {
        return d->mac_len + d->perm_mac_len > DEVICE_ADDR_INLINE ? d->addr.heap : d->addr.inline_;
}
static inline const char *device_mac(const Device *d, char buf[static DEVICE_MAC_STRLEN]) {
        return device_mac_format(device_addr_bytes(d), d->mac_len, buf);
}

/* The MAC that tells this device from one that has its ifindex later: the permanent one where the
 * kernel reports it, else the current one; "" when it has none. */
static inline const char *device_identity_mac(const Device *d, char buf[static DEVICE_MAC_STRLEN]) {
        return d->perm_mac_len > 0 ? device_mac_format(device_addr_bytes(d) + d->mac_len, d->perm_mac_len, buf)
                                 : device_mac(d, buf);
}

/* Apply a parsed link message to the device; `now` stamps `current`. */
int device_update(Device *d, const struct LinkMessage *m, uint64_t now, unsigned *ret_changes);

/* The sizes that passed on d (DeviceRecord.proven_*), as a ProvenSizes would hold them: the oldest
 * first. */
static inline unsigned device_proven_n(const Device *d) {
        return d->record.n_proven;
}
static inline const Sizes *device_proven_at(const Device *d, unsigned i) {
        return i + 1 < d->record.n_proven ? &d->record.proven_older[i] : &d->record.proven_last;
}
bool device_proven_contain(const Device *d, const Sizes *s, bool ipv4);
void device_proven_get(const Device *d, ProvenSizes *ret);
/* These change the record: device-lifecycle.c alone calls them. Without memory for the older
 * ones, only the most recent is kept (fewer proven sizes: a window more, never a wrong one). */
void device_proven_set(Device *d, const ProvenSizes *p);
void device_proven_add(Device *d, const Sizes *s, bool ipv4);
void device_proven_clear(Device *d);

/* Route bookkeeping. */
int device_route_add(Device *d, const RouteEntry *r);
bool device_route_remove(Device *d, const RouteEntry *r);
