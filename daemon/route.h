/* route.h — routes as far as match.route needs them: which destinations leave through which
 * device. The entries live on the devices themselves. */
#pragma once

#include <linux/netlink.h>

#include "device.h"

typedef void (*RouteChangedFn)(Device *d, void *userdata);

/* Apply an RTM_NEWROUTE/RTM_DELROUTE; calls `changed` for every device whose route set moved.
 * Returns 0, or -EBADMSG for a malformed message (which changes nothing). */
int route_message_handle(DeviceTable *t, struct nlmsghdr *nlh, RouteChangedFn changed, void *userdata);

/* Forget every route (before a re-dump); calls `changed` for each device that had some. */
void route_forget_all(DeviceTable *t, RouteChangedFn changed, void *userdata);

/* For match.route. */
bool device_has_route(const Device *d, const RoutePrefix *p);
