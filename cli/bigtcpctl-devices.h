/* bigtcpctl-devices.h — `bigtcpctl list` and `bigtcpctl show DEV`. */
#pragma once

#include "bigtcpctl-util.h"

int verb_list(Ctl *c, char **args, size_t n);
int verb_show(Ctl *c, char **args, size_t n);
