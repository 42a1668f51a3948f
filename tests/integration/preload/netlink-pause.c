/* netlink-pause.c — an LD_PRELOAD shim for the integration tests: holds the process right after
 * it sent one chosen rtnetlink request, until the test says go, so that a test can change the
 * kernel's devices between a request and the moment the daemon reads its answer.
 *
 * Does nothing unless BT_PAUSE_FIFO_DIR is set. Then, once per process, the first request that
 * matches after the file $BT_PAUSE_FIFO_DIR/arm exists:
 *   BT_PAUSE_ON=write (default): an RTM_NEWLINK with NLM_F_ACK to ifindex $BT_PAUSE_IFINDEX
 *   BT_PAUSE_ON=getlink:         an RTM_GETLINK (not a dump) of ifindex $BT_PAUSE_IFINDEX
 *   BT_PAUSE_ON=getstats:        an RTM_GETSTATS dump (of every device; $BT_PAUSE_IFINDEX is
 *                                not looked at): the kernel has put the first part of its answer,
 *                                the counters as they are now, on the socket before the shim holds
 * is sent as usual; then one byte goes into the FIFO $DIR/paused and the shim blocks until a byte
 * can be read from the FIFO $DIR/release (or BT_PAUSE_TIMEOUT_MS, default 30000, passed: a test
 * that died must not hang the daemon for ever). The test creates both FIFOs and holds `paused`
 * open for reading before it creates `arm`.
 *
 * Covers sendmsg() (libnl's nl_send), sendto() and send(). With an ASan daemon run it with
 * ASAN_OPTIONS=verify_asan_link_order=0; the shim itself is built without sanitizers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static bool done;

static bool is_netlink(int fd) {
        int domain = 0;
        socklen_t len = sizeof(domain);
        return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_NETLINK;
}

/* Does one of the netlink messages in buf[0..len) match what the test waits for? */
static bool matches(const void *buf, size_t len) {
        const char *dir = getenv("BT_PAUSE_FIFO_DIR");
        const char *idx = getenv("BT_PAUSE_IFINDEX");
        const char *on = getenv("BT_PAUSE_ON");
        bool getlink = on && strcmp(on, "getlink") == 0;
        bool getstats = on && strcmp(on, "getstats") == 0;
        char arm[4096];

        if (done || !dir || !idx)
                return false;
        int ifindex = atoi(idx);
        for (const struct nlmsghdr *h = buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
                if (getstats && h->nlmsg_type == RTM_GETSTATS && (h->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP) {
                        snprintf(arm, sizeof(arm), "%s/arm", dir);
                        return access(arm, F_OK) == 0;
                }
                if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
                        continue;
                const struct ifinfomsg *ifi = NLMSG_DATA(h);
                bool hit = getlink ? h->nlmsg_type == RTM_GETLINK && (h->nlmsg_flags & NLM_F_DUMP) != NLM_F_DUMP
                                   : !getstats && h->nlmsg_type == RTM_NEWLINK && (h->nlmsg_flags & NLM_F_ACK);
                if (!hit || ifi->ifi_index != ifindex)
                        continue;
                snprintf(arm, sizeof(arm), "%s/arm", dir);
                return access(arm, F_OK) == 0;
        }
        return false;
}

static void hold(void) {
        const char *dir = getenv("BT_PAUSE_FIFO_DIR");
        const char *t = getenv("BT_PAUSE_TIMEOUT_MS");
        char path[4096];
        char c = 'p';
        int saved = errno;

        done = true;
        /* O_RDWR opens of a FIFO never block; `release` is open before the test hears from us,
         * so its non-blocking open for writing always finds a reader. */
        snprintf(path, sizeof(path), "%s/release", dir);
        int rel = open(path, O_RDWR | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/paused", dir);
        int p = open(path, O_RDWR | O_CLOEXEC);
        if (rel < 0 || p < 0) {
                fprintf(stderr, "netlink-pause: cannot open the FIFOs in %s: %m; not holding\n", dir);
                goto out;
        }
        fprintf(stderr, "netlink-pause: holding after the request (pid %d)\n", (int) getpid());
        if (write(p, &c, 1) != 1)
                fprintf(stderr, "netlink-pause: cannot write %s: %m\n", path);
        struct pollfd pfd = {.fd = rel, .events = POLLIN};
        int r;
        do
                r = poll(&pfd, 1, t ? atoi(t) : 30000);
        while (r < 0 && errno == EINTR);
        if (r > 0)
                (void) !read(rel, &c, 1);
        fprintf(stderr, "netlink-pause: %s\n", r > 0 ? "released" : "timed out, going on");
out:
        if (rel >= 0)
                close(rel);
        if (p >= 0)
                close(p);
        errno = saved;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
        static ssize_t (*real)(int, const struct msghdr *, int);
        char copy[65536];
        const void *buf = NULL;
        size_t len = 0;
        bool hit = false;

        if (!real)
                real = (ssize_t (*)(int, const struct msghdr *, int)) dlsym(RTLD_NEXT, "sendmsg");
        if (!done && msg && msg->msg_iovlen > 0 && getenv("BT_PAUSE_FIFO_DIR") && is_netlink(fd)) {
                if (msg->msg_iovlen == 1) {
                        buf = msg->msg_iov[0].iov_base;
                        len = msg->msg_iov[0].iov_len;
                } else {
                        for (size_t i = 0; i < msg->msg_iovlen && len < sizeof(copy); i++) {
                                size_t n = msg->msg_iov[i].iov_len;
                                if (n > sizeof(copy) - len)
                                        n = sizeof(copy) - len;
                                memcpy(copy + len, msg->msg_iov[i].iov_base, n);
                                len += n;
                        }
                        buf = copy;
                }
                hit = matches(buf, len);
        }
        ssize_t r = real(fd, msg, flags);
        if (hit && r >= 0)
                hold();
        return r;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr, socklen_t alen) {
        static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
        bool hit = false;

        if (!real)
                real = (ssize_t (*)(int, const void *, size_t, int, const struct sockaddr *, socklen_t)) dlsym(
                        RTLD_NEXT, "sendto");
        if (!done && getenv("BT_PAUSE_FIFO_DIR") && is_netlink(fd))
                hit = matches(buf, len);
        ssize_t r = real(fd, buf, len, flags, addr, alen);
        if (hit && r >= 0)
                hold();
        return r;
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
        static ssize_t (*real)(int, const void *, size_t, int);
        bool hit = false;

        if (!real)
                real = (ssize_t (*)(int, const void *, size_t, int)) dlsym(RTLD_NEXT, "send");
        if (!done && getenv("BT_PAUSE_FIFO_DIR") && is_netlink(fd))
                hit = matches(buf, len);
        ssize_t r = real(fd, buf, len, flags);
        if (hit && r >= 0)
                hold();
        return r;
}
