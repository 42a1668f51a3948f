/* route.c — parse route messages and keep, per device, the unicast routes that leave through it
 * (any table but local). Replacements and multipath routes are followed; IPv4 routes that the
 * kernel flushes silently on link down are caught by a re-dump that the manager schedules. */
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/socket.h>

#include "policy-match.h"
#include "route.h"

static struct nla_policy route_policy[RTA_MAX + 1] = {
        [RTA_DST] = {.type = NLA_UNSPEC},
        [RTA_OIF] = {.type = NLA_U32},
        [RTA_PRIORITY] = {.type = NLA_U32},
        [RTA_TABLE] = {.type = NLA_U32},
        [RTA_MULTIPATH] = {.type = NLA_UNSPEC},
};

static void forget_key(DeviceTable *t, const RouteEntry *key, RouteChangedFn changed, void *userdata) {
        Device *d;
        DEVICE_FOREACH(d, t, it)
                if (device_route_remove(d, key) && changed)
                        changed(d, userdata);
}

static void on_oif(DeviceTable *t, int type, int oif, const RouteEntry *e, RouteChangedFn changed,
                   void *userdata) {
        Device *d = device_get(t, oif);
        if (!d)
                return;
        if (type == RTM_NEWROUTE) {
                if (device_route_add(d, e) > 0 && changed)
                        changed(d, userdata);
        } else if (device_route_remove(d, e) && changed)
                changed(d, userdata);
}

int route_message_handle(DeviceTable *t, struct nlmsghdr *nlh, RouteChangedFn changed, void *userdata) {
        struct nlattr *tb[RTA_MAX + 1];
        struct rtmsg *rtm;
        RouteEntry e = {};
        size_t alen;

        if (!nlmsg_valid_hdr(nlh, sizeof(struct rtmsg)))
                return -EBADMSG;
        if (nlmsg_parse(nlh, sizeof(struct rtmsg), tb, RTA_MAX, route_policy) < 0)
                return -EBADMSG;
        rtm = nlmsg_data(nlh);
        if (rtm->rtm_family == AF_INET)
                alen = 4;
        else if (rtm->rtm_family == AF_INET6)
                alen = 16;
        else
                return 0;
        if (rtm->rtm_type != RTN_UNICAST || (rtm->rtm_flags & RTM_F_CLONED))
                return 0;
        if (rtm->rtm_dst_len > alen * 8)
                return -EBADMSG;

        e.family = rtm->rtm_family;
        e.dst_len = rtm->rtm_dst_len;
        e.tos = rtm->rtm_tos;
        e.table = tb[RTA_TABLE] ? nla_get_u32(tb[RTA_TABLE]) : rtm->rtm_table;
        if (e.table == RT_TABLE_LOCAL)
                return 0;
        if (tb[RTA_PRIORITY])
                e.priority = nla_get_u32(tb[RTA_PRIORITY]);
        if (tb[RTA_DST]) {
                if ((size_t) nla_len(tb[RTA_DST]) != alen)
                        return -EBADMSG;
                memcpy(e.dst, nla_data(tb[RTA_DST]), alen);
        }

        /* A replaced route leaves the devices it used to go out of. */
        if (nlh->nlmsg_type == RTM_NEWROUTE && (nlh->nlmsg_flags & NLM_F_REPLACE))
                forget_key(t, &e, changed, userdata);

        if (tb[RTA_OIF])
                on_oif(t, nlh->nlmsg_type, (int) nla_get_u32(tb[RTA_OIF]), &e, changed, userdata);
        if (tb[RTA_MULTIPATH]) {
                const uint8_t *p = nla_data(tb[RTA_MULTIPATH]);
                size_t left = (size_t) nla_len(tb[RTA_MULTIPATH]);
                while (left >= sizeof(struct rtnexthop)) {
                        const struct rtnexthop *nh = (const struct rtnexthop *) p;
                        if (nh->rtnh_len < sizeof(*nh) || nh->rtnh_len > left)
                                break;
                        on_oif(t, nlh->nlmsg_type, nh->rtnh_ifindex, &e, changed, userdata);
                        size_t step = RTNH_ALIGN(nh->rtnh_len);
                        if (step >= left)
                                break;
                        p += step;
                        left -= step;
                }
        }
        return 0;
}

void route_forget_all(DeviceTable *t, RouteChangedFn changed, void *userdata) {
        Device *d;
        DEVICE_FOREACH(d, t, it)
                if (device_extra_get(d)->n_routes > 0) {
                        d->extra->n_routes = 0;
                        d->extra->routes = mfree(d->extra->routes);
                        device_extra_trim(d);
                        if (changed)
                                changed(d, userdata);
                }
}

bool device_has_route(const Device *d, const RoutePrefix *p) {
        const DeviceExtra *x = device_extra_get(d);

        for (size_t i = 0; i < x->n_routes; i++)
                if (route_prefix_covers(p, x->routes[i].family, x->routes[i].dst, x->routes[i].dst_len))
                        return true;
        return false;
}
