/* observer-loader.h — what bigtcpd-observer-loader hands the daemon. The loader is a program of
 * its own, the only one linking libbpf: it opens the observer's eBPF object, loads it (libbpf
 * reads the kernel's BTF, megabytes of it, and the verifier checks each program), attaches the
 * programs, sends one message on the socket it was started with (descriptor 3) and exits. The
 * daemon keeps the descriptors it was sent: the maps it reads and the links that keep the
 * programs attached for as long as it holds them, and never pays for the load in its own
 * memory. */
#pragma once

#include <stdint.h>

/* The descriptors the message carries after success, in this order: the maps, then one link for
 * each program. */
typedef enum ObserverFd {
        OBSERVER_FD_DEVS,
        OBSERVER_FD_DROPS,
        OBSERVER_FD_NEARS,
        OBSERVER_FD_DELIVS,
        OBSERVER_FD_BSS, /* the object's global data (one entry): delivs_on */
        _OBSERVER_FD_MAPS,
} ObserverFd;
#define OBSERVER_LINKS_MAX 8u

typedef struct ObserverLoaded {
        int32_t error;        /* 0: loaded and attached; else -errno, and no descriptor comes */
        uint32_t n_links;
        uint64_t loaded_usec; /* CLOCK_REALTIME */
        char why[200];        /* with an error: what failed, NUL-terminated */
} ObserverLoaded;

/* The program's name, as installed in LIBEXECDIR/bigtcpd and built beside the daemon. */
#define OBSERVER_LOADER_NAME "bigtcpd-observer-loader"
