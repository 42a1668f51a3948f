/* bigtcpctl-operate.c — the operator's verbs on devices: `rollback DEV|--all` (back to the sizes
 * before bigtcpd's last change, and held there) and `retry DEV|--all` (release a held or failed
 * device). Both say in words what they did; --json prints the daemon's reply only. */
#include <inttypes.h>
#include <stdio.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-operate.h"

/* One call of Rollback or Retry, over varlink or D-Bus; `ifname` NULL for every device. */
static int operate(Ctl *c, const char *what, const char *method, const char *ifname) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(freep) char *name = NULL;
        json_object *p;
        int r;

        if (c->dbus)
                return call_dbus_privileged(c, what, method, ifname ?: "");
        if (strextendf(&name, IFACE ".%s", method) < 0 || !(p = json_object_new_object()))
                return error_exit(EXIT_FAILED, "out of memory");
        if (ifname)
                json_object_object_add(p, "ifname", json_object_new_string(ifname));
        r = call_method(c, what, name, p, &reply);
        if (r == 0 && c->json)
                print_json(reply);
        return r;
}

/* The time of the device's last rollback by an operator, or -1. */
static int64_t operator_rollback_time(json_object *d) {
        json_object *rb = jget(d, "last_rollback");
        return rb && streq_ptr(jstr(rb, "counter"), "operator") ? jint(rb, "time_usec", 0) : -1;
}

/* Whether this Rollback(null) rolled `d` back: a rollback by an operator it did not have before. */
static bool rolled_back_now(json_object *before, json_object *d) {
        int64_t t = operator_rollback_time(d);

        if (t < 0)
                return false;
        for (size_t i = 0; i < jlen(before); i++) {
                json_object *b = json_object_array_get_idx(before, i);
                if (jint(b, "ifindex", 0) == jint(d, "ifindex", 0))
                        return operator_rollback_time(b) != t;
        }
        return true;
}

/* "v0 goes back: gso_max_size 185000 → 65536, …", from the device's rollback record. */
static void print_goes_back(json_object *d) {
        json_object *rb = jget(d, "last_rollback"), *from = jget(rb, "from"), *to = jget(rb, "to");
        bool any = false;

        if (!to) {
                printf("%s is rolled back.\n", jstr(d, "ifname") ?: "?");
                return;
        }
        printf("%s goes back:", jstr(d, "ifname") ?: "?");
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                if (!jhas_int(to, size_names[k]) ||
                    jint(from, size_names[k], -1) == jint(to, size_names[k], -1))
                        continue;
                printf("%s %s %" PRId64 " %s %" PRId64, any ? "," : "", size_names[k],
                       jint(from, size_names[k], 0), glyph(GLYPH_ARROW), jint(to, size_names[k], 0));
                any = true;
        }
        printf("%s\n", any ? "" : " no size changes");
}

int verb_rollback(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *before = NULL, *after = NULL;
        const char *ifname = n == 1 ? args[0] : NULL, *last = NULL;
        size_t done = 0;
        int r;

        if ((n == 1) == c->all || n > 1)
                return error_exit(EXIT_USAGE, "rollback takes one device name, or --all");
        if (c->json)
                return operate(c, "rollback", "Rollback", ifname);
        /* Rollback() answers nothing: what it did is in the devices' rollback records. */
        if (!ifname) {
                r = fetch_devices(c, NULL, false, &before);
                if (r != 0)
                        return r;
        }
        r = operate(c, "rollback", "Rollback", ifname);
        if (r == 0)
                r = fetch_devices(c, ifname, false, &after);
        if (r != 0)
                return r;
        for (size_t i = 0; i < jlen(devices_of(after)); i++) {
                json_object *d = json_object_array_get_idx(devices_of(after), i);
                if (ifname || rolled_back_now(devices_of(before), d)) {
                        print_goes_back(d);
                        last = jstr(d, "ifname");
                        done++;
                }
        }
        if (done == 0)
                printf("Every device bigtcpd has written is rolled back, and held there until the policy\n"
                       "changes or \"bigtcpctl retry --all\".\n");
        else if (done == 1)
                printf("%s is held there until the policy changes or \"bigtcpctl retry %s\".\n", last ?: "?",
                       last ?: "DEV");
        else
                printf("These %zu devices are held there until the policy changes or \"bigtcpctl retry "
                       "DEV\"\n"
                       "(\"bigtcpctl retry --all\" for all of them).\n",
                       done);
        return EXIT_OK;
}

static bool held_or_failed(json_object *d) {
        return streq_ptr(jstr(d, "state"), "rolled-back") || streq_ptr(jstr(d, "state"), "failed");
}

int verb_retry(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *before = NULL;
        const char *ifname = n == 1 ? args[0] : NULL;
        size_t done = 0;
        int r;

        if ((n == 1) == c->all || n > 1)
                return error_exit(EXIT_USAGE, "retry takes one device name, or --all");
        if (c->json)
                return operate(c, "retry", "Retry", ifname);
        /* Retry(null) answers nothing either: the devices it releases are the held and failed ones. */
        if (!ifname) {
                r = fetch_devices(c, NULL, false, &before);
                if (r != 0)
                        return r;
        }
        r = operate(c, "retry", "Retry", ifname);
        if (r != 0)
                return r;
        for (size_t i = 0; i < jlen(devices_of(before)); i++) {
                json_object *d = json_object_array_get_idx(devices_of(before), i);
                if (held_or_failed(d)) {
                        printf("%s is released: bigtcpd applies its policy again.\n",
                               jstr(d, "ifname") ?: "?");
                        done++;
                }
        }
        if (ifname)
                printf("%s is released: bigtcpd applies its policy again.\n", ifname);
        else if (done == 0)
                printf("Every rolled-back or failed device is released: bigtcpd applies their policies "
                       "again.\n");
        return EXIT_OK;
}
