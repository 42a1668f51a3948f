/* metrics.h — the Prometheus text exposition of a bigtcpd, built from GetStatus and ListDevices
 * as JSON: one builder for `bigtcpctl metrics` (which has them from the daemon) and for the
 * daemon's own /metrics (bigtcpd --metrics-listen), so the two print the same text. */
#pragma once

#include <json-c/json.h>
#include <stdio.h>

/* Writes the text to `f`: `status` is GetStatus's reply, `devices` the array ListDevices' reply
 * holds under "devices" (either may be NULL or of any shape: what is missing is left out). */
void metrics_write(FILE *f, json_object *status, json_object *devices);
