/* bigtcpctl-policy.c — the verbs about the policy: `plan [FILE]` (what it would change, asked of
 * the daemon), `validate FILE...` (the daemon's own parser, no daemon needed) and `reload`. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-operate.h"
#include "bigtcpctl-policy.h"
#include "policy-files.h"
#include "policy.h"
#include "guard.h"
#include "table.h"

/* Reads a policy file for Plan (a pipe too); at most the policy size limit. */
static int read_policy_file(const char *path, char **ret) {
        _cleanup_(freep) char *buf = NULL;
        size_t n;
        int r;

        r = read_file_bounded(path, POLICY_FILE_MAX, READ_FILE_ANY_TYPE, &buf, &n);
        if (r < 0)
                return r;
        if (strlen(buf) != n)
                return -EBADMSG;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* "gso_max_size 65536→185000, …" for the sizes that would change, then what was clamped: with
 * the numbers ("gso_max_size asked 300000, the device takes 65536") when bigtcpd gives them. */
static int describe_changes(json_object *cur, json_object *want, json_object *clamped, json_object *clamps,
                            char **ret) {
        _cleanup_(freep) char *s = NULL;
        size_t nc = clamps ? 0 : jlen(clamped);
        int r = strextendf(&s, "%s", "");

        for (size_t k = 0; r >= 0 && k < ELEMENTSOF(size_names); k++) {
                if (!jhas_int(want, size_names[k]) ||
                    jint(cur, size_names[k], 0) == jint(want, size_names[k], 0))
                        continue;
                r = strextendf(&s, "%s%s %" PRId64 "%s%" PRId64, *s ? ", " : "", size_names[k],
                               jint(cur, size_names[k], 0), glyph(GLYPH_ARROW), jint(want, size_names[k], 0));
        }
        for (size_t k = 0; r >= 0 && k < nc; k++)
                r = strextendf(&s, "%s%s", k ? ", " : " (clamped: ",
                               json_object_get_string(json_object_array_get_idx(clamped, k)));
        if (r >= 0 && nc > 0)
                r = strextendf(&s, ")");
        for (size_t k = 0; r >= 0 && k < jlen(clamps); k++) {
                json_object *o = json_object_array_get_idx(clamps, k);
                r = strextendf(&s, "%s%s asked %" PRId64 ", the device takes %" PRId64,
                               k ? ", " : *s ? " (clamped: " : "(clamped: ", jstr(o, "size") ?: "?",
                               jint(o, "asked", 0), jint(o, "limit", 0));
        }
        if (r >= 0 && jlen(clamps) > 0)
                r = strextendf(&s, ")");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int verb_plan(Ctl *c, char **args, size_t n) {
        static const char *const headers[] = {"NETNS", "IDX", "LINK", "POLICY", "ACTION", "CHANGES", NULL};
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        _cleanup_(freep) char *text = NULL;
        json_object *p = NULL, *devs;
        size_t nd, changing = 0;
        int r;

        if (n > 1)
                return error_exit(EXIT_USAGE, "plan takes at most one policy file");
        if (n == 1) {
                bool std_in = streq_ptr(args[0], "-");
                r = read_policy_file(std_in ? "/dev/stdin" : args[0], &text);
                if (r == -EFBIG)
                        return error_exit(EXIT_FAILED, "%s: file too large (max %u bytes)", args[0],
                                          POLICY_FILE_MAX);
                if (r == -EBADMSG)
                        return error_exit(EXIT_FAILED, "%s: contains a NUL byte, not a policy", args[0]);
                if (r < 0)
                        return error_exit(EXIT_FAILED, "%s: %s", args[0], strerror(-r));
                p = json_object_new_object();
                json_object_object_add(p, "policy", json_object_new_string(text));
                json_object_object_add(p, "source", json_object_new_string(std_in ? "<stdin>" : args[0]));
        }
        /* over D-Bus the policy's errors name it "<policy>": Plan takes no source there */
        r = call_operation(c, "plan", "Plan", p, &(DbusOperationArgs){.arg = text ?: ""}, &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        /* Where the canaries stand on this host first: they say why a device gets the policy after
         * one (it falls through). */
        json_object *policies = jarray(reply, "policies");
        size_t canaries = 0;
        for (size_t i = 0; c->legend && i < jlen(policies); i++) {
                _cleanup_(freep) char *line = NULL;
                r = format_canary(c, json_object_array_get_idx(policies, i), &line);
                if (r < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
                if (r > 0) {
                        printf("%s\n", line);
                        canaries++;
                }
        }
        /* Policies that hosts or kernel keep off this host: else a plan of a fleet-wide file on a
         * host it does not name lists only restores, and never says why. */
        size_t scoped = 0, npol = jlen(policies);
        for (size_t i = 0; c->legend && i < npol; i++) {
                json_object *o = json_object_array_get_idx(policies, i);
                const char *why = jstr(o, "not_here");
                if (jbool(o, "applies") || !why || streq_ptr(why, "cohort"))
                        continue;
                printf("%s%s (%s)", scoped++ == 0 ? "Not in force on this host: " : ", ", jstr(o, "name") ?: "?",
                       streq_ptr(why, "hosts") ? "no hosts glob matches the hostname"
                       : streq_ptr(why, "kernel") ? "the kernel does not satisfy its kernel requirement"
                                                   : why);
        }
        if (scoped > 0) {
                printf(".\n");
                if (scoped == npol)
                        printf("Every policy is scoped away from this host: its devices match none.\n");
        }
        json_object *unplanned = jarray(reply, "netns_not_entered");
        for (size_t i = 0; c->legend && i < jlen(unplanned); i++) {
                json_object *u = json_object_array_get_idx(unplanned, i);
                const char *err = jstr(u, "error");
                printf("%s%s (%s%s%s)",
                       i == 0 ? "Not in this plan (bigtcpd could not look into them): namespace " : ", ",
                       jstr(u, "netns") ?: "?", jstr(u, "reason") ?: "?", err ? ": " : "", err ?: "");
        }
        if (c->legend && jlen(unplanned) > 0)
                printf(".\n");
        if (canaries > 0 || scoped > 0 || (c->legend && jlen(unplanned) > 0))
                putchar('\n');
        if (table_new(headers, &t) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        table_set_align(t, 1, TABLE_RIGHT);
        table_set_keep(t, 4); /* ACTION */
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                const char *action = jstr(d, "action") ?: "?";
                _cleanup_(freep) char *changes = NULL;

                if (streq_ptr(action, "none") && !c->all)
                        continue;
                changing += !streq_ptr(action, "none");
                if (describe_changes(jget(d, "current"), jget(d, "desired"), jget(d, "clamped"), jarray(d, "clamps"),
                                     &changes) <
                    0)
                        return error_exit(EXIT_FAILED, "out of memory");
                /* a pod's IDX 2 is not the host's: the same columns as list */
                (void) table_add(t, jstr(d, "netns") ?: "host", NULL);
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "ifindex", 0));
                (void) table_add(t, jstr(d, "ifname"), NULL);
                (void) table_add(t, jstr(d, "policy") ?: "-", NULL);
                (void) table_add(t, action,
                                 streq_ptr(action, "unsupported") ? ANSI_RED
                                 : streq_ptr(action, "none")      ? NULL
                                                                  : ANSI_YELLOW);
                (void) table_add(t, changes[0] ? changes : "-", NULL);
        }
        if (changing > 0 || (c->all && nd > 0)) {
                table_set_width(t, c->columns, glyph(GLYPH_ELLIPSIS));
                table_print(t, stdout, c->legend, c->color);
        }
        /* Searches of `auto`: a device at its search's size changes nothing now, but it will */
        size_t searching = 0;
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *searches = jarray(d, "auto");
                const char *netns = jstr(d, "netns");

                for (size_t k = 0; k < jlen(searches); k++) {
                        json_object *a = json_object_array_get_idx(searches, k);
                        printf("%s%s%s%s %s %s\n", searching++ == 0 && (changing > 0 || (c->all && nd > 0)) ? "\n" : "",
                               netns ? netns : "", netns ? "/" : "", jstr(d, "ifname") ?: "?", jstr(a, "size") ?: "?",
                               jstr(a, "text") ?: "?");
                }
        }
        if (c->legend) {
                printf("%s%zu of %zu %s would change.\n", changing > 0 || (c->all && nd > 0) || searching > 0 ? "\n" : "",
                       changing, nd, nd == 1 ? "device" : "devices");
        }
        return EXIT_OK;
}

/* `warnings`: they are in their own field, so their messages go without the "warning: " that
 * marks them in the text. */
static json_object *local_errors_json(const PolicyErrors *errs, bool warnings) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < errs->n; i++) {
                json_object *o = json_object_new_object();
                const char *m = errs->items[i].message ?: "";

                if (warnings && strncmp(m, "warning: ", 9) == 0)
                        m += 9;
                json_object_object_add(o, "file", json_object_new_string(errs->items[i].file ?: ""));
                json_object_object_add(o, "line", json_object_new_int((int) errs->items[i].line));
                json_object_object_add(o, "column", json_object_new_int((int) errs->items[i].column));
                json_object_object_add(o, "message", json_object_new_string(m));
                json_object_array_add(a, o);
        }
        return a;
}

static void print_errors(const PolicyErrors *errs) {
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&errs->items[i], &text) >= 0)
                        fprintf(stderr, "%s\n", text);
        }
}

/* Local: the daemon's own parser, no daemon needed. The files are checked together, as one
 * policy (policy names must be unique across them), like the daemon reads its files; "-" is
 * standard input. A guard counter this host does not have is a warning, not an error: the file
 * may be meant for other hosts. A file with errors has its warnings shown too, after them: what
 * of it did parse is checked (POLICY_LOAD_PARTIAL), so fixing the errors brings no new surprise. */
int verb_validate(Ctl *c, char **args, size_t n) {
        PolicyErrors errs = {}, warnings = {};
        _cleanup_(policy_set_freep) PolicySet *set = NULL;
        int r;

        if (n == 0)
                return error_exit(EXIT_USAGE, "validate takes one or more policy files (- for standard input)");
        r = policy_load(args, n, POLICY_LOAD_STDIN | POLICY_LOAD_PARTIAL, NULL, &set, &errs);
        if (r < 0 && r != -EINVAL) {
                policy_errors_clear(&errs);
                return error_exit(EXIT_FAILED, "cannot check the policy: %s", strerror(-r));
        }
        if (set)
                (void) guard_counter_warnings_here(set, NULL, &warnings);
        if (set && guard_observer_errors(set, &errs) > 0 && r >= 0)
                r = -EINVAL;
        if (c->json) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "valid", json_object_new_boolean(r >= 0));
                json_object_object_add(o, "errors", local_errors_json(&errs, false));
                json_object_object_add(o, "warnings", local_errors_json(&warnings, true));
                print_json(o);
                json_object_put(o);
        } else {
                print_errors(&errs);
                print_errors(&warnings);
                if (r >= 0 && c->legend)
                        printf("%zu %s valid: %zu %s%s.\n", n, n == 1 ? "file" : "files", set->n_policies,
                               set->n_policies == 1 ? "policy" : "policies",
                               warnings.n == 0 ? "" : warnings.n == 1 ? ", 1 warning" : ", warnings above");
        }
        policy_errors_clear(&warnings);
        policy_errors_clear(&errs);
        return r < 0 ? EXIT_FAILED : EXIT_OK;
}

int verb_reload(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "reload takes no arguments");
        r = call_operation(c, "reload", "Reload", NULL, &(DbusOperationArgs){}, &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        /* what the new policy moved, once the kernel answered */
        printf("Reloaded: policy digest %s; %zu %s moved.\n", jstr(reply, "digest") ?: "?", jlen(jget(reply, "moved")),
               jlen(jget(reply, "moved")) == 1 ? "device" : "devices");
        return print_changes(reply, NULL);
}
