/* bigtcpctl.c — the command-line client of bigtcpd: status, devices, plan, the privileged
 * operations and monitor over varlink (or a few reads over D-Bus), validate with the daemon's own
 * parser, and Prometheus metrics. Human output in the style of networkctl; --json prints the
 * daemon's JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "device.h"
#include "policy-files.h"
#include "policy.h"
#include "table.h"
#include "util.h"

#define IFACE "io.bigtcpd.Manager"
#define CALL_TIMEOUT_MS 60000

/* Exit codes, documented in --help. */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,
        EXIT_USAGE = 2,
        EXIT_NOT_RUNNING = 3,
        EXIT_DENIED = 4,
};

static const char *arg_socket = DEFAULT_SOCKET;
static bool arg_dbus = false;
static bool arg_json = false;
static bool arg_legend = true;
static bool arg_all = false;
static bool use_color = false;
static Varlink *conn = NULL;

#define ANSI_RED "\033[0;31m"
#define ANSI_GREEN "\033[0;32m"
#define ANSI_YELLOW "\033[0;33m"
#define ANSI_GREY "\033[0;90m"
#define ANSI_BOLD "\033[1m"
#define ANSI_RESET "\033[0m"

static const char *const size_names[] = {"gso_max_size", "gro_max_size", "gso_ipv4_max_size",
                                         "gro_ipv4_max_size"};

static int error_exit(int code, const char *format, ...) _printf_(2, 3);
static int error_exit(int code, const char *format, ...) {
        va_list ap;
        fputs("bigtcpctl: ", stderr);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputc('\n', stderr);
        return code;
}

/* ---- small JSON readers ---- */

static json_object *jget(json_object *o, const char *key) {
        json_object *v = NULL;
        if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return NULL;
        return v;
}

static const char *jstr(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static bool jhas_int(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double));
}

static int64_t jint(json_object *o, const char *key, int64_t def) {
        return jhas_int(o, key) ? json_object_get_int64(jget(o, key)) : def;
}

static bool jbool(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && json_object_get_boolean(v);
}

static void print_json(json_object *o) {
        int flags = JSON_C_TO_STRING_NOSLASHESCAPE | (isatty(STDOUT_FILENO) ? JSON_C_TO_STRING_PRETTY : 0);
        size_t len;
        const char *s = json_object_to_json_string_length(
                o, flags | (flags & JSON_C_TO_STRING_PRETTY ? 0 : JSON_C_TO_STRING_PLAIN), &len);
        fwrite(s, 1, len, stdout);
        fputc('\n', stdout);
}

/* ---- formatting ---- */

static const char *color(const char *c) {
        return use_color ? c : "";
}

static const char *state_color(const char *state) {
        if (streq_ptr(state, "applied"))
                return ANSI_GREEN;
        if (streq_ptr(state, "pending") || streq_ptr(state, "probation"))
                return ANSI_YELLOW;
        if (streq_ptr(state, "failed") || streq_ptr(state, "rolled-back"))
                return ANSI_RED;
        if (streq_ptr(state, "unsupported") || streq_ptr(state, "unmanaged"))
                return ANSI_GREY;
        return NULL;
}

/* "185000 (180.7K)": exact bytes, then 1024-based with one decimal, truncated (never rounded
 * up), and no decimal when exact. Below 1024: bytes only. */
static const char *format_size(char *buf, size_t size, int64_t v) {
        static const char suffix[] = {'K', 'M', 'G'};
        int64_t unit = 1024;
        size_t i = 0;

        if (v < 1024) {
                snprintf(buf, size, "%" PRId64, v);
                return buf;
        }
        while (i + 1 < sizeof(suffix) && v >= unit * 1024) {
                unit *= 1024;
                i++;
        }
        if (v % unit == 0)
                snprintf(buf, size, "%" PRId64 " (%" PRId64 "%c)", v, v / unit, suffix[i]);
        else {
                int64_t tenths = v * 10 / unit;
                snprintf(buf, size, "%" PRId64 " (%" PRId64 ".%" PRId64 "%c)", v, tenths / 10, tenths % 10,
                         suffix[i]);
        }
        return buf;
}

static const char *format_duration(char *buf, size_t size, int64_t usec) {
        if (usec >= 60000000)
                snprintf(buf, size, "%" PRId64 "min %" PRId64 "s", usec / 60000000, usec / 1000000 % 60);
        else
                snprintf(buf, size, "%" PRId64 ".%" PRId64 "s", usec / 1000000, usec / 100000 % 10);
        return buf;
}

/* ---- talking to the daemon ---- */

static int connect_exit(int r) {
        if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTDIR)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd is not running (nothing listens on %s)",
                                  arg_socket);
        if (r == -EACCES || r == -EPERM)
                return error_exit(EXIT_DENIED, "permission denied connecting to %s", arg_socket);
        return error_exit(EXIT_FAILED, "cannot connect to %s: %s", arg_socket, strerror(-r));
}

static int ensure_connected(void) {
        int r;
        if (conn)
                return 0;
        r = varlink_connect(arg_socket, &conn);
        return r < 0 ? connect_exit(r) : 0;
}

static int recv_exit(int r) {
        if (r == -ECONNRESET || r == -EPIPE)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd closed the connection");
        if (r == -ETIMEDOUT)
                return error_exit(EXIT_FAILED, "bigtcpd did not answer within %d s", CALL_TIMEOUT_MS / 1000);
        if (r == -EBADMSG)
                return error_exit(EXIT_FAILED, "bigtcpd sent a reply that is not a varlink message");
        return error_exit(EXIT_FAILED, "talking to bigtcpd: %s", strerror(-r));
}

static void print_policy_errors(json_object *errors) {
        size_t n = errors && json_object_is_type(errors, json_type_array) ? json_object_array_length(errors)
                                                                          : 0;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(errors, i);
                int64_t line = jint(e, "line", 0);
                if (line > 0)
                        fprintf(stderr, "%s:%" PRId64 ":%" PRId64 ": %s\n", jstr(e, "file") ?: "?", line,
                                jint(e, "column", 0), jstr(e, "message") ?: "");
                else
                        fprintf(stderr, "%s: %s\n", jstr(e, "file") ?: "?", jstr(e, "message") ?: "");
        }
}

/* An error reply: one line (or the policy's errors), and the exit code. */
static int reply_error_exit(const char *method, json_object *reply) {
        const char *error = jstr(reply, "error") ?: "?";
        json_object *p = jget(reply, "parameters");

        if (streq_ptr(error, "org.varlink.service.PermissionDenied"))
                return error_exit(EXIT_DENIED, "permission denied: %s needs root", method);
        if (streq_ptr(error, IFACE ".NoSuchDevice"))
                return error_exit(EXIT_FAILED, "no device \"%s\"", jstr(p, "ifname") ?: "");
        if (streq_ptr(error, IFACE ".NothingToDo")) {
                if (jstr(p, "ifname"))
                        return error_exit(EXIT_FAILED, "%s: nothing to do (%s)", jstr(p, "ifname"),
                                          streq_ptr(method, "retry") ? "it is neither rolled back nor failed"
                                                                     : "bigtcpd never wrote it");
                return error_exit(EXIT_FAILED, "nothing to do: bigtcpd has written no device");
        }
        if (streq_ptr(error, IFACE ".PolicyInvalid")) {
                print_policy_errors(jget(p, "errors"));
                return error_exit(EXIT_FAILED, "the policy has errors%s",
                                  streq_ptr(method, "reload") ? "; the running policy stays" : "");
        }
        if (streq_ptr(error, IFACE ".Failed"))
                return error_exit(EXIT_FAILED, "%s failed: %s", method, jstr(p, "message") ?: "?");
        if (streq_ptr(error, IFACE ".TooManyConnections"))
                return error_exit(EXIT_FAILED,
                                  "bigtcpd refused the connection: too many open (max %" PRId64 ")",
                                  jint(p, "max", 0));
        if (streq_ptr(error, "org.varlink.service.MethodNotFound") ||
            streq_ptr(error, "org.varlink.service.InterfaceNotFound"))
                return error_exit(EXIT_FAILED, "this bigtcpd does not know %s (older version?)", method);
        return error_exit(EXIT_FAILED, "%s: %s %s", method, error,
                          p ? json_object_to_json_string_ext(p, JSON_C_TO_STRING_PLAIN) : "");
}

/* One varlink call. On success *ret gets the reply's parameters and 0 is returned; otherwise
 * the problem is printed and an exit code returned. With `ret` NULL, the parameters are printed
 * as they came (--json into a pipe): bigtcpd sends {"parameters":{…}} with nothing after the
 * parameters, so they are the bytes between, and a reply of 5 MiB is not parsed only to be
 * printed again. */
static int call(const char *what, const char *method, json_object *params, json_object **ret) {
        static const char prefix[] = "{\"parameters\":";
        _cleanup_(json_object_putp) json_object *reply = NULL;
        const char *data;
        size_t size;
        int r;

        r = ensure_connected();
        if (r != 0) {
                json_object_put(params);
                return r;
        }
        r = varlink_send(conn, method, params, false);
        if (r < 0)
                return recv_exit(r);
        r = varlink_recv_raw(conn, CALL_TIMEOUT_MS, &data, &size);
        if (r < 0)
                return recv_exit(r);
        if (!ret && size > sizeof(prefix) && memcmp(data, prefix, sizeof(prefix) - 1) == 0 &&
            data[size - 1] == '}' && data[sizeof(prefix) - 1] == '{') {
                fwrite(data + sizeof(prefix) - 1, 1, size - sizeof(prefix), stdout);
                fputc('\n', stdout);
                return 0;
        }
        r = varlink_parse(data, size, &reply);
        if (r < 0)
                return recv_exit(r);
        if (jget(reply, "error"))
                return reply_error_exit(what, reply);
        if (!ret) {
                json_object *p = jget(reply, "parameters");
                if (p)
                        print_json(p);
                else
                        printf("{}\n");
                return 0;
        }
        *ret = json_object_get(jget(reply, "parameters") ?: json_object_new_object());
        if (!*ret)
                *ret = json_object_new_object();
        return 0;
}

/* --json into a pipe: the daemon's bytes as they are; on a terminal: parsed, pretty-printed. */
static bool print_raw(void) {
        return arg_json && !isatty(STDOUT_FILENO);
}

static int dbus_exit(int r, const char *err, const char *what, const char *ifname) {
        if (r == -ESRCH)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd is not on the system bus (io.bigtcpd1)");
        if (r == -ENOENT || r == -ECONNREFUSED)
                return error_exit(EXIT_NOT_RUNNING, "no system bus: %s", strerror(-r));
        if (r == -EACCES || r == -EPERM)
                return error_exit(EXIT_DENIED, "permission denied: %s needs root", what);
        if (r == -ENODEV)
                return error_exit(EXIT_FAILED, "no device \"%s\"", ifname ?: "");
        if (r == -EALREADY)
                return ifname ? error_exit(EXIT_FAILED, "%s: nothing to do", ifname)
                              : error_exit(EXIT_FAILED, "nothing to do: bigtcpd has written no device");
        if (r == -EINVAL)
                return error_exit(EXIT_FAILED, "the policy has errors: %s", err ?: "?");
        return error_exit(EXIT_FAILED, "D-Bus call failed: %s", err ?: strerror(-r));
}

/* A D-Bus method that returns JSON text. */
static int dbus_json(const char *what, const char *method, const char *arg, json_object **ret) {
        _cleanup_(freep) char *err = NULL, *text = NULL;
        int r = dbus_call(method, arg, &text, &err);
        if (r < 0)
                return dbus_exit(r, err, what, arg);
        if (varlink_parse(text, strlen(text), ret) < 0)
                return error_exit(EXIT_FAILED, "bigtcpd sent D-Bus JSON that does not parse");
        return 0;
}

/* Reload, Rollback, Retry over D-Bus. */
static int dbus_privileged(const char *what, const char *method, const char *arg) {
        _cleanup_(freep) char *err = NULL, *text = NULL;
        int r = dbus_call(method, arg, streq_ptr(method, "Reload") ? &text : NULL, &err);
        if (r < 0)
                return dbus_exit(r, err, what, strempty(arg) ? NULL : arg);
        if (arg_json) {
                json_object *o = json_object_new_object();
                if (text)
                        json_object_object_add(o, "digest", json_object_new_string(text));
                print_json(o);
                json_object_put(o);
        }
        return 0;
}

static int fetch_status(json_object **ret) {
        if (arg_dbus)
                return dbus_json("status", "GetStatusJSON", NULL, ret);
        return call("status", IFACE ".GetStatus", NULL, ret);
}

/* {"devices": [...]} */
static int fetch_devices(const char *ifname, json_object **ret) {
        if (arg_dbus) {
                json_object *o = NULL;
                int r = dbus_json("list", "ListDevicesJSON", ifname ?: "", &o);
                if (r != 0)
                        return r;
                if (json_object_is_type(o, json_type_array)) {
                        json_object *w = json_object_new_object();
                        json_object_object_add(w, "devices", o);
                        o = w;
                }
                *ret = o;
                return 0;
        }
        json_object *p = NULL;
        if (ifname) {
                p = json_object_new_object();
                json_object_object_add(p, "ifname", json_object_new_string(ifname));
        }
        return call("list", IFACE ".ListDevices", p, ret);
}

static json_object *devices_of(json_object *reply) {
        json_object *a = jget(reply, "devices");
        return a && json_object_is_type(a, json_type_array) ? a : NULL;
}

/* ---- commands ---- */

static int cmd_status(char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL;
        json_object *pol, *kern, *counts, *files, *inactive;
        char line[1024];
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "status takes no arguments");
        r = fetch_status(&s);
        if (r != 0)
                return r;
        if (arg_json) {
                print_json(s);
                return EXIT_OK;
        }
        pol = jget(s, "policy");
        kern = jget(s, "kernel");
        counts = jget(s, "devices");
        files = jget(pol, "files");

        printf("%16s: %s%s%s\n", "State", color(jbool(s, "ready") ? ANSI_GREEN : ANSI_YELLOW),
               jbool(s, "ready") ? "ready" : "starting", color(ANSI_RESET));
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
        size_t off = (size_t) snprintf(line, sizeof(line), "%" PRId64 " total", jint(s, "devices_total", 0));
        bool first = true;
        for (int i = 0; i < _DEVICE_STATE_MAX && off < sizeof(line); i++) {
                const char *st = device_state_to_string((DeviceState) i);
                int64_t k = jint(counts, st, 0);
                if (k <= 0)
                        continue;
                off += (size_t) snprintf(line + off, sizeof(line) - off, "%s%s%" PRId64 " %s%s",
                                         first ? ": " : ", ", color(state_color(st) ?: ""), k, st,
                                         color(ANSI_RESET));
                first = false;
        }
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
                       color(ANSI_YELLOW), json_object_get_string(json_object_array_get_idx(inactive, i)),
                       color(ANSI_RESET));
        return EXIT_OK;
}

static void add_size_cell(Table *t, json_object *sizes, const char *key) {
        if (jhas_int(sizes, key))
                (void) table_addf(t, NULL, "%" PRId64, jint(sizes, key, 0));
        else
                (void) table_add(t, "-", NULL);
}

static int cmd_list(char **args, size_t n) {
        static const char *const headers[] = {"IDX", "LINK", "KIND", "STATE", "POLICY", "GSO",
                                              "GRO", "GSO4", "GRO4", "TSO",   NULL};
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_object *devs;
        size_t nd;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "list takes no arguments (show DEV shows one device)");
        if (print_raw() && !arg_dbus)
                return call("list", IFACE ".ListDevices", NULL, NULL);
        r = fetch_devices(NULL, &reply);
        if (r != 0)
                return r;
        if (arg_json) {
                print_json(reply);
                return EXIT_OK;
        }
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        if (table_new(headers, &t) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        table_set_align(t, 0, TABLE_RIGHT);
        for (size_t c = 5; c <= 9; c++)
                table_set_align(t, c, TABLE_RIGHT);
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *cur = jget(d, "current");
                const char *st = jstr(d, "state");
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "ifindex", 0));
                (void) table_add(t, jstr(d, "ifname"), NULL);
                (void) table_add(t, jstr(d, "kind") ?: "-", NULL);
                (void) table_add(t, st ?: "?", state_color(st));
                (void) table_add(t, jstr(d, "policy") ?: "-", NULL);
                for (size_t k = 0; k < ELEMENTSOF(size_names); k++)
                        add_size_cell(t, cur, size_names[k]);
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "tso_max_size", 0));
        }
        table_print(t, stdout, arg_legend, use_color);
        if (arg_legend)
                printf("\n%zu %s listed.\n", nd, nd == 1 ? "link" : "links");
        return EXIT_OK;
}

static void print_field(const char *label, const char *value, const char *c) {
        printf("%15s: %s%s%s\n", label, color(c ?: ""), value, c ? color(ANSI_RESET) : "");
}

static int cmd_show(char **args, size_t n) {
        static const char *const headers[] = {"SIZE", "CURRENT", "DESIRED", "ORIGINAL", NULL};
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_object *devs, *d, *cur, *want, *orig, *err, *rb;
        const char *st;
        char buf[128], buf2[64];
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "show takes one device name");
        r = fetch_devices(args[0], &reply);
        if (r != 0)
                return r;
        devs = devices_of(reply);
        if (!devs || json_object_array_length(devs) == 0)
                return error_exit(EXIT_FAILED, "no device \"%s\"", args[0]);
        d = json_object_array_get_idx(devs, 0);
        if (arg_json) {
                print_json(d);
                return EXIT_OK;
        }
        st = jstr(d, "state");
        cur = jget(d, "current");
        want = jget(d, "desired");
        orig = jget(d, "original");

        printf("%s●%s %" PRId64 ": %s\n", color(state_color(st) ?: ""), color(ANSI_RESET),
               jint(d, "ifindex", 0), jstr(d, "ifname") ?: "?");
        print_field("Kind", jstr(d, "kind") ?: "device (no kind)", NULL);
        if (jhas_int(d, "probation_left_usec")) {
                snprintf(buf, sizeof(buf), "%s (%s left)", st ?: "?",
                         format_duration(buf2, sizeof(buf2), jint(d, "probation_left_usec", 0)));
                print_field("State", buf, state_color(st));
        } else
                print_field("State", st ?: "?", state_color(st));
        print_field("Policy", jstr(d, "policy") ?: "-", NULL);
        print_field("TSO max size", format_size(buf, sizeof(buf), jint(d, "tso_max_size", 0)), NULL);

        err = jget(d, "last_error");
        if (err) {
                snprintf(buf, sizeof(buf), "%s (errno %" PRId64 ")%s%s", jstr(err, "message") ?: "?",
                         jint(err, "errno", 0), jstr(err, "extack") ? ": " : "", jstr(err, "extack") ?: "");
                print_field("Last error", buf, ANSI_RED);
        } else
                print_field("Last error", "-", NULL);
        rb = jget(d, "last_rollback");
        if (rb) {
                time_t when = (time_t) (jint(rb, "time_usec", 0) / 1000000);
                struct tm tm;
                char ts[64] = "?";
                if (localtime_r(&when, &tm))
                        strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
                if (streq_ptr(jstr(rb, "counter"), "operator"))
                        snprintf(buf, sizeof(buf), "by an operator at %s", ts);
                else if (jstr(rb, "per"))
                        snprintf(buf, sizeof(buf),
                                 "%s rose %" PRId64 " per %" PRId64 " %s (max ratio %g) at %s",
                                 jstr(rb, "counter"), jint(rb, "rise", 0), jint(rb, "per_rise", 0),
                                 jstr(rb, "per"), json_object_get_double(jget(rb, "max_ratio")), ts);
                else
                        snprintf(buf, sizeof(buf), "%s rose %" PRId64 " (max increase %" PRId64 ") at %s",
                                 jstr(rb, "counter") ?: "?", jint(rb, "rise", 0),
                                 jint(rb, "max_increase", 0), ts);
                print_field("Last rollback", buf, ANSI_RED);
        } else
                print_field("Last rollback", "-", NULL);

        putchar('\n');
        if (table_new(headers, &t) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        for (size_t c = 1; c <= 3; c++)
                table_set_align(t, c, TABLE_RIGHT);
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                json_object *cols[] = {cur, want, orig};
                if (!jhas_int(cur, size_names[k]))
                        continue;
                (void) table_add(t, size_names[k], NULL);
                for (size_t c = 0; c < ELEMENTSOF(cols); c++) {
                        bool differs = c == 1 && cols[c] &&
                                       jint(cur, size_names[k], 0) != jint(want, size_names[k], 0);
                        if (jhas_int(cols[c], size_names[k]))
                                (void) table_add(
                                        t, format_size(buf, sizeof(buf), jint(cols[c], size_names[k], 0)),
                                        differs ? ANSI_YELLOW : NULL);
                        else
                                (void) table_add(t, "-", NULL);
                }
        }
        table_print(t, stdout, arg_legend, use_color);
        return EXIT_OK;
}

/* Reads a policy file for Plan; at most the policy size limit, plus one byte to notice more. */
static int read_policy_file(const char *path, char **ret) {
        FILE *f = fopen(path, "re");
        char *buf;
        size_t n;

        if (!f)
                return -errno;
        buf = malloc(POLICY_FILE_MAX + 2);
        if (!buf) {
                fclose(f);
                return -ENOMEM;
        }
        n = fread(buf, 1, POLICY_FILE_MAX + 1, f);
        if (ferror(f)) {
                fclose(f);
                free(buf);
                return -EIO;
        }
        fclose(f);
        if (n > POLICY_FILE_MAX) {
                free(buf);
                return -EFBIG;
        }
        buf[n] = '\0';
        if (strlen(buf) != n) {
                free(buf);
                return -EBADMSG;
        }
        *ret = buf;
        return 0;
}

static void describe_changes(char *buf, size_t size, json_object *cur, json_object *want) {
        size_t off = 0;
        buf[0] = '\0';
        for (size_t k = 0; k < ELEMENTSOF(size_names) && off < size; k++) {
                if (!jhas_int(want, size_names[k]) ||
                    jint(cur, size_names[k], 0) == jint(want, size_names[k], 0))
                        continue;
                off += (size_t) snprintf(buf + off, size - off, "%s%s %" PRId64 "→%" PRId64, off ? ", " : "",
                                         size_names[k], jint(cur, size_names[k], 0),
                                         jint(want, size_names[k], 0));
        }
}

static int cmd_plan(char **args, size_t n) {
        static const char *const headers[] = {"IDX", "LINK", "POLICY", "ACTION", "CHANGES", NULL};
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_object *p = NULL, *devs;
        size_t nd, changing = 0;
        int r;

        if (n > 1)
                return error_exit(EXIT_USAGE, "plan takes at most one policy file");
        if (arg_dbus)
                return error_exit(EXIT_FAILED, "plan is only available over varlink (drop --dbus)");
        if (n == 1) {
                _cleanup_(freep) char *text = NULL;
                r = read_policy_file(args[0], &text);
                if (r == -EFBIG)
                        return error_exit(EXIT_FAILED, "%s: file too large (max %u bytes)", args[0],
                                          POLICY_FILE_MAX);
                if (r == -EBADMSG)
                        return error_exit(EXIT_FAILED, "%s: contains a NUL byte, not a policy", args[0]);
                if (r < 0)
                        return error_exit(EXIT_FAILED, "%s: %s", args[0], strerror(-r));
                p = json_object_new_object();
                json_object_object_add(p, "policy", json_object_new_string(text));
                json_object_object_add(p, "source", json_object_new_string(args[0]));
        }
        r = call("plan", IFACE ".Plan", p, &reply);
        if (r != 0)
                return r;
        if (arg_json) {
                print_json(reply);
                return EXIT_OK;
        }
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        if (table_new(headers, &t) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        table_set_align(t, 0, TABLE_RIGHT);
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *cl = jget(d, "clamped");
                const char *action = jstr(d, "action") ?: "?";
                char changes[512];

                if (streq_ptr(action, "none"))
                        continue;
                changing++;
                describe_changes(changes, sizeof(changes), jget(d, "current"), jget(d, "desired"));
                if (cl && json_object_array_length(cl) > 0) {
                        size_t off = strlen(changes);
                        for (size_t k = 0; k < json_object_array_length(cl) && off < sizeof(changes); k++)
                                off += (size_t) snprintf(
                                        changes + off, sizeof(changes) - off, "%s%s",
                                        k ? ", " : " (clamped: ",
                                        json_object_get_string(json_object_array_get_idx(cl, k)));
                        if (off < sizeof(changes))
                                snprintf(changes + off, sizeof(changes) - off, ")");
                }
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "ifindex", 0));
                (void) table_add(t, jstr(d, "ifname"), NULL);
                (void) table_add(t, jstr(d, "policy") ?: "-", NULL);
                (void) table_add(t, action, streq_ptr(action, "unsupported") ? ANSI_RED : ANSI_YELLOW);
                (void) table_add(t, changes[0] ? changes : "-", NULL);
        }
        if (changing > 0)
                table_print(t, stdout, arg_legend, use_color);
        if (arg_legend)
                printf("%s%zu of %zu %s would change.\n", changing > 0 ? "\n" : "", changing, nd,
                       nd == 1 ? "device" : "devices");
        return EXIT_OK;
}

static int cmd_reload(char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "reload takes no arguments");
        if (arg_dbus)
                return dbus_privileged("reload", "Reload", NULL);
        r = call("reload", IFACE ".Reload", NULL, &reply);
        if (r != 0)
                return r;
        if (arg_json)
                print_json(reply);
        return EXIT_OK;
}

static int cmd_rollback(char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p = NULL;
        int r;

        if ((n == 1) == arg_all || n > 1)
                return error_exit(EXIT_USAGE, "rollback takes one device name, or --all");
        if (arg_dbus)
                return dbus_privileged("rollback", "Rollback", n == 1 ? args[0] : "");
        if (n == 1) {
                p = json_object_new_object();
                json_object_object_add(p, "ifname", json_object_new_string(args[0]));
        }
        r = call("rollback", IFACE ".Rollback", p, &reply);
        if (r != 0)
                return r;
        if (arg_json)
                print_json(reply);
        return EXIT_OK;
}

static int cmd_retry(char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p;
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "retry takes one device name");
        if (arg_dbus)
                return dbus_privileged("retry", "Retry", args[0]);
        p = json_object_new_object();
        json_object_object_add(p, "ifname", json_object_new_string(args[0]));
        r = call("retry", IFACE ".Retry", p, &reply);
        if (r != 0)
                return r;
        if (arg_json)
                print_json(reply);
        return EXIT_OK;
}

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

static void print_event(json_object *e) {
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
                       color(state_color(st) ?: ""), st ?: "?", color(ANSI_RESET));
        } else if (streq_ptr(ev, "write") || streq_ptr(ev, "restore")) {
                bool restore = streq_ptr(ev, "restore") || streq_ptr(jstr(e, "cause"), "restore");
                if (jget(e, "errno")) {
                        printf("%s: %s%s refused%s: %s (errno %" PRId64 ")%s%s\n", ifname ?: "?",
                               color(ANSI_RED), restore ? "restore" : "write", color(ANSI_RESET),
                               jstr(e, "error") ?: "?", jint(e, "errno", 0), jstr(e, "extack") ? ": " : "",
                               jstr(e, "extack") ?: "");
                } else {
                        printf("%s: %s", ifname ?: "?", restore ? "restored" : "wrote");
                        print_sizes_change(jget(e, "from"), jget(e, "to"));
                        putchar('\n');
                }
        } else if (streq_ptr(ev, "added") || streq_ptr(ev, "removed")) {
                printf("%s: %s\n", ifname ?: "?", streq_ptr(ev, "added") ? "appeared" : "went away");
        } else if (streq_ptr(ev, "rollback")) {
                printf("%s: %srolled back%s (%s rose %" PRId64 ", threshold %g):", ifname ?: "?",
                       color(ANSI_RED), color(ANSI_RESET), jstr(e, "counter") ?: "?", jint(e, "rise", 0),
                       jget(e, "threshold") ? json_object_get_double(jget(e, "threshold")) : 0.0);
                print_sizes_change(jget(e, "from"), jget(e, "to"));
                putchar('\n');
        } else if (streq_ptr(ev, "reload")) {
                if (jbool(e, "ok"))
                        printf("policy reloaded, digest %s\n", jstr(e, "digest") ?: "?");
                else
                        printf("%snew policy refused%s, running policy kept (digest %s)\n", color(ANSI_RED),
                               color(ANSI_RESET), jstr(e, "digest") ?: "?");
        } else
                printf("%s\n", json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN |
                                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}

static int cmd_monitor(char **args, size_t n) {
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "monitor takes no arguments");
        if (arg_dbus)
                return error_exit(EXIT_FAILED, "monitor is only available over varlink (drop --dbus)");
        r = ensure_connected();
        if (r != 0)
                return r;
        r = varlink_send(conn, IFACE ".Monitor", NULL, true);
        if (r < 0)
                return recv_exit(r);
        setvbuf(stdout, NULL, _IOLBF, 0);
        for (;;) {
                _cleanup_(json_object_putp) json_object *reply = NULL;
                json_object *e;

                r = varlink_recv(conn, -1, &reply);
                if (r < 0)
                        return recv_exit(r);
                if (jget(reply, "error"))
                        return reply_error_exit("monitor", reply);
                e = jget(reply, "parameters");
                if (arg_json)
                        printf("%s\n", json_object_to_json_string_ext(
                                               e, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
                else if (streq_ptr(jstr(e, "event"), "subscribed")) {
                        if (arg_legend)
                                printf("Monitoring bigtcpd (Ctrl-C to stop).\n");
                } else
                        print_event(e);
                if (!jbool(reply, "continues"))
                        return EXIT_OK;
        }
}

static json_object *local_errors_json(const PolicyErrors *errs) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < errs->n; i++) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "file", json_object_new_string(errs->items[i].file ?: ""));
                json_object_object_add(o, "line", json_object_new_int((int) errs->items[i].line));
                json_object_object_add(o, "column", json_object_new_int((int) errs->items[i].column));
                json_object_object_add(o, "message", json_object_new_string(errs->items[i].message ?: ""));
                json_object_array_add(a, o);
        }
        return a;
}

/* Local: the daemon's own parser, no daemon needed. The files are checked together, as one
 * policy (policy names must be unique across them), like the daemon reads its files. */
static int cmd_validate(char **args, size_t n) {
        PolicyErrors errs = {};
        PolicySet *set = NULL;
        int r;

        if (n == 0)
                return error_exit(EXIT_USAGE, "validate takes one or more policy files");
        r = policy_load_files(args, n, &set, &errs);
        if (r < 0 && r != -EINVAL) {
                policy_errors_clear(&errs);
                return error_exit(EXIT_FAILED, "cannot check the policy: %s", strerror(-r));
        }
        if (arg_json) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "valid", json_object_new_boolean(r >= 0));
                json_object_object_add(o, "errors", local_errors_json(&errs));
                print_json(o);
                json_object_put(o);
        } else if (r < 0) {
                for (size_t i = 0; i < errs.n; i++) {
                        _cleanup_(freep) char *text = NULL;
                        if (policy_error_format(&errs.items[i], &text) >= 0)
                                fprintf(stderr, "%s\n", text);
                }
        } else if (arg_legend)
                printf("%zu %s valid: %zu %s.\n", n, n == 1 ? "file" : "files", set->n_policies,
                       set->n_policies == 1 ? "policy" : "policies");
        policy_errors_clear(&errs);
        policy_set_free(set);
        return r < 0 ? EXIT_FAILED : EXIT_OK;
}

/* Prometheus label values: backslash, double quote and newline escaped. */
static void print_label(const char *s) {
        for (; s && *s; s++) {
                if (*s == '\\' || *s == '"')
                        printf("\\%c", *s);
                else if (*s == '\n')
                        fputs("\\n", stdout);
                else
                        putchar(*s);
        }
}

static void metric_header(const char *name, const char *type, const char *help) {
        printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void print_device_sizes(json_object *devs, const char *key) {
        size_t nd = devs ? json_object_array_length(devs) : 0;
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *s = jget(d, key);
                for (size_t k = 0; s && k < ELEMENTSOF(size_names); k++) {
                        if (!jhas_int(s, size_names[k]))
                                continue;
                        printf("bigtcpd_device_%ssize_bytes{ifname=\"",
                               streq_ptr(key, "desired") ? "desired_" : "");
                        print_label(jstr(d, "ifname"));
                        printf("\",size=\"%s\"} %" PRId64 "\n", size_names[k], jint(s, size_names[k], 0));
                }
                if (streq_ptr(key, "current")) {
                        printf("bigtcpd_device_size_bytes{ifname=\"");
                        print_label(jstr(d, "ifname"));
                        printf("\",size=\"tso_max_size\"} %" PRId64 "\n", jint(d, "tso_max_size", 0));
                }
        }
}

static int cmd_metrics(char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *s = NULL, *reply = NULL;
        json_object *devs, *counts;
        size_t nd;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "metrics takes no arguments");
        r = fetch_status(&s);
        if (r == 0)
                r = fetch_devices(NULL, &reply);
        if (r != 0)
                return r;
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        counts = jget(s, "devices");

        metric_header("bigtcpd_info", "gauge",
                      "Version of the running bigtcpd and the digest of its policy.");
        printf("bigtcpd_info{version=\"");
        print_label(jstr(s, "version"));
        printf("\",policy_digest=\"");
        print_label(jstr(jget(s, "policy"), "digest"));
        printf("\"} 1\n");
        metric_header("bigtcpd_ready", "gauge", "1 once bigtcpd has done its first full reconcile.");
        printf("bigtcpd_ready %d\n", jbool(s, "ready") ? 1 : 0);
        metric_header("bigtcpd_device_size_bytes", "gauge",
                      "GSO/GRO sizes a device holds now (kernel names), and its tso_max_size.");
        print_device_sizes(devs, "current");
        metric_header("bigtcpd_device_desired_size_bytes", "gauge",
                      "GSO/GRO sizes the policy wants for a managed device.");
        print_device_sizes(devs, "desired");
        metric_header("bigtcpd_device_state", "gauge",
                      "State of a device: 1 for the state it is in, 0 for the others.");
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                        const char *st = device_state_to_string((DeviceState) k);
                        printf("bigtcpd_device_state{ifname=\"");
                        print_label(jstr(d, "ifname"));
                        printf("\",state=\"%s\"} %d\n", st, streq_ptr(st, jstr(d, "state")) ? 1 : 0);
                }
        }
        metric_header("bigtcpd_devices", "gauge", "Devices per state.");
        for (int k = 0; k < _DEVICE_STATE_MAX; k++) {
                const char *st = device_state_to_string((DeviceState) k);
                printf("bigtcpd_devices{state=\"%s\"} %" PRId64 "\n", st, jint(counts, st, 0));
        }
        metric_header("bigtcpd_writes_total", "counter",
                      "Size writes sent to the kernel since bigtcpd started.");
        printf("bigtcpd_writes_total %" PRId64 "\n", jint(s, "writes", 0));
        metric_header("bigtcpd_write_failures_total", "counter", "Size writes the kernel refused.");
        printf("bigtcpd_write_failures_total %" PRId64 "\n", jint(s, "write_failures", 0));
        metric_header("bigtcpd_restores_total", "counter", "Devices given their original sizes back.");
        printf("bigtcpd_restores_total %" PRId64 "\n", jint(s, "restores", 0));
        metric_header("bigtcpd_rollbacks_total", "counter",
                      "Devices rolled back (a guard tripped, or an operator).");
        printf("bigtcpd_rollbacks_total %" PRId64 "\n", jint(s, "rollbacks", 0));
        return EXIT_OK;
}

/* ---- command line ---- */

static void help(void) {
        printf("bigtcpctl [OPTIONS] COMMAND ...\n\n"
               "Query and control bigtcpd, the BIG TCP GSO/GRO size daemon.\n\n"
               "Commands:\n"
               "  status                 Daemon, policy and device counts\n"
               "  list                   Every device: state, policy, sizes (bytes)\n"
               "  show DEV               One device: current, desired and original sizes, errors\n"
               "  plan [FILE]            What the loaded policy (or FILE) would change here\n"
               "  reload                 Re-read the policy files (root)\n"
               "  rollback DEV|--all     Back to the last-known-good sizes now, and hold (root)\n"
               "  retry DEV              Release a rolled-back or failed device (root)\n"
               "  monitor                Print events as they happen (state, write, rollback, reload)\n"
               "  validate FILE...       Check policy files, without the daemon; errors as\n"
               "                         file:line:column: message\n"
               "  metrics                Prometheus text format (node_exporter textfile collector)\n\n"
               "Options:\n"
               "  -s --socket PATH       Varlink socket (default %s)\n"
               "     --dbus              Use D-Bus (io.bigtcpd1 on the system bus) instead of\n"
               "                         varlink; all but plan, monitor (and validate, local)\n"
               "     --json              The daemon's JSON (io.bigtcpd.Manager.varlink schema); one\n"
               "                         document, or one line per event for monitor\n"
               "     --no-legend         No header and footer lines\n"
               "     --all               With rollback: every device bigtcpd has written\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n\n"
               "Sizes are bytes; show adds a 1024-based short form, truncated: 185000 (180.7K).\n"
               "Colour only when stdout is a terminal and $NO_COLOR is unset.\n\n"
               "Exit status: 0 success; 1 failure (including policy errors and unknown devices);\n"
               "2 usage error; 3 bigtcpd is not running; 4 permission denied.\n",
               DEFAULT_SOCKET);
}

static const struct {
        const char *name;
        int (*fn)(char **args, size_t n);
} commands[] = {
        {"status", cmd_status},   {"list", cmd_list},       {"show", cmd_show},
        {"plan", cmd_plan},       {"reload", cmd_reload},   {"rollback", cmd_rollback},
        {"retry", cmd_retry},     {"monitor", cmd_monitor}, {"validate", cmd_validate},
        {"metrics", cmd_metrics},
};

int main(int argc, char *argv[]) {
        enum { ARG_DBUS = 0x100, ARG_JSON, ARG_NO_LEGEND, ARG_ALL, ARG_VERSION };
        static const struct option options[] = {
                {"socket", required_argument, NULL, 's'},    {"dbus", no_argument, NULL, ARG_DBUS},
                {"json", no_argument, NULL, ARG_JSON},       {"no-legend", no_argument, NULL, ARG_NO_LEGEND},
                {"all", no_argument, NULL, ARG_ALL},         {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION}, {},
        };
        bool socket_given = false;
        int c, r;

        while ((c = getopt_long(argc, argv, "s:h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        arg_socket = optarg;
                        socket_given = true;
                        break;
                case ARG_DBUS:
                        arg_dbus = true;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_NO_LEGEND:
                        arg_legend = false;
                        break;
                case ARG_ALL:
                        arg_all = true;
                        break;
                case 'h':
                        help();
                        return EXIT_OK;
                case ARG_VERSION:
                        printf("bigtcpctl %s\n", BIGTCPD_VERSION);
                        return EXIT_OK;
                default:
                        return EXIT_USAGE;
                }
        if (socket_given && arg_dbus)
                return error_exit(EXIT_USAGE, "--socket and --dbus exclude each other");
        if (optind >= argc)
                return error_exit(EXIT_USAGE, "no command given (try --help)");

        use_color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !streq_ptr(getenv("TERM"), "dumb");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq_ptr(argv[optind], commands[i].name)) {
                        if (arg_all && commands[i].fn != cmd_rollback)
                                return error_exit(EXIT_USAGE, "--all goes with rollback only");
                        r = commands[i].fn(argv + optind + 1, (size_t) (argc - optind - 1));
                        varlink_close(conn);
                        if (fflush(stdout) != 0 && r == EXIT_OK)
                                r = error_exit(EXIT_FAILED, "writing the output: %m");
                        return r;
                }
        return error_exit(EXIT_USAGE, "unknown command \"%s\" (try --help)", argv[optind]);
}
