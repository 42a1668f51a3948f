/* observer-kernel.h — the kernel's types as observer.bpf.c reads them: only the members it reads,
 * each struct marked preserve_access_index, so that libbpf relocates every access against the
 * running kernel's BTF when it loads the object (CO-RE). The build needs neither a vmlinux.h nor
 * /sys/kernel/btf; a layout that moved in a newer kernel is found by name at load time. */
#pragma once

#include <linux/types.h>

#define OBSERVER_CORE __attribute__((preserve_access_index))

struct ns_common {
        unsigned int inum;
} OBSERVER_CORE;

struct net {
        struct ns_common ns;
} OBSERVER_CORE;

typedef struct {
        struct net *net;
} possible_net_t;

struct net_device {
        int ifindex;
        possible_net_t nd_net;
} OBSERVER_CORE;

struct sk_buff {
        struct net_device *dev;
        unsigned int len;
        __be16 protocol;
        __u16 network_header;
        __u16 mac_header;
        unsigned int end; /* sk_buff_data_t: an offset from head on 64-bit kernels */
        unsigned char *head;
        unsigned char *data;
        int skb_iif; /* the ifindex it was received on (set as netif_receive_skb's tracepoint passes) */
} OBSERVER_CORE;

struct skb_shared_info {
        unsigned short gso_size;
        unsigned short gso_segs;
} OBSERVER_CORE;

struct dst_entry {
        struct net_device *dev;
} OBSERVER_CORE;

struct sock_common {
        possible_net_t skc_net;
} OBSERVER_CORE;

struct sock {
        struct sock_common __sk_common;
        struct dst_entry *sk_dst_cache;
} OBSERVER_CORE;

/* Only the value the program skips; the daemon reads the others' names from the running
 * kernel's BTF (observer.c). */
enum skb_drop_reason {
        SKB_CONSUMED = 1,
};
