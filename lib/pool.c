/* pool.c — fixed-size records in blocks aligned to POOL_BLOCK_SIZE, so that a record finds its
 * block from its address. A block at that size is above the mmap threshold (main.c): a mapping
 * of its own, returned when it is freed. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void) (p), (void) (n))
#define UNPOISON(p, n) ((void) (p), (void) (n))
#endif

#define POOL_BLOCK_SIZE (64u * 1024u)

/* A free slot: the next one. */
typedef struct Slot {
        struct Slot *next;
} Slot;

struct PoolBlock {
        PoolBlock *next, *prev; /* among the pool's blocks with room */
        Slot *free;
        unsigned used, fresh; /* records given out; slots never given out yet */
        bool listed;
};

#define HEAD ((sizeof(PoolBlock) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * _Alignof(max_align_t))

static size_t per_block(const Pool *p) {
        return (POOL_BLOCK_SIZE - HEAD) / p->size;
}

static unsigned char *slots(PoolBlock *b) {
        return (unsigned char *) b + HEAD;
}

static void block_list(Pool *p, PoolBlock *b) {
        b->prev = NULL;
        b->next = p->with_room;
        if (b->next)
                b->next->prev = b;
        p->with_room = b;
        b->listed = true;
}

static void block_unlist(Pool *p, PoolBlock *b) {
        if (b->prev)
                b->prev->next = b->next;
        else
                p->with_room = b->next;
        if (b->next)
                b->next->prev = b->prev;
        b->listed = false;
}

static void block_reset(const Pool *p, PoolBlock *b) {
        *b = (PoolBlock){.fresh = (unsigned) per_block(p)};
        POISON(slots(b), per_block(p) * p->size);
}

/* The pages of a block kept empty go back to the kernel, its mapping stays for the next records
 * (they fault in as they are taken, zeroed): the last block of a burst would otherwise stay
 * resident with nothing in it, one for each kind of record (64 KiB each: 0.3 MB at 10000
 * applied devices, their writes', windows' and evidence's pools). */
static void block_release_pages(PoolBlock *b) {
        uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        uintptr_t from = ((uintptr_t) b + HEAD + page - 1) & ~(page - 1), to = (uintptr_t) b + POOL_BLOCK_SIZE;

        if (page > 0 && from < to)
                (void) madvise((void *) from, to - from, MADV_DONTNEED);
}

void *pool_alloc(Pool *p) {
        PoolBlock *b = p->with_room;
        void *x;

        if (!b) {
                b = p->empty;
                p->empty = NULL;
                if (!b) {
                        b = aligned_alloc(POOL_BLOCK_SIZE, POOL_BLOCK_SIZE);
                        if (!b) {
                                errno = ENOMEM;
                                return NULL;
                        }
                        block_reset(p, b);
                }
                block_list(p, b);
        }
        if (b->free) {
                x = b->free;
                UNPOISON(x, p->size);
                b->free = b->free->next;
        } else {
                x = slots(b) + (per_block(p) - b->fresh--) * p->size;
                UNPOISON(x, p->size);
        }
        b->used++;
        if (!b->free && b->fresh == 0)
                block_unlist(p, b);
        memset(x, 0, p->size);
        return x;
}

void pool_free(Pool *p, void *x) {
        if (!x)
                return;
        PoolBlock *b = (PoolBlock *) ((uintptr_t) x & ~(uintptr_t) (POOL_BLOCK_SIZE - 1));
        Slot *s = x;

        s->next = b->free;
        b->free = s;
        POISON(x, p->size);
        if (!b->listed)
                block_list(p, b);
        if (--b->used > 0)
                return;
        block_unlist(p, b);
        free(p->empty);
        block_reset(p, b); /* its slots are taken again from the start */
        block_release_pages(b);
        p->empty = b;
}

void pool_done(Pool *p) {
        free(p->empty);
        p->empty = NULL;
}
