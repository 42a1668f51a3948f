/* metrics.c — the Prometheus text exposition format (metrics.h): the printer, and its source from
 * GetStatus and ListDevices as JSON. Every per-device series and the rollback counter carry the
 * policy's name, so that a fleet's rollbacks sum by policy (conf/prometheus/ has rules for
 * canaries). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "json-read.h"
#include "metrics.h"
#include "util.h"

/* ---- the printer ---- */

/* Prometheus label values: backslash, double quote and newline escaped. */
static void print_label(FILE *f, const char *s) {
        for (; s && *s; s++) {
                if (*s == '\\' || *s == '"')
                        fprintf(f, "\\%c", *s);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static void metric_header(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* `NAME{netns="…",ifname="…",policy="…",` of a device: a device that no policy matches has
 * policy="", which Prometheus takes as no label; one of bigtcpd's own namespace has no netns (its
 * series are what they were before other namespaces were managed). */
static void device_series(FILE *f, const char *name, const MetricsDevice *d) {
        fprintf(f, "%s{", name);
        if (d->netns && !streq_ptr(d->netns, "host")) {
                fprintf(f, "netns=\"");
                print_label(f, d->netns);
                fprintf(f, "\",");
        }
        fprintf(f, "ifname=\"");
        print_label(f, d->ifname);
        fprintf(f, "\",policy=\"");
        print_label(f, d->policy);
        fprintf(f, "\",");
}

/* `NAME{ifname="…",policy="…"} `: the series that never had a netns label. */
static void device_series_short(FILE *f, const char *name, const MetricsDevice *d) {
        fprintf(f, "%s{ifname=\"", name);
        print_label(f, d->ifname);
        fprintf(f, "\",policy=\"");
        print_label(f, d->policy);
        fprintf(f, "\"} ");
}

static void print_sizes(FILE *f, const char *name, const MetricsDevice *d, const bool has[static SIZES_COUNT],
                        const int64_t v[static SIZES_COUNT]) {
        for (unsigned k = 0; k < SIZES_COUNT; k++) {
                if (!has[k])
                        continue;
                device_series(f, name, d);
                fprintf(f, "size=\"%s\"} %" PRId64 "\n", size_name(k), v[k]);
        }
}

static void head_info(FILE *f, const MetricsSource *src) {
        const MetricsStatus *s = src->status;

        metric_header(f, "bigtcpd_info", "gauge", "Version of the running bigtcpd and the digest of its policy.");
        fprintf(f, "bigtcpd_info{version=\"");
        print_label(f, s->version);
        fprintf(f, "\",policy_digest=\"");
        print_label(f, s->policy_digest);
        fprintf(f, "\"} 1\n");
        metric_header(f, "bigtcpd_ready", "gauge", "1 once bigtcpd has done its first full reconcile.");
        fprintf(f, "bigtcpd_ready %d\n", s->ready ? 1 : 0);
        metric_header(f, "bigtcpd_device_size_bytes", "gauge",
                      "GSO/GRO sizes a device holds now (kernel names), and its tso_max_size.");
}

static void each_current(FILE *f, const MetricsDevice *d) {
        print_sizes(f, "bigtcpd_device_size_bytes", d, d->has_current, d->current);
        device_series(f, "bigtcpd_device_size_bytes", d);
        fprintf(f, "size=\"tso_max_size\"} %" PRId64 "\n", d->tso_max_size);
}

static void head_desired(FILE *f, const MetricsSource *src) {
        metric_header(f, "bigtcpd_device_desired_size_bytes", "gauge",
                      "GSO/GRO sizes the policy wants for a managed device.");
}

static void each_desired(FILE *f, const MetricsDevice *d) {
        print_sizes(f, "bigtcpd_device_desired_size_bytes", d, d->has_desired, d->desired);
}

static void head_state(FILE *f, const MetricsSource *src) {
        metric_header(f, "bigtcpd_device_state", "gauge", "State of a device: 1 for the state it is in, 0 for the others.");
}

static void each_state(FILE *f, const MetricsDevice *d) {
        for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                const char *st = device_state_to_string((DeviceState) k);
                device_series(f, "bigtcpd_device_state", d);
                fprintf(f, "state=\"%s\"} %d\n", st, streq_ptr(st, d->state) ? 1 : 0);
        }
}

/* Rollbacks per policy: every policy that had one, and every policy of the running set at 0 (a
 * counter Prometheus never saw at 0 hides its first rise from increase()). A bigtcpd from before
 * rollbacks_by_policy: the total alone. */
static void print_rollbacks(FILE *f, const MetricsStatus *s) {
        if (!s->has_rollbacks_by_policy) {
                fprintf(f, "bigtcpd_rollbacks_total %" PRId64 "\n", s->rollbacks);
                return;
        }
        for (size_t i = 0; i < s->n_rollbacks_by_policy; i++) {
                fprintf(f, "bigtcpd_rollbacks_total{policy=\"");
                print_label(f, s->rollbacks_by_policy[i].policy);
                fprintf(f, "\"} %" PRId64 "\n", s->rollbacks_by_policy[i].count);
        }
        for (size_t i = 0; s->has_policies && i < s->n_policies; i++) {
                const char *p = s->policies[i].name;
                bool counted = false;
                for (size_t k = 0; p && !counted && k < s->n_rollbacks_by_policy; k++)
                        counted = s->rollbacks_by_policy[k].present && streq_ptr(s->rollbacks_by_policy[k].policy, p);
                if (!p || counted)
                        continue;
                fprintf(f, "bigtcpd_rollbacks_total{policy=\"");
                print_label(f, p);
                fprintf(f, "\"} 0\n");
        }
}

static void head_counters(FILE *f, const MetricsSource *src) {
        const MetricsStatus *s = src->status;

        metric_header(f, "bigtcpd_devices", "gauge", "Devices per state.");
        for (int k = 0; k < _DEVICE_STATE_MAX; k++)
                fprintf(f, "bigtcpd_devices{state=\"%s\"} %" PRId64 "\n", device_state_to_string((DeviceState) k),
                        s->devices[k]);
        metric_header(f, "bigtcpd_netns_managed", "gauge", "Network namespaces other than bigtcpd's own it manages.");
        fprintf(f, "bigtcpd_netns_managed %" PRId64 "\n", s->netns_managed);
        metric_header(f, "bigtcpd_netns_problems", "gauge",
                      "Network namespaces a policy names that are not managed as they should be (bigtcpctl status "
                      "names them).");
        fprintf(f, "bigtcpd_netns_problems %" PRId64 "\n", s->netns_problems);
        metric_header(f, "bigtcpd_writes_total", "counter", "Size writes sent to the kernel since bigtcpd started.");
        fprintf(f, "bigtcpd_writes_total %" PRId64 "\n", s->writes);
        metric_header(f, "bigtcpd_write_failures_total", "counter", "Size writes the kernel refused.");
        fprintf(f, "bigtcpd_write_failures_total %" PRId64 "\n", s->write_failures);
        metric_header(f, "bigtcpd_restores_total", "counter", "Devices given their original sizes back.");
        fprintf(f, "bigtcpd_restores_total %" PRId64 "\n", s->restores);
        metric_header(f, "bigtcpd_rollbacks_total", "counter",
                      "Devices rolled back (a guard tripped, or an operator), by the policy of the device.");
        print_rollbacks(f, s);
}

/* A bigtcpd from before Device.rollbacks: not at all, rather than 0 for every device. The first
 * device says. */
static bool device_rollbacks_shown(const MetricsSource *src) {
        for (size_t i = 0; i < src->n_devices; i++) {
                MetricsDevice d = {};
                if (src->device(src->userdata, i, &d))
                        return d.has_rollbacks;
        }
        return false;
}

static void head_device_rollbacks(FILE *f, const MetricsSource *src) {
        if (device_rollbacks_shown(src))
                metric_header(f, "bigtcpd_device_rollbacks_total", "counter",
                              "Times a device was rolled back (kept across restarts in the state file).");
}

static void each_device_rollbacks(FILE *f, const MetricsDevice *d) {
        device_series_short(f, "bigtcpd_device_rollbacks_total", d);
        fprintf(f, "%" PRId64 "\n", d->rollbacks);
}

/* The policy files' errors: how many, and where (the first 20, as status has them). */
static void print_policy_errors(FILE *f, const MetricsStatus *s) {
        metric_header(f, "bigtcpd_policy_errors", "gauge",
                      "Errors in the policy files (0 when they run as they are; else the policy that ran "
                      "before runs on, or none).");
        fprintf(f, "bigtcpd_policy_errors %" PRId64 "\n", s->reload_ok ? 0 : s->reload_errors_total);
        if (s->reload_ok || s->n_reload_errors == 0)
                return;
        metric_header(f, "bigtcpd_policy_error", "gauge", "One error of the policy files, where it is (the first 20).");
        for (size_t i = 0; i < s->n_reload_errors; i++) {
                const MetricsPolicyError *e = &s->reload_errors[i];
                fprintf(f, "bigtcpd_policy_error{file=\"");
                print_label(f, e->file);
                fprintf(f, "\",line=\"%" PRId64 "\",column=\"%" PRId64 "\",message=\"", e->line, e->column);
                print_label(f, e->message);
                fprintf(f, "\"} 1\n");
        }
}

/* Where each policy is in force: fleet-wide, the hosts a canary reached. */
static void print_policies(FILE *f, const MetricsStatus *s) {
        static const struct {
                const char *metric, *help;
        } gauges[] = {
                {"bigtcpd_policy_applies",
                 "1 when the policy is in force on this host (hosts, kernel and the cohort of "
                 "rollout.hosts-percent hold)."},
                {"bigtcpd_policy_hosts_percent", "rollout.hosts-percent of a fleet canary."},
                {"bigtcpd_policy_cohort",
                 "This host's cohort (0-99) for a fleet canary: in force where it is below hosts-percent."},
        };

        if (!s->has_policies)
                return;
        for (size_t g = 0; g < ELEMENTSOF(gauges); g++) {
                metric_header(f, gauges[g].metric, "gauge", gauges[g].help);
                for (size_t i = 0; i < s->n_policies; i++) {
                        const MetricsPolicy *p = &s->policies[i];
                        int64_t v;
                        if (g == 0)
                                v = p->applies;
                        else if (g == 1 && p->has_hosts_percent)
                                v = p->hosts_percent;
                        else if (g == 2 && p->has_cohort)
                                v = p->cohort;
                        else
                                continue;
                        fprintf(f, "%s{policy=\"", gauges[g].metric);
                        print_label(f, p->name);
                        fprintf(f, "\"} %" PRId64 "\n", v);
                }
        }
}

static void head_reload(FILE *f, const MetricsSource *src) {
        const MetricsStatus *s = src->status;

        if (s->has_last_reload) {
                metric_header(f, "bigtcpd_config_last_reload_successful", "gauge",
                              "0 when the last reload of the policy was refused (the policy before it runs "
                              "on), else 1.");
                fprintf(f, "bigtcpd_config_last_reload_successful %d\n", s->reload_ok ? 1 : 0);
                print_policy_errors(f, s);
        }
        print_policies(f, s);
        /* the big-packet counts of the devices ever watched (their last or running watch), and the
         * verdict of those that had a window with traffic */
        metric_header(f, "bigtcpd_device_big_packets", "gauge",
                      "Packets above 64 KiB a device sent (tx) or received (rx) in its last or running watch "
                      "(its probation window, or bigtcpctl watch).");
}

/* A device's two series of `name`, direction="tx" and direction="rx", of a watch it had. */
static void print_directions(FILE *f, const char *name, const MetricsDevice *d, int64_t tx, int64_t rx) {
        if (!d->has_big_packets)
                return;
        device_series(f, name, d);
        fprintf(f, "direction=\"tx\"} %" PRId64 "\n", tx);
        device_series(f, name, d);
        fprintf(f, "direction=\"rx\"} %" PRId64 "\n", rx);
}

static void each_big_packets(FILE *f, const MetricsDevice *d) {
        print_directions(f, "bigtcpd_device_big_packets", d, d->tx, d->rx);
}

static void head_largest(FILE *f, const MetricsSource *src) {
        metric_header(f, "bigtcpd_device_big_packet_largest_bytes", "gauge",
                      "The largest packet of that watch, per direction (0: none above 64 KiB).");
}

static void each_largest(FILE *f, const MetricsDevice *d) {
        print_directions(f, "bigtcpd_device_big_packet_largest_bytes", d, d->tx_largest, d->rx_largest);
}

static void head_effective(FILE *f, const MetricsSource *src) {
        metric_header(f, "bigtcpd_device_effective", "gauge",
                      "1 when the device's last window with traffic had big packets in a family its sizes "
                      "raise, 0 when it had none (BIG TCP not in effect); absent before such a window.");
}

static void each_effective(FILE *f, const MetricsDevice *d) {
        if (d->effective < 0)
                return;
        device_series_short(f, "bigtcpd_device_effective", d);
        fprintf(f, "%d\n", d->effective ? 1 : 0);
}

/* The searches of `auto`: each size's proven size, its ceiling and its phase. */
static const struct {
        const char *name, *help;
} auto_gauges[] = {
        {"bigtcpd_device_auto_proven_bytes", "The largest size a search of auto proved on the device."},
        {"bigtcpd_device_auto_ceiling_bytes", "The lowest size that tripped a guard in the search, else the most it tries."},
        {"bigtcpd_device_auto_trips", "Sizes of the search that tripped a guard."},
};

static void head_observer(FILE *f, const MetricsSource *src) {
        const MetricsStatus *s = src->status;

        metric_header(f, "bigtcpd_devices_not_effective", "gauge", "Devices found with BIG TCP not in effect.");
        fprintf(f, "bigtcpd_devices_not_effective %" PRId64 "\n", s->not_effective);
        if (s->observer) {
                metric_header(f, "bigtcpd_observer", "gauge",
                              "1 for what counts packets: ebpf (every device, always), packet-socket (watched "
                              "devices; why: the reason it is not ebpf), none.");
                fprintf(f, "bigtcpd_observer{kind=\"");
                print_label(f, s->observer);
                fprintf(f, "\",why=\"");
                print_label(f, s->observer_why ?: "");
                fprintf(f, "\"} 1\n");
        }
        if (s->has_observer_map) {
                metric_header(f, "bigtcpd_observer_map_bytes", "gauge", "Kernel memory of the eBPF observer's maps.");
                fprintf(f, "bigtcpd_observer_map_bytes %" PRId64 "\n", s->observer_map_bytes);
                metric_header(f, "bigtcpd_observer_read_seconds", "gauge", "The last batch read of the observer's maps.");
                fprintf(f, "bigtcpd_observer_read_seconds %.6f\n", (double) s->observer_read_usec / 1e6);
        }
        metric_header(f, auto_gauges[0].name, "gauge", auto_gauges[0].help);
}

static void each_auto(FILE *f, const MetricsDevice *d, size_t g) {
        for (size_t k = 0; k < d->n_autos; k++) {
                const MetricsAuto *a = &d->autos[k];
                device_series(f, auto_gauges[g].name, d);
                fprintf(f, "size=\"%s\"} %" PRId64 "\n", a->size ?: "",
                        g == 0 ? a->proven : g == 1 ? a->ceiling : a->trips);
        }
}

static void each_auto_proven(FILE *f, const MetricsDevice *d) {
        each_auto(f, d, 0);
}

static void head_auto_ceiling(FILE *f, const MetricsSource *src) {
        metric_header(f, auto_gauges[1].name, "gauge", auto_gauges[1].help);
}

static void each_auto_ceiling(FILE *f, const MetricsDevice *d) {
        each_auto(f, d, 1);
}

static void head_auto_trips(FILE *f, const MetricsSource *src) {
        metric_header(f, auto_gauges[2].name, "gauge", auto_gauges[2].help);
}

static void each_auto_trips(FILE *f, const MetricsDevice *d) {
        each_auto(f, d, 2);
}

static void head_auto_phase(FILE *f, const MetricsSource *src) {
        metric_header(f, "bigtcpd_device_auto_phase", "gauge",
                      "1 for the phase the search of a size is in (watching, idle, trying, settled), 0 for the others.");
}

static void each_auto_phase(FILE *f, const MetricsDevice *d) {
        static const char *const phases[] = {"watching", "idle", "trying", "settled"};

        for (size_t k = 0; k < d->n_autos; k++)
                for (size_t p = 0; p < ELEMENTSOF(phases); p++) {
                        device_series(f, "bigtcpd_device_auto_phase", d);
                        fprintf(f, "size=\"%s\",phase=\"%s\"} %d\n", d->autos[k].size ?: "", phases[p],
                                streq_ptr(d->autos[k].phase, phases[p]));
                }
}

static void head_probation(FILE *f, const MetricsSource *src) {
        const MetricsStatus *s = src->status;

        if (!s->has_probation)
                return;
        metric_header(f, "bigtcpd_probation_sample_gap_max_seconds", "gauge",
                      "Since no device was last in probation: the longest time between two samples "
                      "of one device's guards (the promise: at most 1.5 intervals).");
        fprintf(f, "bigtcpd_probation_sample_gap_max_seconds %.6f\n", (double) s->probation_gap_usec / 1e6);
}

/* The text in parts: each part's own lines, then (`each`) one device's lines per device. */
static const struct {
        void (*head)(FILE *f, const MetricsSource *src);
        void (*each)(FILE *f, const MetricsDevice *d);
} parts[] = {
        {head_info, each_current},
        {head_desired, each_desired},
        {head_state, each_state},
        {head_counters, NULL},
        {head_device_rollbacks, each_device_rollbacks},
        {head_reload, each_big_packets},
        {head_largest, each_largest},
        {head_effective, each_effective},
        {head_observer, each_auto_proven},
        {head_auto_ceiling, each_auto_ceiling},
        {head_auto_trips, each_auto_trips},
        {head_auto_phase, each_auto_phase},
        {head_probation, NULL},
};

bool metrics_print_some(FILE *f, const MetricsSource *src, MetricsCursor *c, size_t max_devices) {
        size_t done = 0;

        for (; c->part < ELEMENTSOF(parts); c->part++, c->device = 0, c->began = false) {
                if (!c->began) {
                        parts[c->part].head(f, src);
                        c->began = true;
                }
                if (!parts[c->part].each || (parts[c->part].each == each_device_rollbacks && !device_rollbacks_shown(src)))
                        continue;
                for (; c->device < src->n_devices; c->device++) {
                        MetricsDevice d = {};
                        if (done++ == max_devices)
                                return false;
                        if (src->device(src->userdata, c->device, &d))
                                parts[c->part].each(f, &d);
                }
        }
        return true;
}

void metrics_print(FILE *f, const MetricsSource *src) {
        MetricsCursor c = METRICS_CURSOR_INIT;

        while (!metrics_print_some(f, src, &c, SIZE_MAX))
                ;
}

/* ---- the source from GetStatus and ListDevices ---- */

typedef struct JsonSource {
        json_object *devices;
        MetricsAuto *autos; /* the device's last asked for */
        size_t n_autos_allocated;
} JsonSource;

static void json_sizes(json_object *s, bool has[static SIZES_COUNT], int64_t v[static SIZES_COUNT]) {
        for (unsigned k = 0; k < SIZES_COUNT; k++) {
                has[k] = jhas_int(s, size_name(k));
                v[k] = jint(s, size_name(k), 0);
        }
}

static bool json_device(void *userdata, size_t i, MetricsDevice *ret) {
        JsonSource *js = userdata;
        json_object *d = json_object_array_get_idx(js->devices, i), *b = jget(d, "big_packets"),
                    *e = jget(d, "effective"), *autos = jarray(d, "auto");
        size_t n = jlen(autos);

        *ret = (MetricsDevice){
                .netns = jstr(d, "netns"),
                .ifname = jstr(d, "ifname"),
                .policy = jstr(d, "policy"),
                .state = jstr(d, "state"),
                .tso_max_size = jint(d, "tso_max_size", 0),
                .has_rollbacks = jhas_int(d, "rollbacks"),
                .rollbacks = jint(d, "rollbacks", 0),
                .has_big_packets = b != NULL,
                .tx = jint(b, "tx", 0),
                .rx = jint(b, "rx", 0),
                .tx_largest = jint(b, "tx_largest", 0),
                .rx_largest = jint(b, "rx_largest", 0),
                .effective = e && json_object_is_type(e, json_type_boolean) ? json_object_get_boolean(e) : -1,
        };
        json_sizes(jget(d, "current"), ret->has_current, ret->current);
        json_sizes(jget(d, "desired"), ret->has_desired, ret->desired);
        if (n > js->n_autos_allocated) {
                MetricsAuto *a = reallocarray(js->autos, n, sizeof(*a));
                if (!a)
                        return true; /* out of memory: no searches */
                js->autos = a;
                js->n_autos_allocated = n;
        }
        for (size_t k = 0; k < n; k++) {
                json_object *a = json_object_array_get_idx(autos, k);
                js->autos[k] = (MetricsAuto){
                        .size = jstr(a, "size"),
                        .phase = jstr(a, "phase"),
                        .proven = jint(a, "proven", 0),
                        .ceiling = jint(a, "ceiling", 0),
                        .trips = jint(a, "trips", 0),
                };
        }
        ret->autos = js->autos;
        ret->n_autos = n;
        return true;
}

void metrics_write(FILE *f, json_object *s, json_object *devs) {
        json_object *counts = jget(s, "devices"), *by = jget(s, "rollbacks_by_policy"),
                    *policies = jarray(s, "policies"), *last = jget(s, "last_reload"),
                    *errors = jarray(last, "errors"), *ev = jget(s, "evidence"), *pr = NULL;
        _cleanup_(freep) MetricsPolicyRollbacks *rb = NULL;
        _cleanup_(freep) MetricsPolicy *pols = NULL;
        _cleanup_(freep) MetricsPolicyError *errs = NULL;
        JsonSource js = {.devices = devs && json_object_is_type(devs, json_type_array) ? devs : NULL};
        MetricsStatus st = {
                .version = jstr(s, "version"),
                .policy_digest = jstr(jget(s, "policy"), "digest"),
                .ready = jbool(s, "ready"),
                .netns_managed = jint(jget(s, "netns"), "managed", 0),
                .netns_problems = jint(jget(s, "netns"), "namespace_problems_total", 0),
                .writes = jint(s, "writes", 0),
                .write_failures = jint(s, "write_failures", 0),
                .restores = jint(s, "restores", 0),
                .has_rollbacks_by_policy = by && json_object_is_type(by, json_type_object),
                .rollbacks = jint(s, "rollbacks", 0),
                .has_policies = policies != NULL,
                .has_last_reload = last != NULL,
                .reload_ok = jbool(last, "ok"),
                .reload_errors_total = jint(last, "errors_total", (int64_t) jlen(errors)),
                .not_effective = (int64_t) jlen(jarray(ev, "not_effective")),
                .observer = jstr(ev, "observer"),
                .observer_why = jstr(ev, "observer_why"),
                .has_observer_map = jget(ev, "observer_map_bytes") != NULL,
                .observer_map_bytes = jint(ev, "observer_map_bytes", 0),
                .observer_read_usec = jint(ev, "observer_read_usec", 0),
        };

        for (int k = 0; k < _DEVICE_STATE_MAX; k++)
                st.devices[k] = jint(counts, device_state_to_string((DeviceState) k), 0);
        if (st.has_rollbacks_by_policy && (rb = calloc(json_object_object_length(by) ?: 1, sizeof(*rb)))) {
                json_object_object_foreach(by, name, count) {
                        rb[st.n_rollbacks_by_policy++] = (MetricsPolicyRollbacks){
                                .policy = name,
                                .count = json_object_is_type(count, json_type_int) ? json_object_get_int64(count) : 0,
                                .present = !json_object_is_type(count, json_type_null),
                        };
                }
                st.rollbacks_by_policy = rb;
        }
        if (jlen(policies) > 0 && (pols = calloc(jlen(policies), sizeof(*pols)))) {
                for (size_t i = 0; i < jlen(policies); i++) {
                        json_object *p = json_object_array_get_idx(policies, i);
                        pols[i] = (MetricsPolicy){
                                .name = jstr(p, "name"),
                                .applies = jbool(p, "applies"),
                                .has_hosts_percent = jhas_int(p, "hosts_percent"),
                                .hosts_percent = jint(p, "hosts_percent", 0),
                                .has_cohort = jhas_int(p, "cohort"),
                                .cohort = jint(p, "cohort", 0),
                        };
                }
                st.policies = pols;
                st.n_policies = jlen(policies);
        }
        if (jlen(errors) > 0 && (errs = calloc(jlen(errors), sizeof(*errs)))) {
                for (size_t i = 0; i < jlen(errors); i++) {
                        json_object *e = json_object_array_get_idx(errors, i);
                        errs[i] = (MetricsPolicyError){
                                .file = jstr(e, "file"),
                                .message = jstr(e, "message"),
                                .line = jint(e, "line", 0),
                                .column = jint(e, "column", 0),
                        };
                }
                st.reload_errors = errs;
                st.n_reload_errors = jlen(errors);
        }
        if (json_object_object_get_ex(s, "probation", &pr) && json_object_is_type(pr, json_type_object)) {
                st.has_probation = true;
                st.probation_gap_usec = jint(pr, "sample_gap_max_usec", 0);
        }
        metrics_print(f, &(MetricsSource){.status = &st, .n_devices = jlen(js.devices), .device = json_device,
                                          .userdata = &js});
        free(js.autos);
}
