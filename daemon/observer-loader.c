/* observer-loader.c — bigtcpd-observer-loader (observer-loader.h): started by the daemon with
 * its socket as descriptor 3; loads and attaches the observer's eBPF object and sends the
 * descriptors, or what failed. It prints nothing of libbpf's (the daemon says what failed, once,
 * in its own words). */
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "observer-loader.h"
#include "observer.skel.h"
#include "sandbox.h"
#include "util.h"

/* Reachable until the exit: the descriptors the daemon was sent are its copies, and nothing of
 * this is freed (a link destroyed here would be closed, not detached, all the same). */
static struct observer_bpf *skel;

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
        (void) level;
        (void) fmt;
        (void) ap;
        return 0;
}

static int fail(ObserverLoaded *m, int r, const char *fmt, ...) {
        va_list ap;

        m->error = r;
        va_start(ap, fmt);
        (void) vsnprintf(m->why, sizeof(m->why), fmt, ap);
        va_end(ap);
        return r;
}

/* Open, load, attach; the descriptors into fds (*ret_n of them, observer-loader.h's order). */
static int load(ObserverLoaded *m, int fds[static _OBSERVER_FD_MAPS + OBSERVER_LINKS_MAX], size_t *ret_n) {
        char buf[128];
        size_t n = 0;
        int r;

        skel = observer_bpf__open();
        if (!skel) {
                r = errno > 0 ? -errno : -EINVAL;
                return fail(m, r, "opening the eBPF object: %s", strerror_r(-r, buf, sizeof(buf)));
        }
        r = observer_bpf__load(skel);
        if (r < 0)
                return fail(m, r, "loading the eBPF object: %s%s", strerror_r(-r, buf, sizeof(buf)),
                            r == -EPERM || r == -EACCES ? " (CAP_BPF and CAP_PERFMON needed, or lockdown forbids it)"
                                                        : "");
        r = observer_bpf__attach(skel);
        if (r < 0)
                return fail(m, r, "attaching to the tracepoints: %s", strerror_r(-r, buf, sizeof(buf)));

        const struct bpf_map *maps[_OBSERVER_FD_MAPS] = {
                [OBSERVER_FD_DEVS] = skel->maps.devs,
                [OBSERVER_FD_DROPS] = skel->maps.drops,
                [OBSERVER_FD_NEARS] = skel->maps.nears,
                [OBSERVER_FD_DELIVS] = skel->maps.delivs,
                [OBSERVER_FD_BSS] = skel->maps.bss,
        };
        struct bpf_link *links[] = {
                skel->links.observer_xmit,
                skel->links.observer_receive,
                skel->links.observer_drop,
                skel->links.observer_retransmit,
        };
        _Static_assert(ELEMENTSOF(links) <= OBSERVER_LINKS_MAX, "the links fit the message");
        for (size_t i = 0; i < ELEMENTSOF(maps); i++)
                fds[n++] = bpf_map__fd(maps[i]);
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                fds[n++] = bpf_link__fd(links[i]);
        for (size_t i = 0; i < n; i++)
                if (fds[i] < 0)
                        return fail(m, -EBADF, "the eBPF object has a map or link without a descriptor");
        m->n_links = (uint32_t) ELEMENTSOF(links);
        *ret_n = n;
        return 0;
}

int main(int argc, char *argv[]) {
        int fds[_OBSERVER_FD_MAPS + OBSERVER_LINKS_MAX];
        ObserverLoaded m = {};
        struct timespec ts;
        size_t n = 0;
        ssize_t k;

        if (argc != 1) {
                fprintf(stderr, "%s: takes no arguments; bigtcpd starts it with its socket as descriptor %d\n",
                        argv[0], SANDBOX_OUTPUT_FD);
                return 2;
        }
        libbpf_set_print(quiet_print);
        if (load(&m, fds, &n) >= 0) {
                clock_gettime(CLOCK_REALTIME, &ts);
                m.loaded_usec = (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000u;
        } else
                n = 0;
        k = sandbox_send_fds(SANDBOX_OUTPUT_FD, 0, &m, sizeof(m), fds, n);
        if (k < 0) {
                fprintf(stderr, "%s: sending the descriptors: %s\n", argv[0], strerror((int) -k));
                return 1;
        }
        return m.error < 0 ? 1 : 0;
}
