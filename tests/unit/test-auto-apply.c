/* test-auto-apply.c — the engine's side of `auto` on the harness's fake clock, writer and kernel:
 * an idle device waits, twice as long each time, and is never written; a canary that leaves this
 * host out begins no search. The harness counts no packets (its engine has no packet sockets):
 * every watch a search asks for fails as "counting is off", which the engine takes as a watch
 * that saw nothing (auto-apply.c), so only what an idle device does is seen here. */
#include "engine-harness.h"

#include "auto-apply.h"
#include "policy.h"

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

/* The searches' timer fires (the fake clock is the test's to move first). */
static void h_fire_auto(Harness *h) {
        assert_non_null(h->e->auto_timer);
        event_active(h->e->auto_timer, EV_TIMEOUT, 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
}

static const AutoSearch *search_of(Harness *h, int ifindex) {
        Device *d = h_dev(h, ifindex);
        assert_non_null(d->autosize);
        assert_int_equal(d->autosize->sizes, SIZE_BIT_GSO);
        return &d->autosize->size[0];
}

/* No traffic fills 65536: the device stays there, unwritten, watched again after the window, then
 * twice as long each time, and its timer is due exactly then. */
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
                assert_int_equal(auto_apply_due(h_dev(h, 2)), s->retry_usec);
                /* before its time: nothing changes */
                h_advance(h, wait - 1);
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
                h_advance(h, s->retry_usec - h->real);
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

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_idle_device_waits_longer_each_time, h_teardown),
                cmocka_unit_test_teardown(test_idle_wait_is_bounded, h_teardown),
                cmocka_unit_test_teardown(test_canary_cohort, h_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
