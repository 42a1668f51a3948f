/* policy-files.h — where the policy lives: the main file and the one list of drop-in directories
 * (read by discovery, the inotify watch and the help text), and loading the files into a set. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

/* The main policy file and the directory that holds it, below the root ("" in production). */
#define POLICY_MAIN_DIR "/etc/bigtcpd"
#define POLICY_MAIN_FILE POLICY_MAIN_DIR "/bigtcpd.yaml"

/* The drop-in directories, NULL-terminated, in order of precedence: of two drop-ins with the same
 * basename, the one in the earlier directory is read and the other is not. */
extern const char *const policy_dropin_dirs[];

/* A name that is a drop-in: *.yaml, not hidden (editors' and ConfigMaps' scaffolding). */
bool policy_dropin_name_ok(const char *name);

/* The files that make up the policy: `config` alone when it is non-NULL, otherwise
 * <root>/etc/bigtcpd/bigtcpd.yaml (if it exists) followed by *.yaml drop-ins from
 * <root>/etc/bigtcpd/bigtcpd.d, <root>/run/bigtcpd/bigtcpd.d, <root>/usr/lib/bigtcpd/bigtcpd.d
 * — one file per basename (/etc over /run over /usr/lib), in lexical order of basename.
 * Whatever has such a name is listed, a FIFO, a directory or a dangling symlink too: loading it
 * is an error that names it, never a file skipped without a word. `root` is "" in production
 * and a test directory in tests. Returns the number of paths. */
int policy_discover(const char *config, const char *root, char ***ret_paths);

/* Read and parse the files in order into a new set. On any error returns -EINVAL with every
 * error in `errs` and no set. Cross-file checks (duplicate policy names) happen here. */
int policy_load_files(char *const *paths, size_t n_paths, PolicySet **ret, PolicyErrors *errs);

/* A file's content given in memory instead of read from disk (a tried policy): `path` is the
 * name it will have (for the digest), `source` names it in errors. */
typedef struct PolicyOverride {
        const char *path;
        const char *source;
        const char *data;
        size_t size;
} PolicyOverride;

typedef enum PolicyLoadFlags {
        POLICY_LOAD_STDIN = 1 << 0, /* a path "-" is standard input (a pipe too), named "<stdin>" */
        /* with errors, -EINVAL and still a set: what did parse, for warnings only (PolicySet.partial) */
        POLICY_LOAD_PARTIAL = 1 << 1,
} PolicyLoadFlags;
/* policy_load_files() with flags (POLICY_LOAD_STDIN: `bigtcpctl validate -`; the daemon never
 * reads stdin) and `override`'s content for its path (NULL: none). */
int policy_load(char *const *paths, size_t n_paths, PolicyLoadFlags flags, const PolicyOverride *override,
                PolicySet **ret, PolicyErrors *errs);

/* What policy_discover() would list if `target` were there: `target` must be `config` when that
 * is set, else the main file or a drop-in (*.yaml) right in <root>/etc/bigtcpd/bigtcpd.d, which
 * no other directory's drop-in of the same basename shadows (it shadows them). -EXDEV for any
 * other path: the daemon does not read it. */
int policy_discover_with(const char *config, const char *root, const char *target, char ***ret_paths);

/* policy_load_files(), with `override`'s content for its path. */
int policy_load_files_with(char *const *paths, size_t n_paths, const PolicyOverride *override, PolicySet **ret,
                           PolicyErrors *errs);
