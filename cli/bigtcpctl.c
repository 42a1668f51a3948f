/* bigtcpctl.c — the command-line client of bigtcpd: global options, the table of verbs and
 * dispatch. The verbs live in bigtcpctl-<group>.c, what they share in bigtcpctl-util.c and
 * bigtcpctl-call.c (the calls to the daemon, over varlink or D-Bus). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bigtcpctl-devices.h"
#include "bigtcpctl-metrics.h"
#include "bigtcpctl-monitor.h"
#include "bigtcpctl-operate.h"
#include "bigtcpctl-policy.h"
#include "bigtcpctl-status.h"
#include "bigtcpctl-util.h"

static void help(void) {
        printf("bigtcpctl [OPTIONS] COMMAND ...\n\n"
               "Query and control bigtcpd, the BIG TCP GSO/GRO size daemon.\n\n"
               "Commands:\n"
               "  status                 Daemon, policy, rollouts, devices per state (and which\n"
               "                         are rolled back or failed)\n"
               "  list                   Every device: state, policy, sizes the kernel holds (bytes)\n"
               "  show DEV               One device: current, desired and original sizes, which\n"
               "                         bigtcpd owns, why it is pending, errors, last rollback\n"
               "  plan [FILE]            What the loaded policy (or FILE) would change here\n"
               "  reload                 Re-read the policy files (root)\n"
               "  rollback DEV|--all     Back to the sizes before bigtcpd's last change now, and\n"
               "                         hold them until the policy changes or retry (root)\n"
               "  retry DEV|--all        Release a rolled-back or failed device (root)\n"
               "  monitor                Print events as they happen (devices added and removed,\n"
               "                         states, writes, rollbacks, rollouts, reloads)\n"
               "  validate FILE...       Check policy files, without the daemon; errors as\n"
               "                         file:line:column: message\n"
               "  metrics                Prometheus text format (node_exporter textfile collector)\n\n"
               "Options:\n"
               "  -s --socket PATH       Varlink socket (default %s)\n"
               "     --dbus              Use D-Bus (io.bigtcpd1 on the system bus) instead of\n"
               "                         varlink; all but plan, monitor (and validate, local)\n"
               "     --json              The daemon's JSON (io.bigtcpd.Manager.varlink schema); one\n"
               "                         document, or one line per event for monitor\n"
               "     --no-legend         No header and footer lines\n"
               "     --all               With rollback: every device bigtcpd has written; with\n"
               "                         retry: every rolled-back or failed device\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n\n"
               "Sizes are bytes; show adds a 1024-based short form, truncated: 185000 (180.7K).\n"
               "Colour only when stdout is a terminal and $NO_COLOR is unset.\n\n"
               "Exit status: 0 success; 1 failure (including policy errors and unknown devices);\n"
               "2 usage error; 3 bigtcpd is not running; 4 permission denied.\n",
               DEFAULT_SOCKET);
}

typedef struct Verb {
        const char *name;
        int (*run)(Ctl *c, char **args, size_t n);
        bool takes_all; /* --all */
} Verb;

static const Verb verbs[] = {
        {"status", verb_status, false},     {"list", verb_list, false},
        {"show", verb_show, false},         {"plan", verb_plan, false},
        {"reload", verb_reload, false},     {"rollback", verb_rollback, true},
        {"retry", verb_retry, true},        {"monitor", verb_monitor, false},
        {"validate", verb_validate, false}, {"metrics", verb_metrics, false},
};

int main(int argc, char *argv[]) {
        enum { ARG_DBUS = 0x100, ARG_JSON, ARG_NO_LEGEND, ARG_ALL, ARG_VERSION };
        static const struct option options[] = {
                {"socket", required_argument, NULL, 's'},    {"dbus", no_argument, NULL, ARG_DBUS},
                {"json", no_argument, NULL, ARG_JSON},       {"no-legend", no_argument, NULL, ARG_NO_LEGEND},
                {"all", no_argument, NULL, ARG_ALL},         {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION}, {},
        };
        Ctl c = {.socket = DEFAULT_SOCKET, .legend = true};
        bool socket_given = false;
        int opt, r;

        while ((opt = getopt_long(argc, argv, "s:h", options, NULL)) >= 0)
                switch (opt) {
                case 's':
                        c.socket = optarg;
                        socket_given = true;
                        break;
                case ARG_DBUS:
                        c.dbus = true;
                        break;
                case ARG_JSON:
                        c.json = true;
                        break;
                case ARG_NO_LEGEND:
                        c.legend = false;
                        break;
                case ARG_ALL:
                        c.all = true;
                        break;
                case 'h':
                        help();
                        return EXIT_OK;
                case ARG_VERSION:
                        printf("bigtcpctl %s\n", BIGTCPD_VERSION);
                        return EXIT_OK;
                default:
                        return EXIT_USAGE;
                }
        if (socket_given && c.dbus)
                return error_exit(EXIT_USAGE, "--socket and --dbus exclude each other");
        if (optind >= argc)
                return error_exit(EXIT_USAGE, "no command given (try --help)");

        c.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !streq_ptr(getenv("TERM"), "dumb");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq_ptr(argv[optind], verbs[i].name)) {
                        if (c.all && !verbs[i].takes_all)
                                return error_exit(EXIT_USAGE, "--all goes with rollback and retry only");
                        r = verbs[i].run(&c, argv + optind + 1, (size_t) (argc - optind - 1));
                        varlink_close(c.conn);
                        if (fflush(stdout) != 0 && r == EXIT_OK)
                                r = error_exit(EXIT_FAILED, "writing the output: %m");
                        return r;
                }
        return error_exit(EXIT_USAGE, "unknown command \"%s\" (try --help)", argv[optind]);
}
