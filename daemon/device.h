/* device.h — the device table: what the kernel told us about each link, and what bigtcpd has
 * decided and done about it. Keyed by ifindex. */
#pragma once

#include <linux/netlink.h>
#include <sys/queue.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "sizes.h"
#include "util.h"

typedef enum DeviceState {
        DEVICE_UNMANAGED,
        DEVICE_PENDING,
        DEVICE_PROBATION,
        DEVICE_APPLIED,
        DEVICE_ROLLED_BACK,
        DEVICE_FAILED,
        DEVICE_UNSUPPORTED,
        _DEVICE_STATE_MAX,
        _DEVICE_STATE_INVALID = -1,
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

typedef struct RouteEntry {
        uint8_t family;
        uint8_t dst_len;
        uint8_t tos;
        uint32_t table;
        uint32_t priority;
        uint8_t dst[16];
} RouteEntry;

/* Why a device was rolled back, kept for the status API. */
typedef struct RollbackRecord {
        char *counter;         /* the guard's counter, e.g. "link.tx_dropped" */
        char *per;             /* with max-ratio: the counter the rise is divided by */
        uint64_t rise;         /* of `counter` since the baseline */
        uint64_t per_rise;     /* of `per` */
        double threshold;      /* max-increase, or max-ratio when `per` is set */
        bool namespace_wide;   /* an SNMP counter: every device in probation went back */
        uint64_t realtime_usec; /* when (CLOCK_REALTIME) */
        Sizes from;            /* what the write had set */
        Sizes to;              /* the last-known-good sizes it went back to */
} RollbackRecord;

void rollback_record_free(RollbackRecord *r);

typedef struct Device Device;
struct Device {
        int ifindex;
        char *ifname;
        char **altnames;
        size_t n_altnames;
        char *kind; /* NULL: no IFLA_INFO_KIND */
        char mac[3 * 32];
        unsigned flags;
        int master;
        char *driver; /* looked up lazily */
        bool driver_looked_up;

        Sizes current;
        bool has_sizes;        /* the kernel reported the sizes at least once */
        uint32_t tso_max_size; /* 0: the kernel does not report it (before 5.19): GSO stays legacy */
        bool has_ipv4_sizes; /* the kernel reported attributes 63/64 */

        /* Routes whose output is this device (for match.route). */
        RouteEntry *routes;
        size_t n_routes;

        /* Decision. */
        DeviceState state;
        char *policy_name; /* the policy that matched at the last reconcile */
        Sizes desired;
        unsigned families; /* FamilyMask the policy sets */

        /* What bigtcpd changed: recorded before the first write, kept until restored. */
        bool has_original;
        bool original_unsaved; /* not yet in the state file: must not be written before */
        Sizes original;
        unsigned written_families;

        /* Write queue. */
        bool queued;
        bool prepared; /* its probation is set up and its state on disk: ready to send */
        bool inflight;
        bool recheck;
        bool restoring;
        bool rolling_back;     /* the queued write goes back to last_good */
        bool rollback_pending; /* roll back once the write in flight is acknowledged */
        bool correcting;       /* the queued write puts back proven sizes: no new probation */
        WriteCause write_cause;
        Sizes before_write; /* current when the write in flight was sent */
        bool need_reconcile;
        TAILQ_ENTRY(Device) queue_link;

        /* Guards (probation after each write, rollback when a counter rises). */
        bool has_last_good;
        Sizes last_good;             /* before the current write: where a rollback goes */
        struct Probation *probation;  /* non-NULL while in probation */
        TAILQ_ENTRY(Device) probation_link;
        bool is_new;                  /* appeared while bigtcpd ran: no rollout limit */
        bool staged;                  /* waits for a rollout slot (rollout.max-parallel) */
        RollbackRecord *last_rollback;
        Sizes held_desired;           /* rolled-back: not retried while desired stays this */
        unsigned n_rollbacks;

        /* Failure of the last write, kept until a different write succeeds. */
        int last_errno;
        char *last_error;
        Sizes failed_desired;

        /* Corrections of values changed behind our back, rate-limited. */
        uint64_t corrections_since_usec;
        unsigned n_corrections;
        bool throttled;

        bool seen_in_dump;
        bool state_dirty; /* listed in Manager.dirty */
        bool sizes_moved;     /* sizes changed while reconciling was held */
        unsigned write_epoch; /* the dump epoch in which the last write was sent */
        bool logged_match;
        Device *hash_next;
};

typedef struct DeviceTable {
        Device **buckets;
        size_t n_buckets;
        size_t n_devices;
} DeviceTable;

int device_table_init(DeviceTable *t);
void device_table_done(DeviceTable *t);
Device *device_get(const DeviceTable *t, int ifindex);
Device *device_get_by_name(const DeviceTable *t, const char *ifname);
int device_add(DeviceTable *t, int ifindex, Device **ret);
void device_remove(DeviceTable *t, Device *d);
void device_free(Device *d);

/* Iterate: for (Device *d, **_it = ...) — use the helper below. */
typedef struct DeviceIter {
        size_t bucket;
        Device *next;
} DeviceIter;
Device *device_iter_next(const DeviceTable *t, DeviceIter *it);
#define DEVICE_FOREACH(d, t, it)                                                                 \
        for (DeviceIter it = {}; ((d) = device_iter_next((t), &it));)

/* What one RTM_NEWLINK said. Strings point into the message. */
typedef struct LinkMessage {
        int ifindex;
        unsigned flags;
        const char *ifname;
        const char *kind;
        const char *altnames[32];
        size_t n_altnames;
        bool altnames_present;
        const uint8_t *addr;
        size_t addr_len;
        int master;
        bool has_sizes;
        Sizes sizes;
        bool has_ipv4_sizes;
        bool has_tso_max_size;
        uint32_t tso_max_size;
        const void *stats64; /* IFLA_STATS64, NULL when absent */
        size_t stats64_len;
} LinkMessage;

/* Parse and check an RTM_NEWLINK/RTM_DELLINK. -EBADMSG when malformed. */
int link_message_parse(struct nlmsghdr *nlh, LinkMessage *ret);

/* Apply a parsed message to the device. Sets *ret_changed_name, *ret_changed_sizes etc. */
typedef enum LinkChange {
        LINK_CHANGE_NAME = 1 << 0,
        LINK_CHANGE_SIZES = 1 << 1,
        LINK_CHANGE_TSO = 1 << 2,
        LINK_CHANGE_MATCH = 1 << 3, /* kind, mac, altnames */
        LINK_CHANGE_MASTER = 1 << 4,
        LINK_CHANGE_DOWN = 1 << 5, /* IFF_UP cleared: IPv4 drops its routes silently */
} LinkChange;
int device_update(Device *d, const LinkMessage *m, unsigned *ret_changes);

/* Route bookkeeping. */
int device_route_add(Device *d, const RouteEntry *r);
bool device_route_remove(Device *d, const RouteEntry *r);
