/* test-observer.c — the observer's attribution on a fake map: counts belong to (netns, ifindex)
 * and to nothing else; guards on the device's own counters trip for the device whose counters
 * rose; the ratio of big retransmits judged only once enough was sent; what a step of `auto`
 * counts as near its size. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <string.h>

#include "auto-size.h"
#include "guard.h"
#include "observer.h"
#include "test-helpers.h"
#include "test-helpers.h"

#define NS_A 4026531840u
#define NS_B 4026532000u

static void test_attribution(void **state) {
        Observer *o;
        struct observer_dev v = {}, got;

        assert_int_equal(observer_new_fake(NS_A, &o), 0);
        assert_int_equal(observer_own_netns(o), NS_A);
        /* the same ifindex in two namespaces: two devices */
        v.big[OBSERVER_TX][OBSERVER_IPV6] = 10;
        v.tcp_sent = 1000;
        assert_int_equal(observer_test_set(o, NS_A, 2, &v), 0);
        v.big[OBSERVER_TX][OBSERVER_IPV6] = 99;
        v.tcp_sent = 7;
        assert_int_equal(observer_test_set(o, NS_B, 2, &v), 0);
        assert_int_equal(observer_test_set_drops(o, NS_B, 2, 12, 5), 0);
        assert_int_equal(observer_test_set_drops(o, NS_B, 2, 2, 3), 0);
        assert_int_equal(observer_test_set_drops(o, NS_B, 3, 12, 100), 0);

        assert_int_equal(observer_get(o, NS_A, 2, &got), 0);
        assert_int_equal(got.big[OBSERVER_TX][OBSERVER_IPV6], 10);
        assert_int_equal(got.tcp_sent, 1000);
        assert_int_equal(observer_get(o, NS_B, 2, &got), 0);
        assert_int_equal(got.big[OBSERVER_TX][OBSERVER_IPV6], 99);
        assert_int_equal(observer_get(o, NS_B, 4, &got), -ENOENT);
        assert_int_equal(got.tcp_sent, 0);
        assert_int_equal(observer_drops(o, NS_B, 2, 12), 5);
        assert_int_equal(observer_drops(o, NS_B, 2, UINT32_MAX), 8);
        assert_int_equal(observer_drops(o, NS_A, 2, 12), 0);
        assert_int_equal(observer_drops(o, NS_B, 3, UINT32_MAX), 100);

        /* a device that goes takes its entries, and only its own */
        observer_forget(o, NS_B, 2);
        assert_int_equal(observer_get(o, NS_B, 2, &got), -ENOENT);
        assert_int_equal(observer_drops(o, NS_B, 2, UINT32_MAX), 0);
        assert_int_equal(observer_drops(o, NS_B, 3, 12), 100);
        assert_int_equal(observer_get(o, NS_A, 2, &got), 0);

        /* thresholds: set from zero; counts as the kernel would add them */
        const uint32_t len[4] = {200000, 0, 0, 0};
        const uint64_t count[4] = {42, 0, 0, 0};
        const uint32_t largest[4] = {262000, 0, 0, 0};
        struct observer_near n;
        assert_int_equal(observer_near_get(o, NS_A, 2, &n), -ENOENT);
        assert_int_equal(observer_test_set_near(o, NS_A, 2, count, largest), -ENOENT);
        assert_int_equal(observer_near_set(o, NS_A, 2, len), 0);
        assert_int_equal(observer_near_get(o, NS_A, 2, &n), 0);
        assert_int_equal(n.len[0], 200000);
        assert_int_equal(n.count[0], 0);
        assert_int_equal(observer_test_set_near(o, NS_A, 2, count, largest), 0);
        assert_int_equal(observer_near_get(o, NS_A, 2, &n), 0);
        assert_int_equal(n.count[0], 42);
        observer_near_set(o, NS_A, 2, len); /* again: from zero */
        assert_int_equal(observer_near_get(o, NS_A, 2, &n), 0);
        assert_int_equal(n.count[0], 0);
        observer_near_clear(o, NS_A, 2);
        assert_int_equal(observer_near_get(o, NS_A, 2, &n), -ENOENT);
        observer_free(o);
}

static Guard guard(const char *counter, bool inc, uint64_t max_inc, double ratio, const char *per) {
        return (Guard){.counter = (char *) counter, .counter_kind = GUARD_COUNTER_OBSERVER,
                       .has_max_increase = inc, .max_increase = max_inc, .has_max_ratio = per != NULL,
                       .max_ratio = ratio, .per = (char *) per, .per_kind = GUARD_COUNTER_OBSERVER,
                       .file = (char *) "test.yaml"};
}

static void test_guards_on_the_device_alone(void **state) {
        uint32_t nf;
        Guard g[] = {
                guard("drop.netfilter_drop", true, 10, 0, NULL),
                guard("tcp.retrans-big", false, 0, 0.05, "tcp.sent-big"),
        };
        RollbackSpec spec = {.window_usec = 1000000, .interval_usec = 100000, .guards = g, .n_guards = 2};
        _cleanup_(freep) GuardSet *gs = NULL;
        RollbackRecord rec;
        struct observer_dev v = {.tcp_sent_big = 1000, .tcp_retrans_big = 5};
        Observer *o;

        if (observer_drop_reason("netfilter_drop", &nf) < 0)
                skip(); /* a kernel without BTF: no reason names to resolve */
        gs = calloc(1, GUARD_SET_SIZE(2));
        assert_non_null(gs);
        assert_int_equal(observer_new_fake(NS_A, &o), 0);
        GuardObserver mine = {.observer = o, .netns = NS_A, .ifindex = 5};
        assert_int_equal(observer_test_set(o, NS_A, 5, &v), 0);
        assert_int_equal(observer_test_set_drops(o, NS_A, 5, nf, 3), 0);

        assert_int_equal(guard_set_init_spec(gs, &spec, NULL), 0);
        assert_true(guard_set_has_observer(gs));
        assert_false(guard_set_has_snmp(gs));
        /* no baseline yet: the first check takes it, and nothing trips */
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        assert_int_equal(gs->items[0].base, 3);
        assert_int_equal(gs->rules->items[0].reason, nf);
        assert_int_equal(gs->items[1].base, 5);
        assert_int_equal(gs->items[1].per_base, 1000);

        /* another device's drops (the same ifindex in another namespace, another ifindex here) */
        assert_int_equal(observer_test_set_drops(o, NS_B, 5, nf, 1000), 0);
        assert_int_equal(observer_test_set_drops(o, NS_A, 6, nf, 1000), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        /* its own drops of another reason */
        assert_int_equal(observer_test_set_drops(o, NS_A, 5, nf + 1, 1000), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        /* +10 of its own: not more than 10; +11 trips, the device's own counter */
        assert_int_equal(observer_test_set_drops(o, NS_A, 5, nf, 13), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        assert_int_equal(observer_test_set_drops(o, NS_A, 5, nf, 14), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 1);
        assert_string_equal(rec.counter, "drop.netfilter_drop");
        assert_int_equal(rec.rise, 11);
        assert_false(rec.namespace_wide);
        assert_int_equal(observer_test_set_drops(o, NS_A, 5, nf, 3), 0);

        /* the ratio: 20 big retransmits of 50 big segments sent is 0.4, but 50 is below
         * GUARD_OBSERVER_PER_MIN: nothing said yet */
        v.tcp_sent_big = 1050;
        v.tcp_retrans_big = 25;
        assert_int_equal(observer_test_set(o, NS_A, 5, &v), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        /* 20 of 400: 0.05, not above */
        v.tcp_sent_big = 1400;
        assert_int_equal(observer_test_set(o, NS_A, 5, &v), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 0);
        /* 21 of 400 trips */
        v.tcp_retrans_big = 26;
        assert_int_equal(observer_test_set(o, NS_A, 5, &v), 0);
        assert_int_equal(guard_set_check_observer(gs, &mine, &rec), 1);
        assert_string_equal(rec.counter, "tcp.retrans-big");
        assert_string_equal(rec.per, "tcp.sent-big");
        assert_int_equal(rec.rise, 21);
        assert_int_equal(rec.per_rise, 400);

        /* the SNMP/link checks leave them alone */
        assert_int_equal(guard_set_check(gs, NULL, NULL, 0, &rec), 0);
        guard_set_done(gs);

        /* without an observer they go inactive */
        assert_int_equal(guard_set_init_spec(gs, &spec, NULL), 0);
        guard_set_observer_baseline(gs, &(GuardObserver){});
        assert_false(guard_set_has_observer(gs));
        guard_set_done(gs);
        observer_free(o);
}

static void test_unknown_reason_is_inactive(void **state) {
        Guard g[] = {guard("drop.no_such_reason_here", true, 0, 0, NULL)};
        RollbackSpec spec = {.window_usec = 1000000, .interval_usec = 100000, .guards = g, .n_guards = 1};
        _cleanup_(freep) GuardSet *gs = calloc(1, GUARD_SET_SIZE(1));
        RollbackRecord rec;
        Observer *o;
        uint32_t r;

        assert_int_equal(observer_drop_reason("no_such_reason_here", &r) < 0, 1);
        assert_non_null(gs);
        assert_int_equal(observer_new_fake(NS_A, &o), 0);
        assert_int_equal(guard_set_init_spec(gs, &spec, NULL), 0);
        assert_int_equal(guard_set_check_observer(gs, &(GuardObserver){.observer = o, .netns = NS_A, .ifindex = 1}, &rec),
                         0);
        assert_false(guard_set_active(gs, 0));
        guard_set_done(gs);
        observer_free(o);
}

/* The thresholds of a burst's windows, all cleared as the windows end, leave no room behind in the
 * snapshot (a megabyte at 10000 devices stayed), nor do devices gone. */
static void test_snapshot_shrinks(void **state) {
        Observer *o;
        struct observer_near near;

        (void) state;
        assert_int_equal(observer_new_fake(NS_A, &o), 0);
        for (int i = 1; i <= 1000; i++)
                assert_int_equal(observer_near_set(o, NS_B, i, (const uint32_t[4]){70000, 0, 0, 0}), 0);
        assert_true(observer_snapshot_bytes(o) >= 1000 * sizeof(struct observer_near));
        for (int i = 1; i <= 990; i++)
                observer_near_clear(o, NS_B, i);
        /* what is left is found, in room proportional to it */
        assert_int_equal(observer_near_get(o, NS_B, 995, &near), 0);
        assert_int_equal(near.len[0], 70000);
        assert_int_equal(observer_near_get(o, NS_B, 5, &near), -ENOENT);
        assert_true(observer_snapshot_bytes(o) <= 64 * (sizeof(struct observer_near) + 16));
        for (int i = 991; i <= 1000; i++)
                observer_near_clear(o, NS_B, i);
        assert_int_equal(observer_snapshot_bytes(o), 0);
        observer_free(o);
}

static void test_near_the_step(void **state) {
        AutoSearch s = {.phase = AUTO_TRYING, .proven = 131072, .trying = 262144};

        /* the top quarter of the step */
        assert_int_equal(auto_search_count_near(&s), 262144 - 32768);
        /* a small step: at least AUTO_NEAR_SLACK below, never below the proven size */
        s = (AutoSearch){.phase = AUTO_TRYING, .proven = 147456, .trying = 155648};
        assert_int_equal(auto_search_count_near(&s), 147456 + AUTO_LINK_MARGIN);
        s = (AutoSearch){.phase = AUTO_TRYING, .proven = 65536, .trying = 131072};
        assert_int_equal(auto_search_count_near(&s), 131072 - 18432);
        /* watching: what the packet sockets count too */
        s = (AutoSearch){.phase = AUTO_WATCHING, .proven = 131072};
        assert_int_equal(auto_search_count_near(&s), auto_search_count_above(&s));
}

/* A peer's deliveries: set from zero with their thresholds, counted, cleared; a device forgotten
 * loses them; the kernel's observer (where it loads) keeps them in its map alike. */
static void test_deliveries(void **state) {
        Observer *fake, *real = NULL, *both[2];
        struct observer_deliv v;
        char *why = NULL;

        (void) state;
        assert_int_equal(observer_new_fake(NS_A, &fake), 0);
        if (observer_new(&real, &why) < 0)
                real = NULL;
        free(why);
        both[0] = fake;
        both[1] = real;
        for (size_t i = 0; i < 2 && both[i]; i++) {
                Observer *o = both[i];
                assert_int_equal(observer_deliv_get(o, NS_B, 3, &v), -ENOENT);
                assert_int_equal(observer_deliv_set(o, NS_B, 3, (const uint32_t[2]){229376, 0}), 0);
                assert_int_equal(observer_delivs(o), 1);
                assert_int_equal(observer_deliv_get(o, NS_B, 3, &v), 0);
                assert_int_equal(v.len[0], 229376);
                assert_int_equal(v.len[1], 0);
                assert_int_equal(v.received[0] + v.dropped[0] + v.received[1] + v.dropped[1], 0);
                if (o == fake) {
                        assert_int_equal(observer_test_set_deliv(o, NS_B, 3, (const uint64_t[2]){90, 0},
                                                                 (const uint64_t[2]){80, 0}), 0);
                        assert_int_equal(observer_deliv_get(o, NS_B, 3, &v), 0);
                        assert_int_equal(v.received[0] - v.dropped[0], 10);
                }
                /* set again: from zero */
                assert_int_equal(observer_deliv_set(o, NS_B, 3, (const uint32_t[2]){0, 120000}), 0);
                assert_int_equal(observer_deliv_get(o, NS_B, 3, &v), 0);
                assert_int_equal(v.len[1], 120000);
                assert_int_equal(v.received[0], 0);
                assert_int_equal(observer_delivs(o), 1);
                observer_deliv_clear(o, NS_B, 3);
                assert_int_equal(observer_deliv_get(o, NS_B, 3, &v), -ENOENT);
                assert_int_equal(observer_delivs(o), 0);
                /* a device that goes takes its deliveries with it */
                assert_int_equal(observer_deliv_set(o, NS_B, 4, (const uint32_t[2]){100000, 100000}), 0);
                observer_forget(o, NS_B, 4);
                assert_int_equal(observer_deliv_get(o, NS_B, 4, &v), -ENOENT);
                assert_int_equal(observer_delivs(o), 0);
        }
        observer_free(fake);
        observer_free(real);
}

/* The kernel's observer (skipped where it does not load): a tick that asks for a few devices looks
 * them up one by one and reads no map whole (a batch walks all its buckets, whatever it holds);
 * past 64 keys of a map, one whole read serves the rest; status's count reads every map whole. */
static void test_reads_what_is_asked(void **state) {
        Observer *o;
        char *why = NULL;
        struct observer_dev v;
        struct observer_near near;
        size_t devs, drops, nears;
        uint64_t t = 1000;

        (void) state;
        if (observer_new(&o, &why) < 0) {
                free(why);
                skip();
        }
        assert_int_equal(observer_bench_fill(o, NS_B, 100), 0);
        assert_int_equal(observer_read(o, t, 0), 0);
        assert_int_equal(observer_get(o, NS_B, 7, &v), 0);
        assert_int_equal(v.tcp_sent, 7);
        assert_int_equal(observer_drops(o, NS_B, 7, 2), 1);
        assert_int_equal(observer_drops(o, NS_B, 7, 3), 0);
        assert_int_equal(observer_near_get(o, NS_B, 7, &near), -ENOENT);
        assert_int_equal(observer_get(o, NS_B, 101, &v), -ENOENT);
        assert_int_equal(observer_whole_reads(o), 0);
        /* a key asked for again in the same snapshot is not looked up again, whether the kernel
         * had it or not (a guard's counter and its `per` are of one device) */
        uint64_t lookups = observer_lookups(o);
        assert_int_equal(observer_get(o, NS_B, 101, &v), -ENOENT);
        assert_int_equal(observer_get(o, NS_B, 7, &v), 0);
        assert_int_equal(observer_near_get(o, NS_B, 7, &near), -ENOENT);
        assert_int_equal(observer_lookups(o), lookups);
        assert_int_equal(observer_read(o, ++t, 0), 0);
        assert_int_equal(observer_get(o, NS_B, 101, &v), -ENOENT); /* a new snapshot asks again */
        assert_int_equal(observer_lookups(o), lookups + 1);
        /* a threshold set is what the kernel has; a device forgotten is gone from both */
        assert_int_equal(observer_near_set(o, NS_B, 7, (const uint32_t[4]){70000, 0, 0, 0}), 0);
        assert_int_equal(observer_read(o, ++t, 0), 0);
        assert_int_equal(observer_near_get(o, NS_B, 7, &near), 0);
        assert_int_equal(near.len[0], 70000);
        observer_forget(o, NS_B, 7);
        assert_int_equal(observer_read(o, ++t, 0), 0);
        assert_int_equal(observer_get(o, NS_B, 7, &v), -ENOENT);
        assert_int_equal(observer_drops(o, NS_B, 7, 2), 0);
        assert_int_equal(observer_whole_reads(o), 1); /* forget read the drops whole: all of 7's go */
        /* at scale: the 65th device asked for reads the map whole, once */
        assert_int_equal(observer_read(o, ++t, 0), 0);
        for (int i = 1; i <= 100; i++)
                if (i != 7) {
                        assert_int_equal(observer_get(o, NS_B, i, &v), 0);
                        assert_int_equal(v.tcp_sent, (uint64_t) i);
                }
        assert_int_equal(observer_whole_reads(o), 2);
        assert_int_equal(observer_get(o, NS_B, 101, &v), -ENOENT); /* (known absent before) */
        /* told that many will be asked for: the first reads the map whole, no lookup one by one */
        lookups = observer_lookups(o);
        assert_int_equal(observer_read_for(o, ++t, 0, 100), 0);
        assert_int_equal(observer_get(o, NS_B, 5, &v), 0);
        assert_int_equal(v.tcp_sent, 5);
        assert_int_equal(observer_whole_reads(o), 3);
        assert_int_equal(observer_lookups(o), lookups);
        assert_int_equal(observer_read_for(o, ++t, 0, 2), 0); /* a few: one by one */
        assert_int_equal(observer_get(o, NS_B, 5, &v), 0);
        assert_int_equal(observer_whole_reads(o), 3);
        assert_int_equal(observer_lookups(o), lookups + 1);
        /* the object counts every device of the host too, whatever traffic runs beside the test
         * (the integration tests' while the package builds): those of NS_B are ours alone */
        observer_entries(o, &devs, &drops, &nears);
        assert_true(devs >= 99);
        assert_true(drops >= 99);
        assert_int_equal(nears, 0);

        /* thresholds set are the kernel's alone until asked for (ten thousand windows in probation
         * kept a copy each): counted all the same, read back from the kernel */
        static const uint32_t len[4] = {70000, 0, 0, 0};
        size_t bytes = observer_snapshot_bytes(o);
        for (int i = 1; i <= 100; i++)
                assert_int_equal(observer_near_set(o, NS_B, i, len), 0);
        assert_int_equal(observer_snapshot_bytes(o), bytes);
        observer_entries(o, &devs, &drops, &nears);
        assert_int_equal(nears, 100);
        assert_int_equal(observer_snapshot_bytes(o), bytes); /* counting kept nothing */
        assert_int_equal(observer_read(o, ++t, 0), 0);
        assert_int_equal(observer_near_get(o, NS_B, 5, &near), 0);
        assert_int_equal(near.len[0], 70000);
        assert_int_equal(near.count[0], 0);
        /* past a few, the map is read whole into this snapshot: one set after that is in it, for
         * the snapshot asks the kernel no more */
        for (int i = 1; i <= 100; i++)
                assert_int_equal(observer_near_get(o, NS_B, i, &near), 0);
        assert_int_equal(observer_near_set(o, NS_B, 200, len), 0);
        assert_int_equal(observer_near_get(o, NS_B, 200, &near), 0);
        assert_int_equal(near.len[0], 70000);
        for (int i = 1; i <= 100; i++)
                observer_near_clear(o, NS_B, i);
        observer_near_clear(o, NS_B, 200);
        observer_entries(o, &devs, &drops, &nears);
        assert_int_equal(nears, 0);
        free(why);
        observer_free(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_attribution),
                cmocka_unit_test(test_guards_on_the_device_alone),
                cmocka_unit_test(test_unknown_reason_is_inactive),
                cmocka_unit_test(test_snapshot_shrinks),
                cmocka_unit_test(test_near_the_step),
                cmocka_unit_test(test_deliveries),
                cmocka_unit_test(test_reads_what_is_asked),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
