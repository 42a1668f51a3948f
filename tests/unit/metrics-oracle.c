/* metrics-oracle.c — the Prometheus text as bigtcpd printed it before its printer was fed from the
 * daemon's tables (daemon/metrics.c of 76197a2, only renamed): test-metrics.c holds the printer of
 * today, from JSON and from the tables, to this text byte for byte. Do not change it to follow the
 * printer: a change of the text changes both on purpose, this one last. */
#include <inttypes.h>
#include <stdio.h>

#include "device.h"
#include "json-read.h"
#include "metrics-oracle.h"
#include "sizes.h"
#include "util.h"

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
static void device_series(FILE *f, const char *name, json_object *d) {
        const char *ns = jstr(d, "netns");

        fprintf(f, "%s{", name);
        if (ns && !streq_ptr(ns, "host")) {
                fprintf(f, "netns=\"");
                print_label(f, ns);
                fprintf(f, "\",");
        }
        fprintf(f, "ifname=\"");
        print_label(f, jstr(d, "ifname"));
        fprintf(f, "\",policy=\"");
        print_label(f, jstr(d, "policy"));
        fprintf(f, "\",");
}

/* The policy files' errors: how many, and where (the first 20, as status has them). */
static void print_policy_errors(FILE *f, json_object *last) {
        json_object *errors = jarray(last, "errors");
        bool ok = jbool(last, "ok");

        metric_header(f, "bigtcpd_policy_errors", "gauge",
                      "Errors in the policy files (0 when they run as they are; else the policy that ran "
                      "before runs on, or none).");
        fprintf(f, "bigtcpd_policy_errors %" PRId64 "\n", ok ? 0 : jint(last, "errors_total", (int64_t) jlen(errors)));
        if (ok || jlen(errors) == 0)
                return;
        metric_header(f, "bigtcpd_policy_error", "gauge", "One error of the policy files, where it is (the first 20).");
        for (size_t i = 0; i < jlen(errors); i++) {
                json_object *e = json_object_array_get_idx(errors, i);
                fprintf(f, "bigtcpd_policy_error{file=\"");
                print_label(f, jstr(e, "file"));
                fprintf(f, "\",line=\"%" PRId64 "\",column=\"%" PRId64 "\",message=\"", jint(e, "line", 0),
                       jint(e, "column", 0));
                print_label(f, jstr(e, "message"));
                fprintf(f, "\"} 1\n");
        }
}

static void print_device_sizes(FILE *f, json_object *devs, const char *key) {
        const char *name = streq_ptr(key, "desired") ? "bigtcpd_device_desired_size_bytes"
                                                     : "bigtcpd_device_size_bytes";
        size_t nd = jlen(devs);
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *s = jget(d, key);
                for (size_t k = 0; s && k < SIZES_COUNT; k++) {
                        if (!jhas_int(s, size_name(k)))
                                continue;
                        device_series(f, name, d);
                        fprintf(f, "size=\"%s\"} %" PRId64 "\n", size_name(k), jint(s, size_name(k), 0));
                }
                if (streq_ptr(key, "current")) {
                        device_series(f, name, d);
                        fprintf(f, "size=\"tso_max_size\"} %" PRId64 "\n", jint(d, "tso_max_size", 0));
                }
        }
}

/* The big-packet counts of the devices ever watched (their last or running watch), and the
 * verdict of those that had a window with traffic. */
static void print_evidence(FILE *f, json_object *s, json_object *devs) {
        static const char *const dirs[] = {"tx", "rx"};

        metric_header(f, "bigtcpd_device_big_packets", "gauge",
                      "Packets above 64 KiB a device sent (tx) or received (rx) in its last or running watch "
                      "(its probation window, or bigtcpctl watch).");
        for (size_t i = 0; i < jlen(devs); i++) {
                json_object *d = json_object_array_get_idx(devs, i), *b = jget(d, "big_packets");
                for (size_t k = 0; b && k < ELEMENTSOF(dirs); k++) {
                        device_series(f, "bigtcpd_device_big_packets", d);
                        fprintf(f, "direction=\"%s\"} %" PRId64 "\n", dirs[k], jint(b, dirs[k], 0));
                }
        }
        metric_header(f, "bigtcpd_device_big_packet_largest_bytes", "gauge",
                      "The largest packet of that watch, per direction (0: none above 64 KiB).");
        for (size_t i = 0; i < jlen(devs); i++) {
                json_object *d = json_object_array_get_idx(devs, i), *b = jget(d, "big_packets");
                for (size_t k = 0; b && k < ELEMENTSOF(dirs); k++) {
                        char key[16];
                        snprintf(key, sizeof(key), "%s_largest", dirs[k]);
                        device_series(f, "bigtcpd_device_big_packet_largest_bytes", d);
                        fprintf(f, "direction=\"%s\"} %" PRId64 "\n", dirs[k], jint(b, key, 0));
                }
        }
        metric_header(f, "bigtcpd_device_effective", "gauge",
                      "1 when the device's last window with traffic had big packets in a family its sizes "
                      "raise, 0 when it had none (BIG TCP not in effect); absent before such a window.");
        for (size_t i = 0; i < jlen(devs); i++) {
                json_object *d = json_object_array_get_idx(devs, i), *e = jget(d, "effective");
                if (!e || !json_object_is_type(e, json_type_boolean))
                        continue;
                fprintf(f, "bigtcpd_device_effective{ifname=\"");
                print_label(f, jstr(d, "ifname"));
                fprintf(f, "\",policy=\"");
                print_label(f, jstr(d, "policy"));
                fprintf(f, "\"} %d\n", json_object_get_boolean(e) ? 1 : 0);
        }
        metric_header(f, "bigtcpd_devices_not_effective", "gauge", "Devices found with BIG TCP not in effect.");
        fprintf(f, "bigtcpd_devices_not_effective %zu\n", jlen(jarray(jget(s, "evidence"), "not_effective")));
        json_object *ev = jget(s, "evidence");
        if (jstr(ev, "observer")) {
                metric_header(f, "bigtcpd_observer", "gauge",
                              "1 for what counts packets: ebpf (every device, always), packet-socket (watched "
                              "devices; why: the reason it is not ebpf), none.");
                fprintf(f, "bigtcpd_observer{kind=\"");
                print_label(f, jstr(ev, "observer"));
                fprintf(f, "\",why=\"");
                print_label(f, jstr(ev, "observer_why") ?: "");
                fprintf(f, "\"} 1\n");
        }
        if (jget(ev, "observer_map_bytes")) {
                metric_header(f, "bigtcpd_observer_map_bytes", "gauge", "Kernel memory of the eBPF observer's maps.");
                fprintf(f, "bigtcpd_observer_map_bytes %" PRId64 "\n", jint(ev, "observer_map_bytes", 0));
                metric_header(f, "bigtcpd_observer_read_seconds", "gauge", "The last batch read of the observer's maps.");
                fprintf(f, "bigtcpd_observer_read_seconds %.6f\n", (double) jint(ev, "observer_read_usec", 0) / 1e6);
        }
}

/* The searches of `auto`: each size's proven size, its ceiling and its phase. */
static void print_auto(FILE *f, json_object *devs) {
        static const struct {
                const char *name, *key, *help;
        } gauges[] = {
                {"bigtcpd_device_auto_proven_bytes", "proven", "The largest size a search of auto proved on the device."},
                {"bigtcpd_device_auto_ceiling_bytes", "ceiling",
                 "The lowest size that tripped a guard in the search, else the most it tries."},
                {"bigtcpd_device_auto_trips", "trips", "Sizes of the search that tripped a guard."},
        };
        static const char *const phases[] = {"watching", "idle", "trying", "settled"};

        for (size_t g = 0; g < ELEMENTSOF(gauges); g++) {
                metric_header(f, gauges[g].name, "gauge", gauges[g].help);
                for (size_t i = 0; i < jlen(devs); i++) {
                        json_object *d = json_object_array_get_idx(devs, i);
                        for (size_t k = 0; k < jlen(jarray(d, "auto")); k++) {
                                json_object *a = json_object_array_get_idx(jarray(d, "auto"), k);
                                device_series(f, gauges[g].name, d);
                                fprintf(f, "size=\"%s\"} %" PRId64 "\n", jstr(a, "size") ?: "", jint(a, gauges[g].key, 0));
                        }
                }
        }
        metric_header(f, "bigtcpd_device_auto_phase", "gauge",
                      "1 for the phase the search of a size is in (watching, idle, trying, settled), 0 for the others.");
        for (size_t i = 0; i < jlen(devs); i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                for (size_t k = 0; k < jlen(jarray(d, "auto")); k++) {
                        json_object *a = json_object_array_get_idx(jarray(d, "auto"), k);
                        for (size_t p = 0; p < ELEMENTSOF(phases); p++) {
                                device_series(f, "bigtcpd_device_auto_phase", d);
                                fprintf(f, "size=\"%s\",phase=\"%s\"} %d\n", jstr(a, "size") ?: "", phases[p],
                                       streq_ptr(jstr(a, "phase"), phases[p]));
                        }
                }
        }
}

/* Rollbacks per policy: every policy that had one, and every policy of the running set at 0 (a
 * counter Prometheus never saw at 0 hides its first rise from increase()). A bigtcpd from before
 * rollbacks_by_policy: the total alone. */
static void print_rollbacks(FILE *f, json_object *s) {
        json_object *by = jget(s, "rollbacks_by_policy"), *policies = jarray(s, "policies");

        if (!by || !json_object_is_type(by, json_type_object)) {
                fprintf(f, "bigtcpd_rollbacks_total %" PRId64 "\n", jint(s, "rollbacks", 0));
                return;
        }
        json_object_object_foreach(by, name, count) {
                fprintf(f, "bigtcpd_rollbacks_total{policy=\"");
                print_label(f, name);
                fprintf(f, "\"} %" PRId64 "\n",
                       json_object_is_type(count, json_type_int) ? json_object_get_int64(count) : 0);
        }
        for (size_t i = 0; i < jlen(policies); i++) {
                const char *p = jstr(json_object_array_get_idx(policies, i), "name");
                if (!p || jget(by, p))
                        continue;
                fprintf(f, "bigtcpd_rollbacks_total{policy=\"");
                print_label(f, p);
                fprintf(f, "\"} 0\n");
        }
}

/* Where each policy is in force: fleet-wide, the hosts a canary reached. */
static void print_policies(FILE *f, json_object *s) {
        json_object *policies = jarray(s, "policies");
        static const struct {
                const char *metric, *key, *help;
        } gauges[] = {
                {"bigtcpd_policy_applies", "applies",
                 "1 when the policy is in force on this host (hosts, kernel and the cohort of "
                 "rollout.hosts-percent hold)."},
                {"bigtcpd_policy_hosts_percent", "hosts_percent",
                 "rollout.hosts-percent of a fleet canary."},
                {"bigtcpd_policy_cohort", "cohort",
                 "This host's cohort (0-99) for a fleet canary: in force where it is below hosts-percent."},
        };

        if (!policies)
                return;
        for (size_t g = 0; g < ELEMENTSOF(gauges); g++) {
                metric_header(f, gauges[g].metric, "gauge", gauges[g].help);
                for (size_t i = 0; i < jlen(policies); i++) {
                        json_object *p = json_object_array_get_idx(policies, i);
                        int64_t v;
                        if (g == 0)
                                v = jbool(p, "applies");
                        else if (jhas_int(p, gauges[g].key))
                                v = jint(p, gauges[g].key, 0);
                        else
                                continue;
                        fprintf(f, "%s{policy=\"", gauges[g].metric);
                        print_label(f, jstr(p, "name"));
                        fprintf(f, "\"} %" PRId64 "\n", v);
                }
        }
}

void metrics_oracle_write(FILE *f, json_object *s, json_object *devs) {
        json_object *counts;
        size_t nd;

        if (devs && !json_object_is_type(devs, json_type_array))
                devs = NULL;
        nd = jlen(devs);
        counts = jget(s, "devices");

        metric_header(f, "bigtcpd_info", "gauge",
                      "Version of the running bigtcpd and the digest of its policy.");
        fprintf(f, "bigtcpd_info{version=\"");
        print_label(f, jstr(s, "version"));
        fprintf(f, "\",policy_digest=\"");
        print_label(f, jstr(jget(s, "policy"), "digest"));
        fprintf(f, "\"} 1\n");
        metric_header(f, "bigtcpd_ready", "gauge", "1 once bigtcpd has done its first full reconcile.");
        fprintf(f, "bigtcpd_ready %d\n", jbool(s, "ready") ? 1 : 0);
        metric_header(f, "bigtcpd_device_size_bytes", "gauge",
                      "GSO/GRO sizes a device holds now (kernel names), and its tso_max_size.");
        print_device_sizes(f, devs, "current");
        metric_header(f, "bigtcpd_device_desired_size_bytes", "gauge",
                      "GSO/GRO sizes the policy wants for a managed device.");
        print_device_sizes(f, devs, "desired");
        metric_header(f, "bigtcpd_device_state", "gauge",
                      "State of a device: 1 for the state it is in, 0 for the others.");
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                        const char *st = device_state_to_string((DeviceState) k);
                        device_series(f, "bigtcpd_device_state", d);
                        fprintf(f, "state=\"%s\"} %d\n", st, streq_ptr(st, jstr(d, "state")) ? 1 : 0);
                }
        }
        metric_header(f, "bigtcpd_devices", "gauge", "Devices per state.");
        for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                const char *st = device_state_to_string((DeviceState) k);
                fprintf(f, "bigtcpd_devices{state=\"%s\"} %" PRId64 "\n", st, jint(counts, st, 0));
        }
        json_object *ns = jget(s, "netns");
        metric_header(f, "bigtcpd_netns_managed", "gauge", "Network namespaces other than bigtcpd's own it manages.");
        fprintf(f, "bigtcpd_netns_managed %" PRId64 "\n", jint(ns, "managed", 0));
        metric_header(f, "bigtcpd_netns_problems", "gauge",
                      "Network namespaces a policy names that are not managed as they should be (bigtcpctl status "
                      "names them).");
        fprintf(f, "bigtcpd_netns_problems %" PRId64 "\n", jint(ns, "namespace_problems_total", 0));
        metric_header(f, "bigtcpd_writes_total", "counter",
                      "Size writes sent to the kernel since bigtcpd started.");
        fprintf(f, "bigtcpd_writes_total %" PRId64 "\n", jint(s, "writes", 0));
        metric_header(f, "bigtcpd_write_failures_total", "counter", "Size writes the kernel refused.");
        fprintf(f, "bigtcpd_write_failures_total %" PRId64 "\n", jint(s, "write_failures", 0));
        metric_header(f, "bigtcpd_restores_total", "counter", "Devices given their original sizes back.");
        fprintf(f, "bigtcpd_restores_total %" PRId64 "\n", jint(s, "restores", 0));
        metric_header(f, "bigtcpd_rollbacks_total", "counter",
                      "Devices rolled back (a guard tripped, or an operator), by the policy of the device.");
        print_rollbacks(f, s);
        /* a bigtcpd from before Device.rollbacks: not at all, rather than 0 for every device */
        if (nd > 0 && jhas_int(json_object_array_get_idx(devs, 0), "rollbacks")) {
                metric_header(f, "bigtcpd_device_rollbacks_total", "counter",
                              "Times a device was rolled back (kept across restarts in the state file).");
                for (size_t i = 0; i < nd; i++) {
                        json_object *d = json_object_array_get_idx(devs, i);
                        fprintf(f, "bigtcpd_device_rollbacks_total{ifname=\"");
                        print_label(f, jstr(d, "ifname"));
                        fprintf(f, "\",policy=\"");
                        print_label(f, jstr(d, "policy"));
                        fprintf(f, "\"} %" PRId64 "\n", jint(d, "rollbacks", 0));
                }
        }
        json_object *last = jget(s, "last_reload");
        if (last) {
                metric_header(f, "bigtcpd_config_last_reload_successful", "gauge",
                              "0 when the last reload of the policy was refused (the policy before it runs "
                              "on), else 1.");
                fprintf(f, "bigtcpd_config_last_reload_successful %d\n", jbool(last, "ok") ? 1 : 0);
                print_policy_errors(f, last);
        }
        print_policies(f, s);
        print_evidence(f, s, devs);
        print_auto(f, devs);
        json_object *pr = NULL;
        if (json_object_object_get_ex(s, "probation", &pr) && json_object_is_type(pr, json_type_object)) {
                metric_header(f, "bigtcpd_probation_sample_gap_max_seconds", "gauge",
                              "Since no device was last in probation: the longest time between two samples "
                              "of one device's guards (the promise: at most 1.5 intervals).");
                fprintf(f, "bigtcpd_probation_sample_gap_max_seconds %.6f\n",
                       (double) jint(pr, "sample_gap_max_usec", 0) / 1e6);
        }
}
