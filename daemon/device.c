/* device.c — the device table (a hash on ifindex) and the parsing of link messages into it. */
#include <net/if.h>
#include <sys/socket.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <stdio.h>

#include "device.h"
#include "guard.h"
#include "linux-compat.h"

static const char *const device_state_table[_DEVICE_STATE_MAX] = {
        [DEVICE_UNMANAGED] = "unmanaged",   [DEVICE_PENDING] = "pending",
        [DEVICE_PROBATION] = "probation",   [DEVICE_APPLIED] = "applied",
        [DEVICE_ROLLED_BACK] = "rolled-back", [DEVICE_FAILED] = "failed",
        [DEVICE_UNSUPPORTED] = "unsupported",
};

const char *device_state_to_string(DeviceState s) {
        if (s < 0 || s >= _DEVICE_STATE_MAX)
                return NULL;
        return device_state_table[s];
}

static const char *const write_cause_table[_WRITE_CAUSE_MAX] = {
        [WRITE_CAUSE_NEW_DEVICE] = "new-device", [WRITE_CAUSE_POLICY] = "policy",
        [WRITE_CAUSE_PUT_BACK] = "put-back",     [WRITE_CAUSE_RETRY] = "retry",
        [WRITE_CAUSE_ROLLBACK] = "rollback",     [WRITE_CAUSE_RESTORE] = "restore",
};

const char *write_cause_to_string(WriteCause c) {
        if (c < 0 || c >= _WRITE_CAUSE_MAX)
                return NULL;
        return write_cause_table[c];
}

DeviceState device_state_from_string(const char *s) {
        for (int i = 0; i < _DEVICE_STATE_MAX; i++)
                if (streq_ptr(device_state_table[i], s))
                        return (DeviceState) i;
        return _DEVICE_STATE_INVALID;
}

static size_t bucket_of(const DeviceTable *t, int ifindex) {
        return ((unsigned) ifindex * 2654435761u) & (t->n_buckets - 1);
}

int device_table_init(DeviceTable *t) {
        *t = (DeviceTable){.n_buckets = 64};
        t->buckets = calloc(t->n_buckets, sizeof(Device *));
        return t->buckets ? 0 : -ENOMEM;
}

void rollback_record_free(RollbackRecord *r) {
        if (!r)
                return;
        free(r->counter);
        free(r->per);
        free(r);
}

void device_free(Device *d) {
        if (!d)
                return;
        rollback_record_free(d->last_rollback);
        probation_free(d->probation);
        free(d->ifname);
        for (size_t i = 0; i < d->n_altnames; i++)
                free(d->altnames[i]);
        free(d->altnames);
        free(d->kind);
        free(d->driver);
        free(d->routes);
        free(d->policy_name);
        free(d->last_error);
        free(d);
}

void device_table_done(DeviceTable *t) {
        for (size_t b = 0; t->buckets && b < t->n_buckets; b++)
                for (Device *d = t->buckets[b], *n; d; d = n) {
                        n = d->hash_next;
                        device_free(d);
                }
        free(t->buckets);
        *t = (DeviceTable){};
}

Device *device_get(const DeviceTable *t, int ifindex) {
        for (Device *d = t->buckets[bucket_of(t, ifindex)]; d; d = d->hash_next)
                if (d->ifindex == ifindex)
                        return d;
        return NULL;
}

Device *device_get_by_name(const DeviceTable *t, const char *ifname) {
        Device *d;
        DEVICE_FOREACH(d, t, it)
                if (streq_ptr(d->ifname, ifname))
                        return d;
        return NULL;
}

static int table_grow(DeviceTable *t) {
        size_t n = t->n_buckets * 2;
        Device **b = calloc(n, sizeof(Device *));
        if (!b)
                return -ENOMEM;
        DeviceTable nt = {.buckets = b, .n_buckets = n, .n_devices = t->n_devices};
        for (size_t i = 0; i < t->n_buckets; i++)
                for (Device *d = t->buckets[i], *next; d; d = next) {
                        next = d->hash_next;
                        size_t k = bucket_of(&nt, d->ifindex);
                        d->hash_next = b[k];
                        b[k] = d;
                }
        free(t->buckets);
        *t = nt;
        return 0;
}

int device_add(DeviceTable *t, int ifindex, Device **ret) {
        Device *d;

        if (ifindex <= 0)
                return -EINVAL;
        if (device_get(t, ifindex))
                return -EEXIST;
        if (t->n_devices >= t->n_buckets && table_grow(t) < 0)
                return -ENOMEM;
        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->ifindex = ifindex;
        d->state = DEVICE_UNMANAGED;
        size_t k = bucket_of(t, ifindex);
        d->hash_next = t->buckets[k];
        t->buckets[k] = d;
        t->n_devices++;
        *ret = d;
        return 0;
}

void device_remove(DeviceTable *t, Device *d) {
        for (Device **p = &t->buckets[bucket_of(t, d->ifindex)]; *p; p = &(*p)->hash_next)
                if (*p == d) {
                        *p = d->hash_next;
                        t->n_devices--;
                        return;
                }
}

Device *device_iter_next(const DeviceTable *t, DeviceIter *it) {
        Device *d = it->next;
        while (!d && it->bucket < t->n_buckets)
                d = t->buckets[it->bucket++];
        if (d)
                it->next = d->hash_next;
        return d;
}

static struct nla_policy link_policy[BT_IFLA_MAX + 1] = {
        [IFLA_IFNAME] = {.type = NLA_STRING, .maxlen = IFNAMSIZ},
        [IFLA_ADDRESS] = {.type = NLA_UNSPEC, .maxlen = 32},
        [IFLA_MASTER] = {.type = NLA_U32},
        [IFLA_LINKINFO] = {.type = NLA_NESTED},
        [BT_IFLA_GSO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GRO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_TSO_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GSO_IPV4_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_GRO_IPV4_MAX_SIZE] = {.type = NLA_U32},
        [BT_IFLA_PROP_LIST] = {.type = NLA_NESTED},
        [IFLA_STATS64] = {.type = NLA_UNSPEC},
};

static struct nla_policy linkinfo_policy[IFLA_INFO_MAX + 1] = {
        [IFLA_INFO_KIND] = {.type = NLA_STRING, .maxlen = 64},
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

        if (tb[IFLA_IFNAME]) {
                if (!attr_is_string(tb[IFLA_IFNAME], IFNAMSIZ))
                        return -EBADMSG;
                m.ifname = nla_data(tb[IFLA_IFNAME]);
        }
        if (tb[IFLA_ADDRESS]) {
                m.addr = nla_data(tb[IFLA_ADDRESS]);
                m.addr_len = (size_t) nla_len(tb[IFLA_ADDRESS]);
        }
        if (tb[IFLA_MASTER])
                m.master = (int) nla_get_u32(tb[IFLA_MASTER]);
        if (tb[IFLA_LINKINFO]) {
                struct nlattr *li[IFLA_INFO_MAX + 1];
                if (nla_parse_nested(li, IFLA_INFO_MAX, tb[IFLA_LINKINFO], linkinfo_policy) < 0)
                        return -EBADMSG;
                if (li[IFLA_INFO_KIND]) {
                        if (!attr_is_string(li[IFLA_INFO_KIND], 64))
                                return -EBADMSG;
                        m.kind = nla_data(li[IFLA_INFO_KIND]);
                }
        }
        if (tb[BT_IFLA_PROP_LIST]) {
                struct nlattr *a;
                int rem;
                m.altnames_present = true;
                nla_for_each_nested(a, tb[BT_IFLA_PROP_LIST], rem) {
                        if (nla_type(a) != BT_IFLA_ALT_IFNAME)
                                continue;
                        if (!attr_is_string(a, 128))
                                return -EBADMSG;
                        if (m.n_altnames < ELEMENTSOF(m.altnames))
                                m.altnames[m.n_altnames++] = nla_data(a);
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

static int set_string(char **dst, const char *src, bool *changed) {
        if (streq_ptr(*dst, src))
                return 0;
        char *n = NULL;
        if (src && !(n = strdup(src)))
                return -ENOMEM;
        free(*dst);
        *dst = n;
        *changed = true;
        return 0;
}

static int update_altnames(Device *d, const LinkMessage *m, bool *changed) {
        bool same = d->n_altnames == m->n_altnames;
        for (size_t i = 0; same && i < m->n_altnames; i++)
                same = streq_ptr(d->altnames[i], m->altnames[i]);
        if (same)
                return 0;

        char **l = calloc(m->n_altnames + 1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_altnames; i++)
                if (!(l[i] = strdup(m->altnames[i]))) {
                        for (size_t j = 0; j < i; j++)
                                free(l[j]);
                        free(l);
                        return -ENOMEM;
                }
        for (size_t i = 0; i < d->n_altnames; i++)
                free(d->altnames[i]);
        free(d->altnames);
        d->altnames = l;
        d->n_altnames = m->n_altnames;
        *changed = true;
        return 0;
}

int device_update(Device *d, const LinkMessage *m, unsigned *ret_changes) {
        unsigned changes = 0;
        bool name = false, match = false;
        int r;

        if (m->ifname) {
                r = set_string(&d->ifname, m->ifname, &name);
                if (r < 0)
                        return r;
                if (name) {
                        changes |= LINK_CHANGE_NAME;
                        /* the driver is looked up by name: look again */
                        free(d->driver);
                        d->driver = NULL;
                        d->driver_looked_up = false;
                }
        }
        r = set_string(&d->kind, m->kind, &match);
        if (r < 0)
                return r;
        if (m->altnames_present || d->n_altnames > 0) {
                r = update_altnames(d, m, &match);
                if (r < 0)
                        return r;
        }
        if (m->addr) {
                char mac[sizeof(d->mac)] = "";
                size_t o = 0;
                for (size_t i = 0; i < m->addr_len && o + 3 < sizeof(mac); i++)
                        o += (size_t) snprintf(mac + o, sizeof(mac) - o, i ? ":%02x" : "%02x", m->addr[i]);
                if (!streq_ptr(mac, d->mac)) {
                        memcpy(d->mac, mac, sizeof(mac));
                        match = true;
                }
        }
        if (match)
                changes |= LINK_CHANGE_MATCH;
        if (d->master != m->master) {
                d->master = m->master;
                changes |= LINK_CHANGE_MASTER;
        }
        if ((d->flags & IFF_UP) && !(m->flags & IFF_UP))
                changes |= LINK_CHANGE_DOWN;
        d->flags = m->flags;
        if (m->has_sizes) {
                if (!sizes_equal(&d->current, &m->sizes, true) || d->has_ipv4_sizes != m->has_ipv4_sizes)
                        changes |= LINK_CHANGE_SIZES;
                d->current = m->sizes;
                d->has_sizes = true;
                d->has_ipv4_sizes = m->has_ipv4_sizes;
        }
        if (m->has_tso_max_size && m->tso_max_size != d->tso_max_size) {
                d->tso_max_size = m->tso_max_size;
                changes |= LINK_CHANGE_TSO;
        }
        *ret_changes = changes;
        return 0;
}

static bool route_same(const RouteEntry *a, const RouteEntry *b) {
        return a->family == b->family && a->dst_len == b->dst_len && a->tos == b->tos &&
               a->table == b->table && a->priority == b->priority &&
               memcmp(a->dst, b->dst, sizeof(a->dst)) == 0;
}

int device_route_add(Device *d, const RouteEntry *r) {
        for (size_t i = 0; i < d->n_routes; i++)
                if (route_same(&d->routes[i], r))
                        return 0;
        RouteEntry *n = reallocarray(d->routes, d->n_routes + 1, sizeof(RouteEntry));
        if (!n)
                return -ENOMEM;
        d->routes = n;
        d->routes[d->n_routes++] = *r;
        return 1;
}

bool device_route_remove(Device *d, const RouteEntry *r) {
        for (size_t i = 0; i < d->n_routes; i++)
                if (route_same(&d->routes[i], r)) {
                        d->routes[i] = d->routes[--d->n_routes];
                        return true;
                }
        return false;
}
