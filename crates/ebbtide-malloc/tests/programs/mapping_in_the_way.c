/* mapping_in_the_way SIZE: another mapping placed right after the mapping that holds the
 * newest block (as libc-test's malloc-brk-fail, a JIT or a MAP_FIXED_NOREPLACE user can), then
 * 4000 blocks of SIZE: malloc must not fail while address space remains elsewhere. Prints
 * "in the way ok" or which malloc failed. Before, ebbtide failed the third malloc(10000), the
 * first malloc(40000) and the eleventh malloc(4096) with ENOMEM: its keg tried the pages the
 * other mapping held again and again (glibc, jemalloc, mimalloc, tcmalloc: all served). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The mapping of /proc/self/maps that holds `a`: 1 and its bounds, or 0. */
static int mapping_of(uintptr_t a, uintptr_t *lo, uintptr_t *hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx", &s, &e) == 2 && a >= s && a < e) {
            *lo = s;
            *hi = e;
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    size_t sz = argc > 1 ? strtoul(argv[1], 0, 0) : 10000;
    void *a = malloc(sz);
    uintptr_t lo, hi, nlo, nhi;
    if (!a || !mapping_of((uintptr_t)a, &lo, &hi)) {
        puts("setup failed");
        return 2;
    }
    /* From the end of that mapping up to the next one (at most 64 MiB). */
    size_t squat = 64 << 20;
    for (uintptr_t x = hi; x < hi + squat; x += 4096)
        if (mapping_of(x, &nlo, &nhi)) {
            squat = x - hi;
            break;
        }
    if (squat == 0) {
        puts("in the way ok (nothing free after the block's mapping)");
        return 0;
    }
    void *q = mmap((void *)hi, squat, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (q != (void *)hi) {
        printf("setup failed: the mapping after %#lx went elsewhere\n", (unsigned long)hi);
        return 2;
    }
    for (int i = 0; i < 4000; i++) {
        errno = 0;
        char *p = malloc(sz);
        if (!p) {
            printf("malloc(%zu) #%d returned NULL (%s) with address space free elsewhere\n", sz, i,
                   strerror(errno));
            return 1;
        }
        memset(p, 1, 64);
    }
    printf("in the way ok (%zu)\n", sz);
    return 0;
}
