/* policy-match.c — does a device fall under a policy's `match:`? Pure logic on a MatchDevice view;
 * the only costs (driver lookup, route lookup) are paid through callbacks when a policy asks. */

#include <fnmatch.h>
#include <string.h>
#include <sys/socket.h>

#include "policy-match.h"
#include "util.h"

static bool glob_matches_any_name(const char *glob, const MatchDevice *d) {
        if (d->ifname && fnmatch(glob, d->ifname, 0) == 0)
                return true;
        for (size_t i = 0; i < d->n_altnames; i++)
                if (d->altnames[i] && fnmatch(glob, d->altnames[i], 0) == 0)
                        return true;
        return false;
}

/* A list whose items may be negated with "!": at least one plain item holds, and no "!" item. */
static bool negatable_list_matches(const StrList *l, bool (*item_matches)(const char *item, const void *what),
                                   const void *what) {
        bool plain = false;

        for (size_t i = 0; i < l->n; i++) {
                const char *g = l->items[i];

                if (g[0] == '!') {
                        if (item_matches(g + 1, what))
                                return false;
                } else if (!plain && item_matches(g, what))
                        plain = true;
        }
        return plain;
}

static bool name_item_matches(const char *glob, const void *what) {
        return glob_matches_any_name(glob, what);
}

/* At least one plain glob matches the name or an altname, and no "!" glob matches any of them. */
static bool name_matches(const StrList *l, const MatchDevice *d) {
        return negatable_list_matches(l, name_item_matches, d);
}

static bool kind_item_matches(const char *item, const MatchDevice *d) {
        if (streq_ptr(item, "device"))
                return !d->kind && !d->loopback;
        if (streq_ptr(item, "loopback"))
                return d->loopback;
        return streq_ptr(item, d->kind);
}

static bool strlist_contains(const StrList *l, const char *s) {
        for (size_t i = 0; i < l->n; i++)
                if (streq_ptr(l->items[i], s))
                        return true;
        return false;
}

static bool glob_list_matches(const StrList *l, const char *s) {
        if (!s)
                return false;
        for (size_t i = 0; i < l->n; i++)
                if (fnmatch(l->items[i], s, 0) == 0)
                        return true;
        return false;
}

static bool netns_item_matches(const char *item, const void *what) {
        const char *netns = what;

        if (streq_ptr(item, "host"))
                return !netns;
        /* "*" means every namespace under the directories, not the daemon's own */
        return netns && fnmatch(item, netns, 0) == 0;
}

bool netns_list_matches(const StrList *l, const char *netns) {
        if (!l || l->n == 0)
                return !netns;
        return negatable_list_matches(l, netns_item_matches, netns);
}

bool policy_set_wants_other_netns(const PolicySet *s) {
        if (!s)
                return false;
        for (size_t i = 0; i < s->n_policies; i++) {
                const StrList *l = &s->policies[i].match.netns;

                if (!s->policies[i].applies_here)
                        continue;
                for (size_t j = 0; j < l->n; j++)
                        if (l->items[j][0] != '!' && !streq_ptr(l->items[j], "host"))
                                return true;
        }
        return false;
}

bool policy_set_takes_netns(const PolicySet *s, const char *netns) {
        for (size_t i = 0; s && i < s->n_policies; i++)
                if (s->policies[i].applies_here && netns_list_matches(&s->policies[i].match.netns, netns))
                        return true;
        return false;
}

bool policy_set_uses_routes(const PolicySet *s) {
        for (size_t i = 0; s && i < s->n_policies; i++)
                if (s->policies[i].match.n_routes > 0)
                        return true;
        return false;
}

bool policy_matches(const Policy *p, const MatchDevice *d) {
        const PolicyMatch *m;

        if (!p || !d)
                return false;
        m = &p->match;

        /* the namespace first: a policy for pods says nothing about the host's devices */
        if (!netns_list_matches(&m->netns, d->netns))
                return false;

        /* lo is never what a broad policy means; it must be asked for by kind */
        if (d->loopback && !strlist_contains(&m->kind, "loopback"))
                return false;

        if (m->name.n > 0 && !name_matches(&m->name, d))
                return false;

        if (m->kind.n > 0) {
                bool ok = false;
                for (size_t i = 0; i < m->kind.n && !ok; i++)
                        ok = kind_item_matches(m->kind.items[i], d);
                if (!ok)
                        return false;
        }

        if (m->mac.n > 0 && !glob_list_matches(&m->mac, d->mac))
                return false;

        /* the expensive keys last, so that cheap ones rule a device out first */
        if (m->driver.n > 0) {
                const char *drv = d->get_driver ? d->get_driver(d->userdata) : NULL;
                if (!glob_list_matches(&m->driver, drv))
                        return false;
        }

        if (m->n_routes > 0) {
                bool ok = false;
                if (!d->has_route)
                        return false;
                for (size_t i = 0; i < m->n_routes && !ok; i++)
                        ok = d->has_route(d->userdata, &m->routes[i]);
                if (!ok)
                        return false;
        }

        return true;
}

/* The first plain glob of `l` that matches, and the name it matched (ifname or an altname). */
static const char *name_glob_hit(const StrList *l, const MatchDevice *d, const char **ret_name) {
        for (size_t i = 0; i < l->n; i++) {
                const char *g = l->items[i];
                if (g[0] == '!')
                        continue;
                if (d->ifname && fnmatch(g, d->ifname, 0) == 0) {
                        *ret_name = d->ifname;
                        return g;
                }
                for (size_t k = 0; k < d->n_altnames; k++)
                        if (d->altnames[k] && fnmatch(g, d->altnames[k], 0) == 0) {
                                *ret_name = d->altnames[k];
                                return g;
                        }
        }
        return NULL;
}

static const char *glob_list_hit(const StrList *l, const char *s) {
        for (size_t i = 0; s && i < l->n; i++)
                if (fnmatch(l->items[i], s, 0) == 0)
                        return l->items[i];
        return NULL;
}

int policy_match_explain(const Policy *p, const MatchDevice *d, char **ret) {
        const PolicyMatch *m = &p->match;
        const char *hit, *name = NULL;
        char *s = NULL;
        int r = 0;

        /* the namespace, when the policy names one: the plain item that took it */
        for (size_t i = 0; r >= 0 && i < m->netns.n; i++)
                if (m->netns.items[i][0] != '!' && netns_item_matches(m->netns.items[i], d->netns)) {
                        r = strextendf(&s, "netns %s", m->netns.items[i]);
                        break;
                }
        if (r >= 0 && m->name.n > 0 && (hit = name_glob_hit(&m->name, d, &name)))
                r = streq_ptr(name, d->ifname) ? strextendf(&s, "%sname %s", s ? ", " : "", hit)
                                               : strextendf(&s, "%sname %s (altname %s)", s ? ", " : "", hit, name);
        for (size_t i = 0; r >= 0 && i < m->kind.n; i++)
                if (kind_item_matches(m->kind.items[i], d)) {
                        r = strextendf(&s, "%skind %s", s ? ", " : "", m->kind.items[i]);
                        break;
                }
        if (r >= 0 && m->mac.n > 0 && (hit = glob_list_hit(&m->mac, d->mac)))
                r = strextendf(&s, "%smac %s", s ? ", " : "", hit);
        if (r >= 0 && m->driver.n > 0 &&
            (hit = glob_list_hit(&m->driver, d->get_driver ? d->get_driver(d->userdata) : NULL)))
                r = strextendf(&s, "%sdriver %s", s ? ", " : "", hit);
        if (r >= 0 && m->n_routes > 0)
                r = strextendf(&s, "%sroute", s ? ", " : "");
        if (r >= 0 && !s)
                r = strextendf(&s, "every device (no match keys)");
        if (r < 0) {
                free(s);
                return r;
        }
        *ret = s;
        return 0;
}

const Policy *policy_set_match(const PolicySet *s, const MatchDevice *d) {
        if (!s || !d)
                return NULL;
        for (size_t i = 0; i < s->n_policies; i++)
                if (s->policies[i].applies_here && policy_matches(&s->policies[i], d))
                        return &s->policies[i];
        return NULL;
}

bool route_prefix_covers(const RoutePrefix *p, int family, const void *dst, unsigned dst_len) {
        const uint8_t *a = dst;
        unsigned full, rest;

        if (!p)
                return false;
        if (p->is_default)
                return dst_len == 0;
        if (family != p->family || dst_len < p->prefixlen)
                return false;
        if ((family == AF_INET && dst_len > 32) || (family == AF_INET6 && dst_len > 128))
                return false;
        if (p->prefixlen == 0)
                return true;
        if (!a)
                return false;

        full = p->prefixlen / 8;
        rest = p->prefixlen % 8;
        if (memcmp(a, p->addr, full) != 0)
                return false;
        if (rest > 0) {
                uint8_t mask = (uint8_t) (0xffu << (8 - rest));
                if ((a[full] & mask) != (p->addr[full] & mask))
                        return false;
        }
        return true;
}
