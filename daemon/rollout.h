/* rollout.h — staged rollouts: for each policy with `rollout.max-parallel`, which of its devices
 * hold one of its slots (written, or in probation), which wait for one, and whether a rollback
 * halted it. The decision "may this write go now?" is rollout_check(), pure; the rest is
 * bookkeeping that the lifecycle calls on its transitions. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "device.h"
#include "policy.h"

typedef struct Rollout {
        char *policy;
        unsigned max_parallel;
        uint64_t sizes_digest; /* of the policy's sizes: a halt lasts while they stay the same */
        unsigned active;       /* devices holding a slot */
        unsigned waiting;
        TAILQ_HEAD(RolloutDevices, Device) waiting_list; /* in the order they asked */
        struct RolloutDevices active_list;
        bool halted;
        char *halted_by; /* the device whose rollback halted it */
        int halted_by_ifindex;
} Rollout;

typedef struct RolloutTable {
        Rollout **items;
        size_t n;
} RolloutTable;

typedef enum RolloutVerdict {
        ROLLOUT_GO,      /* it holds a slot, or one is free */
        ROLLOUT_NO_SLOT, /* every slot is taken */
        ROLLOUT_HALTED,  /* a rollback halted this policy's rollout */
        _ROLLOUT_VERDICT_MAX,
        _ROLLOUT_VERDICT_INVALID = -EINVAL,
} RolloutVerdict;

const char *rollout_verdict_to_string(RolloutVerdict v);

/* After a policy change: one rollout per policy that has max-parallel, keeping the slots, the
 * waiting devices and the halt of each policy whose name and sizes stay the same. Devices of a
 * rollout that is gone are detached from it. */
int rollout_table_update(RolloutTable *t, const PolicySet *set);
void rollout_table_done(RolloutTable *t);
Rollout *rollout_find(const RolloutTable *t, const char *policy);

/* May `d` be written now under `r`? Pure. */
RolloutVerdict rollout_check(const Rollout *r, const Device *d);
static inline bool rollout_is_halted(const Rollout *r) {
        return r->halted;
}

/* d takes a slot of r (leaving r's waiting list if it was on it). -ENOMEM: no memory for its
 * place (Device.rollout), and d is in no rollout. */
int rollout_take_slot(Rollout *r, Device *d);
/* d waits for a slot of r (at the end of the list; where it is if it waits already). -ENOMEM as
 * rollout_take_slot(). */
int rollout_wait(Rollout *r, Device *d);
/* d gives its slot back and goes to the head of the line: a write stopped by a halt keeps its
 * turn. -ENOMEM as rollout_take_slot(), never for a device that is in a rollout already. */
int rollout_wait_first(Rollout *r, Device *d);
/* d gives up its slot or its place in the line. Returns true when a slot was freed. */
bool rollout_leave(Device *d);
/* The first waiting device, when a slot is free and r is not halted. */
Device *rollout_next(const Rollout *r);

void rollout_halt(Rollout *r, const Device *by);
void rollout_resume(Rollout *r);
