/* auto-size.h — the search of `auto` (bigtcpd.yaml(5) AUTO): for one size of one device, the
 * largest size its path proves safe. Pure decisions on their inputs — the bounds, what the last
 * watch or probation window counted, a guard's trip, the clock — and nothing else: the engine
 * writes the target, watches, and feeds back what came of it.
 *
 * A search holds a proven size (passed a window with big packets that only it let through) and a
 * ceiling (the lowest size that tripped a guard, until it ages out; else the bound). A step tries
 * a larger size: the bound itself while nothing tripped, else halfway to the ceiling; never more
 * than twice the proven size (TCP's path MTU probing: a failed probe costs much more than a good
 * one). It settles when the proven size is the bound, or the ceiling is within 1/2^AUTO_STOP_SHIFT
 * of it. A ceiling that aged is tried again once, by itself. A device steps only when busy: a watch of its proven size saw packets filling it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sizes.h"

/* Settled when ceiling - proven <= proven >> AUTO_STOP_SHIFT: below 1/16 of the size a step saves
 * under 6 % of the packets (a flow's packets fall as 1/size) and costs a window and maybe a trip;
 * after the first trip the gap is at most the proven size, so a search trips at most 4 more
 * times before it settles. */
#define AUTO_STOP_SHIFT 4u
/* Packets longer than the proven size (plus AUTO_LINK_MARGIN) that prove a step: only the new
 * size let them through. */
#define AUTO_PROOF_MIN UINT64_C(64)
/* Packets within 1/16 of the proven size that make a device busy enough to step. At 65536 the
 * evidence passes one in 16 of the packets at the old ceiling (evidence.h EVIDENCE_FULL_SAMPLE),
 * so 8 of them are about 128 packets. */
#define AUTO_DEMAND_MIN UINT64_C(8)
/* Bytes a packet as the evidence sees it may carry beyond the size that bounds it: the
 * link-layer header (Ethernet, VLAN tags). */
#define AUTO_LINK_MARGIN 64u
/* The least room below a step's size that counts as near it: two segments and headers at a
 * 9000-byte MTU. */
#define AUTO_NEAR_SLACK 18432u
/* An idle device is watched again after the window, then twice as long each time, up to this. */
#define AUTO_IDLE_WAIT_MAX_USEC (UINT64_C(3600) * UINT64_C(1000000))
/* The longest a search's words may be, with a terminating NUL: a guard's counter
 * (AutoSearch.ceiling_counter) and how a size was proven (AutoSearch.proof: "delivered to peer e1
 * in ns pod-1", "sent, not retransmitted", "sent"). Longer ones are cut to fit, and a state file
 * with longer ones is refused: what a run writes, the next one reads. */
#define AUTO_COUNTER_MAX 64u
#define AUTO_PROOF_MAX 128u

/* What one search runs under, resolved for the device. */
typedef struct AutoBounds {
        uint32_t min;              /* where it starts; never below (policy `min`, >= 65536) */
        uint32_t max;              /* the most it tries: the policy's `max`, or the device's limit */
        uint64_t ceiling_age_usec; /* a tripped size is the ceiling this long */
        uint64_t idle_wait_usec;   /* the first wait after an idle watch: the probation window */
} AutoBounds;

typedef enum AutoPhase {
        AUTO_NEW,      /* not begun (a zeroed search) */
        AUTO_WATCHING, /* at the proven size, watched: does its traffic fill it? */
        AUTO_IDLE,     /* the last watch saw no such traffic: watched again at retry_usec */
        AUTO_TRYING,   /* a larger size written, in probation */
        AUTO_SETTLED,  /* nothing left to try (until the ceiling ages out) */
        _AUTO_PHASE_MAX,
        _AUTO_PHASE_INVALID = -1,
} AutoPhase;

/* A search holds one reference (intern.h) to each of its words, proof and ceiling_counter (NULL:
 * not said): the functions below drop and take them as they change it, auto_search_done() drops
 * them. A plain copy by value holds none: it borrows them, only while the search it came from is
 * neither changed nor ended. A copy that may outlive that is made with auto_search_copy(), which
 * takes its own (the plan's preview); `before` a decision, with auto_search_numbers(), which has
 * no words (auto_search_change() reads none). Moving a search (the preview into the device, the
 * state file's into its entry) moves its references with it. */
typedef struct AutoSearch {
        uint32_t min, max; /* the bounds it runs under: others start it over */
        AutoPhase phase;
        uint32_t proven;
        uint64_t proven_packets; /* the packets above the size before it that proved it (0: min) */
        const char *proof;       /* how they proved it, interned (NULL: not said, as for min) */
        uint32_t trying;         /* AUTO_TRYING: the size in probation */
        uint32_t ceiling;        /* the lowest size that tripped; 0: none (the bound is `max`) */
        uint64_t ceiling_usec;   /* CLOCK_REALTIME: when it tripped */
        const char *ceiling_counter; /* the guard's counter that rose, interned (NULL: not said) */
        uint64_t ceiling_rise;
        uint64_t retry_usec;     /* AUTO_IDLE: CLOCK_REALTIME of the next watch */
        uint64_t idle_wait_usec; /* the wait after the last idle watch */
        unsigned steps, trips;   /* proven steps and trips of this search, since it began */
        bool reprobe;            /* the ceiling aged: the next step tries it once more */
        bool deferred;           /* AUTO_IDLE: not found idle, but no watch could begin (this run's) */
} AutoSearch;

/* Every size's search, as a plan sees them (auto_apply_preview()): a value, room for all four,
 * holding the references of its searches (auto_searches_done()). */
typedef struct AutoSearches {
        AutoSearch size[SIZES_COUNT];
        AutoBounds bounds[SIZES_COUNT]; /* as resolved */
        unsigned sizes;                 /* SizeMask: the sizes searched */
} AutoSearches;

/* One size's search and its bounds (as resolved at the last reconcile). */
typedef struct AutoSize {
        AutoSearch search;
        AutoBounds bounds;
} AutoSize;

/* A device's searches (Device.autosize): made when a search begins, with room for the sizes its
 * policy sets to `auto` alone (a device searching one size carries one search, not four), and
 * made again when those change; freed when no size is searched. The searches are kept in the
 * state file; the rest is this run's. It holds its searches' references and peer_proof's. */
typedef struct AutoDevice {
        unsigned sizes;    /* SizeMask: the sizes searched, an entry of `of` each, in the bits' order */
        /* this run's (auto-apply.c) */
        unsigned counting; /* SizeMask: the sizes the running watch counts for (set as it
                            * began): a size that began watching after it is not judged by it */
        uint64_t sent_big_base, retrans_big_base;
        bool demand_watch; /* a watch of the proven sizes runs, asked by the search */
        bool pending;      /* its target changed outside a reconcile: apply.c's timer reconciles it */
        bool has_tcp_base; /* with the observer: its own TCP counts as a step's window began */
        /* with the observer, a GSO step's peer, known and in a namespace bigtcpd runs: what it
         * received near the size tried is counted through the window (observer_deliv_set()) */
        bool peer_counting;
        uint32_t peer_netns;
        int peer_ifindex;
        /* "delivered to peer e1 in ns b", interned: the last step's peer, kept after its window
         * for the proof of the step it judged (NULL: none yet) */
        const char *peer_proof;
        AutoSize of[];
} AutoDevice;

/* Searches for the sizes of `sizes` (SizeMask), zeroed; NULL without memory. Free with
 * auto_device_free(). */
AutoDevice *auto_device_new(unsigned sizes);
/* Drops its searches' references and its peer's proof, and frees it; NULL is a no-op. */
void auto_device_free(AutoDevice *a);
static inline void auto_device_freep(AutoDevice **a) {
        auto_device_free(*a);
}
/* Size i's entry, for a size that is searched (`a->sizes` has bit i). */
static inline AutoSize *auto_device_entry(const AutoDevice *a, unsigned i) {
        return (AutoSize *) &a->of[__builtin_popcount(a->sizes & ((1u << i) - 1))];
}
static inline AutoSearch *auto_device_search(const AutoDevice *a, unsigned i) {
        return &auto_device_entry(a, i)->search;
}
static inline AutoBounds *auto_device_bounds(const AutoDevice *a, unsigned i) {
        return &auto_device_entry(a, i)->bounds;
}
/* … or NULL when it is not searched (`a` may be NULL). */
static inline AutoSize *auto_device_at(const AutoDevice *a, unsigned i) {
        return a && i < SIZES_COUNT && (a->sizes & (1u << i)) ? auto_device_entry(a, i) : NULL;
}

const char *auto_phase_to_string(AutoPhase p);
AutoPhase auto_phase_from_string(const char *s);

/* *dst (a reference held, or NULL) becomes `src` cut to size - 1 bytes, interned: NULL for NULL
 * and "", and without memory (the words are not said). `size` is at most AUTO_PROOF_MAX. */
void auto_words_set(const char **dst, const char *src, size_t size);
/* How the proven size was proven, in words (cut to AUTO_PROOF_MAX - 1 bytes; NULL: not said). */
static inline void auto_search_set_proof(AutoSearch *s, const char *proof) {
        auto_words_set(&s->proof, proof, AUTO_PROOF_MAX);
}
/* A copy of `s` with references of its own, to end with auto_search_done(). */
AutoSearch auto_search_copy(const AutoSearch *s);
/* A copy of `s` without its words: nothing held, nothing to end; its numbers only. */
static inline AutoSearch auto_search_numbers(const AutoSearch *s) {
        AutoSearch n = *s;
        n.proof = n.ceiling_counter = NULL;
        return n;
}
/* Drops its references; the search is zeroed (not begun). */
void auto_search_done(AutoSearch *s);
/* Drops the references of every search in it; zeroed. */
void auto_searches_done(AutoSearches *s);

/* What one decision did to a search (the journal's line and Monitor's "auto" event say it). */
typedef enum AutoChange {
        AUTO_CHANGE_NONE,
        AUTO_CHANGE_BEGUN,    /* a search (re)began: new, or its bounds moved */
        AUTO_CHANGE_TRYING,   /* busy at the proven size: a larger size is tried */
        AUTO_CHANGE_PROVEN,   /* the size tried passed its window with big packets */
        AUTO_CHANGE_UNPROVEN, /* its window passed without them: back to the proven size, idle */
        AUTO_CHANGE_TRIPPED,  /* a guard tripped in its window: back, the size tried is a ceiling */
        AUTO_CHANGE_IDLE,     /* a watch of the proven size saw no traffic that fills it */
        AUTO_CHANGE_SETTLED,  /* nothing left to try */
        AUTO_CHANGE_REPROBE,  /* the ceiling aged: it is tried once more */
        _AUTO_CHANGE_MAX,
        _AUTO_CHANGE_INVALID = -1,
} AutoChange;

const char *auto_change_to_string(AutoChange c);
/* What took `before` to `after` (one decision apart; `before` zeroed: it began). A watch that
 * starts again after an idle wait is no change an operator needs (AUTO_CHANGE_NONE). */
AutoChange auto_search_change(const AutoSearch *before, const AutoSearch *after);

/* Begin the search, or begin it again when `b` moves its bounds: the proven size is `hint` (the
 * largest size proven on the device before, 0: none) within the bounds, or min; no ceiling, no
 * words (its references dropped). A search under the same bounds is left as it is. True when it
 * (re)began. */
bool auto_search_begin(AutoSearch *s, const AutoBounds *b, uint32_t hint);
/* Time passed: a ceiling older than its age is tried once more (a settled search watches again;
 * passed, the ceiling goes and the search goes on up; tripped, it is the ceiling again, aging
 * anew: one trip per age), an idle one is watched again once its wait is over. True when the
 * phase changed. */
bool auto_search_tick(AutoSearch *s, const AutoBounds *b, uint64_t now_usec);
/* The size the next step would try; 0 when there is none (settled). */
uint32_t auto_search_next(const AutoSearch *s);
/* The size the device should hold now: the one tried, else the proven one. */
static inline uint32_t auto_search_target(const AutoSearch *s) {
        return s->phase == AUTO_TRYING ? s->trying : s->proven;
}
/* Whether the engine should watch the device now (a watch or a step's window), and what length of
 * packet the watch counts beyond: for a step, the proven size and a link-layer header (proof);
 * else within 1/16 of the proven size (demand). */
bool auto_search_wants_watch(const AutoSearch *s);
uint32_t auto_search_count_above(const AutoSearch *s);
/* With the observer (which counts every packet, not a sample): what a step counts is the top
 * quarter of it, packets longer than trying - (trying - proven) / 4 (at least AUTO_NEAR_SLACK
 * below trying, never below the proven size and a link-layer header). TCP cuts a full send queue
 * into packets within one segment (and headers) of the size, so a busy flow at the new size
 * fills that quarter; packets merely above the old size, which a path that drops the biggest
 * still delivers, do not prove the step. While watching it is auto_search_count_above(). */
uint32_t auto_search_count_near(const AutoSearch *s);
/* What a step's ceiling is said to have tripped when, with the observer, its window was busy with
 * big packets (AUTO_PROOF_MIN or more above 64 KiB in the size's direction) but fewer than
 * AUTO_PROOF_MIN came near the size: the path or the traffic stops short of it (a path that drops
 * the biggest makes TCP send them seldom, and smaller), which another try would show again. */
#define AUTO_SHORT_COUNTER "packets-short-of-size"
/* With the observer a step is proven only when the device's own retransmits of big packets in its
 * window stayed at or below 1/AUTO_RETRANS_BIG_DIV of the big segments it sent (once
 * AUTO_RETRANS_BIG_MIN were sent): a veth or LAN path under load loses about 1e-4 from queues at
 * any size, a path that drops the packets above a size 4e-3 and more even while TCP sizes most
 * below it (tests/integration/test_auto.py); 2e-3 lies between, with room on both sides. Above it
 * the step trips with AUTO_RETRANS_COUNTER: a search's ceiling, which ages, not a policy's hold. */
#define AUTO_RETRANS_BIG_DIV 500u
#define AUTO_RETRANS_BIG_MIN UINT64_C(1000)
#define AUTO_RETRANS_COUNTER "tcp.retrans-big"
/* With the observer and a peer bigtcpd runs (a veth's other end, in a namespace a policy names), a
 * GSO step is proven only by what the peer received near the size and did not drop: fewer than
 * AUTO_PROOF_MIN of them while AUTO_PROOF_MIN or more were sent near it, and the step trips with
 * this counter (its rise: the packets that did not arrive). Where the peer is unknown, the proof is
 * the sender's: sent near the size, its own big retransmits under the bound. */
#define AUTO_UNDELIVERED_COUNTER "peer-did-not-receive"
/* With the observer a GRO step is proven by what the device received near the size and this host
 * did not drop after (its firewall, TCP): AUTO_PROOF_MIN or more received near it but fewer than
 * AUTO_PROOF_MIN of them kept, and the step trips with this counter (its rise: those dropped). */
#define AUTO_DROPPED_COUNTER "dropped-after-receipt"
#define AUTO_PROOF_SENT "sent, not retransmitted"
#define AUTO_PROOF_SENT_SOCKETS "sent (packet sockets)"
/* A GRO step's: what the device itself received (GRO builds its packets there), with the observer
 * less what this host dropped after. */
#define AUTO_PROOF_RECEIVED "received on it, not dropped"
#define AUTO_PROOF_RECEIVED_SOCKETS "received on it (packet sockets)"
/* A watch of the proven size ended with `packets` counted above auto_search_count_above(): busy
 * (AUTO_DEMAND_MIN) steps (AUTO_TRYING), idle waits (AUTO_IDLE, doubling), nothing left settles.
 * Ignored in any other phase. */
void auto_search_watched(AutoSearch *s, const AutoBounds *b, uint64_t packets, uint64_t now_usec);
/* A watch of the proven size cannot begin now (every watch the daemon may run is taken): the
 * search waits one wait of the bounds (idle_wait_usec) and is watched again, without doubling
 * its wait — it was not found idle. Ignored unless watching. */
void auto_search_deferred(AutoSearch *s, const AutoBounds *b, uint64_t now_usec);
/* The step's window passed with `packets` counted above the proven size: AUTO_PROOF_MIN of them
 * prove it (and show traffic that fills it: the next step follows at once, or it settles; how,
 * the caller says: auto_search_set_proof()); fewer prove nothing and it goes back to the proven
 * size, as idle. Ignored unless trying. */
void auto_search_passed(AutoSearch *s, const AutoBounds *b, uint64_t packets, uint64_t now_usec);
/* A guard tripped in the step's window (`counter` rose by `rise`; NULL: not said): back to the
 * proven size, the tried size is the ceiling (its counter interned, cut to AUTO_COUNTER_MAX - 1
 * bytes), and a watch comes before the next step. Ignored unless trying. */
void auto_search_tripped(AutoSearch *s, const AutoBounds *b, const char *counter, uint64_t rise,
                         uint64_t now_usec);

/* Where the search stands, in words: "auto: proven 131072 by 8123 big packets, trying 185000,
 * ceiling 524280", "auto: settled at 150000 (160000 tripped Tcp.RetransSegs +412)"; how the
 * proven size was proven after it ("; proof: delivered to peer e1 in ns b"), when said. */
const char *auto_search_format(const AutoSearch *s, uint64_t now_usec, char *buf, size_t size);
