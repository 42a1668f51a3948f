/* test-cohort.c — fleet canaries: the cohort function (its documented definition, its spread, its
 * independence across policies), machine-id(5) parsing, and rollout.hosts-percent from the parser
 * through scoping to matching: stable, a subset as the percentage grows, falling through. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "policy-match.h"
#include "policy.h"
#include "test-helpers.h"
#include "util.h"

/* Hosts of the synthetic fleets: sequential machine ids, the hardest input for a weak hash. */
#define FLEET 20000u

static void fleet_id(unsigned i, char buf[static 33]) {
        snprintf(buf, 33, "%032x", i + 1);
}

/* ---- the function as documented (policy.h, bigtcpd.yaml(5)) ---- */

static void test_cohort_vectors(void **state) {
        /* computed by an independent implementation of the documented formula (Python) */
        static const struct {
                const char *name, *machine_id, *hostname;
                unsigned cohort;
        } cases[] = {
                {"web-ipv4-canary", "3d1219c7c4c5404aaa1f6d2a48adfda4", "ignored", 17},
                {"web-ipv4", "3d1219c7c4c5404aaa1f6d2a48adfda4", NULL, 54},
                {"web-ipv4-canary", "00000000000000000000000000000001", NULL, 55},
                {"web-ipv4-canary", "00000000000000000000000000000002", NULL, 26},
                {"web-ipv4-canary", NULL, "web-01", 7},
                {"web-ipv4-canary", NULL, "WEB-01", 7}, /* hostnames fold case */
                {"web-ipv4-canary", NULL, "", 95},
                {"web-ipv4-canary", NULL, NULL, 95}, /* no hostname either: the empty one */
                {"a", NULL, "web-01", 12},
                {"fabric", "ffffffffffffffffffffffffffffffff", NULL, 12},
                {"fabric", "0123456789abcdef0123456789abcdef", NULL, 9},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                HostIdentity h = {.hostname = cases[i].hostname, .machine_id = cases[i].machine_id};
                unsigned c = policy_cohort(&h, cases[i].name);
                if (c != cases[i].cohort)
                        fail_msg("case %zu (%s, %s, %s): cohort %u, expected %u", i, cases[i].name,
                                 cases[i].machine_id ?: "-", cases[i].hostname ?: "-", c, cases[i].cohort);
                /* the same on every call: nothing but its inputs goes in */
                assert_int_equal(policy_cohort(&h, cases[i].name), c);
        }
        assert_int_equal(policy_cohort(NULL, "web-ipv4-canary"), 95);
        assert_string_equal(host_identity_cohort_source(&(HostIdentity){.machine_id = "x"}), "machine-id");
        assert_string_equal(host_identity_cohort_source(&(HostIdentity){.hostname = "x"}), "hostname");
        assert_string_equal(host_identity_cohort_source(NULL), "hostname");
}

/* Every cohort equally likely: a chi-square test over 20000 sequential machine ids, for a few
 * names. 99 degrees of freedom: 148.2 is the 0.1 % critical value. */
static void test_cohort_uniform(void **state) {
        static const char *const names[] = {"web-ipv4-canary", "fabric", "a", "db-storage-v2"};

        for (size_t k = 0; k < ELEMENTSOF(names); k++) {
                unsigned count[POLICY_COHORTS] = {};
                double expected = (double) FLEET / POLICY_COHORTS, chi2 = 0;
                char id[33];

                for (unsigned i = 0; i < FLEET; i++) {
                        fleet_id(i, id);
                        unsigned c = policy_cohort(&(HostIdentity){.machine_id = id}, names[k]);
                        assert_true(c < POLICY_COHORTS);
                        count[c]++;
                }
                for (unsigned c = 0; c < POLICY_COHORTS; c++)
                        chi2 += (count[c] - expected) * (count[c] - expected) / expected;
                if (chi2 >= 148.2)
                        fail_msg("policy \"%s\": chi-square %.1f over %u hosts", names[k], chi2, FLEET);
        }
}

/* Two canaries at 10 % are not the same 10 % of the fleet: about 1 % is in both. */
static void test_cohort_independent_of_other_policies(void **state) {
        unsigned both = 0, a = 0, b = 0;
        char id[33];

        for (unsigned i = 0; i < FLEET; i++) {
                fleet_id(i, id);
                HostIdentity h = {.machine_id = id};
                bool in_a = policy_cohort(&h, "web-ipv4-canary") < 10,
                     in_b = policy_cohort(&h, "db-canary") < 10;
                a += in_a;
                b += in_b;
                both += in_a && in_b;
        }
        /* 200 expected; 5 standard deviations (about 70) either side */
        assert_in_range(both, 130, 270);
        assert_in_range(a, 1800, 2200);
        assert_in_range(b, 1800, 2200);
}

static void test_machine_id_parse(void **state) {
        static const struct {
                const char *text;
                int r;
                const char *id;
        } cases[] = {
                {"3d1219c7c4c5404aaa1f6d2a48adfda4\n", 0, "3d1219c7c4c5404aaa1f6d2a48adfda4"},
                {"3d1219c7c4c5404aaa1f6d2a48adfda4", 0, "3d1219c7c4c5404aaa1f6d2a48adfda4"},
                {"3D1219C7C4C5404AAA1F6D2A48ADFDA4\n", 0, "3d1219c7c4c5404aaa1f6d2a48adfda4"},
                {"00000000000000000000000000000001\n", 0, "00000000000000000000000000000001"},
                {"00000000000000000000000000000000\n", -EINVAL, NULL}, /* SD_ID128_NULL */
                {"", -EINVAL, NULL},
                {"\n", -EINVAL, NULL},
                {"uninitialized\n", -EINVAL, NULL},                      /* systemd's first boot */
                {"3d1219c7c4c5404aaa1f6d2a48adfda\n", -EINVAL, NULL},    /* 31 digits */
                {"3d1219c7c4c5404aaa1f6d2a48adfda44\n", -EINVAL, NULL},  /* 33 */
                {"3d1219c7c4c5404aaa1f6d2a48adfda4\n\n", -EINVAL, NULL}, /* two newlines */
                {"3d1219c7c4c5404aaa1f6d2a48adfda4 ", -EINVAL, NULL},
                {"3d1219c7-c4c5-404a-aa1f-6d2a48adfda4", -EINVAL, NULL}, /* a UUID is not the format */
                {"3d1219c7c4c5404aaa1f6d2a48adfdg4\n", -EINVAL, NULL},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char id[33] = "untouched";
                int r = machine_id_parse(cases[i].text, strlen(cases[i].text), id);
                if (r != cases[i].r)
                        fail_msg("case %zu: %d, expected %d", i, r, cases[i].r);
                assert_string_equal(id, cases[i].id ?: "untouched");
        }
        /* a NUL inside is not a shorter id */
        char id[33];
        assert_int_equal(machine_id_parse("3d1219c7c4c5404aaa1f6d2a48adfd\0a4", 33, id), -EINVAL);
        assert_int_equal(machine_id_parse(NULL, 0, id), -EINVAL);
}

/* ---- the key ---- */

#define V1 "version: 1\n"
#define P "policies:\n  - name: p\n    ipv6: { gso-max-size: 1000 }\n"

static void test_hosts_percent_parse(void **state) {
        static const struct {
                const char *yaml, *errors;
                int percent; /* -1: not set */
                unsigned max_parallel;
        } cases[] = {
                {V1 P "    rollout: { hosts-percent: 5 }\n", "", 5, 0},
                {V1 P "    rollout: { hosts-percent: 0 }\n", "", 0, 0},
                {V1 P "    rollout: { hosts-percent: 100 }\n", "", 100, 0},
                {V1 P "    rollout: { hosts-percent: 007 }\n", "", 7, 0},
                {V1 P "    rollout:\n      max-parallel: 4\n      hosts-percent: 25\n", "", 25, 4},
                {V1 P "    rollout: { max-parallel: 2 }\n", "", -1, 2},
                {V1 P "    rollout: { hosts-percent: 101 }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: -1 }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: 2.5 }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: 10% }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: \"10\" }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: [10] }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: { hosts-percent: 99999999999999999999999 }\n",
                 "t.yaml:5:31: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout:\n      hosts-percent:\n",
                 "t.yaml:6:21: hosts-percent: expected an integer between 0 and 100\n", -1, 0},
                {V1 P "    rollout: {}\n",
                 "t.yaml:5:14: missing key \"max-parallel\" or \"hosts-percent\"\n", -1, 0},
                {V1 P "    rollout: { hosts-percentage: 5 }\n",
                 "t.yaml:5:14: missing key \"max-parallel\" or \"hosts-percent\"\n"
                 "t.yaml:5:16: unknown key \"hosts-percentage\" (did you mean \"hosts-percent\"?)\n",
                 -1, 0},
                {V1 P "    rollout: { hosts-percent: 5, hosts-percent: 6 }\n",
                 "t.yaml:5:34: duplicate key \"hosts-percent\"\n", -1, 0},
                /* both keys are checked, each where it stands */
                {V1 P "    rollout:\n      max-parallel: 0\n      hosts-percent: 200\n",
                 "t.yaml:6:21: max-parallel: expected an integer between 1 and 100000\n"
                 "t.yaml:7:22: hosts-percent: expected an integer between 0 and 100\n",
                 -1, 0},
        };
        unsigned failed = 0;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *errors = NULL;
                PolicySet *s = parse_string(cases[i].yaml, &errors);

                if (!streq(errors, cases[i].errors)) {
                        print_error("case %zu:\n%s--- expected\n%s--- got\n%s", i, cases[i].yaml,
                                    cases[i].errors, errors);
                        failed++;
                } else if (s) {
                        const Policy *p = &s->policies[0];
                        assert_int_equal(p->has_hosts_percent, cases[i].percent >= 0);
                        if (cases[i].percent >= 0)
                                assert_int_equal(p->hosts_percent, cases[i].percent);
                        assert_int_equal(p->max_parallel, cases[i].max_parallel);
                        /* unscoped: known only where it does not depend on the host */
                        assert_int_equal(p->applies_here, cases[i].percent < 0 || cases[i].percent == 100);
                }
                assert_int_equal(!s, cases[i].errors[0] != '\0');
                free(errors);
                policy_set_free(s);
        }
        assert_int_equal(failed, 0);
}

/* ---- scope: stable, a subset as N grows, falling through ---- */

/* A canary at `percent` %, then the stable policy for the same devices. */
static PolicySet *canary_set(unsigned percent, const char *before) {
        char *yaml = NULL, *errors = NULL;
        PolicySet *s;

        assert_true(asprintf(&yaml,
                             V1 "policies:\n%s"
                                "  - name: web-ipv4-canary\n"
                                "    match: { name: eth0 }\n"
                                "    ipv4: { gso-max-size: 185000, gro-max-size: 185000 }\n"
                                "    rollout: { hosts-percent: %u }\n"
                                "  - name: web\n"
                                "    match: { name: \"eth*\" }\n"
                                "    ipv6: { gso-max-size: 185000 }\n",
                             before ?: "", percent) > 0);
        s = parse_string(yaml, &errors);
        if (!s)
                fail_msg("%s", errors);
        free(yaml);
        free(errors);
        return s;
}

static const Policy *find(const PolicySet *s, const char *name) {
        for (size_t i = 0; i < s->n_policies; i++)
                if (streq(s->policies[i].name, name))
                        return &s->policies[i];
        return NULL;
}

static const Policy *match_eth0(const PolicySet *s) {
        return policy_set_match(s, &(MatchDevice){.ifname = "eth0"});
}

#define HOSTS 1000u

static void test_hosts_percent_scope(void **state) {
        static const unsigned percents[] = {0, 1, 5, 10, 25, 50, 90, 99, 100};
        static bool in[ELEMENTSOF(percents)][HOSTS];
        unsigned cohort[HOSTS];
        char id[33];

        for (size_t k = 0; k < ELEMENTSOF(percents); k++) {
                PolicySet *s = canary_set(percents[k], NULL);
                unsigned n = 0;

                for (unsigned i = 0; i < HOSTS; i++) {
                        fleet_id(i * 7919, id);
                        policy_set_scope(s, &(HostIdentity){.hostname = "web-1",
                                                            .kernel_release = "6.8.0",
                                                            .machine_id = id});
                        const Policy *canary = find(s, "web-ipv4-canary"), *got = match_eth0(s);

                        if (k == 0)
                                cohort[i] = canary->cohort;
                        /* the cohort does not move with N */
                        assert_int_equal(canary->cohort, cohort[i]);
                        assert_int_equal(canary->cohort, policy_cohort(&(HostIdentity){.machine_id = id},
                                                                       "web-ipv4-canary"));
                        in[k][i] = canary->applies_here;
                        assert_int_equal(in[k][i], cohort[i] < percents[k]);
                        assert_int_equal(canary->scope, in[k][i] ? POLICY_SCOPE_HERE : POLICY_SCOPE_COHORT);
                        /* outside the cohort, the device falls through to the next policy */
                        assert_non_null(got);
                        assert_string_equal(got->name, in[k][i] ? "web-ipv4-canary" : "web");
                        n += in[k][i];
                }
                /* about N %: within 5 standard deviations of a binomial (compared squared) */
                double p = percents[k] / 100.0, off = n - HOSTS * p;
                if (off * off > 25 * HOSTS * p * (1 - p))
                        fail_msg("hosts-percent %u: %u of %u hosts", percents[k], n, HOSTS);
                if (percents[k] == 0)
                        assert_int_equal(n, 0);
                if (percents[k] == 100)
                        assert_int_equal(n, HOSTS);
                policy_set_free(s);
        }
        /* raising N only adds hosts */
        for (size_t k = 1; k < ELEMENTSOF(percents); k++)
                for (unsigned i = 0; i < HOSTS; i++)
                        if (in[k - 1][i])
                                assert_true(in[k][i]);
}

/* The same host answers the same whatever else the file says: other policies before it, its place,
 * its other keys. Only its name and the host's key go in. */
static void test_cohort_stable_across_edits(void **state) {
        PolicySet *a = canary_set(10, NULL),
                  *b = canary_set(60, "  - name: before\n"
                                      "    hosts: [\"db-*\"]\n"
                                      "    ipv6: { gso-max-size: 1 }\n"
                                      "    rollout: { hosts-percent: 50, max-parallel: 3 }\n");
        char id[33];

        for (unsigned i = 0; i < HOSTS; i++) {
                fleet_id(i, id);
                HostIdentity h = {.hostname = "web-1", .kernel_release = "6.8.0", .machine_id = id};
                policy_set_scope(a, &h);
                policy_set_scope(b, &h);
                assert_int_equal(find(a, "web-ipv4-canary")->cohort, find(b, "web-ipv4-canary")->cohort);
                /* scoped out by hosts, the cohort is still known (and shown) */
                assert_int_equal(find(b, "before")->scope, POLICY_SCOPE_HOSTS);
                assert_int_equal(find(b, "before")->cohort, policy_cohort(&h, "before"));
        }
        policy_set_free(a);
        policy_set_free(b);
}

/* Without a machine id the hostname is the key; scoping order: hosts, kernel, then the cohort. */
static void test_scope_reasons(void **state) {
        _cleanup_(freep) char *errors = NULL;
        PolicySet *s = parse_string(V1 "policies:\n"
                                       "  - name: c\n"
                                       "    hosts: [\"web-*\"]\n"
                                       "    kernel: \">= 6.3\"\n"
                                       "    ipv6: { gso-max-size: 1 }\n"
                                       "    rollout: { hosts-percent: 50 }\n",
                                    &errors);
        unsigned in = 0, out = 0;

        assert_non_null(s);
        Policy *p = &s->policies[0];
        assert_int_equal(p->scope, POLICY_SCOPE_UNSCOPED);
        for (unsigned i = 0; i < 200; i++) {
                char host[32];
                snprintf(host, sizeof(host), "web-%u", i);
                policy_set_scope(s, &(HostIdentity){.hostname = host, .kernel_release = "6.8.0"});
                assert_int_equal(p->cohort, policy_cohort(&(HostIdentity){.hostname = host}, "c"));
                if (p->applies_here)
                        in++;
                else {
                        assert_int_equal(p->scope, POLICY_SCOPE_COHORT);
                        out++;
                }
                /* upper case is the same host */
                for (char *c = host; *c; c++)
                        *c = (char) (*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
                unsigned cohort = p->cohort;
                policy_set_scope(s, &(HostIdentity){.hostname = host, .kernel_release = "6.8.0"});
                assert_int_equal(p->cohort, cohort);

                policy_set_scope(s, &(HostIdentity){.hostname = host, .kernel_release = "6.1.0"});
                assert_int_equal(p->scope, POLICY_SCOPE_KERNEL);
                policy_set_scope(s, &(HostIdentity){.hostname = "db-1", .kernel_release = "6.1.0"});
                assert_int_equal(p->scope, POLICY_SCOPE_HOSTS);
                assert_false(p->applies_here);
        }
        assert_true(in > 60 && out > 60);
        policy_set_scope(s, NULL); /* no identity at all: no hostname, so `hosts` fails */
        assert_int_equal(p->scope, POLICY_SCOPE_HOSTS);
        assert_string_equal(policy_scope_to_string(POLICY_SCOPE_COHORT), "cohort");
        assert_null(policy_scope_to_string(_POLICY_SCOPE_MAX));
        policy_set_free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cohort_vectors),
                cmocka_unit_test(test_cohort_uniform),
                cmocka_unit_test(test_cohort_independent_of_other_policies),
                cmocka_unit_test(test_machine_id_parse),
                cmocka_unit_test(test_hosts_percent_parse),
                cmocka_unit_test(test_hosts_percent_scope),
                cmocka_unit_test(test_cohort_stable_across_edits),
                cmocka_unit_test(test_scope_reasons),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
