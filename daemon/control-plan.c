/* control-plan.c — Plan and Validate, in a worker: the job, what the worker runs (the policy
 * parsed, the plan made), its result checked, and the look at the namespaces a plan takes that
 * bigtcpd has not entered. */
#include <string.h>

#include "apply.h"
#include "control-internal.h"
#include "log.h"
#include "netns-peek.h"
#include "policy-match.h"

struct ControlJob {
        Control *control;
        WorkerJob *job;
        bool plan;
        const char *policy; /* the caller's, until fn or the cancel; NULL: the loaded one (Plan only) */
        char *source;
        SnmpSnapshot snap; /* Validate: this namespace's counters when it was asked, for the warnings */
        bool have_snap;
        /* Plan: the namespaces its policy takes that bigtcpd has not entered, looked at read-only
         * between the worker's two runs (the first says which, the second plans them too) */
        uid_t uid;
        NetnsPeek *peek;
        bool looked;
        ControlJobFn fn;
        void *userdata;
};

static void control_job_free(ControlJob *j) {
        snmp_done(&j->snap);
        netns_peek_free(j->peek);
        free(j->source);
        free(j);
}

/* The namespaces in the directories that the plan's policy takes and that bigtcpd does not run:
 * their devices come from a look (netns-peek.h), or they are named in netns_not_entered. */
static bool plan_takes_unentered(const Control *c, const PolicySet *set, const char *name) {
        return policy_set_takes_netns(set, name) && !netns_set_find(c->netns, name);
}

static const char *not_entered_reason(const PeekedNetns *pk, bool may_look) {
        if (!pk)
                /* entering a namespace is root's: another caller sees what bigtcpd runs, no more */
                return may_look ? "not-looked-at" /* it appeared after the plan looked */ : "caller-not-root";
        switch (pk->error) {
        case -E2BIG:
                return pk->dumped ? "too-many-devices" : "limit";
        case -EOVERFLOW:
                return "too-many-routes";
        case -ETIMEDOUT:
                return "timed-out";
        case -ENOENT:
                return "gone";
        case -EMFILE:
        case -ENFILE:
                return "descriptors";
        default:
                return pk->dumped ? "dump-failed" : "cannot-enter";
        }
}

static json_object *not_entered_json(const char *name, const PeekedNetns *pk, bool may_look) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "netns", json_object_new_string(name));
        json_object_object_add(o, "reason", json_object_new_string(not_entered_reason(pk, may_look)));
        if (pk && pk->error != 0 && pk->error != -E2BIG && pk->error != -EOVERFLOW && pk->error != -ETIMEDOUT) {
                json_object_object_add(o, "errno", json_object_new_int(-pk->error));
                json_object_object_add(o, "error", json_object_new_string(strerror(-pk->error)));
        }
        return o;
}

/* Plan's reply for `set` (the loaded policy when NULL): {"devices": [...], "policies": [...],
 * "netns_not_entered": [...]}, with the devices of the namespaces `peek` looked at. */
static int plan_reply(Control *c, const PolicySet *set, const NetnsPeek *peek, bool may_look, json_object **ret) {
        _cleanup_(freep) Device **l = NULL;
        size_t n;
        int r;

        if (!set)
                set = control_policy(c);
        r = control_sorted_devices(c, &l, &n);
        if (r < 0)
                return r;
        json_object *o = json_object_new_object(), *a = json_object_new_array_ext((int) n);
        for (size_t i = 0; a && i < n; i++) {
                Engine *e = control_engine_of(c, l[i]);
                json_object_array_add(
                        a, control_plan_device(l[i], apply_match(e, set, l[i]), e->ipv4_supported));
        }
        /* Namespaces the policy would take that bigtcpd has not entered: what a look saw of them
         * (nothing of bigtcpd's is on them: no originals), or why not */
        json_object *unplanned = json_object_new_array();
        for (size_t i = 0; a && unplanned && i < netns_set_visible_count(c->netns); i++) {
                const char *name = netns_set_visible(c->netns, i);
                const PeekedNetns *pk = netns_peek_find(peek, name);
                _cleanup_(freep) Device **pl = NULL;
                size_t pn = 0;

                if (!plan_takes_unentered(c, set, name))
                        continue;
                if (!pk || pk->error != 0) {
                        json_object_array_add(unplanned, not_entered_json(name, pk, may_look));
                        continue;
                }
                r = device_table_sorted(&pk->devices, &pl, &pn);
                if (r < 0) {
                        json_object_put(o);
                        json_object_put(a);
                        json_object_put(unplanned);
                        return r;
                }
                for (size_t k = 0; k < pn; k++)
                        json_object_array_add(a, control_plan_device(pl[k],
                                                                     apply_match_in(set, pl[k], name, -1),
                                                                     control_home(c)->ipv4_supported));
        }
        if (!o || !a || !unplanned) {
                json_object_put(o);
                json_object_put(a);
                json_object_put(unplanned);
                return -ENOMEM;
        }
        json_object_object_add(o, "devices", a);
        json_object_object_add(o, "policies", control_policy_scopes_json(set));
        json_object_object_add(o, "netns_not_entered", unplanned);
        *ret = o;
        return 0;
}

/* The worker's first run of a plan: the namespaces to look at before it can be made (visible,
 * taken by the policy, not entered), or NULL when there are none. */
static json_object *plan_wanted(Control *c, const PolicySet *set) {
        json_object *a = NULL;

        if (!set)
                set = control_policy(c);
        for (size_t i = 0; i < netns_set_visible_count(c->netns); i++) {
                const char *name = netns_set_visible(c->netns, i);
                if (!plan_takes_unentered(c, set, name))
                        continue;
                if (!a && !(a = json_object_new_array()))
                        return NULL;
                json_object_array_add(a, json_object_new_string(name));
        }
        return a;
}

/* In the worker: one line {"error": errno, "errors": [...], "warnings": [...]} (Validate's counter
 * warnings, also of a policy with errors: what of it did parse), then, for a plan that could be made,
 * Plan's reply (plan_reply()). A plan's first run whose policy takes namespaces bigtcpd has not
 * entered says only which, in "netns_wanted"; it runs again once they are looked at. json-c
 * escapes every control character, so the line holds no newline. */
static int job_run(int fd, void *userdata) {
        ControlJob *j = userdata;
        Control *c = j->control;
        _cleanup_(policy_set_freep) PolicySet *own = NULL;
        _cleanup_(json_object_putp) json_object *head = NULL, *plan = NULL, *wanted = NULL;
        PolicyErrors errs = {}, warnings = {};
        const char *text;
        size_t len;
        int r = 0;

        if (j->policy) {
                own = policy_set_new();
                if (!own)
                        return -ENOMEM;
                own->partial = !j->plan;
                r = policy_parse_buffer(own, j->source ?: "<policy>", j->policy, strlen(j->policy), &errs);
                if (r >= 0) {
                        HostIdentity host = control_host(c);
                        policy_set_scope(own, &host);
                }
        }
        if (r >= 0 && j->plan && !j->looked && j->uid == 0 && (wanted = plan_wanted(c, own)))
                ; /* the plan after a look at those */
        else if (r >= 0 && j->plan)
                r = plan_reply(c, own, j->peek, j->uid == 0, &plan);
        if (j->have_snap && own && (r >= 0 || r == -EINVAL) &&
            guard_counter_warnings(own, &j->snap, sizeof(struct rtnl_link_stats64), &warnings) < 0) {
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                return -ENOMEM;
        }
        head = json_object_new_object();
        if (!head) {
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                return -ENOMEM;
        }
        if (r != -EINVAL) /* errors are what makes a policy invalid, and only that */
                policy_errors_clear(&errs);
        json_object_object_add(head, "error", json_object_new_int(r < 0 ? -r : 0));
        json_object_object_add(head, "errors", control_errors_json(&errs));
        json_object_object_add(head, "warnings", control_errors_json(&warnings));
        if (wanted) {
                json_object_object_add(head, "netns_wanted", TAKE_PTR(wanted));
                json_object_object_add(head, "netns_routes",
                                       json_object_new_boolean(policy_set_uses_routes(own ?: control_policy(c))));
        }
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
        text = json_object_to_json_string_length(head, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!text)
                return -ENOMEM;
        r = worker_write_all(fd, text, len);
        if (r >= 0)
                r = worker_write_all(fd, "\n", 1);
        if (r < 0 || !plan)
                return r;
        text = json_object_to_json_string_length(plan, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        return text ? worker_write_all(fd, text, len) : -ENOMEM;
}

/* The errors of the first line, checked: a worker that went wrong must not be believed. */
static int parse_errors(json_object *a, PolicyErrors *errs) {
        size_t n;

        if (!json_object_is_type(a, json_type_array))
                return -EBADMSG;
        n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(a, i), *file, *line, *column, *message;
                if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "file", &file) ||
                    !json_object_object_get_ex(o, "line", &line) ||
                    !json_object_object_get_ex(o, "column", &column) ||
                    !json_object_object_get_ex(o, "message", &message) || !json_object_is_type(file, json_type_string) ||
                    !json_object_is_type(line, json_type_int) || !json_object_is_type(column, json_type_int) ||
                    !json_object_is_type(message, json_type_string) || json_object_get_int64(line) < 0 ||
                    json_object_get_int64(line) > UINT32_MAX || json_object_get_int64(column) < 0 ||
                    json_object_get_int64(column) > UINT32_MAX)
                        return -EBADMSG;
                char *m = strdup(json_object_get_string(message));
                if (!m)
                        return -ENOMEM;
                const char *f = json_object_get_string(file);
                int r = policy_errors_append(errs, *f ? f : NULL, (unsigned) json_object_get_int64(line),
                                             (unsigned) json_object_get_int64(column), m);
                if (r < 0) {
                        free(m);
                        return r;
                }
        }
        return 0;
}

/* A first run's "netns_wanted": names of namespaces, sorted, each once, at most NETNS_MAX. */
static int parse_wanted(json_object *a, json_object **ret) {
        size_t n;

        if (!json_object_is_type(a, json_type_array) || (n = json_object_array_length(a)) == 0 || n > NETNS_MAX)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                json_object *v = json_object_array_get_idx(a, i);
                if (!json_object_is_type(v, json_type_string) || !netns_name_is_valid(json_object_get_string(v)) ||
                    (i > 0 && strcmp(json_object_get_string(json_object_array_get_idx(a, i - 1)),
                                     json_object_get_string(v)) >= 0))
                        return -EBADMSG;
        }
        *ret = json_object_get(a);
        return 0;
}

/* The worker's result: its first line, then (for a plan) Plan's reply object, passed on as it is
 * once it is known to hold no NUL (a varlink frame ends at one); or, of a plan's first run, the
 * namespaces to look at first (`ret_wanted`). */
static int parse_result(const ControlJob *j, const char *data, size_t size, PolicyErrors *errs,
                        PolicyErrors *warnings, const char **ret_plan, size_t *ret_size, json_object **ret_wanted,
                        bool *ret_routes) {
        const char *nl = memchr(data, '\n', size);
        _cleanup_(json_object_putp) json_object *head = NULL;
        json_object *error, *errors, *warns, *wanted, *routes;
        json_tokener *tok;
        int64_t e;
        int r;

        if (!nl || nl - data > INT32_MAX)
                return -EBADMSG;
        tok = json_tokener_new_ex(4);
        if (!tok)
                return -ENOMEM;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        head = json_tokener_parse_ex(tok, data, (int) (nl - data));
        bool whole = json_tokener_get_error(tok) == json_tokener_success &&
                     json_tokener_get_parse_end(tok) == (size_t) (nl - data);
        json_tokener_free(tok);
        if (!head || !whole || !json_object_is_type(head, json_type_object) ||
            !json_object_object_get_ex(head, "error", &error) || !json_object_is_type(error, json_type_int) ||
            !json_object_object_get_ex(head, "errors", &errors) ||
            !json_object_object_get_ex(head, "warnings", &warns))
                return -EBADMSG;
        e = json_object_get_int64(error);
        if (e < 0 || e > 4095)
                return -EBADMSG;
        r = parse_errors(errors, errs);
        if (r >= 0)
                r = parse_errors(warns, warnings);
        if (r < 0)
                return r;
        if (j->plan && warnings->n > 0)
                return -EBADMSG;
        const char *rest = nl + 1;
        size_t rest_size = size - (size_t) (rest - data);
        if (e != 0) {
                if (rest_size > 0 || (e == EINVAL) != (errs->n > 0))
                        return -EBADMSG;
                return (int) -e;
        }
        if (json_object_object_get_ex(head, "netns_wanted", &wanted)) {
                if (!j->plan || j->looked || errs->n > 0 || rest_size > 0 ||
                    !json_object_object_get_ex(head, "netns_routes", &routes) ||
                    !json_object_is_type(routes, json_type_boolean))
                        return -EBADMSG;
                *ret_routes = json_object_get_boolean(routes);
                return parse_wanted(wanted, ret_wanted);
        }
        if (errs->n > 0 || (j->plan ? rest_size == 0 || rest[0] != '{' || memchr(rest, '\0', rest_size)
                                    : rest_size > 0))
                return -EBADMSG;
        *ret_plan = j->plan ? rest : NULL;
        *ret_size = j->plan ? rest_size : 0;
        return 0;
}

static void on_job_done(int error, const char *data, size_t size, void *userdata);

static void on_peek_done(NetnsPeek *p, void *userdata) {
        ControlJob *j = userdata;
        int r;

        j->looked = true;
        r = worker_submit(j->control->workers, j->uid, job_run, on_job_done, j, &j->job);
        if (r < 0) {
                j->fn(r, &(PolicyErrors){}, &(PolicyErrors){}, NULL, 0, j->userdata);
                control_job_free(j);
        }
}

/* The first run named namespaces to look at: look, then run again (on_peek_done). */
static int start_peek(ControlJob *j, json_object *wanted, bool routes) {
        size_t n = json_object_array_length(wanted);
        _cleanup_(freep) char **names = calloc(n + 1, sizeof(char *));

        if (!names)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                names[i] = (char *) json_object_get_string(json_object_array_get_idx(wanted, i));
        j->job = NULL; /* it is over */
        return netns_peek_new(control_home(j->control)->base, j->control->netns, names, n, routes,
                              on_peek_done, j, &j->peek);
}

static void on_job_done(int error, const char *data, size_t size, void *userdata) {
        ControlJob *j = userdata;
        PolicyErrors errs = {}, warnings = {};
        _cleanup_(json_object_putp) json_object *wanted = NULL;
        const char *plan = NULL;
        bool routes = false;
        size_t n = 0;
        int r = error;

        if (r >= 0) {
                r = parse_result(j, data, size, &errs, &warnings, &plan, &n, &wanted, &routes);
                if (r == -EBADMSG) {
                        log_warning("%s: the worker's result is malformed, ignoring it", j->plan ? "Plan" : "Validate");
                        policy_errors_clear(&errs);
                        policy_errors_clear(&warnings);
                }
        }
        if (r >= 0 && wanted) {
                r = start_peek(j, wanted, routes);
                if (r >= 0)
                        return;
        }
        j->fn(r, &errs, &warnings, plan, n, j->userdata);
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
        control_job_free(j);
}

static int job_start(Control *c, bool plan, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                     void *userdata, ControlJob **ret) {
        ControlJob *j;
        int r;

        if (!c->workers)
                return -EOPNOTSUPP;
        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        *j = (ControlJob){
                .control = c, .plan = plan, .policy = policy_yaml, .uid = uid, .fn = fn, .userdata = userdata};
        if (source && !(j->source = strdup(source))) {
                control_job_free(j);
                return -ENOMEM;
        }
        /* the names it may take, also while no policy in force names another namespace */
        if (plan)
                netns_set_look(c->netns);
        /* the worker cannot open /proc (sandbox.c): the counters go with it, read here, now */
        if (!plan && policy_yaml) {
                r = engine_snmp_read(control_home(c), &j->snap);
                if (r == -ENOMEM) {
                        control_job_free(j);
                        return r;
                }
                if (r < 0)
                        log_debug_errno(r, "Validate: failed to read the SNMP counters (%m): no warnings");
                j->have_snap = r >= 0;
        }
        r = worker_submit(c->workers, uid, job_run, on_job_done, j, &j->job);
        if (r < 0) {
                control_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

int control_plan(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                 void *userdata, ControlJob **ret) {
        return job_start(c, true, uid, policy_yaml, source, fn, userdata, ret);
}

int control_validate(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                     void *userdata, ControlJob **ret) {
        return job_start(c, false, uid, policy_yaml, source, fn, userdata, ret);
}

void control_job_cancel(ControlJob *j) {
        if (!j)
                return;
        worker_cancel(j->job);
        control_job_free(j);
}
