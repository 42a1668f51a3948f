/* bigtcpctl-metrics.c — `bigtcpctl metrics`: GetStatus and ListDevices in the Prometheus text
 * exposition format (metrics.c, shared with bigtcpd's /metrics), for node_exporter's textfile
 * collector. */
#include <stdio.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-metrics.h"
#include "metrics.h"

int verb_metrics(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL, *reply = NULL;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "metrics takes no arguments");
        if (c->json)
                /* not JSON dressed as text: the figures are status's and list's, in JSON there */
                return error_exit(EXIT_USAGE, "metrics prints the Prometheus text format only; for JSON, "
                                              "status --json and list --json have the same figures");
        r = fetch_status(c, &s);
        if (r == 0)
                r = fetch_devices(c, NULL, true, &reply);
        if (r != 0)
                return r;
        metrics_write(stdout, s, devices_of(reply));
        return EXIT_OK;
}
