/* test-control.c — the Control the unit tests and fuzzers read is the daemon's: a set of bigtcpd's
 * own namespace alone (netns_set_new_alone()) around the harness's engine and sync, whose events,
 * readiness, devices by name, policy and host are that one namespace's, and which opens no
 * descriptor of its own. */
#include <dirent.h>

#include "engine-harness.h"

/* every veth (not lo) at 150000 */
static const char P_VETH[] = "version: 1\n"
                             "policies:\n"
                             "  - name: pods\n"
                             "    match: { kind: [veth] }\n"
                             "    ipv4: { gso-max-size: 150000, gro-max-size: 150000 }\n";

typedef struct Seen {
        unsigned added, settled;
} Seen;

static void on_event(const Event *e, void *userdata) {
        Seen *s = userdata;
        s->added += e->type == EVENT_ADDED;
        s->settled += e->type == EVENT_SETTLED;
}

static void test_one_namespace(void **state) {
        Harness *h = h_new(P_VETH);
        Control *c = &h->control;
        _cleanup_(freep) Device **all = NULL;
        ControlCounts counts;
        Seen seen = {};
        size_t n = 0;

        h_link_add(h, 2, "eth0");
        unsigned watch = event_watch_add(control_events(c), on_event, &seen);
        assert_true(watch > 0);
        assert_false(control_ready(c));
        assert_string_equal(control_state(c), "starting");

        h_start(h);
        h_answer_all(h);
        /* the engine's device events and its settling reach the daemon's events, through the set */
        assert_int_equal(seen.added, 2);
        assert_int_equal(seen.settled, 1);
        assert_true(control_ready(c));
        assert_string_equal(control_state(c), "ready");

        /* bigtcpd's own namespace is the set's first: a bare name and "host/" find its devices */
        assert_ptr_equal(control_find_device(c, "eth0"), h_dev(h, 2));
        assert_ptr_equal(control_find_device(c, "host/eth0"), h_dev(h, 2));
        assert_null(control_find_device(c, "cni-1/eth0"));
        assert_ptr_equal(control_engine_of(c, h_dev(h, 2)), h->e);
        assert_ptr_equal(control_base(c), h->base);
        assert_ptr_equal(control_policy(c), h->e->policy);
        assert_string_equal(control_host(c).hostname, "host");

        control_counts(c, &counts);
        assert_int_equal(counts.total, 2);
        assert_int_equal(counts.state[DEVICE_PROBATION], 1);
        assert_int_equal(control_sorted_devices(c, &all, &n), 0);
        assert_int_equal(n, 2);
        assert_ptr_equal(all[0], h_dev(h, 1));
        assert_ptr_equal(all[1], h_dev(h, 2));

        event_watch_remove(control_events(c), watch);
        h_free(h);
}

static size_t count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        size_t n = 0;

        assert_non_null(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* A fuzzer makes one for every input: no descriptor, where a set that names a directory to find
 * namespaces in holds one of the daemon's own namespace (to come back to from another). */
static void test_alone_opens_nothing(void **state) {
        Harness *h = h_new(P_VETH);
        char *const dirs[] = {h->runtime_dir};
        size_t before;

        netns_set_free(h->set);
        before = count_fds();
        assert_int_equal(netns_set_new(h->base,
                                       &(NetnsConfig){.clock = &h->clock,
                                                      .dirs = dirs,
                                                      .n_dirs = 1,
                                                      .runtime_dir = h->runtime_dir},
                                       h->own, &h->set),
                         0);
        assert_int_equal(count_fds(), before + 1);
        netns_set_free(h->set);
        assert_int_equal(count_fds(), before);

        assert_int_equal(netns_set_new_alone(h->base, h->own, &h->set), 0);
        assert_int_equal(count_fds(), before);
        h->control.netns = h->set;
        h_start(h);
        h_answer_all(h);
        assert_true(control_ready(&h->control));
        h_free(h);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_one_namespace, h_teardown),
                cmocka_unit_test_teardown(test_alone_opens_nothing, h_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
