/* policy-watch.c — inotify on the policy directories (policy-files.h names them). A change only
 * triggers a reload attempt; the reload itself compares contents, so spurious events cost a
 * re-read and nothing else. */
#include <event2/event.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "log.h"
#include "policy-files.h"
#include "policy-watch.h"
#include "util.h"

#define WATCH_MAX 16
#define WATCH_MASK                                                                               \
        (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_DELETE_SELF |   \
         IN_MOVE_SELF | IN_ATTRIB | IN_DONT_FOLLOW | IN_ONLYDIR)

struct PolicyWatch {
        struct event_base *base;
        struct event *event;
        int fd;
        PolicyChangedFn changed;
        void *userdata;
        struct {
                int wd;
                char *dir;
        } watches[WATCH_MAX];
        size_t n_watches;
};

static void watches_clear(PolicyWatch *w) {
        for (size_t i = 0; i < w->n_watches; i++)
                free(w->watches[i].dir);
        w->n_watches = 0;
        if (w->event) {
                event_free(w->event);
                w->event = NULL;
        }
        closep(&w->fd);
        w->fd = -1;
}

void policy_watch_free(PolicyWatch *w) {
        if (!w)
                return;
        watches_clear(w);
        free(w);
}

int policy_watch_new(struct event_base *base, PolicyChangedFn changed, void *userdata, PolicyWatch **ret) {
        PolicyWatch *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->base = base;
        w->fd = -1;
        w->changed = changed;
        w->userdata = userdata;
        *ret = w;
        return 0;
}

static const char *dir_of(int wd, const PolicyWatch *w) {
        for (size_t i = 0; i < w->n_watches; i++)
                if (w->watches[i].wd == wd)
                        return w->watches[i].dir;
        return NULL;
}

/* A new regular file is still being written: wait for its IN_CLOSE_WRITE. New symlinks and
 * directories (the ConfigMap swap) count at once. */
static bool creation_counts(const PolicyWatch *w, const struct inotify_event *ev) {
        if (ev->mask & IN_ISDIR)
                return true;
        const char *dir = dir_of(ev->wd, w);
        _cleanup_(freep) char *p = NULL;
        struct stat st;
        if (!dir || ev->len == 0 || asprintf(&p, "%s/%s", dir, ev->name) < 0)
                return true;
        if (lstat(p, &st) < 0)
                return true;
        return !S_ISREG(st.st_mode);
}

static void on_inotify(evutil_socket_t fd, short what, void *userdata) {
        PolicyWatch *w = userdata;
        uint8_t buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        bool changed = false;

        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                log_warning_errno(errno, "inotify: read failed: %m, ignoring");
                        break;
                }
                for (uint8_t *p = buf; p < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *) p;
                        p += sizeof(struct inotify_event) + ev->len;
                        if (!(ev->mask & IN_Q_OVERFLOW) && !dir_of(ev->wd, w))
                                continue; /* a watch we dropped ourselves */
                        if (ev->mask & IN_Q_OVERFLOW)
                                changed = true;
                        else if (ev->mask & IN_IGNORED)
                                ; /* a watched directory went away: the reload re-arms */
                        else if (!(ev->mask & IN_CREATE) || creation_counts(w, ev))
                                changed = true;
                        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))
                                changed = true;
                }
        }
        if (changed)
                w->changed(w->userdata);
}

typedef struct DirList {
        char *dirs[WATCH_MAX];
        size_t n;
} DirList;

static void want_dir(DirList *l, const char *dir) {
        struct stat st;

        if (!dir || l->n >= WATCH_MAX || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return;
        for (size_t i = 0; i < l->n; i++)
                if (streq_ptr(l->dirs[i], dir))
                        return;
        char *copy = strdup(dir);
        if (copy)
                l->dirs[l->n++] = copy;
}

static void want_parent_of(DirList *l, const char *path) {
        _cleanup_(freep) char *copy = strdup(path);
        if (copy)
                want_dir(l, dirname(copy));
}

static int want_root_dir(DirList *l, const char *root, const char *dir) {
        _cleanup_(freep) char *p = NULL;

        if (asprintf(&p, "%s%s", root ?: "", dir) < 0)
                return -ENOMEM;
        want_dir(l, p);
        return 0;
}

int policy_watch_set(PolicyWatch *w, char *const *paths, size_t n_paths, const char *config, const char *root) {
        DirList want = {};
        char real[PATH_MAX];

        if (config) {
                want_parent_of(&want, config);
                if (realpath(config, real))
                        want_parent_of(&want, real);
        } else if (want_root_dir(&want, root, POLICY_MAIN_DIR) >= 0)
                for (const char *const *d = policy_dropin_dirs; *d; d++)
                        if (want_root_dir(&want, root, *d) < 0)
                                break;
        for (size_t i = 0; i < n_paths; i++) {
                want_parent_of(&want, paths[i]);
                if (realpath(paths[i], real))
                        want_parent_of(&want, real);
        }

        /* One inotify fd for the daemon's life, so that no event queued on it is lost while the
         * set of directories changes; drop what is no longer wanted, add what is new. */
        if (w->fd < 0) {
                w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                if (w->fd < 0) {
                        int r = -errno;
                        for (size_t i = 0; i < want.n; i++)
                                free(want.dirs[i]);
                        return r;
                }
                w->event = event_new(w->base, w->fd, EV_READ | EV_PERSIST, on_inotify, w);
                if (!w->event || event_add(w->event, NULL) < 0) {
                        for (size_t i = 0; i < want.n; i++)
                                free(want.dirs[i]);
                        return -ENOMEM;
                }
        }
        for (size_t i = 0; i < w->n_watches;) {
                bool keep = false;
                for (size_t j = 0; j < want.n && !keep; j++)
                        keep = streq_ptr(want.dirs[j], w->watches[i].dir);
                if (keep) {
                        i++;
                        continue;
                }
                (void) inotify_rm_watch(w->fd, w->watches[i].wd);
                free(w->watches[i].dir);
                w->watches[i] = w->watches[--w->n_watches];
        }
        for (size_t j = 0; j < want.n; j++) {
                bool have = false;
                for (size_t i = 0; i < w->n_watches && !have; i++)
                        have = streq_ptr(want.dirs[j], w->watches[i].dir);
                if (have || w->n_watches >= WATCH_MAX) {
                        free(want.dirs[j]);
                        continue;
                }
                int wd = inotify_add_watch(w->fd, want.dirs[j], WATCH_MASK);
                if (wd < 0) {
                        log_warning_errno(errno, "inotify: cannot watch %s: %m, ignoring", want.dirs[j]);
                        free(want.dirs[j]);
                        continue;
                }
                w->watches[w->n_watches].wd = wd;
                w->watches[w->n_watches].dir = want.dirs[j];
                w->n_watches++;
        }
        return (int) w->n_watches;
}
