/* metrics.h — the Prometheus text exposition of a bigtcpd: one printer of the figures, fed either
 * from GetStatus and ListDevices as JSON (`bigtcpctl metrics`, which has them from the daemon) or
 * by the daemon straight from its tables (its own /metrics, control_metrics_source()), so the two
 * print the same text. */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "sizes.h"

/* A string NULL is printed as "" (a label Prometheus takes as absent). */

typedef struct MetricsAuto {
        const char *size, *phase;
        int64_t proven, ceiling, trips;
} MetricsAuto;

/* One device's figures (ListDevices' Device). */
typedef struct MetricsDevice {
        const char *netns; /* NULL or "host": bigtcpd's own namespace, no netns label */
        const char *ifname, *policy, *state;
        bool has_current[SIZES_COUNT], has_desired[SIZES_COUNT];
        int64_t current[SIZES_COUNT], desired[SIZES_COUNT];
        int64_t tso_max_size;
        bool has_rollbacks;
        int64_t rollbacks;
        bool has_big_packets;
        int64_t tx, rx, tx_largest, rx_largest;
        int effective; /* 1, 0, or -1 without a verdict */
        const MetricsAuto *autos;
        size_t n_autos;
} MetricsDevice;

typedef struct MetricsPolicyRollbacks {
        const char *policy;
        int64_t count;
        bool present; /* counts as the policy's own (else its policy is printed at 0 too) */
} MetricsPolicyRollbacks;

typedef struct MetricsPolicy {
        const char *name;
        bool applies, has_hosts_percent, has_cohort;
        int64_t hosts_percent, cohort;
} MetricsPolicy;

typedef struct MetricsPolicyError {
        const char *file, *message;
        int64_t line, column;
} MetricsPolicyError;

/* GetStatus' figures. */
typedef struct MetricsStatus {
        const char *version, *policy_digest;
        bool ready;
        int64_t devices[_DEVICE_STATE_MAX]; /* by state */
        int64_t netns_managed, netns_problems;
        int64_t writes, write_failures, restores;
        bool has_rollbacks_by_policy; /* else `rollbacks`, the total, alone */
        int64_t rollbacks;
        const MetricsPolicyRollbacks *rollbacks_by_policy;
        size_t n_rollbacks_by_policy;
        bool has_policies;
        const MetricsPolicy *policies;
        size_t n_policies;
        bool has_last_reload, reload_ok;
        int64_t reload_errors_total;
        const MetricsPolicyError *reload_errors;
        size_t n_reload_errors;
        int64_t not_effective;
        const char *observer, *observer_why; /* observer NULL: not said */
        bool has_observer_map;
        int64_t observer_map_bytes, observer_read_usec;
        bool has_probation;
        int64_t probation_gap_usec;
} MetricsStatus;

/* Where the figures come from. `device` fills *ret with device i's (i < n_devices; what it points
 * to stays valid until its next call), or returns false for a device gone since (left out). */
typedef struct MetricsSource {
        const MetricsStatus *status;
        size_t n_devices;
        bool (*device)(void *userdata, size_t i, MetricsDevice *ret);
        void *userdata;
} MetricsSource;

/* Where a text written in parts stands. */
typedef struct MetricsCursor {
        size_t part, device;
        bool began; /* the part's own lines are out; its devices' follow */
} MetricsCursor;

#define METRICS_CURSOR_INIT ((MetricsCursor){})

/* Writes the text on from *cursor, the lines of at most `max_devices` devices (and whatever comes
 * between); true once it is all out. */
bool metrics_print_some(FILE *f, const MetricsSource *src, MetricsCursor *cursor, size_t max_devices);
/* The whole text. */
void metrics_print(FILE *f, const MetricsSource *src);

/* Writes the text to `f`: `status` is GetStatus's reply, `devices` the array ListDevices' reply
 * holds under "devices" (either may be NULL or of any shape: what is missing is left out). */
void metrics_write(FILE *f, json_object *status, json_object *devices);
