// SPDX-License-Identifier: GPL-2.0-only
/* observer.bpf.c — what the stack does to each device, counted in the kernel: packets sent
 * (net_dev_start_xmit) and received (netif_receive_skb) by length, direction and family; drops
 * by reason (kfree_skb); TCP segments sent and retransmitted (tcp_retransmit_skb). Keyed by
 * (network namespace inode, ifindex); observer.c reads the maps once per tick. Nothing is sent
 * to user space per packet. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

#include "observer-kernel.h"
#include "observer-map.h"

char LICENSE[] SEC("license") = "GPL";

struct {
        __uint(type, BPF_MAP_TYPE_LRU_HASH);
        __uint(max_entries, OBSERVER_DEVS_MAX);
        __type(key, struct observer_key);
        __type(value, struct observer_dev);
} devs SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_LRU_HASH);
        __uint(max_entries, OBSERVER_DROPS_MAX);
        __type(key, struct observer_drop_key);
        __type(value, __u64);
} drops SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, OBSERVER_NEARS_MAX);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __type(key, struct observer_key);
        __type(value, struct observer_near);
} nears SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, OBSERVER_DELIVS_MAX);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __type(key, struct observer_key);
        __type(value, struct observer_deliv);
} delivs SEC(".maps");

/* How many entries `delivs` holds (the daemon keeps it): while none, a received or dropped packet
 * costs no lookup in it. */
__u32 delivs_on = 0;

static const struct observer_dev zero_dev;

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define IPPROTO_HOPOPTS 0

/* The programs' arguments are pointers the verifier knows the type of (tp_btf): their members are
 * loaded directly (a load the verifier guards, relocated by CO-RE like BPF_CORE_READ), not by a
 * call to bpf_probe_read_kernel each; this runs for every packet of every device. */
static __always_inline int key_of(const struct net_device *dev, struct observer_key *k) {
        if (!dev)
                return -1;
        k->netns = dev->nd_net.net->ns.inum;
        k->ifindex = dev->ifindex;
        return 0;
}

static __always_inline struct observer_dev *entry(const struct observer_key *k) {
        struct observer_dev *v = bpf_map_lookup_elem(&devs, k);

        if (v)
                return v;
        bpf_map_update_elem(&devs, k, &zero_dev, BPF_NOEXIST);
        return bpf_map_lookup_elem(&devs, k);
}

static __always_inline __u32 segments(const struct sk_buff *skb) {
        struct skb_shared_info *shinfo = (struct skb_shared_info *) (skb->head + skb->end);
        __u16 segs = BPF_CORE_READ(shinfo, gso_segs);

        return segs ? segs : 1;
}

static __always_inline void count(const struct sk_buff *skb, const struct net_device *dev, int dir, __u32 len) {
        struct observer_key k;
        struct observer_dev *v;
        __be16 proto = skb->protocol;
        int fam = proto == bpf_htons(ETH_P_IP) ? OBSERVER_IPV4 : OBSERVER_IPV6;

        if (key_of(dev, &k) < 0)
                return;
        v = entry(&k);
        if (!v)
                return;
        if (len > OBSERVER_BIG) {
                __sync_fetch_and_add(&v->big[dir][fam], 1);
                /* not atomic: two CPUs at once may keep the smaller of their two */
                if (len > v->largest[dir][fam])
                        v->largest[dir][fam] = len;
        } else if (len >= OBSERVER_FULL)
                __sync_fetch_and_add(&v->full[dir][fam], 1);
        if (len >= OBSERVER_NEAR_FLOOR) {
                struct observer_near *n = bpf_map_lookup_elem(&nears, &k);
                int i = fam * 2 + dir;
                if (n && n->len[i] && len > n->len[i])
                        __sync_fetch_and_add(&n->count[i], 1);
                if (n && len > OBSERVER_BIG && len > n->largest[i])
                        n->largest[i] = len;
                if (dir == OBSERVER_RX && delivs_on) {
                        struct observer_deliv *dv = bpf_map_lookup_elem(&delivs, &k);
                        if (dv && dv->len[fam] && len > dv->len[fam])
                                __sync_fetch_and_add(&dv->received[fam], 1);
                }
        }
        if (dir == OBSERVER_TX && (proto == bpf_htons(ETH_P_IP) || proto == bpf_htons(ETH_P_IPV6))) {
                unsigned char *nh = skb->head + skb->network_header;
                __u8 l4 = 0;

                if (bpf_probe_read_kernel(&l4, 1, nh + (fam == OBSERVER_IPV4 ? 9 : 6)) < 0)
                        return;
                /* an IPv6 packet above 64 KiB may carry a hop-by-hop jumbo option (8 bytes) before
                 * its TCP header; other extension headers are not looked behind */
                if (fam == OBSERVER_IPV6 && l4 == IPPROTO_HOPOPTS && bpf_probe_read_kernel(&l4, 1, nh + 40) < 0)
                        return;
                if (l4 != IPPROTO_TCP)
                        return;
                __u32 segs = segments(skb);
                __sync_fetch_and_add(&v->tcp_sent, segs);
                if (len > OBSERVER_BIG)
                        __sync_fetch_and_add(&v->tcp_sent_big, segs);
        }
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(observer_xmit, const struct sk_buff *skb, const struct net_device *dev) {
        count(skb, dev, OBSERVER_TX, skb->len);
        return 0;
}

/* A received packet's length with its link-layer header: pulled by then, counted back, as a packet
 * socket sees the frame (and as net_dev_start_xmit sees it on the sender). */
static __always_inline __u32 frame_len(const struct sk_buff *skb) {
        __u32 len = skb->len;
        __u16 mac = skb->mac_header;
        unsigned char *head = skb->head, *data = skb->data;

        if (mac != (__u16) ~0u && data - head > mac)
                len += (__u32) (data - head - mac);
        return len;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(observer_receive, struct sk_buff *skb) {
        __u32 len = frame_len(skb);
        /* nothing of a small packet received is counted (TCP segments are counted where they are
         * sent): most of what a device receives (ACKs) costs no map lookup */
        _Static_assert(OBSERVER_NEAR_FLOOR <= OBSERVER_FULL, "a packet below the floor is not full either");
        if (len < OBSERVER_NEAR_FLOOR)
                return 0;
        count(skb, skb->dev, OBSERVER_RX, len);
        return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(observer_drop, struct sk_buff *skb, void *location, enum skb_drop_reason reason) {
        struct observer_drop_key dk = {};
        struct observer_key k;
        struct observer_dev *v;
        __u64 one = 1, *c;

        if (reason == bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
                return 0;
        if (key_of(skb->dev, &k) < 0)
                return 0;
        v = entry(&k);
        if (v)
                __sync_fetch_and_add(&v->drops, 1);
        dk.netns = k.netns;
        dk.ifindex = k.ifindex;
        dk.reason = (__u32) reason;
        c = bpf_map_lookup_elem(&drops, &dk);
        if (c)
                __sync_fetch_and_add(c, 1);
        else
                bpf_map_update_elem(&drops, &dk, &one, BPF_NOEXIST);
        /* a packet the device received (skb_iif is set as it passes netif_receive_skb; a packet
         * made here, or forwarded out of it, has another) and that was dropped after: not delivered,
         * to a peer whose sender's GSO step is proven by it (delivs) nor for the device's own GRO
         * step (nears) */
        if (skb->skb_iif != (int) k.ifindex)
                return 0;
        __u32 len = frame_len(skb);
        int fam = skb->protocol == bpf_htons(ETH_P_IP) ? OBSERVER_IPV4 : OBSERVER_IPV6;
        if (len < OBSERVER_NEAR_FLOOR)
                return 0;
        struct observer_near *n = bpf_map_lookup_elem(&nears, &k);
        int i = fam * 2 + OBSERVER_RX;
        if (n && n->len[i] && len > n->len[i])
                __sync_fetch_and_add(&n->dropped[fam], 1);
        if (delivs_on) {
                struct observer_deliv *dv = bpf_map_lookup_elem(&delivs, &k);
                if (dv && dv->len[fam] && len > dv->len[fam])
                        __sync_fetch_and_add(&dv->dropped[fam], 1);
        }
        return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(observer_retransmit, const struct sock *sk, const struct sk_buff *skb) {
        struct observer_key k;
        struct observer_dev *v;

        /* the device its route goes out of: the retransmitted skb itself has none yet */
        if (!sk->sk_dst_cache || key_of(sk->sk_dst_cache->dev, &k) < 0)
                return 0;
        v = entry(&k);
        if (!v)
                return 0;
        __u32 segs = segments(skb);
        __sync_fetch_and_add(&v->tcp_retrans, segs);
        if (skb->len > OBSERVER_BIG_PAYLOAD)
                __sync_fetch_and_add(&v->tcp_retrans_big, segs);
        return 0;
}
