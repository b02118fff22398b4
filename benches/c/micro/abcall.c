/* abcall: two builds of one ebbtide library in one process, their entry points called in
 * alternating slices on one pinned CPU; prints, per case, the mean ns of each build and the
 * median and quartiles of the ratio A/B over the pairs of adjacent slices.
 *
 *   libebbtide.so         (default)   ebb_zone_alloc / ebb_zone_free, one zone per case and build
 *   libebbtide_malloc.so  (--malloc)  malloc / free of the library, called directly (dlopen
 *                                     RTLD_LOCAL: the process's own malloc stays glibc's)
 *
 * Why: on a shared 2-vCPU host whose clock moves by half between seconds, one process per build
 * spreads a case over 1.5-2x and a few per cent between two builds are lost in it; two slices
 * of ~0.5 ms side by side see the same clock, so their ratio keeps what differs. A control with
 * the same library under two paths (`cp LIB /tmp/c/`) reads 1.000 with quartiles within
 * +-3-5 %. Not a comparison with the peers (for those: ebbtide-bench-c and ebbtide-bench-malloc,
 * the way their users call them), and not a test.
 *
 *   cargo build --release -p ebbtide-capi; cp target/release/libebbtide.so /tmp/a/   # build A
 *   (change, build again)                   cp target/release/libebbtide.so /tmp/b/   # build B
 *   cc -O2 -o /tmp/abcall benches/c/micro/abcall.c -ldl
 *   nice -n -20 /tmp/abcall /tmp/a/libebbtide.so /tmp/b/libebbtide.so 600 100000
 *   nice -n -20 /tmp/abcall --malloc /tmp/a/libebbtide_malloc.so /tmp/b/libebbtide_malloc.so 600
 *
 * Arguments: the two libraries (different paths: dlopen loads a path once), the number of
 * slice pairs, and the iterations per slice (default 200000). The entry points are called
 * through function pointers from dlsym (an indirect call, where a linked program goes through
 * the PLT: the same for both builds). The slices alternate A-B, B-A. Runs on CPU 1.
 * Cases: pairN (allocate N bytes, free them), liveN_M (a FIFO of N live items of M bytes: free
 * the oldest, allocate its replacement); with --malloc also mixed (a FIFO of 256 blocks whose
 * sizes cycle through 8-1024 bytes, seven sizes a cache line apart or more).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *(*create_t)(const char *, size_t, size_t, unsigned);
typedef void *(*zalloc_t)(void *);
typedef void (*zfree_t)(void *, void *);
typedef int (*destroy_t)(void *);
typedef void *(*malloc_t)(size_t);
typedef void (*free_t)(void *);

struct lib {
    create_t create;
    zalloc_t zalloc;
    zfree_t zfree;
    destroy_t destroy;
    malloc_t malloc;
    free_t free;
};

#define LIVE 256
/* Keeps a value opaque to the optimiser without touching memory (as allocbench.c). */
#define SINK(p) __asm__ volatile("" : "+r"(p))

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double zone_pair(const struct lib *l, void *z, long n) {
    zalloc_t a = l->zalloc;
    zfree_t f = l->zfree;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = a(z);
        SINK(p);
        f(z, p);
    }
    return (now_ns() - t) / (double)n;
}

static double zone_live(const struct lib *l, void *z, void **ring, long n) {
    zalloc_t a = l->zalloc;
    zfree_t f = l->zfree;
    double t = now_ns();
    for (long k = 0; k < n; k++) {
        void **s = &ring[k % LIVE];
        f(z, *s);
        *s = a(z);
    }
    return (now_ns() - t) / (double)n;
}

static double malloc_pair(const struct lib *l, size_t size, long n) {
    malloc_t a = l->malloc;
    free_t f = l->free;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = a(size);
        SINK(p);
        f(p);
    }
    return (now_ns() - t) / (double)n;
}

/* size 0: the mixed sizes (the slot's own size, fixed per slot). */
static const size_t MIXED[7] = {8, 24, 64, 136, 256, 520, 1024};

static size_t slot_size(size_t size, long k) {
    return size ? size : MIXED[(k % LIVE) % 7];
}

static double malloc_live(const struct lib *l, size_t size, void **ring, long n) {
    malloc_t a = l->malloc;
    free_t f = l->free;
    double t = now_ns();
    for (long k = 0; k < n; k++) {
        void **s = &ring[k % LIVE];
        f(*s);
        *s = a(slot_size(size, k));
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

static void die(const char *path, const char *what) {
    fprintf(stderr, "abcall: %s: %s failed\n", path, what);
    exit(1);
}

int main(int argc, char **argv) {
    int m = argc > 1 && strcmp(argv[1], "--malloc") == 0;
    argv += m;
    argc -= m;
    if (argc < 4) {
        fprintf(stderr, "usage: abcall [--malloc] LIB_A LIB_B SLICE_PAIRS [ITERS_PER_SLICE]\n");
        return 2;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(1, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("abcall: sched_setaffinity (runs unpinned)");
    struct lib L[2];
    for (int i = 0; i < 2; i++) {
        const char *path = argv[1 + i];
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "abcall: %s\n", dlerror());
            return 1;
        }
        memset(&L[i], 0, sizeof L[i]);
        if (m) {
            L[i].malloc = (malloc_t)sym(h, path, "malloc");
            L[i].free = (free_t)sym(h, path, "free");
        } else {
            L[i].create = (create_t)sym(h, path, "ebb_zone_create");
            L[i].zalloc = (zalloc_t)sym(h, path, "ebb_zone_alloc");
            L[i].zfree = (zfree_t)sym(h, path, "ebb_zone_free");
            L[i].destroy = (destroy_t)sym(h, path, "ebb_zone_destroy");
        }
    }
    if (m ? L[0].malloc == L[1].malloc : L[0].zalloc == L[1].zalloc) {
        fprintf(stderr, "abcall: both paths loaded one object (give two copies)\n");
        return 1;
    }
    int slices = atoi(argv[3]);
    long iters = argc > 4 ? atol(argv[4]) : 200000;
    if (slices < 2 || iters < 1) {
        fprintf(stderr, "abcall: SLICE_PAIRS >= 2 and ITERS_PER_SLICE >= 1\n");
        return 2;
    }
    static const struct { const char *name; size_t size; int live; } zone_cases[] = {
        {"pair64", 64, 0}, {"pair256", 256, 0}, {"live256_64", 64, 1}, {"live256_256", 256, 1},
    };
    static const struct { const char *name; size_t size; int live; } malloc_cases[] = {
        {"pair16", 16, 0},         {"pair64", 64, 0},         {"pair256", 256, 0},
        {"live256_64", 64, 1},     {"live256_256", 256, 1},   {"mixed", 0, 1},
    };
    size_t ncases = m ? sizeof malloc_cases / sizeof malloc_cases[0]
                      : sizeof zone_cases / sizeof zone_cases[0];
    double *r = malloc(sizeof(double) * (size_t)slices);
    if (!r)
        return 1;
    for (size_t c = 0; c < ncases; c++) {
        const char *name = m ? malloc_cases[c].name : zone_cases[c].name;
        size_t size = m ? malloc_cases[c].size : zone_cases[c].size;
        int live = m ? malloc_cases[c].live : zone_cases[c].live;
        void *z[2] = {NULL, NULL};
        void *ring[2][LIVE];
        for (int i = 0; i < 2; i++) {
            if (!m && !(z[i] = L[i].create(name, size, 0, 0)))
                die(argv[1 + i], "ebb_zone_create");
            for (int k = 0; k < LIVE; k++)
                if (!(ring[i][k] = m ? L[i].malloc(slot_size(size, k)) : L[i].zalloc(z[i])))
                    die(argv[1 + i], "allocation");
        }
        double sum[2] = {0, 0};
        for (int k = 0; k < slices; k++) {
            double v[2];
            for (int j = 0; j < 2; j++) {
                int i = (k & 1) ? 1 - j : j; /* A-B, then B-A */
                if (m)
                    v[i] = live ? malloc_live(&L[i], size, ring[i], iters)
                                : malloc_pair(&L[i], size, iters);
                else
                    v[i] = live ? zone_live(&L[i], z[i], ring[i], iters)
                                : zone_pair(&L[i], z[i], iters);
                sum[i] += v[i];
            }
            r[k] = v[0] / v[1];
        }
        qsort(r, (size_t)slices, sizeof(double), cmp);
        printf("%-12s A %.3f ns  B %.3f ns (means)  A/B median %.4f [q25 %.4f q75 %.4f]\n", name,
               sum[0] / slices, sum[1] / slices, r[slices / 2], r[slices / 4], r[3 * slices / 4]);
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < LIVE; k++) {
                if (m)
                    L[i].free(ring[i][k]);
                else
                    L[i].zfree(z[i], ring[i][k]);
            }
            if (!m && L[i].destroy(z[i]) != 0)
                fprintf(stderr, "abcall: %s: ebb_zone_destroy failed\n", argv[1 + i]);
        }
    }
    free(r);
    return 0;
}
