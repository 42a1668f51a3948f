/* bigtcpctl-policy.h — the verbs about the policy: plan, validate, reload. */
#pragma once

#include "bigtcpctl-util.h"

int verb_plan(Ctl *c, char **args, size_t n);
int verb_validate(Ctl *c, char **args, size_t n);
int verb_reload(Ctl *c, char **args, size_t n);
