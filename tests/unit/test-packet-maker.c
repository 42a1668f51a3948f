/* test-packet-maker.c — the maker's child makes packet sockets to a recipe and hands them over on
 * the loop, in the order asked; answers owed to a requester that forgot them go to the closer;
 * the child runs under its own seccomp filter. Packet sockets need CAP_NET_RAW: without it
 * (not root) the tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <stdio.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "packet-maker.h"
#include "test-helpers.h"

static struct sock_filter drop_all[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
static const struct sock_fprog drop_prog = {.len = 1, .filter = drop_all};
static const PacketRecipe recipe = {
        .filter = &drop_prog,
        .ring = {.tp_block_size = 4096, .tp_block_nr = 2, .tp_frame_size = 2048, .tp_frame_nr = 4,
                 .tp_retire_blk_tov = 100},
};

typedef struct Got {
        int fds[8];
        size_t n;
        struct event_base *base;
} Got;

static void on_made(int fd, void *userdata) {
        Got *g = userdata;

        assert_true(g->n < 8);
        g->fds[g->n++] = fd;
        (void) event_base_loopbreak(g->base);
}

static bool can_make(void) {
        int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

static void test_made_in_order(void **state) {
        struct event_base *base = event_base_new();
        Closer *closer = NULL;
        PacketMaker *m = NULL;
        Got g = {.base = base}, other = {.base = base};

        if (!can_make())
                skip();
        assert_non_null(base);
        assert_int_equal(closer_new(NULL, NULL, NULL, &closer), 0);
        assert_int_equal(packet_maker_new(base, &recipe, closer, NULL, NULL, &m), 0);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), 0);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &other), 0);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), 0);
        assert_int_equal(packet_maker_pending(m), 3);
        packet_maker_forget(m, &other); /* its socket goes to the closer */
        while (g.n < 2)
                assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
        assert_int_equal(other.n, 0);
        assert_int_equal(packet_maker_pending(m), 0);
        for (size_t i = 0; i < g.n; i++) {
                int domain = 0, version = 0;
                socklen_t len = sizeof(domain);
                assert_true(g.fds[i] >= 0);
                assert_int_equal(getsockopt(g.fds[i], SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
                assert_int_equal(domain, AF_PACKET);
                len = sizeof(version);
                assert_int_equal(getsockopt(g.fds[i], SOL_PACKET, PACKET_VERSION, &version, &len), 0);
                assert_int_equal(version, TPACKET_V3);
                closer_close(closer, g.fds[i]);
        }
        assert_int_equal(seccomp_mode(packet_maker_pid(m)), 2); /* it answered: under its filter */
        packet_maker_free(m);
        closer_free(closer);
        event_base_free(base);
}

/* A namespace descriptor that is not one: the child answers with an error, and goes on. */
static void test_bad_namespace(void **state) {
        struct event_base *base = event_base_new();
        PacketMaker *m = NULL;
        Got g = {.base = base};
        int p[2];

        if (!can_make())
                skip();
        assert_int_equal(pipe(p), 0);
        assert_int_equal(packet_maker_new(base, &recipe, NULL, NULL, NULL, &m), 0);
        assert_int_equal(packet_maker_ask(m, p[0], on_made, &g), 0);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), 0);
        while (g.n < 2)
                assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
        assert_int_equal(g.fds[0], -EINVAL);
        assert_true(g.fds[1] >= 0);
        close(g.fds[1]);
        close(p[0]);
        close(p[1]);
        packet_maker_free(m);
        event_base_free(base);
}

typedef struct Gone {
        pid_t pid;
        int status;
        struct event_base *base;
} Gone;

static void on_gone(pid_t pid, int status, void *userdata) {
        Gone *g = userdata;

        g->pid = pid;
        g->status = status;
        (void) event_base_loopbreak(g->base);
}

/* Is pid a zombie (or gone)? 'Z' from /proc/PID/stat, 0 when it is gone. */
static char proc_state(pid_t pid) {
        char path[64], comm[64], st = 0;
        int p;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return 0;
        if (fscanf(f, "%d %63s %c", &p, comm, &st) != 3)
                st = '?';
        fclose(f);
        return st;
}

/* Both children killed: each is reaped from the loop (no zombie), the maker's owed answer fails,
 * neither takes work until it is made again (the closer closes here meanwhile), and once made
 * again they work as before. */
static void test_dead_children_are_reaped_and_made_again(void **state) {
        struct event_base *base = event_base_new();
        Closer *closer = NULL;
        PacketMaker *m = NULL;
        Got g = {.base = base};
        Gone mg = {.base = base}, cg = {.base = base};
        int p[2];
        char byte;

        if (!can_make())
                skip();
        assert_int_equal(closer_new(base, on_gone, &cg, &closer), 0);
        assert_int_equal(packet_maker_new(base, &recipe, closer, on_gone, &mg, &m), 0);
        pid_t maker_pid = packet_maker_pid(m), closer_pid_was = closer_pid(closer);
        assert_true(maker_pid > 0 && closer_pid_was > 0);
        assert_int_equal(packet_maker_restart(m), -EBUSY); /* it runs */
        assert_int_equal(closer_restart(closer), -EBUSY);

        assert_int_equal(kill(maker_pid, SIGSTOP), 0); /* asked, and killed before it answers */
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), 0);
        assert_int_equal(kill(maker_pid, SIGKILL), 0);
        while (mg.pid == 0)
                assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
        assert_int_equal(mg.pid, maker_pid);
        assert_true(WIFSIGNALED(mg.status) && WTERMSIG(mg.status) == SIGKILL);
        assert_int_equal(proc_state(maker_pid), 0); /* reaped, not a zombie */
        assert_int_equal(g.n, 1);
        assert_int_equal(g.fds[0], -EPIPE); /* the answer owed */
        assert_false(packet_maker_running(m));
        assert_int_equal(packet_maker_pid(m), -1);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), -EPIPE);

        assert_int_equal(kill(closer_pid_was, SIGKILL), 0);
        while (cg.pid == 0)
                assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
        assert_int_equal(cg.pid, closer_pid_was);
        assert_int_equal(proc_state(closer_pid_was), 0);
        assert_false(closer_running(closer));
        assert_int_equal(pipe(p), 0);
        closer_close(closer, p[1]); /* closed here: at once */
        assert_int_equal(read(p[0], &byte, 1), 0);
        close(p[0]);

        assert_int_equal(packet_maker_restart(m), 0);
        assert_int_equal(closer_restart(closer), 0);
        assert_true(packet_maker_running(m) && closer_running(closer));
        assert_true(packet_maker_pid(m) > 0 && packet_maker_pid(m) != maker_pid);
        assert_true(closer_pid(closer) > 0 && closer_pid(closer) != closer_pid_was);
        assert_int_equal(packet_maker_ask(m, -1, on_made, &g), 0);
        while (g.n < 2)
                assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
        assert_true(g.fds[1] >= 0);
        closer_close(closer, g.fds[1]);
        packet_maker_free(m);
        closer_free(closer);
        event_base_free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_made_in_order),
                cmocka_unit_test(test_bad_namespace),
                cmocka_unit_test(test_dead_children_are_reaped_and_made_again),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
