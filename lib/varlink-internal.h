/* varlink-internal.h — what the files of the varlink server share (varlink.c: the connections,
 * their loop, accepting, the server; varlink-call.c: a call's replies and org.varlink.service;
 * varlink-buffer.c: a connection's buffers and their accounting per UID). Private: only those
 * files include it; everybody else has varlink.h. */
#pragma once

#include <event2/event.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "log.h"
#include "util.h"
#include "varlink.h"

#define SERVICE_INTERFACE "org.varlink.service"

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
        size_t flush_at; /* varlink_connection_write() sends what waits once this much does (0: FLUSH_AT) */

        VarlinkCall call; /* the one in progress */
        bool eof;         /* the client shut down its side */

        LIST_ENTRY(Connection) link;
};

/* varlink.c: the connection loop. */

/* Closes the connection: its call cancelled, its buffers given back to its UID. */
void varlink_connection_free(Connection *c);
/* Watches the connection for what it can do now (read, write, its client hanging up). Returns
 * -ECONNRESET when it had to close the connection. */
int varlink_connection_update_events(Connection *c);

/* varlink-buffer.c: a connection's buffers and their accounting per UID. */

/* Bytes of replies queued and not sent yet. */
size_t varlink_out_pending(const Connection *c);
/* Unread replies of the connection's UID, or of everyone but root, over their marks: its calls
 * wait. */
bool varlink_uid_over_output(const Connection *c);
/* Calls of the connection's UID read and not handled yet over its marks: nothing more is read. */
bool varlink_uid_over_input(const Connection *c);
/* Bytes of the buffer of replies (`out`) or calls (`in`) allocated or freed. */
void varlink_account(Connection *c, bool out, size_t added, size_t removed);
/* A buffer's size for `needed` bytes, with some slack, in pages. */
size_t varlink_buffer_size_for(size_t needed);
/* Makes the buffer `size` bytes (0: frees it), its contents kept, and accounts for it. */
int varlink_buffer_resize(Connection *c, bool out, size_t size);
/* Frees an empty buffer (root keeps a small one) or shrinks one less than half full. */
void varlink_buffer_trim(Connection *c, bool out);
/* Sends what it can without waiting. 0, or -errno when the connection is broken. */
int varlink_connection_flush(Connection *c);
/* Queues bytes of a message. */
int varlink_connection_write(Connection *c, const char *data, size_t size);
/* Queues a whole message, with its NUL. */
int varlink_connection_append(Connection *c, const char *data, size_t size);
/* Queues one message; takes ownership of `msg` (NULL: -ENOMEM). */
int varlink_connection_send(Connection *c, json_object *msg);

/* varlink-call.c: the calls. */

/* An error message {error, parameters}; takes `parameters`. NULL when out of memory. */
json_object *varlink_error_new(const char *error, json_object *parameters);
/* The method `name` (interface.Method) names, or NULL; then `ret_no_interface` tells whether its
 * interface is unknown too. */
const VarlinkMethod *varlink_method_lookup(const VarlinkServerInfo *info, const char *name,
                                           bool *ret_no_interface);
