/* test-device.c — link and route message parsing into the device table, the table itself, and
 * the state file, without a kernel: messages are built here the way the kernel builds them. */
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

#include "device.h"
#include "linux-compat.h"
#include "match.h"
#include "route.h"
#include "state.h"

static struct nl_msg *link_msg(int type, int family, int ifindex, const char *name, const char *kind,
                               const uint32_t sizes[5]) {
        struct ifinfomsg ifi = {.ifi_family = (unsigned char) family, .ifi_index = ifindex, .ifi_flags = IFF_UP};
        struct nl_msg *msg = nlmsg_alloc_simple(type, 0);

        assert_non_null(msg);
        assert_int_equal(nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO), 0);
        if (name)
                assert_int_equal(nla_put_string(msg, IFLA_IFNAME, name), 0);
        if (kind) {
                struct nlattr *li = nla_nest_start(msg, IFLA_LINKINFO);
                assert_int_equal(nla_put_string(msg, IFLA_INFO_KIND, kind), 0);
                nla_nest_end(msg, li);
        }
        if (sizes) {
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_MAX_SIZE, sizes[0]), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_MAX_SIZE, sizes[1]), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GSO_IPV4_MAX_SIZE, sizes[2]), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_GRO_IPV4_MAX_SIZE, sizes[3]), 0);
                assert_int_equal(nla_put_u32(msg, BT_IFLA_TSO_MAX_SIZE, sizes[4]), 0);
        }
        return msg;
}

static void test_link_parse(void **state) {
        const uint32_t sizes[5] = {65536, 65537, 65538, 65539, 524280};
        struct nl_msg *msg = link_msg(RTM_NEWLINK, AF_UNSPEC, 5, "veth0", "veth", sizes);
        struct nlattr *pl = nla_nest_start(msg, BT_IFLA_PROP_LIST);
        nla_put_string(msg, BT_IFLA_ALT_IFNAME, "uplink-a");
        nla_put_string(msg, BT_IFLA_ALT_IFNAME, "uplink-b");
        nla_nest_end(msg, pl);
        const uint8_t mac[6] = {0x0c, 0x42, 0xa1, 0, 0xff, 0x10};
        nla_put(msg, IFLA_ADDRESS, sizeof(mac), mac);
        LinkMessage m;

        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_int_equal(m.ifindex, 5);
        assert_string_equal(m.ifname, "veth0");
        assert_string_equal(m.kind, "veth");
        assert_true(m.has_sizes && m.has_ipv4_sizes && m.has_tso_max_size);
        assert_int_equal(m.sizes.gso_max_size, 65536);
        assert_int_equal(m.sizes.gro_ipv4_max_size, 65539);
        assert_int_equal(m.tso_max_size, 524280);
        assert_int_equal(m.n_altnames, 2);
        assert_string_equal(m.altnames[1], "uplink-b");

        DeviceTable t;
        Device *d;
        unsigned changes;
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 5, &d), 0);
        assert_int_equal(device_update(d, &m, &changes), 0);
        assert_true(changes & LINK_CHANGE_NAME);
        assert_true(changes & LINK_CHANGE_SIZES);
        assert_true(changes & LINK_CHANGE_TSO);
        assert_string_equal(d->mac, "0c:42:a1:00:ff:10");
        assert_int_equal(d->n_altnames, 2);
        /* The same message again changes nothing. */
        assert_int_equal(device_update(d, &m, &changes), 0);
        assert_int_equal(changes, 0);
        nlmsg_free(msg);

        /* The bridge's AF_BRIDGE port messages are not about the device. */
        msg = link_msg(RTM_DELLINK, AF_BRIDGE, 5, "veth0", NULL, NULL);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EAFNOSUPPORT);
        nlmsg_free(msg);
        device_table_done(&t);
}

static void test_link_parse_malformed(void **state) {
        struct nl_msg *msg = link_msg(RTM_NEWLINK, AF_UNSPEC, 0, "x", NULL, NULL);
        LinkMessage m;

        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG); /* ifindex 0 */
        nlmsg_free(msg);

        /* A name without its NUL, and a size attribute of the wrong length. */
        struct ifinfomsg ifi = {.ifi_index = 3};
        msg = nlmsg_alloc_simple(RTM_NEWLINK, 0);
        nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO);
        nla_put(msg, IFLA_IFNAME, 3, "abc");
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);

        msg = nlmsg_alloc_simple(RTM_NEWLINK, 0);
        nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO);
        uint16_t two = 2;
        nla_put(msg, BT_IFLA_GSO_MAX_SIZE, sizeof(two), &two);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);

        /* A message shorter than its header. */
        struct nlmsghdr shortmsg = {.nlmsg_len = sizeof(struct nlmsghdr), .nlmsg_type = RTM_NEWLINK};
        assert_int_equal(link_message_parse(&shortmsg, &m), -EBADMSG);
}

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
        device_table_done(&t);
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

static void test_state_roundtrip(void **state) {
        char dir[] = "/tmp/bigtcpd-test-state-XXXXXX";
        DeviceTable t;
        Device *d;
        StateEntry *e = NULL;
        size_t n = 0;

        assert_non_null(mkdtemp(dir));
        assert_int_equal(state_load(dir, &e, &n, NULL), 0); /* missing: fine, empty */
        assert_int_equal(n, 0);

        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 42, &d), 0);
        d->ifname = strdup("eth0");
        d->has_original = true;
        d->original = (Sizes){65536, 65536, 60000, 60001};
        d->written_families = FAMILY_IPV4;
        assert_int_equal(device_add(&t, 43, &d), 0); /* never written: not in the file */
        assert_int_equal(state_save(dir, &t, 1), 0);

        assert_int_equal(state_load(dir, &e, &n, NULL), 0);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].ifindex, 42);
        assert_string_equal(e[0].ifname, "eth0");
        assert_int_equal(e[0].original.gro_ipv4_max_size, 60001);
        assert_int_equal(e[0].written_families, FAMILY_IPV4);
        state_entries_free(e, n);
        device_table_done(&t);

        char path[128];
        snprintf(path, sizeof(path), "%s/state.json", dir);
        FILE *f = fopen(path, "we");
        fputs("{\"version\":1,\"devices\":[{\"ifindex\":", f); /* truncated */
        fclose(f);
        assert_int_equal(state_load(dir, &e, &n, NULL), -EBADMSG);
        unlink(path);
        rmdir(dir);
}

static void test_state_journal(void **state) {
        char dir[] = "/tmp/bigtcpd-test-journal-XXXXXX";
        DeviceTable t;
        Device *a, *b;
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g = 0;
        char path[128];

        assert_non_null(mkdtemp(dir));
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 10, &a), 0);
        assert_int_equal(device_add(&t, 11, &b), 0);
        a->ifname = strdup("a");
        b->ifname = strdup("b");
        a->has_original = b->has_original = true;
        a->original = b->original = (Sizes){65536, 65536, 65536, 65536};
        assert_int_equal(state_save(dir, &t, 7), 0);

        /* b changes, a goes away, then an entry of an older generation that must be ignored */
        b->original.gso_max_size = 1000;
        const Device *devs[] = {b};
        const int gone[] = {10};
        assert_int_equal(state_append(dir, 7, devs, 1, gone, 1), 0);
        b->original.gso_max_size = 2000;
        assert_int_equal(state_append(dir, 6, devs, 1, NULL, 0), 0);
        assert_int_equal(state_load(dir, &e, &n, &g), 0);
        assert_int_equal(g, 7);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].ifindex, 11);
        assert_int_equal(e[0].original.gso_max_size, 1000);
        state_entries_free(e, n);

        /* a torn last line ends the replay without failing the load */
        snprintf(path, sizeof(path), "%s/state.journal", dir);
        FILE *f = fopen(path, "ae");
        fputs("{\"g\":7,\"device\":{\"ifindex\":", f);
        fclose(f);
        assert_int_equal(state_load(dir, &e, &n, &g), 0);
        assert_int_equal(n, 1);
        state_entries_free(e, n);

        /* a new snapshot drops the journal */
        assert_int_equal(state_save(dir, &t, 8), 0);
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(state_load(dir, &e, &n, &g), 0);
        assert_int_equal(g, 8);
        assert_int_equal(n, 2);
        state_entries_free(e, n);
        device_table_done(&t);

        snprintf(path, sizeof(path), "%s/state.json", dir);
        unlink(path);
        rmdir(dir);
}

static void test_state_parse_rejects(void **state) {
        const char *bad[] = {
                "",
                "[]",
                "{\"version\":2,\"devices\":[]}",
                "{\"version\":1}",
                "{\"version\":1,\"devices\":[{\"ifindex\":-1}]}",
                "{\"version\":1,\"devices\":[{\"ifindex\":3,\"original\":{\"gso_max_size\":\"x\"}}]}",
                ("{\"version\":1,\"devices\":[{\"ifindex\":3,\"original\":{\"gso_max_size\":1,\"gro_max_size\":1,"
                 "\"gso_ipv4_max_size\":1,\"gro_ipv4_max_size\":99999999999},\"families\":[]}]}"),
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                StateEntry *e = NULL;
                size_t n = 0;
                assert_int_equal(state_parse(bad[i], strlen(bad[i]), &e, &n), -EBADMSG);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_link_parse),         cmocka_unit_test(test_link_parse_malformed),
                cmocka_unit_test(test_table_grows),        cmocka_unit_test(test_routes),
                cmocka_unit_test(test_state_roundtrip),    cmocka_unit_test(test_state_journal),
                cmocka_unit_test(test_state_parse_rejects),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
