/* How long malloc_trim(0) takes to give back cached large blocks (docs/benchmarks.md, "Giving
 * memory back"; docs/design/hugepage-heap.md).
 *
 *   cc -O2 -o trim_speed benches/c/malloc/trim_speed.c
 *   LD_PRELOAD=target/release/libebbtide_malloc.so ./trim_speed [MiB] [rounds]
 *   ./trim_speed bare [MiB] [rounds]     the bare madvise(MADV_DONTNEED) of as much, once on
 *                                        huge pages (MADV_HUGEPAGE) and once on small ones
 *
 * Each round: MiB of 4 MiB blocks are allocated, touched and freed (nothing took freed space
 * again, so they go back at the free), allocated again in the same space (now the heap's
 * working set), touched and freed: cached. As many bytes of blocks stay allocated, never
 * touched, so that the cache may be that large (its limit follows the bytes in use). Then
 * malloc_trim(0) is timed. Prints each round's milliseconds per GiB, the bytes cached and the
 * process's AnonHugePages before the trim, then the median over the rounds that had at least
 * 90 % of MiB cached (a round whose cache went early — a pressure event, the idle pass — would
 * time less than asked; it is printed and left out). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (4ul << 20)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long anon_huge_kib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &v) == 1) break;
    fclose(f);
    return v;
}

static void touch(char *p, size_t n) {
    for (size_t o = 0; o < n; o += 4096) p[o] = 1;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bare(size_t mib, int rounds) {
    size_t len = mib << 20;
    double t[2][64];
    for (int r = 0; r < rounds; r++) {
        for (int huge = 1; huge >= 0; huge--) {
            char *m = mmap(NULL, len + (2 << 20), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) { perror("mmap"); return 1; }
            char *p = (char *)(((unsigned long)m + (2 << 20) - 1) & ~((2ul << 20) - 1));
            madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
            touch(p, len);
            long hp = anon_huge_kib();
            double a = now_ms();
            madvise(p, len, MADV_DONTNEED);
            t[huge][r] = (now_ms() - a) * 1024.0 / mib;
            printf("bare %s round %d: %.2f ms/GiB (AnonHugePages %ld kB)\n",
                   huge ? "huge" : "small", r, t[huge][r], hp);
            munmap(m, len + (2 << 20));
        }
    }
    printf("median bare: huge pages %.2f ms/GiB, small pages %.2f ms/GiB\n",
           median(t[1], rounds), median(t[0], rounds));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bare"))
        return bare(argc > 2 ? strtoul(argv[2], 0, 10) : 1024,
                    argc > 3 ? atoi(argv[3]) : 5);
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 1024;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    size_t n = (mib << 20) / BLOCK;
    if (n == 0 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: trim_speed [MiB >= 4] [rounds 1..64] | bare [MiB] [rounds]\n");
        return 2;
    }
    char **cache = calloc(n, sizeof *cache), **live = calloc(n, sizeof *live);
    double t[64];
    int timed = 0;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) cache[i] = malloc(BLOCK);
        /* Allocated after the cache's blocks, so their runs stay below the heap's top. */
        for (size_t i = 0; i < n; i++) live[i] = malloc(BLOCK);
        for (int k = 0; k < 2; k++) {
            if (k) for (size_t i = 0; i < n; i++) cache[i] = malloc(BLOCK);
            for (size_t i = 0; i < n; i++) {
                if (!cache[i]) { fprintf(stderr, "malloc failed\n"); return 1; }
                touch(cache[i], BLOCK);
            }
            for (size_t i = 0; i < n; i++) free(cache[i]);
        }
        long hp = anon_huge_kib();
        struct mallinfo2 mi = mallinfo2();
        double a = now_ms();
        int given = malloc_trim(0);
        double ms = (now_ms() - a) * 1024.0 / mib;
        int full = (mi.keepcost >> 20) * 10 >= mib * 9;
        if (full) t[timed++] = ms;
        printf("round %d: %.2f ms/GiB, cached before %zu MiB%s, AnonHugePages %ld kB, "
               "malloc_trim %d\n", r, ms, mi.keepcost >> 20, full ? "" : " (left out)", hp,
               given);
        for (size_t i = 0; i < n; i++) free(live[i]);
        malloc_trim(0);
    }
    if (!timed) { printf("median: no round had the cache\n"); return 1; }
    printf("median: %.2f ms per GiB (%zu MiB, %d of %d rounds)\n", median(t, timed), mib, timed,
           rounds);
    return 0;
}
