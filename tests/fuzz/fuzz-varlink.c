/* fuzz-varlink — whole varlink requests through the daemon's server: a client connects to the
 * listening socket, writes the input, shuts its side down and reads every reply, while the
 * server runs in the daemon's event loop (accept, reads, NUL framing, JSON, method dispatch,
 * replies, Monitor streams, closing). Nothing is stubbed inside daemon/varlink.c; the Manager
 * behind it is a small fixed one (a few devices, a policy).
 *
 * The client is the threat the server is built for, a local user other than root: it connects
 * with euid 65534 (SO_PEERCRED records the euid at connect()). Reload, Rollback and Retry are
 * then refused with PermissionDenied; what they do is the integration tests' business.
 *
 * Input: byte 0 picks the size of the pieces the client writes (1 + 61 * byte 0 bytes, so
 * messages arrive split and coalesced), the rest is the byte stream. Every complete reply must
 * be a JSON object with "parameters", and the connection must be gone afterwards. */
#include <dirent.h>
#include <event2/event.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "control.h"
#include "fuzz.h"
#include "guard.h"
#include "probation.h"
#include "varlink.h"

#define CLIENT_UID 65534
#define DIR_PREFIX "bigtcpd-fuzz-varlink."
#define PUMP_SLACK 100000u /* event loop turns beyond the writes: a stuck connection is a finding */

static const char policy_yaml[] = "version: 1\n"
                                  "policies:\n"
                                  "  - name: fabric\n"
                                  "    match: { name: [\"eth*\"], kind: [device] }\n"
                                  "    ipv6: { gso-max-size: 185000, gro-max-size: 185000 }\n"
                                  "    ipv4: { gso-max-size: max, gro-max-size: max }\n"
                                  "  - name: containers\n"
                                  "    match: { kind: [veth] }\n"
                                  "    ipv6: { gro-max-size: max }\n";

static Manager manager;
static VarlinkServer *server;
static char dir[256], sock_path[sizeof(dir) + 16];
static bool as_root;

static Device *add_device(int ifindex, const char *name, const char *kind, DeviceState state) {
        Device *d;
        FUZZ_ASSERT(device_add(&manager.devices, ifindex, &d) == 0);
        d->ifname = strdup(name);
        d->kind = kind ? strdup(kind) : NULL;
        d->state = state;
        d->driver_looked_up = true; /* no ethtool ioctl: there is no netlink socket */
        d->current = (Sizes){65536, 65536, 65536, 65536};
        d->has_sizes = d->has_ipv4_sizes = true;
        d->tso_max_size = 524280;
        return d;
}

static void cleanup(void) {
        varlink_server_free(server); /* removes the socket file */
        server = NULL;
        if (dir[0])
                (void) rmdir(dir);
}

/* A crash or an interrupt ends the process with _exit(): no atexit(). The socket directories
 * of fuzzers that are gone are removed by the next one. */
static void remove_stale(const char *tmp) {
        DIR *d = opendir(tmp);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                char path[sizeof(dir) + 16];
                int pid;
                if (strncmp(de->d_name, DIR_PREFIX, strlen(DIR_PREFIX)) != 0 ||
                    sscanf(de->d_name + strlen(DIR_PREFIX), "%d", &pid) != 1 || pid <= 0 ||
                    kill(pid, 0) == 0 || errno != ESRCH)
                        continue;
                snprintf(path, sizeof(path), "%s/%s/socket", tmp, de->d_name);
                (void) unlink(path);
                snprintf(path, sizeof(path), "%s/%s", tmp, de->d_name);
                (void) rmdir(path);
        }
        closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        PolicyErrors errs = {};
        const char *tmp = getenv("TMPDIR");
        Device *d;

        fuzz_quiet();
        as_root = geteuid() == 0;
        manager.base = event_base_new();
        FUZZ_ASSERT(manager.base);
        FUZZ_ASSERT(device_table_init(&manager.devices) == 0);
        manager.policy = policy_set_new();
        FUZZ_ASSERT(manager.policy);
        FUZZ_ASSERT(policy_parse_buffer(manager.policy, "/etc/bigtcpd/bigtcpd.yaml", policy_yaml,
                                        strlen(policy_yaml), &errs) == 0);
        manager.hostname = strdup("fuzz-host");
        FUZZ_ASSERT(uname(&manager.uts) == 0);
        policy_set_scope(manager.policy, manager.hostname, manager.uts.release);
        manager.ipv4_supported = true;
        TAILQ_INIT(&manager.queue);
        TAILQ_INIT(&manager.probation);
        static char *warnings[] = {"IpExt.InTruncatedPkts", NULL};
        manager.guard_warnings = warnings;
        manager.n_guard_warnings = 1;

        add_device(1, "lo", NULL, DEVICE_UNMANAGED)->flags = 1 /* IFF_UP */ | 8 /* IFF_LOOPBACK */;
        d = add_device(2, "eth0", NULL, DEVICE_APPLIED);
        d->policy_name = strdup("fabric");
        d->desired = d->current = (Sizes){185000, 185000, 524280, 524280};
        d->has_original = true;
        d->original = (Sizes){65536, 65536, 65536, 65536};
        d->written_families = FAMILY_IPV6 | FAMILY_IPV4;
        d = add_device(3, "eth1", NULL, DEVICE_ROLLED_BACK);
        d->policy_name = strdup("fabric");
        d->has_original = true;
        d->last_rollback = calloc(1, sizeof(RollbackRecord));
        FUZZ_ASSERT(d->last_rollback);
        d->last_rollback->counter = strdup("Tcp.RetransSegs");
        d->last_rollback->per = strdup("Tcp.OutSegs");
        d->last_rollback->rise = 900;
        d->last_rollback->per_rise = 10000;
        d->last_rollback->threshold = 0.02;
        d->last_rollback->namespace_wide = true;
        d = add_device(4, "veth0", "veth", DEVICE_FAILED);
        d->policy_name = strdup("containers");
        d->last_errno = -EINVAL;
        d->last_error = strdup("gro_max_size too large");
        d = add_device(5, "veth1", "veth", DEVICE_PROBATION);
        d->policy_name = strdup("containers");
        FUZZ_ASSERT(probation_new(&manager.policy->defaults, NULL, boottime_usec(), &d->probation) == 0);
        add_device(6, "br0", "bridge", DEVICE_UNMANAGED);

        tmp = tmp && *tmp ? tmp : "/tmp";
        remove_stale(tmp);
        snprintf(dir, sizeof(dir), "%s/" DIR_PREFIX "%d", tmp, (int) getpid());
        FUZZ_ASSERT(mkdir(dir, 0755) == 0); /* 0755: the client connects as CLIENT_UID */
        FUZZ_ASSERT(chmod(dir, 0755) == 0);
        snprintf(sock_path, sizeof(sock_path), "%s/socket", dir);
        if (varlink_server_new(&manager, sock_path, &server) < 0) {
                fprintf(stderr, "fuzz-varlink: cannot listen on %s\n", sock_path);
                abort();
        }
        atexit(cleanup);
        return 0;
}

static int client_connect(void) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd, r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        FUZZ_ASSERT(fd >= 0);
        memcpy(sa.sun_path, sock_path, strlen(sock_path));
        if (as_root)
                FUZZ_ASSERT(seteuid(CLIENT_UID) == 0);
        r = connect(fd, (struct sockaddr *) &sa, sizeof(sa));
        if (r < 0)
                fprintf(stderr, "fuzz-varlink: cannot connect to %s as uid %d: %m\n", sock_path,
                        as_root ? CLIENT_UID : (int) geteuid());
        if (as_root)
                FUZZ_ASSERT(seteuid(0) == 0);
        FUZZ_ASSERT(r == 0);
        return fd;
}

/* Every NUL-terminated reply is a JSON object the protocol allows. A last piece without NUL
 * can be the error reply of a connection the server aborted without waiting: not checked. */
static void check_replies(const char *buf, size_t len) {
        size_t start = 0;

        for (size_t i = 0; i < len; i++) {
                if (buf[i] != '\0')
                        continue;
                json_object *o = json_tokener_parse(buf + start), *v;
                if (!o || !json_object_is_type(o, json_type_object)) {
                        fprintf(stderr, "fuzz-varlink: reply is not a JSON object: %.*s\n",
                                (int) (i - start), buf + start);
                        abort();
                }
                FUZZ_ASSERT(json_object_object_get_ex(o, "parameters", &v) &&
                            json_object_is_type(v, json_type_object));
                if (json_object_object_get_ex(o, "error", &v))
                        FUZZ_ASSERT(json_object_is_type(v, json_type_string));
                if (json_object_object_get_ex(o, "continues", &v))
                        FUZZ_ASSERT(json_object_is_type(v, json_type_boolean));
                fuzz_check_json(o);
                json_object_put(o);
                start = i + 1;
        }
}

static void emit_event(void) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "event", json_object_new_string("state"));
        json_object_object_add(e, "ifindex", json_object_new_int(2));
        json_object_object_add(e, "ifname", json_object_new_string("eth0"));
        json_object_object_add(e, "state", json_object_new_string("applied"));
        json_object_object_add(e, "previous", json_object_new_string("probation"));
        control_emit(&manager, e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *replies = NULL;
        size_t n_replies = 0, cap = 0, off = 1, chunk;
        unsigned events = 0;
        bool shut = false, closed = false;
        int fd;

        if (size < 1)
                return 0;
        chunk = 1 + 61 * (size_t) data[0];
        fd = client_connect();

        for (unsigned turn = 0; !closed; turn++) {
                if (turn >= size / chunk + PUMP_SLACK) {
                        fprintf(stderr, "fuzz-varlink: connection still open after %u loop turns\n", turn);
                        abort();
                }
                if (off < size) {
                        size_t n = size - off < chunk ? size - off : chunk;
                        ssize_t k = send(fd, data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
                        if (k > 0)
                                off += (size_t) k;
                        else if (k < 0 && errno != EAGAIN)
                                off = size; /* the server hung up on us (EPIPE, ECONNRESET) */
                } else if (!shut) {
                        (void) shutdown(fd, SHUT_WR);
                        shut = true;
                }
                FUZZ_ASSERT(event_base_loop(manager.base, EVLOOP_NONBLOCK) >= 0);
                /* a Monitor stream gets a few events while it lasts */
                if (manager.n_subscribers > 0 && events < 3 && turn % 4 == 0) {
                        emit_event();
                        events++;
                }
                for (;;) {
                        if (cap - n_replies < 65536) {
                                cap = cap ? cap * 2 : 131072;
                                replies = realloc(replies, cap);
                                FUZZ_ASSERT(replies);
                        }
                        ssize_t k = recv(fd, replies + n_replies, cap - n_replies, MSG_DONTWAIT);
                        if (k > 0) {
                                n_replies += (size_t) k;
                                continue;
                        }
                        if (k == 0 || errno != EAGAIN)
                                closed = true;
                        break;
                }
        }
        close(fd);
        /* the server notices the close on its next turn, if it has not closed first */
        for (unsigned turn = 0; varlink_server_connections(server) > 0; turn++) {
                FUZZ_ASSERT(turn < 1000);
                FUZZ_ASSERT(event_base_loop(manager.base, EVLOOP_NONBLOCK) >= 0);
        }
        FUZZ_ASSERT(manager.n_subscribers == 0);
        check_replies(replies, n_replies);
        free(replies);
        return 0;
}
