/* rlimit_as_reuse: lowers its RLIMIT_AS to what it maps now plus 64 MiB, fills it with 4 KiB
 * blocks (each touched) until malloc fails, frees them all, then asks for blocks of sizes it
 * never used before (8 bytes to 2 KiB): under any malloc the memory just freed serves them.
 * Prints "reuse ok (N blocks)" or the first size that failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fill_limit.h"

int main(void) {
    if (limit_to_vmsize_plus(64) != 0)
        return 2;
    size_t n = fill_and_free(4096);
    static void *again[64];
    size_t k = 0;
    for (size_t s = 8; s <= 2048 && k < 64; s += s / 4 + 8) {
        unsigned char *p = malloc(s);
        if (!p) {
            printf("reuse failed at %zu bytes (%zu blocks before)\n", s, n);
            return 1;
        }
        memset(p, 0x5a, s);
        again[k++] = p;
    }
    while (k)
        free(again[--k]);
    printf("reuse ok (%zu blocks)\n", n);
    return 0;
}
