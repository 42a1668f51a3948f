/* test-rollout.c — staged rollouts: rollout_check()'s verdicts and the table's update across a policy
 * change, pure; then through the engine (engine-harness.h): max-parallel holds while devices take
 * turns, a new device skips it, and a rollback halts the rest at once until a retry or other sizes. */
#include "control.h"
#include "engine-harness.h"
#include "reconcile.h"

#define GUARDED                                                                                             \
        "rollback:\n"                                                                                       \
        "  window: 10s\n"                                                                                   \
        "  interval: 1s\n"                                                                                  \
        "  guards:\n"                                                                                       \
        "    - counter: Ip.InHdrErrors\n"                                                                   \
        "      max-increase: 100\n"
#define POLICY(name, glob, sizes, extra)                                                                    \
        "  - name: " name "\n"                                                                              \
        "    match:\n"                                                                                      \
        "      name: [\"" glob "\"]\n"                                                                      \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: " sizes "\n"                                                                   \
        "      gro-max-size: " sizes "\n" extra
#define ROLLOUT(n) "    rollout:\n      max-parallel: " #n "\n"
#define FILE_OF(...) "version: 1\n" GUARDED "policies:\n" __VA_ARGS__

static const char P_FABRIC2[] = FILE_OF(POLICY("fabric", "eth*", "185000", ROLLOUT(2)));
static const char P_FABRIC2_150[] = FILE_OF(POLICY("fabric", "eth*", "150000", ROLLOUT(2)));
static const char P_FABRIC3[] = FILE_OF(POLICY("fabric", "eth*", "185000", ROLLOUT(3)));
static const char P_UNMATCHED[] = FILE_OF(POLICY("fabric", "nothing*", "185000", ROLLOUT(2)));

static const Sizes BIG = H_SIZES(185000, 185000, 65536, 65536);

/* ---- rollout_check(), pure ---- */

typedef struct CheckCase {
        const char *what;
        unsigned max_parallel;
        unsigned others_active; /* other devices holding a slot */
        bool holds_slot;        /* the device asking holds one already */
        bool waits;             /* … or has its place in line */
        bool other_rollout;     /* … or holds a slot of another policy's rollout */
        bool halted;
        RolloutVerdict verdict;
} CheckCase;

static const CheckCase check_cases[] = {
        {"every slot free", 2, 0, false, false, false, false, ROLLOUT_GO},
        {"one of two free", 2, 1, false, false, false, false, ROLLOUT_GO},
        {"full", 2, 2, false, false, false, false, ROLLOUT_NO_SLOT},
        {"full, waiting in line", 1, 1, false, true, false, false, ROLLOUT_NO_SLOT},
        {"full, and it holds one of the slots", 2, 1, true, false, false, false, ROLLOUT_GO},
        {"full, it holds a slot of another rollout", 1, 1, false, false, true, false, ROLLOUT_NO_SLOT},
        {"free, it holds a slot of another rollout", 1, 0, false, false, true, false, ROLLOUT_GO},
        {"halted with slots free", 2, 0, false, false, false, true, ROLLOUT_HALTED},
        {"halted, and it holds a slot", 2, 1, true, false, false, true, ROLLOUT_HALTED},
};

static void test_check(void **state) {
        static const char yaml[] =
                FILE_OF(POLICY("a", "eth*", "185000", ROLLOUT(9)) POLICY("b", "lan*", "150000", ROLLOUT(9)));
        Device others[8] = {}, d = {.ifindex = 100, .ifname = "eth100"},
               halter = {.ifname = "x"};
        const CheckCase *c = *state;
        RolloutTable t = {};
        PolicySet *set = h_parse_policy(yaml);

        assert_int_equal(rollout_table_update(&t, set), 0);
        assert_int_equal(t.n, 2);
        Rollout *r = rollout_find(&t, "a"), *other = rollout_find(&t, "b");
        assert_non_null(r);
        assert_non_null(other);
        r->max_parallel = c->max_parallel;
        for (unsigned i = 0; i < c->others_active; i++)
                rollout_take_slot(r, &others[i]);
        if (c->holds_slot)
                rollout_take_slot(r, &d);
        if (c->waits)
                rollout_wait(r, &d);
        if (c->other_rollout)
                rollout_take_slot(other, &d);
        if (c->halted)
                rollout_halt(r, &halter);

        assert_int_equal(rollout_check(r, &d), c->verdict);
        /* pure: asking changes nothing */
        assert_int_equal(r->active, c->others_active + c->holds_slot);
        assert_int_equal(r->waiting, c->waits);
        assert_int_equal(rollout_check(r, &d), c->verdict);
        /* who would go next: the first in line, when a slot is free and it is not halted */
        if (c->waits)
                assert_ptr_equal(rollout_next(r), c->verdict == ROLLOUT_GO ? &d : NULL);

        rollout_table_done(&t);
        policy_set_free(set);
}

/* rollout_leave(): a slot freed or a place in line given up; the counts follow. */
static void test_leave(void **state) {
        static const char yaml[] = FILE_OF(POLICY("a", "eth*", "185000", ROLLOUT(1)));
        Device a = {.ifindex = 1}, b = {.ifindex = 2}, c = {.ifindex = 3};
        RolloutTable t = {};
        PolicySet *set = h_parse_policy(yaml);

        assert_int_equal(rollout_table_update(&t, set), 0);
        Rollout *r = rollout_find(&t, "a");
        rollout_take_slot(r, &a);
        rollout_wait(r, &b);
        rollout_wait(r, &c);
        rollout_wait(r, &b); /* already in line: keeps its place */
        assert_int_equal(r->active, 1);
        assert_int_equal(r->waiting, 2);
        assert_null(rollout_next(r)); /* full */

        assert_true(rollout_leave(&a)); /* a slot freed */
        assert_int_equal(device_rollout_get(&a)->phase, ROLLOUT_NONE);
        assert_null(device_rollout_get(&a)->of);
        assert_ptr_equal(rollout_next(r), &b); /* in the order they asked */
        rollout_take_slot(r, &b);
        assert_int_equal(r->waiting, 1);
        assert_false(rollout_leave(&c)); /* only a place in line */
        assert_int_equal(r->waiting, 0);
        assert_false(rollout_leave(&c)); /* nothing left to leave */
        assert_int_equal(r->active, 1);

        rollout_table_done(&t);
        assert_int_equal(device_rollout_get(&b)->phase, ROLLOUT_NONE); /* a rollout that goes detaches its devices */
        assert_null(device_rollout_get(&b)->of);
        policy_set_free(set);
}

/* ---- the table across a policy change ---- */

typedef struct UpdateCase {
        const char *what;
        const char *yaml; /* the new policy; the old one is fabric, max-parallel 2, 185000 */
        bool kept;        /* the rollout of "fabric" is the same object, with its slots and line */
        bool halted;
        unsigned max_parallel;
} UpdateCase;

static const UpdateCase update_cases[] = {
        {"the same policy", P_FABRIC2, true, true, 2},
        {"max-parallel changes, the sizes stay: still halted", P_FABRIC3, true, true, 3},
        {"only the match changes: still halted", FILE_OF(POLICY("fabric", "ens*", "185000", ROLLOUT(2))),
         true, true, 2},
        {"the sizes change: the halt ends, slots and line kept", P_FABRIC2_150, true, false, 2},
        {"a policy added before it: kept",
         FILE_OF(POLICY("first", "lan*", "100000", "") POLICY("fabric", "eth*", "185000", ROLLOUT(2))), true,
         true, 2},
        {"no rollout any more: gone", FILE_OF(POLICY("fabric", "eth*", "185000", "")), false, false, 0},
        {"renamed: gone", FILE_OF(POLICY("fabric2", "eth*", "185000", ROLLOUT(2))), false, false, 0},
        {"not for this host any more: gone",
         FILE_OF(POLICY("fabric", "eth*", "185000", ROLLOUT(2) "    hosts: [\"elsewhere\"]\n")), false,
         false, 0},
};

static void test_update(void **state) {
        const UpdateCase *c = *state;
        Device a = {.ifindex = 1, .ifname = "eth1"}, b = {.ifindex = 2}, w = {.ifindex = 3};
        RolloutTable t = {};
        PolicySet *old = h_parse_policy(P_FABRIC2), *set = h_parse_policy(c->yaml);

        assert_int_equal(rollout_table_update(&t, old), 0);
        Rollout *r = rollout_find(&t, "fabric");
        assert_non_null(r);
        rollout_take_slot(r, &a);
        rollout_take_slot(r, &b);
        rollout_wait(r, &w);
        rollout_halt(r, &a);

        assert_int_equal(rollout_table_update(&t, set), 0);
        Rollout *now = rollout_find(&t, "fabric");
        if (c->kept) {
                assert_ptr_equal(now, r);
                assert_int_equal(now->active, 2);
                assert_int_equal(now->waiting, 1);
                assert_ptr_equal(device_rollout_get(&w)->of, now);
                assert_int_equal(device_rollout_get(&w)->phase, ROLLOUT_WAITING);
                assert_int_equal(device_rollout_get(&a)->phase, ROLLOUT_ACTIVE);
                assert_int_equal(now->halted, c->halted);
                if (c->halted) {
                        assert_string_equal(now->halted_by, "eth1");
                        assert_int_equal(now->halted_by_ifindex, 1);
                } else
                        assert_null(now->halted_by);
                assert_int_equal(now->max_parallel, c->max_parallel);
                assert_int_equal(now->sizes_digest,
                                 policy_sizes_digest(&set->policies[set->n_policies - 1]));
        } else {
                assert_null(now);
                /* its devices are detached: no dangling pointer into a freed rollout */
                Device *all[] = {&a, &b, &w};
                for (size_t i = 0; i < ELEMENTSOF(all); i++) {
                        assert_null(device_rollout_get(all[i])->of);
                        assert_int_equal(device_rollout_get(all[i])->phase, ROLLOUT_NONE);
                }
                /* a renamed policy starts its own */
                Rollout *fresh = t.n > 0 ? t.items[0] : NULL;
                if (fresh) {
                        assert_int_equal(fresh->active, 0);
                        assert_false(fresh->halted);
                }
        }
        rollout_table_done(&t);
        policy_set_free(old);
        policy_set_free(set);
}

/* policy_sizes_digest(): what the halt compares. */
static void test_sizes_digest(void **state) {
        static const struct {
                const char *what;
                const char *a, *b;
                bool equal;
        } cases[] = {
                {"same sizes, other match and rollout", FILE_OF(POLICY("p", "eth*", "185000", ROLLOUT(2))),
                 FILE_OF(POLICY("q", "ens*", "185000", ROLLOUT(5))), true},
                {"other bytes", FILE_OF(POLICY("p", "eth*", "185000", "")),
                 FILE_OF(POLICY("p", "eth*", "150000", "")), false},
                {"max against a number", FILE_OF(POLICY("p", "eth*", "max", "")),
                 FILE_OF(POLICY("p", "eth*", "524280", "")), false},
                {"the same sizes for the other family", FILE_OF(POLICY("p", "eth*", "185000", "")),
                 "version: 1\npolicies:\n  - name: p\n    ipv4:\n      gso-max-size: 185000\n"
                 "      gro-max-size: 185000\n",
                 false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("case: %s\n", cases[i].what);
                PolicySet *a = h_parse_policy(cases[i].a), *b = h_parse_policy(cases[i].b);
                assert_int_equal(policy_sizes_digest(&a->policies[0]) ==
                                         policy_sizes_digest(&b->policies[0]),
                                 cases[i].equal);
                policy_set_free(a);
                policy_set_free(b);
        }
}

/* ---- through the engine ---- */

/* The most devices of the policy written (write in flight) or in probation at once, over the test. */
static unsigned max_busy;

static unsigned busy_now(Harness *h) {
        unsigned n = 0;
        Device *d;
        DEVICE_FOREACH(d, &h->e->devices, it)
        if (streq_ptr(d->match.policy_name, "fabric") && d->ifindex >= 10 && d->ifindex < 20 &&
            (d->probation || (d->write.phase == WRITE_SENT && write_cause_is_policy(d->write.cause))))
                n++;
        return n;
}

static void note_busy(Harness *h, const Request *r) {
        unsigned n = busy_now(h);
        if (n > max_busy)
                max_busy = n;
}

static void on_state(const Event *ev, void *userdata) {
        if (ev->type == EVENT_STATE)
                note_busy(userdata, NULL);
}

/* Six devices eth10…eth15 that existed, unmatched, for a while; then a reload matches them with
 * max-parallel 2 (issue 9, problem 3). */
static Harness *six_old_devices(void) {
        Harness *h = h_new(P_UNMATCHED);
        h_start(h);
        for (int i = 0; i < 6; i++) {
                char name[IFNAMSIZ];
                snprintf(name, sizeof(name), "eth%d", 10 + i);
                h_link_add(h, 10 + i, name);
        }
        h_answer_all(h);
        h_advance(h, NEW_DEVICE_USEC + USEC_PER_SEC);
        max_busy = 0;
        h->on_send = note_busy;
        assert_true(event_watch_add(&h->e->events, on_state, h) > 0);
        h_reload(h, P_FABRIC2);
        return h;
}

static unsigned count_state(Harness *h, DeviceState s, const char *reason) {
        unsigned n = 0;
        for (int i = 10; i < 16; i++)
                n += h_state(h, i) == s && (!reason || streq(h_pending_reason(h, i), reason));
        return n;
}

static void test_max_parallel(void **state) {
        Harness *h = six_old_devices();
        Rollout *r = rollout_find(&h->e->rollouts, "fabric");

        assert_int_equal(h_count_writes(h, 0, 0), 2);
        assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-slot"), 4);
        assert_int_equal(r->active, 2);
        assert_int_equal(r->waiting, 4);
        h_answer_all(h);
        assert_int_equal(count_state(h, DEVICE_PROBATION, NULL), 2);

        /* each window that passes hands its slot on: two at a time, three rounds */
        for (unsigned round = 1; round <= 3; round++) {
                size_t reqs = h->n_reqs;
                assert_int_equal(count_state(h, DEVICE_APPLIED, NULL), 2 * (round - 1));
                h_run(h, 9 * USEC_PER_SEC, USEC_PER_SEC);
                assert_int_equal(h_count_writes(h, 0, reqs), 0); /* nothing before a window ends */
                h_run(h, 1 * USEC_PER_SEC, USEC_PER_SEC);
                assert_int_equal(count_state(h, DEVICE_APPLIED, NULL), 2 * round);
                assert_int_equal(h_count_writes(h, 0, reqs), round < 3 ? 2 : 0);
                assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-slot"),
                                 round < 3 ? 4 - 2 * round : 0);
        }
        assert_int_equal(count_state(h, DEVICE_APPLIED, NULL), 6);
        assert_int_equal(r->active, 0);
        assert_int_equal(r->waiting, 0);
        assert_int_equal(max_busy, 2);
        for (int i = 10; i < 16; i++)
                assert_sizes_equal(h_link(h, i)->sizes, BIG);
        h->on_send = NULL;
        h_free(h);
}

static size_t count_writes_of(const Harness *h, uint32_t gso, size_t from, int except) {
        size_t n = 0;
        for (size_t i = from; i < h->n_reqs; i++)
                n += h->reqs[i].kind == REQUEST_WRITE && h->reqs[i].sizes.gso_max_size == gso &&
                     h->reqs[i].ifindex != except;
        return n;
}

/* Whatever ends a device's turn hands its slot to the first in line, at once. */
typedef enum TurnEnds {
        WINDOW_PASSES,
        DELETED,
        RENAMED_OUT,
        WRITE_REFUSED,
} TurnEnds;

typedef struct HandOnCase {
        const char *what;
        TurnEnds how;
} HandOnCase;

static const HandOnCase hand_on_cases[] = {
        {"its window passes", WINDOW_PASSES},
        {"it is deleted", DELETED},
        {"it is renamed out of the match", RENAMED_OUT},
        {"its write is refused", WRITE_REFUSED},
};

static void test_hand_on(void **state) {
        const HandOnCase *c = *state;
        Harness *h = six_old_devices();
        Rollout *r = rollout_find(&h->e->rollouts, "fabric");
        Device *first_in_line = TAILQ_FIRST(&r->waiting_list);
        int next = first_in_line->ifindex, ended = 0;

        for (int i = 10; i < 16 && !ended; i++)
                if (h_dev(h, i)->write.phase == WRITE_SENT)
                        ended = i;
        if (c->how == WRITE_REFUSED)
                for (Request *q; (q = h_next_request(h));)
                        h_answer(h, q->ifindex == ended ? -EOPNOTSUPP : 0);
        else
                while (h_next_request(h))
                        h_answer(h, 0);
        size_t reqs = h->n_reqs;
        switch (c->how) {
        case WINDOW_PASSES:
                /* both windows pass at the same tick: two hand-ons */
                h_run(h, 10 * USEC_PER_SEC, USEC_PER_SEC);
                break;
        case DELETED:
                h_link_del(h, ended);
                break;
        case RENAMED_OUT:
                h_link_rename(h, ended, "lan0");
                break;
        case WRITE_REFUSED:
                h_batch_end(h);
                assert_state(h_state(h, ended), DEVICE_FAILED);
                break;
        }
        assert_int_equal(h_count_writes(h, next, reqs), 1);
        assert_sizes_equal(h_last_write(h, next)->sizes, BIG);
        assert_int_equal(device_rollout_get(h_dev(h, next))->phase, ROLLOUT_ACTIVE);
        assert_int_equal(r->active, 2);
        assert_int_equal(r->waiting, c->how == WINDOW_PASSES ? 2 : 3);
        assert_int_equal(count_writes_of(h, 185000, reqs, 0), c->how == WINDOW_PASSES ? 2 : 1);
        h_answer_all(h);
        assert_true(max_busy <= 2);
        h->on_send = NULL;
        h_free(h);
}

/* Only a device that appeared moments ago, by an event, and has carried no traffic skips the bound. */
typedef enum Arrival {
        JUST_NOW,          /* an RTM_NEWLINK a moment ago */
        JUST_NOW_TRAFFIC,  /* … whose stats counted packets */
        A_WHILE_AGO,       /* appeared unmatched 6s ago, matched now by a rename */
        JUST_NOW_UNMATCHED /* appeared a moment ago unmatched, matched at once by a rename */
} Arrival;

typedef struct NewCase {
        const char *what;
        Arrival arrival;
        bool skips;
} NewCase;

static const NewCase new_cases[] = {
        {"appeared a moment ago, no traffic: written at once", JUST_NOW, true},
        {"appeared a moment ago, with traffic: waits", JUST_NOW_TRAFFIC, false},
        {"appeared unmatched 6s ago, matched now: waits", A_WHILE_AGO, false},
        {"appeared unmatched a moment ago, matched now: written at once", JUST_NOW_UNMATCHED, true},
};

static void test_new_device_skips(void **state) {
        const NewCase *c = *state;
        const struct rtnl_link_stats64 traffic = {.rx_packets = 10, .tx_packets = 10};
        Harness *h = six_old_devices();
        h_answer_all(h);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        assert_int_equal(busy_now(h), 2);
        size_t reqs = h->n_reqs;

        switch (c->arrival) {
        case JUST_NOW:
                h_link_add(h, 30, "eth30");
                break;
        case JUST_NOW_TRAFFIC:
                h->announce_stats = &traffic;
                h_link_add(h, 30, "eth30");
                h->announce_stats = NULL;
                break;
        case A_WHILE_AGO:
        case JUST_NOW_UNMATCHED:
                h_link_add(h, 30, "lan30");
                if (c->arrival == A_WHILE_AGO)
                        h_run(h, NEW_DEVICE_USEC + USEC_PER_SEC, USEC_PER_SEC);
                reqs = h->n_reqs;
                h_link_rename(h, 30, "eth30");
                break;
        }
        assert_int_equal(h_count_writes(h, 30, reqs), c->skips);
        if (c->skips) {
                h_answer_all(h);
                assert_state(h_state(h, 30), DEVICE_PROBATION);
                assert_cause(h_find_event(h, EVENT_WRITE, 30, 0)->cause, WRITE_CAUSE_NEW_DEVICE);
                assert_int_equal(device_rollout_get(h_dev(h, 30))->phase, ROLLOUT_NONE); /* it takes no one's slot */
        } else {
                assert_state(h_state(h, 30), DEVICE_PENDING);
                assert_string_equal(h_pending_reason(h, 30), "rollout-slot");
        }
        /* the old devices still take turns two at a time */
        assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-slot"), 4);
        assert_int_equal(h_count_writes(h, 0, reqs), c->skips);
        h->on_send = NULL;
        h_free(h);
}

/* A rollback halts the rollout at once: the devices already queued are pulled back, nothing more
 * is written with those sizes, it is said (EVENT_ROLLOUT, GetStatus); a retry of the device that
 * halted it, or other sizes, resume it. */
typedef enum Halter {
        GUARD_TRIPS,
        OPERATOR,
} Halter;

typedef enum Resume {
        RETRY_HALTER,      /* resumes */
        RETRY_OTHER,       /* a device that was not rolled back: nothing to retry, still halted */
        RELOAD_SAME_SIZES, /* max-parallel changed only: still halted */
        RELOAD_OTHER_SIZES /* resumes, with the new sizes */
} Resume;

typedef struct HaltCase {
        const char *what;
        Halter halter;
        Resume resume;
        bool resumes;
        uint32_t resumed_size;
} HaltCase;

static const HaltCase halt_cases[] = {
        {"a guard trips; a retry of it resumes", GUARD_TRIPS, RETRY_HALTER, true, 185000},
        {"an operator's rollback; a retry of it resumes", OPERATOR, RETRY_HALTER, true, 185000},
        {"a guard trips; a retry of another device does not resume", GUARD_TRIPS, RETRY_OTHER, false, 0},
        {"an operator's rollback; a reload with the same sizes does not resume", OPERATOR, RELOAD_SAME_SIZES,
         false, 0},
        {"a guard trips; a reload with other sizes resumes with them", GUARD_TRIPS, RELOAD_OTHER_SIZES, true,
         150000},
};

static void test_halt(void **state) {
        const HaltCase *c = *state;
        Harness *h = six_old_devices();
        Rollout *r = rollout_find(&h->e->rollouts, "fabric");
        h_answer_all(h);
        h_run(h, 3 * USEC_PER_SEC, USEC_PER_SEC);

        /* the two in probation: one will be rolled back, the other leaves the match meanwhile */
        int busy[2], n = 0;
        for (int i = 10; i < 16 && n < 2; i++)
                if (h_state(h, i) == DEVICE_PROBATION)
                        busy[n++] = i;
        assert_int_equal(n, 2);
        int halter = busy[0], leaver = busy[1];

        /* Requests in flight fill the writer's ring (a burst of `show`): what is queued now stays
         * queued. The one leaving frees its slot; the next in line takes it and is queued. */
        Device *lo = h_dev(h, 1);
        while (writer_inflight(h->e->writer) < WRITER_INFLIGHT_MAX - 1)
                assert_int_equal(writer_request_read(h->e->writer, lo, NULL, NULL, NULL), 0);
        h_link_rename(h, leaver, "lan0");
        int queued = 0;
        for (int i = 10; i < 16; i++)
                if (h_dev(h, i)->write.phase == WRITE_QUEUED && i != leaver)
                        queued = i;
        assert_int_not_equal(queued, 0);
        assert_int_equal(device_rollout_get(h_dev(h, queued))->phase, ROLLOUT_ACTIVE);
        assert_string_equal(h_pending_reason(h, queued), "queued");

        /* the rollback */
        size_t mark = h->n_ev, reqs = h->n_reqs;
        if (c->halter == GUARD_TRIPS) {
                h->ip_in_hdr_errors += 1000;
                h_write_snmp(h);
                h_advance(h, USEC_PER_SEC);
                probation_tick(h->e->probation);
        } else {
                assert_int_equal(apply_rollback(h->e, h_dev(h, halter), NULL), 0);
                h_flush(h);
        }
        /* at once: halted, said, and the queued device pulled back */
        assert_true(r->halted);
        assert_string_equal(r->halted_by, h_dev(h, halter)->ifname);
        const Recorded *ro = h_find_event(h, EVENT_ROLLOUT, halter, mark);
        assert_non_null(ro);
        assert_string_equal(ro->policy, "fabric");
        assert_int_equal(h_dev(h, queued)->write.phase, WRITE_IDLE);
        assert_string_equal(h_pending_reason(h, queued), "rollout-halted");
        assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-halted"), 4);
        /* a device that appears now, new as it is, waits too */
        h_link_add(h, 30, "eth30");
        assert_int_equal(h_count_writes(h, 30, reqs), 0);
        assert_string_equal(h_pending_reason(h, 30), "rollout-halted");
        h_link_del(h, 30);
        json_object *st = control_status_json(&h->control);
        json_object *ros = json_object_object_get(st, "rollouts"), *ro0 = json_object_array_get_idx(ros, 0);
        assert_int_equal(json_object_array_length(ros), 1);
        assert_true(json_object_get_boolean(json_object_object_get(ro0, "halted")));
        assert_string_equal(json_object_get_string(json_object_object_get(ro0, "halted_by")),
                            h_dev(h, halter)->ifname);
        assert_int_equal(json_object_get_int(json_object_object_get(ro0, "waiting")), 4);
        /* the halt and its counts together: its rollback's write is not answered yet, and the
         * device that halted it is counted rolled back all the same (issue 34: a GetStatus said
         * halted with nothing rolled back) */
        assert_int_equal(h_dev(h, halter)->write.phase != WRITE_IDLE, true);
        json_object *counts = json_object_object_get(st, "devices");
        assert_int_equal(json_object_get_int(json_object_object_get(counts, "rolled-back")), 1);
        assert_int_equal(json_object_get_int(json_object_object_get(counts, "probation")), 0);
        assert_int_equal(json_object_get_int(json_object_object_get(counts, "pending")),
                         count_state(h, DEVICE_PENDING, NULL) - 1);
        json_object_put(st);

        /* the ring empties, the rollback and the restore go out, time passes: nothing of the
         * policy's sizes is written any more */
        h_answer_all(h);
        h_run(h, 30 * USEC_PER_SEC, USEC_PER_SEC);
        h_dump(h);
        h_answer_all(h);
        assert_int_equal(count_writes_of(h, 185000, reqs, 0), 0);
        assert_state(h_state(h, halter), DEVICE_ROLLED_BACK);
        assert_state(h_state(h, leaver), DEVICE_UNMANAGED);
        assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-halted"), 4);

        reqs = h->n_reqs;
        switch (c->resume) {
        case RETRY_HALTER:
                assert_int_equal(apply_retry(h->e, h_dev(h, halter)), 0);
                h_flush(h);
                break;
        case RETRY_OTHER:
                assert_int_equal(apply_retry(h->e, h_dev(h, queued)), -EALREADY);
                h_flush(h);
                break;
        case RELOAD_SAME_SIZES:
                h_reload(h, FILE_OF(POLICY("fabric", "eth*", "185000", ROLLOUT(3))));
                break;
        case RELOAD_OTHER_SIZES:
                h_reload(h, P_FABRIC2_150);
                break;
        }
        h_answer_all(h);
        if (!c->resumes) {
                h_run(h, 30 * USEC_PER_SEC, USEC_PER_SEC);
                assert_int_equal(h_count_writes(h, 0, reqs), 0);
                assert_true(r->halted);
                assert_int_equal(count_state(h, DEVICE_PENDING, "rollout-halted"), 4);
        } else {
                assert_false(r->halted);
                /* two at a time again, the halter among them when it was retried */
                assert_int_equal(count_writes_of(h, c->resumed_size, reqs, 0), 2);
                max_busy = 0;
                h_run(h, 40 * USEC_PER_SEC, USEC_PER_SEC);
                assert_true(max_busy <= 2);
                for (int i = 10; i < 16; i++)
                        if (i != leaver)
                                assert_int_equal(h_link(h, i)->sizes.gso_max_size, c->resumed_size);
        }
        h->on_send = NULL;
        h_free(h);
}

int main(void) {
        struct CMUnitTest tests[64];
        char *names[64] = {};
        size_t n = 0;
        int r;

#define ADD_TEST(fn) tests[n++] = (struct CMUnitTest) cmocka_unit_test_teardown(fn, h_teardown)
#define ADD_CASES(group, fn, table)                                                                         \
        for (size_t i = 0; i < ELEMENTSOF(table); i++) {                                                    \
                assert_true(asprintf(&names[n], "%s: %s", group, table[i].what) > 0);                       \
                tests[n] = (struct CMUnitTest){.name = names[n],                                            \
                                               .test_func = fn,                                             \
                                               .teardown_func = h_teardown,                                 \
                                               .initial_state = (void *) &table[i]};                        \
                n++;                                                                                        \
        }
        ADD_CASES("rollout_check", test_check, check_cases);
        ADD_TEST(test_leave);
        ADD_CASES("policy change", test_update, update_cases);
        ADD_TEST(test_sizes_digest);
        ADD_TEST(test_max_parallel);
        ADD_CASES("slot handed on when", test_hand_on, hand_on_cases);
        ADD_CASES("new device", test_new_device_skips, new_cases);
        ADD_CASES("halt", test_halt, halt_cases);
        assert_true(n <= ELEMENTSOF(tests));

        r = _cmocka_run_group_tests("test-rollout", tests, n, NULL, NULL);
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        return r;
}
