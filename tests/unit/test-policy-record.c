/* test-policy-record.c — the last policy that ran (policy-record.c): recorded and read back to the
 * same set, never recorded from files that changed meanwhile, never run from a record that was
 * tampered with or is not one; and the engine with no policy (a frozen set) writes nothing. */
#include <sys/stat.h>
#include <unistd.h>

#include "engine-harness.h"
#include "policy-files.h"
#include "policy-record.h"

#define POLICY(name, size)                                                                                  \
        "version: 1\n"                                                                                      \
        "policies:\n"                                                                                       \
        "  - name: " name "\n"                                                                              \
        "    match:\n"                                                                                      \
        "      name: [\"eth*\"]\n"                                                                          \
        "    ipv6: {gso-max-size: " size ", gro-max-size: " size "}\n"

typedef struct Dir {
        char path[64];
        char a[96], b[96];
} Dir;

static void dir_new(Dir *d) {
        snprintf(d->path, sizeof(d->path), "/tmp/bigtcpd-unit-record-XXXXXX");
        assert_non_null(mkdtemp(d->path));
        snprintf(d->a, sizeof(d->a), "%s/a.yaml", d->path);
        snprintf(d->b, sizeof(d->b), "%s/b.yaml", d->path);
        h_write_file(d->path, "a.yaml", POLICY("one", "150000"));
        h_write_file(d->path, "b.yaml", POLICY("two", "185000"));
}

static void dir_free(Dir *d) {
        (void) nftw(d->path, h_rm, 8, FTW_DEPTH | FTW_PHYS);
}

static PolicySet *load(Dir *d) {
        char *paths[] = {d->a, d->b};
        PolicyErrors errs = {};
        PolicySet *set = NULL;

        assert_int_equal(policy_load_files(paths, 2, &set, &errs), 0);
        assert_int_equal(errs.n, 0);
        return set;
}

static void test_round_trip(void **state) {
        Dir d;
        dir_new(&d);
        PolicySet *set = load(&d), *back = NULL;
        uint64_t when = 0;

        assert_int_equal(policy_record_load(d.path, &back, &when), -ENOENT);
        assert_int_equal(policy_record_save(d.path, set), 0);
        assert_int_equal(policy_record_load(d.path, &back, &when), 0);
        assert_true(when > 0);
        assert_int_equal(back->digest, set->digest);
        assert_int_equal(back->n_files, 2);
        assert_string_equal(back->files[0], d.a);
        assert_string_equal(back->files[1], d.b);
        assert_int_equal(back->n_policies, 2);
        assert_string_equal(back->policies[1].name, "two");
        assert_false(back->frozen);
        /* the record is the daemon's: not for others to read */
        struct stat st;
        char rec[128];
        snprintf(rec, sizeof(rec), "%s/" POLICY_RECORD_FILE, d.path);
        assert_int_equal(stat(rec, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);

        /* a record stands when the files it came from change or go */
        h_write_file(d.path, "a.yaml", "this: [is not a policy\n");
        policy_set_free(back);
        back = NULL;
        assert_int_equal(policy_record_load(d.path, &back, NULL), 0);
        assert_int_equal(back->digest, set->digest);
        policy_set_free(back);
        policy_set_free(set);
        dir_free(&d);
}

static void test_files_changed_since_the_load(void **state) {
        Dir d;
        dir_new(&d);
        PolicySet *set = load(&d), *back = NULL;

        h_write_file(d.path, "b.yaml", POLICY("two", "120000"));
        assert_int_equal(policy_record_save(d.path, set), -ESTALE);
        assert_int_equal(unlink(d.b), 0);
        assert_int_equal(policy_record_save(d.path, set), -ESTALE);
        assert_int_equal(policy_record_load(d.path, &back, NULL), -ENOENT); /* nothing was written */
        policy_set_free(set);
        dir_free(&d);
}

static void test_what_is_not_run(void **state) {
        static const struct {
                const char *what, *text;
                int error;
        } cases[] = {
                {"not JSON", "{\"digest\": ", -EBADMSG},
                {"not an object", "[]", -EBADMSG},
                {"no files", "{\"digest\": \"0123456789abcdef\"}", -EBADMSG},
                {"a short digest", "{\"digest\": \"0123\", \"files\": []}", -EBADMSG},
                {"a digest that is no number", "{\"digest\": \"0123456789abcdeg\", \"files\": []}", -EBADMSG},
                {"a file without text", "{\"digest\": \"cbf29ce484222325\", \"files\": [{\"path\": \"/x\"}]}",
                 -EBADMSG},
                {"a path with a NUL", "{\"digest\": \"cbf29ce484222325\", \"files\": [{\"path\": \"/x\\u0000y\", "
                                      "\"text\": \"\"}]}",
                 -EBADMSG},
                {"texts that are not their digest",
                 "{\"digest\": \"0123456789abcdef\", \"files\": [{\"path\": \"/x\", \"text\": \"version: 1\\n"
                 "policies: []\\n\"}]}",
                 -EBADMSG},
                {"a text with errors", "{\"digest\": \"cbf29ce484222325\", \"files\": [{\"path\": \"/x\", \"text\": "
                                       "\"colour: blue\\n\"}]}",
                 -EINVAL},
                {"trailing bytes", "{\"digest\": \"cbf29ce484222325\", \"files\": []} {}", -EBADMSG},
        };
        Dir d;
        dir_new(&d);

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                PolicySet *back = NULL;
                h_write_file(d.path, POLICY_RECORD_FILE, cases[i].text);
                int r = policy_record_load(d.path, &back, NULL);
                if (r != cases[i].error)
                        fail_msg("%s: %d, want %d", cases[i].what, r, cases[i].error);
                assert_null(back);
        }
        /* an empty set is a record too: the digest of no file */
        PolicySet *back = NULL;
        h_write_file(d.path, POLICY_RECORD_FILE, "{\"digest\": \"cbf29ce484222325\", \"files\": []}");
        assert_int_equal(policy_record_load(d.path, &back, NULL), 0);
        assert_int_equal(back->n_policies, 0);
        policy_set_free(back);

        /* a symlink there is not followed */
        char rec[128], target[128];
        snprintf(rec, sizeof(rec), "%s/" POLICY_RECORD_FILE, d.path);
        snprintf(target, sizeof(target), "%s/elsewhere.json", d.path);
        assert_int_equal(rename(rec, target), 0);
        assert_int_equal(symlink(target, rec), 0);
        back = NULL;
        assert_int_equal(policy_record_load(d.path, &back, NULL), -ELOOP);
        assert_null(back);
        dir_free(&d);
}

/* No policy could be read and none ran before: the engine decides nothing for a device a policy
 * would match, and writes nothing; once a policy runs, it does. */
static void test_frozen_writes_nothing(void **state) {
        Harness *h = h_new(POLICY("one", "150000"));
        h->policy->frozen = true;
        h_link_add(h, 2, "eth0");
        h_start(h);
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 0, 0), 0);
        assert_int_equal(h_state(h, 2), DEVICE_UNMANAGED);

        h_reload(h, POLICY("one", "150000"));
        h_answer_all(h);
        assert_int_equal(h_count_writes(h, 2, 0), 1);
        assert_sizes_equal(h_link(h, 2)->sizes, H_SIZES(150000, 150000, 65536, 65536));
        h_free(h);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_files_changed_since_the_load),
                cmocka_unit_test(test_what_is_not_run),
                cmocka_unit_test_teardown(test_frozen_writes_nothing, h_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
