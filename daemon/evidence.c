/* evidence.c — the watched devices: one filtered packet socket each (made ahead by the maker
 * child, closed by the closer child), the window timer, the statistics of each window, and the
 * verdicts. */
#include <arpa/inet.h>
#include <assert.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"
#include "packet-maker.h"
#include "counters.h"
#include "evidence.h"
#include "log-fields.h"
#include "pool.h"

/* A child that died is made again when next needed, at most EVIDENCE_RESTARTS_PER_MINUTE times in
 * any minute and, after the first, no sooner than a backoff (doubling up to
 * EVIDENCE_RESTART_BACKOFF_MAX_USEC; back to none once one lived a minute) after the last. */
#define EVIDENCE_RESTARTS_PER_MINUTE 5u
#define EVIDENCE_RESTART_BACKOFF_MIN_USEC (1 * USEC_PER_SEC)
#define EVIDENCE_RESTART_BACKOFF_MAX_USEC (32 * USEC_PER_SEC)

typedef struct Respawn {
        const char *what;                            /* the child's name, for the log */
        const char *without;                         /* … and what is done while it is not there */
        uint64_t at[EVIDENCE_RESTARTS_PER_MINUTE]; /* the last restarts (CLOCK_MONOTONIC; 0: none), a ring */
        unsigned next;                               /* the oldest of them, overwritten next */
        uint64_t backoff_usec;
        bool logged_refused;
} Respawn;

struct EvidenceSockets {
        Closer *closer;     /* the sockets' last close waits for the kernel: not in the loop */
        PacketMaker *maker; /* … and so does their ring's set-up */
        Respawn closer_respawn, maker_respawn;
};

struct EvidenceSet {
        struct event_base *base;
        Writer *writer;
        EventList *events;
        const Clock *clock;
        struct event *timer;
        uint64_t timer_usec; /* when it fires (CLOCK_MONOTONIC); UINT64_MAX: not armed */
        TAILQ_HEAD(, Evidence) watched;
        TAILQ_HEAD(, Evidence) waiting; /* for a socket, in the order they asked */
        size_t n;                       /* both */
        EvidenceSockets *sockets;  /* NULL: counting is off */
        int netns_socket;          /* a socket of the namespace they are made in; -1: the daemon's */
        int spare[EVIDENCE_SPARE]; /* made, not bound yet */
        size_t n_spare;
        size_t asked; /* of the maker, not come yet */
        size_t n_waiting;
        bool refill_off;   /* the last socket could not be made: no spare until a watch asks */
        bool logged_maker; /* its failure was logged */
        bool logged_no_child; /* a watch of another namespace failed for want of the maker's child */
        Observer *observer;         /* NULL: packet sockets */
        EvidenceTestRing test_ring; /* tests: where each watch's ring comes from, in place of sockets */
        void *test_userdata;
};

static const char *const family_table[_EVIDENCE_FAMILY_MAX] = {
        [EVIDENCE_IPV6] = "ipv6",
        [EVIDENCE_IPV4] = "ipv4",
};

const char *evidence_family_to_string(EvidenceFamily f) {
        return f >= 0 && f < _EVIDENCE_FAMILY_MAX ? family_table[f] : NULL;
}

unsigned evidence_raised(const Sizes *s, bool ipv4) {
        unsigned m = 0;

        if (s->gso_max_size > EVIDENCE_BIG || s->gro_max_size > EVIDENCE_BIG)
                m |= 1u << EVIDENCE_IPV6;
        if (ipv4 && (s->gso_ipv4_max_size > EVIDENCE_BIG || s->gro_ipv4_max_size > EVIDENCE_BIG))
                m |= 1u << EVIDENCE_IPV4;
        return m;
}

void evidence_count(EvidenceCounts *c, bool outgoing, uint16_t protocol, uint32_t len) {
        EvidenceFamily f = protocol == ETH_P_IP ? EVIDENCE_IPV4 : EVIDENCE_IPV6;

        if (len <= EVIDENCE_BIG) {
                if (len >= EVIDENCE_FULL)
                        c->full[f]++;
                return; /* the filter passes no other; a length the kernel cut is not ours to count */
        }
        if (outgoing) {
                c->tx++;
                if (len > c->tx_largest)
                        c->tx_largest = len;
        } else {
                c->rx++;
                if (len > c->rx_largest)
                        c->rx_largest = len;
        }
        c->by_family[f]++;
}

void evidence_count_above(EvidenceAbove *a, bool outgoing, uint16_t protocol, uint32_t len) {
        unsigned i = (protocol == ETH_P_IP ? 2u : 0u) + (outgoing ? 0u : 1u);

        if (a->len[i] != 0 && len > a->len[i])
                a->count[i]++;
}

EvidenceVerdict evidence_judge(const EvidenceCounts *c, unsigned raised, unsigned *ret_quiet) {
        unsigned quiet = 0, shown = 0;

        /* a missed packet may have been a big one of any family: with any missed, no family is
         * called not in effect */
        for (EvidenceFamily f = 0; f < _EVIDENCE_FAMILY_MAX; f++)
                if (raised & (1u << f)) {
                        if (c->by_family[f] > 0)
                                shown |= 1u << f;
                        else if (c->full[f] >= EVIDENCE_FULL_MIN && c->missed == 0)
                                quiet |= 1u << f;
                }
        *ret_quiet = quiet;
        if (quiet != 0)
                return EVIDENCE_NOT_EFFECTIVE;
        if (shown != 0)
                return EVIDENCE_EFFECTIVE;
        if (raised != 0)
                return EVIDENCE_UNKNOWN; /* no traffic of a raised family that could show it */
        /* nothing raised: any big packet (a peer's, received) shows BIG TCP on this device; full-size
         * ones and none big show it is not in effect there, by its sizes */
        if (c->by_family[EVIDENCE_IPV6] + c->by_family[EVIDENCE_IPV4] + c->missed > 0)
                return EVIDENCE_EFFECTIVE;
        if (c->full[EVIDENCE_IPV6] + c->full[EVIDENCE_IPV4] >= EVIDENCE_FULL_MIN)
                return EVIDENCE_NOT_EFFECTIVE;
        return EVIDENCE_UNKNOWN;
}

/* A = skb->len; longer than EVIDENCE_BIG: keep 1 byte of it; at least EVIDENCE_FULL: keep it when
 * a random number is 0 modulo EVIDENCE_FULL_SAMPLE (a power of two); else drop it in the kernel. */
_Static_assert((EVIDENCE_FULL_SAMPLE & (EVIDENCE_FULL_SAMPLE - 1)) == 0, "a power of two");
static struct sock_filter filter_code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, EVIDENCE_BIG, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, EVIDENCE_FULL, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t) (SKF_AD_OFF + SKF_AD_RANDOM)),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, EVIDENCE_FULL_SAMPLE - 1),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 1),
        BPF_STMT(BPF_RET | BPF_K, 0),
};
static const struct sock_fprog filter_prog = {
        .len = ELEMENTSOF(filter_code),
        .filter = filter_code,
};

const struct sock_fprog *evidence_filter(void) {
        return &filter_prog;
}

static uint64_t now(const EvidenceSet *s) {
        return clock_now(s->clock, CLOCK_MONOTONIC);
}

/* The records in a pool (pool.h): with the observer every device of a burst has one while its
 * window runs, and most go when it ends (prune()); from the heap they would leave holes among the
 * records that stay. */
static Pool record_pool = POOL_INIT(Evidence);
/* … and what a record keeps apart: a window's counts (kept once it counted something), its base in
 * the observer's counts (while it runs, when not from zero), its socket (without the observer), and
 * `auto`'s counts above a length (for as long as a search counts them). */
static Pool counts_pool = POOL_INIT(EvidenceCounts);
static Pool base_pool = POOL_INIT(EvidenceBase);
static Pool socket_pool = POOL_INIT(EvidenceRing);
static Pool above_pool = POOL_INIT(EvidenceAbove);

static const EvidenceCounts no_counts;
static const EvidenceBase no_base;

void evidence_release(Device *d) {
        Evidence *ev = d->evidence;

        if (!ev)
                return;
        assert(!ev->watched);
        pool_free(&above_pool, ev->above);
        pool_free(&counts_pool, ev->counts);
        pool_free(&record_pool, ev);
        d->evidence = NULL;
}

/* ev's counts are nothing: their room goes. */
static void counts_drop(Evidence *ev) {
        pool_free(&counts_pool, ev->counts);
        ev->counts = NULL;
}

/* A window's counts from zero (the lengths `auto` counts above stay). */
static void counts_clear(Evidence *ev) {
        counts_drop(ev);
        if (ev->above) {
                memset(ev->above->count, 0, sizeof(ev->above->count));
                memset(ev->above->dropped, 0, sizeof(ev->above->dropped));
        }
}

/* Room for ev's counts (a socket's window counts into it from its start); NULL without memory. */
static EvidenceCounts *counts_room(Evidence *ev) {
        if (!ev->counts)
                ev->counts = pool_alloc(&counts_pool);
        return ev->counts;
}

/* ev's counts are `c`: none kept while they are nothing. -ENOMEM (then they are lost, said). */
static int counts_keep(Evidence *ev, const EvidenceCounts *c) {
        if (memcmp(c, &no_counts, sizeof(*c)) == 0) {
                counts_drop(ev);
                return 0;
        }
        if (!counts_room(ev)) {
                log_dev_warning(ev->device, "evidence: no memory to keep its window's counts");
                return -ENOMEM;
        }
        *ev->counts = *c;
        return 0;
}

/* Does ev count now: over the observer's counts, or on its socket? */
static bool counting(const EvidenceSet *s, const Evidence *ev) {
        return ev->watched && (s->observer || (ev->of.socket && ev->of.socket->fd >= 0));
}

/* ev's socket, made as its watch begins (no socket yet); NULL without memory. */
static EvidenceRing *socket_get(Evidence *ev) {
        if (!ev->of.socket) {
                ev->of.socket = pool_alloc(&socket_pool);
                if (ev->of.socket)
                        ev->of.socket->fd = -1;
        }
        return ev->of.socket;
}

/* ev's socket goes once nothing of it runs: it neither waits for a socket, nor has one. */
static void socket_drop(Evidence *ev) {
        if (ev->of.socket && !ev->waiting && ev->of.socket->fd < 0) {
                pool_free(&socket_pool, ev->of.socket);
                ev->of.socket = NULL;
        }
}

static void emit(EvidenceSet *s, Evidence *ev) {
        event_emit(s->events, &(Event){.type = EVENT_EVIDENCE, .device = ev->device,
                                       .ok = ev->verdict != EVIDENCE_NOT_EFFECTIVE});
}

/* The socket's drop counter (reset by reading): big packets its ring had no room for. */
static void read_drops(Evidence *ev) {
        struct tpacket_stats_v3 st = {};
        socklen_t len = sizeof(st);

        if (getsockopt(ev->of.socket->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) >= 0 && ev->counts)
                ev->counts->missed += st.tp_drops;
}

/* Count the packets of the blocks the kernel handed over, and hand them back. Each frame's
 * header is the kernel's; its offsets are checked against the block all the same. */
static void read_ring(Evidence *ev) {
        for (unsigned k = 0; k < EVIDENCE_BLOCKS; k++) {
                EvidenceRing *w = ev->of.socket;
                uint8_t *block = w->ring + (size_t) w->block * EVIDENCE_BLOCK_SIZE;
                struct tpacket_block_desc *bd = (struct tpacket_block_desc *) block;
                size_t off;

                if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
                        return;
                off = bd->hdr.bh1.offset_to_first_pkt;
                for (uint32_t i = 0; i < bd->hdr.bh1.num_pkts; i++) {
                        const struct tpacket3_hdr *h;
                        const struct sockaddr_ll *sll;
                        size_t sll_off = TPACKET_ALIGN(sizeof(struct tpacket3_hdr));

                        if (off < sizeof(*bd) || off + sll_off + sizeof(*sll) > EVIDENCE_BLOCK_SIZE)
                                break;
                        h = (const struct tpacket3_hdr *) (block + off);
                        sll = (const struct sockaddr_ll *) (block + off + sll_off);
                        evidence_count(ev->counts, sll->sll_pkttype == PACKET_OUTGOING, ntohs(sll->sll_protocol),
                                       h->tp_len);
                        if (ev->above)
                                evidence_count_above(ev->above, sll->sll_pkttype == PACKET_OUTGOING,
                                                     ntohs(sll->sll_protocol), h->tp_len);
                        if (h->tp_next_offset == 0)
                                break;
                        off += h->tp_next_offset;
                }
                __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
                w->block = (w->block + 1) % EVIDENCE_BLOCKS;
        }
}

static void on_io(evutil_socket_t fd, short what, void *userdata) {
        int error = 0;
        socklen_t len = sizeof(error);

        /* A socket bound to a device that is down (or goes down) holds ENETDOWN, which makes it
         * readable until the error is read; it counts again once the device is up. */
        (void) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        read_ring(userdata);
}

static void unmap(Evidence *ev) {
        if (ev->of.socket->ring)
                (void) munmap(ev->of.socket->ring, (size_t) EVIDENCE_BLOCKS * EVIDENCE_BLOCK_SIZE);
        ev->of.socket->ring = NULL;
}

/* ---- the children, made again when they die ---- */

static void on_child_gone(pid_t pid, int status, void *userdata) {
        Respawn *r = userdata;

        if (WIFSIGNALED(status))
                log_warning("evidence: %s (pid %d) was killed by signal %s; it is made again when next needed",
                            r->what, (int) pid, sigabbrev_np(WTERMSIG(status)) ?: "?");
        else
                log_warning("evidence: %s (pid %d) exited with status %d; it is made again when next needed", r->what,
                            (int) pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* May another child be made now? The budget: EVIDENCE_RESTARTS_PER_MINUTE, and the backoff. */
static bool respawn_allowed(Respawn *r, uint64_t t) {
        uint64_t oldest = r->at[r->next];
        uint64_t last = r->at[(r->next + EVIDENCE_RESTARTS_PER_MINUTE - 1) % EVIDENCE_RESTARTS_PER_MINUTE];

        if (oldest != 0 && t - oldest < 60 * USEC_PER_SEC)
                return false;
        return last == 0 || t - last >= r->backoff_usec;
}

static void respawn_count(Respawn *r, uint64_t t) {
        uint64_t last = r->at[(r->next + EVIDENCE_RESTARTS_PER_MINUTE - 1) % EVIDENCE_RESTARTS_PER_MINUTE];

        if (last == 0 || t - last >= 60 * USEC_PER_SEC)
                r->backoff_usec = 0; /* the last one lived a minute (or this is the first) */
        else if (r->backoff_usec == 0)
                r->backoff_usec = EVIDENCE_RESTART_BACKOFF_MIN_USEC;
        else if (r->backoff_usec * 2 <= EVIDENCE_RESTART_BACKOFF_MAX_USEC)
                r->backoff_usec *= 2;
        r->at[r->next] = t;
        r->next = (r->next + 1) % EVIDENCE_RESTARTS_PER_MINUTE;
}

/* A child that is gone, made again if the budget allows: true when it runs (again). */
static bool revive(Respawn *r, bool running, int (*restart)(void *), void *child) {
        uint64_t t;
        int k;

        if (running)
                return true;
        if (!child)
                return false; /* never made (logged at start) */
        t = now_usec();
        if (!respawn_allowed(r, t)) {
                if (!r->logged_refused)
                        log_warning("evidence: %s was made again %u times within a minute, or just now: not again "
                                    "for a while; %s",
                                    r->what, EVIDENCE_RESTARTS_PER_MINUTE, r->without);
                r->logged_refused = true;
                return false;
        }
        k = restart(child);
        if (k == -EBUSY)
                return false; /* its answers owed are being failed: not from there */
        respawn_count(r, t);
        if (k < 0) {
                log_warning_errno(k, "evidence: %s could not be made again: %m", r->what);
                return false;
        }
        r->logged_refused = false;
        log_notice("evidence: %s made again", r->what);
        return true;
}

static int restart_closer(void *c) {
        return closer_restart(c);
}

static int restart_maker(void *m) {
        return packet_maker_restart(m);
}

static Closer *sockets_closer(EvidenceSockets *k) {
        if (!k)
                return NULL;
        (void) revive(&k->closer_respawn, closer_running(k->closer), restart_closer, k->closer);
        return k->closer; /* closes here while it has no child */
}

/* The maker, when its child runs (made again if need be); else NULL. */
static PacketMaker *sockets_maker(EvidenceSockets *k) {
        if (!k)
                return NULL;
        return revive(&k->maker_respawn, packet_maker_running(k->maker), restart_maker, k->maker) ? k->maker : NULL;
}

static void close_socket(EvidenceSet *s, int fd) {
        closer_close(sockets_closer(s->sockets), fd);
}

/* Close the socket, after counting what its ring holds. The block being filled is not handed
 * over before its time: its packets count as missed only if its timer never ran (at most
 * EVIDENCE_BLOCK_MSEC of a window). */
static void observe(EvidenceSet *s, const Evidence *ev, EvidenceCounts *c, EvidenceAbove *above);
/* ev's window is over: its counts are kept as they are now. */
static void detach(EvidenceSet *s, Evidence *ev) {
        if (!counting(s, ev))
                return;
        if (s->observer) {
                EvidenceCounts c;
                observe(s, ev, &c, ev->above);
                observer_near_clear(s->observer, evidence_netns_of(s, ev->device), ev->device->ifindex);
                pool_free(&base_pool, ev->of.base);
                ev->of.base = NULL;
                ev->watched = false;
                TAILQ_REMOVE(&s->watched, ev, link);
                s->n--;
                (void) counts_keep(ev, &c);
                return;
        }
        EvidenceRing *w = ev->of.socket;
        read_ring(ev);
        read_drops(ev);
        if (w->io)
                event_free(w->io);
        w->io = NULL;
        unmap(ev);
        close_socket(s, w->fd);
        w->fd = -1;
        ev->watched = false;
        TAILQ_REMOVE(&s->watched, ev, link);
        s->n--;
        socket_drop(ev);
        if (ev->counts)
                (void) counts_keep(ev, ev->counts); /* nothing counted: nothing kept */
}

static const PacketRecipe recipe = {
        .filter = &filter_prog,
        .ring = {
                .tp_block_size = EVIDENCE_BLOCK_SIZE,
                .tp_block_nr = EVIDENCE_BLOCKS,
                .tp_frame_size = TPACKET_ALIGNMENT << 7,
                .tp_frame_nr = EVIDENCE_BLOCK_SIZE / (TPACKET_ALIGNMENT << 7) * EVIDENCE_BLOCKS,
                .tp_retire_blk_tov = EVIDENCE_BLOCK_MSEC,
        },
};

/* The socket `fd` (made, not bound: it receives nothing yet), mapped and bound to ev's device,
 * which is then watched from now on: neither call waits for the kernel. `fd` is taken. */
static int attach(EvidenceSet *s, Evidence *ev, int fd) {
        struct sockaddr_ll sa = {
                .sll_family = AF_PACKET,
                .sll_protocol = htons(ETH_P_ALL),
                .sll_ifindex = ev->device->ifindex,
        };
        void *ring;
        int r;

        ring = mmap(NULL, (size_t) EVIDENCE_BLOCKS * EVIDENCE_BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (ring == MAP_FAILED) {
                r = -errno;
                close_socket(s, fd);
                return r;
        }
        ev->of.socket->ring = ring;
        ev->of.socket->block = 0;
        if (s->test_ring) {
                ev->of.socket->fd = fd; /* the test fills it: nothing to bind, read at a drain and at the end */
                return 0;
        }
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                r = -errno;
                goto fail;
        }
        ev->of.socket->io = event_new(s->base, fd, EV_READ | EV_PERSIST, on_io, ev);
        if (!ev->of.socket->io || event_add(ev->of.socket->io, NULL) < 0) {
                r = -ENOMEM;
                goto fail;
        }
        ev->of.socket->fd = fd;
        return 0;
fail:
        if (ev->of.socket->io)
                event_free(ev->of.socket->io);
        ev->of.socket->io = NULL;
        unmap(ev);
        close_socket(s, fd);
        return r;
}

static void on_made(int fd, void *userdata);
static void arm(EvidenceSet *s);
static void arm_for(EvidenceSet *s, uint64_t due);
static void refill(EvidenceSet *s);

/* Without the maker's child: a socket made here, in the loop (it waits for the kernel), for a
 * device of bigtcpd's own namespace alone. One made here for another namespace's device would be
 * of this namespace, bound to whatever device has that ifindex here, and count its packets: such
 * a watch fails (-ECHILD), said once (again after a socket came). */
static int make_here(EvidenceSet *s, Device *d) {
        if (s->netns_socket < 0)
                return packet_socket_make(&recipe);
        log_dev_full_errno(d, s->logged_no_child ? LOG_DEBUG : LOG_WARNING, 0,
                           "evidence: not counting its packets: the process that makes packet sockets in its "
                           "namespace is not running, and one made in bigtcpd's own would count another device");
        s->logged_no_child = true;
        return -ECHILD;
}

uint32_t evidence_netns_of(const EvidenceSet *s, const Device *d) {
        return d->netns ? (uint32_t) d->netns->ino : s->observer ? observer_own_netns(s->observer) : 0;
}

static uint64_t rise(uint64_t now, uint64_t base) {
        return now >= base ? now - base : now; /* went down: its entry was made again */
}

/* The observer's counts as a window's: `base` (NULL: from zero) to `cur`, and its thresholds' (into
 * `above`, when it counts them). The packets at the old ceiling are all counted here, where a
 * socket's filter passes one in EVIDENCE_FULL_SAMPLE: divided, the verdict weighs them as before. */
static void counts_of(EvidenceCounts *c, EvidenceAbove *above, const struct observer_dev *cur,
                      const EvidenceBase *base, const struct observer_near *near) {
        if (!base)
                base = &no_base;
        for (EvidenceFamily f = 0; f < _EVIDENCE_FAMILY_MAX; f++) {
                unsigned of = f == EVIDENCE_IPV4 ? OBSERVER_IPV4 : OBSERVER_IPV6;
                uint64_t tx = rise(cur->big[OBSERVER_TX][of], base->big[OBSERVER_TX][of]);
                uint64_t rx = rise(cur->big[OBSERVER_RX][of], base->big[OBSERVER_RX][of]);
                c->by_family[f] = tx + rx;
                c->full[f] = (rise(cur->full[OBSERVER_TX][of], base->full[OBSERVER_TX][of]) +
                              rise(cur->full[OBSERVER_RX][of], base->full[OBSERVER_RX][of])) /
                             EVIDENCE_FULL_SAMPLE;
        }
        c->tx = c->rx = 0;
        for (unsigned of = 0; of < 2; of++) {
                c->tx += rise(cur->big[OBSERVER_TX][of], base->big[OBSERVER_TX][of]);
                c->rx += rise(cur->big[OBSERVER_RX][of], base->big[OBSERVER_RX][of]);
        }
        c->missed = 0;
        if (near) {
                /* sizes.h's order: GSO IPv6 (sent), GRO IPv6 (received), GSO IPv4, GRO IPv4 */
                c->tx_largest = near->largest[0] > near->largest[2] ? near->largest[0] : near->largest[2];
                c->rx_largest = near->largest[1] > near->largest[3] ? near->largest[1] : near->largest[3];
                for (unsigned i = 0; above && i < SIZES_COUNT; i++)
                        above->count[i] = near->count[i];
                for (unsigned f = 0; above && f < _EVIDENCE_FAMILY_MAX; f++)
                        above->dropped[f] = near->dropped[f];
        } else {
                c->tx_largest = cur->largest[OBSERVER_TX][0] > cur->largest[OBSERVER_TX][1] ? cur->largest[OBSERVER_TX][0] : cur->largest[OBSERVER_TX][1];
                c->rx_largest = cur->largest[OBSERVER_RX][0] > cur->largest[OBSERVER_RX][1] ? cur->largest[OBSERVER_RX][0] : cur->largest[OBSERVER_RX][1];
        }
}

/* ev's window as the observer counted it up to now (its last read, if recent), into `c`, and its
 * counts above a length into `above` (NULL: not wanted). */
static void observe(EvidenceSet *s, const Evidence *ev, EvidenceCounts *c, EvidenceAbove *above) {
        uint32_t ns = evidence_netns_of(s, ev->device);
        struct observer_dev cur;
        struct observer_near near;
        int r = observer_read(s->observer, now(s), EVIDENCE_FRESH_USEC);

        if (r < 0)
                log_debug_errno(r, "evidence: reading the observer's maps failed: %m");
        (void) observer_get(s->observer, ns, ev->device->ifindex, &cur);
        r = observer_near_get(s->observer, ns, ev->device->ifindex, &near);
        counts_of(c, above, &cur, ev->of.base, r >= 0 ? &near : NULL);
}

int evidence_count_above_from_now(EvidenceSet *s, Device *d, const uint32_t above_len[static SIZES_COUNT]) {
        static const uint32_t none[SIZES_COUNT];
        Evidence *ev = d->evidence;

        if (!ev)
                return -ENOENT;
        if (memcmp(above_len, none, sizeof(none)) == 0) {
                pool_free(&above_pool, ev->above);
                ev->above = NULL;
        } else {
                if (!ev->above)
                        ev->above = pool_alloc(&above_pool);
                if (!ev->above)
                        return -ENOMEM;
                *ev->above = (EvidenceAbove){};
                memcpy(ev->above->len, above_len, sizeof(ev->above->len));
        }
        if (s->observer && ev->watched)
                return observer_near_set(s->observer, evidence_netns_of(s, d), d->ifindex, above_len);
        return 0;
}

void evidence_counts(EvidenceSet *s, const Device *d, EvidenceCounts *ret) {
        const Evidence *ev = d->evidence;

        if (ev && s && s->observer && ev->watched)
                observe(s, ev, ret, NULL);
        else
                *ret = ev && ev->counts ? *ev->counts : no_counts;
}

int evidence_view(EvidenceSet *s, const Device *d, uint64_t now_usec, EvidenceView *ret) {
        const Evidence *ev = d->evidence;

        if (!ev) {
                EvidenceCounts totals;
                if (!s || evidence_totals(s, d, &totals) < 0)
                        return -ENOENT;
                *ret = (EvidenceView){.counts = totals, .since_usec = observer_loaded_usec(s->observer),
                                      .verdict = EVIDENCE_UNKNOWN};
                return 0;
        }
        *ret = (EvidenceView){.since_usec = ev->since_usec, .watching = ev->watched, .verdict = ev->verdict,
                              .raised = ev->raised, .quiet = ev->quiet};
        evidence_counts(s, d, &ret->counts);
        if (ev->watched)
                ret->left_usec = ev->waiting ? ev->of.socket->duration_usec /* from its socket */
                                 : ev->until_usec > now_usec ? ev->until_usec - now_usec : 0;
        return 0;
}

int evidence_totals(EvidenceSet *s, const Device *d, EvidenceCounts *ret) {
        struct observer_dev cur;
        EvidenceCounts c = {};

        if (!s->observer)
                return -EOPNOTSUPP;
        (void) observer_read(s->observer, now(s), EVIDENCE_FRESH_USEC);
        (void) observer_get(s->observer, evidence_netns_of(s, d), d->ifindex, &cur);
        counts_of(&c, NULL, &cur, NULL, NULL);
        *ret = c;
        return 0;
}

void evidence_set_observer(EvidenceSet *s, Observer *o) {
        assert(s->n == 0); /* a watch's room is the observer's or a socket's: nothing runs at a change */
        s->observer = o;
}

void evidence_set_use_sockets(EvidenceSet *s, EvidenceSockets *sockets, int netns_socket) {
        s->sockets = sockets;
        s->netns_socket = netns_socket;
        refill(s); /* the namespace's spares, as evidence_set_new() makes them */
}

Observer *evidence_set_get_observer(const EvidenceSet *s) {
        return s->observer;
}

/* The window of ev starts now, over the observer's counts. */
static int start_observed(EvidenceSet *s, Evidence *ev, uint64_t duration_usec) {
        static const uint32_t no_above[SIZES_COUNT];
        uint32_t ns = evidence_netns_of(s, ev->device);
        struct observer_dev cur;
        EvidenceBase base;
        int r;

        r = observer_near_set(s->observer, ns, ev->device->ifindex, ev->above ? ev->above->len : no_above);
        if (r < 0)
                return r;
        (void) observer_read(s->observer, now(s), EVIDENCE_FRESH_USEC);
        (void) observer_get(s->observer, ns, ev->device->ifindex, &cur);
        _Static_assert(sizeof(base.big) == sizeof(cur.big) && sizeof(base.full) == sizeof(cur.full),
                       "a window's base is the observer's counts");
        memcpy(base.big, cur.big, sizeof(cur.big));
        memcpy(base.full, cur.full, sizeof(cur.full));
        /* a device that carried nothing big or full-size since the observer loaded (a new one,
         * every device right after a start) counts from zero: no base to keep */
        if (memcmp(&base, &no_base, sizeof(base)) != 0) {
                ev->of.base = pool_alloc(&base_pool);
                if (!ev->of.base) {
                        observer_near_clear(s->observer, ns, ev->device->ifindex);
                        return -ENOMEM;
                }
                *ev->of.base = base;
        }
        ev->watched = true;
        TAILQ_INSERT_TAIL(&s->watched, ev, link);
        s->n++;
        counts_clear(ev);
        ev->since_usec = clock_now(s->clock, CLOCK_REALTIME);
        ev->until_usec = now(s) + duration_usec;
        log_dev_debug(ev->device, "evidence: counting its packets above 64 KiB (a window over the observer's counts)");
        arm_for(s, ev->until_usec);
        return 0;
}

/* Ask the maker for what the set is short of: in the daemon's own namespace EVIDENCE_SPARE ready
 * (unless the last one failed), and one for each watch that waits. A pod keeps no spare: a
 * thousand of them would hold 32 MiB of rings for nothing; its watches wait for the child. */
static void refill(EvidenceSet *s) {
        size_t want = (s->refill_off || s->netns_socket >= 0 ? 0 : EVIDENCE_SPARE) + s->n_waiting;
        PacketMaker *maker = s->n_spare + s->asked < want ? sockets_maker(s->sockets) : NULL;

        while (maker && s->n_spare + s->asked < want) {
                /* the namespace, named by a socket of it for this request alone (the maker is sent
                 * its own copy) */
                _cleanup_(closep) int ns = s->netns_socket >= 0 ? ioctl(s->netns_socket, SIOCGSKNS) : -1;
                int r = s->netns_socket >= 0 && ns < 0 ? -errno : packet_maker_ask(maker, ns, on_made, s);
                if (r < 0) {
                        if (!s->logged_maker)
                                log_warning_errno(r, "evidence: the process that makes packet sockets takes no "
                                                     "request (%m): watches in bigtcpd's own namespace set theirs "
                                                     "up in the loop, those of other namespaces are not counted");
                        s->logged_maker = true;
                        return;
                }
                s->asked++;
        }
}

static void unwait(EvidenceSet *s, Evidence *ev) {
        TAILQ_REMOVE(&s->waiting, ev, link);
        ev->waiting = false;
        ev->watched = false;
        s->n_waiting--;
        s->n--;
        socket_drop(ev);
}

/* The window of ev starts now, on socket `fd` (taken), its counts from zero. */
static int start(EvidenceSet *s, Evidence *ev, int fd, uint64_t duration_usec) {
        EvidenceCounts *counts = pool_alloc(&counts_pool); /* the window counts into it */
        int r;

        if (!counts || !socket_get(ev)) {
                pool_free(&counts_pool, counts);
                close_socket(s, fd);
                return -ENOMEM;
        }
        r = attach(s, ev, fd);
        if (r < 0) {
                pool_free(&counts_pool, counts);
                socket_drop(ev);
                return r;
        }
        counts_clear(ev);
        ev->counts = counts;
        ev->watched = true;
        TAILQ_INSERT_TAIL(&s->watched, ev, link);
        s->n++;
        ev->since_usec = clock_now(s->clock, CLOCK_REALTIME);
        ev->until_usec = now(s) + duration_usec;
        log_dev_debug(ev->device, "evidence: counting its packets above 64 KiB");
        arm_for(s, ev->until_usec);
        return 0;
}

static void on_made(int fd, void *userdata) {
        EvidenceSet *s = userdata;
        Evidence *ev = TAILQ_FIRST(&s->waiting);
        int r;

        s->asked--;
        if (fd < 0) {
                /* asking again would fail again: the watch that waits longest is given up, and no
                 * spare is made until the next watch */
                log_full_errno(s->logged_maker ? LOG_DEBUG : LOG_WARNING, fd,
                               "evidence: a packet socket could not be made: %m");
                s->logged_maker = true;
                s->refill_off = true;
                if (ev && s->asked < s->n_waiting) {
                        unwait(s, ev);
                        emit(s, ev);
                }
                return;
        }
        s->logged_maker = false;
        s->logged_no_child = false;
        if (!ev) {
                /* a spare, or asked for a watch that ended while it was made */
                if (s->netns_socket < 0 && s->n_spare < EVIDENCE_SPARE)
                        s->spare[s->n_spare++] = fd;
                else
                        close_socket(s, fd);
                return;
        }
        uint64_t asked = ev->since_usec, duration = ev->of.socket->duration_usec;
        unwait(s, ev);
        r = start(s, ev, fd, duration);
        if (r < 0) {
                log_dev_warning_errno(ev->device, r, "evidence: failed to watch: %m");
                emit(s, ev);
        } else
                ev->since_usec = asked; /* the count says it began when asked, as it did while waiting */
        refill(s);
}

static void arm_at(EvidenceSet *s, uint64_t first) {
        uint64_t t = now(s);

        evtimer_del(s->timer);
        s->timer_usec = first;
        if (first == UINT64_MAX)
                return;
        first = first > t ? first - t : 0;
        struct timeval tv = {.tv_sec = (time_t) (first / USEC_PER_SEC), .tv_usec = (suseconds_t) (first % USEC_PER_SEC)};
        evtimer_add(s->timer, &tv);
}

/* When ev's window needs the timer next: its end, or once ending, its last block's (a window over
 * the observer's counts has none to wait for: right away). */
static uint64_t due_of(const EvidenceSet *s, const Evidence *ev) {
        if (!ev->ending)
                return ev->until_usec;
        return s->observer ? ev->until_usec : ev->of.socket->settle_usec;
}

static void arm(EvidenceSet *s) {
        uint64_t first = UINT64_MAX;
        Evidence *ev;

        TAILQ_FOREACH(ev, &s->watched, link) {
                uint64_t due = due_of(s, ev);
                if (due < first)
                        first = due;
        }
        arm_at(s, first);
}

/* A watch due at `due` began or was put off: the timer moves only when that is sooner. Not a
 * walk over every watch, as arm() is: 10000 windows begun in a burst were 5e7 steps. */
static void arm_for(EvidenceSet *s, uint64_t due) {
        if (due < s->timer_usec)
                arm_at(s, due);
}

static const char *family_names(unsigned mask) {
        static const char *const names[] = {"", "IPv6", "IPv4", "IPv6 and IPv4"};
        return names[mask & 3u];
}

/* With the observer, a record whose last window counted nothing and judged nothing says no more
 * than the observer's totals (control_big_packets_source()): it goes, as every device's of a burst
 * would otherwise stay (128 bytes each). What a window counted, a verdict, a search's counts above
 * a length (auto) and a watch that runs keep it. Called after the event of its window: the
 * event's listeners ran and did not watch it again. */
static void prune(EvidenceSet *s, Device *d, Evidence *ev) {
        if (!s->observer || d->evidence != ev || ev->watched || ev->verdict != EVIDENCE_UNKNOWN || ev->logged ||
            ev->counts || ev->above)
                return;
        evidence_release(d);
}

static void judge(EvidenceSet *s, Evidence *ev) {
        Device *d = ev->device;
        bool ipv4 = d->has_ipv4_sizes;
        unsigned quiet;
        EvidenceVerdict v;

        ev->ending = false;
        detach(s, ev);
        const EvidenceCounts *c = ev->counts ?: &no_counts;
        ev->raised = evidence_raised(&d->current, ipv4);
        v = evidence_judge(c, ev->raised, &quiet);
        /* a window that showed nothing keeps the verdict of the last one that did */
        if (v != EVIDENCE_UNKNOWN) {
                ev->verdict = v;
                ev->quiet = quiet;
        }
        if (v == EVIDENCE_NOT_EFFECTIVE && ev->raised == 0 && !ev->logged) {
                log_dev_info(d, "BIG TCP not in effect: packets at 64 KiB in the window, none above; its sizes are "
                                "at 64 KiB or less (the policy, or the device's tso_max_size %u)",
                             d->tso_max_size);
                ev->logged = true;
        } else if (v == EVIDENCE_NOT_EFFECTIVE && !ev->logged) {
                log_dev_warning(d,
                                "BIG TCP not in effect for %s: packets at 64 KiB in the window, none above, although "
                                "its sizes are raised; check that the peer and every device on the path (tunnels, "
                                "bridges, offloads: ethtool -k) take big packets, and the kernel (6.7-6.x "
                                "segments IPv4 above gso_max_size in software)",
                                family_names(quiet));
                ev->logged = true;
        } else if (v == EVIDENCE_EFFECTIVE) {
                if (ev->logged)
                        log_dev_info(d, "BIG TCP in effect again: %llu packets above 64 KiB",
                                     (unsigned long long) (c->tx + c->rx));
                ev->logged = false;
        }
        log_dev_debug(d, "evidence: %llu sent above 64 KiB (largest %u), %llu received (largest %u), %llu+%llu at "
                         "64 KiB (1 in %u), %llu missed",
                      (unsigned long long) c->tx, c->tx_largest, (unsigned long long) c->rx, c->rx_largest,
                      (unsigned long long) c->full[EVIDENCE_IPV6], (unsigned long long) c->full[EVIDENCE_IPV4],
                      EVIDENCE_FULL_SAMPLE, (unsigned long long) c->missed);
        emit(s, ev);
        prune(s, d, ev);
}

static void on_timer(evutil_socket_t fd, short what, void *userdata) {
        EvidenceSet *s = userdata;
        uint64_t t = now(s);
        Evidence *ev, *next;

        for (ev = TAILQ_FIRST(&s->watched); ev; ev = next) {
                next = TAILQ_NEXT(ev, link);
                if (!ev->ending && ev->until_usec <= t) {
                        ev->ending = true; /* judged once the kernel handed over its last block */
                        if (!s->observer)
                                ev->of.socket->settle_usec = t + EVIDENCE_SETTLE_USEC;
                } else if (ev->ending && due_of(s, ev) <= t)
                        judge(s, ev);
        }
        arm(s);
}

int evidence_sockets_new(struct event_base *base, EvidenceSockets **ret) {
        EvidenceSockets *k = calloc(1, sizeof(*k));
        int r;

        if (!k)
                return -ENOMEM;
        k->closer_respawn = (Respawn){.what = "bigtcpd-closer", .without = "the loop closes the sockets itself"};
        k->maker_respawn = (Respawn){.what = "bigtcpd-packets",
                                     .without = "watches in bigtcpd's own namespace set up their sockets in the loop, "
                                                "those of other namespaces are not counted"};
        r = closer_new(base, on_child_gone, &k->closer_respawn, &k->closer);
        if (r < 0)
                log_warning_errno(r, "evidence: no process to close packet sockets in (%m): each watch's end "
                                     "stalls the loop for a grace period of the kernel's");
        r = packet_maker_new(base, &recipe, k->closer, on_child_gone, &k->maker_respawn, &k->maker);
        if (r < 0)
                log_warning_errno(r, "evidence: no process to make packet sockets in (%m): each watch's start "
                                     "stalls the loop for a grace period of the kernel's");
        *ret = k;
        return 0;
}

void evidence_sockets_free(EvidenceSockets *k) {
        if (!k)
                return;
        packet_maker_free(k->maker);
        closer_free(k->closer);
        free(k);
}

pid_t evidence_sockets_maker_pid(const EvidenceSockets *k) {
        return k ? packet_maker_pid(k->maker) : -1;
}

pid_t evidence_sockets_closer_pid(const EvidenceSockets *k) {
        return k ? closer_pid(k->closer) : -1;
}

int evidence_set_new(struct event_base *base, Writer *writer, EventList *events, const Clock *clock,
                     EvidenceSockets *sockets, int netns_socket, EvidenceSet **ret) {
        EvidenceSet *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        *s = (EvidenceSet){.base = base, .writer = writer, .events = events, .clock = clock, .sockets = sockets,
                           .netns_socket = netns_socket, .timer_usec = UINT64_MAX};
        TAILQ_INIT(&s->watched);
        TAILQ_INIT(&s->waiting);
        s->timer = evtimer_new(base, on_timer, s);
        if (!s->timer) {
                free(s);
                return -ENOMEM;
        }
        refill(s); /* the namespace's spares, made while nothing is watched yet */
        *ret = s;
        return 0;
}

void evidence_set_free(EvidenceSet *s) {
        Evidence *ev;

        if (!s)
                return;
        if (s->sockets)
                packet_maker_forget(s->sockets->maker, s);
        while ((ev = TAILQ_FIRST(&s->watched)))
                detach(s, ev);
        while ((ev = TAILQ_FIRST(&s->waiting)))
                unwait(s, ev);
        while (s->n_spare > 0)
                close_socket(s, s->spare[--s->n_spare]);
        event_free(s->timer);
        free(s);
}

int evidence_watch(EvidenceSet *s, Device *d, uint64_t duration_usec) {
        Evidence *ev = d->evidence;
        uint64_t until = now(s) + duration_usec;
        bool made = false;
        int fd, r;

        if (!s->sockets && !s->test_ring && !s->observer)
                return -EOPNOTSUPP;
        if (ev && ev->waiting) {
                if (duration_usec > ev->of.socket->duration_usec)
                        ev->of.socket->duration_usec = duration_usec;
                return 0;
        }
        if (ev && counting(s, ev) && !ev->ending) {
                if (until > ev->until_usec)
                        ev->until_usec = until;
                arm_for(s, ev->until_usec);
                return 0;
        }
        /* the observer counts every device anyway: no bound on windows over its counts */
        if (!s->observer && s->n >= EVIDENCE_WATCHED_MAX && !(ev && ev->ending))
                return -EUSERS;
        if (ev && ev->ending) {
                judge(s, ev); /* the window that just closed is judged as it is */
                ev = d->evidence; /* gone if it counted nothing (prune()) */
        }
        if (!ev) {
                ev = pool_alloc(&record_pool);
                if (!ev)
                        return -ENOMEM;
                ev->device = d;
                d->evidence = ev;
                made = true;
        }
        if (s->observer) {
                r = start_observed(s, ev, duration_usec);
                if (r < 0 && made)
                        evidence_release(d);
                return r;
        }
        s->refill_off = false;
        if (s->test_ring)
                fd = s->test_ring(s->test_userdata, d);
        else if (s->n_spare > 0)
                fd = s->spare[--s->n_spare];
        else if (sockets_maker(s->sockets)) {
                /* it starts when the maker's socket comes (milliseconds); until then it reads as a
                 * count from zero since now, not as the last window's figures (or 1970's) */
                if (!socket_get(ev))
                        fd = -ENOMEM;
                else {
                        ev->waiting = true;
                        ev->watched = true;
                        ev->of.socket->duration_usec = duration_usec;
                        counts_clear(ev);
                        ev->since_usec = clock_now(s->clock, CLOCK_REALTIME);
                        TAILQ_INSERT_TAIL(&s->waiting, ev, link);
                        s->n_waiting++;
                        s->n++;
                        refill(s);
                        if (s->asked >= s->n_waiting)
                                return 0;
                        unwait(s, ev); /* none will come: made here */
                        fd = make_here(s, d);
                }
        } else
                fd = make_here(s, d);
        r = fd < 0 ? fd : start(s, ev, fd, duration_usec);
        if (r < 0) {
                if (made)
                        evidence_release(d); /* never counted: nothing to report */
                return r;
        }
        refill(s);
        return 0;
}

void evidence_stop(EvidenceSet *s, Device *d) {
        Evidence *ev = d->evidence;

        if (!ev || !ev->watched)
                return;
        if (ev->waiting) {
                unwait(s, ev);
                emit(s, ev);
                return;
        }
        ev->ending = false;
        detach(s, ev);
        arm(s);
        emit(s, ev);
        prune(s, d, ev);
}

void evidence_forget(EvidenceSet *s, Device *d) {
        Evidence *ev = d->evidence;

        if (s->observer) {
                if (ev && ev->watched)
                        detach(s, ev);
                observer_forget(s->observer, evidence_netns_of(s, d), d->ifindex);
        }
        if (!ev)
                return;
        if (ev->waiting)
                unwait(s, ev);
        detach(s, ev);
        arm(s);
        evidence_release(d);
}

size_t evidence_watched(const EvidenceSet *s) {
        return s->n;
}

void evidence_drain(EvidenceSet *s) {
        Evidence *ev;

        TAILQ_FOREACH(ev, &s->watched, link) {
                if (s->observer) {
                        EvidenceCounts c;
                        if (ev->above)
                                observe(s, ev, &c, ev->above); /* what `auto` reads; the counts are read when asked */
                        continue;
                }
                read_ring(ev);
                read_drops(ev);
        }
}

void evidence_set_test_rings(EvidenceSet *s, EvidenceTestRing make, void *userdata) {
        s->test_ring = make;
        s->test_userdata = userdata;
}

void evidence_tick(EvidenceSet *s) {
        on_timer(-1, 0, s);
}
