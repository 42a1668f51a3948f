/* bigtcpctl-operate.c — the operator's verbs on devices: `rollback DEV|--all` (back to the sizes
 * before bigtcpd's change, and hold) and `retry DEV` (release a held or failed device). */
#include "bigtcpctl-operate.h"
#include "bigtcpctl-call.h"

int verb_rollback(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p = NULL;
        int r;

        if ((n == 1) == c->all || n > 1)
                return error_exit(EXIT_USAGE, "rollback takes one device name, or --all");
        if (c->dbus)
                return call_dbus_privileged(c, "rollback", "Rollback", n == 1 ? args[0] : "");
        if (n == 1) {
                p = json_object_new_object();
                json_object_object_add(p, "ifname", json_object_new_string(args[0]));
        }
        r = call_method(c, "rollback", IFACE ".Rollback", p, &reply);
        if (r != 0)
                return r;
        if (c->json)
                print_json(reply);
        return EXIT_OK;
}

int verb_retry(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *p;
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "retry takes one device name");
        if (c->dbus)
                return call_dbus_privileged(c, "retry", "Retry", args[0]);
        p = json_object_new_object();
        json_object_object_add(p, "ifname", json_object_new_string(args[0]));
        r = call_method(c, "retry", IFACE ".Retry", p, &reply);
        if (r != 0)
                return r;
        if (c->json)
                print_json(reply);
        return EXIT_OK;
}
