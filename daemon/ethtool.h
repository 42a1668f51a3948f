/* ethtool.h — the driver name of a device (ETHTOOL_GDRVINFO), for match.driver. */
#pragma once

#include "device.h"

/* The driver of `d`, looked up once (by name, over `fd`, any socket that takes device ioctls)
 * and cached on the device; NULL when it has none or the lookup failed. */
const char *ethtool_driver(Device *d, int fd);
