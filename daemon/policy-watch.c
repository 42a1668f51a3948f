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

#define WATCH_MASK                                                                               \
        (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_DELETE_SELF |   \
         IN_MOVE_SELF | IN_ATTRIB | IN_DONT_FOLLOW | IN_ONLYDIR)

typedef struct Watch {
        int wd;
        char *dir;
} Watch;

struct PolicyWatch {
        struct event_base *base;
        struct event *event;
        int fd;
        PolicyChangedFn changed;
        void *userdata;
        Watch *watches; /* a few per policy file: no limit but the number of files */
        size_t n_watches;
};

static void watches_clear(PolicyWatch *w) {
        for (size_t i = 0; i < w->n_watches; i++)
                free(w->watches[i].dir);
        free(w->watches);
        w->watches = NULL;
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

/* The directories to watch, each once: `want` is a string list of `*n` entries. */
static int want_dir(char ***want, size_t *n, const char *dir) {
        struct stat st;

        if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || strv_contains(*want, dir))
                return 0;
        return strv_push(want, n, dir);
}

static int want_parent_of(char ***want, size_t *n, const char *path) {
        _cleanup_(freep) char *copy = strdup(path);

        if (!copy)
                return -ENOMEM;
        return want_dir(want, n, dirname(copy));
}

static int want_root_dir(char ***want, size_t *n, const char *root, const char *dir) {
        _cleanup_(freep) char *p = NULL;

        if (asprintf(&p, "%s%s", root ?: "", dir) < 0)
                return -ENOMEM;
        return want_dir(want, n, p);
}

int policy_watch_set(PolicyWatch *w, char *const *paths, size_t n_paths, const char *config,
                     const char *root) {
        _cleanup_(strv_freep) char **want = NULL;
        size_t n_want = 0;
        char real[PATH_MAX];
        int r;

        if (config) {
                r = want_parent_of(&want, &n_want, config);
                if (r >= 0 && realpath(config, real))
                        r = want_parent_of(&want, &n_want, real);
        } else {
                r = want_root_dir(&want, &n_want, root, POLICY_MAIN_DIR);
                for (const char *const *d = policy_dropin_dirs; *d && r >= 0; d++)
                        r = want_root_dir(&want, &n_want, root, *d);
        }
        for (size_t i = 0; i < n_paths && r >= 0; i++) {
                r = want_parent_of(&want, &n_want, paths[i]);
                if (r >= 0 && realpath(paths[i], real))
                        r = want_parent_of(&want, &n_want, real);
        }
        if (r < 0)
                return r;

        /* One inotify fd for the daemon's life, so that no event queued on it is lost while the
         * set of directories changes; drop what is no longer wanted, add what is new. */
        if (w->fd < 0) {
                w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                if (w->fd < 0)
                        return -errno;
                w->event = event_new(w->base, w->fd, EV_READ | EV_PERSIST, on_inotify, w);
                if (!w->event || event_add(w->event, NULL) < 0)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < w->n_watches;) {
                if (strv_contains(want, w->watches[i].dir)) {
                        i++;
                        continue;
                }
                (void) inotify_rm_watch(w->fd, w->watches[i].wd);
                free(w->watches[i].dir);
                w->watches[i] = w->watches[--w->n_watches];
        }
        for (size_t j = 0; j < n_want; j++) {
                _cleanup_(freep) char *dir = NULL;
                bool have = false;
                Watch *t;
                int wd;

                for (size_t i = 0; i < w->n_watches && !have; i++)
                        have = streq_ptr(want[j], w->watches[i].dir);
                if (have)
                        continue;
                t = reallocarray(w->watches, w->n_watches + 1, sizeof(Watch));
                if (!t)
                        return -ENOMEM;
                w->watches = t;
                dir = strdup(want[j]);
                if (!dir)
                        return -ENOMEM;
                wd = inotify_add_watch(w->fd, dir, WATCH_MASK);
                if (wd < 0) {
                        log_warning_errno(errno, "inotify: cannot watch %s: %m, ignoring", dir);
                        continue;
                }
                w->watches[w->n_watches++] = (Watch){.wd = wd, .dir = TAKE_PTR(dir)};
        }
        return (int) w->n_watches;
}
