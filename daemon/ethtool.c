/* ethtool.c — the driver name of a device, asked of the kernel by SIOCETHTOOL. */
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include "ethtool.h"

const char *ethtool_driver(Device *d, int fd) {
        struct ethtool_drvinfo info = {.cmd = ETHTOOL_GDRVINFO};
        struct ifreq ifr = {};
        DeviceExtra *x;
        size_t n;

        if (device_extra_get(d)->driver_looked_up)
                return d->extra->driver;
        x = device_extra(d);
        if (!x)
                return NULL; /* asked again next time */
        x->driver_looked_up = true;
        n = strlen(d->ifname);
        if (fd < 0 || n == 0 || n >= IFNAMSIZ)
                return NULL;
        memcpy(ifr.ifr_name, d->ifname, n);
        ifr.ifr_data = (void *) &info;
        if (ioctl(fd, SIOCETHTOOL, &ifr) < 0)
                return NULL;
        info.driver[sizeof(info.driver) - 1] = '\0';
        x->driver = strdup(info.driver);
        return x->driver;
}
