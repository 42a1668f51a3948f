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
#include <sys/socket.h>
#include <unistd.h>

#include "packet-maker.h"

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

static int seccomp_mode(pid_t pid) {
        char path[64], line[256];
        int mode = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        f = fopen(path, "re");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Seccomp: %d", &mode) == 1)
                        break;
        fclose(f);
        return mode;
}

static void test_made_in_order(void **state) {
        struct event_base *base = event_base_new();
        Closer *closer = NULL;
        PacketMaker *m = NULL;
        Got g = {.base = base}, other = {.base = base};

        if (!can_make())
                skip();
        assert_non_null(base);
        assert_int_equal(closer_new(&closer), 0);
        assert_int_equal(packet_maker_new(base, &recipe, closer, &m), 0);
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
        assert_int_equal(packet_maker_new(base, &recipe, NULL, &m), 0);
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

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_made_in_order),
                cmocka_unit_test(test_bad_namespace),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
