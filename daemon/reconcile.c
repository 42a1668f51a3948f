/* reconcile.c — desired sizes from a policy, clamping to what the device takes, restoring
 * originals, and the write message itself. No I/O and no logging here. */
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <stdio.h>
#include <sys/socket.h>

#include "linux-compat.h"
#include "reconcile.h"
#include "util.h"

uint32_t gso_limit(uint32_t tso_max_size) {
        if (tso_max_size == 0)
                return BT_GSO_LEGACY_MAX_SIZE;
        return tso_max_size < BT_GSO_MAX_SIZE ? tso_max_size : BT_GSO_MAX_SIZE;
}

static uint32_t resolve(const SizeSpec *s, uint32_t current, uint32_t limit, unsigned bit, unsigned *clamped) {
        uint32_t v = current;

        switch (s->kind) {
        case SIZE_UNSET:
                v = current;
                break;
        case SIZE_BYTES:
                v = s->bytes;
                break;
        case SIZE_DEVICE_MAX:
                return limit;
        case SIZE_LEGACY:
                v = BT_GSO_LEGACY_MAX_SIZE;
                break;
        case SIZE_AUTO:
                v = s->auto_min; /* where a search starts */
                break;
        case _SIZE_KIND_MAX:
        case _SIZE_KIND_INVALID:
                break;
        }
        if (v > limit) {
                if (s->kind != SIZE_UNSET)
                        *clamped |= bit;
                v = limit;
        }
        return v;
}

const SizeSpec *policy_size_spec(const Policy *p, unsigned i) {
        static const SizeSpec unset = {.kind = SIZE_UNSET};
        const FamilySpec *f = i < 2 ? &p->ipv6 : &p->ipv4;

        if (!f->set)
                return &unset;
        return i % 2 == 0 ? &f->gso : &f->gro;
}

unsigned policy_owned_sizes(const Policy *p, bool ipv4_supported) {
        unsigned owned = 0;

        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (policy_size_spec(p, i)->kind != SIZE_UNSET && (i < 2 || ipv4_supported))
                        owned |= 1u << i;
        return owned;
}

uint32_t policy_size_asked(const Policy *p, unsigned i) {
        const SizeSpec *s = policy_size_spec(p, i);
        switch (s->kind) {
        case SIZE_BYTES:
                return s->bytes;
        case SIZE_LEGACY:
                return BT_GSO_LEGACY_MAX_SIZE;
        case SIZE_AUTO:
                return s->auto_min;
        default:
                return 0;
        }
}

uint64_t policy_sizes_digest(const Policy *p) {
        uint64_t h = FNV1A64_OFFSET;

        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                const SizeSpec *s = policy_size_spec(p, i);
                uint64_t v[4] = {(uint64_t) s->kind, s->kind == SIZE_BYTES ? s->bytes : 0,
                                 s->kind == SIZE_AUTO ? ((uint64_t) s->auto_min << 32 | s->auto_max) : 0,
                                 s->kind == SIZE_AUTO ? s->ceiling_age_usec : 0};
                h = fnv1a64(h, v, sizeof(v));
        }
        return h;
}

static uint32_t limit_of(unsigned i, uint32_t gso_max) {
        return i % 2 == 0 ? gso_max : BT_GRO_MAX_SIZE;
}

uint32_t size_limit(unsigned i, uint32_t tso_max_size) {
        return limit_of(i, gso_limit(tso_max_size));
}

void compute_desired(const Policy *p, const Sizes *current, const Sizes *original, unsigned written,
                     uint32_t tso_max_size, bool ipv4_supported, Desired *ret) {
        static const unsigned clamp_bit[SIZES_COUNT] = {CLAMP_GSO, CLAMP_GRO, CLAMP_GSO_IPV4, CLAMP_GRO_IPV4};
        uint32_t gso_max = gso_limit(tso_max_size);
        unsigned n = ipv4_supported ? SIZES_COUNT : 2;
        Desired d = {.owned = policy_owned_sizes(p, ipv4_supported)};

        for (unsigned i = 0; i < n; i++) {
                /* a size bigtcpd owns that this policy leaves out goes back */
                bool give_back = (written & ~d.owned) & (1u << i);
                uint32_t base = give_back ? sizes_get(original, i) : sizes_get(current, i);
                *sizes_at(&d.sizes, i) = resolve(policy_size_spec(p, i), base, limit_of(i, gso_max), clamp_bit[i], &d.clamped);
        }
        if (d.owned & SIZE_BITS_IPV6)
                d.families |= FAMILY_IPV6;
        if (d.owned & SIZE_BITS_IPV4)
                d.families |= FAMILY_IPV4;
        d.ipv4_unsupported = !ipv4_supported && p->ipv4.set;
        *ret = d;
}

static uint32_t clamp(uint32_t v, uint32_t limit) {
        return v > limit ? limit : v;
}

void compute_restore(const Sizes *original, unsigned written, const Sizes *current, uint32_t tso_max_size,
                     bool ipv4_supported, Sizes *ret) {
        uint32_t gso_max = gso_limit(tso_max_size);
        Sizes s = *current;

        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if ((written & (1u << i)) && (i < 2 || ipv4_supported))
                        *sizes_at(&s, i) = sizes_get(original, i);
                *sizes_at(&s, i) = clamp(sizes_get(&s, i), limit_of(i, gso_max));
        }
        *ret = s;
}

int link_write_message(int ifindex, const Sizes *s, bool ipv4, struct nl_msg **ret) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
        _cleanup_(nlmsg_freep) struct nl_msg *msg = NULL;

        msg = nlmsg_alloc_simple(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK);
        if (!msg)
                return -ENOMEM;
        if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0 ||
            nla_put_u32(msg, BT_IFLA_GSO_MAX_SIZE, s->gso_max_size) < 0 ||
            nla_put_u32(msg, BT_IFLA_GRO_MAX_SIZE, s->gro_max_size) < 0 ||
            (ipv4 && (nla_put_u32(msg, BT_IFLA_GSO_IPV4_MAX_SIZE, s->gso_ipv4_max_size) < 0 ||
                      nla_put_u32(msg, BT_IFLA_GRO_IPV4_MAX_SIZE, s->gro_ipv4_max_size) < 0)))
                return -ENOMEM;
        *ret = TAKE_PTR(msg);
        return 0;
}

const char *sizes_change_format(const Sizes *from, const Sizes *to, bool ipv4, char *buf, size_t size) {
        const struct {
                const char *name;
                uint32_t a, b;
        } f[] = {
                {"gso_max_size", from->gso_max_size, to->gso_max_size},
                {"gro_max_size", from->gro_max_size, to->gro_max_size},
                {"gso_ipv4_max_size", from->gso_ipv4_max_size, to->gso_ipv4_max_size},
                {"gro_ipv4_max_size", from->gro_ipv4_max_size, to->gro_ipv4_max_size},
        };
        size_t o = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < (ipv4 ? 4u : 2u); i++) {
                if (f[i].a == f[i].b)
                        continue;
                int n = snprintf(buf + o, size - o, "%s%s %u→%u", o ? " " : "", f[i].name, f[i].a, f[i].b);
                if (n < 0 || (size_t) n >= size - o)
                        break;
                o += (size_t) n;
        }
        if (o == 0)
                snprintf(buf, size, "no change");
        return buf;
}

const char *sizes_format(const Sizes *s, bool ipv4, char *buf, size_t size) {
        if (ipv4)
                snprintf(buf, size, "gso_max_size %u gro_max_size %u gso_ipv4_max_size %u gro_ipv4_max_size %u",
                         s->gso_max_size, s->gro_max_size, s->gso_ipv4_max_size, s->gro_ipv4_max_size);
        else
                snprintf(buf, size, "gso_max_size %u gro_max_size %u", s->gso_max_size, s->gro_max_size);
        return buf;
}
