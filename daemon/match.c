/* match.c — does a device fall under a policy's `match:`? Pure logic on a MatchDevice view;
 * the only costs (driver lookup, route lookup) are paid through callbacks when a policy asks. */

#include <fnmatch.h>
#include <string.h>
#include <sys/socket.h>

#include "match.h"
#include "util.h"

static bool glob_matches_any_name(const char *glob, const MatchDevice *d) {
        if (d->ifname && fnmatch(glob, d->ifname, 0) == 0)
                return true;
        for (size_t i = 0; i < d->n_altnames; i++)
                if (d->altnames[i] && fnmatch(glob, d->altnames[i], 0) == 0)
                        return true;
        return false;
}

/* At least one plain glob matches the name or an altname, and no "!" glob matches any of them. */
static bool name_matches(const StrList *l, const MatchDevice *d) {
        bool plain = false;

        for (size_t i = 0; i < l->n; i++) {
                const char *g = l->items[i];

                if (g[0] == '!') {
                        if (glob_matches_any_name(g + 1, d))
                                return false;
                } else if (!plain && glob_matches_any_name(g, d))
                        plain = true;
        }
        return plain;
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

bool policy_matches(const Policy *p, const MatchDevice *d) {
        const PolicyMatch *m;

        if (!p || !d)
                return false;
        m = &p->match;

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
