/* rlimit_as_across: lowers RLIMIT_AS to what it maps now plus 64 MiB, fills it with blocks of
 * one size until malloc fails, frees them all, then asks for blocks of other sizes: first
 * small to large (filled with 64-byte blocks, then 4000 of 4 KiB and 16 of 1 MiB), then large
 * to small (filled with 256 KiB blocks, then 150 000 of 64 bytes and 4000 of 4 KiB). Under
 * glibc, mimalloc and tcmalloc the address space just freed serves them. Prints "across ok
 * (N, M blocks)" or what failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fill_limit.h"

/* Takes `count` blocks of `size` (each touched), then frees them; 0 if all came. */
static int take(size_t size, size_t count) {
    void **kept = 0;
    size_t got = 0;
    for (; got < count; got++) {
        void **p = malloc(size);
        if (!p)
            break;
        memset(p, 0x5a, size);
        *p = kept;
        kept = p;
    }
    while (kept) {
        void **next = *kept;
        free(kept);
        kept = next;
    }
    if (got < count) {
        printf("got %zu of %zu blocks of %zu bytes\n", got, count, size);
        return 1;
    }
    return 0;
}

int main(void) {
    if (limit_to_vmsize_plus(64) != 0)
        return 2;
    size_t up = fill_and_free(64);
    if (take(4096, 4000) || take(1 << 20, 16))
        return 1;
    size_t down = fill_and_free(256 << 10);
    if (take(64, 150000) || take(4096, 4000))
        return 1;
    printf("across ok (%zu, %zu blocks)\n", up, down);
    return 0;
}
