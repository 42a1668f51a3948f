/* pager.h — long output through a pager on a terminal, as systemd's tools do. */
#pragma once

#include <stdbool.h>

/* Starts the pager when `enabled` and stdout is a terminal (not TERM=dumb): the command from $SYSTEMD_PAGER,
 * else $PAGER, else less (then more); "" or "cat" means none. less gets LESS=FRXMK unless $LESS
 * is set (it quits when the text fits one screen, and keeps colours), and LESSCHARSET=utf-8 in a
 * UTF-8 locale (`utf8`) unless that is set. Nothing when no pager
 * starts: the output goes to the terminal as it would have. */
void pager_open(bool enabled, bool utf8);
/* Closes stdout into the pager and waits for it to exit. Nothing when none runs. */
void pager_close(void);
