/* bigtcpctl-monitor.h — `bigtcpctl monitor`. */
#pragma once

#include "bigtcpctl-util.h"

int verb_monitor(Ctl *c, char **args, size_t n);
