/* policy-match.h — does a device match a policy? Pure logic on a view of the device, so that it is
 * table-tested without a kernel. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

typedef struct MatchDevice {
        const char *ifname;
        char *const *altnames;
        size_t n_altnames;
        const char *kind; /* IFLA_INFO_KIND, NULL when the link has none */
        bool loopback;    /* IFF_LOOPBACK */
        const char *mac;  /* "aa:bb:cc:dd:ee:ff" in lower case, NULL when none */
        const char *netns; /* its namespace's file name; NULL: the daemon's own ("host") */
        /* Looked up only when a policy asks for it (costs an ioctl); may return NULL. */
        const char *(*get_driver)(void *userdata);
        /* Is the device the output of a route covered by `p`? */
        bool (*has_route)(void *userdata, const RoutePrefix *p);
        void *userdata;
} MatchDevice;

/* All keys of the policy's match hold for the device. The loopback device matches only a
 * policy whose match.kind lists "loopback"; a device outside the daemon's own namespace only a
 * policy whose match.netns takes its namespace. */
bool policy_matches(const Policy *p, const MatchDevice *d);

/* Which of a matching policy's keys chose the device, in words, for `show`: "name eth* (altname
 * enp3s0), kind veth", "every device (no match keys)". -ENOMEM, or 0 with *ret set. */
int policy_match_explain(const Policy *p, const MatchDevice *d, char **ret);

/* Does match.netns (empty: "host" alone) take the namespace named `netns` (NULL: the daemon's
 * own)? "host" names the daemon's own, globs the others' file names; "!" excludes. */
bool netns_list_matches(const StrList *l, const char *netns);

/* Does any policy in force here name a namespace other than the daemon's own? */
bool policy_set_wants_other_netns(const PolicySet *s);
/* … the namespace named `netns` (NULL: the daemon's own)? */
bool policy_set_takes_netns(const PolicySet *s, const char *netns);
/* Does any policy match by routes (match.route)? */
bool policy_set_uses_routes(const PolicySet *s);

/* The first policy that applies to this host and matches, or NULL. */
const Policy *policy_set_match(const PolicySet *s, const MatchDevice *d);

/* Does the route with this destination fall under `p`? `default` covers only /0 routes; a
 * prefix covers every route inside it. */
bool route_prefix_covers(const RoutePrefix *p, int family, const void *dst, unsigned dst_len);
