/* control.c — the control surface: JSON views of the engine, reads of the kernel before an
 * answer, plan and validate, the privileged operations, and events as Monitor's JSON. */
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apply.h"
#include "auto-apply.h"
#include "control.h"
#include "evidence.h"
#include "device-lifecycle.h"
#include "log.h"
#include "policy-match.h"
#include "netns-peek.h"
#include "reconcile.h"
#include "utf8.h"
#include "version.h"

json_object *control_sizes_json(const Sizes *s, bool ipv4) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "gso_max_size", json_object_new_int64(s->gso_max_size));
        json_object_object_add(o, "gro_max_size", json_object_new_int64(s->gro_max_size));
        if (ipv4) {
                json_object_object_add(o, "gso_ipv4_max_size", json_object_new_int64(s->gso_ipv4_max_size));
                json_object_object_add(o, "gro_ipv4_max_size", json_object_new_int64(s->gro_ipv4_max_size));
        }
        return o;
}

static json_object *string_or_null(const char *s) {
        return s ? json_object_new_string(s) : NULL;
}

/* A string from the kernel (a device name, an extended ack): bytes, made valid UTF-8 for JSON. */
static json_object *kernel_string(const char *s) {
        _cleanup_(freep) char *buf = NULL;
        const char *safe;

        if (!s)
                return NULL;
        safe = utf8_safe(s, &buf);
        return safe ? json_object_new_string(safe) : NULL;
}

static json_object *size_names_json(unsigned mask, bool ipv4) {
        json_object *a = json_object_new_array();
        for (unsigned i = 0; a && i < (ipv4 ? SIZES_COUNT : 2); i++)
                if (mask & (1u << i))
                        json_object_array_add(a, json_object_new_string(size_name(i)));
        return a;
}

static json_object *rollback_json(const RollbackRecord *r, bool ipv4) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "counter", json_object_new_string(r->counter ?: ""));
        json_object_object_add(o, "rise", json_object_new_int64((int64_t) r->rise));
        if (r->per) {
                json_object_object_add(o, "per", json_object_new_string(r->per));
                json_object_object_add(o, "per_rise", json_object_new_int64((int64_t) r->per_rise));
                json_object_object_add(o, "max_ratio", json_object_new_double(r->threshold));
        } else /* a uint64 max-increase held as a double (or what a state file said): clamp, a
                * double outside int64_t does not convert */
                json_object_object_add(o, "max_increase",
                                       json_object_new_int64(!(r->threshold > 0) ? 0
                                                             : r->threshold >= 0x1p63 ? INT64_MAX
                                                                                      : (int64_t) r->threshold));
        json_object_object_add(o, "namespace_wide", json_object_new_boolean(r->namespace_wide));
        json_object_object_add(o, "time_usec", json_object_new_int64((int64_t) r->realtime_usec));
        json_object_object_add(o, "from", control_sizes_json(&r->from, ipv4));
        json_object_object_add(o, "to", control_sizes_json(&r->to, ipv4));
        return o;
}

static json_object *write_error_json(const Device *d) {
        const DeviceHistory *h = device_history_get(d);
        json_object *x = json_object_new_object();
        int err = abs(h->last_errno);

        if (!x)
                return NULL;
        json_object_object_add(x, "errno", json_object_new_int(err));
        json_object_object_add(x, "message", json_object_new_string(strerror(err)));
        json_object_object_add(x, "extack", kernel_string(h->last_error));
        return x;
}

/* The engines, for i < namespaces(): bigtcpd's own namespace's (0), then each other's (a control
 * without the set, the tests', has its own engine alone). */
static size_t namespaces(const Control *c) {
        return c->netns ? netns_set_all_count(c->netns) : 1;
}

static Engine *engine_at(const Control *c, size_t i) {
        return c->netns ? netns_set_all_at(c->netns, i)->engine : c->engine;
}

static Sync *sync_at(const Control *c, size_t i) {
        return c->netns ? netns_set_all_at(c->netns, i)->sync : c->sync;
}

/* The one rule for a device named without a namespace ("eth0", like "host/eth0"): it is one of
 * bigtcpd's own namespace, the set's first entry. Its engine also gives GetStatus its top-level
 * figures (the IDL's: the other namespaces are under "netns") and the loop. */
static Engine *home(const Control *c) {
        return engine_at(c, 0);
}

struct event_base *control_base(const Control *c) {
        return home(c)->base;
}

const PolicySet *control_policy(const Control *c) {
        return c->reloader ? reloader_policy(c->reloader) : c->engine->policy;
}

HostIdentity control_host(const Control *c) {
        return c->reloader ? *reloader_host(c->reloader) : engine_host(c->engine);
}

EventList *control_events(const Control *c) {
        return c->netns ? netns_set_events(c->netns) : &c->engine->events;
}

bool control_ready(const Control *c) {
        return c->netns ? netns_set_ready(c->netns) : c->engine->settled_once;
}

Engine *control_engine_of(const Control *c, const Device *d) {
        Netns *n = netns_of_device(d);
        return n ? n->engine : engine_at(c, 0);
}

char *control_device_name(const Device *d) {
        char *s;

        if (!d->netns)
                return strdup(d->ifname);
        if (asprintf(&s, "%s/%s", d->netns->name, d->ifname) < 0)
                return NULL;
        return s;
}

/* A family set as names ("ipv6", "ipv4"). */
static json_object *families_json(unsigned mask) {
        json_object *a = json_object_new_array();

        for (EvidenceFamily f = 0; a && f < _EVIDENCE_FAMILY_MAX; f++)
                if (mask & (1u << f))
                        json_object_array_add(a, json_object_new_string(evidence_family_to_string(f)));
        return a;
}

static json_object *big_packets_of(uint64_t now, const Device *d, const Evidence *ev);

/* big_packets: what the last (or the running) watch of d counted; never watched, what the eBPF
 * observer of `s` (NULL: none asked) counted since it was loaded; else NULL. `now`:
 * CLOCK_MONOTONIC, for the time left of a watch. */
bool control_device_totals(const Control *c, const Device *d, EvidenceCounts *ret, uint64_t *ret_since) {
        EvidenceSet *s = control_engine_of(c, d)->evidence;
        EvidenceCounts totals;

        if (d->evidence || !s || evidence_totals(s, d, &totals) < 0)
                return false;
        *ret = totals;
        *ret_since = observer_loaded_usec(evidence_set_get_observer(s));
        return true;
}

static json_object *big_packets_json(uint64_t now, EvidenceSet *s, const Device *d) {
        const Evidence *ev = d->evidence;
        EvidenceCounts totals;
        json_object *o;

        if (!ev && s && evidence_totals(s, d, &totals) >= 0) {
                Evidence *t = calloc(1, sizeof(*t));
                if (!t)
                        return NULL;
                *t = (Evidence){.device = (Device *) d, .counts = totals, .fd = -1,
                                .since_usec = observer_loaded_usec(evidence_set_get_observer(s))};
                o = big_packets_of(now, d, t);
                free(t);
                return o;
        }
        if (ev && s)
                evidence_refresh(s, (Device *) d); /* its window as counted now */
        return ev ? big_packets_of(now, d, ev) : NULL;
}

static json_object *big_packets_of(uint64_t now, const Device *d, const Evidence *ev) {
        json_object *o;

        if (!(o = json_object_new_object()))
                return NULL;
        json_object_object_add(o, "tx", json_object_new_int64((int64_t) ev->counts.tx));
        json_object_object_add(o, "rx", json_object_new_int64((int64_t) ev->counts.rx));
        json_object_object_add(o, "tx_largest", json_object_new_int64(ev->counts.tx_largest));
        json_object_object_add(o, "rx_largest", json_object_new_int64(ev->counts.rx_largest));
        json_object_object_add(o, "since", json_object_new_int64((int64_t) ev->since_usec));
        json_object_object_add(o, "ipv6", json_object_new_int64((int64_t) ev->counts.by_family[EVIDENCE_IPV6]));
        json_object_object_add(o, "ipv4", json_object_new_int64((int64_t) ev->counts.by_family[EVIDENCE_IPV4]));
        json_object_object_add(o, "full_ipv6", json_object_new_int64((int64_t) ev->counts.full[EVIDENCE_IPV6]));
        json_object_object_add(o, "full_ipv4", json_object_new_int64((int64_t) ev->counts.full[EVIDENCE_IPV4]));
        json_object_object_add(o, "missed", json_object_new_int64((int64_t) ev->counts.missed));
        json_object_object_add(o, "watching", json_object_new_boolean(ev == d->evidence && evidence_watching(d)));
        if (ev == d->evidence && evidence_watching(d))
                json_object_object_add(o, "watch_left_usec",
                                       json_object_new_int64((int64_t) (ev->waiting ? ev->duration_usec /* from its socket */
                                                                        : ev->until_usec > now ? ev->until_usec - now : 0)));
        if (ev->verdict != EVIDENCE_UNKNOWN) {
                json_object_object_add(o, "raised", families_json(ev->raised));
                json_object_object_add(o, "quiet", families_json(ev->quiet));
        }
        return o;
}

static json_object *effective_json(const Device *d) {
        if (!d->evidence || d->evidence->verdict == EVIDENCE_UNKNOWN)
                return NULL;
        return json_object_new_boolean(d->evidence->verdict == EVIDENCE_EFFECTIVE);
}

/* Where size i's search of `auto` stands (IDL AutoSearch); `now_usec`: CLOCK_REALTIME. */
static json_object *auto_search_json(const AutoSearch *s, unsigned i, uint64_t now_usec) {
        json_object *o = json_object_new_object();
        char text[256];

        if (!o)
                return NULL;
        json_object_object_add(o, "size", json_object_new_string(size_name(i)));
        json_object_object_add(o, "phase", json_object_new_string(auto_phase_to_string(s->phase) ?: "?"));
        json_object_object_add(o, "proven", json_object_new_int64(s->proven));
        json_object_object_add(o, "proven_packets", json_object_new_int64((int64_t) s->proven_packets));
        json_object_object_add(o, "trying", s->phase == AUTO_TRYING ? json_object_new_int64(s->trying) : NULL);
        json_object_object_add(o, "ceiling", json_object_new_int64(s->ceiling ?: s->max));
        json_object_object_add(o, "tripped", json_object_new_boolean(s->ceiling != 0));
        json_object_object_add(o, "tripped_by", s->ceiling ? json_object_new_string(s->ceiling_counter) : NULL);
        json_object_object_add(o, "rise", s->ceiling ? json_object_new_int64((int64_t) s->ceiling_rise) : NULL);
        json_object_object_add(o, "min", json_object_new_int64(s->min));
        json_object_object_add(o, "max", json_object_new_int64(s->max));
        json_object_object_add(o, "steps", json_object_new_int64(s->steps));
        json_object_object_add(o, "trips", json_object_new_int64(s->trips));
        json_object_object_add(o, "text", json_object_new_string(auto_search_format(s, now_usec, text, sizeof(text))));
        return o;
}

/* Where each search of `sizes` stands (search[i] for size i); NULL without one. */
static json_object *auto_json(unsigned sizes, const AutoSearch *const search[SIZES_COUNT], uint64_t now_usec) {
        json_object *arr;

        if (sizes == 0 || !(arr = json_object_new_array()))
                return NULL;
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                json_object *o;

                if (!(sizes & (1u << i)) || search[i]->phase == AUTO_NEW || !(o = auto_search_json(search[i], i, now_usec)))
                        continue;
                json_object_array_add(arr, o);
        }
        return arr;
}

static json_object *auto_device_json(const AutoDevice *a, uint64_t now_usec) {
        const AutoSearch *search[SIZES_COUNT] = {};

        if (!a)
                return NULL;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (a->sizes & (1u << i))
                        search[i] = auto_device_search(a, i);
        return auto_json(a->sizes, search, now_usec);
}

/* Adds `value` under `key` when there is one: a field a device does not have is left out (the
 * IDL's optional fields), rather than sent as null. */
static void add_present(json_object *o, const char *key, json_object *value) {
        if (value)
                json_object_object_add(o, key, value);
}

json_object *control_device_json(const Control *c, const Device *d) {
        const Engine *e = control_engine_of(c, d);
        json_object *o = json_object_new_object();
        bool v4 = e->ipv4_supported, managed = d->life.state != DEVICE_UNMANAGED;
        uint64_t now = engine_now(e);

        if (!o)
                return NULL;
        json_object_object_add(o, "netns", kernel_string(device_netns_name(d)));
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", kernel_string(d->ifname));
        add_present(o, "kind", kernel_string(d->kind));
        /* the word match.kind has for it */
        json_object_object_add(o, "match_kind", d->flags & IFF_LOOPBACK ? json_object_new_string("loopback")
                                                : d->kind               ? kernel_string(d->kind)
                                                                        : json_object_new_string("device"));
        json_object_object_add(o, "state", json_object_new_string(device_state_to_string(d->life.state)));
        add_present(o, "policy", string_or_null(d->match.policy_name));
        json_object_object_add(o, "current", control_sizes_json(&d->current, v4));
        json_object_object_add(o, "current_age_usec",
                               json_object_new_int64((int64_t) (now > d->current_usec ? now - d->current_usec : 0)));
        add_present(o, "desired", managed ? control_sizes_json(&d->life.desired, v4) : NULL);
        json_object_object_add(o, "owned", size_names_json(managed ? d->life.owned : 0, v4));
        add_present(o, "original", d->record.has_original ? control_sizes_json(&d->record.original, v4) : NULL);
        json_object_object_add(o, "tso_max_size", json_object_new_int64(d->tso_max_size));
        add_present(o, "pending", string_or_null(pending_reason_to_string(lifecycle_pending_reason(d))));
        if (d->probation)
                json_object_object_add(o, "probation_left_usec",
                                       json_object_new_int64((int64_t) probation_left_usec(e->probation, d)));
        const DeviceHistory *h = device_history_get(d);
        add_present(o, "last_error", h->last_errno != 0 ? write_error_json(d) : NULL);
        add_present(o, "last_rollback", h->last_rollback ? rollback_json(h->last_rollback, v4) : NULL);
        json_object_object_add(o, "rollbacks", json_object_new_int64((int64_t) h->n_rollbacks));
        if (d->n_altnames > 0) {
                json_object *alt = json_object_new_array();
                for (size_t i = 0; alt && i < d->n_altnames; i++)
                        json_object_array_add(alt, kernel_string(d->altnames[i]));
                add_present(o, "altnames", alt);
        }
        add_present(o, "big_packets", big_packets_json(now, e->evidence, d));
        add_present(o, "effective", effective_json(d));
        add_present(o, "auto", auto_device_json(d->autosize, clock_now(e->clock, CLOCK_REALTIME)));
        return o;
}

/* A rollout's progress: its policy's devices at their sizes (window passed), in probation now. */
static void rollout_progress(const Engine *e, const Rollout *r, unsigned *ret_applied, unsigned *ret_probation) {
        const Device *d;

        *ret_applied = *ret_probation = 0;
        DEVICE_FOREACH(d, &e->devices, it)
                if (streq_ptr(d->match.policy_name, r->policy)) {
                        *ret_applied += d->life.state == DEVICE_APPLIED;
                        *ret_probation += d->life.state == DEVICE_PROBATION;
                }
}

static json_object *rollouts_json(const Engine *e) {
        json_object *a = json_object_new_array();

        for (size_t i = 0; a && i < e->rollouts.n; i++) {
                const Rollout *r = e->rollouts.items[i];
                json_object *o = json_object_new_object();
                const Device *by = r->halted ? device_get(&e->devices, r->halted_by_ifindex) : NULL;
                unsigned applied, probation;
                if (!o)
                        break;
                rollout_progress(e, r, &applied, &probation);
                json_object_object_add(o, "policy", json_object_new_string(r->policy));
                json_object_object_add(o, "max_parallel", json_object_new_int((int) r->max_parallel));
                json_object_object_add(o, "active", json_object_new_int((int) r->active));
                json_object_object_add(o, "waiting", json_object_new_int((int) r->waiting));
                json_object_object_add(o, "halted", json_object_new_boolean(r->halted));
                json_object_object_add(o, "halted_by", r->halted ? string_or_null(r->halted_by) : NULL);
                json_object_object_add(o, "applied", json_object_new_int((int) applied));
                json_object_object_add(o, "probation", json_object_new_int((int) probation));
                const RollbackRecord *why = by ? device_history_get(by)->last_rollback : NULL;
                json_object_object_add(o, "halted_counter", why ? string_or_null(why->counter) : NULL);
                json_object_array_add(a, o);
        }
        return a;
}

/* Where each policy of `s` is in force, and for a canary this host's cohort. */
static json_object *policy_scopes_json(const PolicySet *s) {
        json_object *a = json_object_new_array();

        for (size_t i = 0; a && s && i < s->n_policies; i++) {
                const Policy *p = &s->policies[i];
                json_object *o = json_object_new_object();
                if (!o)
                        break;
                json_object_object_add(o, "name", json_object_new_string(p->name ?: ""));
                json_object_object_add(o, "applies", json_object_new_boolean(p->applies_here));
                json_object_object_add(o, "not_here",
                                       p->applies_here ? NULL
                                                       : string_or_null(policy_scope_to_string(p->scope)));
                if (p->has_hosts_percent) {
                        json_object_object_add(o, "hosts_percent",
                                               json_object_new_int((int) p->hosts_percent));
                        json_object_object_add(o, "cohort", json_object_new_int((int) p->cohort));
                }
                json_object_array_add(a, o);
        }
        return a;
}

const char *control_state(const Control *c) {
        const Device *d;

        if (!control_ready(c))
                return "starting";
        if (netns_set_problem_count(c->netns) > 0)
                return "degraded";
        if (reloader_source(c->reloader) != POLICY_SOURCE_FILES)
                return "degraded"; /* the policy files have errors */
        for (size_t i = 0; i < namespaces(c); i++) {
                const Engine *e = engine_at(c, i);
                DEVICE_FOREACH(d, &e->devices, it)
                        if (lifecycle_counted_state(d) == DEVICE_ROLLED_BACK || d->life.state == DEVICE_FAILED)
                                return "degraded";
        }
        return "ready";
}

/* The devices of one engine an operator should look at (rolled back, failed), by ifindex, the
 * first `max`, appended to `a`; returns how many. */
static size_t problems_add(json_object *a, const Engine *e, size_t max) {
        const Device *first[CONTROL_PROBLEMS_MAX], *d;
        bool v4 = e->ipv4_supported;
        size_t n = 0;

        if (max > CONTROL_PROBLEMS_MAX)
                max = CONTROL_PROBLEMS_MAX;
        if (max == 0)
                return 0;
        /* one pass, keeping the lowest ifindexes: GetStatus must not sort 10000 devices */
        DEVICE_FOREACH(d, &e->devices, it) {
                size_t k;
                if (lifecycle_counted_state(d) != DEVICE_ROLLED_BACK && d->life.state != DEVICE_FAILED)
                        continue;
                if (n == max && d->ifindex > first[n - 1]->ifindex)
                        continue;
                k = n < max ? n++ : n - 1;
                for (; k > 0 && first[k - 1]->ifindex > d->ifindex; k--)
                        first[k] = first[k - 1];
                first[k] = d;
        }
        for (size_t i = 0; a && i < n; i++) {
                const DeviceHistory *h = device_history_get(first[i]);
                json_object *o = json_object_new_object();

                if (!o)
                        break;
                d = first[i];
                if (d->netns)
                        json_object_object_add(o, "netns", kernel_string(d->netns->name));
                json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
                json_object_object_add(o, "ifname", kernel_string(d->ifname));
                json_object_object_add(o, "state",
                                       json_object_new_string(device_state_to_string(lifecycle_counted_state(d))));
                json_object_object_add(o, "policy", string_or_null(d->match.policy_name));
                json_object_object_add(o, "last_error", h->last_errno != 0 ? write_error_json(d) : NULL);
                json_object_object_add(o, "last_rollback",
                                       h->last_rollback ? rollback_json(h->last_rollback, v4) : NULL);
                json_object_array_add(a, o);
        }
        return n;
}

/* The daemon's own namespace's devices an operator should look at, the first
 * CONTROL_PROBLEMS_MAX: the counts per state say how many there are in all. */
static json_object *problems_json(const Control *c) {
        json_object *a = json_object_new_array();

        (void) problems_add(a, home(c), CONTROL_PROBLEMS_MAX);
        return a;
}

static json_object *state_counts_json(const unsigned n[static _DEVICE_STATE_MAX]) {
        json_object *counts = json_object_new_object();

        for (int i = 0; counts && i < _DEVICE_STATE_MAX; i++)
                json_object_object_add(counts, device_state_to_string((DeviceState) i), json_object_new_int((int) n[i]));
        return counts;
}

/* What a namespace's problem means, and what to do about it. */
static char *netns_problem_message(const NetnsProblem *p) {
        char *m = NULL;
        int r = -1;

        switch (p->kind) {
        case NETNS_PROBLEM_CANNOT_ENTER:
                if (p->error == -EPERM)
                        r = asprintf(&m, "cannot enter it: %s; bigtcpd needs CAP_SYS_ADMIN for other namespaces: "
                                         "install the drop-in bigtcpd-netns.conf (see NETWORK NAMESPACES in bigtcpd(8))",
                                     strerror(-p->error));
                else
                        r = asprintf(&m, "cannot enter it: %s; tried again at the next reload", strerror(-p->error));
                break;
        case NETNS_PROBLEM_DESCRIPTORS:
                r = asprintf(&m, "not managed for now: too few free file descriptors (RLIMIT_NOFILE); it is taken "
                                 "when some free up; raise LimitNOFILE= of bigtcpd.service");
                break;
        case NETNS_PROBLEM_NOT_RESTORED:
                r = asprintf(&m, "let go with %zu devices not at their original sizes; their state is kept for when "
                                 "the namespace is back",
                             p->devices);
                break;
        case _NETNS_PROBLEM_MAX:
        case _NETNS_PROBLEM_INVALID:
                break;
        }
        return r < 0 ? NULL : m;
}

/* The namespaces a policy names that are not managed as they should be, the first
 * CONTROL_PROBLEMS_MAX. */
static json_object *netns_problems_json(const Control *c) {
        json_object *a = json_object_new_array();
        size_t n = netns_set_problem_count(c->netns);

        for (size_t i = 0; a && i < n && i < CONTROL_PROBLEMS_MAX; i++) {
                const NetnsProblem *p = netns_set_problem(c->netns, i);
                _cleanup_(freep) char *m = netns_problem_message(p);
                json_object *o = json_object_new_object();

                if (!o)
                        break;
                json_object_object_add(o, "netns", json_object_new_string(p->name));
                json_object_object_add(o, "problem", json_object_new_string(netns_problem_kind_to_string(p->kind)));
                json_object_object_add(o, "errno", p->error < 0 ? json_object_new_int(-p->error) : NULL);
                json_object_object_add(o, "message", m ? json_object_new_string(m) : NULL);
                json_object_array_add(a, o);
        }
        return a;
}

void control_counts(const Control *c, ControlCounts *ret) {
        *ret = (ControlCounts){};
        for (size_t i = 0; i < namespaces(c); i++) {
                const Engine *e = engine_at(c, i);
                lifecycle_count_states(e, ret->state);
                ret->total += e->devices.n_devices;
                ret->rollbacks += e->counters.rollbacks;
        }
}

/* One namespace's own counts. */
static json_object *namespace_counts_json(const Netns *ns) {
        const Engine *e = ns->engine;
        unsigned n[_DEVICE_STATE_MAX] = {};
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        lifecycle_count_states(e, n);
        json_object_object_add(o, "netns", kernel_string(ns->id.name));
        json_object_object_add(o, "devices", state_counts_json(n));
        json_object_object_add(o, "devices_total", json_object_new_int64((int64_t) e->devices.n_devices));
        json_object_object_add(o, "writes", json_object_new_int64((int64_t) e->counters.writes));
        json_object_object_add(o, "write_failures", json_object_new_int64((int64_t) e->counters.write_failures));
        json_object_object_add(o, "restores", json_object_new_int64((int64_t) e->counters.restores));
        json_object_object_add(o, "rollbacks", json_object_new_int64((int64_t) e->counters.rollbacks));
        return o;
}

/* The other namespaces, summed: how many, their devices by state, their writes and rollbacks,
 * and the first CONTROL_PROBLEMS_MAX devices to look at (namespaces by name, each by ifindex). */
static json_object *netns_status_json(const Control *c) {
        json_object *o = json_object_new_object(), *problems = json_object_new_array();
        unsigned n[_DEVICE_STATE_MAX] = {};
        unsigned long long total = 0, writes = 0, failures = 0, restores = 0, rollbacks = 0;
        size_t n_problems = 0;

        if (!o || !problems) {
                json_object_put(o);
                json_object_put(problems);
                return NULL;
        }
        for (size_t i = 1; i < namespaces(c); i++) { /* the others */
                const Engine *e = engine_at(c, i);
                lifecycle_count_states(e, n);
                total += e->devices.n_devices;
                writes += e->counters.writes;
                failures += e->counters.write_failures;
                restores += e->counters.restores;
                rollbacks += e->counters.rollbacks;
                n_problems += problems_add(problems, e, CONTROL_PROBLEMS_MAX - n_problems);
        }
        json_object_object_add(o, "managed", json_object_new_int((int) netns_set_others_count(c->netns)));
        json_object_object_add(o, "devices", state_counts_json(n));
        json_object_object_add(o, "devices_total", json_object_new_int64((int64_t) total));
        json_object_object_add(o, "writes", json_object_new_int64((int64_t) writes));
        json_object_object_add(o, "write_failures", json_object_new_int64((int64_t) failures));
        json_object_object_add(o, "restores", json_object_new_int64((int64_t) restores));
        json_object_object_add(o, "rollbacks", json_object_new_int64((int64_t) rollbacks));
        json_object_object_add(o, "problems", problems);
        json_object *each = json_object_new_array();
        for (size_t i = 0; each && i < netns_set_others_count(c->netns) && i < CONTROL_NAMESPACES_MAX; i++)
                json_object_array_add(each, namespace_counts_json(netns_set_other_at(c->netns, i)));
        json_object_object_add(o, "namespaces", each);
        json_object_object_add(o, "namespace_problems", netns_problems_json(c));
        json_object_object_add(o, "namespace_problems_total",
                               json_object_new_int64((int64_t) netns_set_problem_count(c->netns)));
        return o;
}

static json_object *last_reload_json(const ReloadResult *r) {
        json_object *o;
        char digest[17];

        if (!r || !(o = json_object_new_object()))
                return NULL;
        snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) r->digest);
        json_object_object_add(o, "ok", json_object_new_boolean(r->ok));
        json_object_object_add(o, "time_usec", json_object_new_int64((int64_t) r->realtime_usec));
        json_object_object_add(o, "digest", json_object_new_string(digest));
        json_object_object_add(o, "errors", control_errors_json(&r->errors));
        json_object_object_add(o, "errors_total", json_object_new_int64((int64_t) r->n_errors));
        return o;
}

#define AUTO_STATUS_TRYING_MAX 16

/* GetStatus' auto (IDL AutoInfo): the searches in every namespace; NULL when there is none. */
static json_object *auto_status_json(const Control *c) {
        unsigned phases[_AUTO_PHASE_MAX] = {}, searches = 0;
        uint64_t trips = 0;
        json_object *o, *by, *trying = json_object_new_array();

        if (!trying)
                return NULL;
        for (size_t i = 0; i < namespaces(c); i++) {
                const Engine *e = engine_at(c, i);
                uint64_t now = clock_now(e->clock, CLOCK_REALTIME);
                Device *d;

                DEVICE_FOREACH(d, &e->devices, it) {
                        const AutoDevice *a = d->autosize;

                        for (unsigned k = 0; a && k < SIZES_COUNT; k++) {
                                char text[256];
                                json_object *t;

                                if (!(a->sizes & (1u << k)))
                                        continue;
                                const AutoSearch *s = auto_device_search(a, k);
                                if (s->phase <= AUTO_NEW || s->phase >= _AUTO_PHASE_MAX)
                                        continue;
                                searches++;
                                phases[s->phase]++;
                                trips += s->trips;
                                if (s->phase != AUTO_TRYING || json_object_array_length(trying) >= AUTO_STATUS_TRYING_MAX ||
                                    !(t = json_object_new_object()))
                                        continue;
                                _cleanup_(freep) char *name = control_device_name(d);
                                json_object_object_add(t, "device", kernel_string(name));
                                json_object_object_add(t, "size", json_object_new_string(size_name(k)));
                                json_object_object_add(t, "text", json_object_new_string(auto_search_format(s, now, text, sizeof(text))));
                                json_object_array_add(trying, t);
                        }
                }
        }
        if (searches == 0 || !(o = json_object_new_object()) || !(by = json_object_new_object())) {
                json_object_put(trying);
                return NULL;
        }
        for (AutoPhase p = AUTO_WATCHING; p < _AUTO_PHASE_MAX; p++)
                json_object_object_add(by, auto_phase_to_string(p), json_object_new_int((int) phases[p]));
        json_object_object_add(o, "searches", by);
        json_object_object_add(o, "trips", json_object_new_int64((int64_t) trips));
        json_object_object_add(o, "trying", trying);
        return o;
}

json_object *control_status_json(const Control *c) {
        const Engine *e = home(c);
        const PolicySet *policy = control_policy(c);
        HostIdentity host = control_host(c);
        json_object *o = json_object_new_object(), *files, *counts, *pol, *kern;
        unsigned n[_DEVICE_STATE_MAX] = {};
        char digest[17];
        const Device *d;

        if (!o)
                return NULL;
        lifecycle_count_states(e, n);

        json_object_object_add(o, "version", json_object_new_string(bigtcpd_version));
        json_object_object_add(o, "hostname", json_object_new_string(host.hostname ?: ""));
        pol = json_object_new_object();
        files = json_object_new_array();
        for (size_t i = 0; policy && i < policy->n_files; i++)
                json_object_array_add(files, json_object_new_string(policy->files[i]));
        json_object_object_add(pol, "files", files);
        snprintf(digest, sizeof(digest), "%016llx", policy ? (unsigned long long) policy->digest : 0ull);
        json_object_object_add(pol, "digest", json_object_new_string(digest));
        json_object_object_add(pol, "policies", json_object_new_int((int) (policy ? policy->n_policies : 0)));
        json_object_object_add(pol, "source",
                               json_object_new_string(policy_source_to_string(reloader_source(c->reloader))));
        json_object_object_add(o, "policy", pol);
        kern = json_object_new_object();
        json_object_object_add(kern, "release", json_object_new_string(host.kernel_release ?: ""));
        json_object_object_add(kern, "ipv4_sizes", json_object_new_boolean(e->ipv4_supported));
        json_object_object_add(o, "kernel", kern);
        counts = state_counts_json(n);
        json_object_object_add(o, "devices", counts);
        json_object_object_add(o, "devices_total", json_object_new_int((int) e->devices.n_devices));
        json_object_object_add(o, "writes", json_object_new_int64((int64_t) e->counters.writes));
        json_object_object_add(o, "write_failures", json_object_new_int64((int64_t) e->counters.write_failures));
        json_object_object_add(o, "restores", json_object_new_int64((int64_t) e->counters.restores));
        json_object_object_add(o, "rollbacks", json_object_new_int64((int64_t) e->counters.rollbacks));
        json_object *by = json_object_new_object();
        for (size_t i = 0; by && i < e->counters.n_by_policy; i++)
                json_object_object_add(by, e->counters.by_policy[i].policy,
                                       json_object_new_int64((int64_t) e->counters.by_policy[i].rollbacks));
        json_object_object_add(o, "rollbacks_by_policy", by);
        json_object_object_add(o, "ready", json_object_new_boolean(control_ready(c)));
        json_object_object_add(o, "state", json_object_new_string(control_state(c)));
        json_object_object_add(o, "problems", problems_json(c));
        json_object_object_add(o, "last_reload", last_reload_json(reloader_last(c->reloader)));
        json_object *w = json_object_new_array();
        for (size_t i = 0; i < e->n_guard_warnings; i++)
                json_object_array_add(w, json_object_new_string(e->guard_warnings[i]));
        json_object_object_add(o, "inactive_guard_counters", w);
        json_object_object_add(o, "rollouts", rollouts_json(e));
        uint64_t gap, dumps;
        probation_figures(e->probation, &gap, &dumps);
        json_object *pr = json_object_new_object();
        json_object_object_add(pr, "devices", json_object_new_int64((int64_t) probation_count(e->probation)));
        json_object_object_add(pr, "sample_gap_max_usec", json_object_new_int64((int64_t) gap));
        json_object_object_add(pr, "dumps", json_object_new_int64((int64_t) dumps));
        json_object_object_add(o, "probation", pr);
        /* every namespace's: pods are counted in their own */
        json_object *ev = json_object_new_object(), *ne = json_object_new_array(), *quiet = json_object_new_array();
        size_t watched = 0;
        for (size_t i = 0; i < namespaces(c); i++) {
                const Engine *ei = engine_at(c, i);
                watched += evidence_watched(ei->evidence);
                DEVICE_FOREACH(d, &ei->devices, it) {
                        if (!d->evidence || d->evidence->verdict != EVIDENCE_NOT_EFFECTIVE)
                                continue;
                        _cleanup_(freep) char *name = control_device_name(d);
                        json_object *q = json_object_new_object();
                        json_object_array_add(ne, kernel_string(name));
                        json_object_object_add(q, "device", kernel_string(name));
                        json_object_object_add(q, "families", families_json(d->evidence->quiet));
                        json_object_array_add(quiet, q);
                }
        }
        json_object_object_add(ev, "watched", json_object_new_int64((int64_t) watched));
        {
                const Engine *e0 = engine_at(c, 0);
                Observer *obs = e0->cfg.observer;
                json_object_object_add(ev, "observer", json_object_new_string(obs ? "ebpf" : e0->cfg.packet_sockets ? "packet-socket" : "none"));
                if (!obs && e0->cfg.observer_why)
                        json_object_object_add(ev, "observer_why", json_object_new_string(e0->cfg.observer_why));
                if (obs) {
                        size_t nd, ndr, nn;
                        (void) observer_read(obs, clock_now(e0->clock, CLOCK_MONOTONIC), EVIDENCE_FRESH_USEC);
                        observer_entries(obs, &nd, &ndr, &nn);
                        json_object_object_add(ev, "observer_devices", json_object_new_int64((int64_t) nd));
                        json_object_object_add(ev, "observer_read_usec", json_object_new_int64((int64_t) observer_read_cost_usec(obs)));
                        json_object_object_add(ev, "observer_map_bytes", json_object_new_int64((int64_t) observer_map_bytes(obs)));
                }
        }
        json_object_object_add(ev, "not_effective", ne);
        json_object_object_add(ev, "not_effective_families", quiet);
        json_object_object_add(o, "evidence", ev);
        json_object_object_add(o, "auto", auto_status_json(c));
        json_object_object_add(o, "cohort_source",
                               json_object_new_string(host_identity_cohort_source(&host)));
        json_object_object_add(o, "policies", policy_scopes_json(policy));
        json_object_object_add(o, "netns", netns_status_json(c));
        json_object_object_add(o, "try", control_try_json(c));
        return o;
}

json_object *control_try_json(const Control *c) {
        const PolicyTry *t = c->trial;
        json_object *o;
        uint64_t now;

        if (!t || !t->running || !(o = json_object_new_object()))
                return NULL;
        now = clock_now(t->clock, CLOCK_MONOTONIC);
        json_object_object_add(o, "file", json_object_new_string(t->file));
        json_object_object_add(o, "target", json_object_new_string(t->target));
        json_object_object_add(o, "deadline_usec", json_object_new_int64((int64_t) t->deadline_realtime));
        json_object_object_add(o, "remaining_usec",
                               json_object_new_int64((int64_t) (t->deadline > now ? t->deadline - now : 0)));
        return o;
}

/* The sizes `want` clamped, with numbers: [{"size", "asked", "limit"}]. */
static json_object *clamps_json(const Policy *p, const Desired *want, const Device *d) {
        static const unsigned bit[SIZES_COUNT] = {CLAMP_GSO, CLAMP_GRO, CLAMP_GSO_IPV4, CLAMP_GRO_IPV4};
        json_object *a = json_object_new_array();

        for (unsigned i = 0; a && i < SIZES_COUNT; i++) {
                json_object *o;
                if (!(want->clamped & bit[i]) || !(o = json_object_new_object()))
                        continue;
                json_object_object_add(o, "size", json_object_new_string(size_name(i)));
                json_object_object_add(o, "asked", json_object_new_int64(policy_size_asked(p, i)));
                json_object_object_add(o, "limit", json_object_new_int64(size_limit(i, d->tso_max_size)));
                json_object_array_add(a, o);
        }
        return a;
}

/* For one device asked for by name: which key of its policy chose it, and why its desired sizes
 * differ from what the policy asks (clamped, held after a rollback, unsupported). Matching again
 * costs what a reconcile does, so ListDevices of every device does not. */
static void device_explain(Control *c, Device *d, json_object *o) {
        Engine *e = control_engine_of(c, d);
        const Policy *p = d->match.policy_name ? apply_match(e, e->policy, d) : NULL;
        _cleanup_(freep) char *why = NULL;
        Desired want;

        if (!p || !streq_ptr(p->name, d->match.policy_name))
                return; /* not reconciled since the policy changed */
        if (apply_match_explain(e, p, d, &why) >= 0)
                json_object_object_add(o, "matched_by", json_object_new_string(why));
        compute_desired(p, &d->current, &d->record.original, d->record.has_original ? d->record.written : 0, d->tso_max_size,
                        e->ipv4_supported, &want);
        json_object_object_add(o, "clamps", clamps_json(p, &want, d));
        json_object_object_add(o, "asked", control_sizes_json(&want.sizes, e->ipv4_supported));
        json_object_object_add(o, "held", json_object_new_boolean(d->life.held));
        json_object_object_add(o, "ipv4_unsupported", json_object_new_boolean(want.ipv4_unsupported));
}

Device *control_find_device(const Control *c, const char *name) {
        const char *slash = name ? strchr(name, '/') : NULL;
        _cleanup_(freep) char *ns = NULL;
        Netns *n;

        if (!slash)
                return device_find(&home(c)->devices, name);
        ns = strndup(name, (size_t) (slash - name));
        if (!ns)
                return NULL;
        if (streq_ptr(ns, "host"))
                return device_find(&home(c)->devices, slash + 1);
        n = netns_set_find(c->netns, ns);
        return n ? device_find(&n->engine->devices, slash + 1) : NULL;
}

int control_sorted_devices(const Control *c, Device ***ret, size_t *ret_n) {
        _cleanup_(freep) Device **all = NULL;
        size_t n_all = 0, total = 0;
        int r;

        for (size_t i = 0; i < namespaces(c); i++)
                total += engine_at(c, i)->devices.n_devices;
        all = calloc(total + 1, sizeof(Device *));
        if (!all)
                return -ENOMEM;
        /* the daemon's own namespace first, then the others by name; in each, by ifindex */
        for (size_t i = 0; i < namespaces(c); i++) {
                const DeviceTable *t = &engine_at(c, i)->devices;
                _cleanup_(freep) Device **l = NULL;
                size_t n = 0;

                r = device_table_sorted(t, &l, &n);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < n && n_all < total; j++)
                        all[n_all++] = l[j];
        }
        *ret = TAKE_PTR(all);
        *ret_n = n_all;
        return 0;
}

int control_devices_json(const Control *c, const char *name, json_object **ret) {
        _cleanup_(freep) Device **l = NULL;
        Device *one;
        size_t n = 0;
        int r;

        if (name) {
                one = control_find_device(c, name);
                if (!one)
                        return -ENODEV;
                l = calloc(1, sizeof(Device *));
                if (!l)
                        return -ENOMEM;
                l[n++] = one;
        } else {
                r = control_sorted_devices(c, &l, &n);
                if (r < 0)
                        return r;
        }
        json_object *o = json_object_new_object(), *a = json_object_new_array_ext((int) n);
        if (!o || !a) {
                json_object_put(o);
                json_object_put(a);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                json_object *dj = control_device_json(c, l[i]);
                if (name && dj)
                        device_explain((Control *) c, l[i], dj);
                json_object_array_add(a, dj);
        }
        json_object_object_add(o, "devices", a);
        *ret = o;
        return 0;
}

/* ---- reads before an answer ---- */

/* A dump of one namespace's links that a request waits for. */
typedef struct ControlWait {
        ControlRequest *request;
        Sync *sync;
        uint64_t id; /* 0 once answered */
} ControlWait;

struct ControlRequest {
        Control *control;
        ControlReadFn fn;
        void *userdata;
        Writer *writer;   /* … of the device's namespace */
        uint64_t read_id; /* the writer's, for one device */
        ControlWait *waits; /* the dumps, of the device's namespace or of every one */
        size_t n_waits, n_pending;
        struct event *deferred; /* answers from the loop, never from inside the caller's call */
        int error;
};

static void request_free(ControlRequest *r) {
        if (r->deferred)
                event_free(r->deferred);
        free(r->waits);
        free(r);
}

static void on_deferred(evutil_socket_t fd, short what, void *userdata) {
        ControlRequest *r = userdata;
        ControlReadFn fn = r->fn;
        void *ud = r->userdata;
        int error = r->error;

        request_free(r);
        fn(error, ud);
}

static void finish_request(ControlRequest *r, int error) {
        r->error = error;
        r->read_id = 0;
        for (size_t i = 0; i < r->n_waits; i++)
                if (r->waits[i].id != 0) {
                        sync_cancel_wait(r->waits[i].sync, r->waits[i].id);
                        r->waits[i].id = 0;
                }
        r->n_pending = 0;
        event_active(r->deferred, EV_TIMEOUT, 0);
}

static void on_device_read(Device *d, int error, void *userdata) {
        finish_request(userdata, d ? error : -ENODEV);
}

/* One namespace's dump is done (or its namespace went, sync_free): the last one answers. */
static void on_links_read(void *userdata) {
        ControlWait *w = userdata;
        ControlRequest *r = w->request;

        w->id = 0;
        if (r->n_pending > 0 && --r->n_pending == 0)
                finish_request(r, 0);
}

static int wait_links(ControlRequest *r, Sync *sync) {
        ControlWait *w = &r->waits[r->n_waits];
        int k;

        *w = (ControlWait){.request = r, .sync = sync};
        k = sync_wait_links(sync, on_links_read, w, &w->id);
        if (k < 0)
                return k;
        r->n_waits++;
        r->n_pending++;
        return 0;
}

int control_read(Control *c, const char *name, ControlReadFn fn, void *userdata, ControlRequest **ret) {
        ControlRequest *r;
        Device *d = NULL;
        int k;

        if (name) {
                d = control_find_device(c, name);
                if (!d)
                        return -ENODEV;
        }
        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (ControlRequest){.control = c, .fn = fn, .userdata = userdata};
        r->deferred = event_new(home(c)->base, -1, 0, on_deferred, r);
        r->waits = calloc(d ? 1 : namespaces(c), sizeof(*r->waits));
        if (!r->deferred || !r->waits) {
                request_free(r);
                return -ENOMEM;
        }
        /* One device: one request, through its namespace's writer (a namespace that goes ends
         * its devices' reads with -ENODEV first: netns-set.c); when the ring is full, a new dump of
         * its namespace. Every device: a new dump of every namespace. */
        if (d) {
                Netns *n = netns_of_device(d);
                r->writer = control_engine_of(c, d)->writer;
                k = writer_request_read(r->writer, d, on_device_read, r, &r->read_id);
                if (k == -EBUSY)
                        k = wait_links(r, n ? n->sync : sync_at(c, 0));
        } else {
                k = 0;
                for (size_t i = 0; k >= 0 && i < namespaces(c); i++)
                        k = wait_links(r, sync_at(c, i));
        }
        if (k < 0) {
                control_request_cancel(r); /* takes back the waits made */
                return k;
        }
        *ret = r;
        return 0;
}

void control_request_cancel(ControlRequest *r) {
        if (!r)
                return;
        if (r->read_id)
                writer_cancel_read(r->writer, r->read_id);
        for (size_t i = 0; i < r->n_waits; i++)
                if (r->waits[i].id != 0)
                        sync_cancel_wait(r->waits[i].sync, r->waits[i].id);
        request_free(r);
}

/* `warnings`: they are in their own field, so their messages go without the "warning: " that
 * marks them in text. */
static json_object *errors_json(const PolicyErrors *errs, bool warnings) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < errs->n; i++) {
                const PolicyError *e = &errs->items[i];
                json_object *o = json_object_new_object();
                const char *m = e->message ?: "";
                if (warnings && strncmp(m, "warning: ", 9) == 0)
                        m += 9;
                json_object_object_add(o, "file", json_object_new_string(e->file ?: ""));
                json_object_object_add(o, "line", json_object_new_int((int) e->line));
                json_object_object_add(o, "column", json_object_new_int((int) e->column));
                json_object_object_add(o, "message", json_object_new_string(m));
                json_object_array_add(a, o);
        }
        return a;
}

json_object *control_errors_json(const PolicyErrors *errs) {
        return errors_json(errs, false);
}

json_object *control_warnings_json(const PolicyErrors *warnings) {
        return errors_json(warnings, true);
}

/* `p`: the policy of the plan's set that the device matches. */
static json_object *plan_device(Device *d, const Policy *p, bool v4) {
        json_object *o = json_object_new_object();
        const char *action = "none";

        json_object_object_add(o, "netns", kernel_string(device_netns_name(d)));
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", kernel_string(d->ifname));
        json_object_object_add(o, "policy", string_or_null(p ? p->name : NULL));
        json_object_object_add(o, "current", control_sizes_json(&d->current, v4));
        if (p) {
                Desired want;
                AutoSearches searches;
                uint64_t now = realtime_usec();

                compute_desired(p, &d->current, &d->record.original, d->record.has_original ? d->record.written : 0, d->tso_max_size, v4,
                                &want);
                /* the sizes set to `auto`: where each search would be (a new one at the policy's min) */
                if (auto_apply_preview(d, p, want.owned, v4, now, &searches, NULL) != 0) {
                        for (unsigned i = 0; i < SIZES_COUNT; i++)
                                if (searches.sizes & (1u << i))
                                        *sizes_at(&want.sizes, i) = auto_search_target(&searches.size[i]);
                        const AutoSearch *search[SIZES_COUNT];
                        for (unsigned i = 0; i < SIZES_COUNT; i++)
                                search[i] = &searches.size[i];
                        json_object_object_add(o, "auto", auto_json(searches.sizes, search, now));
                }
                json_object_object_add(o, "desired", control_sizes_json(&want.sizes, v4));
                json_object *cl = json_object_new_array();
                if (want.clamped & (CLAMP_GSO | CLAMP_GSO_IPV4))
                        json_object_array_add(cl, json_object_new_string("gso to tso_max_size"));
                if (want.clamped & (CLAMP_GRO | CLAMP_GRO_IPV4))
                        json_object_array_add(cl, json_object_new_string("gro to 524280"));
                json_object_object_add(o, "clamped", cl);
                json_object_object_add(o, "clamps", clamps_json(p, &want, d));
                if (want.families == 0)
                        action = "unsupported";
                else if (!sizes_equal(&want.sizes, &d->current, v4))
                        action = "write";
        } else if (d->record.has_original) {
                Sizes target;
                compute_restore(&d->record.original, d->record.written, &d->current, d->tso_max_size, v4, &target);
                json_object_object_add(o, "desired", control_sizes_json(&target, v4));
                if (!sizes_equal(&target, &d->current, v4))
                        action = "restore";
        } else
                json_object_object_add(o, "desired", NULL);
        json_object_object_add(o, "action", json_object_new_string(action));
        return o;
}

/* ---- plan and validate, in a worker ---- */

struct ControlJob {
        Control *control;
        WorkerJob *job;
        bool plan;
        const char *policy; /* the caller's, until fn or the cancel; NULL: the loaded one (Plan only) */
        char *source;
        SnmpSnapshot snap; /* Validate: this namespace's counters when it was asked, for the warnings */
        bool have_snap;
        /* Plan: the namespaces its policy takes that bigtcpd has not entered, looked at read-only
         * between the worker's two runs (the first says which, the second plans them too) */
        uid_t uid;
        NetnsPeek *peek;
        bool looked;
        ControlJobFn fn;
        void *userdata;
};

static void control_job_free(ControlJob *j) {
        snmp_done(&j->snap);
        netns_peek_free(j->peek);
        free(j->source);
        free(j);
}

/* The namespaces in the directories that the plan's policy takes and that bigtcpd does not run:
 * their devices come from a look (netns-peek.h), or they are named in netns_not_entered. */
static bool plan_takes_unentered(const Control *c, const PolicySet *set, const char *name) {
        return policy_set_takes_netns(set, name) && !netns_set_find(c->netns, name);
}

static const char *not_entered_reason(const PeekedNetns *pk, bool may_look) {
        if (!pk)
                /* entering a namespace is root's: another caller sees what bigtcpd runs, no more */
                return may_look ? "not-looked-at" /* it appeared after the plan looked */ : "caller-not-root";
        switch (pk->error) {
        case -E2BIG:
                return pk->dumped ? "too-many-devices" : "limit";
        case -EOVERFLOW:
                return "too-many-routes";
        case -ETIMEDOUT:
                return "timed-out";
        case -ENOENT:
                return "gone";
        case -EMFILE:
        case -ENFILE:
                return "descriptors";
        default:
                return pk->dumped ? "dump-failed" : "cannot-enter";
        }
}

static json_object *not_entered_json(const char *name, const PeekedNetns *pk, bool may_look) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "netns", json_object_new_string(name));
        json_object_object_add(o, "reason", json_object_new_string(not_entered_reason(pk, may_look)));
        if (pk && pk->error != 0 && pk->error != -E2BIG && pk->error != -EOVERFLOW && pk->error != -ETIMEDOUT) {
                json_object_object_add(o, "errno", json_object_new_int(-pk->error));
                json_object_object_add(o, "error", json_object_new_string(strerror(-pk->error)));
        }
        return o;
}

/* Plan's reply for `set` (the loaded policy when NULL): {"devices": [...], "policies": [...],
 * "netns_not_entered": [...]}, with the devices of the namespaces `peek` looked at. */
static int plan_reply(Control *c, const PolicySet *set, const NetnsPeek *peek, bool may_look, json_object **ret) {
        _cleanup_(freep) Device **l = NULL;
        size_t n;
        int r;

        if (!set)
                set = control_policy(c);
        r = control_sorted_devices(c, &l, &n);
        if (r < 0)
                return r;
        json_object *o = json_object_new_object(), *a = json_object_new_array_ext((int) n);
        for (size_t i = 0; a && i < n; i++) {
                Engine *e = control_engine_of(c, l[i]);
                json_object_array_add(a, plan_device(l[i], apply_match(e, set, l[i]), e->ipv4_supported));
        }
        /* Namespaces the policy would take that bigtcpd has not entered: what a look saw of them
         * (nothing of bigtcpd's is on them: no originals), or why not */
        json_object *unplanned = json_object_new_array();
        for (size_t i = 0; a && unplanned && i < netns_set_visible_count(c->netns); i++) {
                const char *name = netns_set_visible(c->netns, i);
                const PeekedNetns *pk = netns_peek_find(peek, name);
                _cleanup_(freep) Device **pl = NULL;
                size_t pn = 0;

                if (!plan_takes_unentered(c, set, name))
                        continue;
                if (!pk || pk->error != 0) {
                        json_object_array_add(unplanned, not_entered_json(name, pk, may_look));
                        continue;
                }
                r = device_table_sorted(&pk->devices, &pl, &pn);
                if (r < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        json_object_put(unplanned);
                        return r;
                }
                for (size_t k = 0; k < pn; k++)
                        json_object_array_add(a, plan_device(pl[k], apply_match_in(set, pl[k], name, -1),
                                                             home(c)->ipv4_supported));
        }
        if (!o || !a || !unplanned) {
                json_object_put(o);
                json_object_put(a);
                json_object_put(unplanned);
                return -ENOMEM;
        }
        json_object_object_add(o, "devices", a);
        json_object_object_add(o, "policies", policy_scopes_json(set));
        json_object_object_add(o, "netns_not_entered", unplanned);
        *ret = o;
        return 0;
}

/* The worker's first run of a plan: the namespaces to look at before it can be made (visible,
 * taken by the policy, not entered), or NULL when there are none. */
static json_object *plan_wanted(Control *c, const PolicySet *set) {
        json_object *a = NULL;

        if (!set)
                set = control_policy(c);
        for (size_t i = 0; i < netns_set_visible_count(c->netns); i++) {
                const char *name = netns_set_visible(c->netns, i);
                if (!plan_takes_unentered(c, set, name))
                        continue;
                if (!a && !(a = json_object_new_array()))
                        return NULL;
                json_object_array_add(a, json_object_new_string(name));
        }
        return a;
}

/* In the worker: one line {"error": errno, "errors": [...], "warnings": [...]} (Validate's counter
 * warnings, also of a policy with errors: what of it did parse), then, for a plan that could be made,
 * Plan's reply (plan_reply()). A plan's first run whose policy takes namespaces bigtcpd has not
 * entered says only which, in "netns_wanted"; it runs again once they are looked at. json-c
 * escapes every control character, so the line holds no newline. */
static int job_run(int fd, void *userdata) {
        ControlJob *j = userdata;
        Control *c = j->control;
        _cleanup_(policy_set_freep) PolicySet *own = NULL;
        _cleanup_(json_object_putp) json_object *head = NULL, *plan = NULL, *wanted = NULL;
        PolicyErrors errs = {}, warnings = {};
        const char *text;
        size_t len;
        int r = 0;

        if (j->policy) {
                own = policy_set_new();
                if (!own)
                        return -ENOMEM;
                own->partial = !j->plan;
                r = policy_parse_buffer(own, j->source ?: "<policy>", j->policy, strlen(j->policy), &errs);
                if (r >= 0) {
                        HostIdentity host = control_host(c);
                        policy_set_scope(own, &host);
                }
        }
        if (r >= 0 && j->plan && !j->looked && j->uid == 0 && c->netns && (wanted = plan_wanted(c, own)))
                ; /* the plan after a look at those */
        else if (r >= 0 && j->plan)
                r = plan_reply(c, own, j->peek, j->uid == 0, &plan);
        if (j->have_snap && own && (r >= 0 || r == -EINVAL) &&
            guard_counter_warnings(own, &j->snap, sizeof(struct rtnl_link_stats64), &warnings) < 0) {
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                return -ENOMEM;
        }
        head = json_object_new_object();
        if (!head) {
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                return -ENOMEM;
        }
        if (r != -EINVAL) /* errors are what makes a policy invalid, and only that */
                policy_errors_clear(&errs);
        json_object_object_add(head, "error", json_object_new_int(r < 0 ? -r : 0));
        json_object_object_add(head, "errors", control_errors_json(&errs));
        json_object_object_add(head, "warnings", control_errors_json(&warnings));
        if (wanted) {
                json_object_object_add(head, "netns_wanted", TAKE_PTR(wanted));
                json_object_object_add(head, "netns_routes",
                                       json_object_new_boolean(policy_set_uses_routes(own ?: control_policy(c))));
        }
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
        text = json_object_to_json_string_length(head, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!text)
                return -ENOMEM;
        r = worker_write_all(fd, text, len);
        if (r >= 0)
                r = worker_write_all(fd, "\n", 1);
        if (r < 0 || !plan)
                return r;
        text = json_object_to_json_string_length(plan, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        return text ? worker_write_all(fd, text, len) : -ENOMEM;
}

/* The errors of the first line, checked: a worker that went wrong must not be believed. */
static int parse_errors(json_object *a, PolicyErrors *errs) {
        size_t n;

        if (!json_object_is_type(a, json_type_array))
                return -EBADMSG;
        n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(a, i), *file, *line, *column, *message;
                if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "file", &file) ||
                    !json_object_object_get_ex(o, "line", &line) ||
                    !json_object_object_get_ex(o, "column", &column) ||
                    !json_object_object_get_ex(o, "message", &message) || !json_object_is_type(file, json_type_string) ||
                    !json_object_is_type(line, json_type_int) || !json_object_is_type(column, json_type_int) ||
                    !json_object_is_type(message, json_type_string) || json_object_get_int64(line) < 0 ||
                    json_object_get_int64(line) > UINT32_MAX || json_object_get_int64(column) < 0 ||
                    json_object_get_int64(column) > UINT32_MAX)
                        return -EBADMSG;
                char *m = strdup(json_object_get_string(message));
                if (!m)
                        return -ENOMEM;
                const char *f = json_object_get_string(file);
                int r = policy_errors_append(errs, *f ? f : NULL, (unsigned) json_object_get_int64(line),
                                             (unsigned) json_object_get_int64(column), m);
                if (r < 0) {
                        free(m);
                        return r;
                }
        }
        return 0;
}

/* A first run's "netns_wanted": names of namespaces, sorted, each once, at most NETNS_MAX. */
static int parse_wanted(json_object *a, json_object **ret) {
        size_t n;

        if (!json_object_is_type(a, json_type_array) || (n = json_object_array_length(a)) == 0 || n > NETNS_MAX)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                json_object *v = json_object_array_get_idx(a, i);
                if (!json_object_is_type(v, json_type_string) || !netns_name_is_valid(json_object_get_string(v)) ||
                    (i > 0 && strcmp(json_object_get_string(json_object_array_get_idx(a, i - 1)),
                                     json_object_get_string(v)) >= 0))
                        return -EBADMSG;
        }
        *ret = json_object_get(a);
        return 0;
}

/* The worker's result: its first line, then (for a plan) Plan's reply object, passed on as it is
 * once it is known to hold no NUL (a varlink frame ends at one); or, of a plan's first run, the
 * namespaces to look at first (`ret_wanted`). */
static int parse_result(const ControlJob *j, const char *data, size_t size, PolicyErrors *errs,
                        PolicyErrors *warnings, const char **ret_plan, size_t *ret_size, json_object **ret_wanted,
                        bool *ret_routes) {
        const char *nl = memchr(data, '\n', size);
        _cleanup_(json_object_putp) json_object *head = NULL;
        json_object *error, *errors, *warns, *wanted, *routes;
        json_tokener *tok;
        int64_t e;
        int r;

        if (!nl || nl - data > INT32_MAX)
                return -EBADMSG;
        tok = json_tokener_new_ex(4);
        if (!tok)
                return -ENOMEM;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        head = json_tokener_parse_ex(tok, data, (int) (nl - data));
        bool whole = json_tokener_get_error(tok) == json_tokener_success &&
                     json_tokener_get_parse_end(tok) == (size_t) (nl - data);
        json_tokener_free(tok);
        if (!head || !whole || !json_object_is_type(head, json_type_object) ||
            !json_object_object_get_ex(head, "error", &error) || !json_object_is_type(error, json_type_int) ||
            !json_object_object_get_ex(head, "errors", &errors) ||
            !json_object_object_get_ex(head, "warnings", &warns))
                return -EBADMSG;
        e = json_object_get_int64(error);
        if (e < 0 || e > 4095)
                return -EBADMSG;
        r = parse_errors(errors, errs);
        if (r >= 0)
                r = parse_errors(warns, warnings);
        if (r < 0)
                return r;
        if (j->plan && warnings->n > 0)
                return -EBADMSG;
        const char *rest = nl + 1;
        size_t rest_size = size - (size_t) (rest - data);
        if (e != 0) {
                if (rest_size > 0 || (e == EINVAL) != (errs->n > 0))
                        return -EBADMSG;
                return (int) -e;
        }
        if (json_object_object_get_ex(head, "netns_wanted", &wanted)) {
                if (!j->plan || j->looked || errs->n > 0 || rest_size > 0 ||
                    !json_object_object_get_ex(head, "netns_routes", &routes) ||
                    !json_object_is_type(routes, json_type_boolean))
                        return -EBADMSG;
                *ret_routes = json_object_get_boolean(routes);
                return parse_wanted(wanted, ret_wanted);
        }
        if (errs->n > 0 || (j->plan ? rest_size == 0 || rest[0] != '{' || memchr(rest, '\0', rest_size)
                                    : rest_size > 0))
                return -EBADMSG;
        *ret_plan = j->plan ? rest : NULL;
        *ret_size = j->plan ? rest_size : 0;
        return 0;
}

static void on_job_done(int error, const char *data, size_t size, void *userdata);

static void on_peek_done(NetnsPeek *p, void *userdata) {
        ControlJob *j = userdata;
        int r;

        j->looked = true;
        r = worker_submit(j->control->workers, j->uid, job_run, on_job_done, j, &j->job);
        if (r < 0) {
                j->fn(r, &(PolicyErrors){}, &(PolicyErrors){}, NULL, 0, j->userdata);
                control_job_free(j);
        }
}

/* The first run named namespaces to look at: look, then run again (on_peek_done). */
static int start_peek(ControlJob *j, json_object *wanted, bool routes) {
        size_t n = json_object_array_length(wanted);
        _cleanup_(freep) char **names = calloc(n + 1, sizeof(char *));

        if (!names)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                names[i] = (char *) json_object_get_string(json_object_array_get_idx(wanted, i));
        j->job = NULL; /* it is over */
        return netns_peek_new(home(j->control)->base, j->control->netns, names, n, routes, on_peek_done, j,
                              &j->peek);
}

static void on_job_done(int error, const char *data, size_t size, void *userdata) {
        ControlJob *j = userdata;
        PolicyErrors errs = {}, warnings = {};
        _cleanup_(json_object_putp) json_object *wanted = NULL;
        const char *plan = NULL;
        bool routes = false;
        size_t n = 0;
        int r = error;

        if (r >= 0) {
                r = parse_result(j, data, size, &errs, &warnings, &plan, &n, &wanted, &routes);
                if (r == -EBADMSG) {
                        log_warning("%s: the worker's result is malformed, ignoring it", j->plan ? "Plan" : "Validate");
                        policy_errors_clear(&errs);
                        policy_errors_clear(&warnings);
                }
        }
        if (r >= 0 && wanted) {
                r = start_peek(j, wanted, routes);
                if (r >= 0)
                        return;
        }
        j->fn(r, &errs, &warnings, plan, n, j->userdata);
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
        control_job_free(j);
}

static int job_start(Control *c, bool plan, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                     void *userdata, ControlJob **ret) {
        ControlJob *j;
        int r;

        if (!c->workers)
                return -EOPNOTSUPP;
        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (ControlJob){
                .control = c, .plan = plan, .policy = policy_yaml, .uid = uid, .fn = fn, .userdata = userdata};
        if (source && !(j->source = strdup(source))) {
                control_job_free(j);
                return -ENOMEM;
        }
        /* the names it may take, also while no policy in force names another namespace */
        if (plan)
                netns_set_look(c->netns);
        /* the worker cannot open /proc (sandbox.c): the counters go with it, read here, now */
        if (!plan && policy_yaml) {
                r = engine_snmp_read(home(c), &j->snap);
                if (r == -ENOMEM) {
                        control_job_free(j);
                        return r;
                }
                if (r < 0)
                        log_debug_errno(r, "Validate: failed to read the SNMP counters (%m): no warnings");
                j->have_snap = r >= 0;
        }
        r = worker_submit(c->workers, uid, job_run, on_job_done, j, &j->job);
        if (r < 0) {
                control_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

int control_plan(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                 void *userdata, ControlJob **ret) {
        return job_start(c, true, uid, policy_yaml, source, fn, userdata, ret);
}

int control_validate(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                     void *userdata, ControlJob **ret) {
        return job_start(c, false, uid, policy_yaml, source, fn, userdata, ret);
}

void control_job_cancel(ControlJob *j) {
        if (!j)
                return;
        worker_cancel(j->job);
        control_job_free(j);
}

/* ---- privileged ---- */

int control_reload(Control *c, PolicyErrors *errs, PolicyErrors *warnings) {
        return reloader_reload(c->reloader, true, errs, warnings);
}

int control_try(Control *c, const char *policy_yaml, size_t size, const char *file, const char *target,
                uint64_t timeout_usec, PolicyErrors *errs) {
        if (!c->trial)
                return -EOPNOTSUPP;
        return policy_try_start(c->trial, policy_yaml, size, file, target, timeout_usec, errs);
}

int control_confirm(Control *c) {
        return c->trial ? policy_try_confirm(c->trial) : -ENOENT;
}

int control_revert(Control *c) {
        return c->trial ? policy_try_revert(c->trial, TRY_REASON_OPERATOR) : -ENOENT;
}

/* One device by name, or (NULL) every device `op` has something to do with; `each` (may be NULL)
 * is told of every device tried and what `op` said. */
static int device_op(Control *c, const char *name, int (*op)(Engine *e, Device *d, const RollbackRecord *why),
                     ControlDeviceFn each, void *userdata) {
        Device *d;
        int r, n = 0;

        if (name) {
                d = control_find_device(c, name);
                if (!d)
                        return -ENODEV;
                Engine *e = control_engine_of(c, d);
                r = op(e, d, NULL);
                if (each)
                        each(d, r, userdata);
                apply_flush(e);
                return r;
        }
        for (size_t i = 0; i < namespaces(c); i++) {
                Engine *e = engine_at(c, i);
                DEVICE_FOREACH(d, &e->devices, it) {
                        r = op(e, d, NULL);
                        if (each)
                                each(d, r, userdata);
                        if (r >= 0)
                                n++;
                }
                apply_flush(e);
        }
        return n > 0 ? 0 : -EALREADY;
}

static int retry(Engine *e, Device *d, const RollbackRecord *unused) {
        return apply_retry(e, d);
}

int control_rollback(Control *c, const char *name, ControlDeviceFn each, void *userdata) {
        return device_op(c, name, apply_rollback, each, userdata);
}

int control_retry(Control *c, const char *name, ControlDeviceFn each, void *userdata) {
        return device_op(c, name, retry, each, userdata);
}

bool control_device_writing(const Device *d) {
        return d->write.phase != WRITE_IDLE;
}

/* A window that outlasts a call's own by more than this is not waited for. */
#define WATCH_OUTLASTS_USEC (200 * USEC_PER_MSEC)

struct ControlWatch {
        Control *control;
        Device *device;
        uint64_t until_usec; /* CLOCK_MONOTONIC of the engine's clock: the end of the call's own time */
        unsigned watch_id;
        struct event *timer;
        ControlWatchFn fn;
        void *userdata;
};

void control_watch_cancel(ControlWatch *w) {
        if (!w)
                return;
        if (w->watch_id != 0)
                event_watch_remove(control_events(w->control), w->watch_id);
        if (w->timer)
                event_free(w->timer);
        free(w);
}

static void watch_done(ControlWatch *w, int error) {
        ControlWatchFn fn = w->fn;
        void *userdata = w->userdata;
        const Device *d = w->device;

        control_watch_cancel(w);
        fn(error, d, userdata);
}

static int watch_arm(ControlWatch *w, uint64_t usec) {
        struct timeval tv = {.tv_sec = (time_t) (usec / USEC_PER_SEC), .tv_usec = (suseconds_t) (usec % USEC_PER_SEC)};
        return evtimer_add(w->timer, &tv) < 0 ? -ENOMEM : 0;
}

static void on_watch_event(const Event *e, void *userdata) {
        ControlWatch *w = userdata;

        if (e->device != w->device || (e->type != EVENT_EVIDENCE && e->type != EVENT_REMOVED))
                return;
        watch_done(w, e->type == EVENT_REMOVED ? -ENODEV : 0);
}

/* The call's own time is over: a window that goes on longer is not waited for. */
static void on_watch_timer(evutil_socket_t fd, short what, void *userdata) {
        ControlWatch *w = userdata;
        Engine *e = control_engine_of(w->control, w->device);
        uint64_t now = clock_now(e->clock, CLOCK_MONOTONIC);
        const Evidence *ev = w->device->evidence;

        /* libevent's clock is coarse: its timer may come a few ms early */
        if (now < w->until_usec && watch_arm(w, w->until_usec - now) >= 0)
                return;
        if (!evidence_watching(w->device) || ev->ending || ev->until_usec <= w->until_usec + WATCH_OUTLASTS_USEC)
                return; /* it ends about now: EVENT_EVIDENCE comes with the verdict */
        evidence_drain(e->evidence);
        watch_done(w, 0);
}

int control_watch(Control *c, const char *name, uint64_t duration_usec, ControlWatchFn fn, void *userdata,
                  ControlWatch **ret) {
        Device *d = name ? control_find_device(c, name) : NULL;
        ControlWatch *w;
        int r;

        if (!d)
                return -ENODEV;
        if (duration_usec == 0 || duration_usec > EVIDENCE_DURATION_MAX_USEC)
                return -ERANGE;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        Engine *e = control_engine_of(c, d);
        *w = (ControlWatch){.control = c, .device = d, .fn = fn, .userdata = userdata,
                            .until_usec = clock_now(e->clock, CLOCK_MONOTONIC) + duration_usec};
        /* an earlier window that closes now says so before this call listens: it waits for its own */
        r = evidence_watch(e->evidence, d, duration_usec);
        if (r >= 0) {
                w->watch_id = event_watch_add(control_events(c), on_watch_event, w);
                w->timer = evtimer_new(e->base, on_watch_timer, w);
                r = w->watch_id == 0 || !w->timer ? -ENOMEM : watch_arm(w, duration_usec);
        }
        if (r < 0) {
                control_watch_cancel(w);
                return r;
        }
        *ret = w;
        return 0;
}

/* ---- events ---- */

static json_object *device_event_json(const char *type, const Device *d) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "event", json_object_new_string(type));
        /* events of the daemon's own namespace stay as they were before namespaces */
        if (d->netns)
                json_object_object_add(o, "netns", kernel_string(d->netns->name));
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", kernel_string(d->ifname));
        return o;
}

json_object *control_event_json(const Event *e) {
        json_object *o = NULL;
        char digest[17];

        switch (e->type) {
        case EVENT_ADDED:
        case EVENT_REMOVED:
                return device_event_json(event_type_to_string(e->type), e->device);
        case EVENT_STATE:
                o = device_event_json("state", e->device);
                if (o) {
                        json_object_object_add(o, "state", json_object_new_string(device_state_to_string(e->state)));
                        json_object_object_add(o, "previous",
                                               json_object_new_string(device_state_to_string(e->previous)));
                }
                return o;
        case EVENT_WRITE:
                o = device_event_json("write", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "cause", json_object_new_string(write_cause_to_string(e->cause) ?: ""));
                json_object_object_add(o, "from", control_sizes_json(e->from, e->ipv4));
                json_object_object_add(o, "to", control_sizes_json(e->to, e->ipv4));
                if (e->error < 0) {
                        json_object_object_add(o, "errno", json_object_new_int(-e->error));
                        json_object_object_add(o, "error", json_object_new_string(strerror(-e->error)));
                        if (e->extack)
                                json_object_object_add(o, "extack", kernel_string(e->extack));
                }
                return o;
        case EVENT_ROLLBACK:
                o = device_event_json("rollback", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "counter", json_object_new_string(e->rollback->counter ?: ""));
                json_object_object_add(o, "rise", json_object_new_int64((int64_t) e->rollback->rise));
                json_object_object_add(o, "threshold", json_object_new_double(e->rollback->threshold));
                json_object_object_add(o, "from", control_sizes_json(e->from, e->ipv4));
                json_object_object_add(o, "to", control_sizes_json(e->to, e->ipv4));
                return o;
        case EVENT_RELOAD:
                o = json_object_new_object();
                if (!o)
                        return NULL;
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) e->digest);
                json_object_object_add(o, "event", json_object_new_string("reload"));
                json_object_object_add(o, "ok", json_object_new_boolean(e->ok));
                json_object_object_add(o, "digest", json_object_new_string(digest));
                if (!e->ok && e->errors)
                        json_object_object_add(o, "errors", control_errors_json(e->errors));
                return o;
        case EVENT_ROLLOUT:
                o = e->device ? device_event_json("rollout", e->device) : json_object_new_object();
                if (!o)
                        return NULL;
                if (!e->device)
                        json_object_object_add(o, "event", json_object_new_string("rollout"));
                json_object_object_add(o, "policy", json_object_new_string(e->policy ?: ""));
                json_object_object_add(o, "halted", json_object_new_boolean(true));
                return o;
        case EVENT_TRY:
                o = json_object_new_object();
                if (!o)
                        return NULL;
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) e->digest);
                json_object_object_add(o, "event", json_object_new_string("try"));
                json_object_object_add(o, "action", json_object_new_string(try_action_to_string(e->try_action) ?: ""));
                if (try_reason_to_string(e->try_reason))
                        json_object_object_add(o, "reason", json_object_new_string(try_reason_to_string(e->try_reason)));
                json_object_object_add(o, "file", json_object_new_string(e->file ?: ""));
                json_object_object_add(o, "target", json_object_new_string(e->target ?: ""));
                json_object_object_add(o, "deadline_usec", json_object_new_int64((int64_t) e->deadline));
                json_object_object_add(o, "digest", json_object_new_string(digest));
                return o;
        case EVENT_EVIDENCE:
                o = device_event_json("evidence", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "big_packets", big_packets_json(now_usec(), NULL, e->device));
                json_object_object_add(o, "effective", effective_json(e->device));
                return o;
        case EVENT_AUTO:
                o = device_event_json("auto", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "change", json_object_new_string(auto_change_to_string(e->auto_change) ?: "?"));
                json_object_object_add(o, "search", auto_search_json(e->auto_search, e->auto_size, realtime_usec()));
                return o;
        case EVENT_NETNS_PROBLEM:
                o = json_object_new_object();
                if (!o)
                        return NULL;
                json_object_object_add(o, "event", json_object_new_string("netns-problem"));
                json_object_object_add(o, "netns", kernel_string(e->netns));
                json_object_object_add(o, "problem", json_object_new_string(e->problem ?: ""));
                json_object_object_add(o, "ok", json_object_new_boolean(e->ok));
                if (e->error < 0) {
                        json_object_object_add(o, "errno", json_object_new_int(-e->error));
                        json_object_object_add(o, "error", json_object_new_string(strerror(-e->error)));
                }
                return o;
        case EVENT_RELOADING:
        case EVENT_SETTLED:
                return NULL; /* for sd_notify, not for operators */
        case _EVENT_TYPE_MAX:
        case _EVENT_TYPE_INVALID:
                break;
        }
        return NULL;
}
