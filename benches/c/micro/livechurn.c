/* livechurn: mallocbench's live_big loop taken apart, to see which of its steps a malloc makes
 * slow (docs/benchmarks.md, "Statics without the GOT").
 *
 *   cc -O2 -o /tmp/livechurn benches/c/micro/livechurn.c
 *   LD_PRELOAD=LIB /tmp/livechurn CHECK STAMP
 *
 * 200,000 live blocks of 16-512 B (the sizes live_big draws), then 3 M replacements of a
 * random one: read its first and last byte (CHECK 1), free it, allocate a block of a random
 * size, write its first and last byte (STAMP 1). Prints "check C stamp S NS ns". Not a test.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../benchutil.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: livechurn CHECK STAMP\n");
        return 2;
    }
    long slots = 200000, n = 3000000;
    int check = atoi(argv[1]), stamp = atoi(argv[2]);
    size_t sz[64];
    uint64_t s = 12345;
    for (int i = 0; i < 64; i++) {
        int b = 4 + (int)(xorshift(&s) % 6);
        size_t base = (size_t)1 << b;
        size_t v = base + xorshift(&s) % base;
        sz[i] = v > 512 ? 512 : v;
    }
    char **p = malloc(slots * sizeof *p);
    size_t *ps = malloc(slots * sizeof *ps);
    if (!p || !ps)
        return 1;
    for (long i = 0; i < slots; i++) {
        ps[i] = sz[i & 63];
        p[i] = malloc(ps[i]);
        p[i][0] = 1;
        p[i][ps[i] - 1] = 2;
    }
    long sum = 0;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t r = xorshift(&s);
        long k = (long)(r % (uint64_t)slots);
        if (check)
            sum += p[k][0] + p[k][ps[k] - 1];
        free(p[k]);
        ps[k] = sz[(r >> 40) & 63];
        p[k] = malloc(ps[k]);
        if (stamp) {
            p[k][0] = 1;
            p[k][ps[k] - 1] = 2;
        } else {
            __asm__ volatile("" ::"r"(p[k]) : "memory");
        }
    }
    printf("check %d stamp %d %.1f ns (%ld)\n", check, stamp, (now_ns() - t) / n, sum);
    return 0;
}
