/* bigtcpctl-metrics.c — `bigtcpctl metrics`: GetStatus and ListDevices in the Prometheus text
 * exposition format, for node_exporter's textfile collector. */
#include <inttypes.h>
#include <stdio.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-metrics.h"
#include "device.h"

/* Prometheus label values: backslash, double quote and newline escaped. */
static void print_label(const char *s) {
        for (; s && *s; s++) {
                if (*s == '\\' || *s == '"')
                        printf("\\%c", *s);
                else if (*s == '\n')
                        fputs("\\n", stdout);
                else
                        putchar(*s);
        }
}

static void metric_header(const char *name, const char *type, const char *help) {
        printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void print_device_sizes(json_object *devs, const char *key) {
        size_t nd = devs ? json_object_array_length(devs) : 0;
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *s = jget(d, key);
                for (size_t k = 0; s && k < ELEMENTSOF(size_names); k++) {
                        if (!jhas_int(s, size_names[k]))
                                continue;
                        printf("bigtcpd_device_%ssize_bytes{ifname=\"",
                               streq_ptr(key, "desired") ? "desired_" : "");
                        print_label(jstr(d, "ifname"));
                        printf("\",size=\"%s\"} %" PRId64 "\n", size_names[k], jint(s, size_names[k], 0));
                }
                if (streq_ptr(key, "current")) {
                        printf("bigtcpd_device_size_bytes{ifname=\"");
                        print_label(jstr(d, "ifname"));
                        printf("\",size=\"tso_max_size\"} %" PRId64 "\n", jint(d, "tso_max_size", 0));
                }
        }
}

int verb_metrics(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL, *reply = NULL;
        json_object *devs, *counts;
        size_t nd;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "metrics takes no arguments");
        r = fetch_status(c, &s);
        if (r == 0)
                r = fetch_devices(c, NULL, true, &reply);
        if (r != 0)
                return r;
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        counts = jget(s, "devices");

        metric_header("bigtcpd_info", "gauge",
                      "Version of the running bigtcpd and the digest of its policy.");
        printf("bigtcpd_info{version=\"");
        print_label(jstr(s, "version"));
        printf("\",policy_digest=\"");
        print_label(jstr(jget(s, "policy"), "digest"));
        printf("\"} 1\n");
        metric_header("bigtcpd_ready", "gauge", "1 once bigtcpd has done its first full reconcile.");
        printf("bigtcpd_ready %d\n", jbool(s, "ready") ? 1 : 0);
        metric_header("bigtcpd_device_size_bytes", "gauge",
                      "GSO/GRO sizes a device holds now (kernel names), and its tso_max_size.");
        print_device_sizes(devs, "current");
        metric_header("bigtcpd_device_desired_size_bytes", "gauge",
                      "GSO/GRO sizes the policy wants for a managed device.");
        print_device_sizes(devs, "desired");
        metric_header("bigtcpd_device_state", "gauge",
                      "State of a device: 1 for the state it is in, 0 for the others.");
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                        const char *st = device_state_to_string((DeviceState) k);
                        printf("bigtcpd_device_state{ifname=\"");
                        print_label(jstr(d, "ifname"));
                        printf("\",state=\"%s\"} %d\n", st, streq_ptr(st, jstr(d, "state")) ? 1 : 0);
                }
        }
        metric_header("bigtcpd_devices", "gauge", "Devices per state.");
        for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                const char *st = device_state_to_string((DeviceState) k);
                printf("bigtcpd_devices{state=\"%s\"} %" PRId64 "\n", st, jint(counts, st, 0));
        }
        metric_header("bigtcpd_writes_total", "counter",
                      "Size writes sent to the kernel since bigtcpd started.");
        printf("bigtcpd_writes_total %" PRId64 "\n", jint(s, "writes", 0));
        metric_header("bigtcpd_write_failures_total", "counter", "Size writes the kernel refused.");
        printf("bigtcpd_write_failures_total %" PRId64 "\n", jint(s, "write_failures", 0));
        metric_header("bigtcpd_restores_total", "counter", "Devices given their original sizes back.");
        printf("bigtcpd_restores_total %" PRId64 "\n", jint(s, "restores", 0));
        metric_header("bigtcpd_rollbacks_total", "counter",
                      "Devices rolled back (a guard tripped, or an operator).");
        printf("bigtcpd_rollbacks_total %" PRId64 "\n", jint(s, "rollbacks", 0));
        json_object *pr = NULL;
        if (json_object_object_get_ex(s, "probation", &pr) && json_object_is_type(pr, json_type_object)) {
                metric_header("bigtcpd_probation_sample_gap_max_seconds", "gauge",
                              "Since no device was last in probation: the longest time between two samples "
                              "of one device's guards (the promise: at most 1.5 intervals).");
                printf("bigtcpd_probation_sample_gap_max_seconds %.6f\n",
                       (double) jint(pr, "sample_gap_max_usec", 0) / 1e6);
        }
        return EXIT_OK;
}
