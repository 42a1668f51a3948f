/* metrics-oracle.h — the Prometheus text as bigtcpd printed it from GetStatus and ListDevices
 * before the printer of metrics.h (metrics-oracle.c): what test-metrics.c holds the printer to. */
#pragma once

#include <json-c/json.h>
#include <stdio.h>

void metrics_oracle_write(FILE *f, json_object *status, json_object *devices);
