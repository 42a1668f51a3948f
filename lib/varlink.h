/* varlink.h — a varlink server (https://varlink.org) driven by a libevent loop: the listening
 * socket, one non-blocking connection per client, the wire protocol (NUL-terminated JSON calls
 * and replies, `more`, `oneway`, pipelining), org.varlink.service, and the limits that let a
 * client hurt only itself. It knows nothing of bigtcpd: the methods, their interface descriptions
 * and the names of the protocol's own errors are given to it (manager-varlink.c). */
#pragma once

#include <event2/event.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util.h"

/* Limits; the interface description documents them to clients. */
#define VARLINK_MESSAGE_MAX (2u * 1024u * 1024u)       /* bytes of one call, up to its NUL */
#define VARLINK_DEPTH_MAX 64                           /* JSON nesting */
#define VARLINK_CONNECTIONS_MAX 256u                   /* in total */
#define VARLINK_CONNECTIONS_PER_UID_MAX 32u            /* per UID other than 0 */
#define VARLINK_CONNECTIONS_ROOT_RESERVED 16u          /* of the total, only for UID 0 */
#define VARLINK_OUTPUT_HIGH_WATER (1u * 1024u * 1024u) /* unread replies: stop reading calls */
#define VARLINK_OUTPUT_MAX (16u * 1024u * 1024u)       /* unread replies: drop root's stream */
/* The same for UIDs other than 0, which are also counted per UID and together: */
#define VARLINK_STREAM_UNPRIVILEGED_MAX (1u * 1024u * 1024u)           /* drop the stream */
#define VARLINK_OUTPUT_UID_HIGH_WATER (4u * 1024u * 1024u)             /* the UID's calls wait */
#define VARLINK_OUTPUT_UID_MAX (8u * 1024u * 1024u)                    /* the UID's streams drop */
#define VARLINK_OUTPUT_UNPRIVILEGED_HIGH_WATER (16u * 1024u * 1024u)   /* all their calls wait */
#define VARLINK_OUTPUT_UNPRIVILEGED_MAX (24u * 1024u * 1024u)          /* all their streams drop */
#define VARLINK_INPUT_UID_MAX (8u * 1024u * 1024u)                     /* calls not handled yet: */
#define VARLINK_INPUT_UNPRIVILEGED_MAX (32u * 1024u * 1024u)           /*   no more are read, */
#define VARLINK_INPUT_UID_SHARE (256u * 1024u) /* but each UID's own share, beside what others hold */
#define VARLINK_CALLS_PER_WAKEUP 64u                   /* calls of one connection per loop turn */
#define VARLINK_UNPRIVILEGED_SLICE_USEC 2000u          /* calls of UIDs other than 0, per loop turn */

typedef struct VarlinkServer VarlinkServer;
/* The call a connection is answering. One at a time per connection; it lives until its last
 * reply is sent or its connection closes (then its cancel function is called). */
typedef struct VarlinkCall VarlinkCall;

/* A method: reply before returning, or later (keep `call`, set a cancel function). Return < 0
 * only when the connection cannot go on (a reply could not be queued). */
typedef int (*VarlinkMethodFn)(VarlinkCall *call, json_object *parameters, void *userdata);

typedef struct VarlinkMethod {
        const char *interface;
        const char *name;
        bool root_only; /* others get org.varlink.service.PermissionDenied */
        VarlinkMethodFn fn;
} VarlinkMethod;

typedef struct VarlinkInterface {
        const char *name;
        const char *description; /* served verbatim by GetInterfaceDescription */
        size_t description_size;
} VarlinkInterface;

typedef struct VarlinkServerInfo {
        const char *vendor, *product, *version, *url; /* GetInfo */
        const VarlinkInterface *interfaces;           /* besides org.varlink.service */
        size_t n_interfaces;
        const VarlinkMethod *methods;
        size_t n_methods;
        /* Names of the protocol's own errors (<error_interface>.ProtocolError, .MessageTooLarge,
         * .TooManyConnections). */
        const char *error_interface;
        void *userdata; /* for the methods */
} VarlinkServerInfo;

/* Listen on the socket systemd passed as "varlink" (LISTEN_FDNAMES), else bind `path` (a stale
 * socket there is removed first; -EEXIST when something else is there) with mode 0666. `info`
 * must outlive the server. */
int varlink_server_new(struct event_base *base, const char *path, const VarlinkServerInfo *info,
                       VarlinkServer **ret);
/* Closes every connection (cancelling their calls); removes the socket file if it bound it. */
void varlink_server_free(VarlinkServer *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VarlinkServer *, varlink_server_free);
/* Lower the cap on unread replies (a test knob). */
void varlink_server_set_output_max(VarlinkServer *s, size_t max);
size_t varlink_server_connections(const VarlinkServer *s);

bool varlink_call_more(const VarlinkCall *c);
uid_t varlink_call_uid(const VarlinkCall *c);
pid_t varlink_call_pid(const VarlinkCall *c);
/* Called (once) when the connection goes before the call is answered. */
void varlink_call_set_cancel(VarlinkCall *c, void (*fn)(void *userdata), void *userdata);

/* The last reply; takes `parameters` (NULL: empty). After it the call is over. */
int varlink_call_reply(VarlinkCall *c, json_object *parameters);
/* One reply of a stream (`more`); takes `parameters`. -ECONNRESET when the client has let more
 * than the output cap pile up: the connection is closed (and the call cancelled). */
int varlink_call_notify(VarlinkCall *c, json_object *parameters);
/* The same with the parameters given as JSON text (an object): one event serialized once for
 * many streams. */
int varlink_call_notify_json(VarlinkCall *c, const char *parameters, size_t size);
/* An error reply; takes `parameters`. After it the call is over. */
int varlink_call_error(VarlinkCall *c, const char *error, json_object *parameters);

/* A last reply written in pieces, for replies too large to build as one object:
 * begin, write the parameters' JSON text, end. */
int varlink_call_reply_begin(VarlinkCall *c);
int varlink_call_write(VarlinkCall *c, const char *json, size_t size);
int varlink_call_reply_end(VarlinkCall *c);

typedef struct VarlinkParam {
        const char *name;
        json_type type;
        bool required;
} VarlinkParam;

/* Check `parameters` against `spec`: no unknown keys, the required ones present, types right,
 * strings without NUL bytes. Fills `values` (NULL for absent or null optional ones). 0, or
 * -EINVAL after replying org.varlink.service.InvalidParameter. */
int varlink_call_check(VarlinkCall *c, json_object *parameters, const VarlinkParam *spec, size_t n,
                       json_object **values);
/* {key: value} as parameters; takes `value`. */
json_object *varlink_params1(const char *key, json_object *value);
