/* test-match.c — matching devices against policies: names with negation and altnames, kinds with
 * the device and loopback pseudo-kinds, drivers, addresses, routes, and route prefix coverage. */

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy-match.h"
#include "netns-set.h"
#include "policy.h"
#include "test-helpers.h"
#include "util.h"

/* A device as the tests describe it. Routes are the destinations of the routes whose output it
 * is, e.g. "0.0.0.0/0" for an IPv4 default route. */
typedef struct Dev {
        const char *ifname;
        const char *altnames[3];
        const char *kind;
        bool loopback;
        const char *mac;
        const char *driver;
        const char *routes[4];
        const char *netns; /* NULL: the daemon's own */
} Dev;

typedef struct DevState {
        const Dev *dev;
        unsigned driver_calls;
} DevState;

static const char *dev_get_driver(void *userdata) {
        DevState *st = userdata;
        st->driver_calls++;
        return st->dev->driver;
}

static bool dev_has_route(void *userdata, const RoutePrefix *p) {
        DevState *st = userdata;

        for (size_t i = 0; i < ELEMENTSOF(st->dev->routes) && st->dev->routes[i]; i++) {
                RoutePrefix r;
                if (route_prefix_parse(st->dev->routes[i], &r) < 0)
                        fail_msg("bad route in test: %s", st->dev->routes[i]);
                if (route_prefix_covers(p, r.family, r.addr, r.prefixlen))
                        return true;
        }
        return false;
}

static MatchDevice match_device(DevState *st) {
        size_t n_alt = 0;

        while (n_alt < ELEMENTSOF(st->dev->altnames) && st->dev->altnames[n_alt])
                n_alt++;
        return (MatchDevice){
                .ifname = st->dev->ifname,
                .altnames = (char *const *) st->dev->altnames,
                .n_altnames = n_alt,
                .kind = st->dev->kind,
                .loopback = st->dev->loopback,
                .mac = st->dev->mac,
                .netns = st->dev->netns,
                .get_driver = dev_get_driver,
                .has_route = dev_has_route,
                .userdata = st,
        };
}

/* Build a one-policy set from the text of its `match:` (flow style). */
static PolicySet *policy_from_match(const char *match) {
        _cleanup_(freep) char *yaml = NULL, *errors = NULL;
        PolicySet *s;

        if (asprintf(&yaml,
                     "version: 1\npolicies:\n  - name: p\n    match: %s\n    ipv6: { gso-max-size: 1 }\n",
                     match) < 0)
                abort();
        s = parse_string(yaml, &errors);
        if (!s)
                fail_msg("match %s: %s", match, errors);
        return s;
}

static const Dev eth0 = {.ifname = "eth0",
                         .mac = "0c:42:a1:00:00:01",
                         .driver = "mlx5_core",
                         .routes = {"0.0.0.0/0", "10.1.0.0/16"}};
static const Dev ens9 = {.ifname = "ens9",
                         .altnames = {"enp3s0f1", "mgmt0"},
                         .mac = "52:54:00:12:34:56",
                         .driver = "virtio_net",
                         .routes = {"192.168.0.0/24"}};
static const Dev enp = {
        .ifname = "enp1s0", .altnames = {"uplink"}, .driver = "ice", .routes = {"::/0", "2001:db8:1::/48"}};
static const Dev veth = {.ifname = "veth1", .kind = "veth", .mac = "aa:bb:cc:dd:ee:ff"};
static const Dev br = {.ifname = "br0", .kind = "bridge", .routes = {"10.0.0.0/8"}};
static const Dev lo = {
        .ifname = "lo", .loopback = true, .mac = "00:00:00:00:00:00", .routes = {"127.0.0.0/8", "::1/128"}};
static const Dev nomac = {.ifname = "wg0", .kind = "wireguard"};
static const Dev pod = {.ifname = "eth0", .kind = "veth", .netns = "cni-1234"};
static const Dev sys = {.ifname = "eth0", .kind = "veth", .netns = "cni-kube-system-7"};
static const Dev podlo = {.ifname = "lo", .loopback = true, .netns = "cni-1234"};

typedef struct MatchCase {
        const char *match;
        const Dev *dev;
        bool matches;
        unsigned driver_calls; /* the driver is looked up only when asked for */
} MatchCase;

static const MatchCase match_cases[] = {
        /* no keys: every device but lo */
        {"{}", &eth0, true, 0},
        {"{}", &veth, true, 0},
        {"{}", &lo, false, 0},
        {"", &br, true, 0},

        /* name: globs on the name or any altname */
        {"{ name: eth0 }", &eth0, true, 0},
        {"{ name: eth1 }", &eth0, false, 0},
        {"{ name: \"eth*\" }", &eth0, true, 0},
        {"{ name: [\"wl*\", \"eth?\"] }", &eth0, true, 0},
        {"{ name: \"enp3s0f*\" }", &ens9, true, 0}, /* by altname */
        {"{ name: uplink }", &enp, true, 0},        /* by altname */
        {"{ name: \"en[ps]*\" }", &ens9, true, 0},
        {"{ name: \"eth[!0]\" }", &eth0, false, 0},
        /* negation: a "!" glob that matches the name or any altname excludes */
        {"{ name: [\"e*\", \"!ens9\"] }", &ens9, false, 0},
        {"{ name: [\"e*\", \"!ens9\"] }", &eth0, true, 0},
        {"{ name: [\"e*\", \"!mgmt*\"] }", &ens9, false, 0},   /* excluded by altname */
        {"{ name: [\"!mgmt*\", \"enp*\"] }", &ens9, false, 0}, /* order does not matter */
        {"{ name: [\"!mgmt*\", \"enp*\"] }", &enp, true, 0},
        {"{ name: [\"mgmt0\", \"!ens9\"] }", &ens9, false, 0}, /* plain by altname, excluded by name */
        {"{ name: [\"*\", \"!veth*\", \"!br*\"] }", &veth, false, 0},
        {"{ name: [\"*\", \"!veth*\", \"!br*\"] }", &nomac, true, 0},
        {"{ name: lo }", &lo, false, 0}, /* lo needs kind loopback */

        /* kind */
        {"{ kind: veth }", &veth, true, 0},
        {"{ kind: [bridge, veth] }", &veth, true, 0},
        {"{ kind: bridge }", &veth, false, 0},
        {"{ kind: veth }", &eth0, false, 0},
        {"{ kind: device }", &eth0, true, 0},
        {"{ kind: device }", &veth, false, 0},
        {"{ kind: device }", &lo, false, 0},
        {"{ kind: [device, veth] }", &veth, true, 0},
        {"{ kind: loopback }", &lo, true, 0},
        {"{ kind: loopback }", &eth0, false, 0},
        {"{ kind: [loopback, device] }", &eth0, true, 0},
        {"{ kind: [loopback, device] }", &lo, true, 0},
        {"{ kind: loopback, name: lo }", &lo, true, 0},
        {"{ kind: loopback, name: [\"*\", \"!lo\"] }", &lo, false, 0},

        /* driver: looked up only when listed, and only when the cheap keys hold */
        {"{ driver: mlx5_core }", &eth0, true, 1},
        {"{ driver: \"mlx5*\" }", &eth0, true, 1},
        {"{ driver: [ice, mlx4_en] }", &eth0, false, 1},
        {"{ driver: virtio_net }", &veth, false, 1}, /* no driver known */
        {"{ driver: mlx5_core, kind: veth }", &eth0, false, 0},
        {"{ driver: mlx5_core, name: \"eth*\" }", &eth0, true, 1},

        /* mac: globs on the lower-case address; patterns are folded at parse time */
        {"{ mac: \"0c:42:a1:*\" }", &eth0, true, 0},
        {"{ mac: \"0C:42:A1:*\" }", &eth0, true, 0},
        {"{ mac: [\"52:54:00:*\", \"0c:42:a1:00:00:0[0-9]\"] }", &eth0, true, 0},
        {"{ mac: \"52:54:00:*\" }", &eth0, false, 0},
        {"{ mac: \"*\" }", &nomac, false, 0}, /* no address, no match */

        /* route */
        {"{ route: default }", &eth0, true, 0},
        {"{ route: default }", &enp, true, 0}, /* IPv6 default */
        {"{ route: default }", &ens9, false, 0},
        {"{ route: default }", &veth, false, 0},         /* no routes at all */
        {"{ route: \"10.0.0.0/8\" }", &eth0, true, 0},   /* 10.1.0.0/16 lies inside */
        {"{ route: \"10.0.0.0/8\" }", &br, true, 0},     /* exactly */
        {"{ route: \"10.1.2.0/24\" }", &eth0, false, 0}, /* the route is wider than the prefix */
        {"{ route: \"0.0.0.0/0\" }", &ens9, true, 0},    /* every IPv4 route */
        {"{ route: \"0.0.0.0/0\" }", &enp, false, 0},    /* but not IPv6 ones */
        {"{ route: \"2001:db8::/32\" }", &enp, true, 0},
        {"{ route: \"2001:db8:2::/48\" }", &enp, false, 0},
        {"{ route: [\"192.168.0.0/16\", \"2001:db8::/32\"] }", &ens9, true, 0},
        {"{ route: \"192.168.0.1\" }", &ens9, false, 0}, /* a host route is narrower than the /24 */
        {"{ route: \"127.0.0.0/8\", kind: loopback }", &lo, true, 0},

        /* netns: without it, the daemon's own namespace only */
        {"{}", &pod, false, 0},
        {"{ name: \"*\" }", &pod, false, 0},
        {"{ netns: host }", &eth0, true, 0},
        {"{ netns: host }", &pod, false, 0},
        {"{ netns: \"cni-*\" }", &pod, true, 0},
        {"{ netns: \"cni-*\" }", &eth0, false, 0}, /* a glob never means the host */
        {"{ netns: \"*\" }", &eth0, false, 0},
        {"{ netns: \"*\" }", &pod, true, 0},
        {"{ netns: [host, \"cni-*\"] }", &eth0, true, 0},
        {"{ netns: [host, \"cni-*\"] }", &pod, true, 0},
        {"{ netns: [\"cni-*\", \"!cni-kube-system-*\"] }", &pod, true, 0},
        {"{ netns: [\"cni-*\", \"!cni-kube-system-*\"] }", &sys, false, 0},
        {"{ netns: [\"!cni-kube-system-*\", host, \"cni-*\"] }", &sys, false, 0}, /* order does not matter */
        {"{ netns: [\"*\", \"!host\"] }", &eth0, false, 0},
        {"{ netns: cni-1234, name: eth0, kind: veth }", &pod, true, 0},
        {"{ netns: cni-1234, name: eth1 }", &pod, false, 0},
        {"{ netns: cni-1234, driver: veth }", &pod, false, 1}, /* the namespace checked first */
        {"{ netns: cni-9, driver: veth }", &pod, false, 0},
        {"{ netns: \"cni-*\" }", &podlo, false, 0}, /* lo needs kind loopback there too */
        {"{ netns: \"cni-*\", kind: loopback }", &podlo, true, 0},

        /* all keys must hold */
        {"{ name: \"eth*\", kind: device, mac: \"0c:*\", route: default, driver: \"mlx*\" }", &eth0, true,
         1},
        {"{ name: \"eth*\", kind: device, mac: \"0c:*\", route: \"172.16.0.0/12\", driver: \"mlx*\" }",
         &eth0, false, 1},
        {"{ name: \"eth*\", kind: bridge }", &eth0, false, 0},
};

static void test_policy_matches(void **state) {
        unsigned failed = 0;

        for (size_t i = 0; i < ELEMENTSOF(match_cases); i++) {
                const MatchCase *c = &match_cases[i];
                PolicySet *s = policy_from_match(c->match);
                DevState st = {.dev = c->dev};
                MatchDevice d = match_device(&st);
                bool m = policy_matches(&s->policies[0], &d);

                if (m != c->matches || st.driver_calls != c->driver_calls) {
                        print_error("match %s on %s: %s with %u driver lookups, expected %s with %u\n",
                                    c->match, c->dev->ifname, m ? "matches" : "does not match",
                                    st.driver_calls, c->matches ? "matches" : "does not match",
                                    c->driver_calls);
                        failed++;
                }
                policy_set_free(s);
        }
        assert_int_equal(failed, 0);
}

/* show's "matched by": the key and item of each key that chose the device, the name an altname. */
static void test_match_explain(void **state) {
        static const struct {
                const char *match;
                const Dev *dev;
                const char *want;
        } cases[] = {
                {"{ name: [\"eth*\"] }", &eth0, "name eth*"},
                {"{ name: [\"!ens9\", \"mgmt*\", \"ens*\"] }", &enp, NULL},
                {"{ name: [\"lo*\", \"mgmt*\"] }", &ens9, "name mgmt* (altname mgmt0)"},
                {"{ name: [\"veth*\"], kind: [bridge, veth] }", &veth, "name veth*, kind veth"},
                {"{ kind: [device], driver: [\"mlx5*\"], mac: [\"0c:42:*\"] }", &eth0,
                 "kind device, mac 0c:42:*, driver mlx5*"},
                {"{ route: [default] }", &eth0, "route"},
                {"{}", &br, "every device (no match keys)"},
                {"{ netns: [\"!cni-kube-*\", \"cni-*\"], name: [eth0] }", &pod, "netns cni-*, name eth0"},
                {"{ netns: [host, \"cni-*\"], kind: [veth] }", &veth, "netns host, kind veth"},
                {"{ netns: [\"cni-*\"] }", &pod, "netns cni-*"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                PolicySet *s = policy_from_match(cases[i].match);
                DevState st = {.dev = cases[i].dev};
                MatchDevice d = match_device(&st);
                _cleanup_(freep) char *why = NULL;

                if (!cases[i].want) { /* explained only for a device the policy matches */
                        assert_false(policy_matches(&s->policies[0], &d));
                        policy_set_free(s);
                        continue;
                }
                assert_true(policy_matches(&s->policies[0], &d));
                assert_int_equal(policy_match_explain(&s->policies[0], &d, &why), 0);
                if (!streq_ptr(why, cases[i].want))
                        fail_msg("%s on %s: \"%s\", want \"%s\"", cases[i].match, cases[i].dev->ifname, why,
                                 cases[i].want);
                policy_set_free(s);
        }
}

/* Callbacks may be missing: no driver lookup means no driver, no route lookup means no route. */
static void test_missing_callbacks(void **state) {
        PolicySet *s1 = policy_from_match("{ driver: \"*\" }");
        PolicySet *s2 = policy_from_match("{ route: default }");
        PolicySet *s3 = policy_from_match("{ name: \"*\" }");
        MatchDevice d = {.ifname = "eth0"};
        MatchDevice noname = {.kind = "veth"};

        assert_false(policy_matches(&s1->policies[0], &d));
        assert_false(policy_matches(&s2->policies[0], &d));
        assert_true(policy_matches(&s3->policies[0], &d));
        assert_false(policy_matches(&s3->policies[0], &noname));
        assert_false(policy_matches(NULL, &d));
        assert_false(policy_matches(&s3->policies[0], NULL));
        policy_set_free(s1);
        policy_set_free(s2);
        policy_set_free(s3);
}

/* The first policy that applies to the host and matches wins. */
static void test_policy_set_match(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s =
                parse_string("version: 1\n"
                             "policies:\n"
                             "  - { name: web-only, hosts: \"web-*\", match: { kind: veth }, ipv6: { "
                             "gso-max-size: 1 } }\n"
                             "  - { name: new-kernels, kernel: \">= 6.3\", match: { name: \"eth*\" }, ipv6: "
                             "{ gso-max-size: 2 } }\n"
                             "  - { name: veths, match: { kind: veth }, ipv6: { gso-max-size: 3 } }\n"
                             "  - { name: lo, match: { kind: loopback }, ipv6: { gso-max-size: 4 } }\n"
                             "  - { name: rest, ipv6: { gso-max-size: 5 } }\n",
                             &errors);
        static const struct {
                const char *host, *release;
                const Dev *dev;
                const char *policy;
        } cases[] = {
                {"web-1", "6.8.0", &veth, "web-only"},
                {"db-1", "6.8.0", &veth, "veths"},
                {"db-1", "6.8.0", &eth0, "new-kernels"},
                {"db-1", "6.1.0", &eth0, "rest"},
                {"db-1", "6.1.0", &lo, "lo"},
                {"web-1", "6.8.0", &br, "rest"},
        };

        assert_string_equal(errors, "");
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                DevState st = {.dev = cases[i].dev};
                MatchDevice d = match_device(&st);
                const Policy *p;

                policy_set_scope(s, &(HostIdentity){.hostname = cases[i].host,
                                                    .kernel_release = cases[i].release});
                p = policy_set_match(s, &d);
                assert_non_null(p);
                assert_string_equal(p->name, cases[i].policy);
        }

        /* lo matches nothing once its policy is gone */
        policy_set_free(s);
        free(errors);
        s = parse_string("version: 1\npolicies:\n  - { name: rest, ipv6: { gso-max-size: 5 } }\n", &errors);
        {
                DevState st = {.dev = &lo};
                MatchDevice d = match_device(&st);
                assert_null(policy_set_match(s, &d));
        }
        assert_null(policy_set_match(NULL, NULL));
        policy_set_free(s);
}

static void test_wants_other_netns(void **state) {
        static const struct {
                const char *match;
                bool wants;
        } cases[] = {
                {"{}", false},
                {"{ netns: host }", false},
                {"{ netns: [host, \"!cni-*\"] }", false},
                {"{ netns: \"cni-*\" }", true},
                {"{ netns: [host, \"*\"] }", true},
        };

        (void) state;
        assert_false(policy_set_wants_other_netns(NULL));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                PolicySet *s = policy_from_match(cases[i].match);

                s->policies[0].applies_here = true;
                if (policy_set_wants_other_netns(s) != cases[i].wants)
                        fail_msg("%s: expected %s", cases[i].match, cases[i].wants ? "true" : "false");
                /* a policy not in force on this host asks for nothing */
                s->policies[0].applies_here = false;
                assert_false(policy_set_wants_other_netns(s));
                policy_set_free(s);
        }
}

static void test_takes_netns(void **state) {
        PolicySet *s = policy_from_match("{ netns: [\"cni-*\", \"!cni-kube-system-*\"] }");

        (void) state;
        s->policies[0].applies_here = true;
        assert_true(policy_set_takes_netns(s, "cni-1"));
        assert_false(policy_set_takes_netns(s, "cni-kube-system-1"));
        assert_false(policy_set_takes_netns(s, "docker-1"));
        assert_false(policy_set_takes_netns(s, NULL)); /* the host: not named */
        s->policies[0].applies_here = false;
        assert_false(policy_set_takes_netns(s, "cni-1"));
        policy_set_free(s);
        assert_false(policy_set_takes_netns(NULL, "cni-1"));

        /* the names a namespace file may have */
        assert_true(netns_name_is_valid("cni-1234"));
        assert_true(netns_name_is_valid("a"));
        assert_false(netns_name_is_valid(""));
        assert_false(netns_name_is_valid(NULL));
        assert_false(netns_name_is_valid(".tmp-cni"));   /* a tool's temporary file */
        assert_false(netns_name_is_valid("host"));       /* the daemon's own, in a policy */
        assert_false(netns_name_is_valid("a/b"));
        assert_false(netns_name_is_valid("a\nb"));      /* it goes into log lines */
        assert_false(netns_name_is_valid("a b"));
        assert_false(netns_name_is_valid("caf\xc3\xa9"));
        assert_true(netns_name_is_valid("0123456789abcdef0123456789abcdef"));
}

static void test_route_prefix_covers(void **state) {
        static const struct {
                const char *prefix;
                const char *route; /* destination/length, "" for a /0 of the given family */
                bool covers;
        } cases[] = {
                {"default", "0.0.0.0/0", true},
                {"default", "::/0", true},
                {"default", "10.0.0.0/8", false},
                {"default", "::/1", false},
                {"10.0.0.0/8", "10.0.0.0/8", true},
                {"10.0.0.0/8", "10.200.0.0/16", true},
                {"10.0.0.0/8", "10.1.2.3/32", true},
                {"10.0.0.0/8", "11.0.0.0/8", false},
                {"10.0.0.0/8", "0.0.0.0/0", false},    /* the default route is wider */
                {"10.0.0.0/9", "10.128.0.0/9", false}, /* the bit after the byte boundary */
                {"10.128.0.0/9", "10.128.0.0/10", true},
                {"10.128.0.0/9", "10.192.0.0/10", true},
                {"10.128.0.0/9", "10.64.0.0/10", false},
                {"192.0.2.1", "192.0.2.1/32", true},
                {"192.0.2.1", "192.0.2.0/24", false},
                {"0.0.0.0/0", "0.0.0.0/0", true},
                {"0.0.0.0/0", "203.0.113.0/24", true},
                {"0.0.0.0/0", "::/0", false},
                {"::/0", "2001:db8::/32", true},
                {"::/0", "10.0.0.0/8", false},
                {"2001:db8::/32", "2001:db8:ffff::/48", true},
                {"2001:db8::/32", "2001:db9::/32", false},
                {"2001:db8::/32", "2001:db8::/31", false},
                {"fe80::/10", "febf::/16", true},
                {"fe80::/10", "fec0::/10", false},
                {"::1", "::1/128", true},
                {"::1", "::2/128", false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RoutePrefix p, r;

                assert_int_equal(route_prefix_parse(cases[i].prefix, &p), 0);
                assert_int_equal(route_prefix_parse(cases[i].route, &r), 0);
                if (route_prefix_covers(&p, r.family, r.addr, r.prefixlen) != cases[i].covers)
                        fail_msg("%s covering %s: expected %s", cases[i].prefix, cases[i].route,
                                 cases[i].covers ? "true" : "false");
        }

        /* the kernel's /0 routes may come without a destination */
        {
                RoutePrefix d, any4, ten;
                assert_int_equal(route_prefix_parse("default", &d), 0);
                assert_int_equal(route_prefix_parse("0.0.0.0/0", &any4), 0);
                assert_int_equal(route_prefix_parse("10.0.0.0/8", &ten), 0);
                assert_true(route_prefix_covers(&d, AF_INET6, NULL, 0));
                assert_true(route_prefix_covers(&any4, AF_INET, NULL, 0));
                assert_false(route_prefix_covers(&ten, AF_INET, NULL, 8)); /* no address to compare */
                assert_false(route_prefix_covers(&any4, AF_INET, "\x0a\0\0\0", 33)); /* impossible length */
                assert_false(route_prefix_covers(NULL, AF_INET, NULL, 0));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_policy_matches),
                cmocka_unit_test(test_match_explain),
                cmocka_unit_test(test_missing_callbacks),
                cmocka_unit_test(test_policy_set_match),
                cmocka_unit_test(test_route_prefix_covers),
                cmocka_unit_test(test_wants_other_netns),
                cmocka_unit_test(test_takes_netns),
        };

        return cmocka_run_group_tests_name("match", tests, NULL, NULL);
}
