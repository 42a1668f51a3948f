/* sandbox.c — a worker child's confinement: descriptors, privileges, the parent's death, and a
 * seccomp filter written as classic BPF (no libseccomp). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"
#include "util.h"

#if defined(__x86_64__)
#define SANDBOX_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SANDBOX_ARCH AUDIT_ARCH_AARCH64
#endif

/* What malloc, json-c, libyaml and the sanitizers need to compute and exit; write(2) and
 * writev(2) are allowed on stderr and the output pipe only (checked below). */
static const int allowed[] = {
        SYS_brk,          SYS_mmap,         SYS_munmap,  SYS_mremap,      SYS_madvise,
        SYS_mprotect,     SYS_exit,         SYS_exit_group, SYS_rt_sigreturn, SYS_rt_sigprocmask,
        SYS_futex,        SYS_clock_gettime, SYS_gettid, SYS_getpid,      SYS_sched_yield,
        SYS_close,        SYS_getrandom,    SYS_sigaltstack,
};

#define ARG0_LOW (offsetof(struct seccomp_data, args[0])) /* little endian: the low half first */

#ifdef SANDBOX_ARCH
/* [0..3] the architecture, [4] the number; then one test per allowed call; then, with
 * `output_writes`, write and writev with their descriptor (stderr or SANDBOX_OUTPUT_FD); DENY;
 * ALLOW. Everything else fails with EPERM. */
static int install_filter(const int *calls, size_t n, bool output_writes) {
        size_t w = output_writes ? 5 : 0, len = 5 + n + w + 2, i = 0;
        struct sock_filter f[5 + 64 + 5 + 2];

        assert(n <= 64 && len <= ELEMENTSOF(f));
        f[i++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
        f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_ARCH, 1, 0);
        f[i++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
        f[i++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
        /* x32 calls have this bit set and other numbers: none of ours */
        f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, (uint8_t) (n + w), 0);
#else
        f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JA | BPF_K, 0, 0, 0);
#endif
        for (size_t k = 0; k < n; k++, i++)
                /* from here to ALLOW, which is n - k + w + 1 further on */
                f[i] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) calls[k],
                                                     (uint8_t) (n - k + w), 0);
        if (output_writes) {
                f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 1, 0);
                f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_writev, 0, 3);
                f[i++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_LOW);
                f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_OUTPUT_FD, 2, 0);
                f[i++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, STDERR_FILENO, 1, 0);
        }
        f[i++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
        f[i++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        assert(i == len);

        struct sock_fprog prog = {.len = (unsigned short) i, .filter = f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
                return -errno;
        return 0;
}
#else
static int install_filter(const int *calls, size_t n, bool output_writes) {
        return -EOPNOTSUPP; /* no filter written for this architecture: refuse to run unconfined */
}
#endif

void sandbox_exit(int status) {
        for (;;)
                (void) syscall(SYS_exit_group, status);
}

int sandbox_restrict(const int *calls, size_t n) {
#ifdef __SANITIZE_ADDRESS__
        /* AddressSanitizer, before a call that does not return, looks at the stack it runs on,
         * and writes its reports: in the sanitized builds only */
        static const int sanitizer[] = {SYS_sigaltstack, SYS_gettid, SYS_getpid, SYS_write,
                                        SYS_mmap,        SYS_munmap, SYS_rt_sigreturn};
        int all[64];

        if (n + ELEMENTSOF(sanitizer) > ELEMENTSOF(all))
                return -E2BIG;
        memcpy(all, calls, n * sizeof(int));
        memcpy(all + n, sanitizer, sizeof(sanitizer));
        return install_filter(all, n + ELEMENTSOF(sanitizer), false);
#else
        return install_filter(calls, n, false);
#endif
}

int sandbox_detach(int output_fd, pid_t parent) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
                return -errno;
        if (getppid() != parent) /* it died before the line above */
                return -ESRCH;
        /* the parent's handlers are not the child's to run: a stop signal or a trap ends it (the
         * sanitizers' handlers of memory faults stay, for their reports) */
        static const int sigs[] = {SIGHUP, SIGINT,  SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD,
                                   SIGALRM, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
                (void) signal(sigs[i], SIG_DFL);
        if (output_fd != SANDBOX_OUTPUT_FD) {
                if (dup2(output_fd, SANDBOX_OUTPUT_FD) < 0)
                        return -errno;
        }
        /* stdin and stdout go too: only stderr, for a sanitizer's report */
        if (syscall(SYS_close_range, SANDBOX_OUTPUT_FD + 1, ~0u, 0) < 0)
                return -errno;
        (void) close(STDIN_FILENO);
        (void) close(STDOUT_FILENO);
        return 0;
}

int sandbox_enter(int output_fd, pid_t parent) {
        int fl, r;

        r = sandbox_detach(output_fd, parent);
        if (r < 0)
                return r;
        fl = fcntl(SANDBOX_OUTPUT_FD, F_GETFL);
        if (fl < 0 || fcntl(SANDBOX_OUTPUT_FD, F_SETFL, fl & ~O_NONBLOCK) < 0)
                return -errno;
        return install_filter(allowed, ELEMENTSOF(allowed), true);
}

pid_t sandbox_fork_pair(int *ret_fd) {
        int sv[2], r;
        pid_t pid;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                r = -errno;
                (void) close(sv[0]);
                (void) close(sv[1]);
                return r;
        }
        if (pid == 0) {
                (void) close(sv[0]);
                *ret_fd = sv[1];
                return 0;
        }
        (void) close(sv[1]);
        if (fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0) {
                r = -errno;
                (void) close(sv[0]);
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                return r;
        }
        *ret_fd = sv[0];
        return pid;
}

int sandbox_spawn(struct event_base *base, SandboxChildFn run, const void *arg, SandboxGoneFn gone, void *userdata,
                  int *ret_fd, pid_t *ret_pid, SandboxReaper **ret_reaper) {
        SandboxReaper *reaper = NULL;
        pid_t parent = getpid(), pid;
        int fd, r;

        pid = sandbox_fork_pair(&fd);
        if (pid < 0)
                return pid;
        if (pid == 0)
                run(fd, parent, arg);
        if (base) {
                r = sandbox_reaper_new(base, pid, gone, userdata, &reaper);
                if (r < 0) {
                        (void) close(fd); /* it ends when its socket does */
                        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                        return r;
                }
        }
        *ret_fd = fd;
        *ret_pid = pid;
        *ret_reaper = reaper;
        return 0;
}

ssize_t sandbox_recv_fds(int sock, int flags, void *buf, size_t size, int *fds, size_t max, size_t *n_fds) {
        union {
                char buf[CMSG_SPACE(sizeof(int) * SANDBOX_FDS_MAX)];
                struct cmsghdr align;
        } control;
        struct iovec iov = {.iov_base = buf, .iov_len = size};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf)};
        ssize_t n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);

        *n_fds = 0;
        if (n < 0)
                return -errno;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (*n_fds < max)
                                fds[(*n_fds)++] = fd;
                        else
                                (void) close(fd); /* more than the message may carry: not ours */
                }
        }
        return n;
}

ssize_t sandbox_send_fds(int sock, int flags, const void *buf, size_t size, const int *fds, size_t n) {
        union {
                char buf[CMSG_SPACE(sizeof(int) * SANDBOX_FDS_MAX)];
                struct cmsghdr align;
        } control = {};
        struct iovec iov = {.iov_base = (void *) buf, .iov_len = size};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

        assert(n <= SANDBOX_FDS_MAX);
        if (n > 0) {
                msg.msg_control = control.buf;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
        }
        ssize_t k = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
        return k < 0 ? -errno : k;
}

struct SandboxReaper {
        pid_t pid;
        int pidfd;
        struct event *exit_event;
        bool reaped;
        SandboxGoneFn gone;
        void *userdata;
};

static void on_exit_event(evutil_socket_t fd, short what, void *userdata) {
        SandboxReaper *r = userdata;
        int status = 0;
        pid_t k;

        do
                k = waitpid(r->pid, &status, WNOHANG);
        while (k < 0 && errno == EINTR);
        if (k == 0)
                return; /* not yet: the pidfd stays readable, this is called again */
        if (k < 0)
                status = W_EXITCODE(127, 0); /* not ours to reap after all: gone all the same */
        r->reaped = true;
        (void) event_del(r->exit_event);
        if (r->gone)
                r->gone(r->pid, status, r->userdata);
}

int sandbox_reaper_new(struct event_base *base, pid_t pid, SandboxGoneFn gone, void *userdata, SandboxReaper **ret) {
        SandboxReaper *r = calloc(1, sizeof(*r));

        if (!r)
                return -ENOMEM;
        *r = (SandboxReaper){.pid = pid, .gone = gone, .userdata = userdata};
        r->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (r->pidfd < 0) {
                int k = -errno;
                free(r);
                return k;
        }
        (void) fcntl(r->pidfd, F_SETFD, FD_CLOEXEC);
        r->exit_event = event_new(base, r->pidfd, EV_READ | EV_PERSIST, on_exit_event, r);
        if (!r->exit_event || event_add(r->exit_event, NULL) < 0) {
                if (r->exit_event)
                        event_free(r->exit_event);
                (void) close(r->pidfd);
                free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

bool sandbox_reaper_done(const SandboxReaper *r) {
        return r && r->reaped;
}

void sandbox_reaper_kill(SandboxReaper *r) {
        if (r && !r->reaped)
                (void) syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
}

void sandbox_reaper_free(SandboxReaper *r, bool kill) {
        if (!r)
                return;
        if (!r->reaped) {
                if (kill)
                        sandbox_reaper_kill(r);
                while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        event_free(r->exit_event);
        (void) close(r->pidfd);
        free(r);
}
