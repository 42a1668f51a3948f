/* sandbox.h — what a worker child does to itself before it touches text a caller sent: every
 * descriptor closed but stderr and its result pipe (as SANDBOX_OUTPUT_FD), no new privileges,
 * killed with its parent, and a seccomp filter that leaves it memory, those two descriptors and
 * its own exit. Everything else fails with EPERM; a foreign architecture's calls kill it. */
#pragma once

#include <errno.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SANDBOX_OUTPUT_FD 3

/* In a child, right after fork(): killed with its parent, the parent's signal handlers reset,
 * every descriptor closed but stderr and `output_fd`, which becomes SANDBOX_OUTPUT_FD. `parent` is
 * the pid that forked it. 0, or -errno: the child must then exit. */
int sandbox_detach(int output_fd, pid_t parent);
/* sandbox_detach(), then the rest: in the child, right after fork(). `output_fd` becomes SANDBOX_OUTPUT_FD, blocking. `parent` is
 * the pid that forked it. 0, or -errno: the child must then exit without running anything. */
int sandbox_enter(int output_fd, pid_t parent);
/* No new privileges, and a seccomp filter that allows the `n` system calls `calls` (SYS_*) and
 * nothing else (EPERM): for a child that does one small thing (closer.c, packet-maker.c). */
int sandbox_restrict(const int *calls, size_t n);
/* The end of a child under sandbox_restrict(): exit_group(2) itself, not _exit(), which a
 * sanitizer intercepts to run its checks, with calls the filter refuses. */
__attribute__((noreturn)) void sandbox_exit(int status);
/* fork(2) with a SOCK_SEQPACKET pair between parent and child. In the parent: the child's pid,
 * *ret_fd its end (non-blocking); in the child: 0, *ret_fd the child's end (blocking). -errno
 * when either cannot be made (nothing is left). */
pid_t sandbox_fork_pair(int *ret_fd);

/* The descriptors one message between the daemon and a child may carry, at most. */
#define SANDBOX_FDS_MAX 16
/* One message of `size` bytes into `buf`, and the descriptors it carries (close-on-exec): up to
 * `max` (<= SANDBOX_FDS_MAX) in `fds`, their number in *n_fds; any more are closed. The bytes
 * read, or -errno (recvmsg(2)'s). `flags` are recvmsg(2)'s. */
ssize_t sandbox_recv_fds(int sock, int flags, void *buf, size_t size, int *fds, size_t max, size_t *n_fds);
/* One message of `size` bytes carrying the `n` (<= SANDBOX_FDS_MAX) descriptors `fds`; a broken
 * pipe is -EPIPE, never a signal. The bytes sent, or -errno. */
ssize_t sandbox_send_fds(int sock, int flags, const void *buf, size_t size, const int *fds, size_t n);
/* What sandbox_send_fds() returned says the child's end is closed: the child is gone. */
static inline bool sandbox_peer_gone(ssize_t n) {
        return n == -EPIPE || n == -ECONNRESET || n == -ECONNREFUSED;
}

/* A long-lived child (closer.c, packet-maker.c) watched from the loop through a pidfd: reaped as
 * soon as it exits, so that it never stays a zombie, and then `gone` is called (from the loop;
 * `status` as waitpid(2) gives it). */
typedef void (*SandboxGoneFn)(pid_t pid, int status, void *userdata);
typedef struct SandboxReaper SandboxReaper;
/* -errno when the pidfd or its event cannot be made (the caller still owns the child). */
int sandbox_reaper_new(struct event_base *base, pid_t pid, SandboxGoneFn gone, void *userdata, SandboxReaper **ret);
/* A long-lived child with a socket to it: sandbox_fork_pair(), then in the child `run(fd, parent,
 * arg)`, which never returns; in the parent, with `base`, a reaper calling `gone` (without, the
 * caller waits for it). *ret_fd its end and *ret_pid, *ret_reaper (NULL without `base`); -errno
 * when anything cannot be made (the child, if made, is waited for: nothing is left). */
typedef __attribute__((noreturn)) void (*SandboxChildFn)(int fd, pid_t parent, const void *arg);
int sandbox_spawn(struct event_base *base, SandboxChildFn run, const void *arg, SandboxGoneFn gone, void *userdata,
                  int *ret_fd, pid_t *ret_pid, SandboxReaper **ret_reaper);
/* Reaped already? */
bool sandbox_reaper_done(const SandboxReaper *r);
/* Kills the child (SIGKILL) unless it is reaped; it is reaped from the loop as when it dies. */
void sandbox_reaper_kill(SandboxReaper *r);
/* The child is waited for here (killed first with `kill`; else the caller made it end, by
 * closing its socket), unless it is reaped already; `gone` is not called. NULL is a no-op. */
void sandbox_reaper_free(SandboxReaper *r, bool kill);
