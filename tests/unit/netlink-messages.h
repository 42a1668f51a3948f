/* netlink-messages.h — rtnetlink messages built the way the kernel builds them, for the unit
 * tests that feed the daemon's real handlers. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include "linux-compat.h"
#include "sizes.h"

/* An RTM_NEWLINK/RTM_DELLINK; `sizes` (may be NULL) are the four sizes, `tso` tso_max_size (0:
 * none), `stats` (may be NULL) a struct rtnl_link_stats64. */
static inline struct nl_msg *link_msg_full(int type, int family, int ifindex, const char *name, const char *kind,
                                           const Sizes *sizes, uint32_t tso, const struct rtnl_link_stats64 *stats) {
        struct ifinfomsg ifi = {.ifi_family = (unsigned char) family, .ifi_index = ifindex, .ifi_flags = IFF_UP};
        struct nl_msg *msg = nlmsg_alloc_simple(type, 0);

        assert_non_null(msg);
        assert_int_equal(nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO), 0);
        if (name)
                assert_int_equal(nla_put_string(msg, IFLA_IFNAME, name), 0);
        if (kind) {
                struct nlattr *li = nla_nest_start(msg, IFLA_LINKINFO);
                assert_int_equal(nla_put_string(msg, IFLA_INFO_KIND, kind), 0);
                nla_nest_end(msg, li);
        }
        if (sizes) {
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_MAX_SIZE, sizes->gso_max_size), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_MAX_SIZE, sizes->gro_max_size), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_IPV4_MAX_SIZE, sizes->gso_ipv4_max_size), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_IPV4_MAX_SIZE, sizes->gro_ipv4_max_size), 0);
        }
        if (tso)
                assert_int_equal(nla_put_u32(msg, BT_IFLA_TSO_MAX_SIZE, tso), 0);
        if (stats)
                assert_int_equal(nla_put(msg, IFLA_STATS64, sizeof(*stats), stats), 0);
        return msg;
}

static inline struct nl_msg *link_msg(int type, int ifindex, const char *name, const char *kind, const Sizes *sizes) {
        return link_msg_full(type, AF_UNSPEC, ifindex, name, kind, sizes, 524280, NULL);
}
