/* control-json.c — the control surface's JSON views: a device (ListDevices, with what a device
 * asked for by name was matched by and clamped to), GetStatus (problems, rollouts, the other
 * namespaces, auto, try), policy errors and warnings, and one device of a plan. */
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include "apply.h"
#include "auto-apply.h"
#include "control-internal.h"
#include "evidence.h"
#include "json-writer.h"
#include "device-lifecycle.h"
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
json_object *control_kernel_string(const char *s) {
        _cleanup_(freep) char *buf = NULL;
        const char *safe;

        if (!s)
                return NULL;
        safe = utf8_safe(s, &buf);
        return safe ? json_object_new_string(safe) : NULL;
}

/* The device view (ListDevices' Device) and its parts are written once, one source for every
 * transport: as JSON text straight into a reply (varlink's ListDevices of every device, Monitor's
 * events), or through the writer's tree backend into a json-c tree where one is built around them
 * (control_device_json(), GetStatus' problems, a plan's auto). */

void control_kernel_string_write(JsonWriter *w, const char *s) {
        _cleanup_(freep) char *buf = NULL;
        const char *safe = NULL;

        if (s && !(safe = utf8_safe(s, &buf)) && !w->error)
                w->error = -ENOMEM;
        json_writer_string(w, safe);
}

void control_sizes_write(JsonWriter *w, const char *key, const Sizes *s, bool ipv4) {
        json_writer_key(w, key);
        json_writer_object_begin(w);
        json_writer_key(w, "gso_max_size");
        json_writer_int64(w, s->gso_max_size);
        json_writer_key(w, "gro_max_size");
        json_writer_int64(w, s->gro_max_size);
        if (ipv4) {
                json_writer_key(w, "gso_ipv4_max_size");
                json_writer_int64(w, s->gso_ipv4_max_size);
                json_writer_key(w, "gro_ipv4_max_size");
                json_writer_int64(w, s->gro_ipv4_max_size);
        }
        json_writer_object_end(w);
}

static void write_size_names(JsonWriter *w, unsigned mask, bool ipv4) {
        json_writer_key(w, "owned");
        json_writer_array_begin(w);
        for (unsigned i = 0; i < (ipv4 ? SIZES_COUNT : 2); i++)
                if (mask & (1u << i))
                        json_writer_string(w, size_name(i));
        json_writer_array_end(w);
}

static void write_rollback(JsonWriter *w, const RollbackRecord *r, bool ipv4) {
        json_writer_object_begin(w);
        json_writer_key(w, "counter");
        json_writer_string(w, r->counter ?: "");
        json_writer_key(w, "rise");
        json_writer_int64(w, (int64_t) r->rise);
        if (r->per) {
                json_writer_key(w, "per");
                json_writer_string(w, r->per);
                json_writer_key(w, "per_rise");
                json_writer_int64(w, (int64_t) r->per_rise);
                json_writer_key(w, "max_ratio");
                json_writer_double(w, r->threshold);
        } else { /* a uint64 max-increase held as a double (or what a state file said): clamp, a
                  * double outside int64_t does not convert */
                json_writer_key(w, "max_increase");
                json_writer_int64(w, !(r->threshold > 0) ? 0 : r->threshold >= 0x1p63 ? INT64_MAX : (int64_t) r->threshold);
        }
        json_writer_key(w, "namespace_wide");
        json_writer_bool(w, r->namespace_wide);
        json_writer_key(w, "time_usec");
        json_writer_int64(w, (int64_t) r->realtime_usec);
        control_sizes_write(w, "from", &r->from, ipv4);
        control_sizes_write(w, "to", &r->to, ipv4);
        json_writer_object_end(w);
}

static void write_error(JsonWriter *w, const Device *d) {
        const DeviceHistory *h = device_history_get(d);
        int err = abs(h->last_errno);

        json_writer_object_begin(w);
        json_writer_key(w, "errno");
        json_writer_int64(w, err);
        json_writer_key(w, "message");
        json_writer_string(w, strerror(err));
        json_writer_key(w, "extack");
        control_kernel_string_write(w, h->last_error);
        json_writer_object_end(w);
}

/* A family set as names ("ipv6", "ipv4"). */
static void write_families(JsonWriter *w, unsigned mask) {
        json_writer_array_begin(w);
        for (EvidenceFamily f = 0; f < _EVIDENCE_FAMILY_MAX; f++)
                if (mask & (1u << f))
                        json_writer_string(w, evidence_family_to_string(f));
        json_writer_array_end(w);
}

/* The same as trees, for GetStatus. */
static json_object *rollback_json(const RollbackRecord *r, bool ipv4) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        write_rollback(&w, r, ipv4);
        return json_writer_take_tree(&w);
}

static json_object *write_error_json(const Device *d) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        write_error(&w, d);
        return json_writer_take_tree(&w);
}

static json_object *families_json(unsigned mask) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        write_families(&w, mask);
        return json_writer_take_tree(&w);
}

static void write_big_packets_of(JsonWriter *w, const EvidenceView *v) {
        const EvidenceCounts *c = &v->counts;

        json_writer_object_begin(w);
        json_writer_key(w, "tx");
        json_writer_int64(w, (int64_t) c->tx);
        json_writer_key(w, "rx");
        json_writer_int64(w, (int64_t) c->rx);
        json_writer_key(w, "tx_largest");
        json_writer_int64(w, c->tx_largest);
        json_writer_key(w, "rx_largest");
        json_writer_int64(w, c->rx_largest);
        json_writer_key(w, "since");
        json_writer_int64(w, (int64_t) v->since_usec);
        json_writer_key(w, "ipv6");
        json_writer_int64(w, (int64_t) c->by_family[EVIDENCE_IPV6]);
        json_writer_key(w, "ipv4");
        json_writer_int64(w, (int64_t) c->by_family[EVIDENCE_IPV4]);
        json_writer_key(w, "full_ipv6");
        json_writer_int64(w, (int64_t) c->full[EVIDENCE_IPV6]);
        json_writer_key(w, "full_ipv4");
        json_writer_int64(w, (int64_t) c->full[EVIDENCE_IPV4]);
        json_writer_key(w, "missed");
        json_writer_int64(w, (int64_t) c->missed);
        json_writer_key(w, "watching");
        json_writer_bool(w, v->watching);
        if (v->watching) {
                json_writer_key(w, "watch_left_usec");
                json_writer_int64(w, (int64_t) v->left_usec);
        }
        if (v->verdict != EVIDENCE_UNKNOWN) {
                json_writer_key(w, "raised");
                write_families(w, v->raised);
                json_writer_key(w, "quiet");
                write_families(w, v->quiet);
        }
        json_writer_object_end(w);
}

void control_big_packets_write(JsonWriter *w, uint64_t now, EvidenceSet *s, const Device *d) {
        EvidenceView v;

        if (evidence_view(s, d, now, &v) >= 0)
                write_big_packets_of(w, &v);
        else
                json_writer_null(w);
}

void control_effective_write(JsonWriter *w, const Device *d) {
        if (!d->evidence || d->evidence->verdict == EVIDENCE_UNKNOWN)
                json_writer_null(w);
        else
                json_writer_bool(w, d->evidence->verdict == EVIDENCE_EFFECTIVE);
}

void control_auto_search_write(JsonWriter *w, const AutoSearch *s, unsigned i, uint64_t now_usec) {
        char text[256];

        json_writer_object_begin(w);
        json_writer_key(w, "size");
        json_writer_string(w, size_name(i));
        json_writer_key(w, "phase");
        json_writer_string(w, auto_phase_to_string(s->phase) ?: "?");
        json_writer_key(w, "proven");
        json_writer_int64(w, s->proven);
        json_writer_key(w, "proven_packets");
        json_writer_int64(w, (int64_t) s->proven_packets);
        json_writer_key(w, "proof");
        json_writer_string(w, s->proof);
        json_writer_key(w, "trying");
        if (s->phase == AUTO_TRYING)
                json_writer_int64(w, s->trying);
        else
                json_writer_null(w);
        json_writer_key(w, "ceiling");
        json_writer_int64(w, s->ceiling ?: s->max);
        json_writer_key(w, "tripped");
        json_writer_bool(w, s->ceiling != 0);
        json_writer_key(w, "tripped_by");
        json_writer_string(w, s->ceiling ? s->ceiling_counter ?: "" : NULL);
        json_writer_key(w, "rise");
        if (s->ceiling)
                json_writer_int64(w, (int64_t) s->ceiling_rise);
        else
                json_writer_null(w);
        json_writer_key(w, "min");
        json_writer_int64(w, s->min);
        json_writer_key(w, "max");
        json_writer_int64(w, s->max);
        json_writer_key(w, "steps");
        json_writer_int64(w, s->steps);
        json_writer_key(w, "trips");
        json_writer_int64(w, s->trips);
        json_writer_key(w, "text");
        json_writer_string(w, auto_search_format(s, now_usec, text, sizeof(text)));
        json_writer_object_end(w);
}

/* Where each search of `sizes` stands (search[i] for size i). */
static void write_auto(JsonWriter *w, unsigned sizes, const AutoSearch *const search[SIZES_COUNT], uint64_t now_usec) {
        json_writer_array_begin(w);
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if ((sizes & (1u << i)) && search[i]->phase != AUTO_NEW)
                        control_auto_search_write(w, search[i], i, now_usec);
        json_writer_array_end(w);
}

/* The same as a tree; NULL without a search. */
static json_object *auto_json(unsigned sizes, const AutoSearch *const search[SIZES_COUNT], uint64_t now_usec) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        if (sizes == 0)
                return NULL;
        write_auto(&w, sizes, search, now_usec);
        return json_writer_take_tree(&w);
}

static void write_auto_device(JsonWriter *w, const AutoDevice *a, uint64_t now_usec) {
        const AutoSearch *search[SIZES_COUNT] = {};

        if (!a || a->sizes == 0)
                return;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (a->sizes & (1u << i))
                        search[i] = auto_device_search(a, i);
        json_writer_key(w, "auto");
        write_auto(w, a->sizes, search, now_usec);
}

/* A field a device does not have is left out (the IDL's optional fields), rather than sent as
 * null. */
int control_device_write(const Control *c, const Device *d, JsonWriter *w) {
        const Engine *e = control_engine_of(c, d);
        bool v4 = e->ipv4_supported, managed = d->life.state != DEVICE_UNMANAGED;
        uint64_t now = engine_now(e);
        const DeviceHistory *h = device_history_get(d);
        const char *pending = pending_reason_to_string(lifecycle_pending_reason(d));
        EvidenceView view;

        json_writer_object_begin(w);
        json_writer_key(w, "netns");
        control_kernel_string_write(w, device_netns_name(d));
        json_writer_key(w, "ifindex");
        json_writer_int64(w, d->ifindex);
        json_writer_key(w, "ifname");
        control_kernel_string_write(w, d->ifname);
        if (d->kind) {
                json_writer_key(w, "kind");
                control_kernel_string_write(w, d->kind);
        }
        /* the word match.kind has for it */
        json_writer_key(w, "match_kind");
        if (d->flags & IFF_LOOPBACK)
                json_writer_string(w, "loopback");
        else if (d->kind)
                control_kernel_string_write(w, d->kind);
        else
                json_writer_string(w, "device");
        json_writer_key(w, "state");
        json_writer_string(w, device_state_to_string(d->life.state));
        if (d->match.policy_name) {
                json_writer_key(w, "policy");
                json_writer_string(w, d->match.policy_name);
        }
        control_sizes_write(w, "current", &d->current, v4);
        json_writer_key(w, "current_age_usec");
        json_writer_int64(w, (int64_t) (now > d->current_usec ? now - d->current_usec : 0));
        if (managed)
                control_sizes_write(w, "desired", &d->life.desired, v4);
        write_size_names(w, managed ? d->life.owned : 0, v4);
        if (d->record.has_original)
                control_sizes_write(w, "original", &d->record.original, v4);
        json_writer_key(w, "tso_max_size");
        json_writer_int64(w, d->tso_max_size);
        if (pending) {
                json_writer_key(w, "pending");
                json_writer_string(w, pending);
        }
        if (d->probation) {
                json_writer_key(w, "probation_left_usec");
                json_writer_int64(w, (int64_t) probation_left_usec(e->probation, d));
        }
        if (h->last_errno != 0) {
                json_writer_key(w, "last_error");
                write_error(w, d);
        }
        if (h->last_rollback) {
                json_writer_key(w, "last_rollback");
                write_rollback(w, h->last_rollback, v4);
        }
        json_writer_key(w, "rollbacks");
        json_writer_int64(w, (int64_t) h->n_rollbacks);
        if (device_extra_get(d)->n_altnames > 0) {
                json_writer_key(w, "altnames");
                json_writer_array_begin(w);
                for (size_t i = 0; i < d->extra->n_altnames; i++)
                        control_kernel_string_write(w, d->extra->altnames[i]);
                json_writer_array_end(w);
        }
        if (evidence_view(e->evidence, d, now, &view) >= 0) {
                json_writer_key(w, "big_packets");
                write_big_packets_of(w, &view);
        }
        if (d->evidence && d->evidence->verdict != EVIDENCE_UNKNOWN) {
                json_writer_key(w, "effective");
                json_writer_bool(w, d->evidence->verdict == EVIDENCE_EFFECTIVE);
        }
        write_auto_device(w, d->autosize, clock_now(e->clock, CLOCK_REALTIME));
        json_writer_object_end(w);
        return json_writer_error(w);
}

json_object *control_device_json(const Control *c, const Device *d) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        return control_device_write(c, d, &w) < 0 ? NULL : json_writer_take_tree(&w);
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
json_object *control_policy_scopes_json(const PolicySet *s) {
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
                        json_object_object_add(o, "netns", control_kernel_string(d->netns->name));
                json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
                json_object_object_add(o, "ifname", control_kernel_string(d->ifname));
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

        (void) problems_add(a, control_home(c), CONTROL_PROBLEMS_MAX);
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

/* One namespace's own counts. */
static json_object *namespace_counts_json(const Netns *ns) {
        const Engine *e = ns->engine;
        unsigned n[_DEVICE_STATE_MAX] = {};
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        lifecycle_count_states(e, n);
        json_object_object_add(o, "netns", control_kernel_string(ns->id.name));
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
        for (size_t i = 1; i < control_namespaces(c); i++) { /* the others */
                const Engine *e = control_engine_at(c, i);
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
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const Engine *e = control_engine_at(c, i);
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
                                json_object_object_add(t, "device", control_kernel_string(name));
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
        const Engine *e = control_home(c);
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
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const Engine *ei = control_engine_at(c, i);
                watched += evidence_watched(ei->evidence);
                DEVICE_FOREACH(d, &ei->devices, it) {
                        if (!d->evidence || d->evidence->verdict != EVIDENCE_NOT_EFFECTIVE)
                                continue;
                        _cleanup_(freep) char *name = control_device_name(d);
                        json_object *q = json_object_new_object();
                        json_object_array_add(ne, control_kernel_string(name));
                        json_object_object_add(q, "device", control_kernel_string(name));
                        json_object_object_add(q, "families", families_json(d->evidence->quiet));
                        json_object_array_add(quiet, q);
                }
        }
        json_object_object_add(ev, "watched", json_object_new_int64((int64_t) watched));
        {
                const Engine *e0 = control_engine_at(c, 0);
                Observer *obs = e0->cfg.observer;
                json_object_object_add(ev, "observer", json_object_new_string(control_observer_kind(e0)));
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
        json_object_object_add(o, "policies", control_policy_scopes_json(policy));
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

int control_devices_write(const Control *c, JsonWriter *w) {
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;
        int r;

        r = control_sorted_devices(c, &l, &n);
        if (r < 0)
                return r;
        json_writer_object_begin(w);
        json_writer_key(w, "devices");
        json_writer_array_begin(w);
        for (size_t i = 0; i < n; i++)
                (void) control_device_write(c, l[i], w);
        json_writer_array_end(w);
        json_writer_object_end(w);
        return json_writer_error(w);
}

int control_devices_json(const Control *c, const char *name, json_object **ret) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;
        json_object *o, *a, *dj;
        Device *one;
        int r;

        if (!name) {
                r = control_devices_write(c, &w);
                if (r < 0)
                        return r;
                o = json_writer_take_tree(&w);
                if (!o)
                        return -ENOMEM;
                *ret = o;
                return 0;
        }
        one = control_find_device(c, name);
        if (!one)
                return -ENODEV;
        o = json_object_new_object();
        a = json_object_new_array_ext(1);
        dj = control_device_json(c, one);
        if (!o || !a || !dj) {
                json_object_put(o);
                json_object_put(a);
                json_object_put(dj);
                return -ENOMEM;
        }
        device_explain((Control *) c, one, dj);
        json_object_array_add(a, dj);
        json_object_object_add(o, "devices", a);
        *ret = o;
        return 0;
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

void control_errors_write(JsonWriter *w, const PolicyErrors *errs) {
        json_writer_array_begin(w);
        for (size_t i = 0; i < errs->n; i++) {
                const PolicyError *e = &errs->items[i];
                json_writer_object_begin(w);
                json_writer_key(w, "file");
                json_writer_string(w, e->file ?: "");
                json_writer_key(w, "line");
                json_writer_int64(w, (int) e->line);
                json_writer_key(w, "column");
                json_writer_int64(w, (int) e->column);
                json_writer_key(w, "message");
                json_writer_string(w, e->message ?: "");
                json_writer_object_end(w);
        }
        json_writer_array_end(w);
}

json_object *control_errors_json(const PolicyErrors *errs) {
        return errors_json(errs, false);
}

json_object *control_warnings_json(const PolicyErrors *warnings) {
        return errors_json(warnings, true);
}

/* `p`: the policy of the plan's set that the device matches. */
json_object *control_plan_device(Device *d, const Policy *p, bool v4) {
        json_object *o = json_object_new_object();
        const char *action = "none";

        json_object_object_add(o, "netns", control_kernel_string(device_netns_name(d)));
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", control_kernel_string(d->ifname));
        json_object_object_add(o, "policy", string_or_null(p ? p->name : NULL));
        json_object_object_add(o, "current", control_sizes_json(&d->current, v4));
        if (p) {
                Desired want;
                _cleanup_(auto_searches_done) AutoSearches searches = {}; /* its own references */
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
