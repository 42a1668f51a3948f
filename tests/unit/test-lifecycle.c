/* test-lifecycle.c — the device lifecycle (device-lifecycle.c) and the decisions that drive it (apply.c),
 * through the engine with a fake clock and a fake kernel (engine-harness.h): the transitions one
 * scenario at a time, and what each step must end — a write, a probation window, a rollout slot. */
#include <fcntl.h>
#include <sys/socket.h>

#include "control.h"
#include "engine-harness.h"

/* ---- policies ---- */

#define GUARDED                                                                                             \
        "rollback:\n"                                                                                       \
        "  window: 10s\n"                                                                                   \
        "  interval: 1s\n"                                                                                  \
        "  guards:\n"                                                                                       \
        "    - counter: link.tx_errors\n"                                                                   \
        "      max-increase: 0\n"                                                                           \
        "    - counter: Ip.InHdrErrors\n"                                                                   \
        "      max-increase: 100\n"
/* GUARDED's window with another guard list */
#define LOOSE                                                                                               \
        "rollback:\n"                                                                                       \
        "  window: 10s\n"                                                                                   \
        "  interval: 1s\n"                                                                                  \
        "  guards:\n"                                                                                       \
        "    - counter: link.tx_errors\n"                                                                   \
        "      max-increase: 1000\n"
#define UNGUARDED                                                                                           \
        "rollback:\n"                                                                                       \
        "  guards: []\n"
#define FABRIC_MATCH(glob, rollback, sizes)                                                                 \
        "version: 1\n" rollback "policies:\n"                                                               \
        "  - name: fabric\n"                                                                                \
        "    match:\n"                                                                                      \
        "      name: [\"" glob "\"]\n" sizes
#define FABRIC(rollback, sizes) FABRIC_MATCH("eth*", rollback, sizes)
#define ALL4(v)                                                                                             \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: " v "\n"                                                                       \
        "      gro-max-size: " v "\n"                                                                       \
        "    ipv4:\n"                                                                                       \
        "      gso-max-size: " v "\n"                                                                       \
        "      gro-max-size: " v "\n"
#define V6(v)                                                                                               \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: " v "\n"                                                                       \
        "      gro-max-size: " v "\n"
#define V4(v)                                                                                               \
        "    ipv4:\n"                                                                                       \
        "      gso-max-size: " v "\n"                                                                       \
        "      gro-max-size: " v "\n"
#define ROLLOUT(n) "    rollout:\n      max-parallel: " #n "\n"

static const char P_ALL[] = FABRIC(GUARDED, ALL4("185000"));
static const char P_ALL_150[] = FABRIC(GUARDED, ALL4("150000"));
static const char P_LEGACY[] = FABRIC(GUARDED, ALL4("legacy"));
static const char P_NOGUARD[] = FABRIC(UNGUARDED, ALL4("185000"));
static const char P_ALL_LOOSE[] = FABRIC(LOOSE, ALL4("185000"));
static const char P_GSO_150[] = FABRIC(GUARDED, "    ipv6:\n      gso-max-size: 150000\n");
static const char P_V6[] = FABRIC(GUARDED, V6("185000"));
static const char P_V4ONLY[] = FABRIC(GUARDED, V4("185000"));
static const char P_V6_ROLLOUT1[] = FABRIC(GUARDED, V6("185000") ROLLOUT(1));
static const char P_V6_ROLLOUT1_ETH0[] = FABRIC_MATCH("eth0", GUARDED, V6("185000") ROLLOUT(1));
static const char P_NONE[] = "version: 1\n"
                             "policies:\n"
                             "  - name: other\n"
                             "    match:\n"
                             "      name: [\"nomatch*\"]\n" V6("185000");

/* a macro, not a const Sizes: the static tables below take it as an initializer (clang refuses a
 * const object there) */
#define BIG H_SIZES(185000, 185000, 185000, 185000)

/* ---- the transition table itself ---- */

static void test_transition_allowed(void **state) {
        static const struct {
                DeviceState from, to;
                bool allowed;
        } cases[] = {
                /* staying is always allowed */
                {DEVICE_UNMANAGED, DEVICE_UNMANAGED, true},
                {DEVICE_PROBATION, DEVICE_PROBATION, true},
                /* probation and failure come from a write, never from an unmanaged device */
                {DEVICE_UNMANAGED, DEVICE_PROBATION, false},
                {DEVICE_UNMANAGED, DEVICE_FAILED, false},
                {DEVICE_UNMANAGED, DEVICE_ROLLED_BACK, false},
                {DEVICE_APPLIED, DEVICE_FAILED, false},
                {DEVICE_PROBATION, DEVICE_FAILED, false},
                {DEVICE_ROLLED_BACK, DEVICE_PROBATION, false},
                {DEVICE_UNSUPPORTED, DEVICE_PROBATION, false},
                {DEVICE_UNSUPPORTED, DEVICE_ROLLED_BACK, false},
                /* the main line */
                {DEVICE_UNMANAGED, DEVICE_PENDING, true},
                {DEVICE_PENDING, DEVICE_PROBATION, true},
                {DEVICE_PROBATION, DEVICE_APPLIED, true},
                {DEVICE_PENDING, DEVICE_FAILED, true},
                {DEVICE_PENDING, DEVICE_ROLLED_BACK, true},
                /* out of range */
                {_DEVICE_STATE_MAX, DEVICE_PENDING, false},
                {DEVICE_PENDING, _DEVICE_STATE_INVALID, false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("case: %s → %s\n", device_state_to_string(cases[i].from) ?: "?",
                              device_state_to_string(cases[i].to) ?: "?");
                assert_int_equal(lifecycle_transition_allowed(cases[i].from, cases[i].to), cases[i].allowed);
        }
}

/* ---- scenarios, as steps ---- */

typedef enum Op {
        OP_END,
        OP_ADD,         /* link `arg` with ifindex n, IPv4 sizes */
        OP_ADD_NOV4,    /* … on a kernel without the IPv4 sizes */
        OP_START,       /* the first sync */
        OP_ANSWER,      /* the kernel answers everything */
        OP_REFUSE,      /* … the next write with -n (what is before it answered) */
        OP_RUN,         /* n seconds pass, in ticks of 1s */
        OP_RELOAD,      /* policy `arg` */
        OP_RENAME,      /* device n is renamed to `arg` */
        OP_RENAME_BACK, /* … and, in the same message, someone put its sizes back to 65536 */
        OP_OUTSIDE,     /* someone else sets all four sizes to n */
        OP_DUMP,        /* every link read again (the verify timer) */
        OP_ROLLBACK,    /* an operator's rollback; it returns n */
        OP_RETRY,       /* an operator's retry; it returns n */
        OP_TRIP,        /* Ip.InHdrErrors rises by 1000 */
        OP_NOSAVE,      /* the runtime directory goes away */
} Op;

typedef struct Step {
        Op op;
        const char *arg;
        int n;
} Step;

/* The device is 2 unless a step says otherwise. */
/* clang-format off */
#define ADD(name) {OP_ADD, name, 2}
#define ADD_NOV4(name) {OP_ADD_NOV4, name, 2}
#define ADD_NOV4_AT(name, i) {OP_ADD_NOV4, name, i}
#define START {OP_START, NULL, 0}
#define ANSWER {OP_ANSWER, NULL, 0}
#define REFUSE(e) {OP_REFUSE, NULL, e}
#define RUN(sec) {OP_RUN, NULL, sec}
#define RELOAD(p) {OP_RELOAD, p, 0}
#define RENAME(name) {OP_RENAME, name, 2}
#define RENAME_AT(name, i) {OP_RENAME, name, i}
#define RENAME_BACK(name) {OP_RENAME_BACK, name, 2}
#define OUTSIDE(v) {OP_OUTSIDE, NULL, v}
#define DUMP {OP_DUMP, NULL, 0}
#define ROLLBACK(rc) {OP_ROLLBACK, NULL, rc}
#define RETRY(rc) {OP_RETRY, NULL, rc}
#define TRIP {OP_TRIP, NULL, 0}
#define NOSAVE {OP_NOSAVE, NULL, 0}
/* clang-format on */

typedef struct PathCase {
        const char *what;
        const char *policy;
        Step steps[16];
        int ifindex;      /* the device whose path is checked; 0: 2 */
        const char *path; /* the states it entered, in order */
        Sizes sizes;      /* what the kernel holds at the end ({}: not checked) */
} PathCase;

static void refuse_next_write(Harness *h, int error) {
        for (Request *r; (r = h_next_request(h));) {
                if (r->kind == REQUEST_WRITE) {
                        h_answer(h, error);
                        break;
                }
                h_answer_kernel(h);
        }
        h_batch_end(h);
}

static void run_step(Harness *h, const Step *s) {
        switch (s->op) {
        case OP_ADD:
        case OP_ADD_NOV4:
                h_link_add_full(h, s->n, s->arg, "veth", s->op == OP_ADD);
                break;
        case OP_START:
                h_start(h);
                break;
        case OP_ANSWER:
                h_answer_all(h);
                break;
        case OP_REFUSE:
                refuse_next_write(h, -s->n);
                break;
        case OP_RUN:
                h_run(h, (uint64_t) s->n * USEC_PER_SEC, USEC_PER_SEC);
                break;
        case OP_RELOAD:
                h_reload(h, s->arg);
                break;
        case OP_RENAME:
                h_link_rename(h, s->n, s->arg);
                break;
        case OP_RENAME_BACK:
                h_link_set_sizes(h, s->n, H_LEGACY);
                h_link_rename(h, s->n, s->arg);
                break;
        case OP_OUTSIDE:
                h_link_set_sizes(
                        h, 2, H_SIZES((uint32_t) s->n, (uint32_t) s->n, (uint32_t) s->n, (uint32_t) s->n));
                break;
        case OP_DUMP:
                h_dump(h);
                break;
        case OP_ROLLBACK:
                assert_int_equal(apply_rollback(h->e, h_dev(h, 2), NULL), s->n);
                h_flush(h);
                break;
        case OP_RETRY:
                assert_int_equal(apply_retry(h->e, h_dev(h, 2)), s->n);
                h_flush(h);
                break;
        case OP_TRIP:
                h->ip_in_hdr_errors += 1000;
                h_write_snmp(h);
                break;
        case OP_NOSAVE:
                h_break_runtime_dir(h);
                break;
        case OP_END:
                break;
        }
}

/* clang-format off */
static const PathCase path_cases[] = {
        {"new device: pending, probation, applied when the window passes", P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11)},
         .path = "pending probation applied", .sizes = BIG},
        {"at the policy's sizes already: applied, nothing written", P_LEGACY,
         {ADD("eth0"), START, ANSWER},
         .path = "applied", .sizes = H_LEGACY},
        {"a policy without guards: applied at the ack", P_NOGUARD,
         {ADD("eth0"), START, ANSWER},
         .path = "pending applied", .sizes = BIG},
        {"refused: failed, and neither a re-read nor time tries it again", P_ALL,
         {ADD("eth0"), START, REFUSE(EINVAL), DUMP, ANSWER, RUN(3)},
         .path = "pending failed", .sizes = H_LEGACY},
        {"refused, then the policy asks for what it holds: applied", P_ALL,
         {ADD("eth0"), START, REFUSE(EINVAL), RELOAD(P_LEGACY), ANSWER},
         .path = "pending failed applied", .sizes = H_LEGACY},
        {"refused, renamed out of the match: unmanaged", P_ALL,
         {ADD("eth0"), START, REFUSE(EINVAL), RENAME("lan0"), ANSWER},
         .path = "pending failed unmanaged", .sizes = H_LEGACY},
        {"refused, retried: written again", P_ALL,
         {ADD("eth0"), START, REFUSE(EINVAL), RETRY(0), ANSWER, RUN(11)},
         .path = "pending failed pending probation applied", .sizes = BIG},
        {"renamed out in probation: restored, unmanaged at the ack", P_ALL,
         {ADD("eth0"), START, ANSWER, RENAME("lan0"), ANSWER},
         .path = "pending probation pending unmanaged", .sizes = H_LEGACY},
        {"renamed out while its write is in flight: restored at the ack, never in probation", P_ALL,
         {ADD("eth0"), START, RENAME("lan0"), ANSWER},
         .path = "pending unmanaged", .sizes = H_LEGACY},
        {"an operator's rollback while its first write is in flight: the write lands, then the rollback", P_ALL,
         {ADD("eth0"), START, ROLLBACK(0), ANSWER, RUN(11)},
         .path = "pending rolled-back", .sizes = H_LEGACY},
        {"renamed out in probation, its sizes put back by someone else: unmanaged at once", P_ALL,
         {ADD("eth0"), START, ANSWER, RENAME_BACK("lan0"), ANSWER},
         .path = "pending probation unmanaged", .sizes = H_LEGACY},
        {"a guard trips: the rollback write, then rolled-back", P_ALL,
         {ADD("eth0"), START, ANSWER, TRIP, RUN(2), DUMP, ANSWER, RUN(11)},
         .path = "pending probation pending rolled-back", .sizes = H_LEGACY},
        {"rolled back, retried: written again", P_ALL,
         {ADD("eth0"), START, ANSWER, TRIP, RUN(2), RETRY(0), ANSWER},
         .path = "pending probation pending rolled-back pending probation", .sizes = BIG},
        {"rolled back, then the policy asks for what it holds: applied", P_ALL,
         {ADD("eth0"), START, ANSWER, TRIP, RUN(2), RELOAD(P_LEGACY), ANSWER},
         .path = "pending probation pending rolled-back applied", .sizes = H_LEGACY},
        {"rolled back, renamed out: unmanaged", P_ALL,
         {ADD("eth0"), START, ANSWER, TRIP, RUN(2), RENAME("lan0"), ANSWER},
         .path = "pending probation pending rolled-back unmanaged", .sizes = H_LEGACY},
        {"applied, the policy changes: written again", P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), RELOAD(P_ALL_150), ANSWER, RUN(11)},
         .path = "pending probation applied pending probation applied",
         .sizes = H_SIZES(150000, 150000, 150000, 150000)},
        {"applied, an operator's rollback: back to the originals and held", P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), ROLLBACK(0), ANSWER, DUMP, ANSWER},
         .path = "pending probation applied pending rolled-back", .sizes = H_LEGACY},
        {"applied, put back to its originals by someone else and the policy now asks for them; an "
         "operator's rollback would change nothing: it says so and holds nothing",
         P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), OUTSIDE(65536), RELOAD(P_LEGACY),
          ANSWER, ROLLBACK(-EALREADY), ANSWER},
         .path = "pending probation applied", .sizes = H_LEGACY},
        {"in probation twice in a row, the second to its originals: a rollback would change nothing", P_ALL,
         {ADD("eth0"), START, ANSWER, RELOAD(P_LEGACY), ANSWER, ROLLBACK(-EALREADY), ANSWER},
         .path = "pending probation pending probation", .sizes = H_LEGACY},
        {"applied without a write, renamed out: unmanaged", P_LEGACY,
         {ADD("eth0"), START, ANSWER, RENAME("lan0"), ANSWER},
         .path = "applied unmanaged", .sizes = H_LEGACY},
        {"only IPv4 sizes, the kernel has none: unsupported", P_V4ONLY,
         {ADD_NOV4("eth0"), START, ANSWER},
         .path = "unsupported"},
        {"unsupported, renamed out: unmanaged", P_V4ONLY,
         {ADD_NOV4("eth0"), START, ANSWER, RENAME("lan0"), ANSWER},
         .path = "unsupported unmanaged"},
        {"unsupported, a policy it can take: written", P_V4ONLY,
         {ADD_NOV4("eth0"), START, ANSWER, RELOAD(P_V6), ANSWER, RUN(11)},
         .path = "unsupported pending probation applied"},
        {"unsupported, a policy at its sizes: applied", P_V4ONLY,
         {ADD_NOV4("eth0"), START, ANSWER, RELOAD(P_LEGACY), ANSWER},
         .path = "unsupported applied"},
        {"applied without a write, then a policy it cannot take: unsupported", P_LEGACY,
         {ADD_NOV4("eth0"), START, ANSWER, RELOAD(P_V4ONLY), ANSWER},
         .path = "applied unsupported"},
        {"in probation, then a policy it cannot take: restored first, then unsupported", P_V6,
         {ADD_NOV4("eth0"), START, ANSWER, RELOAD(P_V4ONLY), ANSWER},
         .path = "pending probation pending unmanaged unsupported"},
        {"waiting for a rollout slot, then a policy it cannot take: unsupported", P_V6_ROLLOUT1_ETH0,
         {ADD_NOV4_AT("eth0", 2), ADD_NOV4_AT("eth1", 3), START, ANSWER, RELOAD(P_V6_ROLLOUT1), ANSWER,
          RELOAD(P_V4ONLY), ANSWER},
         .ifindex = 3, .path = "pending unsupported"},
        {"waiting for a rollout slot, renamed out: unmanaged", P_V6_ROLLOUT1_ETH0,
         {ADD_NOV4_AT("eth0", 2), ADD_NOV4_AT("eth1", 3), START, ANSWER, RELOAD(P_V6_ROLLOUT1), ANSWER,
          RENAME_AT("lan1", 3), ANSWER},
         .ifindex = 3, .path = "pending unmanaged"},
        {"the state file cannot be written: failed before any write; then a policy it cannot take", P_V6,
         {ADD_NOV4("eth0"), NOSAVE, START, ANSWER, RELOAD(P_V4ONLY), ANSWER},
         .path = "pending failed unsupported"},
        {"applied, someone else changed its sizes, the put-back refused: a rollback would change nothing",
         P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), OUTSIDE(65536), DUMP, REFUSE(EBUSY), ROLLBACK(-EALREADY), ANSWER},
         .path = "pending probation applied pending failed", .sizes = H_LEGACY},
        {"rolled back, its write refused, then someone else writes its originals: held there", P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), ROLLBACK(0), REFUSE(EBUSY), OUTSIDE(65536), DUMP, ANSWER},
         .path = "pending probation applied pending failed rolled-back", .sizes = H_LEGACY},
        {"applied, a later write refused, an operator's rollback: back to the originals", P_ALL,
         {ADD("eth0"), START, ANSWER, RUN(11), RELOAD(P_ALL_150), REFUSE(EINVAL),
          ROLLBACK(0), ANSWER},
         .path = "pending probation applied pending failed pending rolled-back", .sizes = H_LEGACY},
};
/* clang-format on */

static void test_path(void **state) {
        const PathCase *c = *state;
        int ifindex = c->ifindex ?: 2;
        Harness *h = h_new(c->policy);
        for (const Step *s = c->steps; s->op != OP_END; s++)
                run_step(h, s);
        assert_path(h, ifindex, 0, c->path);
        if (c->sizes.gso_max_size)
                assert_sizes_equal(h_link(h, ifindex)->sizes, c->sizes);
        /* a write's record lives as long as the write: none once it is over */
        if (h_dev(h, ifindex)->write.phase == WRITE_IDLE)
                assert_null(h_dev(h, ifindex)->write.on);
        else
                assert_non_null(h_dev(h, ifindex)->write.on);
        if (h_dev(h, ifindex)->life.state == DEVICE_UNMANAGED || h_dev(h, ifindex)->life.state == DEVICE_UNSUPPORTED) {
                /* nothing in progress is left on a device bigtcpd does not manage */
                assert_null(h_dev(h, ifindex)->probation);
                assert_int_equal(device_rollout_get(h_dev(h, ifindex))->phase, ROLLOUT_NONE);
                assert_int_equal(h_dev(h, ifindex)->write.phase, WRITE_IDLE);
        }
        h_free(h);
}

/* ---- one step at a time, what each must do ---- */

static Harness *started_with(const char *policy, int ifindex, const char *name) {
        Harness *h = h_new(policy);
        h_link_add(h, ifindex, name);
        h_start(h);
        return h;
}

/* new device → pending → (ack) probation → (window passes) applied, found by the first dump or
 * announced by an event. */
typedef struct NewDeviceCase {
        const char *what;
        bool by_event;
        WriteCause cause;
} NewDeviceCase;

static const NewDeviceCase new_device_cases[] = {
        {"found by the first dump", false, WRITE_CAUSE_POLICY},
        {"announced by an event after the start", true, WRITE_CAUSE_NEW_DEVICE},
};

static void test_new_device(void **state) {
        const NewDeviceCase *c = *state;

        Harness *h = h_new(P_ALL);
        if (c->by_event)
                h_start(h);
        h_link_add(h, 2, "eth0");
        if (!c->by_event)
                h_start(h);

        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_PENDING);
        assert_string_equal(h_pending_reason(h, 2), "in-flight");
        assert_int_equal(h_count_writes(h, 2, 0), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, BIG);
        assert_true(d->record.has_original);
        assert_sizes_equal(d->record.original, H_LEGACY);
        assert_non_null(d->probation); /* baselines are taken before the write */

        h_answer_all(h);
        assert_state(d->life.state, DEVICE_PROBATION);
        const Recorded *w = h_find_event(h, EVENT_WRITE, 2, 0);
        assert_non_null(w);
        assert_cause(w->cause, c->cause);
        assert_int_equal(w->error, 0);
        assert_sizes_equal(w->from, H_LEGACY);
        assert_sizes_equal(w->to, BIG);
        assert_int_equal(probation_left_usec(h->e->probation, d), 10 * USEC_PER_SEC);

        h_run(h, 9 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(d->life.state, DEVICE_PROBATION); /* not a tick early */
        h_run(h, 1 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(d->life.state, DEVICE_APPLIED);
        assert_null(d->probation);
        assert_int_equal(probation_count(h->e->probation), 0);
        assert_path(h, 2, 0, "pending probation applied");
        assert_int_equal(h_count_writes(h, 2, 0), 1);
        h_free(h);
}

/* A refused write: failed, the errno and extack kept, and not tried again until the desire changes,
 * a reload or a retry. */
typedef enum AfterRefusal {
        NOTHING_NEW_EVENT, /* a link event that changes nothing */
        REREAD,            /* every link read again */
        TIME_PASSES,
        READ_DEVICE,    /* show */
        DESIRE_CHANGES, /* a reload to other sizes */
        SAME_POLICY,    /* a reload of the same policy */
        OPERATOR_RETRY,
} AfterRefusal;

typedef struct RefusedCase {
        const char *what;
        AfterRefusal after;
        bool written;
        WriteCause cause;
        Sizes sizes;
} RefusedCase;

static const RefusedCase refused_cases[] = {
        {"a link event that changes nothing", NOTHING_NEW_EVENT, false, 0, {}},
        {"a re-read of every link", REREAD, false, 0, {}},
        {"a minute passes", TIME_PASSES, false, 0, {}},
        {"the device read for show", READ_DEVICE, false, 0, {}},
        {"the policy asks for other sizes", DESIRE_CHANGES, true, WRITE_CAUSE_POLICY,
         H_SIZES(150000, 150000, 150000, 150000)},
        {"a reload of the same policy", SAME_POLICY, true, WRITE_CAUSE_POLICY, BIG},
        {"an operator's retry", OPERATOR_RETRY, true, WRITE_CAUSE_RETRY, BIG},
};

static void test_refused(void **state) {
        const RefusedCase *c = *state;

        Harness *h = started_with(P_ALL, 2, "eth0");
        refuse_next_write(h, -EINVAL);
        h_answer_all(h);

        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_FAILED);
        assert_int_equal(device_history_get(d)->last_errno, -EINVAL);
        assert_string_equal(device_history_get(d)->last_error, "fake extack");
        assert_null(d->probation);
        assert_null(d->write.on);
        const Recorded *w = h_find_event(h, EVENT_WRITE, 2, 0);
        assert_non_null(w);
        assert_int_equal(w->error, -EINVAL);
        size_t mark = h->n_reqs;

        switch (c->after) {
        case NOTHING_NEW_EVENT:
                h_feed(h, RTM_NEWLINK, h_link(h, 2), NULL, NETLINK_EVENT, 0);
                h_batch_end(h);
                break;
        case REREAD:
                h_dump(h);
                break;
        case TIME_PASSES:
                h_run(h, 60 * USEC_PER_SEC, USEC_PER_SEC);
                break;
        case READ_DEVICE:
                h_read(h, 2);
                break;
        case DESIRE_CHANGES:
                h_reload(h, P_ALL_150);
                break;
        case SAME_POLICY:
                h_reload(h, P_ALL);
                break;
        case OPERATOR_RETRY:
                assert_int_equal(apply_retry(h->e, d), 0);
                h_flush(h);
                break;
        }
        assert_int_equal(h_count_writes(h, 2, mark), c->written ? 1 : 0);
        if (c->written) {
                assert_sizes_equal(h_last_write(h, 2)->sizes, c->sizes);
                h_answer_all(h);
                assert_cause(h_find_event(h, EVENT_WRITE, 2, 0)->cause, c->cause);
                assert_state(d->life.state, DEVICE_PROBATION);
                assert_int_equal(device_history_get(d)->last_errno, 0);
        } else {
                h_answer_all(h);
                assert_state(d->life.state, DEVICE_FAILED);
        }
        h_free(h);
}

/* Leaving the match in probation ends everything at once — the window, the rollout slot — and
 * gives the originals back; the device ends unmanaged with no window left, and a namespace-wide
 * rise afterwards trips nothing, neither it nor a device written later (issue 9, problem 1). */
#define EDGE                                                                                                \
        "  - name: edge\n"                                                                                  \
        "    match:\n"                                                                                      \
        "      name: [\"eth9\"]\n" ALL4("185000")
static const char P_LEAVE_START[] = FABRIC_MATCH("eth0", GUARDED, ALL4("185000") ROLLOUT(1)) EDGE;
static const char P_LEAVE_BOTH[] = FABRIC_MATCH("eth[01]", GUARDED, ALL4("185000") ROLLOUT(1)) EDGE;
static const char P_LEAVE_ETH1[] = FABRIC_MATCH("eth1", GUARDED, ALL4("185000") ROLLOUT(1)) EDGE;

typedef struct LeaveMatchInProbationCase {
        const char *what;
        bool rename;
} LeaveMatchInProbationCase;

static const LeaveMatchInProbationCase leave_match_in_probation_cases[] = {
        {"renamed out of the match", true},
        {"a reload whose policy leaves it out", false},
};

static void test_leave_match_in_probation(void **state) {
        const LeaveMatchInProbationCase *c = *state;

        /* eth0 holds the one slot, eth1 waits for it (both existed before the start) */
        Harness *h = h_new(P_LEAVE_START);
        h_link_add(h, 2, "eth0");
        h_link_add(h, 3, "eth1");
        h_start(h);
        h_answer_all(h);
        h_reload(h, P_LEAVE_BOTH);
        h_answer_all(h);
        Device *d = h_dev(h, 2), *other = h_dev(h, 3);
        Rollout *r = rollout_find(&h->e->rollouts, "fabric");
        assert_non_null(r);
        assert_state(d->life.state, DEVICE_PROBATION);
        assert_int_equal(device_rollout_get(d)->phase, ROLLOUT_ACTIVE);
        assert_state(other->life.state, DEVICE_PENDING);
        assert_string_equal(h_pending_reason(h, 3), "rollout-slot");
        h_run(h, 3 * USEC_PER_SEC, USEC_PER_SEC);
        size_t mark = h->n_ev, reqs = h->n_reqs;

        if (c->rename)
                h_link_rename(h, 2, "lan0");
        else
                h_reload(h, P_LEAVE_ETH1);

        /* at once: the window and the slot are gone, the originals are on their way */
        assert_state(d->life.state, DEVICE_PENDING);
        assert_null(d->probation);
        assert_int_equal(device_rollout_get(d)->phase, ROLLOUT_NONE);
        assert_null(device_rollout_get(d)->of);
        const Request *w = h_last_write(h, 2);
        assert_true(w >= &h->reqs[reqs]);
        assert_sizes_equal(w->sizes, H_LEGACY);
        /* … and the slot went to the one that waited */
        assert_int_equal(h_count_writes(h, 3, reqs), 1);
        assert_int_equal(device_rollout_get(other)->phase, ROLLOUT_ACTIVE);
        assert_int_equal(r->active, 1);

        h_answer_all(h);
        assert_state(d->life.state, DEVICE_UNMANAGED);
        assert_path(h, 2, mark, "pending unmanaged");
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_RESTORE);
        assert_false(d->record.has_original);
        assert_null(d->probation);
        assert_sizes_equal(h_link(h, 2)->sizes, H_LEGACY);
        json_object *j = control_device_json(&h->control, d);
        assert_false(json_object_object_get_ex(j, "probation_left_usec", NULL));
        json_object_put(j);

        /* a namespace-wide rise within the window it had, then a new device: neither the one that
         * left nor the new one goes back (eth1's own window saw the rise: it does) */
        h->ip_in_hdr_errors += 5000;
        h_write_snmp(h);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        size_t before_new = h->n_ev;
        h_link_add(h, 9, "eth9");
        h_answer_all(h);
        h_run(h, 12 * USEC_PER_SEC, USEC_PER_SEC);
        assert_path(h, 9, before_new, "pending probation applied");
        assert_state(d->life.state, DEVICE_UNMANAGED);
        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2, mark), 0);
        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 9, 0), 0);
        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 3, 0), 1);
        h_free(h);
}

/* A guard trips: the rollback write, rolled-back, and held there. */
typedef struct GuardTripCase {
        const char *what;
        const char *guard;   /* the policy's one guard */
        const char *counter; /* what the rollback names */
        bool namespace_wide;
} GuardTripCase;

static const GuardTripCase guard_trip_cases[] = {
        {"link stats over the threshold in a sample reply",
         "    - counter: link.tx_errors\n      max-increase: 3\n", "link.tx_errors", false},
        {"an SNMP counter of /proc/net/snmp", "    - counter: Ip.InHdrErrors\n      max-increase: 100\n",
         "Ip.InHdrErrors", true},
        {"an SNMP counter of /proc/net/netstat",
         "    - counter: IpExt.InTruncatedPkts\n      max-increase: 10\n", "IpExt.InTruncatedPkts", true},
        {"a ratio of SNMP counters",
         "    - counter: Tcp.RetransSegs\n      max-ratio: 0.02\n      per: Tcp.OutSegs\n",
         "Tcp.RetransSegs", true},
};

static void test_guard_trip(void **state) {
        const GuardTripCase *c = *state;

        char policy[2048];
        snprintf(policy, sizeof(policy),
                 "version: 1\n"
                 "rollback:\n"
                 "  window: 10s\n"
                 "  interval: 1s\n"
                 "  guards:\n"
                 "%s"
                 "policies:\n"
                 "  - name: fabric\n"
                 "    match:\n"
                 "      name: [\"eth*\"]\n" ALL4("185000"),
                 c->guard);
        Harness *h = started_with(policy, 2, "eth0");
        h_answer_all(h);
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_PROBATION);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(d->life.state, DEVICE_PROBATION);
        size_t mark = h->n_ev, reqs = h->n_reqs;

        /* below the threshold first: nothing */
        h_link(h, 2)->stats.tx_errors = 3;
        h->ip_in_hdr_errors = 100;
        h->ipext_in_truncated = 10;
        h->tcp_out_segs = 10000;
        h->tcp_retrans_segs = 200;
        h_write_snmp(h);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(d->life.state, DEVICE_PROBATION);
        assert_int_equal(h_count_writes(h, 2, reqs), 0);

        /* over it */
        h_link(h, 2)->stats.tx_errors = 4;
        h->ip_in_hdr_errors = 101;
        h->ipext_in_truncated = 11;
        h->tcp_retrans_segs = 201;
        h_write_snmp(h);
        h_tick(h, USEC_PER_SEC);

        const Recorded *rb = h_find_event(h, EVENT_ROLLBACK, 2, mark);
        assert_non_null(rb);
        assert_string_equal(rb->counter, c->counter);
        assert_sizes_equal(rb->to, H_LEGACY);
        assert_true(device_history_get(d)->last_rollback->namespace_wide == c->namespace_wide);
        assert_int_equal(h_count_writes(h, 2, reqs), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, H_LEGACY);
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_ROLLBACK);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        assert_path(h, 2, mark, "pending rolled-back");
        assert_null(d->probation);
        assert_sizes_equal(h_link(h, 2)->sizes, H_LEGACY);

        /* held: time, re-reads and a reload of the same policy write nothing */
        reqs = h->n_reqs;
        h_run(h, 30 * USEC_PER_SEC, USEC_PER_SEC);
        h_dump(h);
        h_answer_all(h);
        h_reload(h, policy);
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 2, reqs), 0);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        h_free(h);
}

/* A guard trips in the window of policy B's change: the device goes back to its last good sizes,
 * policy A's if A's window had passed, else the last that did pass (here the originals). Held
 * there, also across a restart on the same policy. A rollback to the originals instead of A's
 * sizes, or a restart that forgets the hold and writes B again, fails here. */
typedef struct LastGoodCase {
        const char *what;
        bool a_passed;
        Sizes to;
} LastGoodCase;

static const LastGoodCase last_good_cases[] = {
        {"A passed its window: back to A's sizes", true, BIG},
        {"A still in its window: back to the originals", false, H_LEGACY},
};

static void test_last_good_after_guard_trip(void **state) {
        const LastGoodCase *c = *state;
        const Sizes b = H_SIZES(150000, 150000, 150000, 150000);

        Harness *h = started_with(P_ALL, 2, "eth0");
        h_answer_all(h);
        h_run(h, (c->a_passed ? 11 : 2) * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(h_state(h, 2), c->a_passed ? DEVICE_APPLIED : DEVICE_PROBATION);
        h_reload(h, P_ALL_150);
        h_answer_all(h);
        assert_sizes_equal(h_link(h, 2)->sizes, b);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        size_t mark = h->n_ev, reqs = h->n_reqs;

        h_link(h, 2)->stats.tx_errors = 1; /* over B's max-increase of 0 */
        h_tick(h, USEC_PER_SEC);
        const Recorded *rb = h_find_event(h, EVENT_ROLLBACK, 2, mark);
        assert_non_null(rb);
        assert_string_equal(rb->counter, "link.tx_errors");
        assert_sizes_equal(rb->from, b);
        assert_sizes_equal(rb->to, c->to);
        assert_int_equal(h_count_writes(h, 2, reqs), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, c->to);
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_sizes_equal(h_link(h, 2)->sizes, c->to);
        assert_sizes_equal(h_dev(h, 2)->record.original, H_LEGACY);

        /* held: time and a re-read write nothing */
        reqs = h->n_reqs;
        h_run(h, 30 * USEC_PER_SEC, USEC_PER_SEC);
        h_dump(h);
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 2, reqs), 0);

        /* a restart on the same policy holds it where the rollback took it */
        h = h_restart(h, P_ALL_150);
        h_answer_all(h);
        h_run(h, 30 * USEC_PER_SEC, USEC_PER_SEC);
        Device *d = h_dev(h, 2);
        assert_true(d->life.held);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        assert_sizes_equal(h_link(h, 2)->sizes, c->to);
        assert_sizes_equal(d->record.original, H_LEGACY);
        /* and a retry releases it: B again */
        assert_int_equal(apply_retry(h->e, d), 0);
        h_flush(h);
        h_answer_all(h);
        assert_sizes_equal(h_link(h, 2)->sizes, b);
        assert_state(d->life.state, DEVICE_PROBATION);
        h_free(h);
}

/* A reload that changes the guards and not the sizes writes nothing: the window running goes on,
 * judged by the guards it began under (the rules of the policy that is gone), while a device
 * written after the reload is judged by the new ones; the same after a restart on the new policy,
 * from the state file. Each guard list is one rule set, whatever number of devices it watches. */
typedef struct GuardsReloadCase {
        const char *what;
        bool restart;
} GuardsReloadCase;

static const GuardsReloadCase guards_reload_cases[] = {
        {"the old guards judge the window begun under them", false},
        {"… also after a restart on the new policy", true},
};

static void test_guards_reload(void **state) {
        const GuardsReloadCase *c = *state;

        Harness *h = started_with(P_ALL, 2, "eth0");
        h_link_add(h, 4, "eth2");
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        assert_state(h_state(h, 4), DEVICE_PROBATION);
        /* one policy, one rule set: eth0's and eth2's */
        assert_ptr_equal(h_dev(h, 2)->probation->guards.rules, h_dev(h, 4)->probation->guards.rules);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        size_t reqs = h->n_reqs, rule_sets = guard_rules_count();

        h_reload(h, P_ALL_LOOSE); /* P_ALL's set is freed here */
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 0, reqs), 0);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        assert_int_equal(guard_rules_count(), rule_sets);
        h_link_add(h, 3, "eth1");
        h_answer_all(h);
        assert_state(h_state(h, 3), DEVICE_PROBATION);
        if (c->restart) {
                h = h_restart(h, P_ALL_LOOSE);
                assert_int_equal(h_count_writes(h, 0, 0), 0);
        }
        /* a device written now: the rules of its policy's list, the same as eth1's (after a
         * restart: those the state file's entry of eth1 found, made from the file) */
        h_link_add(h, 5, "eth3");
        h_answer_all(h);
        assert_state(h_state(h, 5), DEVICE_PROBATION);
        const GuardRules *old = h_dev(h, 2)->probation->guards.rules,
                         *new = h_dev(h, 3)->probation->guards.rules;
        assert_ptr_equal(h_dev(h, 4)->probation->guards.rules, old);
        assert_ptr_equal(h_dev(h, 5)->probation->guards.rules, new);
        assert_ptr_not_equal(old, new);
        assert_int_equal(guard_rules_count(), rule_sets + 1);
        assert_int_equal(old->n, 2);
        assert_string_equal(old->items[0].counter, "link.tx_errors");
        assert_int_equal(old->items[0].max_increase, 0);
        assert_int_equal(new->n, 1);
        assert_int_equal(new->items[0].max_increase, 1000);
        h_run(h, USEC_PER_SEC, USEC_PER_SEC);
        size_t mark = h->n_ev;
        reqs = h->n_reqs;

        /* 5 errors on each: over the old guard's 0, not near the new one's 1000 */
        h_link(h, 2)->stats.tx_errors += 5;
        h_link(h, 3)->stats.tx_errors += 5;
        h_tick(h, USEC_PER_SEC);
        const Recorded *rb = h_find_event(h, EVENT_ROLLBACK, 2, mark);
        assert_non_null(rb);
        assert_string_equal(rb->counter, "link.tx_errors");
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_int_equal(h_count_writes(h, 2, reqs), 1);
        assert_null(h_find_event(h, EVENT_ROLLBACK, 3, mark));
        assert_state(h_state(h, 3), DEVICE_PROBATION);
        assert_state(h_state(h, 4), DEVICE_PROBATION); /* no errors of its own */
        h_run(h, 10 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(h_state(h, 3), DEVICE_APPLIED);
        assert_state(h_state(h, 4), DEVICE_APPLIED);
        assert_state(h_state(h, 5), DEVICE_APPLIED);
        assert_int_equal(h_count_writes(h, 3, reqs), 0);
        /* the windows are over: their rule sets went with them */
        assert_int_equal(guard_rules_count(), rule_sets - 1);
        h_free(h);
}

/* A change the kernel refuses is undone: the window of the sizes the device keeps goes on where it
 * was, and a rollback still goes where it went. The window ended with the refusal once, and the
 * sizes it watched counted as good without having passed it: the change tried again moved the
 * rollback target to them. */
static void test_refused_change_keeps_the_window(void **state) {
        const Sizes b = H_SIZES(150000, 150000, 150000, 150000);
        Sizes target;

        Harness *h = started_with(P_ALL, 2, "eth0");
        h_answer_all(h);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_PROBATION);
        uint64_t until = d->probation->until_usec;

        h_reload(h, P_ALL_150);
        refuse_next_write(h, -EINVAL);
        h_answer_all(h);
        assert_state(d->life.state, DEVICE_FAILED);
        assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        assert_non_null(d->probation);
        assert_int_equal(d->probation->until_usec, until);
        lifecycle_rollback_target(h->e, d, &target);
        assert_sizes_equal(target, H_LEGACY);

        /* tried again within A's window: A has not passed it, a rollback goes to the originals */
        assert_int_equal(apply_retry(h->e, d), 0);
        h_flush(h);
        h_answer_all(h);
        assert_sizes_equal(h_link(h, 2)->sizes, b);
        assert_state(d->life.state, DEVICE_PROBATION);
        lifecycle_rollback_target(h->e, d, &target);
        assert_sizes_equal(target, H_LEGACY);
        h_free(h);
}

/* A write whose ack was lost (ENOBUFS) may have landed: bigtcpd owns the sizes it wrote, as the
 * entry saved before it does. It did not once: the kernel had taken the write, the device was at
 * its policy and in its window, and a guard's rollback found "no write of bigtcpd's" to undo. */
static void test_lost_ack_owns_what_it_wrote(void **state) {
        Harness *h = started_with(P_NONE, 2, "eth0");
        h_answer_all(h);
        Device *d = h_dev(h, 2);
        assert_false(d->record.has_original);

        h_reload(h, P_ALL);
        Request *q = h_next_request(h);
        while (q && q->kind != REQUEST_WRITE) {
                h_answer_kernel(h);
                q = h_next_request(h);
        }
        assert_non_null(q);
        h_link(h, 2)->sizes = q->sizes; /* the kernel took it; its ack is lost */
        h->next_answer = h->n_reqs;
        sync_netlink_ops.acks_lost(h->s);
        assert_int_equal(d->record.written, SIZE_BITS_ALL);
        h_dump(h);
        h_answer_all(h);
        assert_state(d->life.state, DEVICE_PROBATION);

        assert_int_equal(apply_rollback(h->e, d, NULL), 0);
        h_flush(h);
        h_answer_all(h);
        assert_sizes_equal(h_link(h, 2)->sizes, H_LEGACY);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        h_free(h);
}

/* A namespace-wide rise trips only the devices whose own window saw it: each has its baseline from
 * just before its own write. */
enum { BEFORE_BOTH, BETWEEN, AFTER_BOTH };

typedef struct NamespaceRiseCase {
        const char *what;
        int when;
        bool first_trips, second_trips;
} NamespaceRiseCase;

static const NamespaceRiseCase namespace_rise_cases[] = {
        {"the rise came before both writes", BEFORE_BOTH, false, false},
        {"the rise came after the first write, before the second", BETWEEN, true, false},
        {"the rise came after both writes", AFTER_BOTH, true, true},
};

static void test_namespace_rise(void **state) {
        const NamespaceRiseCase *c = *state;

        Harness *h = h_new(P_ALL);
        h_link_add(h, 2, "eth0");
        if (c->when == BEFORE_BOTH) {
                h->ip_in_hdr_errors += 500;
                h_write_snmp(h);
        }
        h_start(h);
        h_answer_all(h);
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        if (c->when == BETWEEN) {
                h->ip_in_hdr_errors += 500;
                h_write_snmp(h);
        }
        h_link_add(h, 3, "eth1"); /* a new device: written at once */
        h_answer_all(h);
        assert_state(h_state(h, 3), DEVICE_PROBATION);
        if (c->when == AFTER_BOTH) {
                h->ip_in_hdr_errors += 500;
                h_write_snmp(h);
        }
        h_run(h, 12 * USEC_PER_SEC, USEC_PER_SEC);

        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2, 0), c->first_trips);
        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 3, 0), c->second_trips);
        assert_state(h_state(h, 2), c->first_trips ? DEVICE_ROLLED_BACK : DEVICE_APPLIED);
        assert_state(h_state(h, 3), c->second_trips ? DEVICE_ROLLED_BACK : DEVICE_APPLIED);
        h_free(h);
}

/* An operator's rollback: back to the sizes before bigtcpd's most recent change, held; a second one
 * has nothing to do; a retry releases it. */
typedef enum Before {
        APPLIED_ONCE,  /* one change, the window passed */
        APPLIED_TWICE, /* two policy changes, both passed */
        IN_PROBATION,  /* one change, the window runs */
        LATER_REFUSED, /* one change passed, a second refused */
        NEVER_WRITTEN, /* at the policy's sizes from the start */
        ONLY_REFUSED,  /* its one write was refused */
        NOT_MATCHED,   /* no policy matches it */
} Before;

typedef struct OperatorRollbackCase {
        const char *what;
        Before before;
        int r;       /* what Rollback answers */
        Sizes to;    /* where it goes */
        Sizes retry; /* where a retry takes it */
} OperatorRollbackCase;

static const OperatorRollbackCase operator_rollback_cases[] = {
        {"applied after one change: the originals", APPLIED_ONCE, 0, H_LEGACY, BIG},
        {"applied after two policy changes: one step back", APPLIED_TWICE, 0, BIG,
         H_SIZES(150000, 150000, 150000, 150000)},
        {"in probation: the originals", IN_PROBATION, 0, H_LEGACY, BIG},
        {"applied, a later write refused: before the change that was made", LATER_REFUSED, 0, H_LEGACY,
         H_SIZES(150000, 150000, 150000, 150000)},
        {"never written: nothing to do", NEVER_WRITTEN, -EALREADY, {}, {}},
        {"its only write refused, so never written: nothing to do", ONLY_REFUSED, -EALREADY, {}, {}},
        {"unmanaged: nothing to do", NOT_MATCHED, -EALREADY, {}, {}},
};

static void test_operator_rollback(void **state) {
        const OperatorRollbackCase *c = *state;

        Harness *h = h_new(c->before == NEVER_WRITTEN ? P_LEGACY
                           : c->before == NOT_MATCHED ? P_NONE
                                                      : P_ALL);
        h_link_add(h, 2, "eth0");
        h_start(h);
        if (c->before == ONLY_REFUSED)
                refuse_next_write(h, -EINVAL);
        h_answer_all(h);
        if (c->before != IN_PROBATION)
                h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        if (c->before == APPLIED_TWICE || c->before == LATER_REFUSED) {
                h_reload(h, P_ALL_150);
                if (c->before == LATER_REFUSED)
                        refuse_next_write(h, -EINVAL);
                h_answer_all(h);
                h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        }
        Device *d = h_dev(h, 2);
        Sizes held_before = h_link(h, 2)->sizes;
        size_t mark = h->n_ev, reqs = h->n_reqs;

        assert_int_equal(apply_rollback(h->e, d, NULL), c->r);
        h_flush(h);
        h_answer_all(h);
        if (c->r < 0) {
                assert_int_equal(h_count_writes(h, 2, reqs), 0);
                assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2, mark), 0);
                assert_int_equal(h_count_events(h, EVENT_STATE, 2, mark), 0);
                assert_sizes_equal(h_link(h, 2)->sizes, held_before);
                h_free(h);
                return;
        }
        const Recorded *rb = h_find_event(h, EVENT_ROLLBACK, 2, mark);
        assert_non_null(rb);
        assert_string_equal(rb->counter, "operator");
        assert_sizes_equal(rb->from, held_before);
        assert_sizes_equal(rb->to, c->to);
        assert_int_equal(h_count_writes(h, 2, reqs), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, c->to);
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_ROLLBACK);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        assert_sizes_equal(h_link(h, 2)->sizes, c->to);

        /* held there; a second rollback has nothing to do */
        h_run(h, 20 * USEC_PER_SEC, USEC_PER_SEC);
        h_dump(h);
        h_answer_all(h);
        assert_state(d->life.state, DEVICE_ROLLED_BACK);
        assert_int_equal(apply_rollback(h->e, d, NULL), -EALREADY);
        assert_int_equal(h_count_writes(h, 2, reqs), 1);

        /* a retry releases it: the policy's sizes again, a new window */
        mark = h->n_ev;
        assert_int_equal(apply_retry(h->e, d), 0);
        h_flush(h);
        h_answer_all(h);
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_RETRY);
        assert_state(d->life.state, DEVICE_PROBATION);
        assert_sizes_equal(h_link(h, 2)->sizes, c->retry);
        assert_int_equal(apply_retry(h->e, d), -EALREADY);
        h_free(h);
}

/* A device deleted with a request in flight, and a new one created with the same ifindex: the old
 * answer belongs to no one. */
typedef enum InFlight {
        WRITE_IN_FLIGHT,
        BASELINE_IN_FLIGHT, /* the statistics dump its write waits for */
        SAMPLE_IN_FLIGHT,   /* the statistics dump of a probation tick */
} InFlight;

typedef struct DeletedInFlightCase {
        const char *what;
        InFlight what_flies;
        int answer; /* the old request's ack */
} DeletedInFlightCase;

static const DeletedInFlightCase deleted_in_flight_cases[] = {
        {"its write, acked", WRITE_IN_FLIGHT, 0},
        {"its write, refused", WRITE_IN_FLIGHT, -ENODEV},
        {"the dump for its baselines, answered with errors and traffic", BASELINE_IN_FLIGHT, 0},
        {"the dump for its baselines, interrupted", BASELINE_IN_FLIGHT, -EINTR},
        {"a probation sample's dump, answered with errors and traffic", SAMPLE_IN_FLIGHT, 0},
        {"a probation sample's dump, interrupted", SAMPLE_IN_FLIGHT, -EINTR},
};

static void test_deleted_in_flight(void **state) {
        const DeletedInFlightCase *c = *state;
        /* what the old device's stats say: far over every guard, and traffic */
        const struct rtnl_link_stats64 bad = {
                .rx_packets = 1000, .tx_packets = 1000, .tx_errors = 1000, .rx_errors = 1000};

        Harness *h = h_new(P_ALL);
        h->hold_baselines = true;
        h_link_add(h, 2, "eth0");
        h_start(h);
        /* found by the first dump (no stats in it): its write waits for a statistics dump */
        assert_true(h->stats_dump_running);
        assert_int_equal(h_unanswered(h), 0);
        if (c->what_flies == WRITE_IN_FLIGHT) {
                h_answer_stats_dump(h); /* the baselines are in; the write flies */
                assert_int_equal(h_next_request(h)->kind, REQUEST_WRITE);
        }
        if (c->what_flies == SAMPLE_IN_FLIGHT) {
                h_answer_all(h);
                h_advance(h, USEC_PER_SEC);
                probation_tick(h->e->probation);
                assert_true(h->stats_dump_running); /* the tick's statistics dump */
        }
        size_t old_first = h->next_answer, old_end = h->n_reqs;
        assert_true(old_end > old_first || c->what_flies != WRITE_IN_FLIGHT);

        h_link_del(h, 2);
        size_t mark = h->n_ev;
        h_link_add(h, 2, "eth0"); /* appeared moments ago: written at once */
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_PENDING);
        assert_true(h_count_writes(h, 2, old_end) == 1);

        /* the old requests are answered first, in order: the dump with the new link's entry
         * far over every guard, or failed */
        if (c->what_flies != WRITE_IN_FLIGHT) {
                struct rtnl_link_stats64 own = h_link(h, 2)->stats;
                h_link(h, 2)->stats = bad;
                h->stats_dump_error = c->answer;
                h_answer_stats_dump(h);
                h->stats_dump_error = 0;
                h_link(h, 2)->stats = own;
        }
        h->hold_baselines = false;
        while (h->next_answer < old_end) {
                h_answer(h, c->answer);
        }
        h_batch_end(h);
        assert_state(d->life.state, DEVICE_PENDING);
        assert_string_equal(h_pending_reason(h, 2), "in-flight");
        assert_int_equal(device_history_get(d)->last_errno, 0);
        assert_false(d->carried_traffic);
        assert_int_equal(h_count_events(h, EVENT_WRITE, 2, mark), 0);

        /* then its own */
        h_answer_all(h);
        h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        assert_path(h, 2, mark, "pending probation applied");
        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2, mark), 0);
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_NEW_DEVICE);
        h_free(h);
}

/* Probation samples every device due at a tick from one statistics dump (issue 10): however
 * many devices are in probation, one dump per tick and no request per device; a rise on one of
 * them rolls back that one at the first tick after it. */
typedef enum DumpTrouble {
        DUMP_FINE,
        DUMP_FAILS,       /* the dump of the window's last tick fails */
        DUMP_SLOW,        /* the dump is not over when the next tick comes */
        DUMP_WRITTEN_OFF, /* half of the devices written 0.4 s after the others */
} DumpTrouble;

typedef struct DumpSamplingCase {
        const char *what;
        DumpTrouble trouble;
} DumpSamplingCase;

static const DumpSamplingCase dump_sampling_cases[] = {
        {"one dump serves every device, a rise rolls back only its device", DUMP_FINE},
        {"a failed dump judges no one; the next tick samples again", DUMP_FAILS},
        {"a dump still running at the next tick: no second one, its verdicts when it is over", DUMP_SLOW},
        {"devices written 0.4 s apart share ticks", DUMP_WRITTEN_OFF},
};

enum { N_DUMP_DEVICES = 48, ROGUE = 2 + N_DUMP_DEVICES / 2 };

static void test_dump_sampling(void **state) {
        const DumpSamplingCase *c = *state;
        Harness *h = h_new(P_ALL);
        char name[IFNAMSIZ];
        size_t mark, reqs;

        for (int i = 0; i < N_DUMP_DEVICES; i += c->trouble == DUMP_WRITTEN_OFF ? 2 : 1) {
                snprintf(name, sizeof(name), "eth%d", i);
                h_link_add(h, 2 + i, name);
        }
        h_start(h);
        h_answer_all(h);
        if (c->trouble == DUMP_WRITTEN_OFF) {
                /* the others appear 0.4 s later: announced by events, written at once */
                h_advance(h, 400 * USEC_PER_MSEC);
                for (int i = 1; i < N_DUMP_DEVICES; i += 2) {
                        snprintf(name, sizeof(name), "eth%d", i);
                        h_link_add(h, 2 + i, name);
                }
                h_answer_all(h);
        }
        for (int i = 0; i < N_DUMP_DEVICES; i++)
                assert_state(h_dev(h, 2 + i)->life.state, DEVICE_PROBATION);

        /* every tick: one dump, not one request per device */
        mark = h->n_ev;
        reqs = h->n_reqs;
        unsigned dumps = h->stats_dumps;
        h_run(h, 3 * USEC_PER_SEC, USEC_PER_SEC);
        assert_int_equal(h->stats_dumps - dumps, 3);
        assert_int_equal(h->n_reqs, reqs);
        for (int i = 0; i < N_DUMP_DEVICES; i++)
                assert_state(h_dev(h, 2 + i)->life.state, DEVICE_PROBATION);

        if (c->trouble == DUMP_SLOW) {
                /* a rise; the tick's dump is slow: the next tick asks for none */
                h_link(h, ROGUE)->stats.tx_errors = 1;
                h_advance(h, USEC_PER_SEC);
                probation_tick(h->e->probation);
                assert_true(h->stats_dump_running);
                dumps = h->stats_dumps;
                h_advance(h, USEC_PER_SEC);
                probation_tick(h->e->probation);
                assert_int_equal(h->stats_dumps, dumps);
                assert_state(h_dev(h, ROGUE)->life.state, DEVICE_PROBATION);
                h_answer_all(h); /* the verdict comes with the dump's end */
        } else {
                h_link(h, ROGUE)->stats.tx_errors = 1;
                h_tick(h, USEC_PER_SEC);
        }
        /* the rise, at the first tick after it; no one else touched */
        assert_state(h_dev(h, ROGUE)->life.state, DEVICE_ROLLED_BACK);
        assert_non_null(h_find_event(h, EVENT_ROLLBACK, ROGUE, mark));
        for (int i = 0; i < N_DUMP_DEVICES; i++) {
                if (2 + i == ROGUE)
                        continue;
                assert_state(h_dev(h, 2 + i)->life.state, DEVICE_PROBATION);
                assert_int_equal(h_count_writes(h, 2 + i, reqs), 0);
        }

        /* the windows close (10 s after each write) */
        uint64_t end = H_START_USEC + 10 * USEC_PER_SEC + (c->trouble == DUMP_WRITTEN_OFF ? 400 * USEC_PER_MSEC : 0);
        while (h->mono + USEC_PER_SEC < end)
                h_tick(h, USEC_PER_SEC);
        if (c->trouble == DUMP_FAILS) {
                h_advance(h, USEC_PER_SEC);
                probation_tick(h->e->probation);
                h->stats_dump_error = -EINTR;
                h_answer_all(h);
                h->stats_dump_error = 0;
                for (int i = 0; i < N_DUMP_DEVICES; i++)
                        if (2 + i != ROGUE)
                                assert_state(h_dev(h, 2 + i)->life.state, DEVICE_PROBATION);
                /* the next tick samples every one of them again */
                dumps = h->stats_dumps;
                h_tick(h, USEC_PER_SEC);
                assert_int_equal(h->stats_dumps - dumps, 1);
        } else
                h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        for (int i = 0; i < N_DUMP_DEVICES; i++)
                if (2 + i != ROGUE) {
                        assert_state(h_dev(h, 2 + i)->life.state, DEVICE_APPLIED);
                        assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2 + i, mark), 0);
                }
        /* nothing in probation: the timer is off */
        assert_int_equal(probation_count(h->e->probation), 0);
        assert_false(probation_armed(h->e->probation));
        h_free(h);
}

/* Devices written at any moment between two ticks are first sampled at most 1.25 ticks after
 * their write (a loop that runs a tick late keeps them within 1.5 intervals), and every tick after
 * that: GetStatus's longest gap says so. */
static void test_sample_gap(void **state) {
        Harness *h = h_new(P_ALL);
        static const uint64_t written_at[] = {0, 300, 600, 900}; /* ms after the first write */
        char name[IFNAMSIZ];
        uint64_t gap, dumps;

        h_link_add(h, 2, "eth0");
        h_start(h);
        h_answer_all(h);
        for (size_t i = 1; i < ELEMENTSOF(written_at); i++) {
                h_advance(h, (written_at[i] - written_at[i - 1]) * USEC_PER_MSEC);
                snprintf(name, sizeof(name), "eth%zu", i);
                h_link_add(h, 2 + (int) i, name);
                h_answer_all(h);
        }
        /* the ticks, one interval apart from the first write on */
        h_tick(h, USEC_PER_SEC - written_at[ELEMENTSOF(written_at) - 1] * USEC_PER_MSEC);
        h_run(h, 5 * USEC_PER_SEC, USEC_PER_SEC);
        for (size_t i = 0; i < ELEMENTSOF(written_at); i++)
                assert_state(h_dev(h, 2 + (int) i)->life.state, DEVICE_PROBATION);
        probation_figures(h->e->probation, &gap, &dumps);
        assert_true(gap <= USEC_PER_SEC / 4 * 5);
        assert_true(gap >= USEC_PER_SEC); /* the steady ticks */
        assert_int_equal(dumps, 6);
        h_free(h);
}

/* A device waiting for its link statistics counts its next sample from the tick that asked for
 * them, not from when the dump answered: a dump answered late does not push the next sample out. */
static void test_sample_after_late_dump(void **state) {
        Harness *h = h_new(P_ALL);
        unsigned dumps;

        h_link_add(h, 2, "eth0");
        h_start(h);
        h_answer_all(h);
        assert_state(h_dev(h, 2)->life.state, DEVICE_PROBATION);
        h_advance(h, USEC_PER_SEC);
        probation_tick(h->e->probation);
        assert_true(h->stats_dump_running);
        h_advance(h, 900 * USEC_PER_MSEC);
        h_answer_all(h); /* 0.9 s after the tick that asked */
        assert_state(h_dev(h, 2)->life.state, DEVICE_PROBATION);
        /* the next tick, an interval after that one: due (counted from the answer it would be
         * 0.9 s early, more than 3/4 of a tick) */
        dumps = h->stats_dumps;
        h_tick(h, 100 * USEC_PER_MSEC);
        assert_int_equal(h->stats_dumps - dumps, 1);
        h_free(h);
}

/* A write's link baselines (issue 10): from the link message that queued it when that carried
 * the counters (a device announced by its event), else from one statistics dump for every write
 * waiting — never one request per device. The baseline is the device's counters from before the
 * write: a rise after it trips, one before it does not. */
typedef enum BaselineFrom {
        FROM_EVENT,        /* announced by an event that carries its counters */
        FROM_DUMP,         /* found by the first link dump (no counters): a statistics dump */
        FROM_RELOAD,       /* a reload: a statistics dump for all of them */
        FROM_FAILED_DUMP,  /* the statistics dump fails: the first sample stands in */
        FROM_BEHIND_TICK,  /* asked for while probation's dump runs: the one after it */
} BaselineFrom;

typedef struct BaselineCase {
        const char *what;
        BaselineFrom from;
        unsigned dumps; /* statistics dumps for the baselines */
        bool trips;     /* a rise of 1 between the baselines and the first sample trips */
} BaselineCase;

static const BaselineCase baseline_cases[] = {
        {"announced by an event: the event's counters, no dump", FROM_EVENT, 0, true},
        {"found by the first dump: one statistics dump for all", FROM_DUMP, 1, true},
        {"a reload: one statistics dump for all", FROM_RELOAD, 1, true},
        {"the statistics dump fails: written without, the first sample stands in", FROM_FAILED_DUMP, 1, false},
        {"asked while probation's dump runs: the next dump, not the running one", FROM_BEHIND_TICK, 1, true},
};

enum { N_BASELINE_DEVICES = 16 };

static void test_baselines(void **state) {
        const BaselineCase *c = *state;
        Harness *h = h_new(c->from == FROM_RELOAD || c->from == FROM_BEHIND_TICK ? P_NONE : P_ALL);
        char name[IFNAMSIZ];
        unsigned dumps;
        size_t reqs;

        if (c->from != FROM_EVENT) {
                for (int i = 0; i < N_BASELINE_DEVICES; i++) {
                        snprintf(name, sizeof(name), "eth%d", i);
                        h_link_add(h, 2 + i, name)->stats.tx_errors = 5; /* errors before bigtcpd came */
                }
        }
        h->hold_baselines = true;
        h->stats_dump_error = c->from == FROM_FAILED_DUMP ? -EINTR : 0;
        dumps = h->stats_dumps;
        reqs = h->n_reqs;
        h_start(h);
        if (c->from == FROM_EVENT) {
                for (int i = 0; i < N_BASELINE_DEVICES; i++) {
                        FakeLink *l;
                        snprintf(name, sizeof(name), "eth%d", i);
                        h->announce_stats = &(struct rtnl_link_stats64){.tx_errors = 5};
                        l = h_link_add(h, 2 + i, name);
                        h->announce_stats = NULL;
                        l->stats.tx_errors = 5;
                }
        }
        if (c->from == FROM_RELOAD || c->from == FROM_BEHIND_TICK) {
                h_answer_all(h);
                if (c->from == FROM_BEHIND_TICK) {
                        /* another device in probation, its tick's dump running */
                        h_reload(h, P_V6_ROLLOUT1_ETH0);
                        h_answer_all(h);
                        assert_state(h_dev(h, 2)->life.state, DEVICE_PROBATION);
                        h_advance(h, USEC_PER_SEC);
                        probation_tick(h->e->probation);
                        assert_true(h->stats_dump_running);
                        assert_int_equal(writer_stats_dump_serves(h->e->writer), STATS_DUMP_SAMPLES);
                }
                dumps = h->stats_dumps;
                reqs = h->n_reqs;
                h_reload(h, P_ALL);
        }
        /* the writes wait for their baselines: nothing sent but what needs none */
        for (int i = c->from == FROM_BEHIND_TICK ? 1 : 0; i < N_BASELINE_DEVICES; i++)
                assert_int_equal(h_count_writes(h, 2 + i, reqs), c->dumps == 0 ? 1 : 0);
        if (c->from == FROM_BEHIND_TICK) {
                /* the running dump (probation's) is answered: not theirs */
                h_answer_stats_dump(h);
                for (int i = 1; i < N_BASELINE_DEVICES; i++)
                        assert_int_equal(h_count_writes(h, 2 + i, reqs), 0);
                assert_true(h->stats_dump_running);
                assert_int_equal(writer_stats_dump_serves(h->e->writer), STATS_DUMP_BASELINES);
        }
        /* their dump, answered */
        if (h->stats_dump_running)
                h_answer_stats_dump(h);
        h->stats_dump_error = 0;
        h->hold_baselines = false;
        assert_int_equal(h->stats_dumps - dumps, c->dumps);
        for (int i = c->from == FROM_BEHIND_TICK ? 1 : 0; i < N_BASELINE_DEVICES; i++) {
                assert_int_equal(h_count_writes(h, 2 + i, reqs), 1);
                /* no request but the write */
                for (size_t r = reqs; r < h->n_reqs; r++)
                        assert_int_equal(h->reqs[r].kind, REQUEST_WRITE);
        }
        h_answer_all(h);
        for (int i = 0; i < N_BASELINE_DEVICES; i++)
                assert_state(h_dev(h, 2 + i)->life.state, DEVICE_PROBATION);

        /* a rise of one on every device, after the write, before the first sample */
        size_t mark = h->n_ev;
        for (int i = 0; i < N_BASELINE_DEVICES; i++)
                h_link(h, 2 + i)->stats.tx_errors = 6;
        h_run(h, 2 * USEC_PER_SEC, USEC_PER_SEC);
        for (int i = c->from == FROM_BEHIND_TICK ? 1 : 0; i < N_BASELINE_DEVICES; i++) {
                assert_state(h_dev(h, 2 + i)->life.state, c->trips ? DEVICE_ROLLED_BACK : DEVICE_PROBATION);
                assert_int_equal(h_count_events(h, EVENT_ROLLBACK, 2 + i, mark), c->trips ? 1 : 0);
        }
        h_free(h);
}

/* Sizes a new policy leaves out are given back to the originals (issue 9, problem 5). */
typedef struct SizesLeftOutCase {
        const char *what;
        Sizes original;
} SizesLeftOutCase;

static const SizesLeftOutCase sizes_left_out_cases[] = {
        {"a fresh veth", H_LEGACY},
        {"originals other than 65536", H_SIZES(60000, 100000, 50000, 40000)},
};

static void test_sizes_left_out(void **state) {
        const SizesLeftOutCase *c = *state;

        Harness *h = h_new(P_ALL);
        h_link_add(h, 2, "eth0")->sizes = c->original;
        h_start(h);
        h_answer_all(h);
        h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_APPLIED);
        assert_int_equal(d->record.written, SIZE_BITS_ALL);

        h_reload(h, P_GSO_150);
        Sizes want = c->original;
        want.gso_max_size = 150000;
        assert_sizes_equal(h_last_write(h, 2)->sizes, want);
        h_answer_all(h);
        h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        assert_state(d->life.state, DEVICE_APPLIED);
        assert_sizes_equal(h_link(h, 2)->sizes, want);
        assert_int_equal(d->life.owned, SIZE_BIT_GSO);
        assert_int_equal(d->record.written, SIZE_BIT_GSO);

        /* and when it stops matching, the one size left goes back too */
        h_reload(h, P_NONE);
        h_answer_all(h);
        assert_state(d->life.state, DEVICE_UNMANAGED);
        assert_sizes_equal(h_link(h, 2)->sizes, c->original);
        h_free(h);
}

/* Someone else changes the sizes of an applied device: bigtcpd puts its own back (cause put-back),
 * with no new window and no new last-known-good, found however the daemon reads the device. */
typedef struct PutBackCase {
        const char *what;
        bool by_dump; /* the verify timer's re-read of every link; else a read of the device */
} PutBackCase;

static const PutBackCase put_back_cases[] = {
        {"found by a re-read of every link", true},
        {"found by a read of the device (show)", false},
};

static void test_put_back(void **state) {
        const PutBackCase *c = *state;

        Harness *h = started_with(P_ALL, 2, "eth0");
        h_answer_all(h);
        h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC);
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_APPLIED);
        size_t mark = h->n_ev, reqs = h->n_reqs;

        h_link_set_sizes(h, 2, H_SIZES(100000, 100000, 100000, 100000));
        if (c->by_dump)
                h_dump(h);
        else
                h_read(h, 2);
        h_answer_all(h);

        assert_int_equal(h_count_writes(h, 2, reqs), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, BIG);
        assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_PUT_BACK);
        assert_path(h, 2, mark, "pending applied");
        assert_null(d->probation);
        assert_sizes_equal(d->record.last_good, H_LEGACY); /* a rollback still goes to the originals */
        assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        h_free(h);
}

/* At most CORRECTIONS_MAX put-backs within CORRECTION_WINDOW_USEC; then none until the window
 * ends, whatever else happens meanwhile; after it, put-backs again. */
typedef enum AfterThrottle {
        NOTHING_MORE,
        ANOTHER_CHANGE, /* someone changes the sizes again, within the window */
        REREAD_ALL,     /* every link read again, within the window */
        WINDOW_ENDS,    /* the throttle's timer fires after the window */
} AfterThrottle;

typedef struct ThrottleCase {
        const char *what;
        AfterThrottle after;
        bool written;
} ThrottleCase;

static const ThrottleCase throttle_cases[] = {
        {"ten within the window are put back, the eleventh waits", NOTHING_MORE, false},
        {"another change within the window: still waits", ANOTHER_CHANGE, false},
        {"a re-read of every link within the window: still waits", REREAD_ALL, false},
        {"the window ends: put back", WINDOW_ENDS, true},
};

static void test_put_back_throttle(void **state) {
        const ThrottleCase *c = *state;
        Harness *h = started_with(P_NOGUARD, 2, "eth0");
        h_answer_all(h);
        Device *d = h_dev(h, 2);
        assert_state(d->life.state, DEVICE_APPLIED);
        const uint64_t t0 = h->mono;

        for (unsigned k = 0; k < CORRECTIONS_MAX; k++) {
                size_t mark = h->n_ev;
                h_advance(h, USEC_PER_SEC);
                h_link_set_sizes(h, 2, H_SIZES(100000 + k, 100000, 100000, 100000));
                h_read(h, 2);
                const Recorded *w = h_find_event(h, EVENT_WRITE, 2, mark);
                assert_non_null(w);
                assert_cause(w->cause, WRITE_CAUSE_PUT_BACK);
                assert_state(d->life.state, DEVICE_APPLIED);
        }

        /* the eleventh within the window: not put back */
        size_t reqs = h->n_reqs, mark = h->n_ev;
        h_advance(h, USEC_PER_SEC);
        h_link_set_sizes(h, 2, H_SIZES(120000, 100000, 100000, 100000));
        h_read(h, 2);
        assert_int_equal(h_count_writes(h, 2, reqs), 0);
        assert_state(d->life.state, DEVICE_PENDING);
        assert_string_equal(h_pending_reason(h, 2), "throttled");

        switch (c->after) {
        case NOTHING_MORE:
                h_advance(h, 10 * USEC_PER_SEC);
                break;
        case ANOTHER_CHANGE:
                h_advance(h, USEC_PER_SEC);
                h_link_set_sizes(h, 2, H_SIZES(130000, 100000, 100000, 100000));
                h_read(h, 2);
                break;
        case REREAD_ALL:
                h_advance(h, USEC_PER_SEC);
                h_dump(h);
                break;
        case WINDOW_ENDS:
                h_advance(h, t0 + CORRECTION_WINDOW_USEC + 2 * USEC_PER_SEC - h->mono);
                h_fire_throttle(h);
                break;
        }
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 2, reqs), c->written);
        if (c->written) {
                assert_cause(h_find_event(h, EVENT_WRITE, 2, mark)->cause, WRITE_CAUSE_PUT_BACK);
                assert_state(d->life.state, DEVICE_APPLIED);
                assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        } else {
                assert_state(d->life.state, DEVICE_PENDING);
                assert_string_equal(h_pending_reason(h, 2), "throttled");
        }
        h_free(h);
}

/* Killed between a rollback's decision and its write: the state file says pending, and held. The
 * restart holds the device all the same and writes the rollback (it was lost once: the hold was
 * resumed only from an entry that said rolled-back). */
static void test_resume_held_mid_rollback(void **state) {
        Harness *h = h_new(P_ALL);
        FakeLink *l = h_link_add(h, 2, "eth0");
        StateEntry *entry = calloc(1, sizeof(StateEntry));

        l->sizes = BIG; /* the kernel still holds the sizes of the change */
        assert_non_null(entry);
        *entry = (StateEntry){.ifindex = 2, .ifname = strdup("eth0"), .original = H_LEGACY,
                              .written = SIZE_BITS_ALL, .state = DEVICE_PENDING, .has_last_good = true,
                              .last_good = H_LEGACY, .held = true, .held_desired = BIG};
        h_start_from(h, entry, 1);

        Device *d = h_dev(h, 2);
        assert_true(d->life.held);
        assert_state(d->life.state, DEVICE_PENDING);
        assert_int_equal(h_count_writes(h, 2, 0), 1);
        assert_sizes_equal(h_last_write(h, 2)->sizes, H_LEGACY);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        assert_sizes_equal(h_link(h, 2)->sizes, H_LEGACY);
        h_free(h);
}

/* The state file could not be written, so the device was not written ("cannot record original
 * sizes"); the first save that succeeds again (here, a new device's) has it tried again, from the
 * loop. It was left failed once until a reload. */
static void test_state_refused_retried(void **state) {
        Harness *h = h_new(P_ALL);
        StateStore *peek;
        StateEntry *e = NULL;
        size_t n = 0;

        h_link_add(h, 2, "eth0");
        h_break_runtime_dir(h);
        h_start(h);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_FAILED);
        assert_string_equal(device_history_get(h_dev(h, 2))->last_error, "cannot record original sizes");
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        assert_true(state_store_retry_usec(h->e->state) > 0);

        /* nothing is tried again while the state file still cannot be written */
        h_link_add(h, 3, "eth1");
        h_answer_all(h);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 0, 0), 0);
        assert_state(h_state(h, 2), DEVICE_FAILED);

        assert_int_equal(mkdir(h->runtime_dir, 0700), 0);
        h_link_add(h, 4, "eth2");
        h_answer_all(h);
        assert_state(h_state(h, 4), DEVICE_PROBATION);
        assert_state(h_state(h, 2), DEVICE_FAILED); /* not from within the save */
        assert_int_equal(state_store_retry_usec(h->e->state), 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        assert_state(h_state(h, 3), DEVICE_PROBATION);
        assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        assert_sizes_equal(h_link(h, 3)->sizes, BIG);

        /* and their originals are on disk */
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, 3);
        for (size_t i = 0; i < n; i++)
                assert_sizes_equal(e[i].original, H_LEGACY);
        state_entries_free(e, n);
        state_store_free(peek);
        h_free(h);
}

/* The entry saved before a first write already says which sizes the write sets: a kill after the
 * write and before the entry saved after its ack (50 ms later) must still have them given back.
 * It said none once, and the restart "restored" nothing: the originals were lost. */
static void test_entry_before_write_owns_its_sizes(void **state) {
        Harness *h = h_new(P_GSO_150);
        StateStore *peek;
        StateEntry *e = NULL;
        size_t n = 0;

        h_link_add(h, 2, "eth0");
        h_start(h);
        assert_int_equal(h_count_writes(h, 2, 0), 1); /* sent, not answered */
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, 1);
        assert_sizes_equal(e[0].original, H_LEGACY);
        assert_int_equal(e[0].written, SIZE_BIT_GSO);
        state_entries_free(e, n);
        state_store_free(peek);

        /* refused: it owns nothing after all */
        refuse_next_write(h, -EINVAL);
        assert_state(h_state(h, 2), DEVICE_FAILED);
        assert_int_equal(state_store_save(h->e->state), 0);
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].written, 0);
        state_entries_free(e, n);
        state_store_free(peek);
        h_free(h);
}

/* ---- ownership on disk before every write, with the disk failing at every point of a save ---- */

/* Every system call of a save counted; from the `fail_at`-th on (0-based), each fails as a full
 * disk fails (writes ENOSPC, fsync and ftruncate EIO, rename ENOSPC) until `healed`. */
typedef struct FaultDisk {
        unsigned calls, fail_at, failed;
        bool healed;
} FaultDisk;

static bool fault_now(FaultDisk *f) {
        bool fail = !f->healed && f->calls >= f->fail_at;
        f->calls++;
        f->failed += fail;
        return fail;
}

static ssize_t fault_write(void *userdata, int fd, const void *buf, size_t n) {
        FaultDisk *f = userdata;
        if (!fault_now(f))
                return write(fd, buf, n);
        /* a full disk takes part of what it is given first */
        if (n > 1 && f->failed == 1)
                return write(fd, buf, n / 2);
        errno = ENOSPC;
        return -1;
}

static int fault_ftruncate(void *userdata, int fd, off_t length) {
        if (fault_now(userdata)) {
                errno = EIO;
                return -1;
        }
        return ftruncate(fd, length);
}

static int fault_fsync(void *userdata, int fd, bool data_only) {
        if (fault_now(userdata)) {
                errno = EIO;
                return -1;
        }
        return data_only ? fdatasync(fd) : fsync(fd);
}

static int fault_renameat(void *userdata, int dir_fd, const char *from, const char *to) {
        if (fault_now(userdata)) {
                errno = ENOSPC;
                return -1;
        }
        return renameat(dir_fd, from, dir_fd, to);
}

static const StateIo fault_io = {.write = fault_write, .ftruncate = fault_ftruncate, .fsync = fault_fsync,
                                 .renameat = fault_renameat};

/* What a restart would read now: snapshot and journal as they are on disk, read only. */
static void read_disk(Harness *h, StateEntry **ret, size_t *ret_n) {
        char path[128];
        _cleanup_(freep) char *data = NULL, *jdata = NULL;
        size_t size = 0, jsize = 0;
        uint64_t generation = 0;
        int r;

        *ret = NULL;
        *ret_n = 0;
        snprintf(path, sizeof(path), "%s/state.json", h->runtime_dir);
        r = read_file_bounded(path, STATE_READ_MAX, READ_FILE_REGULAR, &data, &size);
        if (r == -ENOENT)
                return;
        assert_int_equal(r, 0);
        StateReadReport rep;
        assert_int_equal(state_parse(data, size, ret, ret_n, &generation, &rep), 0);
        assert_int_equal(rep.n_aside, 0);
        assert_false(rep.bad_header);
        snprintf(path, sizeof(path), "%s/state.journal", h->runtime_dir);
        r = read_file_bounded(path, STATE_READ_MAX, READ_FILE_REGULAR, &jdata, &jsize);
        if (r == -ENOENT)
                return;
        assert_int_equal(r, 0);
        assert_int_equal(state_journal_apply(jdata, jsize, generation, ret, ret_n, &rep), 0);
        assert_int_equal(rep.n_aside, 0);
}

typedef struct OwnershipCase {
        const char *what;
        const char *before; /* the policy the devices settle under (applied) */
        const char *after;  /* then the step: this policy (NULL: see `step`) */
        enum { STEP_RELOAD, STEP_OUTSIDE, STEP_TRIP } step;
        bool needs_record; /* the write is refused while the disk fails */
        bool window;       /* … and opens a window: last-good and baselines on disk too */
        Sizes target;
} OwnershipCase;

static const OwnershipCase ownership_cases[] = {
        {"a first write", P_NONE, P_ALL, STEP_RELOAD, true, true, BIG},
        {"IPv4 sizes owned as well as IPv6 ones", P_V6, P_ALL, STEP_RELOAD, true, true, BIG},
        {"new sizes of the same set: new last-good and baselines", P_ALL_150, P_ALL, STEP_RELOAD, true, true, BIG},
        {"a put-back of owned sizes: nothing new to record", P_ALL, NULL, STEP_OUTSIDE, false, false, BIG},
        {"a rollback: never held back", P_ALL, NULL, STEP_TRIP, false, false, BIG},
};

static const OwnershipCase *ownership_case;
static bool ownership_save_failed; /* the last run's save before the write failed */

/* At every write the engine sends, what is on disk gives everything back: the originals, and every
 * size the write changes among the sizes owned; a write that opens a window has its last-good
 * (the sizes it leaves) and its window there too. */
static void check_record_at_send(Harness *h, const Request *r) {
        StateEntry *e = NULL, *x = NULL;
        size_t n = 0;

        const Sizes legacy = H_LEGACY;

        if (r->kind != REQUEST_WRITE || sizes_equal(&r->sizes, &legacy, true))
                return; /* a read, or one that gives the sizes back */
        read_disk(h, &e, &n);
        for (size_t i = 0; i < n; i++)
                if (e[i].ifindex == r->ifindex)
                        x = &e[i];
        assert_non_null(x);
        assert_sizes_equal(x->original, H_LEGACY);
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (sizes_get(&r->sizes, i) != sizes_get(&legacy, i) && (i < 2 || r->ipv4)) {
                        if (!(x->written & (1u << i)))
                                fail_msg("%s written to ifindex %d, but the entry on disk does not own it", size_name(i),
                                         r->ifindex);
                }
        if (ownership_case->window) {
                assert_true(x->has_last_good);
                assert_sizes_equal(x->last_good, h_link(h, r->ifindex)->sizes);
                assert_non_null(x->probation);
        }
        state_entries_free(e, n);
}

static void run_ownership(const OwnershipCase *c, bool snapshot, unsigned fail_at, FaultDisk *disk) {
        Harness *h = h_new(c->before);
        size_t from;

        ownership_case = c;
        h_link_add(h, 2, "eth0");
        h_link_add(h, 3, "eth1");
        h_start(h);
        h_answer_all(h);
        h_run(h, 11 * USEC_PER_SEC, USEC_PER_SEC); /* out of probation: applied */
        assert_int_equal(state_store_save(h->e->state), 0);
        if (c->step == STEP_TRIP) {
                h_reload(h, P_ALL_150);
                h_answer_all(h);
                assert_state(h_state(h, 2), DEVICE_PROBATION);
                assert_int_equal(state_store_save(h->e->state), 0);
        }

        if (snapshot)
                state_store_compact(h->e->state); /* the next save is a whole snapshot */
        *disk = (FaultDisk){.fail_at = fail_at};
        h->on_send = check_record_at_send;
        /* fault_io's userdata: the disk of this run (static: a failed test's teardown saves) */
        static StateIo io;
        io = fault_io;
        io.userdata = disk;
        state_store_set_io(h->e->state, &io);
        from = h->n_reqs;
        switch (c->step) {
        case STEP_RELOAD:
                h_reload(h, c->after);
                break;
        case STEP_OUTSIDE:
                h_link_set_sizes(h, 2, H_LEGACY);
                h_link_set_sizes(h, 3, H_LEGACY);
                h_dump(h);
                break;
        case STEP_TRIP:
                h->ip_in_hdr_errors += 1000;
                h_write_snmp(h);
                h_tick(h, USEC_PER_SEC);
                break;
        }
        h_answer_all(h);

        size_t writes = h_count_writes(h, 0, from);
        /* a failed call fails the save, but for the directory's fsync after the rename (the
         * snapshot is in place: what is on disk gives everything back already) */
        bool save_failed = state_store_retry_usec(h->e->state) > 0;
        ownership_save_failed = save_failed;
        assert_true(save_failed || disk->failed <= 1);
        if (save_failed && c->needs_record) {
                /* nothing written while nothing could be recorded */
                assert_int_equal(writes, 0);
                for (int i = 2; i <= 3; i++) {
                        assert_state(h_state(h, i), DEVICE_FAILED);
                        assert_true(h_dev(h, i)->life.unrecorded);
                }
                /* the disk is freed: the first save that succeeds has them tried again */
                disk->healed = true;
                assert_int_equal(state_store_save(h->e->state), 0);
                assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
                h_answer_all(h);
        } else
                assert_int_equal(writes, 2);
        for (int i = 2; i <= 3; i++)
                assert_sizes_equal(h_link(h, i)->sizes, c->target);
        h->on_send = NULL;
        state_store_set_io(h->e->state, NULL);
        h_free(h);
}

/* Fails each system call of the save before the write in turn (and every one after it), until the
 * save has no call left to fail, with the save a journal append and a whole snapshot. It wrote
 * the new sizes once with the IPv4 ones not on disk. */
static void test_ownership_before_every_write(void **state) {
        const OwnershipCase *c = *state;
        static FaultDisk disk; /* a failed test's teardown may still save through it */

        for (int snapshot = 0; snapshot <= 1; snapshot++) {
                run_ownership(c, snapshot, ~0u, &disk);
                assert_int_equal(disk.failed, 0);
                unsigned calls = disk.calls;
                assert_true(calls > 0 || !c->needs_record);
                /* with no call to fail (a put-back): the disk fails all the same */
                unsigned failed_saves = 0;
                for (unsigned k = 0; k < calls || k == 0; k++) {
                        print_message("%s: failing from system call %u of %u\n", snapshot ? "snapshot" : "journal",
                                      k + 1, calls);
                        run_ownership(c, snapshot, k, &disk);
                        assert_true(disk.failed > 0 || calls == 0);
                        failed_saves += ownership_save_failed;
                }
                /* every call but the directory's fsync fails the save */
                if (c->needs_record)
                        assert_int_equal(failed_saves, calls - (unsigned) snapshot);
        }
}

/* A disk that does not sync within the bound: the save before the write fails as a full disk's
 * does (the write is refused, the loop goes on); once the sync returns, the next save succeeds and
 * the device is written. The sync is held on durable.h's gate, in its child. */
static void test_slow_disk_refuses_the_write(void **state) {
        Harness *h = h_new(P_ALL);
        static int gate[2];
        static StateIo io;
        char c;

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate), 0);
        io = (StateIo){.sync_gate = &gate[1], .sync_timeout_usec = 20 * 1000};
        state_store_set_io(h->e->state, &io);
        h_link_add(h, 2, "eth0");
        h_start(h);
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 2, 0), 0);
        assert_state(h_state(h, 2), DEVICE_FAILED);
        assert_int_equal(device_history_get(h_dev(h, 2))->last_errno, -ETIMEDOUT);

        /* the sync returns; a save finds the child free once it answered (and, under load, may
         * take longer than the bound that made it fail) */
        io.sync_gate = NULL;
        io.sync_timeout_usec = 0;
        assert_int_equal(write(gate[0], "x", 1), 1);
        assert_int_equal(read(gate[0], &c, 1), 1);
        int r;
        for (unsigned i = 0; (r = state_store_save(h->e->state)) == -EBUSY; i++)
                assert_true(i < 1000000);
        assert_int_equal(r, 0);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_PROBATION);
        assert_sizes_equal(h_link(h, 2)->sizes, BIG);
        state_store_set_io(h->e->state, NULL);
        h_free(h);
        close(gate[0]);
        close(gate[1]);
}

/* ---- a restart: is the device at an entry's ifindex the one it was written for? ---- */

typedef struct IdentityCase {
        const char *what;
        bool entry_identity;                  /* the entry has kind and MAC (else: an old file's) */
        const char *entry_name, *entry_kind, *entry_mac;
        const char *name, *kind;              /* the device the restart finds at ifindex 2 */
        uint8_t mac_last, perm_last;          /* its MAC 02:00:00:00:00:xx, 0: none */
        bool same;                            /* it gets the entry */
} IdentityCase;

/* clang-format off */
static const IdentityCase identity_cases[] = {
        {"an entry of an earlier version (no identity) is the device's", false, "eth0", NULL, NULL,
         "eth5", "dummy", 9, 0, true},
        {"same kind and MAC: the same", true, "eth0", "veth", "02:00:00:00:00:02", "eth0", "veth", 2, 0, true},
        {"renamed, same kind and MAC: the same", true, "eth0", "veth", "02:00:00:00:00:02", "eth9", "veth", 2, 0,
         true},
        {"another MAC: another device", true, "eth0", "veth", "02:00:00:00:00:02", "eth0", "veth", 3, 0, false},
        {"another kind: another device", true, "eth0", "dummy", "02:00:00:00:00:02", "eth0", "veth", 2, 0, false},
        {"no kind then, a kind now: another device", true, "eth0", "", "02:00:00:00:00:02", "eth0", "veth", 2, 0,
         false},
        {"no MAC on either side, same name: the same", true, "eth0", "wireguard", "", "eth0", "wireguard", 0, 0,
         true},
        {"no MAC on either side, another name: another device", true, "eth0", "wireguard", "", "eth1", "wireguard",
         0, 0, false},
        {"a MAC then, none now, another name: another device", true, "eth0", "veth", "02:00:00:00:00:02", "eth1",
         "veth", 0, 0, false},
        {"the permanent MAC counts, not the current one", true, "eth0", "", "02:00:00:00:00:07", "eth3", "", 8, 7,
         true},
        {"another permanent MAC: another device", true, "eth0", "", "02:00:00:00:00:07", "eth0", "", 7, 8, false},
};
/* clang-format on */

static const Sizes ORIGINAL_60000 = H_SIZES(60000, 60000, 60000, 60000);

static void test_identity(void **state) {
        const IdentityCase *c = *state;
        Harness *h = h_new(P_ALL);
        FakeLink *l = h_link_add_full(h, 2, c->name, c->kind, true);
        StateEntry *entry = calloc(1, sizeof(StateEntry));
        StateStore *peek;
        StateEntry *e = NULL;
        size_t n = 0;

        l->sizes = BIG; /* what the earlier run wrote (to whichever device) */
        if (c->mac_last) {
                l->has_mac = true;
                memcpy(l->mac, (uint8_t[]){2, 0, 0, 0, 0, c->mac_last}, 6);
        }
        if (c->perm_last) {
                l->has_perm = true;
                memcpy(l->perm, (uint8_t[]){2, 0, 0, 0, 0, c->perm_last}, 6);
        }
        assert_non_null(entry);
        *entry = (StateEntry){.ifindex = 2, .ifname = strdup(c->entry_name), .original = ORIGINAL_60000,
                              .written = SIZE_BITS_ALL, .state = DEVICE_APPLIED, .has_identity = c->entry_identity};
        if (c->entry_identity) {
                entry->kind = strdup(c->entry_kind);
                entry->mac = strdup(c->entry_mac);
        }
        h_start_from(h, entry, 1);
        h_answer_all(h);

        Device *d = h_dev(h, 2);
        assert_int_equal(d->record.has_original, c->same);
        if (c->same)
                assert_sizes_equal(d->record.original, ORIGINAL_60000);
        /* the compacted state file: the stale entry is gone */
        assert_int_equal(state_store_save(h->e->state), 0);
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, c->same ? 1 : 0);
        if (c->same) {
                /* and the entry says who the device is now */
                assert_true(e[0].has_identity);
                assert_string_equal(e[0].ifname, c->name);
                assert_string_equal(e[0].kind, c->kind ?: "");
                char mac[DEVICE_MAC_STRLEN];
                assert_string_equal(e[0].mac, device_identity_mac(d, mac));
        }
        state_entries_free(e, n);
        state_store_free(peek);

        /* what the kernel shows once no policy matches: the entry's originals, or nothing written */
        h_reload(h, P_NONE);
        h_answer_all(h);
        assert_sizes_equal(h_link(h, 2)->sizes, c->same ? ORIGINAL_60000 : BIG);
        assert_int_equal(h_count_writes(h, 2, 0), c->same ? 1 : 0);
        h_free(h);
}

/* A rename, or a new MAC, while bigtcpd runs reaches the state file: the restart compares the
 * entry with what the device is by then. */
static void test_identity_follows_changes(void **state) {
        Harness *h = h_new(P_ALL);
        FakeLink *l = h_link_add(h, 2, "eth0");
        StateStore *peek;
        StateEntry *e = NULL;
        size_t n = 0;

        l->has_mac = true;
        memcpy(l->mac, (uint8_t[]){2, 0, 0, 0, 0, 2}, 6);
        h_start(h);
        h_answer_all(h);
        assert_true(h_dev(h, 2)->record.has_original);
        assert_int_equal(state_store_save(h->e->state), 0);

        memcpy(l->mac, (uint8_t[]){2, 0, 0, 0, 0, 9}, 6);
        h_link_rename(h, 2, "eth7");
        h_answer_all(h);
        assert_true(state_store_pending(h->e->state));
        assert_int_equal(state_store_save(h->e->state), 0);
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, 1);
        assert_string_equal(e[0].ifname, "eth7");
        assert_string_equal(e[0].kind, "veth");
        assert_string_equal(e[0].mac, "02:00:00:00:00:09");
        assert_true(state_entry_is_device(&e[0], h_dev(h, 2), NULL));
        state_entries_free(e, n);
        state_store_free(peek);
        h_free(h);
}

/* Runs last: every transition the table allows was taken by some case above (and none it does not
 * allow: each harness checks every EVENT_STATE against the table). */
/* The ring of requests in flight grows as it fills (a pod's engine starts small), also while
 * it has wrapped round: every answer still reaches the request it is for, in order. */
typedef struct ReadLog {
        int ids[WRITER_INFLIGHT_MAX + 8];
        size_t n;
} ReadLog;

static ReadLog read_log;

static void on_logged_read(Device *d, int error, void *userdata) {
        assert_non_null(d);
        assert_int_equal(error, 0);
        read_log.ids[read_log.n++] = (int) (intptr_t) userdata;
}

static void test_ring_grows_wrapped(void **state) {
        Harness *h = started_with(P_ALL, 10, "eth0");
        Writer *w = h->e->writer;
        Device *d = h_dev(h, 10);
        int next = 1, want = 1;

        h_answer_all(h);
        read_log = (ReadLog){};
        /* 6 in flight, 4 answered: the head has moved on; 6 more wrap round the first 8 slots,
         * 4 after them make it grow while wrapped, and so on up to the bound */
        for (int i = 0; i < 6; i++)
                assert_int_equal(writer_request_read(w, d, on_logged_read, (void *) (intptr_t) next++, NULL), 0);
        for (int i = 0; i < 4; i++)
                h_answer_kernel(h);
        while (writer_inflight(w) < WRITER_INFLIGHT_MAX)
                assert_int_equal(writer_request_read(w, d, on_logged_read, (void *) (intptr_t) next++, NULL), 0);
        assert_int_equal(writer_request_read(w, d, on_logged_read, NULL, NULL), -EBUSY);
        while (h_unanswered(h) > 0)
                h_answer_kernel(h);
        assert_int_equal(writer_inflight(w), 0);
        assert_int_equal(read_log.n, (size_t) next - 1);
        for (size_t i = 0; i < read_log.n; i++)
                assert_int_equal(read_log.ids[i], want++);
        h_free(h);
}

static void test_transition_coverage(void **state) {
        unsigned missing = 0;

        for (int from = 0; from < _DEVICE_STATE_MAX; from++)
                for (int to = 0; to < _DEVICE_STATE_MAX; to++) {
                        if (from == to || !lifecycle_transition_allowed(from, to) ||
                            h_transitions_seen[from][to])
                                continue;
                        print_message("no case takes %s → %s\n", device_state_to_string(from),
                                      device_state_to_string(to));
                        missing++;
                }
        assert_int_equal(missing, 0);
}

int main(void) {
        struct CMUnitTest tests[256];
        char *names[256];
        size_t n = 0;
        int r;

        /* One cmocka test per case of a table, named "group: case": a failing case does not hide
         * the others. */
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
        memset(names, 0, sizeof(names));
        ADD_TEST(test_transition_allowed);
        ADD_CASES("path", test_path, path_cases);
        ADD_CASES("new device", test_new_device, new_device_cases);
        ADD_CASES("refused, then", test_refused, refused_cases);
        ADD_CASES("leaving the match in probation", test_leave_match_in_probation,
                  leave_match_in_probation_cases);
        ADD_CASES("guard trips", test_guard_trip, guard_trip_cases);
        ADD_CASES("last good after a guard trip", test_last_good_after_guard_trip, last_good_cases);
        ADD_CASES("guards changed by a reload", test_guards_reload, guards_reload_cases);
        ADD_TEST(test_refused_change_keeps_the_window);
        ADD_TEST(test_lost_ack_owns_what_it_wrote);
        ADD_CASES("namespace-wide rise", test_namespace_rise, namespace_rise_cases);
        ADD_CASES("operator rollback", test_operator_rollback, operator_rollback_cases);
        ADD_CASES("deleted with a request in flight", test_deleted_in_flight, deleted_in_flight_cases);
        ADD_CASES("dump sampling", test_dump_sampling, dump_sampling_cases);
        ADD_CASES("baselines", test_baselines, baseline_cases);
        ADD_TEST(test_sample_gap);
        ADD_TEST(test_sample_after_late_dump);
        ADD_CASES("sizes a new policy leaves out", test_sizes_left_out, sizes_left_out_cases);
        ADD_CASES("put-back", test_put_back, put_back_cases);
        ADD_CASES("put-back throttle", test_put_back_throttle, throttle_cases);
        ADD_TEST(test_resume_held_mid_rollback);
        ADD_CASES("identity at a restart", test_identity, identity_cases);
        ADD_TEST(test_identity_follows_changes);
        ADD_TEST(test_state_refused_retried);
        ADD_TEST(test_entry_before_write_owns_its_sizes);
        ADD_CASES("ownership on disk before the write", test_ownership_before_every_write, ownership_cases);
        ADD_TEST(test_slow_disk_refuses_the_write);
        ADD_TEST(test_ring_grows_wrapped);
        ADD_TEST(test_transition_coverage); /* last: it counts what the others did */
        assert_true(n <= ELEMENTSOF(tests));

        r = _cmocka_run_group_tests("test-lifecycle", tests, n, NULL, NULL);
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        return r;
}
