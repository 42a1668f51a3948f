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
                int fds[SANDBOX_FDS_MAX];
                size_t k;
                char byte;
                ssize_t n = sandbox_recv_fds(SANDBOX_OUTPUT_FD, 0, &byte, 1, fds, ELEMENTSOF(fds), &k);
                if (n == -EINTR)
                        continue;
                if (n <= 0)
                        sandbox_exit(0); /* the daemon closed its end, or is gone */
                for (size_t i = 0; i < k; i++)
                        (void) close(fds[i]); /* here it may wait for the kernel */
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
        /* in flight, the message holds the socket: the close below is not its last */
        if (c && c->fd >= 0)
                (void) sandbox_send_fds(c->fd, MSG_DONTWAIT, &(char){0}, 1, &fd, 1);
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
