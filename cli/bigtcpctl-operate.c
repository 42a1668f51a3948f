/* bigtcpctl-operate.c — the operator's verbs on devices: `rollback DEV|--all` (back to the sizes
 * before bigtcpd's last change, and held there) and `retry DEV|--all` (release a held or failed
 * device). Both say in words what the daemon answered they did (the devices moved, from which
 * sizes to which, those held or released, the writes refused or still on their way); --json
 * prints that answer. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-operate.h"

/* "NETNS/IFNAME", or "IFNAME" in bigtcpd's own namespace; `buf` holds it. */
static const char *move_name(json_object *m, char *buf, size_t size) {
        if (jstr(m, "netns")) {
                snprintf(buf, size, "%s/%s", jstr(m, "netns"), jstr(m, "ifname") ?: "?");
                return buf;
        }
        return jstr(m, "ifname") ?: "?";
}

/* " gso_max_size 185000 → 65536, …": the sizes a move changed. */
static void print_sizes_moved(json_object *m) {
        json_object *from = jget(m, "from"), *to = jget(m, "to");
        bool any = false;

        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                if (!jhas_int(to, size_names[k]) || jint(from, size_names[k], -1) == jint(to, size_names[k], -1))
                        continue;
                printf("%s %s %" PRId64 " %s %" PRId64, any ? "," : "", size_names[k], jint(from, size_names[k], 0),
                       glyph(GLYPH_ARROW), jint(to, size_names[k], 0));
                any = true;
        }
        printf("%s\n", any ? "" : " no size changes");
}

int print_changes(json_object *reply, const char *moved_verb) {
        json_object *a = jget(reply, "moved");
        char buf[512];
        int r = EXIT_OK;

        for (size_t i = 0; i < jlen(a); i++) {
                json_object *m = json_object_array_get_idx(a, i);
                printf("%s%s%s:", move_name(m, buf, sizeof(buf)), moved_verb ? " " : "", moved_verb ?: "");
                print_sizes_moved(m);
        }
        a = jget(reply, "refused");
        for (size_t i = 0; i < jlen(a); i++) {
                json_object *m = json_object_array_get_idx(a, i);
                if (jint(m, "errno", 0) == ENODEV)
                        printf("%s: went away before its write was answered\n", move_name(m, buf, sizeof(buf)));
                else
                        printf("%s: the kernel refused the write: %s%s%s%s\n", move_name(m, buf, sizeof(buf)),
                               jstr(m, "message") ?: "?", jstr(m, "extack") ? " (" : "", jstr(m, "extack") ?: "",
                               jstr(m, "extack") ? ")" : "");
                r = EXIT_FAILED;
        }
        a = jget(reply, "pending");
        for (size_t i = 0; i < jlen(a); i++)
                printf("%s: its write is still on its way (\"bigtcpctl monitor\" shows how it ends)\n",
                       json_object_get_string(json_object_array_get_idx(a, i)) ?: "?");
        return r;
}

/* One call of Rollback or Retry, over varlink or D-Bus; `ifname` NULL for every device. *ret
 * gets what it did. */
static int operate(Ctl *c, const char *what, const char *method, const char *ifname, json_object **ret) {
        json_object *p = json_object_new_object();

        if (!p)
                return error_exit(EXIT_FAILED, "out of memory");
        if (ifname)
                json_object_object_add(p, "ifname", json_object_new_string(ifname));
        return call_operation(c, what, method, p, &(DbusOperationArgs){.arg = ifname ?: ""}, ret);
}

int verb_rollback(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        const char *ifname = n == 1 ? args[0] : NULL;
        json_object *held;
        int r;

        if ((n == 1) == c->all || n > 1)
                return error_exit(EXIT_USAGE, "rollback takes one device name, or --all");
        r = operate(c, "rollback", "Rollback", ifname, &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        /* what it did: the devices it moved (and how), those held now */
        r = print_changes(reply, "goes back");
        held = jget(reply, "held");
        if (jlen(held) == 0)
                printf("Every device bigtcpd has written is rolled back, and held there until the policy\n"
                       "changes or \"bigtcpctl retry --all\".\n");
        else if (jlen(held) == 1) {
                const char *last = json_object_get_string(json_object_array_get_idx(held, 0));
                printf("%s is held there until the policy changes or \"bigtcpctl retry %s\".\n", last ?: "?",
                       last ?: "DEV");
        } else
                printf("These %zu devices are held there until the policy changes or \"bigtcpctl retry "
                       "DEV\"\n"
                       "(\"bigtcpctl retry --all\" for all of them).\n",
                       jlen(held));
        return r;
}

int verb_retry(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        const char *ifname = n == 1 ? args[0] : NULL;
        json_object *released;
        int r;

        if ((n == 1) == c->all || n > 1)
                return error_exit(EXIT_USAGE, "retry takes one device name, or --all");
        r = operate(c, "retry", "Retry", ifname, &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        released = jget(reply, "released");
        for (size_t i = 0; i < jlen(released); i++)
                printf("%s is released: bigtcpd applies its policy again.\n",
                       json_object_get_string(json_object_array_get_idx(released, i)) ?: "?");
        return print_changes(reply, NULL);
}
