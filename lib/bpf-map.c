/* bpf-map.c — bpf(2)'s map commands, each attribute set only as far as the command reads it. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bpf-map.h"

#define ATTR_SIZE(member) (offsetof(union bpf_attr, member) + sizeof(((union bpf_attr *) 0)->member))

static uint64_t ptr(const void *p) {
        return (uint64_t) (uintptr_t) p;
}

static int sys_bpf(int cmd, union bpf_attr *attr, size_t size) {
        long r = syscall(SYS_bpf, cmd, attr, size);
        return r < 0 ? -errno : (int) r;
}

int bpf_map_fd_lookup(int fd, const void *key, void *value) {
        union bpf_attr attr;

        memset(&attr, 0, sizeof(attr));
        attr.map_fd = (uint32_t) fd;
        attr.key = ptr(key);
        attr.value = ptr(value);
        return sys_bpf(BPF_MAP_LOOKUP_ELEM, &attr, ATTR_SIZE(flags));
}

int bpf_map_fd_update(int fd, const void *key, const void *value, uint64_t flags) {
        union bpf_attr attr;

        memset(&attr, 0, sizeof(attr));
        attr.map_fd = (uint32_t) fd;
        attr.key = ptr(key);
        attr.value = ptr(value);
        attr.flags = flags;
        return sys_bpf(BPF_MAP_UPDATE_ELEM, &attr, ATTR_SIZE(flags));
}

int bpf_map_fd_delete(int fd, const void *key) {
        union bpf_attr attr;

        memset(&attr, 0, sizeof(attr));
        attr.map_fd = (uint32_t) fd;
        attr.key = ptr(key);
        return sys_bpf(BPF_MAP_DELETE_ELEM, &attr, ATTR_SIZE(flags));
}

int bpf_map_fd_lookup_batch(int fd, const void *in, void *out, void *keys, void *values, uint32_t *count) {
        union bpf_attr attr;
        int r;

        memset(&attr, 0, sizeof(attr));
        attr.batch.in_batch = ptr(in);
        attr.batch.out_batch = ptr(out);
        attr.batch.keys = ptr(keys);
        attr.batch.values = ptr(values);
        attr.batch.count = *count;
        attr.batch.map_fd = (uint32_t) fd;
        r = sys_bpf(BPF_MAP_LOOKUP_BATCH, &attr, ATTR_SIZE(batch));
        /* the kernel says how many it copied, also with -ENOENT (the last of them) */
        *count = attr.batch.count;
        return r < 0 ? r : 0;
}

int bpf_map_fd_info(int fd, struct bpf_map_info *ret) {
        union bpf_attr attr;

        memset(&attr, 0, sizeof(attr));
        memset(ret, 0, sizeof(*ret));
        attr.info.bpf_fd = (uint32_t) fd;
        attr.info.info_len = sizeof(*ret);
        attr.info.info = ptr(ret);
        return sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr, ATTR_SIZE(info));
}
