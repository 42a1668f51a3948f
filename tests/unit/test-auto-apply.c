/* test-auto-apply.c — the engine's side of `auto` on the harness's fake clock, writer and kernel:
 * an idle device waits, twice as long each time, and is never written; a canary that leaves this
 * host out begins no search; busy devices under one rollout step one at a time and settle at the
 * bound; a step's trip is the search's answer and halts no rollout, a policy change's does.
 * Without rings, the harness's engine counts no packets: every watch a search asks for fails as
 * "counting is off", which the engine takes as a watch that saw nothing (auto-apply.c). With them
 * (evidence_set_test_rings()), each watch reads a ring the test fills as the kernel would. */
#include <malloc.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/mman.h>

#include "engine-harness.h"

#include "auto-apply.h"
#include "intern.h"
#include "policy.h"
#include "rollout.h"

#define WINDOW_USEC (10 * USEC_PER_SEC)

static char *auto_policy(const char *name, const char *rollout) {
        char *yaml = NULL;

        assert_true(asprintf(&yaml,
                             "version: 1\n"
                             "policies:\n"
                             "  - name: %s\n"
                             "    match: {name: [e0]}\n"
                             "    ipv6: {gso-max-size: auto}\n"
                             "%s"
                             "    rollback:\n"
                             "      window: 10s\n"
                             "      guards:\n"
                             "        - {counter: link.tx_errors, max-increase: 10}\n",
                             name, rollout ?: "") > 0);
        return yaml;
}

/* auto_policy("auto", NULL) with the GRO size searched too. */
static const char GSO_AND_GRO_AUTO[] = "version: 1\n"
                                       "policies:\n"
                                       "  - name: auto\n"
                                       "    match: {name: [e0]}\n"
                                       "    ipv6: {gso-max-size: auto, gro-max-size: auto}\n"
                                       "    rollback:\n"
                                       "      window: 10s\n"
                                       "      guards:\n"
                                       "        - {counter: link.tx_errors, max-increase: 10}\n";

/* The searches' timer fires (the fake clock is the test's to move first). */
static void h_fire_auto(Harness *h) {
        assert_non_null(h->e->auto_timer);
        event_active(h->e->auto_timer, EV_TIMEOUT, 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
}

/* ---- rings the test fills as the kernel fills a TPACKET_V3 ring ---- */

typedef struct Ring {
        int ifindex;
        uint8_t *map;
        unsigned block; /* the next the "kernel" fills */
} Ring;

static Ring rings[64];
static size_t n_rings;

#define RING_BYTES ((size_t) EVIDENCE_BLOCKS * EVIDENCE_BLOCK_SIZE)
#define FRAME_SLL_OFF TPACKET_ALIGN(sizeof(struct tpacket3_hdr))
#define FRAME_SIZE TPACKET_ALIGN(FRAME_SLL_OFF + sizeof(struct sockaddr_ll))
#define FIRST_FRAME TPACKET_ALIGN(sizeof(struct tpacket_block_desc))

static Ring *ring_of(int ifindex) {
        for (size_t i = 0; i < n_rings; i++)
                if (rings[i].ifindex == ifindex)
                        return &rings[i];
        return NULL;
}

/* A watch begins: its ring, mapped by the test too (kept after the engine closes its descriptor). */
static int make_ring(void *userdata, const Device *d) {
        Ring *r = ring_of(d->ifindex);
        int fd = memfd_create("bigtcpd-test-ring", MFD_CLOEXEC);

        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t) RING_BYTES), 0);
        if (!r) {
                assert_true(n_rings < ELEMENTSOF(rings));
                r = &rings[n_rings++];
        } else
                assert_int_equal(munmap(r->map, RING_BYTES), 0);
        *r = (Ring){.ifindex = d->ifindex, .map = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)};
        assert_true(r->map != MAP_FAILED);
        return fd;
}

static void rings_free(void) {
        for (size_t i = 0; i < n_rings; i++)
                (void) munmap(rings[i].map, RING_BYTES);
        n_rings = 0;
}

static void h_rings_on(Harness *h) {
        rings_free();
        evidence_set_test_rings(h->e->evidence, make_ring, h);
}

/* `n` packets of `len` bytes through d's watched ring, `outgoing` or received, IPv6: a block at a
 * time, each handed over as the kernel does (a full ring is read by the daemon's drain first). */
static void h_packets(Harness *h, int ifindex, bool outgoing, uint32_t len, unsigned n) {
        Ring *r = ring_of(ifindex);
        unsigned per_block = (EVIDENCE_BLOCK_SIZE - FIRST_FRAME) / FRAME_SIZE;

        assert_non_null(r);
        assert_true(evidence_watching(h_dev(h, ifindex)));
        while (n > 0) {
                uint8_t *block = r->map + (size_t) r->block * EVIDENCE_BLOCK_SIZE;
                struct tpacket_block_desc *bd = (struct tpacket_block_desc *) block;
                unsigned k = n < per_block ? n : per_block;

                if (__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)
                        evidence_drain(h->e->evidence);
                assert_false(bd->hdr.bh1.block_status & TP_STATUS_USER);
                memset(block, 0, EVIDENCE_BLOCK_SIZE);
                bd->version = TPACKET_V3;
                bd->hdr.bh1.num_pkts = k;
                bd->hdr.bh1.offset_to_first_pkt = FIRST_FRAME;
                for (unsigned i = 0; i < k; i++) {
                        size_t off = FIRST_FRAME + (size_t) i * FRAME_SIZE;
                        struct tpacket3_hdr *th = (struct tpacket3_hdr *) (block + off);
                        struct sockaddr_ll *sll = (struct sockaddr_ll *) (block + off + FRAME_SLL_OFF);

                        th->tp_len = len;
                        th->tp_snaplen = 1;
                        th->tp_next_offset = i + 1 < k ? FRAME_SIZE : 0;
                        *sll = (struct sockaddr_ll){.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                                                    .sll_ifindex = ifindex,
                                                    .sll_pkttype = outgoing ? PACKET_OUTGOING : PACKET_HOST};
                }
                __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_USER, __ATOMIC_RELEASE);
                r->block = (r->block + 1) % EVIDENCE_BLOCKS;
                n -= k;
        }
}

/* A quarter of a second of the loop on the fake clock: the guards' tick, the evidence windows'
 * timer, the searches' timer, and every answer of the kernel. */
static void h_step(Harness *h) {
        h_advance(h, 250 * USEC_PER_MSEC);
        probation_tick(h->e->probation);
        h_answer_all(h);
        evidence_tick(h->e->evidence);
        h_answer_all(h);
        if (h->e->auto_timer)
                h_fire_auto(h);
}

/* Busy: d sends packets as large as its gso_max_size lets them be, while watched. */
static void h_busy(Harness *h, int ifindex, unsigned n) {
        Device *d = h_dev(h, ifindex);
        if (evidence_watching(d) && !d->evidence->waiting)
                h_packets(h, ifindex, true, d->current.gso_max_size, n);
}

static const AutoSearch *search_of(Harness *h, int ifindex) {
        Device *d = h_dev(h, ifindex);
        assert_non_null(d->autosize);
        assert_int_equal(d->autosize->sizes, SIZE_BIT_GSO);
        return auto_device_search(d->autosize, 0);
}

/* No traffic fills 65536: the device stays there, unwritten, watched again after the window, then
 * twice as long each time, and its timer is due then (or up to 1/8 of the wait later). */
static void test_idle_device_waits_longer_each_time(void **state) {
        char *yaml = auto_policy("auto", NULL);
        Harness *h = h_new(yaml);
        const AutoSearch *s;
        uint64_t wait = WINDOW_USEC;

        free(yaml);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_APPLIED);
        s = search_of(h, 2);
        for (unsigned round = 0; round < 4; round++, wait *= 2) {
                print_message("round %u: wait %llus\n", round, (unsigned long long) (wait / USEC_PER_SEC));
                assert_string_equal(auto_phase_to_string(s->phase), "idle");
                assert_int_equal(s->proven, 65536);
                assert_int_equal(s->steps, 0);
                assert_int_equal(s->idle_wait_usec, wait);
                assert_int_equal(s->retry_usec, h->real + wait);
                /* due at its retry, later by at most 1/8 of the wait (the spread of a herd) */
                uint64_t due = auto_apply_due(h_dev(h, 2));
                assert_true(due >= s->retry_usec && due <= s->retry_usec + wait / 8);
                /* before its time: nothing changes */
                h_advance(h, due - h->real - 1);
                h_fire_auto(h);
                assert_string_equal(auto_phase_to_string(s->phase), "idle");
                assert_int_equal(s->idle_wait_usec, wait);
                /* at its time: watched again (and idle again, for twice as long) */
                h_advance(h, 1);
                h_fire_auto(h);
        }
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        assert_int_equal(h_dev(h, 2)->current.gso_max_size, 65536);
        assert_int_equal(h_link(h, 2)->sizes.gso_max_size, 65536);
        h_free(h);
}

/* The same through watches that count: a watch of 65536 as long as the window that sees no packet
 * leaves the device idle; it is not watched until it is due (its wait, and its spread), then at once, and the waits
 * double. */
static void test_idle_device_watched_with_rings(void **state) {
        char *yaml = auto_policy("auto", NULL);
        Harness *h = h_new(yaml);
        const AutoSearch *s;
        uint64_t wait = WINDOW_USEC;
        Device *d;

        free(yaml);
        h_rings_on(h);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        d = h_dev(h, 2);
        s = search_of(h, 2);
        for (unsigned round = 0; round < 3; round++, wait *= 2) {
                uint64_t began = h->real;

                assert_string_equal(auto_phase_to_string(s->phase), "watching");
                assert_true(evidence_watching(d));
                while (s->phase == AUTO_WATCHING) {
                        h_step(h);
                        assert_true(h->real - began <= WINDOW_USEC + USEC_PER_SEC);
                }
                assert_string_equal(auto_phase_to_string(s->phase), "idle");
                assert_int_equal(s->idle_wait_usec, wait);
                assert_int_equal(s->retry_usec, h->real + wait);
                uint64_t due = auto_apply_due(d);
                assert_true(due >= s->retry_usec && due <= s->retry_usec + wait / 8);
                while (h->real < due) {
                        assert_false(evidence_watching(d));
                        h_step(h);
                }
                while (s->phase == AUTO_IDLE) {
                        h_step(h);
                        assert_true(h->real - due <= USEC_PER_SEC);
                }
        }
        assert_int_equal(s->steps, 0);
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        h_free(h);
        rings_free();
}

/* The waits stop doubling at AUTO_IDLE_WAIT_MAX_USEC. */
static void test_idle_wait_is_bounded(void **state) {
        char *yaml = auto_policy("auto", NULL);
        Harness *h = h_new(yaml);
        const AutoSearch *s;

        free(yaml);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        s = search_of(h, 2);
        for (unsigned round = 0; round < 12; round++) {
                h_advance(h, auto_apply_due(h_dev(h, 2)) - h->real);
                h_fire_auto(h);
        }
        assert_int_equal(s->idle_wait_usec, AUTO_IDLE_WAIT_MAX_USEC);
        assert_int_equal(s->retry_usec, h->real + AUTO_IDLE_WAIT_MAX_USEC);
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        h_free(h);
}

/* rollout.hosts-percent: with this host's cohort left out, the policy is not in force here: no
 * search begins, nothing is written; with it in, the search runs. */
static void test_canary_cohort(void **state) {
        char name[32];
        unsigned cohort = 0;

        /* a name that puts this host neither first nor last: both percentages below say something */
        for (unsigned k = 0; cohort == 0 || cohort == POLICY_COHORTS - 1; k++) {
                assert_true(k < 1000);
                snprintf(name, sizeof(name), "auto-%u", k);
                cohort = policy_cohort(&H_HOST, name);
        }

        for (int in = 0; in < 2; in++) {
                char rollout[64], *yaml;
                Harness *h;

                /* cohorts below hosts-percent take it */
                snprintf(rollout, sizeof(rollout), "    rollout: {hosts-percent: %u}\n", in ? cohort + 1 : cohort);
                yaml = auto_policy(name, rollout);
                h = h_new(yaml);
                free(yaml);
                print_message("%s: cohort %u, %s", name, cohort, rollout);
                h_link_add(h, 2, "e0");
                h_start(h);
                h_answer_all(h);
                if (in) {
                        assert_state(h_state(h, 2), DEVICE_APPLIED);
                        assert_string_equal(auto_phase_to_string(search_of(h, 2)->phase), "idle");
                } else {
                        assert_state(h_state(h, 2), DEVICE_UNMANAGED);
                        assert_null(h_dev(h, 2)->autosize);
                        assert_int_equal(auto_apply_due(h_dev(h, 2)), UINT64_MAX);
                }
                /* a search at 65536 writes nothing either way (the link is there already) */
                assert_int_equal(h_count_writes(h, 2, 0), 0);
                h_free(h);
        }
}

static const char ROLLOUT_POLICY[] =
        "version: 1\n"
        "policies:\n"
        "  - name: auto\n"
        "    match: {name: [e0, e1, e2]}\n"
        "    ipv6: {gso-max-size: auto}\n"
        "    rollout: {max-parallel: 1}\n"
        "    rollback:\n"
        "      window: 10s\n"
        "      interval: 1s\n"
        "      guards:\n"
        "        - {counter: link.tx_errors, max-increase: 10}\n";

/* The probation windows device `ifindex` entered. */
static unsigned windows(const Harness *h, int ifindex) {
        unsigned n = 0;
        for (size_t i = 0; i < h->n_ev; i++)
                n += h->ev[i].type == EVENT_STATE && h->ev[i].ifindex == ifindex && h->ev[i].state == DEVICE_PROBATION &&
                     h->ev[i].previous != DEVICE_PROBATION;
        return n;
}

static unsigned in_probation(Harness *h) {
        unsigned n = 0;
        for (int i = 2; i <= 4; i++)
                n += h_state(h, i) == DEVICE_PROBATION;
        return n;
}

/* Three busy devices on one search under max-parallel 1: never two in a step's window at once;
 * each steps 65536 → 131072 → 262144 → 524280 (twice the proven size at most, then the bound),
 * proven by its own packets, and settles there. */
static void test_rollout_one_step_at_a_time(void **state) {
        Harness *h = h_new(ROLLOUT_POLICY);

        h_rings_on(h);
        for (int i = 2; i <= 4; i++) {
                char name[8];
                snprintf(name, sizeof(name), "e%d", i - 2);
                h_link_add(h, i, name);
        }
        h_start(h);
        h_answer_all(h);
        for (unsigned t = 0; t < 4 * 600; t++) {
                for (int i = 2; i <= 4; i++)
                        h_busy(h, i, 20);
                h_step(h);
                assert_true(in_probation(h) <= 1);
                bool all = true;
                for (int i = 2; i <= 4; i++)
                        all = all && search_of(h, i)->phase == AUTO_SETTLED;
                if (all)
                        break;
        }
        for (int i = 2; i <= 4; i++) {
                const AutoSearch *s = search_of(h, i);
                assert_string_equal(auto_phase_to_string(s->phase), "settled");
                assert_int_equal(s->proven, 524280);
                assert_int_equal(s->steps, 3);
                assert_int_equal(s->trips, 0);
                assert_int_equal(h_link(h, i)->sizes.gso_max_size, 524280);
                assert_int_equal(windows(h, i), 3); /* one per step */
        }
        h_free(h);
        rings_free();
}

/* ---- the eBPF observer, faked: the test counts what the kernel would ---- */

/* e0 at a fixed GSO size, and e0 searching its GRO size; one guard that never trips */
#define E0_GUARDED "    rollback:\n      window: 10s\n      guards:\n        - {counter: link.tx_errors, max-increase: 10}\n"
static const char E0_FIXED[] = "version: 1\npolicies:\n  - name: fixed\n    match: {name: [e0]}\n"
                               "    ipv6: {gso-max-size: 200000}\n" E0_GUARDED;
static const char E0_GRO_AUTO[] = "version: 1\npolicies:\n  - name: auto\n    match: {name: [e0]}\n"
                                  "    ipv6: {gro-max-size: auto}\n" E0_GUARDED;



#define OWN_NETNS 4026531840u

static Observer *h_observer_on(Harness *h) {
        Observer *o;

        assert_int_equal(observer_new_fake(OWN_NETNS, &o), 0);
        evidence_set_observer(h->e->evidence, o);
        probation_set_observer(h->e->probation, o);
        return o;
}

/* d sends `n` packets of `len` bytes (IPv6): the device's counts, and those of its thresholds
 * (a step's, set by the engine: near the size tried), as observer.bpf.c adds them. */
static void h_observed_packets(Harness *h, Observer *o, int ifindex, uint32_t len, unsigned n) {
        struct observer_dev v;
        struct observer_near nr;

        (void) observer_get(o, OWN_NETNS, ifindex, &v);
        if (len > OBSERVER_BIG) {
                v.big[OBSERVER_TX][OBSERVER_IPV6] += n;
                v.tcp_sent_big += 45u * n;
        }
        v.tcp_sent += 45u * n;
        assert_int_equal(observer_test_set(o, OWN_NETNS, ifindex, &v), 0);
        if (observer_near_get(o, OWN_NETNS, ifindex, &nr) < 0)
                return;
        if (nr.len[0] != 0 && len > nr.len[0])
                nr.count[0] += n;
        if (len > OBSERVER_BIG && len > nr.largest[0])
                nr.largest[0] = len;
        assert_int_equal(observer_test_set_near(o, OWN_NETNS, ifindex, (const uint64_t *) nr.count, nr.largest), 0);
}

/* e0 (ifindex 2) on `yaml`, counted by a fake observer (*ret), started. */
static Harness *h_observed_e0(const char *yaml, Observer **ret) {
        Harness *h = h_new(yaml);

        *ret = h_observer_on(h);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        return h;
}

/* Busy at its size; in each quarter second of a step's window above 65536, `n` more big
 * retransmits of its own: until its search trips. */
static void h_retransmit_until_a_trip(Harness *h, Observer *o, uint64_t n) {
        for (unsigned t = 0; t < 4 * 600 && search_of(h, 2)->trips == 0; t++) {
                uint32_t size = h_dev(h, 2)->current.gso_max_size;
                h_observed_packets(h, o, 2, size, 20);
                if (h_state(h, 2) == DEVICE_PROBATION && size > 65536) {
                        struct observer_dev v;
                        (void) observer_get(o, OWN_NETNS, 2, &v);
                        v.tcp_retrans_big += n;
                        assert_int_equal(observer_test_set(o, OWN_NETNS, 2, &v), 0);
                }
                h_step(h);
        }
}

/* With the observer, busy at its size: the clean path settles at the bound in three steps, each
 * counted by packets near the size tried (the threshold the engine set is the step's top
 * quarter). */
static void test_observer_clean_path_settles_at_the_bound(void **state) {
        Observer *o;
        _cleanup_(freep) char *yaml = auto_policy("auto", NULL);
        Harness *h = h_observed_e0(yaml, &o);
        struct observer_near nr;
        bool saw_step = false;
        for (unsigned t = 0; t < 4 * 600 && search_of(h, 2)->phase != AUTO_SETTLED; t++) {
                const AutoSearch *s = search_of(h, 2);
                if (s->phase == AUTO_TRYING && observer_near_get(o, OWN_NETNS, 2, &nr) >= 0 &&
                    h_dev(h, 2)->current.gso_max_size == s->trying) {
                        assert_int_equal(nr.len[0], auto_search_count_near(s));
                        assert_true(nr.len[0] > s->proven + (s->trying - s->proven) / 2);
                        saw_step = true;
                }
                h_observed_packets(h, o, 2, h_dev(h, 2)->current.gso_max_size, 20);
                h_step(h);
        }
        const AutoSearch *s = search_of(h, 2);
        assert_true(saw_step);
        assert_string_equal(auto_phase_to_string(s->phase), "settled");
        assert_int_equal(s->proven, 524280);
        assert_int_equal(s->steps, 3);
        assert_int_equal(s->trips, 0);
        h_free(h);
        observer_free(o);
}

/* Packets above the old size but far below the size tried (what a path that drops the biggest
 * still delivers, or traffic that never fills it) prove no step: the device goes back to 65536,
 * the size tried its ceiling (busy, and short of it: another try would show the same); the
 * search then proves only sizes whose top quarter the 100000-byte packets reach. */
static void test_observer_packets_above_the_old_size_prove_nothing(void **state) {
        Observer *o;
        _cleanup_(freep) char *yaml = auto_policy("auto", NULL);
        Harness *h = h_observed_e0(yaml, &o);
        unsigned unproven = 0;
        for (unsigned t = 0; t < 4 * 300; t++) {
                const AutoSearch *s = search_of(h, 2), before = auto_search_numbers(s);
                /* 100000-byte packets: above 65536 (the old rule's proof of 131072), below
                 * 131072 - 18432 */
                h_observed_packets(h, o, 2, 100000, 20);
                h_step(h);
                if (before.phase == AUTO_TRYING && search_of(h, 2)->phase != AUTO_TRYING)
                        unproven += search_of(h, 2)->proven == 65536;
        }
        const AutoSearch *s = search_of(h, 2);
        /* 131072 was its ceiling; what the packets fill below it is proven (the old rule proved
         * 131072 with them, then 262144 …) */
        assert_true(unproven >= 1);
        assert_true(s->trips >= 1);
        assert_string_equal(s->ceiling_counter, AUTO_SHORT_COUNTER);
        assert_true(s->ceiling <= 131072);
        assert_true(s->proven < 131072 && s->proven - 18432 < 100000);
        h_free(h);
        observer_free(o);
}

/* The built-in guards with the observer: a step whose big packets are retransmitted (a tenth of
 * them: a path that drops big ones) trips tcp.retrans-big, the device's own counter, and the
 * size tried is the ceiling. */
static void test_observer_big_retransmits_trip_the_step(void **state) {
        Observer *o;
        Harness *h = h_observed_e0("version: 1\n"
                                   "policies:\n"
                                   "  - name: auto\n"
                                   "    match: {name: [e0]}\n"
                                   "    ipv6: {gso-max-size: auto}\n"
                                   "    rollback:\n"
                                   "      window: 10s\n",
                                   &o);
        h_retransmit_until_a_trip(h, o, 90); /* of 900 big segments sent in each */
        const AutoSearch *s = search_of(h, 2);
        assert_int_equal(s->trips, 1);
        assert_int_equal(s->ceiling, 131072);
        assert_string_equal(s->ceiling_counter, "tcp.retrans-big");
        assert_int_equal(s->proven, 65536);
        h_free(h);
        observer_free(o);
}

/* Fewer big retransmits than the built-in guard's 1 % (3 of 900 big segments each quarter second: 0.33 %)
 * pass the window's guards but not the step's own bound (1/AUTO_RETRANS_BIG_DIV): the step is not
 * proven, the size tried is the ceiling, and the device was never rolled back. */
static void test_observer_step_bound_on_own_retransmits(void **state) {
        Observer *o;
        _cleanup_(freep) char *yaml = auto_policy("auto", NULL);
        Harness *h = h_observed_e0(yaml, &o);
        h_retransmit_until_a_trip(h, o, 3); /* 0.33 % */
        const AutoSearch *s = search_of(h, 2);
        assert_int_equal(s->trips, 1);
        assert_int_equal(s->ceiling, 131072);
        assert_string_equal(s->ceiling_counter, AUTO_RETRANS_COUNTER);
        assert_int_equal(s->proven, 65536);
        assert_int_equal(device_history_get(h_dev(h, 2))->n_rollbacks, 0);
        h_free(h);
        observer_free(o);
}

/* e0 at E0_FIXED's size, counted by a fake observer (*ret) that saw 100 big packets of it sent
 * before: in probation, its window watched. */
static Harness *h_fixed_in_probation(Observer **ret) {
        struct observer_dev v = {};
        Harness *h = h_new(E0_FIXED);

        *ret = h_observer_on(h);
        h_link_add(h, 2, "e0");
        v.big[OBSERVER_TX][OBSERVER_IPV6] = 100; /* before its window: the totals, not the window's */
        assert_int_equal(observer_test_set(*ret, OWN_NETNS, 2, &v), 0);
        h_start(h);
        h_answer_all(h);
        assert_int_equal(h_state(h, 2), DEVICE_PROBATION);
        assert_true(evidence_watching(h_dev(h, 2)));
        return h;
}

/* A probation window over the observer's counts: what it counts is what came in it (not what the
 * device carried before: its base), read live while it runs (nothing kept in the record meanwhile),
 * and once it is judged the device keeps its counts and verdict without the window's base, and its
 * threshold entry is gone. */
static void test_window_over_observer_counts_keeps_its_counts(void **state) {
        struct observer_near near;
        EvidenceCounts c;
        Observer *o;
        Harness *h = h_fixed_in_probation(&o);
        Device *d = h_dev(h, 2);

        (void) state;
        assert_true(d->evidence->watched);
        assert_non_null(d->evidence->of.base); /* it carried 100 big packets before */
        assert_null(d->evidence->counts);
        evidence_counts(h->e->evidence, d, &c);
        assert_int_equal(c.tx, 0);
        h_observed_packets(h, o, 2, 150000, 7);
        evidence_counts(h->e->evidence, d, &c);
        assert_int_equal(c.tx, 7); /* live, from the observer */
        assert_null(d->evidence->counts);
        for (unsigned t = 0; evidence_watching(d); t++) {
                assert_true(t < 4 * 12);
                h_step(h);
        }
        assert_non_null(d->evidence);
        assert_false(d->evidence->watched);
        assert_null(d->evidence->of.base);
        assert_non_null(d->evidence->counts);
        assert_int_equal(d->evidence->counts->tx, 7);
        assert_int_equal(d->evidence->counts->by_family[EVIDENCE_IPV6], 7);
        assert_int_equal(d->evidence->counts->tx_largest, 150000);
        assert_int_equal(d->evidence->verdict, EVIDENCE_EFFECTIVE);
        assert_int_equal(observer_near_get(o, OWN_NETNS, 2, &near), -ENOENT);
        h_free(h);
        observer_free(o);
}

/* A window over the observer's counts that counted nothing keeps no record: the device reads as
 * one never watched, the observer's totals since it loaded (~190 bytes less a device of a burst).
 * Its next window makes one again; one that counted keeps it. */
static void test_window_of_nothing_keeps_no_record(void **state) {
        Observer *o;
        Harness *h = h_fixed_in_probation(&o);
        Device *d = h_dev(h, 2);

        (void) state;
        for (unsigned t = 0; evidence_watching(d); t++) {
                assert_true(t < 4 * 12);
                h_step(h);
        }
        assert_int_equal(h_state(h, 2), DEVICE_APPLIED);
        assert_null(d->evidence);
        EvidenceCounts totals;
        assert_int_equal(evidence_totals(h->e->evidence, d, &totals), 0);
        assert_int_equal(totals.tx, 100);

        /* watched again (an operator's watch): a record again, kept once it counted */
        assert_int_equal(evidence_watch(h->e->evidence, d, 2 * USEC_PER_SEC), 0);
        assert_non_null(d->evidence);
        assert_null(d->evidence->counts);
        h_observed_packets(h, o, 2, 150000, 3);
        for (unsigned t = 0; evidence_watching(d); t++) {
                assert_true(t < 4 * 4);
                h_step(h);
        }
        assert_non_null(d->evidence);
        assert_int_equal(d->evidence->counts->tx, 3);
        assert_int_equal(d->evidence->verdict, EVIDENCE_EFFECTIVE);

        /* stopped while it counts nothing, after a window that did: the verdict keeps the record */
        assert_int_equal(evidence_watch(h->e->evidence, d, 2 * USEC_PER_SEC), 0);
        evidence_stop(h->e->evidence, d);
        assert_non_null(d->evidence);
        assert_int_equal(d->evidence->verdict, EVIDENCE_EFFECTIVE);
        h_free(h);
        observer_free(o);
}

/* A GRO step is proven by what the device itself received (the packet sockets here), and says so:
 * no peer is asked. */
static void test_gro_step_proven_by_what_it_received(void **state) {
        Harness *h = h_new(E0_GRO_AUTO);
        const AutoSearch *s = NULL;

        h_rings_on(h);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        for (unsigned t = 0; t < 4 * 600; t++) {
                Device *d = h_dev(h, 2);
                if (evidence_watching(d) && !d->evidence->waiting)
                        h_packets(h, 2, false, d->current.gro_max_size, 20);
                h_step(h);
                s = auto_device_search(h_dev(h, 2)->autosize, 1);
                if (s->phase == AUTO_SETTLED)
                        break;
        }
        assert_string_equal(auto_phase_to_string(s->phase), "settled");
        assert_int_equal(s->proven, 524280);
        assert_int_equal(s->steps, 3);
        assert_string_equal(s->proof, AUTO_PROOF_RECEIVED_SOCKETS);
        h_free(h);
        rings_free();
}

/* d receives `n` packets of `len` bytes (IPv6), and this host drops those above `drop_above` (0:
 * none) after receiving them (its firewall's input): the device's counts and its thresholds', as
 * observer.bpf.c adds them at netif_receive_skb and kfree_skb. */
static void h_observed_received(Observer *o, int ifindex, uint32_t len, unsigned n, uint32_t drop_above) {
        struct observer_dev v;
        struct observer_near nr;

        (void) observer_get(o, OWN_NETNS, ifindex, &v);
        if (len > OBSERVER_BIG)
                v.big[OBSERVER_RX][OBSERVER_IPV6] += n;
        assert_int_equal(observer_test_set(o, OWN_NETNS, ifindex, &v), 0);
        if (observer_near_get(o, OWN_NETNS, ifindex, &nr) < 0 || nr.len[1] == 0 || len <= nr.len[1])
                return;
        nr.count[1] += n;
        if (len > nr.largest[1])
                nr.largest[1] = len;
        assert_int_equal(observer_test_set_near(o, OWN_NETNS, ifindex, (const uint64_t *) nr.count, nr.largest), 0);
        if (drop_above && len > drop_above) {
                nr.dropped[OBSERVER_IPV6] += n;
                assert_int_equal(observer_test_set_near_dropped(o, OWN_NETNS, ifindex, (const uint64_t *) nr.dropped), 0);
        }
}

/* With the observer a GRO step is proven by what the device received near the size and this host
 * did not drop after: the clean path settles at the bound, "received on it, not dropped"; where
 * this host's firewall drops what is received above 150000, the step to 262144 trips
 * (dropped-after-receipt, its rise the packets dropped) and the search settles below the drop. */
static void test_gro_step_proven_by_what_was_kept(void **state) {

        for (unsigned dropping = 0; dropping < 2; dropping++) {
                Observer *o;
                Harness *h = h_observed_e0(E0_GRO_AUTO, &o);
                const AutoSearch *s = NULL;
                unsigned tripped = 0;
                for (unsigned t = 0; t < 4 * 600; t++) {
                        s = auto_device_search(h_dev(h, 2)->autosize, 1);
                        AutoSearch before = auto_search_numbers(s);
                        h_observed_received(o, 2, h_dev(h, 2)->current.gro_max_size, 20, dropping ? 150000 : 0);
                        h_step(h);
                        s = auto_device_search(h_dev(h, 2)->autosize, 1);
                        if (s->trips > before.trips) {
                                assert_string_equal(s->ceiling_counter, AUTO_DROPPED_COUNTER);
                                assert_true(s->ceiling_rise >= AUTO_PROOF_MIN);
                                assert_true(before.trying > 150000);
                                tripped++;
                        }
                        if (s->phase == AUTO_SETTLED)
                                break;
                }
                assert_string_equal(auto_phase_to_string(s->phase), "settled");
                if (dropping) {
                        assert_true(tripped >= 1);
                        assert_true(s->proven <= 150000);
                        assert_true(s->proven > 65536);
                } else {
                        assert_int_equal(tripped, 0);
                        assert_int_equal(s->proven, 524280);
                        assert_string_equal(s->proof, AUTO_PROOF_RECEIVED);
                }
                h_free(h);
                observer_free(o);
        }
}

/* ---- the proof by the peer's receipt (a veth pair in bigtcpd's own namespace) ---- */

/* e0 (ifindex 2) a veth whose IFLA_LINK is 3, e1 (3) whose kind is `peer_kind` and whose link is
 * 2; e0's IFLA_LINK_NETNSID `nsid` when >= 0 (a namespace bigtcpd does not run). */
static Harness *h_observed_pair(const char *yaml, Observer **ret, const char *peer_kind, int nsid) {
        Harness *h = h_new(yaml);

        *ret = h_observer_on(h);
        FakeLink *e0 = h_link_add_full(h, 2, "e0", "veth", true);
        FakeLink *e1 = h_link_add_full(h, 3, "e1", peer_kind, true);
        e0->link = 3;
        e0->has_link_netnsid = nsid >= 0;
        e0->link_netnsid = nsid;
        e1->link = 2;
        h_start(h);
        h_answer_all(h);
        return h;
}

/* e1 receives `n` packets of `len` bytes (IPv6) and drops those above `drop_above` (0: none) after
 * receiving them, as observer.bpf.c counts them on the threshold the engine set on it. */
static void h_peer_receives(Observer *o, uint32_t len, unsigned n, uint32_t drop_above) {
        struct observer_deliv v;

        if (observer_deliv_get(o, OWN_NETNS, 3, &v) < 0 || v.len[OBSERVER_IPV6] == 0 || len <= v.len[OBSERVER_IPV6])
                return;
        v.received[OBSERVER_IPV6] += n;
        if (drop_above && len > drop_above)
                v.dropped[OBSERVER_IPV6] += n;
        assert_int_equal(observer_test_set_deliv(o, OWN_NETNS, 3, (const uint64_t *) v.received, (const uint64_t *) v.dropped), 0);
}

/* One round of e0 busy at its size, e1 receiving what it sends (dropping above `drop_above`). */
static void h_pair_busy(Harness *h, Observer *o, uint32_t drop_above) {
        uint32_t size = h_dev(h, 2)->current.gso_max_size;

        h_observed_packets(h, o, 2, size, 20);
        h_peer_receives(o, size, 20, drop_above);
        h_step(h);
}

/* e0 busy at its size, e1 receiving what it sends (dropping above `drop_above`), until e0's search
 * settles; how many windows counted e1's deliveries, in *ret_counted. */
static void h_pair_until_settled(Harness *h, Observer *o, uint32_t drop_above, unsigned *ret_counted) {
        unsigned counted = 0;
        uint32_t last = 0; /* the size tried whose window counted last */

        for (unsigned t = 0; t < 4 * 900 && search_of(h, 2)->phase != AUTO_SETTLED; t++) {
                const AutoSearch *s = search_of(h, 2);
                struct observer_deliv v;
                bool set = observer_deliv_get(o, OWN_NETNS, 3, &v) >= 0;
                if (set) {
                        /* the threshold on the peer is the step's own: its top quarter */
                        assert_int_equal(s->phase, AUTO_TRYING);
                        assert_int_equal(v.len[OBSERVER_IPV6], auto_search_count_near(s));
                        assert_int_equal(v.len[OBSERVER_IPV4], 0);
                }
                if (set && s->trying != last) {
                        counted++;
                        last = s->trying;
                }
                h_pair_busy(h, o, drop_above);
        }
        *ret_counted = counted;
}

/* e0 and its peer e1 (kind `peer_kind`, e0's nsid for it `nsid`) on the auto policy, e0 busy,
 * until its search settled: the harness, its observer in *ret, the windows counted on e1. */
static Harness *h_pair_settled(const char *peer_kind, int nsid, uint32_t drop_above, Observer **ret,
                               unsigned *ret_counted) {
        _cleanup_(freep) char *yaml = auto_policy("auto", NULL);
        Harness *h = h_observed_pair(yaml, ret, peer_kind, nsid);

        h_pair_until_settled(h, *ret, drop_above, ret_counted);
        assert_string_equal(auto_phase_to_string(search_of(h, 2)->phase), "settled");
        return h;
}

/* The peer received what was sent near each size: every step is proven by it, and says so. */
static void test_peer_received_proves_the_step(void **state) {
        Observer *o;
        unsigned counted;
        Harness *h = h_pair_settled("veth", -1, 0, &o, &counted);
        char buf[256];

        const AutoSearch *s = search_of(h, 2);
        assert_int_equal(s->proven, 524280);
        assert_int_equal(s->steps, 3);
        assert_int_equal(s->trips, 0);
        assert_int_equal(counted, 3);
        assert_string_equal(s->proof, "delivered to peer e1 in ns host");
        assert_string_equal(auto_search_format(s, 0, buf, sizeof(buf)),
                            "auto: settled at 524280 (the most it tries); proof: delivered to peer e1 in ns host");
        assert_int_equal(observer_delivs(o), 0); /* nothing counted on the peer once it is over */
        h_free(h);
        observer_free(o);
}

/* The peer drops what it receives above 150000 (a firewall of its own, after netif_receive_skb):
 * the sender's packets near 262144, 196608 and 163840 went out and were not retransmitted (no
 * retransmit is counted here), which proved each before; now each trips, and the search settles
 * below the drop. */
static void test_peer_did_not_receive_trips_the_step(void **state) {
        Observer *o;
        unsigned counted;
        Harness *h = h_pair_settled("veth", -1, 150000, &o, &counted);

        const AutoSearch *s = search_of(h, 2);
        assert_true(s->proven <= 150000);
        assert_int_equal(s->proven, 147456);
        assert_true(s->ceiling > 150000);
        assert_string_equal(s->ceiling_counter, AUTO_UNDELIVERED_COUNTER);
        assert_int_equal(s->trips, 4); /* 262144, 196608, 163840, 155648 */
        assert_string_equal(s->proof, "delivered to peer e1 in ns host");
        assert_int_equal(device_history_get(h_dev(h, 2))->n_rollbacks, 0);
        assert_int_equal(observer_delivs(o), 0);
        h_free(h);
        observer_free(o);
}

/* Where the peer is unknown — in a namespace bigtcpd does not run (an nsid it cannot map), or not
 * a veth whose link is e0 — the sender's proof stands: nothing is counted on any peer, and the
 * clean path settles at the bound, "sent, not retransmitted". */
static void test_unknown_peer_keeps_the_sender_s_proof(void **state) {
        static const struct {
                const char *peer_kind;
                int nsid;
        } cases[] = {{"veth", 7}, {"dummy", -1}};

        for (size_t c = 0; c < ELEMENTSOF(cases); c++) {
                Observer *o;
                unsigned counted;
                Harness *h = h_pair_settled(cases[c].peer_kind, cases[c].nsid, 150000, &o, &counted);

                const AutoSearch *s = search_of(h, 2);
                assert_int_equal(counted, 0);
                assert_int_equal(s->proven, 524280);
                assert_int_equal(s->trips, 0);
                assert_string_equal(s->proof, AUTO_PROOF_SENT);
                h_free(h);
                observer_free(o);
        }
}

/* The first in probation of devices 2..last. */
static int first_in_probation(Harness *h, int last) {
        for (unsigned t = 0; t < 4 * 600; t++) {
                for (int i = 2; i <= last; i++)
                        if (h_state(h, i) == DEVICE_PROBATION)
                                return i;
                for (int i = 2; i <= last; i++)
                        h_busy(h, i, 20);
                h_step(h);
        }
        fail_msg("no device in probation");
        return 0;
}

/* e0 and e1, busy, on the harness's policy: `a` the first in a probation window, `b` the other. */
static void two_busy_devices(Harness *h, int *a, int *b) {
        h_rings_on(h);
        h_link_add(h, 2, "e0");
        h_link_add(h, 3, "e1");
        h_start(h);
        h_answer_all(h);
        *a = first_in_probation(h, 3);
        *b = *a == 2 ? 3 : 2;
}

/* A guard trips in the window of a step: the search's answer. The device goes back to its proven
 * size, the size tried is its ceiling, and the rollout goes on: the other device's steps follow
 * (its search settles at the bound) and the tripped one searches on below its ceiling. */
static void test_step_trip_halts_no_rollout(void **state) {
        Harness *h = h_new(ROLLOUT_POLICY);
        const AutoSearch *s;
        int a, b;

        two_busy_devices(h, &a, &b);
        s = search_of(h, a);
        assert_string_equal(auto_phase_to_string(s->phase), "trying");
        assert_int_equal(s->trying, 131072);
        assert_int_equal(h_link(h, a)->sizes.gso_max_size, 131072);

        size_t from = h->n_ev;
        h_link(h, a)->stats.tx_errors += 100;
        while (h_state(h, a) == DEVICE_PROBATION)
                h_step(h);
        assert_non_null(h_find_event(h, EVENT_ROLLBACK, a, from));
        assert_int_equal(h_link(h, a)->sizes.gso_max_size, 65536);
        assert_int_equal(s->proven, 65536);
        assert_int_equal(s->ceiling, 131072);
        assert_string_equal(s->ceiling_counter, "link.tx_errors");
        assert_int_equal(s->ceiling_rise, 100);
        assert_int_equal(s->trips, 1);
        assert_false(rollout_is_halted(rollout_find(&h->e->rollouts, "auto")));

        /* the other's steps go on, to the bound; the tripped one settles below its ceiling */
        for (unsigned t = 0; t < 4 * 1200 && !(search_of(h, a)->phase == AUTO_SETTLED &&
                                                  search_of(h, b)->phase == AUTO_SETTLED); t++) {
                h_busy(h, a, 20);
                h_busy(h, b, 20);
                h_step(h);
        }
        assert_string_equal(auto_phase_to_string(search_of(h, b)->phase), "settled");
        assert_int_equal(search_of(h, b)->proven, 524280);
        assert_int_equal(h_link(h, b)->sizes.gso_max_size, 524280);
        assert_string_equal(auto_phase_to_string(s->phase), "settled");
        assert_int_equal(s->ceiling, 131072);
        assert_true(s->proven < 131072 && 131072 - s->proven <= s->proven >> AUTO_STOP_SHIFT);
        assert_int_equal(h_link(h, a)->sizes.gso_max_size, s->proven);
        assert_int_equal(s->trips, 1);
        assert_false(rollout_is_halted(rollout_find(&h->e->rollouts, "auto")));
        h_free(h);
        rings_free();
}

/* A restart resumes the searches from the state file: a settled one stays where it settled,
 * unwritten; one stopped in a step's window finishes the window, but has lost its count and
 * proves nothing: back to its proven size, the step not taken and not a trip. */
static void test_restart_resumes(void **state) {
        Harness *h = h_new(ROLLOUT_POLICY);
        const AutoSearch *s;
        int a, b;

        two_busy_devices(h, &a, &b);
        /* a steps to the bound; then b is in its first step's window */
        while (search_of(h, a)->phase != AUTO_SETTLED || h_state(h, b) != DEVICE_PROBATION) {
                h_busy(h, a, 20);
                h_busy(h, b, 20);
                h_step(h);
        }
        assert_int_equal(search_of(h, a)->proven, 524280);
        assert_string_equal(auto_phase_to_string(search_of(h, b)->phase), "trying");
        assert_int_equal(h_link(h, b)->sizes.gso_max_size, 131072);

        /* the clocks go on across the restart (the harness's start theirs again) */
        uint64_t mono = h->mono, boot = h->boot, real = h->real;
        h = h_restart(h, ROLLOUT_POLICY);
        h->mono = mono, h->boot = boot, h->real = real;
        h_answer_all(h);
        /* b's window goes on where it was (its probation is resumed), without the packets it had */
        assert_state(h_state(h, b), DEVICE_PROBATION);
        assert_string_equal(auto_phase_to_string(search_of(h, b)->phase), "trying");
        for (unsigned t = 0; t < 4 * 20 && h_state(h, b) == DEVICE_PROBATION; t++)
                h_step(h);
        assert_state(h_state(h, b), DEVICE_APPLIED);
        for (unsigned t = 0; t < 8; t++)
                h_step(h);
        s = search_of(h, a);
        assert_string_equal(auto_phase_to_string(s->phase), "settled");
        assert_int_equal(s->proven, 524280);
        assert_int_equal(s->steps, 3);
        assert_int_equal(h_count_writes(h, a, 0), 0);
        assert_int_equal(h_link(h, a)->sizes.gso_max_size, 524280);
        s = search_of(h, b);
        assert_int_equal(s->proven, 65536);
        assert_int_equal(s->steps, 0);
        assert_int_equal(s->trips, 0);
        assert_int_equal(s->ceiling, 0);
        assert_true(s->phase == AUTO_IDLE || s->phase == AUTO_WATCHING);
        assert_int_equal(h_link(h, b)->sizes.gso_max_size, 65536);
        h_free(h);
        rings_free();
}

/* The same trip of a change that is not a step (a fixed size) halts the rollout: the other device
 * waits, its reason the halt. */
static void test_policy_trip_halts_the_rollout(void **state) {
        Harness *h = h_new("version: 1\n"
                           "policies:\n"
                           "  - name: fixed\n"
                           "    match: {name: [e0, e1]}\n"
                           "    ipv6: {gso-max-size: 185000}\n"
                           "    rollout: {max-parallel: 1}\n"
                           "    rollback:\n"
                           "      window: 10s\n"
                           "      interval: 1s\n"
                           "      guards:\n"
                           "        - {counter: link.tx_errors, max-increase: 10}\n");
        int a, b;

        two_busy_devices(h, &a, &b);
        assert_state(h_state(h, b), DEVICE_PENDING);
        h_link(h, a)->stats.tx_errors += 100;
        while (h_state(h, a) == DEVICE_PROBATION)
                h_step(h);
        assert_state(h_state(h, a), DEVICE_ROLLED_BACK);
        assert_true(rollout_is_halted(rollout_find(&h->e->rollouts, "fixed")));
        for (unsigned t = 0; t < 4 * 60; t++)
                h_step(h);
        assert_state(h_state(h, b), DEVICE_PENDING);
        assert_string_equal(h_pending_reason(h, b), "rollout-halted");
        assert_int_equal(h_link(h, b)->sizes.gso_max_size, 65536);
        h_free(h);
        rings_free();
}

/* The state file's writes, counted (the syscalls themselves still made). Static: the store may
 * still hold it when a failed test's teardown frees the harness. */
static struct {
        unsigned writes, syncs, renames;
} disk;

static ssize_t disk_write(void *userdata, int fd, const void *buf, size_t n) {
        disk.writes++;
        return write(fd, buf, n);
}

static int disk_sync(void *userdata, int fd, bool data_only) {
        disk.syncs++;
        return data_only ? fdatasync(fd) : fsync(fd);
}

static int disk_rename(void *userdata, int dir_fd, const char *from, const char *to) {
        disk.renames++;
        return renameat(dir_fd, from, dir_fd, to);
}

static const StateIo counting_disk = {.write = disk_write, .fsync = disk_sync, .renameat = disk_rename};

/* The next of e0's and e1's idle watches (their timer fires when the first is due), and the save
 * that the store's timer makes. */
static void idle_round(Harness *h, Device *e0, Device *e1) {
        uint64_t due = auto_apply_due(e0) < auto_apply_due(e1) ? auto_apply_due(e0) : auto_apply_due(e1);

        if (due > h->real)
                h_advance(h, due - h->real);
        h_fire_auto(h);
        assert_int_equal(state_store_save(h->e->state), 0);
}

/* Idle searches write nothing to the state file: not the time of their next watch, not their
 * waits while they double, not a "forget" line for a device bigtcpd never wrote (e0, at 65536, the
 * veths' own), not a new snapshot because none is held. Once a wait is an hour, e1's (whose
 * originals are kept) is written, once; then a day of idle rounds is not a single write. A change
 * of an entry is still written. */
static void test_idle_searches_write_nothing(void **state) {
        Harness *h = h_new("version: 1\n"
                           "policies:\n"
                           "  - name: written\n"
                           "    match: {name: [e1]}\n"
                           "    ipv6: {gso-max-size: {auto: {min: 131072}}}\n"
                           "    rollback: {window: 10s}\n"
                           "  - name: auto\n"
                           "    match: {name: [e0]}\n"
                           "    ipv6: {gso-max-size: auto}\n"
                           "    rollback: {window: 10s}\n");
        Device *e0, *e1;

        h_link_add(h, 2, "e0");
        h_link_add(h, 3, "e1");
        h_start(h);
        h_answer_all(h);
        e0 = h_dev(h, 2);
        e1 = h_dev(h, 3);
        for (unsigned t = 0; t < 4 * 60 && h_state(h, 3) != DEVICE_APPLIED; t++)
                h_step(h);
        assert_state(h_state(h, 3), DEVICE_APPLIED);
        assert_int_equal(h_link(h, 3)->sizes.gso_max_size, 131072);
        assert_true(e1->record.has_original);
        assert_false(e0->record.has_original);

        assert_int_equal(state_store_save(h->e->state), 0);
        disk = (typeof(disk)){};
        state_store_set_io(h->e->state, &counting_disk);
        /* their waits double up to their most: e1's written once, when it is an hour */
        for (unsigned round = 0; (*auto_device_search(e0->autosize, 0)).idle_wait_usec < AUTO_IDLE_WAIT_MAX_USEC ||
                                 (*auto_device_search(e1->autosize, 0)).idle_wait_usec < AUTO_IDLE_WAIT_MAX_USEC;
             round++) {
                assert_true(round < 100);
                idle_round(h, e0, e1);
        }
        assert_int_equal(disk.writes, 1);
        assert_int_equal(disk.syncs, 1);
        disk = (typeof(disk)){};
        /* a day and more: a watch of each an hour */
        uint64_t began = h->real;
        for (unsigned round = 0; round < 2 * 25; round++)
                idle_round(h, e0, e1);
        assert_true(h->real - began >= 24 * 3600 * USEC_PER_SEC);
        assert_string_equal(auto_phase_to_string((*auto_device_search(e0->autosize, 0)).phase), "idle");
        assert_string_equal(auto_phase_to_string((*auto_device_search(e1->autosize, 0)).phase), "idle");
        assert_int_equal(disk.writes, 0);
        assert_int_equal(disk.syncs, 0);
        assert_int_equal(disk.renames, 0);
        assert_int_equal(h_count_writes(h, 2, 0), 0);

        /* a change is written: e1 rolled back */
        assert_int_equal(apply_rollback(h->e, e1, NULL), 0);
        h_flush(h);
        h_answer_all(h);
        assert_int_equal(state_store_save(h->e->state), 0);
        assert_true(disk.writes > 0 && disk.syncs > 0);
        state_store_set_io(h->e->state, NULL);
        h_free(h);
}

/* An operator's rollback in a step's window ends the step: the operator's verdict on the size
 * tried, as a guard's trip (its ceiling, the counter "operator"). The device is held at its last good
 * size, busy or not, across a restart too; no search stays "trying" with no window to judge it. A
 * retry releases it: the search goes on below the ceiling. */
static void test_operator_rollback_ends_the_step(void **state) {
        char *yaml = auto_policy("auto", NULL);
        Harness *h = h_new(yaml);
        const AutoSearch *s;
        Device *d;

        h_rings_on(h);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        for (unsigned t = 0; t < 4 * 600 && h_state(h, 2) != DEVICE_PROBATION; t++) {
                h_busy(h, 2, 20);
                h_step(h);
        }
        s = search_of(h, 2);
        assert_string_equal(auto_phase_to_string(s->phase), "trying");
        assert_int_equal(s->trying, 131072);
        assert_int_equal(h_link(h, 2)->sizes.gso_max_size, 131072);

        d = h_dev(h, 2);
        assert_int_equal(apply_rollback(h->e, d, NULL), 0);
        h_flush(h);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_int_equal(h_link(h, 2)->sizes.gso_max_size, 65536);
        assert_string_equal(auto_phase_to_string(s->phase), "watching");
        assert_int_equal(s->proven, 65536);
        assert_int_equal(s->trying, 0);
        assert_int_equal(s->ceiling, 131072);
        assert_string_equal(s->ceiling_counter, "operator");
        assert_int_equal(s->trips, 1);
        assert_int_equal(auto_search_next(s), 98304);

        /* held, busy or not: no step, no write, no window */
        size_t writes = h_count_writes(h, 2, 0);
        for (unsigned t = 0; t < 4 * 120; t++) {
                h_busy(h, 2, 20);
                h_step(h);
        }
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_true(d->life.held);
        assert_int_equal(h_count_writes(h, 2, 0), writes);
        assert_int_equal(h_link(h, 2)->sizes.gso_max_size, 65536);
        assert_int_equal(s->trying, 0);

        /* and so after a restart */
        uint64_t mono = h->mono, boot = h->boot, real = h->real;
        h = h_restart(h, yaml);
        h->mono = mono, h->boot = boot, h->real = real;
        h_answer_all(h);
        h_rings_on(h);
        for (unsigned t = 0; t < 4 * 60; t++) {
                h_busy(h, 2, 20);
                h_step(h);
        }
        d = h_dev(h, 2);
        s = search_of(h, 2);
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_true(d->life.held);
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        assert_int_equal(s->ceiling, 131072);
        assert_int_equal(s->trying, 0);

        /* a retry: the search goes on below its ceiling */
        assert_int_equal(apply_retry(h->e, d), 0);
        h_flush(h);
        h_answer_all(h);
        for (unsigned t = 0; t < 4 * 600 && h_link(h, 2)->sizes.gso_max_size == 65536; t++) {
                h_busy(h, 2, 20);
                h_step(h);
        }
        assert_int_equal(h_link(h, 2)->sizes.gso_max_size, 98304);
        assert_string_equal(auto_phase_to_string(s->phase), "trying");
        h_free(h);
        rings_free();
        free(yaml);
}

/* A device's searches have room for the sizes its policy sets to `auto` alone, made again when
 * those change (what was searched goes on where it was) and freed when none is. Once every device
 * on `auto` carried all four sizes' searches (720 bytes) to search one. */
static void test_room_for_the_sizes_searched(void **state) {
        char *yaml = auto_policy("auto", NULL);
        Harness *h = h_new(yaml);
        const size_t one = offsetof(AutoDevice, of) + sizeof(AutoSize);
        Device *d;

        free(yaml);
        h_link_add(h, 2, "e0");
        h_start(h);
        h_answer_all(h);
        d = h_dev(h, 2);
        assert_non_null(d->autosize);
        assert_int_equal(d->autosize->sizes, SIZE_BIT_GSO);
        assert_true(malloc_usable_size(d->autosize) < one + sizeof(AutoSize));
        AutoSearch gso = auto_search_numbers(auto_device_search(d->autosize, 0));
        assert_int_equal(gso.phase, AUTO_IDLE);
        /* its words move with it into the room made for two (as a step's proof would be) */
        auto_search_set_proof(auto_device_search(d->autosize, 0), AUTO_PROOF_SENT);
        const AutoDevice *one_size = d->autosize;

        h_reload(h, GSO_AND_GRO_AUTO);
        h_answer_all(h);
        d = h_dev(h, 2);
        assert_non_null(d->autosize);
        assert_int_equal(d->autosize->sizes, SIZE_BIT_GSO | SIZE_BIT_GRO);
        assert_true(malloc_usable_size(d->autosize) < one + 2 * sizeof(AutoSize));
        assert_ptr_not_equal(d->autosize, one_size);
        assert_string_equal(auto_device_search(d->autosize, 0)->proof, AUTO_PROOF_SENT);
        assert_null(auto_device_search(d->autosize, 1)->proof);
        /* the GSO search is the one it was, the GRO one began */
        assert_int_equal(auto_device_search(d->autosize, 0)->phase, gso.phase);
        assert_int_equal(auto_device_search(d->autosize, 0)->retry_usec, gso.retry_usec);
        assert_int_equal(auto_device_search(d->autosize, 0)->idle_wait_usec, gso.idle_wait_usec);
        assert_int_equal(auto_device_search(d->autosize, 1)->proven, 65536);
        assert_null(auto_device_at(d->autosize, 2));

        h_reload(h, "version: 1\n"
                    "policies:\n"
                    "  - name: auto\n"
                    "    match: {name: [e0]}\n"
                    "    ipv6: {gso-max-size: 65536, gro-max-size: 65536}\n");
        h_answer_all(h);
        assert_null(h_dev(h, 2)->autosize);
        h_free(h);
}

/* A reload that searches another size too while a GSO step's window counts on the peer: the
 * search's room is made again, and what the step holds goes with it — its TCP baselines and the
 * peer's entry in the observer, cleared once the step is judged (it stayed behind, counted on e1
 * for good, and the step lost its retransmit bound). */
static void test_room_made_again_mid_step_keeps_its_peer(void **state) {
        _cleanup_(freep) char *yaml = auto_policy("auto", NULL);
        struct observer_deliv v;
        Observer *o;
        Harness *h = h_observed_pair(yaml, &o, "veth", -1);
        unsigned t;

        for (t = 0; t < 4 * 900 && observer_deliv_get(o, OWN_NETNS, 3, &v) < 0; t++) {
                h_observed_packets(h, o, 2, h_dev(h, 2)->current.gso_max_size, 20);
                h_step(h);
        }
        assert_int_equal(observer_delivs(o), 1);
        const AutoDevice *was = h_dev(h, 2)->autosize;
        assert_true(was->peer_counting);
        bool had_tcp_base = was->has_tcp_base;
        uint64_t sent_base = was->sent_big_base;

        h_reload(h, GSO_AND_GRO_AUTO);
        h_answer_all(h);
        const AutoDevice *a = h_dev(h, 2)->autosize;
        assert_ptr_not_equal(a, was);
        assert_int_equal(a->sizes, SIZE_BIT_GSO | SIZE_BIT_GRO);
        assert_int_equal(auto_device_search(a, 0)->phase, AUTO_TRYING);
        assert_true(a->peer_counting);
        assert_int_equal(a->has_tcp_base, had_tcp_base);
        assert_int_equal(a->sent_big_base, sent_base);
        /* the step's window ends, judged: nothing is counted on the peer any more */
        for (t = 0; t < 4 * 900 && auto_device_search(h_dev(h, 2)->autosize, 0)->phase == AUTO_TRYING; t++)
                h_pair_busy(h, o, 0);
        assert_int_not_equal(auto_device_search(h_dev(h, 2)->autosize, 0)->phase, AUTO_TRYING);
        assert_int_equal(observer_delivs(o), 0);
        h_free(h);
        observer_free(o);
}

/* A plan's preview of a search (auto_apply_preview(), control_plan_device()) holds references of
 * its own to the search's words: it stays whole after the device's search ended and its words
 * went with it (here a reload that sets no size to auto, then the device gone), and ending it drops
 * them all. */
static void test_preview_outlives_the_search(void **state) {
        Observer *o;
        unsigned counted;
        Harness *h = h_pair_settled("veth", -1, 150000, &o, &counted);
        Device *d = h_dev(h, 2);
        AutoSearches plan;
        unsigned changed = 0;
        char buf[256];

        assert_int_equal(auto_apply_preview(d, &h->policy->policies[0], SIZE_BIT_GSO, h->e->ipv4_supported,
                                            clock_now(h->e->clock, CLOCK_REALTIME), &plan, &changed),
                         SIZE_BIT_GSO);
        assert_int_equal(changed, 0);
        assert_int_equal(plan.sizes, SIZE_BIT_GSO);
        assert_ptr_equal(plan.size[0].proof, auto_device_search(d->autosize, 0)->proof); /* the one string */
        assert_ptr_equal(plan.size[0].ceiling_counter, auto_device_search(d->autosize, 0)->ceiling_counter);

        h_reload(h, "version: 1\n"
                    "policies:\n"
                    "  - name: fixed\n"
                    "    match: {name: [e0]}\n"
                    "    ipv6: {gso-max-size: 65536}\n");
        h_answer_all(h);
        assert_null(h_dev(h, 2)->autosize);
        h_link_del(h, 2);
        h_link_del(h, 3);
        h_answer_all(h);
        assert_null(h_dev(h, 2));
        /* the plan's words are its own (ASan: a borrowed one would be read after its free) */
        assert_string_equal(plan.size[0].proof, "delivered to peer e1 in ns host");
        assert_string_equal(plan.size[0].ceiling_counter, AUTO_UNDELIVERED_COUNTER);
        assert_string_equal(auto_search_format(&plan.size[0], 0, buf, sizeof(buf)),
                            "auto: settled at 147456 (155648 tripped peer-did-not-receive +800); "
                            "proof: delivered to peer e1 in ns host");
        size_t held = intern_refs();
        auto_searches_done(&plan);
        assert_int_equal(intern_refs(), held - 2);
        h_free(h);
        observer_free(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_idle_device_waits_longer_each_time, h_teardown),
                cmocka_unit_test_teardown(test_room_for_the_sizes_searched, h_teardown),
                cmocka_unit_test_teardown(test_idle_device_watched_with_rings, h_teardown),
                cmocka_unit_test_teardown(test_idle_wait_is_bounded, h_teardown),
                cmocka_unit_test_teardown(test_canary_cohort, h_teardown),
                cmocka_unit_test_teardown(test_rollout_one_step_at_a_time, h_teardown),
                cmocka_unit_test_teardown(test_step_trip_halts_no_rollout, h_teardown),
                cmocka_unit_test_teardown(test_policy_trip_halts_the_rollout, h_teardown),
                cmocka_unit_test_teardown(test_restart_resumes, h_teardown),
                cmocka_unit_test_teardown(test_operator_rollback_ends_the_step, h_teardown),
                cmocka_unit_test_teardown(test_idle_searches_write_nothing, h_teardown),
                cmocka_unit_test_teardown(test_observer_clean_path_settles_at_the_bound, h_teardown),
                cmocka_unit_test_teardown(test_gro_step_proven_by_what_it_received, h_teardown),
                cmocka_unit_test_teardown(test_gro_step_proven_by_what_was_kept, h_teardown),
                cmocka_unit_test_teardown(test_peer_received_proves_the_step, h_teardown),
                cmocka_unit_test_teardown(test_room_made_again_mid_step_keeps_its_peer, h_teardown),
                cmocka_unit_test_teardown(test_peer_did_not_receive_trips_the_step, h_teardown),
                cmocka_unit_test_teardown(test_unknown_peer_keeps_the_sender_s_proof, h_teardown),
                cmocka_unit_test_teardown(test_observer_packets_above_the_old_size_prove_nothing, h_teardown),
                cmocka_unit_test_teardown(test_observer_big_retransmits_trip_the_step, h_teardown),
                cmocka_unit_test_teardown(test_observer_step_bound_on_own_retransmits, h_teardown),
                cmocka_unit_test_teardown(test_window_over_observer_counts_keeps_its_counts, h_teardown),
                cmocka_unit_test_teardown(test_window_of_nothing_keeps_no_record, h_teardown),
                cmocka_unit_test_teardown(test_preview_outlives_the_search, h_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
