/* netlink-stats.c — RTM_GETSTATS built, RTM_NEWSTATS parsed. */
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include "netlink-stats.h"
#include "util.h"

int stats_message_parse(const struct nlmsghdr *nlh, StatsMessage *ret) {
        const struct if_stats_msg *ifsm;
        const struct nlattr *a;
        size_t hdr = NLMSG_ALIGN(sizeof(struct if_stats_msg));
        int rem;

        if (nlh->nlmsg_type != RTM_NEWSTATS || nlh->nlmsg_len < NLMSG_HDRLEN + hdr)
                return -EBADMSG;
        ifsm = NLMSG_DATA(nlh);
        if (ifsm->ifindex <= 0)
                return -EBADMSG;
        *ret = (StatsMessage){.ifindex = (int) ifsm->ifindex};
        rem = (int) (nlh->nlmsg_len - NLMSG_HDRLEN - hdr);
        for (a = (const struct nlattr *) ((const char *) ifsm + hdr); nla_ok(a, rem); a = nla_next(a, &rem)) {
                if (nla_type(a) != IFLA_STATS_LINK_64)
                        continue;
                if (nla_len(a) < (int) (8 * sizeof(uint64_t))) /* the kernel has sent more since 2.6 */
                        return -EBADMSG;
                ret->stats64 = nla_data(a);
                ret->stats64_len = (size_t) nla_len(a);
        }
        return ret->stats64 ? 0 : -EBADMSG;
}

int stats_dump_message(struct nl_msg **ret) {
        struct if_stats_msg ifsm = {.family = AF_UNSPEC, .filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)};
        _cleanup_(nlmsg_freep) struct nl_msg *msg = nlmsg_alloc_simple(RTM_GETSTATS, NLM_F_REQUEST | NLM_F_DUMP);

        if (!msg || nlmsg_append(msg, &ifsm, sizeof(ifsm), NLMSG_ALIGNTO) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(msg);
        return 0;
}
