/* device.c — the device table (a hash on ifindex), applying link messages to a device, and the
 * string tables of the device's enums. */
#include <linux/if_link.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>

#include "auto-size.h"
#include "device.h"
#include "intern.h"
#include "netlink-link.h"
#include "pool.h"

_Static_assert(DEVICE_IFNAMSIZ == IFNAMSIZ, "a Device's ifname holds IFNAMSIZ bytes");

static const char *const device_state_table[_DEVICE_STATE_MAX] = {
        [DEVICE_UNMANAGED] = "unmanaged",     [DEVICE_PENDING] = "pending",
        [DEVICE_PROBATION] = "probation",     [DEVICE_APPLIED] = "applied",
        [DEVICE_ROLLED_BACK] = "rolled-back", [DEVICE_FAILED] = "failed",
        [DEVICE_UNSUPPORTED] = "unsupported",
};

const char *device_state_to_string(DeviceState s) {
        if (s < 0 || s >= _DEVICE_STATE_MAX)
                return NULL;
        return device_state_table[s];
}

DeviceState device_state_from_string(const char *s) {
        for (int i = 0; i < _DEVICE_STATE_MAX; i++)
                if (streq_ptr(device_state_table[i], s))
                        return (DeviceState) i;
        return _DEVICE_STATE_INVALID;
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

static const char *const pending_reason_table[_PENDING_REASON_MAX] = {
        [PENDING_QUEUED] = "queued",
        [PENDING_IN_FLIGHT] = "in-flight",
        [PENDING_ROLLOUT_SLOT] = "rollout-slot",
        [PENDING_ROLLOUT_HALTED] = "rollout-halted",
        [PENDING_THROTTLED] = "throttled",
};

const char *pending_reason_to_string(PendingReason r) {
        if (r < 0 || r >= _PENDING_REASON_MAX)
                return NULL;
        return pending_reason_table[r];
}

int rollback_record_copy(const RollbackRecord *r, RollbackRecord **ret) {
        _cleanup_(rollback_record_freep) RollbackRecord *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        *c = *r;
        c->counter = c->per = NULL;
        if ((r->counter && !(c->counter = strdup(r->counter))) || (r->per && !(c->per = strdup(r->per))))
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        return 0;
}

void rollback_record_free(RollbackRecord *r) {
        if (!r)
                return;
        free(r->counter);
        free(r->per);
        free(r);
}

DeviceHistory *device_history(Device *d) {
        if (!d->history)
                d->history = calloc(1, sizeof(DeviceHistory));
        return d->history;
}

void device_history_trim(Device *d) {
        const DeviceHistory *h = d->history;
        const Sizes zero = {};

        if (h && !h->last_rollback && !h->last_error && h->last_errno == 0 && h->n_rollbacks == 0 &&
            h->corrections.since_usec == 0 && h->corrections.n == 0 && !h->corrections.throttled &&
            sizes_equal(&h->held_desired, &zero, true) && sizes_equal(&h->failed_desired, &zero, true))
                d->history = mfree(d->history);
}

DeviceExtra *device_extra(Device *d) {
        if (!d->extra)
                d->extra = calloc(1, sizeof(DeviceExtra));
        return d->extra;
}

void device_extra_trim(Device *d) {
        const DeviceExtra *x = d->extra;

        if (x && !x->altnames && x->n_altnames == 0 && !x->routes && x->n_routes == 0 && !x->driver &&
            !x->driver_looked_up)
                d->extra = mfree(d->extra);
}

static void extra_free(DeviceExtra *x) {
        if (!x)
                return;
        strv_free(x->altnames);
        free(x->driver);
        free(x->routes);
        free(x);
}

static size_t bucket_of(const DeviceTable *t, int ifindex) {
        return ((unsigned) ifindex * 2654435761u) & (t->n_buckets - 1);
}

int device_table_init(DeviceTable *t) {
        *t = (DeviceTable){.n_buckets = 64};
        t->buckets = calloc(t->n_buckets, sizeof(Device *));
        return t->buckets ? 0 : -ENOMEM;
}

/* Devices live in a pool (pool.h): the long-lived records of a burst, kept apart from its
 * short-lived ones. */
static Pool device_pool = POOL_INIT(Device), write_pool = POOL_INIT(DeviceWrite);

DeviceWrite *device_write_begin(Device *d) {
        if (!d->write.on)
                d->write.on = pool_alloc(&write_pool);
        return d->write.on;
}

void device_write_end(Device *d) {
        pool_free(&write_pool, d->write.on);
        d->write.on = NULL;
}

void device_free(Device *d) {
        if (!d)
                return;
        /* its probation belongs to the probation set, which ended it before */
        if (d->history) {
                rollback_record_free(d->history->last_rollback);
                free(d->history->last_error);
                free(d->history);
        }
        device_write_end(d); /* the writer ends it with the write; not a device freed with one in flight */
        extra_free(d->extra);
        intern_put(d->kind);
        intern_put(d->match.policy_name);
        if (d->mac_len + d->perm_mac_len > DEVICE_ADDR_INLINE)
                free(d->addr.heap);
        auto_device_free(d->autosize);
        free(d->record.proven_older);
        pool_free(&device_pool, d);
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

Device *device_find(const DeviceTable *t, const char *name) {
        Device *d;
        char *end;

        if (strempty(name))
                return NULL;
        DEVICE_FOREACH(d, t, it)
                if (streq_ptr(d->ifname, name))
                        return d;
        DEVICE_FOREACH(d, t, it)
                if (strv_contains(device_extra_get(d)->altnames, name))
                        return d;
        errno = 0;
        long i = strtol(name, &end, 10);
        if (*end == '\0' && errno == 0 && i > 0 && i <= INT32_MAX && name[0] != '+' && name[0] != '-')
                return device_get(t, (int) i);
        return NULL;
}

static int compare_ifindex(const void *a, const void *b) {
        const Device *x = *(const Device *const *) a, *y = *(const Device *const *) b;
        return (x->ifindex > y->ifindex) - (x->ifindex < y->ifindex);
}

int device_table_sorted(const DeviceTable *t, Device ***ret, size_t *ret_n) {
        Device **l = calloc(t->n_devices + 1, sizeof(Device *)), *d;
        size_t n = 0;

        if (!l)
                return -ENOMEM;
        DEVICE_FOREACH(d, t, it)
                l[n++] = d;
        qsort(l, n, sizeof(Device *), compare_ifindex);
        *ret = l;
        *ret_n = n;
        return 0;
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
        /* two devices a bucket before it grows: ifindexes hash evenly (Fibonacci), a lookup walks
         * one or two, and the table of 10000 devices is 64 KiB, not 128 */
        if (t->n_devices >= 2 * t->n_buckets && table_grow(t) < 0)
                return -ENOMEM;
        d = pool_alloc(&device_pool);
        if (!d)
                return -ENOMEM;
        d->ifindex = ifindex;
        d->link_netnsid = -1;
        d->life.state = DEVICE_UNMANAGED;
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

static void set_ifname(Device *d, const char *name, bool *changed) {
        /* link_message_parse() took only names that fit */
        if (strncmp(d->ifname, name, sizeof(d->ifname)) == 0)
                return;
        snprintf(d->ifname, sizeof(d->ifname), "%s", name);
        *changed = true;
}

static int update_altnames(Device *d, const LinkMessage *m, bool *changed) {
        const DeviceExtra *had = device_extra_get(d);
        DeviceExtra *x;

        if (m->n_altnames > UINT16_MAX)
                return -E2BIG; /* a netlink message of 64 KiB holds far fewer */
        bool same = had->n_altnames == m->n_altnames;
        for (size_t i = 0; same && i < m->n_altnames; i++)
                same = streq_ptr(had->altnames[i], link_message_altname(m, i));
        if (same)
                return 0;

        _cleanup_(strv_freep) char **l = NULL;
        size_t n = 0;
        for (size_t i = 0; i < m->n_altnames; i++) {
                int r = strv_push(&l, &n, link_message_altname(m, i));
                if (r < 0)
                        return r;
        }
        x = n > 0 ? device_extra(d) : d->extra;
        if (n > 0 && !x)
                return -ENOMEM;
        if (x) {
                strv_free(x->altnames);
                x->altnames = TAKE_PTR(l);
                x->n_altnames = (uint16_t) n;
                device_extra_trim(d);
        }
        *changed = true;
        return 0;
}

const char *device_mac_format(const uint8_t *addr, size_t len, char buf[static DEVICE_MAC_STRLEN]) {
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;

        for (size_t i = 0; i < len && o + 3 <= DEVICE_MAC_STRLEN; i++) {
                if (i > 0)
                        buf[o++] = ':';
                buf[o++] = hex[addr[i] >> 4];
                buf[o++] = hex[addr[i] & 15];
        }
        buf[o] = '\0';
        return buf;
}

/* The link address and the permanent one, each NULL for "unchanged" (not in the message). */
static int set_addresses(Device *d, const uint8_t *mac, size_t mac_len, const uint8_t *perm, size_t perm_len,
                         bool *changed) {
        const uint8_t *old = device_addr_bytes(d);
        uint8_t both[2 * 32];

        /* MAX_ADDR_LEN: the kernel sends no more */
        if (!mac)
                mac = old, mac_len = d->mac_len;
        if (!perm)
                perm = old + d->mac_len, perm_len = d->perm_mac_len;
        mac_len = mac_len > 32 ? 32 : mac_len;
        perm_len = perm_len > 32 ? 32 : perm_len;
        if (mac_len == d->mac_len && perm_len == d->perm_mac_len && memcmp(mac, old, mac_len) == 0 &&
            memcmp(perm, old + d->mac_len, perm_len) == 0)
                return 0;

        memcpy(both, mac, mac_len);
        memcpy(both + mac_len, perm, perm_len);
        size_t n = mac_len + perm_len;
        uint8_t *heap = NULL;
        if (n > DEVICE_ADDR_INLINE && !(heap = malloc(n)))
                return -ENOMEM;
        if (d->mac_len + d->perm_mac_len > DEVICE_ADDR_INLINE)
                free(d->addr.heap);
        if (heap) {
                memcpy(heap, both, n);
                d->addr.heap = heap;
        } else
                memcpy(d->addr.inline_, both, n);
        d->mac_len = (uint8_t) mac_len;
        d->perm_mac_len = (uint8_t) perm_len;
        *changed = true;
        return 0;
}

int device_update(Device *d, const LinkMessage *m, uint64_t now, unsigned *ret_changes) {
        unsigned changes = 0;
        bool name = false, match = false;
        int r;

        if (m->ifname) {
                set_ifname(d, m->ifname, &name);
                if (name) {
                        changes |= LINK_CHANGE_NAME;
                        /* the driver is looked up by name: look again */
                        if (d->extra) {
                                d->extra->driver = mfree(d->extra->driver);
                                d->extra->driver_looked_up = false;
                                device_extra_trim(d);
                        }
                }
        }
        r = intern_set(&d->kind, m->kind, &match);
        if (r < 0)
                return r;
        if (m->prop_list || device_extra_get(d)->n_altnames > 0) {
                r = update_altnames(d, m, &match);
                if (r < 0)
                        return r;
        }
        if (m->addr || m->perm_addr) {
                r = set_addresses(d, m->addr, m->addr_len, m->perm_addr, m->perm_addr_len, &match);
                if (r < 0)
                        return r;
        }
        if (match)
                changes |= LINK_CHANGE_MATCH;
        if (d->master != m->master) {
                d->master = m->master;
                changes |= LINK_CHANGE_MASTER;
        }
        /* every RTM_NEWLINK says both: a veth whose peer moved has them anew at its next message */
        d->link = m->link;
        d->link_netnsid = m->link_netnsid;
        if ((d->flags & IFF_UP) && !(m->flags & IFF_UP))
                changes |= LINK_CHANGE_DOWN;
        d->flags = m->flags;
        if (m->has_sizes) {
                if (!sizes_equal(&d->current, &m->sizes, true) || d->has_ipv4_sizes != m->has_ipv4_sizes)
                        changes |= LINK_CHANGE_SIZES;
                d->current = m->sizes;
                d->has_sizes = true;
                d->has_ipv4_sizes = m->has_ipv4_sizes;
                d->current_usec = now;
        }
        if (m->has_tso_max_size && m->tso_max_size != d->tso_max_size) {
                d->tso_max_size = m->tso_max_size;
                changes |= LINK_CHANGE_TSO;
        }
        if (link_message_carried_traffic(m))
                d->carried_traffic = true;
        *ret_changes = changes;
        return 0;
}

static bool route_same(const RouteEntry *a, const RouteEntry *b) {
        return a->family == b->family && a->dst_len == b->dst_len && a->tos == b->tos &&
               a->table == b->table && a->priority == b->priority &&
               memcmp(a->dst, b->dst, sizeof(a->dst)) == 0;
}

int device_route_add(Device *d, const RouteEntry *r) {
        const DeviceExtra *had = device_extra_get(d);
        DeviceExtra *x;

        for (size_t i = 0; i < had->n_routes; i++)
                if (route_same(&had->routes[i], r))
                        return 0;
        if (had->n_routes == UINT32_MAX)
                return -ENOMEM;
        x = device_extra(d);
        if (!x)
                return -ENOMEM;
        RouteEntry *n = reallocarray(x->routes, x->n_routes + 1, sizeof(RouteEntry));
        if (!n) {
                device_extra_trim(d);
                return -ENOMEM;
        }
        x->routes = n;
        x->routes[x->n_routes++] = *r;
        return 1;
}

bool device_route_remove(Device *d, const RouteEntry *r) {
        DeviceExtra *x = d->extra;

        for (size_t i = 0; x && i < x->n_routes; i++)
                if (route_same(&x->routes[i], r)) {
                        x->routes[i] = x->routes[--x->n_routes];
                        if (x->n_routes == 0)
                                x->routes = mfree(x->routes);
                        device_extra_trim(d);
                        return true;
                }
        return false;
}

void proven_sizes_add(ProvenSizes *p, const Sizes *s, bool ipv4) {
        unsigned i;

        for (i = 0; i < p->n && !sizes_equal(&p->items[i], s, ipv4); i++)
                ;
        if (i == p->n && p->n == PROVEN_SIZES_MAX)
                i = 0; /* the oldest goes */
        else if (i == p->n)
                p->n++;
        /* the most recent last */
        memmove(&p->items[i], &p->items[i + 1], (p->n - 1 - i) * sizeof(Sizes));
        p->items[p->n - 1] = *s;
}

bool device_proven_contain(const Device *d, const Sizes *s, bool ipv4) {
        for (unsigned i = 0; i < device_proven_n(d); i++)
                if (sizes_equal(device_proven_at(d, i), s, ipv4))
                        return true;
        return false;
}

void device_proven_get(const Device *d, ProvenSizes *ret) {
        *ret = (ProvenSizes){.n = device_proven_n(d)};
        for (unsigned i = 0; i < ret->n; i++)
                ret->items[i] = *device_proven_at(d, i);
}

void device_proven_set(Device *d, const ProvenSizes *p) {
        unsigned n = p->n < PROVEN_SIZES_MAX ? p->n : PROVEN_SIZES_MAX;

        if (n >= 2 && !d->record.proven_older)
                d->record.proven_older = calloc(PROVEN_SIZES_MAX - 1, sizeof(Sizes));
        if (n >= 2 && !d->record.proven_older) {
                /* no memory for the older ones: the most recent alone */
                d->record.proven_last = p->items[n - 1];
                d->record.n_proven = 1;
                return;
        }
        if (n < 2)
                d->record.proven_older = mfree(d->record.proven_older);
        else
                memcpy(d->record.proven_older, p->items, (n - 1) * sizeof(Sizes));
        if (n > 0)
                d->record.proven_last = p->items[n - 1];
        d->record.n_proven = n;
}

void device_proven_add(Device *d, const Sizes *s, bool ipv4) {
        ProvenSizes p;

        device_proven_get(d, &p);
        proven_sizes_add(&p, s, ipv4);
        device_proven_set(d, &p);
}

void device_proven_clear(Device *d) {
        d->record.proven_older = mfree(d->record.proven_older);
        d->record.n_proven = 0;
}
