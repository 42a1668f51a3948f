/* main.c — command line of bigtcpd; everything else lives in the library. */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>

#include "log.h"
#include "manager.h"
#include "parse-util.h"
#include "policy-files.h"
#include "version.h"

#define DEFAULT_RUNTIME_DIR "/run/bigtcpd"
#define DEFAULT_NETLINK_RCVBUF (32 * 1024 * 1024)
#define DEFAULT_VERIFY_INTERVAL_USEC (60ull * 1000000ull)

static void help(void) {
        printf("bigtcpd [OPTIONS]\n\n"
               "Keep every network device's GSO/GRO sizes where the BIG TCP policy says.\n\n"
               "  -c --config PATH        Use this one policy file instead of %s\n"
               "                          and the drop-in directories\n"
               "  -r --runtime-dir DIR    State file and sockets (default %s)\n"
               "  -l --log-level LEVEL    err, warning, notice, info (default), debug\n"
               "     --verify-interval T  Re-read the devices every T (default 60s, 0: never) to\n"
               "                          put back sizes changed behind bigtcpd's back\n"
               "     --netns-dir DIR      Look for network namespaces in DIR (repeatable; default\n"
               "                          /run/netns and /run/docker/netns)\n"
               "     --no-count-packets   Count no big packets (no evidence of BIG TCP in effect;\n"
               "                          no AF_PACKET socket is ever opened, no eBPF observer)\n"
               "     --observer MODE      auto (default: eBPF when it loads, else packet sockets),\n"
               "                          ebpf (or fail), packet-socket\n"
               "     --metrics-listen ADDR:PORT\n"
               "                          Serve GET /metrics (Prometheus text, as bigtcpctl\n"
               "                          metrics prints it) on ADDR:PORT (default: not at all)\n"
               "     --check-config       Validate the policy and exit: 0 clean, 1 errors (guard\n"
               "                          counters this host lacks are warnings)\n"
               "  -h --help               Show this help\n"
               "     --version            Show the version\n",
               POLICY_MAIN_FILE, DEFAULT_RUNTIME_DIR);
}

int main(int argc, char *argv[]) {
        enum { ARG_CHECK_CONFIG = 0x100, ARG_VERSION, ARG_VERIFY_INTERVAL, ARG_NETNS_DIR, ARG_NO_COUNT_PACKETS, ARG_METRICS_LISTEN,
               ARG_OBSERVER };
        static const struct option options[] = {
                {"config", required_argument, NULL, 'c'},
                {"runtime-dir", required_argument, NULL, 'r'},
                {"log-level", required_argument, NULL, 'l'},
                {"check-config", no_argument, NULL, ARG_CHECK_CONFIG},
                {"verify-interval", required_argument, NULL, ARG_VERIFY_INTERVAL},
                {"netns-dir", required_argument, NULL, ARG_NETNS_DIR},
                {"no-count-packets", no_argument, NULL, ARG_NO_COUNT_PACKETS},
                {"metrics-listen", required_argument, NULL, ARG_METRICS_LISTEN},
                {"observer", required_argument, NULL, ARG_OBSERVER},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {},
        };
        ManagerConfig cfg = {
                .root = "",
                .runtime_dir = DEFAULT_RUNTIME_DIR,
                .netlink_rcvbuf = DEFAULT_NETLINK_RCVBUF,
                .verify_interval_usec = DEFAULT_VERIFY_INTERVAL_USEC,
        };
        char *netns_dirs[NETNS_DIRS_MAX];
        bool check = false;
        Manager *m = NULL;
        const char *e;
        int c, r;

        log_open();
        /* The buffers of a burst (a journal line for thousands of devices, a dump's replies) come
         * and go. glibc raises its mmap threshold when the first of them is freed and serves the
         * next ones from the heap, where they leave holes among long-lived records that no
         * malloc_trim() gives back (2 MB at 10000 devices). A fixed threshold keeps each large
         * buffer in a mapping of its own, returned when it is freed. */
        (void) mallopt(M_MMAP_THRESHOLD, 64 * 1024);
        while ((c = getopt_long(argc, argv, "c:r:l:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        cfg.config_path = optarg;
                        break;
                case 'r':
                        cfg.runtime_dir = optarg;
                        break;
                case 'l':
                        r = log_level_from_string(optarg);
                        if (r < 0) {
                                log_error("unknown log level \"%s\"", optarg);
                                return 2;
                        }
                        log_max_level = r;
                        break;
                case ARG_VERIFY_INTERVAL:
                        if (streq_ptr(optarg, "0"))
                                cfg.verify_interval_usec = 0;
                        else if (parse_duration_usec(optarg, &cfg.verify_interval_usec) < 0) {
                                log_error("--verify-interval: \"%s\" is not a duration like 30s", optarg);
                                return 2;
                        }
                        break;
                case ARG_NETNS_DIR:
                        if (cfg.n_netns_dirs >= NETNS_DIRS_MAX) {
                                log_error("--netns-dir: at most %u directories", NETNS_DIRS_MAX);
                                return 2;
                        }
                        if (optarg[0] != '/') {
                                log_error("--netns-dir: \"%s\" is not an absolute path", optarg);
                                return 2;
                        }
                        netns_dirs[cfg.n_netns_dirs++] = optarg;
                        cfg.netns_dirs = netns_dirs;
                        break;
                case ARG_NO_COUNT_PACKETS:
                        cfg.no_count_packets = true;
                        break;
                case ARG_METRICS_LISTEN: {
                        struct sockaddr_storage ss;
                        socklen_t len;
                        if (metrics_http_parse_listen(optarg, &ss, &len) < 0) {
                                log_error("--metrics-listen: \"%s\" is not ADDR:PORT (127.0.0.1:9437, [::1]:9437)",
                                          optarg);
                                return 2;
                        }
                        cfg.metrics_listen = optarg;
                        break;
                }
                case ARG_OBSERVER:
                        r = observer_mode_from_string(optarg);
                        if (r < 0) {
                                log_error("--observer: \"%s\" is not auto, ebpf or packet-socket", optarg);
                                return 2;
                        }
                        cfg.observer = r;
                        break;
                case ARG_CHECK_CONFIG:
                        check = true;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("bigtcpd %s\n", bigtcpd_version);
                        return 0;
                default:
                        return 2;
                }
        if (optind < argc) {
                log_error("unexpected argument \"%s\"", argv[optind]);
                return 2;
        }

        /* A test knob: a small buffer makes the kernel drop events (ENOBUFS) on purpose. */
        e = getenv("BIGTCPD_NETLINK_RCVBUF");
        if (e) {
                char *end;
                long v = strtol(e, &end, 10);
                if (*end || v < 4096 || v > (1L << 30)) {
                        log_error("BIGTCPD_NETLINK_RCVBUF=%s is not a size between 4096 and 1G", e);
                        return 2;
                }
                cfg.netlink_rcvbuf = (int) v;
        }
        e = getenv("BIGTCPD_ROOT");
        if (e)
                cfg.root = e;

        if (check)
                return manager_check_config(&cfg) < 0 ? 1 : 0;

        /* A test knob: a small cap on unread replies, to see a slow client dropped. */
        e = getenv("BIGTCPD_VARLINK_OUTPUT_MAX");
        if (e) {
                char *end;
                long v = strtol(e, &end, 10);
                if (*end || v < 4096 || v > (1L << 30)) {
                        log_error("BIGTCPD_VARLINK_OUTPUT_MAX=%s is not a size between 4096 and 1G", e);
                        return 2;
                }
                cfg.varlink_output_max = (size_t) v;
        }

        r = manager_new(&cfg, &m);
        if (r < 0) {
                log_error_errno(r, "Failed to set up: %m");
                return 1;
        }
        r = manager_start(m);
        if (r >= 0)
                r = manager_run(m);
        manager_free(m);
        return r < 0 ? 1 : 0;
}
