/* test-policy.c — the policy parser: every key, every error with its position, golden files,
 * drop-in discovery, rollback inheritance, scoping, and the shipped example files. */

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy-files.h"
#include "policy-watch.h"
#include "policy.h"
#include "test-helpers.h"
#include "util.h"

#ifndef TEST_POLICY_DIR
#error "TEST_POLICY_DIR must name tests/unit/policies"
#endif
#ifndef TEST_CONF_DIR
#error "TEST_CONF_DIR must name conf/"
#endif

#define SEC UINT64_C(1000000)

/* ---- every key accepted ---- */

static const char all_keys_yaml[] =
        "version: 1\n"
        "rollback:\n"
        "  window: 2m\n"
        "  interval: 500ms\n"
        "  guards:\n"
        "    - counter: link.tx_errors\n"
        "      max-increase: 0\n"
        "    - counter: Tcp.RetransSegs\n"
        "      max-ratio: 0.02\n"
        "      per: Tcp.OutSegs\n"
        "    - counter: IpExt.InTruncatedPkts\n"
        "      max-increase: 7\n"
        "      max-ratio: .5\n"
        "      per: link.rx_packets\n"
        "policies:\n"
        "  - name: fabric\n"
        "    hosts: [\"web-*\", \"db-*\"]\n"
        "    kernel: \">= 6.3, < 7.0\"\n"
        "    match:\n"
        "      name: [\"eth*\", \"ens*\", \"!ens9\"]\n"
        "      kind: [veth, bridge, device, loopback, ip6gre, lowpan]\n"
        "      driver: [mlx5_core, \"ice\"]\n"
        "      mac: [\"0C:42:A1:*\"]\n"
        "      route: [default, \"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.1\", \"::1\"]\n"
        "    ipv6:\n"
        "      gso-max-size: 185000\n"
        "      gro-max-size: max\n"
        "    ipv4:\n"
        "      gso-max-size: legacy\n"
        "      gro-max-size: 524280\n"
        "    rollback: { window: 60s }\n"
        "  - name: single-strings\n"
        "    hosts: \"k8s-*\"\n"
        "    kernel: \"=5\"\n"
        "    match:\n"
        "      name: eth0\n"
        "      kind: veth\n"
        "      driver: virtio_net\n"
        "      mac: \"52:54:*\"\n"
        "      route: default\n"
        "    ipv4: { gro-max-size: 1 }\n"
        "    rollback:\n"
        "      interval: 2s\n"
        "      guards: []\n"
        "  - name: no-match\n"
        "    ipv6: { gso-max-size: 65536 }\n"
        "  - name: empty-match\n"
        "    match: {}\n"
        "    ipv6: { gso-max-size: 65536 }\n"
        "  - name: null-match\n"
        "    match:\n"
        "    ipv6: { gso-max-size: 65536 }\n";

static void test_all_keys(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s = parse_string(all_keys_yaml, &errors);
        const Policy *p;
        char buf[32];

        assert_string_equal(errors, "");
        assert_non_null(s);
        assert_int_equal(s->n_policies, 5);
        assert_int_equal(s->n_files, 1);
        assert_string_equal(s->files[0], "t.yaml");

        /* the file's rollback became the set's defaults */
        assert_true(s->defaults.has_window && s->defaults.has_interval && s->defaults.has_guards);
        assert_int_equal(s->defaults.window_usec, 120 * SEC);
        assert_int_equal(s->defaults.interval_usec, 500000);
        assert_int_equal(s->defaults.n_guards, 3);
        assert_string_equal(s->defaults.guards[0].counter, "link.tx_errors");
        assert_int_equal(s->defaults.guards[0].counter_kind, GUARD_COUNTER_LINK);
        assert_true(s->defaults.guards[0].has_max_increase);
        assert_int_equal(s->defaults.guards[0].max_increase, 0);
        assert_false(s->defaults.guards[0].has_max_ratio);
        assert_null(s->defaults.guards[0].per);
        assert_string_equal(s->defaults.guards[1].counter, "Tcp.RetransSegs");
        assert_int_equal(s->defaults.guards[1].counter_kind, GUARD_COUNTER_SNMP);
        assert_false(s->defaults.guards[1].has_max_increase);
        assert_true(s->defaults.guards[1].has_max_ratio);
        assert_float_equal(s->defaults.guards[1].max_ratio, 0.02, 1e-12);
        assert_string_equal(s->defaults.guards[1].per, "Tcp.OutSegs");
        assert_int_equal(s->defaults.guards[1].per_kind, GUARD_COUNTER_SNMP);
        assert_true(s->defaults.guards[2].has_max_increase && s->defaults.guards[2].has_max_ratio);
        assert_int_equal(s->defaults.guards[2].max_increase, 7);
        assert_float_equal(s->defaults.guards[2].max_ratio, 0.5, 1e-12);
        assert_int_equal(s->defaults.guards[2].per_kind, GUARD_COUNTER_LINK);

        p = &s->policies[0];
        assert_string_equal(p->name, "fabric");
        assert_string_equal(p->file, "t.yaml");
        assert_int_equal(p->line, 16);
        assert_int_equal(p->column, 5);
        assert_int_equal(p->hosts.n, 2);
        assert_string_equal(p->hosts.items[1], "db-*");
        assert_string_equal(p->kernel, ">= 6.3, < 7.0");
        assert_int_equal(p->n_kernel_reqs, 2);
        assert_int_equal(p->kernel_reqs[0].op, KERNEL_OP_GE);
        assert_int_equal(p->kernel_reqs[0].version[0], 6);
        assert_int_equal(p->kernel_reqs[0].version[1], 3);
        assert_int_equal(p->kernel_reqs[0].version[2], 0);
        assert_int_equal(p->kernel_reqs[1].op, KERNEL_OP_LT);
        assert_int_equal(p->kernel_reqs[1].version[0], 7);
        assert_false(p->applies_here); /* scoped: unknown until policy_set_scope() */
        assert_int_equal(p->match.name.n, 3);
        assert_string_equal(p->match.name.items[2], "!ens9");
        assert_int_equal(p->match.kind.n, 6);
        assert_string_equal(p->match.kind.items[5], "lowpan");
        assert_int_equal(p->match.driver.n, 2);
        assert_string_equal(p->match.mac.items[0], "0c:42:a1:*"); /* folded to lower case */
        assert_int_equal(p->match.n_routes, 5);
        assert_true(p->match.routes[0].is_default);
        assert_int_equal(p->match.routes[1].family, AF_INET);
        assert_int_equal(p->match.routes[1].prefixlen, 8);
        assert_int_equal(p->match.routes[1].addr[0], 10);
        assert_int_equal(p->match.routes[2].family, AF_INET6);
        assert_int_equal(p->match.routes[2].prefixlen, 32);
        assert_int_equal(p->match.routes[2].addr[0], 0x20);
        assert_int_equal(p->match.routes[2].addr[3], 0xb8);
        assert_int_equal(p->match.routes[3].prefixlen, 32);
        assert_int_equal(p->match.routes[4].family, AF_INET6);
        assert_int_equal(p->match.routes[4].prefixlen, 128);
        assert_true(p->ipv6.set);
        assert_int_equal(p->ipv6.gso.kind, SIZE_BYTES);
        assert_int_equal(p->ipv6.gso.bytes, 185000);
        assert_int_equal(p->ipv6.gro.kind, SIZE_DEVICE_MAX);
        assert_true(p->ipv4.set);
        assert_int_equal(p->ipv4.gso.kind, SIZE_LEGACY);
        assert_int_equal(p->ipv4.gro.kind, SIZE_BYTES);
        assert_int_equal(p->ipv4.gro.bytes, 524280);
        assert_string_equal(size_spec_format(&p->ipv6.gso, buf, sizeof(buf)), "185000");
        assert_string_equal(size_spec_format(&p->ipv6.gro, buf, sizeof(buf)), "max");
        assert_string_equal(size_spec_format(&p->ipv4.gso, buf, sizeof(buf)), "legacy");
        /* rollback: window from the policy, the rest from the file */
        assert_int_equal(p->rollback.window_usec, 60 * SEC);
        assert_int_equal(p->rollback.interval_usec, 500000);
        assert_int_equal(p->rollback.n_guards, 3);

        p = &s->policies[1];
        assert_string_equal(p->name, "single-strings");
        assert_int_equal(p->hosts.n, 1);
        assert_string_equal(p->hosts.items[0], "k8s-*");
        assert_int_equal(p->n_kernel_reqs, 1);
        assert_int_equal(p->kernel_reqs[0].op, KERNEL_OP_EQ);
        assert_int_equal(p->kernel_reqs[0].version[0], 5);
        assert_int_equal(p->match.name.n, 1);
        assert_int_equal(p->match.kind.n, 1);
        assert_int_equal(p->match.driver.n, 1);
        assert_int_equal(p->match.mac.n, 1);
        assert_int_equal(p->match.n_routes, 1);
        assert_false(p->ipv6.set);
        assert_int_equal(p->ipv6.gso.kind, SIZE_UNSET);
        assert_string_equal(size_spec_format(&p->ipv6.gso, buf, sizeof(buf)), "-");
        assert_true(p->ipv4.set);
        assert_int_equal(p->ipv4.gso.kind, SIZE_UNSET);
        assert_int_equal(p->ipv4.gro.bytes, 1);
        assert_int_equal(p->rollback.window_usec, 120 * SEC);
        assert_int_equal(p->rollback.interval_usec, 2 * SEC);
        assert_true(p->rollback.has_guards);
        assert_int_equal(p->rollback.n_guards, 0); /* replaced whole, by nothing */

        for (size_t i = 2; i < 5; i++) {
                p = &s->policies[i];
                assert_true(p->applies_here);
                assert_int_equal(p->match.name.n + p->match.kind.n + p->match.driver.n + p->match.mac.n +
                                         p->match.n_routes,
                                 0);
                assert_null(p->kernel);
        }
        policy_set_free(s);
}

/* ---- errors, each with its exact position ---- */

typedef struct ErrorCase {
        const char *name;
        const char *yaml;
        const char *errors;
} ErrorCase;

#define V1 "version: 1\n"
#define P "policies:\n  - name: p\n"
#define V6 "    ipv6: { gso-max-size: 1000 }\n"

static const ErrorCase error_cases[] = {
        {"version missing", "policies: []\n", "t.yaml:1:1: missing key \"version\"\n"},
        {"version 2", "version: 2\npolicies: []\n", "t.yaml:1:10: version: expected 1\n"},
        {"version quoted", "version: \"1\"\npolicies: []\n", "t.yaml:1:10: version: expected 1\n"},
        {"version list", "version: [1]\npolicies: []\n", "t.yaml:1:10: version: expected 1\n"},
        {"policies missing", V1, "t.yaml:1:1: missing key \"policies\"\n"},
        {"policies mapping", V1 "policies: {}\n", "t.yaml:2:11: policies: expected a list\n"},
        {"policies null", V1 "policies:\n", "t.yaml:2:10: policies: expected a list\n"},
        {"top scalar", "hello\n", "t.yaml:1:1: expected a mapping\n"},
        {"top list", "- 1\n", "t.yaml:1:1: expected a mapping\n"},
        {"empty file", "", "t.yaml: empty document, expected a mapping with \"version\" and \"policies\"\n"},
        {"comments only", "# nothing\n",
         "t.yaml: empty document, expected a mapping with \"version\" and \"policies\"\n"},
        {"unknown top key", V1 "policies: []\nfoo: 1\n", "t.yaml:3:1: unknown key \"foo\"\n"},
        {"duplicate top key", V1 "policies: []\nversion: 1\n", "t.yaml:3:1: duplicate key \"version\"\n"},
        {"non-string key", V1 "policies: []\n[a]: 1\n", "t.yaml:3:1: expected a string as key\n"},
        {"policy scalar", V1 "policies: [x]\n", "t.yaml:2:12: policies: expected a mapping\n"},
        {"policy name missing", V1 "policies:\n  - ipv6: { gso-max-size: 1 }\n",
         "t.yaml:3:5: missing key \"name\"\n"},
        {"policy name list", V1 "policies:\n  - name: [a]\n" V6, "t.yaml:3:11: name: expected a string\n"},
        {"policy name bad", V1 "policies:\n  - name: \"a b\"\n" V6,
         "t.yaml:3:11: name: bad policy name \"a b\"\n"},
        {"policy name empty", V1 "policies:\n  - name: \"\"\n" V6,
         "t.yaml:3:11: name: bad policy name \"\"\n"},
        {"policy name null", V1 "policies:\n  - name:\n" V6, "t.yaml:3:10: name: expected a string\n"},
        {"duplicate policy", V1 "policies:\n  - name: a\n" V6 "  - name: a\n" V6,
         "t.yaml:5:11: name: duplicate policy \"a\" (first defined at t.yaml:3:5)\n"},
        {"no family", V1 P "    match: {}\n", "t.yaml:3:5: missing key \"ipv6\" or \"ipv4\"\n"},
        {"empty family", V1 P "    ipv6: {}\n",
         "t.yaml:4:11: ipv6: missing key \"gso-max-size\" or \"gro-max-size\"\n"},
        {"family scalar", V1 P "    ipv4: 5\n", "t.yaml:4:11: ipv4: expected a mapping\n"},
        {"family unknown key", V1 P "    ipv6:\n      gso-max: 1\n      gro-max-size: 2\n",
         "t.yaml:5:7: unknown key \"gso-max\"\n"},
        {"size too large", V1 P "    ipv6: { gso-max-size: 600000 }\n",
         "t.yaml:4:27: gso-max-size: 600000 is out of range (1..524280)\n"},
        {"size zero", V1 P "    ipv6: { gro-max-size: 0 }\n",
         "t.yaml:4:27: gro-max-size: 0 is out of range (1..524280)\n"},
        {"size negative", V1 P "    ipv6: { gro-max-size: -1 }\n",
         "t.yaml:4:27: gro-max-size: -1 is out of range (1..524280)\n"},
        {"size huge", V1 P "    ipv6: { gro-max-size: 99999999999999999999999 }\n",
         "t.yaml:4:27: gro-max-size: 99999999999999999999999 is out of range (1..524280)\n"},
        {"size word", V1 P "    ipv6: { gro-max-size: big }\n",
         "t.yaml:4:27: gro-max-size: expected a number of bytes, \"max\", \"legacy\" or \"auto\"\n"},
        {"size quoted number", V1 P "    ipv6: { gro-max-size: \"1000\" }\n",
         "t.yaml:4:27: gro-max-size: expected a number of bytes, \"max\", \"legacy\" or \"auto\"\n"},
        {"size float", V1 P "    ipv6: { gro-max-size: 1000.5 }\n",
         "t.yaml:4:27: gro-max-size: expected a number of bytes, \"max\", \"legacy\" or \"auto\"\n"},
        {"size list", V1 P "    ipv6: { gro-max-size: [1] }\n",
         "t.yaml:4:27: gro-max-size: expected a number of bytes, \"max\", \"legacy\" or \"auto\"\n"},
        {"auto unknown key", V1 P "    ipv6: { gso-max-size: { auto: { top: 1 } } }\n",
         "t.yaml:4:37: unknown key \"top\"\n"},
        {"auto scalar value", V1 P "    ipv6: { gso-max-size: { auto: 5 } }\n",
         "t.yaml:4:35: auto: expected a mapping\n"},
        {"auto min too small", V1 P "    ipv6: { gso-max-size: { auto: { min: 1000 } } }\n",
         "t.yaml:4:42: gso-max-size: auto: min 1000 is below 65536, the size before BIG TCP\n"},
        {"auto min out of range", V1 P "    ipv6: { gro-max-size: { auto: { min: 600000 } } }\n",
         "t.yaml:4:42: min: 600000 is out of range (1..524280)\n"},
        {"auto max below min", V1 P "    ipv6: { gro-max-size: { auto: { min: 200000, max: 100000 } } }\n",
         "t.yaml:4:55: gro-max-size: auto: max 100000 is below min 200000\n"},
        {"auto max word", V1 P "    ipv6: { gro-max-size: { auto: { max: max } } }\n",
         "t.yaml:4:42: max: expected a number of bytes\n"},
        {"auto max quoted", V1 P "    ipv6: { gro-max-size: { auto: { max: \"200000\" } } }\n",
         "t.yaml:4:42: max: expected a number of bytes\n"},
        {"auto ceiling-age bad", V1 P "    ipv6: { gro-max-size: { auto: { ceiling-age: soon } } }\n",
         "t.yaml:4:50: ceiling-age: bad duration \"soon\"\n"},
        {"auto ceiling-age too short", V1 P "    ipv6: { gro-max-size: { auto: { ceiling-age: 500ms } } }\n",
         "t.yaml:4:50: ceiling-age: out of range (1s..720h)\n"},
        {"auto ceiling-age too long", V1 P "    ipv6: { gro-max-size: { auto: { ceiling-age: 721h } } }\n",
         "t.yaml:4:50: ceiling-age: out of range (1s..720h)\n"},
        {"auto beside another key", V1 P "    ipv6: { gro-max-size: { auto: {}, max: 1 } }\n",
         "t.yaml:4:27: gro-max-size: expected a number of bytes, \"max\", \"legacy\" or \"auto\"\n"},
        {"auto quoted", V1 P "    ipv6: { gro-max-size: \"auto\" }\n", NULL},
        {"unknown policy key", V1 P V6 "    colour: red\n", "t.yaml:5:5: unknown key \"colour\"\n"},
        {"match scalar", V1 P "    match: eth0\n" V6, "t.yaml:4:12: match: expected a mapping\n"},
        {"match unknown key", V1 P "    match: { ifname: eth0 }\n" V6,
         "t.yaml:4:14: unknown key \"ifname\" (did you mean \"name\"?)\n"},
        {"unknown key, underscores for dashes", V1 P "    ipv6: { gso_max_size: 185000 }\n",
         "t.yaml:4:11: ipv6: missing key \"gso-max-size\" or \"gro-max-size\"\n"
         "t.yaml:4:13: unknown key \"gso_max_size\" (did you mean \"gso-max-size\"?)\n"},
        {"unknown key, nothing near", V1 P "    colour: blue\n" V6, "t.yaml:4:5: unknown key \"colour\"\n"},
        {"kind ethernet", V1 P "    match: { kind: [ethernet] }\n" V6,
         "t.yaml:4:21: kind: unknown kind \"ethernet\" (did you mean \"device\"? a physical NIC has no link "
         "kind)\n"},
        {"kind typo", V1 P "    match: { kind: [vteh, brigde] }\n" V6,
         "t.yaml:4:21: kind: unknown kind \"vteh\" (did you mean \"veth\"?)\n"
         "t.yaml:4:27: kind: unknown kind \"brigde\" (did you mean \"bridge\"?)\n"},
        {"kind nothing near", V1 P "    match: { kind: [frobnicator] }\n" V6,
         "t.yaml:4:21: kind: unknown kind \"frobnicator\" (the kernel's link kinds, \"device\" or "
         "\"loopback\"; see bigtcpd.yaml(5))\n"},
        {"bad glob", V1 P "    match: { name: \"eth[0-\" }\n" V6,
         "t.yaml:4:20: name: bad glob \"eth[0-\"\n"},
        {"bad negated glob", V1 P "    match: { name: [eth0, \"!\"] }\n" V6,
         "t.yaml:4:27: name: bad glob \"!\"\n"},
        {"only negated globs", V1 P "    match: { name: [\"!eth0\", \"!eth1\"] }\n" V6,
         "t.yaml:4:20: name: needs at least one glob without \"!\"\n"},
        {"empty list", V1 P "    match: { kind: [] }\n" V6, "t.yaml:4:20: kind: empty list\n"},
        {"netns bad glob", V1 P "    match: { netns: [host, \"cni-[\"] }\n" V6,
         "t.yaml:4:28: netns: bad glob \"cni-[\"\n"},
        {"netns only negated", V1 P "    match: { netns: \"!host\" }\n" V6,
         "t.yaml:4:21: netns: needs at least one glob without \"!\"\n"},
        {"netns path", V1 P "    match: { netns: [\"/run/netns/cni-1\", \"!a/b\"] }\n" V6,
         "t.yaml:4:22: netns: \"/run/netns/cni-1\" is a path; name the namespace by its file name\n"
         "t.yaml:4:42: netns: \"!a/b\" is a path; name the namespace by its file name\n"},
        {"netns empty", V1 P "    match: { netns: [] }\n" V6, "t.yaml:4:21: netns: empty list\n"},
        {"netns mapping", V1 P "    match: { netns: {a: b} }\n" V6,
         "t.yaml:4:21: netns: expected a string or a list of strings\n"},
        {"list of lists", V1 P "    match: { kind: [[veth]] }\n" V6,
         "t.yaml:4:21: kind: expected a string\n"},
        {"list is mapping", V1 P "    match: { driver: {a: b} }\n" V6,
         "t.yaml:4:22: driver: expected a string or a list of strings\n"},
        {"bad kind", V1 P "    match: { kind: [veth, Veth, \"a b\"] }\n" V6,
         "t.yaml:4:27: kind: bad kind \"Veth\"\nt.yaml:4:33: kind: bad kind \"a b\"\n"},
        {"bad mac glob", V1 P "    match: { mac: \"aa:[\" }\n" V6, "t.yaml:4:19: mac: bad glob \"aa:[\"\n"},
        {"trailing backslash", V1 P "    match: { driver: 'mlx\\' }\n" V6,
         "t.yaml:4:22: driver: bad glob \"mlx\\\\\"\n"},
        {"bad prefix length", V1 P "    match: { route: [\"10.0.0.0/33\"] }\n" V6,
         "t.yaml:4:22: route: bad prefix \"10.0.0.0/33\"\n"},
        {"bad prefix address",
         V1 P "    match: { route: [10.0.0, \"2001:db8::/129\", \"/8\", \"10.0.0.0/\", defaults] }\n" V6,
         "t.yaml:4:22: route: bad prefix \"10.0.0\"\n"
         "t.yaml:4:30: route: bad prefix \"2001:db8::/129\"\n"
         "t.yaml:4:48: route: bad prefix \"/8\"\n"
         "t.yaml:4:54: route: bad prefix \"10.0.0.0/\"\n"
         "t.yaml:4:67: route: bad prefix \"defaults\"\n"},
        {"host bits", V1 P "    match: { route: [\"10.0.0.1/8\", \"2001:db8::1/64\"] }\n" V6,
         "t.yaml:4:22: route: prefix \"10.0.0.1/8\" has host bits set\n"
         "t.yaml:4:36: route: prefix \"2001:db8::1/64\" has host bits set\n"},
        {"hosts bad glob", V1 P "    hosts: [\"web-[\"]\n" V6, "t.yaml:4:13: hosts: bad glob \"web-[\"\n"},
        {"hosts number", V1 P "    hosts: 5\n" V6, NULL /* a number is a fine hostname glob */},
        {"kernel no op", V1 P "    kernel: \"6.3\"\n" V6,
         "t.yaml:4:13: kernel: bad version requirement \"6.3\"\n"},
        {"kernel four parts", V1 P "    kernel: \">= 6.3.1.2\"\n" V6,
         "t.yaml:4:13: kernel: bad version requirement \">= 6.3.1.2\"\n"},
        {"kernel suffix", V1 P "    kernel: \">= 6.3-rc1\"\n" V6,
         "t.yaml:4:13: kernel: bad version requirement \">= 6.3-rc1\"\n"},
        {"kernel trailing comma", V1 P "    kernel: \">= 6.3,\"\n" V6,
         "t.yaml:4:13: kernel: bad version requirement \">= 6.3,\"\n"},
        {"kernel bad op", V1 P "    kernel: \"=> 6.3\"\n" V6,
         "t.yaml:4:13: kernel: bad version requirement \"=> 6.3\"\n"},
        {"kernel number", V1 P "    kernel: 6\n" V6, "t.yaml:4:13: kernel: bad version requirement \"6\"\n"},
        {"rollback scalar", V1 "rollback: 30s\npolicies: []\n",
         "t.yaml:2:11: rollback: expected a mapping\n"},
        {"rollback unknown", V1 "rollback: { windows: 30s }\npolicies: []\n",
         "t.yaml:2:13: unknown key \"windows\" (did you mean \"window\"?)\n"},
        {"duration no unit", V1 "rollback: { window: 30 }\npolicies: []\n",
         "t.yaml:2:21: window: bad duration \"30\"\n"},
        {"duration zero", V1 "rollback: { interval: 0s }\npolicies: []\n",
         "t.yaml:2:23: interval: bad duration \"0s\"\n"},
        {"duration unit", V1 "rollback: { window: 3d }\npolicies: []\n",
         "t.yaml:2:21: window: bad duration \"3d\"\n"},
        {"interval > window", V1 "rollback: { window: 2s, interval: 3s }\npolicies: []\n",
         "t.yaml:2:11: rollback: interval 3s is longer than window 2s\n"},
        {"interval > built-in window", V1 "rollback: { interval: 1m }\npolicies: []\n",
         "t.yaml:2:11: rollback: interval 1m is longer than window 30s\n"},
        {"window < built-in interval", V1 "rollback: { window: 500ms }\npolicies: []\n",
         "t.yaml:2:11: rollback: interval 1s is longer than window 500ms\n"},
        {"policy window < file interval",
         V1 "rollback: { interval: 10s }\n" P V6 "    rollback: { window: 5s }\n",
         "t.yaml:6:15: rollback: interval 10s is longer than window 5s\n"},
        {"guards scalar", V1 "rollback: { guards: x }\npolicies: []\n",
         "t.yaml:2:21: guards: expected a list\n"},
        {"guard scalar", V1 "rollback: { guards: [x] }\npolicies: []\n",
         "t.yaml:2:22: guards: expected a mapping\n"},
        {"guard no counter", V1 "rollback:\n  guards:\n    - max-increase: 1\npolicies: []\n",
         "t.yaml:4:7: missing key \"counter\"\n"},
        {"guard no limit", V1 "rollback:\n  guards:\n    - counter: link.tx_errors\npolicies: []\n",
         "t.yaml:4:7: missing key \"max-increase\" or \"max-ratio\"\n"},
        {"guard ratio without per",
         V1 "rollback:\n  guards:\n    - counter: Tcp.RetransSegs\n      max-ratio: 0.1\npolicies: []\n",
         "t.yaml:4:7: missing key \"per\" (required with max-ratio)\n"},
        {"guard per without ratio",
         V1 "rollback:\n  guards:\n    - counter: Tcp.RetransSegs\n      max-increase: 1\n      per: "
            "Tcp.OutSegs\npolicies: []\n",
         "t.yaml:6:12: per: only allowed with max-ratio\n"},
        {"guard bad counters",
         V1 "rollback:\n  guards:\n    - { counter: link.foo, max-increase: 1 }\n    - { counter: Tcp, "
            "max-increase: 1 }\n"
            "    - { counter: 1p.X, max-increase: 1 }\n    - { counter: Ip.In-Hdr, max-increase: 1 }\n"
            "    - { counter: Tcp.RetransSegs, max-ratio: 1, per: \"link.\" }\npolicies: []\n",
         "t.yaml:4:18: counter: bad counter \"link.foo\"\n"
         "t.yaml:5:18: counter: bad counter \"Tcp\"\n"
         "t.yaml:6:18: counter: bad counter \"1p.X\"\n"
         "t.yaml:7:18: counter: bad counter \"Ip.In-Hdr\"\n"
         "t.yaml:8:54: per: bad counter \"link.\"\n"},
        {"guard misspelt link counter",
         V1 "rollback:\n  guards:\n    - { counter: link.tx_erors, max-increase: 0 }\npolicies: []\n",
         "t.yaml:4:18: counter: bad counter \"link.tx_erors\" (did you mean \"link.tx_errors\"?)\n"},
        {"guard bad numbers",
         V1 "rollback:\n  guards:\n    - { counter: link.rx_errors, max-increase: -1 }\n"
            "    - { counter: link.rx_errors, max-increase: 1.5 }\n"
            "    - { counter: Tcp.RetransSegs, max-ratio: -0.1, per: Tcp.OutSegs }\n"
            "    - { counter: Tcp.RetransSegs, max-ratio: .inf, per: Tcp.OutSegs }\n"
            "    - { counter: Tcp.RetransSegs, max-ratio: \"0.1\", per: Tcp.OutSegs }\npolicies: []\n",
         "t.yaml:4:48: max-increase: expected a non-negative integer\n"
         "t.yaml:5:48: max-increase: expected a non-negative integer\n"
         "t.yaml:6:46: max-ratio: expected a non-negative number\n"
         "t.yaml:7:46: max-ratio: expected a non-negative number\n"
         "t.yaml:8:46: max-ratio: expected a non-negative number\n"},
        {"syntax error", V1 "policies:\n  - name: x\n    ipv6: { gso-max-size: 1\n",
         "t.yaml:5:1: syntax error: did not find expected ',' or '}'\n"},
        {"bad indentation", V1 "policies:\n  - name: x\n   ipv6: 1\n",
         "t.yaml:4:4: syntax error: did not find expected '-' indicator\n"},
        {"tab", V1 "policies:\n\t- name: x\n",
         "t.yaml:3:1: syntax error: found character that cannot start any token\n"},
        {"alias", V1 "x: &a 1\npolicies: *a\n", "t.yaml:3:11: aliases are not supported\n"},
        {"python tag", V1 P "    match: { name: !!python/object/apply:os.system [\"id\"] }\n" V6,
         "t.yaml:4:20: YAML tags are not supported (\"tag:yaml.org,2002:python/object/apply:os.system\")\n"},
        {"local tag", V1 P "    hosts: !x web\n" V6, "t.yaml:4:12: YAML tags are not supported (\"!x\")\n"},
        {"standard tags", V1 P "    hosts: [!!str web1]\n    ipv6: !!map { gso-max-size: !!int 185000 }\n", NULL},
        {"deep", V1 "x: [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]\npolicies: []\n",
         "t.yaml:2:19: nested more than 16 levels deep\n"},
        {"two documents", V1 "policies: []\n---\nversion: 1\n",
         "t.yaml:3:1: only one document is allowed\n"},
        {"bad utf-8", V1 "policies: []\n# \xff\n",
         "t.yaml:3:3: syntax error: invalid leading UTF-8 octet\n"},
        {"nul in string", V1 P "    match: { name: \"eth\\0x\" }\n" V6,
         "t.yaml:4:20: name: string contains a NUL byte\n"},
        {"long key cut",
         V1 "policies: "
            "[]"
            "\nkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
            "kkkkkkk: 1\n",
         "t.yaml:3:1: unknown key \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\"\n"},
        {"escaped key cut",
         V1 "policies: "
            "[]"
            "\n\"\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01"
            "\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\": 1\n",
         "t.yaml:3:1: unknown key "
         "\"\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01"
         "\\x01\\x01\\x01...\"\n"},
        {"control chars quoted", V1 P "    match: { kind: \"a\\tb\\\"\" }\n" V6,
         "t.yaml:4:20: kind: bad kind \"a\\x09b\\\"\"\n"},
};

/* `auto`, alone or with its bounds: what the search runs under. */
static void test_auto_sizes(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s = parse_string(V1 P "    ipv6:\n"
                                          "      gso-max-size: auto\n"
                                          "      gro-max-size:\n"
                                          "        auto: { min: 100000, max: 300000, ceiling-age: 1h }\n"
                                          "    ipv4:\n"
                                          "      gso-max-size: { auto: }\n"
                                          "      gro-max-size: { auto: { max: 150000 } }\n",
                                    &errors);
        char buf[128];

        (void) state;
        assert_string_equal(errors, "");
        assert_non_null(s);
        const Policy *p = &s->policies[0];
        assert_int_equal(p->ipv6.gso.kind, SIZE_AUTO);
        assert_int_equal(p->ipv6.gso.auto_min, 65536);
        assert_int_equal(p->ipv6.gso.auto_max, 0);
        assert_true(p->ipv6.gso.ceiling_age_usec == AUTO_CEILING_AGE_DEFAULT_USEC);
        assert_string_equal(size_spec_format(&p->ipv6.gso, buf, sizeof(buf)), "auto");
        assert_int_equal(p->ipv6.gro.kind, SIZE_AUTO);
        assert_int_equal(p->ipv6.gro.auto_min, 100000);
        assert_int_equal(p->ipv6.gro.auto_max, 300000);
        assert_true(p->ipv6.gro.ceiling_age_usec == 3600 * SEC);
        assert_string_equal(size_spec_format(&p->ipv6.gro, buf, sizeof(buf)),
                            "auto (min 100000, max 300000, ceiling-age 1h)");
        assert_int_equal(p->ipv4.gso.kind, SIZE_AUTO);
        assert_int_equal(p->ipv4.gso.auto_min, 65536);
        assert_int_equal(p->ipv4.gro.auto_max, 150000);
        assert_string_equal(size_spec_format(&p->ipv4.gro, buf, sizeof(buf)),
                            "auto (min 65536, max 150000, ceiling-age 24h)");
        assert_string_equal(size_kind_to_string(SIZE_AUTO), "auto");
        policy_set_free(s);
}

/* match.netns keeps its items as written, "host" and "!" included. */
static void test_netns_key(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s = parse_string(V1 P "    match: { netns: [host, \"cni-*\", \"!cni-kube-system-*\"] }\n" V6
                                          "  - name: q\n    match: { netns: \"docker-?\" }\n" V6
                                          "  - name: r\n" V6,
                                    &errors);

        (void) state;
        assert_string_equal(errors, "");
        assert_non_null(s);
        assert_int_equal(s->n_policies, 3);
        assert_int_equal(s->policies[0].match.netns.n, 3);
        assert_string_equal(s->policies[0].match.netns.items[0], "host");
        assert_string_equal(s->policies[0].match.netns.items[2], "!cni-kube-system-*");
        assert_int_equal(s->policies[1].match.netns.n, 1); /* a scalar is a list of one */
        assert_string_equal(s->policies[1].match.netns.items[0], "docker-?");
        assert_int_equal(s->policies[2].match.netns.n, 0);

        /* every namespace's engine holds the set: the last one frees it (ASan: no leak, no use
         * after free) */
        assert_ptr_equal(policy_set_ref(s), s);
        assert_int_equal(s->n_ref, 2);
        policy_set_free(s);
        assert_int_equal(s->n_ref, 1);
        assert_string_equal(s->policies[0].name, "p");
        policy_set_free(s);
        assert_null(policy_set_ref(NULL));
}

static void test_error_cases(void **state) {
        unsigned failed = 0;

        /* every case runs, so that one run shows every mismatch */
        for (size_t i = 0; i < ELEMENTSOF(error_cases); i++) {
                const ErrorCase *c = &error_cases[i];
                char *errors = NULL;
                PolicySet *s = parse_string(c->yaml, &errors);

                if (!streq_ptr(errors, c->errors ?: "") || (!c->errors != !!s)) {
                        print_error("case \"%s\":\n--- expected\n%s--- got\n%s", c->name, c->errors ?: "",
                                    errors);
                        failed++;
                }
                free(errors);
                policy_set_free(s);
        }
        assert_int_equal(failed, 0);
}

/* A file with errors leaves the set as it was: no policies, no file, no new digest. */
static void test_error_leaves_set_unchanged(void **state) {
        PolicySet *s = policy_set_new();
        PolicyErrors e = {};
        const char good[] = V1 P V6;
        const char bad[] = V1 "policies:\n  - name: q\n    ipv6: { gso-max-size: 0 }\n";
        uint64_t digest;

        assert_int_equal(policy_parse_buffer(s, "a.yaml", good, strlen(good), &e), 0);
        assert_int_equal(e.n, 0);
        digest = s->digest;
        assert_int_equal(policy_parse_buffer(s, "b.yaml", bad, strlen(bad), &e), -EINVAL);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.items[0].file, "b.yaml");
        assert_int_equal(s->n_policies, 1);
        assert_int_equal(s->n_files, 1);
        assert_int_equal(s->digest, digest);
        policy_errors_clear(&e);
        assert_int_equal(e.n, 0);
        assert_null(e.items);
        policy_set_free(s);
}

/* ---- golden files: tests/unit/policies/{good,bad}-*.yaml ---- */

static void golden_one(void **state) {
        const char *name = *state;
        _cleanup_(freep) char *path = NULL, *expected_path = NULL, *data = NULL, *expected = NULL,
                              *got = NULL;
        PolicySet *s = policy_set_new();
        PolicyErrors e = {};
        size_t size;
        int r;

        assert_non_null(s);
        assert_true(asprintf(&path, "%s/%s", TEST_POLICY_DIR, name) > 0);
        data = read_all(path, &size);
        assert_non_null(data);

        r = policy_parse_buffer(s, name, data, size, &e);
        got = errors_to_string(&e);

        if (strncmp(name, "good-", 5) == 0)
                expected = strdup("");
        else {
                assert_true(asprintf(&expected_path, "%s/%.*s.expected", TEST_POLICY_DIR,
                                     (int) (strlen(name) - strlen(".yaml")), name) > 0);
                expected = read_all(expected_path, NULL);
                if (!expected) {
                        print_error("%s: missing, should hold:\n%s", expected_path, got);
                        fail();
                }
        }
        if (!streq(got, expected)) {
                print_error("%s:\n--- expected\n%s--- got\n%s", name, expected, got);
                fail();
        }
        assert_int_equal(r, strlen(expected) == 0 ? 0 : -EINVAL);
        policy_errors_clear(&e);
        policy_set_free(s);
}

static int golden_filter(const struct dirent *de) {
        size_t l = strlen(de->d_name);
        return l > 5 && streq(de->d_name + l - 5, ".yaml");
}

static int run_golden(void) {
        struct dirent **names = NULL;
        struct CMUnitTest *tests;
        int n, r;

        n = scandir(TEST_POLICY_DIR, &names, golden_filter, alphasort);
        if (n <= 0) {
                fprintf(stderr, "no golden files in %s\n", TEST_POLICY_DIR);
                return 1;
        }
        tests = calloc((size_t) n, sizeof(*tests));
        if (!tests)
                return 1;
        for (int i = 0; i < n; i++)
                tests[i] = (struct CMUnitTest){
                        .name = names[i]->d_name,
                        .test_func = golden_one,
                        .initial_state = names[i]->d_name,
                };
        r = _cmocka_run_group_tests("golden", tests, (size_t) n, NULL, NULL);
        for (int i = 0; i < n; i++)
                free(names[i]);
        free(names);
        free(tests);
        return r;
}

/* ---- helpers ---- */

static void test_durations(void **state) {
        static const struct {
                const char *s;
                int r;
                uint64_t usec;
        } cases[] = {
                {"30s", 0, 30 * SEC},
                {"500ms", 0, 500000},
                {"2m", 0, 120 * SEC},
                {"1h", 0, 3600 * SEC},
                {"1s", 0, SEC},
                {"1ms", 0, 1000},
                {"0010s", 0, 10 * SEC},
                {"0s", -ERANGE, 0},
                {"0ms", -ERANGE, 0},
                {"99999999999999999999s", -ERANGE, 0},
                {"9999999999999h", -ERANGE, 0},
                {"30", -EINVAL, 0},
                {"s", -EINVAL, 0},
                {"", -EINVAL, 0},
                {"30 s", -EINVAL, 0},
                {" 30s", -EINVAL, 0},
                {"30S", -EINVAL, 0},
                {"1.5s", -EINVAL, 0},
                {"-1s", -EINVAL, 0},
                {"30sec", -EINVAL, 0},
                {"30us", -EINVAL, 0},
                {"1d", -EINVAL, 0},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t u = 4242;
                int r = parse_duration_usec(cases[i].s, &u);

                if (r != cases[i].r)
                        fail_msg("\"%s\": %d, expected %d", cases[i].s, r, cases[i].r);
                assert_int_equal(u, r == 0 ? cases[i].usec : 4242); /* untouched on failure */
        }
        assert_int_equal(parse_duration_usec(NULL, NULL), -EINVAL);
}

static void test_numbers(void **state) {
        static const struct {
                const char *s;
                int r;
                uint64_t v;
        } integers[] = {
                {"0", 0, 0},
                {"007", 0, 7},
                {"18446744073709551615", 0, UINT64_MAX},
                {"18446744073709551616", -ERANGE, 0},
                {"99999999999999999999", -ERANGE, 0},
                {"", -EINVAL, 0},
                {"-1", -EINVAL, 0},
                {"+1", -EINVAL, 0},
                {"1 ", -EINVAL, 0},
                {"1e3", -EINVAL, 0},
                {"0x10", -EINVAL, 0},
        };
        static const struct {
                const char *s;
                int r;
                double v;
        } ratios[] = {
                {"0", 0, 0},
                {"0.02", 0, 0.02},
                {".5", 0, 0.5},
                {"1e-3", 0, 0.001},
                {"2.5E+1", 0, 25},
                {"1e999", -ERANGE, 0},
                {"", -EINVAL, 0},
                {"-0.1", -EINVAL, 0},
                {"+1", -EINVAL, 0},
                {"inf", -EINVAL, 0},
                {"nan", -EINVAL, 0},
                {"0x1p3", -EINVAL, 0},
                {"1.2.3", -EINVAL, 0},
                {".", -EINVAL, 0},
                {"1 ", -EINVAL, 0},
        };

        for (size_t i = 0; i < ELEMENTSOF(integers); i++) {
                uint64_t v = 4242;
                int r = parse_uint64(integers[i].s, &v);

                if (r != integers[i].r)
                        fail_msg("\"%s\": %d, expected %d", integers[i].s, r, integers[i].r);
                assert_int_equal(v, r == 0 ? integers[i].v : 4242); /* untouched on failure */
        }
        for (size_t i = 0; i < ELEMENTSOF(ratios); i++) {
                double v = 42;
                int r = parse_ratio(ratios[i].s, &v);

                if (r != ratios[i].r)
                        fail_msg("\"%s\": %d, expected %d", ratios[i].s, r, ratios[i].r);
                assert_float_equal(v, r == 0 ? ratios[i].v : 42, 1e-12);
        }
        assert_int_equal(parse_uint64(NULL, NULL), -EINVAL);
        assert_int_equal(parse_ratio(NULL, NULL), -EINVAL);
}

static void test_kernel_versions(void **state) {
        static const struct {
                const char *s;
                int r;
                unsigned v[3];
        } cases[] = {
                {"6.18.44-fc-v595", 0, {6, 18, 44}},
                {"6.8.0-45-generic", 0, {6, 8, 0}},
                {"6.3", 0, {6, 3, 0}},
                {"6", 0, {6, 0, 0}},
                {"6.8.0rc1", 0, {6, 8, 0}},
                {"6.8-rc1", 0, {6, 8, 0}},
                {"5.15.0.1.2", 0, {5, 15, 0}},
                {"4.19.", 0, {4, 19, 0}},
                {"", -EINVAL, {}},
                {"v6.3", -EINVAL, {}},
                {"1234567.0", -EINVAL, {}},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                unsigned v[3] = {9, 9, 9};
                int r = parse_kernel_version(cases[i].s, v);

                if (r != cases[i].r)
                        fail_msg("\"%s\": %d, expected %d", cases[i].s, r, cases[i].r);
                if (r == 0)
                        assert_memory_equal(v, cases[i].v, sizeof(v));
                else
                        assert_int_equal(v[0], 9);
        }
}

static void test_kernel_requirements(void **state) {
        static const struct {
                const char *req;
                const char *release;
                bool holds;
        } cases[] = {
                {">= 6.3", "6.3", true},
                {">= 6.3", "6.3.0", true},
                {">= 6.3", "6.2.16", false},
                {">= 6.3", "6.18.44-fc-v595", true},
                {">= 6.3", "10.0", true},
                {">6.3", "6.3.0", false},
                {">6.3", "6.3.1", true},
                {"> 6.3", "6.3.1-rc2", true},
                {"< 6.3", "6.2.99", true},
                {"< 6.3", "6.3", false},
                {"<= 6.3", "6.3.0-1-amd64", true},
                {"<= 6.3", "6.3.1", false},
                {"== 6.3", "6.3.0", true},
                {"= 6.3", "6.3.1", false},
                {"=6", "6.0.0", true},
                {"!= 6.3.1", "6.3.1", false},
                {"!= 6.3.1", "6.3.2", true},
                {">= 6.3, < 7.0", "6.9.1", true},
                {">= 6.3, < 7.0", "7.0.0", false},
                {">= 6.3, < 7.0", "5.19", false},
                {">=6.3,<7,!=6.5", "6.5", false},
                {">=6.3,<7,!=6.5", "6.6", true},
                {"  >=   5.19  ,  <  6.3  ", "6.1.0", true},
                {">= 6.3", "garbage", false},
                {">= 6.3", "", false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(freep) char *yaml = NULL, *errors = NULL;
                PolicySet *s;

                assert_true(asprintf(&yaml, V1 P V6 "    kernel: \"%s\"\n", cases[i].req) > 0);
                s = parse_string(yaml, &errors);
                if (!s)
                        fail_msg("\"%s\": %s", cases[i].req, errors);
                if (kernel_req_holds(s->policies[0].kernel_reqs, s->policies[0].n_kernel_reqs,
                                     cases[i].release) != cases[i].holds)
                        fail_msg("\"%s\" on \"%s\": expected %s", cases[i].req, cases[i].release,
                                 cases[i].holds ? "true" : "false");
                policy_set_free(s);
        }
        assert_true(kernel_req_holds(NULL, 0, "anything"));
        assert_true(kernel_req_holds(NULL, 0, NULL));
        assert_false(kernel_req_holds(&(KernelReq){.op = KERNEL_OP_GE, .version = {1}}, 1, NULL));
}

static void test_globs(void **state) {
        char longest[POLICY_STRING_MAX + 2];
        static const struct {
                const char *g;
                bool valid;
        } cases[] = {
                {"eth*", true},
                {"eth?", true},
                {"eth[0-9]", true},
                {"eth[!0-9]", true},
                {"eth[^0-9]", true},
                {"eth[]]", true}, /* a leading ] is a member */
                {"eth[!]]", true},
                {"eth[[:digit:]]", true},
                {"eth[[:digit:]", false},
                {"eth\\[", true}, /* escaped: a literal [ */
                {"eth\\\\", true},
                {"eth[\\]]", true},
                {"[", false},
                {"eth[0-", false},
                {"eth[]", false},
                {"eth[!]", false},
                {"eth\\", false},
                {"eth[\\", false},
                {"", false},
                {"*", true},
                {"0c:42:a1:*", true},
                /* classes fnmatch() knows, and only those */
                {"eth[[:alnum:][:xdigit:]]", true},
                {"eth[[:nope:]]", false},
                {"eth[[:DIGIT:]]", false},
                {"eth[[.a.]]", true},
                {"eth[[.ab.]]", false},
                {"eth[[=a=]]", true},
                /* ranges: not reversed, not from or to a class */
                {"eth[0-9a-f]", true},
                {"eth[a-a]", true},
                {"eth[z-a]", false},
                {"eth[9-0]", false},
                {"eth[\\z-\\a]", false},
                {"eth[[:alpha:]-z]", false},
                {"eth[a-]", true}, /* a trailing - is a member */
                {"eth[-a]", true},
                {"eth[!z-a]", false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                if (glob_is_valid(cases[i].g) != cases[i].valid)
                        fail_msg("\"%s\": expected %s", cases[i].g, cases[i].valid ? "valid" : "invalid");
        assert_false(glob_is_valid(NULL));

        memset(longest, 'a', sizeof(longest));
        longest[POLICY_STRING_MAX] = '\0';
        assert_true(glob_is_valid(longest));
        longest[POLICY_STRING_MAX] = 'a';
        longest[POLICY_STRING_MAX + 1] = '\0';
        assert_false(glob_is_valid(longest));
}

static void test_route_prefixes(void **state) {
        static const struct {
                const char *s;
                int r;
                int family;
                unsigned prefixlen;
        } cases[] = {
                {"default", 0, 0, 0},
                {"10.0.0.0/8", 0, AF_INET, 8},
                {"0.0.0.0/0", 0, AF_INET, 0},
                {"192.0.2.1", 0, AF_INET, 32},
                {"192.0.2.1/32", 0, AF_INET, 32},
                {"192.0.2.128/25", 0, AF_INET, 25},
                {"2001:db8::/32", 0, AF_INET6, 32},
                {"::/0", 0, AF_INET6, 0},
                {"::1", 0, AF_INET6, 128},
                {"fe80::/10", 0, AF_INET6, 10},
                {"10.0.0.1/8", -EDOM, 0, 0},
                {"192.0.2.129/25", -EDOM, 0, 0},
                {"2001:db8::1/64", -EDOM, 0, 0},
                {"10.0.0.0/33", -EINVAL, 0, 0},
                {"10.0.0.0/", -EINVAL, 0, 0},
                {"10.0.0.0/-1", -EINVAL, 0, 0},
                {"10.0.0.0/+8", -EINVAL, 0, 0},
                {"10.0.0.0/08x", -EINVAL, 0, 0},
                {"10.0.0.0/0008", -EINVAL, 0, 0},
                {"10.0.0/8", -EINVAL, 0, 0},
                {"10.0.0.256", -EINVAL, 0, 0},
                {"2001:db8::/129", -EINVAL, 0, 0},
                {"2001:db8:::/32", -EINVAL, 0, 0},
                {"Default", -EINVAL, 0, 0},
                {"", -EINVAL, 0, 0},
                {"/8", -EINVAL, 0, 0},
                {"10.0.0.0 /8", -EINVAL, 0, 0},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RoutePrefix p = {.prefixlen = 77};
                int r = route_prefix_parse(cases[i].s, &p);

                if (r != cases[i].r)
                        fail_msg("\"%s\": %d, expected %d", cases[i].s, r, cases[i].r);
                if (r < 0) {
                        assert_int_equal(p.prefixlen, 77);
                        continue;
                }
                assert_int_equal(p.is_default, streq(cases[i].s, "default"));
                assert_int_equal(p.family, cases[i].family);
                assert_int_equal(p.prefixlen, cases[i].prefixlen);
        }
}

static void test_guard_counters(void **state) {
        static const struct {
                const char *s;
                int r;
                GuardCounterKind kind;
        } cases[] = {
                {"link.tx_errors", 0, GUARD_COUNTER_LINK},
                {"link.rx_otherhost_dropped", 0, GUARD_COUNTER_LINK},
                {"link.multicast", 0, GUARD_COUNTER_LINK},
                {"Ip.InHdrErrors", 0, GUARD_COUNTER_SNMP},
                {"IpExt.InTruncatedPkts", 0, GUARD_COUNTER_SNMP},
                {"Ip6.Ip6InHdrErrors", 0, GUARD_COUNTER_SNMP},
                {"Tcp.RetransSegs", 0, GUARD_COUNTER_SNMP},
                {"TcpExt.TCPLossProbes", 0, GUARD_COUNTER_SNMP},
                {"Icmp6.Icmp6InType1", 0, GUARD_COUNTER_SNMP},
                {"Udp.In_Errors", 0, GUARD_COUNTER_SNMP},
                {"drop.netfilter_drop", 0, GUARD_COUNTER_OBSERVER},
                {"drop.any", 0, GUARD_COUNTER_OBSERVER},
                {"tcp.sent", 0, GUARD_COUNTER_OBSERVER},
                {"tcp.sent-big", 0, GUARD_COUNTER_OBSERVER},
                {"tcp.retrans", 0, GUARD_COUNTER_OBSERVER},
                {"tcp.retrans-big", 0, GUARD_COUNTER_OBSERVER},
                {"tcp.retransmits", -EINVAL, 0},
                {"drop.", -EINVAL, 0},
                {"drop.Netfilter_drop", -EINVAL, 0},
                {"drop.a-b", -EINVAL, 0},
                {"link.tx_foo", -EINVAL, 0},
                {"link.", -EINVAL, 0},
                {"link", -EINVAL, 0},
                {"Tcp.", -EINVAL, 0},
                {".RetransSegs", -EINVAL, 0},
                {"Tcp.RetransSegs.x", -EINVAL, 0},
                {"Tcp.1x", -EINVAL, 0},
                {"Tc_p.X", -EINVAL, 0},
                {"", -EINVAL, 0},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                GuardCounterKind k = _GUARD_COUNTER_KIND_INVALID;
                int r = guard_counter_parse(cases[i].s, &k);

                if (r != cases[i].r)
                        fail_msg("\"%s\": %d, expected %d", cases[i].s, r, cases[i].r);
                assert_int_equal(k, r == 0 ? cases[i].kind : _GUARD_COUNTER_KIND_INVALID);
        }
}

static void test_string_tables(void **state) {
        char buf[16];

        assert_string_equal(size_kind_to_string(SIZE_UNSET), "unset");
        assert_string_equal(size_kind_to_string(SIZE_BYTES), "bytes");
        assert_string_equal(size_kind_to_string(SIZE_DEVICE_MAX), "max");
        assert_string_equal(size_kind_to_string(SIZE_LEGACY), "legacy");
        assert_null(size_kind_to_string(_SIZE_KIND_MAX));
        assert_null(size_kind_to_string(_SIZE_KIND_INVALID));
        for (KernelOp op = 0; op < _KERNEL_OP_MAX; op++)
                assert_non_null(kernel_op_to_string(op));
        assert_string_equal(kernel_op_to_string(KERNEL_OP_GE), ">=");
        assert_null(kernel_op_to_string(_KERNEL_OP_MAX));
        assert_string_equal(guard_counter_kind_to_string(GUARD_COUNTER_LINK), "link");
        assert_string_equal(guard_counter_kind_to_string(GUARD_COUNTER_SNMP), "snmp");
        assert_null(guard_counter_kind_to_string(_GUARD_COUNTER_KIND_INVALID));
        assert_string_equal(
                size_spec_format(&(SizeSpec){.kind = SIZE_BYTES, .bytes = 65536}, buf, sizeof(buf)),
                "65536");
        assert_string_equal(size_spec_format(&(SizeSpec){.kind = SIZE_LEGACY}, buf, sizeof(buf)), "legacy");
}

/* ---- limits ---- */

static char *repeat(const char *head, const char *item, size_t n, const char *tail) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        assert_non_null(f);
        fputs(head, f);
        for (size_t i = 0; i < n; i++)
                fprintf(f, item, i);
        fputs(tail, f);
        fclose(f);
        return buf;
}

static void test_limits(void **state) {
        _cleanup_(freep) char *many = NULL, *ok = NULL, *long_list = NULL, *max_list = NULL, *guards = NULL,
                              *long_string = NULL, *huge = NULL, *errors = NULL;
        PolicySet *s;
        PolicyErrors e = {};
        char str[POLICY_STRING_MAX + 2];

        ok = repeat(V1 "policies:\n", "  - { name: p%zu, ipv6: { gso-max-size: 1 } }\n", POLICY_POLICIES_MAX,
                    "");
        s = parse_string(ok, &errors);
        assert_string_equal(errors, "");
        assert_int_equal(s->n_policies, POLICY_POLICIES_MAX);
        policy_set_free(s);
        free(errors);

        many = repeat(V1 "policies:\n", "  - { name: p%zu, ipv6: { gso-max-size: 1 } }\n",
                      POLICY_POLICIES_MAX + 1, "");
        s = parse_string(many, &errors);
        assert_null(s);
        assert_string_equal(errors, "t.yaml:3:3: policies: too many policies (max 1024)\n");
        free(errors);

        /* the limit holds for the set, across files */
        s = policy_set_new();
        assert_int_equal(policy_parse_buffer(s, "a.yaml", ok, strlen(ok), &e), 0);
        assert_int_equal(policy_parse_buffer(s, "b.yaml", V1 P V6, strlen(V1 P V6), &e), -EINVAL);
        errors = errors_to_string(&e);
        assert_string_equal(errors, "b.yaml:3:3: policies: too many policies (max 1024)\n");
        policy_errors_clear(&e);
        policy_set_free(s);
        free(errors);

        max_list = repeat(V1 P V6 "    match:\n      name: [", "e%zu, ", POLICY_LIST_MAX, "]\n");
        s = parse_string(max_list, &errors);
        assert_string_equal(errors, "");
        assert_int_equal(s->policies[0].match.name.n, POLICY_LIST_MAX);
        policy_set_free(s);
        free(errors);

        long_list = repeat(V1 P V6 "    match:\n      name: [", "e%zu, ", POLICY_LIST_MAX + 1, "]\n");
        s = parse_string(long_list, &errors);
        assert_null(s);
        assert_string_equal(errors, "t.yaml:6:13: name: too many items (max 256)\n");
        free(errors);

        guards =
                repeat(V1 "rollback:\n  guards:\n", "    - { counter: link.tx_errors, max-increase: %zu }\n",
                       POLICY_GUARDS_MAX + 1, "policies: []\n");
        s = parse_string(guards, &errors);
        assert_null(s);
        assert_string_equal(errors, "t.yaml:4:5: guards: too many items (max 64)\n");
        free(errors);

        memset(str, 'a', sizeof(str));
        str[POLICY_STRING_MAX + 1] = '\0';
        assert_true(asprintf(&long_string, V1 P V6 "    hosts: %s\n", str) > 0);
        s = parse_string(long_string, &errors);
        assert_null(s);
        assert_string_equal(errors, "t.yaml:5:12: hosts: string too long (max 256)\n");
        free(errors);

        huge = calloc(1, POLICY_FILE_MAX + 2);
        assert_non_null(huge);
        memset(huge, '#', POLICY_FILE_MAX + 1);
        s = policy_set_new();
        assert_int_equal(policy_parse_buffer(s, "huge.yaml", huge, POLICY_FILE_MAX + 1, &e), -EINVAL);
        errors = errors_to_string(&e);
        assert_string_equal(errors, "huge.yaml: file too large (max 1048576 bytes)\n");
        policy_errors_clear(&e);
        policy_set_free(s);
}

/* One bad item per line, many more than the cap: the report stops instead of growing. */
static void test_error_cap(void **state) {
        _cleanup_(freep) char *yaml = NULL, *errors = NULL;
        PolicySet *s;
        size_t lines = 0;

        yaml = repeat(V1 "policies:\n", "  - { name: p%zu, ipv6: { gso-max-size: 0 } }\n", 500, "");
        s = parse_string(yaml, &errors);
        assert_null(s);
        for (const char *c = errors; *c; c++)
                lines += *c == '\n';
        assert_int_equal(lines, 101);
        assert_non_null(strstr(errors, "too many errors"));
}

/* ---- files ---- */

typedef struct TempDir {
        char path[64];
} TempDir;

static int write_file(const char *root, const char *rel, const char *content) {
        _cleanup_(freep) char *path = NULL;
        FILE *f;

        if (asprintf(&path, "%s/%s", root, rel) < 0)
                return -ENOMEM;
        /* mkdir -p of the parent */
        for (char *c = path + strlen(root) + 1; *c; c++)
                if (*c == '/') {
                        *c = '\0';
                        (void) mkdir(path, 0755);
                        *c = '/';
                }
        f = fopen(path, "we");
        if (!f)
                return -errno;
        fputs(content, f);
        fclose(f);
        return 0;
}

static int setup_tempdir(void **state) {
        TempDir *t = calloc(1, sizeof(*t));
        if (!t)
                return -1;
        snprintf(t->path, sizeof(t->path), "/tmp/test-policy-XXXXXX");
        if (!mkdtemp(t->path)) {
                free(t);
                return -1;
        }
        *state = t;
        return 0;
}

static int teardown_tempdir(void **state) {
        TempDir *t = *state;
        _cleanup_(freep) char *cmd = NULL;
        int r = -1;

        if (asprintf(&cmd, "rm -rf '%s'", t->path) > 0)
                r = system(cmd) == 0 ? 0 : -1;
        free(t);
        return r; /* a directory left behind fails the test */
}

static void assert_paths(char **got, int n, const char *root, const char *const *expected,
                         size_t n_expected) {
        assert_int_equal(n, n_expected);
        for (size_t i = 0; i < n_expected; i++) {
                _cleanup_(freep) char *want = NULL;
                assert_true(asprintf(&want, "%s%s", root, expected[i]) > 0);
                assert_non_null(got[i]);
                assert_string_equal(got[i], want);
        }
        assert_null(got[n_expected]);
}

static void test_discover(void **state) {
        TempDir *t = *state;
        _cleanup_(freep) char *link = NULL, *target = NULL, *dangling = NULL, *dir = NULL;
        char **paths = NULL;
        int n;

        /* nothing at all: fine and empty */
        n = policy_discover(NULL, t->path, &paths);
        assert_paths(paths, n, t->path, NULL, 0);
        strv_free(paths);

        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.yaml", V1 "policies: []\n"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/50-b.yaml", "etc"), 0);
        assert_int_equal(write_file(t->path, "run/bigtcpd/bigtcpd.d/50-b.yaml", "run"), 0);
        assert_int_equal(write_file(t->path, "run/bigtcpd/bigtcpd.d/10-a.yaml", "run"), 0);
        assert_int_equal(write_file(t->path, "usr/lib/bigtcpd/bigtcpd.d/10-a.yaml", "usr"), 0);
        assert_int_equal(write_file(t->path, "usr/lib/bigtcpd/bigtcpd.d/50-b.yaml", "usr"), 0);
        assert_int_equal(write_file(t->path, "usr/lib/bigtcpd/bigtcpd.d/90-z.yaml", "usr"), 0);
        assert_int_equal(write_file(t->path, "usr/lib/bigtcpd/bigtcpd.d/00-first.yaml", "usr"), 0);
        /* not policy files */
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/README", "x"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/70-x.yaml.bak", "x"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/70-x.yml", "x"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/.hidden.yaml", "x"), 0);
        /* policy files that cannot be read: listed, so that loading says so */
        assert_int_equal(asprintf(&dir, "%s/etc/bigtcpd/bigtcpd.d/60-dir.yaml", t->path) > 0, 1);
        assert_int_equal(mkdir(dir, 0755), 0);
        assert_true(asprintf(&dangling, "%s/etc/bigtcpd/bigtcpd.d/65-dangling.yaml", t->path) > 0);
        assert_int_equal(symlink("/nonexistent/x.yaml", dangling), 0);
        /* a symlink to a regular file counts (the way ConfigMaps mount files) */
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/..data/40-cm.yaml", "cm"), 0);
        assert_true(asprintf(&link, "%s/etc/bigtcpd/bigtcpd.d/40-cm.yaml", t->path) > 0);
        assert_int_equal(symlink("..data/40-cm.yaml", link), 0);

        n = policy_discover(NULL, t->path, &paths);
        assert_paths(paths, n, t->path,
                     (const char *const[]){
                             "/etc/bigtcpd/bigtcpd.yaml",
                             "/usr/lib/bigtcpd/bigtcpd.d/00-first.yaml",
                             "/run/bigtcpd/bigtcpd.d/10-a.yaml",
                             "/etc/bigtcpd/bigtcpd.d/40-cm.yaml",
                             "/etc/bigtcpd/bigtcpd.d/50-b.yaml",
                             "/etc/bigtcpd/bigtcpd.d/60-dir.yaml",
                             "/etc/bigtcpd/bigtcpd.d/65-dangling.yaml",
                             "/usr/lib/bigtcpd/bigtcpd.d/90-z.yaml",
                     },
                     8);
        strv_free(paths);

        /* --config replaces everything, whether or not it exists */
        n = policy_discover("/some/where.yaml", t->path, &paths);
        assert_int_equal(n, 1);
        assert_string_equal(paths[0], "/some/where.yaml");
        assert_null(paths[1]);
        strv_free(paths);

        /* the main file is optional */
        assert_true(asprintf(&target, "%s/etc/bigtcpd/bigtcpd.yaml", t->path) > 0);
        assert_int_equal(unlink(target), 0);
        n = policy_discover(NULL, t->path, &paths);
        assert_int_equal(n, 7);
        assert_non_null(strstr(paths[0], "00-first.yaml"));
        strv_free(paths);
}

/* The files as they would be with a tried file at a target: its place among them, the one of the
 * same name it shadows, and the targets that are no place the daemon reads. */
static void test_discover_with(void **state) {
        TempDir *t = *state;
        char **paths = NULL;
        int n;

        assert_int_equal(write_file(t->path, "run/bigtcpd/bigtcpd.d/10-a.yaml", "run"), 0);
        assert_int_equal(write_file(t->path, "usr/lib/bigtcpd/bigtcpd.d/50-b.yaml", "usr"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/90-z.yaml", "etc"), 0);

        static const struct {
                const char *target; /* below the root */
                const char *expected[5];
                size_t n;
        } cases[] = {
                /* no main file yet: it comes first */
                {"/etc/bigtcpd/bigtcpd.yaml",
                 {"/etc/bigtcpd/bigtcpd.yaml", "/run/bigtcpd/bigtcpd.d/10-a.yaml", "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml",
                  "/etc/bigtcpd/bigtcpd.d/90-z.yaml"},
                 4},
                /* a new drop-in in its lexical place */
                {"/etc/bigtcpd/bigtcpd.d/20-new.yaml",
                 {"/run/bigtcpd/bigtcpd.d/10-a.yaml", "/etc/bigtcpd/bigtcpd.d/20-new.yaml",
                  "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml", "/etc/bigtcpd/bigtcpd.d/90-z.yaml"},
                 4},
                /* last, and first */
                {"/etc/bigtcpd/bigtcpd.d/99-last.yaml",
                 {"/run/bigtcpd/bigtcpd.d/10-a.yaml", "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml",
                  "/etc/bigtcpd/bigtcpd.d/90-z.yaml", "/etc/bigtcpd/bigtcpd.d/99-last.yaml"},
                 4},
                {"/etc/bigtcpd/bigtcpd.d/00-first.yaml",
                 {"/etc/bigtcpd/bigtcpd.d/00-first.yaml", "/run/bigtcpd/bigtcpd.d/10-a.yaml",
                  "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml", "/etc/bigtcpd/bigtcpd.d/90-z.yaml"},
                 4},
                /* /etc's takes the place of /usr/lib's of the same name */
                {"/etc/bigtcpd/bigtcpd.d/50-b.yaml",
                 {"/run/bigtcpd/bigtcpd.d/10-a.yaml", "/etc/bigtcpd/bigtcpd.d/50-b.yaml",
                  "/etc/bigtcpd/bigtcpd.d/90-z.yaml"},
                 3},
                /* one that is there already */
                {"/etc/bigtcpd/bigtcpd.d/90-z.yaml",
                 {"/run/bigtcpd/bigtcpd.d/10-a.yaml", "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml",
                  "/etc/bigtcpd/bigtcpd.d/90-z.yaml"},
                 3},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(freep) char *target = NULL;
                assert_true(asprintf(&target, "%s%s", t->path, cases[i].target) > 0);
                n = policy_discover_with(NULL, t->path, target, &paths);
                assert_paths(paths, n, t->path, cases[i].expected, cases[i].n);
                strv_free(paths);
        }

        /* places the daemon does not read */
        static const char *const outside[] = {
                "/etc/bigtcpd/other.yaml",                 /* beside the main file */
                "/run/bigtcpd/bigtcpd.d/10-a.yaml",        /* not durable, and shadowed by /etc */
                "/usr/lib/bigtcpd/bigtcpd.d/50-b.yaml",    /* the package's */
                "/etc/bigtcpd/bigtcpd.d/sub/x.yaml",       /* below a drop-in directory */
                "/etc/bigtcpd/bigtcpd.d/.hidden.yaml",     /* not a drop-in name */
                "/etc/bigtcpd/bigtcpd.d/x.yml",
                "/etc/passwd",
        };
        for (size_t i = 0; i < ELEMENTSOF(outside); i++) {
                _cleanup_(freep) char *target = NULL;
                assert_true(asprintf(&target, "%s%s", t->path, outside[i]) > 0);
                assert_int_equal(policy_discover_with(NULL, t->path, target, &paths), -EXDEV);
        }
        /* with --config, that file alone */
        n = policy_discover_with("/some/where.yaml", t->path, "/some/where.yaml", &paths);
        assert_int_equal(n, 1);
        assert_string_equal(paths[0], "/some/where.yaml");
        strv_free(paths);
        assert_int_equal(policy_discover_with("/some/where.yaml", t->path, "/etc/bigtcpd/bigtcpd.yaml", &paths),
                         -EXDEV);
}

static void count_change(void *userdata) {
        (*(unsigned *) userdata)++;
}

/* Every directory that holds a policy file is watched, however many there are: a change in the
 * last of 24 counts (a fixed table once dropped every directory past the 16th, silently). */
static void test_watch_many_dirs(void **state) {
        TempDir *t = *state;
        struct event_base *base = event_base_new();
        char *paths[24] = {};
        PolicyWatch *w = NULL;
        unsigned changes = 0;

        assert_non_null(base);
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                char rel[32];
                snprintf(rel, sizeof(rel), "d%02zu/p.yaml", i);
                assert_int_equal(write_file(t->path, rel, V1 "policies: []\n"), 0);
                assert_true(asprintf(&paths[i], "%s/%s", t->path, rel) > 0);
        }
        assert_int_equal(policy_watch_new(base, count_change, &changes, &w), 0);
        /* their own directories (and the real ones behind them, should /tmp be a symlink) */
        assert_true(policy_watch_set(w, paths, ELEMENTSOF(paths), NULL, t->path) >= (int) ELEMENTSOF(paths));

        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 0); /* nothing happened yet */
        /* inotify queues the event before close() returns */
        assert_int_equal(write_file(t->path, "d23/p.yaml", V1 "policies: []\n# edited\n"), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 1);

        policy_watch_free(w);
        event_base_free(base);
        for (size_t i = 0; i < ELEMENTSOF(paths); i++)
                free(paths[i]);
}

/* Each directory is watched for the names that matter in it, nothing else. */
static void test_watch_names(void **state) {
        TempDir *t = *state;
        struct event_base *base = event_base_new();
        _cleanup_(freep) char *run_dropins = NULL;
        char **paths = NULL;
        PolicyWatch *w = NULL;
        unsigned changes = 0;
        int n;

        assert_non_null(base);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.yaml", V1 "policies: []\n"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/10-a.yaml", V1 "policies: []\n"), 0);
        assert_int_equal(write_file(t->path, "run/bigtcpd/state.json", "{}"), 0);
        n = policy_discover(NULL, t->path, &paths);
        assert_int_equal(n, 2);
        assert_int_equal(policy_watch_new(base, count_change, &changes, &w), 0);
        /* etc/bigtcpd, etc/bigtcpd/bigtcpd.d, run/bigtcpd (for a bigtcpd.d to appear) */
        assert_int_equal(policy_watch_set(w, paths, (size_t) n, NULL, t->path), 3);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);

        /* an editor's swap file, notes, the daemon's own state: nothing */
        assert_int_equal(write_file(t->path, "etc/bigtcpd/.bigtcpd.yaml.swp", "x"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/NOTES", "x"), 0);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/10-a.yaml~", "x"), 0);
        assert_int_equal(write_file(t->path, "run/bigtcpd/state.json", "{\"v\": 2}"), 0);
        assert_int_equal(write_file(t->path, "run/bigtcpd/state.journal", "x"), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 0);

        /* the policy, a drop-in, a drop-in directory that appears, a ConfigMap's swap: each */
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.yaml", V1 "policies: []\n# 2\n"), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 1);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/20-b.yaml", V1 "policies: []\n"), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 2);
        assert_true(asprintf(&run_dropins, "%s/run/bigtcpd/bigtcpd.d", t->path) > 0);
        assert_int_equal(mkdir(run_dropins, 0755), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 3);
        assert_int_equal(write_file(t->path, "etc/bigtcpd/bigtcpd.d/..data/x", "x"), 0);
        assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
        assert_int_equal(changes, 4);

        policy_watch_free(w);
        event_base_free(base);
        strv_free(paths);
}

static void test_load_files(void **state) {
        TempDir *t = *state;
        _cleanup_(freep) char *a = NULL, *b = NULL, *c = NULL, *d = NULL, *missing = NULL, *errors = NULL,
                              *expected = NULL;
        PolicySet *s = NULL, *s2 = NULL;
        PolicyErrors e = {};

        assert_true(asprintf(&a, "%s/a.yaml", t->path) > 0);
        assert_true(asprintf(&b, "%s/b.yaml", t->path) > 0);
        assert_true(asprintf(&c, "%s/c.yaml", t->path) > 0);
        assert_true(asprintf(&d, "%s/d.yaml", t->path) > 0);
        assert_true(asprintf(&missing, "%s/missing.yaml", t->path) > 0);
        assert_int_equal(write_file(t->path, "a.yaml",
                                    V1 "rollback: { window: 10s, interval: 2s }\n"
                                       "policies:\n  - { name: a, ipv6: { gso-max-size: 1 } }\n"),
                         0);
        /* a drop-in without rollback: inherits a.yaml's */
        assert_int_equal(write_file(t->path, "b.yaml",
                                    V1 "policies:\n  - { name: b, ipv6: { gso-max-size: 1 }, rollback: { "
                                       "interval: 3s } }\n"),
                         0);
        /* a drop-in with rollback: built-ins overridden by its own, not a.yaml's */
        assert_int_equal(write_file(t->path, "c.yaml",
                                    V1 "rollback: { guards: [] }\n"
                                       "policies:\n  - { name: c, ipv6: { gso-max-size: 1 } }\n"),
                         0);
        assert_int_equal(
                write_file(t->path, "d.yaml", V1 "policies:\n  - { name: a, ipv4: { gso-max-size: 1 } }\n"),
                0);

        assert_int_equal(policy_load_files((char *const[]){a, b, c}, 3, &s, &e), 0);
        assert_int_equal(e.n, 0);
        assert_int_equal(s->n_files, 3);
        assert_string_equal(s->files[2], c);
        assert_int_equal(s->n_policies, 3);
        assert_int_equal(s->defaults.window_usec, 10 * SEC);
        assert_int_equal(s->defaults.interval_usec, 2 * SEC);
        assert_int_equal(s->defaults.n_guards, 5); /* built-in (with tcp.retrans-big per tcp.sent-big) */
        assert_int_equal(s->policies[0].rollback.window_usec, 10 * SEC);
        assert_int_equal(s->policies[0].rollback.interval_usec, 2 * SEC);
        assert_int_equal(s->policies[1].rollback.window_usec, 10 * SEC);
        assert_int_equal(s->policies[1].rollback.interval_usec, 3 * SEC);
        assert_int_equal(s->policies[1].rollback.n_guards, 5);
        assert_int_equal(s->policies[2].rollback.window_usec, 30 * SEC);
        assert_int_equal(s->policies[2].rollback.interval_usec, 1 * SEC);
        assert_true(s->policies[2].rollback.has_guards);
        assert_int_equal(s->policies[2].rollback.n_guards, 0);
        assert_string_equal(s->policies[2].file, c);

        /* the digest depends on names, contents and order */
        assert_int_equal(policy_load_files((char *const[]){a, b, c}, 3, &s2, &e), 0);
        assert_int_equal(s->digest, s2->digest);
        policy_set_free(s2);
        assert_int_equal(policy_load_files((char *const[]){b, a, c}, 3, &s2, &e), 0);
        assert_int_not_equal(s->digest, s2->digest);
        policy_set_free(s2);
        assert_int_equal(write_file(t->path, "b.yaml",
                                    V1 "policies:\n  - { name: b, ipv6: { gso-max-size: 2 }, rollback: { "
                                       "interval: 3s } }\n"),
                         0);
        assert_int_equal(policy_load_files((char *const[]){a, b, c}, 3, &s2, &e), 0);
        assert_int_not_equal(s->digest, s2->digest);
        policy_set_free(s2);
        policy_set_free(s);
        s = NULL;

        /* every file's errors, a missing file among them; no set */
        assert_int_equal(policy_load_files((char *const[]){a, missing, d, t->path}, 4, &s, &e), -EINVAL);
        assert_null(s);
        errors = errors_to_string(&e);
        assert_true(asprintf(&expected,
                             "%s: No such file or directory\n"
                             "%s:3:13: name: duplicate policy \"a\" (first defined at %s:4:5)\n"
                             "%s: Is a directory\n",
                             missing, d, a, t->path) > 0);
        assert_string_equal(errors, expected);
        policy_errors_clear(&e);

        /* what is not a regular file says what it is, and nothing blocks on a FIFO */
        _cleanup_(freep) char *fifo = NULL, *dangling = NULL, *loop = NULL, *errors2 = NULL, *expected2 = NULL;
        assert_true(asprintf(&fifo, "%s/fifo.yaml", t->path) > 0);
        assert_true(asprintf(&dangling, "%s/dangling.yaml", t->path) > 0);
        assert_true(asprintf(&loop, "%s/loop.yaml", t->path) > 0);
        assert_int_equal(mkfifo(fifo, 0644), 0);
        assert_int_equal(symlink("/nonexistent/x.yaml", dangling), 0);
        assert_int_equal(symlink("loop.yaml", loop), 0);
        assert_int_equal(policy_load_files((char *const[]){fifo, dangling, loop}, 3, &s, &e), -EINVAL);
        errors2 = errors_to_string(&e);
        assert_true(asprintf(&expected2, "%s: not a regular file (a FIFO)\n%s: dangling symlink\n%s: symlink loop\n",
                             fifo, dangling, loop) > 0);
        assert_string_equal(errors2, expected2);
        policy_errors_clear(&e);

        /* no files: an empty set with the built-in defaults */
        assert_int_equal(policy_load_files(NULL, 0, &s, &e), 0);
        assert_int_equal(s->n_policies, 0);
        assert_int_equal(s->defaults.window_usec, 30 * SEC);
        policy_set_free(s);
}

static void test_scope(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s = parse_string(
                V1
                "policies:\n"
                "  - { name: any, ipv6: { gso-max-size: 1 } }\n"
                "  - { name: web, hosts: [\"web-*\", \"edge-?\"], ipv6: { gso-max-size: 1 } }\n"
                "  - { name: new, kernel: \">= 6.3\", ipv6: { gso-max-size: 1 } }\n"
                "  - { name: both, hosts: db-*, kernel: \">= 5.19, < 6.3\", ipv6: { gso-max-size: 1 } }\n",
                &errors);
        static const struct {
                const char *host, *release;
                bool any, web, new, both;
        } cases[] = {
                {"web-1", "6.18.44-fc-v595", true, true, true, false},
                {"WEB-1", "6.2.0", true, true, false, false},
                {"edge-a", "6.3", true, true, true, false},
                {"edge-ab", "6.3", true, false, true, false},
                {"db-7", "6.1.0-13-amd64", true, false, false, true},
                {"db-7", "6.3.0", true, false, true, false},
                {"db-7", NULL, true, false, false, false},
                {NULL, "6.3", true, false, true, false},
        };

        assert_string_equal(errors, "");
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                policy_set_scope(s, &(HostIdentity){.hostname = cases[i].host,
                                                    .kernel_release = cases[i].release});
                assert_int_equal(s->policies[0].applies_here, cases[i].any);
                assert_int_equal(s->policies[1].applies_here, cases[i].web);
                assert_int_equal(s->policies[2].applies_here, cases[i].new);
                assert_int_equal(s->policies[3].applies_here, cases[i].both);
        }
        policy_set_free(s);
        policy_set_scope(NULL, &(HostIdentity){.hostname = "x", .kernel_release = "6.3"}); /* harmless */
}

static void test_error_format(void **state) {
        _cleanup_(freep) char *a = NULL, *b = NULL;

        assert_int_equal(policy_error_format(&(PolicyError){.file = (char *) "f.yaml",
                                                            .line = 3,
                                                            .column = 7,
                                                            .message = (char *) "unknown key \"x\""},
                                             &a),
                         0);
        assert_string_equal(a, "f.yaml:3:7: unknown key \"x\"");
        assert_int_equal(policy_error_format(
                                 &(PolicyError){.file = (char *) "f.yaml", .message = (char *) "gone"}, &b),
                         0);
        assert_string_equal(b, "f.yaml: gone");
        assert_int_equal(policy_error_format(NULL, &b), -EINVAL);
}

/* ---- the shipped examples ---- */

static void test_example_conf(void **state) {
        _cleanup_(freep) char *main_path = NULL, *fleet_path = NULL, *errors = NULL;
        PolicySet *s = NULL;
        PolicyErrors e = {};
        const Policy *veth = NULL;

        assert_true(asprintf(&main_path, "%s/bigtcpd.yaml", TEST_CONF_DIR) > 0);
        assert_true(asprintf(&fleet_path, "%s/fleet.yaml", TEST_CONF_DIR) > 0);

        if (policy_load_files((char *const[]){main_path}, 1, &s, &e) < 0) {
                errors = errors_to_string(&e);
                fail_msg("%s", errors);
        }
        /* the README demo depends on a veth policy asking for 185000 in both families */
        for (size_t i = 0; i < s->n_policies; i++)
                for (size_t j = 0; j < s->policies[i].match.kind.n; j++)
                        if (streq(s->policies[i].match.kind.items[j], "veth") && !veth)
                                veth = &s->policies[i];
        assert_non_null(veth);
        assert_true(veth->applies_here);
        assert_true(veth->ipv6.set && veth->ipv4.set);
        assert_int_equal(veth->ipv6.gso.kind, SIZE_BYTES);
        assert_int_equal(veth->ipv6.gso.bytes, 185000);
        assert_int_equal(veth->ipv6.gro.bytes, 185000);
        assert_int_equal(veth->ipv4.gso.bytes, 185000);
        assert_int_equal(veth->ipv4.gro.bytes, 185000);
        policy_set_free(s);
        s = NULL;

        if (policy_load_files((char *const[]){fleet_path}, 1, &s, &e) < 0) {
                errors = errors_to_string(&e);
                fail_msg("%s", errors);
        }
        assert_true(s->n_policies >= 3);
        policy_set_free(s);
        s = NULL;

        /* both together: the fleet file as a drop-in next to the main file */
        if (policy_load_files((char *const[]){main_path, fleet_path}, 2, &s, &e) < 0) {
                errors = errors_to_string(&e);
                fail_msg("%s", errors);
        }
        policy_set_free(s);
}

/* The commented examples in bigtcpd.yaml ("# - name: ..." to the end) must be valid too, so that
 * uncommenting them is all a reader has to do. */
static void test_example_conf_commented(void **state) {
        _cleanup_(freep) char *path = NULL, *data = NULL, *errors = NULL;
        char *buf = NULL, *line, *save = NULL;
        size_t size = 0;
        FILE *f;
        bool in = false;
        PolicySet *s;

        assert_true(asprintf(&path, "%s/bigtcpd.yaml", TEST_CONF_DIR) > 0);
        data = read_all(path, NULL);
        assert_non_null(data);
        f = open_memstream(&buf, &size);
        assert_non_null(f);
        fputs(V1 "policies:\n", f);
        for (line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (!in && strncmp(line, "  # - name:", 11) == 0)
                        in = true;
                if (!in)
                        continue;
                if (strncmp(line, "  # ", 4) == 0)
                        fprintf(f, "  %s\n", line + 4);
                else if (strncmp(line, "  #", 3) == 0 && line[3] == '\0')
                        fputs("\n", f);
                else
                        fail_msg("unexpected line in the commented examples: %s", line);
        }
        fclose(f);
        assert_true(in);
        s = parse_string(buf, &errors);
        if (!s)
                fail_msg("%s\n%s", errors, buf);
        assert_true(s->n_policies >= 2);
        policy_set_free(s);
        free(buf);
}

/* "did you mean": folded '_'/'-' and case, swaps of two neighbours count one, nothing far. */
static void test_nearest_word(void **state) {
        static const char *const keys[] = {"gso-max-size", "gro-max-size", "window", "interval", NULL};
        assert_string_equal(nearest_word("gso_max_size", keys), "gso-max-size");
        assert_string_equal(nearest_word("GRO-MAX-SIZE", keys), "gro-max-size");
        assert_string_equal(nearest_word("windwo", keys), "window");
        assert_string_equal(nearest_word("intervall", keys), "interval");
        assert_null(nearest_word("colour", keys));
        assert_null(nearest_word("", keys));
        assert_null(nearest_word("x", keys));
        assert_string_equal(link_kind_suggest("Ethernet"), "device");
        assert_string_equal(link_kind_suggest("lo"), "loopback");
        assert_string_equal(link_kind_suggest("vxaln"), "vxlan");
        assert_null(link_kind_suggest("frobnicator"));
        assert_true(link_kind_is_known("veth") && link_kind_is_known("device") && link_kind_is_known("loopback"));
        assert_false(link_kind_is_known("ethernet"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_all_keys),
                cmocka_unit_test(test_error_cases),
                cmocka_unit_test(test_nearest_word),
                cmocka_unit_test(test_netns_key),
                cmocka_unit_test(test_auto_sizes),
                cmocka_unit_test(test_error_leaves_set_unchanged),
                cmocka_unit_test(test_durations),
                cmocka_unit_test(test_numbers),
                cmocka_unit_test(test_kernel_versions),
                cmocka_unit_test(test_kernel_requirements),
                cmocka_unit_test(test_globs),
                cmocka_unit_test(test_route_prefixes),
                cmocka_unit_test(test_guard_counters),
                cmocka_unit_test(test_string_tables),
                cmocka_unit_test(test_limits),
                cmocka_unit_test(test_error_cap),
                cmocka_unit_test_setup_teardown(test_discover, setup_tempdir, teardown_tempdir),
                cmocka_unit_test_setup_teardown(test_discover_with, setup_tempdir, teardown_tempdir),
                cmocka_unit_test_setup_teardown(test_load_files, setup_tempdir, teardown_tempdir),
                cmocka_unit_test_setup_teardown(test_watch_names, setup_tempdir, teardown_tempdir),
                cmocka_unit_test_setup_teardown(test_watch_many_dirs, setup_tempdir, teardown_tempdir),
                cmocka_unit_test(test_scope),
                cmocka_unit_test(test_error_format),
                cmocka_unit_test(test_example_conf),
                cmocka_unit_test(test_example_conf_commented),
        };
        int r = cmocka_run_group_tests_name("policy", tests, NULL, NULL);

        return r | run_golden();
}
