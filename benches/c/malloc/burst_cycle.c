/* A program that allocates a burst of large blocks, uses them and frees them all, again and
 * again: does the allocator keep the burst's pages between rounds, or give them back and
 * fault them in anew every time? (docs/benchmarks.md, "Keeping what is reused";
 * crates/ebbtide-malloc/src/pageheap.rs, the working set.)
 *
 *   cc -O2 -o burst_cycle benches/c/malloc/burst_cycle.c
 *   LD_PRELOAD=target/release/libebbtide_malloc.so ./burst_cycle [rounds]
 *
 * Shapes (blocks × size): 1 × 4 MiB, 8 × 2 MiB, 4 × 1 MiB, 4 × 256 KiB. Each round allocates
 * the blocks, writes one byte in each of their pages, and frees them, in the order allocated;
 * one small block stays live throughout. Prints, per shape, the median time of a round and the
 * median of its minor page faults, over the rounds after the first two (the allocator's
 * chance to learn that the burst comes back). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 3 || rounds > 100000) {
        fprintf(stderr, "burst_cycle: rounds must be 3..100000, not %s\n", argv[1]);
        return 2;
    }
    static const struct { int count; size_t kib; } shapes[] = {
        {1, 4096}, {8, 2048}, {4, 1024}, {4, 256},
    };
    long page = sysconf(_SC_PAGESIZE);
    volatile char *live = malloc(64);
    double *us = malloc(sizeof *us * rounds), *flt = malloc(sizeof *flt * rounds);
    if (!live || !us || !flt) {
        fprintf(stderr, "burst_cycle: out of memory\n");
        return 1;
    }
    live[0] = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s].kib << 10;
        char *p[8];
        for (int r = 0; r < rounds; r++) {
            long f0 = minor_faults();
            double t0 = now_us();
            for (int j = 0; j < shapes[s].count; j++) {
                p[j] = malloc(n);
                if (!p[j]) {
                    fprintf(stderr, "burst_cycle: malloc(%zu) failed\n", n);
                    return 1;
                }
                for (size_t o = 0; o < n; o += page)
                    p[j][o] = (char)r;
            }
            for (int j = 0; j < shapes[s].count; j++)
                free(p[j]);
            us[r] = now_us() - t0;
            flt[r] = (double)(minor_faults() - f0);
        }
        printf("%d x %4zu KiB: %9.1f us/round %7.0f faults/round\n", shapes[s].count,
               shapes[s].kib, median(us + 2, rounds - 2), median(flt + 2, rounds - 2));
    }
    free((void *)live);
    free(us);
    free(flt);
    return 0;
}
