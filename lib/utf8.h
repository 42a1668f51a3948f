/* utf8.h — strings from the kernel (device names, extended acks) and from files are bytes; D-Bus
 * and JSON want UTF-8. One repair for both transports. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence at `s`, 0 if it is not one. */
size_t utf8_sequence(const unsigned char *s);
bool utf8_is_valid(const char *s);
/* `s` when it is valid UTF-8, else a copy in *buf with every bad byte as '?' (NULL: out of
 * memory). NULL `s` is "". */
const char *utf8_safe(const char *s, char **buf);
