/* pairloop: the smallest loops that show where a malloc's pair of calls spends its time.
 *
 *   cc -O2 -Iinclude -o /tmp/pairloop benches/c/micro/pairloop.c -Ltarget/release -lebbtide \
 *      -Wl,-rpath,$PWD/target/release
 *   LD_PRELOAD=LIB /tmp/pairloop malloc K       malloc + free, nothing else in the loop;
 *                                               K = 1: 64 B; 16: 16, 32, ... 256 B in turn;
 *                                               99: random sizes of 16-256 B
 *   /tmp/pairloop capi K RND VIAP               ebb_zone_alloc + ebb_zone_free over K zones of
 *                                               16, 32, ... bytes, in turn (RND 0) or at random
 *                                               (RND 1); the zone for the free is the one just
 *                                               used (VIAP 0) or looked up in a table by
 *                                               `p >> 22` (VIAP 1), as a malloc's free finds it
 *
 * Prints five lines "MODE ... NS ns/pair" (five repetitions of 50 M pairs); quote the median.
 * Used in docs/benchmarks.md ("The malloc's fast paths: shorter chains..."). Not a test.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../benchutil.h"

#include "ebbtide.h"

#define N 50000000L
#define SINK(p) __asm__ volatile("" ::"r"(p) : "memory")

static ebb_zone *by_chunk[1 << 16];

static int usage(void) {
    fprintf(stderr, "usage: pairloop malloc K | pairloop capi K RND VIAP (see the source)\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return usage();
    int k = atoi(argv[2]);
    if (k < 1 || k > 99)
        return usage();
    unsigned s = 12345;
    if (!strcmp(argv[1], "malloc")) {
        size_t sizes[1024];
        for (int i = 0; i < 1024; i++) {
            s = s * 1103515245u + 12345u;
            sizes[i] = k == 1 ? 64 : k == 16 ? 16 + 16 * (size_t)(i & 15) : 16 + (s >> 8) % 241;
        }
        for (int r = 0; r < 5; r++) {
            double t = now_ns();
            for (long i = 0; i < N; i++) {
                void *p = malloc(sizes[i & 1023]);
                SINK(p);
                free(p);
            }
            printf("malloc k=%d %.2f ns/pair\n", k, (now_ns() - t) / N);
        }
        return 0;
    }
    if (strcmp(argv[1], "capi") || argc < 5 || k > 64)
        return usage();
    int rnd = atoi(argv[3]), viap = atoi(argv[4]);
    ebb_zone *z[64];
    for (int i = 0; i < k; i++) {
        char name[16];
        snprintf(name, sizeof name, "pair%d", i);
        z[i] = ebb_zone_create(name, 16 + 16 * (size_t)i, 0, 0);
        if (!z[i]) {
            fprintf(stderr, "pairloop: ebb_zone_create failed\n");
            return 1;
        }
        void *p = ebb_zone_alloc(z[i]);
        by_chunk[((uintptr_t)p >> 22) & 0xffff] = z[i];
        ebb_zone_free(z[i], p);
    }
    unsigned char idx[1024];
    for (int i = 0; i < 1024; i++) {
        s = s * 1103515245u + 12345u;
        idx[i] = (unsigned char)(rnd ? (s >> 8) % (unsigned)k : (unsigned)(i % k));
    }
    for (int r = 0; r < 5; r++) {
        double t = now_ns();
        for (long i = 0; i < N; i++) {
            ebb_zone *q = z[idx[i & 1023]];
            void *p = ebb_zone_alloc(q);
            SINK(p);
            ebb_zone *f = viap ? by_chunk[((uintptr_t)p >> 22) & 0xffff] : q;
            ebb_zone_free(f, p);
        }
        printf("capi k=%d rnd=%d viap=%d %.2f ns/pair\n", k, rnd, viap, (now_ns() - t) / N);
    }
    return 0;
}
