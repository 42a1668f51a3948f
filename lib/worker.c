/* worker.c — the worker pool: fork a child per job when a slot is free, read its result from a
 * pipe in the loop, watch its exit through a pidfd, kill it when it takes too long or says too
 * much. A job is finished when its pipe is at EOF and its child is reaped, in either order. */
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "log.h"
#include "sandbox.h"
#include "worker.h"

#define READ_CHUNK (256u * 1024u)
#define READ_PER_WAKEUP (1u << 20) /* bytes read per loop turn and job: others get the loop */
#define PIPE_SIZE (1u << 20)

struct WorkerJob {
        WorkerPool *pool;
        uid_t uid;
        WorkerRunFn run;
        WorkerDoneFn done; /* NULL once cancelled */
        void *userdata;

        bool started;
        pid_t pid;
        int pidfd, pipefd;
        struct event *pipe_event, *exit_event, *timeout_event;
        bool eof, reaped;
        int status; /* as waitpid() gives it */
        int error;  /* decided by the parent: timeout, too large */

        char *out;
        size_t out_len, out_size;

        TAILQ_ENTRY(WorkerJob) link;
};

struct WorkerPool {
        struct event_base *base;
        TAILQ_HEAD(, WorkerJob) waiting, running;
        size_t n_waiting, n_running;
        struct event *start_event;
        uint64_t timeout_usec;
        bool in_process;
};

static void job_free(WorkerJob *j) {
        if (j->pipe_event)
                event_free(j->pipe_event);
        if (j->exit_event)
                event_free(j->exit_event);
        if (j->timeout_event)
                event_free(j->timeout_event);
        if (j->pipefd >= 0)
                close(j->pipefd);
        if (j->pidfd >= 0)
                close(j->pidfd);
        free(j->out);
        free(j);
}

static void schedule_start(WorkerPool *p) {
        event_active(p->start_event, EV_TIMEOUT, 0);
}

static void job_kill(WorkerJob *j) {
        if (j->started && !j->reaped && syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0) < 0 &&
            errno != ESRCH)
                log_warning_errno(errno, "worker: failed to kill pid %d: %m", (int) j->pid);
}

/* No more reading: the result is decided, or nobody wants it. */
static void job_stop_reading(WorkerJob *j) {
        if (j->pipe_event)
                (void) event_del(j->pipe_event);
        if (j->pipefd >= 0) {
                close(j->pipefd);
                j->pipefd = -1;
        }
        j->eof = true;
        j->out = mfree(j->out);
        j->out_len = j->out_size = 0;
}

static void job_finish(WorkerJob *j) {
        WorkerPool *p = j->pool;
        WorkerDoneFn done = j->done;
        int error = j->error;

        if (!j->eof || !j->reaped)
                return;
        TAILQ_REMOVE(&p->running, j, link);
        p->n_running--;
        if (error == 0) {
                if (WIFSIGNALED(j->status)) {
                        log_warning("worker: pid %d was killed by signal %s", (int) j->pid,
                                    strsignal(WTERMSIG(j->status)));
                        error = -ECHILD;
                } else if (!WIFEXITED(j->status) || WEXITSTATUS(j->status) != 0) {
                        log_debug("worker: pid %d failed with status %d", (int) j->pid, WEXITSTATUS(j->status));
                        error = -ECHILD;
                }
        }
        if (done)
                done(error, error == 0 ? j->out : NULL, error == 0 ? j->out_len : 0, j->userdata);
        job_free(j);
        schedule_start(p);
}

static void on_pipe(evutil_socket_t fd, short what, void *userdata) {
        WorkerJob *j = userdata;
        size_t got = 0;

        while (got < READ_PER_WAKEUP) {
                if (j->out_size - j->out_len < READ_CHUNK) {
                        size_t want = j->out_size ? j->out_size * 2 : READ_CHUNK;
                        char *n = realloc(j->out, want);
                        if (!n) {
                                j->error = -ENOMEM;
                                job_stop_reading(j);
                                job_kill(j);
                                return;
                        }
                        j->out = n;
                        j->out_size = want;
                }
                ssize_t n = read(j->pipefd, j->out + j->out_len, READ_CHUNK);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        j->error = -errno;
                        job_stop_reading(j);
                        job_kill(j);
                        break;
                }
                if (n == 0) {
                        (void) event_del(j->pipe_event);
                        j->eof = true;
                        break;
                }
                j->out_len += (size_t) n;
                got += (size_t) n;
                if (j->out_len > WORKER_OUTPUT_MAX) {
                        log_warning("worker: pid %d wrote more than %u bytes, killing it", (int) j->pid,
                                    WORKER_OUTPUT_MAX);
                        j->error = -EFBIG;
                        job_stop_reading(j);
                        job_kill(j);
                        return;
                }
        }
        job_finish(j);
}

static void on_child_exit(evutil_socket_t fd, short what, void *userdata) {
        WorkerJob *j = userdata;
        pid_t r;

        do
                r = waitpid(j->pid, &j->status, WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return; /* not yet: the pidfd stays readable, we are called again */
        if (r < 0) {
                log_warning_errno(errno, "worker: failed to reap pid %d: %m", (int) j->pid);
                j->status = W_EXITCODE(127, 0);
        }
        (void) event_del(j->exit_event);
        j->reaped = true;
        job_finish(j);
}

static void on_timeout(evutil_socket_t fd, short what, void *userdata) {
        WorkerJob *j = userdata;

        log_warning("worker: pid %d took longer than %llu ms, killing it", (int) j->pid,
                    (unsigned long long) (j->pool->timeout_usec / USEC_PER_MSEC));
        j->error = -ETIMEDOUT;
        job_stop_reading(j);
        job_kill(j);
}

/* WORKER_IN_PROCESS: the job runs here and now, into a memfd, and is finished by the caller. */
static int job_run_here(WorkerJob *j) {
        _cleanup_(closep) int fd = memfd_create("bigtcpd-worker", MFD_CLOEXEC);
        struct stat st;
        int r;

        if (fd < 0)
                return -errno;
        r = j->run(fd, j->userdata);
        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uint64_t) st.st_size > WORKER_OUTPUT_MAX)
                j->error = -EFBIG;
        else if (st.st_size > 0) {
                j->out = malloc((size_t) st.st_size);
                if (!j->out)
                        return -ENOMEM;
                j->out_size = (size_t) st.st_size;
                ssize_t n = pread(fd, j->out, j->out_size, 0);
                if (n < 0)
                        return -errno;
                j->out_len = (size_t) n;
        }
        j->started = j->eof = j->reaped = true;
        j->status = W_EXITCODE(r < 0 ? 1 : 0, 0);
        return 0;
}

/* Fork the child. On failure the job is left unstarted, with nothing to clean up in the kernel. */
static int job_start(WorkerJob *j) {
        WorkerPool *p = j->pool;

        if (p->in_process)
                return job_run_here(j);
        _cleanup_(closep) int rfd = -1, wfd = -1;
        int fds[2];
        pid_t parent = getpid(), pid;

        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        rfd = fds[0];
        wfd = fds[1];
        (void) fcntl(rfd, F_SETPIPE_SZ, PIPE_SIZE); /* fewer wakeups for a large result */

        j->pipe_event = event_new(p->base, rfd, EV_READ | EV_PERSIST, on_pipe, j);
        j->timeout_event = evtimer_new(p->base, on_timeout, j);
        if (!j->pipe_event || !j->timeout_event)
                return -ENOMEM;

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int r = sandbox_enter(wfd, parent);
                if (r >= 0)
                        r = j->run(SANDBOX_OUTPUT_FD, j->userdata);
                _exit(r < 0 ? 1 : 0);
        }

        j->started = true;
        j->pid = pid;
        j->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (j->pidfd < 0) {
                int r = -errno;
                (void) kill(pid, SIGKILL);
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                j->started = false;
                return r;
        }
        (void) fcntl(j->pidfd, F_SETFD, FD_CLOEXEC);
        j->exit_event = event_new(p->base, j->pidfd, EV_READ | EV_PERSIST, on_child_exit, j);
        struct timeval tv = {.tv_sec = (time_t) (p->timeout_usec / USEC_PER_SEC),
                             .tv_usec = (suseconds_t) (p->timeout_usec % USEC_PER_SEC)};
        if (!j->exit_event || event_add(j->exit_event, NULL) < 0 || event_add(j->pipe_event, NULL) < 0 ||
            event_add(j->timeout_event, &tv) < 0) {
                /* the child runs: kill it, and still reap it through the loop if we can */
                j->error = -ENOMEM;
                job_stop_reading(j);
                job_kill(j);
                if (!j->exit_event || event_add(j->exit_event, NULL) < 0) {
                        while (waitpid(pid, &j->status, 0) < 0 && errno == EINTR)
                                ;
                        j->reaped = true;
                }
                j->pipefd = -1;
                return 0;
        }
        j->pipefd = TAKE_FD(rfd);
        log_debug("worker: pid %d started for uid %u", (int) pid, (unsigned) j->uid);
        return 0;
}

static size_t running_of(const WorkerPool *p, uid_t uid) {
        const WorkerJob *j;
        size_t n = 0;
        TAILQ_FOREACH(j, &p->running, link)
        n += j->uid == uid;
        return n;
}

static bool may_start(const WorkerPool *p, const WorkerJob *j) {
        if (p->n_running >= WORKER_SLOTS_MAX)
                return false;
        if (j->uid == 0)
                return true;
        return p->n_running < WORKER_SLOTS_MAX - WORKER_SLOTS_ROOT_RESERVED && running_of(p, j->uid) == 0;
}

static void on_start(evutil_socket_t fd, short what, void *userdata) {
        WorkerPool *p = userdata;
        WorkerJob *j, *next;

        for (j = TAILQ_FIRST(&p->waiting); j && p->n_running < WORKER_SLOTS_MAX; j = next) {
                next = TAILQ_NEXT(j, link);
                if (!may_start(p, j))
                        continue;
                TAILQ_REMOVE(&p->waiting, j, link);
                p->n_waiting--;
                int r = job_start(j);
                if (r < 0) {
                        log_warning_errno(r, "worker: failed to start a job: %m");
                        WorkerDoneFn done = j->done;
                        void *ud = j->userdata;
                        job_free(j);
                        /* the callback may submit or cancel: start over after it */
                        if (done)
                                done(r == -ENOMEM ? r : -ECHILD, NULL, 0, ud);
                        schedule_start(p);
                        return;
                }
                TAILQ_INSERT_TAIL(&p->running, j, link);
                p->n_running++;
                if (j->eof && j->reaped) {
                        job_finish(j); /* it failed while starting */
                        return;
                }
        }
}

int worker_pool_new(struct event_base *base, WorkerFlags flags, WorkerPool **ret) {
        WorkerPool *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->base = base;
        p->timeout_usec = WORKER_TIMEOUT_USEC;
        p->in_process = flags & WORKER_IN_PROCESS;
        TAILQ_INIT(&p->waiting);
        TAILQ_INIT(&p->running);
        p->start_event = event_new(base, -1, 0, on_start, p);
        if (!p->start_event) {
                free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

void worker_pool_free(WorkerPool *p) {
        WorkerJob *j;

        if (!p)
                return;
        while ((j = TAILQ_FIRST(&p->waiting))) {
                TAILQ_REMOVE(&p->waiting, j, link);
                job_free(j);
        }
        while ((j = TAILQ_FIRST(&p->running))) {
                TAILQ_REMOVE(&p->running, j, link);
                if (!j->reaped) {
                        job_kill(j);
                        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                }
                job_free(j);
        }
        event_free(p->start_event);
        free(p);
}

void worker_pool_set_timeout(WorkerPool *p, uint64_t usec) {
        p->timeout_usec = usec;
}

static size_t queued_of(const WorkerPool *p, uid_t uid) {
        const WorkerJob *j;
        size_t n = running_of(p, uid);
        TAILQ_FOREACH(j, &p->waiting, link)
        n += j->uid == uid;
        return n;
}

int worker_submit(WorkerPool *p, uid_t uid, WorkerRunFn run, WorkerDoneFn done, void *userdata, WorkerJob **ret) {
        WorkerJob *j;

        if (p->n_waiting + p->n_running >= WORKER_QUEUED_MAX ||
            (uid != 0 && queued_of(p, uid) >= WORKER_QUEUED_PER_UID_MAX))
                return -EBUSY;
        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (WorkerJob){.pool = p, .uid = uid, .run = run, .done = done, .userdata = userdata, .pidfd = -1,
                         .pipefd = -1};
        TAILQ_INSERT_TAIL(&p->waiting, j, link);
        p->n_waiting++;
        schedule_start(p);
        if (ret)
                *ret = j;
        return 0;
}

void worker_cancel(WorkerJob *j) {
        WorkerPool *p;

        if (!j)
                return;
        p = j->pool;
        j->done = NULL;
        if (!j->started) {
                TAILQ_REMOVE(&p->waiting, j, link);
                p->n_waiting--;
                job_free(j);
                return;
        }
        /* the slot is free once the child is reaped */
        if (j->timeout_event)
                (void) event_del(j->timeout_event);
        job_stop_reading(j);
        job_kill(j);
}

size_t worker_pool_running(const WorkerPool *p) {
        return p->n_running;
}

size_t worker_pool_queued(const WorkerPool *p) {
        return p->n_waiting;
}

int worker_write_all(int fd, const void *data, size_t size) {
        const char *s = data;

        while (size > 0) {
                ssize_t n = write(fd, s, size);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                s += n;
                size -= (size_t) n;
        }
        return 0;
}
