/* bigtcpctl-status.c — `bigtcpctl status`: the daemon, its policy, the kernel's capabilities,
 * the devices per state (naming the ones that went wrong) and the staged rollouts. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-evidence.h"
#include "bigtcpctl-status.h"
#include "device.h"

/* "           Label: ", or with `name` NULL the indent of a line that goes on the one above. */
static void label(const char *name) {
        printf("%16s%s ", name ?: "", name ? ":" : " ");
}

/* Devices named per state, at most this many; `list` has the rest. */
#define NAMES_MAX 10

/* "ready" (green), "starting", or "degraded (2 devices rolled back, 1 failed)": ready is not
 * the word while devices are held back or refused by the kernel, nor while the policy files have
 * errors ("degraded (the policy files have errors, …; 1 device rolled back)"). */
static int state_text(const Ctl *c, json_object *s, char **ret) {
        _cleanup_(freep) char *t = NULL;
        int64_t held = jint(jget(s, "devices"), "rolled-back", 0),
                failed = jint(jget(s, "devices"), "failed", 0),
                namespaces = jint(jget(s, "netns"), "namespace_problems_total", 0);
        const char *source = jstr(jget(s, "policy"), "source");
        bool broken = source && !streq_ptr(source, "files");
        int r;

        if (!jbool(s, "ready"))
                r = strextendf(&t, "%sstarting%s", color(c, ANSI_YELLOW), color(c, ANSI_RESET));
        else if (!broken && held <= 0 && failed <= 0 && namespaces <= 0)
                r = strextendf(&t, "%sready%s", color(c, ANSI_GREEN), color(c, ANSI_RESET));
        else if (!broken && held <= 0 && failed <= 0)
                r = strextendf(&t, "%sdegraded%s (%" PRId64 " %s not managed as it should be)", color(c, ANSI_YELLOW),
                               color(c, ANSI_RESET), namespaces, namespaces == 1 ? "namespace" : "namespaces");
        else {
                const char *devices = (held > 0 ? held : failed) == 1 ? "device" : "devices";
                r = strextendf(&t, "%sdegraded%s (", color(c, broken ? ANSI_RED : ANSI_YELLOW),
                               color(c, ANSI_RESET));
                if (r >= 0 && broken)
                        r = strextendf(&t, "the policy files have errors, %s%s",
                                       streq_ptr(source, "none") ? "no policy runs: bigtcpd writes no device"
                                                                 : "the last policy that ran runs on",
                                       held > 0 || failed > 0 ? "; " : "");
                if (r >= 0 && held > 0)
                        r = strextendf(&t, "%" PRId64 " %s rolled back", held, devices);
                if (r >= 0 && failed > 0)
                        r = strextendf(&t, "%s%" PRId64 "%s%s failed", held > 0 ? ", " : "", failed,
                                       held > 0 ? "" : " ", held > 0 ? "" : devices);
                if (r >= 0)
                        r = strextendf(&t, ")");
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(t);
        return 0;
}

/* Why a device is where it is: the counter that rolled it back, the kernel's refusal. */
static int why_text(json_object *d, char **ret) {
        json_object *rb = jget(d, "last_rollback"), *err = jget(d, "last_error");

        if (streq_ptr(jstr(d, "state"), "rolled-back") && rb) {
                if (streq_ptr(jstr(rb, "counter"), "operator"))
                        return strextendf(ret, "by an operator");
                return strextendf(ret, "%s rose %" PRId64, jstr(rb, "counter") ?: "?", jint(rb, "rise", 0));
        }
        if (streq_ptr(jstr(d, "state"), "failed") && err)
                return strextendf(ret, "%s%s%s", jstr(err, "message") ?: "?",
                                  jstr(err, "extack") ? ": " : "", jstr(err, "extack") ?: "");
        return 0;
}

/* "Rolled back: v0 (by an operator)", one device a line, for the states that need an operator. */
static int print_troubled(const Ctl *c, json_object *devs, json_object *counts) {
        static const struct {
                const char *state, *label;
        } states[] = {{"rolled-back", "Rolled back"}, {"failed", "Failed"}};

        for (size_t k = 0; k < ELEMENTSOF(states); k++) {
                size_t shown = 0, more = 0;
                for (size_t i = 0; i < jlen(devs); i++) {
                        json_object *d = json_object_array_get_idx(devs, i);
                        _cleanup_(freep) char *why = NULL;

                        if (!streq_ptr(jstr(d, "state"), states[k].state))
                                continue;
                        if (shown == NAMES_MAX)
                                continue;
                        if (why_text(d, &why) < 0)
                                return -ENOMEM;
                        const char *ns = jstr(d, "netns");
                        bool other = ns && !streq_ptr(ns, "host");
                        label(shown == 0 ? states[k].label : NULL);
                        printf("%s%s%s%s%s%s%s%s\n", color(c, state_color(states[k].state)), other ? ns : "",
                               other ? "/" : "", jstr(d, "ifname") ?: "?", color(c, ANSI_RESET), why ? " (" : "",
                               why ?: "", why ? ")" : "");
                        shown++;
                }
                /* GetStatus names the first few: the count says how many more there are */
                int64_t total = jint(counts, states[k].state, (int64_t) shown);
                more = total > (int64_t) shown ? (size_t) (total - (int64_t) shown) : 0;
                if (more > 0) {
                        label(NULL);
                        printf("%s and %zu more (bigtcpctl list)\n", glyph(GLYPH_ELLIPSIS), more);
                }
        }
        return 0;
}

/* GetStatus.rollouts: "fabric: 5 applied, 2/4 active (1 in probation), 3 waiting, halted by v0
 * (Tcp.RetransSegs rose)". */
static void print_rollouts(const Ctl *c, json_object *rollouts) {
        for (size_t i = 0; i < jlen(rollouts); i++) {
                json_object *o = json_object_array_get_idx(rollouts, i);
                const char *counter = jstr(o, "halted_counter");
                label(i == 0 ? "Rollouts" : NULL);
                printf("%s: ", jstr(o, "policy") ?: "?");
                if (jhas_int(o, "applied"))
                        printf("%" PRId64 " applied, ", jint(o, "applied", 0));
                printf("%" PRId64 "/%" PRId64 " active", jint(o, "active", 0), jint(o, "max_parallel", 0));
                if (jhas_int(o, "probation"))
                        printf(" (%" PRId64 " in probation)", jint(o, "probation", 0));
                printf(", %" PRId64 " waiting", jint(o, "waiting", 0));
                if (jbool(o, "halted")) {
                        printf(", %shalted%s%s", color(c, ANSI_RED), jstr(o, "halted_by") ? " by " : "",
                               jstr(o, "halted_by") ?: "");
                        if (streq_ptr(counter, "operator"))
                                printf(" (rolled back by an operator)");
                        else if (counter)
                                printf(" (%s rose)", counter);
                        printf("%s", color(c, ANSI_RESET));
                }
                putchar('\n');
        }
}

/* GetStatus.last_reload: "ok at 14:02:11" or "refused at …", then the refused policy's errors as
 * file:line:column: message, one a line. */
static void print_last_reload(const Ctl *c, json_object *r, const char *source) {
        time_t when = (time_t) (jint(r, "time_usec", 0) / 1000000);
        json_object *errors = jarray(r, "errors");
        int64_t total = jint(r, "errors_total", (int64_t) jlen(errors));
        struct tm tm;
        char ts[64] = "?";

        if (!r)
                return;
        if (localtime_r(&when, &tm))
                strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
        label("Last reload");
        if (jbool(r, "ok")) {
                printf("ok at %s\n", ts);
                return;
        }
        printf("%srefused%s at %s: %" PRId64 " %s; %s\n", color(c, ANSI_RED), color(c, ANSI_RESET), ts, total,
               total == 1 ? "error" : "errors",
               streq_ptr(source, "none") ? "no policy runs" : "the policy before it runs on");
        for (size_t i = 0; i < jlen(errors); i++) {
                json_object *e = json_object_array_get_idx(errors, i);
                label(NULL);
                if (jint(e, "line", 0) > 0)
                        printf("%s:%" PRId64 ":%" PRId64 ": %s\n", jstr(e, "file") ?: "?", jint(e, "line", 0),
                               jint(e, "column", 0), jstr(e, "message") ?: "");
                else
                        printf("%s: %s\n", jstr(e, "file") ?: "?", jstr(e, "message") ?: "");
        }
        if (total > (int64_t) jlen(errors)) {
                label(NULL);
                printf("%s and %" PRId64 " more (bigtcpctl validate FILE)\n", glyph(GLYPH_ELLIPSIS),
                       total - (int64_t) jlen(errors));
        }
}

/* GetStatus.policies with rollout.hosts-percent: this host's cohort in each fleet canary. */
static int print_canaries(const Ctl *c, json_object *s) {
        json_object *policies = jarray(s, "policies");
        size_t shown = 0;

        for (size_t i = 0; i < jlen(policies); i++) {
                _cleanup_(freep) char *line = NULL;
                int r = format_canary(c, json_object_array_get_idx(policies, i), &line);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                label(shown++ == 0 ? "Canaries" : NULL);
                printf("%s\n", line);
        }
        if (shown > 0) {
                label(NULL);
                printf("(cohorts from the %s)\n",
                       streq_ptr(jstr(s, "cohort_source"), "machine-id") ? "machine id" : "hostname");
        }
        return 0;
}

/* "12 total: 10 applied, 2 rolled-back": the counts in the order of the states, non-zero ones. */
static int counts_line(const Ctl *c, json_object *counts, int64_t total, char **ret) {
        _cleanup_(freep) char *line = NULL;
        bool first = true;
        int r;

        r = strextendf(&line, "%" PRId64 " total", total);
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
                return r;
        *ret = TAKE_PTR(line);
        return 0;
}

int verb_status(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL, *list = NULL;
        _cleanup_(freep) char *state = NULL, *line = NULL;
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

        /* The devices an operator should look at, by name: GetStatus names the first few (a
         * bigtcpd from before `problems` only counts them). */
        if (!jarray(s, "problems") && (jint(counts, "rolled-back", 0) > 0 || jint(counts, "failed", 0) > 0)) {
                r = fetch_devices(c, NULL, false, &list);
                if (r != 0)
                        return r;
        }
        if (state_text(c, s, &state) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        printf("%16s: %s\n", "State", state);
        printf("%16s: %s\n", "Version", jstr(s, "version") ?: "?");
        printf("%16s: %s\n", "Hostname", jstr(s, "hostname") ?: "?");
        printf("%16s: %s (IPv4 sizes: %s)\n", "Kernel", jstr(kern, "release") ?: "?",
               jbool(kern, "ipv4_sizes") ? "yes" : "no");
        size_t nf =
                files && json_object_is_type(files, json_type_array) ? json_object_array_length(files) : 0;
        for (size_t i = 0; i < nf; i++) {
                label(i == 0 ? "Policy files" : NULL);
                printf("%s\n", json_object_get_string(json_object_array_get_idx(files, i)));
        }
        if (nf == 0)
                printf("%16s: (none)\n", "Policy files");
        printf("%16s: %" PRId64 " %s, digest %s\n", "Policy", jint(pol, "policies", 0),
               jint(pol, "policies", 0) == 1 ? "policy" : "policies", jstr(pol, "digest") ?: "?");
        if (jget(s, "try")) {
                json_object *t = jget(s, "try");
                char left[32];
                printf("%16s: %s%s%s, reverted in %s unless confirmed (bigtcpctl confirm installs it as %s)\n",
                       "Trying", color(c, ANSI_YELLOW), jstr(t, "file") ?: "?", color(c, ANSI_RESET),
                       format_duration(left, sizeof(left), jint(t, "remaining_usec", 0)), jstr(t, "target") ?: "?");
        }
        if (print_canaries(c, s) < 0)
                return error_exit(EXIT_FAILED, "out of memory");

        if (counts_line(c, counts, jint(s, "devices_total", 0), &line) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        printf("%16s: %s\n", "Devices", line);
        if (print_troubled(c, jarray(s, "problems") ?: devices_of(list), counts) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        json_object *ns = jget(s, "netns");
        if (jint(ns, "managed", 0) > 0) {
                _cleanup_(freep) char *nsline = NULL;
                if (counts_line(c, jget(ns, "devices"), jint(ns, "devices_total", 0), &nsline) < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
                printf("%16s: %" PRId64 " other %s, devices %s; %" PRId64 " writes (%" PRId64 " refused), %" PRId64
                       " restores, %" PRId64 " rollbacks\n",
                       "Namespaces", jint(ns, "managed", 0), jint(ns, "managed", 0) == 1 ? "namespace" : "namespaces",
                       nsline, jint(ns, "writes", 0), jint(ns, "write_failures", 0), jint(ns, "restores", 0),
                       jint(ns, "rollbacks", 0));
                if (print_troubled(c, jarray(ns, "problems"), jget(ns, "devices")) < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
        }
        json_object *np = jarray(ns, "namespace_problems");
        for (size_t i = 0; i < jlen(np); i++) {
                json_object *p = json_object_array_get_idx(np, i);
                label(i == 0 ? "Netns problems" : NULL);
                printf("%s%s%s: %s\n", color(c, ANSI_YELLOW), jstr(p, "netns") ?: "?", color(c, ANSI_RESET),
                       jstr(p, "message") ?: jstr(p, "problem") ?: "?");
        }
        if (jint(ns, "namespace_problems_total", 0) > (int64_t) jlen(np)) {
                label(NULL);
                printf("… and %" PRId64 " more\n", jint(ns, "namespace_problems_total", 0) - (int64_t) jlen(np));
        }
        json_object *ev = jget(s, "evidence"), *ne = jarray(ev, "not_effective"),
                    *nef = jarray(ev, "not_effective_families");
        if (jstr(ev, "observer")) {
                printf("%16s: %s", "Observer", jstr(ev, "observer"));
                if (jstr(ev, "observer_why"))
                        printf(" (not ebpf: %s)", jstr(ev, "observer_why"));
                else if (jget(ev, "observer_devices"))
                        printf(" (%" PRId64 " devices counted)", jint(ev, "observer_devices", 0));
                printf("\n");
        }
        if (ev && (jint(ev, "watched", 0) > 0 || jlen(ne) > 0)) {
                printf("%16s: %" PRId64 " counting packets above 64 KiB", "Evidence", jint(ev, "watched", 0));
                for (size_t i = 0; i < jlen(ne); i++) {
                        const char *name = json_object_get_string(json_object_array_get_idx(ne, i));
                        printf("%s%s%s%s", i == 0 ? "; not in effect on " : ", ", color(c, ANSI_YELLOW), name,
                               color(c, ANSI_RESET));
                        /* the families named: "e0 (ipv4)" */
                        for (size_t k = 0; k < jlen(nef); k++) {
                                json_object *q = json_object_array_get_idx(nef, k);
                                _cleanup_(freep) char *fams = NULL;
                                if (!streq_ptr(jstr(q, "device"), name) || jlen(jarray(q, "families")) == 0)
                                        continue;
                                if (evidence_families_text(jarray(q, "families"), &fams) < 0)
                                        return error_exit(EXIT_FAILED, "out of memory");
                                printf(" (%s)", fams);
                                break;
                        }
                }
                printf("%s\n", jlen(ne) > 0 ? " (bigtcpctl show DEV)" : "");
        }
        /* "Auto: 2 trying, 5 idle, 120 settled (4 trips)", then each size being tried */
        json_object *au = jget(s, "auto"), *phases = jget(au, "searches"), *trying = jarray(au, "trying");
        if (au) {
                static const char *const order[] = {"trying", "watching", "idle", "settled"};
                bool any = false;
                label("Auto");
                for (size_t i = 0; i < ELEMENTSOF(order); i++) {
                        int64_t k = jint(phases, order[i], 0);
                        if (k > 0)
                                printf("%s%" PRId64 " %s", any ? ", " : "", k, order[i]);
                        any = any || k > 0;
                }
                printf("%s (%" PRId64 " %s)\n", any ? "" : "no search", jint(au, "trips", 0),
                       jint(au, "trips", 0) == 1 ? "trip" : "trips");
                for (size_t i = 0; i < jlen(trying); i++) {
                        json_object *t = json_object_array_get_idx(trying, i);
                        label(NULL);
                        printf("%s %s %s\n", jstr(t, "device") ?: "?", jstr(t, "size") ?: "?", jstr(t, "text") ?: "?");
                }
                if (jint(phases, "trying", 0) > (int64_t) jlen(trying)) {
                        label(NULL);
                        printf("… and %" PRId64 " more trying\n", jint(phases, "trying", 0) - (int64_t) jlen(trying));
                }
        }
        printf("%16s: %" PRId64 " (%" PRId64 " refused), %" PRId64 " restores, %" PRId64 " rollbacks\n",
               "Writes", jint(s, "writes", 0), jint(s, "write_failures", 0), jint(s, "restores", 0),
               jint(s, "rollbacks", 0));
        print_last_reload(c, jget(s, "last_reload"), jstr(pol, "source"));
        print_rollouts(c, jarray(s, "rollouts"));
        inactive = jget(s, "inactive_guard_counters");
        size_t ni = inactive && json_object_is_type(inactive, json_type_array)
                            ? json_object_array_length(inactive)
                            : 0;
        for (size_t i = 0; i < ni; i++) {
                label(i == 0 ? "Inactive guards" : NULL);
                printf("%s%s%s (not on this host)\n", color(c, ANSI_YELLOW),
                       json_object_get_string(json_object_array_get_idx(inactive, i)), color(c, ANSI_RESET));
        }
        return EXIT_OK;
}
