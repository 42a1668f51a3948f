/* linux-compat.h — the one place where kernel constants that older system headers lack are
 * defined. Values are ABI and never change. */
#pragma once

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/* enum values in if_link.h cannot be tested with #ifdef, so use our own names. */
#define BT_IFLA_GSO_MAX_SIZE 41
#define BT_IFLA_NEW_NETNSID 45
#define BT_IFLA_NEW_IFINDEX 49
#define BT_IFLA_PROP_LIST 52
#define BT_IFLA_ALT_IFNAME 53
#define BT_IFLA_PERM_ADDRESS 54
#define BT_IFLA_GRO_MAX_SIZE 58
#define BT_IFLA_TSO_MAX_SIZE 59
#define BT_IFLA_GSO_IPV4_MAX_SIZE 63
#define BT_IFLA_GRO_IPV4_MAX_SIZE 64
#define BT_IFLA_MAX 64

/* The kernel's hard limits (include/linux/netdevice.h). */
#define BT_GSO_LEGACY_MAX_SIZE 65536u
#define BT_GRO_MAX_SIZE 524280u /* 8 * 65535 */
#define BT_GSO_MAX_SIZE 524280u

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif
#ifndef NLM_F_ACK_TLVS
#define NLM_F_ACK_TLVS 0x200
#endif
#ifndef NLM_F_CAPPED
#define NLM_F_CAPPED 0x100
#endif
#ifndef NLMSGERR_ATTR_MSG
#define NLMSGERR_ATTR_MSG 1
#endif
#ifndef NLM_F_DUMP_INTR
#define NLM_F_DUMP_INTR 0x10
#endif
