/* test-evidence.c — the evidence that BIG TCP is in effect: the families sizes raise, how a
 * packet that passed the filter is counted, the verdict of a window (table-driven), and the
 * classic BPF filter itself, run by the kernel on a unix datagram socket pair: it passes only
 * packets longer than 65536 bytes, cut to one byte. */

#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "evidence.h"

#define V6 (1u << EVIDENCE_IPV6)
#define V4 (1u << EVIDENCE_IPV4)

static void test_raised(void **state) {
        static const struct {
                Sizes s;
                bool ipv4;
                unsigned want;
        } cases[] = {
                {{65536, 65536, 65536, 65536}, true, 0},
                {{65537, 65536, 65536, 65536}, true, V6},
                {{65536, 185000, 65536, 65536}, true, V6},       /* GRO alone raises it too */
                {{65536, 65536, 185000, 65536}, true, V4},       /* IPv4-only BIG TCP */
                {{65536, 65536, 65536, 185000}, true, V4},
                {{185000, 185000, 185000, 185000}, true, V6 | V4},
                {{185000, 185000, 185000, 185000}, false, V6}, /* no IPv4 sizes on this kernel */
                {{0, 0, 0, 0}, true, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_int_equal(evidence_raised(&cases[i].s, cases[i].ipv4), cases[i].want);
}

static void test_count(void **state) {
        EvidenceCounts c = {};

        evidence_count(&c, true, ETH_P_IP, 183962);
        evidence_count(&c, true, ETH_P_IP, 70000);
        evidence_count(&c, false, ETH_P_IPV6, 184306);
        evidence_count(&c, false, ETH_P_8021Q, 90000); /* not IPv4: the IPv6/legacy sizes' */
        evidence_count(&c, true, ETH_P_IPV6, 65536);   /* not above: at the old ceiling */
        evidence_count(&c, true, ETH_P_IP, 65226);
        evidence_count(&c, true, ETH_P_IP, EVIDENCE_FULL);
        evidence_count(&c, true, ETH_P_IP, EVIDENCE_FULL - 1); /* neither */
        evidence_count(&c, false, ETH_P_IP, 1);
        assert_int_equal(c.tx, 2);
        assert_int_equal(c.rx, 2);
        assert_int_equal(c.tx_largest, 183962);
        assert_int_equal(c.rx_largest, 184306);
        assert_int_equal(c.by_family[EVIDENCE_IPV4], 2);
        assert_int_equal(c.by_family[EVIDENCE_IPV6], 2);
        assert_int_equal(c.full[EVIDENCE_IPV4], 2);
        assert_int_equal(c.full[EVIDENCE_IPV6], 1);
        assert_int_equal(c.missed, 0);
}

/* For `auto`: each size counts the packets of its direction and family above its own length. */
static void test_count_above(void **state) {
        /* GSO IPv6 above 131136, GRO IPv6 not counted, GSO IPv4 above 61440, GRO IPv4 above 65600 */
        EvidenceAbove a = {.len = {131136, 0, 61440, 65600}};

        evidence_count_above(&a, true, ETH_P_IPV6, 131137);
        evidence_count_above(&a, true, ETH_P_IPV6, 131136); /* not longer */
        evidence_count_above(&a, false, ETH_P_IPV6, 400000); /* GRO IPv6: not counted */
        evidence_count_above(&a, true, ETH_P_8021Q, 200000); /* the IPv6/legacy sizes' */
        evidence_count_above(&a, true, ETH_P_IP, 62464);
        evidence_count_above(&a, false, ETH_P_IP, 62464); /* received: GRO's, not above */
        evidence_count_above(&a, false, ETH_P_IP, 70000);
        assert_int_equal(a.count[0], 2);
        assert_int_equal(a.count[1], 0);
        assert_int_equal(a.count[2], 1);
        assert_int_equal(a.count[3], 1);
        assert_int_equal(a.dropped[0] + a.dropped[1], 0); /* the observer's alone */
}

static void test_judge(void **state) {
        static const struct {
                const char *what;
                uint64_t v6, v4, f6, f4, missed;
                unsigned raised;
                EvidenceVerdict want;
                unsigned quiet;
        } cases[] = {
                {"IPv4 raised, IPv4 big packets", 0, 10, 0, 50, 0, V4, EVIDENCE_EFFECTIVE, 0},
                {"IPv4 raised, full-size only (the 6.7 fallback)", 0, 0, 0, 50, 0, V4, EVIDENCE_NOT_EFFECTIVE, V4},
                {"IPv4 raised, IPv6 big ones, no IPv4 traffic", 5, 0, 0, 0, 0, V4, EVIDENCE_UNKNOWN, 0},
                {"IPv4 raised, IPv6 big ones, IPv4 full-size", 5, 0, 0, 50, 0, V4, EVIDENCE_NOT_EFFECTIVE, V4},
                {"IPv6 raised, IPv6 big packets", 7, 0, 0, 0, 0, V6, EVIDENCE_EFFECTIVE, 0},
                {"both raised, IPv6 only: IPv4 idle says nothing", 7, 0, 0, 0, 0, V6 | V4, EVIDENCE_EFFECTIVE, 0},
                {"both raised, IPv6 big, IPv4 at the ceiling: IPv4 named", 7, 0, 30, 50, 0, V6 | V4,
                 EVIDENCE_NOT_EFFECTIVE, V4},
                {"both raised, both at the ceiling", 0, 0, 50, 50, 0, V6 | V4, EVIDENCE_NOT_EFFECTIVE, V6 | V4},
                {"raised, idle", 0, 0, 0, 0, 0, V6, EVIDENCE_UNKNOWN, 0},
                {"raised, small packets only (app-limited)", 0, 0, 0, 0, 0, V6 | V4, EVIDENCE_UNKNOWN, 0},
                {"raised, just enough full-size", 0, 0, EVIDENCE_FULL_MIN, 0, 0, V6, EVIDENCE_NOT_EFFECTIVE, V6},
                {"raised, one full-size short of it", 0, 0, EVIDENCE_FULL_MIN - 1, 0, 0, V6, EVIDENCE_UNKNOWN, 0},
                {"raised, full-size, but some missed: could have been big", 0, 0, 0, 50, 3, V4, EVIDENCE_UNKNOWN, 0},
                {"raised, big and missed", 0, 4, 0, 50, 3, V4, EVIDENCE_EFFECTIVE, 0},
                {"nothing raised, full-size: not in effect", 0, 0, 50, 0, 0, 0, EVIDENCE_NOT_EFFECTIVE, 0},
                {"nothing raised, idle", 0, 0, 0, 0, 0, 0, EVIDENCE_UNKNOWN, 0},
                {"nothing raised, big packets of a peer, received", 3, 0, 0, 0, 0, 0, EVIDENCE_EFFECTIVE, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                EvidenceCounts c = {.by_family = {cases[i].v6, cases[i].v4},
                                    .full = {cases[i].f6, cases[i].f4},
                                    .missed = cases[i].missed};
                unsigned quiet = 0xff;
                EvidenceVerdict v = evidence_judge(&c, cases[i].raised, &quiet);
                if (v != cases[i].want || quiet != cases[i].quiet)
                        fail_msg("%s: verdict %d quiet %u, want %d quiet %u", cases[i].what, v, quiet, cases[i].want,
                                 cases[i].quiet);
        }
}

/* The filter, as the kernel runs it: `len` bytes sent, what arrives (-1: nothing). */
static ssize_t through_filter(int pair[2], size_t len) {
        static char out[70000], in[70000];
        ssize_t n;

        assert_true(len <= sizeof(out));
        memset(out, 'x', len);
        assert_int_equal(send(pair[0], out, len, 0), (ssize_t) len);
        n = recv(pair[1], in, sizeof(in), MSG_DONTWAIT | MSG_TRUNC);
        return n < 0 && errno == EAGAIN ? -1 : n;
}

static void test_filter(void **state) {
        const struct sock_fprog *prog = evidence_filter();
        int pair[2], size = 1 << 20;

        assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair), 0);
        assert_int_equal(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
        assert_int_equal(setsockopt(pair[1], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
        assert_int_equal(setsockopt(pair[1], SOL_SOCKET, SO_ATTACH_FILTER, prog, sizeof(*prog)), 0);
        assert_int_equal(through_filter(pair, 60), -1);
        assert_int_equal(through_filter(pair, 1500), -1);
        assert_int_equal(through_filter(pair, EVIDENCE_FULL - 1), -1);
        assert_int_equal(through_filter(pair, 65537), 1); /* kept, cut to one byte */
        assert_int_equal(through_filter(pair, 69999), 1);
        /* at the old ceiling: one in EVIDENCE_FULL_SAMPLE, at random. Of 800, fewer than 10 or more
         * than 120 kept happens about once in 10^9 runs (binomial, p = 1/16) */
        int kept = 0;
        for (int i = 0; i < 800; i++) {
                ssize_t n = through_filter(pair, i % 2 ? EVIDENCE_FULL : 65536);
                assert_true(n == -1 || n == 1);
                kept += n == 1;
        }
        assert_in_range(kept, 10, 120);
        close(pair[0]);
        close(pair[1]);
}

static void test_family_names(void **state) {
        assert_string_equal(evidence_family_to_string(EVIDENCE_IPV6), "ipv6");
        assert_string_equal(evidence_family_to_string(EVIDENCE_IPV4), "ipv4");
        assert_null(evidence_family_to_string(_EVIDENCE_FAMILY_MAX));
        assert_null(evidence_family_to_string(_EVIDENCE_FAMILY_INVALID));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_raised),       cmocka_unit_test(test_count),
                cmocka_unit_test(test_count_above),
                cmocka_unit_test(test_judge),        cmocka_unit_test(test_filter),
                cmocka_unit_test(test_family_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
