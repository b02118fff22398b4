/* rlimit_as_realloc: lowers RLIMIT_AS to what it maps now plus 64 MiB, fills it with 64-byte
 * blocks until malloc fails and frees them all, then grows one buffer with realloc (by half
 * each time, each step written) until realloc fails, twice. Under glibc and mimalloc the buffer
 * reaches 43 MiB both times (the next step, 65 MiB, is beyond the limit). Prints "realloc ok
 * (A, B MiB)" when each reached at least 36 MiB, or what failed. Before ebbtide's huge realloc
 * answered a refused mremap (the size classes' empty chunks unmapped, then once more), the
 * growth stopped at 29 MiB, where the freed small blocks' chunks still held address space. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fill_limit.h"

/* Grows a buffer by half with realloc until it fails; its last size in MiB. */
static size_t grow(void) {
    char *a = NULL;
    size_t cap = 0;
    for (;;) {
        size_t nc = cap ? cap + cap / 2 : 4096;
        char *b = realloc(a, nc);
        if (!b)
            break;
        memset(b + cap, 7, nc - cap);
        a = b;
        cap = nc;
    }
    for (size_t i = 0; i < cap; i += 4096)
        if (a[i] != 7) {
            printf("realloc lost the contents at %zu\n", i);
            exit(1);
        }
    free(a);
    return cap >> 20;
}

int main(void) {
    if (limit_to_vmsize_plus(64) != 0)
        return 2;
    size_t small = fill_and_free(64);
    size_t first = grow(), second = grow();
    if (first < 36 || second < 36) {
        printf("the buffer reached %zu then %zu MiB (after %zu blocks of 64 bytes)\n", first,
               second, small);
        return 1;
    }
    printf("realloc ok (%zu, %zu MiB)\n", first, second);
    return 0;
}
