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
 * share back. */
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

#include <malloc.h>

#include "log.h"
#include "varlink.h"

#define READ_CHUNK (64u * 1024u)
#define READS_PER_WAKEUP 4u
#define ACCEPTS_PER_WAKEUP 64u
#define BUFFER_KEEP_MAX (256u * 1024u) /* root's larger buffers are freed once empty; others' all */
#define BUFFER_SHRINK_MIN (64u * 1024u) /* others' buffers above this shrink once less than half full */
#define BUFFER_SLACK_MAX (1024u * 1024u) /* growth: a quarter more than needed, at most this more */
/* A reply written piece by piece (ListDevices of 10000 devices: 7 MB) goes out while it is made
 * once this much of it waits: the buffer stays small and warm instead of growing (and faulting in)
 * to the whole reply. */
#define FLUSH_AT (64u * 1024u)
#define TRIM_AFTER (4u * 1024u * 1024u)   /* others' buffers once held this much: trimmed when freed */
#define SERVICE_INTERFACE "org.varlink.service"

static const char service_interface_description[] =
        "# The Varlink Service Interface is provided by every varlink service. It\n"
        "# describes the service and the interfaces it implements.\n"
        "interface org.varlink.service\n"
        "\n"
        "# Get a list of all the interfaces a service provides and information\n"
        "# about the implementation.\n"
        "method GetInfo() -> (\n"
        "  vendor: string,\n"
        "  product: string,\n"
        "  version: string,\n"
        "  url: string,\n"
        "  interfaces: []string\n"
        ")\n"
        "\n"
        "# Get the description of an interface that is implemented by this service.\n"
        "method GetInterfaceDescription(interface: string) -> (description: string)\n"
        "\n"
        "# The requested interface was not found.\n"
        "error InterfaceNotFound (interface: string)\n"
        "\n"
        "# The requested method was not found\n"
        "error MethodNotFound (method: string)\n"
        "\n"
        "# The interface defines the requested method, but the service does not\n"
        "# implement it.\n"
        "error MethodNotImplemented (method: string)\n"
        "\n"
        "# One of the passed parameters is invalid.\n"
        "error InvalidParameter (parameter: string)\n"
        "\n"
        "# Client is denied access\n"
        "error PermissionDenied ()\n"
        "\n"
        "# Method is expected to be called with 'more' set to true, but wasn't\n"
        "error ExpectedMore ()\n";

typedef struct Connection Connection;

/* What the connections of one UID hold: their buffers count against the UID, not only against
 * each connection, or 32 connections would hold 32 times as much. What counts is what is
 * allocated (not only what is in it): the caps are of memory. */
typedef struct UidUsage {
        uid_t uid;
        size_t n_connections;
        size_t out_bytes; /* allocated for replies not read yet */
        size_t in_bytes;  /* allocated for calls read and not yet handled */
        LIST_ENTRY(UidUsage) link;
} UidUsage;

struct VarlinkServer {
        struct event_base *base;
        const VarlinkServerInfo *info;
        int fd;
        char *path; /* the socket file we bound and remove at the end; NULL when activated */
        struct event *accept_event;
        struct event *accept_retry; /* accept paused after EMFILE/ENFILE */
        LIST_HEAD(, Connection) connections;
        size_t n_connections;
        unsigned long long n_refused;
        size_t output_max;
        LIST_HEAD(, UidUsage) usage;
        size_t unprivileged_out; /* allocated for unread replies of every UID other than 0 */
        size_t unprivileged_in;  /* … for their calls read and not yet handled */
        bool trim_owed;          /* they held TRIM_AFTER since the last malloc_trim() */
        TAILQ_HEAD(, Connection) runnable;
        struct event *scheduler;
        LogRateLimit refusals;
};

typedef enum CallPhase {
        CALL_IDLE,      /* no call in progress */
        CALL_RUNNING,   /* its method runs now */
        CALL_DEFERRED,  /* its method returned without the last reply: it comes later */
        _CALL_PHASE_MAX,
        _CALL_PHASE_INVALID = -EINVAL,
} CallPhase;

struct VarlinkCall {
        Connection *connection;
        CallPhase phase;
        bool more, oneway;
        void (*cancel)(void *userdata);
        void *cancel_userdata;
};

struct Connection {
        VarlinkServer *server;
        int fd;
        uid_t uid;
        pid_t pid;
        UidUsage *usage;
        bool held; /* waits for its UID's share: its replies read, or its calls handled */
        bool runnable; /* in the server's queue of calls to handle (UIDs other than 0) */
        TAILQ_ENTRY(Connection) run_link;
        struct event *read_event, *write_event, *process_event;
        struct event *hangup_event; /* while it is not read: the client hanging up */
        bool reading, writing, watching_hangup;
        bool half_closed; /* seen by the hang-up watch: the client shut its sending side only */

        /* Unprocessed input is in[in_start, in_len); in[in_start, in_scanned) has no NUL. */
        char *in;
        size_t in_start, in_scanned, in_len, in_size;
        /* Replies not yet sent: out[out_start, out_len). */
        char *out;
        size_t out_start, out_len, out_size;
        size_t flush_at; /* connection_write() sends what waits once this much does (0: FLUSH_AT) */

        VarlinkCall call; /* the one in progress */
        bool eof;         /* the client shut down its side */

        LIST_ENTRY(Connection) link;
};

static size_t out_pending(const Connection *c) {
        return c->out_len - c->out_start;
}

/* Unread replies of the connection's UID, or of everyone but root, over their marks: its calls
 * wait. Root's are never held for others. */
static bool uid_over_output(const Connection *c) {
        return c->uid != 0 && (c->usage->out_bytes >= VARLINK_OUTPUT_UID_HIGH_WATER ||
                               c->server->unprivileged_out >= VARLINK_OUTPUT_UNPRIVILEGED_HIGH_WATER);
}

/* The same for calls read and not handled yet: nothing more is read. Below its own share a UID is
 * read whatever the others hold. */
static bool input_over(size_t mine, size_t all) {
        return mine >= VARLINK_INPUT_UID_MAX || (mine >= VARLINK_INPUT_UID_SHARE && all >= VARLINK_INPUT_UNPRIVILEGED_MAX);
}

static bool uid_over_input(const Connection *c) {
        return c->uid != 0 && input_over(c->usage->in_bytes, c->server->unprivileged_in);
}

/* Connections held for their UID's share (uid 0: of every UID): let them go on. */
static void release_held(VarlinkServer *s, uid_t uid) {
        Connection *c;
        LIST_FOREACH(c, &s->connections, link)
                if (c->held && (uid == 0 || c->uid == uid) && !uid_over_output(c) && !uid_over_input(c)) {
                        c->held = false;
                        event_active(c->process_event, EV_TIMEOUT, 0);
                }
}

/* Bytes of the buffer of replies (`out`) or calls (`in`) allocated or freed. */
static void account(Connection *c, bool out, size_t added, size_t removed) {
        VarlinkServer *s = c->server;
        size_t *mine = out ? &c->usage->out_bytes : &c->usage->in_bytes;
        size_t *all = out ? &s->unprivileged_out : &s->unprivileged_in;
        size_t mark = out ? VARLINK_OUTPUT_UID_HIGH_WATER : VARLINK_INPUT_UID_MAX;
        size_t all_mark = out ? VARLINK_OUTPUT_UNPRIVILEGED_HIGH_WATER : VARLINK_INPUT_UNPRIVILEGED_MAX;
        bool was_over = out ? *mine >= mark : input_over(*mine, *all), all_was_over = *all >= all_mark;

        *mine = *mine + added - removed;
        if (c->uid == 0)
                return;
        *all = *all + added - removed;
        if (s->unprivileged_in + s->unprivileged_out >= TRIM_AFTER)
                s->trim_owed = true;
        if (removed == 0)
                return;
#ifdef __GLIBC__
        /* Everything others than root made the daemon hold is freed: give it back to the system
         * (malloc keeps freed memory below its mmap threshold, which grows with what was freed). */
        if (s->trim_owed && s->unprivileged_in + s->unprivileged_out == 0) {
                s->trim_owed = false;
                (void) malloc_trim(0);
        }
#endif
        if (all_was_over && *all < all_mark)
                release_held(s, 0);
        else if (was_over && (out ? *mine < mark : !input_over(*mine, *all)))
                release_held(s, c->uid);
}

/* A stream (`more`) owns the connection: later calls are read but never answered. */
static bool streaming(const Connection *c) {
        return c->call.phase == CALL_DEFERRED && c->call.more;
}

/* ---- connection life cycle ---- */

static void connection_free(Connection *c) {
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
                account(c, true, 0, c->out_size);
                account(c, false, 0, c->in_size);
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

/* A buffer's size for `needed` bytes: a quarter more (at most BUFFER_SLACK_MAX), in pages; never
 * twice what is needed, which would let a UID's allocations reach twice its caps. */
static size_t buffer_size_for(size_t needed) {
        size_t slack = needed / 4 < BUFFER_SLACK_MAX ? needed / 4 : BUFFER_SLACK_MAX;
        return (needed + slack + 4095) & ~(size_t) 4095;
}

/* Make the buffer `size` bytes (0: free it), its contents kept (they must fit), and account for it. */
static int buffer_resize(Connection *c, bool out, size_t size) {
        char **buf = out ? &c->out : &c->in;
        size_t *cur = out ? &c->out_size : &c->in_size;

        if (size == *cur)
                return 0;
        if (size == 0) {
                *buf = mfree(*buf);
        } else {
                char *n = realloc(*buf, size);
                if (!n)
                        return -ENOMEM;
                *buf = n;
        }
        if (size > *cur)
                account(c, out, size - *cur, 0);
        else
                account(c, out, 0, *cur - size);
        *cur = size;
        return 0;
}

/* An empty buffer of others than root goes (root's is kept up to BUFFER_KEEP_MAX); a large one
 * less than half full shrinks to what it holds. `start` and `len` bound what it holds. */
static void buffer_trim(Connection *c, bool out) {
        char *buf = out ? c->out : c->in;
        size_t *start = out ? &c->out_start : &c->in_start, *len = out ? &c->out_len : &c->in_len;
        size_t size = out ? c->out_size : c->in_size, held = *len - *start;

        if (held == 0 && (c->uid != 0 || size > BUFFER_KEEP_MAX)) {
                *start = *len = 0;
                if (!out)
                        c->in_scanned = 0;
                (void) buffer_resize(c, out, 0);
                return;
        }
        if (c->uid == 0 || size <= BUFFER_SHRINK_MIN || held * 2 >= size)
                return;
        if (*start > 0) {
                memmove(buf, buf + *start, held);
                if (!out)
                        c->in_scanned -= *start;
                *len = held;
                *start = 0;
        }
        (void) buffer_resize(c, out, buffer_size_for(held)); /* a failed shrink keeps the larger one */
}

/* Sends what it can without waiting. 0, or -errno when the connection is broken. */
static int connection_flush(Connection *c) {
        while (out_pending(c) > 0) {
                ssize_t n = send(c->fd, c->out + c->out_start, out_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                c->out_start += (size_t) n;
        }
        if (c->out_start == c->out_len)
                c->out_start = c->out_len = 0;
        /* An idle connection keeps no big buffer from a big reply. */
        buffer_trim(c, true);
        return 0;
}

/* Queues bytes of a message; `connection_append()` queues a whole one, with its NUL. */
static int connection_write(Connection *c, const char *data, size_t size) {
        if (size == 0)
                return 0;
        if (out_pending(c) >= (c->flush_at ?: FLUSH_AT)) {
                (void) connection_flush(c); /* a broken connection is found where it is waited on */
                /* a client that does not read is tried again only after as much more */
                c->flush_at = out_pending(c) + FLUSH_AT;
        }
        /* Compact first: the start of the buffer is sent already. */
        if (c->out_start > 0 && c->out_len + size > c->out_size) {
                memmove(c->out, c->out + c->out_start, out_pending(c));
                c->out_len -= c->out_start;
                c->out_start = 0;
        }
        if (c->out_len + size > c->out_size) {
                int r = buffer_resize(c, true, buffer_size_for(c->out_len + size));
                if (r < 0)
                        return r;
        }
        memcpy(c->out + c->out_len, data, size);
        c->out_len += size;
        return 0;
}

static int connection_append(Connection *c, const char *data, size_t size) {
        int r = connection_write(c, data, size);
        return r < 0 ? r : connection_write(c, "", 1);
}

/* Appends one message; takes ownership of `msg`. */
static int connection_send(Connection *c, json_object *msg) {
        _cleanup_(json_object_putp) json_object *o = msg;
        const char *text;
        size_t len;

        if (!o)
                return -ENOMEM;
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                 &len);
        if (!text)
                return -ENOMEM;
        return connection_append(c, text, len);
}

static json_object *reply_new(json_object *parameters, bool continues) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(parameters);
                return NULL;
        }
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        if (continues)
                json_object_object_add(o, "continues", json_object_new_boolean(true));
        return o;
}

static json_object *error_new(const char *error, json_object *parameters) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(parameters);
                return NULL;
        }
        json_object_object_add(o, "error", json_object_new_string(error));
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        return o;
}

json_object *varlink_params1(const char *key, json_object *value) {
        json_object *o = json_object_new_object();
        if (!o) {
                json_object_put(value);
                return NULL;
        }
        json_object_object_add(o, key, value);
        return o;
}

static int connection_update_events(Connection *c);

/* End the connection after one error reply, sent if the socket takes it now: a client that has
 * misbehaved gets no buffer and no time. */
static void connection_abort(Connection *c, const char *error, json_object *parameters) {
        (void) connection_send(c, error_new(error, parameters));
        (void) connection_flush(c);
        connection_free(c);
}

static const char *error_name(const Connection *c, const char *name, char *buf, size_t size) {
        snprintf(buf, size, "%s.%s", c->server->info->error_interface, name);
        return buf;
}

/* Returns -ECONNRESET when it had to close the connection. */
static int connection_update_events(Connection *c) {
        /* Streams keep reading, to see the client go away; their input is not parsed and stays
         * capped. Others stop reading while replies pile up. */
        if (!streaming(c) && uid_over_input(c))
                c->held = true; /* until calls of its UID are handled: release_held() */
        bool want_read = !c->eof && c->in_len - c->in_start <= VARLINK_MESSAGE_MAX &&
                         (streaming(c) || (out_pending(c) < VARLINK_OUTPUT_HIGH_WATER && !c->held));
        bool want_write = out_pending(c) > 0;
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
        connection_free(c);
        return -ECONNRESET;
}

/* ---- calls ---- */

bool varlink_call_more(const VarlinkCall *c) {
        return c->more;
}

uid_t varlink_call_uid(const VarlinkCall *c) {
        return c->connection->uid;
}

pid_t varlink_call_pid(const VarlinkCall *c) {
        return c->connection->pid;
}

void varlink_call_set_cancel(VarlinkCall *c, void (*fn)(void *userdata), void *userdata) {
        c->cancel = fn;
        c->cancel_userdata = userdata;
}

/* The call is over: a call given later resumes the connection's queue. */
static void call_done(VarlinkCall *call) {
        Connection *c = call->connection;
        bool was_deferred = call->phase == CALL_DEFERRED;

        call->phase = CALL_IDLE;
        call->cancel = NULL;
        call->cancel_userdata = NULL;
        if (was_deferred)
                event_active(c->process_event, EV_TIMEOUT, 0);
}

/* Queue one message of the call (nothing for oneway calls). -ECONNRESET when the connection had
 * to be closed (from a reply given later, where nobody else would close it). */
static int call_send(VarlinkCall *call, json_object *msg, bool last) {
        Connection *c = call->connection;
        bool inside = call->phase == CALL_RUNNING; /* from the method itself, not later */
        int r = 0;

        if (call->oneway)
                json_object_put(msg);
        else
                r = connection_send(c, msg);
        if (last)
                call_done(call);
        if (r < 0) {
                if (inside)
                        return r; /* connection_handle() closes it */
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                connection_free(c);
                return -ECONNRESET;
        }
        if (!inside)
                (void) connection_update_events(c);
        return 0;
}

int varlink_call_reply(VarlinkCall *c, json_object *parameters) {
        return call_send(c, reply_new(parameters, false), true);
}

int varlink_call_error(VarlinkCall *c, const char *error, json_object *parameters) {
        return call_send(c, error_new(error, parameters), true);
}

/* A stream the client does not read is cut off: root's at the output cap, others' much earlier,
 * and also when their UID (or everyone but root) holds too much. */
static bool stream_over(const Connection *c) {
        const VarlinkServer *s = c->server;
        if (out_pending(c) > s->output_max)
                return true;
        return c->uid != 0 && (out_pending(c) > VARLINK_STREAM_UNPRIVILEGED_MAX ||
                               c->usage->out_bytes > VARLINK_OUTPUT_UID_MAX ||
                               s->unprivileged_out > VARLINK_OUTPUT_UNPRIVILEGED_MAX);
}

int varlink_call_notify_json(VarlinkCall *call, const char *parameters, size_t size) {
        static const char head[] = "{\"parameters\":", tail[] = ",\"continues\":true}";
        Connection *c = call->connection;
        int r;

        if (stream_over(c)) {
                log_warning("varlink: pid %d uid %u does not read its Monitor stream (%zu bytes unread), closing it",
                            (int) c->pid, (unsigned) c->uid, out_pending(c));
                if (call->phase == CALL_RUNNING)
                        return -ENOBUFS;
                connection_free(c);
                return -ECONNRESET;
        }
        if (call->oneway)
                return 0;
        r = connection_write(c, head, sizeof(head) - 1);
        if (r >= 0)
                r = connection_write(c, parameters, size);
        if (r >= 0)
                r = connection_append(c, tail, sizeof(tail) - 1);
        if (r < 0) {
                /* half a message may be queued: the connection cannot go on */
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                if (call->phase == CALL_RUNNING)
                        return r;
                connection_free(c);
                return -ECONNRESET;
        }
        if (call->phase != CALL_RUNNING)
                (void) connection_update_events(c);
        return 0;
}

int varlink_call_notify(VarlinkCall *call, json_object *parameters) {
        _cleanup_(json_object_putp) json_object *o = parameters ?: json_object_new_object();
        const char *text;
        size_t len;

        text = o ? json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
                 : NULL;
        if (!text)
                return -ENOMEM;
        return varlink_call_notify_json(call, text, len);
}

int varlink_call_reply_begin(VarlinkCall *call) {
        static const char head[] = "{\"parameters\":";
        return call->oneway ? 0 : connection_write(call->connection, head, sizeof(head) - 1);
}

int varlink_call_write(VarlinkCall *call, const char *json, size_t size) {
        return call->oneway ? 0 : connection_write(call->connection, json, size);
}

int varlink_call_reply_end(VarlinkCall *call) {
        Connection *c = call->connection;
        bool inside = call->phase == CALL_RUNNING;
        int r = call->oneway ? 0 : connection_append(c, "}", 1);

        call_done(call);
        if (r < 0 && !inside) {
                log_warning_errno(r, "varlink: failed to answer pid %d: %m, closing the connection", (int) c->pid);
                connection_free(c);
                return -ECONNRESET;
        }
        if (r >= 0 && !inside)
                (void) connection_update_events(c);
        return r;
}

static json_object *invalid_parameter(const char *name) {
        return error_new("org.varlink.service.InvalidParameter",
                         varlink_params1("parameter", json_object_new_string(name)));
}

static json_object *check_params(json_object *params, const VarlinkParam *spec, size_t n,
                                 json_object **values) {
        if (params) {
                json_object_object_foreach(params, key, val) {
                        bool known = false;
                        (void) val;
                        for (size_t i = 0; i < n && !known; i++)
                                known = streq_ptr(key, spec[i].name);
                        if (!known)
                                return invalid_parameter(key);
                }
        }
        for (size_t i = 0; i < n; i++) {
                json_object *v = params ? json_object_object_get(params, spec[i].name) : NULL;
                values[i] = NULL;
                if (!v) {
                        if (spec[i].required)
                                return invalid_parameter(spec[i].name);
                        continue;
                }
                if (!json_object_is_type(v, spec[i].type))
                        return invalid_parameter(spec[i].name);
                if (spec[i].type == json_type_string &&
                    strlen(json_object_get_string(v)) != (size_t) json_object_get_string_len(v))
                        return invalid_parameter(spec[i].name);
                values[i] = v;
        }
        return NULL;
}

int varlink_call_check(VarlinkCall *c, json_object *parameters, const VarlinkParam *spec, size_t n,
                       json_object **values) {
        json_object *e = check_params(parameters, spec, n, values);
        if (!e)
                return 0;
        (void) call_send(c, e, true);
        return -EINVAL;
}

/* ---- org.varlink.service ---- */

static int method_get_info(VarlinkCall *call, json_object *params, void *userdata) {
        const VarlinkServerInfo *info = call->connection->server->info;
        json_object *p, *l;

        if (varlink_call_check(call, params, NULL, 0, NULL) < 0)
                return 0;
        p = json_object_new_object();
        l = json_object_new_array();
        if (!p || !l) {
                json_object_put(p);
                json_object_put(l);
                return -ENOMEM;
        }
        json_object_object_add(p, "vendor", json_object_new_string(info->vendor));
        json_object_object_add(p, "product", json_object_new_string(info->product));
        json_object_object_add(p, "version", json_object_new_string(info->version));
        json_object_object_add(p, "url", json_object_new_string(info->url));
        for (size_t i = 0; i < info->n_interfaces; i++)
                json_object_array_add(l, json_object_new_string(info->interfaces[i].name));
        json_object_array_add(l, json_object_new_string(SERVICE_INTERFACE));
        json_object_object_add(p, "interfaces", l);
        return varlink_call_reply(call, p);
}

static int method_get_interface_description(VarlinkCall *call, json_object *params, void *userdata) {
        static const VarlinkParam spec[] = {{"interface", json_type_string, true}};
        const VarlinkServerInfo *info = call->connection->server->info;
        json_object *v[ELEMENTSOF(spec)];
        const char *iface, *text = NULL;
        size_t len = 0;

        if (varlink_call_check(call, params, spec, ELEMENTSOF(spec), v) < 0)
                return 0;
        iface = json_object_get_string(v[0]);
        for (size_t i = 0; i < info->n_interfaces && !text; i++)
                if (streq_ptr(iface, info->interfaces[i].name)) {
                        text = info->interfaces[i].description;
                        len = info->interfaces[i].description_size;
                }
        if (!text && streq_ptr(iface, SERVICE_INTERFACE)) {
                text = service_interface_description;
                len = sizeof(service_interface_description) - 1;
        }
        if (!text)
                return varlink_call_error(call, SERVICE_INTERFACE ".InterfaceNotFound",
                                          varlink_params1("interface", json_object_new_string(iface)));
        return varlink_call_reply(call, varlink_params1("description", json_object_new_string_len(text, (int) len)));
}

static const VarlinkMethod service_methods[] = {
        {SERVICE_INTERFACE, "GetInfo", false, method_get_info},
        {SERVICE_INTERFACE, "GetInterfaceDescription", false, method_get_interface_description},
};

/* ---- the wire protocol ---- */

static bool interface_known(const VarlinkServerInfo *info, const char *name, size_t len) {
        if (len == strlen(SERVICE_INTERFACE) && strncmp(name, SERVICE_INTERFACE, len) == 0)
                return true;
        for (size_t i = 0; i < info->n_methods; i++)
                if (strlen(info->methods[i].interface) == len && strncmp(name, info->methods[i].interface, len) == 0)
                        return true;
        return false;
}

static const VarlinkMethod *method_lookup(const VarlinkServerInfo *info, const char *name, bool *ret_no_interface) {
        const char *dot = strrchr(name, '.');

        *ret_no_interface = false;
        if (!dot)
                return NULL;
        size_t len = (size_t) (dot - name);
        for (size_t k = 0; k < 2; k++) {
                const VarlinkMethod *table = k == 0 ? service_methods : info->methods;
                size_t n = k == 0 ? ELEMENTSOF(service_methods) : info->n_methods;
                for (size_t i = 0; i < n; i++)
                        if (strlen(table[i].interface) == len && strncmp(name, table[i].interface, len) == 0 &&
                            streq_ptr(dot + 1, table[i].name))
                                return &table[i];
        }
        *ret_no_interface = !interface_known(info, name, len);
        return NULL;
}

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
                connection_free(c);
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
        m = method_lookup(c->server->info, name, &no_interface);
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
                connection_free(c);
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
        (void) connection_update_events(c); /* its UID may have read enough for now */
}

/* Handle complete calls, until one is answered later, replies pile up, or (`deadline`, for
 * others than root) the slice is over. */
static void connection_run(Connection *c, uint64_t deadline) {
        unsigned n = 0;

        /* A call given later holds the queue: calls are answered in order. */
        while (c->call.phase == CALL_IDLE && out_pending(c) < VARLINK_OUTPUT_HIGH_WATER) {
                if (uid_over_output(c)) {
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
        buffer_trim(c, false);
        /* The client hung up: a stream ends; otherwise close once every complete call is answered
         * (half a message will not be completed). */
        if (c->eof && (streaming(c) || (c->call.phase == CALL_IDLE && out_pending(c) == 0 &&
                                        (c->in_len == 0 || !memchr(c->in, '\0', c->in_len))))) {
                connection_free(c);
                return;
        }
        (void) connection_update_events(c);
}

static void on_process(evutil_socket_t fd, short what, void *userdata) {
        connection_process(userdata);
}

static void on_readable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;

        for (unsigned i = 0; i < READS_PER_WAKEUP; i++) {
                ssize_t n;

                if (c->in_size - c->in_len < READ_CHUNK &&
                    buffer_resize(c, false, buffer_size_for(c->in_len + READ_CHUNK)) < 0) {
                        connection_free(c);
                        return;
                }
                n = read(c->fd, c->in + c->in_len, READ_CHUNK);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        log_debug_errno(errno, "varlink: reading from pid %d: %m", (int) c->pid);
                        connection_free(c);
                        return;
                }
                if (n == 0) {
                        c->eof = true;
                        break;
                }
                c->in_len += (size_t) n;
                /* Enough for one message of the largest size, or for the UID: handle that first. */
                if (c->in_len - c->in_start > VARLINK_MESSAGE_MAX || (!streaming(c) && uid_over_input(c)))
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
                (void) connection_update_events(c);
                return;
        }
        log_debug("varlink: pid %d uid %u hung up while its calls were not read (%zu bytes held)", (int) c->pid,
                  (unsigned) c->uid, c->in_len - c->in_start);
        connection_free(c);
}

static void on_writable(evutil_socket_t fd, short what, void *userdata) {
        Connection *c = userdata;
        bool was_high = out_pending(c) >= VARLINK_OUTPUT_HIGH_WATER;
        int r;

        r = connection_flush(c);
        if (r < 0) {
                log_debug_errno(r, "varlink: writing to pid %d: %m", (int) c->pid);
                connection_free(c);
                return;
        }
        if (was_high && out_pending(c) < VARLINK_OUTPUT_HIGH_WATER)
                connection_process(c); /* calls were left waiting for room */
        else if (c->eof && !streaming(c) && out_pending(c) == 0)
                connection_process(c); /* answered everything: close */
        else
                (void) connection_update_events(c);
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
        _cleanup_(json_object_putp) json_object *o = error_new(err, varlink_params1("max", json_object_new_int((int) max)));
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
                connection_free(c);
                return -ENOMEM;
        }
        if (connection_update_events(c) < 0)
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
                connection_free(LIST_FIRST(&s->connections));
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
