/* netlink-link.c — parsing and checking one rtnetlink link message (iproute2's libnetlink is
 * the model: every attribute checked for type and length before use, nothing copied). */
#include <linux/if_link.h>
#include <net/if.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include "netlink-link.h"
#include "linux-compat.h"
#include "util.h"

#define ALTNAME_MAX 128 /* ALTIFNAMSIZ */
#define KIND_MAX 64

static struct nla_policy link_policy[BT_IFLA_MAX + 1] = {
        [IFLA_IFNAME] = {.type = NLA_STRING, .maxlen = IFNAMSIZ},
        [IFLA_ADDRESS] = {.type = NLA_UNSPEC, .maxlen = 32},
        [BT_IFLA_PERM_ADDRESS] = {.type = NLA_UNSPEC, .maxlen = 32},
        [IFLA_MASTER] = {.type = NLA_U32},
        [IFLA_LINK] = {.type = NLA_U32},
        [IFLA_LINK_NETNSID] = {.type = NLA_U32},
        [IFLA_LINKINFO] = {.type = NLA_NESTED},
        [BT_IFLA_GSO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GRO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_TSO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GSO_IPV4_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GRO_IPV4_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_PROP_LIST] = {.type = NLA_NESTED},
        [IFLA_STATS64] = {.type = NLA_UNSPEC},
        [BT_IFLA_NEW_NETNSID] = {.type = NLA_U32},
        [BT_IFLA_NEW_IFINDEX] = {.type = NLA_U32},
};

static struct nla_policy linkinfo_policy[IFLA_INFO_MAX + 1] = {
        [IFLA_INFO_KIND] = {.type = NLA_STRING, .maxlen = KIND_MAX},
};

static bool attr_is_string(const struct nlattr *a, size_t maxlen) {
        size_t n = (size_t) nla_len(a);
        const char *s = nla_data(a);
        return n > 0 && n <= maxlen && s[n - 1] == '\0' && strlen(s) == n - 1;
}

int link_message_parse(struct nlmsghdr *nlh, LinkMessage *ret) {
        struct nlattr *tb[BT_IFLA_MAX + 1];
        struct ifinfomsg *ifi;
        LinkMessage m = {};

        if (!nlmsg_valid_hdr(nlh, sizeof(struct ifinfomsg)))
                return -EBADMSG;
        if (nlmsg_parse(nlh, sizeof(struct ifinfomsg), tb, BT_IFLA_MAX, link_policy) < 0)
                return -EBADMSG;
        ifi = nlmsg_data(nlh);
        if (ifi->ifi_index <= 0)
                return -EBADMSG;
        /* The bridge reports its ports with AF_BRIDGE messages that describe the port, not the
         * device (and its RTM_DELLINK means "left the bridge"). */
        if (ifi->ifi_family != AF_UNSPEC)
                return -EAFNOSUPPORT;
        m.ifindex = ifi->ifi_index;
        m.flags = ifi->ifi_flags;
        m.link_netnsid = -1;

        if (tb[BT_IFLA_NEW_NETNSID]) {
                m.moved = true;
                m.new_netnsid = (int) nla_get_u32(tb[BT_IFLA_NEW_NETNSID]);
                m.new_ifindex = m.ifindex;
                if (tb[BT_IFLA_NEW_IFINDEX]) {
                        int i = (int) nla_get_u32(tb[BT_IFLA_NEW_IFINDEX]);
                        if (i <= 0)
                                return -EBADMSG;
                        m.new_ifindex = i;
                }
        }
        if (tb[IFLA_IFNAME]) {
                if (!attr_is_string(tb[IFLA_IFNAME], IFNAMSIZ))
                        return -EBADMSG;
                m.ifname = nla_data(tb[IFLA_IFNAME]);
        }
        if (tb[IFLA_ADDRESS]) {
                m.addr = nla_data(tb[IFLA_ADDRESS]);
                m.addr_len = (size_t) nla_len(tb[IFLA_ADDRESS]);
        }
        if (tb[BT_IFLA_PERM_ADDRESS]) {
                m.perm_addr = nla_data(tb[BT_IFLA_PERM_ADDRESS]);
                m.perm_addr_len = (size_t) nla_len(tb[BT_IFLA_PERM_ADDRESS]);
        }
        if (tb[IFLA_MASTER])
                m.master = (int) nla_get_u32(tb[IFLA_MASTER]);
        /* a negative nsid is none (NETNSA_NSID_NOT_ASSIGNED); 0 or an index past INT_MAX names no
         * device, and its own ifindex none but in another namespace (where a veth's peer often has it) */
        if (tb[IFLA_LINK_NETNSID]) {
                int32_t id = (int32_t) nla_get_u32(tb[IFLA_LINK_NETNSID]);
                m.link_netnsid = id >= 0 ? id : -1;
        }
        if (tb[IFLA_LINK]) {
                uint32_t l = nla_get_u32(tb[IFLA_LINK]);
                m.link = l > 0 && l <= INT32_MAX && ((int) l != m.ifindex || m.link_netnsid >= 0) ? (int) l : 0;
        }
        if (tb[IFLA_LINKINFO]) {
                struct nlattr *li[IFLA_INFO_MAX + 1];
                if (nla_parse_nested(li, IFLA_INFO_MAX, tb[IFLA_LINKINFO], linkinfo_policy) < 0)
                        return -EBADMSG;
                if (li[IFLA_INFO_KIND]) {
                        if (!attr_is_string(li[IFLA_INFO_KIND], KIND_MAX))
                                return -EBADMSG;
                        m.kind = nla_data(li[IFLA_INFO_KIND]);
                }
        }
        if (tb[BT_IFLA_PROP_LIST]) {
                struct nlattr *a;
                int rem;
                m.prop_list = tb[BT_IFLA_PROP_LIST];
                nla_for_each_nested(a, tb[BT_IFLA_PROP_LIST], rem) {
                        if (nla_type(a) != BT_IFLA_ALT_IFNAME)
                                continue;
                        if (!attr_is_string(a, ALTNAME_MAX))
                                return -EBADMSG;
                        m.n_altnames++;
                }
        }
        if (tb[BT_IFLA_GSO_MAX_SIZE] && tb[BT_IFLA_GRO_MAX_SIZE]) {
                m.has_sizes = true;
                m.sizes.gso_max_size = nla_get_u32(tb[BT_IFLA_GSO_MAX_SIZE]);
                m.sizes.gro_max_size = nla_get_u32(tb[BT_IFLA_GRO_MAX_SIZE]);
                if (tb[BT_IFLA_GSO_IPV4_MAX_SIZE] && tb[BT_IFLA_GRO_IPV4_MAX_SIZE]) {
                        m.has_ipv4_sizes = true;
                        m.sizes.gso_ipv4_max_size = nla_get_u32(tb[BT_IFLA_GSO_IPV4_MAX_SIZE]);
                        m.sizes.gro_ipv4_max_size = nla_get_u32(tb[BT_IFLA_GRO_IPV4_MAX_SIZE]);
                }
        }
        if (tb[IFLA_STATS64]) {
                m.stats64 = nla_data(tb[IFLA_STATS64]);
                m.stats64_len = (size_t) nla_len(tb[IFLA_STATS64]);
        }
        if (tb[BT_IFLA_TSO_MAX_SIZE]) {
                m.has_tso_max_size = true;
                m.tso_max_size = nla_get_u32(tb[BT_IFLA_TSO_MAX_SIZE]);
        }
        *ret = m;
        return 0;
}

const char *link_message_altname(const LinkMessage *m, size_t i) {
        struct nlattr *a;
        int rem;

        if (!m->prop_list)
                return NULL;
        nla_for_each_nested(a, (struct nlattr *) m->prop_list, rem) {
                if (nla_type(a) != BT_IFLA_ALT_IFNAME)
                        continue;
                if (i-- == 0)
                        return nla_data(a);
        }
        return NULL;
}

bool link_message_carried_traffic(const LinkMessage *m) {
        struct rtnl_link_stats64 s = {};

        if (!m->stats64)
                return false;
        memcpy(&s, m->stats64, m->stats64_len < sizeof(s) ? m->stats64_len : sizeof(s));
        return s.rx_packets > 0 || s.tx_packets > 0;
}
