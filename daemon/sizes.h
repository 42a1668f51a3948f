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

/* Which of the four sizes: what a policy names, what bigtcpd has written. */
typedef enum SizeMask {
        SIZE_BIT_GSO = 1 << 0,
        SIZE_BIT_GRO = 1 << 1,
        SIZE_BIT_GSO_IPV4 = 1 << 2,
        SIZE_BIT_GRO_IPV4 = 1 << 3,
        SIZE_BITS_IPV6 = SIZE_BIT_GSO | SIZE_BIT_GRO,
        SIZE_BITS_IPV4 = SIZE_BIT_GSO_IPV4 | SIZE_BIT_GRO_IPV4,
        SIZE_BITS_ALL = SIZE_BITS_IPV6 | SIZE_BITS_IPV4,
} SizeMask;

#define SIZES_COUNT 4u

/* The kernel's name of size i (the order of the bits above). */
static inline const char *size_name(unsigned i) {
        static const char *const names[SIZES_COUNT] = {"gso_max_size", "gro_max_size", "gso_ipv4_max_size",
                                                       "gro_ipv4_max_size"};
        return i < SIZES_COUNT ? names[i] : NULL;
}

/* The same in upper case, for journal field names. */
static inline const char *size_field_name(unsigned i) {
        static const char *const names[SIZES_COUNT] = {"GSO_MAX_SIZE", "GRO_MAX_SIZE", "GSO_IPV4_MAX_SIZE",
                                                       "GRO_IPV4_MAX_SIZE"};
        return i < SIZES_COUNT ? names[i] : NULL;
}

static inline uint32_t *sizes_at(Sizes *s, unsigned i) {
        uint32_t *f[SIZES_COUNT] = {&s->gso_max_size, &s->gro_max_size, &s->gso_ipv4_max_size,
                                    &s->gro_ipv4_max_size};
        return f[i];
}

static inline uint32_t sizes_get(const Sizes *s, unsigned i) {
        return *sizes_at((Sizes *) s, i);
}

static inline bool sizes_equal(const Sizes *a, const Sizes *b, bool ipv4) {
        return a->gso_max_size == b->gso_max_size && a->gro_max_size == b->gro_max_size &&
               (!ipv4 || (a->gso_ipv4_max_size == b->gso_ipv4_max_size &&
                          a->gro_ipv4_max_size == b->gro_ipv4_max_size));
}
