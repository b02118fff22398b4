/* What rlimit_as_reuse.c and rlimit_as_across.c share: the limit lowered to what the process
 * maps now plus some MiB (limit_to_vmsize_plus), and the limit filled with blocks of one size,
 * each touched, until malloc fails, then all freed (fill_and_free). */
#ifndef EBBTIDE_TEST_FILL_LIMIT_H
#define EBBTIDE_TEST_FILL_LIMIT_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vmsize.h"

/* Lowers RLIMIT_AS to VmSize plus `mib` MiB; 0, or -1 (said on stderr) if refused. */
static int limit_to_vmsize_plus(rlim_t mib) {
    rlim_t limit = ((rlim_t)vmsize_kib() << 10) + (mib << 20);
    struct rlimit r = {limit, limit};
    if (setrlimit(RLIMIT_AS, &r) != 0) {
        perror("setrlimit");
        return -1;
    }
    return 0;
}

/* Blocks of `size` (at least a pointer) until malloc fails, each touched (its first 4 KiB),
 * then all freed; how many there were. */
static size_t fill_and_free(size_t size) {
    void **kept = 0;
    size_t n = 0;
    for (;;) {
        void **p = malloc(size);
        if (!p)
            break;
        memset(p, 1, size < 4096 ? size : 4096);
        *p = kept;
        kept = p;
        n++;
    }
    while (kept) {
        void **next = *kept;
        free(kept);
        kept = next;
    }
    return n;
}
#endif
