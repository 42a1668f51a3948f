/* bigtcpctl-devices.c — `bigtcpctl list` (every device, one line each, and how old the sizes are)
 * and `bigtcpctl show DEV` (one device: its sizes and which bigtcpd owns, its state and why,
 * the last error and the last rollback). */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "bigtcpctl-call.h"
#include "bigtcpctl-devices.h"
#include "bigtcpctl-evidence.h"
#include "table.h"

/* Values older than this are worth saying so: the kernel sends no event when only a size
 * changes, so bigtcpd's copy may be behind what another tool set. */
#define STALE_USEC 1000000

/* How long ago the oldest `current` was read from the kernel; -1 when the daemon does not say. */
static int64_t oldest_age(json_object *devs) {
        int64_t oldest = -1;
        for (size_t i = 0; i < jlen(devs); i++) {
                json_object *d = json_object_array_get_idx(devs, i);
                if (jhas_int(d, "current_age_usec") && jint(d, "current_age_usec", 0) > oldest)
                        oldest = jint(d, "current_age_usec", 0);
        }
        return oldest;
}

static void add_size_cell(Table *t, json_object *sizes, const char *key) {
        if (jhas_int(sizes, key))
                (void) table_addf(t, NULL, "%" PRId64, jint(sizes, key, 0));
        else
                (void) table_add(t, "-", NULL);
}

int verb_list(Ctl *c, char **args, size_t n) {
        static const char *const headers[] = {"NETNS", "IDX",  "LINK", "KIND", "STATE", "POLICY",
                                              "GSO",   "GRO",  "GSO4", "GRO4", "TSO",   NULL};
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_object *devs;
        char buf[64];
        size_t nd;
        int r;

        if (n > 0)
                return error_exit(EXIT_USAGE, "list takes no arguments (show DEV shows one device)");
        if (print_raw(c))
                return fetch_devices(c, NULL, true, NULL);
        r = fetch_devices(c, NULL, true, &reply);
        if (r != 0)
                return r;
        if (c->json) {
                print_json(reply);
                return EXIT_OK;
        }
        devs = devices_of(reply);
        nd = devs ? json_object_array_length(devs) : 0;
        /* NETNS always, "host" for bigtcpd's own: the columns are the same whatever the policy,
         * so that a script's $3 is the LINK everywhere (bigtcpctl(8) --no-legend) */
        if (table_new(headers, &t) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        table_set_align(t, 1, TABLE_RIGHT);
        for (size_t col = 6; col <= 10; col++)
                table_set_align(t, col, TABLE_RIGHT);
        table_set_keep(t, 4); /* STATE */
        for (size_t i = 0; i < nd; i++) {
                json_object *d = json_object_array_get_idx(devs, i), *cur = jget(d, "current");
                const char *st = jstr(d, "state");
                (void) table_add(t, jstr(d, "netns") ?: "host", NULL);
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "ifindex", 0));
                (void) table_add(t, jstr(d, "ifname"), NULL);
                (void) table_add(t, jstr(d, "kind") ?: "-", NULL);
                (void) table_add(t, st ?: "?", state_color(st));
                (void) table_add(t, jstr(d, "policy") ?: "-", NULL);
                for (size_t k = 0; k < ELEMENTSOF(size_names); k++)
                        add_size_cell(t, cur, size_names[k]);
                (void) table_addf(t, NULL, "%" PRId64, jint(d, "tso_max_size", 0));
        }
        table_set_width(t, c->columns, glyph(GLYPH_ELLIPSIS));
        table_print(t, stdout, c->legend, c->color);
        if (c->legend) {
                int64_t age = oldest_age(devs);
                printf("\n%zu %s listed.\n", nd, nd == 1 ? "link" : "links");
                if (age > STALE_USEC)
                        printf("Sizes as read from the kernel up to %s ago; the kernel may hold others "
                               "now.\n",
                               format_duration(buf, sizeof(buf), age));
        }
        return EXIT_OK;
}

static void print_field(const Ctl *c, const char *label, const char *value, const char *sgr) {
        printf("%15s: %s%s%s\n", label, color(c, sgr ?: ""), value, sgr ? color(c, ANSI_RESET) : "");
}

/* Why a device is pending (Device.pending), in words. */
static const char *pending_text(const char *reason) {
        static const struct {
                const char *reason, *text;
        } table[] = {
                {"queued", "write queued"},
                {"in-flight", "write in flight"},
                {"rollout-slot", "waiting for a slot of its rollout"},
                {"rollout-halted", "its rollout is halted"},
                {"throttled", "throttled"},
        };
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq_ptr(reason, table[i].reason))
                        return table[i].text;
        return reason;
}

/* "probation (58.4s left)", "pending (write queued)", "pending (waiting for a slot of its
 * rollout; probation 17.0s left)": a pending device always says why, first. */
static int state_text(json_object *d, char **ret) {
        _cleanup_(freep) char *s = NULL;
        const char *st = jstr(d, "state");
        bool why = streq_ptr(st, "pending") && jstr(d, "pending");
        char buf[64];
        int r = strextendf(&s, "%s", st ?: "?");

        if (r >= 0 && why)
                r = strextendf(&s, " (%s", pending_text(jstr(d, "pending")));
        if (r >= 0 && jhas_int(d, "probation_left_usec"))
                r = strextendf(&s, "%s%s left", why ? "; probation " : " (",
                               format_duration(buf, sizeof(buf), jint(d, "probation_left_usec", 0)));
        if (r >= 0 && (why || jhas_int(d, "probation_left_usec")))
                r = strextendf(&s, ")");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

static int rollback_text(json_object *rb, char **ret) {
        _cleanup_(freep) char *s = NULL;
        time_t when = (time_t) (jint(rb, "time_usec", 0) / 1000000);
        struct tm tm;
        char ts[64] = "?";
        int r;

        if (localtime_r(&when, &tm))
                strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
        if (streq_ptr(jstr(rb, "counter"), "operator"))
                r = strextendf(&s, "by an operator at %s", ts);
        else if (jstr(rb, "per"))
                r = strextendf(&s, "%s rose %" PRId64 " per %" PRId64 " %s (max ratio %g) at %s",
                               jstr(rb, "counter"), jint(rb, "rise", 0), jint(rb, "per_rise", 0),
                               jstr(rb, "per"), json_object_get_double(jget(rb, "max_ratio")), ts);
        else
                r = strextendf(&s, "%s rose %" PRId64 " (max increase %" PRId64 ") at %s",
                               jstr(rb, "counter") ?: "?", jint(rb, "rise", 0), jint(rb, "max_increase", 0),
                               ts);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

/* Device.owned: which sizes the device's policy names. NULL from a bigtcpd before it. */
static json_object *owned_of(json_object *d) {
        return jarray(d, "owned");
}

static bool owns(json_object *owned, const char *size) {
        for (size_t i = 0; i < json_object_array_length(owned); i++)
                if (streq_ptr(json_object_get_string(json_object_array_get_idx(owned, i)), size))
                        return true;
        return false;
}

/* "gso_max_size, gro_max_size", or "-". */
static int owned_text(json_object *owned, char **ret) {
        _cleanup_(freep) char *s = NULL;
        int r = strextendf(&s, "%s", "");

        for (size_t i = 0; r >= 0 && i < json_object_array_length(owned); i++)
                r = strextendf(&s, "%s%s", *s ? ", " : "",
                               json_object_get_string(json_object_array_get_idx(owned, i)));
        if (r >= 0 && !*s)
                r = strextendf(&s, "-");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

/* Why the desired value of `size` is not what the policy asks: clamped (with the numbers), held
 * after a rollback, or NULL. */
static int size_why(json_object *d, const char *size, char **ret) {
        json_object *want = jget(d, "desired"), *asked = jget(d, "asked");

        for (size_t i = 0; i < jlen(jarray(d, "clamps")); i++) {
                json_object *o = json_object_array_get_idx(jarray(d, "clamps"), i);
                if (streq_ptr(jstr(o, "size"), size))
                        return strextendf(ret, "clamped: the policy asks %" PRId64 ", the device takes %" PRId64,
                                          jint(o, "asked", 0), jint(o, "limit", 0));
        }
        if (jbool(d, "held") && jhas_int(asked, size) && jint(asked, size, 0) != jint(want, size, 0))
                return strextendf(ret, "held after a rollback (the policy asks %" PRId64 ")", jint(asked, size, 0));
        if (streq_ptr(jstr(d, "state"), "unsupported"))
                return strextendf(ret, "unsupported on this device or kernel");
        return 0;
}

/* CURRENT, DESIRED, ORIGINAL per size, and why DESIRED is not the policy's. A size the policy does
 * not name (not in `owned`) is wanted at its original value, or left alone when bigtcpd never
 * wrote the device. */
static int print_sizes(const Ctl *c, json_object *d) {
        static const char *const headers[] = {"SIZE", "CURRENT", "DESIRED", "ORIGINAL", "WHY", NULL};
        static const char *const headers_no_why[] = {"SIZE", "CURRENT", "DESIRED", "ORIGINAL", NULL};
        _cleanup_(table_freep) Table *t = NULL;
        json_object *cur = jget(d, "current"), *want = jget(d, "desired"), *orig = jget(d, "original");
        json_object *owned = owned_of(d);
        char *why[ELEMENTSOF(size_names)] = {};
        bool any_why = false;
        char buf[64];
        int r = 0;

        for (size_t k = 0; r >= 0 && k < ELEMENTSOF(size_names); k++) {
                r = jhas_int(cur, size_names[k]) ? size_why(d, size_names[k], &why[k]) : 0;
                any_why = any_why || why[k];
        }
        if (r < 0 || table_new(any_why ? headers : headers_no_why, &t) < 0) {
                for (size_t k = 0; k < ELEMENTSOF(size_names); k++)
                        free(why[k]);
                return -ENOMEM;
        }
        for (size_t col = 1; col <= 3; col++)
                table_set_align(t, col, TABLE_RIGHT);
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++) {
                const char *name = size_names[k];
                json_object *cols[] = {cur, want, orig};
                if (!jhas_int(cur, name))
                        continue;
                (void) table_add(t, name, NULL);
                for (size_t col = 0; col < ELEMENTSOF(cols); col++) {
                        bool differs = col == 1 && cols[col] && jint(cur, name, 0) != jint(want, name, 0);
                        if (col == 1 && want && owned && !owns(owned, name)) {
                                bool back = jhas_int(orig, name);
                                (void) table_add(t, back ? "original" : "not bigtcpd's",
                                                 back && jint(cur, name, 0) != jint(orig, name, 0)
                                                         ? ANSI_YELLOW
                                                         : NULL);
                        } else if (jhas_int(cols[col], name))
                                (void) table_add(t, format_size(buf, sizeof(buf), jint(cols[col], name, 0)),
                                                 differs ? ANSI_YELLOW : NULL);
                        else
                                (void) table_add(t, "-", NULL);
                }
                if (any_why)
                        (void) table_add(t, why[k] ?: "", why[k] ? ANSI_YELLOW : NULL);
        }
        for (size_t k = 0; k < ELEMENTSOF(size_names); k++)
                free(why[k]);
        table_set_width(t, c->columns, glyph(GLYPH_ELLIPSIS));
        return table_print(t, stdout, c->legend, c->color);
}

int verb_show(Ctl *c, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        _cleanup_(freep) char *state = NULL, *owned = NULL, *error = NULL, *rollback = NULL, *packets = NULL,
                             *effective = NULL;
        json_object *devs, *d, *err, *rb;
        const char *st;
        char buf[64];
        int r;

        if (n != 1)
                return error_exit(EXIT_USAGE, "show takes one device: a name, an altname or an ifindex");
        r = fetch_devices(c, args[0], false, &reply);
        if (r != 0)
                return r;
        devs = devices_of(reply);
        if (!devs || json_object_array_length(devs) == 0)
                return error_exit(EXIT_FAILED, "no device \"%s\"", args[0]);
        d = json_object_array_get_idx(devs, 0);
        if (c->json) {
                print_json(d);
                return EXIT_OK;
        }
        st = jstr(d, "state");
        err = jget(d, "last_error");
        rb = jget(d, "last_rollback");
        if (state_text(d, &state) < 0 || (owned_of(d) && owned_text(owned_of(d), &owned) < 0) ||
            (err && strextendf(&error, "%s (errno %" PRId64 ")%s%s", jstr(err, "message") ?: "?",
                               jint(err, "errno", 0), jstr(err, "extack") ? ": " : "",
                               jstr(err, "extack") ?: "") < 0) ||
            (rb && rollback_text(rb, &rollback) < 0) || evidence_text(d, &packets, &effective) < 0)
                return error_exit(EXIT_FAILED, "out of memory");

        const char *ns = jstr(d, "netns");
        bool other = ns && !streq_ptr(ns, "host");
        printf("%s%s%s %" PRId64 ": %s%s%s\n", color(c, state_color(st) ?: ""), glyph(GLYPH_BULLET), color(c, ANSI_RESET),
               jint(d, "ifindex", 0), other ? ns : "", other ? "/" : "", jstr(d, "ifname") ?: "?");
        print_field(c, "Namespace", ns ?: "host", NULL);
        /* in the policy's words: "loopback", "device (no kind)" for a physical NIC */
        const char *mk = jstr(d, "match_kind");
        print_field(c, "Kind",
                    streq_ptr(mk, "device") || (!mk && !jstr(d, "kind")) ? "device (no kind)" : mk ?: jstr(d, "kind"),
                    NULL);
        print_field(c, "State", state, state_color(st));
        if (jlen(jarray(d, "altnames")) > 0) {
                _cleanup_(freep) char *alt = NULL;
                for (size_t i = 0; i < jlen(jarray(d, "altnames")); i++)
                        if (strextendf(&alt, "%s%s", alt ? ", " : "",
                                       json_object_get_string(json_object_array_get_idx(jarray(d, "altnames"), i))) < 0)
                                return error_exit(EXIT_FAILED, "out of memory");
                print_field(c, "Altnames", alt, NULL);
        }
        if (jstr(d, "policy") && jstr(d, "matched_by")) {
                _cleanup_(freep) char *pol = NULL;
                if (strextendf(&pol, "%s (matched by %s)", jstr(d, "policy"), jstr(d, "matched_by")) < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
                print_field(c, "Policy", pol, NULL);
        } else
                print_field(c, "Policy", jstr(d, "policy") ?: "-", NULL);
        if (jbool(d, "ipv4_unsupported"))
                print_field(c, "IPv4 sizes", "the policy sets them; this kernel has none (unsupported)", ANSI_YELLOW);
        if (owned)
                print_field(c, "Owned sizes", owned, NULL);
        print_field(c, "TSO max size", format_size(buf, sizeof(buf), jint(d, "tso_max_size", 0)), NULL);
        if (jint(d, "current_age_usec", 0) > STALE_USEC) {
                _cleanup_(freep) char *age = NULL;
                if (strextendf(&age, "%s ago; the kernel may hold others now",
                               format_duration(buf, sizeof(buf), jint(d, "current_age_usec", 0))) < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
                print_field(c, "Current read", age, ANSI_YELLOW);
        }
        print_field(c, "Last error", error ?: "-", error ? ANSI_RED : NULL);
        print_field(c, "Last rollback", rollback ?: "-", rollback ? ANSI_RED : NULL);
        print_field(c, "Big packets", packets ?: "not counted (counted in probation, or: bigtcpctl watch DEV)", NULL);
        if (effective)
                print_field(c, "In effect", effective, jbool(d, "effective") ? ANSI_GREEN : ANSI_YELLOW);
        for (size_t i = 0; i < jlen(jarray(d, "auto")); i++) {
                json_object *a = json_object_array_get_idx(jarray(d, "auto"), i);
                _cleanup_(freep) char *line = NULL;
                if (strextendf(&line, "%s %s", jstr(a, "size") ?: "?", jstr(a, "text") ?: "?") < 0)
                        return error_exit(EXIT_FAILED, "out of memory");
                print_field(c, i == 0 ? "Search" : "", line, NULL);
        }

        putchar('\n');
        if (print_sizes(c, d) < 0)
                return error_exit(EXIT_FAILED, "out of memory");
        return EXIT_OK;
}
