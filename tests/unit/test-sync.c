/* test-sync.c — lost events (ENOBUFS on a netlink socket): the Sync dumps every link again, what
 * the lost events would have said comes from that dump, and the engine converges on it. Through
 * the engine harness: the fake kernel changes without telling the engine (the events the overrun
 * cost), then sync_netlink_ops.lost() is called, as netlink.c does on ENOBUFS. */
#include "engine-harness.h"

static const char P_ETH[] = "version: 1\n"
                            "rollback:\n"
                            "  window: 10s\n"
                            "  interval: 1s\n"
                            "  guards:\n"
                            "    - counter: Ip.InHdrErrors\n"
                            "      max-increase: 100\n"
                            "policies:\n"
                            "  - name: fabric\n"
                            "    match:\n"
                            "      name: [\"eth*\"]\n"
                            "    ipv6:\n"
                            "      gso-max-size: 185000\n"
                            "      gro-max-size: 185000\n"
                            "    ipv4:\n"
                            "      gso-max-size: 185000\n"
                            "      gro-max-size: 185000\n";

static const Sizes BIG = H_SIZES(185000, 185000, 185000, 185000);

/* When, during the re-dump it causes, a second overrun comes (or none). */
typedef enum Again {
        ONCE,             /* one overrun, while nothing else runs */
        AGAIN_IN_LINKS,   /* another during the link dump it started */
        AGAIN_IN_ROUTES,  /* another during the route dump that follows */
        ACK_LOST_DONE,    /* on the write socket: a write's ack lost, the kernel did the write */
        ACK_LOST_UNDONE,  /* … the kernel did not */
} Again;

typedef struct LostCase {
        const char *what;
        Again again;
        unsigned link_dumps; /* the link dumps it takes */
} LostCase;

static const LostCase lost_cases[] = {
        {"one overrun while idle", ONCE, 1},
        {"another overrun during the link dump", AGAIN_IN_LINKS, 2},
        {"another overrun during the route dump", AGAIN_IN_ROUTES, 2},
        {"on the write socket, an ack lost, the write done", ACK_LOST_DONE, 1},
        {"on the write socket, an ack lost, the write not done", ACK_LOST_UNDONE, 1},
};

/* The kernel answers the dumps the Sync asks for, one after another, until none runs; a dump that
 * is owed starts from the loop (an event made active). `again` plays the overrun on the way. */
static void answer_dumps(Harness *h, Again again, unsigned *ret_link_dumps) {
        bool lost_again = again != AGAIN_IN_LINKS && again != AGAIN_IN_ROUTES;

        *ret_link_dumps = 0;
        for (unsigned rounds = 0;; rounds++) {
                assert_true(rounds < 20);
                int type = sync_dump_running(h->s);
                if (type == 0) {
                        /* what finish() left owed, from the loop */
                        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                        if (sync_dump_running(h->s) == 0)
                                return;
                        continue;
                }
                if (type == RTM_GETLINK) {
                        (*ret_link_dumps)++;
                        for (size_t i = 0; i < h->n_links; i++)
                                if (h->links[i].present)
                                        h_feed(h, RTM_NEWLINK, &h->links[i], NULL, NETLINK_DUMP, 0);
                }
                if (!lost_again && ((again == AGAIN_IN_LINKS && type == RTM_GETLINK) ||
                                    (again == AGAIN_IN_ROUTES && type == RTM_GETROUTE))) {
                        sync_netlink_ops.lost(h->s);
                        lost_again = true;
                }
                sync_netlink_ops.dump_done(h->s, type, 0, false);
                h_batch_end(h);
                h_answer_all(h); /* the writes the dump's end sent */
        }
}

static void test_lost_events(void **state) {
        const LostCase *c = *state;
        bool ack_lost = c->again == ACK_LOST_DONE || c->again == ACK_LOST_UNDONE;
        unsigned link_dumps;

        Harness *h = h_new(P_ETH);
        h_link_add(h, 2, "eth0");
        FakeLink *lan3 = h_link_add(h, 3, "lan3"); /* matches nothing until it is renamed */
        if (!ack_lost)
                h_link_add(h, 4, "eth4");
        h_start(h);
        if (!ack_lost)
                h_answer_all(h);
        assert_int_equal(sync_dump_running(h->s), 0);
        size_t mark = h->n_ev, reqs = h->n_reqs;

        if (ack_lost) {
                /* eth0's write is out; the kernel took it (or not), its ack is what was lost */
                assert_int_equal(h_unanswered(h), 1);
                Request *r = h_next_request(h);
                assert_int_equal(r->ifindex, 2);
                if (c->again == ACK_LOST_DONE)
                        h_link(h, 2)->sizes = r->sizes;
                r->answered = true;
                h->next_answer++;
        } else {
                assert_sizes_equal(h_link(h, 2)->sizes, BIG);
                assert_state(h_state(h, 2), DEVICE_PROBATION);
        }

        /* What the lost events would have said: eth1 came, lan3 is now eth3, eth4 went. */
        h->started = false; /* no announcement */
        h_link_add(h, 5, "eth1");
        h->started = true;
        snprintf(lan3->name, sizeof(lan3->name), "eth3");
        if (!ack_lost)
                h_link(h, 4)->present = false;

        if (ack_lost)
                sync_netlink_ops.acks_lost(h->s);
        sync_netlink_ops.lost(h->s);
        /* the overrun asked for a dump at once; nothing of the lost events is known yet */
        assert_int_equal(sync_dump_running(h->s), RTM_GETLINK);
        assert_null(h_dev(h, 5));
        assert_int_equal(h_count_writes(h, 3, reqs), 0);

        answer_dumps(h, c->again, &link_dumps);
        assert_int_equal(link_dumps, c->link_dumps);
        h_answer_all(h);

        /* converged on what the kernel has */
        assert_non_null(h_dev(h, 5));
        assert_sizes_equal(h_link(h, 5)->sizes, BIG);
        assert_state(h_state(h, 5), DEVICE_PROBATION);
        assert_string_equal(h_dev(h, 3)->ifname, "eth3");
        assert_sizes_equal(h_link(h, 3)->sizes, BIG);
        assert_state(h_state(h, 3), DEVICE_PROBATION);
        assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        assert_true(h_dev(h, 2)->record.has_original);
        assert_sizes_equal(h_dev(h, 2)->record.original, H_LEGACY);
        /* eth0 written again only when the kernel had not done it */
        assert_int_equal(h_count_writes(h, 2, reqs), c->again == ACK_LOST_UNDONE ? 1 : 0);
        if (!ack_lost) {
                assert_null(h_dev(h, 4));
                assert_int_equal(h_count_events(h, EVENT_REMOVED, 4, mark), 1);
        }
        /* nothing more to do: no dump owed, no request out */
        assert_int_equal(sync_dump_running(h->s), 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        assert_int_equal(sync_dump_running(h->s), 0);
        assert_int_equal(h_unanswered(h), 0);
        h_free(h);
}

int main(void) {
        struct CMUnitTest tests[ELEMENTSOF(lost_cases)];
        char *names[ELEMENTSOF(lost_cases)] = {};
        int r;

        for (size_t i = 0; i < ELEMENTSOF(lost_cases); i++) {
                assert_true(asprintf(&names[i], "lost events: %s", lost_cases[i].what) > 0);
                tests[i] = (struct CMUnitTest){.name = names[i],
                                               .test_func = test_lost_events,
                                               .teardown_func = h_teardown,
                                               .initial_state = (void *) &lost_cases[i]};
        }
        r = _cmocka_run_group_tests("test-sync", tests, ELEMENTSOF(tests), NULL, NULL);
        for (size_t i = 0; i < ELEMENTSOF(lost_cases); i++)
                free(names[i]);
        return r;
}
