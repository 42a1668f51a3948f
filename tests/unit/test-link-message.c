/* test-link-message.c — parsing link messages, and applying them to a device. */
#include "netlink-messages.h"

#include "device.h"
#include "netlink-link.h"

static void test_link_parse(void **state) {
        const Sizes sizes = {65536, 65537, 65538, 65539};
        struct nl_msg *msg = link_msg(RTM_NEWLINK, 5, "veth0", "veth", &sizes);
        struct nlattr *pl = nla_nest_start(msg, BT_IFLA_PROP_LIST);
        nla_put_string(msg, BT_IFLA_ALT_IFNAME, "uplink-a");
        nla_put_string(msg, BT_IFLA_ALT_IFNAME, "uplink-b");
        nla_nest_end(msg, pl);
        const uint8_t mac[6] = {0x0c, 0x42, 0xa1, 0, 0xff, 0x10}, perm[6] = {0x0c, 0x42, 0xa1, 0, 0, 1};
        nla_put(msg, IFLA_ADDRESS, sizeof(mac), mac);
        nla_put(msg, BT_IFLA_PERM_ADDRESS, sizeof(perm), perm);
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
        assert_string_equal(link_message_altname(&m, 1), "uplink-b");
        assert_null(link_message_altname(&m, 2));
        assert_false(link_message_carried_traffic(&m));

        DeviceTable t;
        Device *d;
        unsigned changes;
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 5, &d), 0);
        assert_int_equal(device_update(d, &m, 1234, &changes), 0);
        assert_true(changes & LINK_CHANGE_NAME);
        assert_true(changes & LINK_CHANGE_SIZES);
        assert_true(changes & LINK_CHANGE_TSO);
        char text[DEVICE_MAC_STRLEN];
        assert_string_equal(device_mac(d, text), "0c:42:a1:00:ff:10");
        /* what tells it from a device that has its ifindex later: the permanent address */
        assert_int_equal(d->perm_mac_len, 6);
        assert_string_equal(device_identity_mac(d, text), "0c:42:a1:00:00:01");
        assert_int_equal(device_extra_get(d)->n_altnames, 2);
        assert_string_equal(device_extra_get(d)->altnames[0], "uplink-a");
        assert_null(device_extra_get(d)->altnames[2]);
        assert_int_equal(d->current_usec, 1234);
        /* The same message again changes nothing. */
        assert_int_equal(device_update(d, &m, 1235, &changes), 0);
        assert_int_equal(changes, 0);
        nlmsg_free(msg);

        /* The bridge's AF_BRIDGE port messages are not about the device. */
        msg = link_msg_full(RTM_DELLINK, AF_BRIDGE, 5, "veth0", NULL, NULL, 0, NULL);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EAFNOSUPPORT);
        nlmsg_free(msg);
        device_table_done(&t);
}

/* More altnames than the old fixed array of 32 held: none is dropped any more. */
static void test_many_altnames(void **state) {
        struct nl_msg *msg = link_msg(RTM_NEWLINK, 9, "eth9", NULL, NULL);
        struct nlattr *pl = nla_nest_start(msg, BT_IFLA_PROP_LIST);
        char name[32];
        LinkMessage m;
        DeviceTable t;
        Device *d;
        unsigned changes;

        for (int i = 0; i < 40; i++) {
                snprintf(name, sizeof(name), "alt%d", i);
                nla_put_string(msg, BT_IFLA_ALT_IFNAME, name);
        }
        nla_nest_end(msg, pl);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_int_equal(m.n_altnames, 40);
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 9, &d), 0);
        assert_int_equal(device_update(d, &m, 0, &changes), 0);
        assert_int_equal(device_extra_get(d)->n_altnames, 40);
        assert_string_equal(device_extra_get(d)->altnames[39], "alt39");
        assert_ptr_equal(device_find(&t, "alt39"), d);
        assert_ptr_equal(device_find(&t, "9"), d);
        assert_null(device_find(&t, "alt40"));
        assert_null(device_find(&t, "-9"));
        nlmsg_free(msg);
        device_table_done(&t);
}

static void test_traffic(void **state) {
        struct rtnl_link_stats64 st = {.tx_packets = 3};
        struct nl_msg *msg = link_msg_full(RTM_NEWLINK, AF_UNSPEC, 4, "v4", "veth", NULL, 0, &st);
        LinkMessage m;

        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_true(link_message_carried_traffic(&m));
        nlmsg_free(msg);
}

/* The RTM_DELLINK of a device moving to another namespace says where it goes. */
static void test_link_moved(void **state) {
        struct nl_msg *msg = link_msg(RTM_DELLINK, 7, "m0", "veth", NULL);
        LinkMessage m;

        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_false(m.moved); /* deleted, not moved */
        nlmsg_free(msg);

        msg = link_msg(RTM_DELLINK, 7, "m0", "veth", NULL);
        assert_int_equal(nla_put_u32(msg, BT_IFLA_NEW_NETNSID, 3), 0);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_true(m.moved);
        assert_int_equal(m.new_netnsid, 3);
        assert_int_equal(m.new_ifindex, 7); /* no IFLA_NEW_IFINDEX: it keeps its ifindex */
        assert_int_equal(nla_put_u32(msg, BT_IFLA_NEW_IFINDEX, 12), 0);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
        assert_int_equal(m.new_ifindex, 12);
        nlmsg_free(msg);

        /* an ifindex there of 0, or an attribute of the wrong length: malformed */
        msg = link_msg(RTM_DELLINK, 7, "m0", "veth", NULL);
        assert_int_equal(nla_put_u32(msg, BT_IFLA_NEW_NETNSID, 3), 0);
        assert_int_equal(nla_put_u32(msg, BT_IFLA_NEW_IFINDEX, 0), 0);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);
        msg = link_msg(RTM_DELLINK, 7, "m0", "veth", NULL);
        uint16_t two = 2;
        assert_int_equal(nla_put(msg, BT_IFLA_NEW_NETNSID, sizeof(two), &two), 0);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);
}

/* A veth's peer: IFLA_LINK and IFLA_LINK_NETNSID, onto the device; what names no other device (0,
 * itself, past INT_MAX) or no namespace (a negative nsid) is none. */
static void test_link_peer(void **state) {
        static const struct {
                bool has_link, has_nsid;
                uint32_t link, nsid;
                int want_link, want_nsid;
        } cases[] = {
                {true, true, 7, 3, 7, 3},
                {true, false, 7, 0, 7, -1},          /* the same namespace */
                {true, true, 0, 3, 0, 3},            /* ifindex 0 */
                {true, false, 5, 0, 0, -1},          /* itself */
                {true, true, 5, 3, 5, 3},            /* its ifindex, in another namespace */
                {true, true, 5, 0xffffffffu, 0, -1}, /* … in no namespace: itself */
                {true, true, 0x80000000u, 3, 0, 3},  /* no ifindex */
                {true, true, 7, 0xffffffffu, 7, -1}, /* NETNSA_NSID_NOT_ASSIGNED */
                {false, false, 0, 0, 0, -1},
        };
        DeviceTable t;
        Device *d;
        unsigned changes;

        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 5, &d), 0);
        assert_int_equal(d->link_netnsid, -1);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct nl_msg *msg = link_msg(RTM_NEWLINK, 5, "veth0", "veth", NULL);
                LinkMessage m;
                if (cases[i].has_link)
                        nla_put_u32(msg, IFLA_LINK, cases[i].link);
                if (cases[i].has_nsid)
                        nla_put_u32(msg, IFLA_LINK_NETNSID, cases[i].nsid);
                assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), 0);
                assert_int_equal(m.link, cases[i].want_link);
                assert_int_equal(m.link_netnsid, cases[i].want_nsid);
                assert_int_equal(device_update(d, &m, 1, &changes), 0);
                assert_int_equal(d->link, cases[i].want_link);
                assert_int_equal(d->link_netnsid, cases[i].want_nsid);
                nlmsg_free(msg);
        }
        /* an attribute too short for its type is a malformed message */
        struct nl_msg *msg = link_msg(RTM_NEWLINK, 5, "veth0", "veth", NULL);
        uint16_t two = 7;
        nla_put(msg, IFLA_LINK, sizeof(two), &two);
        LinkMessage m;
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);
        device_table_done(&t);
}

static void test_link_parse_malformed(void **state) {
        struct nl_msg *msg = link_msg(RTM_NEWLINK, 0, "x", NULL, NULL);
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

        /* An altname that is not a string. */
        msg = nlmsg_alloc_simple(RTM_NEWLINK, 0);
        nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO);
        struct nlattr *pl = nla_nest_start(msg, BT_IFLA_PROP_LIST);
        nla_put(msg, BT_IFLA_ALT_IFNAME, 2, "ab");
        nla_nest_end(msg, pl);
        assert_int_equal(link_message_parse(nlmsg_hdr(msg), &m), -EBADMSG);
        nlmsg_free(msg);

        /* A message shorter than its header. */
        struct nlmsghdr shortmsg = {.nlmsg_len = sizeof(struct nlmsghdr), .nlmsg_type = RTM_NEWLINK};
        assert_int_equal(link_message_parse(&shortmsg, &m), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_link_parse),
                cmocka_unit_test(test_many_altnames),
                cmocka_unit_test(test_traffic),
                cmocka_unit_test(test_link_parse_malformed),
                cmocka_unit_test(test_link_moved),
                cmocka_unit_test(test_link_peer),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
