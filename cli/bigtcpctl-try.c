/* bigtcpctl-try.c — `try FILE [--timeout T] [--to PATH]`, `confirm` and `revert`: run a policy
 * for a while and keep it only when confirmed. On a terminal, try counts down as netplan's does
 * (Enter confirms, Ctrl-C reverts); otherwise it returns once the tried policy runs, and confirm
 * or revert come from another invocation. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-operate.h"
#include "bigtcpctl-try.h"
#include "parse-util.h"
#include "policy.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
        interrupted = sig;
}

/* "/etc/bigtcpd/bigtcpd.d/50-x.yaml" for "bigtcpd.d/50-x.yaml" run in /etc/bigtcpd: the daemon
 * compares paths, and its working directory is not ours. */
static int absolute(const char *path, char **ret) {
        _cleanup_(freep) char *cwd = NULL;

        if (path[0] == '/')
                return (*ret = strdup(path)) ? 0 : -ENOMEM;
        cwd = getcwd(NULL, 0);
        if (!cwd)
                return -errno;
        return asprintf(ret, "%s/%s", cwd, path) < 0 ? -ENOMEM : 0;
}

static void print_deadline(int64_t deadline_usec) {
        time_t t = (time_t) (deadline_usec / 1000000);
        struct tm tm;
        char buf[32] = "?";

        if (localtime_r(&t, &tm))
                strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
        printf("%s", buf);
}

/* A second connection that streams Monitor: how the terminal's countdown learns that the try
 * ended elsewhere (another confirm or revert, the deadline). */
static int open_monitor(Ctl *c, Varlink **ret) {
        _cleanup_(json_object_putp) json_object *first = NULL;
        Varlink *v = NULL;
        int r;

        r = varlink_connect(c->socket, &v);
        if (r >= 0)
                r = varlink_send(v, IFACE ".Monitor", NULL, true);
        if (r >= 0)
                r = varlink_recv(v, 10000, &first); /* "subscribed": from now on nothing is missed */
        if (r >= 0 && jget(first, "error"))
                r = -EIO;
        if (r < 0) {
                varlink_close(v);
                return r;
        }
        *ret = v;
        return 0;
}

/* The try's end from the Monitor stream: 1 with the action ("confirmed", "reverted") and reason
 * in *ret (free it), 0 when nothing ended, -errno when the stream broke. */
static int try_ended(Varlink *v, char **ret) {
        for (;;) {
                _cleanup_(json_object_putp) json_object *reply = NULL;
                json_object *e;
                int r = varlink_recv(v, 0, &reply);

                if (r == -ETIMEDOUT)
                        return 0;
                if (r < 0)
                        return r;
                e = jget(reply, "parameters");
                if (!streq_ptr(jstr(e, "event"), "try") || streq_ptr(jstr(e, "action"), "started"))
                        continue;
                if (asprintf(ret, "%s%s%s", jstr(e, "action") ?: "?", jstr(e, "reason") ? " " : "",
                             jstr(e, "reason") ?: "") < 0)
                        return -ENOMEM;
                return 1;
        }
}

/* Confirm or Revert, over varlink or D-Bus: *ret gets what it did. */
static int call_simple(Ctl *c, const char *what, const char *method, json_object **ret) {
        return call_operation(c, what, method, NULL, &(DbusOperationArgs){}, ret);
}

static int do_confirm(Ctl *c) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r = call_simple(c, "confirm", "Confirm", &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        printf("Confirmed: the tried policy is installed as %s.\n", jstr(reply, "target") ?: "?");
        return print_changes(reply, NULL);
}

static int do_revert(Ctl *c) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r = call_simple(c, "revert", "Revert", &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        printf("Reverted: the policy that ran before is back.\n");
        return print_changes(reply, NULL);
}

/* The terminal's countdown; Ctrl-C is caught already (by verb_try(), before the call: one that
 * comes while the try starts reverts it once it runs). */
static int countdown(Ctl *c, Varlink *mon, int64_t deadline_usec) {
        int r = EXIT_OK;

        printf("Do you want to keep these settings?\n\n"
               "Press ENTER before the timeout to accept the new configuration\n\n");
        for (;;) {
                _cleanup_(freep) char *end = NULL;
                struct timespec now;
                int64_t left;
                struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN}, {.fd = varlink_fd(mon), .events = POLLIN}};
                int k;

                clock_gettime(CLOCK_REALTIME, &now);
                left = (deadline_usec - ((int64_t) now.tv_sec * 1000000 + now.tv_nsec / 1000) + 999999) / 1000000;
                if (left < 0)
                        left = 0;
                printf("\rChanges will revert in %3" PRId64 " seconds", left);
                fflush(stdout);
                k = poll(p, 2, 1000);
                if (k < 0 && errno != EINTR) {
                        r = error_exit(EXIT_FAILED, "poll: %m");
                        break;
                }
                if (interrupted) {
                        printf("\n");
                        r = do_revert(c) ?: EXIT_FAILED; /* 0 only when the tried policy is kept */
                        break;
                }
                if (k > 0 && p[1].revents) {
                        int e = try_ended(mon, &end);
                        if (e > 0) {
                                printf("\nThe try ended: %s.\n", end);
                                if (strncmp(end, "reverted", 8) == 0) {
                                        printf("The policy that ran before is back.\n");
                                        r = EXIT_FAILED;
                                }
                                break;
                        }
                        if (e < 0) {
                                printf("\n");
                                r = error_exit(EXIT_NOT_RUNNING, "bigtcpd closed the connection during the try");
                                break;
                        }
                }
                if (k > 0 && p[0].revents) {
                        char line[256];
                        printf("\n");
                        if (!fgets(line, sizeof(line), stdin)) {
                                /* the terminal went away: nobody confirms */
                                r = do_revert(c) ?: EXIT_FAILED;
                                break;
                        }
                        r = do_confirm(c);
                        break;
                }
        }
        return r;
}

int verb_try(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(freep) char *text = NULL, *target = NULL;
        _cleanup_(varlink_closep) Varlink *mon = NULL;
        uint64_t timeout = TRY_TIMEOUT_DEFAULT_USEC;
        bool interactive = !c->json && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
        char dur[32];
        json_object *p;
        size_t size;
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "try takes one policy file");
        /* over D-Bus the countdown has no Monitor stream to learn of an end elsewhere: it returns
         * once the tried policy runs, as off a terminal */
        if (c->dbus)
                interactive = false;
        if (c->timeout && (parse_duration_usec(c->timeout, &timeout) < 0 || timeout < TRY_TIMEOUT_MIN_USEC ||
                           timeout > TRY_TIMEOUT_MAX_USEC))
                return error_exit(EXIT_USAGE, "--timeout: \"%s\" is not a duration from 1s to 24h, like 120s",
                                  c->timeout);
        r = read_file_bounded(args[0], POLICY_FILE_MAX, READ_FILE_ANY_TYPE, &text, &size);
        if (r >= 0 && strlen(text) != size)
                r = -EBADMSG;
        if (r < 0)
                return error_exit(EXIT_FAILED, "%s: %s", args[0],
                                  r == -EFBIG ? "larger than 1 MiB" : r == -EBADMSG ? "has a NUL byte" : strerror(-r));
        if (c->to && absolute(c->to, &target) < 0)
                return error_exit(EXIT_FAILED, "--to: %m");
        if (interactive) {
                struct sigaction sa = {.sa_handler = on_interrupt};

                r = call_connect(c);
                if (r != 0)
                        return r;
                r = open_monitor(c, &mon);
                if (r < 0)
                        return error_exit(EXIT_FAILED, "cannot watch the try: %s", strerror(-r));
                /* the process ends after the countdown: nothing to restore */
                sigemptyset(&sa.sa_mask);
                (void) sigaction(SIGINT, &sa, NULL);
                (void) sigaction(SIGTERM, &sa, NULL);
        }
        p = json_object_new_object();
        if (!p)
                return error_exit(EXIT_FAILED, "out of memory");
        json_object_object_add(p, "policy", json_object_new_string_len(text, (int) size));
        json_object_object_add(p, "timeout_usec", json_object_new_int64((int64_t) timeout));
        json_object_object_add(p, "file", json_object_new_string(args[0]));
        if (target)
                json_object_object_add(p, "target", json_object_new_string(target));
        r = call_operation(c, "try", "Try", p,
                           &(DbusOperationArgs){.policy = text, .usec = timeout, .file = args[0], .target = target},
                           &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        printf("Trying %s (digest %s); it is reverted at ", args[0], jstr(reply, "digest") ?: "?");
        print_deadline(jint(reply, "deadline_usec", 0));
        printf(" (in %s) unless confirmed.\n", format_duration(dur, sizeof(dur), (int64_t) timeout));
        printf("Once confirmed, it is installed as %s.\n", jstr(reply, "target") ?: "?");
        r = print_changes(reply, NULL);
        if (!interactive) {
                printf("Keep it with \"bigtcpctl confirm\", go back now with \"bigtcpctl revert\".\n");
                return r;
        }
        return countdown(c, mon, jint(reply, "deadline_usec", 0));
}

int verb_confirm(Ctl *c, char **args, size_t n) {
        if (n > 0)
                return error_exit(EXIT_USAGE, "confirm takes no arguments");
        return do_confirm(c);
}

int verb_revert(Ctl *c, char **args, size_t n) {
        if (n > 0)
                return error_exit(EXIT_USAGE, "revert takes no arguments");
        return do_revert(c);
}
