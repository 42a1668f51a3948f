/* test-worker.c — the worker pool with real children in a real event loop: results of every size
 * come back whole; a child that says too much, runs too long or fails is reported as such; the
 * sandbox leaves a child no descriptor and no system call beyond its pipe and memory; slots are
 * shared (one at a time per UID other than 0, one kept for root) and queues are capped; a
 * cancelled job never calls back and its child is reaped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

/* What a job is asked to do, and what came back. */
typedef struct Job {
        const char *text;  /* run_text */
        size_t size;       /* run_big */
        int leaked_fd;     /* run_probe */
        unsigned order;    /* the how-manyth callback it was */
        int calls, error;
        char *data;
        size_t data_size;
} Job;

static unsigned n_done;

static void on_done(int error, const char *data, size_t size, void *userdata) {
        Job *j = userdata;
        j->calls++;
        j->order = ++n_done;
        j->error = error;
        j->data_size = size;
        if (data) {
                j->data = malloc(size + 1);
                assert_non_null(j->data);
                memcpy(j->data, data, size);
                j->data[size] = '\0';
        }
}

static void job_done(Job *j) {
        free(j->data);
}

typedef struct Fixture {
        struct event_base *base;
        WorkerPool *pool;
} Fixture;

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        f->base = event_base_new();
        assert_non_null(f->base);
        assert_int_equal(worker_pool_new(f->base, WORKER_FORK, &f->pool), 0);
        n_done = 0;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;
        worker_pool_free(f->pool);
        event_base_free(f->base);
        free(f);
        return 0;
}

/* libevent keeps time with CLOCK_MONOTONIC_COARSE, which lags CLOCK_MONOTONIC by up to a tick
 * (4 ms at HZ=250, 10 ms at HZ=100): measured with now(), each timeout may end that much early. */
#define TICK_SLACK_USEC (10 * 1000)

static uint64_t now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

/* Run the loop until nothing runs or waits; fail when no job has ended for 30 s (a hang, not a
 * slow machine: 512 jobs forked one after another take longer than that under load). */
static void run_until_idle(Fixture *f) {
        size_t left = SIZE_MAX, n;
        uint64_t deadline = 0;
        while ((n = worker_pool_running(f->pool) + worker_pool_queued(f->pool)) > 0) {
                if (n != left) {
                        left = n;
                        deadline = now() + 30u * 1000000u;
                }
                assert_true(now() < deadline);
                assert_true(event_base_loop(f->base, EVLOOP_ONCE) >= 0);
        }
}

static int run_text(int fd, void *userdata) {
        Job *j = userdata;
        return worker_write_all(fd, j->text, strlen(j->text));
}

static int run_fail(int fd, void *userdata) {
        return worker_write_all(fd, "half", 4) < 0 ? -EIO : -EINVAL;
}

/* `size` bytes of a pattern the test checks: byte i is 'a' + i % 26. */
static int run_big(int fd, void *userdata) {
        Job *j = userdata;
        char buf[26 * 157];
        for (size_t i = 0; i < sizeof(buf); i++)
                buf[i] = (char) ('a' + i % 26);
        for (size_t off = 0; off < j->size;) {
                size_t k = j->size - off < sizeof(buf) ? j->size - off : sizeof(buf);
                int r = worker_write_all(fd, buf, k);
                if (r < 0)
                        return r;
                off += k;
        }
        return 0;
}

static int run_spin(int fd, void *userdata) {
        for (volatile unsigned long i = 0;; i++)
                ;
        return 0;
}

/* A job that never ends without using the CPU (waiting on a futex nobody wakes: the sandbox
 * allows it): the tests of order and slots have several at once, and spinning ones starved the
 * jobs they wait for on a loaded machine, until those took longer than the timeout too. */
static int run_hang(int fd, void *userdata) {
        static uint32_t word;
        for (;;)
                (void) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        return 0;
}

/* Killed by a signal (SIGILL: the sanitizers leave it to the kernel). */
static int run_trap(int fd, void *userdata) {
        __builtin_trap();
}

/* What the sandbox allows, as one line: each probe's errno name (or 0). */
static int run_probe(int fd, void *userdata) {
        Job *j = userdata;
        char buf[512];
        int e[5];

        errno = 0;
        e[0] = open("/etc/hostname", O_RDONLY | O_CLOEXEC) < 0 ? errno : 0;
        errno = 0;
        e[1] = socket(AF_UNIX, SOCK_STREAM, 0) < 0 ? errno : 0;
        errno = 0;
        e[2] = close(j->leaked_fd) < 0 ? errno : 0; /* write(2) would be refused by the filter */
        errno = 0;
        e[3] = kill(getppid(), 0) < 0 ? errno : 0;
        errno = 0;
        e[4] = fork() < 0 ? errno : 0;
        char *m = malloc(8u << 20); /* memory is allowed */
        if (m)
                memset(m, 1, 8u << 20);
        int n = snprintf(buf, sizeof(buf), "open=%s socket=%s leaked=%s kill=%s fork=%s malloc=%s",
                         strerrorname_np(e[0]) ?: "0", strerrorname_np(e[1]) ?: "0", strerrorname_np(e[2]) ?: "0",
                         strerrorname_np(e[3]) ?: "0", strerrorname_np(e[4]) ?: "0", m ? "ok" : "failed");
        free(m);
        return worker_write_all(fd, buf, (size_t) n);
}

static void test_results(void **state) {
        Fixture *f = *state;
        Job hello = {.text = "hello"}, empty = {.text = ""}, big = {.size = 5u << 20}, fail = {};

        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &hello, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &empty, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_big, on_done, &big, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_fail, on_done, &fail, NULL), 0);
        /* nothing starts from inside submit: the caller is never called back before it returns */
        assert_int_equal(worker_pool_running(f->pool), 0);
        assert_int_equal(worker_pool_queued(f->pool), 4);
        assert_int_equal(hello.calls + empty.calls + big.calls + fail.calls, 0);
        run_until_idle(f);

        assert_int_equal(hello.calls, 1);
        assert_int_equal(hello.error, 0);
        assert_string_equal(hello.data, "hello");
        assert_int_equal(empty.calls, 1);
        assert_int_equal(empty.error, 0);
        assert_int_equal(empty.data_size, 0);
        /* larger than the pipe and than one turn's read: whole, in order */
        assert_int_equal(big.calls, 1);
        assert_int_equal(big.error, 0);
        assert_int_equal(big.data_size, big.size);
        for (size_t i = 0; i < big.size; i++)
                if (big.data[i] != (char) ('a' + i % 26))
                        fail_msg("byte %zu of the big result is wrong", i);
        /* a child that fails is not a result, whatever it wrote */
        assert_int_equal(fail.calls, 1);
        assert_int_equal(fail.error, -ECHILD);
        assert_null(fail.data);
        job_done(&hello), job_done(&empty), job_done(&big), job_done(&fail);
}

static void test_limits(void **state) {
        Fixture *f = *state;
        Job huge = {.size = WORKER_OUTPUT_MAX + 1}, spin = {}, trap = {}, after = {.text = "after"};

        assert_int_equal(worker_submit(f->pool, 0, run_big, on_done, &huge, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_trap, on_done, &trap, NULL), 0);
        run_until_idle(f);
        worker_pool_set_timeout(f->pool, 300 * 1000);
        assert_int_equal(worker_submit(f->pool, 0, run_spin, on_done, &spin, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &after, NULL), 0);
        uint64_t t0 = now();
        run_until_idle(f);
        assert_int_equal(huge.error, -EFBIG);
        assert_int_equal(spin.error, -ETIMEDOUT);
        assert_true(now() - t0 + TICK_SLACK_USEC >= 300 * 1000); /* not killed before its time */
        assert_int_equal(trap.error, -ECHILD);
        /* the pool goes on */
        assert_int_equal(after.error, 0);
        assert_string_equal(after.data, "after");
        job_done(&huge), job_done(&spin), job_done(&trap), job_done(&after);
}

static void test_sandbox(void **state) {
        Fixture *f = *state;
        int p[2];
        Job probe = {};

        assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        probe.leaked_fd = p[1];
        assert_int_equal(worker_submit(f->pool, 0, run_probe, on_done, &probe, NULL), 0);
        run_until_idle(f);
        assert_int_equal(probe.error, 0);
        /* the parent's descriptor is not open in the child; the rest is refused by the filter */
        assert_string_equal(probe.data, "open=EPERM socket=EPERM leaked=EBADF kill=EPERM fork=EPERM malloc=ok");
        char c;
        assert_int_equal(read(p[0], &c, 1), -1); /* nothing came through */
        assert_int_equal(errno, EAGAIN);
        close(p[0]);
        close(p[1]);
        job_done(&probe);
}

/* One job at a time per UID other than 0, in order; others (root or not) are not held up. The
 * jobs of UID 1000 never end until killed: run one after another they take three timeouts. */
static void test_fairness(void **state) {
        Fixture *f = *state;
        Job a1 = {}, a2 = {}, a3 = {}, b1 = {.text = "b1"}, r1 = {.text = "r1"};
        const uint64_t timeout = 500 * 1000;

        worker_pool_set_timeout(f->pool, timeout);
        assert_int_equal(worker_submit(f->pool, 1000, run_hang, on_done, &a1, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 1000, run_hang, on_done, &a2, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 1000, run_hang, on_done, &a3, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 1001, run_text, on_done, &b1, NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &r1, NULL), 0);
        uint64_t t0 = now();
        /* the loop until nothing is ready: a1 spins, a2 and a3 wait, b1 and r1 run */
        assert_true(event_base_loop(f->base, EVLOOP_NONBLOCK) >= 0);
        assert_int_equal(worker_pool_queued(f->pool), 2);
        run_until_idle(f);
        assert_true(now() - t0 + 3 * TICK_SLACK_USEC >= 3 * timeout);
        assert_true(b1.order < a1.order && r1.order < a1.order);
        assert_true(a1.order < a2.order && a2.order < a3.order);
        assert_int_equal(a3.error, -ETIMEDOUT);
        assert_string_equal(b1.data, "b1");
        assert_string_equal(r1.data, "r1");
        job_done(&a1), job_done(&a2), job_done(&a3), job_done(&b1), job_done(&r1);
}

/* Endless jobs of four UIDs other than 0 take three slots, never root's: root's two jobs run
 * at once, and the fourth UID waits for a slot, so it ends a timeout after the others. */
static void test_slots(void **state) {
        Fixture *f = *state;
        Job users[WORKER_SLOTS_MAX] = {}, root[2] = {{.text = "root"}, {.text = "root"}};
        const uint64_t timeout = 500 * 1000;

        worker_pool_set_timeout(f->pool, timeout);
        for (unsigned i = 0; i < WORKER_SLOTS_MAX; i++)
                assert_int_equal(worker_submit(f->pool, 2000 + i, run_hang, on_done, &users[i], NULL), 0);
        uint64_t t0 = now();
        assert_true(event_base_loop(f->base, EVLOOP_NONBLOCK) >= 0);
        assert_int_equal(worker_pool_running(f->pool), WORKER_SLOTS_MAX - WORKER_SLOTS_ROOT_RESERVED);
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &root[0], NULL), 0);
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &root[1], NULL), 0);
        run_until_idle(f);
        assert_true(now() - t0 + 2 * TICK_SLACK_USEC >= 2 * timeout);
        for (unsigned i = 0; i < WORKER_SLOTS_MAX; i++) {
                assert_int_equal(users[i].error, -ETIMEDOUT);
                assert_true(root[0].order < users[i].order && root[1].order < users[i].order);
                if (i < WORKER_SLOTS_MAX - 1)
                        assert_true(users[i].order < users[WORKER_SLOTS_MAX - 1].order);
                job_done(&users[i]);
        }
        assert_string_equal(root[0].data, "root");
        assert_string_equal(root[1].data, "root");
        job_done(&root[0]), job_done(&root[1]);
}

static void test_queue_caps(void **state) {
        Fixture *f = *state;
        static Job jobs[WORKER_QUEUED_MAX];
        size_t n = 0;

        memset(jobs, 0, sizeof(jobs));
        for (unsigned i = 0; i < WORKER_QUEUED_PER_UID_MAX; i++) {
                jobs[n].text = "x";
                assert_int_equal(worker_submit(f->pool, 3000, run_text, on_done, &jobs[n++], NULL), 0);
        }
        assert_int_equal(worker_submit(f->pool, 3000, run_text, on_done, &jobs[n], NULL), -EBUSY);
        /* others still may */
        jobs[n].text = "y";
        assert_int_equal(worker_submit(f->pool, 3001, run_text, on_done, &jobs[n++], NULL), 0);
        while (n < WORKER_QUEUED_MAX) {
                jobs[n].text = "z";
                assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &jobs[n++], NULL), 0);
        }
        assert_int_equal(worker_submit(f->pool, 0, run_text, on_done, &jobs[0], NULL), -EBUSY);
        run_until_idle(f);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(jobs[i].calls, 1);
                assert_int_equal(jobs[i].error, 0);
                job_done(&jobs[i]);
        }
}

static void test_cancel(void **state) {
        Fixture *f = *state;
        Job spin = {}, waiting = {.text = "w"}, other = {};
        WorkerJob *js, *jw;

        worker_pool_set_timeout(f->pool, 500 * 1000);
        assert_int_equal(worker_submit(f->pool, 4000, run_spin, on_done, &spin, &js), 0);
        assert_int_equal(worker_submit(f->pool, 4000, run_text, on_done, &waiting, &jw), 0);
        assert_int_equal(worker_submit(f->pool, 4001, run_spin, on_done, &other, NULL), 0);
        assert_true(event_base_loop(f->base, EVLOOP_NONBLOCK) >= 0);
        assert_int_equal(worker_pool_running(f->pool), 2); /* both spin; waiting waits for the first */
        worker_cancel(jw); /* a waiting job: gone at once */
        assert_int_equal(worker_pool_queued(f->pool), 0);
        worker_cancel(js); /* a running one: killed, reaped through the loop */
        run_until_idle(f);
        assert_int_equal(spin.calls, 0);
        assert_int_equal(waiting.calls, 0);
        assert_int_equal(other.calls, 1); /* the others go on */
        assert_int_equal(other.error, -ETIMEDOUT);
        /* no child is left behind, not even a zombie */
        assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
        job_done(&other);
}

/* Tests and fuzzers: the same results and the same order of callbacks, without a child. */
static void test_in_process(void **state) {
        Fixture *f = *state;
        WorkerPool *pool;
        Job hello = {.text = "hello"}, big = {.size = 3u << 20}, fail = {}, huge = {.size = WORKER_OUTPUT_MAX + 1};

        assert_int_equal(worker_pool_new(f->base, WORKER_IN_PROCESS, &pool), 0);
        assert_int_equal(worker_submit(pool, 0, run_text, on_done, &hello, NULL), 0);
        assert_int_equal(worker_submit(pool, 1000, run_big, on_done, &big, NULL), 0);
        assert_int_equal(worker_submit(pool, 1000, run_fail, on_done, &fail, NULL), 0);
        assert_int_equal(worker_submit(pool, 0, run_big, on_done, &huge, NULL), 0);
        assert_int_equal(hello.calls, 0); /* not from inside submit */
        uint64_t deadline = now() + 30u * 1000000u;
        while (worker_pool_running(pool) + worker_pool_queued(pool) > 0) {
                assert_true(now() < deadline);
                assert_true(event_base_loop(f->base, EVLOOP_ONCE) >= 0);
        }
        assert_string_equal(hello.data, "hello");
        assert_int_equal(big.error, 0);
        assert_int_equal(big.data_size, big.size);
        assert_int_equal(fail.error, -ECHILD);
        assert_int_equal(huge.error, -EFBIG);
        assert_true(hello.order < big.order && big.order < fail.order);
        worker_pool_free(pool);
        job_done(&hello), job_done(&big), job_done(&fail), job_done(&huge);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_results, setup, teardown),
                cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sandbox, setup, teardown),
                cmocka_unit_test_setup_teardown(test_fairness, setup, teardown),
                cmocka_unit_test_setup_teardown(test_slots, setup, teardown),
                cmocka_unit_test_setup_teardown(test_queue_caps, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
                cmocka_unit_test_setup_teardown(test_in_process, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
