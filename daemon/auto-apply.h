/* auto-apply.h — the engine's side of `auto` (bigtcpd.yaml(5) AUTO): one search (auto-size.h) for
 * each size of a device its policy sets to `auto`, its bounds resolved for the device, the
 * searches' targets put into what the policy asks, the watches that show a device busy, and what
 * probation windows and their evidence say fed back. apply.c calls it at its branches and owns the
 * timer and the event watch; nothing here writes or reconciles. */
#pragma once

#include "auto-size.h"
#include "engine.h"
#include "reconcile.h"


/* What d's searches would be under `p` at `now_usec` (CLOCK_REALTIME), without doing it: in `ret`
 * a copy of d's searches, begun where `p` moves their bounds or d has none, aged where their time
 * came (auto_apply_desired() takes it; Plan shows it). `owned`: the sizes the policy owns on d
 * (Desired.owned). Returns the sizes searched (SizeMask); ret_changed (may be NULL): those that
 * began or moved on. */
unsigned auto_apply_preview(const Device *d, const Policy *p, unsigned owned, bool ipv4, uint64_t now_usec,
                            AutoSearches *ret, unsigned *ret_changed);
/* What `p` asks of `d` (compute_desired()'s `want`): each size set to `auto` gets its search's
 * target; a search begins (again) when its bounds are new. A device that no longer has any loses
 * its searches. */
void auto_apply_desired(Engine *e, Device *d, const Policy *p, Desired *want);
/* No policy wants `d`, or none sets a size of it to `auto`: its searches end (what they proved
 * stays in its record: a search that begins again starts there). */
void auto_apply_none(Engine *e, Device *d);
/* `d` is at its policy's sizes: a search waiting for traffic gets a watch of the proven sizes (as
 * long as the policy's window). Counting off or full: the search waits as if idle. */
void auto_apply_at_policy(Engine *e, Device *d, const Policy *p);
/* A probation window began (its evidence watch too): the searches count from now what proves a
 * step or shows the device busy. */
void auto_apply_window_begins(Engine *e, Device *d);
/* d goes away: what it counted elsewhere (its peer's deliveries) stops. */
void auto_apply_gone(Engine *e, Device *d);
/* The window passed: each step is proven on its packets or not. True when a target changed. */
bool auto_apply_passed(Engine *e, Device *d);
/* A guard tripped: each step is a ceiling. True when some size was stepping (the trip is the
 * search's answer: it halts no rollout). */
bool auto_apply_tripped(Engine *e, Device *d, const RollbackRecord *why);
/* An operator rolled d back: a step ends as a trip by "operator" would (the size tried is the
 * search's ceiling until it ages: the operator's verdict on it), back at the proven size. In
 * `held`, the sizes d is held against, each that stepped is put at its search's target now. True
 * when a step ended. */
bool auto_apply_rolled_back(Engine *e, Device *d, Sizes *held);
/* d's watch ended (EVENT_EVIDENCE): the search's own watch says busy or idle. True when a target
 * changed. */
bool auto_apply_watch_ended(Engine *e, Device *d);
/* Time passed: ceilings age, idle waits end. True when d's search changed. */
bool auto_apply_tick(Engine *e, Device *d);
/* When the next tick is due for d (CLOCK_REALTIME), UINT64_MAX for never. */
uint64_t auto_apply_due(const Device *d);

/* "auto: …" for each size searched, in `buf` one after the other ("; "). NULL without a search. */
const char *auto_apply_format(const Engine *e, const Device *d, char *buf, size_t size);
