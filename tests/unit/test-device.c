/* test-device.c — the device table, and route messages into it: messages are built here the way
 * the kernel builds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <net/if.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <stdio.h>
#include <sys/socket.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "device.h"
#include "netlink-link.h"
#include "linux-compat.h"
#include "policy-match.h"
#include "pool.h"
#include "route.h"

static void test_table_grows(void **state) {
        DeviceTable t;
        Device *d;
        size_t n = 0;

        assert_int_equal(device_table_init(&t), 0);
        for (int i = 1; i <= 10000; i++)
                assert_int_equal(device_add(&t, i, &d), 0);
        assert_int_equal(device_add(&t, 77, &d), -EEXIST);
        assert_int_equal(t.n_devices, 10000);
        for (int i = 1; i <= 10000; i += 2) {
                d = device_get(&t, i);
                assert_non_null(d);
                device_remove(&t, d);
                device_free(d);
        }
        assert_null(device_get(&t, 9999));
        assert_non_null(device_get(&t, 10000));
        DEVICE_FOREACH(d, &t, it) n++;
        assert_int_equal(n, 5000);
        /* the slots of the removed ones are taken again, each device whole and zeroed */
        for (int i = 10001; i <= 15000; i++) {
                assert_int_equal(device_add(&t, i, &d), 0);
                assert_int_equal(d->life.state, DEVICE_UNMANAGED);
                assert_null(d->kind);
                assert_string_equal(d->ifname, "");
                snprintf(d->ifname, sizeof(d->ifname), "d%d", i);
        }
        n = 0;
        DEVICE_FOREACH(d, &t, it) {
                char name[16];
                snprintf(name, sizeof(name), "d%d", d->ifindex);
                if (d->ifindex > 10000)
                        assert_string_equal(d->ifname, name); /* no two share a slot */
                n++;
        }
        assert_int_equal(n, 10000);
        /* all gone, then back: blocks freed and taken anew */
        for (int i = 1; i <= 15000; i++)
                if ((d = device_get(&t, i))) {
                        device_remove(&t, d);
                        device_free(d);
                }
        assert_int_equal(t.n_devices, 0);
        for (int i = 1; i <= 300; i++)
                assert_int_equal(device_add(&t, i, &d), 0);
        device_table_done(&t);
}

static void update(Device *d, const LinkMessage *m) {
        unsigned changes;
        assert_int_equal(device_update(d, m, 0, &changes), 0);
}

/* Addresses live in the device while both fit, else on the heap: each way, and between them, the
 * device reports what the kernel said last; a message without one keeps it. */
static void test_addresses(void **state) {
        DeviceTable t;
        Device *d;
        char buf[DEVICE_MAC_STRLEN];
        uint8_t ib[20], perm[6] = {0x0c, 0x42, 0xa1, 0, 0, 1}, mac[6] = {2, 0, 0, 0, 0, 9};

        for (size_t i = 0; i < sizeof(ib); i++)
                ib[i] = (uint8_t) (0x80 + i);
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 5, &d), 0);
        assert_string_equal(device_mac(d, buf), "");
        assert_string_equal(device_identity_mac(d, buf), "");

        update(d, &(LinkMessage){.ifindex = 5, .ifname = "ib0", .addr = ib, .addr_len = sizeof(ib)});
        assert_string_equal(device_mac(d, buf), "80:81:82:83:84:85:86:87:88:89:8a:8b:8c:8d:8e:8f:90:91:92:93");
        update(d, &(LinkMessage){.ifindex = 5, .perm_addr = perm, .perm_addr_len = sizeof(perm)});
        assert_string_equal(device_mac(d, buf), "80:81:82:83:84:85:86:87:88:89:8a:8b:8c:8d:8e:8f:90:91:92:93");
        assert_string_equal(device_identity_mac(d, buf), "0c:42:a1:00:00:01");
        update(d, &(LinkMessage){.ifindex = 5, .addr = mac, .addr_len = sizeof(mac)}); /* back inside */
        assert_string_equal(device_mac(d, buf), "02:00:00:00:00:09");
        assert_string_equal(device_identity_mac(d, buf), "0c:42:a1:00:00:01");
        update(d, &(LinkMessage){.ifindex = 5, .addr = ib, .addr_len = sizeof(ib)}); /* out again */
        assert_string_equal(device_mac(d, buf), "80:81:82:83:84:85:86:87:88:89:8a:8b:8c:8d:8e:8f:90:91:92:93");
        assert_string_equal(device_identity_mac(d, buf), "0c:42:a1:00:00:01");
        assert_string_equal(d->ifname, "ib0");
        device_table_done(&t); /* frees the heap copy: ASan's leak check says so */
}

/* Kinds and policy names are kept once: two veths share one "veth", which goes with the last. */
static void test_kind_shared(void **state) {
        DeviceTable t;
        Device *a, *b;

        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 1, &a), 0);
        assert_int_equal(device_add(&t, 2, &b), 0);
        update(a, &(LinkMessage){.ifindex = 1, .ifname = "v0", .kind = "veth"});
        update(b, &(LinkMessage){.ifindex = 2, .ifname = "v1", .kind = "veth"});
        assert_ptr_equal(a->kind, b->kind);
        assert_string_equal(a->kind, "veth");
        update(b, &(LinkMessage){.ifindex = 2, .ifname = "v1", .kind = "vxlan"});
        assert_string_equal(b->kind, "vxlan");
        assert_string_equal(a->kind, "veth");
        update(b, &(LinkMessage){.ifindex = 2, .ifname = "v1"});
        assert_null(b->kind);
        device_remove(&t, a);
        device_free(a);
        device_table_done(&t);
}

/* Records of a pool: aligned as their type, zeroed, apart from each other, their slots taken again once
 * freed; under ASan a freed record is poisoned, so that a use after its free is caught. */
static void test_pool(void **state) {
        enum { N = 5000 };
        typedef struct Rec {
                uint64_t a;
                char name[27];
        } Rec;
        static Pool pool = POOL_INIT(Rec);
        static Rec *recs[N];

        for (int round = 0; round < 2; round++) {
                for (int i = 0; i < N; i++) {
                        recs[i] = pool_alloc(&pool);
                        assert_non_null(recs[i]);
                        assert_int_equal((uintptr_t) recs[i] % _Alignof(Rec), 0);
                        assert_int_equal(recs[i]->a, 0);
                        assert_string_equal(recs[i]->name, "");
                        recs[i]->a = (uint64_t) i;
                        snprintf(recs[i]->name, sizeof(recs[i]->name), "record %d", i);
                }
                for (int i = 0; i < N; i++) {
                        char name[27];
                        snprintf(name, sizeof(name), "record %d", i);
                        assert_int_equal(recs[i]->a, i); /* none written over by another */
                        assert_string_equal(recs[i]->name, name);
                }
                /* every other one, then the rest: blocks come free in the middle and at the end */
                for (int i = 0; i < N; i += 2)
                        pool_free(&pool, recs[i]);
#if defined(__SANITIZE_ADDRESS__)
                assert_true(__asan_address_is_poisoned(&recs[0]->a));
                assert_false(__asan_address_is_poisoned(&recs[1]->a));
#endif
                for (int i = 0; i < N / 2; i++) {
                        Rec *r = pool_alloc(&pool); /* a freed slot again */
                        assert_int_equal(r->a, 0);
                        recs[2 * i] = r;
                }
                for (int i = 0; i < N; i++)
                        pool_free(&pool, recs[i]);
        }
        pool_free(&pool, NULL);
        pool_done(&pool);
}

static struct nl_msg *route_msg(int type, int flags, int family, const char *dst, int len, uint32_t table,
                                int oif, const int *mp, size_t n_mp) {
        struct rtmsg rtm = {.rtm_family = (unsigned char) family, .rtm_dst_len = (unsigned char) len,
                            .rtm_table = RT_TABLE_UNSPEC, .rtm_type = RTN_UNICAST};
        struct nl_msg *msg = nlmsg_alloc_simple(type, flags);
        uint8_t addr[16];

        nlmsg_append(msg, &rtm, sizeof(rtm), NLMSG_ALIGNTO);
        nla_put_u32(msg, RTA_TABLE, table);
        if (dst) {
                assert_int_equal(inet_pton(family, dst, addr), 1);
                nla_put(msg, RTA_DST, family == AF_INET ? 4 : 16, addr);
        }
        if (oif)
                nla_put_u32(msg, RTA_OIF, (uint32_t) oif);
        if (n_mp) {
                struct nlattr *a = nla_nest_start(msg, RTA_MULTIPATH);
                for (size_t i = 0; i < n_mp; i++) {
                        struct rtnexthop nh = {.rtnh_len = sizeof(nh), .rtnh_ifindex = mp[i]};
                        nlmsg_append(msg, &nh, sizeof(nh), RTNH_ALIGNTO);
                }
                nla_nest_end(msg, a);
        }
        return msg;
}

static int changed_count;
static void count_changed(Device *d, void *userdata) {
        changed_count++;
}

static void feed(DeviceTable *t, struct nl_msg *msg) {
        assert_int_equal(route_message_handle(t, nlmsg_hdr(msg), count_changed, NULL), 0);
        nlmsg_free(msg);
}

static void test_routes(void **state) {
        const RoutePrefix def = {.is_default = true};
        RoutePrefix ten = {.family = AF_INET, .prefixlen = 8};
        DeviceTable t;
        Device *a, *b, *c;

        inet_pton(AF_INET, "10.0.0.0", ten.addr);
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 1, &a), 0);
        assert_int_equal(device_add(&t, 2, &b), 0);
        assert_int_equal(device_add(&t, 3, &c), 0);

        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET, NULL, 0, RT_TABLE_MAIN, 1, NULL, 0));
        assert_true(device_has_route(a, &def));
        assert_false(device_has_route(b, &def));

        /* `ip route replace default dev b` moves it. */
        changed_count = 0;
        feed(&t, route_msg(RTM_NEWROUTE, NLM_F_REPLACE, AF_INET, NULL, 0, RT_TABLE_MAIN, 2, NULL, 0));
        assert_false(device_has_route(a, &def));
        assert_true(device_has_route(b, &def));
        assert_int_equal(changed_count, 2);

        /* An IPv6 default beside it, then deleted. */
        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET6, NULL, 0, RT_TABLE_MAIN, 3, NULL, 0));
        assert_true(device_has_route(c, &def));
        feed(&t, route_msg(RTM_DELROUTE, 0, AF_INET6, NULL, 0, RT_TABLE_MAIN, 3, NULL, 0));
        assert_false(device_has_route(c, &def));

        /* Prefixes: a /16 inside 10/8 is covered, 11/8 is not, the default is not "10/8". */
        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET, "10.1.0.0", 16, RT_TABLE_MAIN, 3, NULL, 0));
        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET, "11.0.0.0", 8, RT_TABLE_MAIN, 1, NULL, 0));
        assert_true(device_has_route(c, &ten));
        assert_false(device_has_route(a, &ten));
        assert_false(device_has_route(b, &ten));

        /* Multipath: every nexthop's device is an output. */
        const int mp[] = {1, 3};
        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET, "10.9.0.0", 16, 100, 0, mp, 2));
        assert_true(device_has_route(a, &ten));

        /* The local table is not a way out. */
        feed(&t, route_msg(RTM_NEWROUTE, 0, AF_INET, NULL, 0, RT_TABLE_LOCAL, 3, NULL, 0));
        assert_false(device_has_route(c, &def));

        route_forget_all(&t, NULL, NULL);
        assert_false(device_has_route(b, &def));
        device_table_done(&t);
}

/* The sizes that passed on a device: the last PROVEN_SIZES_MAX distinct ones, the oldest first,
 * one passing again moved to the end; the most recent in the device, the older ones beside it. */
static void test_proven(void **state) {
        DeviceTable t;
        Device *d;
        ProvenSizes p;

        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 1, &d), 0);
        assert_int_equal(device_proven_n(d), 0);
        assert_false(device_proven_contain(d, &(Sizes){1, 1, 1, 1}, true));

        for (uint32_t v = 1; v <= PROVEN_SIZES_MAX + 1; v++)
                device_proven_add(d, &(Sizes){v, v, v, v}, true);
        assert_int_equal(device_proven_n(d), PROVEN_SIZES_MAX);
        assert_false(device_proven_contain(d, &(Sizes){1, 1, 1, 1}, true)); /* the oldest went */
        for (unsigned i = 0; i < PROVEN_SIZES_MAX; i++)
                assert_int_equal(device_proven_at(d, i)->gso_max_size, i + 2);

        /* one there already goes to the end (its IPv4 sizes not compared without IPv4: taken) */
        device_proven_add(d, &(Sizes){3, 3, 9, 9}, false);
        device_proven_get(d, &p);
        assert_int_equal(p.n, PROVEN_SIZES_MAX);
        assert_int_equal(p.items[0].gso_max_size, 2);
        assert_int_equal(p.items[1].gso_max_size, 4);
        assert_int_equal(p.items[PROVEN_SIZES_MAX - 1].gso_max_size, 3);
        assert_int_equal(p.items[PROVEN_SIZES_MAX - 1].gso_ipv4_max_size, 9);
        assert_true(device_proven_contain(d, &(Sizes){3, 3, 9, 9}, true));
        assert_false(device_proven_contain(d, &(Sizes){3, 3, 3, 3}, true));
        assert_true(device_proven_contain(d, &(Sizes){3, 3, 3, 3}, false));

        /* set and get round-trip; one alone needs nothing beside the device */
        device_proven_set(d, &(ProvenSizes){.items = {{7, 7, 7, 7}}, .n = 1});
        assert_int_equal(device_proven_n(d), 1);
        assert_null(d->record.proven_older);
        assert_int_equal(device_proven_at(d, 0)->gso_max_size, 7);
        device_proven_set(d, &p);
        ProvenSizes q;
        device_proven_get(d, &q);
        assert_memory_equal(&p, &q, sizeof(p));

        device_proven_clear(d);
        assert_int_equal(device_proven_n(d), 0);
        assert_null(d->record.proven_older);
        device_proven_add(d, &(Sizes){5, 5, 5, 5}, true);
        device_proven_add(d, &(Sizes){6, 6, 6, 6}, true);
        device_table_done(&t); /* with the older ones: freed with it */
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_table_grows),
                cmocka_unit_test(test_addresses),
                cmocka_unit_test(test_kind_shared),
                cmocka_unit_test(test_pool),
                cmocka_unit_test(test_routes),
                cmocka_unit_test(test_proven),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
