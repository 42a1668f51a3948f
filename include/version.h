/* version.h — bigtcpd's version: meson.build's project() version, with the git description of
 * builds between releases (0.2.0~git20261201.196.bff9c03; scripts/version.sh). Defined in the
 * version.c that the build generates, so that a new commit rebuilds one file. */
#pragma once

extern const char bigtcpd_version[];
