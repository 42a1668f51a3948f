/* test-auto-queue.c — the searches of `auto` by due time (auto-queue.c): the heap's order, moves
 * and removals on its own; then through the engine (engine-harness.h, fake clock, counting off so
 * that every search waits as if idle): the timer takes only the devices due, a device that goes
 * away or loses its search leaves the queue, and idle waits are spread by the device. */
#include "auto-apply.h"
#include "auto-queue.h"
#include "engine-harness.h"

#define WINDOW_SEC 2
#define AUTO_POLICY(match)                                                                                  \
        "version: 1\n"                                                                                      \
        "rollback:\n"                                                                                       \
        "  window: 2s\n"                                                                                    \
        "  interval: 1s\n"                                                                                  \
        "policies:\n"                                                                                       \
        "  - name: fabric\n"                                                                                \
        "    match:\n"                                                                                      \
        "      name: [\"" match "\"]\n"                                                                     \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: auto\n"
#define FIXED_POLICY                                                                                        \
        "version: 1\n"                                                                                      \
        "policies:\n"                                                                                       \
        "  - name: fabric\n"                                                                                \
        "    match:\n"                                                                                      \
        "      name: [\"eth*\"]\n"                                                                          \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: 65536\n"

/* ---- the heap itself ---- */

static void assert_heap(const AutoQueue *q) {
        for (size_t i = 0; i < q->n; i++) {
                assert_int_equal(q->items[i].device->auto_slot, i + 1);
                if (i > 0)
                        assert_true(q->items[(i - 1) / 2].due <= q->items[i].due);
        }
}

/* Taken in order of due time, whatever the order they came in, moved, or left. */
static void test_order(void **state) {
        enum { N = 200 };
        static Device devs[N];
        AutoQueue q = {};
        uint64_t due, last = 0;
        Device *d;

        (void) state;
        memset(devs, 0, sizeof(devs));
        assert_null(auto_queue_first(&q, &due));
        for (unsigned i = 0; i < N; i++)
                assert_int_equal(auto_queue_set(&q, &devs[i], (i * 7919u) % 1000), 0);
        assert_int_equal(q.n, N);
        assert_heap(&q);
        /* moved earlier, later, to the same time; one set twice is there once */
        assert_int_equal(auto_queue_set(&q, &devs[10], 0), 0);
        assert_int_equal(auto_queue_set(&q, &devs[0], 5000), 0);
        assert_int_equal(auto_queue_set(&q, &devs[20], (20 * 7919u) % 1000), 0);
        assert_int_equal(q.n, N);
        assert_heap(&q);
        assert_ptr_equal(auto_queue_first(&q, &due), &devs[10]);
        assert_int_equal(due, 0);
        /* left: from the middle, never due, and one not in it at all */
        auto_queue_remove(&q, &devs[100]);
        assert_int_equal(devs[100].auto_slot, 0);
        assert_int_equal(auto_queue_set(&q, &devs[101], UINT64_MAX), 0);
        assert_int_equal(devs[101].auto_slot, 0);
        auto_queue_remove(&q, &devs[100]);
        auto_queue_remove(&q, NULL);
        assert_int_equal(q.n, N - 2);
        assert_heap(&q);

        for (size_t k = 0; (d = auto_queue_first(&q, &due)); k++) {
                assert_true(due >= last);
                assert_true(d != &devs[100] && d != &devs[101]);
                last = due;
                auto_queue_remove(&q, d);
                assert_heap(&q);
                if (k == N - 3)
                        assert_ptr_equal(d, &devs[0]); /* the latest */
        }
        assert_int_equal(q.n, 0);
        auto_queue_done(&q);
}

/* ---- through the engine ---- */

static uint64_t wait_of(Harness *h, int ifindex) {
        Device *d = h_dev(h, ifindex);
        assert_non_null(d);
        assert_non_null(d->autosize);
        return auto_device_search(d->autosize, 0)->idle_wait_usec;
}

static AutoPhase phase_of(Harness *h, int ifindex) {
        return auto_device_search(h_dev(h, ifindex)->autosize, 0)->phase;
}

/* The auto timer fires as the event loop would run it, at the fake clock's time. */
static void fire_auto_timer(Harness *h) {
        assert_non_null(h->e->auto_timer);
        event_active(h->e->auto_timer, EV_TIMEOUT, 1);
        assert_int_equal(event_base_loop(h->base, EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
}

/* n devices eth0… (ifindex 10…): at once, or the next one `gap` after each */
static Harness *started_with(int n, uint64_t gap) {
        Harness *h = h_new(AUTO_POLICY("eth*"));
        h_start(h);
        h_answer_all(h);
        for (int i = 0; i < n; i++) {
                char name[IFNAMSIZ];
                snprintf(name, sizeof(name), "eth%d", i);
                if (i > 0)
                        h_advance(h, gap);
                h_link_add(h, 10 + i, name);
                h_answer_all(h);
        }
        return h;
}

/* With nothing counted every search is idle, each in the queue at its wait's end; the timer takes
 * the first one due, and only it: the others' waits are untouched. Then the next, and so on. */
static void test_due_in_order(void **state) {
        Harness *h = started_with(4, USEC_PER_SEC / 2);
        const uint64_t window = WINDOW_SEC * USEC_PER_SEC;
        uint64_t due;

        (void) state;
        assert_int_equal(h->e->auto_queue.n, 4);
        for (int i = 0; i < 4; i++) {
                assert_state(h_state(h, 10 + i), DEVICE_APPLIED);
                assert_int_equal(phase_of(h, 10 + i), AUTO_IDLE);
                assert_int_equal(wait_of(h, 10 + i), window);
        }
        assert_true(evtimer_pending(h->e->auto_timer, NULL));

        /* before the first is due: nothing taken */
        Device *first = auto_queue_first(&h->e->auto_queue, &due);
        assert_non_null(first);
        assert_true(due > h->real);
        h_advance(h, due - h->real - 1);
        fire_auto_timer(h);
        for (int i = 0; i < 4; i++)
                assert_int_equal(wait_of(h, 10 + i), window);

        /* each device in turn: the one due watched again (and idle again, its wait doubled), the
         * others untouched */
        bool done[4] = {};
        for (int k = 0; k < 4; k++) {
                first = auto_queue_first(&h->e->auto_queue, &due);
                assert_non_null(first);
                int idx = first->ifindex - 10;
                assert_false(done[idx]);
                h_advance(h, due > h->real ? due - h->real : 0);
                fire_auto_timer(h);
                done[idx] = true;
                for (int i = 0; i < 4; i++)
                        assert_int_equal(wait_of(h, 10 + i), done[i] ? 2 * window : window);
        }
        assert_int_equal(h->e->auto_queue.n, 4);
        h_free(h);
}

/* The devices of a burst go idle at the same moment, but are due apart: each one's wait plus up
 * to 1/8 of it, by device. */
static void test_spread(void **state) {
        enum { N = 32 };
        Harness *h = started_with(N, 0);
        const uint64_t window = WINDOW_SEC * USEC_PER_SEC;
        uint64_t lo = UINT64_MAX, hi = 0;

        (void) state;
        for (int i = 0; i < N; i++) {
                Device *d = h_dev(h, 10 + i);
                uint64_t due = auto_apply_due(d), retry = auto_device_search(d->autosize, 0)->retry_usec;
                assert_int_equal(retry, h->real + window); /* all at the same moment */
                assert_true(due >= retry);
                assert_true(due <= retry + window / 8);
                lo = due < lo ? due : lo;
                hi = due > hi ? due : hi;
        }
        assert_true(hi - lo > window / 16); /* spread over the most of it */
        h_free(h);
}

/* A device that goes leaves the queue (the timer after it touches no freed device: ASan); one
 * whose policy no longer sets `auto`, or that no policy matches any more, loses its search and
 * leaves it; the last one gone, the timer is off. */
static void test_leaves(void **state) {
        Harness *h = started_with(3, 0);
        uint64_t due;

        (void) state;
        assert_int_equal(h->e->auto_queue.n, 3);
        h_link_del(h, 11);
        assert_int_equal(h->e->auto_queue.n, 2);
        for (size_t i = 0; i < h->e->auto_queue.n; i++)
                assert_int_not_equal(h->e->auto_queue.items[i].device->ifindex, 11);
        h_advance(h, 3600 * USEC_PER_SEC);
        fire_auto_timer(h);
        assert_int_equal(h->e->auto_queue.n, 2);

        h_reload(h, FIXED_POLICY);
        h_answer_all(h);
        assert_null(h_dev(h, 10)->autosize);
        assert_int_equal(h_dev(h, 10)->auto_slot, 0);
        assert_int_equal(h->e->auto_queue.n, 0);
        assert_null(auto_queue_first(&h->e->auto_queue, &due));
        assert_false(evtimer_pending(h->e->auto_timer, NULL));

        /* `auto` again: queued again */
        h_reload(h, AUTO_POLICY("eth*"));
        h_answer_all(h);
        assert_int_equal(h->e->auto_queue.n, 2);
        assert_true(evtimer_pending(h->e->auto_timer, NULL));

        /* a policy that matches none of them: the searches end too (status counts none) */
        h_reload(h, AUTO_POLICY("nothing*"));
        h_answer_all(h);
        assert_null(h_dev(h, 10)->autosize);
        assert_int_equal(h_dev(h, 10)->auto_slot, 0);
        assert_int_equal(h->e->auto_queue.n, 0);
        assert_false(evtimer_pending(h->e->auto_timer, NULL));
        h_free(h);
}

/* An aged ceiling tried once more is not due again until it trips again (auto_search_tick()
 * does nothing for it): due, the timer would fire at once without end. */
static void test_reprobe_not_due(void **state) {
        Device d = {.ifindex = 7};
        _cleanup_(auto_device_freep) AutoDevice *a = auto_device_new(1u << 0);

        (void) state;
        assert_non_null(a);
        auto_device_bounds(a, 0)->ceiling_age_usec = 3600 * USEC_PER_SEC;
        *auto_device_search(a, 0) = (AutoSearch){.phase = AUTO_SETTLED, .proven = 250000, .ceiling = 262144,
                                                   .ceiling_usec = 1000 * USEC_PER_SEC};
        d.autosize = a;
        assert_int_equal(auto_apply_due(&d), 1000 * USEC_PER_SEC + auto_device_bounds(a, 0)->ceiling_age_usec);
        auto_device_search(a, 0)->reprobe = true;
        auto_device_search(a, 0)->phase = AUTO_WATCHING;
        assert_int_equal(auto_apply_due(&d), UINT64_MAX);
        a->pending = true;
        assert_int_equal(auto_apply_due(&d), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_order),
                cmocka_unit_test_teardown(test_due_in_order, h_teardown),
                cmocka_unit_test_teardown(test_spread, h_teardown),
                cmocka_unit_test_teardown(test_leaves, h_teardown),
                cmocka_unit_test(test_reprobe_not_due),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
