/* policy-reload.c — loading, checking and swapping the policy; watching its files. */
#include <stdio.h>

#include "guard.h"
#include "policy-files.h"
#include "policy-record.h"
#include "policy-watch.h"
#include "log-fields.h"
#include "policy-reload.h"

struct Reloader {
        ReloadConfig cfg;
        PolicySet *policy; /* the running one, every namespace's (NULL before the first load) */
        ReloaderOps ops;   /* what runs it */
        void *userdata;
        EventList *events; /* the daemon's (the namespace set's) */
        PolicyWatch *watch;
        struct event *changed; /* a file changed: reload from the loop, once for a burst */
        ReloadResult last;
        bool has_last;
        bool held;             /* a try runs: reloads wait for its end */
        bool owed;             /* … and one was asked for meanwhile */
        PolicySource source;
        bool recorded;            /* the record holds … */
        uint64_t recorded_digest; /* … this policy */
};

/* Keeps the outcome for status: the errors copied (at most RELOAD_ERRORS_KEPT), the time now. */
static void remember(Reloader *r, bool ok, const PolicyErrors *errs) {
        ReloadResult n = {.ok = ok, .realtime_usec = realtime_usec(), .digest = r->policy->digest,
                          .n_errors = errs ? errs->n : 0};

        for (size_t i = 0; errs && i < errs->n && i < RELOAD_ERRORS_KEPT; i++) {
                char *m = strdup(errs->items[i].message ?: "");
                if (!m || policy_errors_append(&n.errors, errs->items[i].file, errs->items[i].line,
                                               errs->items[i].column, m) < 0) {
                        free(m);
                        break; /* out of memory: status shows fewer errors, the log has them all */
                }
        }
        policy_errors_clear(&r->last.errors);
        r->last = n;
        r->has_last = true;
}

const ReloadResult *reloader_last(const Reloader *r) {
        return r && r->has_last ? &r->last : NULL;
}

static const char *const policy_source_table[_POLICY_SOURCE_MAX] = {
        [POLICY_SOURCE_FILES] = "files",
        [POLICY_SOURCE_RECORDED] = "recorded",
        [POLICY_SOURCE_NONE] = "none",
};

const char *policy_source_to_string(PolicySource s) {
        return s >= 0 && s < _POLICY_SOURCE_MAX ? policy_source_table[s] : NULL;
}

PolicySource reloader_source(const Reloader *r) {
        return r ? r->source : POLICY_SOURCE_FILES;
}

/* Keep `set` (read from the files a moment ago) as the last policy that ran. */
static void record(Reloader *r, const PolicySet *set) {
        int k;

        if (!r->cfg.runtime_dir || set->frozen || (r->recorded && r->recorded_digest == set->digest))
                return;
        k = policy_record_save(r->cfg.runtime_dir, set);
        if (k == -ESTALE) {
                log_debug("policy files changed while being recorded: recorded with the reload that follows");
                return;
        }
        if (k < 0) {
                log_warning_errno(k, "Failed to record the policy in %s/" POLICY_RECORD_FILE ": %m; a start whose "
                                     "policy has errors would run none, ignoring",
                                  r->cfg.runtime_dir);
                return;
        }
        r->recorded = true;
        r->recorded_digest = set->digest;
}

int reload_read_policy(const ReloadConfig *cfg, const HostIdentity *host, PolicySet **ret, char ***ret_paths,
                       size_t *ret_n, PolicyErrors *errs, PolicyErrors *warnings) {
        _cleanup_(strv_freep) char **paths = NULL;
        PolicySet *set = NULL;
        int n, r;

        n = policy_discover(cfg->config_path, cfg->root, &paths);
        if (n < 0)
                return n;
        r = policy_load(paths, (size_t) n, warnings ? POLICY_LOAD_PARTIAL : 0, NULL, &set, errs);
        if (set && guard_observer_errors(set, errs) > 0 && r >= 0)
                r = -EINVAL; /* the observer's counters on a host that has no observer */
        if (r == -EINVAL && set) /* partial: for its warnings only */
                (void) guard_counter_warnings_here(set, NULL, warnings);
        if (r < 0) {
                policy_set_free(set);
                return r;
        }
        if (host)
                policy_set_scope(set, host);
        *ret = set;
        if (ret_paths) {
                *ret_paths = TAKE_PTR(paths);
                *ret_n = (size_t) n;
        }
        return 0;
}

/* `plain`: compiler style on stderr, one "file:line:column: message" per line (--check-config). */
static void log_policy_errors(const PolicyErrors *errs, bool plain) {
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&errs->items[i], &text) < 0)
                        log_error("%s: %s", errs->items[i].file, errs->items[i].message);
                else if (plain)
                        fprintf(stderr, "%s\n", text);
                else
                        log_error("%s", text);
        }
}

/* The warnings beside a refused policy's errors: "file:line:column: warning: …". */
static void log_policy_warnings(const PolicyErrors *w, bool plain) {
        for (size_t i = 0; i < w->n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&w->items[i], &text) < 0)
                        continue;
                if (plain)
                        fprintf(stderr, "%s\n", text);
                else
                        log_warning("%s", text);
        }
}

/* Why a policy is not in force here, for the log. */
static const char *scope_text(const Policy *p) {
        switch (p->scope) {
        case POLICY_SCOPE_HOSTS:
                return "not here (no hosts glob matches the hostname)";
        case POLICY_SCOPE_KERNEL:
                return "not here (the kernel does not satisfy its kernel requirement)";
        case POLICY_SCOPE_COHORT:
                return "not here (the cohort is not below hosts-percent): devices fall through to the "
                       "policies after it";
        case POLICY_SCOPE_UNSCOPED:
                return "not scoped";
        case POLICY_SCOPE_HERE:
                return "applies here";
        case _POLICY_SCOPE_MAX:
        case _POLICY_SCOPE_INVALID:
                break;
        }
        return "?";
}

static void describe_policy(const PolicySet *s, const HostIdentity *host) {
        size_t here = 0;
        for (size_t i = 0; i < s->n_policies; i++)
                here += s->policies[i].applies_here;
        log_fields_full_errno(LOG_INFO, 0,
                              &((LogFields){.message_id = LOG_ID_POLICY_LOADED, .digest = s->digest, .has_digest = true}),
                              "policy: %zu %s from %zu %s (%zu %s to this host), digest %016llx", s->n_policies,
                              PLURAL(s->n_policies, "policy", "policies"), s->n_files, PLURAL(s->n_files, "file", "files"),
                              here, PLURAL(here, "applies", "apply"), (unsigned long long) s->digest);
        /* the fleet canaries: where this host stands in each */
        for (size_t i = 0; i < s->n_policies; i++) {
                const Policy *p = &s->policies[i];
                if (p->has_hosts_percent)
                        log_info("policy \"%s\": cohort %u (from the %s), hosts-percent %u: %s", p->name,
                                 p->cohort, host && host->machine_id ? "machine id" : "hostname",
                                 p->hosts_percent, scope_text(p));
        }
}

/* "file:line:column: warning: guard counter … is not on this host" on stderr, as validate says it. */
static void print_counter_warnings(const PolicySet *set) {
        PolicyErrors w = {};

        (void) guard_counter_warnings_here(set, NULL, &w);
        for (size_t i = 0; i < w.n; i++) {
                _cleanup_(freep) char *text = NULL;
                if (policy_error_format(&w.items[i], &text) >= 0)
                        fprintf(stderr, "%s\n", text);
        }
        policy_errors_clear(&w);
}

int reload_check_config(const ReloadConfig *cfg, const HostIdentity *host) {
        _cleanup_(strv_freep) char **paths = NULL;
        PolicyErrors errs = {}, warnings = {};
        PolicySet *set = NULL;
        size_t n = 0;
        int r;

        r = reload_read_policy(cfg, host, &set, &paths, &n, &errs, &warnings);
        if (r == -EINVAL) {
                log_policy_errors(&errs, true);
                log_policy_warnings(&warnings, true);
        }
        policy_errors_clear(&errs);
        policy_errors_clear(&warnings);
        if (r < 0)
                return r == -EINVAL ? r : log_error_errno(r, "Failed to load the policy: %m");
        if (n == 0)
                /* not an error: the daemon runs, and manages nothing until a file appears */
                fprintf(stderr, "no policy file: %s%s does not exist and no drop-in is in %s%s, %s%s or %s%s; "
                                "bigtcpd would manage no device\n",
                        cfg->root ?: "", "/etc/bigtcpd/bigtcpd.yaml", cfg->root ?: "", "/etc/bigtcpd/bigtcpd.d",
                        cfg->root ?: "", "/run/bigtcpd/bigtcpd.d", cfg->root ?: "", "/usr/lib/bigtcpd/bigtcpd.d");
        print_counter_warnings(set);
        describe_policy(set, host);
        policy_set_free(set);
        return 0;
}

static void watch(Reloader *r, char **paths, size_t n) {
        int k = policy_watch_set(r->watch, paths, n, r->cfg.config_path, r->cfg.root);
        if (k < 0)
                log_warning_errno(k, "Failed to watch the policy files: %m; reload with SIGHUP");
}

/* Keep watching what makes up the policy even when it has errors: the next edit may fix it. */
static void watch_again(Reloader *r) {
        _cleanup_(strv_freep) char **paths = NULL;
        int n = policy_discover(r->cfg.config_path, r->cfg.root, &paths);
        watch(r, paths, n > 0 ? (size_t) n : 0);
}

static void on_changed_event(evutil_socket_t fd, short what, void *userdata) {
        (void) reloader_reload(userdata, false, NULL, NULL);
}

static void on_files_changed(void *userdata) {
        Reloader *r = userdata;
        event_active(r->changed, EV_TIMEOUT, 0);
}

int reloader_new(struct event_base *base, const ReloadConfig *cfg, EventList *events, const ReloaderOps *ops,
                 void *userdata, Reloader **ret) {
        Reloader *r = calloc(1, sizeof(*r));
        int k;

        if (!r)
                return -ENOMEM;
        r->cfg = *cfg;
        r->ops = *ops;
        r->userdata = userdata;
        r->events = events;
        r->changed = event_new(base, -1, 0, on_changed_event, r);
        k = r->changed ? policy_watch_new(base, on_files_changed, r, &r->watch) : -ENOMEM;
        if (k < 0) {
                reloader_free(r);
                return k;
        }
        *ret = r;
        return 0;
}

const PolicySet *reloader_policy(const Reloader *r) {
        return r ? r->policy : NULL;
}

const HostIdentity *reloader_host(const Reloader *r) {
        return &r->cfg.host;
}

/* `set` (taken) runs from now on; the one that ran is handed back in `ret_old` (or freed when
 * that is NULL), once nothing runs it any more. */
static void run(Reloader *r, PolicySet *set, PolicySet **ret_old) {
        PolicySet *old = r->policy;

        r->policy = set;
        r->ops.run(r->userdata, set);
        if (ret_old)
                *ret_old = old;
        else
                policy_set_free(old);
}

void reloader_free(Reloader *r) {
        if (!r)
                return;
        policy_set_free(r->policy);
        policy_watch_free(r->watch);
        policy_errors_clear(&r->last.errors);
        if (r->changed)
                event_free(r->changed);
        free(r);
}

/* The files have errors at start: the last policy that ran, or none. */
static int load_degraded(Reloader *r, const PolicyErrors *errs) {
        const HostIdentity *host = &r->cfg.host;
        PolicySet *set = NULL;
        uint64_t when = 0;
        int k;

        k = r->cfg.runtime_dir ? policy_record_load(r->cfg.runtime_dir, &set, &when) : -ENOENT;
        if (k == -ENOMEM)
                return log_error_errno(ENOMEM, "Failed to load the policy: %m");
        if (k >= 0) {
                char ts[64] = "at an unknown time";
                time_t t = (time_t) (when / USEC_PER_SEC);
                struct tm tm;

                if (when > 0 && localtime_r(&t, &tm))
                        strftime(ts, sizeof(ts), "on %Y-%m-%d at %H:%M:%S", &tm);
                policy_set_scope(set, host);
                r->source = POLICY_SOURCE_RECORDED;
                r->recorded = true;
                r->recorded_digest = set->digest;
                log_fields_full_errno(LOG_ERR, 0,
                                      &((LogFields){.message_id = LOG_ID_POLICY_BROKEN, .digest = set->digest,
                                                    .has_digest = true}),
                                      "the policy has %zu %s: running the policy that ran last (digest %016llx, "
                                      "recorded %s) until they are fixed",
                                      errs->n, PLURAL(errs->n, "error", "errors"), (unsigned long long) set->digest, ts);
        } else {
                if (k != -ENOENT)
                        log_warning_errno(k, "Failed to read the last policy that ran from %s/" POLICY_RECORD_FILE
                                             ": %m, ignoring",
                                          r->cfg.runtime_dir);
                set = policy_set_new();
                if (!set)
                        return log_error_errno(ENOMEM, "Failed to load the policy: %m");
                set->frozen = true;
                r->source = POLICY_SOURCE_NONE;
                log_fields_full_errno(LOG_ERR, 0, &((LogFields){.message_id = LOG_ID_POLICY_BROKEN}),
                                      "the policy has %zu %s and no policy ran before: bigtcpd writes no device (what "
                                      "it wrote before stays as it is) until they are fixed",
                                      errs->n, PLURAL(errs->n, "error", "errors"));
        }
        if (!set->frozen)
                describe_policy(set, host); /* none runs: there is nothing to describe */
        run(r, set, NULL);
        watch_again(r);
        remember(r, false, errs);
        return 0;
}

int reloader_load(Reloader *r) {
        _cleanup_(strv_freep) char **paths = NULL;
        PolicyErrors errs = {}, warnings = {};
        PolicySet *set = NULL;
        size_t n = 0;
        int k;

        k = reload_read_policy(&r->cfg, &r->cfg.host, &set, &paths, &n, &errs, &warnings);
        if (k == -ENOMEM) {
                policy_errors_clear(&errs);
                policy_errors_clear(&warnings);
                return log_error_errno(ENOMEM, "Failed to load the policy: %m");
        }
        if (k < 0) {
                if (k == -EINVAL) {
                        log_policy_errors(&errs, false);
                        log_policy_warnings(&warnings, false);
                        policy_errors_clear(&warnings);
                } else {
                        /* no file to name a position in: the error is about the policy as a whole */
                        _cleanup_(freep) char *target = NULL;
                        char *m = strdup(strerror(-k));
                        log_error_errno(k, "Failed to load the policy: %m");
                        if (!m || reloader_default_target(r, &target) < 0 ||
                            policy_errors_append(&errs, target, 0, 0, m) < 0)
                                free(m);
                }
                k = load_degraded(r, &errs);
                policy_errors_clear(&errs);
                return k;
        }
        r->source = POLICY_SOURCE_FILES;
        describe_policy(set, &r->cfg.host);
        run(r, set, NULL);
        watch(r, paths, n);
        remember(r, true, NULL);
        record(r, set);
        return 0;
}

static void emit_reload(Reloader *r, bool ok, const PolicyErrors *errs) {
        event_emit(r->events,
                   &(Event){.type = EVENT_RELOAD, .ok = ok, .digest = r->policy->digest, .errors = errs});
}

int reloader_reload(Reloader *r, bool forced, PolicyErrors *ret_errs, PolicyErrors *ret_warnings) {
        _cleanup_(strv_freep) char **paths = NULL;
        PolicyErrors errs = {}, warnings = {};
        PolicySet *set = NULL;
        size_t n = 0;
        int k;

        if (r->held) {
                r->owed = true;
                if (forced)
                        log_warning("a try runs: the policy files are read again when it ends");
                return forced ? -EBUSY : 0;
        }
        if (forced)
                event_emit(r->events, &(Event){.type = EVENT_RELOADING});
        k = reload_read_policy(&r->cfg, &r->cfg.host, &set, &paths, &n, &errs, &warnings);
        if (k < 0) {
                if (k == -EINVAL) {
                        log_policy_errors(&errs, false);
                        log_policy_warnings(&warnings, false);
                } else
                        log_error_errno(k, "Failed to load the policy: %m");
                char count[64] = "";
                if (errs.n > 0)
                        snprintf(count, sizeof(count), " (%zu %s)", errs.n, PLURAL(errs.n, "error", "errors"));
                if (r->source == POLICY_SOURCE_NONE)
                        log_fields_full_errno(LOG_ERR, 0, &((LogFields){.message_id = LOG_ID_POLICY_REFUSED}),
                                              "refusing the new policy%s; still no policy runs", count);
                else
                        log_fields_full_errno(LOG_ERR, 0,
                                              &((LogFields){.message_id = LOG_ID_POLICY_REFUSED,
                                                            .digest = r->policy->digest,
                                                            .has_digest = true}),
                                              "refusing the new policy%s, keeping the running one (digest %016llx)",
                                              count, (unsigned long long) r->policy->digest);
                if (r->source == POLICY_SOURCE_FILES)
                        r->source = POLICY_SOURCE_RECORDED;
                watch_again(r);
                remember(r, false, &errs);
                emit_reload(r, false, &errs);
                if (forced && r->ops.unchanged)
                        /* announced: READY=1 follows even though nothing changed */
                        r->ops.unchanged(r->userdata);
                if (ret_errs)
                        *ret_errs = errs;
                else
                        policy_errors_clear(&errs);
                if (ret_warnings)
                        *ret_warnings = warnings;
                else
                        policy_errors_clear(&warnings);
                return k;
        }
        watch(r, paths, n);
        if (!forced && set->digest == r->policy->digest && !r->policy->frozen) {
                /* the files are back at the running policy: a refusal before is over */
                if (r->has_last && !r->last.ok) {
                        log_info("the policy files are fixed: they make up the running policy (digest %016llx)",
                                 (unsigned long long) set->digest);
                        remember(r, true, NULL);
                        emit_reload(r, true, NULL);
                }
                r->source = POLICY_SOURCE_FILES;
                record(r, set);
                policy_set_free(set);
                return 0;
        }
        if (!forced)
                event_emit(r->events, &(Event){.type = EVENT_RELOADING});
        reloader_swap(r, set, NULL);
        r->source = POLICY_SOURCE_FILES;
        remember(r, true, NULL);
        record(r, set);
        emit_reload(r, true, NULL);
        return 0;
}

void reloader_swap(Reloader *r, PolicySet *set, PolicySet **ret_old) {
        describe_policy(set, &r->cfg.host);
        /* every namespace reconciles against what the kernel holds now (ReloaderOps.run) */
        run(r, set, ret_old);
}

void reloader_hold(Reloader *r, bool hold) {
        r->held = hold;
        if (!hold && r->owed) {
                r->owed = false;
                /* from the loop: the caller finishes what it is doing first */
                event_active(r->changed, EV_TIMEOUT, 0);
        }
}

bool reloader_held(const Reloader *r) {
        return r->held;
}

void reloader_reread(Reloader *r) {
        event_active(r->changed, EV_TIMEOUT, 0);
}

void reloader_installed(Reloader *r) {
        remember(r, true, NULL); /* the try's own event said it (TRY_CONFIRMED) */
}

int reloader_default_target(const Reloader *r, char **ret) {
        char *p;
        if (r->cfg.config_path)
                p = strdup(r->cfg.config_path);
        else if (asprintf(&p, "%s" POLICY_MAIN_FILE, r->cfg.root ?: "") < 0)
                p = NULL;
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

int reloader_read_with(Reloader *r, const PolicyOverride *o, PolicySet **ret, PolicyErrors *errs) {
        _cleanup_(strv_freep) char **paths = NULL;
        PolicySet *set = NULL;
        int n, k;

        n = policy_discover_with(r->cfg.config_path, r->cfg.root, o->path, &paths);
        if (n < 0)
                return n;
        k = policy_load_files_with(paths, (size_t) n, o, &set, errs);
        if (k < 0)
                return k;
        policy_set_scope(set, &r->cfg.host);
        *ret = set;
        return 0;
}
