/* reconcile.h — from policy and kernel state to the sizes a device should have, and the one
 * RTM_NEWLINK that gets it there. The decisions are pure functions, table-tested. */
#pragma once

#include <netlink/msg.h>

#include "policy.h"
#include "sizes.h"

typedef enum ClampMask {
        CLAMP_GSO = 1 << 0,      /* gso_max_size cut to tso_max_size */
        CLAMP_GRO = 1 << 1,      /* gro_max_size cut to 524280 */
        CLAMP_GSO_IPV4 = 1 << 2, /* gso_ipv4_max_size cut to tso_max_size */
        CLAMP_GRO_IPV4 = 1 << 3,
} ClampMask;

typedef struct Desired {
        Sizes sizes;
        unsigned owned;        /* SizeMask: the sizes the policy names and the kernel has */
        unsigned families;     /* FamilyMask of `owned` */
        unsigned clamped;      /* ClampMask */
        bool ipv4_unsupported; /* the policy sets IPv4 but the kernel has no IPv4 sizes */
} Desired;

/* The largest GSO size the device takes. tso_max_size 0 means the kernel did not say. */
uint32_t gso_limit(uint32_t tso_max_size);

/* What `p` says of size `i` (0..3); SIZE_UNSET when it leaves it out. */
const SizeSpec *policy_size_spec(const Policy *p, unsigned i);
/* The sizes `p` names (SizeMask), of those the kernel has. */
unsigned policy_owned_sizes(const Policy *p, bool ipv4_supported);
/* What `p` asks of size `i` (0..3) in bytes, before clamping: 0 when it leaves the size out or
 * asks for `max` (the device's limit, never clamped); `auto`'s min for `auto`. */
uint32_t policy_size_asked(const Policy *p, unsigned i);
/* The limit size `i` is clamped to on a device of this tso_max_size. */
uint32_t size_limit(unsigned i, uint32_t tso_max_size);
/* A digest of what `p` asks of the sizes: equal digests, equal asks. */
uint64_t policy_sizes_digest(const Policy *p);

/* What the device should hold under `p`: the sizes `p` names; the sizes bigtcpd owns now
 * (`written`, a SizeMask) that `p` leaves out go back to `original`; every other size stays as it
 * is. Everything clamped to what the device takes, so the write is never refused. */
void compute_desired(const Policy *p, const Sizes *current, const Sizes *original, unsigned written,
                     uint32_t tso_max_size, bool ipv4_supported, Desired *ret);

/* What to write to give back the originals of the sizes in `written` (a SizeMask). */
void compute_restore(const Sizes *original, unsigned written, const Sizes *current, uint32_t tso_max_size,
                     bool ipv4_supported, Sizes *ret);

/* One RTM_NEWLINK carrying all sizes, IPv6 ones first, so that the kernel's overwrite of the
 * IPv4 sizes by a gso/gro_max_size <= 65536 is undone within the same message. */
int link_write_message(int ifindex, const Sizes *s, bool ipv4, struct nl_msg **ret);

/* "gso_max_size 65536→185000 gro_max_size 65536→185000 …" for the sizes that differ. */
const char *sizes_change_format(const Sizes *from, const Sizes *to, bool ipv4, char *buf, size_t size);
const char *sizes_format(const Sizes *s, bool ipv4, char *buf, size_t size);
