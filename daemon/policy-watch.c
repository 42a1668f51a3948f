/* policy-watch.c — inotify on the policy directories (policy-files.h names them). Each
 * directory is watched for the names that matter in it: a policy file, a drop-in directory,
 * `*.yaml` in a drop-in directory, and Kubernetes' `..data` scaffolding; an editor's swap file
 * or the daemon's own state files next to them are not a reason to re-read anything. A change
 * only triggers a reload attempt; the reload itself compares contents. */
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

/* A directory and the names in it that matter. */
typedef struct Watch {
        int wd;
        char *dir;
        bool dropins;  /* every drop-in name (*.yaml) */
        char **names;  /* and these */
        size_t n_names;
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

static void watch_done(Watch *w) {
        free(w->dir);
        strv_free(w->names);
        *w = (Watch){.wd = -1};
}

static void watches_clear(PolicyWatch *w) {
        for (size_t i = 0; i < w->n_watches; i++)
                watch_done(&w->watches[i]);
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

static const Watch *watch_of(int wd, const PolicyWatch *w) {
        for (size_t i = 0; i < w->n_watches; i++)
                if (w->watches[i].wd == wd)
                        return &w->watches[i];
        return NULL;
}

static const char *dir_of(int wd, const PolicyWatch *w) {
        const Watch *x = watch_of(wd, w);
        return x ? x->dir : NULL;
}

/* An event about the directory itself (no name) always matters. */
static bool name_matters(const Watch *x, const char *name, size_t len) {
        if (len == 0 || name[0] == '\0')
                return true;
        /* Kubernetes' atomic writer swaps "..data" (a symlink to a "..<timestamp>" directory)
         * under the files' symlinks */
        if (strncmp(name, "..", 2) == 0)
                return true;
        if (x->dropins && policy_dropin_name_ok(name))
                return true;
        return strv_contains(x->names, name);
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
                        const Watch *x = watch_of(ev->wd, w);
                        p += sizeof(struct inotify_event) + ev->len;
                        if (!(ev->mask & IN_Q_OVERFLOW) && !x)
                                continue; /* a watch we dropped ourselves */
                        if (x && !name_matters(x, ev->name, ev->len))
                                continue;
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

/* The directories to watch, each once, with the names that matter in them. */
typedef struct Wanted {
        Watch *items;
        size_t n;
} Wanted;

static void wanted_done(Wanted *l) {
        for (size_t i = 0; i < l->n; i++)
                watch_done(&l->items[i]);
        free(l->items);
}

/* `dir` (if it is a directory), for drop-ins or for the name `name` in it. */
static int want(Wanted *l, const char *dir, bool dropins, const char *name) {
        struct stat st;
        Watch *x = NULL;

        if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return 0;
        for (size_t i = 0; i < l->n && !x; i++)
                if (streq_ptr(l->items[i].dir, dir))
                        x = &l->items[i];
        if (!x) {
                Watch *t = reallocarray(l->items, l->n + 1, sizeof(Watch));
                if (!t)
                        return -ENOMEM;
                l->items = t;
                x = &l->items[l->n];
                *x = (Watch){.wd = -1, .dir = strdup(dir)};
                if (!x->dir)
                        return -ENOMEM;
                l->n++;
        }
        x->dropins = x->dropins || dropins;
        if (name && !strv_contains(x->names, name))
                return strv_push(&x->names, &x->n_names, name);
        return 0;
}

/* The directory `path` is in, for its name. */
static int want_file(Wanted *l, const char *path) {
        _cleanup_(freep) char *d = strdup(path), *b = strdup(path);

        if (!d || !b)
                return -ENOMEM;
        return want(l, dirname(d), false, basename(b));
}

static int want_file_and_target(Wanted *l, const char *path) {
        char real[PATH_MAX];
        int r = want_file(l, path);
        if (r >= 0 && realpath(path, real))
                r = want_file(l, real);
        return r;
}

int policy_watch_set(PolicyWatch *w, char *const *paths, size_t n_paths, const char *config,
                     const char *root) {
        _cleanup_(wanted_done) Wanted l = {};
        int r = 0;

        if (config)
                r = want_file_and_target(&l, config);
        else {
                _cleanup_(freep) char *main_file = NULL;
                if (asprintf(&main_file, "%s" POLICY_MAIN_FILE, root ?: "") < 0)
                        return -ENOMEM;
                r = want_file(&l, main_file);
                /* a drop-in directory, and its parent for the directory to appear or be replaced */
                for (const char *const *d = policy_dropin_dirs; *d && r >= 0; d++) {
                        _cleanup_(freep) char *p = NULL;
                        if (asprintf(&p, "%s%s", root ?: "", *d) < 0)
                                return -ENOMEM;
                        r = want(&l, p, true, NULL);
                        if (r >= 0)
                                r = want_file(&l, p);
                }
        }
        for (size_t i = 0; i < n_paths && r >= 0; i++)
                r = want_file_and_target(&l, paths[i]);
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
        /* keep the watches still wanted, with their names as they are wanted now */
        for (size_t i = 0; i < w->n_watches;) {
                Watch *x = NULL;
                for (size_t j = 0; j < l.n && !x; j++)
                        if (streq_ptr(l.items[j].dir, w->watches[i].dir))
                                x = &l.items[j];
                if (!x) {
                        (void) inotify_rm_watch(w->fd, w->watches[i].wd);
                        watch_done(&w->watches[i]);
                        w->watches[i] = w->watches[--w->n_watches];
                        continue;
                }
                strv_free(w->watches[i].names);
                w->watches[i].names = TAKE_PTR(x->names);
                w->watches[i].n_names = x->n_names;
                w->watches[i].dropins = x->dropins;
                x->wd = w->watches[i].wd; /* taken */
                i++;
        }
        for (size_t j = 0; j < l.n; j++) {
                Watch *x = &l.items[j], *t;
                int wd;

                if (x->wd >= 0)
                        continue;
                t = reallocarray(w->watches, w->n_watches + 1, sizeof(Watch));
                if (!t)
                        return -ENOMEM;
                w->watches = t;
                wd = inotify_add_watch(w->fd, x->dir, WATCH_MASK);
                if (wd < 0) {
                        log_warning_errno(errno, "inotify: failed to watch %s: %m, ignoring", x->dir);
                        continue;
                }
                x->wd = wd;
                w->watches[w->n_watches++] = *x;
                *x = (Watch){.wd = -1}; /* moved */
        }
        return (int) w->n_watches;
}
