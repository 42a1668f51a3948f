/* varlink.h — the varlink server (io.bigtcpd.Manager and org.varlink.service) on the daemon's
 * unix socket, driven by the manager's event loop. */
#pragma once

#include <stddef.h>

#include "manager.h"

#define VARLINK_INTERFACE "io.bigtcpd.Manager"

/* Limits; the interface description documents them to clients. */
#define VARLINK_MESSAGE_MAX (2u * 1024u * 1024u)       /* bytes of one call, up to its NUL */
#define VARLINK_DEPTH_MAX 64                           /* JSON nesting */
#define VARLINK_CONNECTIONS_MAX 256u                   /* in total */
#define VARLINK_CONNECTIONS_PER_UID_MAX 32u            /* per UID other than 0 */
#define VARLINK_CONNECTIONS_ROOT_RESERVED 16u          /* of the total, only for UID 0 */
#define VARLINK_OUTPUT_HIGH_WATER (1u * 1024u * 1024u) /* unread replies: stop reading calls */
#define VARLINK_OUTPUT_MAX (16u * 1024u * 1024u)       /* unread replies: drop the connection */
#define VARLINK_CALLS_PER_WAKEUP 64u                   /* calls of one connection per loop turn */
#define VARLINK_SOURCE_MAX 4096u                       /* length of a `source` parameter */

/* The shipped conf/io.bigtcpd.Manager.varlink, embedded at build time (NUL-terminated;
 * `_size` excludes the NUL). */
extern const char varlink_interface_description[];
extern const size_t varlink_interface_description_size;

typedef struct VarlinkServer VarlinkServer;

/* Listen on the socket systemd passed as "varlink" (LISTEN_FDNAMES), else bind `path` (a stale
 * socket there is removed first) with mode 0666. */
int varlink_server_new(Manager *m, const char *path, VarlinkServer **ret);
/* Lower the cap on unread replies (a test knob: BIGTCPD_VARLINK_OUTPUT_MAX). */
void varlink_server_set_output_max(VarlinkServer *s, size_t max);
/* Closes every connection; removes the socket file if this server created it. */
void varlink_server_free(VarlinkServer *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VarlinkServer *, varlink_server_free);

/* The connections open now (for tests and the log). */
size_t varlink_server_connections(const VarlinkServer *s);
