/* test-model.c — the lifecycle against a small reference model. Seeded random sequences of what
 * an operator does (policy edits and reloads, try, confirm, revert, a try's timeout, rollback and
 * retry of one device or all, restart, SIGKILL during writes and restart) and what the world does
 * (time passing, writes from outside, renames in and out of the match, delete and re-create,
 * guards tripping) run against the real engine on the harness's fake clock and fake kernel, and
 * after every step the kernel's sizes, the held flag, the rollback target and the originals of
 * every device are what the model says (design.md, "Rollback target"). A failing sequence is
 * shrunk (steps deleted while it still fails) and printed.
 *
 * BIGTCPD_MODEL_SEEDS=N runs N seeds (default MODEL_SEEDS), BIGTCPD_MODEL_SEED=S only seed S,
 * BIGTCPD_MODEL_STEPS=N steps a sequence, BIGTCPD_MODEL_LOG=1 the daemon's log. Not modelled:
 * moves between namespaces (the harness's set has bigtcpd's own namespace alone; test_netns.py has them),
 * put-backs beyond apply.c's throttle (left out by the generator), a guard trip at the very tick
 * a window ends. */
#include <syslog.h>

#include "engine-harness.h"
#include "log.h"
#include "reconcile.h"
#include "policy-reload.h"
#include "policy-try.h"

#define MODEL_SEEDS 600
#define MODEL_STEPS 30
#define N_DEVS 2
#define TICK_USEC (200 * USEC_PER_MSEC)
#define WINDOW_USEC (2 * USEC_PER_SEC)

/* ---- the policies: nothing matches, or eth* at one size ---- */

#define N_POLICIES 4
static const uint32_t policy_size[N_POLICIES] = {0, 120000, 150000, 185000};
static char policy_text[N_POLICIES][512];

static void make_policies(void) {
        for (size_t k = 0; k < N_POLICIES; k++)
                snprintf(policy_text[k], sizeof(policy_text[k]),
                         "version: 1\n"
                         "policies:\n"
                         "  - name: p\n"
                         "    match:\n"
                         "      name: [\"%s\"]\n"
                         "    ipv6: {gso-max-size: %u, gro-max-size: %u}\n"
                         "    ipv4: {gso-max-size: %u, gro-max-size: %u}\n"
                         "    rollback:\n"
                         "      window: 2s\n"
                         "      interval: 200ms\n"
                         "      guards: [{counter: Ip.InHdrErrors, max-increase: 10}]\n",
                         k == 0 ? "none*" : "eth*", k ? policy_size[k] : 100000, k ? policy_size[k] : 100000,
                         k ? policy_size[k] : 100000, k ? policy_size[k] : 100000);
}

static Sizes all4(uint32_t v) {
        return H_SIZES(v, v, v, v);
}

/* ---- the steps ---- */

typedef enum Op {
        OP_EDIT,      /* the configured file is edited to policy a, and reloaded */
        OP_TRY,       /* try policy a for b seconds */
        OP_CONFIRM,
        OP_REVERT,
        OP_ADVANCE,   /* a × 200 ms pass (a try's deadline, windows ending) */
        OP_ROLLBACK,  /* device a; a = N_DEVS: --all */
        OP_RETRY,     /* device a; a = N_DEVS: --all */
        OP_RESTART,
        OP_KILL,      /* policy a edited and reloaded, SIGKILL before the kernel answers; the kernel
                       * took the writes in flight whose bit is set in b */
        OP_OUTSIDE,   /* someone else writes 100000 (b = 1) or 65536 to device a */
        OP_RENAME,    /* device a renamed out of the match (x…) or back in (eth…) */
        OP_DELETE,    /* device a deleted, or re-created when it is gone */
        OP_TRIP,      /* a guard's counter rises: every device in its window goes back */
        OP_REFUSE,    /* policy a edited and reloaded; the kernel refuses the writes whose bit is set
                       * in b (each device is then as before the edit, failed); `retry` of those */
        OP_FULL,      /* policy a edited and reloaded with the state file unwritable (nothing that
                       * needs its record is written); then it can be written again */
        OP_LOST,      /* policy a edited and reloaded; the acks of its writes are lost (ENOBUFS), the
                       * kernel took those whose bit is set in b; the links are read again */
        _OP_MAX,
} Op;

static const char *const op_name[_OP_MAX] = {
        [OP_EDIT] = "edit", [OP_TRY] = "try", [OP_CONFIRM] = "confirm", [OP_REVERT] = "revert",
        [OP_ADVANCE] = "advance", [OP_ROLLBACK] = "rollback", [OP_RETRY] = "retry", [OP_RESTART] = "restart",
        [OP_KILL] = "kill", [OP_OUTSIDE] = "outside-write", [OP_RENAME] = "rename", [OP_DELETE] = "delete/create",
        [OP_TRIP] = "guard-trip", [OP_REFUSE] = "refuse", [OP_FULL] = "full-disk", [OP_LOST] = "acks-lost",
};

typedef struct Step {
        Op op;
        unsigned a, b;
} Step;

static void step_format(const Step *s, char *buf, size_t size) {
        switch (s->op) {
        case OP_EDIT:
                snprintf(buf, size, "edit the configured policy to %u, reload", policy_size[s->a]);
                break;
        case OP_TRY:
                snprintf(buf, size, "try %u --timeout %us", policy_size[s->a], s->b);
                break;
        case OP_ADVANCE:
                snprintf(buf, size, "%u ms pass", s->a * 200);
                break;
        case OP_ROLLBACK:
        case OP_RETRY:
                if (s->a == N_DEVS)
                        snprintf(buf, size, "%s --all", op_name[s->op]);
                else
                        snprintf(buf, size, "%s dev%u", op_name[s->op], s->a);
                break;
        case OP_KILL:
                snprintf(buf, size, "edit to %u, reload, SIGKILL with the writes in flight (kernel took mask %u), restart",
                         policy_size[s->a], s->b);
                break;
        case OP_OUTSIDE:
                snprintf(buf, size, "someone writes %u to dev%u", s->b ? 100000 : 65536, s->a);
                break;
        case OP_REFUSE:
                snprintf(buf, size, "edit to %u, reload, the kernel refuses the writes of mask %u; retry them",
                         policy_size[s->a], s->b);
                break;
        case OP_FULL:
                snprintf(buf, size, "edit to %u, reload with the state file unwritable; writable again",
                         policy_size[s->a]);
                break;
        case OP_LOST:
                snprintf(buf, size, "edit to %u, reload, the acks are lost (the kernel took mask %u); read again",
                         policy_size[s->a], s->b);
                break;
        case OP_RENAME:
        case OP_DELETE:
                snprintf(buf, size, "%s dev%u", op_name[s->op], s->a);
                break;
        default:
                snprintf(buf, size, "%s", op_name[s->op]);
                break;
        }
}

/* ---- the reference model ---- */

#define PROVEN_MAX 16

typedef struct MDev {
        bool present, in_match; /* named eth… */
        Sizes cur;
        bool has_orig;
        Sizes orig;
        bool has_lg;
        Sizes lg;
        Sizes proven[PROVEN_MAX]; /* sizes that passed a window since the originals were recorded */
        size_t n_proven;
        bool in_window;
        uint64_t window_end;
        bool held;
        Sizes held_want;
        uint64_t corr_since; /* put-backs, as apply.c counts them */
        unsigned corr_n;
} MDev;

typedef struct Model {
        uint64_t now;
        unsigned configured; /* the policy in the file */
        bool trying;
        unsigned tried;
        uint64_t try_deadline;
        MDev dev[N_DEVS];
} Model;

static unsigned running(const Model *m) {
        return m->trying ? m->tried : m->configured;
}

/* What the policy wants of the device; false: nothing. */
static bool want(const Model *m, const MDev *d, Sizes *ret) {
        unsigned k = running(m);
        if (!d->in_match || k == 0)
                return false;
        *ret = all4(policy_size[k]);
        return true;
}

static bool m_proven(const MDev *d, const Sizes *s) {
        for (size_t i = 0; i < d->n_proven; i++)
                if (sizes_equal(&d->proven[i], s, true))
                        return true;
        return false;
}

/* Good: they passed their window (or have none running), are the originals, or passed one before. */
static bool m_good(const MDev *d, const Sizes *s) {
        return !d->in_window || sizes_equal(s, &d->orig, true) || m_proven(d, s);
}

static Sizes m_target(const MDev *d) {
        return d->has_lg ? d->lg : d->orig;
}

static void m_forget(MDev *d) {
        d->has_orig = d->has_lg = d->held = d->in_window = false;
        d->n_proven = 0;
}

/* The device is reconciled with the running policy. */
static void m_apply(Model *m, MDev *d) {
        Sizes w;

        if (!d->present)
                return;
        if (!want(m, d, &w)) {
                if (d->has_orig)
                        d->cur = d->orig; /* given back */
                m_forget(d);
                return;
        }
        if (d->held) {
                if (sizes_equal(&w, &d->held_want, true))
                        return;
                d->held = false;
        }
        if (sizes_equal(&w, &d->cur, true))
                return;
        if (!d->has_orig) {
                d->has_orig = true;
                d->orig = d->cur;
                d->has_lg = false;
                d->n_proven = 0;
        }
        if (m_good(d, &d->cur)) {
                d->lg = d->cur;
                d->has_lg = true;
        }
        d->cur = w;
        d->in_window = true;
        d->window_end = m->now + WINDOW_USEC;
}

static void m_apply_all(Model *m) {
        for (size_t i = 0; i < N_DEVS; i++)
                m_apply(m, &m->dev[i]);
}

/* An operator's rollback or (`guard`) a guard's: false when there is nothing to roll back. */
static bool m_roll_back(Model *m, MDev *d, bool guard) {
        Sizes w;

        if (!d->present || !d->has_orig || d->held || !want(m, d, &w))
                return false;
        Sizes t = m_target(d);
        if (sizes_equal(&t, &d->cur, true)) {
                /* nothing would change: said so, nothing held; a guard's verdict ends the window
                 * all the same (the sizes are not proven) */
                if (guard)
                        d->in_window = false;
                return false;
        }
        d->held = true;
        d->held_want = w;
        d->in_window = false;
        d->cur = t;
        return true;
}

static bool m_retry(Model *m, MDev *d) {
        if (!d->present || !d->held)
                return false;
        d->held = false;
        m_apply(m, d);
        return true;
}

static void m_window_passes(Model *m) {
        for (size_t i = 0; i < N_DEVS; i++) {
                MDev *d = &m->dev[i];
                if (!d->present || !d->in_window || d->window_end > m->now)
                        continue;
                d->in_window = false;
                if (!m_proven(d, &d->cur) && d->n_proven < PROVEN_MAX)
                        d->proven[d->n_proven++] = d->cur;
        }
}

/* ---- the system under test ---- */

typedef struct Sut {
        Harness *h;
        Reloader *reloader;
        PolicyTry *t;
        char config[128];
        bool named_in[N_DEVS]; /* eth… or x… */
        bool present[N_DEVS];
} Sut;

static int ifindex_of(size_t i) {
        return (int) i + 2;
}

static void sut_name(const Sut *s, size_t i, char *buf, size_t size) {
        snprintf(buf, size, "%s%zu", s->named_in[i] ? "eth" : "x", i);
}

/* What the loop does after a swap or a try's end: the events it made run, the links are read. */
static void settle(Sut *s) {
        for (int i = 0; i < 4; i++)
                (void) event_base_loop(s->h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        /* a swap while a re-read runs asks for one more (sync_verify()): the kernel answers both */
        for (int i = 0; i < 2; i++) {
                h_dump(s->h);
                h_answer_all(s->h);
        }
        h_flush(s->h);
        h_answer_all(s->h);
        /* the harness's logs are not needed between steps */
        if (h_unanswered(s->h) == 0)
                s->h->n_reqs = s->h->next_answer = 0;
        s->h->n_ev = 0;
}

static void sut_attach(Sut *s, unsigned configured) {
        snprintf(s->config, sizeof(s->config), "%s/bigtcpd.yaml", s->h->runtime_dir);
        h_write_file(s->h->runtime_dir, "bigtcpd.yaml", policy_text[configured]);
        h_reloader_new(s->h, s->config, &s->reloader, &s->t);
}

static void sut_detach(Sut *s) {
        policy_try_free(s->t);
        s->t = NULL;
        reloader_free(s->reloader);
        s->reloader = NULL;
}

static void sut_free(Sut *s) {
        sut_detach(s);
        h_free(s->h);
        s->h = NULL;
}

/* The next run: the state as it is on disk now (`save`: as a clean stop leaves it), the links
 * with the sizes the kernel has, the clocks going on. */
static void sut_restart(Sut *s, unsigned configured, bool save) {
        Harness *h = s->h;
        FakeLink links[ELEMENTSOF(h->links)];
        size_t n_links = h->n_links;
        uint64_t mono = h->mono, boot = h->boot, real = h->real, hdr = h->ip_in_hdr_errors;
        StateEntry *entries = NULL;
        StateStore *peek;
        size_t n = 0;

        if (save)
                assert_int_equal(state_store_save(h->e->state), 0);
        assert_int_equal(state_store_new(h->base, h->runtime_dir, &h->e->devices, &peek), 0);
        assert_int_equal(state_store_load(peek, &entries, &n, NULL), 0);
        state_store_free(peek);
        memcpy(links, h->links, sizeof(links));
        sut_detach(s);
        h_free(h);

        h = s->h = h_new(policy_text[configured]);
        h->mono = mono;
        h->boot = boot;
        h->real = real;
        h->ip_in_hdr_errors = hdr;
        h_write_snmp(h);
        for (size_t i = 0; i < n_links; i++) {
                if (!links[i].present || links[i].ifindex == 1)
                        continue;
                FakeLink *l = h_link_add_full(h, links[i].ifindex, links[i].name, links[i].kind, links[i].ipv4);
                unsigned id = l->id;
                *l = links[i];
                l->id = id;
        }
        sut_attach(s, configured);
        (void) policy_try_recover(s->t);
        h_start_from(h, entries, n);
        h_answer_all(h);
        settle(s);
}

static void sut_new(Sut *s, unsigned configured) {
        *s = (Sut){};
        s->h = h_new(policy_text[configured]);
        sut_attach(s, configured);
        for (size_t i = 0; i < N_DEVS; i++) {
                s->named_in[i] = s->present[i] = true;
                h_link_add(s->h, ifindex_of(i), i == 0 ? "eth0" : "eth1");
        }
        h_start(s->h);
        h_answer_all(s->h);
        settle(s);
}

static void edit(Sut *s, unsigned k) {
        h_write_file(s->h->runtime_dir, "bigtcpd.yaml", policy_text[k]);
        assert_int_equal(reloader_reload(s->reloader, false, NULL, NULL), 0);
}

/* The oldest request not answered; *ret_write: it is a write to a link that is there, *ret_picked:
 * … and the `mask` bit of its turn among such writes (counted in *turn) is set. */
static Request *next_picked(Harness *h, unsigned mask, unsigned *turn, bool *ret_write, bool *ret_picked) {
        Request *q = h_next_request(h);
        FakeLink *l = q->link_id ? h_link_by_id(h, q->link_id) : NULL;
        *ret_write = q->kind == REQUEST_WRITE && l && l->present;
        *ret_picked = *ret_write && (mask & (1u << (*turn)++));
        return q;
}

static void sut_ticks(Sut *s, Model *m, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                h_tick(s->h, TICK_USEC);
                h_flush(s->h);
                h_answer_all(s->h);
                m->now += TICK_USEC;
                m_window_passes(m);
                if (m->trying && m->now >= m->try_deadline) {
                        m->trying = false;
                        m_apply_all(m);
                }
                bool was = s->t->running;
                policy_try_check(s->t);
                if (was && !s->t->running)
                        settle(s);
        }
}

/* ---- the generator: only steps whose outcome the model knows ---- */

static uint64_t rng_next(uint64_t *x) {
        /* splitmix64 */
        uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

static unsigned rng(uint64_t *x, unsigned n) {
        return (unsigned) (rng_next(x) % n);
}

/* Whether a put-back now stays within apply.c's CORRECTIONS_MAX a window (a throttled device
 * waits for a timer the model does not run). */
static bool m_correction_ok(const Model *m, const MDev *d) {
        if (m->now - d->corr_since > CORRECTION_WINDOW_USEC)
                return true;
        return d->corr_n + 1 < CORRECTIONS_MAX;
}

/* A guard's rise is seen by every window; one that ends at this very tick is not modelled. */
static bool m_trip_ok(const Model *m) {
        for (size_t i = 0; i < N_DEVS; i++)
                if (m->dev[i].present && m->dev[i].in_window && m->dev[i].window_end <= m->now + 2 * TICK_USEC)
                        return false;
        return true;
}

/* ---- one step on both, then the check ---- */

typedef struct Run {
        Sut s;
        Model m;
        char why[512];
} Run;

static bool step_valid(const Model *m, const Step *st) {
        switch (st->op) {
        case OP_TRY:
                return !m->trying;
        case OP_CONFIRM:
        case OP_REVERT:
                return m->trying;
        case OP_OUTSIDE: {
                const MDev *d = &m->dev[st->a];
                Sizes w;
                if (!d->present)
                        return false;
                /* a put-back counts; one that would be throttled is left out */
                return !want(m, d, &w) || d->held || m_correction_ok(m, d);
        }
        case OP_RENAME:
                return m->dev[st->a].present;
        case OP_TRIP:
                return m_trip_ok(m);
        case OP_REFUSE:
        case OP_FULL:
        case OP_LOST:
                return !m->trying; /* (an edit during a try waits for its end) */
        default:
                return true;
        }
}

/* d's originals (`ok`: as they should be) and rollback target against the model's device `md`;
 * `what` opens the message, `model` names the model's side. */
static bool check_records(Run *r, size_t i, Device *d, const MDev *md, bool ok, const char *what, const char *model) {
        Harness *h = r->s.h;
        char b1[256], b2[256];

        if (!ok) {
                snprintf(r->why, sizeof(r->why), "dev%zu: %soriginals %s%s, %s %s%s", i, what,
                         d->record.has_original ? "" : "none ", sizes_format(&d->record.original, true, b1, sizeof(b1)),
                         model, md->has_orig ? "" : "none ", sizes_format(&md->orig, true, b2, sizeof(b2)));
                return false;
        }
        if (md->has_orig) {
                Sizes t, mt = m_target(md);
                lifecycle_rollback_target(h->e, d, &t);
                if (!sizes_equal(&t, &mt, true)) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: %sthe rollback target is %s, %s %s", i, what,
                                 sizes_format(&t, true, b1, sizeof(b1)), model, sizes_format(&mt, true, b2, sizeof(b2)));
                        return false;
                }
        }
        return true;
}

/* A write that was refused, or not sent, is undone: the device is as it was before the step
 * (`before`), failed. Its originals stay when they were on disk (recorded for the write: the
 * sizes it has), go when they were not (`dropped`). */
static bool check_undone(Run *r, const Model *before, bool dropped) {
        Harness *h = r->s.h;
        char b1[256], b2[256];
        unsigned n = 0;

        for (size_t i = 0; i < N_DEVS; i++) {
                const MDev *md = &before->dev[i];
                Device *d = md->present ? h_dev(h, ifindex_of(i)) : NULL;
                Sizes w;
                if (!d || d->life.state != DEVICE_FAILED)
                        continue;
                n++;
                if (!sizes_equal(&h_link(h, ifindex_of(i))->sizes, &md->cur, true)) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: refused, but the kernel has %s, before %s", i,
                                 sizes_format(&h_link(h, ifindex_of(i))->sizes, true, b1, sizeof(b1)),
                                 sizes_format(&md->cur, true, b2, sizeof(b2)));
                        return false;
                }
                bool orig_ok = md->has_orig ? d->record.has_original && sizes_equal(&d->record.original, &md->orig, true)
                                            : dropped ? !d->record.has_original
                                                      : d->record.has_original && sizes_equal(&d->record.original, &md->cur, true);
                if (!check_records(r, i, d, md, orig_ok, "refused; ", "before"))
                        return false;
                /* the window that ran goes on (a write that gives sizes back ended it itself) */
                bool window = want(&r->m, &r->m.dev[i], &w) && md->in_window;
                if ((d->probation != NULL) != window) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: refused; %s window, before %s", i,
                                 d->probation ? "a" : "no", window ? "one" : "none");
                        return false;
                }
        }
        return true;
}

static ssize_t full_write(void *userdata, int fd, const void *buf, size_t n) {
        errno = ENOSPC;
        return -1;
}

/* The configured policy edited to k and reloaded, on both; the writes it causes are sent, not
 * answered. */
static void edit_and_send(Run *r, unsigned k) {
        r->m.configured = k;
        if (!r->m.trying)
                m_apply_all(&r->m);
        edit(&r->s, k);
        h_dump(r->s.h);
        h_flush(r->s.h);
}

static void do_step(Run *r, const Step *st) {
        Sut *s = &r->s;
        Model *m = &r->m;
        Harness *h = s->h;
        char name[IFNAMSIZ];
        Device *d;

        switch (st->op) {
        case OP_EDIT:
                m->configured = st->a;
                if (!m->trying)
                        m_apply_all(m);
                edit(s, st->a);
                settle(s);
                break;
        case OP_TRY: {
                PolicyErrors errs = {};
                m->trying = true;
                m->tried = st->a;
                m->try_deadline = m->now + st->b * USEC_PER_SEC;
                m_apply_all(m);
                assert_int_equal(policy_try_start(s->t, policy_text[st->a], strlen(policy_text[st->a]), "tried.yaml",
                                                  NULL, st->b * USEC_PER_SEC, &errs),
                                 0);
                settle(s);
                break;
        }
        case OP_CONFIRM:
                m->trying = false;
                m->configured = m->tried;
                m_apply_all(m);
                assert_int_equal(policy_try_confirm(s->t), 0);
                settle(s);
                break;
        case OP_REVERT:
                m->trying = false;
                m_apply_all(m);
                assert_int_equal(policy_try_revert(s->t, TRY_REASON_OPERATOR), 0);
                settle(s);
                break;
        case OP_ADVANCE:
                sut_ticks(s, m, st->a);
                break;
        case OP_ROLLBACK:
        case OP_RETRY:
                for (size_t i = 0; i < N_DEVS; i++) {
                        if (st->a != N_DEVS && st->a != i)
                                continue;
                        MDev *md = &m->dev[i];
                        bool model = st->op == OP_ROLLBACK ? m_roll_back(m, md, false) : m_retry(m, md);
                        d = md->present ? h_dev(h, ifindex_of(i)) : NULL;
                        int k = !d ? -ENODEV : st->op == OP_ROLLBACK ? apply_rollback(h->e, d, NULL) : apply_retry(h->e, d);
                        if (md->present && model != (k >= 0))
                                snprintf(r->why, sizeof(r->why), "dev%zu: %s answered %d, the model says it %s", i,
                                         op_name[st->op], k, model ? "does something" : "has nothing to do");
                }
                h_flush(h);
                h_answer_all(h);
                settle(s);
                break;
        case OP_RESTART:
                m->trying = false;
                for (size_t i = 0; i < N_DEVS; i++)
                        m->dev[i].corr_n = 0;
                m_apply_all(m);
                sut_restart(s, m->configured, true);
                break;
        case OP_KILL: {
                /* a clean state file, then the edit's writes are sent and the daemon is killed */
                assert_int_equal(state_store_save(h->e->state), 0);
                edit_and_send(r, st->a);
                unsigned turn = 0;
                while (h_unanswered(h) > 0) {
                        bool write, picked;
                        Request *q = next_picked(h, st->b, &turn, &write, &picked);
                        if (picked) {
                                h_link_by_id(h, q->link_id)->sizes = q->sizes;
                        } else if (write) {
                                /* not taken: the next run writes again, a new window */
                                for (size_t i = 0; i < N_DEVS; i++)
                                        if (ifindex_of(i) == q->ifindex && m->dev[i].in_window)
                                                m->dev[i].window_end = m->now + WINDOW_USEC;
                        }
                        h->next_answer++;
                }
                m->trying = false;
                for (size_t i = 0; i < N_DEVS; i++)
                        m->dev[i].corr_n = 0;
                m_apply_all(m);
                sut_restart(s, m->configured, false);
                break;
        }
        case OP_OUTSIDE: {
                MDev *md = &m->dev[st->a];
                Sizes x = all4(st->b ? 100000 : 65536), w;
                if (!want(m, md, &w))
                        md->cur = x; /* not bigtcpd's */
                else if (!md->held && !sizes_equal(&x, &md->cur, true)) {
                        if (m->now - md->corr_since > CORRECTION_WINDOW_USEC) {
                                md->corr_since = m->now;
                                md->corr_n = 0;
                        }
                        md->corr_n++;
                }
                h_link_set_sizes(h, ifindex_of(st->a), x);
                settle(s);
                break;
        }
        case OP_RENAME: {
                MDev *md = &m->dev[st->a];
                s->named_in[st->a] = md->in_match = !md->in_match;
                m_apply(m, md);
                sut_name(s, st->a, name, sizeof(name));
                h_link_rename(h, ifindex_of(st->a), name);
                h_flush(h);
                settle(s);
                break;
        }
        case OP_DELETE: {
                MDev *md = &m->dev[st->a];
                if (md->present) {
                        *md = (MDev){};
                        h_link_del(h, ifindex_of(st->a));
                } else {
                        *md = (MDev){.present = true, .in_match = true, .cur = H_LEGACY};
                        s->named_in[st->a] = true;
                        m_apply(m, md);
                        sut_name(s, st->a, name, sizeof(name));
                        h_link_add(h, ifindex_of(st->a), name);
                }
                h_flush(h);
                settle(s);
                break;
        }
        case OP_REFUSE: {
                Model before = *m;
                edit_and_send(r, st->a);
                unsigned turn = 0;
                while (h_unanswered(h) > 0) {
                        bool write, picked;
                        (void) next_picked(h, st->b, &turn, &write, &picked);
                        if (picked)
                                h_answer(h, -EINVAL);
                        else
                                h_answer_kernel(h);
                        h_batch_end(h);
                }
                h_answer_all(h);
                settle(s);
                if (!check_undone(r, &before, false))
                        break;
                for (size_t i = 0; i < N_DEVS; i++) {
                        d = m->dev[i].present ? h_dev(h, ifindex_of(i)) : NULL;
                        if (d && d->life.state == DEVICE_FAILED && apply_retry(h->e, d) < 0)
                                snprintf(r->why, sizeof(r->why), "dev%zu: failed, and retry refused", i);
                }
                h_flush(h);
                h_answer_all(h);
                settle(s);
                break;
        }
        case OP_FULL: {
                static const StateIo full = {.write = full_write};
                Model before = *m;
                state_store_set_io(h->e->state, &full);
                edit_and_send(r, st->a);
                h_answer_all(h);
                settle(s);
                state_store_set_io(h->e->state, NULL);
                if (!check_undone(r, &before, true))
                        break;
                /* room again: the first save that succeeds has them tried again */
                assert_int_equal(state_store_save(h->e->state), 0);
                for (int i = 0; i < 2; i++)
                        (void) event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
                h_flush(h);
                h_answer_all(h);
                settle(s);
                break;
        }
        case OP_LOST: {
                edit_and_send(r, st->a);
                unsigned turn = 0;
                while (h_unanswered(h) > 0) {
                        bool write, picked;
                        Request *q = next_picked(h, st->b, &turn, &write, &picked);
                        if (picked)
                                h_link_by_id(h, q->link_id)->sizes = q->sizes;
                        h->next_answer++;
                }
                /* what the writes did is known again from the links read after the loss */
                sync_netlink_ops.acks_lost(h->s);
                settle(s);
                break;
        }
        case OP_TRIP:
                for (size_t i = 0; i < N_DEVS; i++)
                        if (m->dev[i].present && m->dev[i].in_window)
                                (void) m_roll_back(m, &m->dev[i], true);
                h->ip_in_hdr_errors += 100;
                h_write_snmp(h);
                sut_ticks(s, m, 1);
                settle(s);
                break;
        case _OP_MAX:
                break;
        }
}

static bool check(Run *r) {
        Harness *h = r->s.h;
        char b1[256], b2[256];

        if (r->why[0])
                return false;
        if (h->illegal) {
                snprintf(r->why, sizeof(r->why), "an illegal transition");
                return false;
        }
        for (size_t i = 0; i < N_DEVS; i++) {
                const MDev *md = &r->m.dev[i];
                FakeLink *l = h_link(h, ifindex_of(i));
                Device *d = l ? h_dev(h, ifindex_of(i)) : NULL;
                Sizes w;

                if (!md->present) {
                        if (l) {
                                snprintf(r->why, sizeof(r->why), "dev%zu is there, the model has it gone", i);
                                return false;
                        }
                        continue;
                }
                if (!l || !d) {
                        snprintf(r->why, sizeof(r->why), "dev%zu is gone", i);
                        return false;
                }
                if (!sizes_equal(&l->sizes, &md->cur, true)) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: the kernel has %s, the model %s", i,
                                 sizes_format(&l->sizes, true, b1, sizeof(b1)), sizes_format(&md->cur, true, b2, sizeof(b2)));
                        return false;
                }
                if (d->life.held != md->held) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: held %d, the model %d (state %s)", i, d->life.held, md->held,
                                 device_state_to_string(d->life.state));
                        return false;
                }
                bool orig_ok = d->record.has_original == md->has_orig &&
                               (!md->has_orig || sizes_equal(&d->record.original, &md->orig, true));
                if (!check_records(r, i, d, md, orig_ok, "", "the model"))
                        return false;
                DeviceState want_state = md->held                 ? DEVICE_ROLLED_BACK
                                         : !want(&r->m, md, &w)  ? DEVICE_UNMANAGED
                                         : md->in_window         ? DEVICE_PROBATION
                                                                 : DEVICE_APPLIED;
                if (d->life.state != want_state) {
                        snprintf(r->why, sizeof(r->why), "dev%zu: %s, the model says %s", i,
                                 device_state_to_string(d->life.state), device_state_to_string(want_state));
                        return false;
                }
        }
        return true;
}

/* Runs the steps (those the model cannot take are skipped); the index of the first step after
 * which the check fails, or -1. */
static ssize_t run(const Step *steps, size_t n, unsigned configured, bool verbose) {
        Run *r = calloc(1, sizeof(Run));
        ssize_t failed = -1;
        char buf[256];

        assert_non_null(r);
        r->m.configured = configured;
        r->m.now = H_START_USEC;
        for (size_t i = 0; i < N_DEVS; i++)
                r->m.dev[i] = (MDev){.present = true, .in_match = true, .cur = H_LEGACY};
        m_apply_all(&r->m);
        sut_new(&r->s, configured);
        if (!check(r))
                failed = 0;
        for (size_t i = 0; failed < 0 && i < n; i++) {
                if (!step_valid(&r->m, &steps[i]))
                        continue;
                do_step(r, &steps[i]);
                if (verbose) {
                        step_format(&steps[i], buf, sizeof(buf));
                        print_message("  %2zu. %s\n", i + 1, buf);
                }
                if (!check(r))
                        failed = (ssize_t) i;
        }
        if (failed >= 0 && verbose)
                print_message("  → %s\n", r->why);
        sut_free(&r->s);
        free(r);
        return failed;
}

static void generate(uint64_t seed, Step *steps, size_t n) {
        uint64_t x = seed;
        for (size_t i = 0; i < n; i++) {
                Step *s = &steps[i];
                unsigned w = rng(&x, 100);
                s->op = w < 14   ? OP_EDIT
                        : w < 26 ? OP_TRY
                        : w < 32 ? OP_CONFIRM
                        : w < 37 ? OP_REVERT
                        : w < 55 ? OP_ADVANCE
                        : w < 63 ? OP_ROLLBACK
                        : w < 69 ? OP_RETRY
                        : w < 73 ? OP_RESTART
                        : w < 76 ? OP_KILL
                        : w < 82 ? OP_OUTSIDE
                        : w < 87 ? OP_RENAME
                        : w < 90 ? OP_DELETE
                        : w < 94 ? OP_TRIP
                        : w < 96 ? OP_REFUSE
                        : w < 98 ? OP_LOST
                                 : OP_FULL;
                switch (s->op) {
                case OP_EDIT:
                case OP_KILL:
                case OP_REFUSE:
                case OP_FULL:
                case OP_LOST:
                        s->a = rng(&x, 8) == 0 ? 0 : 1 + rng(&x, N_POLICIES - 1);
                        s->b = rng(&x, 4);
                        break;
                case OP_TRY:
                        s->a = rng(&x, 8) == 0 ? 0 : 1 + rng(&x, N_POLICIES - 1);
                        s->b = 1 + rng(&x, 5);
                        break;
                case OP_ADVANCE:
                        s->a = 1 + rng(&x, 20);
                        break;
                case OP_ROLLBACK:
                case OP_RETRY:
                        s->a = rng(&x, N_DEVS + 1);
                        break;
                case OP_OUTSIDE:
                        s->a = rng(&x, N_DEVS);
                        s->b = rng(&x, 2);
                        break;
                case OP_RENAME:
                case OP_DELETE:
                        s->a = rng(&x, N_DEVS);
                        break;
                default:
                        break;
                }
        }
}

static unsigned env_unsigned(const char *name, unsigned def) {
        const char *v = getenv(name);
        return v && *v ? (unsigned) strtoul(v, NULL, 0) : def;
}

/* Delete steps (halves first, then one at a time) while it still fails; the shortest is printed. */
static void shrink_and_report(uint64_t seed, Step *steps, size_t n, unsigned configured) {
        Step *cur = calloc(n, sizeof(Step)), *trial = calloc(n, sizeof(Step));
        size_t len = n;

        assert_non_null(cur);
        assert_non_null(trial);
        memcpy(cur, steps, n * sizeof(Step));
        ssize_t f = run(cur, len, configured, false);
        len = (size_t) f + 1; /* what follows the failure does not matter */
        for (size_t chunk = len / 2; chunk >= 1; chunk /= 2) {
                for (size_t at = 0; at + chunk <= len;) {
                        size_t m = 0;
                        for (size_t i = 0; i < len; i++)
                                if (i < at || i >= at + chunk)
                                        trial[m++] = cur[i];
                        ssize_t g = run(trial, m, configured, false);
                        if (g >= 0) {
                                memcpy(cur, trial, m * sizeof(Step));
                                len = (size_t) g + 1;
                        } else
                                at++;
                }
                if (chunk == 1)
                        break;
        }
        print_message("seed %llu fails; the shortest sequence found (%zu steps, configured policy %u, two devices "
                      "eth0 eth1 at 65536):\n",
                      (unsigned long long) seed, len, policy_size[configured]);
        (void) run(cur, len, configured, true);
        print_message("rerun with BIGTCPD_MODEL_SEED=%llu\n", (unsigned long long) seed);
        free(cur);
        free(trial);
}

static void test_model(void **state) {
        unsigned n_seeds = env_unsigned("BIGTCPD_MODEL_SEEDS", MODEL_SEEDS);
        unsigned n_steps = env_unsigned("BIGTCPD_MODEL_STEPS", MODEL_STEPS);
        const char *only = getenv("BIGTCPD_MODEL_SEED");
        Step *steps = calloc(n_steps, sizeof(Step));
        unsigned failures = 0;

        assert_non_null(steps);
        make_policies();
        /* thousands of runs: their errors only (a BUG line among them) */
        log_max_level = getenv("BIGTCPD_MODEL_LOG") ? LOG_DEBUG : LOG_ERR;
        for (unsigned i = 0; i < n_seeds && failures == 0; i++) {
                uint64_t seed = only && *only ? strtoull(only, NULL, 0) : i + 1;
                uint64_t x = seed ^ 0x5eed;
                unsigned configured = 1 + rng(&x, N_POLICIES - 1);
                generate(seed, steps, n_steps);
                if (run(steps, n_steps, configured, false) >= 0) {
                        shrink_and_report(seed, steps, n_steps, configured);
                        failures++;
                }
                if (only && *only)
                        break;
        }
        free(steps);
        assert_int_equal(failures, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_model, h_teardown),
        };
        /* thousands of runs, each saving its state file many times: on a tmpfs an fsync costs
         * nothing */
        h_tmpdir = "/dev/shm";
        return cmocka_run_group_tests(tests, NULL, NULL);
}
