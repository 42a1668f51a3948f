/* test-try.c — the try state machine (policy-try.c) on the engine harness's fake clock: a try runs until
 * its deadline and not a moment less, Confirm installs and keeps it, Revert and the deadline put
 * back the very policy that ran before, reloads wait for the end of a try, what a try refuses
 * leaves everything as it was, and a restart's recovery tells a committed confirm from a try to
 * revert. */
#include <json-c/json.h>
#include <sys/stat.h>

#include "engine-harness.h"
#include "policy-reload.h"
#include "policy-try.h"

#define POLICY(glob, sizes)                                                                                 \
        "version: 1\n"                                                                                      \
        "policies:\n"                                                                                       \
        "  - name: p\n"                                                                                     \
        "    match:\n"                                                                                      \
        "      name: [\"" glob "\"]\n"                                                                      \
        "    ipv6:\n"                                                                                       \
        "      gso-max-size: " sizes "\n"                                                                   \
        "      gro-max-size: " sizes "\n"

static const char CONFIGURED[] = POLICY("eth*", "150000");
static const char TRIED[] = POLICY("eth*", "185000");
static const char EDITED[] = POLICY("eth*", "120000");

static const Sizes AT_150 = H_SIZES(150000, 150000, 65536, 65536);
static const Sizes AT_185 = H_SIZES(185000, 185000, 65536, 65536);
static const Sizes AT_120 = H_SIZES(120000, 120000, 65536, 65536);

typedef struct TryHarness {
        Harness *h;
        char config[128], record[128];
        Reloader *reloader;
        PolicyTry *t;
} TryHarness;

static TryHarness *th_current;

static void th_free(TryHarness *x) {
        if (!x)
                return;
        policy_try_free(x->t);
        reloader_free(x->reloader);
        h_free(x->h);
        if (th_current == x)
                th_current = NULL;
        free(x);
}

static int th_teardown(void **state) {
        if (th_current) {
                policy_try_free(th_current->t);
                reloader_free(th_current->reloader);
                free(th_current);
                th_current = NULL;
        }
        return h_teardown(state);
}

/* eth0 on the configured policy, applied; the policy file on disk says the same. */
static TryHarness *th_new(void) {
        TryHarness *x = calloc(1, sizeof(*x));
        assert_non_null(x);
        th_free(th_current);
        th_current = x;
        x->h = h_new(CONFIGURED);
        snprintf(x->config, sizeof(x->config), "%s/bigtcpd.yaml", x->h->runtime_dir);
        snprintf(x->record, sizeof(x->record), "%s/" TRY_RECORD_FILE, x->h->runtime_dir);
        h_write_file(x->h->runtime_dir, "bigtcpd.yaml", CONFIGURED);
        h_reloader_new(x->h, x->config, &x->reloader, &x->t);
        h_link_add(x->h, 2, "eth0");
        h_start(x->h);
        h_answer_all(x->h);
        assert_sizes_equal(h_link(x->h, 2)->sizes, AT_150);
        return x;
}

static bool exists(const char *path) {
        struct stat st;
        return stat(path, &st) == 0;
}

static char *read_text(const char *path) {
        char *text = NULL;
        assert_int_equal(read_file_bounded(path, 1 << 20, READ_FILE_REGULAR, &text, NULL), 0);
        return text;
}

/* The swap re-reads every link (sync_verify()): the harness answers that dump. */
static void settle(TryHarness *x) {
        h_dump(x->h);
        h_answer_all(x->h);
}

static const Recorded *last_try(const Harness *h, size_t from) {
        return h_find_event(h, EVENT_TRY, 0, from);
}

static void start_try(TryHarness *x, const char *text, uint64_t timeout) {
        PolicyErrors errs = {};
        assert_int_equal(policy_try_start(x->t, text, strlen(text), "tried.yaml", NULL, timeout, &errs), 0);
        assert_int_equal(errs.n, 0);
        settle(x);
}

static void test_deadline_reverts_not_earlier(void **state) {
        TryHarness *x = th_new();
        Harness *h = x->h;
        const PolicySet *configured = h->e->policy;
        uint64_t digest = configured->digest;
        size_t mark = h->n_ev;

        start_try(x, TRIED, 10 * USEC_PER_SEC);
        assert_true(x->t->running);
        assert_string_equal(x->t->target, x->config); /* --config's file when none is named */
        assert_sizes_equal(h_link(h, 2)->sizes, AT_185);
        assert_ptr_equal(x->t->previous, configured); /* kept whole for the revert */
        const Recorded *e = last_try(h, mark);
        assert_non_null(e);
        assert_int_equal(e->try_action, TRY_STARTED);
        /* recorded before it took effect, with what a restart needs */
        _cleanup_(freep) char *record = read_text(x->record);
        assert_non_null(strstr(record, "\"file\":\"tried.yaml\""));
        assert_non_null(strstr(record, "185000"));

        h_advance(h, 10 * USEC_PER_SEC - 1);
        policy_try_check(x->t);
        assert_true(x->t->running); /* a µs early: still trying */

        h_advance(h, 1);
        mark = h->n_ev;
        policy_try_check(x->t);
        assert_false(x->t->running);
        e = last_try(h, mark);
        assert_non_null(e);
        assert_int_equal(e->try_action, TRY_REVERTED);
        assert_int_equal(e->try_reason, TRY_REASON_TIMEOUT);
        assert_ptr_equal(h->e->policy, configured);
        assert_int_equal(h->e->policy->digest, digest);
        assert_false(exists(x->record));
        settle(x);
        assert_sizes_equal(h_link(h, 2)->sizes, AT_150);
        /* the file on disk was never touched */
        _cleanup_(freep) char *on_disk = read_text(x->config);
        assert_string_equal(on_disk, CONFIGURED);
        th_free(x);
}

static void test_confirm_installs_and_keeps(void **state) {
        TryHarness *x = th_new();
        Harness *h = x->h;
        size_t mark;

        start_try(x, TRIED, 10 * USEC_PER_SEC);
        uint64_t tried = h->e->policy->digest;
        mark = h->n_ev;
        assert_int_equal(policy_try_confirm(x->t), 0);
        assert_false(x->t->running);
        assert_int_equal(last_try(h, mark)->try_action, TRY_CONFIRMED);
        _cleanup_(freep) char *on_disk = read_text(x->config);
        assert_string_equal(on_disk, TRIED);
        assert_false(exists(x->record));
        assert_int_equal(h->e->policy->digest, tried);

        /* the deadline passing changes nothing; the reload the install causes finds the same
         * policy (named as the file it was installed as: the same digest) */
        h_advance(h, 20 * USEC_PER_SEC);
        policy_try_check(x->t);
        assert_int_equal(reloader_reload(x->reloader, false, NULL, NULL), 0);
        assert_int_equal(h->e->policy->digest, tried);
        assert_sizes_equal(h_link(h, 2)->sizes, AT_185);
        assert_int_equal(policy_try_confirm(x->t), -ENOENT);
        assert_int_equal(policy_try_revert(x->t, TRY_REASON_OPERATOR), -ENOENT);
        th_free(x);
}

static void test_reloads_wait_for_the_end(void **state) {
        TryHarness *x = th_new();
        Harness *h = x->h;
        const PolicySet *configured = h->e->policy;

        start_try(x, TRIED, 60 * USEC_PER_SEC);
        uint64_t tried = h->e->policy->digest;
        /* the configured file is edited during the try: neither the edit nor a Reload() ends it */
        h_write_file(h->runtime_dir, "bigtcpd.yaml", EDITED);
        assert_int_equal(reloader_reload(x->reloader, true, NULL, NULL), -EBUSY);
        assert_int_equal(reloader_reload(x->reloader, false, NULL, NULL), 0);
        assert_int_equal(h->e->policy->digest, tried);
        assert_true(x->t->running);

        /* Revert puts back what ran, then the reload that was asked for reads the edit */
        assert_int_equal(policy_try_revert(x->t, TRY_REASON_OPERATOR), 0);
        assert_ptr_equal(h->e->policy, configured);
        assert_int_equal(last_try(h, 0)->try_reason, TRY_REASON_OPERATOR);
        settle(x);
        assert_sizes_equal(h_link(h, 2)->sizes, AT_150);
        assert_int_equal(event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        settle(x);
        assert_sizes_equal(h_link(h, 2)->sizes, AT_120);
        assert_false(reloader_held(x->reloader));
        th_free(x);
}

static void test_refused_tries_change_nothing(void **state) {
        TryHarness *x = th_new();
        Harness *h = x->h;
        const PolicySet *configured = h->e->policy;
        PolicyErrors errs = {};
        static const char broken[] = "version: 1\npolicies:\n  - name: p\n    ipv6: {gso-max-size: lots}\n";
        size_t mark = h->n_ev;

        assert_int_equal(policy_try_start(x->t, broken, strlen(broken), "mine.yaml", NULL, 10 * USEC_PER_SEC, &errs),
                         -EINVAL);
        assert_true(errs.n > 0);
        for (size_t i = 0; i < errs.n; i++)
                assert_string_equal(errs.items[i].file, "mine.yaml"); /* named as the caller named it */
        policy_errors_clear(&errs);
        assert_int_equal(policy_try_start(x->t, TRIED, strlen(TRIED), "t", "/etc/passwd", 10 * USEC_PER_SEC, &errs),
                         -EXDEV);
        assert_int_equal(policy_try_start(x->t, TRIED, strlen(TRIED), "t", NULL, USEC_PER_SEC - 1, &errs), -ERANGE);
        assert_int_equal(policy_try_start(x->t, TRIED, strlen(TRIED), "t", NULL, TRY_TIMEOUT_MAX_USEC + 1, &errs),
                         -ERANGE);
        assert_false(x->t->running);
        assert_ptr_equal(h->e->policy, configured);
        assert_false(exists(x->record));
        assert_false(reloader_held(x->reloader));
        assert_null(last_try(h, mark));

        start_try(x, TRIED, 10 * USEC_PER_SEC);
        assert_int_equal(policy_try_start(x->t, TRIED, strlen(TRIED), "again", NULL, 10 * USEC_PER_SEC, &errs),
                         -EBUSY);
        assert_string_equal(x->t->file, "tried.yaml");
        th_free(x);
}

/* A record left by a run that stopped: confirmed when the target holds the tried text (the
 * install commits), reverted otherwise; unreadable is over too. The record goes each time. */
static void test_recover(void **state) {
        TryHarness *x = th_new();
        Harness *h = x->h;
        char record[512];

        assert_int_equal(policy_try_recover(x->t), 0); /* nothing recorded */

        snprintf(record, sizeof(record), "{\"file\":\"t.yaml\",\"target\":\"%s\",\"policy\":\"%s\"}", x->config,
                 "version: 1\\npolicies: []\\n");
        h_write_file(h->runtime_dir, TRY_RECORD_FILE, record);
        assert_int_equal(policy_try_recover(x->t), 1);
        assert_false(exists(x->record));
        _cleanup_(freep) char *kept = read_text(x->config);
        assert_string_equal(kept, CONFIGURED); /* a revert never writes the policy files */

        /* a crash between the install and the record's removal: the target holds the text */
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        json_object_object_add(o, "file", json_object_new_string("t.yaml"));
        json_object_object_add(o, "target", json_object_new_string(x->config));
        json_object_object_add(o, "policy", json_object_new_string(CONFIGURED));
        h_write_file(h->runtime_dir, TRY_RECORD_FILE, json_object_to_json_string(o));
        assert_int_equal(policy_try_recover(x->t), 2);
        assert_false(exists(x->record));

        h_write_file(h->runtime_dir, TRY_RECORD_FILE, "{\"file\": 3");
        assert_int_equal(policy_try_recover(x->t), 1);
        assert_false(exists(x->record));

        /* a try that started, then the daemon stopped (freed with the try running): recorded */
        start_try(x, TRIED, 10 * USEC_PER_SEC);
        policy_try_free(x->t);
        x->t = NULL;
        assert_true(exists(x->record));
        assert_int_equal(policy_try_new(h->base, &h->clock, &h->e->events, x->reloader, h->runtime_dir, &x->t), 0);
        assert_int_equal(policy_try_recover(x->t), 1); /* the target holds the configured text */
        assert_false(exists(x->record));
        th_free(x);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_deadline_reverts_not_earlier, th_teardown),
                cmocka_unit_test_teardown(test_confirm_installs_and_keeps, th_teardown),
                cmocka_unit_test_teardown(test_reloads_wait_for_the_end, th_teardown),
                cmocka_unit_test_teardown(test_refused_tries_change_nothing, th_teardown),
                cmocka_unit_test_teardown(test_recover, th_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
