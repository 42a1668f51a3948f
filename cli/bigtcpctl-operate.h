/* bigtcpctl-operate.h — the operator's verbs on devices: rollback, retry. */
#pragma once

#include "bigtcpctl-util.h"

int verb_rollback(Ctl *c, char **args, size_t n);
int verb_retry(Ctl *c, char **args, size_t n);
