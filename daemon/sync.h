/* sync.h — kernel events, dumps and verification (sync.c). */
#pragma once

#include <event2/event.h>

#include "manager.h"
#include "netlink.h"

extern const NetlinkOps sync_netlink_ops;

void start_sync(Manager *m, SyncPhase from);
/* Re-read every link, to see sizes changed behind our back; after the current sync if one runs. */
void start_verify(Manager *m);
void verify_arm(Manager *m);
void sync_verify_timer(evutil_socket_t fd, short what, void *userdata);
void sync_retry_timer(evutil_socket_t fd, short what, void *userdata);
void sync_retry_event(evutil_socket_t fd, short what, void *userdata);
void sync_stall_timer(evutil_socket_t fd, short what, void *userdata);
