/* bigtcpctl-monitor.c — `bigtcpctl monitor`: the daemon's events as they happen, one line each
 * (or the daemon's JSON, one line per event): devices added and removed, state changes, writes
 * and their cause, rollbacks, halted rollouts, reloads, tries, the searches of `auto`. Over varlink the Monitor stream,
 * over D-Bus (--dbus) the Event signals after Subscribe(). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-evidence.h"
#include "bigtcpctl-monitor.h"

/* " gso_max_size 65536 → 185000, gro_max_size 65536 → 185000" for the sizes that change. */
static void print_sizes_change(json_object *from, json_object *to) {
        bool any = false;
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                if (!jhas_int(to, size_names[k]) ||
                    jint(from, size_names[k], -1) == jint(to, size_names[k], -1))
                        continue;
                printf("%s %s %" PRId64 " %s %" PRId64, any ? "," : "", size_names[k],
                       jint(from, size_names[k], 0), glyph(GLYPH_ARROW), jint(to, size_names[k], 0));
                any = true;
        }
        if (!any)
                printf(" (no change)");
}

/* A write the kernel answered: "write (policy) …", or "restore …" for cause restore (and for
 * the separate "restore" event of a bigtcpd before the write causes). */
static void print_write(const Ctl *c, json_object *e, const char *ifname) {
        const char *cause = jstr(e, "cause");
        bool restore = streq_ptr(jstr(e, "event"), "restore") || streq_ptr(cause, "restore");

        printf("%s: %s", ifname, restore ? "restore" : "write");
        if (cause && !restore)
                printf(" (%s)", cause);
        if (jget(e, "errno"))
                printf(" %srefused%s: %s (errno %" PRId64 ")%s%s\n", color(c, ANSI_RED),
                       color(c, ANSI_RESET), jstr(e, "error") ?: "?", jint(e, "errno", 0),
                       jstr(e, "extack") ? ": " : "", jstr(e, "extack") ?: "");
        else {
                print_sizes_change(jget(e, "from"), jget(e, "to"));
                putchar('\n');
        }
}

static void print_rollback(const Ctl *c, json_object *e, const char *ifname) {
        printf("%s: %srolled back%s", ifname, color(c, ANSI_RED), color(c, ANSI_RESET));
        if (streq_ptr(jstr(e, "counter"), "operator"))
                printf(" by an operator:");
        else
                printf(" (%s rose %" PRId64 ", threshold %g):", jstr(e, "counter") ?: "?",
                       jint(e, "rise", 0),
                       jget(e, "threshold") ? json_object_get_double(jget(e, "threshold")) : 0.0);
        print_sizes_change(jget(e, "from"), jget(e, "to"));
        putchar('\n');
}

/* A refused reload lists its errors, one a line, indented under the event. */
static void print_reload(const Ctl *c, json_object *e) {
        json_object *errors = jarray(e, "errors");

        if (jbool(e, "ok")) {
                printf("policy reloaded, digest %s\n", jstr(e, "digest") ?: "?");
                return;
        }
        printf("%snew policy refused%s, running policy kept (digest %s)%s\n", color(c, ANSI_RED),
               color(c, ANSI_RESET), jstr(e, "digest") ?: "?", jlen(errors) > 0 ? ":" : "");
        for (size_t i = 0; i < jlen(errors); i++) {
                json_object *pe = json_object_array_get_idx(errors, i);
                if (jint(pe, "line", 0) > 0)
                        printf("    %s:%" PRId64 ":%" PRId64 ": %s\n", jstr(pe, "file") ?: "?",
                               jint(pe, "line", 0), jint(pe, "column", 0), jstr(pe, "message") ?: "");
                else
                        printf("    %s: %s\n", jstr(pe, "file") ?: "?", jstr(pe, "message") ?: "");
        }
}

/* "try of FILE started: reverted at 12:00:00 unless confirmed", "… confirmed: installed as
 * TARGET", "… reverted (timeout): the policy that ran before is back". */
static void print_try(const Ctl *c, json_object *e) {
        const char *action = jstr(e, "action") ?: "?";
        time_t t = (time_t) (jint(e, "deadline_usec", 0) / 1000000);
        struct tm tm;
        char at[32] = "?";

        printf("try of %s ", jstr(e, "file") ?: "?");
        if (streq_ptr(action, "started")) {
                if (localtime_r(&t, &tm))
                        strftime(at, sizeof(at), "%H:%M:%S", &tm);
                printf("%sstarted%s: reverted at %s unless confirmed\n", color(c, ANSI_YELLOW), color(c, ANSI_RESET),
                       at);
        } else if (streq_ptr(action, "confirmed"))
                printf("%sconfirmed%s: installed as %s\n", color(c, ANSI_GREEN), color(c, ANSI_RESET),
                       jstr(e, "target") ?: "?");
        else
                printf("%s%s%s (%s): the policy that ran before is back\n", color(c, ANSI_RED), action,
                       color(c, ANSI_RESET), jstr(e, "reason") ?: "?");
}

/* One line per event (a refused reload: and its errors); an event this bigtcpctl does not
 * know is printed as the daemon's JSON. */
static void print_event(const Ctl *c, json_object *e) {
        const char *ev = jstr(e, "event"), *ifname = jstr(e, "ifname") ?: "?";
        _cleanup_(freep) char *full = NULL;
        struct timeval tv;
        struct tm tm;
        char ts[32] = "";

        /* a device of another namespace as the daemon logs it: "cni-1/eth0" */
        if (jstr(e, "netns") && asprintf(&full, "%s/%s", jstr(e, "netns"), ifname) >= 0)
                ifname = full;

        gettimeofday(&tv, NULL);
        if (localtime_r(&tv.tv_sec, &tm))
                strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
        printf("%s.%03ld ", ts, (long) (tv.tv_usec / 1000));
        if (streq_ptr(ev, "added"))
                printf("%s: added (ifindex %" PRId64 ")\n", ifname, jint(e, "ifindex", 0));
        else if (streq_ptr(ev, "removed"))
                printf("%s: removed\n", ifname);
        else if (streq_ptr(ev, "state")) {
                const char *st = jstr(e, "state");
                printf("%s: %s %s %s%s%s\n", ifname, jstr(e, "previous") ?: "?", glyph(GLYPH_ARROW),
                       color(c, state_color(st) ?: ""), st ?: "?", color(c, ANSI_RESET));
        } else if (streq_ptr(ev, "write") || streq_ptr(ev, "restore"))
                print_write(c, e, ifname);
        else if (streq_ptr(ev, "rollback"))
                print_rollback(c, e, ifname);
        else if (streq_ptr(ev, "rollout") && jbool(e, "halted"))
                printf("rollout of policy %s %shalted%s%s%s: its waiting devices stay pending\n",
                       jstr(e, "policy") ?: "?", color(c, ANSI_RED), color(c, ANSI_RESET),
                       jstr(e, "ifname") ? " by the rollback of " : "", jstr(e, "ifname") ?: "");
        else if (streq_ptr(ev, "reload"))
                print_reload(c, e);
        else if (streq_ptr(ev, "try"))
                print_try(c, e);
        else if (streq_ptr(ev, "evidence")) {
                /* the end of a count: what was counted, and whether BIG TCP is in effect */
                _cleanup_(freep) char *packets = NULL, *effective = NULL;
                if (evidence_text(e, &packets, &effective) < 0)
                        printf("%s: evidence (out of memory)\n", ifname);
                else
                        printf("%s: evidence: %s%s%s\n", ifname, packets ?: "nothing counted",
                               effective ? "; in effect: " : "", effective ?: "");
        }
        else if (streq_ptr(ev, "auto")) {
                /* a search of `auto` moved: "e0: gso_max_size proven: auto: proven 131072 by …" */
                const char *change = jstr(e, "change") ?: "?";
                json_object *s = jget(e, "search");
                const char *col = streq_ptr(change, "tripped") ? ANSI_RED
                                  : streq_ptr(change, "proven") || streq_ptr(change, "settled") ? ANSI_GREEN
                                                                                               : NULL;
                printf("%s: %s %s%s%s: %s\n", ifname, jstr(s, "size") ?: "?", color(c, col ?: ""), change,
                       color(c, col ? ANSI_RESET : ""), jstr(s, "text") ?: "?");
        } else if (streq_ptr(ev, "netns-problem") && jbool(e, "ok"))
                printf("netns %s: %s no more\n", jstr(e, "netns") ?: "?", jstr(e, "problem") ?: "?");
        else if (streq_ptr(ev, "netns-problem"))
                printf("netns %s: %s%s%s%s%s%s (see bigtcpctl status)\n", jstr(e, "netns") ?: "?",
                       color(c, ANSI_RED), jstr(e, "problem") ?: "?", color(c, ANSI_RESET),
                       jstr(e, "error") ? " (" : "", jstr(e, "error") ?: "", jstr(e, "error") ? ")" : "");
        else
                printf("%s\n", json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN |
                                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* The stream of one connection: 0 when the daemon ended it, 1 when the connection went (the
 * daemon stopped or restarted), or an exit code. */
static int stream(Ctl *c, bool again) {
        int r;

        r = varlink_send(c->conn, IFACE ".Monitor", NULL, true);
        if (r == -ECONNRESET || r == -EPIPE)
                return 1;
        if (r < 0)
                return call_recv_exit(r);
        for (;;) {
                _cleanup_(json_object_putp) json_object *reply = NULL;
                json_object *e;

                r = varlink_recv(c->conn, -1, &reply);
                if (r == -ECONNRESET || r == -EPIPE)
                        return 1;
                if (r < 0)
                        return call_recv_exit(r);
                if (jget(reply, "error"))
                        return call_error_exit("monitor", reply);
                e = jget(reply, "parameters");
                bool subscribed = streq_ptr(jstr(e, "event"), "subscribed");
                /* back only once subscribed again: what happens from here on is shown */
                if (subscribed && again)
                        fprintf(stderr, "bigtcpctl: bigtcpd is back; monitoring again (events meanwhile are not shown)\n");
                if (c->json)
                        printf("%s\n", json_object_to_json_string_ext(
                                               e, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
                else if (subscribed) {
                        if (c->legend && !again)
                                printf("Monitoring bigtcpd (Ctrl-C to stop).\n");
                } else
                        print_event(c, e);
                if (!jbool(reply, "continues"))
                        return 0;
        }
}

/* Wait for bigtcpd to listen and answer again: a socket that appears in its directory (inotify)
 * is tried at once, and every second in any case (the directory may be gone, or held by
 * systemd's bigtcpd.socket, where a connection waits until the service runs). */
static int reconnect(Ctl *c) {
        _cleanup_(freep) char *dir = strdup(c->socket);
        _cleanup_(closep) int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        char *slash;

        if (!dir)
                return error_exit(EXIT_FAILED, "out of memory");
        slash = strrchr(dir, '/');
        if (slash)
                *(slash == dir ? slash + 1 : slash) = '\0';
        if (fd >= 0)
                (void) inotify_add_watch(fd, slash ? dir : ".", IN_CREATE | IN_MOVED_TO | IN_ATTRIB);
        for (;;) {
                _cleanup_(json_object_putp) json_object *reply = NULL;
                char buf[4096];
                int r;

                r = varlink_connect(c->socket, &c->conn);
                if (r >= 0) {
                        r = varlink_send(c->conn, "org.varlink.service.GetInfo", NULL, false);
                        if (r >= 0)
                                r = varlink_recv(c->conn, -1, &reply);
                        if (r >= 0 && !streq_ptr(jstr(reply, "error"), IFACE ".TooManyConnections"))
                                return 0;
                        varlink_close(TAKE_PTR(c->conn));
                } else if (r == -EACCES || r == -EPERM)
                        return error_exit(EXIT_DENIED, "permission denied connecting to %s", c->socket);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, fd >= 0 ? 1 : 0, 1000) > 0)
                        while (read(fd, buf, sizeof(buf)) > 0)
                                ;
        }
}

/* One event as it is printed: the daemon's JSON (--json) or a line. */
static void show(Ctl *c, json_object *e) {
        if (c->json)
                printf("%s\n", json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        else
                print_event(c, e);
}

static int on_dbus(DbusMonitorWhat what, json_object *e, void *userdata) {
        Ctl *c = userdata;
        _cleanup_(json_object_putp) json_object *subscribed = NULL;

        switch (what) {
        case DBUS_MONITOR_SUBSCRIBED:
                /* as varlink's first reply */
                if (c->json && (subscribed = json_object_new_object())) {
                        json_object_object_add(subscribed, "event", json_object_new_string("subscribed"));
                        show(c, subscribed);
                } else if (!c->json && c->legend)
                        printf("Monitoring bigtcpd over D-Bus (Ctrl-C to stop).\n");
                break;
        case DBUS_MONITOR_EVENT:
                show(c, e);
                break;
        case DBUS_MONITOR_GONE:
                fprintf(stderr, "bigtcpctl: bigtcpd left the bus; waiting for it to come back\n");
                break;
        case DBUS_MONITOR_BACK:
                fprintf(stderr, "bigtcpctl: bigtcpd is back; monitoring again (events meanwhile are not shown)\n");
                break;
        }
        return 0;
}

/* Over D-Bus: the Event signals, after Subscribe(). */
static int monitor_dbus(Ctl *c) {
        _cleanup_(freep) char *err = NULL;
        int r = dbus_monitor(on_dbus, c, &err);

        return r < 0 ? call_dbus_exit(r, err, "monitor", NULL) : r;
}

int verb_monitor(Ctl *c, char **args, size_t n) {
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "monitor takes no arguments");
        if (c->dbus) {
                setvbuf(stdout, NULL, _IOLBF, 0);
                return monitor_dbus(c);
        }
        r = call_connect(c);
        if (r != 0)
                return r;
        setvbuf(stdout, NULL, _IOLBF, 0);
        /* As journalctl -f: a restart of bigtcpd does not end it; it says so, and goes on. */
        for (bool again = false;; again = true) {
                r = stream(c, again);
                if (r != 1)
                        return r;
                varlink_close(TAKE_PTR(c->conn));
                fprintf(stderr, "bigtcpctl: bigtcpd closed the connection; waiting for it to come back\n");
                r = reconnect(c);
                if (r != 0)
                        return r;
        }
}
