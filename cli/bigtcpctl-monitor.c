/* bigtcpctl-monitor.c — `bigtcpctl monitor`: the daemon's events as they happen, one line each
 * (or the daemon's JSON, one line per event). */
#include <inttypes.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-monitor.h"

static void print_sizes_change(json_object *from, json_object *to) {
        bool any = false;
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                if (!jhas_int(to, size_names[k]) ||
                    jint(from, size_names[k], -1) == jint(to, size_names[k], -1))
                        continue;
                printf(" %s %" PRId64 "→%" PRId64, size_names[k], jint(from, size_names[k], 0),
                       jint(to, size_names[k], 0));
                any = true;
        }
        if (!any)
                printf(" (no change)");
}

static void print_event(const Ctl *c, json_object *e) {
        const char *ev = jstr(e, "event"), *ifname = jstr(e, "ifname");
        struct timeval tv;
        struct tm tm;
        char ts[32] = "";

        gettimeofday(&tv, NULL);
        if (localtime_r(&tv.tv_sec, &tm))
                strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
        printf("%s.%03ld ", ts, (long) (tv.tv_usec / 1000));
        if (streq_ptr(ev, "state")) {
                const char *st = jstr(e, "state");
                printf("%s: %s → %s%s%s\n", ifname ?: "?", jstr(e, "previous") ?: "?",
                       color(c, state_color(st) ?: ""), st ?: "?", color(c, ANSI_RESET));
        } else if (streq_ptr(ev, "write") || streq_ptr(ev, "restore")) {
                bool restore = streq_ptr(ev, "restore");
                if (jget(e, "errno")) {
                        printf("%s: %s%s refused%s: %s (errno %" PRId64 ")%s%s\n", ifname ?: "?",
                               color(c, ANSI_RED), restore ? "restore" : "write", color(c, ANSI_RESET),
                               jstr(e, "error") ?: "?", jint(e, "errno", 0), jstr(e, "extack") ? ": " : "",
                               jstr(e, "extack") ?: "");
                } else {
                        printf("%s: %s", ifname ?: "?", restore ? "restored" : "wrote");
                        print_sizes_change(jget(e, "from"), jget(e, "to"));
                        putchar('\n');
                }
        } else if (streq_ptr(ev, "rollback")) {
                printf("%s: %srolled back%s (%s rose %" PRId64 ", threshold %g):", ifname ?: "?",
                       color(c, ANSI_RED), color(c, ANSI_RESET), jstr(e, "counter") ?: "?",
                       jint(e, "rise", 0),
                       jget(e, "threshold") ? json_object_get_double(jget(e, "threshold")) : 0.0);
                print_sizes_change(jget(e, "from"), jget(e, "to"));
                putchar('\n');
        } else if (streq_ptr(ev, "reload")) {
                if (jbool(e, "ok"))
                        printf("policy reloaded, digest %s\n", jstr(e, "digest") ?: "?");
                else
                        printf("%snew policy refused%s, running policy kept (digest %s)\n",
                               color(c, ANSI_RED), color(c, ANSI_RESET), jstr(e, "digest") ?: "?");
        } else
                printf("%s\n", json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN |
                                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}

int verb_monitor(Ctl *c, char **args, size_t n) {
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "monitor takes no arguments");
        if (c->dbus)
                return error_exit(EXIT_FAILED, "monitor is only available over varlink (drop --dbus)");
        r = call_connect(c);
        if (r != 0)
                return r;
        r = varlink_send(c->conn, IFACE ".Monitor", NULL, true);
        if (r < 0)
                return call_recv_exit(r);
        setvbuf(stdout, NULL, _IOLBF, 0);
        for (;;) {
                _cleanup_(json_object_putp) json_object *reply = NULL;
                json_object *e;

                r = varlink_recv(c->conn, -1, &reply);
                if (r < 0)
                        return call_recv_exit(r);
                if (jget(reply, "error"))
                        return call_error_exit("monitor", reply);
                e = jget(reply, "parameters");
                if (c->json)
                        printf("%s\n", json_object_to_json_string_ext(
                                               e, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
                else if (streq_ptr(jstr(e, "event"), "subscribed")) {
                        if (c->legend)
                                printf("Monitoring bigtcpd (Ctrl-C to stop).\n");
                } else
                        print_event(c, e);
                if (!jbool(reply, "continues"))
                        return EXIT_OK;
        }
}
