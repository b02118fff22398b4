/* abcall: two builds of libebbtide.so in one process, their C entry points (`ebb_zone_alloc`,
 * `ebb_zone_free`) called in alternating slices on one pinned CPU; prints, per case, the mean
 * ns of each build and the median and quartiles of the ratio A/B over the pairs of adjacent
 * slices.
 *
 * Why: on a shared 2-vCPU host whose clock moves by half between seconds, one process per build
 * (ebbtide-bench-c) spreads a case over 1.5-2x and a few per cent between two builds are lost in
 * it; two slices of ~0.5 ms side by side see the same clock, so their ratio keeps what differs.
 * A control with the same library under two paths (`cp libebbtide.so /tmp/c/`) reads 1.000
 * with quartiles within +-3 %. Not a comparison with the peers (for those: ebbtide-bench-c, the
 * way their users call them), and not a test.
 *
 *   cargo build --release -p ebbtide-capi; cp target/release/libebbtide.so /tmp/a/   # build A
 *   (change, build again)                   cp target/release/libebbtide.so /tmp/b/   # build B
 *   cc -O2 -o /tmp/abcall benches/c/micro/abcall.c -ldl
 *   nice -n -20 /tmp/abcall /tmp/a/libebbtide.so /tmp/b/libebbtide.so 600 100000
 *
 * Arguments: the two libraries (different paths: dlopen loads a path once), the number of
 * slice pairs, and the iterations per slice (default 200000). Each build gets its own zone per
 * case (`ebb_zone_create`, as a C user makes them); the entry points are called through
 * function pointers from dlsym (an indirect call, where a linked program goes through the PLT:
 * the same for both builds). The slices alternate A-B, B-A. Runs on CPU 1.
 * Cases as ebbtide-bench-c's: pair64 and pair256 (allocate, free the same item), live256_64 and
 * live256_256 (a FIFO of 256 live items: free the oldest, allocate its replacement).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *(*create_t)(const char *, size_t, size_t, unsigned);
typedef void *(*alloc_t)(void *);
typedef void (*free_t)(void *, void *);
typedef int (*destroy_t)(void *);

struct lib {
    create_t create;
    alloc_t alloc;
    free_t free;
    destroy_t destroy;
};

#define LIVE 256
/* Keeps a value opaque to the optimiser without touching memory (as allocbench.c). */
#define SINK(p) __asm__ volatile("" : "+r"(p))

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double pair(const struct lib *l, void *z, long n) {
    alloc_t a = l->alloc;
    free_t f = l->free;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = a(z);
        SINK(p);
        f(z, p);
    }
    return (now_ns() - t) / (double)n;
}

static double live(const struct lib *l, void *z, void **ring, long n) {
    alloc_t a = l->alloc;
    free_t f = l->free;
    double t = now_ns();
    for (long k = 0; k < n; k++) {
        void **s = &ring[k % LIVE];
        f(z, *s);
        *s = a(z);
    }
    return (now_ns() - t) / (double)n;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *sym(void *h, const char *path, const char *name) {
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "abcall: %s has no %s\n", path, name);
        exit(1);
    }
    return f;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: abcall LIB_A LIB_B SLICE_PAIRS [ITERS_PER_SLICE]\n");
        return 2;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(1, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("abcall: sched_setaffinity (runs unpinned)");
    struct lib L[2];
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "abcall: %s\n", dlerror());
            return 1;
        }
        L[i].create = (create_t)sym(h, argv[1 + i], "ebb_zone_create");
        L[i].alloc = (alloc_t)sym(h, argv[1 + i], "ebb_zone_alloc");
        L[i].free = (free_t)sym(h, argv[1 + i], "ebb_zone_free");
        L[i].destroy = (destroy_t)sym(h, argv[1 + i], "ebb_zone_destroy");
    }
    if (L[0].alloc == L[1].alloc) {
        fprintf(stderr, "abcall: both paths loaded one object (give two copies)\n");
        return 1;
    }
    int slices = atoi(argv[3]);
    long iters = argc > 4 ? atol(argv[4]) : 200000;
    if (slices < 2 || iters < 1) {
        fprintf(stderr, "abcall: SLICE_PAIRS >= 2 and ITERS_PER_SLICE >= 1\n");
        return 2;
    }
    static const struct { const char *name; size_t size; int live; } cases[] = {
        {"pair64", 64, 0}, {"pair256", 256, 0}, {"live256_64", 64, 1}, {"live256_256", 256, 1},
    };
    double *r = malloc(sizeof(double) * (size_t)slices);
    if (!r)
        return 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        void *z[2];
        void *ring[2][LIVE];
        for (int i = 0; i < 2; i++) {
            z[i] = L[i].create(cases[c].name, cases[c].size, 0, 0);
            if (!z[i]) {
                fprintf(stderr, "abcall: %s: ebb_zone_create failed\n", argv[1 + i]);
                return 1;
            }
            for (int k = 0; k < LIVE; k++)
                if (!(ring[i][k] = L[i].alloc(z[i]))) {
                    fprintf(stderr, "abcall: %s: ebb_zone_alloc failed\n", argv[1 + i]);
                    return 1;
                }
        }
        double sum[2] = {0, 0};
        for (int k = 0; k < slices; k++) {
            double v[2];
            for (int j = 0; j < 2; j++) {
                int i = (k & 1) ? 1 - j : j; /* A-B, then B-A */
                v[i] = cases[c].live ? live(&L[i], z[i], ring[i], iters)
                                     : pair(&L[i], z[i], iters);
                sum[i] += v[i];
            }
            r[k] = v[0] / v[1];
        }
        qsort(r, (size_t)slices, sizeof(double), cmp);
        printf("%-12s A %.3f ns  B %.3f ns (means)  A/B median %.4f [q25 %.4f q75 %.4f]\n",
               cases[c].name, sum[0] / slices, sum[1] / slices, r[slices / 2], r[slices / 4],
               r[3 * slices / 4]);
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < LIVE; k++)
                L[i].free(z[i], ring[i][k]);
            if (L[i].destroy(z[i]) != 0)
                fprintf(stderr, "abcall: %s: ebb_zone_destroy failed\n", argv[1 + i]);
        }
    }
    free(r);
    return 0;
}
