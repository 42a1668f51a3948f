/* netns-set-scan.c — the namespace set's scanning of the namespace directories: inotify on them and
 * the mount table for the bind-mount that makes a file there a namespace, the names each namespace
 * goes by (the visible names), which of them to take, the descriptor budget the namespaces taken
 * may use (and those left for want of it), and Plan's read-only looks at namespaces not entered. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "netns-set-internal.h"
#include "policy-match.h"

static void watch_dirs(NetnsSet *s) {
        for (size_t i = 0; i < s->n_dirs; i++)
                if (s->wd[i] < 0)
                        /* a directory made later (ip netns makes /run/netns at its first use) is
                         * found by the scan its mount causes */
                        s->wd[i] = inotify_add_watch(s->inotify_fd, s->dirs[i],
                                                     IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                                             IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                                                             IN_ONLYDIR | IN_EXCL_UNLINK);
}

/* Inode → pointer, open addressing: a scan looks up every entry of the directories in it, so
 * that a scan costs O(entries), not O(entries × namespaces). Inode 0 marks a free slot (nsfs
 * never hands it out). */
typedef struct InoMap {
        uint64_t *keys;
        void **values;
        size_t cap, n;
} InoMap;

static size_t ino_slot(const InoMap *m, uint64_t k) {
        size_t i = (size_t) ((k * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);

        while (m->keys[i] != 0 && m->keys[i] != k)
                i = (i + 1) & (m->cap - 1);
        return i;
}

static void *ino_map_get(const InoMap *m, uint64_t k) {
        if (m->cap == 0 || k == 0)
                return NULL;
        size_t i = ino_slot(m, k);
        return m->keys[i] == k ? m->values[i] : NULL;
}

static int ino_map_put(InoMap *m, uint64_t k, void *v) {
        if (k == 0)
                return -EINVAL;
        if ((m->n + 1) * 2 > m->cap) {
                InoMap g = {.cap = m->cap ? m->cap * 2 : 64};
                g.keys = calloc(g.cap, sizeof(*g.keys));
                g.values = calloc(g.cap, sizeof(*g.values));
                if (!g.keys || !g.values) {
                        free(g.keys);
                        free(g.values);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < m->cap; i++)
                        if (m->keys[i]) {
                                size_t j = ino_slot(&g, m->keys[i]);
                                g.keys[j] = m->keys[i];
                                g.values[j] = m->values[i];
                                g.n++;
                        }
                free(m->keys);
                free(m->values);
                *m = g;
        }
        size_t i = ino_slot(m, k);
        if (m->keys[i] == 0)
                m->n++;
        m->keys[i] = k;
        m->values[i] = v;
        return 0;
}

static void ino_map_done(InoMap *m) {
        free(m->keys);
        free(m->values);
        *m = (InoMap){};
}

typedef struct Seen {
        InoMap seen;  /* every namespace the scan found (value: itself, unused) */
        InoMap known; /* the managed ones by inode, from before the scan */
} Seen;

static void seen_add(Seen *v, uint64_t ino) {
        (void) ino_map_put(&v->seen, ino, v);
}

static bool seen_has(const Seen *v, uint64_t ino) {
        return ino_map_get(&v->seen, ino) != NULL;
}

/* After a scan: one that could not be entered and went may come back as another namespace; one let
 * go with devices not restored whose file went may be entered again when it is back. */
static bool keep_seen(NetnsProblem *p, const void *userdata) {
        const Seen *seen = userdata;

        if (seen_has(seen, p->ino))
                return true;
        p->blocks = false;
        return p->kind == NETNS_PROBLEM_NOT_RESTORED;
}


/* One name in a namespace directory: the file of a network namespace (a bind-mount of nsfs) other
 * than the daemon's own. A namespace may have several; a name names one namespace at a time, which
 * a later mount over it may change. */
typedef struct Name {
        const char *dir; /* s->dirs[dir_index] */
        size_t dir_index;
        char *name;
        uint64_t ino;
} Name;

typedef struct Names {
        Name *items;
        size_t n;
} Names;

static void names_done(Names *v) {
        for (size_t i = 0; i < v->n; i++)
                free(v->items[i].name);
        free(v->items);
        *v = (Names){};
}

void netns_set_visible_clear(NetnsSet *s) {
        for (size_t i = 0; i < s->n_visible; i++)
                free(s->visible[i]);
        s->n_visible = 0;
}

static void visible_add(NetnsSet *s, const char *name) {
        char **t, *copy;

        if (s->n_visible >= NETNS_MAX || !(copy = strdup(name)))
                return;
        t = realloc(s->visible, (s->n_visible + 1) * sizeof(*t));
        if (!t) {
                free(copy);
                return;
        }
        s->visible = t;
        s->visible[s->n_visible++] = copy;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

size_t netns_set_visible_count(const NetnsSet *s) {
        return s->n_visible;
}

const char *netns_set_visible(const NetnsSet *s, size_t i) {
        return i < s->n_visible ? s->visible[i] : NULL;
}

static void scan_dir(NetnsSet *s, size_t dir_index, Names *out) {
        _cleanup_(closep) int fd = open(s->dirs[dir_index], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;

        if (fd < 0)
                return;
        d = fdopendir(dup(fd));
        if (!d)
                return;
        while ((de = readdir(d))) {
                struct stat st;
                char *name;

                if (!netns_name_is_valid(de->d_name))
                        continue;
                /* a namespace's file is a bind-mount of nsfs; before the mount it is an empty file */
                if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || (uint64_t) st.st_dev != s->nsfs_dev ||
                    (uint64_t) st.st_ino == s->host_ino)
                        continue;
                Name *t = realloc(out->items, (out->n + 1) * sizeof(*t));
                if (!t)
                        break;
                out->items = t;
                if (!(name = strdup(de->d_name)))
                        break;
                t[out->n++] = (Name){.dir = s->dirs[dir_index], .dir_index = dir_index, .name = name,
                                     .ino = st.st_ino};
        }
        closedir(d);
}

static int cmp_name(const void *a, const void *b) {
        const Name *x = a, *y = b;
        int c = strcmp(x->name, y->name);

        return c != 0 ? c : x->dir_index < y->dir_index ? -1 : x->dir_index > y->dir_index;
}

static int cmp_ino(const void *a, const void *b) {
        const Name *x = a, *y = b;

        return x->ino < y->ino ? -1 : x->ino > y->ino ? 1 : cmp_name(a, b);
}

/* Every name of every directory, each once, sorted by name: where two directories have one, the
 * first directory's (whose file netns_set_enter() and netns_set_peek() open). */
static void collect(NetnsSet *s, Names *v) {
        size_t k = 0;

        for (size_t i = 0; i < s->n_dirs; i++)
                scan_dir(s, i, v);
        if (v->n > 1)
                qsort(v->items, v->n, sizeof(*v->items), cmp_name);
        for (size_t i = 0; i < v->n; i++) {
                if (k > 0 && streq_ptr(v->items[k - 1].name, v->items[i].name)) {
                        free(v->items[i].name); /* a later directory's */
                        continue;
                }
                v->items[k++] = v->items[i];
        }
        v->n = k;
}

/* The namespace a name names now (collect()'s order), or 0. */
static uint64_t named(const Names *v, const char *name) {
        size_t lo = 0, hi = v->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(v->items[mid].name, name);
                if (c == 0)
                        return v->items[mid].ino;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return 0;
}

/* Of the `n` names of one namespace (sorted), the one it goes by: that of the Netns `known` that
 * has it (managed, or being let go) while it is one of them; else the first a policy takes, so
 * that whatever order a directory lists them in, a namespace any of whose names a policy takes
 * is managed; else the first. */
static const Name *pick_name(const NetnsSet *s, const Name *names, size_t n, const Netns *known) {
        for (size_t i = 0; known && i < n; i++)
                if (streq_ptr(names[i].name, known->id.name))
                        return &names[i];
        for (size_t i = 0; i < n; i++)
                if (policy_set_takes_netns(s->policy, names[i].name))
                        return &names[i];
        return &names[0];
}

/* The names by namespace (sorted by inode, v reordered): each namespace once in the visible names
 * (under pick_name()) and in `seen`; those not known yet that a policy takes (or that have state
 * of an earlier run) into `found`, when it is given. */
static void by_namespace(NetnsSet *s, Names *v, Seen *seen, Names *found) {
        if (v->n > 1)
                qsort(v->items, v->n, sizeof(*v->items), cmp_ino);
        for (size_t i = 0, j; i < v->n; i = j) {
                uint64_t ino = v->items[i].ino;
                Netns *known = ino_map_get(&seen->known, ino);

                for (j = i + 1; j < v->n && v->items[j].ino == ino; j++)
                        ;
                const Name *pick = pick_name(s, v->items + i, j - i, known);
                seen_add(seen, ino);
                visible_add(s, pick->name);
                if (!found || known)
                        continue;
                if (!policy_set_takes_netns(s->policy, pick->name) && !netns_set_state_dir_exists(s, ino))
                        continue;
                if (netns_set_is_refused(s, ino))
                        continue;
                Name *t = realloc(found->items, (found->n + 1) * sizeof(*t));
                if (!t)
                        break;
                found->items = t;
                t[found->n] = *pick;
                t[found->n].name = strdup(pick->name);
                if (t[found->n].name)
                        found->n++;
        }
}

/* ---- descriptors: each namespace holds NETNS_FDS of them for as long as it is managed; the
 * namespaces never take the last FDS_RESERVE of RLIMIT_NOFILE, which stay for root's control
 * connections, the state files and the workers. A namespace left for want of them is tried again
 * when a namespace goes, and every STARVED_RETRY_SEC while some wait. ---- */

#define FDS_RESERVE 64u
#define STARVED_RETRY_SEC 5

static int count_open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d)))
                n += de->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

/* What the namespaces taken by this scan may use: the soft limit less what is open and the
 * reserve (SIZE_MAX when that cannot be told: then EMFILE itself says it). */
static size_t fd_budget(void) {
        struct rlimit rl;
        int open_now = count_open_fds();

        if (open_now < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                return SIZE_MAX;
        if (rl.rlim_cur <= (rlim_t) open_now + FDS_RESERVE)
                return 0;
        return (size_t) (rl.rlim_cur - (rlim_t) open_now - FDS_RESERVE);
}

static void starve(NetnsSet *s, const char *name, uint64_t ino) {
        struct rlimit rl = {};

        s->n_starved++;
        netns_set_problem_add(s, NETNS_PROBLEM_DESCRIPTORS, name, ino, -EMFILE, 0, false);
        if (s->logged_starved)
                return;
        s->logged_starved = true;
        (void) getrlimit(RLIMIT_NOFILE, &rl);
        log_warning("netns %s: not managed for now: its %u descriptors would leave fewer than %u of bigtcpd's "
                    "%llu (RLIMIT_NOFILE) free; it is tried again when descriptors free up (raise LimitNOFILE= "
                    "of bigtcpd.service)",
                    name, NETNS_FDS, FDS_RESERVE, (unsigned long long) rl.rlim_cur);
}

void netns_set_on_starved_timer(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

static void take(NetnsSet *s, const Name *c) {
        Netns *n = NULL;
        int r;

        if (netns_set_find(s, c->name))
                return; /* one that could not be let go (out of memory) keeps its name */
        if (s->n >= NETNS_MAX) {
                if (!s->logged_limit)
                        log_warning("netns %s: already managing %u namespaces; leaving the others alone", c->name,
                                    NETNS_MAX);
                s->logged_limit = true;
                return;
        }
        if (s->fd_budget < NETNS_FDS) {
                starve(s, c->name, c->ino);
                return;
        }
        r = netns_set_enter(s, c->dir, c->name, c->ino, &n);
        if (r == -ENOENT)
                return; /* gone again */
        if (r == -EMFILE || r == -ENFILE) {
                s->fd_budget = 0; /* the count was wrong: nothing more this scan */
                starve(s, c->name, c->ino);
                return;
        }
        if (s->fd_budget != SIZE_MAX)
                s->fd_budget -= NETNS_FDS;
        if (r < 0) {
                netns_set_problem_add(s, NETNS_PROBLEM_CANNOT_ENTER, c->name, c->ino, r, 0, true);
                if (r == -EPERM)
                        log_error_errno(r, "netns %s: failed to enter it: %m; bigtcpd needs CAP_SYS_ADMIN for other "
                                           "namespaces (see NETWORK NAMESPACES in bigtcpd(8))",
                                        c->name);
                else if (r != -EMEDIUMTYPE) /* not a network namespace: nothing to say */
                        log_warning_errno(r, "netns %s: failed to enter it: %m; ignoring", c->name);
                return;
        }
        if (netns_set_insert(s, n) < 0) {
                netns_free(n);
                return;
        }
        n->seen = true;
        log_info("netns %s: managing it (%s/%s)", n->id.name, c->dir, n->id.name);
}

/* ---- read-only looks (Plan's): one socket, for a moment, in a namespace not entered ---- */

void netns_set_look(NetnsSet *s) {
        Names names = {};
        Seen seen = {};

        if (s->watching)
                return; /* the scans keep the names */
        netns_set_visible_clear(s);
        collect(s, &names);
        by_namespace(s, &names, &seen, NULL);
        if (s->n_visible > 1)
                qsort(s->visible, s->n_visible, sizeof(*s->visible), cmp_names);
        names_done(&names);
        ino_map_done(&seen.seen);
        ino_map_done(&seen.known);
}

int netns_set_peek(NetnsSet *s, const char *name, int *ret_fd, uint64_t *ret_ino, uint64_t *ret_cookie) {
        if (!netns_name_is_valid(name))
                return -ENOENT;
        /* its file and the socket, for a moment: never out of the reserve */
        if (fd_budget() < 2)
                return -EMFILE;
        for (size_t i = 0; i < s->n_dirs; i++) {
                _cleanup_(freep) char *path = NULL;
                _cleanup_(closep) int fd = -1;
                struct stat st;
                int r;

                if (asprintf(&path, "%s/%s", s->dirs[i], name) < 0)
                        return -ENOMEM;
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
                if (fd < 0 && (errno == EMFILE || errno == ENFILE))
                        return -errno;
                if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t) st.st_dev != s->nsfs_dev ||
                    (uint64_t) st.st_ino == s->host_ino)
                        continue; /* not here, not mounted (yet), or the daemon's own */
                r = netns_peek_socket(fd, s->host_fd, st.st_dev, st.st_ino, ret_fd, ret_cookie);
                if (r >= 0)
                        *ret_ino = st.st_ino;
                return r;
        }
        return -ENOENT;
}

/* State directories of namespaces not visible at start: the namespace may live on without a
 * file here (a bind-mount elsewhere, a later mount, another --netns-dir), and nothing tells a
 * gone one from that but a namespace that has its inode with another cookie (prepare_state_dir).
 * They stay, and are used when their namespace appears. */
static void log_unseen_state(NetnsSet *s, const Seen *seen) {
        for (size_t i = 0; i < s->n_leftover; i++)
                if (!seen_has(seen, s->leftover[i].ino))
                        log_info("netns: the namespace of inode %" PRIu64 " (cookie %" PRIu64 ") that bigtcpd wrote "
                                 "to before is not in the namespace directories; keeping its state for when it is",
                                 s->leftover[i].ino, s->leftover[i].cookie);
}

static void scan(NetnsSet *s) {
        Names found = {};
        Names names = {};
        Seen seen = {};

        watch_dirs(s);
        collect(s, &names);
        /* a managed one is there while its name names it: a name that names another namespace now
         * (a mount over it) is that one's, and the one it named goes as when its file goes (while
         * it is let go, another name of it does not enter it again) */
        for (size_t i = 0; i < s->n; i++) {
                Netns *n = s->items[i];
                n->seen = named(&names, n->id.name) == n->id.ino;
                (void) ino_map_put(&seen.known, n->id.ino, n);
        }
        /* one being let go is not entered again before that is done (a scan follows) */
        for (size_t i = 0; i < s->n_releasing; i++)
                (void) ino_map_put(&seen.known, s->releasing[i]->id.ino, s->releasing[i]);
        /* those that went first: a name deleted and made again is a new namespace */
        for (size_t i = s->n; i > 0; i--)
                if (!s->items[i - 1]->seen)
                        netns_set_give_up(s, i - 1,
                                          named(&names, s->items[i - 1]->id.name)
                                                  ? "its name names another namespace now"
                                                  : "its file is gone");
        netns_set_visible_clear(s);
        by_namespace(s, &names, &seen, &found);
        names_done(&names);
        if (s->n_visible > 1)
                qsort(s->visible, s->n_visible, sizeof(*s->visible), cmp_names);
        s->n_starved = 0;
        netns_set_problems_filter(s, netns_set_keep_not_descriptors, NULL);
        s->fd_budget = found.n > 0 ? fd_budget() : 0;
        for (size_t i = 0; i < found.n; i++)
                take(s, &found.items[i]);
        names_done(&found);
        if (s->n_starved > 0)
                evtimer_add(s->starved_timer, &(struct timeval){.tv_sec = STARVED_RETRY_SEC});
        else {
                if (s->logged_starved)
                        log_info("netns: no namespace waits for descriptors any more");
                s->logged_starved = false;
                evtimer_del(s->starved_timer);
        }
        netns_set_problems_filter(s, keep_seen, &seen);
        if (!s->scanned)
                log_unseen_state(s, &seen);
        s->scanned = true;
        ino_map_done(&seen.seen);
        ino_map_done(&seen.known);
}

void netns_set_on_scan(evutil_socket_t fd, short what, void *userdata) {
        scan(userdata);
}

static void on_inotify(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        for (;;) {
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k <= 0)
                        break;
                for (char *p = buf; p < buf + k;) {
                        const struct inotify_event *ev = (const struct inotify_event *) p;
                        if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))
                                for (size_t i = 0; i < s->n_dirs; i++)
                                        if (s->wd[i] == ev->wd) {
                                                if (!(ev->mask & IN_IGNORED))
                                                        (void) inotify_rm_watch(s->inotify_fd, ev->wd);
                                                s->wd[i] = -1;
                                        }
                        p += sizeof(*ev) + ev->len;
                }
        }
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

/* The mount table polls as readable always, and as "priority, error" once after each change
 * (its poll consumes the change). libevent asks only for readable, so the mount table is watched
 * through an epoll of its own that asks for EPOLLPRI alone: that one is readable once per change
 * and rests otherwise. Whoever polls first consumes the change (the loop's poll of the inner
 * epoll, here), so the inner epoll_wait() may report nothing: it only drains. */
static void on_mounts(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        struct epoll_event ev[4];

        while (epoll_wait(s->mounts_fd, ev, ELEMENTSOF(ev), 0) > 0)
                ;
        event_active(s->scan_event, EV_TIMEOUT, 0);
}

static int watch_mounts(NetnsSet *s) {
        struct epoll_event ev = {.events = EPOLLPRI};

        s->mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        if (s->mountinfo_fd < 0)
                return -errno;
        s->mounts_fd = epoll_create1(EPOLL_CLOEXEC);
        if (s->mounts_fd < 0)
                return -errno;
        if (epoll_ctl(s->mounts_fd, EPOLL_CTL_ADD, s->mountinfo_fd, &ev) < 0)
                return -errno;
        s->mounts_event = event_new(s->base, s->mounts_fd, EV_READ | EV_PERSIST, on_mounts, s);
        if (!s->mounts_event || event_add(s->mounts_event, NULL) < 0)
                return -ENOMEM;
        return 0;
}

void netns_set_stop_watching(NetnsSet *s) {
        if (s->inotify_event)
                event_free(s->inotify_event);
        if (s->mounts_event)
                event_free(s->mounts_event);
        s->inotify_event = s->mounts_event = NULL;
        s->inotify_fd = safe_close(s->inotify_fd);
        s->mounts_fd = safe_close(s->mounts_fd);
        s->mountinfo_fd = safe_close(s->mountinfo_fd);
        for (size_t i = 0; i < s->n_dirs; i++)
                s->wd[i] = -1;
        netns_set_visible_clear(s); /* not known any more */
        s->watching = false;
}

static int start_watching(NetnsSet *s) {
        int r;

        if (s->watching)
                return 0;
        s->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (s->inotify_fd < 0)
                return -errno;
        s->inotify_event = event_new(s->base, s->inotify_fd, EV_READ | EV_PERSIST, on_inotify, s);
        if (!s->inotify_event || event_add(s->inotify_event, NULL) < 0) {
                netns_set_stop_watching(s);
                return -ENOMEM;
        }
        r = watch_mounts(s);
        if (r == -ENOMEM) {
                netns_set_stop_watching(s);
                return r;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to watch /proc/self/mountinfo: %m; namespaces are found when their "
                                     "files appear, not when they are mounted");
                if (s->mounts_event)
                        event_free(s->mounts_event);
                s->mounts_event = NULL;
                s->mounts_fd = safe_close(s->mounts_fd);
                s->mountinfo_fd = safe_close(s->mountinfo_fd);
        }
        s->watching = true;
        return 0;
}

/* The namespaces the policy names, and those with state of an earlier run: looked for once the
 * set has started, after every policy change. */
void netns_set_look_for_namespaces(NetnsSet *s) {
        int r;

        if (!s->read_leftover) {
                netns_set_read_leftovers(s);
                s->read_leftover = true;
        }
        if (netns_set_nothing_to_look_for(s)) {
                /* the directories are not even watched */
                if (s->watching)
                        log_debug("netns: no policy names another namespace: the namespace directories are not "
                                  "watched any more");
                netns_set_stop_watching(s);
                return;
        }
        r = start_watching(s);
        if (r < 0)
                log_error_errno(r, "Failed to watch the namespace directories: %m; other namespaces are not managed");
        else
                scan(s);
}
