/* packet-maker.c — the child that makes packet sockets to a recipe, in the namespace it is given,
 * and the queue of answers owed on the daemon's side. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "packet-maker.h"
#include "sandbox.h"
#include "util.h"

typedef struct Owed {
        PacketMade done; /* NULL: forgotten, the socket goes to the closer */
        void *userdata;
} Owed;

struct PacketMaker {
        int fd;    /* -1: its child is gone (or trusted no more) */
        pid_t pid; /* the last child made */
        struct event_base *base;
        const PacketRecipe *recipe;
        struct event *io;
        SandboxReaper *reaper; /* reaps the child when it dies */
        SandboxGoneFn gone;
        void *userdata;
        bool losing; /* lost() tells those owed: no restart from there */
        Closer *closer;
        Owed *owed; /* a queue: [head, head + n) of cap, wrapping */
        size_t head, n, cap;
};

int packet_socket_make(const PacketRecipe *recipe) {
        _cleanup_(closep) int fd = -1;
        int one = 1, version = TPACKET_V3;

        /* protocol 0: it receives nothing before it is bound (with the filter on) */
        fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, recipe->filter, sizeof(*recipe->filter)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof(one)) < 0 ||
            setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) < 0 ||
            setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &recipe->ring, sizeof(recipe->ring)) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* One message and the one descriptor it carries (or -1) in *fd. */
static ssize_t recv_fd(int sock, int flags, void *buf, size_t size, int *fd) {
        size_t n_fds;
        ssize_t n = sandbox_recv_fds(sock, flags, buf, size, fd, 1, &n_fds);

        if (n_fds == 0)
                *fd = -1;
        return n;
}

static ssize_t send_fd(int sock, int flags, const void *buf, size_t size, int fd) {
        return sandbox_send_fds(sock, flags, buf, size, &fd, fd >= 0 ? 1 : 0);
}

__attribute__((noreturn)) static void child(int sock, pid_t parent, const void *arg) {
        const PacketRecipe *recipe = arg;
        int self;

        if (sandbox_detach(sock, parent) < 0)
                _exit(0);
        (void) prctl(PR_SET_NAME, "bigtcpd-packets", 0, 0, 0); /* for ps, and the tests */
        /* its own namespace, to make the sockets of requests that name none */
        self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (self < 0)
                _exit(0);
        static const int calls[] = {SYS_recvmsg, SYS_sendmsg, SYS_setns, SYS_socket, SYS_setsockopt,
                                    SYS_close,   SYS_exit,    SYS_exit_group};
        if (sandbox_restrict(calls, ELEMENTSOF(calls)) < 0)
                sandbox_exit(0);
        for (;;) {
                char byte;
                int ns, fd;
                ssize_t n = recv_fd(SANDBOX_OUTPUT_FD, 0, &byte, 1, &ns);
                if (n == -EINTR)
                        continue;
                if (n <= 0)
                        sandbox_exit(0); /* the daemon closed its end, or is gone */
                int32_t status = setns(ns >= 0 ? ns : self, CLONE_NEWNET) < 0 ? -errno : 0;
                if (ns >= 0)
                        (void) close(ns);
                fd = status < 0 ? -1 : packet_socket_make(recipe); /* here it waits for the kernel */
                if (fd < 0 && status == 0)
                        status = fd;
                if (send_fd(SANDBOX_OUTPUT_FD, 0, &status, sizeof(status), fd) < 0)
                        sandbox_exit(0);
                if (fd >= 0)
                        (void) close(fd); /* the daemon's copy keeps it */
        }
}

static void give(PacketMaker *m, int fd) {
        Owed o = m->owed[m->head];

        m->head = (m->head + 1) % m->cap;
        m->n--;
        if (o.done)
                o.done(fd, o.userdata);
        else if (fd >= 0)
                closer_close(m->closer, fd);
}

/* The socket to the child and its event go: the child reads its end's hang-up. */
static void close_io(PacketMaker *m) {
        if (m->io)
                event_free(m->io);
        m->io = NULL;
        if (m->fd >= 0)
                (void) close(m->fd);
        m->fd = -1;
}

/* The child is gone, or trusted no more (killed, then reaped from the loop): every answer owed
 * is a failure. */
static void lost(PacketMaker *m) {
        close_io(m);
        sandbox_reaper_kill(m->reaper);
        /* those who are told may ask again (-EPIPE), and are not made another child meanwhile */
        m->losing = true;
        while (m->n > 0)
                give(m, -EPIPE);
        m->losing = false;
}

static void on_gone(pid_t pid, int status, void *userdata) {
        PacketMaker *m = userdata;

        lost(m);
        if (m->gone)
                m->gone(pid, status, m->userdata);
}

static void on_answer(evutil_socket_t sock, short what, void *userdata) {
        PacketMaker *m = userdata;

        while (m->fd >= 0) {
                int32_t status = 0;
                int fd;
                ssize_t n = recv_fd(m->fd, MSG_DONTWAIT, &status, sizeof(status), &fd);
                if (n == -EAGAIN || n == -EINTR)
                        return;
                if (n <= 0 || (size_t) n != sizeof(status) || m->n == 0 || (status < 0) != (fd < 0)) {
                        /* the child died, or said what it never says: trusted no more */
                        if (fd >= 0)
                                closer_close(m->closer, fd);
                        lost(m);
                        return;
                }
                give(m, fd >= 0 ? fd : status);
        }
}

/* A child, its end watched, and its reaper, into m (whose last child, if any, is reaped). */
static int spawn(PacketMaker *m) {
        int r;

        r = sandbox_spawn(m->base, child, m->recipe, on_gone, m, &m->fd, &m->pid, &m->reaper);
        if (r < 0)
                return r;
        m->io = event_new(m->base, m->fd, EV_READ | EV_PERSIST, on_answer, m);
        if (!m->io || event_add(m->io, NULL) < 0) {
                lost(m); /* killed, and reaped when it is replaced or freed */
                return -ENOMEM;
        }
        return 0;
}

int packet_maker_new(struct event_base *base, const PacketRecipe *recipe, Closer *closer, SandboxGoneFn gone,
                     void *userdata, PacketMaker **ret) {
        _cleanup_(freep) PacketMaker *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        *m = (PacketMaker){.fd = -1, .pid = -1, .base = base, .recipe = recipe, .gone = gone, .userdata = userdata,
                           .closer = closer};
        r = spawn(m);
        if (r < 0) {
                packet_maker_free(TAKE_PTR(m));
                return r;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

bool packet_maker_running(const PacketMaker *m) {
        return m && m->fd >= 0;
}

int packet_maker_restart(PacketMaker *m) {
        if (!m)
                return -EINVAL;
        if (m->fd >= 0 || m->losing)
                return -EBUSY;
        sandbox_reaper_free(TAKE_PTR(m->reaper), true);
        return spawn(m);
}

void packet_maker_free(PacketMaker *m) {
        if (!m)
                return;
        close_io(m);
        sandbox_reaper_free(m->reaper, false); /* it ends when its socket does */
        free(m->owed);
        free(m);
}

int packet_maker_ask(PacketMaker *m, int netns_fd, PacketMade done, void *userdata) {
        char byte = 0;
        ssize_t n;

        if (m->fd < 0)
                return -EPIPE;
        if (m->n == m->cap) {
                size_t cap = m->cap ? m->cap * 2 : 16;
                Owed *t = calloc(cap, sizeof(*t));
                if (!t)
                        return -ENOMEM;
                for (size_t i = 0; i < m->n; i++)
                        t[i] = m->owed[(m->head + i) % m->cap];
                free(m->owed);
                m->owed = t;
                m->head = 0;
                m->cap = cap;
        }
        n = send_fd(m->fd, MSG_DONTWAIT, &byte, 1, netns_fd);
        if (n == -EAGAIN || n == -ENOBUFS)
                return -EAGAIN;
        if (n < 0) {
                lost(m); /* gone: reaped from the loop; the answers owed fail from here */
                return -EPIPE;
        }
        m->owed[(m->head + m->n) % m->cap] = (Owed){done, userdata};
        m->n++;
        return 0;
}

void packet_maker_forget(PacketMaker *m, void *userdata) {
        for (size_t i = 0; m && i < m->n; i++) {
                Owed *o = &m->owed[(m->head + i) % m->cap];
                if (o->userdata == userdata)
                        o->done = NULL;
        }
}

size_t packet_maker_pending(const PacketMaker *m) {
        return m ? m->n : 0;
}

pid_t packet_maker_pid(const PacketMaker *m) {
        return m && m->fd >= 0 ? m->pid : -1;
}
