/* durable.c — syncs in a child of their own, waited for with a bound. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "sandbox.h"
#include "util.h"

/* What the daemon sends with the descriptors; the child answers an int32_t: 0 or -errno. */
typedef struct SyncJob {
        uint8_t data_only;
        uint8_t gated; /* a second descriptor: the gate (durable.h) */
} SyncJob;

static struct {
        int fd;    /* the daemon's end of the pair; -1 without a child */
        pid_t pid; /* the child */
        bool busy; /* a sync past its bound: its answer not read yet */
} D = {.fd = -1, .pid = -1};

static void child_answer(int32_t r) {
        if (write(SANDBOX_OUTPUT_FD, &r, sizeof(r)) < 0)
                sandbox_exit(0);
}

__attribute__((noreturn)) static void child(int fd, pid_t parent) {
        /* its socket and stderr: a descriptor the daemon holds is not held here too (a client's
         * connection would not see its end, a namespace would not go) */
        if (sandbox_detach(fd, parent) < 0)
                _exit(0);
        (void) prctl(PR_SET_NAME, "bigtcpd-sync", 0, 0, 0); /* for ps, and the tests */
        static const int calls[] = {SYS_recvmsg, SYS_read,  SYS_write, SYS_fsync,
                                    SYS_fdatasync, SYS_close, SYS_exit,  SYS_exit_group};
        if (sandbox_restrict(calls, ELEMENTSOF(calls)) < 0)
                sandbox_exit(0);
        for (;;) {
                SyncJob job;
                int fds[3]; /* one more than a job carries: a message with more is refused */
                size_t k;
                /* MSG_TRUNC: a longer message reads as its whole length, so that it is refused */
                ssize_t n = sandbox_recv_fds(SANDBOX_OUTPUT_FD, MSG_TRUNC, &job, sizeof(job), fds, ELEMENTSOF(fds), &k);
                if (n == -EINTR)
                        continue;
                if (n <= 0)
                        sandbox_exit(0); /* the daemon closed its end, or is gone */
                int32_t r;
                if (n != (ssize_t) sizeof(job) || k != (job.gated ? 2u : 1u))
                        r = -EBADMSG;
                else {
                        char c;
                        if (job.gated && read(fds[1], &c, 1) != 1)
                                r = -EIO;
                        else
                                r = (job.data_only ? fdatasync(fds[0]) : fsync(fds[0])) < 0 ? -errno : 0;
                        /* the test behind the gate waits for this: not told, it learns why */
                        if (job.gated && write(fds[1], "x", 1) != 1 && r == 0)
                                r = -EIO;
                }
                for (size_t i = 0; i < k; i++)
                        (void) close(fds[i]);
                child_answer(r);
        }
}

/* The child is gone (its end closed): reaped (unless `reap` is false: then it is left to init),
 * and the next sync makes another. */
static void drop_child(bool reap) {
        (void) close(D.fd);
        if (reap)
                while (waitpid(D.pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        D.fd = -1;
        D.pid = -1;
        D.busy = false;
}

static int spawn(void) {
        pid_t parent = getpid(), pid;
        int fd;

        if (D.fd >= 0)
                return 0;
        pid = sandbox_fork_pair(&fd);
        if (pid < 0)
                return pid;
        if (pid == 0)
                child(fd, parent);
        D.fd = fd;
        D.pid = pid;
        return 0;
}

int durable_start(void) {
        return spawn();
}

/* The child's answer, if there is one: 0 or -errno the sync's; -EAGAIN none yet; -ECHILD the child
 * is gone (dropped). */
static int read_answer(void) {
        int32_t r;
        ssize_t n;

        do
                n = recv(D.fd, &r, sizeof(r), MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return -EAGAIN;
        if (n != (ssize_t) sizeof(r) || r > 0 || r < -4095) {
                drop_child(true);
                return -ECHILD;
        }
        return r;
}

static int send_job(int fd, bool data_only, int gate_fd) {
        SyncJob job = {.data_only = data_only, .gated = gate_fd >= 0};
        int fds[2] = {fd, gate_fd};
        ssize_t n;

        do
                n = sandbox_send_fds(D.fd, MSG_DONTWAIT, &job, sizeof(job), fds, gate_fd >= 0 ? 2 : 1);
        while (n == -EINTR);
        return n == (ssize_t) sizeof(job) ? 0 : n < 0 ? (int) n : -EIO;
}

int durable_sync(int fd, bool data_only, uint64_t timeout_usec, int gate_fd) {
        int r;

        if (D.busy) {
                r = read_answer();
                if (r == -EAGAIN)
                        return -EBUSY;
                D.busy = false; /* that sync's answer came too late to count */
        }
        for (int attempt = 0;; attempt++) {
                r = spawn();
                if (r < 0)
                        return r;
                r = send_job(fd, data_only, gate_fd);
                if (r == 0)
                        break;
                /* a child that went (killed, or its filter): one other, once */
                drop_child(true);
                if (attempt > 0 || (r != -EPIPE && r != -ECONNRESET))
                        return r;
        }

        uint64_t until = now_usec() + timeout_usec;
        for (;;) {
                uint64_t now = now_usec();
                if (now >= until) {
                        D.busy = true;
                        return -ETIMEDOUT;
                }
                uint64_t left = until - now;
                struct timespec ts = {.tv_sec = (time_t) (left / USEC_PER_SEC),
                                      .tv_nsec = (long) (left % USEC_PER_SEC) * 1000};
                struct pollfd p = {.fd = D.fd, .events = POLLIN};
                int k = ppoll(&p, 1, &ts, NULL);
                if (k < 0 && errno != EINTR)
                        return -errno;
                if (k <= 0)
                        continue;
                r = read_answer();
                if (r == -EAGAIN)
                        continue;
                return r == -ECHILD ? -EIO : r;
        }
}

pid_t durable_pid(void) {
        return D.pid;
}

void durable_stop(uint64_t timeout_usec) {
        uint64_t ms = timeout_usec / 1000;
        int pidfd, k = 0;

        if (D.fd < 0)
                return;
        pidfd = (int) syscall(SYS_pidfd_open, D.pid, 0);
        (void) kill(D.pid, SIGKILL);
        if (pidfd >= 0) {
                struct pollfd p = {.fd = pidfd, .events = POLLIN};
                do
                        k = poll(&p, 1, ms > INT32_MAX ? INT32_MAX : (int) ms);
                while (k < 0 && errno == EINTR); /* an interrupted wait starts over */
                (void) close(pidfd);
        }
        /* reaped once it has ended; without a pidfd, or still in its sync after the bound, it is
         * left to die when it can and to init to reap */
        drop_child(k > 0);
}
