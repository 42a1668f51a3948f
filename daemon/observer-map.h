/* observer-map.h — what observer.bpf.c counts and the daemon reads (observer.c): the maps' keys
 * and values, shared by both sides. */
#pragma once

#include <linux/types.h>

#define OBSERVER_BIG 65536u  /* a packet longer than this is big (EVIDENCE_BIG) */
#define OBSERVER_FULL 62464u /* … one of this length or more, and not big, is at the old ceiling (EVIDENCE_FULL) */
/* Packets shorter than this are never compared with a device's thresholds (struct observer_near):
 * a lookup for every small packet would cost more than it tells. */
#define OBSERVER_NEAR_FLOOR 32768u
/* TCP/IP headers are at least 54 bytes with Ethernet's (14 + 20 + 20): a retransmit of more data
 * than this made a packet above OBSERVER_BIG when it was sent whole. */
#define OBSERVER_BIG_PAYLOAD (OBSERVER_BIG - 54u)

#define OBSERVER_TX 0
#define OBSERVER_RX 1
#define OBSERVER_IPV6 0 /* and every protocol but IPv4 (EVIDENCE_IPV6) */
#define OBSERVER_IPV4 1

/* Entries, at most: one per device that carried a packet (least recently used go first), one
 * per (device, drop reason), one per device the daemon counts thresholds for. */
#define OBSERVER_DEVS_MAX 32768u
#define OBSERVER_DROPS_MAX 16384u
#define OBSERVER_NEARS_MAX 16384u
#define OBSERVER_DELIVS_MAX 16384u

struct observer_key {
        __u32 netns; /* the inode of its network namespace */
        __u32 ifindex;
};

struct observer_dev {
        __u64 big[2][2];     /* [direction][family]: packets above OBSERVER_BIG */
        __u64 full[2][2];    /* … of OBSERVER_FULL..OBSERVER_BIG bytes */
        __u32 largest[2][2]; /* bytes, with the link-layer header */
        __u64 tcp_sent, tcp_sent_big;       /* TCP segments sent through it, those in big packets */
        __u64 tcp_retrans, tcp_retrans_big; /* … retransmitted by sockets routed through it */
        __u64 drops;                        /* packets freed as dropped while on it, any reason */
};

struct observer_drop_key {
        __u32 netns;
        __u32 ifindex;
        __u32 reason; /* enum skb_drop_reason (with a subsystem's bits, if any) */
        __u32 pad;
};

/* Set by the daemon for the devices it counts thresholds on, [i] in sizes.h's order (GSO IPv6 =
 * sent IPv6, GRO IPv6 = received IPv6, GSO IPv4, GRO IPv4): the packets longer than len[i] (0:
 * none counted), and the largest of those above OBSERVER_BIG; of those received (GRO), per family,
 * how many were dropped after on this host (kfree_skb of a packet whose skb_iif is the device: a
 * firewall's ingress, prerouting or input, TCP's own drops), as struct observer_deliv counts a
 * peer's. The daemon writes it with zero counts to start over: a window's counts (evidence.c). */
struct observer_near {
        __u32 len[4];
        __u32 largest[4];
        __u64 count[4];
        __u64 dropped[2]; /* [family] of count[2 * family + 1] */
};

/* Set by the daemon on the peer of a device whose GSO step it proves (auto-apply.c): what the peer
 * received of the packets longer than len[family] (0: none counted), and how many of those were
 * dropped after it received them (kfree_skb of a packet whose skb_iif is the peer: netfilter's
 * ingress, prerouting and input, TCP's own drops) — the packets delivered are received - dropped.
 * netif_receive_skb's tracepoint passes before any of those hooks, so `received` alone would count
 * what a firewall of the peer's then drops. The daemon writes it with zero counts to start over. */
struct observer_deliv {
        __u32 len[2]; /* [family] */
        __u64 received[2];
        __u64 dropped[2];
};
