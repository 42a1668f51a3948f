/* durable.c — syncs in a thread of their own, waited for with a bound. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "util.h"

static struct {
        pthread_mutex_t lock;
        pthread_cond_t job_cond;  /* a job was posted */
        pthread_cond_t done_cond; /* the job is done */
        bool started;
        bool has_job;   /* posted, not done */
        bool abandoned; /* its caller stopped waiting: the thread clears `has_job` alone */
        bool done;
        int fd;
        bool data_only;
        DurableSyncFn fn;
        void *userdata;
        int result;
} D = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void *run(void *arg) {
        pthread_mutex_lock(&D.lock);
        for (;;) {
                while (!D.has_job || D.done)
                        pthread_cond_wait(&D.job_cond, &D.lock);
                int fd = D.fd;
                bool data_only = D.data_only;
                DurableSyncFn fn = D.fn;
                void *userdata = D.userdata;
                pthread_mutex_unlock(&D.lock);

                int r = fn ? fn(userdata, fd, data_only) : data_only ? fdatasync(fd) : fsync(fd);
                r = r < 0 ? -errno : 0;
                close(fd);

                pthread_mutex_lock(&D.lock);
                D.fd = -1;
                D.result = r;
                D.done = true;
                if (D.abandoned) {
                        /* no one waits: the next sync may run */
                        D.abandoned = false;
                        D.has_job = false;
                }
                pthread_cond_signal(&D.done_cond);
        }
        return NULL;
}

static int start(void) {
        pthread_condattr_t a;
        pthread_attr_t ta;
        pthread_t t;
        sigset_t all, old;
        int r;

        if (D.started)
                return 0;
        if (pthread_condattr_init(&a) != 0)
                return -ENOMEM;
        (void) pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        r = -pthread_cond_init(&D.done_cond, &a);
        if (r == 0)
                r = -pthread_cond_init(&D.job_cond, NULL);
        pthread_condattr_destroy(&a);
        if (r < 0)
                return r;
        if (pthread_attr_init(&ta) != 0)
                return -ENOMEM;
        (void) pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
        (void) pthread_attr_setstacksize(&ta, 64 * 1024);
        /* signals are the loop's (libevent's signal pipe): none for this thread */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&t, &ta, run, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&ta);
        if (r < 0)
                return r;
        D.started = true;
        return 0;
}

int durable_sync(int fd, bool data_only, uint64_t timeout_usec, DurableSyncFn fn, void *userdata) {
        struct timespec until;
        int r, dup_fd;

        pthread_mutex_lock(&D.lock);
        if (D.has_job) {
                pthread_mutex_unlock(&D.lock);
                return -EBUSY;
        }
        r = start();
        if (r < 0) {
                pthread_mutex_unlock(&D.lock);
                return r;
        }
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dup_fd < 0) {
                r = -errno;
                pthread_mutex_unlock(&D.lock);
                return r;
        }
        D.fd = dup_fd;
        D.data_only = data_only;
        D.fn = fn;
        D.userdata = userdata;
        D.done = false;
        D.abandoned = false;
        D.has_job = true;
        pthread_cond_signal(&D.job_cond);

        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t) (timeout_usec / USEC_PER_SEC);
        until.tv_nsec += (long) (timeout_usec % USEC_PER_SEC) * 1000;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        while (!D.done)
                if (pthread_cond_timedwait(&D.done_cond, &D.lock, &until) == ETIMEDOUT && !D.done) {
                        D.abandoned = true;
                        pthread_mutex_unlock(&D.lock);
                        return -ETIMEDOUT;
                }
        r = D.result;
        D.has_job = false;
        pthread_mutex_unlock(&D.lock);
        return r;
}
