/* pool.h — records of one size that thousands of devices have at once (the devices themselves,
 * their writes, their probations), kept in blocks of their own instead of the heap. A burst makes
 * ten thousand of them among short-lived buffers of every size; from the heap, what the burst
 * leaves behind keeps the pages of its holes resident. A block whose records are all gone is
 * freed (one empty block is kept per pool, so that a record coming and going does not allocate
 * and free a block each time). Free slots are poisoned for AddressSanitizer. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct PoolBlock PoolBlock;

typedef struct Pool {
        size_t size; /* of one record, a multiple of its alignment (which divides the block head's) */
        PoolBlock *with_room;
        PoolBlock *empty;
} Pool;

/* A pool of records of `n` bytes aligned to `align` (a power of two, at least a pointer's: a free
 * slot holds one); of `type`s. */
#define POOL_ALIGN(align) ((align) > _Alignof(void *) ? (align) : _Alignof(void *))
#define POOL_INIT_SIZE(n, align) {.size = ((n) + POOL_ALIGN(align) - 1) / POOL_ALIGN(align) * POOL_ALIGN(align)}
#define POOL_INIT(type) POOL_INIT_SIZE(sizeof(type), _Alignof(type))

/* A zeroed record; NULL (errno ENOMEM) without memory. */
void *pool_alloc(Pool *p);
/* Back to its pool (the one it came from); NULL is a no-op. */
void pool_free(Pool *p, void *x);
/* Frees the pool's empty block (at exit: nothing is left in use). */
void pool_done(Pool *p);
