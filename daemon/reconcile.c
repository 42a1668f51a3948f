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

void compute_desired(const Policy *p, const Sizes *current, uint32_t tso_max_size, bool ipv4_supported,
                     Desired *ret) {
        static const SizeSpec unset = {.kind = SIZE_UNSET};
        uint32_t gso_max = gso_limit(tso_max_size);
        Desired d = {};

        const FamilySpec *v6 = p->ipv6.set ? &p->ipv6 : NULL;
        const FamilySpec *v4 = p->ipv4.set ? &p->ipv4 : NULL;

        d.sizes.gso_max_size = resolve(v6 ? &v6->gso : &unset, current->gso_max_size, gso_max, CLAMP_GSO, &d.clamped);
        d.sizes.gro_max_size = resolve(v6 ? &v6->gro : &unset, current->gro_max_size, BT_GRO_MAX_SIZE, CLAMP_GRO,
                                       &d.clamped);
        if (v6)
                d.families |= FAMILY_IPV6;

        if (ipv4_supported) {
                d.sizes.gso_ipv4_max_size = resolve(v4 ? &v4->gso : &unset, current->gso_ipv4_max_size, gso_max,
                                                    CLAMP_GSO_IPV4, &d.clamped);
                d.sizes.gro_ipv4_max_size = resolve(v4 ? &v4->gro : &unset, current->gro_ipv4_max_size,
                                                    BT_GRO_MAX_SIZE, CLAMP_GRO_IPV4, &d.clamped);
                if (v4)
                        d.families |= FAMILY_IPV4;
        } else
                d.ipv4_unsupported = v4 != NULL;
        *ret = d;
}

static uint32_t clamp(uint32_t v, uint32_t limit) {
        return v > limit ? limit : v;
}

void compute_restore(const Sizes *original, unsigned written_families, const Sizes *current,
                     uint32_t tso_max_size, bool ipv4_supported, Sizes *ret) {
        uint32_t gso_max = gso_limit(tso_max_size);
        Sizes s = *current;

        if (written_families & FAMILY_IPV6) {
                s.gso_max_size = original->gso_max_size;
                s.gro_max_size = original->gro_max_size;
        }
        if (ipv4_supported && (written_families & FAMILY_IPV4)) {
                s.gso_ipv4_max_size = original->gso_ipv4_max_size;
                s.gro_ipv4_max_size = original->gro_ipv4_max_size;
        }
        s.gso_max_size = clamp(s.gso_max_size, gso_max);
        s.gro_max_size = clamp(s.gro_max_size, BT_GRO_MAX_SIZE);
        s.gso_ipv4_max_size = clamp(s.gso_ipv4_max_size, gso_max);
        s.gro_ipv4_max_size = clamp(s.gro_ipv4_max_size, BT_GRO_MAX_SIZE);
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
