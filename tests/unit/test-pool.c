/* test-pool.c — the records' pool: zeroed records, a block per 64 KiB, and a block left with none
 * in it kept for the next records without its pages resident (mincore(2) says which are). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "pool.h"

#define BLOCK (64u * 1024u)

typedef struct Rec {
        unsigned char bytes[256];
} Rec;

/* Resident pages of the block of `x`, past its first (its head's). */
static size_t resident(const void *x) {
        size_t page = (size_t) sysconf(_SC_PAGESIZE), n = BLOCK / page - 1, k = 0;
        uintptr_t block = (uintptr_t) x & ~(uintptr_t) (BLOCK - 1);
        unsigned char vec[BLOCK / 4096];

        assert_int_equal(mincore((void *) (block + page), n * page, vec), 0);
        for (size_t i = 0; i < n; i++)
                k += vec[i] & 1;
        return k;
}

static void test_an_empty_block_keeps_no_pages(void **state) {
        static Pool pool = POOL_INIT(Rec);
        Rec *r[200];

        (void) state;
        for (size_t i = 0; i < 200; i++) {
                r[i] = pool_alloc(&pool);
                assert_non_null(r[i]);
                for (size_t j = 0; j < sizeof(r[i]->bytes); j++)
                        assert_int_equal(r[i]->bytes[j], 0);
                memset(r[i]->bytes, 0xa5, sizeof(r[i]->bytes));
        }
        /* 200 records of 256 bytes: one block, its first 12 pages or so written */
        assert_true(resident(r[0]) >= 10);
        for (size_t i = 1; i < 200; i++)
                assert_int_equal((uintptr_t) r[i] & ~(uintptr_t) (BLOCK - 1), (uintptr_t) r[0] & ~(uintptr_t) (BLOCK - 1));
        const void *block_of = r[0];
        for (size_t i = 0; i < 200; i++)
                pool_free(&pool, r[i]);
        /* kept for the next records, with none of its pages */
        assert_int_equal(resident(block_of), 0);
        Rec *again = pool_alloc(&pool);
        assert_int_equal((uintptr_t) again & ~(uintptr_t) (BLOCK - 1), (uintptr_t) block_of & ~(uintptr_t) (BLOCK - 1));
        for (size_t j = 0; j < sizeof(again->bytes); j++)
                assert_int_equal(again->bytes[j], 0);
        pool_free(&pool, again);
        pool_done(&pool);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_empty_block_keeps_no_pages),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
