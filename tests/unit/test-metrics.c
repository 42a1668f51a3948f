/* test-metrics.c — the Prometheus text (metrics.h) is the one bigtcpd printed before its printer
 * was fed from the daemon's tables: printed from the tables (/metrics), from GetStatus and
 * ListDevices as JSON (bigtcpctl metrics) and in parts (a cursor), it is byte for byte what the
 * old builder (metrics-oracle.c) prints from the same state's JSON, over a harness's devices in
 * many states, and over JSON of odd shapes. The devices' tree (the JSON writer's tree backend)
 * prints as their text. */
#include "engine-harness.h"

#include "control.h"
#include "json-read.h"
#include "metrics-oracle.h"
#include "metrics.h"

#define GUARDED                                                                                             \
        "    rollback:\n"                                                                                   \
        "      window: 10s\n"                                                                               \
        "      interval: 1s\n"                                                                              \
        "      guards:\n"                                                                                   \
        "        - {counter: link.tx_errors, max-increase: 0}\n"

static const char POLICY[] = "version: 1\n"
                             "policies:\n"
                             "  - name: fabric\n"
                             "    match: {name: [\"eth*\"]}\n"
                             "    ipv6: {gso-max-size: 185000, gro-max-size: 185000}\n"
                             "    ipv4: {gso-max-size: 185000, gro-max-size: 185000}\n" GUARDED
                             "  - name: search\n"
                             "    match: {name: [\"au*\"]}\n"
                             "    ipv6: {gso-max-size: auto}\n" GUARDED;

typedef char *(*Printer)(Control *c, json_object *status, json_object *devices);

static char *printed(void (*print)(FILE *f, void *userdata), void *userdata) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        assert_non_null(f);
        print(f, userdata);
        assert_int_equal(fclose(f), 0);
        return text;
}

typedef struct Views {
        Control *control;
        json_object *status, *devices;
        size_t step; /* metrics_print_some()'s devices at a time */
} Views;

static void print_oracle(FILE *f, void *userdata) {
        Views *v = userdata;
        metrics_oracle_write(f, v->status, v->devices);
}

static void print_json(FILE *f, void *userdata) {
        Views *v = userdata;
        metrics_write(f, v->status, v->devices);
}

static void print_tables(FILE *f, void *userdata) {
        Views *v = userdata;
        _cleanup_(control_metrics_freep) ControlMetrics *m = NULL;
        MetricsCursor cur = METRICS_CURSOR_INIT;

        assert_int_equal(control_metrics_new(v->control, &m), 0);
        if (v->step == 0) {
                metrics_print(f, control_metrics_source(m));
                return;
        }
        for (unsigned n = 0; !metrics_print_some(f, control_metrics_source(m), &cur, v->step); n++)
                assert_true(n < 100000);
}

/* Every way of printing the Control's state prints the old builder's text; returns it. */
static char *assert_same_text(Control *c) {
        _cleanup_(json_object_putp) json_object *status = control_status_json(c), *list = NULL;
        Views v = {.control = c, .status = status};

        assert_non_null(status);
        assert_int_equal(control_devices_json(c, NULL, &list), 0);
        v.devices = jarray(list, "devices");
        assert_non_null(v.devices);
        /* the tree (the writer's tree backend) prints as the text written for varlink */
        {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                assert_int_equal(control_devices_write(c, &w), 0);
                assert_string_equal(json_object_to_json_string_ext(list, JSON_C_TO_STRING_PLAIN |
                                                                                 JSON_C_TO_STRING_NOSLASHESCAPE),
                                    json_writer_text(&w));
        }

        char *want = printed(print_oracle, &v);
        _cleanup_(freep) char *json = printed(print_json, &v), *tables = printed(print_tables, &v);
        assert_string_equal(json, want);
        assert_string_equal(tables, want);
        for (v.step = 1; v.step <= 3; v.step++) {
                _cleanup_(freep) char *parts = printed(print_tables, &v);
                assert_string_equal(parts, want);
        }
        return want;
}

static void test_tables_as_json(void **state) {
        Harness *h = h_new(POLICY);
        Control *c = &h->control;
        Reloader *reloader = NULL;
        PolicyTry *t = NULL;
        char config[128];

        snprintf(config, sizeof(config), "%s/bigtcpd.yaml", h->runtime_dir);
        h_write_file(h->runtime_dir, "bigtcpd.yaml", POLICY);
        h_reloader_new(h, config, &reloader, &t);
        c->reloader = reloader;

        /* none yet: lo alone, before the first sync */
        free(assert_same_text(c));

        h_link_add(h, 2, "eth0");
        h_link_add(h, 3, "eth\"1\\\n");          /* a label's escapes */
        h_link_add_full(h, 4, "x\xff\xfey", NULL, false); /* not UTF-8, no kind, no policy, no IPv4 sizes */
        h_link_add(h, 5, "au0");
        h_link_add(h, 6, "eth2");
        h_start(h);
        /* eth2's write is refused: failed, with the kernel's error */
        for (Request *r; (r = h_next_request(h));)
                h_answer(h, r->kind == REQUEST_WRITE && r->ifindex == 6 ? -EINVAL : 0);
        h_answer_all(h);
        assert_state(h_state(h, 6), DEVICE_FAILED);
        _cleanup_(freep) char *probation = assert_same_text(c);
        assert_non_null(strstr(probation, "bigtcpd_device_state{ifname=\"eth\\\"1\\\\\\n\",policy=\"fabric\","
                                          "state=\"probation\"} 1\n"));
        assert_non_null(strstr(probation, "bigtcpd_device_size_bytes{ifname=\"x??y\",policy=\"\",size=\"gro_max_size\"}"));
        assert_non_null(strstr(probation, "bigtcpd_device_auto_phase{ifname=\"au0\",policy=\"search\","));
        assert_non_null(strstr(probation, "bigtcpd_policy_applies{policy=\"search\"} 1\n"));

        /* eth0 trips its guard: rolled back, a rollback of its policy */
        h_link(h, 2)->stats.tx_errors = 1;
        h_tick(h, USEC_PER_SEC);
        h_answer_all(h);
        assert_state(h_state(h, 2), DEVICE_ROLLED_BACK);
        _cleanup_(freep) char *rolled = assert_same_text(c);
        assert_non_null(strstr(rolled, "bigtcpd_rollbacks_total{policy=\"fabric\"} 1\n"));
        assert_non_null(strstr(rolled, "bigtcpd_rollbacks_total{policy=\"search\"} 0\n"));

        /* the window passes; then a policy file with errors is refused */
        h_run(h, 12 * USEC_PER_SEC, USEC_PER_SEC);
        h_answer_all(h);
        h_write_file(h->runtime_dir, "bigtcpd.yaml", "version: 1\npolicies:\n  - name: a\"b\n    bogus: 1\n");
        assert_true(reloader_reload(reloader, false, NULL, NULL) < 0);
        _cleanup_(freep) char *refused = assert_same_text(c);
        assert_non_null(strstr(refused, "bigtcpd_config_last_reload_successful 0\n"));
        assert_non_null(strstr(refused, "bigtcpd_policy_error{file=\""));

        /* a device that goes while the text is printed in parts (the loop runs between them) is
         * left out from then on */
        {
                _cleanup_(control_metrics_freep) ControlMetrics *m = NULL;
                MetricsCursor cur = METRICS_CURSOR_INIT;
                _cleanup_(freep) char *text = NULL;
                size_t size = 0, before;
                FILE *f = open_memstream(&text, &size);

                assert_non_null(f);
                assert_int_equal(control_metrics_new(c, &m), 0);
                assert_false(metrics_print_some(f, control_metrics_source(m), &cur, 2)); /* lo, eth0 */
                assert_int_equal(fflush(f), 0);
                before = size;
                h_link_del(h, 3);
                h_answer_all(h);
                assert_null(h_dev(h, 3));
                for (unsigned n = 0; !metrics_print_some(f, control_metrics_source(m), &cur, 2); n++)
                        assert_true(n < 1000);
                assert_int_equal(fclose(f), 0);
                assert_null(strstr(text + before, "eth\\\"1"));
                assert_non_null(strstr(text + before, "bigtcpd_device_size_bytes{ifname=\"eth2\""));
                assert_non_null(strstr(text + before, "bigtcpd_device_state{ifname=\"eth0\""));
        }

        /* devices go */
        h_link_del(h, 5);
        h_answer_all(h);
        free(assert_same_text(c));

        c->reloader = NULL;
        policy_try_free(t);
        reloader_free(reloader);
        h_free(h);
}

/* JSON of any shape, as bigtcpctl may get it: what is missing or of another type is left out,
 * as it was. */
static void test_odd_json(void **state) {
        static const char *const statuses[] = {
                "null",
                "[]",
                "{}",
                "{\"version\": 3, \"policy\": [], \"ready\": \"yes\", \"devices\": {\"applied\": \"1\", \"failed\": 2.5}}",
                "{\"rollbacks\": 7, \"rollbacks_by_policy\": [1]}",
                "{\"rollbacks_by_policy\": {\"a\": 1, \"b\": null, \"c\": \"2\", \"d\": 2.0},"
                " \"policies\": [{\"name\": \"b\"}, {\"name\": \"a\"}, {}, 5, {\"name\": \"e\\\"\\\\\\n\", \"applies\": true,"
                " \"hosts_percent\": 30, \"cohort\": 1.5}]}",
                "{\"last_reload\": 1, \"policies\": {}}",
                "{\"last_reload\": {\"ok\": false, \"errors\": [{\"file\": \"f\", \"line\": 2, \"column\": \"x\","
                " \"message\": \"m\\\"\"}, 7, {}]}}",
                "{\"last_reload\": {\"ok\": false, \"errors_total\": 40, \"errors\": []}}",
                "{\"last_reload\": {\"ok\": true, \"errors\": [{}]}}",
                "{\"evidence\": {\"not_effective\": [1, 2], \"observer\": \"ebpf\", \"observer_why\": 3,"
                " \"observer_map_bytes\": \"x\", \"observer_read_usec\": 1500}, \"probation\": {\"sample_gap_max_usec\": 1234567}}",
                "{\"evidence\": {\"observer_map_bytes\": 10}, \"probation\": []}",
        };
        static const char *const device_lists[] = {
                "null",
                "{}",
                "[]",
                "[1, null, \"x\", []]",
                "[{\"ifname\": \"a\", \"netns\": \"host\", \"state\": \"applied\", \"rollbacks\": 2,"
                " \"current\": {\"gso_max_size\": 1, \"gro_ipv4_max_size\": 2.5, \"gro_max_size\": \"3\"},"
                " \"desired\": [], \"tso_max_size\": \"x\", \"big_packets\": 0, \"effective\": 1,"
                " \"auto\": [1, {\"size\": 2, \"phase\": \"idle\", \"proven\": 5}, {\"size\": \"gso_max_size\","
                " \"phase\": \"trying\", \"ceiling\": 9, \"trips\": 1}, {}, {}, {}]},"
                " {\"ifname\": null, \"netns\": \"ns\\\"1\", \"policy\": \"p\", \"effective\": false,"
                " \"big_packets\": {\"tx\": 1, \"rx_largest\": 70000}, \"desired\": {\"gso_ipv4_max_size\": 4}}]",
                "[{\"ifname\": \"b\"}, {\"rollbacks\": 3}]",
        };

        for (size_t i = 0; i < ELEMENTSOF(statuses); i++)
                for (size_t k = 0; k < ELEMENTSOF(device_lists); k++) {
                        _cleanup_(json_object_putp) json_object *s = json_tokener_parse(statuses[i]),
                                                                *d = json_tokener_parse(device_lists[k]);
                        Views v = {.status = s, .devices = d};
                        _cleanup_(freep) char *want = printed(print_oracle, &v), *got = printed(print_json, &v);

                        if (!streq_ptr(want, got))
                                fail_msg("status %zu, devices %zu:\n--- old\n%s\n--- new\n%s", i, k, want, got);
                }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_tables_as_json, h_teardown),
                cmocka_unit_test(test_odd_json),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
