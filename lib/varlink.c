/* varlink.c — the varlink protocol: the listening socket, one non-blocking connection per client
 * in the event loop, framing (NUL-terminated JSON), calls answered in order, `more` streams,
 * `oneway`, replies given later, org.varlink.service, and the limits.
 *
 * A client can only hurt itself: its input is capped per message, its unread replies are capped
 * (above a high-water mark its further calls are not read, so the kernel's socket buffer pushes
 * back on it), connections are capped in total and per UID, and bad input ends its connection
 * with an error reply sent without waiting. A UID other than 0 is also capped as a whole: the
 * unread replies of all its connections (and of all such UIDs together) hold its calls above one
 * mark and cut its streams above another, much lower than root's. Calls read and not handled yet
 * are capped per UID and for all such UIDs together, but every UID keeps a share of its own that
 * the others cannot take: however many users (or UIDs of one login's range) fill the common cap,
 * another user's small call is still read. A connection that is not read (held at a cap, or its
 * replies not read) is still watched for its client hanging up, which closes it and gives its
 * share back.
 *
 * The calls' replies and org.varlink.service are in varlink-call.c, the connections' buffers and
 * their accounting per UID in varlink-buffer.c; varlink-internal.h holds what the three share. */
#include <event2/event.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <stdio.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "varlink-internal.h"
#include "varlink.h"

#define READ_CHUNK (64u * 1024u)
#define READS_PER_WAKEUP 4u
#define ACCEPTS_PER_WAKEUP 64u

/* A stream (`more`) owns the connection: later calls are read but never answered. */
static bool streaming(const Connection *c) {
        return c->call.phase == CALL_DEFERRED && c->call.more;
}

/* ---- connection life cycle ---- */

void varlink_connection_free(Connection *c) {
        if (!c)
                return;
        log_debug("varlink: connection of pid %d uid %u closed", (int) c->pid, (unsigned) c->uid);
        if (c->call.phase != CALL_IDLE && c->call.cancel) {
                void (*fn)(void *) = c->call.cancel;
                c->call.cancel = NULL;
                fn(c->call.cancel_userdata);
        }
        LIST_REMOVE(c, link);
        c->server->n_connections--;
        if (c->runnable)
                TAILQ_REMOVE(&c->server->runnable, c, run_link);
        if (c->usage) {
                varlink_account(c, true, 0, c->out_size);
                varlink_account(c, false, 0, c->in_size);
                if (--c->usage->n_connections == 0) {
                        LIST_REMOVE(c->usage, link);
                        free(c->usage);
                }
        }
        if (c->read_event)
                event_free(c->read_event);
        if (c->write_event)
                event_free(c->write_event);
        if (c->process_event)
                event_free(c->process_event);
        if (c->hangup_event)
                event_free(c->hangup_event);
        if (c->fd >= 0)
                close(c->fd);
        free(c->in);
        free(c->out);
        free(c);
}

/* End the connection after one error reply, sent if the socket takes it now: a client that has
 * misbehaved gets no buffer and no time. */
static void connection_abort(Connection *c, const char *error, json_object *parameters) {
        (void) varlink_connection_send(c, varlink_error_new(error, parameters));
        (void) varlink_connection_flush(c);
        varlink_connection_free(c);
}

static const char *error_name(const Connection *c, const char *name, char *buf, size_t size) {
        snprintf(buf, size, "%s.%s", c->server->info->error_interface, name);
        return buf;
}

/* Returns -ECONNRESET when it had to close the connection. */
int varlink_connection_update_events(Connection *c) {
        /* Streams keep reading, to see the client go away; their input is not parsed and stays
         * capped. Others stop reading while replies pile up. */
        if (!streaming(c) && varlink_uid_over_input(c))
                c->held = true; /* until calls of its UID are handled: release_held() */
        bool want_read = !c->eof && c->in_len - c->in_start <= VARLINK_MESSAGE_MAX &&
                         (streaming(c) || (varlink_out_pending(c) < VARLINK_OUTPUT_HIGH_WATER && !c->held));
        bool want_write = varlink_out_pending(c) > 0;
        /* Not read, it would not see its client go: its share would stay taken for good. */
        bool want_hangup = !want_read && !c->eof && !c->half_closed;

        /* event_add() and event_del() of a valid event fail only when out of memory. */
        if (want_read != c->reading) {
                if ((want_read ? event_add(c->read_event, NULL) : event_del(c->read_event)) < 0)
                        goto fail;
                c->reading = want_read;
        }
        if (want_write != c->writing) {
                if ((want_write ? event_add(c->write_event, NULL) : event_del(c->write_event)) < 0)
                        goto fail;
                c->writing = want_write;
        }
        if (want_hangup != c->watching_hangup) {
                if ((want_hangup ? event_add(c->hangup_event, NULL) : event_del(c->hangup_event)) < 0)
                        goto fail;
                c->watching_hangup = want_hangup;
        }
        return 0;
fail:
        log_warning("varlink: failed to watch the connection of pid %d, closing it", (int) c->pid);
        varlink_connection_free(c);
        return -ECONNRESET;
}

/* ---- the wire protocol ---- */

static json_object *protocol_error(const char *reason) {
        return varlink_params1("reason", json_object_new_string(reason));
}

static bool get_bool(json_object *msg, const char *key, bool *ret) {
        json_object *v = json_object_object_get(msg, key);
        if (!v || json_object_is_type(v, json_type_null)) {
                *ret = false;
                return true;
        }
        if (!json_object_is_type(v, json_type_boolean))
                return false;
        *ret = json_object_get_boolean(v);
        return true;
}

/* Handles one message (without its NUL). Returns 0, or -ECONNRESET when the connection was
 * closed. */
static int connection_handle(Connection *c, const char *data, size_t size) {
        _cleanup_(json_object_putp) json_object *msg = NULL;
        json_tokener *tok;
        enum json_tokener_error jerr;
        json_object *method, *params;
        const VarlinkMethod *m;
        const char *name;
        bool oneway, more, upgrade, no_interface;
        char err[256];
        size_t end;
        int r;

        if (size > INT32_MAX) /* cannot happen with VARLINK_MESSAGE_MAX; json-c takes an int */
                return -EINVAL;
        tok = json_tokener_new_ex(VARLINK_DEPTH_MAX);
        if (!tok) {
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        msg = json_tokener_parse_ex(tok, data, (int) size);
        jerr = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);

        const char *protocol = error_name(c, "ProtocolError", err, sizeof(err));
        if (!msg || jerr != json_tokener_success || end != size) {
                const char *why = jerr == json_tokener_error_depth ? "JSON nested too deep"
                                  : jerr == json_tokener_continue  ? "incomplete JSON"
                                  : jerr != json_tokener_success   ? json_tokener_error_desc(jerr)
                                                                   : "trailing data after the JSON value";
                log_debug("varlink: invalid message from pid %d: %s, closing", (int) c->pid, why);
                connection_abort(c, protocol, protocol_error(why));
                return -ECONNRESET;
        }
        if (!json_object_is_type(msg, json_type_object)) {
                connection_abort(c, protocol, protocol_error("a call must be a JSON object"));
                return -ECONNRESET;
        }
        method = json_object_object_get(msg, "method");
        if (!method || !json_object_is_type(method, json_type_string)) {
                connection_abort(c, protocol, protocol_error("a call needs a \"method\" string"));
                return -ECONNRESET;
        }
        params = json_object_object_get(msg, "parameters");
        if (params && json_object_is_type(params, json_type_null))
                params = NULL;
        if (params && !json_object_is_type(params, json_type_object)) {
                connection_abort(c, protocol, protocol_error("\"parameters\" must be an object"));
                return -ECONNRESET;
        }
        if (!get_bool(msg, "oneway", &oneway) || !get_bool(msg, "more", &more) ||
            !get_bool(msg, "upgrade", &upgrade)) {
                connection_abort(c, protocol, protocol_error("\"oneway\", \"more\" and \"upgrade\" must be booleans"));
                return -ECONNRESET;
        }
        if (upgrade) {
                connection_abort(c, protocol, protocol_error("no method supports \"upgrade\""));
                return -ECONNRESET;
        }

        name = json_object_get_string(method);
        m = varlink_method_lookup(c->server->info, name, &no_interface);
        c->call = (VarlinkCall){.connection = c, .phase = CALL_RUNNING, .more = more, .oneway = oneway};
        if (!m) {
                if (no_interface) {
                        const char *dot = strrchr(name, '.');
                        r = varlink_call_error(&c->call, SERVICE_INTERFACE ".InterfaceNotFound",
                                               varlink_params1("interface", json_object_new_string_len(
                                                                                    name, dot ? (int) (dot - name) : 0)));
                } else
                        r = varlink_call_error(&c->call, SERVICE_INTERFACE ".MethodNotFound",
                                               varlink_params1("method", json_object_new_string(name)));
        } else if (m->root_only && c->uid != 0) {
                unsigned suppressed;
                if (log_ratelimit(&c->server->refusals, &suppressed))
                        log_notice("varlink: %s refused to pid %d uid %u: needs root%s", name, (int) c->pid,
                                   (unsigned) c->uid, suppressed ? " (more refusals not logged)" : "");
                r = varlink_call_error(&c->call, SERVICE_INTERFACE ".PermissionDenied", NULL);
        } else if (oneway && !m->root_only) {
                /* a question nobody waits for the answer to: nothing to do */
                c->call.phase = CALL_IDLE;
                r = 0;
        } else
                r = m->fn(&c->call, params, c->server->info->userdata);

        if (r < 0) {
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                varlink_connection_free(c);
                return -ECONNRESET;
        }
        if (c->call.phase == CALL_RUNNING)
                c->call.phase = CALL_DEFERRED; /* answered later */
        return 0;
}

static void connection_run(Connection *c, uint64_t deadline);

/* Calls of UIDs other than 0 wait for the server's scheduler, which takes them round robin for
 * at most VARLINK_UNPRIVILEGED_SLICE_USEC per loop turn: however many such clients send
 * however much, the loop gets back to epoll (and to root's calls) within a slice and a call. */
static void connection_schedule(Connection *c) {
        VarlinkServer *s = c->server;
        static const struct timeval now = {0, 0};

        if (!c->runnable) {
                TAILQ_INSERT_TAIL(&s->runnable, c, run_link);
                c->runnable = true;
        }
        if (!evtimer_pending(s->scheduler, NULL))
                (void) evtimer_add(s->scheduler, &now); /* fails only without memory */
}

static void on_scheduler(evutil_socket_t fd, short what, void *userdata) {
        VarlinkServer *s = userdata;
        uint64_t deadline = now_usec() + VARLINK_UNPRIVILEGED_SLICE_USEC;
        Connection *c;

        while ((c = TAILQ_FIRST(&s->runnable)) && now_usec() < deadline) {
                TAILQ_REMOVE(&s->runnable, c, run_link);
                c->runnable = false;
                connection_run(c, deadline);
        }
        if (!TAILQ_EMPTY(&s->runnable)) {
                static const struct timeval now = {0, 0};
                (void) evtimer_add(s->scheduler, &now); /* the next turn, after epoll */
        }
}

static void connection_process(Connection *c) {
        if (c->uid == 0) {
                connection_run(c, 0);
                return;
        }
        connection_schedule(c);
        (void) varlink_connection_update_events(c); /* its UID may have read enough for now */
}

/* Handle complete calls, until one is answered later, replies pile up, or (`deadline`, for
 * others than root) the slice is over. */
static void connection_run(Connection *c, uint64_t deadline) {
        unsigned n = 0;

        /* A call given later holds the queue: calls are answered in order. */
        while (c->call.phase == CALL_IDLE && varlink_out_pending(c) < VARLINK_OUTPUT_HIGH_WATER) {
                if (varlink_uid_over_output(c)) {
                        c->held = true; /* until its UID's replies are read: release_held() */
                        break;
                }
                char *nul = c->in_len > c->in_scanned
                                    ? memchr(c->in + c->in_scanned, '\0', c->in_len - c->in_scanned)
                                    : NULL;
                size_t size;

                if (!nul) {
                        c->in_scanned = c->in_len;
                        break;
                }
                size = (size_t) (nul - (c->in + c->in_start));
                if (size > VARLINK_MESSAGE_MAX) {
                        c->in_scanned = (size_t) (nul - c->in); /* refused below */
                        break;
                }
                if (n++ >= VARLINK_CALLS_PER_WAKEUP || (deadline > 0 && n > 1 && now_usec() >= deadline)) {
                        /* Let others have the loop; carry on in the next turn. */
                        if (c->uid != 0)
                                connection_schedule(c);
                        else
                                event_active(c->process_event, EV_TIMEOUT, 0);
                        break;
                }
                c->in_start += size + 1;
                c->in_scanned = c->in_start;
                if (connection_handle(c, nul - size, size) < 0)
                        return;
        }

        if (c->in_scanned - c->in_start > VARLINK_MESSAGE_MAX) {
                log_debug("varlink: pid %d sent a message over %u bytes, closing", (int) c->pid,
                          VARLINK_MESSAGE_MAX);
                char err[256];
                connection_abort(c, error_name(c, "MessageTooLarge", err, sizeof(err)),
                                 varlink_params1("max", json_object_new_int64(VARLINK_MESSAGE_MAX)));
                return;
        }
        /* Keep the buffer small: drop what was handled. */
        if (c->in_start > 0) {
                memmove(c->in, c->in + c->in_start, c->in_len - c->in_start);
                c->in_len -= c->in_start;
                c->in_scanned -= c->in_start;
                c->in_start = 0;
        }
        varlink_buffer_trim(c, false);
        /* The client hung up: a stream ends; otherwise close once every complete call is answered
         * (half a message will not be completed). */
        if (c->eof && (streaming(c) || (c->call.phase == CALL_IDLE && varlink_out_pending(c) == 0 &&
                                        (c->in_len == 0 || !memchr(c->in, '\0', c->in_len))))) {
                varlink_connection_free(c);
                return;
        }
        (void) varlink_connection_update_events(c);
}

static void on_process(evutil_socket_t fd, short what, void *userdata) {
        connection_process(userdata);
}

static void on_readable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;

        for (unsigned i = 0; i < READS_PER_WAKEUP; i++) {
                ssize_t n;

                if (c->in_size - c->in_len < READ_CHUNK &&
                    varlink_buffer_resize(c, false, varlink_buffer_size_for(c->in_len + READ_CHUNK)) < 0) {
                        varlink_connection_free(c);
                        return;
                }
                n = read(c->fd, c->in + c->in_len, READ_CHUNK);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        log_debug_errno(errno, "varlink: reading from pid %d: %m", (int) c->pid);
                        varlink_connection_free(c);
                        return;
                }
                if (n == 0) {
                        c->eof = true;
                        break;
                }
                c->in_len += (size_t) n;
                /* Enough for one message of the largest size, or for the UID: handle that first. */
                if (c->in_len - c->in_start > VARLINK_MESSAGE_MAX ||
                    (!streaming(c) && varlink_uid_over_input(c)))
                        break;
        }
        if (streaming(c) && c->in_len - c->in_start > VARLINK_MESSAGE_MAX) {
                char err[256];
                log_debug("varlink: pid %d sends calls into its Monitor stream, closing", (int) c->pid);
                connection_abort(c, error_name(c, "MessageTooLarge", err, sizeof(err)),
                                 varlink_params1("max", json_object_new_int64(VARLINK_MESSAGE_MAX)));
                return;
        }
        connection_process(c);
}

/* A connection that is not read saw its client shut its side. Gone altogether, it is closed:
 * what it sent and was not handled has no one to answer to (only root's calls change anything,
 * and root's connections are never held for a cap; they stop reading only while their replies
 * pile up, and those fail to send once the client is gone). A client that only shut its sending
 * side may still read its answers: it waits for its turn, no longer watched (the watch is
 * level-triggered, as every other event of the descriptor must be). */
static void on_hangup(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;
        struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};

        if (poll(&p, 1, 0) < 0 || !(p.revents & (POLLHUP | POLLERR))) {
                c->half_closed = true;
                (void) varlink_connection_update_events(c);
                return;
        }
        log_debug("varlink: pid %d uid %u hung up while its calls were not read (%zu bytes held)", (int) c->pid,
                  (unsigned) c->uid, c->in_len - c->in_start);
        varlink_connection_free(c);
}

static void on_writable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;
        bool was_high = varlink_out_pending(c) >= VARLINK_OUTPUT_HIGH_WATER;
        int r;

        r = varlink_connection_flush(c);
        if (r < 0) {
                log_debug_errno(r, "varlink: writing to pid %d: %m", (int) c->pid);
                varlink_connection_free(c);
                return;
        }
        if (was_high && varlink_out_pending(c) < VARLINK_OUTPUT_HIGH_WATER)
                connection_process(c); /* calls were left waiting for room */
        else if (c->eof && !streaming(c) && varlink_out_pending(c) == 0)
                connection_process(c); /* answered everything: close */
        else
                (void) varlink_connection_update_events(c);
}

/* ---- accepting ---- */

static UidUsage *usage_of(const VarlinkServer *s, uid_t uid) {
        UidUsage *u;
        LIST_FOREACH(u, &s->usage, link)
                if (u->uid == uid)
                        return u;
        return NULL;
}

static size_t connections_of(const VarlinkServer *s, uid_t uid) {
        const UidUsage *u = usage_of(s, uid);
        return u ? u->n_connections : 0;
}

/* Best effort, then close: a refused client gets a reason if its socket takes it now. */
static void refuse(const VarlinkServer *s, int fd, const struct ucred *cred, unsigned max) {
        char err[256];
        snprintf(err, sizeof(err), "%s.TooManyConnections", s->info->error_interface);
        _cleanup_(json_object_putp) json_object *o =
                varlink_error_new(err, varlink_params1("max", json_object_new_int((int) max)));
        const char *text;
        size_t len;

        log_debug("varlink: refusing a connection of pid %d uid %u: %u connections", (int) cred->pid,
                  (unsigned) cred->uid, max);
        text = o ? json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len) : NULL;
        if (text)
                (void) send(fd, text, len + 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
}

/* Takes `fd`, also on failure. */
static int connection_new(VarlinkServer *s, int fd, const struct ucred *cred) {
        Connection *c = calloc(1, sizeof(*c));

        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->server = s;
        c->fd = fd;
        c->uid = cred->uid;
        c->pid = cred->pid;
        c->usage = usage_of(s, c->uid);
        if (!c->usage) {
                c->usage = calloc(1, sizeof(*c->usage));
                if (!c->usage) {
                        close(fd);
                        free(c);
                        return -ENOMEM;
                }
                c->usage->uid = c->uid;
                LIST_INSERT_HEAD(&s->usage, c->usage, link);
        }
        c->usage->n_connections++;
        LIST_INSERT_HEAD(&s->connections, c, link);
        s->n_connections++;
        c->read_event = event_new(s->base, fd, EV_READ | EV_PERSIST, on_readable, c);
        c->write_event = event_new(s->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
        c->process_event = event_new(s->base, -1, 0, on_process, c);
        c->hangup_event = event_new(s->base, fd, EV_CLOSED | EV_PERSIST, on_hangup, c);
        if (!c->read_event || !c->write_event || !c->process_event || !c->hangup_event) {
                varlink_connection_free(c);
                return -ENOMEM;
        }
        if (varlink_connection_update_events(c) < 0)
                return -ENOMEM;
        log_debug("varlink: connection of pid %d uid %u (%zu open)", (int) c->pid, (unsigned) c->uid,
                  s->n_connections);
        return 0;
}

static void on_accept_retry(evutil_socket_t fd, short what, void *userdata) {
        VarlinkServer *s = userdata;
        if (event_add(s->accept_event, NULL) < 0)
                log_error("varlink: failed to watch the socket again; no more connections are accepted");
}

static void on_accept(evutil_socket_t lfd, short what, void *userdata) {
        VarlinkServer *s = userdata;

        for (unsigned i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
                struct ucred cred = {};
                socklen_t len = sizeof(cred);
                int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), r;

                if (fd < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        if (errno == ECONNABORTED || errno == EPROTO)
                                continue;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                /* The pending connection stays in the backlog: try again later
                                 * instead of spinning on it. */
                                struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
                                log_warning_errno(errno, "varlink: failed to accept connections: %m; pausing");
                                (void) event_del(s->accept_event);
                                (void) event_add(s->accept_retry, &tv);
                                return;
                        }
                        log_warning_errno(errno, "varlink: accept failed: %m, ignoring");
                        return;
                }
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || len != sizeof(cred)) {
                        log_debug_errno(errno,
                                        "varlink: no credentials of a new connection: %m, closing it");
                        close(fd);
                        continue;
                }
                if (cred.uid == 0 ? s->n_connections >= VARLINK_CONNECTIONS_MAX
                                  : s->n_connections >=
                                            VARLINK_CONNECTIONS_MAX - VARLINK_CONNECTIONS_ROOT_RESERVED) {
                        if (s->n_refused++ == 0)
                                log_warning("varlink: %zu connections open, refusing more",
                                            s->n_connections);
                        refuse(s, fd, &cred, VARLINK_CONNECTIONS_MAX);
                        continue;
                }
                if (cred.uid != 0 && connections_of(s, cred.uid) >= VARLINK_CONNECTIONS_PER_UID_MAX) {
                        if (s->n_refused++ == 0)
                                log_warning("varlink: uid %u has %u connections open, refusing more",
                                            (unsigned) cred.uid, VARLINK_CONNECTIONS_PER_UID_MAX);
                        refuse(s, fd, &cred, VARLINK_CONNECTIONS_PER_UID_MAX);
                        continue;
                }
                r = connection_new(s, fd, &cred);
                if (r < 0)
                        log_warning_errno(r, "varlink: failed to set up a connection: %m, closing it");
        }
}

/* ---- the server ---- */

static int listen_activated(void) {
        char **names = NULL;
        int n = sd_listen_fds_with_names(0, &names), fd = -ENOENT;

        for (int i = 0; i < n; i++) {
                if (fd < 0 && streq_ptr(names[i], "varlink") &&
                    sd_is_socket_unix(SD_LISTEN_FDS_START + i, SOCK_STREAM, 1, NULL, 0) > 0)
                        fd = SD_LISTEN_FDS_START + i;
        }
        for (int i = 0; names && i < n; i++)
                free(names[i]);
        free(names);
        if (fd >= 0) {
                int fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                        return -errno;
        }
        return fd;
}

static int listen_path(const char *path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        _cleanup_(closep) int fd = -1;
        struct stat st;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* A socket left by an earlier run goes; anything else there is not ours to remove. */
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                if (unlink(path) < 0 && errno != ENOENT)
                        return -errno;
        } else if (errno != ENOENT)
                return -errno;
        /* Everyone may read status; the methods that change things check the caller. The mode
         * comes from the umask at bind(): the file never exists with another one, and nothing
         * is changed by path afterwards. */
        mode_t old = umask(0111);
        r = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
        r = r < 0 ? -errno : 0;
        umask(old);
        if (r < 0)
                return r;
        if (listen(fd, SOMAXCONN) < 0) {
                r = -errno;
                (void) unlink(path);
                return r;
        }
        return TAKE_FD(fd);
}

int varlink_server_new(struct event_base *base, const char *path, const VarlinkServerInfo *info,
                       VarlinkServer **ret) {
        _cleanup_(varlink_server_freep) VarlinkServer *s = NULL;
        int fd;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->base = base;
        s->info = info;
        s->fd = -1;
        s->output_max = VARLINK_OUTPUT_MAX;
        s->refusals = (LogRateLimit) LOG_RATELIMIT_INIT(10 * USEC_PER_SEC, 10);
        LIST_INIT(&s->connections);
        LIST_INIT(&s->usage);
        TAILQ_INIT(&s->runnable);
        s->scheduler = evtimer_new(base, on_scheduler, s);
        if (!s->scheduler)
                return -ENOMEM;

        fd = listen_activated();
        if (fd == -ENOENT) {
                fd = listen_path(path);
                if (fd < 0)
                        return fd;
                s->fd = fd;
                s->path = strdup(path);
                if (!s->path)
                        return -ENOMEM;
                log_info("varlink: listening on %s", path);
        } else if (fd < 0)
                return fd;
        else {
                s->fd = fd;
                log_info("varlink: listening on the socket passed by systemd");
        }

        s->accept_event = event_new(base, s->fd, EV_READ | EV_PERSIST, on_accept, s);
        s->accept_retry = evtimer_new(base, on_accept_retry, s);
        if (!s->accept_event || !s->accept_retry || event_add(s->accept_event, NULL) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(s);
        return 0;
}

void varlink_server_free(VarlinkServer *s) {
        if (!s)
                return;
        while (!LIST_EMPTY(&s->connections))
                varlink_connection_free(LIST_FIRST(&s->connections));
        if (s->accept_event)
                event_free(s->accept_event);
        if (s->accept_retry)
                event_free(s->accept_retry);
        if (s->scheduler)
                event_free(s->scheduler);
        if (s->fd >= 0)
                close(s->fd);
        if (s->path)
                (void) unlink(s->path);
        free(s->path);
        free(s);
}

void varlink_server_set_output_max(VarlinkServer *s, size_t max) {
        s->output_max = max;
}

size_t varlink_server_connections(const VarlinkServer *s) {
        return s ? s->n_connections : 0;
}
