/* manager-varlink.h — io.bigtcpd.Manager: the daemon's methods on the varlink server, each a
 * check of its parameters, an operation (operation.h) and its result as the reply; the call's
 * operation goes with the call. Monitor streams the engine's events as control_event_write()
 * gives them. */
#pragma once

#include <event2/event.h>

#include "control.h"
#include "operation.h"
#include "varlink.h"

#define VARLINK_INTERFACE "io.bigtcpd.Manager"
#define VARLINK_SOURCE_MAX 4096u /* length of a `source` parameter */

/* The shipped conf/io.bigtcpd.Manager.varlink, embedded at build time (NUL-terminated; `_size`
 * excludes the NUL). */
extern const char varlink_interface_description[];
extern const size_t varlink_interface_description_size;

typedef struct VarlinkManager VarlinkManager;

int varlink_manager_new(struct event_base *base, Control *control, const char *path, VarlinkManager **ret);
void varlink_manager_free(VarlinkManager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(VarlinkManager *, varlink_manager_free);
VarlinkServer *varlink_manager_server(VarlinkManager *m);
