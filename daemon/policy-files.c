/* policy-files.c — where the policy lives and reading it: the main file, the one list of drop-in
 * directories with their precedence, and loading the files in order into a new PolicySet. */

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "policy-files.h"
#include "util.h"

const char *const policy_dropin_dirs[] = {
        "/etc/bigtcpd/bigtcpd.d",
        "/run/bigtcpd/bigtcpd.d",
        "/usr/lib/bigtcpd/bigtcpd.d",
        NULL,
};

/* An error about a whole file (it has no position). */
_printf_(3, 4) static int file_error(PolicyErrors *errs, const char *path, const char *fmt, ...) {
        va_list ap;
        char *m;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&m, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        r = policy_errors_append(errs, path, 0, 0, m);
        if (r < 0)
                free(m);
        return r;
}

/* What is at `path` instead of a regular file, for the error that names it. */
static const char *why_unreadable(const char *path, int error) {
        struct stat st;

        if (error == -ENOENT && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
                return "dangling symlink";
        if (error == -ELOOP)
                return "symlink loop";
        if (error == -EBADF && stat(path, &st) == 0)
                return S_ISFIFO(st.st_mode)   ? "not a regular file (a FIFO)"
                       : S_ISSOCK(st.st_mode) ? "not a regular file (a socket)"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "not a regular file (a device)"
                                                                   : "not a regular file";
        if (error == -EBADF)
                return "not a regular file";
        return strerror(-error);
}

int policy_load_files(char *const *paths, size_t n_paths, PolicySet **ret, PolicyErrors *errs) {
        return policy_load(paths, n_paths, 0, NULL, ret, errs);
}

int policy_load_files_with(char *const *paths, size_t n_paths, const PolicyOverride *override, PolicySet **ret,
                           PolicyErrors *errs) {
        return policy_load(paths, n_paths, 0, override, ret, errs);
}

/* Errors in the override's text are named by its source, not by where it will go. */
static int rename_errors(PolicyErrors *errs, size_t from, const PolicyOverride *o) {
        if (streq_ptr(o->path, o->source))
                return 0;
        for (size_t i = from; i < errs->n; i++) {
                char *f;
                if (!streq_ptr(errs->items[i].file, o->path))
                        continue;
                f = strdup(o->source);
                if (!f)
                        return -ENOMEM;
                free(errs->items[i].file);
                errs->items[i].file = f;
        }
        return 0;
}

int policy_load(char *const *paths, size_t n_paths, PolicyLoadFlags flags, const PolicyOverride *override,
                PolicySet **ret, PolicyErrors *errs) {
        _cleanup_(policy_set_freep) PolicySet *s = NULL;
        bool failed = false;
        int r;

        if (!ret || !errs || (n_paths > 0 && !paths))
                return -EINVAL;

        s = policy_set_new();
        if (!s)
                return -ENOMEM;
        s->partial = flags & POLICY_LOAD_PARTIAL;

        for (size_t i = 0; i < n_paths; i++) {
                _cleanup_(freep) char *data = NULL;
                size_t size = 0, before = errs->n;

                if (override && streq_ptr(paths[i], override->path)) {
                        r = policy_parse_buffer(s, paths[i], override->data, override->size, errs);
                        if (r == -EINVAL) {
                                failed = true;
                                r = rename_errors(errs, before, override);
                        }
                        if (r < 0)
                                return r;
                        continue;
                }
                bool std_in = (flags & POLICY_LOAD_STDIN) && streq_ptr(paths[i], "-");
                const char *name = std_in ? "<stdin>" : paths[i];

                r = std_in ? read_file_bounded("/dev/stdin", POLICY_FILE_MAX, READ_FILE_ANY_TYPE, &data, &size)
                           : read_file_bounded(paths[i], POLICY_FILE_MAX, READ_FILE_REGULAR, &data, &size);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        r = r == -EFBIG ? file_error(errs, name, "file too large (max %u bytes)", POLICY_FILE_MAX)
                                        : file_error(errs, name, "%s", why_unreadable(name, r));
                        if (r < 0)
                                return r;
                        failed = true;
                        continue;
                }

                r = policy_parse_buffer(s, name, data, size, errs);
                if (r == -EINVAL)
                        failed = true;
                else if (r < 0)
                        return r;
        }
        if (failed && !s->partial)
                return -EINVAL;

        *ret = TAKE_PTR(s);
        if (failed)
                return -EINVAL;
        return 0;
}

typedef struct DropIn {
        char *name; /* basename */
        char *path;
} DropIn;

static int dropin_compare(const void *a, const void *b) {
        return strcmp(((const DropIn *) a)->name, ((const DropIn *) b)->name);
}

/* Something is there, whatever it is (a dangling symlink too). */
static bool exists(const char *path) {
        struct stat st;
        return lstat(path, &st) >= 0;
}

bool policy_dropin_name_ok(const char *name) {
        size_t l = strlen(name);
        /* hidden files are editors' and ConfigMaps' (..data) scaffolding */
        return name[0] != '.' && l > 5 && streq_ptr(name + l - 5, ".yaml");
}

static int collect_dropins(const char *dir, DropIn **items, size_t *n) {
        _cleanup_(closedirp) DIR *d = NULL;
        struct dirent *de;

        d = opendir(dir);
        if (!d)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;

        while ((errno = 0, de = readdir(d))) {
                _cleanup_(freep) char *path = NULL, *name = NULL;
                bool seen = false;
                DropIn *t;

                if (!policy_dropin_name_ok(de->d_name))
                        continue;
                for (size_t i = 0; i < *n; i++)
                        if (streq_ptr((*items)[i].name, de->d_name)) {
                                seen = true; /* a directory earlier in the order has it */
                                break;
                        }
                if (seen)
                        continue;
                if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) {
                        path = NULL;
                        return -ENOMEM;
                }
                if (!exists(path))
                        continue; /* gone since readdir() */
                name = strdup(de->d_name);
                if (!name)
                        return -ENOMEM;
                t = realloc(*items, (*n + 1) * sizeof(DropIn));
                if (!t)
                        return -ENOMEM;
                *items = t;
                (*items)[(*n)++] = (DropIn){.name = TAKE_PTR(name), .path = TAKE_PTR(path)};
        }
        if (errno != 0)
                return -errno;
        return 0;
}

int policy_discover(const char *config, const char *root, char ***ret_paths) {
        _cleanup_(strv_freep) char **l = NULL;
        DropIn *items = NULL;
        size_t n = 0, n_items = 0;
        char *main_path = NULL;
        int r = 0;

        if (!ret_paths)
                return -EINVAL;
        if (!root)
                root = "";

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;

        if (config) {
                char *c = strdup(config);
                if (!c)
                        return -ENOMEM;
                r = strv_push_take(&l, &n, c);
                if (r < 0) {
                        free(c);
                        return r;
                }
                *ret_paths = TAKE_PTR(l);
                return 1;
        }

        if (asprintf(&main_path, "%s" POLICY_MAIN_FILE, root) < 0)
                return -ENOMEM;
        if (exists(main_path)) {
                r = strv_push_take(&l, &n, main_path);
                if (r < 0) {
                        free(main_path);
                        return r;
                }
        } else
                free(main_path);

        for (const char *const *d = policy_dropin_dirs; *d && r >= 0; d++) {
                char *dir;
                if (asprintf(&dir, "%s%s", root, *d) < 0) {
                        r = -ENOMEM;
                        break;
                }
                r = collect_dropins(dir, &items, &n_items);
                free(dir);
        }
        if (r >= 0 && n_items > 0)
                qsort(items, n_items, sizeof(DropIn), dropin_compare);
        for (size_t i = 0; i < n_items; i++) {
                free(items[i].name);
                if (r >= 0) {
                        r = strv_push_take(&l, &n, items[i].path);
                        if (r >= 0)
                                continue;
                }
                free(items[i].path);
        }
        free(items);
        if (r < 0)
                return r;

        *ret_paths = TAKE_PTR(l);
        return (int) n;
}

static const char *base_name(const char *path) {
        const char *s = strrchr(path, '/');
        return s ? s + 1 : path;
}

/* `path` is <dir>/<name> with no further slash in name. */
static bool directly_in(const char *path, const char *dir) {
        size_t l = strlen(dir);
        return strncmp(path, dir, l) == 0 && path[l] == '/' && !strchr(path + l + 1, '/');
}

int policy_discover_with(const char *config, const char *root, const char *target, char ***ret_paths) {
        _cleanup_(strv_freep) char **l = NULL;
        _cleanup_(freep) char *main_path = NULL, *etc_dir = NULL, *t = NULL;
        size_t n, at;
        int k;

        if (!target || !ret_paths)
                return -EINVAL;
        if (!root)
                root = "";
        if (config && !streq_ptr(config, target))
                return -EXDEV;
        if (asprintf(&main_path, "%s" POLICY_MAIN_FILE, root) < 0 ||
            asprintf(&etc_dir, "%s%s", root, policy_dropin_dirs[0]) < 0)
                return -ENOMEM;
        if (!config && !streq_ptr(target, main_path) &&
            !(directly_in(target, etc_dir) && policy_dropin_name_ok(base_name(target))))
                return -EXDEV;

        k = policy_discover(config, root, &l);
        if (k < 0)
                return k;
        n = (size_t) k;
        for (size_t i = 0; i < n; i++)
                if (streq_ptr(l[i], target)) {
                        *ret_paths = TAKE_PTR(l);
                        return (int) n;
                }

        if (streq_ptr(target, main_path))
                at = 0;
        else {
                /* a drop-in of /etc: it takes the place of any of the same name in /run or
                 * /usr/lib, in the lexical order of the drop-ins after the main file */
                const char *name = base_name(target);
                size_t w = 0;
                for (size_t i = 0; i < n; i++) {
                        if (i == 0 && streq_ptr(l[0], main_path)) {
                                l[w++] = l[i];
                                continue;
                        }
                        if (streq_ptr(base_name(l[i]), name)) {
                                free(l[i]);
                                continue;
                        }
                        l[w++] = l[i];
                }
                n = w;
                l[n] = NULL;
                at = n > 0 && streq_ptr(l[0], main_path) ? 1 : 0;
                while (at < n && strcmp(base_name(l[at]), name) < 0)
                        at++;
        }
        t = strdup(target);
        if (!t)
                return -ENOMEM;
        char **grown = reallocarray(l, n + 2, sizeof(char *));
        if (!grown)
                return -ENOMEM;
        l = grown;
        memmove(l + at + 1, l + at, (n - at + 1) * sizeof(char *));
        l[at] = TAKE_PTR(t);
        *ret_paths = TAKE_PTR(l);
        return (int) (n + 1);
}
