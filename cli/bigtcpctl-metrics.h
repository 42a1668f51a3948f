/* bigtcpctl-metrics.h — `bigtcpctl metrics`. */
#pragma once

#include "bigtcpctl-util.h"

int verb_metrics(Ctl *c, char **args, size_t n);
