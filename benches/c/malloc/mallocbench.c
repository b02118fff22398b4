/*
 * mallocbench.c — the project's own malloc benchmark cases, one program for every allocator.
 *
 * It calls malloc/free/realloc of whatever allocator the process has: glibc, or the library
 * given by LD_PRELOAD (jemalloc, mimalloc, tcmalloc, libebbtide_malloc.so). The driver
 * (crates/ebbtide-bench, binary ebbtide-bench-malloc) compiles it with the system cc -O2, runs
 * one fresh process per (allocator, case, round), interleaved, and reads the process's peak RSS
 * itself (wait4). The cases are written for this project; public suites (mimalloc-bench,
 * larson, glibc's bench-malloc) inspired the patterns, none of their code is here.
 *
 *   mallocbench --case NAME [--label L] [--scale F] [--seed N] [--threads T]
 *
 * --threads T (1-256) sets the thread count of the multi-threaded cases (larson, prodcons,
 * thread_churn, thread_handover) for a many-core sweep; each thread then does the same work
 * whatever T is, so a run's wall time stays the same on a machine with T CPUs. Without it each
 * case takes its default below. The single-thread cases ignore it.
 *
 * Cases (one "op" is what the ns figure is divided by; sizes log-uniform in the ranges given,
 * drawn from a table of 4096 precomputed sizes so the loops do not run a generator):
 *   pair_small      one thread: malloc then free of the same object, 16-256 B; op = pair
 *   pair_mixed      the same, 16 B-32 KiB
 *   live_small      one thread: 1 000 live objects of 16-256 B, a random one replaced per op
 *   live_big        the same with 200 000 live objects of 16-512 B (cache- and TLB-bound)
 *   live_mixed      the same with 20 000 live objects of 16 B-16 KiB
 *   prodcons        a producer thread allocates (16-1024 B), a consumer thread frees, through a
 *                   single-producer single-consumer ring of 4096 slots; op = object. With
 *                   --threads T (at least 2): T/2 such pairs, each with its own ring
 *   larson          server pattern: T threads (default: online CPUs, at least 2), each replacing
 *                   random objects (16-1024 B) in a region of 2 000 slots; after every epoch
 *                   the regions rotate between threads, so most frees are of objects another
 *                   thread allocated; op = one replacement
 *   realloc_grow    one thread: 16 buffers grown round-robin by realloc from 8 B to 256 KiB in
 *                   steps of 1/8 + 16 B (a string builder), then freed; op = realloc
 *   large           one thread: 32 live blocks of 64 KiB-4 MiB, a random one replaced per op,
 *                   every page of the new block written; op = replacement
 *   thread_churn    rounds of T short-lived threads (default: online CPUs, 2-16), each
 *                   allocating 2 000 objects of 16-512 B, freeing half and handing half to the
 *                   main thread, which frees them after the join; op = thread
 *   thread_handover generations of T short-lived threads (default as thread_churn): thread i of
 *                   a generation frees the 1 000 objects thread i of the previous generation
 *                   left, allocates 2 000 objects of 16-512 B, frees half of them and leaves
 *                   the other half to its successor; op = thread
 *   fragmentation   one thread: 400 000 objects of 16-128 B, 7 of every 8 freed (the survivors
 *                   pin the pages), then the freed volume allocated again as 512 B-4 KiB
 *                   objects, then all freed; op = object allocated; extra figures: RSS after
 *                   the second phase and the live bytes then (MiB), and each phase's time
 *                   (ms: the allocation, the 7/8 freed, the volume again, the end's frees)
 *   tlb_random      one thread: 512 MiB (times --scale) of objects of 64-256 B, allocated in a
 *                   row, linked into one cycle in a random order, then followed pointer by
 *                   pointer for 3 passes: almost every step a cache miss and, on 4 KiB pages,
 *                   a TLB miss, so the time says how densely the allocator packs its objects
 *                   into (huge) pages; op = step; extra figures: the working set (MiB asked
 *                   for), the allocation's time (ms) and how much of the process sat in
 *                   transparent huge pages after it (AnonHugePages, MiB; -1 unreadable)
 *
 * Every object carries a tag in its first and last byte, written after malloc and checked
 * before free (and across realloc), so an allocator that hands out overlapping memory or loses
 * realloc's contents is caught: the program then prints what it found and exits with status 3.
 * Single-thread cases run pinned to the last online CPU, the producer/consumer pair on CPUs 0
 * and 1.
 *
 * Output (stdout):
 *   #info label=L malloc_from=PATH free_from=PATH realloc_from=PATH calloc_from=PATH ncpu=N
 *   <case> <label> <ns_per_op> <ops> <elapsed_ms> [key=value ...]
 *   #done
 * Exit status: 0 ran, 2 bad arguments, 3 corrupted memory found, 1 allocation failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "../benchutil.h"

#define NSIZES 4096
#define SINK(p) __asm__ volatile("" : "+r"(p))

static const char *g_label = "malloc";
static double g_scale = 1.0;
static uint64_t g_seed = 0x9e3779b97f4a7c15ull;
static int g_ncpu = 1;
static int g_threads = 0; /* --threads; 0: each case's default */
#define MAX_THREADS 256

/* ------------------------------------------------------------------ helpers */

/* n scaled by --scale, at least 1. */
static long scaled(long n) {
    double v = (double)n * g_scale;
    return v < 1.0 ? 1 : (long)v;
}

/* A table of NSIZES sizes, log-uniform in [lo, hi]: a random power-of-two octave, then a
 * uniform size inside it. */
static void fill_sizes(size_t *t, size_t lo, size_t hi, uint64_t seed) {
    uint64_t s = seed | 1;
    int blo = 63 - __builtin_clzll(lo), bhi = 63 - __builtin_clzll(hi);
    for (int i = 0; i < NSIZES; i++) {
        int b = blo + (int)(xorshift(&s) % (uint64_t)(bhi - blo + 1));
        size_t base = (size_t)1 << b;
        size_t v = base + (size_t)(xorshift(&s) % base);
        t[i] = v < lo ? lo : v > hi ? hi : v;
    }
}

static void fail_alloc(const char *c, size_t n) {
    fprintf(stderr, "mallocbench: %s: allocation of %zu bytes failed\n", c, n);
    exit(1);
}

static uint8_t tag_of(size_t n) { return (uint8_t)(n * 131u + 7u); }

static void stamp(void *p, size_t n) {
    uint8_t *b = p, t = tag_of(n);
    b[0] = t;
    b[n - 1] = t;
}

static void check(const void *p, size_t n, const char *c) {
    const uint8_t *b = p;
    uint8_t t = tag_of(n);
    if (b[0] != t || b[n - 1] != t) {
        printf("#corrupt case=%s ptr=%p size=%zu first=%u last=%u want=%u\n", c, p, n, b[0],
               b[n - 1], t);
        fprintf(stderr,
                "mallocbench: %s: object %p of %zu bytes was overwritten (tag %u/%u, want %u): "
                "overlapping allocations or lost contents\n",
                c, p, n, b[0], b[n - 1], t);
        fflush(stdout);
        exit(3);
    }
}

static void *xmalloc(size_t n, const char *c) {
    void *p = malloc(n);
    if (!p)
        fail_alloc(c, n);
    stamp(p, n);
    return p;
}

static void xfree(void *p, size_t n, const char *c) {
    check(p, n, c);
    free(p);
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % g_ncpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* best effort: an affinity mask may forbid it */
}

static long rss_kib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* AnonHugePages of /proc/self/smaps_rollup in KiB (how much of the heap sits in transparent huge
 * pages), -1 if unreadable. */
static long anon_huge_kib(void) {
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* Zeroed memory from mmap for a case's own bookkeeping (rings, per-thread records): not from the
 * allocator under test, so it does not weigh on one allocator's figures more than another's. */
static void *pages(size_t n, const char *c) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail_alloc(c, n);
    return p;
}

static void report(const char *c, double ns, long ops, const char *extra) {
    printf("%s %s %.3f %ld %.1f%s%s\n", c, g_label, ns / (double)ops, ops, ns / 1e6,
           extra[0] ? " " : "", extra);
}

/* ------------------------------------------------------------------ single-thread cases */

static void pair(const char *c, size_t lo, size_t hi, long n) {
    size_t sz[NSIZES];
    fill_sizes(sz, lo, hi, g_seed);
    for (long i = 0; i < n / 8; i++) { /* warm-up */
        void *p = xmalloc(sz[i & (NSIZES - 1)], c);
        SINK(p);
        xfree(p, sz[i & (NSIZES - 1)], c);
    }
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        size_t s = sz[i & (NSIZES - 1)];
        void *p = xmalloc(s, c);
        SINK(p);
        xfree(p, s, c);
    }
    report(c, now_ns() - t, n, "");
}

static void live(const char *c, long slots, size_t lo, size_t hi, long n) {
    size_t sz[NSIZES];
    fill_sizes(sz, lo, hi, g_seed);
    void **p = malloc((size_t)slots * sizeof *p);
    size_t *ps = malloc((size_t)slots * sizeof *ps);
    if (!p || !ps)
        fail_alloc(c, (size_t)slots * sizeof *p);
    for (long i = 0; i < slots; i++) {
        ps[i] = sz[i & (NSIZES - 1)];
        p[i] = xmalloc(ps[i], c);
    }
    uint64_t s = g_seed ^ 0xabcdef;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t r = xorshift(&s);
        long k = (long)(r % (uint64_t)slots);
        xfree(p[k], ps[k], c);
        ps[k] = sz[(r >> 40) & (NSIZES - 1)];
        p[k] = xmalloc(ps[k], c);
    }
    double ns = now_ns() - t;
    for (long i = 0; i < slots; i++)
        xfree(p[i], ps[i], c);
    free(p);
    free(ps);
    report(c, ns, n, "");
}

static void realloc_grow(const char *c, long rounds) {
    enum { B = 16 };
    const size_t max = 256 * 1024;
    char *buf[B];
    size_t len[B];
    long ops = 0;
    double t = now_ns();
    for (long r = 0; r < rounds; r++) {
        for (int b = 0; b < B; b++) {
            len[b] = 8;
            buf[b] = xmalloc(8, c);
        }
        int growing = B;
        while (growing) {
            growing = 0;
            for (int b = 0; b < B; b++) {
                if (len[b] >= max)
                    continue;
                size_t old = len[b], n = old + old / 8 + 16;
                uint8_t first = (uint8_t)buf[b][0], last = (uint8_t)buf[b][old - 1];
                char *q = realloc(buf[b], n);
                if (!q)
                    fail_alloc(c, n);
                if ((uint8_t)q[0] != first || (uint8_t)q[old - 1] != last) {
                    fprintf(stderr, "mallocbench: %s: realloc from %zu to %zu lost contents\n",
                            c, old, n);
                    printf("#corrupt case=%s realloc %zu->%zu\n", c, old, n);
                    fflush(stdout);
                    exit(3);
                }
                stamp(q, n);
                buf[b] = q;
                len[b] = n;
                ops++;
                growing = 1;
            }
        }
        for (int b = 0; b < B; b++)
            xfree(buf[b], len[b], c);
    }
    report(c, now_ns() - t, ops, "");
}

static void large(const char *c, long n) {
    enum { SLOTS = 32 };
    size_t sz[NSIZES];
    fill_sizes(sz, 64 * 1024, 4 * 1024 * 1024, g_seed);
    char *p[SLOTS];
    size_t ps[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        ps[i] = sz[i];
        p[i] = xmalloc(ps[i], c);
    }
    uint64_t s = g_seed ^ 0x1234;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t r = xorshift(&s);
        int k = (int)(r % SLOTS);
        xfree(p[k], ps[k], c);
        ps[k] = sz[(r >> 40) & (NSIZES - 1)];
        p[k] = xmalloc(ps[k], c);
        for (size_t o = 4096; o < ps[k]; o += 4096)
            p[k][o] = (char)o;
    }
    double ns = now_ns() - t;
    for (int i = 0; i < SLOTS; i++)
        xfree(p[i], ps[i], c);
    report(c, ns, n, "");
}

static void fragmentation(const char *c, long n) {
    size_t small[NSIZES], big[NSIZES];
    fill_sizes(small, 16, 128, g_seed);
    fill_sizes(big, 512, 4096, g_seed ^ 77);
    void **p = malloc((size_t)n * sizeof *p);
    size_t *ps = malloc((size_t)n * sizeof *ps);
    if (!p || !ps)
        fail_alloc(c, (size_t)n * sizeof *p);
    size_t live = 0, freed = 0;
    long ops = 0;
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        ps[i] = small[i & (NSIZES - 1)];
        p[i] = xmalloc(ps[i], c);
        live += ps[i];
        ops++;
    }
    double t1 = now_ns();
    for (long i = 0; i < n; i++)
        if (i % 8 != 0) {
            xfree(p[i], ps[i], c);
            live -= ps[i];
            freed += ps[i];
            p[i] = NULL;
        }
    double t2 = now_ns();
    /* The freed volume again, as bigger objects, in the holes' slots. */
    long j = 0;
    for (long i = 0; i < n && freed > 0; i++) {
        if (p[i])
            continue;
        size_t s = big[j++ & (NSIZES - 1)];
        ps[i] = s;
        p[i] = xmalloc(s, c);
        live += s;
        freed = freed > s ? freed - s : 0;
        ops++;
    }
    double t3 = now_ns();
    long rss = rss_kib();
    size_t live_end = live;
    double t4 = now_ns();
    for (long i = 0; i < n; i++)
        if (p[i])
            xfree(p[i], ps[i], c);
    double t5 = now_ns();
    double ns = t5 - t;
    free(p);
    free(ps);
    char extra[256];
    snprintf(extra, sizeof extra,
             "rss_mib=%.1f live_mib=%.1f alloc_ms=%.2f free_ms=%.2f again_ms=%.2f end_ms=%.2f",
             (double)rss / 1024.0, (double)live_end / 1048576.0, (t1 - t) / 1e6, (t2 - t1) / 1e6,
             (t3 - t2) / 1e6, (t5 - t4) / 1e6);
    report(c, ns, ops, extra);
}

/* ------------------------------------------------------------------ producer / consumer */

#define RING 4096
struct ring {
    _Alignas(64) _Atomic long head; /* written by the producer */
    _Alignas(64) _Atomic long tail; /* written by the consumer */
    _Alignas(64) void *slot[RING];
    size_t size[RING];
    long n;
    int cpu; /* the producer's CPU; the consumer's is the next */
    const char *c;
};

static void *producer(void *arg) {
    struct ring *r = arg;
    size_t sz[NSIZES];
    fill_sizes(sz, 16, 1024, g_seed);
    pin(r->cpu);
    for (long i = 0; i < r->n; i++) {
        while (i - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING)
            sched_yield();
        size_t s = sz[i & (NSIZES - 1)];
        r->slot[i & (RING - 1)] = xmalloc(s, r->c);
        r->size[i & (RING - 1)] = s;
        atomic_store_explicit(&r->head, i + 1, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg) {
    struct ring *r = arg;
    pin(r->cpu + 1);
    for (long i = 0; i < r->n; i++) {
        while (atomic_load_explicit(&r->head, memory_order_acquire) <= i)
            sched_yield();
        xfree(r->slot[i & (RING - 1)], r->size[i & (RING - 1)], r->c);
        atomic_store_explicit(&r->tail, i + 1, memory_order_release);
    }
    return NULL;
}

/* `pairs` producer/consumer pairs, n objects through each ring. */
static void prodcons(const char *c, int pairs, long n) {
    struct ring *r = pages((size_t)pairs * sizeof *r, c);
    pthread_t *th = pages((size_t)pairs * 2 * sizeof *th, c);
    for (int i = 0; i < pairs; i++) {
        r[i].n = n;
        r[i].c = c;
        r[i].cpu = 2 * i;
    }
    double t = now_ns();
    for (int i = 0; i < pairs; i++)
        if (pthread_create(&th[2 * i + 1], NULL, consumer, &r[i]) ||
            pthread_create(&th[2 * i], NULL, producer, &r[i]))
            fail_alloc(c, 0);
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(th[i], NULL);
    double ns = now_ns() - t;
    munmap(th, (size_t)pairs * 2 * sizeof *th);
    munmap(r, (size_t)pairs * sizeof *r);
    report(c, ns, n * pairs, "");
}

/* ------------------------------------------------------------------ larson-like server */

#define LREGION 2000
struct larson {
    int nthreads;
    long epochs, per_epoch;
    void **slot;  /* nthreads regions of LREGION */
    size_t *size;
    pthread_barrier_t bar;
};
struct larson_arg {
    struct larson *l;
    int id;
};

static void *larson_worker(void *arg) {
    struct larson_arg *a = arg;
    struct larson *l = a->l;
    size_t sz[NSIZES];
    fill_sizes(sz, 16, 1024, g_seed);
    uint64_t s = g_seed ^ (uint64_t)(a->id + 1) * 0x9e37ull;
    for (long e = 0; e < l->epochs; e++) {
        long base = (long)((a->id + e) % l->nthreads) * LREGION;
        for (long i = 0; i < l->per_epoch; i++) {
            uint64_t r = xorshift(&s);
            long k = base + (long)(r % LREGION);
            xfree(l->slot[k], l->size[k], "larson");
            l->size[k] = sz[(r >> 40) & (NSIZES - 1)];
            l->slot[k] = xmalloc(l->size[k], "larson");
        }
        pthread_barrier_wait(&l->bar);
    }
    return NULL;
}

static void larson(const char *c, long epochs) {
    struct larson l;
    l.nthreads = g_threads ? g_threads : g_ncpu < 2 ? 2 : g_ncpu > 64 ? 64 : g_ncpu;
    l.epochs = epochs;
    l.per_epoch = 20000;
    long total = (long)l.nthreads * LREGION;
    l.slot = malloc((size_t)total * sizeof *l.slot);
    l.size = malloc((size_t)total * sizeof *l.size);
    if (!l.slot || !l.size)
        fail_alloc(c, (size_t)total);
    size_t sz[NSIZES];
    fill_sizes(sz, 16, 1024, g_seed ^ 5);
    for (long i = 0; i < total; i++) {
        l.size[i] = sz[i & (NSIZES - 1)];
        l.slot[i] = xmalloc(l.size[i], c);
    }
    pthread_barrier_init(&l.bar, NULL, (unsigned)l.nthreads);
    pthread_t th[MAX_THREADS];
    struct larson_arg args[MAX_THREADS];
    double t = now_ns();
    for (int i = 0; i < l.nthreads; i++) {
        args[i] = (struct larson_arg){&l, i};
        if (pthread_create(&th[i], NULL, larson_worker, &args[i]))
            fail_alloc(c, 0);
    }
    for (int i = 0; i < l.nthreads; i++)
        pthread_join(th[i], NULL);
    double ns = now_ns() - t;
    for (long i = 0; i < total; i++)
        xfree(l.slot[i], l.size[i], c);
    pthread_barrier_destroy(&l.bar);
    free(l.slot);
    free(l.size);
    report(c, ns, (long)l.nthreads * l.epochs * l.per_epoch, "");
}

/* ------------------------------------------------------------------ thread churn */

#define CHURN_OBJS 2000
struct churn {
    void *keep[CHURN_OBJS / 2];
    size_t keep_size[CHURN_OBJS / 2];
    uint64_t seed;
};

static void *churn_worker(void *arg) {
    struct churn *w = arg;
    size_t sz[64];
    void *mine[CHURN_OBJS / 2];
    size_t mine_size[CHURN_OBJS / 2];
    uint64_t s = w->seed | 1;
    for (int i = 0; i < 64; i++)
        sz[i] = 16 + (size_t)(xorshift(&s) % 497);
    for (int i = 0; i < CHURN_OBJS / 2; i++) {
        mine_size[i] = sz[(i * 7) & 63];
        mine[i] = xmalloc(mine_size[i], "thread_churn");
        w->keep_size[i] = sz[(i * 11) & 63];
        w->keep[i] = xmalloc(w->keep_size[i], "thread_churn");
    }
    for (int i = 0; i < CHURN_OBJS / 2; i++)
        xfree(mine[i], mine_size[i], "thread_churn");
    return NULL;
}

/* The thread count of the churn cases: --threads, else the online CPUs within 2-16. */
static int churn_threads(void) {
    if (g_threads)
        return g_threads;
    return g_ncpu < 2 ? 2 : g_ncpu > 16 ? 16 : g_ncpu;
}

static void thread_churn(const char *c, long rounds) {
    int t = churn_threads();
    struct churn *w = pages((size_t)t * sizeof *w, c);
    pthread_t *th = pages((size_t)t * sizeof *th, c);
    double t0 = now_ns();
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < t; i++) {
            w[i].seed = g_seed + (uint64_t)(r * 16 + i);
            if (pthread_create(&th[i], NULL, churn_worker, &w[i]))
                fail_alloc(c, 0);
        }
        for (int i = 0; i < t; i++) {
            pthread_join(th[i], NULL);
            for (int k = 0; k < CHURN_OBJS / 2; k++)
                xfree(w[i].keep[k], w[i].keep_size[k], c);
        }
    }
    double ns = now_ns() - t0;
    munmap(w, (size_t)t * sizeof *w);
    munmap(th, (size_t)t * sizeof *th);
    report(c, ns, rounds * t, "");
}

/* One thread of a generation: frees what its predecessor left in `w`, then leaves its own. */
static void *handover_worker(void *arg) {
    struct churn *w = arg;
    for (int i = 0; i < CHURN_OBJS / 2; i++)
        if (w->keep[i])
            xfree(w->keep[i], w->keep_size[i], "thread_handover");
    churn_worker(w);
    return NULL;
}

static void thread_handover(const char *c, long generations) {
    int t = churn_threads();
    struct churn *w = pages((size_t)t * sizeof *w, c);
    pthread_t *th = pages((size_t)t * sizeof *th, c);
    double t0 = now_ns();
    for (long g = 0; g < generations; g++) {
        for (int i = 0; i < t; i++) {
            w[i].seed = g_seed + (uint64_t)(g * MAX_THREADS + i);
            if (pthread_create(&th[i], NULL, handover_worker, &w[i]))
                fail_alloc(c, 0);
        }
        for (int i = 0; i < t; i++)
            pthread_join(th[i], NULL);
    }
    double ns = now_ns() - t0;
    for (int i = 0; i < t; i++)
        for (int k = 0; k < CHURN_OBJS / 2; k++)
            xfree(w[i].keep[k], w[i].keep_size[k], c);
    munmap(w, (size_t)t * sizeof *w);
    munmap(th, (size_t)t * sizeof *th);
    report(c, ns, generations * t, "");
}

/* ------------------------------------------------------------------ TLB-bound random walk */

/* An object of the walk: the tag in its first and last byte (stamp), the link at offset 8. */
#define TLB_LINK(p) (*(void **)((char *)(p) + 8))

static void tlb_random(const char *c, size_t bytes) {
    size_t sz[NSIZES];
    fill_sizes(sz, 64, 256, g_seed);
    long n = 0;
    for (size_t b = 0; b < bytes; n++)
        b += sz[n & (NSIZES - 1)];
    if (n < 2)
        n = 2;
    if ((uint64_t)n > UINT32_MAX)
        fail_alloc(c, bytes); /* the order array holds 32-bit indices */
    void **p = malloc((size_t)n * sizeof *p);
    uint32_t *order = malloc((size_t)n * sizeof *order);
    if (!p || !order)
        fail_alloc(c, (size_t)n * sizeof *p);
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        p[i] = xmalloc(sz[i & (NSIZES - 1)], c);
    double alloc_ns = now_ns() - t0;
    long huge = anon_huge_kib();
    /* One cycle through every object in a random order (Fisher-Yates). */
    uint64_t s = g_seed ^ 0x7157;
    for (long i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(xorshift(&s) % (uint64_t)(i + 1));
        uint32_t x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (long i = 0; i < n; i++)
        TLB_LINK(p[order[i]]) = p[order[(i + 1) % n]];
    enum { PASSES = 3 };
    void *at = p[order[0]];
    double t = now_ns();
    for (int pass = 0; pass < PASSES; pass++) {
        long steps = 0;
        do {
            at = TLB_LINK(at);
            steps++;
        } while (at != p[order[0]] && steps <= n);
        if (steps != n) {
            printf("#corrupt case=%s cycle of %ld steps, want %ld\n", c, steps, n);
            fprintf(stderr, "mallocbench: %s: the cycle through %ld objects has %ld steps: "
                            "overlapping allocations\n", c, n, steps);
            fflush(stdout);
            exit(3);
        }
    }
    double ns = now_ns() - t;
    SINK(at);
    for (long i = 0; i < n; i++)
        xfree(p[i], sz[i & (NSIZES - 1)], c);
    free(order);
    free(p);
    char extra[160];
    snprintf(extra, sizeof extra, "ws_mib=%.1f alloc_ms=%.1f huge_mib=%.1f",
             (double)bytes / 1048576.0, alloc_ns / 1e6, (double)huge / 1024.0);
    report(c, ns, (long)PASSES * n, extra);
}

/* ------------------------------------------------------------------ main */

static const char *origin(const char *sym) {
    Dl_info info;
    void *m = dlsym(RTLD_DEFAULT, sym);
    if (m && dladdr(m, &info) && info.dli_fname)
        return info.dli_fname;
    return "unknown";
}

static const char *const CASES[] = {
    "pair_small", "pair_mixed", "live_small", "live_big",     "live_mixed",   "prodcons",
    "larson",     "realloc_grow", "large",    "thread_churn", "fragmentation",
    "thread_handover", "tlb_random",
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void run(const char *c) {
    if (!strcmp(c, "pair_small")) {
        pin(g_ncpu - 1);
        pair(c, 16, 256, scaled(10000000));
    } else if (!strcmp(c, "pair_mixed")) {
        pin(g_ncpu - 1);
        pair(c, 16, 32768, scaled(5000000));
    } else if (!strcmp(c, "live_small")) {
        pin(g_ncpu - 1);
        live(c, 1000, 16, 256, scaled(8000000));
    } else if (!strcmp(c, "live_big")) {
        pin(g_ncpu - 1);
        live(c, 200000, 16, 512, scaled(3000000));
    } else if (!strcmp(c, "live_mixed")) {
        pin(g_ncpu - 1);
        live(c, 20000, 16, 16384, scaled(3000000));
    } else if (!strcmp(c, "prodcons")) {
        if (g_threads == 1) {
            fprintf(stderr, "mallocbench: prodcons needs --threads of at least 2 (T/2 pairs)\n");
            exit(2);
        }
        prodcons(c, g_threads ? g_threads / 2 : 1, scaled(1000000));
    } else if (!strcmp(c, "larson")) {
        larson(c, scaled(100));
    } else if (!strcmp(c, "realloc_grow")) {
        pin(g_ncpu - 1);
        realloc_grow(c, scaled(100));
    } else if (!strcmp(c, "large")) {
        pin(g_ncpu - 1);
        large(c, scaled(4000));
    } else if (!strcmp(c, "thread_churn")) {
        thread_churn(c, scaled(1000));
    } else if (!strcmp(c, "thread_handover")) {
        thread_handover(c, scaled(1000));
    } else if (!strcmp(c, "tlb_random")) {
        pin(g_ncpu - 1);
        tlb_random(c, (size_t)scaled(512L << 20));
    } else if (!strcmp(c, "fragmentation")) {
        pin(g_ncpu - 1);
        fragmentation(c, scaled(400000) < 8 ? 8 : scaled(400000));
    }
}

static void usage(void) {
    fprintf(stderr, "usage: mallocbench --case NAME [--label L] [--scale F] [--seed N] "
                    "[--threads T]\ncases:");
    for (size_t i = 0; i < NCASES; i++)
        fprintf(stderr, " %s", CASES[i]);
    fprintf(stderr, "\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *c = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--case"))
            c = v;
        else if (!strcmp(a, "--label"))
            g_label = v;
        else if (!strcmp(a, "--scale")) {
            char *end;
            g_scale = strtod(v, &end);
            if (*end || !(g_scale > 0 && g_scale <= 1000)) {
                fprintf(stderr, "mallocbench: bad --scale %s (a number in (0, 1000])\n", v);
                exit(2);
            }
        } else if (!strcmp(a, "--threads")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > MAX_THREADS) {
                fprintf(stderr, "mallocbench: bad --threads %s (a whole number in [1, %d])\n", v,
                        MAX_THREADS);
                exit(2);
            }
            g_threads = (int)t;
        } else if (!strcmp(a, "--seed"))
            g_seed = strtoull(v, NULL, 0) | 1;
        else
            usage();
    }
    int known = 0;
    for (size_t i = 0; c && i < NCASES; i++)
        known |= !strcmp(c, CASES[i]);
    if (!known) {
        fprintf(stderr, "mallocbench: unknown case %s\n", c ? c : "(none)");
        usage();
    }
    g_ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (g_ncpu < 1)
        g_ncpu = 1;
    printf("#info label=%s malloc_from=%s free_from=%s realloc_from=%s calloc_from=%s ncpu=%d\n",
           g_label, origin("malloc"), origin("free"), origin("realloc"), origin("calloc"),
           g_ncpu);
    fflush(stdout);
    run(c);
    printf("#done\n");
    return 0;
}
