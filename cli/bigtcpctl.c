/* bigtcpctl.c — the command-line client of bigtcpd: global options, the table of verbs and
 * dispatch. The verbs live in bigtcpctl-<group>.c, what they share in bigtcpctl-util.c and
 * bigtcpctl-call.c (the calls to the daemon, over varlink or D-Bus). */
#include <errno.h>
#include <getopt.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bigtcpctl-devices.h"
#include "bigtcpctl-evidence.h"
#include "bigtcpctl-metrics.h"
#include "bigtcpctl-monitor.h"
#include "bigtcpctl-operate.h"
#include "bigtcpctl-policy.h"
#include "bigtcpctl-status.h"
#include "bigtcpctl-try.h"
#include "bigtcpctl-util.h"
#include "pager.h"
#include "version.h"

static void help(void) {
        printf("bigtcpctl [OPTIONS] COMMAND ...\n\n"
               "Query and control bigtcpd, the BIG TCP GSO/GRO size daemon.\n\n"
               "Commands:\n"
               "  status                 The daemon's state (degraded while a device is rolled back\n"
               "                         or failed, naming them), the last reload (refused, with\n"
               "                         its errors), policy, rollouts, devices per state\n"
               "  list                   Every device: state, policy, sizes the kernel holds (bytes)\n"
               "  show DEV               One device (by name, altname or ifindex): its altnames,\n"
               "                         the policy and the match key that chose it, current,\n"
               "                         desired and original sizes and why desired is not what\n"
               "                         the policy asks (clamped, held), errors, last rollback\n"
               "  plan [FILE|-] [--all]  What the loaded policy (or FILE) would change here, with\n"
               "                         the numbers of each clamp and the policies scoped away;\n"
               "                         --all lists the devices with nothing to do too\n"
               "  reload                 Re-read the policy files (root)\n"
               "  rollback DEV|--all     Back to the sizes before bigtcpd's last change now, and\n"
               "                         hold them until the policy changes or retry (root)\n"
               "  retry DEV|--all        Release a rolled-back or failed device (root)\n"
               "  try FILE [--timeout T] [--to PATH]\n"
               "                         Run FILE instead of the configured policy until\n"
               "                         confirmed, reverted or T passes (120s); on a terminal\n"
               "                         Enter confirms, Ctrl-C reverts (root)\n"
               "  confirm                Keep the tried policy: installed as the main policy\n"
               "                         file, or --to's drop-in (root)\n"
               "  revert                 Go back to the policy that ran before the try (root)\n"
               "  watch DEV [--for T]    Count DEV's packets above 64 KiB for T (30s), then say\n"
               "                         whether BIG TCP is in effect (root)\n"
               "  monitor                Print events as they happen (devices added and removed,\n"
               "                         states, writes, rollbacks, rollouts, reloads)\n"
               "  validate FILE...       Check policy files (- for standard input), without the\n"
               "                         daemon; errors as file:line:column: message, and guard\n"
               "                         counters this host lacks as warnings\n"
               "  metrics                Prometheus text format (node_exporter textfile collector)\n"
               "  help                   Show this help\n"
               "Without a command: list, as networkctl does.\n\n"
               "Options:\n"
               "  -s --socket PATH       Varlink socket (default %s)\n"
               "     --dbus              Use D-Bus (io.bigtcpd1 on the system bus) instead of\n"
               "                         varlink; all but plan, monitor, try (and validate, local)\n"
               "     --json[=pretty|short|off]\n"
               "                         The daemon's JSON (io.bigtcpd.Manager.varlink schema); one\n"
               "                         document, or one line per event for monitor. Plain --json:\n"
               "                         pretty on a terminal, one line into a pipe; off: text\n"
               "     --no-legend         No header and footer lines\n"
               "  -l --full              Do not cut table cells to fit the terminal\n"
               "  -q --quiet             No messages on success (reload, rollback, retry, confirm,\n"
               "                         revert; validate's summary, monitor's banner)\n"
               "     --no-pager          Do not pipe long output (status, list, show, plan,\n"
               "                         metrics) into a pager\n"
               "     --for T             With watch: how long to count (30s, 5min; at most 1h)\n"
               "     --all               With rollback: every device bigtcpd has written; with\n"
               "                         retry: every rolled-back or failed device; with plan:\n"
               "                         the devices with nothing to do too\n"
               "     --timeout T         With try: revert after T unless confirmed (1s to 24h)\n"
               "     --to PATH           With try: where confirm installs FILE (a drop-in in\n"
               "                         /etc/bigtcpd/bigtcpd.d/)\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n\n"
               "Sizes are bytes; show adds a 1024-based short form, truncated: 185000 (180.6K).\n"
               "Colour only when stdout is a terminal and $NO_COLOR is unset or empty. On a\n"
               "terminal, long output goes through $SYSTEMD_PAGER or $PAGER (default less; \"\" or\n"
               "\"cat\": none) and tables fit its width ($COLUMNS into a pipe). Outside a UTF-8\n"
               "locale (LC_ALL=C) the output is ASCII.\n\n"
               "Exit status: 0 success; 1 failure (including policy errors, unknown devices and a\n"
               "try not kept); 2 usage error; 3 bigtcpd is not running or does not answer; 4\n"
               "permission denied.\n\n"
               "See the bigtcpctl(8) man page for details.\n",
               DEFAULT_SOCKET);
}

typedef struct Verb {
        const char *name;
        int (*run)(Ctl *c, char **args, size_t n);
        bool takes_all; /* --all */
        bool pages;     /* long output: through the pager on a terminal */
        bool messages;  /* prints only messages on success, which --quiet drops */
} Verb;

static int verb_help(Ctl *c, char **args, size_t n);

static const Verb verbs[] = {
        {"status", verb_status, false, true, false},     {"list", verb_list, false, true, false},
        {"show", verb_show, false, true, false},         {"plan", verb_plan, true, true, false},
        {"reload", verb_reload, false, false, true},     {"rollback", verb_rollback, true, false, true},
        {"retry", verb_retry, true, false, true},        {"monitor", verb_monitor, false, false, false},
        {"validate", verb_validate, false, false, false}, {"metrics", verb_metrics, false, true, false},
        {"try", verb_try, false, false, false},          {"confirm", verb_confirm, false, false, true},
        {"revert", verb_revert, false, false, true},     {"watch", verb_watch, false, false, false},
        {"help", verb_help, false, false, false},
};

static int verb_help(Ctl *c, char **args, size_t n) {
        help();
        return EXIT_OK;
}

static JsonMode json_mode_from_string(const char *s) {
        if (!s)
                return JSON_AUTO;
        if (streq_ptr(s, "pretty"))
                return JSON_PRETTY;
        if (streq_ptr(s, "short"))
                return JSON_SHORT;
        if (streq_ptr(s, "off"))
                return JSON_OFF;
        return _JSON_MODE_INVALID;
}

/* What a table may take: the terminal's width when stdout is one, else $COLUMNS, else no limit
 * (a pipe gets whole lines). Read before the pager takes stdout. */
static size_t output_columns(void) {
        struct winsize ws = {};
        const char *e = getenv("COLUMNS");
        char *end;
        long n;

        if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) >= 0 && ws.ws_col > 0)
                return ws.ws_col;
        if (!e || !*e)
                return 0;
        errno = 0;
        n = strtol(e, &end, 10);
        return *end == '\0' && errno == 0 && n > 0 && n <= 10000 ? (size_t) n : 0;
}

int main(int argc, char *argv[]) {
        enum { ARG_DBUS = 0x100, ARG_JSON, ARG_NO_LEGEND, ARG_NO_PAGER, ARG_ALL, ARG_VERSION, ARG_TIMEOUT, ARG_TO, ARG_FOR };
        /* what runs without a command, as networkctl lists */
        static char *default_verb[] = {(char *) "list", NULL};
        static const struct option options[] = {
                {"socket", required_argument, NULL, 's'},    {"dbus", no_argument, NULL, ARG_DBUS},
                {"json", optional_argument, NULL, ARG_JSON}, {"no-legend", no_argument, NULL, ARG_NO_LEGEND},
                {"no-pager", no_argument, NULL, ARG_NO_PAGER},
                {"all", no_argument, NULL, ARG_ALL},         {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION}, {"timeout", required_argument, NULL, ARG_TIMEOUT},
                {"to", required_argument, NULL, ARG_TO},     {"for", required_argument, NULL, ARG_FOR},
                {"full", no_argument, NULL, 'l'},            {"quiet", no_argument, NULL, 'q'},
                {},
        };
        Ctl c = {.socket = DEFAULT_SOCKET, .legend = true, .pager = true};
        const char *no_color;
        bool socket_given = false, full = false, quiet = false;
        int opt, r;

        while ((opt = getopt_long(argc, argv, "s:hlq", options, NULL)) >= 0)
                switch (opt) {
                case 's':
                        c.socket = optarg;
                        socket_given = true;
                        break;
                case ARG_DBUS:
                        c.dbus = true;
                        break;
                case ARG_JSON:
                        c.json_mode = json_mode_from_string(optarg);
                        if (c.json_mode < 0)
                                return error_exit(EXIT_USAGE, "--json takes pretty or short, not \"%s\"", optarg);
                        c.json = c.json_mode != JSON_OFF;
                        break;
                case 'l':
                        full = true;
                        break;
                case 'q':
                        quiet = true;
                        break;
                case ARG_NO_PAGER:
                        c.pager = false;
                        break;
                case ARG_NO_LEGEND:
                        c.legend = false;
                        break;
                case ARG_ALL:
                        c.all = true;
                        break;
                case ARG_TIMEOUT:
                        c.timeout = optarg;
                        break;
                case ARG_TO:
                        c.to = optarg;
                        break;
                case ARG_FOR:
                        c.for_duration = optarg;
                        break;
                case 'h':
                        help();
                        return EXIT_OK;
                case ARG_VERSION:
                        printf("bigtcpctl %s\n", bigtcpd_version);
                        return EXIT_OK;
                default:
                        return EXIT_USAGE;
                }
        if (socket_given && c.dbus)
                return error_exit(EXIT_USAGE, "--socket and --dbus exclude each other");
        if (optind >= argc) {
                argv = default_verb;
                argc = 1;
                optind = 0;
        }

        /* no-color.org: set and not empty */
        no_color = getenv("NO_COLOR");
        c.color = isatty(STDOUT_FILENO) && strempty(no_color) && !streq_ptr(getenv("TERM"), "dumb");
        c.columns = full ? 0 : output_columns();
        output_init(&c);
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq_ptr(argv[optind], verbs[i].name)) {
                        if (c.all && !verbs[i].takes_all)
                                return error_exit(EXIT_USAGE, "--all goes with plan, rollback and retry only");
                        if ((c.timeout || c.to) && !streq_ptr(verbs[i].name, "try"))
                                return error_exit(EXIT_USAGE, "--timeout and --to go with try only");
                        if (c.for_duration && verbs[i].run != verb_watch)
                                return error_exit(EXIT_USAGE, "--for goes with watch only");
                        if (quiet) {
                                c.legend = false;
                                /* the messages of a success go; errors stay on stderr */
                                if (verbs[i].messages && !c.json && !freopen("/dev/null", "w", stdout))
                                        return error_exit(EXIT_FAILED, "--quiet: /dev/null: %m");
                        }
                        if (verbs[i].pages)
                                pager_open(c.pager, output_utf8());
                        r = verbs[i].run(&c, argv + optind + 1, (size_t) (argc - optind - 1));
                        varlink_close(c.conn);
                        /* EPIPE: the reader quit the pager before the end */
                        if (fflush(stdout) != 0 && r == EXIT_OK && errno != EPIPE)
                                r = error_exit(EXIT_FAILED, "writing the output: %m");
                        pager_close();
                        return r;
                }
        return error_exit(EXIT_USAGE, "unknown command \"%s\" (try --help)", argv[optind]);
}
