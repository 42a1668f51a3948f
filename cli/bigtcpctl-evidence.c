/* bigtcpctl-evidence.c — whether BIG TCP is in effect, in words: the big-packet counts of a
 * device (for show, and after `watch DEV [--for T]`) and its verdict. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-evidence.h"
#include "parse-util.h"

#define WATCH_DEFAULT_USEC (30 * UINT64_C(1000000))
/* The daemon's bound on one Watch() (EVIDENCE_DURATION_MAX_USEC): checked here first, so that a
 * --for above it is a usage error before anything is printed. */
#define WATCH_MAX_USEC (3600 * UINT64_C(1000000))

/* "IPv6 and IPv4", from the counts of big packets of each family. */
static const char *carried_text(json_object *b) {
        bool v6 = jint(b, "ipv6", 0) > 0, v4 = jint(b, "ipv4", 0) > 0;
        return v6 && v4 ? "IPv6 and IPv4" : v6 ? "IPv6" : v4 ? "IPv4" : "neither family";
}

int evidence_families_text(json_object *a, char **s) {
        int r = 0;
        for (size_t i = 0; r >= 0 && i < jlen(a); i++)
                r = strextendf(s, "%s%s", i == 0 ? "" : " and ",
                               json_object_get_string(json_object_array_get_idx(a, i)) ?: "?");
        return r;
}

int evidence_text(json_object *d, char **ret_packets, char **ret_effective) {
        _cleanup_(freep) char *p = NULL, *e = NULL;
        json_object *b = jget(d, "big_packets"), *eff = jget(d, "effective");
        time_t since;
        struct tm tm;
        char ts[64] = "?", buf[64];
        int r;

        if (!b) {
                *ret_packets = *ret_effective = NULL;
                return 0;
        }
        since = (time_t) (jint(b, "since", 0) / 1000000);
        if (localtime_r(&since, &tm))
                strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
        r = strextendf(&p, "%" PRId64 " sent above 64 KiB", jint(b, "tx", 0));
        if (r >= 0 && jint(b, "tx", 0) > 0)
                r = strextendf(&p, ", largest %" PRId64, jint(b, "tx_largest", 0));
        if (r >= 0)
                r = strextendf(&p, "; %" PRId64 " received", jint(b, "rx", 0));
        if (r >= 0 && jint(b, "rx", 0) > 0)
                r = strextendf(&p, ", largest %" PRId64, jint(b, "rx_largest", 0));
        if (r >= 0 && jint(b, "missed", 0) > 0)
                r = strextendf(&p, "; %" PRId64 " more not read in time (of unknown size and family)",
                               jint(b, "missed", 0));
        if (r >= 0)
                r = strextendf(&p, "; since %s", ts);
        if (r >= 0 && jbool(b, "watching"))
                r = strextendf(&p, ", counting (%s left)",
                               format_duration(buf, sizeof(buf), jint(b, "watch_left_usec", 0)));
        if (r >= 0 && !jbool(b, "watching") && jint(b, "tx", 0) + jint(b, "rx", 0) + jint(b, "missed", 0) == 0 &&
            jint(b, "full_ipv6", 0) + jint(b, "full_ipv4", 0) == 0)
                r = strextendf(&p, "; no traffic that could show it (no packet near 64 KiB or above)");
        if (r >= 0 && eff && json_object_is_type(eff, json_type_boolean)) {
                if (json_object_get_boolean(eff))
                        r = strextendf(&e, "yes, big packets in %s", carried_text(b));
                else if (jlen(jget(b, "quiet")) > 0) {
                        r = strextendf(&e, "no for ");
                        if (r >= 0)
                                r = evidence_families_text(jget(b, "quiet"), &e);
                        if (r >= 0)
                                r = strextendf(&e, ": packets at 64 KiB and none above, although its sizes are raised");
                } else
                        r = strextendf(&e, "no: packets at 64 KiB and none above; its sizes are not raised");
        }
        if (r < 0)
                return r;
        *ret_packets = TAKE_PTR(p);
        *ret_effective = TAKE_PTR(e);
        return 0;
}

int verb_watch(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(freep) char *packets = NULL, *effective = NULL;
        uint64_t usec = WATCH_DEFAULT_USEC;
        json_object *d;
        char buf[64];
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "watch takes one device name (and --for T)");
        if (c->for_duration && (parse_duration_usec(c->for_duration, &usec) < 0 || usec == 0))
                return error_exit(EXIT_USAGE, "--for wants a duration such as 30s or 5min, not \"%s\"",
                                  c->for_duration);
        if (usec > WATCH_MAX_USEC)
                return error_exit(EXIT_USAGE, "--for %s: at most 1h", c->for_duration);
        /* the device first: an unknown one is said before "Counting…" */
        r = fetch_devices(c, args[0], false, &reply);
        if (r != 0)
                return r;
        json_object_put(TAKE_PTR(reply));
        if (!c->json)
                printf("Counting the packets above 64 KiB of %s for %s…\n", args[0],
                       format_duration(buf, sizeof(buf), (int64_t) usec));
        fflush(stdout);
        r = call_watch(c, args[0], usec, &reply);
        if (r != 0)
                return r;
        d = jget(reply, "device");
        if (c->json) {
                print_json(d ?: reply);
                return EXIT_OK;
        }
        if (evidence_text(d, &packets, &effective) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        printf("%s: %s\n", jstr(d, "ifname") ?: args[0], packets ?: "nothing counted");
        if (effective)
                printf("In effect: %s\n", effective);
        return EXIT_OK;
}
