/* bigtcpctl-try.h — trying a policy: try, confirm, revert. */
#pragma once

#include "bigtcpctl-util.h"

int verb_try(Ctl *c, char **args, size_t n);
int verb_confirm(Ctl *c, char **args, size_t n);
int verb_revert(Ctl *c, char **args, size_t n);
