/* test-guard.c — counter reading (the /proc/net formats) and the guard decisions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "counters.h"
#include "guard.h"
#include "test-helpers.h"

static const char SNMP[] = "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n"
                           "Ip: 1 64 1000 7\n"
                           "Tcp: RtoAlgorithm MaxConn OutSegs RetransSegs InErrs\n"
                           "Tcp: 1 -1 5000 12 0\n";
static const char NETSTAT[] = "IpExt: InNoRoutes InTruncatedPkts\n"
                              "IpExt: 0 3\n";
static const char SNMP6[] = "Ip6InReceives                   	42\n"
                            "Ip6InHdrErrors                  	5\n"
                            "Icmp6InMsgs                     	9\n"
                            "Udp6InDatagrams 11\n";

static void snapshot(SnmpSnapshot *s, uint64_t inhdr, uint64_t inrecv, uint64_t retrans, uint64_t out) {
        char buf[512];
        *s = (SnmpSnapshot){};
        snprintf(buf, sizeof(buf),
                 "Ip: InReceives InHdrErrors\nIp: %llu %llu\nTcp: OutSegs RetransSegs\nTcp: %llu %llu\n",
                 (unsigned long long) inrecv, (unsigned long long) inhdr, (unsigned long long) out,
                 (unsigned long long) retrans);
        assert_int_equal(snmp_parse(s, buf, false), 0);
        snmp_finish(s);
}

static void test_snmp_parse(void **state) {
        SnmpSnapshot s = {};
        uint64_t v;

        assert_int_equal(snmp_parse(&s, SNMP, false), 0);
        assert_int_equal(snmp_parse(&s, NETSTAT, false), 0);
        assert_int_equal(snmp_parse(&s, SNMP6, true), 0);
        snmp_finish(&s);
        assert_int_equal(snmp_get(&s, "Ip.InHdrErrors", &v), 0);
        assert_int_equal(v, 7);
        assert_int_equal(snmp_get(&s, "Tcp.MaxConn", &v), 0);
        assert_int_equal(v, 0); /* a gauge of -1 reads as 0 */
        assert_int_equal(snmp_get(&s, "IpExt.InTruncatedPkts", &v), 0);
        assert_int_equal(v, 3);
        assert_int_equal(snmp_get(&s, "Ip6.Ip6InHdrErrors", &v), 0);
        assert_int_equal(v, 5);
        assert_int_equal(snmp_get(&s, "Icmp6.Icmp6InMsgs", &v), 0);
        assert_int_equal(v, 9);
        assert_int_equal(snmp_get(&s, "Udp6.Udp6InDatagrams", &v), 0);
        assert_int_equal(snmp_get(&s, "Ip.NoSuchThing", &v), -ENOENT);
        assert_int_equal(snmp_get(&s, "Ip6.InHdrErrors", &v), -ENOENT);
        snmp_done(&s);

        /* Garbage: no crash, nothing found. */
        assert_int_equal(snmp_parse(&s, "Ip: a b\nTcp: 1 2\n\n:\n:x\nIp:\n", false), 0);
        assert_int_equal(snmp_parse(&s, "6 6\n\n 6\n", true), 0);
        snmp_finish(&s);
        snmp_done(&s);
}

static void test_real_proc(void **state) {
        SnmpSnapshot s = {};
        uint64_t v;
        assert_int_equal(snmp_read("/proc/net", &s), 0);
        assert_int_equal(snmp_get(&s, "Ip.InReceives", &v), 0);
        assert_int_equal(snmp_get(&s, "IpExt.InTruncatedPkts", &v), 0);
        snmp_done(&s);
        assert_int_equal(snmp_read("/nonexistent", &s), 0); /* nothing to read: empty */
        assert_int_equal(s.n, 0);
        snmp_done(&s);
}

/* Packets sent in the namespace of `ns_fd` to 127.0.0.1 while its lo is down: each counts as
 * Ip.OutNoRoutes there. */
static void unroutable(int ns_fd, int home_fd, int n) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        assert_int_equal(setns(ns_fd, CLONE_NEWNET), 0);
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        for (int i = 0; i < n; i++)
                assert_int_equal(sendto(fd, "x", 1, 0, (struct sockaddr *) &to, sizeof(to)), -1);
        close(fd);
        assert_int_equal(setns(home_fd, CLONE_NEWNET), 0);
}

/* Another namespace's files, opened inside it and kept: each reading is that namespace's counters
 * as they are now (a seq_file read again from offset 0), from the daemon's namespace, and takes
 * no descriptor of its own (a daemon at its descriptor limit still reads them). */
static void test_kept_descriptors(void **state) {
        SnmpFiles f = {.opened = true};
        SnmpSnapshot s = {};
        struct rlimit old, low;
        int home, inner, spare[64], n_spare = 0, top = 0;
        uint64_t v;

        (void) state;
        home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        assert_true(home >= 0);
        if (unshare(CLONE_NEWNET) < 0) {
                close(home);
                skip(); /* not root */
        }
        for (size_t i = 0; i < ELEMENTSOF(f.fd); i++) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/thread-self/net/%s", snmp_file_names[i]);
                f.fd[i] = open(path, O_RDONLY | O_CLOEXEC);
                assert_true(f.fd[i] >= 0);
                top = f.fd[i] > top ? f.fd[i] : top;
        }
        inner = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        assert_true(inner >= 0);
        assert_int_equal(setns(home, CLONE_NEWNET), 0);

        assert_int_equal(snmp_read_files(&f, &s), 0);
        assert_int_equal(snmp_get(&s, "Ip.OutNoRoutes", &v), 0);
        assert_int_equal(v, 0); /* a new namespace's */
        assert_int_equal(snmp_get(&s, "Ip6.Ip6InReceives", &v), 0);
        snmp_done(&s);
        unroutable(inner, home, 3);
        assert_int_equal(snmp_read_files(&f, &s), 0);
        assert_int_equal(snmp_get(&s, "Ip.OutNoRoutes", &v), 0);
        assert_int_equal(v, 3);
        snmp_done(&s);

        /* no descriptor left below the limit */
        unroutable(inner, home, 2);
        top = inner > top ? inner : top;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
        low = (struct rlimit){.rlim_cur = (rlim_t) top + 1, .rlim_max = old.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
        for (int fd; n_spare < (int) ELEMENTSOF(spare) && (fd = dup(home)) >= 0;)
                spare[n_spare++] = fd;
        int full = errno;
        int r = snmp_read_files(&f, &s);
        for (int i = 0; i < n_spare; i++)
                close(spare[i]);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
        assert_int_equal(full, EMFILE);
        assert_int_equal(r, 0);
        assert_int_equal(snmp_get(&s, "Ip.OutNoRoutes", &v), 0);
        assert_int_equal(v, 5);
        snmp_done(&s);
        for (size_t i = 0; i < ELEMENTSOF(f.fd); i++)
                close(f.fd[i]);
        close(inner);
        close(home);
}

/* A tick reads only the files its guards' counters are in. */
static void test_files_of_counters(void **state) {
        SnmpSnapshot s = {};
        uint64_t v;

        (void) state;
        assert_int_equal(snmp_files_of("Ip.InHdrErrors"), 1u << 0);
        assert_int_equal(snmp_files_of("Tcp.RetransSegs"), 1u << 0);
        assert_int_equal(snmp_files_of("Ip6.Ip6InHdrErrors"), 1u << 2);
        assert_int_equal(snmp_files_of("Icmp6.Icmp6InMsgs"), 1u << 2);
        assert_int_equal(snmp_files_of("TcpExt.TCPTimeouts"), 1u << 1 | 1u << 0);
        assert_int_equal(snmp_files_of("IpExt.InTruncatedPkts"), 1u << 1 | 1u << 0);
        assert_int_equal(snmp_files_of("NoDot"), SNMP_FILES_ALL);
        /* the real files: snmp6 alone has no Ip group, snmp alone no IpExt */
        assert_int_equal(snmp_read_some(&(SnmpFiles){.dir = "/proc/net"}, 1u << 2, &s), 0);
        assert_int_equal(snmp_get(&s, "Ip.InReceives", &v), -ENOENT);
        assert_int_equal(snmp_get(&s, "IpExt.InTruncatedPkts", &v), -ENOENT);
        snmp_done(&s);
        assert_int_equal(snmp_read_some(&(SnmpFiles){.dir = "/proc/net"}, 1u << 0, &s), 0);
        assert_int_equal(snmp_get(&s, "Ip.InReceives", &v), 0);
        assert_int_equal(snmp_get(&s, "IpExt.InTruncatedPkts", &v), -ENOENT);
        snmp_done(&s);
}

static void test_link_counters(void **state) {
        struct rtnl_link_stats64 st = {.tx_dropped = 5, .rx_otherhost_dropped = 9};
        uint64_t v;
        int off = link_counter_offset("tx_dropped");

        assert_true(off >= 0);
        assert_int_equal(link_counter_get(&st, sizeof(st), off, &v), 0);
        assert_int_equal(v, 5);
        assert_int_equal(link_counter_offset("bogus"), -ENOENT);
        off = link_counter_offset("rx_otherhost_dropped");
        /* an older kernel's shorter blob does not reach the newest field */
        assert_int_equal(link_counter_get(&st, (size_t) off, off, &v), -ENOENT);
}

static Guard guard(const char *counter, GuardCounterKind k, bool inc, uint64_t max_inc, bool ratio, double r,
                   const char *per, GuardCounterKind pk) {
        return (Guard){.counter = (char *) counter, .counter_kind = k, .has_max_increase = inc,
                       .max_increase = max_inc, .has_max_ratio = ratio, .max_ratio = r, .per = (char *) per,
                       .per_kind = pk};
}

static void test_increase_and_ratio(void **state) {
        Guard g[] = {
                guard("Ip.InHdrErrors", GUARD_COUNTER_SNMP, true, 10, false, 0, NULL, 0),
                guard("Tcp.RetransSegs", GUARD_COUNTER_SNMP, false, 0, true, 0.02, "Tcp.OutSegs", GUARD_COUNTER_SNMP),
        };
        RollbackSpec spec = {.window_usec = 30000000, .interval_usec = 1000000, .guards = g, .n_guards = 2};
        SnmpSnapshot base, now;
        _cleanup_(freep) GuardSet *p = calloc(1, GUARD_SET_SIZE(2));
        RollbackRecord rec;

        snapshot(&base, 100, 1000, 50, 10000);
        assert_non_null(p);
        assert_int_equal(guard_set_init_spec(p, &spec, &base), 0);
        assert_true(guard_set_has_snmp(p));
        assert_false(guard_set_has_link(p));
        assert_true(guard_set_has_baselines(p));

        snapshot(&now, 110, 2000, 60, 11000); /* +10 errors: not more than 10; 10/1000 = 0.01 */
        assert_int_equal(guard_set_check(p, &now, NULL, 0, &rec), 0);
        snmp_done(&now);

        snapshot(&now, 111, 2000, 60, 11000); /* +11 */
        assert_int_equal(guard_set_check(p, &now, NULL, 0, &rec), 1);
        assert_string_equal(rec.counter, "Ip.InHdrErrors");
        assert_int_equal(rec.rise, 11);
        assert_true(rec.namespace_wide);
        snmp_done(&now);

        /* The same 10 retransmits trip when few segments went out: a ratio, not a count. */
        snapshot(&now, 100, 2000, 60, 10100); /* 10 / 100 = 0.1 > 0.02 */
        assert_int_equal(guard_set_check(p, &now, NULL, 0, &rec), 1);
        assert_string_equal(rec.counter, "Tcp.RetransSegs");
        assert_string_equal(rec.per, "Tcp.OutSegs");
        assert_int_equal(rec.per_rise, 100);
        snmp_done(&now);

        /* A rise with no rise of `per` is an infinite ratio. */
        snapshot(&now, 100, 2000, 51, 10000);
        assert_int_equal(guard_set_check(p, &now, NULL, 0, &rec), 1);
        snmp_done(&now);

        /* Counters that went down (reset) do not rise. */
        snapshot(&now, 0, 0, 0, 0);
        assert_int_equal(guard_set_check(p, &now, NULL, 0, &rec), 0);
        snmp_done(&now);

        guard_set_done(p);
        snmp_done(&base);
}

static void test_link_baseline_and_absent_counters(void **state) {
        Guard g[] = {
                guard("link.tx_dropped", GUARD_COUNTER_LINK, true, 0, false, 0, NULL, 0),
                guard("Ip.NotOnThisKernel", GUARD_COUNTER_SNMP, true, 0, false, 0, NULL, 0),
        };
        RollbackSpec spec = {.window_usec = 1000000, .interval_usec = 100000, .guards = g, .n_guards = 2};
        struct rtnl_link_stats64 st = {.tx_dropped = 4};
        SnmpSnapshot base;
        _cleanup_(freep) GuardSet *p = calloc(1, GUARD_SET_SIZE(2));
        RollbackRecord rec;

        snapshot(&base, 0, 0, 0, 0);
        assert_non_null(p);
        assert_int_equal(guard_set_init_spec(p, &spec, &base), 0);
        assert_false(guard_set_active(p, 1)); /* absent: inactive, never trips */
        assert_false(guard_set_have_base(p, 0));
        assert_false(guard_set_has_baselines(p));
        /* Without a baseline nothing is judged. */
        assert_int_equal(guard_set_check(p, NULL, &st, sizeof(st), &rec), 0);
        guard_set_link_baseline(p, &st, sizeof(st));
        assert_true(guard_set_have_base(p, 0));
        assert_int_equal(guard_set_check(p, NULL, &st, sizeof(st), &rec), 0);
        st.tx_dropped = 5;
        assert_int_equal(guard_set_check(p, NULL, &st, sizeof(st), &rec), 1);
        assert_string_equal(rec.counter, "link.tx_dropped");
        assert_false(rec.namespace_wide);

        char **w = NULL;
        size_t n = 0;
        assert_int_equal(guard_spec_check(&spec, &base, sizeof(st), &w, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(w[0], "Ip.NotOnThisKernel");
        strv_free(w);
        guard_set_done(p);
        snmp_done(&base);
}

/* Two devices under one guard list share one rule set: made for the first, found for the second,
 * also from a list of the same content held elsewhere (a reloaded policy's, the state file's); a
 * threshold apart is another, and so is another window or interval (the rules keep them, once for
 * all the devices of a policy, instead of each probation). Each device's baselines are its own, and
 * the rules outlive the spec they were made from (a policy reloaded while its windows run). */
static void test_rules_shared(void **state) {
        char *counter = strdup("link.tx_errors"), *retrans = strdup("Tcp.RetransSegs"),
             *out = strdup("Tcp.OutSegs");
        Guard g[] = {
                guard(counter, GUARD_COUNTER_LINK, true, 0, false, 0, NULL, 0),
                guard(retrans, GUARD_COUNTER_SNMP, false, 0, true, 0.02, out, GUARD_COUNTER_SNMP),
        };
        /* the same content: a threshold a guard does not have is no difference */
        Guard same[] = {
                guard("link.tx_errors", GUARD_COUNTER_LINK, true, 0, false, 0.5, NULL, GUARD_COUNTER_SNMP),
                guard("Tcp.RetransSegs", GUARD_COUNTER_SNMP, false, 7, true, 0.02, "Tcp.OutSegs",
                      GUARD_COUNTER_SNMP),
        };
        Guard other[] = {
                guard("link.tx_errors", GUARD_COUNTER_LINK, true, 1, false, 0, NULL, 0),
                guard("Tcp.RetransSegs", GUARD_COUNTER_SNMP, false, 0, true, 0.02, "Tcp.OutSegs",
                      GUARD_COUNTER_SNMP),
        };
        RollbackSpec spec = {.window_usec = 1000000, .interval_usec = 100000, .guards = g, .n_guards = 2};
        RollbackSpec spec_same = {.window_usec = 1000000, .interval_usec = 100000, .guards = same, .n_guards = 2};
        RollbackSpec spec_longer = {.window_usec = 5000000, .interval_usec = 100000, .guards = same, .n_guards = 2};
        RollbackSpec spec_oftener = {.window_usec = 1000000, .interval_usec = 50000, .guards = g, .n_guards = 2};
        RollbackSpec spec_other = {.window_usec = 1000000, .guards = other, .n_guards = 2};
        struct rtnl_link_stats64 st_a = {.tx_errors = 5}, st_b = {.tx_errors = 0};
        _cleanup_(freep) GuardSet *a = calloc(1, GUARD_SET_SIZE(2)), *b = calloc(1, GUARD_SET_SIZE(2)),
                                  *c = calloc(1, GUARD_SET_SIZE(2)), *d = calloc(1, GUARD_SET_SIZE(2));
        size_t before = guard_rules_count();
        SnmpSnapshot base;
        RollbackRecord rec;
        GuardRules *r;

        assert_non_null(counter);
        assert_non_null(retrans);
        assert_non_null(out);
        assert_true(a && b && c && d);
        snapshot(&base, 0, 0, 50, 10000);
        assert_int_equal(guard_set_init_spec(a, &spec, &base), 0);
        assert_int_equal(guard_rules_count(), before + 1);
        assert_int_equal(guard_set_init_spec(b, &spec, &base), 0);
        assert_ptr_equal(a->rules, b->rules);
        assert_int_equal(a->rules->n_ref, 2);
        assert_int_equal(guard_set_init_spec(c, &spec_same, &base), 0);
        assert_ptr_equal(c->rules, a->rules);
        assert_int_equal(guard_rules_get(&spec_same, &r), 0);
        assert_ptr_equal(r, a->rules);
        assert_int_equal(r->window_usec, 1000000);
        assert_int_equal(r->interval_usec, 100000);
        guard_rules_unref(r);
        assert_int_equal(guard_rules_count(), before + 1);
        /* the same guards over another window, or sampled at another interval */
        assert_int_equal(guard_rules_get(&spec_longer, &r), 0);
        assert_ptr_not_equal(r, a->rules);
        assert_int_equal(r->window_usec, 5000000);
        assert_int_equal(guard_rules_count(), before + 2);
        guard_rules_unref(r);
        assert_int_equal(guard_rules_get(&spec_oftener, &r), 0);
        assert_ptr_not_equal(r, a->rules);
        assert_int_equal(r->interval_usec, 50000);
        guard_rules_unref(r);
        assert_int_equal(guard_rules_count(), before + 1);
        assert_int_equal(guard_set_init_spec(d, &spec_other, &base), 0);
        assert_ptr_not_equal(d->rules, a->rules);
        assert_int_equal(guard_rules_count(), before + 2);
        /* the rules are the guards' own: the counter's name interned, not the spec's string */
        assert_ptr_not_equal(a->rules->items[0].counter, counter);
        assert_int_equal(a->rules->items[0].max_increase, 0);
        assert_int_equal(d->rules->items[0].max_increase, 1);

        /* each device its own baselines */
        guard_set_link_baseline(a, &st_a, sizeof(st_a));
        guard_set_link_baseline(b, &st_b, sizeof(st_b));
        assert_int_equal(a->items[0].base, 5);
        assert_int_equal(b->items[0].base, 0);
        assert_int_equal(a->items[1].base, 50);
        assert_int_equal(a->items[1].per_base, 10000);

        /* the spec goes (the policy of a reload); the windows begun under it go on with its rules */
        free(counter);
        free(retrans);
        free(out);
        assert_int_equal(guard_set_check(a, NULL, &st_a, sizeof(st_a), &rec), 0);
        assert_int_equal(guard_set_check(b, NULL, &st_a, sizeof(st_a), &rec), 1);
        assert_string_equal(rec.counter, "link.tx_errors");
        assert_int_equal(rec.rise, 5);
        assert_int_equal(guard_set_check(d, NULL, &st_a, sizeof(st_a), &rec), 0); /* no baseline taken */

        guard_set_done(b);
        assert_null(b->rules);
        assert_int_equal(guard_rules_count(), before + 2);
        assert_int_equal(guard_set_check(a, NULL, &st_a, sizeof(st_a), &rec), 0);
        guard_set_done(a);
        guard_set_done(c);
        assert_int_equal(guard_rules_count(), before + 1);
        guard_set_done(d);
        assert_int_equal(guard_rules_count(), before);
        snmp_done(&base);
}

/* validate's warnings: each missing counter at its place, with the nearest one the host has; a
 * file's defaults once though every policy carries them; the built-in guards told apart. */
static void test_counter_warnings(void **state) {
        static const char yaml[] = "version: 1\n"
                                   "rollback:\n"
                                   "  guards:\n"
                                   "    - counter: Tcp.RetransSeg\n"
                                   "      max-ratio: 0.02\n"
                                   "      per: Tcp.OutSeg\n"
                                   "policies:\n"
                                   "  - name: a\n"
                                   "    ipv6: { gso-max-size: 1000 }\n"
                                   "  - name: b\n"
                                   "    ipv6: { gso-max-size: 1000 }\n";
        _cleanup_(freep) char *errors = NULL, *errors2 = NULL;
        PolicySet *set = parse_string(yaml, &errors), *builtin = parse_string("version: 1\npolicies: []\n", &errors2);
        PolicyErrors w = {};
        SnmpSnapshot snap;

        assert_non_null(set);
        assert_non_null(builtin);
        snapshot(&snap, 0, 0, 0, 0); /* Ip.InReceives, Ip.InHdrErrors, Tcp.OutSegs, Tcp.RetransSegs */
        assert_int_equal(guard_counter_warnings(set, &snap, sizeof(struct rtnl_link_stats64), &w), 0);
        assert_int_equal(w.n, 2);
        assert_int_equal(w.items[0].line, 4);
        assert_int_equal(w.items[0].column, 16);
        assert_string_equal(w.items[0].message, "warning: guard counter \"Tcp.RetransSeg\" is not on this host (did "
                                                "you mean \"Tcp.RetransSegs\"?): guards on it never trip");
        assert_int_equal(w.items[1].line, 6);
        assert_int_equal(w.items[1].column, 12);
        assert_string_equal(w.items[1].message, "warning: guard counter \"Tcp.OutSeg\" is not on this host (did "
                                                "you mean \"Tcp.OutSegs\"?): guards on it never trip");
        policy_errors_clear(&w);

        /* The built-in set has Ip6.Ip6InHdrErrors, which this snapshot lacks; nothing near it. */
        assert_int_equal(guard_counter_warnings(builtin, &snap, sizeof(struct rtnl_link_stats64), &w), 0);
        assert_int_equal(w.n, 1);
        assert_string_equal(w.items[0].file, "<built-in>");
        assert_int_equal(w.items[0].line, 0);
        assert_string_equal(w.items[0].message,
                            "warning: guard counter \"Ip6.Ip6InHdrErrors\" is not on this host: guards on it never trip");
        policy_errors_clear(&w);
        /* a stats64 shorter than the field: the link counter is missing too */
        assert_int_equal(guard_counter_warnings(builtin, &snap, 8, &w), 0);
        assert_int_equal(w.n, 3);
        policy_errors_clear(&w);
        snmp_done(&snap);
        policy_set_free(set);
        policy_set_free(builtin);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_snmp_parse),
                cmocka_unit_test(test_real_proc),
                cmocka_unit_test(test_kept_descriptors),
                cmocka_unit_test(test_files_of_counters),
                cmocka_unit_test(test_link_counters),
                cmocka_unit_test(test_increase_and_ratio),
                cmocka_unit_test(test_link_baseline_and_absent_counters),
                cmocka_unit_test(test_rules_shared),
                cmocka_unit_test(test_counter_warnings),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
