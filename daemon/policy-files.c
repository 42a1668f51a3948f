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
        return policy_load(paths, n_paths, 0, ret, errs);
}

int policy_load(char *const *paths, size_t n_paths, PolicyLoadFlags flags, PolicySet **ret, PolicyErrors *errs) {
        _cleanup_(policy_set_freep) PolicySet *s = NULL;
        bool failed = false;
        int r;

        if (!ret || !errs || (n_paths > 0 && !paths))
                return -EINVAL;

        s = policy_set_new();
        if (!s)
                return -ENOMEM;

        for (size_t i = 0; i < n_paths; i++) {
                _cleanup_(freep) char *data = NULL;
                size_t size = 0;

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
        if (failed)
                return -EINVAL;

        *ret = TAKE_PTR(s);
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
