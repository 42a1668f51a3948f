/* bigtcpctl-status.c — `bigtcpctl status`: the daemon, its policy, the kernel's capabilities and
 * the devices per state. */
#include <inttypes.h>
#include <stdio.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-status.h"
#include "device.h"

int verb_status(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL;
        _cleanup_(freep) char *line = NULL;
        json_object *pol, *kern, *counts, *files, *inactive;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "status takes no arguments");
        r = fetch_status(c, &s);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(s);
                return EXIT_OK;
        }
        pol = jget(s, "policy");
        kern = jget(s, "kernel");
        counts = jget(s, "devices");
        files = jget(pol, "files");

        printf("%16s: %s%s%s\n", "State", color(c, jbool(s, "ready") ? ANSI_GREEN : ANSI_YELLOW),
               jbool(s, "ready") ? "ready" : "starting", color(c, ANSI_RESET));
        printf("%16s: %s\n", "Version", jstr(s, "version") ?: "?");
        printf("%16s: %s\n", "Hostname", jstr(s, "hostname") ?: "?");
        printf("%16s: %s (IPv4 sizes: %s)\n", "Kernel", jstr(kern, "release") ?: "?",
               jbool(kern, "ipv4_sizes") ? "yes" : "no");
        size_t nf =
                files && json_object_is_type(files, json_type_array) ? json_object_array_length(files) : 0;
        for (size_t i = 0; i < nf; i++)
                printf("%16s: %s\n", i == 0 ? "Policy files" : "",
                       json_object_get_string(json_object_array_get_idx(files, i)));
        if (nf == 0)
                printf("%16s: (none)\n", "Policy files");
        printf("%16s: %" PRId64 " %s, digest %s\n", "Policy", jint(pol, "policies", 0),
               jint(pol, "policies", 0) == 1 ? "policy" : "policies", jstr(pol, "digest") ?: "?");

        /* Counts in the order of the states, non-zero ones only. */
        r = strextendf(&line, "%" PRId64 " total", jint(s, "devices_total", 0));
        bool first = true;
        for (int i = 0; r >= 0 && i < _DEVICE_STATE_MAX; i++) {
                const char *st = device_state_to_string((DeviceState) i);
                int64_t k = jint(counts, st, 0);
                if (k <= 0)
                        continue;
                r = strextendf(&line, "%s%s%" PRId64 " %s%s", first ? ": " : ", ",
                               color(c, state_color(st) ?: ""), k, st, color(c, ANSI_RESET));
                first = false;
        }
        if (r < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        printf("%16s: %s\n", "Devices", line);
        printf("%16s: %" PRId64 " (%" PRId64 " refused), %" PRId64 " restores, %" PRId64 " rollbacks\n",
               "Writes", jint(s, "writes", 0), jint(s, "write_failures", 0), jint(s, "restores", 0),
               jint(s, "rollbacks", 0));
        inactive = jget(s, "inactive_guard_counters");
        size_t ni = inactive && json_object_is_type(inactive, json_type_array)
                            ? json_object_array_length(inactive)
                            : 0;
        for (size_t i = 0; i < ni; i++)
                printf("%16s: %s%s%s (not on this host)\n", i == 0 ? "Inactive guards" : "",
                       color(c, ANSI_YELLOW), json_object_get_string(json_object_array_get_idx(inactive, i)),
                       color(c, ANSI_RESET));
        return EXIT_OK;
}
