/* state-read.c — state.json and state.journal read back: each entry parsed and checked (a bad one
 * set aside, costing only itself), the entries indexed by ifindex, the files cut into lines, a
 * snapshot of any layout an earlier version wrote, and the journal replayed onto it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "counters.h"
#include "auto-size.h"
#include "json-scan.h"
#include "state-internal.h"

/* Every entry is read with json-scan.h: the ten thousand lines of a restart over ten thousand
 * devices cost no tree each (a json-c tree was an allocation or two per value and a hash table per
 * object: most of a restart's time). `J` is the scanner the value is in. */
typedef const JsonScan J;

static int get_u32(J *j, const JsonValue *o, const char *key, uint32_t *ret) {
        const JsonValue *v = json_get(j, o, key);
        if (!json_is(v, JSON_SCAN_INT) || v->i < 0 || v->i > UINT32_MAX)
                return -EBADMSG;
        *ret = (uint32_t) v->i;
        return 0;
}

void state_entries_free_one(StateEntry *e) {
        auto_device_free(e->autosize);
        free(e->ifname);
        free(e->kind);
        free(e->mac);
        probation_free(e->probation);
        rollback_record_free(e->last_rollback);
        *e = (StateEntry){};
}

void state_entries_free(StateEntry *e, size_t n) {
        for (size_t i = 0; e && i < n; i++) {
                auto_device_free(e[i].autosize);
                free(e[i].ifname);
                free(e[i].kind);
                free(e[i].mac);
                probation_free(e[i].probation);
                rollback_record_free(e[i].last_rollback);
        }
        free(e);
}

/* Four sizes, each within what a kernel takes (GSO never 0): what a write may be given. */
static int get_sizes_of(J *j, const JsonValue *v, Sizes *ret) {
        Sizes s;

        if (!json_is(v, JSON_SCAN_OBJECT))
                return -EBADMSG;
        if (get_u32(j, v, "gso_max_size", &s.gso_max_size) < 0 || get_u32(j, v, "gro_max_size", &s.gro_max_size) < 0 ||
            get_u32(j, v, "gso_ipv4_max_size", &s.gso_ipv4_max_size) < 0 ||
            get_u32(j, v, "gro_ipv4_max_size", &s.gro_ipv4_max_size) < 0)
                return -EBADMSG;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (sizes_get(&s, i) > STATE_SIZE_MAX || (i % 2 == 0 && sizes_get(&s, i) == 0))
                        return -ERANGE;
        *ret = s;
        return 0;
}

static int get_sizes(J *j, const JsonValue *o, const char *key, Sizes *ret) {
        const JsonValue *v = json_get(j, o, key);
        if (!v)
                return -EBADMSG;
        return get_sizes_of(j, v, ret);
}

static int get_u64(J *j, const JsonValue *o, const char *key, uint64_t *ret) {
        const JsonValue *v = json_get(j, o, key);
        if (!json_is(v, JSON_SCAN_INT) || v->i < 0)
                return -EBADMSG;
        *ret = (uint64_t) v->i;
        return 0;
}

static bool get_bool(J *j, const JsonValue *o, const char *key) {
        const JsonValue *v = json_get(j, o, key);
        return json_is(v, JSON_SCAN_BOOL) && v->boolean;
}

static const char *get_str(J *j, const JsonValue *o, const char *key) {
        return json_string(j, json_get(j, o, key));
}

/* One search of `auto` read back; anything out of what a search can be drops it (it begins again). */
static int auto_search_from_json(J *j, const JsonValue *v, unsigned *ret_index, AutoSearch *ret) {
        AutoSearch s = {};
        const char *size = get_str(j, v, "size"), *counter = get_str(j, v, "counter");
        unsigned index = SIZES_COUNT;
        uint32_t steps, trips;

        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (streq_ptr(size, size_name(i)))
                        index = i;
        s.phase = auto_phase_from_string(get_str(j, v, "phase"));
        if (index == SIZES_COUNT || s.phase < 0 || s.phase == AUTO_NEW || get_u32(j, v, "min", &s.min) < 0 ||
            get_u32(j, v, "max", &s.max) < 0 || get_u32(j, v, "proven", &s.proven) < 0 ||
            get_u64(j, v, "proven_packets", &s.proven_packets) < 0 || get_u32(j, v, "trying", &s.trying) < 0 ||
            get_u32(j, v, "ceiling", &s.ceiling) < 0 || get_u64(j, v, "ceiling_usec", &s.ceiling_usec) < 0 ||
            get_u64(j, v, "rise", &s.ceiling_rise) < 0 || get_u64(j, v, "retry_usec", &s.retry_usec) < 0 ||
            get_u64(j, v, "idle_wait_usec", &s.idle_wait_usec) < 0 || get_u32(j, v, "steps", &steps) < 0 ||
            get_u32(j, v, "trips", &trips) < 0 || !counter || strlen(counter) >= AUTO_COUNTER_MAX)
                return -EBADMSG;
        s.reprobe = s.ceiling != 0 && get_bool(j, v, "reprobe");
        /* min is the policy's (65536 or more), unless the device's limit is below it: then the
         * bounds are that limit alone */
        if (s.min == 0 || s.min > s.max || s.max > STATE_SIZE_MAX || (s.min < AUTO_SIZE_MIN_DEFAULT && s.min != s.max) ||
            s.proven < s.min || s.proven > s.max || (s.ceiling != 0 && (s.ceiling <= s.proven || s.ceiling > s.max)))
                return -ERANGE;
        /* The size tried is the one a restart writes: checked as whole as a step makes it — above
         * the proven size, at most twice it (auto_search_next()), within the bound and below the
         * ceiling (the ceiling itself only when it is tried once more); none outside a step. */
        if (s.phase == AUTO_TRYING) {
                if (s.trying <= s.proven || s.trying > s.max || s.trying > UINT64_C(2) * s.proven ||
                    (s.ceiling != 0 && (s.trying > s.ceiling || (s.trying == s.ceiling && !s.reprobe))))
                        return -ERANGE;
        } else if (s.trying != 0)
                return -ERANGE;
        /* how the proven size was proven: absent in a state file of a run before it was said */
        const char *proof = get_str(j, v, "proof");
        if (proof && strlen(proof) >= AUTO_PROOF_MAX)
                return -EBADMSG;
        /* settled with a step left: nothing would ever step it again under the same bounds */
        if (s.phase == AUTO_SETTLED && auto_search_next(&s) != 0)
                return -ERANGE;
        s.steps = steps;
        s.trips = trips;
        /* its words last, once nothing can refuse it: references *ret holds ("": none) */
        auto_words_set(&s.ceiling_counter, counter, AUTO_COUNTER_MAX);
        auto_search_set_proof(&s, proof);
        *ret_index = index;
        *ret = s;
        return 0;
}

/* 0, or 1 when some of them were dropped (what a search cannot be): the others kept. */
static int auto_from_json(J *j, const JsonValue *a, AutoDevice **ret) {
        AutoSearch all[SIZES_COUNT];
        unsigned sizes = 0;
        bool dropped = false;
        AutoDevice *d;
        size_t k = 0;

        if (!json_is(a, JSON_SCAN_ARRAY))
                return -EBADMSG;
        for (const JsonValue *v = json_first(j, a); v && k < SIZES_COUNT; v = json_next(j, a, v), k++) {
                AutoSearch s;
                unsigned i;

                if (auto_search_from_json(j, v, &i, &s) < 0) {
                        dropped = true;
                        continue;
                }
                if (sizes & (1u << i))
                        auto_search_done(&all[i]); /* a size twice: the last one stands */
                all[i] = s;
                sizes |= 1u << i;
        }
        if (sizes == 0)
                return -EBADMSG;
        d = auto_device_new(sizes); /* room for these alone */
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (sizes & (1u << i)) {
                        if (d)
                                *auto_device_search(d, i) = all[i]; /* its references with it */
                        else
                                auto_search_done(&all[i]);
                }
        if (!d)
                return -ENOMEM;
        *ret = d;
        return dropped;
}

/* A counter name as the file gives it: one a policy could name (its kind from the name). */
static int counter_from_json(J *j, const JsonValue *o, const char *key, char **ret, GuardCounterKind *ret_kind) {
        const char *name = get_str(j, o, key);

        if (!name || guard_counter_parse(name, ret_kind) < 0)
                return -EBADMSG;
        *ret = (char *) name; /* read only (guard_rules_get()) */
        return 0;
}

/* A probation as state_format() wrote it: each guard with its rule, from which its rules are found
 * again (guard_rules_get(): shared with every other device of the same guards, and with those the
 * policy begins now if it did not change them), and its baselines, the device's own. */
static int probation_from_json(J *j, const JsonValue *o, Probation **ret) {
        _cleanup_(freep) Guard *rules = NULL;
        const JsonValue *a = json_get(j, o, "guards"), *item;
        GuardRules *gr;
        Probation *p;
        uint64_t until_usec, window_usec, interval_usec;
        size_t i;
        int r;

        if (!json_is(o, JSON_SCAN_OBJECT) || !json_is(a, JSON_SCAN_ARRAY) || a->n > POLICY_GUARDS_MAX)
                return -EBADMSG;
        size_t n = a->n;
        /* the window and interval go with the rules (the key they are found again by) */
        if (get_u64(j, o, "until_boottime_usec", &until_usec) < 0 || get_u64(j, o, "window_usec", &window_usec) < 0 ||
            get_u64(j, o, "interval_usec", &interval_usec) < 0 || interval_usec == 0)
                return -EBADMSG;
        rules = calloc(n ?: 1, sizeof(Guard));
        if (!rules)
                return -ENOMEM;
        for (item = json_first(j, a), i = 0; item; item = json_next(j, a, item), i++) {
                const JsonValue *v;
                Guard *g = &rules[i];
                if (!json_is(item, JSON_SCAN_OBJECT) ||
                    counter_from_json(j, item, "counter", &g->counter, &g->counter_kind) < 0)
                        return -EBADMSG;
                if (json_get(j, item, "per") && counter_from_json(j, item, "per", &g->per, &g->per_kind) < 0)
                        return -EBADMSG;
                if (json_get(j, item, "max_increase")) {
                        if (get_u64(j, item, "max_increase", &g->max_increase) < 0)
                                return -EBADMSG;
                        g->has_max_increase = true;
                }
                if ((v = json_get(j, item, "max_ratio"))) {
                        if (!json_is(v, JSON_SCAN_DOUBLE) && !json_is(v, JSON_SCAN_INT))
                                return -EBADMSG;
                        g->max_ratio = json_double(v);
                        /* 1e400 reads as inf, which a policy never gives and JSON cannot say:
                         * such a guard is taken as having no ratio */
                        g->has_max_ratio = g->per != NULL && isfinite(g->max_ratio) && g->max_ratio >= 0;
                }
        }
        r = guard_rules_get(&(RollbackSpec){.window_usec = window_usec, .interval_usec = interval_usec,
                                            .guards = rules, .n_guards = n},
                            &gr);
        if (r < 0)
                return r == -ENOMEM ? r : -EBADMSG;
        p = probation_alloc(gr); /* (the rules come first: their count is its room) */
        if (!p)
                return -ENOMEM;
        p->until_usec = until_usec;
        /* each guard's flags and baselines, the device's own */
        for (item = json_first(j, a), i = 0; item; item = json_next(j, a, item), i++) {
                const Guard *g = &rules[i];
                GuardBase *b = &p->guards.items[i];
                if (get_bool(j, item, "active"))
                        p->guards.active |= UINT64_C(1) << i;
                /* the observer's counters began again with this run's: baselines again */
                if (get_bool(j, item, "have_base") && g->counter_kind != GUARD_COUNTER_OBSERVER &&
                    !(g->per && g->per_kind == GUARD_COUNTER_OBSERVER))
                        p->guards.have_base |= UINT64_C(1) << i;
                (void) get_u64(j, item, "base", &b->base);
                (void) get_u64(j, item, "per_base", &b->per_base);
        }
        *ret = p;
        return 0;
}

static int rollback_from_json(J *j, const JsonValue *o, RollbackRecord **ret) {
        RollbackRecord *r = calloc(1, sizeof(*r));
        const JsonValue *v;
        const char *c, *per;

        if (!r)
                return -ENOMEM;
        c = get_str(j, o, "counter");
        per = get_str(j, o, "per");
        r->counter = strdup(c ?: "");
        r->per = per ? strdup(per) : NULL;
        (void) get_u64(j, o, "rise", &r->rise);
        (void) get_u64(j, o, "per_rise", &r->per_rise);
        (void) get_u64(j, o, "time_usec", &r->realtime_usec);
        /* as written: state_format() puts 0 for a non-finite threshold */
        if ((v = json_get(j, o, "threshold")) && isfinite(json_double(v)))
                r->threshold = json_double(v);
        r->namespace_wide = get_bool(j, o, "namespace_wide");
        (void) get_sizes(j, o, "from", &r->from);
        (void) get_sizes(j, o, "to", &r->to);
        if (!r->counter || (per && !r->per)) {
                rollback_record_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

/* One device's entry. -EBADMSG when what a restart needs to give its sizes back (the ifindex, the
 * originals, the sizes written) is missing or malformed, or an original out of what a kernel takes
 * (*ret_why says which); a damaged last-good, hold or probation is dropped alone (*ret_partial,
 * *ret_why). */
static int parse_entry(J *j, const JsonValue *e, StateEntry *ret_entry, const char **ret_why, bool *ret_partial) {
        const JsonValue *fam, *pv;
        uint32_t ifindex;
        int r;

        *ret_entry = (StateEntry){};
        *ret_partial = false;
        if (!json_is(e, JSON_SCAN_OBJECT)) {
                *ret_why = "not an object";
                return -EBADMSG;
        }
        if (get_u32(j, e, "ifindex", &ifindex) < 0 || ifindex == 0 || ifindex > INT32_MAX) {
                *ret_why = "no ifindex, or not one (1..2147483647)";
                return -EBADMSG;
        }
        ret_entry->ifindex = (int) ifindex;
        r = get_sizes(j, e, "original", &ret_entry->original);
        if (r < 0) {
                *ret_why = r == -ERANGE ? "an original size out of what the kernel takes (GSO 1..524280, GRO 0..524280)"
                                    : "no original sizes, or not four numbers 0..4294967295";
                return -EBADMSG;
        }
        fam = json_get(j, e, "written");
        bool families = !fam;
        if (families)
                fam = json_get(j, e, "families");
        if (!json_is(fam, JSON_SCAN_ARRAY)) {
                *ret_why = "no list of the sizes written";
                return -EBADMSG;
        }
        for (const JsonValue *f = json_first(j, fam); f; f = json_next(j, fam, f)) {
                const char *size = json_string(j, f);
                unsigned bit = 0;
                if (families) {
                        /* written by an earlier version: whole families */
                        bit = streq_ptr(size, "ipv6") ? SIZE_BITS_IPV6 : streq_ptr(size, "ipv4") ? SIZE_BITS_IPV4 : 0;
                } else
                        for (unsigned i = 0; i < SIZES_COUNT; i++)
                                if (streq_ptr(size, size_name(i)))
                                        bit = 1u << i;
                if (bit == 0) {
                        /* giving back less than was written is what this reader is there to prevent */
                        *ret_why = "a size written that is not one of the four";
                        return -EBADMSG;
                }
                ret_entry->written |= bit;
        }
        const char *name = get_str(j, e, "ifname");
        if (name && !(ret_entry->ifname = strdup(name)))
                goto oom;
        /* Written since entries carry an identity; an entry without one is of an earlier version
         * and taken to be its ifindex's device, as it always was (state_entry_is_device()). */
        const char *kind = get_str(j, e, "kind"), *mac = get_str(j, e, "mac");
        if (kind && mac) {
                ret_entry->has_identity = true;
                ret_entry->kind = strdup(kind);
                ret_entry->mac = strdup(mac);
                if (!ret_entry->kind || !ret_entry->mac)
                        goto oom;
        }
        const char *st = get_str(j, e, "state");
        ret_entry->state = st ? device_state_from_string(st) : _DEVICE_STATE_INVALID;
        /* What follows only says where a rollback goes and what runs: without it the device is
         * resumed as applied, its originals kept. */
        if (json_get(j, e, "last_good")) {
                ret_entry->has_last_good = get_sizes(j, e, "last_good", &ret_entry->last_good) >= 0;
                if (!ret_entry->has_last_good)
                        *ret_partial = true, *ret_why = "its last-good sizes (dropped: a rollback goes to the originals)";
        }
        if (json_is(pv = json_get(j, e, "proven"), JSON_SCAN_ARRAY)) {
                size_t np = pv->n, i = 0;
                /* the most recent are last: a longer list (a later version's) keeps those; one
                 * that does not read is only fewer proven sizes */
                for (const JsonValue *v = json_first(j, pv); v; v = json_next(j, pv, v), i++) {
                        Sizes p;
                        if (i + PROVEN_SIZES_MAX >= np && get_sizes_of(j, v, &p) >= 0)
                                ret_entry->proven.items[ret_entry->proven.n++] = p;
                }
        }
        if (json_get(j, e, "held")) {
                ret_entry->held = get_sizes(j, e, "held", &ret_entry->held_desired) >= 0;
                if (!ret_entry->held)
                        *ret_partial = true, *ret_why = "its hold (dropped)";
        }
        if ((pv = json_get(j, e, "probation"))) {
                r = probation_from_json(j, pv, &ret_entry->probation);
                if (r == -ENOMEM)
                        goto oom;
                if (r < 0)
                        *ret_partial = true, *ret_why = "its probation (dropped: resumed as applied)";
        }
        if (json_is(pv = json_get(j, e, "last_rollback"), JSON_SCAN_OBJECT) &&
            rollback_from_json(j, pv, &ret_entry->last_rollback) < 0)
                goto oom;
        if ((pv = json_get(j, e, "auto"))) {
                r = auto_from_json(j, pv, &ret_entry->autosize);
                if (r == -ENOMEM)
                        goto oom;
                if (r < 0)
                        *ret_partial = true, *ret_why = "its searches of auto (dropped: they begin again)";
                else if (r > 0)
                        *ret_partial = true, *ret_why = "a search of auto (dropped: it begins again)";
        }
        return 0;
oom:
        state_entries_free_one(ret_entry);
        return -ENOMEM;
}

/* A JSON object of its own (a line of the journal, an entry of the snapshot, a header), read into
 * `j` in place of what it held: NULL when it is not one (and nothing but white space after it: a
 * line is one object, not the start of two), or without memory. */
static const JsonValue *parse_json(JsonScan *j, const char *data, size_t size) {
        const JsonValue *root;

        if (size > STATE_READ_MAX || json_scan(j, data, size) < 0)
                return NULL;
        root = json_scan_root(j);
        return json_is(root, JSON_SCAN_OBJECT) ? root : NULL;
}

static size_t slot_of(const Entries *x, int ifindex) {
        size_t mask = x->n_slots - 1, i = ((unsigned) ifindex * 2654435761u) & mask;

        while (x->slots[i].ifindex != 0 && x->slots[i].ifindex != ifindex)
                i = (i + 1) & mask;
        return i;
}

/* Room for one more slot, at most half of them used. */
static int entries_reserve(Entries *x) {
        EntrySlot *old = x->slots;
        size_t n_old = x->n_slots;

        if (x->n_slots > 0 && (x->used + 1) * 2 <= x->n_slots)
                return 0;
        x->n_slots = n_old ? n_old * 2 : 128;
        x->slots = calloc(x->n_slots, sizeof(EntrySlot));
        if (!x->slots) {
                x->slots = old;
                x->n_slots = n_old;
                return -ENOMEM;
        }
        for (size_t i = 0; i < n_old; i++)
                if (old[i].ifindex != 0)
                        x->slots[slot_of(x, old[i].ifindex)] = old[i];
        free(old);
        return 0;
}

/* Replace the entry of the same device, or add it. Takes *e on success. The list grows by half
 * (not twice) its size: at 10000 devices it is the largest thing a load holds. */
static int entries_put(Entries *x, StateEntry *e) {
        size_t k;

        if (entries_reserve(x) < 0)
                return -ENOMEM;
        k = slot_of(x, e->ifindex);
        if (x->slots[k].ifindex == e->ifindex) {
                StateEntry *old = &x->items[x->slots[k].pos];
                state_entries_free_one(old);
                *old = *e;
                return 0;
        }
        if (x->n == x->cap) {
                size_t c = x->cap < 64 ? 64 : x->cap + x->cap / 2;
                StateEntry *items = reallocarray(x->items, c, sizeof(StateEntry));
                if (!items)
                        return -ENOMEM;
                x->items = items;
                x->cap = c;
        }
        x->slots[k] = (EntrySlot){e->ifindex, x->n};
        x->used++;
        x->items[x->n++] = *e;
        return 0;
}

static void entries_drop(Entries *x, int ifindex) {
        size_t k;

        if (ifindex <= 0 || x->n_slots == 0)
                return;
        k = slot_of(x, ifindex);
        if (x->slots[k].ifindex == ifindex)
                state_entries_free_one(&x->items[x->slots[k].pos]); /* a hole; the slot stays */
}

/* Index entries that are one per device already. */
static int entries_init(Entries *x, StateEntry *items, size_t n) {
        *x = (Entries){.items = items, .n = n, .cap = n};
        for (size_t i = 0; i < n; i++) {
                if (entries_reserve(x) < 0)
                        return -ENOMEM;
                x->slots[slot_of(x, items[i].ifindex)] = (EntrySlot){items[i].ifindex, i};
                x->used++;
        }
        return 0;
}

/* Close up the holes, in order, and hand the list out. */
void state_entries_index_done(Entries *x, StateEntry **ret, size_t *ret_n) {
        size_t k = 0;

        for (size_t i = 0; i < x->n; i++)
                if (x->items[i].ifindex != 0)
                        x->items[k++] = x->items[i];
        free(x->slots);
        *ret = x->items;
        *ret_n = k;
        *x = (Entries){};
}

void state_entries_index_free(Entries *x) {
        state_entries_free(x->items, x->n);
        free(x->slots);
        *x = (Entries){};
}

/* ---- reading a line at a time ---- */

#define READ_CHUNK (64u * 1024u)

void state_lines_init_fd(Lines *l, int fd) {
        *l = (Lines){.fd = fd};
}

static void lines_init_mem(Lines *l, const char *data, size_t size) {
        *l = (Lines){.fd = -1, .mem = data, .mem_size = size};
}

void state_lines_done(Lines *l) {
        free(l->buf);
        l->buf = NULL;
}

/* The next line, without its newline, in *ret (not NUL-terminated), *ret_whole when a newline ended
 * it. 1: a line; 0: the end; -errno. A line longer than STATE_LINE_MAX comes back as *ret NULL
 * (the rest of it skipped): no entry is ever that long. */
static int lines_next(Lines *l, const char **ret, size_t *ret_len, bool *ret_whole) {
        bool too_long = false;

        if (l->fd < 0) {
                const char *p = l->mem + l->mem_off, *end = l->mem + l->mem_size, *nl;
                if (p >= end)
                        return 0;
                nl = memchr(p, '\n', (size_t) (end - p));
                *ret_len = (size_t) ((nl ?: end) - p);
                *ret = *ret_len > STATE_LINE_MAX ? NULL : p;
                *ret_whole = nl != NULL;
                l->mem_off = nl ? (size_t) (nl - l->mem) + 1 : l->mem_size;
                l->line++;
                return 1;
        }
        for (;;) {
                char *p = l->buf + l->start, *nl = l->len > l->start ? memchr(p, '\n', l->len - l->start) : NULL;
                if (nl || (l->eof && l->len > l->start)) {
                        size_t n = (size_t) ((nl ?: l->buf + l->len) - p);
                        *ret = too_long || n > STATE_LINE_MAX ? NULL : p;
                        *ret_len = n;
                        *ret_whole = nl != NULL;
                        l->start += n + (nl != NULL);
                        l->line++;
                        return 1;
                }
                if (l->eof && !too_long)
                        return 0;
                if (l->eof) {
                        /* the end of a line too long to keep */
                        *ret = NULL;
                        *ret_len = 0;
                        *ret_whole = false;
                        l->line++;
                        return 1;
                }
                if (l->len - l->start > STATE_LINE_MAX) {
                        too_long = true; /* what is read of it goes */
                        l->start = l->len;
                }
                if (l->start > 0) {
                        memmove(l->buf, l->buf + l->start, l->len - l->start);
                        l->len -= l->start;
                        l->start = 0;
                }
                if (l->cap - l->len < READ_CHUNK) {
                        size_t cap = l->len + READ_CHUNK;
                        char *b = realloc(l->buf, cap);
                        if (!b)
                                return -ENOMEM;
                        l->buf = b;
                        l->cap = cap;
                }
                ssize_t k = read(l->fd, l->buf + l->len, l->cap - l->len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        l->eof = true;
                l->len += (size_t) k;
        }
}

static int lines_rewind(Lines *l) {
        if (l->fd < 0) {
                l->mem_off = 0;
        } else {
                if (lseek(l->fd, 0, SEEK_SET) < 0)
                        return -errno;
                l->start = l->len = 0;
                l->eof = false;
        }
        l->line = 0;
        return 0;
}

static void set_aside(StateReadReport *rep, size_t line, int ifindex, bool partial, const char *reason) {
        if (rep->n_aside < STATE_ASIDE_MAX)
                rep->aside[rep->n_aside] = (StateAside){line, ifindex, partial, reason};
        rep->n_aside++;
}

/* Parse and keep one entry; a bad one is set aside. Only -ENOMEM fails. */
static int take_entry(Entries *x, J *j, const JsonValue *o, size_t line, StateReadReport *rep) {
        const char *why = NULL;
        bool partial;
        uint32_t ifindex = 0;
        StateEntry s;
        int r;

        r = parse_entry(j, o, &s, &why, &partial);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                (void) get_u32(j, o, "ifindex", &ifindex);
                set_aside(rep, line, ifindex <= INT32_MAX ? (int) ifindex : 0, false, why);
                return 0;
        }
        if (partial)
                set_aside(rep, line, s.ifindex, true, why);
        r = entries_put(x, &s);
        if (r < 0)
                state_entries_free_one(&s);
        return r;
}

/* ---- the snapshot ----
 *
 * As state_format() writes it, one entry a line:
 *   {"version":1,"generation":7,"devices":[
 *   {…entry…},
 *   {…entry…}]}
 * (an empty one all on its first line). A file of another layout (all on one line, as earlier
 * versions wrote it, or reformatted by hand) is read whole, if it is small enough to be. */

#define SNAPSHOT_TREE_MAX (4u * 1024u * 1024u)
#define HEADER_TAIL "\"devices\":["

static int header_of(J *j, const JsonValue *o, uint64_t *ret_generation) {
        const JsonValue *v = json_get(j, o, "version");
        uint64_t g = 0;

        if (!json_is(v, JSON_SCAN_INT) || v->i != 1)
                return -EBADMSG;
        if (json_get(j, o, "generation") && get_u64(j, o, "generation", &g) < 0)
                return -EBADMSG;
        *ret_generation = g;
        return 0;
}

/* A document read whole: its header, then each entry of "devices" on its own. */
static int snapshot_tree(J *j, const JsonValue *root, Entries *x, uint64_t *ret_generation, StateReadReport *rep) {
        const JsonValue *list = json_get(j, root, "devices");
        int r;

        if (header_of(j, root, ret_generation) < 0) {
                rep->bad_header = true;
                *ret_generation = STATE_GENERATION_UNKNOWN;
        }
        if (!json_is(list, JSON_SCAN_ARRAY)) {
                rep->bad_header = true;
                *ret_generation = STATE_GENERATION_UNKNOWN;
                return 0;
        }
        for (const JsonValue *e = json_first(j, list); e; e = json_next(j, list, e)) {
                r = take_entry(x, j, e, 0, rep);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The text of the first line up to its "devices":[ as an object of its own: {"version":1,…}. */
static const JsonValue *parse_header_line(JsonScan *j, const char *p, size_t n) {
        _cleanup_(freep) char *h = NULL;
        size_t tail = strlen(HEADER_TAIL);

        if (n < tail + 1 || memcmp(p + n - tail, HEADER_TAIL, tail) != 0)
                return NULL;
        n -= tail;
        h = malloc(n + 1);
        if (!h)
                return NULL;
        memcpy(h, p, n);
        if (n > 1 && h[n - 1] == ',')
                n--;
        h[n++] = '}';
        return parse_json(j, h, n);
}

static void trim(const char **p, size_t *n) {
        while (*n > 0 && (**p == ' ' || **p == '\t' || **p == '\r'))
                (*p)++, (*n)--;
        while (*n > 0 && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t' || (*p)[*n - 1] == '\r'))
                (*n)--;
}

/* A whole snapshot, a line at a time. `size` is the file's (a tree is read only of a small one). */
int state_read_snapshot(Lines *l, size_t size, Entries *x, uint64_t *ret_generation, StateReadReport *rep) {
        _cleanup_(json_scan_done) JsonScan j = {};
        const JsonValue *o;
        const char *p;
        size_t n;
        bool whole, ended = false;
        int r;

        *rep = (StateReadReport){};
        *ret_generation = 0;
        r = lines_next(l, &p, &n, &whole);
        if (r <= 0)
                return r; /* empty: no entries */
        rep->lines += whole;
        o = p ? parse_json(&j, p, n) : NULL;
        if (o) {
                /* all of it on one line: an empty table, or an earlier version's file */
                r = snapshot_tree(&j, o, x, ret_generation, rep);
                ended = true;
                goto rest;
        }
        o = p ? parse_header_line(&j, p, n) : NULL;
        if (o && header_of(&j, o, ret_generation) >= 0)
                goto entries;
        if (size <= SNAPSHOT_TREE_MAX) {
                /* another layout of the whole document? */
                _cleanup_(freep) char *all = NULL;
                size_t len = 0;
                if (l->fd >= 0) {
                        r = lines_rewind(l);
                        if (r < 0)
                                return r;
                        all = malloc(size + 1);
                        if (!all)
                                return -ENOMEM;
                        while (len < size) {
                                ssize_t k = read(l->fd, all + len, size - len);
                                if (k < 0 && errno == EINTR)
                                        continue;
                                if (k < 0)
                                        return -errno;
                                if (k == 0)
                                        break;
                                len += (size_t) k;
                        }
                }
                o = l->fd >= 0 ? parse_json(&j, all, len) : parse_json(&j, l->mem, l->mem_size);
                if (o) {
                        *rep = (StateReadReport){};
                        return snapshot_tree(&j, o, x, ret_generation, rep);
                }
                r = lines_rewind(l);
                if (r < 0)
                        return r;
                r = lines_next(l, &p, &n, &whole);
                if (r <= 0)
                        return r;
        }
        /* Not a header this version reads (damaged, or a later version's): the entries that follow
         * are read all the same, each checked as any is. */
        rep->bad_header = true;
        *ret_generation = STATE_GENERATION_UNKNOWN;

entries:
        while (!ended) {
                r = lines_next(l, &p, &n, &whole);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                rep->lines += whole;
                if (!whole)
                        rep->torn_tail = true;
                if (!p) {
                        set_aside(rep, l->line, 0, false, "longer than any entry");
                        continue;
                }
                trim(&p, &n);
                if (n > 0 && *p == ',')
                        p++, n--;
                if (n >= 2 && memcmp(p + n - 2, "]}", 2) == 0)
                        n -= 2, ended = true;
                else if (n > 0 && p[n - 1] == ',')
                        n--;
                trim(&p, &n);
                if (n == 0)
                        continue;
                o = parse_json(&j, p, n);
                if (!o) {
                        set_aside(rep, l->line, 0, false, whole ? "not a JSON object" : "cut short");
                        continue;
                }
                r = take_entry(x, &j, o, l->line, rep);
                if (r < 0)
                        return r;
        }
        rep->truncated = !ended;
        r = 0;
rest:
        /* whatever follows the end was not written with it */
        while (r >= 0 && (r = lines_next(l, &p, &n, &whole)) > 0) {
                if (p)
                        trim(&p, &n);
                if (p && n == 0)
                        continue;
                rep->trailing++;
        }
        return r < 0 ? r : 0;
}

int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation,
                StateReadReport *ret_report) {
        StateReadReport rep;
        Entries x = {};
        Lines l;
        uint64_t generation;
        int r;

        if (size > STATE_READ_MAX)
                return -EFBIG;
        lines_init_mem(&l, data, size);
        r = state_read_snapshot(&l, size, &x, &generation, &rep);
        state_lines_done(&l);
        if (r < 0) {
                state_entries_index_free(&x);
                return r;
        }
        state_entries_index_done(&x, ret, ret_n);
        if (ret_generation)
                *ret_generation = generation;
        if (ret_report)
                *ret_report = rep;
        return 0;
}

/* ---- the journal ---- */

/* One whole line of the journal: 0 when applied, of another generation (a whole line from before
 * the last snapshot, safely passed over) or set aside. */
static int journal_line_apply(JsonScan *j, const char *line, size_t len, size_t line_no, uint64_t generation,
                              Entries *x, StateReadReport *rep) {
        const JsonValue *o = line ? parse_json(j, line, len) : NULL, *e;
        uint64_t g;
        uint32_t ifindex;

        if (!o || get_u64(j, o, "g", &g) < 0) {
                set_aside(rep, line_no, 0, false, !line ? "longer than any line" : !o ? "not a JSON object" : "no generation");
                return 0;
        }
        if (g != generation)
                return 0;
        if (get_bool(j, o, "forget")) {
                if (get_u32(j, o, "ifindex", &ifindex) >= 0 && ifindex > 0 && ifindex <= INT32_MAX)
                        entries_drop(x, (int) ifindex);
                else
                        set_aside(rep, line_no, 0, false, "a forget line without an ifindex");
                return 0;
        }
        if (!(e = json_get(j, o, "device"))) {
                set_aside(rep, line_no, 0, false, "neither an entry nor a forget line");
                return 0;
        }
        return take_entry(x, j, e, line_no, rep);
}

/* The generation of the journal's last line that has one: its newest. */
static int journal_newest(Lines *l, uint64_t *ret) {
        _cleanup_(json_scan_done) JsonScan j = {};
        const char *p;
        size_t n;
        bool whole;
        int r;

        *ret = 0;
        while ((r = lines_next(l, &p, &n, &whole)) > 0) {
                if (!whole || !p)
                        continue;
                const JsonValue *o = parse_json(&j, p, n);
                uint64_t g;
                if (o && get_u64(&j, o, "g", &g) >= 0 && g > *ret)
                        *ret = g;
        }
        return r < 0 ? r : lines_rewind(l);
}

int state_read_journal(Lines *l, uint64_t generation, Entries *x, StateReadReport *rep) {
        _cleanup_(json_scan_done) JsonScan j = {};
        const char *p = NULL;
        size_t n = 0;
        bool whole;
        int r;

        *rep = (StateReadReport){};
        if (generation == STATE_GENERATION_UNKNOWN) {
                r = journal_newest(l, &generation);
                if (r < 0)
                        return r;
        }
        while ((r = lines_next(l, &p, &n, &whole)) > 0) {
                if (!whole) {
                        rep->torn_tail = true; /* a write cut short: it never protected a write */
                        break;
                }
                rep->lines++;
                r = journal_line_apply(&j, p, n, l->line, generation, x, rep);
                if (r < 0)
                        return r;
        }
        return r;
}

int state_journal_apply(const char *data, size_t size, uint64_t generation, StateEntry **entries, size_t *n,
                        StateReadReport *ret_report) {
        StateReadReport rep;
        Entries x;
        Lines l;
        int r;

        if (entries_init(&x, *entries, *n) < 0) {
                free(x.slots);
                return -ENOMEM;
        }
        lines_init_mem(&l, data, size);
        r = state_read_journal(&l, generation, &x, &rep);
        state_lines_done(&l);
        state_entries_index_done(&x, entries, n);
        if (r < 0)
                return r;
        if (ret_report)
                *ret_report = rep;
        return 0;
}

bool state_entry_is_device(const StateEntry *e, const Device *d, const char **ret_why) {
        char buf[DEVICE_MAC_STRLEN];
        const char *why = NULL, *mac = device_identity_mac(d, buf);

        if (!e->has_identity)
                return true;
        if (!streq_ptr(e->kind, d->kind ?: ""))
                why = "kind";
        else if (!strempty(e->mac) && !strempty(mac))
                why = streq_ptr(e->mac, mac) ? NULL : "MAC";
        else if (!streq_ptr(e->ifname, d->ifname))
                why = "name"; /* nothing else tells them apart */
        if (why && ret_why)
                *ret_why = why;
        return !why;
}
