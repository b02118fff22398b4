/* rlimit_as_reuse: lowers its RLIMIT_AS to what it maps now plus 64 MiB, fills it with 4 KiB
 * blocks (each touched) until malloc fails, frees them all, then asks for blocks of sizes it
 * never used before (8 bytes to 2 KiB): under any malloc the memory just freed serves them.
 * Prints "reuse ok (N blocks)" or the first size that failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vmsize.h"

int main(void) {
    rlim_t limit = ((rlim_t)vmsize_kib() << 10) + ((rlim_t)64 << 20);
    struct rlimit r = {limit, limit};
    if (setrlimit(RLIMIT_AS, &r) != 0) {
        perror("setrlimit");
        return 2;
    }
    void **kept = 0;
    size_t n = 0;
    for (;;) {
        void **p = malloc(4096);
        if (!p)
            break;
        memset(p, 1, 4096);
        *p = kept;
        kept = p;
        n++;
    }
    while (kept) {
        void **next = *kept;
        free(kept);
        kept = next;
    }
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
