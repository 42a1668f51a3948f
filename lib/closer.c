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
        int fd;    /* -1: its child is gone */
        pid_t pid; /* the last child made; -1 without one */
        struct event_base *base;
        SandboxReaper *reaper; /* with a base: reaps the child when it dies */
        SandboxGoneFn gone;
        void *userdata;
};

__attribute__((noreturn)) static void child(int fd, pid_t parent, const void *arg) {
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

static void on_gone(pid_t pid, int status, void *userdata) {
        Closer *c = userdata;

        if (c->fd >= 0)
                (void) close(c->fd);
        c->fd = -1;
        if (c->gone)
                c->gone(pid, status, c->userdata);
}

/* A child and its watch, into c (whose last child, if any, is reaped). */
static int spawn(Closer *c) {
        return sandbox_spawn(c->base, child, NULL, on_gone, c, &c->fd, &c->pid, &c->reaper);
}

int closer_new(struct event_base *base, SandboxGoneFn gone, void *userdata, Closer **ret) {
        _cleanup_(freep) Closer *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return -ENOMEM;
        *c = (Closer){.fd = -1, .pid = -1, .base = base, .gone = gone, .userdata = userdata};
        r = spawn(c);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

void closer_close(Closer *c, int fd) {
        if (fd < 0)
                return;
        /* in flight, the message holds the socket: the close below is not its last */
        if (c && c->fd >= 0 && sandbox_peer_gone(sandbox_send_fds(c->fd, MSG_DONTWAIT, &(char){0}, 1, &fd, 1))) {
                /* its child is gone (reaped from the loop): until another is made, closes are here */
                (void) close(c->fd);
                c->fd = -1;
        }
        (void) close(fd);
}

bool closer_running(const Closer *c) {
        return c && c->fd >= 0;
}

int closer_restart(Closer *c) {
        if (!c)
                return -EINVAL;
        if (c->fd >= 0)
                return -EBUSY;
        sandbox_reaper_free(TAKE_PTR(c->reaper), true);
        if (!c->base && c->pid > 0)
                while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        c->pid = -1;
        return spawn(c);
}

void closer_free(Closer *c) {
        if (!c)
                return;
        if (c->fd >= 0)
                (void) close(c->fd);
        if (c->reaper)
                sandbox_reaper_free(c->reaper, false); /* it ends once it closed what it was given */
        else if (c->pid > 0)
                while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        free(c);
}

pid_t closer_pid(const Closer *c) {
        return c && c->fd >= 0 ? c->pid : -1;
}
