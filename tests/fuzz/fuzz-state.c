/* fuzz-state — the state parsers on arbitrary bytes: the snapshot (state.json) and the journal
 * (state.journal) replayed onto it, as a file truncated by a crash, corrupted on disk, or written
 * by someone else into the runtime directory leaves them. What parses is then used the way a
 * restart uses it: put on devices (sync.c apply_loaded_state()), shown (`bigtcpctl list`), and
 * its probations sampled.
 *
 * Input: the snapshot, then optionally a NUL byte and the journal (neither file holds a NUL). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "counters.h"
#include "fuzz.h"
#include "guard.h"
#include "state.h"

static Manager manager; /* control_device_json reads only ipv4_supported */
static SnmpSnapshot snap;
static uint8_t stats[sizeof(uint64_t) * 32];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        static const char text[] = "Ip: Forwarding InHdrErrors\nIp: 1 7\n"
                                   "Tcp: RetransSegs OutSegs\nTcp: 12 100000\n";
        fuzz_quiet();
        FUZZ_ASSERT(snmp_parse(&snap, text, false) == 0);
        snmp_finish(&snap);
        for (size_t i = 0; i < sizeof(stats) / sizeof(uint64_t); i++) {
                uint64_t v = i * 1000003u;
                memcpy(stats + i * sizeof(v), &v, sizeof(v));
        }
        return 0;
}

static void check_entry(const StateEntry *e) {
        FUZZ_ASSERT(e->ifindex > 0);
        if (e->ifname)
                FUZZ_USE(strlen(e->ifname));
        FUZZ_ASSERT(e->state == _DEVICE_STATE_INVALID || device_state_to_string(e->state));
        if (e->probation) {
                const Probation *p = e->probation;
                FUZZ_ASSERT(p->interval_usec > 0);
                FUZZ_ASSERT(p->n_guards <= POLICY_GUARDS_MAX);
                for (size_t i = 0; i < p->n_guards; i++) {
                        FUZZ_ASSERT(p->guards[i].counter);
                        FUZZ_USE(strlen(p->guards[i].counter));
                        if (p->guards[i].per)
                                FUZZ_USE(strlen(p->guards[i].per));
                }
        }
        if (e->last_rollback) {
                FUZZ_ASSERT(e->last_rollback->counter);
                FUZZ_USE(strlen(e->last_rollback->counter));
                if (e->last_rollback->per)
                        FUZZ_USE(strlen(e->last_rollback->per));
        }
}

/* A device table as the first dump after a restart finds it, with the entries put on their
 * devices like apply_loaded_state() does. That code takes each entry's probation and rollback
 * record and links the device into the probation list, so it relies on one entry per ifindex. */
static void restore(StateEntry *entries, size_t n) {
        DeviceTable t;
        Device *d;

        if (device_table_init(&t) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                StateEntry *e = &entries[i];
                char name[32];

                FUZZ_ASSERT(!device_get(&t, e->ifindex)); /* one entry per device */
                if (device_add(&t, e->ifindex, &d) < 0)
                        break;
                snprintf(name, sizeof(name), "eth%d", e->ifindex);
                d->ifname = strdup(e->ifname ?: name);
                d->has_original = true;
                d->original = e->original;
                d->written_families = e->written_families;
                d->has_last_good = e->has_last_good;
                d->last_good = e->last_good;
                d->last_rollback = e->last_rollback;
                e->last_rollback = NULL;
                d->state = DEVICE_APPLIED;
                if (e->state == DEVICE_ROLLED_BACK) {
                        d->state = DEVICE_ROLLED_BACK;
                        d->held_desired = e->held_desired;
                } else if (e->probation) {
                        d->probation = e->probation;
                        e->probation = NULL;
                        d->state = DEVICE_PROBATION;
                }
        }

        manager.ipv4_supported = n % 2 == 0;
        DEVICE_FOREACH(d, &t, it) {
                if (d->probation) {
                        RollbackRecord why;
                        /* the first sample after the restart */
                        probation_link_baseline(d->probation, stats, sizeof(stats));
                        if (probation_check(d->probation, &snap, stats, sizeof(stats), &why) > 0)
                                FUZZ_ASSERT(why.counter);
                        FUZZ_USE(probation_has_link_guards(d->probation));
                        FUZZ_USE(probation_has_snmp_guards(d->probation));
                }
                json_object *o = control_device_json(&manager, d);
                if (o) {
                        fuzz_check_json(o);
                        FUZZ_USE(strlen(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)));
                        json_object_put(o);
                }
        }
        device_table_done(&t);
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

        fuzz_quiet();
        /* each file in a buffer of its own size: an over-read is caught */
        snap_text = malloc(snap_size ? snap_size : 1);
        journal_text = malloc(journal_size ? journal_size : 1);
        FUZZ_ASSERT(snap_text && journal_text);
        memcpy(snap_text, data, snap_size);
        if (nul)
                memcpy(journal_text, nul + 1, journal_size);

        r = state_parse_full(snap_text, snap_size, &entries, &n, &generation);
        FUZZ_ASSERT(r == 0 || r == -EBADMSG || r == -ENOMEM || r == -EFBIG);
        if (r == 0 && nul) {
                r = state_journal_apply(journal_text, journal_size, generation, &entries, &n);
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
                restore(entries, n);
                state_entries_free(entries, n);
        }
        free(snap_text);
        free(journal_text);
        return 0;
}
