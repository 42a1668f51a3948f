/* closer.c — a child that closes what it is sent. It keeps nothing of the daemon's but its end of
 * the socket pair (and stderr, for a sanitizer's report), dies with the daemon (PR_SET_PDEATHSIG)
 * and ends when its socket does. A seccomp filter leaves it recvmsg(2), close(2) and its exit. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "closer.h"
#include "sandbox.h"
#include "util.h"

#define CLOSER_BATCH 16 /* descriptors one message may carry */

struct Closer {
        int fd;
        pid_t pid;
};

__attribute__((noreturn)) static void child(int fd, pid_t parent) {
        /* its socket (as SANDBOX_OUTPUT_FD) and stderr, the daemon's handlers gone: a stop signal
         * ends it, and so does the daemon's death */
        if (sandbox_detach(fd, parent) < 0)
                _exit(0);
        (void) prctl(PR_SET_NAME, "bigtcpd-closer", 0, 0, 0); /* for ps, and the tests */
        /* what it does, and nothing else: a descriptor it is sent cannot make it do more */
        static const int calls[] = {SYS_recvmsg, SYS_close, SYS_exit, SYS_exit_group};
        if (sandbox_restrict(calls, ELEMENTSOF(calls)) < 0)
                sandbox_exit(0);
        for (;;) {
                union {
                        char buf[CMSG_SPACE(sizeof(int) * CLOSER_BATCH)];
                        struct cmsghdr align;
                } control;
                char byte;
                struct iovec iov = {.iov_base = &byte, .iov_len = 1};
                struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                     .msg_controllen = sizeof(control.buf)};
                ssize_t n = recvmsg(SANDBOX_OUTPUT_FD, &msg, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        sandbox_exit(0); /* the daemon closed its end, or is gone */
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        int fds[CLOSER_BATCH];
                        memcpy(fds, CMSG_DATA(c), k * sizeof(int));
                        for (size_t i = 0; i < k && i < CLOSER_BATCH; i++)
                                (void) close(fds[i]); /* here it may wait for the kernel */
                }
        }
}

int closer_new(Closer **ret) {
        _cleanup_(freep) Closer *c = calloc(1, sizeof(*c));
        pid_t parent = getpid(), pid;
        int fd;

        if (!c)
                return -ENOMEM;
        pid = sandbox_fork_pair(&fd);
        if (pid < 0)
                return pid;
        if (pid == 0)
                child(fd, parent);
        c->fd = fd;
        c->pid = pid;
        *ret = TAKE_PTR(c);
        return 0;
}

void closer_close(Closer *c, int fd) {
        if (fd < 0)
                return;
        if (c && c->fd >= 0) {
                union {
                        char buf[CMSG_SPACE(sizeof(int))];
                        struct cmsghdr align;
                } control = {};
                char byte = 0;
                struct iovec iov = {.iov_base = &byte, .iov_len = 1};
                struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                     .msg_controllen = sizeof(control.buf)};
                struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &fd, sizeof(int));
                /* in flight, the message holds the socket: the close below is not its last */
                (void) sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        (void) close(fd);
}

void closer_free(Closer *c) {
        if (!c)
                return;
        (void) close(c->fd);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        free(c);
}

pid_t closer_pid(const Closer *c) {
        return c ? c->pid : -1;
}
