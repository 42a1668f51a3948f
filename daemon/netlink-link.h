/* netlink-link.h — what one RTM_NEWLINK/RTM_DELLINK says, checked for type and length. Strings
 * and attributes point into the message. */
#pragma once

#include <linux/netlink.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sizes.h"

struct nlattr;

typedef struct LinkMessage {
        int ifindex;
        unsigned flags;
        const char *ifname;
        const char *kind;
        const struct nlattr *prop_list; /* IFLA_PROP_LIST, checked: every altname a string */
        size_t n_altnames;
        const uint8_t *addr;
        size_t addr_len;
        const uint8_t *perm_addr; /* IFLA_PERM_ADDRESS: the NIC's own, when it has one */
        size_t perm_addr_len;
        int master;
        /* IFLA_LINK: the device it is linked to (a veth's peer), 0 when absent or not an ifindex;
         * IFLA_LINK_NETNSID: that device's namespace as this one names it, -1 when absent (the
         * same namespace) or not an nsid */
        int link;
        int link_netnsid;
        bool has_sizes;
        Sizes sizes;
        bool has_ipv4_sizes;
        bool has_tso_max_size;
        uint32_t tso_max_size;
        const void *stats64; /* IFLA_STATS64, NULL when absent */
        size_t stats64_len;
        /* An RTM_DELLINK of a device that moves to another namespace: that namespace's nsid here,
         * and the device's ifindex there (IFLA_NEW_IFINDEX; its ifindex here when absent). */
        bool moved;
        int new_netnsid;
        int new_ifindex;
} LinkMessage;

/* Parse and check an RTM_NEWLINK/RTM_DELLINK: -EBADMSG when malformed, -EAFNOSUPPORT for a
 * family other than AF_UNSPEC (a bridge's port messages). */
int link_message_parse(struct nlmsghdr *nlh, LinkMessage *ret);

/* The i-th altname (i < n_altnames). */
const char *link_message_altname(const LinkMessage *m, size_t i);

/* Did the stats in the message count any packet? */
bool link_message_carried_traffic(const LinkMessage *m);
