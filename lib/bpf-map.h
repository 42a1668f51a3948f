/* bpf-map.h — a BPF map's entries through bpf(2) itself, by its descriptor: what the daemon does
 * with maps another process made (the observer's loader, which alone links libbpf) and handed
 * over. Each returns 0 or -errno (-ENOENT: no such entry, or no more of them). */
#pragma once

#include <linux/bpf.h>
#include <stdint.h>

int bpf_map_fd_lookup(int fd, const void *key, void *value);
int bpf_map_fd_update(int fd, const void *key, const void *value, uint64_t flags);
int bpf_map_fd_delete(int fd, const void *key);
/* Up to *count entries after the position `in` (NULL: from the start) into `keys` and `values`,
 * their number in *count and the next position in `out` (a hash map's is 4 bytes); -ENOENT with
 * the last of them. */
int bpf_map_fd_lookup_batch(int fd, const void *in, void *out, void *keys, void *values, uint32_t *count);
/* What the kernel says of the map: its type, key and value sizes, room. */
int bpf_map_fd_info(int fd, struct bpf_map_info *ret);
