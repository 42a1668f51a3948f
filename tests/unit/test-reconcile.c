/* test-reconcile.c — desired sizes, clamping, restoring and the write message, table-driven. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <netlink/attr.h>
#include <netlink/msg.h>

#include "linux-compat.h"
#include "reconcile.h"
#include "util.h"

static SizeSpec B(uint32_t v) {
        return (SizeSpec){.kind = SIZE_BYTES, .bytes = v};
}
#define UNSET ((SizeSpec){.kind = SIZE_UNSET})
#define MAXV ((SizeSpec){.kind = SIZE_DEVICE_MAX})
#define LEGACY ((SizeSpec){.kind = SIZE_LEGACY})

typedef struct DesiredCase {
        const char *what;
        FamilySpec v6, v4;
        Sizes current;
        uint32_t tso;
        bool ipv4;
        Sizes want;
        unsigned families, clamped;
        bool unsupported;
} DesiredCase;

static void test_compute_desired(void **state) {
        const Sizes s64k = {65536, 65536, 65536, 65536};
        const DesiredCase cases[] = {
                {"both families", {true, B(185000), B(185000)}, {true, B(185000), B(185000)}, s64k, 524280, true,
                 {185000, 185000, 185000, 185000}, FAMILY_IPV6 | FAMILY_IPV4, 0, false},
                {"ipv6 only keeps ipv4", {true, B(185000), B(185000)}, {false, UNSET, UNSET},
                 {65536, 65536, 40000, 50000}, 524280, true, {185000, 185000, 40000, 50000}, FAMILY_IPV6, 0, false},
                {"ipv4 only keeps ipv6", {false, UNSET, UNSET}, {true, B(185000), B(100000)},
                 {60000, 61000, 65536, 65536}, 524280, true, {60000, 61000, 185000, 100000}, FAMILY_IPV4, 0, false},
                {"legacy v6, big v4 (the overwrite trap)", {true, LEGACY, LEGACY}, {true, B(185000), B(185000)},
                 {185000, 185000, 185000, 185000}, 524280, true, {65536, 65536, 185000, 185000},
                 FAMILY_IPV6 | FAMILY_IPV4, 0, false},
                {"portless bridge clamps gso", {true, B(185000), B(185000)}, {true, B(185000), B(185000)}, s64k, 65536,
                 true, {65536, 185000, 65536, 185000}, FAMILY_IPV6 | FAMILY_IPV4, CLAMP_GSO | CLAMP_GSO_IPV4, false},
                {"max is the device limit", {true, MAXV, MAXV}, {true, MAXV, MAXV}, s64k, 262144, true,
                 {262144, 524280, 262144, 524280}, FAMILY_IPV6 | FAMILY_IPV4, 0, false},
                {"max caps at GSO_MAX_SIZE", {true, MAXV, UNSET}, {false, UNSET, UNSET}, s64k, 0xffffffffu, true,
                 {524280, 65536, 65536, 65536}, FAMILY_IPV6, 0, false},
                {"only gso set, gro kept", {true, B(100000), UNSET}, {false, UNSET, UNSET}, {65536, 70000, 1, 2},
                 524280, true, {100000, 70000, 1, 2}, FAMILY_IPV6, 0, false},
                {"no ipv4 in kernel", {true, B(185000), B(185000)}, {true, B(185000), B(185000)}, s64k, 524280, false,
                 {185000, 185000, 0, 0}, FAMILY_IPV6, 0, true},
                {"only ipv4, kernel lacks it", {false, UNSET, UNSET}, {true, B(185000), B(185000)}, s64k, 524280, false,
                 {65536, 65536, 0, 0}, 0, 0, true},
                {"unknown tso limit is legacy", {true, B(185000), UNSET}, {false, UNSET, UNSET}, s64k, 0, true,
                 {65536, 65536, 65536, 65536}, FAMILY_IPV6, CLAMP_GSO, false},
                {"current above a lowered limit is clamped", {false, UNSET, UNSET}, {true, B(1000), UNSET},
                 {200000, 65536, 65536, 65536}, 65536, true, {65536, 65536, 1000, 65536}, FAMILY_IPV4, 0, false},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const DesiredCase *c = &cases[i];
                Policy p = {.name = (char *) "p", .ipv6 = c->v6, .ipv4 = c->v4};
                Desired d;

                print_message("case: %s\n", c->what);
                compute_desired(&p, &c->current, &c->current, 0, c->tso, c->ipv4, &d);
                assert_int_equal(d.sizes.gso_max_size, c->want.gso_max_size);
                assert_int_equal(d.sizes.gro_max_size, c->want.gro_max_size);
                if (c->ipv4) {
                        assert_int_equal(d.sizes.gso_ipv4_max_size, c->want.gso_ipv4_max_size);
                        assert_int_equal(d.sizes.gro_ipv4_max_size, c->want.gro_ipv4_max_size);
                }
                assert_int_equal(d.families, c->families);
                assert_int_equal(d.clamped, c->clamped);
                assert_int_equal(d.ipv4_unsupported, c->unsupported);
        }
}

static void test_compute_restore(void **state) {
        const Sizes orig = {65536, 65536, 60000, 61000};
        const Sizes cur = {185000, 185000, 150000, 151000};
        Sizes r;

        compute_restore(&orig, SIZE_BITS_ALL, &cur, 524280, true, &r);
        assert_memory_equal(&r, &orig, sizeof(Sizes));

        /* Only the sizes bigtcpd wrote go back; the others stay as they are now. */
        compute_restore(&orig, SIZE_BITS_IPV6, &cur, 524280, true, &r);
        assert_int_equal(r.gso_max_size, 65536);
        assert_int_equal(r.gro_max_size, 65536);
        assert_int_equal(r.gso_ipv4_max_size, 150000);
        assert_int_equal(r.gro_ipv4_max_size, 151000);

        /* An original above today's limit is clamped, never refused. */
        const Sizes big = {300000, 300000, 300000, 300000};
        compute_restore(&big, SIZE_BITS_ALL, &cur, 65536, true, &r);
        assert_int_equal(r.gso_max_size, 65536);
        assert_int_equal(r.gro_max_size, 300000);
        assert_int_equal(r.gso_ipv4_max_size, 65536);

        /* One size alone. */
        compute_restore(&orig, SIZE_BIT_GRO_IPV4, &cur, 524280, true, &r);
        assert_int_equal(r.gso_ipv4_max_size, 150000);
        assert_int_equal(r.gro_ipv4_max_size, 61000);
}

/* A size bigtcpd owns that the new policy leaves out goes back to its original; one bigtcpd never
 * wrote stays as it is; what the policy names it gets. */
static void test_desired_gives_back(void **state) {
        const Sizes orig = {65536, 65536, 65536, 65536};
        const Sizes cur = {185000, 185000, 185000, 190000};
        Policy p = {.name = (char *) "b", .ipv6 = {true, B(150000), UNSET}};
        Desired d;

        /* policy A wrote all four; B names only gso_max_size */
        compute_desired(&p, &cur, &orig, SIZE_BITS_ALL, 524280, true, &d);
        assert_int_equal(d.owned, SIZE_BIT_GSO);
        assert_int_equal(d.families, FAMILY_IPV6);
        assert_int_equal(d.sizes.gso_max_size, 150000);
        assert_int_equal(d.sizes.gro_max_size, 65536);
        assert_int_equal(d.sizes.gso_ipv4_max_size, 65536);
        assert_int_equal(d.sizes.gro_ipv4_max_size, 65536);

        /* only the IPv6 pair was bigtcpd's: the IPv4 sizes stay as someone else set them */
        compute_desired(&p, &cur, &orig, SIZE_BITS_IPV6, 524280, true, &d);
        assert_int_equal(d.sizes.gro_max_size, 65536);
        assert_int_equal(d.sizes.gso_ipv4_max_size, 185000);
        assert_int_equal(d.sizes.gro_ipv4_max_size, 190000);

        /* an original above today's limit is clamped, never refused */
        const Sizes big = {300000, 300000, 300000, 300000};
        compute_desired(&p, &cur, &big, SIZE_BITS_ALL, 65536, true, &d);
        assert_int_equal(d.sizes.gso_max_size, 65536); /* and the named one clamped */
        assert_int_equal(d.sizes.gso_ipv4_max_size, 65536);
        assert_int_equal(d.sizes.gro_ipv4_max_size, 300000);
        assert_int_equal(d.clamped, CLAMP_GSO);

        assert_int_equal(policy_owned_sizes(&p, false), SIZE_BIT_GSO);
        Policy q = {.name = (char *) "q", .ipv4 = {true, LEGACY, B(1)}};
        assert_int_equal(policy_owned_sizes(&q, true), SIZE_BITS_IPV4);
        assert_int_equal(policy_owned_sizes(&q, false), 0);
        assert_true(policy_sizes_digest(&p) != policy_sizes_digest(&q));
        Policy p2 = p;
        p2.name = (char *) "other name, same sizes";
        assert_true(policy_sizes_digest(&p) == policy_sizes_digest(&p2));
}

/* `auto` before its search runs: the device gets the search's start, min; the bounds are part of
 * what the policy asks, so moving them is a change. */
static void test_desired_auto(void **state) {
        const Sizes cur = {65536, 65536, 65536, 65536};
        SizeSpec a = {.kind = SIZE_AUTO, .auto_min = 100000, .ceiling_age_usec = 3600 * USEC_PER_SEC};
        Policy p = {.name = (char *) "a", .ipv6 = {true, a, a}};
        Desired d;

        (void) state;
        compute_desired(&p, &cur, &cur, 0, 524280, true, &d);
        assert_int_equal(d.owned, SIZE_BITS_IPV6);
        assert_int_equal(d.sizes.gso_max_size, 100000);
        assert_int_equal(d.sizes.gro_max_size, 100000);
        assert_int_equal(policy_size_asked(&p, 0), 100000);
        /* a min above a bridge's 65536 is clamped like any size */
        compute_desired(&p, &cur, &cur, 0, 65536, true, &d);
        assert_int_equal(d.sizes.gso_max_size, 65536);
        assert_int_equal(d.clamped, CLAMP_GSO);

        uint64_t h = policy_sizes_digest(&p);
        Policy q = p;
        q.ipv6.gro.auto_max = 300000;
        assert_true(policy_sizes_digest(&q) != h);
        q = p;
        q.ipv6.gro.ceiling_age_usec = 60 * USEC_PER_SEC;
        assert_true(policy_sizes_digest(&q) != h);
        q = p;
        q.ipv6.gro = (SizeSpec){.kind = SIZE_BYTES, .bytes = 100000};
        assert_true(policy_sizes_digest(&q) != h);
}

static void test_write_message_order(void **state) {
        const Sizes s = {65536, 65536, 185000, 185000};
        struct nl_msg *msg = NULL;
        const int want[] = {BT_IFLA_GSO_MAX_SIZE, BT_IFLA_GRO_MAX_SIZE, BT_IFLA_GSO_IPV4_MAX_SIZE,
                            BT_IFLA_GRO_IPV4_MAX_SIZE};
        const uint32_t values[] = {65536, 65536, 185000, 185000};
        struct nlattr *a;
        int rem;
        size_t i = 0;

        assert_int_equal(link_write_message(7, &s, true, &msg), 0);
        struct nlmsghdr *nlh = nlmsg_hdr(msg);
        assert_int_equal(nlh->nlmsg_type, RTM_NEWLINK);
        assert_int_equal(((struct ifinfomsg *) nlmsg_data(nlh))->ifi_index, 7);
        nlmsg_for_each_attr(a, nlh, sizeof(struct ifinfomsg), rem) {
                assert_true(i < 4);
                assert_int_equal(nla_type(a), want[i]);
                assert_int_equal(nla_get_u32(a), values[i]);
                i++;
        }
        assert_int_equal(i, 4);
        nlmsg_free(msg);

        /* Without IPv4 support the message carries the two IPv6 sizes only. */
        assert_int_equal(link_write_message(7, &s, false, &msg), 0);
        i = 0;
        nlmsg_for_each_attr(a, nlmsg_hdr(msg), sizeof(struct ifinfomsg), rem) i++;
        assert_int_equal(i, 2);
        nlmsg_free(msg);
}

static void test_change_format(void **state) {
        const Sizes a = {65536, 65536, 65536, 65536}, b = {185000, 65536, 185000, 65536};
        char buf[256];

        assert_string_equal(sizes_change_format(&a, &b, true, buf, sizeof(buf)),
                            "gso_max_size 65536→185000 gso_ipv4_max_size 65536→185000");
        assert_string_equal(sizes_change_format(&a, &b, false, buf, sizeof(buf)), "gso_max_size 65536→185000");
        assert_string_equal(sizes_change_format(&a, &a, true, buf, sizeof(buf)), "no change");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_compute_desired),
                cmocka_unit_test(test_desired_auto),
                cmocka_unit_test(test_compute_restore),
                cmocka_unit_test(test_desired_gives_back),
                cmocka_unit_test(test_write_message_order),
                cmocka_unit_test(test_change_format),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
