/* netns.c — making one network namespace's sockets, engine and sync, for the daemon's own and
 * for every other one alike. */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "log.h"
#include "netns.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

void netns_state_dir_name(uint64_t ino, uint64_t cookie, char buf[static 48]) {
        snprintf(buf, 48, "%" PRIu64 "-%" PRIu64, ino, cookie);
}

void netns_free(Netns *n) {
        if (!n)
                return;
        if (n->engine && n->forward_watch)
                event_watch_remove(&n->engine->events, n->forward_watch);
        if (n->release_timer)
                event_free(n->release_timer);
        sync_free(n->sync);
        engine_free(n->engine);
        policy_set_free(n->policy); /* the engine ran it to the end */
        netlink_free(n->nl);
        for (size_t i = 0; i < ELEMENTSOF(n->snmp.fd); i++)
                if (n->snmp.fd[i] >= 0)
                        close(n->snmp.fd[i]);
        free(n->state_dir);
        free(n->id.name);
        free(n);
}

void netns_run_policy(Netns *n, PolicySet *set, bool verify) {
        PolicySet *old = n->policy;

        if (set == old)
                return;
        n->policy = policy_set_ref(set);
        n->engine->policy = set;
        apply_policy_changed(n->engine);
        policy_set_free(old); /* no engine runs it here any more */
        if (!n->started)
                return; /* the first sync reconciles every device */
        n->engine->settle_pending = true;
        if (verify)
                sync_verify(n->sync);
}

void netns_start(Netns *n, StateEntry *entries, size_t n_entries) {
        n->started = true;
        sync_start(n->sync, entries, n_entries);
}

/* In the namespace (entered or the daemon's own): its sockets, its cookie and, for another
 * namespace, its SNMP files (/proc/net names the caller's namespace, not the one a file was
 * opened in). */
static int open_inside(struct event_base *base, const NamespaceConfig *cfg, Netns *n) {
        socklen_t len = sizeof(n->id.cookie);
        int r;

        r = netlink_new(base, cfg->netlink_rcvbuf, &n->nl);
        if (r < 0)
                return r;
        /* what tells another namespace from a later one given its inode (Linux 5.14); the daemon's
         * own needs none */
        if (getsockopt(netlink_ioctl_fd(n->nl), SOL_SOCKET, SO_NETNS_COOKIE, &n->id.cookie, &len) < 0 && !n->own)
                return -errno;
        if (n->own)
                return 0;
        n->snmp.opened = true;
        for (size_t i = 0; i < ELEMENTSOF(n->snmp.fd); i++) {
                _cleanup_(freep) char *path = NULL;
                if (asprintf(&path, "/proc/thread-self/net/%s", snmp_file_names[i]) < 0)
                        return -ENOMEM;
                /* a namespace without IPv6 has no snmp6: read as absent */
                n->snmp.fd[i] = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (n->snmp.fd[i] < 0 && (errno == EMFILE || errno == ENFILE))
                        return -errno;
        }
        return 0;
}

/* Into the namespace of `fd` (still the file of dev/ino, and a network namespace), run `fn`
 * there, and back to `home_fd`, whatever fn did. */
static int in_namespace(int fd, int home_fd, uint64_t dev, uint64_t ino, int (*fn)(void *userdata),
                        void *userdata) {
        struct stat st;
        int r;

        /* the file may have been replaced since the caller looked at it */
        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uint64_t) st.st_ino != ino || (uint64_t) st.st_dev != dev)
                return -ENOENT;
        r = ioctl(fd, NS_GET_NSTYPE);
        if (r < 0)
                return -errno;
        if (r != CLONE_NEWNET)
                return -EMEDIUMTYPE;
        if (setns(fd, CLONE_NEWNET) < 0)
                return -errno;
        r = fn(userdata);
        if (setns(home_fd, CLONE_NEWNET) < 0) {
                /* Everything the daemon opens from here on would belong to another namespace:
                 * there is no running on from that. */
                log_error_errno(errno, "Failed to return to bigtcpd's own network namespace: %m");
                abort();
        }
        return r;
}

typedef struct OpenInside {
        struct event_base *base;
        const NamespaceConfig *cfg;
        Netns *n;
} OpenInside;

static int open_inside_fn(void *userdata) {
        OpenInside *o = userdata;
        return open_inside(o->base, o->cfg, o->n);
}

typedef struct PeekInside {
        int fd;
        uint64_t cookie;
} PeekInside;

static int peek_inside_fn(void *userdata) {
        PeekInside *p = userdata;
        socklen_t len = sizeof(p->cookie);

        p->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
        if (p->fd < 0)
                return -errno;
        if (getsockopt(p->fd, SOL_SOCKET, SO_NETNS_COOKIE, &p->cookie, &len) < 0)
                p->cookie = 0; /* before Linux 5.14: the inode alone names it */
        return 0;
}

int netns_peek_socket(int fd, int home_fd, uint64_t dev, uint64_t ino, int *ret_fd, uint64_t *ret_cookie) {
        PeekInside p = {.fd = -1};
        int r;

        r = in_namespace(fd, home_fd, dev, ino, peek_inside_fn, &p);
        if (r < 0) {
                if (p.fd >= 0)
                        close(p.fd);
                return r;
        }
        *ret_fd = p.fd;
        *ret_cookie = p.cookie;
        return 0;
}

int netns_new_played(Engine *e, Sync *s, Netns **ret) {
        Netns *n = calloc(1, sizeof(*n));

        if (!n || !(n->state_dir = strdup(e->cfg.runtime_dir))) {
                free(n);
                sync_free(s);
                engine_free(e);
                return -ENOMEM;
        }
        n->snmp.fd[0] = n->snmp.fd[1] = n->snmp.fd[2] = -1;
        n->own = true;
        n->engine = e;
        n->sync = s;
        *ret = n;
        return 0;
}

int netns_new(struct event_base *base, const NamespaceConfig *cfg, Netns **ret) {
        _cleanup_(netns_freep) Netns *n = calloc(1, sizeof(*n));
        char name[48];
        int r;

        if (!n)
                return -ENOMEM;
        n->snmp.fd[0] = n->snmp.fd[1] = n->snmp.fd[2] = -1;
        n->own = cfg->fd < 0;
        n->id.dev = cfg->dev;
        n->id.ino = cfg->ino;
        if (cfg->name && !(n->id.name = strdup(cfg->name)))
                return -ENOMEM;
        r = n->own ? open_inside(base, cfg, n)
                   : in_namespace(cfg->fd, cfg->home_fd, cfg->dev, cfg->ino, open_inside_fn,
                                  &(OpenInside){base, cfg, n});
        if (r < 0)
                return r;

        netns_state_dir_name(n->id.ino, n->id.cookie, name);
        if (n->own ? !(n->state_dir = strdup(cfg->runtime_dir))
                   : asprintf(&n->state_dir, "%s/netns/%s", cfg->runtime_dir, name) < 0) {
                n->state_dir = NULL;
                return -ENOMEM;
        }
        EngineConfig ec = cfg->engine;
        ec.runtime_dir = n->state_dir;
        ec.proc_net = n->own ? "/proc/net" : NULL;
        ec.snmp = n->own ? NULL : &n->snmp;
        ec.netns = n->own ? NULL : &n->id;
        /* its evidence's packet sockets are made in it, where its ifindexes are its devices: in the
         * namespace of its ioctl socket, which names it when one is asked for (no descriptor of
         * the namespace itself is kept) */
        ec.netns_socket = n->own ? -1 : netlink_ioctl_fd(n->nl);
        WriterTransport transport = {netlink_send_request, n->nl, netlink_stats_dump_request};
        r = engine_new(base, &ec, cfg->clock, netlink_ioctl_fd(n->nl), &transport, &apply_writer_ops,
                       &apply_probation_ops, &n->engine);
        if (r < 0)
                return r;
        r = sync_new(n->engine, n->nl, cfg->verify_interval_usec, &n->sync);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(n);
        return 0;
}
