/* test-closer.c — the closer's child takes a descriptor and closes it: the reader of a pipe whose
 * write end went to the closer sees its end once the child has closed it; the child runs under a
 * seccomp filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "closer.h"
#include "test-helpers.h"

static void test_child_closes(void **state) {
        Closer *c = NULL;
        int p[2];
        char byte;

        assert_int_equal(closer_new(NULL, NULL, NULL, &c), 0);
        assert_true(closer_pid(c) > 0);
        for (int round = 0; round < 3; round++) {
                assert_int_equal(pipe(p), 0);
                closer_close(c, p[1]);
                /* ours is closed: the child holds the only write end until it closes it too */
                struct pollfd pfd = {.fd = p[0], .events = POLLIN};
                assert_int_equal(poll(&pfd, 1, 10000), 1);
                assert_int_equal(read(p[0], &byte, 1), 0); /* end of file: no write end is left */
                close(p[0]);
        }
        /* it closed one: it runs its loop, under its own filter */
        assert_int_equal(seccomp_mode(closer_pid(c)), 2);
        /* The message holds the descriptor until the child takes it: with the child stopped, the
         * write end stays open (no end of file) although ours is closed; it goes once the child
         * runs again. A close done here instead would end it at once. */
        assert_int_equal(kill(closer_pid(c), SIGSTOP), 0);
        assert_int_equal(pipe(p), 0);
        closer_close(c, p[1]);
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int stopped_poll = poll(&pfd, 1, 200);
        assert_int_equal(kill(closer_pid(c), SIGCONT), 0); /* first: never left stopped */
        assert_int_equal(stopped_poll, 0);
        assert_int_equal(poll(&pfd, 1, 10000), 1);
        assert_int_equal(read(p[0], &byte, 1), 0);
        close(p[0]);

        pid_t pid = closer_pid(c);
        closer_free(c);
        assert_int_equal(kill(pid, 0), -1); /* reaped */
        assert_int_equal(errno, ESRCH);
}

/* Without a child (NULL), the descriptor is closed here. */
static void test_without_child(void **state) {
        int p[2];
        char byte;

        assert_int_equal(pipe(p), 0);
        closer_close(NULL, p[1]);
        assert_int_equal(read(p[0], &byte, 1), 0);
        close(p[0]);
        closer_close(NULL, -1); /* nothing */
        closer_free(NULL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_child_closes),
                cmocka_unit_test(test_without_child),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
