/* fuzz-state — the state file on arbitrary bytes, and what a restart makes of it, through the
 * daemon's own code: the snapshot (state.json) parsed with state_parse(), the journal
 * (state.journal) replayed onto it with state_journal_apply(), as a file truncated by a crash,
 * corrupted on disk, or written by someone else into the runtime directory leaves them.
 *
 * What parses is put on an engine's devices with apply_loaded_state(), as the first sync after a
 * restart does: each entry's device is announced first by an RTM_NEWLINK through
 * sync_netlink_ops (its name, kind and MAC the entry's where the kernel could have them). An entry
 * whose device is not the one it was written for (state_entry_is_device()) must be dropped. The engine's state
 * store then writes a snapshot (state_store_save(): the real file, on tmpfs), which must parse
 * again and say what the devices hold: the round trip keeps originals, written sizes, last-good
 * sizes, holds, probations and rollback records. Then the first probation tick after the restart
 * (probation_tick(), SNMP files of a fixed namespace, link stats answered by the fake kernel of
 * fuzz-engine.c) with its verdicts, the engine's invariants, and every device shown as
 * `bigtcpctl list` shows it (no NaN/Infinity).
 *
 * Input: the snapshot, then optionally a NUL byte and the journal (neither file holds a NUL). */
#include <event2/event.h>
#include <math.h>
#include <netlink/msg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apply.h"
#include "control.h"
#include "fuzz-engine.h"
#include "fuzz.h"
#include "guard.h"
#include "state.h"

static struct event_base *base;
static PolicySet *policy;
static char dir[1024], runtime_dir[1100], proc_net[1100];
static uint64_t stats64[32];

static void cleanup(void) {
        if (dir[0])
                fuzz_dir_remove(dir);
        policy_set_free(policy);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        FUZZ_ASSERT(f);
        FUZZ_ASSERT(fputs(text, f) >= 0);
        FUZZ_ASSERT(fclose(f) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        char path[1200];

        fuzz_quiet();
        base = event_base_new();
        FUZZ_ASSERT(base);
        /* a running policy with no policies: nothing in it asks for sizes */
        policy = policy_set_new();
        FUZZ_ASSERT(policy);
        fuzz_dir_new("/dev/shm", "state", dir, sizeof(dir));
        snprintf(runtime_dir, sizeof(runtime_dir), "%s/run", dir);
        snprintf(proc_net, sizeof(proc_net), "%s/proc-net", dir);
        FUZZ_ASSERT(mkdir(runtime_dir, 0755) == 0 && mkdir(proc_net, 0755) == 0);
        /* the namespace-wide counters the guards of a state file may name */
        snprintf(path, sizeof(path), "%s/snmp", proc_net);
        write_file(path, "Ip: Forwarding InHdrErrors\nIp: 1 7\nTcp: RetransSegs OutSegs\nTcp: 12 100000\n");
        snprintf(path, sizeof(path), "%s/netstat", proc_net);
        write_file(path, "IpExt: InTruncatedPkts InNoRoutes\nIpExt: 3 0\n");
        snprintf(path, sizeof(path), "%s/snmp6", proc_net);
        write_file(path, "Ip6InHdrErrors                  \t2\nIp6InReceives                   \t90\n");
        for (size_t i = 0; i < ELEMENTSOF(stats64); i++)
                stats64[i] = i * 1000003u;
        atexit(cleanup);
        return 0;
}

static void check_entry(const StateEntry *e) {
        FUZZ_ASSERT(e->ifindex > 0);
        if (e->ifname)
                FUZZ_USE(strlen(e->ifname));
        FUZZ_ASSERT(!!e->kind == e->has_identity && !!e->mac == e->has_identity);
        if (e->has_identity)
                FUZZ_USE(strlen(e->kind) + strlen(e->mac));
        FUZZ_ASSERT(e->state == _DEVICE_STATE_INVALID || device_state_to_string(e->state));
        FUZZ_ASSERT((e->written & ~(unsigned) SIZE_BITS_ALL) == 0);
        if (e->probation) {
                const Probation *p = e->probation;
                FUZZ_ASSERT(p->guards.rules); /* a rule set even for no guards: the file's */
                FUZZ_ASSERT(probation_interval_usec(p) > 0);
                FUZZ_ASSERT(guard_set_n(&p->guards) <= POLICY_GUARDS_MAX);
                for (size_t i = 0; i < guard_set_n(&p->guards); i++) {
                        const GuardRule *g = &p->guards.rules->items[i];
                        FUZZ_ASSERT(g->counter);
                        FUZZ_USE(strlen(g->counter));
                        if (g->per)
                                FUZZ_USE(strlen(g->per));
                }
        }
        if (e->last_rollback) {
                FUZZ_ASSERT(e->last_rollback->counter);
                FUZZ_USE(strlen(e->last_rollback->counter));
                if (e->last_rollback->per)
                        FUZZ_USE(strlen(e->last_rollback->per));
        }
}

static bool sizes_same(const Sizes *a, const Sizes *b) {
        return sizes_equal(a, b, true);
}

/* Doubles as the state file writes them back (%.17g reads back exactly). */
static bool double_same(double a, double b) {
        return a == b || (isnan(a) && isnan(b));
}

static void check_probation(const Device *d, const Probation *back) {
        const Probation *p = d->probation;

        FUZZ_ASSERT(!!p == !!back);
        if (!p)
                return;
        FUZZ_ASSERT(back->until_usec == p->until_usec && probation_window_usec(back) == probation_window_usec(p) &&
                    probation_interval_usec(back) == probation_interval_usec(p) &&
                    guard_set_n(&back->guards) == guard_set_n(&p->guards));
        /* the same content: the same rules, found again, not made anew */
        FUZZ_ASSERT(back->guards.rules == p->guards.rules);
        for (size_t i = 0; i < guard_set_n(&p->guards); i++) {
                const GuardRule *g = &p->guards.rules->items[i], *h = &back->guards.rules->items[i];
                const GuardBase *gb = &p->guards.items[i], *hb = &back->guards.items[i];
                FUZZ_ASSERT(streq_ptr(g->counter, h->counter) && streq_ptr(g->per, h->per));
                FUZZ_ASSERT(g->kind == h->kind && g->offset == h->offset);
                FUZZ_ASSERT(g->has_max_increase == h->has_max_increase &&
                            (!g->has_max_increase || g->max_increase == h->max_increase));
                if (g->has_max_ratio != h->has_max_ratio || (g->has_max_ratio && !double_same(g->max_ratio, h->max_ratio))) {
                        fprintf(stderr, "fuzz-state: %s: guard %s: max_ratio %.17g (%d) came back as %.17g (%d)\n",
                                d->ifname ?: "?", g->counter, g->max_ratio, g->has_max_ratio, h->max_ratio,
                                h->has_max_ratio);
                        abort();
                }
                FUZZ_ASSERT(guard_set_active(&p->guards, i) == guard_set_active(&back->guards, i) &&
                            guard_set_have_base(&p->guards, i) == guard_set_have_base(&back->guards, i) &&
                            gb->base == hb->base && gb->per_base == hb->per_base);
        }
}

static void check_rollback(const RollbackRecord *r, const RollbackRecord *back) {
        FUZZ_ASSERT(!!r == !!back);
        if (!r)
                return;
        FUZZ_ASSERT(streq_ptr(r->counter, back->counter) && streq_ptr(r->per, back->per));
        FUZZ_ASSERT(r->rise == back->rise && r->per_rise == back->per_rise && r->namespace_wide == back->namespace_wide &&
                    r->realtime_usec == back->realtime_usec);
        FUZZ_ASSERT(double_same(r->threshold, back->threshold));
        FUZZ_ASSERT(sizes_same(&r->from, &back->from) && sizes_same(&r->to, &back->to));
}

/* What an entry's device must hold after apply_loaded_state(): lifecycle_resume() takes the
 * entry as an earlier run left it. */
typedef struct Expect {
        bool stale; /* another device has its ifindex: the entry is dropped */
        DeviceState state;
        bool held, probation, rollback;
} Expect;

static Expect expect_of(const StateEntry *e) {
        /* held whatever the state said: a kill may come between the rollback and its write */
        Expect x = {.held = e->held, .rollback = e->last_rollback != NULL};
        x.probation = !x.held && e->probation;
        x.state = x.held ? DEVICE_ROLLED_BACK : x.probation ? DEVICE_PROBATION : DEVICE_APPLIED;
        return x;
}

/* "aa:bb:cc:dd:ee:ff" into `mac`; false when it is not six bytes so. */
static bool parse_mac(const char *s, uint8_t mac[6]) {
        unsigned b[6];
        int end = 0;

        if (!s || sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%n", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &end) != 6 ||
            s[end] != '\0')
                return false;
        for (int i = 0; i < 6; i++)
                mac[i] = (uint8_t) b[i];
        return true;
}

/* The device, announced by the kernel before the first sync completes. */
static void announce(FuzzKernel *k, Sync *s, const StateEntry *e) {
        FuzzLink l = {
                .ifindex = e->ifindex,
                .flags = 1 /* IFF_UP */,
                .mac = {0x02, 0, 0, 0, (uint8_t) (e->ifindex >> 8), (uint8_t) e->ifindex},
                .sizes = {185000, 185000, 185000, 185000},
                .tso_max_size = 524280,
        };
        size_t n = e->ifname ? strlen(e->ifname) : 0;
        struct nl_msg *msg;

        if (n > 0 && n < IFNAMSIZ)
                memcpy(l.ifname, e->ifname, n);
        else
                snprintf(l.ifname, sizeof(l.ifname), "eth%d", e->ifindex);
        /* the entry's device where the kernel could announce it (a kind up to 63 bytes, six bytes
         * of MAC), some other one where not */
        if (e->has_identity && !strempty(e->kind) && strlen(e->kind) < 64)
                l.kind = e->kind;
        if (e->has_identity)
                (void) parse_mac(e->mac, l.mac);
        fuzz_kernel_add_link(k, &l);
        msg = fuzz_link_message(&l, RTM_NEWLINK, 0, 0, NULL);
        sync_netlink_ops.message(s, nlmsg_hdr(msg), NETLINK_EVENT);
        nlmsg_free(msg);
}

static void read_back(StateEntry **ret, size_t *ret_n, uint64_t *ret_generation) {
        _cleanup_(freep) char *path = NULL, *text = NULL;
        size_t size;
        int r;

        FUZZ_ASSERT(asprintf(&path, "%s/state.json", runtime_dir) >= 0);
        FUZZ_ASSERT(read_file_bounded(path, 64u * 1024u * 1024u, READ_FILE_REGULAR, &text, &size) >= 0);
        StateReadReport rep;
        r = state_parse(text, size, ret, ret_n, ret_generation, &rep);
        if (r < 0 || rep.n_aside > 0 || rep.bad_header || rep.truncated || rep.trailing > 0) {
                fprintf(stderr, "fuzz-state: the snapshot the daemon wrote does not parse (%d):\n%s\n", r, text);
                abort();
        }
}

static void restart(StateEntry *entries, size_t n) {
        EngineConfig cfg = {.runtime_dir = runtime_dir, .proc_net = proc_net, .hostname = "fuzz", .kernel_release = "6.8.0"};
        Engine *e;
        Sync *s;
        FuzzKernel k;
        FuzzClock clock;
        StateEntry *back = NULL;
        size_t n_back = 0;
        uint64_t generation = 0;
        _cleanup_(freep) Expect *expect = calloc(n ? n : 1, sizeof(Expect));
        _cleanup_(freep) int *ifindex = calloc(n ? n : 1, sizeof(int));

        FUZZ_ASSERT(expect && ifindex);
        fuzz_clock_init(&clock);
        fuzz_kernel_init(&k);
        FUZZ_ASSERT(engine_new(base, &cfg, &clock.clock, -1, &k.transport, &apply_writer_ops, &apply_probation_ops,
                               &e) == 0);
        k.engine = e;
        FUZZ_ASSERT(sync_new(e, NULL, 0, &s) == 0);
        FuzzNetns ns;
        fuzz_netns_new(base, e, s, policy, &ns);

        size_t n_stale = 0;
        for (size_t i = 0; i < n; i++) {
                FUZZ_ASSERT(!device_get(&e->devices, entries[i].ifindex)); /* one entry per device */
                announce(&k, s, &entries[i]);
                const Device *d = device_get(&e->devices, entries[i].ifindex);
                FUZZ_ASSERT(d);
                expect[i] = expect_of(&entries[i]);
                expect[i].stale = !state_entry_is_device(&entries[i], d, NULL);
                n_stale += expect[i].stale;
                ifindex[i] = entries[i].ifindex;
        }
        apply_loaded_state(e, entries, n);
        for (size_t i = 0; i < n; i++) {
                const StateEntry *x = &entries[i];
                const Device *d = device_get(&e->devices, ifindex[i]);
                if (expect[i].stale) {
                        /* none of another's: no originals, no hold, no probation, no record */
                        FUZZ_ASSERT(d && !d->record.has_original && !d->life.held && !d->probation && !device_history_get(d)->last_rollback &&
                                    d->life.state == DEVICE_UNMANAGED);
                        continue;
                }
                FUZZ_ASSERT(d && d->record.has_original && d->life.state == expect[i].state);
                FUZZ_ASSERT(sizes_same(&d->record.original, &x->original) && d->record.written == x->written);
                FUZZ_ASSERT(d->record.has_last_good == x->has_last_good && (!d->record.has_last_good || sizes_same(&d->record.last_good, &x->last_good)));
                FUZZ_ASSERT(d->life.held == expect[i].held && (!d->life.held || sizes_same(&device_history_get(d)->held_desired, &x->held_desired)));
                FUZZ_ASSERT(!!d->probation == expect[i].probation && !!device_history_get(d)->last_rollback == expect[i].rollback);
        }

        /* the snapshot the first save after a restart writes, read back */
        FUZZ_ASSERT(state_store_save(e->state) == 0);
        read_back(&back, &n_back, &generation);
        FUZZ_ASSERT(generation == 1 && n_back == n - n_stale);
        for (size_t i = 0; i < n_back; i++) {
                const StateEntry *x = &back[i];
                const Device *d = device_get(&e->devices, x->ifindex);
                char mac[DEVICE_MAC_STRLEN];
                FUZZ_ASSERT(d && streq_ptr(x->ifname, d->ifname) && x->state == d->life.state);
                FUZZ_ASSERT(x->has_identity && streq_ptr(x->kind, d->kind ?: "") &&
                            streq_ptr(x->mac, device_identity_mac(d, mac)) && state_entry_is_device(x, d, NULL));
                FUZZ_ASSERT(sizes_same(&x->original, &d->record.original) && x->written == d->record.written);
                FUZZ_ASSERT(x->has_last_good == d->record.has_last_good && (!x->has_last_good || sizes_same(&x->last_good, &d->record.last_good)));
                FUZZ_ASSERT(x->held == d->life.held && (!x->held || sizes_same(&x->held_desired, &device_history_get(d)->held_desired)));
                check_probation(d, x->probation);
                check_rollback(device_history_get(d)->last_rollback, x->last_rollback);
        }
        state_entries_free(back, n_back);

        /* the first tick after the restart: every resumed probation is due */
        FUZZ_ASSERT(event_watch_add(&e->events, fuzz_check_event, e) > 0);
        fuzz_check_views(&ns.control);
        probation_tick(e->probation);
        fuzz_kernel_answer(&k, s, stats64);
        fuzz_engine_check(e, &k);
        fuzz_check_views(&ns.control);

        fuzz_netns_free(&ns); /* e and s with it */
        FUZZ_ASSERT(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE) == 0);
        fuzz_kernel_done(&k);
        fuzz_state_files_remove(runtime_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nul = memchr(data, '\0', size);
        size_t snap_size = nul ? (size_t) (nul - data) : size;
        size_t journal_size = nul ? size - snap_size - 1 : 0;
        StateEntry *entries = NULL;
        uint64_t generation = 0;
        size_t n = 0;
        char *snap_text, *journal_text;
        int r;

        /* each file in a buffer of its own size: an over-read is caught */
        snap_text = malloc(snap_size ? snap_size : 1);
        journal_text = malloc(journal_size ? journal_size : 1);
        FUZZ_ASSERT(snap_text && journal_text);
        memcpy(snap_text, data, snap_size);
        if (nul)
                memcpy(journal_text, nul + 1, journal_size);

        r = state_parse(snap_text, snap_size, &entries, &n, &generation, NULL);
        FUZZ_ASSERT(r == 0 || r == -EBADMSG || r == -ENOMEM || r == -EFBIG);
        if (r == 0 && nul) {
                r = state_journal_apply(journal_text, journal_size, generation, &entries, &n, NULL);
                FUZZ_ASSERT(r == 0 || r == -ENOMEM);
                if (r < 0) {
                        state_entries_free(entries, n);
                        entries = NULL, n = 0;
                }
        }
        if (r == 0) {
                FUZZ_ASSERT(n == 0 || entries);
                for (size_t i = 0; i < n; i++)
                        check_entry(&entries[i]);
                restart(entries, n);
                state_entries_free(entries, n);
        }
        free(snap_text);
        free(journal_text);
        return 0;
}
