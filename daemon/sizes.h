/* sizes.h — the four per-device GSO/GRO sizes, the unit every other part speaks in. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct Sizes {
        uint32_t gso_max_size;      /* IPv6 and legacy */
        uint32_t gro_max_size;      /* IPv6 and legacy */
        uint32_t gso_ipv4_max_size; /* IPv4, Linux >= 6.3 */
        uint32_t gro_ipv4_max_size;
} Sizes;

/* Which families a policy (or a write) covers. */
typedef enum FamilyMask {
        FAMILY_IPV6 = 1 << 0,
        FAMILY_IPV4 = 1 << 1,
} FamilyMask;

static inline bool sizes_equal(const Sizes *a, const Sizes *b, bool ipv4) {
        return a->gso_max_size == b->gso_max_size && a->gro_max_size == b->gro_max_size &&
               (!ipv4 || (a->gso_ipv4_max_size == b->gso_ipv4_max_size &&
                          a->gro_ipv4_max_size == b->gro_ipv4_max_size));
}
