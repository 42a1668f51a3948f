/* netlink-stats.h — the link statistics dump: the RTM_GETSTATS request for every device's
 * IFLA_STATS_LINK_64 (what `ip stats` asks; no link attributes, about 200 bytes a device), and
 * what one RTM_NEWSTATS of its answer says, checked for type and length. */
#pragma once

#include <linux/netlink.h>
#include <stddef.h>

struct nl_msg;

typedef struct StatsMessage {
        int ifindex;
        const void *stats64; /* struct rtnl_link_stats64, or a shorter one from an older kernel */
        size_t stats64_len;
} StatsMessage;

/* -EBADMSG when malformed or without IFLA_STATS_LINK_64. */
int stats_message_parse(const struct nlmsghdr *nlh, StatsMessage *ret);

/* The dump request (NLM_F_REQUEST | NLM_F_DUMP; the sender sets the sequence number). */
int stats_dump_message(struct nl_msg **ret);
