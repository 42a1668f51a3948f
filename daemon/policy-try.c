/* policy-try.c — a tried policy, from its record in the runtime directory to its end: confirmed
 * (installed), reverted, timed out, or over because the daemon restarted.
 *
 * Crash safety, step by step. Start: the record is written (fsync, rename) before the tried
 * policy takes effect, so a crash after it comes back on the configured files, which a try never
 * touches. Confirm: the install (temporary file, fsync, rename over the target) is the commit; a
 * crash before it leaves the target as it was and the restart reverts, a crash after it finds the
 * tried text at the target and counts the try as confirmed. Revert: the policy that ran is put
 * back before the record goes, and a restart without the record loads the configured files,
 * which is the same thing. */
#include <fcntl.h>
#include <json-c/json.h>
#include <libgen.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"
#include "policy-try.h"

/* A record larger than any tried policy can make is not ours. */
#define TRY_RECORD_MAX (POLICY_FILE_MAX * 7 + 65536)

static void on_timer(evutil_socket_t fd, short what, void *userdata) {
        policy_try_check(userdata);
}

int policy_try_new(struct event_base *base, const Clock *clock, EventList *events, Reloader *r,
                   const char *runtime_dir, PolicyTry **ret) {
        PolicyTry *t = calloc(1, sizeof(*t));

        if (!t)
                return -ENOMEM;
        t->clock = clock;
        t->events = events;
        t->reloader = r;
        t->timer = evtimer_new(base, on_timer, t);
        if (!t->timer || asprintf(&t->record_path, "%s/" TRY_RECORD_FILE, runtime_dir) < 0) {
                t->record_path = NULL;
                policy_try_free(t);
                return -ENOMEM;
        }
        *ret = t;
        return 0;
}

static void clear(PolicyTry *t) {
        t->running = false;
        t->file = mfree(t->file);
        t->target = mfree(t->target);
        t->text = mfree(t->text);
        t->size = 0;
        policy_set_free(t->previous);
        t->previous = NULL;
        if (t->timer)
                evtimer_del(t->timer);
}

void policy_try_free(PolicyTry *t) {
        if (!t)
                return;
        if (t->running)
                log_info("stopping during the try of %s: the next start goes back to the configured policy", t->file);
        clear(t);
        if (t->timer)
                event_free(t->timer);
        free(t->record_path);
        free(t);
}

static int record_write(const PolicyTry *t, uint64_t timeout_usec) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        const char *text;
        size_t len;

        if (!o)
                return -ENOMEM;
        json_object_object_add(o, "file", json_object_new_string(t->file));
        json_object_object_add(o, "target", json_object_new_string(t->target));
        json_object_object_add(o, "timeout_usec", json_object_new_int64((int64_t) timeout_usec));
        json_object_object_add(o, "deadline_usec", json_object_new_int64((int64_t) t->deadline_realtime));
        json_object_object_add(o, "policy", json_object_new_string_len(t->text, (int) t->size));
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
        if (!text)
                return -ENOMEM;
        return write_file_atomic(t->record_path, text, len, 0600);
}

static int record_remove(const PolicyTry *t) {
        _cleanup_(freep) char *copy = strdup(t->record_path);
        _cleanup_(closep) int dir_fd = -1;

        if (!copy)
                return -ENOMEM;
        if (unlink(t->record_path) < 0 && errno != ENOENT)
                return -errno;
        dir_fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd < 0 || fsync(dir_fd) < 0)
                return -errno;
        return 0;
}

static void emit(PolicyTry *t, TryAction action, TryReason why) {
        event_emit(t->events, &(Event){.type = EVENT_TRY,
                                       .try_action = action,
                                       .try_reason = why,
                                       .file = t->file,
                                       .target = t->target,
                                       .deadline = t->deadline_realtime,
                                       .digest = reloader_policy(t->reloader)->digest});
}

static void arm(PolicyTry *t) {
        uint64_t now = clock_now(t->clock, CLOCK_MONOTONIC), left = t->deadline > now ? t->deadline - now : 0;
        struct timeval tv = {.tv_sec = (time_t) (left / USEC_PER_SEC), .tv_usec = (suseconds_t) (left % USEC_PER_SEC)};
        (void) evtimer_add(t->timer, &tv);
}

int policy_try_start(PolicyTry *t, const char *text, size_t size, const char *file, const char *target,
                     uint64_t timeout_usec, PolicyErrors *errs) {
        PolicySet *set = NULL;
        int r;

        if (t->running)
                return -EBUSY;
        if (timeout_usec < TRY_TIMEOUT_MIN_USEC || timeout_usec > TRY_TIMEOUT_MAX_USEC)
                return -ERANGE;
        if (!text || size > POLICY_FILE_MAX)
                return -EFBIG;
        t->file = strdup(file ?: "-");
        t->text = malloc(size + 1);
        if (!t->file || !t->text) {
                clear(t);
                return -ENOMEM;
        }
        memcpy(t->text, text, size);
        t->text[size] = '\0';
        t->size = size;
        r = target ? ((t->target = strdup(target)) ? 0 : -ENOMEM) : reloader_default_target(t->reloader, &t->target);
        if (r >= 0)
                r = reloader_read_with(t->reloader,
                                       &(PolicyOverride){.path = t->target, .source = t->file, .data = t->text,
                                                         .size = t->size},
                                       &set, errs);
        if (r >= 0) {
                t->deadline = clock_now(t->clock, CLOCK_MONOTONIC) + timeout_usec;
                t->deadline_realtime = clock_now(t->clock, CLOCK_REALTIME) + timeout_usec;
                /* durable before it takes effect */
                r = record_write(t, timeout_usec);
                if (r < 0)
                        log_error_errno(r, "Failed to record the try in %s: %m; not trying %s", t->record_path,
                                        t->file);
        }
        if (r < 0) {
                policy_set_free(set);
                clear(t);
                return r;
        }
        t->running = true;
        reloader_hold(t->reloader, true);
        log_info("trying %s (to be installed as %s) until confirmed, reverted or in %llus", t->file, t->target,
                 (unsigned long long) (timeout_usec / USEC_PER_SEC));
        reloader_swap(t->reloader, set, &t->previous);
        arm(t);
        emit(t, TRY_STARTED, TRY_REASON_NONE);
        return 0;
}

/* The target's directory may be a drop-in directory that does not exist yet. */
static int install(const PolicyTry *t) {
        _cleanup_(freep) char *copy = strdup(t->target);
        int r;

        if (!copy)
                return -ENOMEM;
        r = write_file_atomic(t->target, t->text, t->size, 0644);
        if (r == -ENOENT && mkdir(dirname(copy), 0755) >= 0)
                r = write_file_atomic(t->target, t->text, t->size, 0644);
        return r;
}

static void end(PolicyTry *t, TryAction action, TryReason why) {
        int r = record_remove(t);
        if (r < 0)
                log_warning_errno(r, "Failed to remove %s: %m, ignoring (the next start finds the try over)",
                                  t->record_path);
        emit(t, action, why);
        clear(t);
        /* a reload asked for during the try is done now */
        reloader_hold(t->reloader, false);
}

const char *policy_try_install_problem(int r) {
        switch (r) {
        case -ELOOP:
                return "the target is a symlink, which bigtcpd neither replaces nor writes through: its file is "
                       "another's to manage (in a Kubernetes ConfigMap mount every file is one, and the kubelet "
                       "puts back the ConfigMap's at its next update); change the policy where it is managed, or "
                       "try it again with --to naming a file of its own";
        case -EPERM:
                return "the target's directory may be written by others than root: nothing is installed there";
        case -EISDIR:
                return "the target is a directory";
        default:
                return NULL;
        }
}

int policy_try_confirm(PolicyTry *t) {
        int r;

        if (!t->running)
                return -ENOENT;
        r = install(t);
        if (r < 0 && policy_try_install_problem(r))
                return log_error_errno(r, "Failed to install %s as %s: %s; the try goes on", t->file, t->target,
                                       policy_try_install_problem(r));
        if (r < 0)
                return log_error_errno(r, "Failed to install %s as %s: %m; the try goes on", t->file, t->target);
        log_info("the try of %s is confirmed: installed as %s", t->file, t->target);
        end(t, TRY_CONFIRMED, TRY_REASON_NONE);
        reloader_installed(t->reloader);
        /* The files are what runs now; watch what makes them up (a drop-in directory the install
         * made, say). */
        reloader_reread(t->reloader);
        return 0;
}

int policy_try_revert(PolicyTry *t, TryReason why) {
        if (!t->running)
                return -ENOENT;
        log_info("the try of %s is over (%s): back to the policy that ran before", t->file, try_reason_to_string(why));
        reloader_swap(t->reloader, TAKE_PTR(t->previous), NULL);
        end(t, TRY_REVERTED, why);
        return 0;
}

void policy_try_check(PolicyTry *t) {
        if (!t->running)
                return;
        if (clock_now(t->clock, CLOCK_MONOTONIC) < t->deadline) {
                arm(t);
                return;
        }
        (void) policy_try_revert(t, TRY_REASON_TIMEOUT);
}

int policy_try_recover(PolicyTry *t) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        _cleanup_(freep) char *data = NULL, *installed = NULL;
        json_object *file = NULL, *target = NULL, *policy = NULL;
        size_t size = 0, n = 0;
        bool confirmed = false;
        int r;

        r = read_file_bounded(t->record_path, TRY_RECORD_MAX, READ_FILE_REGULAR | READ_FILE_NOFOLLOW, &data, &size);
        if (r == -ENOENT)
                return 0;
        if (r >= 0) {
                o = json_tokener_parse(data);
                if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "file", &file) ||
                    !json_object_object_get_ex(o, "target", &target) ||
                    !json_object_object_get_ex(o, "policy", &policy) || !json_object_is_type(file, json_type_string) ||
                    !json_object_is_type(target, json_type_string) || !json_object_is_type(policy, json_type_string))
                        r = -EBADMSG;
        }
        if (r < 0)
                log_warning_errno(r, "Failed to read an earlier run's try in %s (%m): it is over, and the "
                                  "configured policy runs",
                                  t->record_path);
        else if (read_file_bounded(json_object_get_string(target), POLICY_FILE_MAX, READ_FILE_REGULAR, &installed,
                                   &n) >= 0 &&
                 n == (size_t) json_object_get_string_len(policy) &&
                 memcmp(installed, json_object_get_string(policy), n) == 0) {
                log_info("the try of %s was confirmed before the restart (installed as %s)",
                         json_object_get_string(file), json_object_get_string(target));
                confirmed = true;
        } else
                log_notice("the daemon restarted during the try of %s, unconfirmed: it is reverted, the configured "
                           "policy runs",
                           json_object_get_string(file));
        r = record_remove(t);
        if (r < 0)
                log_warning_errno(r, "Failed to remove %s: %m, ignoring", t->record_path);
        return confirmed ? 2 : 1;
}
