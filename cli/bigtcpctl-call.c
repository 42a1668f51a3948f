/* bigtcpctl-call.c — calls to bigtcpd over varlink or D-Bus, and what bigtcpctl says when one
 * fails (see bigtcpctl-call.h). */
#include <inttypes.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigtcpctl-call.h"

#define CALL_TIMEOUT_MS 60000

static int connect_exit(const Ctl *c, int r) {
        if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTDIR)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd is not running (nothing listens on %s)",
                                  c->socket);
        if (r == -EACCES || r == -EPERM)
                return error_exit(EXIT_DENIED, "permission denied connecting to %s", c->socket);
        return error_exit(EXIT_FAILED, "cannot connect to %s: %s", c->socket, strerror(-r));
}

/* A socket that accepts is not yet a daemon that answers: while bigtcpd.service is down or
 * crash-loops, systemd holds bigtcpd.socket and queues the connection, and nobody reads it. So a
 * new connection asks GetInfo first, which bigtcpd answers at once whatever it is doing, and
 * waits that long for it. */
#define ANSWER_TIMEOUT_MS 5000

/* Was the connection on `fd` accepted? The kernel's unix socket diagnostics name the peer of a
 * connection once it is accepted: while it waits in the listening socket's queue its peer has no
 * inode. 1 yes, 0 no, -errno when it cannot be told (no unix_diag). */
static int connection_accepted(int fd) {
        struct {
                struct nlmsghdr h;
                struct unix_diag_req r;
        } req = {
                .h = {.nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST},
                .r = {.sdiag_family = AF_UNIX, .udiag_states = UINT32_MAX, .udiag_show = UDIAG_SHOW_PEER,
                      .udiag_cookie = {UINT32_MAX, UINT32_MAX}},
        };
        union {
                struct nlmsghdr h;
                char buf[1024];
        } reply;
        struct timeval tv = {.tv_sec = 1};
        struct stat st;
        ssize_t n;

        if (fstat(fd, &st) < 0)
                return -errno;
        req.r.udiag_ino = (uint32_t) st.st_ino;
        _cleanup_(closep) int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (nl < 0)
                return -errno;
        if (setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
                return -errno;
        if (send(nl, &req, sizeof(req), 0) < 0)
                return -errno;
        n = recv(nl, &reply, sizeof(reply), 0);
        if (n < 0)
                return -errno;
        if ((size_t) n < sizeof(struct nlmsghdr) || reply.h.nlmsg_len > (size_t) n)
                return -EBADMSG;
        if (reply.h.nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(&reply.h);
                return reply.h.nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0 ? e->error : -EBADMSG;
        }
        if (reply.h.nlmsg_type != SOCK_DIAG_BY_FAMILY || reply.h.nlmsg_len < NLMSG_LENGTH(sizeof(struct unix_diag_msg)))
                return -EBADMSG;
        const char *attrs = (const char *) NLMSG_DATA(&reply.h) + NLMSG_ALIGN(sizeof(struct unix_diag_msg));
        size_t end = reply.h.nlmsg_len - NLMSG_LENGTH(sizeof(struct unix_diag_msg));
        for (size_t off = 0; off + sizeof(struct nlattr) <= end;) {
                struct nlattr a;
                uint32_t peer;
                memcpy(&a, attrs + off, sizeof(a));
                if (a.nla_len < sizeof(a) || a.nla_len > end - off)
                        return -EBADMSG;
                if ((a.nla_type & NLA_TYPE_MASK) == UNIX_DIAG_PEER && a.nla_len >= NLA_HDRLEN + sizeof(peer)) {
                        memcpy(&peer, attrs + off + NLA_HDRLEN, sizeof(peer));
                        return peer != 0;
                }
                off += NLA_ALIGN(a.nla_len);
        }
        return 0; /* no peer */
}

/* No answer in time. bigtcpd took the connection: it runs, and has not come to it (the calls of
 * this user that wait before it, or work that holds the loop); or nobody took it: nothing runs
 * behind the socket (systemd's, while the service is down), or it is stuck. */
static int not_answering_exit(const Ctl *c, int fd) {
        if (connection_accepted(fd) > 0)
                return error_exit(EXIT_FAILED,
                                  "bigtcpd is busy: it took the connection on %s but did not answer within %d s "
                                  "(the calls this user made before wait first); try again later",
                                  c->socket, ANSWER_TIMEOUT_MS / 1000);
        return error_exit(EXIT_NOT_RUNNING,
                          "bigtcpd does not answer on %s within %d s: it is not running, or stuck (see "
                          "journalctl -u bigtcpd)",
                          c->socket, ANSWER_TIMEOUT_MS / 1000);
}

int call_connect_answered(Ctl *c, int timeout_ms) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r;

        if (c->conn)
                return 0;
        r = varlink_connect(c->socket, &c->conn);
        if (r < 0)
                return connect_exit(c, r);
        r = varlink_send(c->conn, "org.varlink.service.GetInfo", NULL, false);
        if (r >= 0)
                r = varlink_recv(c->conn, timeout_ms, &reply);
        if (r == -ETIMEDOUT) {
                r = not_answering_exit(c, varlink_fd(c->conn));
                varlink_close(TAKE_PTR(c->conn));
                return r;
        }
        if (r < 0) {
                varlink_close(TAKE_PTR(c->conn));
                return call_recv_exit(r);
        }
        /* any answer says somebody reads; only a refusal of the connection ends it here */
        if (streq_ptr(jstr(reply, "error"), IFACE ".TooManyConnections")) {
                varlink_close(TAKE_PTR(c->conn));
                return call_error_exit("connect", reply);
        }
        return 0;
}

int call_connect(Ctl *c) {
        return call_connect_answered(c, ANSWER_TIMEOUT_MS);
}

int call_recv_exit(int r) {
        if (r == -ECONNRESET || r == -EPIPE)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd closed the connection");
        if (r == -ETIMEDOUT)
                return error_exit(EXIT_FAILED, "bigtcpd did not answer within %d s", CALL_TIMEOUT_MS / 1000);
        if (r == -EBADMSG)
                return error_exit(EXIT_FAILED, "bigtcpd sent a reply that is not a varlink message");
        return error_exit(EXIT_FAILED, "talking to bigtcpd: %s", strerror(-r));
}

/* `warnings`: PolicyInvalid's warnings field, each said "warning: " like validate says it. */
static void print_policy_errors(json_object *errors, bool warnings) {
        const char *w = warnings ? "warning: " : "";
        size_t n = errors && json_object_is_type(errors, json_type_array) ? json_object_array_length(errors)
                                                                          : 0;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(errors, i);
                int64_t line = jint(e, "line", 0);
                if (line > 0)
                        fprintf(stderr, "%s:%" PRId64 ":%" PRId64 ": %s%s\n", jstr(e, "file") ?: "?", line,
                                jint(e, "column", 0), w, jstr(e, "message") ?: "");
                else
                        fprintf(stderr, "%s: %s%s\n", jstr(e, "file") ?: "?", w, jstr(e, "message") ?: "");
        }
}

/* NothingToDo of Rollback or Retry, for one device or (`ifname` NULL) every one. */
static int nothing_to_do_exit(const char *what, const char *ifname) {
        bool retry = streq_ptr(what, "retry");
        if (ifname)
                return error_exit(EXIT_FAILED, "%s: %s", ifname,
                                  retry ? "nothing to do (it is neither rolled back nor failed)"
                                        : "nothing to roll back (bigtcpd never wrote it, or it is rolled "
                                          "back already)");
        return error_exit(EXIT_FAILED, "%s",
                          retry ? "nothing to retry: no device is rolled back or failed"
                                : "nothing to roll back: bigtcpd has written no device, or every one is "
                                  "rolled back already");
}

/* An error reply: one line (or the policy's errors), and the exit code. */
int call_error_exit(const char *method, json_object *reply) {
        const char *error = jstr(reply, "error") ?: "?";
        json_object *p = jget(reply, "parameters");

        if (streq_ptr(error, "org.varlink.service.PermissionDenied"))
                return error_exit(EXIT_DENIED, "permission denied: %s needs root", method);
        if (streq_ptr(error, IFACE ".NoSuchDevice"))
                return error_exit(EXIT_FAILED, "no device \"%s\"", jstr(p, "ifname") ?: "");
        if (streq_ptr(error, IFACE ".NothingToDo"))
                return nothing_to_do_exit(method, jstr(p, "ifname"));
        if (streq_ptr(error, "org.varlink.service.InvalidParameter")) {
                if (streq_ptr(method, "retry") && streq_ptr(jstr(p, "parameter"), "ifname"))
                        return error_exit(EXIT_FAILED, "this bigtcpd cannot retry every device at once "
                                                       "(older version?): retry DEV, one by one");
                if (streq_ptr(method, "watch") && streq_ptr(jstr(p, "parameter"), "duration_usec"))
                        return error_exit(EXIT_USAGE, "watch --for: more than this bigtcpd counts at once");
                return error_exit(EXIT_FAILED, "%s: bigtcpd refused the parameter \"%s\" (older version?)",
                                  method, jstr(p, "parameter") ?: "?");
        }
        if (streq_ptr(error, IFACE ".PolicyInvalid")) {
                print_policy_errors(jget(p, "errors"), false);
                print_policy_errors(jget(p, "warnings"), true);
                return error_exit(EXIT_FAILED, "the policy has errors%s",
                                  streq_ptr(method, "reload") ? "; the running policy stays"
                                  : streq_ptr(method, "try") ? "; nothing was tried"
                                                            : "");
        }
        if (streq_ptr(error, IFACE ".TryRunning"))
                return error_exit(EXIT_FAILED, "a try of %s runs: \"bigtcpctl confirm\" or \"bigtcpctl revert\" it first",
                                  jstr(p, "file") ?: "?");
        if (streq_ptr(error, IFACE ".NoTry"))
                return error_exit(EXIT_FAILED, "no try runs");
        if (streq_ptr(error, IFACE ".TargetNotRead"))
                /* a usage error, found by the daemon: only it knows where it reads its policy */
                return error_exit(EXIT_USAGE,
                                  "--to %s: bigtcpd reads no policy there (the main policy file, or a *.yaml "
                                  "right in /etc/bigtcpd/bigtcpd.d)",
                                  jstr(p, "target") ?: "?");
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

/* Sends one call and reads its reply: 0 with the whole reply (an error one too) in *ret_reply;
 * or, with `raw` and a reply that is not an error, its parameters printed as they came and
 * *ret_reply NULL. bigtcpd sends {"parameters":{…}} with nothing after the parameters, so they
 * are the bytes between, and a reply of 5 MiB is not parsed only to be printed again. */
static int call_reply_timeout(Ctl *c, const char *method, json_object *params, bool raw, int timeout_ms,
                              json_object **ret_reply) {
        static const char prefix[] = "{\"parameters\":";
        const char *data;
        size_t size;
        int r;

        r = call_connect(c);
        if (r != 0) {
                json_object_put(params);
                return r;
        }
        r = varlink_send(c->conn, method, params, false);
        if (r < 0)
                return call_recv_exit(r);
        r = varlink_recv_raw(c->conn, timeout_ms, &data, &size);
        if (r < 0)
                return call_recv_exit(r);
        if (raw && size > sizeof(prefix) && memcmp(data, prefix, sizeof(prefix) - 1) == 0 &&
            data[size - 1] == '}' && data[sizeof(prefix) - 1] == '{') {
                fwrite(data + sizeof(prefix) - 1, 1, size - sizeof(prefix), stdout);
                fputc('\n', stdout);
                *ret_reply = NULL;
                return 0;
        }
        r = varlink_parse(data, size, ret_reply);
        return r < 0 ? call_recv_exit(r) : 0;
}

static int call_reply(Ctl *c, const char *method, json_object *params, bool raw, json_object **ret_reply) {
        return call_reply_timeout(c, method, params, raw, CALL_TIMEOUT_MS, ret_reply);
}

/* A reply from call_reply(): an error as its exit code; else its parameters into *ret, or
 * printed when `ret` is NULL (unless call_reply() printed them already). */
static int reply_finish(const char *what, json_object *reply, json_object **ret) {
        json_object *p;

        if (!reply)
                return 0;
        if (jget(reply, "error"))
                return call_error_exit(what, reply);
        p = jget(reply, "parameters");
        if (!ret) {
                if (p)
                        print_json(p);
                else
                        printf("{}\n");
                return 0;
        }
        *ret = p ? json_object_get(p) : json_object_new_object();
        return *ret ? 0 : error_exit(EXIT_FAILED, "out of memory");
}

static bool is_invalid_parameter(json_object *reply, const char *name) {
        return streq_ptr(jstr(reply, "error"), "org.varlink.service.InvalidParameter") &&
               streq_ptr(jstr(jget(reply, "parameters"), "parameter"), name);
}

int call_method(Ctl *c, const char *what, const char *method, json_object *params, json_object **ret) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r = call_reply(c, method, params, !ret, &reply);
        return r != 0 ? r : reply_finish(what, reply, ret);
}

int call_dbus_exit(int r, const char *err, const char *what, const char *ifname) {
        if (r == -ESRCH)
                return error_exit(EXIT_NOT_RUNNING, "bigtcpd is not running (%s)",
                                  err ?: "io.bigtcpd1 is not on the system bus");
        if (r == -ENOENT || r == -ECONNREFUSED)
                return error_exit(EXIT_NOT_RUNNING, "no system bus: %s", strerror(-r));
        if (r == -EACCES || r == -EPERM)
                return error_exit(EXIT_DENIED, "permission denied: %s needs root", what);
        if (r == -ENODEV)
                return error_exit(EXIT_FAILED, "no device \"%s\"", ifname ?: "");
        if (r == -EALREADY)
                return nothing_to_do_exit(what, ifname);
        if (r == -EINVAL)
                return error_exit(EXIT_FAILED, "the policy has errors: %s", err ?: "?");
        if (r == -ENOMSG)
                return error_exit(EXIT_FAILED, "no try runs");
        if (r == -EBUSY)
                return error_exit(EXIT_FAILED, "a try runs: confirm or revert it first");
        if (r == -EXDEV)
                return error_exit(EXIT_FAILED, "bigtcpd reads no policy file there (--to)");
        return error_exit(EXIT_FAILED, "D-Bus call failed: %s", err ?: strerror(-r));
}

/* A D-Bus method that returns JSON text. */
static int dbus_json(const char *what, const char *method, const char *arg, json_object **ret) {
        _cleanup_(freep) char *err = NULL, *text = NULL;
        int r = dbus_call(method, arg, &text, &err);
        if (r < 0)
                return call_dbus_exit(r, err, what, arg);
        if (varlink_parse(text, strlen(text), ret) < 0)
                return error_exit(EXIT_FAILED, "bigtcpd sent D-Bus JSON that does not parse");
        return 0;
}

int call_operation(Ctl *c, const char *what, const char *method, json_object *params, const DbusOperationArgs *dargs,
                   json_object **ret) {
        _cleanup_(freep) char *name = NULL;

        if (c->dbus) {
                _cleanup_(freep) char *err = NULL;
                json_object_put(params);
                int r = dbus_call_operation(method, dargs, ret, &err);
                if (r == -EINVAL && err) {
                        /* the policy's errors, a line each, as the daemon wrote them */
                        fprintf(stderr, "%s\n", err);
                        return error_exit(EXIT_FAILED, "the policy has errors%s",
                                          streq_ptr(what, "reload") ? "; the running policy stays"
                                          : streq_ptr(what, "try") ? "; nothing was tried"
                                                                    : "");
                }
                if (r == -EBADMSG)
                        return error_exit(EXIT_FAILED, "bigtcpd sent a D-Bus reply that does not parse");
                return r < 0 ? call_dbus_exit(r, err, what, dargs && !strempty(dargs->arg) ? dargs->arg : NULL) : 0;
        }
        if (strextendf(&name, IFACE ".%s", method) < 0) {
                json_object_put(params);
                return error_exit(EXIT_FAILED, "out of memory");
        }
        return call_method(c, what, name, params, ret);
}

int call_watch(Ctl *c, const char *ifname, uint64_t duration_usec, json_object **ret) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p;
        int r;

        if (c->dbus) {
                _cleanup_(freep) char *err = NULL, *text = NULL;
                r = dbus_call_watch(ifname, duration_usec, &text, &err);
                if (r < 0)
                        return call_dbus_exit(r, err, "watch", ifname);
                if (varlink_parse(text, strlen(text), ret) < 0)
                        return error_exit(EXIT_FAILED, "bigtcpd sent D-Bus JSON that does not parse");
                return 0;
        }
        p = json_object_new_object();
        if (!p)
                return error_exit(EXIT_FAILED, "out of memory");
        json_object_object_add(p, "ifname", json_object_new_string(ifname));
        json_object_object_add(p, "duration_usec", json_object_new_int64((int64_t) duration_usec));
        /* answered when the window ends */
        r = call_reply_timeout(c, IFACE ".Watch", p, false, (int) (duration_usec / 1000) + CALL_TIMEOUT_MS, &reply);
        return r != 0 ? r : reply_finish("watch", reply, ret);
}

int fetch_status(Ctl *c, json_object **ret) {
        if (c->dbus)
                return dbus_json("status", "GetStatusJSON", NULL, ret);
        return call_method(c, "status", IFACE ".GetStatus", NULL, ret);
}

int fetch_devices(Ctl *c, const char *ifname, bool refresh, json_object **ret) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p;
        int r;

        if (c->dbus) {
                json_object *o = NULL;
                r = dbus_json("list", "ListDevicesJSON", ifname ?: "", &o);
                if (r != 0)
                        return r;
                if (json_object_is_type(o, json_type_array)) {
                        json_object *w = json_object_new_object();
                        json_object_object_add(w, "devices", o);
                        o = w;
                }
                if (ret)
                        *ret = o;
                else {
                        print_json(o);
                        json_object_put(o);
                }
                return 0;
        }
        p = json_object_new_object();
        if (!p)
                return error_exit(EXIT_FAILED, "out of memory");
        if (ifname)
                json_object_object_add(p, "ifname", json_object_new_string(ifname));
        else if (refresh)
                json_object_object_add(p, "refresh", json_object_new_boolean(true));
        r = call_reply(c, IFACE ".ListDevices", p, !ret, &reply);
        if (r == 0 && !ifname && refresh && is_invalid_parameter(reply, "refresh")) {
                /* A bigtcpd from before `refresh`: the values are as fresh as it has them. */
                json_object_put(TAKE_PTR(reply));
                r = call_reply(c, IFACE ".ListDevices", NULL, !ret, &reply);
        }
        return r != 0 ? r : reply_finish("list", reply, ret);
}
