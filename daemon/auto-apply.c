/* auto-apply.c — the searches of `auto` on the engine's devices: bounds for the device, targets
 * into the policy's sizes, the evidence each one counts, and the journal's one line per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto-apply.h"
#include "evidence.h"
#include "log-fields.h"

#define AUTO_IDLE_WAIT_DEFAULT_USEC (30 * USEC_PER_SEC) /* a policy without a window */

static uint64_t realtime(const Engine *e) {
        return clock_now(e->clock, CLOCK_REALTIME);
}

static void resolve_bounds(const Device *d, const Policy *p, const SizeSpec *spec, unsigned i, AutoBounds *ret) {
        uint32_t limit = size_limit(i, d->tso_max_size);
        uint32_t max = spec->auto_max != 0 && spec->auto_max < limit ? spec->auto_max : limit;

        *ret = (AutoBounds){
                .min = spec->auto_min < max ? spec->auto_min : max,
                .max = max,
                .ceiling_age_usec = spec->ceiling_age_usec,
                .idle_wait_usec = p->rollback.window_usec > 0 ? p->rollback.window_usec : AUTO_IDLE_WAIT_DEFAULT_USEC,
        };
}

/* The largest size `i` that passed a window on the device before (0: none). */
static uint32_t proven_before(const Device *d, unsigned i) {
        uint32_t best = 0;

        for (unsigned k = 0; k < device_proven_n(d); k++) {
                uint32_t v = sizes_get(device_proven_at(d, k), i);
                if (v > best)
                        best = v;
        }
        return best;
}

unsigned auto_apply_preview(const Device *d, const Policy *p, unsigned owned, bool ipv4, uint64_t now_usec,
                            AutoSearches *ret, unsigned *ret_changed) {
        unsigned n = ipv4 ? SIZES_COUNT : 2, mask = 0, changed = 0;

        *ret = (AutoSearches){};
        for (unsigned i = 0; i < n; i++)
                if (policy_size_spec(p, i)->kind == SIZE_AUTO && (owned & (1u << i)))
                        mask |= 1u << i;
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                AutoSearch *s = &ret->size[i];
                const AutoSize *was = auto_device_at(d->autosize, i);

                if (!(mask & (1u << i)))
                        continue;
                if (was)
                        *s = auto_search_copy(&was->search); /* the plan's own: it may outlive d's */
                resolve_bounds(d, p, policy_size_spec(p, i), i, &ret->bounds[i]);
                bool began = auto_search_begin(s, &ret->bounds[i], proven_before(d, i));
                if (auto_search_tick(s, &ret->bounds[i], now_usec) || began)
                        changed |= 1u << i;
        }
        ret->sizes = mask;
        if (ret_changed)
                *ret_changed = changed;
        return mask;
}

static void emit_change(Engine *e, Device *d, unsigned i, const AutoSearch *before, uint64_t packets);
static void peer_stop(Engine *e, Device *d);

void auto_apply_none(Engine *e, Device *d) {
        if (!d->autosize)
                return;
        peer_stop(e, d);
        log_dev_info(d, "auto: no size of it is searched any more");
        auto_device_free(TAKE_PTR(d->autosize));
        state_store_mark(e->state, d);
}

void auto_apply_desired(Engine *e, Device *d, const Policy *p, Desired *want) {
        AutoSearches next;
        unsigned changed, mask = auto_apply_preview(d, p, want->owned, e->ipv4_supported, realtime(e), &next, &changed);
        AutoDevice *was = d->autosize, *a = was;

        if (mask == 0) {
                auto_apply_none(e, d);
                return;
        }
        if (!was || was->sizes != mask) {
                /* room for the sizes searched now alone */
                a = auto_device_new(mask);
                if (!a) {
                        log_dev_warning(d, "auto: no memory for its search; it stays at the policy's min");
                        auto_searches_done(&next);
                        return;
                }
                if (was) {
                        /* this run's part goes with it whole: a step that runs keeps its TCP
                         * baselines (its retransmit bound) and its peer's entry in the observer,
                         * cleared when the step is over; the last peer's proof its reference */
                        a->counting = was->counting & mask;
                        a->sent_big_base = was->sent_big_base;
                        a->retrans_big_base = was->retrans_big_base;
                        a->demand_watch = was->demand_watch;
                        a->pending = was->pending;
                        a->has_tcp_base = was->has_tcp_base;
                        a->peer_counting = was->peer_counting;
                        a->peer_netns = was->peer_netns;
                        a->peer_ifindex = was->peer_ifindex;
                        a->peer_proof = TAKE_PTR(was->peer_proof);
                }
                d->autosize = a;
        }
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                const AutoSize *old = auto_device_at(was, i);
                AutoSearch before = old ? auto_search_numbers(&old->search) : (AutoSearch){};
                AutoSize *now = auto_device_at(a, i);

                if (!now)
                        continue;
                auto_search_done(&now->search); /* was's own, when it is `a` */
                now->search = next.size[i];     /* its references with it */
                now->bounds = next.bounds[i];
                *sizes_at(&want->sizes, i) = auto_search_target(&next.size[i]);
                if (changed & (1u << i)) {
                        emit_change(e, d, i, &before, 0);
                        state_store_mark(e->state, d);
                }
        }
        if (was != a)
                auto_device_free(was);
}

/* What each size counts in the watch that begins: above the proven size while stepping, within
 * 1/16 of it while waiting for traffic. */
static int count_from_now(Engine *e, Device *d) {
        uint32_t above[SIZES_COUNT] = {};
        AutoDevice *a = d->autosize;
        unsigned mask = 0;
        int r;

        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if ((a->sizes & (1u << i)) && auto_search_wants_watch(auto_device_search(a, i))) {
                        above[i] = evidence_set_get_observer(e->evidence) ? auto_search_count_near(auto_device_search(a, i))
                                                                          : auto_search_count_above(auto_device_search(a, i));
                        mask |= 1u << i;
                }
        r = evidence_count_above_from_now(e->evidence, d, above);
        a->counting = r >= 0 ? mask : 0;
        return r;
}

/* The watch that counted for d's searches is over. A size watching for traffic that it did not
 * count for (its idle wait ended while a window or another watch ran) is reconciled from the
 * timer, when auto_apply_at_policy() begins its own watch: else it would wait for nothing. */
static void watch_over(Device *d) {
        AutoDevice *a = d->autosize;

        a->counting = 0;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if ((a->sizes & (1u << i)) && auto_device_search(a, i)->phase == AUTO_WATCHING && !(a->counting & (1u << i)))
                        a->pending = true;
}

void auto_apply_at_policy(Engine *e, Device *d, const Policy *p) {
        AutoDevice *a = d->autosize;
        bool wants = false;
        int r;

        if (!a || d->life.state != DEVICE_APPLIED || d->probation || a->demand_watch || evidence_watching(d))
                return;
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)))
                        continue;
                AutoSearch *s = auto_device_search(a, i), before = auto_search_numbers(s);
                if (s->phase == AUTO_TRYING) {
                        /* its window is over without a verdict this run saw (an earlier run's,
                         * stopped in it, resumed without it): not proven */
                        auto_search_passed(s, auto_device_bounds(a, i), 0, realtime(e));
                        emit_change(e, d, i, &before, 0);
                        a->pending = true;
                        state_store_mark(e->state, d);
                }
                if (s->phase == AUTO_WATCHING)
                        wants = true;
        }
        if (a->pending)
                return; /* back to the proven sizes first */
        if (!wants)
                return;
        r = evidence_watch(e->evidence, d, a->of[0].bounds.idle_wait_usec); /* the first size's */
        if (r >= 0)
                r = count_from_now(e, d);
        if (r == -EUSERS) {
                /* every watch is taken: tried again after a window, not found idle (no doubling,
                 * no event: at 10000 devices most of them wait here a while) */
                log_dev_debug(d, "auto: too many watched to watch its traffic now; trying again after a window");
                for (unsigned i = 0; i < SIZES_COUNT; i++)
                        if (a->sizes & (1u << i))
                                auto_search_deferred(auto_device_search(a, i), auto_device_bounds(a, i), realtime(e));
                return;
        }
        if (r < 0) {
                /* no watch, no proof: the search waits as for an idle device */
                log_dev_debug(d, "auto: failed to watch its traffic (%s); waiting",
                              r == -EOPNOTSUPP ? "counting is off" : strerror(-r));
                for (unsigned i = 0; i < SIZES_COUNT; i++) {
                        if (!(a->sizes & (1u << i)))
                                continue;
                        AutoSearch before = auto_search_numbers(auto_device_search(a, i));
                        auto_search_watched(auto_device_search(a, i), auto_device_bounds(a, i), 0, realtime(e));
                        emit_change(e, d, i, &before, 0);
                }
                state_store_mark(e->state, d);
                return;
        }
        a->demand_watch = true;
        log_dev_debug(d, "auto: watching for traffic that fills its proven sizes");
        (void) p;
}

/* Its own TCP counts now, from the observer (false without one). */
static bool own_tcp(Engine *e, const Device *d, struct observer_dev *ret) {
        Observer *o = evidence_set_get_observer(e->evidence);

        if (!o)
                return false;
        (void) observer_read(o, clock_now(e->clock, CLOCK_MONOTONIC), EVIDENCE_FRESH_USEC);
        (void) observer_get(o, evidence_netns_of(e->evidence, d), d->ifindex, ret);
        return true;
}

/* The peer's deliveries are not counted for d any more. */
static void peer_stop(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        Observer *o = evidence_set_get_observer(e->evidence);

        if (!a || !a->peer_counting)
                return;
        if (o)
                observer_deliv_clear(o, a->peer_netns, a->peer_ifindex);
        a->peer_counting = false;
}

/* With the observer, a GSO step's window: where bigtcpd runs d's peer, what the peer receives near
 * each GSO size tried is counted from now (sizes.h: even ones are GSO, i / 2 the family). */
static void peer_from_now(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        Observer *o = evidence_set_get_observer(e->evidence);
        uint32_t len[2] = {};
        DevicePeer p;
        int r;

        peer_stop(e, d);
        if (!o)
                return;
        for (unsigned i = 0; i < SIZES_COUNT; i += 2)
                if ((a->sizes & (1u << i)) && auto_device_search(a, i)->phase == AUTO_TRYING)
                        len[i / 2] = auto_search_count_near(auto_device_search(a, i));
        if (len[0] == 0 && len[1] == 0)
                return;
        r = engine_peer_of(e, d, &p);
        if (r < 0) {
                log_dev_debug(d, "auto: %s: a step is proven by what it sends",
                              r == -ENOENT  ? "it has no peer"
                              : r == -ENXIO ? "its peer's namespace is not one bigtcpd runs"
                                            : "its peer is not found where its link says");
                return;
        }
        uint32_t ns = evidence_netns_of(p.engine->evidence, p.device);
        r = observer_deliv_set(o, ns, p.device->ifindex, len);
        if (r < 0) {
                log_dev_debug(d, "auto: cannot count what its peer %s receives (%s): a step is proven by what it sends",
                              p.device->ifname, strerror(-r));
                return;
        }
        a->peer_counting = true;
        a->peer_netns = ns;
        a->peer_ifindex = p.device->ifindex;
        char proof[AUTO_PROOF_MAX];
        snprintf(proof, sizeof(proof), "delivered to peer %s in ns %s", p.device->ifname,
                 device_netns_name(p.device));
        auto_words_set(&a->peer_proof, proof, sizeof(proof));
        log_dev_debug(d, "auto: counting what its peer %s (ns %s) receives near the size tried", p.device->ifname,
                      device_netns_name(p.device));
}

void auto_apply_window_begins(Engine *e, Device *d) {
        struct observer_dev v;

        if (!d->autosize || !d->evidence)
                return;
        d->autosize->demand_watch = false; /* the window's watch counts for it too */
        d->autosize->has_tcp_base = own_tcp(e, d, &v);
        d->autosize->sent_big_base = d->autosize->has_tcp_base ? v.tcp_sent_big : 0;
        d->autosize->retrans_big_base = d->autosize->has_tcp_base ? v.tcp_retrans_big : 0;
        (void) count_from_now(e, d);
        peer_from_now(e, d);
}

void auto_apply_gone(Engine *e, Device *d) {
        peer_stop(e, d);
}

/* The device's own big retransmits in the step's window above the bound: their rise (0: within). */
static uint64_t retransmits_over(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        struct observer_dev v;

        if (!a->has_tcp_base || !own_tcp(e, d, &v))
                return 0;
        uint64_t sent = v.tcp_sent_big > a->sent_big_base ? v.tcp_sent_big - a->sent_big_base : 0;
        uint64_t re = v.tcp_retrans_big > a->retrans_big_base ? v.tcp_retrans_big - a->retrans_big_base : 0;
        return sent >= AUTO_RETRANS_BIG_MIN && re * AUTO_RETRANS_BIG_DIV > sent ? re : 0;
}

/* What the device's watch counted above each size's length (all 0: none counted). */
static const EvidenceAbove *above_counts(Engine *e, Device *d) {
        static const EvidenceAbove none;

        if (!evidence_above(d))
                return &none;
        evidence_drain(e->evidence);
        return evidence_above(d);
}

/* What a decision did to size i's search (before: its numbers as they were, auto_search_numbers()),
 * in the journal's one line and as Monitor's "auto" event. */
static void emit_change(Engine *e, Device *d, unsigned i, const AutoSearch *before, uint64_t packets) {
        const AutoSearch *s = auto_device_search(d->autosize, i);
        AutoChange change = auto_search_change(before, s);
        char buf[256];

        if (change == AUTO_CHANGE_NONE)
                return;
        auto_search_format(s, realtime(e), buf, sizeof(buf));
        switch (change) {
        case AUTO_CHANGE_BEGUN:
                log_dev_info(d, "auto: %s searched from %u (bounds %u..%u): %s", size_name(i), s->proven, s->min, s->max, buf);
                break;
        case AUTO_CHANGE_PROVEN:
                log_dev_info(d, "auto: %s %u proven by %llu big packets; %s", size_name(i), s->proven,
                             (unsigned long long) packets, buf);
                break;
        case AUTO_CHANGE_TRIPPED:
                log_dev_notice(d, "auto: %s %u tripped %s +%llu: back to %u; %s", size_name(i),
                               before->trying, s->ceiling_counter ?: "a guard",
                               (unsigned long long) s->ceiling_rise, s->proven, buf);
                break;
        case AUTO_CHANGE_UNPROVEN:
                log_dev_info(d, "auto: %s %u not proven: %llu packets above %u in its window (%llu needed); back to %u; %s",
                             size_name(i), before->trying, (unsigned long long) packets, before->proven,
                             (unsigned long long) AUTO_PROOF_MIN, s->proven, buf);
                break;
        case AUTO_CHANGE_TRYING:
                log_dev_info(d, "auto: %s busy at %u (%llu packets fill it); %s", size_name(i), s->proven,
                             (unsigned long long) packets, buf);
                break;
        case AUTO_CHANGE_REPROBE:
                log_dev_info(d, "auto: %s ceiling %u aged; %s", size_name(i), s->ceiling, buf);
                break;
        default:
                log_dev_debug(d, "auto: %s: %s", size_name(i), buf);
                break;
        }
        if (event_watched(&e->events))
                event_emit(&e->events, &(Event){.type = EVENT_AUTO, .device = d, .auto_size = i, .auto_change = change,
                                                .auto_search = s});
}

/* What the peer delivered in the window, per family (received near the size and not dropped
 * after): true when it was counted. */
static bool peer_delivered(Engine *e, Device *d, uint64_t ret[static 2]) {
        AutoDevice *a = d->autosize;
        Observer *o = evidence_set_get_observer(e->evidence);
        struct observer_deliv v;

        if (!a->peer_counting || !o || observer_deliv_get(o, a->peer_netns, a->peer_ifindex, &v) < 0)
                return false; /* the peer went: the step is judged as where it is unknown */
        for (unsigned f = 0; f < 2; f++) {
                ret[f] = v.received[f] > v.dropped[f] ? v.received[f] - v.dropped[f] : 0;
                if (v.len[f] == 0)
                        continue;
                log_dev_info(d, "auto: %s: %llu packets sent near the size, %llu %s (%llu received there, %llu dropped after)",
                             size_name(2 * f), (unsigned long long) (evidence_above(d) ? evidence_above(d)->count[2 * f] : 0),
                             (unsigned long long) ret[f], a->peer_proof ?: "delivered to its peer",
                             (unsigned long long) v.received[f], (unsigned long long) v.dropped[f]);
        }
        return true;
}

/* How size i's step was proven, in words (borrowed: a->peer_proof, or a literal). */
static const char *proof_of(Engine *e, const AutoDevice *a, unsigned i, bool by_peer) {
        bool observer = evidence_set_get_observer(e->evidence);

        if (i & 1u) /* GRO (sizes.h) */
                return observer ? AUTO_PROOF_RECEIVED : AUTO_PROOF_RECEIVED_SOCKETS;
        if (by_peer)
                return a->peer_proof;
        return observer ? AUTO_PROOF_SENT : AUTO_PROOF_SENT_SOCKETS;
}

bool auto_apply_passed(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        bool changed = false;
        uint64_t delivered[2] = {};

        if (!a)
                return false;
        const EvidenceAbove *counted = above_counts(e, d);
        EvidenceCounts window; /* its big packets (the window's, as counted now) */
        evidence_counts(e->evidence, d, &window);
        const uint64_t *above = counted->count;
        uint64_t retrans = retransmits_over(e, d); /* the step's own bound (auto-size.h) */
        bool by_peer = peer_delivered(e, d, delivered);
        a->has_tcp_base = false;
        peer_stop(e, d);
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)))
                        continue;
                AutoSearch *s = auto_device_search(a, i), before = auto_search_numbers(s);
                uint64_t count = above[i];
                const char *trip = NULL; /* the counter a step trips, and its rise */
                uint64_t rise = 0;
                if (s->phase == AUTO_TRYING && by_peer && !(i & 1u)) {
                        /* the peer's receipt is the proof: sent near the size and not received
                         * there (dropped on the way, or by the peer) trips the step */
                        if (above[i] >= AUTO_PROOF_MIN && delivered[i / 2] < AUTO_PROOF_MIN) {
                                trip = AUTO_UNDELIVERED_COUNTER;
                                rise = above[i] - delivered[i / 2];
                        }
                        count = delivered[i / 2] < above[i] ? delivered[i / 2] : above[i];
                }
                if (s->phase == AUTO_TRYING && (i & 1u) && d->evidence && evidence_set_get_observer(e->evidence)) {
                        /* a GRO step: what it received near the size and this host did not drop
                         * after (a firewall of its own, TCP); received alone would count those */
                        uint64_t dropped = counted->dropped[i / 2];
                        uint64_t kept = above[i] > dropped ? above[i] - dropped : 0;
                        if (dropped > 0)
                                log_dev_info(d, "auto: %s: %llu packets received near the size, %llu of them dropped "
                                                "after on this host",
                                             size_name(i), (unsigned long long) above[i], (unsigned long long) dropped);
                        if (above[i] >= AUTO_PROOF_MIN && kept < AUTO_PROOF_MIN) {
                                trip = AUTO_DROPPED_COUNTER;
                                rise = dropped;
                        }
                        count = kept;
                }
                if (!trip && s->phase == AUTO_TRYING && retrans > 0 && !(i & 1u)) {
                        /* its own sends were lost: the step's answer (GSO; a GRO step is the peer's) */
                        trip = AUTO_RETRANS_COUNTER;
                        rise = retrans;
                }
                if (trip) {
                        auto_search_tripped(s, auto_device_bounds(a, i), trip, rise, realtime(e));
                        emit_change(e, d, i, &before, 0);
                        changed = changed || auto_search_target(s) != auto_search_target(&before);
                        continue;
                }
                /* the window's big packets in the size's direction (sizes.h: odd ones are GRO) */
                uint64_t busy = (i & 1u) ? window.rx : window.tx;
                if (s->phase == AUTO_TRYING && evidence_set_get_observer(e->evidence) && above[i] < AUTO_PROOF_MIN &&
                    busy >= AUTO_PROOF_MIN)
                        auto_search_tripped(s, auto_device_bounds(a, i), AUTO_SHORT_COUNTER, busy, realtime(e));
                else if (s->phase == AUTO_TRYING) {
                        auto_search_passed(s, auto_device_bounds(a, i), count, realtime(e));
                        if (s->steps > before.steps)
                                auto_search_set_proof(s, proof_of(e, a, i, by_peer));
                } else if (s->phase == AUTO_WATCHING && (a->counting & (1u << i)))
                        auto_search_watched(s, auto_device_bounds(a, i), above[i], realtime(e));
                else
                        continue;
                emit_change(e, d, i, &before, count);
                changed = changed || auto_search_target(s) != auto_search_target(&before);
        }
        a->demand_watch = false;
        watch_over(d);
        state_store_mark(e->state, d);
        return changed;
}

bool auto_apply_tripped(Engine *e, Device *d, const RollbackRecord *why) {
        AutoDevice *a = d->autosize;
        bool stepping = false;

        if (!a)
                return false;
        peer_stop(e, d);
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)) || auto_device_search(a, i)->phase != AUTO_TRYING)
                        continue;
                AutoSearch *s = auto_device_search(a, i), before = auto_search_numbers(s);
                auto_search_tripped(s, auto_device_bounds(a, i), why ? why->counter : NULL, why ? why->rise : 0, realtime(e));
                emit_change(e, d, i, &before, 0);
                stepping = true;
        }
        if (stepping)
                state_store_mark(e->state, d);
        return stepping;
}

bool auto_apply_rolled_back(Engine *e, Device *d, Sizes *held) {
        static const RollbackRecord operator = {.counter = (char *) "operator"};
        AutoDevice *a = d->autosize;
        unsigned stepping = 0;

        if (!a)
                return false;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if ((a->sizes & (1u << i)) && auto_device_search(a, i)->phase == AUTO_TRYING)
                        stepping |= 1u << i;
        if (!auto_apply_tripped(e, d, &operator))
                return false;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (stepping & (1u << i))
                        *sizes_at(held, i) = auto_search_target(auto_device_search(a, i));
        return true;
}

bool auto_apply_watch_ended(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        bool changed = false;

        if (!a || evidence_watching(d))
                return false;
        if (!a->demand_watch) {
                /* a window's watch, or Watch()'s: no verdict of the search's, but it may wait */
                watch_over(d);
                return false;
        }
        a->demand_watch = false;
        const uint64_t *above = evidence_above(d) ? evidence_above(d)->count : (const uint64_t[SIZES_COUNT]){};
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)) || auto_device_search(a, i)->phase != AUTO_WATCHING ||
                    !(a->counting & (1u << i)))
                        continue;
                AutoSearch *s = auto_device_search(a, i), before = auto_search_numbers(s);
                auto_search_watched(s, auto_device_bounds(a, i), above[i], realtime(e));
                emit_change(e, d, i, &before, above[i]);
                changed = changed || auto_search_target(s) != auto_search_target(&before);
        }
        watch_over(d);
        a->pending = a->pending || changed;
        state_store_mark(e->state, d);
        return changed;
}

bool auto_apply_tick(Engine *e, Device *d) {
        AutoDevice *a = d->autosize;
        bool changed;

        if (!a)
                return false;
        changed = a->pending;
        a->pending = false;
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)))
                        continue;
                AutoSearch before = auto_search_numbers(auto_device_search(a, i));
                if (auto_search_tick(auto_device_search(a, i), auto_device_bounds(a, i), realtime(e))) {
                        emit_change(e, d, i, &before, 0);
                        changed = true;
                }
        }
        if (changed)
                state_store_mark(e->state, d);
        return changed;
}

/* How much later than its wait `d` is watched again: up to 1/8 of the wait, the same fraction for
 * the device each time (from its ifindex). The devices of a burst go idle within moments of each
 * other, and so does every search the watch limit turned away (EVIDENCE_WATCHED_MAX): without it
 * they would all wake in the same tick, a round of thousands of reconciles and watches of which
 * 64 are counted, every wait. Spread, each tick takes the few due (AUTO_TIMER_SLACK_USEC). */
static uint64_t idle_spread(const Device *d, uint64_t wait_usec) {
        uint64_t h = (uint64_t) (uint32_t) d->ifindex * UINT64_C(0x9e3779b97f4a7c15); /* Fibonacci hashing */

        return (wait_usec / 8) * (h >> 32) >> 32;
}

uint64_t auto_apply_due(const Device *d) {
        const AutoDevice *a = d->autosize;
        uint64_t due = UINT64_MAX;

        if (!a)
                return due;
        if (a->pending)
                return 0;
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)))
                        continue;
                const AutoSearch *s = auto_device_search(a, i);
                const AutoBounds *b = auto_device_bounds(a, i);
                if (s->phase == AUTO_IDLE) {
                        /* a deferred search (no doubling yet) spreads over a window */
                        uint64_t at = s->retry_usec + idle_spread(d, s->idle_wait_usec ?: b->idle_wait_usec);
                        if (at < due)
                                due = at;
                }
                /* an aged ceiling already tried once more ages again only after its next trip
                 * (auto_search_tick()): not due, or the timer would fire for it without end */
                if (s->ceiling != 0 && !s->reprobe && s->ceiling_usec + b->ceiling_age_usec < due)
                        due = s->ceiling_usec + b->ceiling_age_usec;
        }
        return due;
}

const char *auto_apply_format(const Engine *e, const Device *d, char *buf, size_t size) {
        const AutoDevice *a = d->autosize;
        size_t o = 0;

        if (!a || a->sizes == 0)
                return NULL;
        buf[0] = '\0';
        for (unsigned i = 0; i < SIZES_COUNT && o + 1 < size; i++) {
                char one[256];

                if (!(a->sizes & (1u << i)))
                        continue;
                int n = snprintf(buf + o, size - o, "%s%s %s", o ? "; " : "", size_name(i),
                                 auto_search_format(auto_device_search(a, i), realtime(e), one, sizeof(one)));
                if (n < 0)
                        break;
                o += (size_t) n < size - o ? (size_t) n : size - o - 1;
        }
        return buf;
}
