/* control-metrics.c — the daemon's /metrics figures read straight from its tables (metrics.h), each
 * as GetStatus and ListDevices have it: the same text as `bigtcpctl metrics` prints from their
 * JSON, without a JSON view of 10000 devices built, written and parsed first. The status is copied
 * when it is made; the devices are those of that moment, each read when its lines are printed,
 * which may be over several rounds of the loop (a device gone meanwhile is left out). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto-apply.h"
#include "control-internal.h"
#include "device-lifecycle.h"
#include "evidence.h"
#include "utf8.h"
#include "version.h"

/* A device of the list, found by its address when it goes. */
typedef struct ByAddress {
        const Device *device;
        size_t index;
} ByAddress;

struct ControlMetrics {
        Control *control;
        Device **devices; /* NULL where one went since */
        size_t n_devices;
        ByAddress *by_address; /* sorted by address */
        unsigned watch_id;     /* of the devices' going */
        char **strings;        /* the status' own copies */
        size_t n_strings;
        MetricsStatus status;
        MetricsSource source;
        char digest[17];
        MetricsPolicyRollbacks *by_policy;
        MetricsPolicy *policies;
        MetricsPolicyError *errors;
        /* what the device last asked for points into */
        char *netns_buf, *ifname_buf;
        MetricsAuto autos[SIZES_COUNT];
};

void control_metrics_free(ControlMetrics *m) {
        if (!m)
                return;
        if (m->watch_id != 0)
                event_watch_remove(control_events(m->control), m->watch_id);
        for (size_t i = 0; i < m->n_strings; i++)
                free(m->strings[i]);
        free(m->strings);
        free(m->by_address);
        free(m->devices);
        free(m->by_policy);
        free(m->policies);
        free(m->errors);
        free(m->netns_buf);
        free(m->ifname_buf);
        free(m);
}

static void sizes_of(const Sizes *s, bool v4, bool has[static SIZES_COUNT], int64_t v[static SIZES_COUNT]) {
        for (unsigned k = 0; k < SIZES_COUNT; k++) {
                has[k] = k < 2 || v4;
                v[k] = sizes_get(s, k);
        }
}

/* As control_device_write() writes it. */
static bool device_of(void *userdata, size_t i, MetricsDevice *ret) {
        ControlMetrics *m = userdata;
        const Device *d = m->devices[i];
        const Engine *e;
        EvidenceView view;
        size_t n = 0;
        bool v4;

        if (!d)
                return false;
        e = control_engine_of(m->control, d);
        v4 = e->ipv4_supported;

        m->netns_buf = mfree(m->netns_buf);
        m->ifname_buf = mfree(m->ifname_buf);
        *ret = (MetricsDevice){
                .netns = utf8_safe(device_netns_name(d), &m->netns_buf),
                .ifname = utf8_safe(d->ifname, &m->ifname_buf),
                .policy = d->match.policy_name,
                .state = device_state_to_string(d->life.state),
                .tso_max_size = d->tso_max_size,
                .has_rollbacks = true,
                .rollbacks = (int64_t) device_history_get(d)->n_rollbacks,
                .effective = d->evidence && d->evidence->verdict != EVIDENCE_UNKNOWN
                                     ? d->evidence->verdict == EVIDENCE_EFFECTIVE
                                     : -1,
        };
        sizes_of(&d->current, v4, ret->has_current, ret->current);
        if (d->life.state != DEVICE_UNMANAGED)
                sizes_of(&d->life.desired, v4, ret->has_desired, ret->desired);
        if (evidence_view(e->evidence, d, engine_now(e), &view) >= 0) {
                ret->has_big_packets = true;
                ret->tx = (int64_t) view.counts.tx;
                ret->rx = (int64_t) view.counts.rx;
                ret->tx_largest = view.counts.tx_largest;
                ret->rx_largest = view.counts.rx_largest;
        }
        for (unsigned k = 0; d->autosize && k < SIZES_COUNT; k++) {
                const AutoSearch *s;
                if (!(d->autosize->sizes & (1u << k)) || (s = auto_device_search(d->autosize, k))->phase == AUTO_NEW)
                        continue;
                m->autos[n++] = (MetricsAuto){
                        .size = size_name(k),
                        .phase = auto_phase_to_string(s->phase) ?: "?",
                        .proven = s->proven,
                        .ceiling = s->ceiling ?: s->max,
                        .trips = s->trips,
                };
        }
        ret->autos = m->autos;
        ret->n_autos = n;
        return true;
}

/* A copy of `s` the status keeps (NULL for NULL, and when out of memory). */
static const char *keep(ControlMetrics *m, const char *s, int *error) {
        char **l, *copy;

        if (!s)
                return NULL;
        l = reallocarray(m->strings, m->n_strings + 1, sizeof(*l));
        if (l)
                m->strings = l;
        copy = l ? strdup(s) : NULL;
        if (!copy) {
                *error = -ENOMEM;
                return NULL;
        }
        return m->strings[m->n_strings++] = copy;
}

/* As control_status_json() has them. */
static int status_of(ControlMetrics *m) {
        Control *c = m->control;
        const Engine *e = control_home(c);
        const PolicySet *policy = control_policy(c);
        const ReloadResult *last = reloader_last(c->reloader);
        Observer *obs = e->cfg.observer;
        MetricsStatus *s = &m->status;
        unsigned n[_DEVICE_STATE_MAX] = {};
        uint64_t gap, dumps;
        int error = 0;

        lifecycle_count_states(e, n);
        snprintf(m->digest, sizeof(m->digest), "%016llx", policy ? (unsigned long long) policy->digest : 0ull);
        probation_figures(e->probation, &gap, &dumps);
        *s = (MetricsStatus){
                .version = bigtcpd_version,
                .policy_digest = m->digest,
                .ready = control_ready(c),
                .netns_managed = (int64_t) netns_set_others_count(c->netns),
                .netns_problems = (int64_t) netns_set_problem_count(c->netns),
                .writes = (int64_t) e->counters.writes,
                .write_failures = (int64_t) e->counters.write_failures,
                .restores = (int64_t) e->counters.restores,
                .has_rollbacks_by_policy = true,
                .rollbacks = (int64_t) e->counters.rollbacks,
                .has_policies = true,
                .has_last_reload = last != NULL,
                .observer = control_observer_kind(e),
                .observer_why = !obs ? keep(m, e->cfg.observer_why, &error) : NULL,
                .has_probation = true,
                .probation_gap_usec = (int64_t) gap,
        };
        for (int k = 0; k < _DEVICE_STATE_MAX; k++)
                s->devices[k] = n[k];
        if (e->counters.n_by_policy > 0) {
                m->by_policy = calloc(e->counters.n_by_policy, sizeof(*m->by_policy));
                if (!m->by_policy)
                        return -ENOMEM;
                for (size_t i = 0; i < e->counters.n_by_policy; i++)
                        m->by_policy[i] = (MetricsPolicyRollbacks){.policy = keep(m, e->counters.by_policy[i].policy, &error),
                                                                   .count = (int64_t) e->counters.by_policy[i].rollbacks,
                                                                   .present = true};
                s->rollbacks_by_policy = m->by_policy;
                s->n_rollbacks_by_policy = e->counters.n_by_policy;
        }
        if (policy && policy->n_policies > 0) {
                m->policies = calloc(policy->n_policies, sizeof(*m->policies));
                if (!m->policies)
                        return -ENOMEM;
                for (size_t i = 0; i < policy->n_policies; i++) {
                        const Policy *p = &policy->policies[i];
                        m->policies[i] = (MetricsPolicy){.name = keep(m, p->name ?: "", &error),
                                                         .applies = p->applies_here,
                                                         .has_hosts_percent = p->has_hosts_percent,
                                                         .hosts_percent = (int) p->hosts_percent,
                                                         .has_cohort = p->has_hosts_percent,
                                                         .cohort = (int) p->cohort};
                }
                s->policies = m->policies;
                s->n_policies = policy->n_policies;
        }
        if (last) {
                s->reload_ok = last->ok;
                s->reload_errors_total = (int64_t) last->n_errors;
                if (last->errors.n > 0) {
                        m->errors = calloc(last->errors.n, sizeof(*m->errors));
                        if (!m->errors)
                                return -ENOMEM;
                        for (size_t i = 0; i < last->errors.n; i++) {
                                const PolicyError *pe = &last->errors.items[i];
                                m->errors[i] = (MetricsPolicyError){.file = keep(m, pe->file ?: "", &error),
                                                                    .message = keep(m, pe->message ?: "", &error),
                                                                    .line = (int) pe->line,
                                                                    .column = (int) pe->column};
                        }
                        s->reload_errors = m->errors;
                        s->n_reload_errors = last->errors.n;
                }
        }
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const Device *d;
                DEVICE_FOREACH(d, &control_engine_at(c, i)->devices, it)
                        s->not_effective += d->evidence && d->evidence->verdict == EVIDENCE_NOT_EFFECTIVE;
        }
        if (obs) {
                (void) observer_read(obs, clock_now(e->clock, CLOCK_MONOTONIC), EVIDENCE_FRESH_USEC);
                s->has_observer_map = true;
                s->observer_map_bytes = (int64_t) observer_map_bytes(obs);
                s->observer_read_usec = (int64_t) observer_read_cost_usec(obs);
        }
        return error;
}

static int by_address_compare(const void *a, const void *b) {
        uintptr_t x = (uintptr_t) ((const ByAddress *) a)->device, y = (uintptr_t) ((const ByAddress *) b)->device;
        return x < y ? -1 : x > y;
}

/* A device that goes is left out from now on. */
static void on_event(const Event *e, void *userdata) {
        ControlMetrics *m = userdata;
        ByAddress key = {.device = e->device}, *found;

        if (e->type != EVENT_REMOVED || !e->device)
                return;
        found = bsearch(&key, m->by_address, m->n_devices, sizeof(*m->by_address), by_address_compare);
        if (found)
                m->devices[found->index] = NULL;
}

int control_metrics_new(Control *c, ControlMetrics **ret) {
        _cleanup_(control_metrics_freep) ControlMetrics *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->control = c;
        r = status_of(m);
        if (r < 0)
                return r;
        r = control_sorted_devices(c, &m->devices, &m->n_devices);
        if (r < 0)
                return r;
        m->by_address = calloc(m->n_devices + 1, sizeof(*m->by_address));
        if (!m->by_address)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_devices; i++)
                m->by_address[i] = (ByAddress){m->devices[i], i};
        qsort(m->by_address, m->n_devices, sizeof(*m->by_address), by_address_compare);
        m->watch_id = event_watch_add(control_events(c), on_event, m);
        if (m->watch_id == 0)
                return -ENOMEM;
        m->source = (MetricsSource){.status = &m->status, .n_devices = m->n_devices, .device = device_of, .userdata = m};
        *ret = TAKE_PTR(m);
        return 0;
}

const MetricsSource *control_metrics_source(const ControlMetrics *m) {
        return &m->source;
}
