/* bigtcpctl-status.h — `bigtcpctl status`. */
#pragma once

#include "bigtcpctl-util.h"

int verb_status(Ctl *c, char **args, size_t n);
