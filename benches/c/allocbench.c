/*
 * allocbench.c — ebbtide's C API through libebbtide.so against the process's malloc/free.
 *
 * One program, two modes:
 *   allocbench --alloc ebbtide          ebb_zone_create / ebb_zone_alloc / ebb_zone_free, one zone
 *                                       per item size, called through the shared library exactly
 *                                       as a C user calls it (PLT, no inlining);
 *   allocbench --alloc malloc           malloc / free of whatever allocator the process has:
 *                                       glibc, or the peer given by LD_PRELOAD.
 * The driver (crates/ebbtide-bench, binary ebbtide-bench-c) builds it with the system cc -O2,
 * runs one fresh process per allocator and round, interleaved, and prints the table.
 *
 * Cases (one operation = what the ns figure is divided by):
 *   pair64, pair256, pair4096        alloc then free of the same item, back to back; ns per pair
 *   live256_64, live256_256,         a FIFO of 256 live items: free the oldest, allocate its
 *   live256_4096                     replacement; ns per free + alloc
 *   cross2_64                        producer pinned to CPU 0 allocates 64 B items and passes them
 *                                    through a single-producer single-consumer ring (1024 slots)
 *                                    to a consumer pinned to CPU 1 that frees them; wall time from
 *                                    the start barrier to the last free; ns per item
 * Single-thread cases run pinned to one CPU (--cpu, default the last online CPU; --cpu-cycle:
 * the k-th single-thread case on CPU k mod ncpu, so a case listed twice measures the same zone
 * on two CPUs). A case may be listed more than once (same zone, measured again).
 *
 * Timing: CLOCK_MONOTONIC around the whole loop. Each case first runs an untimed warm-up of
 * 1/8 of its iterations, then doubles the iteration count until one measurement lasts at least
 * --min-ms (default 20 ms); then it measures once more with that count, and that measurement
 * is reported. --iters N fixes the count (no warm-up, no calibration; tests use tiny counts
 * with --min-ms 0).
 *
 * Output (stdout), one line per case:   <case> <allocator> <ns_per_op>
 * Lines starting with '#' are information: '#info' (once, with the object `malloc` comes from),
 * '#diag' per case with --diag: the measuring thread's CPU time per op (cpu_ns; wall time minus
 * this is time the thread did not run), the other threads' CPU time meanwhile, CPU at start and
 * end, migrations and context switches (/proc/thread-self/sched), minor faults (getrusage),
 * low 12 bits of the live array and a stack local; for ebbtide also the pressure events, the
 * zone's counters (requests, depot, buckets, reclaims), this CPU's stack count and slot, and
 * the whole virtual addresses and physical frames (root only) of the handle, this CPU's stack
 * header and an item. Exit status 0 only when every requested case ran.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "benchutil.h"

#include "ebbtide.h"

#define LIVE 256
#define RING 1024

static const char *const CASES[] = {
    "pair64", "pair256", "pair4096", "live256_64", "live256_256", "live256_4096", "cross2_64",
};
#define NCASES (sizeof CASES / sizeof CASES[0])

/* Keeps a value opaque to the optimiser without touching memory: the compiler must produce it
 * and cannot drop the malloc/free pair around it. */
#define SINK(p) __asm__ volatile("" : "+r"(p))

static void die(const char *what) {
    fprintf(stderr, "allocbench: %s: %s (%s)\n", what, strerror(errno), ebb_last_error());
    exit(1);
}

static double thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double process_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int threads_now(void) {
    char line[256];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    fclose(f);
    return n;
}

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

/* ------------------------------------------------------------------ the two allocators */

/* Each case is written once as a macro over ALLOC()/FREE(p) and expanded twice, so the loops
 * are the same code for both and each calls its allocator directly (no function pointer). */

static ebb_zone *g_zone; /* the zone of the case's item size (ebbtide mode) */
static size_t g_size;    /* the case's item size (malloc mode) */

#define EBB_ALLOC() ebb_zone_alloc(g_zone)
#define EBB_FREE(p) ebb_zone_free(g_zone, (p))
#define LIBC_ALLOC() malloc(g_size)
#define LIBC_FREE(p) free(p)

#define DEFINE_PAIR(name, ALLOC, FREE)                                                          \
    static __attribute__((noinline)) double name(long n) {                                  \
        double t = now_ns();                                                                \
        for (long i = 0; i < n; i++) {                                                      \
            void *p = ALLOC();                                                              \
            SINK(p);                                                                        \
            FREE(p);                                                                        \
        }                                                                                   \
        return (now_ns() - t) / (double)n;                                                  \
    }

/* `live` is the caller's array (a local of run_case, as a C user would keep it). */
#define DEFINE_LIVE(name, ALLOC, FREE)                                                          \
    static __attribute__((noinline)) double name(void **live, long n) {                     \
        for (int i = 0; i < LIVE; i++) {                                                    \
            live[i] = ALLOC();                                                              \
            if (!live[i])                                                                   \
                die("alloc");                                                               \
        }                                                                                   \
        double t = now_ns();                                                                \
        for (long k = 0; k < n; k++) {                                                      \
            void **s = &live[k % LIVE];                                                     \
            FREE(*s);                                                                       \
            void *p = ALLOC();                                                              \
            SINK(p);                                                                        \
            *s = p;                                                                         \
        }                                                                                   \
        double ns = (now_ns() - t) / (double)n;                                             \
        for (int i = 0; i < LIVE; i++)                                                      \
            FREE(live[i]);                                                                  \
        return ns;                                                                          \
    }

DEFINE_PAIR(pair_ebb, EBB_ALLOC, EBB_FREE)
DEFINE_PAIR(pair_libc, LIBC_ALLOC, LIBC_FREE)
DEFINE_LIVE(live_ebb, EBB_ALLOC, EBB_FREE)
DEFINE_LIVE(live_libc, LIBC_ALLOC, LIBC_FREE)

/* ------------------------------------------------------------------ cross2: SPSC ring */

struct ring {
    _Alignas(64) _Atomic unsigned long head; /* written by the producer */
    _Alignas(64) _Atomic unsigned long tail; /* written by the consumer */
    _Alignas(64) void *slot[RING];
};

struct cross {
    struct ring *ring;
    long n;
    int ebb;
    int cpu;
    pthread_barrier_t *go;
    double start, end;
    int failed;
};

/* Spin 256 times, then yield: a descheduled partner costs a time slice, not a spinning one. */
static void backoff(int *spins) {
    if (++*spins >= 256) {
        sched_yield();
        *spins = 0;
    }
}

static void *producer(void *arg) {
    struct cross *c = arg;
    struct ring *r = c->ring;
    if (pin(c->cpu) != 0)
        c->failed = 1;
    pthread_barrier_wait(c->go);
    c->start = now_ns();
    unsigned long head = 0;
    for (long k = 0; k < c->n; k++) {
        void *p = c->ebb ? EBB_ALLOC() : LIBC_ALLOC();
        if (!p) {
            c->failed = 1;
            p = (void *)1; /* keep the protocol going; the consumer skips it */
        }
        int spins = 0;
        while (head - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING)
            backoff(&spins);
        r->slot[head % RING] = p;
        /* Release pairs with the consumer's acquire load of head: the slot is written first. */
        atomic_store_explicit(&r->head, ++head, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg) {
    struct cross *c = arg;
    struct ring *r = c->ring;
    if (pin(c->cpu) != 0)
        c->failed = 1;
    pthread_barrier_wait(c->go);
    unsigned long tail = 0;
    for (long k = 0; k < c->n; k++) {
        int spins = 0;
        while (atomic_load_explicit(&r->head, memory_order_acquire) == tail)
            backoff(&spins);
        void *p = r->slot[tail % RING];
        /* Release pairs with the producer's acquire load of tail: the slot was read first. */
        atomic_store_explicit(&r->tail, ++tail, memory_order_release);
        if (p != (void *)1) {
            if (c->ebb)
                EBB_FREE(p);
            else
                LIBC_FREE(p);
        }
    }
    c->end = now_ns();
    return NULL;
}

static double cross2(int ebb, long n, int ncpu) {
    static struct ring ring;
    atomic_store(&ring.head, 0);
    atomic_store(&ring.tail, 0);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    struct cross p = {.ring = &ring, .n = n, .ebb = ebb, .cpu = 0, .go = &go};
    struct cross c = p;
    c.cpu = ncpu > 1 ? 1 : 0;
    pthread_t tp, tc;
    if (pthread_create(&tp, NULL, producer, &p) || pthread_create(&tc, NULL, consumer, &c))
        die("pthread_create");
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    pthread_barrier_destroy(&go);
    if (p.failed || c.failed) {
        fprintf(stderr, "allocbench: cross2: an allocation or a pin failed\n");
        exit(1);
    }
    return (c.end - p.start) / (double)n;
}

/* ------------------------------------------------------------------ diagnostics */

struct sched_info {
    long migrations, switches, vol, invol;
    long minflt;
};

static long sched_field(const char *text, const char *key) {
    const char *p = strstr(text, key);
    if (!p)
        return -1;
    p = strchr(p, ':');
    return p ? atol(p + 1) : -1;
}

static void sched_now(struct sched_info *s) {
    char buf[4096];
    memset(s, 0, sizeof *s);
    s->migrations = s->switches = s->vol = s->invol = -1;
    FILE *f = fopen("/proc/thread-self/sched", "r"); /* needs CONFIG_SCHED_DEBUG */
    if (f) {
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        buf[len] = 0;
        fclose(f);
        s->migrations = sched_field(buf, "se.nr_migrations");
        s->switches = sched_field(buf, "\nnr_switches");
        s->vol = sched_field(buf, "nr_voluntary_switches");
        s->invol = sched_field(buf, "nr_involuntary_switches");
    }
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    s->minflt = ru.ru_minflt;
    if (s->vol < 0) { /* no /proc/.../sched: rusage has the context switches */
        s->vol = ru.ru_nvcsw;
        s->invol = ru.ru_nivcsw;
    }
}

static int find_zone(const char *name, struct ebbtide_zone_stats *out) {
    struct ebbtide_zone_stats z[16];
    size_t n = ebb_stats_zones(z, 16);
    if (n == (size_t)-1)
        die("ebb_stats_zones");
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(z[i].name, name) == 0) {
            *out = z[i];
            return 0;
        }
    return -1;
}

/* The zone object behind a handle: the library sets bit 0 of the handle of a zone on the fast
 * paths (crates/ebbtide-capi, `EbbZone`). Diagnostics only. */
static uintptr_t zone_obj(const ebb_zone *z) { return (uintptr_t)z & ~(uintptr_t)1; }

/* The per-CPU stacks' base, for the address diagnostics only: the zone object starts with the
 * fast-path constants, whose first member (RseqRef: base pointer, rseq offset) holds the base,
 * a mapped address at a multiple of 64 bytes into its page (the stacks' colour). Not an API: 0
 * when the first word does not look like one. */
static uintptr_t pcpu_base_guess(const ebb_zone *z) {
    uintptr_t w = *(const uintptr_t *)zone_obj(z);
    if (w > ((uintptr_t)1 << 32) && w < ((uintptr_t)1 << 47) && (w & 63) == 0)
        return w;
    return 0;
}

/* Physical frame number of the page holding `va` from /proc/self/pagemap (needs
 * CAP_SYS_ADMIN; 0 when not visible). Diagnostics only. */
static unsigned long long pfn_of(uintptr_t va) {
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f)
        return 0;
    uint64_t e = 0;
    if (fseek(f, (long)(va / 4096 * 8), SEEK_SET) != 0 || fread(&e, 8, 1, f) != 1)
        e = 0;
    fclose(f);
    return (e >> 63) & 1 ? (unsigned long long)(e & ((1ULL << 55) - 1)) : 0;
}

/* ------------------------------------------------------------------ driver of one case */

struct opts {
    int ebb;
    const char *label;
    long iters; /* 0: calibrate */
    double min_ms;
    int cpu;
    int ncpu;
    int diag;
    int cpu_cycle;
};

static ebb_zone *g_zones[3];

static void create_zones(void) {
    static const char *names[3] = {"cbench64", "cbench256", "cbench4096"};
    static const size_t sizes[3] = {64, 256, 4096};
    for (int i = 0; i < 3; i++) {
        g_zones[i] = ebb_zone_create(names[i], sizes[i], 0, 0);
        if (!g_zones[i])
            die("ebb_zone_create");
    }
}

static int zone_index(size_t size) { return size == 64 ? 0 : size == 256 ? 1 : 2; }

static size_t case_size(const char *c) {
    const char *u = strrchr(c, '_');
    const char *num = u ? u + 1 : c + 4; /* "pairNNN" */
    return (size_t)atol(num);
}

static long default_iters(const char *c) {
    if (strncmp(c, "cross2", 6) == 0)
        return 1L << 18;
    return 1L << 20;
}

static double measure(const char *c, const struct opts *o, long n, void **live) {
    int ebb = o->ebb;
    if (strncmp(c, "pair", 4) == 0)
        return ebb ? pair_ebb(n) : pair_libc(n);
    if (strncmp(c, "live", 4) == 0)
        return ebb ? live_ebb(live, n) : live_libc(live, n);
    return cross2(ebb, n, o->ncpu);
}

static __attribute__((noinline)) void run_case(const char *c, const struct opts *o) {
    void *live[LIVE]; /* on this thread's stack, as a C user's local array */
    g_size = case_size(c);
    g_zone = o->ebb ? g_zones[zone_index(g_size)] : NULL;
    int single = strncmp(c, "cross2", 6) != 0;
    static int nsingle; /* --cpu-cycle: the k-th single-thread case runs on CPU k mod ncpu */
    int cpu = o->cpu_cycle ? nsingle++ % o->ncpu : o->cpu;
    if (single && pin(cpu) != 0)
        die("sched_setaffinity");
    struct ebbtide_zone_stats z0, z1;
    char zname[32];
    snprintf(zname, sizeof zname, "cbench%zu", g_size);
    if (o->ebb && find_zone(zname, &z0) != 0)
        die("zone not in ebb_stats_zones");

    long n = o->iters;
    if (n == 0) {
        n = default_iters(c);
        measure(c, o, n / 8 > 0 ? n / 8 : 1, live); /* warm-up, untimed */
        /* Calibration: double n until one measurement lasts --min-ms. Those measurements only
         * choose n; the one reported below runs after them. Reporting the calibrating one
         * (as before 2026-11-24) reported the process's first milliseconds whenever the first
         * measurement already reached --min-ms, and a later one otherwise: a bimodal figure
         * made by the threshold (docs/benchmarks.md, "The first milliseconds"). */
        while (measure(c, o, n, live) * (double)n < o->min_ms * 1e6 && n < (1L << 34))
            n *= 2;
    }
    struct ebbtide_global_stats g0, g1;
    if (ebb_stats_global(&g0) != 0)
        die("ebb_stats_global");
    if (o->ebb && find_zone(zname, &z0) != 0) /* again: warm-up and calibration not counted */
        die("zone not in ebb_stats_zones");
    struct sched_info s0, s1;
    int cpu0 = sched_getcpu();
    sched_now(&s0);
    double c0 = thread_cpu_ns(), p0 = process_cpu_ns();
    double ns = measure(c, o, n, live);
    double c1 = thread_cpu_ns(), p1 = process_cpu_ns();
    double cpu_ns = (c1 - c0) / (double)n; /* this thread's CPU time, per op */
    /* CPU time of the process's other threads (ebbtide's reclaim and release threads) meanwhile */
    double others_ms = ((p1 - p0) - (c1 - c0)) / 1e6;
    sched_now(&s1);
    int cpu1 = sched_getcpu();
    printf("%s %s %.3f\n", c, o->label, ns);
    if (!o->diag)
        return;
    printf("#diag %s %s iters=%ld cpu_ns=%.3f other_threads_cpu_ms=%.3f threads=%d cpu_start=%d cpu_end=%d migrations=%ld switches=%ld "
           "vol_switches=%ld invol_switches=%ld minflt=%ld live_array_lo12=%03lx "
           "stack_local_lo12=%03lx",
           c, o->label, n, single ? cpu_ns : -1.0, single ? others_ms : -1.0, threads_now(),
           cpu0, cpu1, s1.migrations - s0.migrations,
           s1.switches - s0.switches, s1.vol - s0.vol, s1.invol - s0.invol,
           s1.minflt - s0.minflt, (unsigned long)((uintptr_t)live & 4095),
           (unsigned long)((uintptr_t)&n & 4095));
    if (o->ebb) {
        if (ebb_stats_global(&g1) != 0)
            die("ebb_stats_global");
        printf(" pressure_level=%llu pressure_events=%llu last_event_source=%s",
               (unsigned long long)g1.pressure_level,
               (unsigned long long)(g1.pressure_events - g0.pressure_events),
               g1.last_event_source[0] ? g1.last_event_source : "none");
        if (find_zone(zname, &z1) != 0)
            die("zone not in ebb_stats_zones");
        uintptr_t base = pcpu_base_guess(g_zone);
        /* This CPU's stack: its header (the commit word, whose low 10 bits are the count)
         * is at base + cpu * 8192; the fast path's slot is items[count - 1] at +56 + 8 * count. */
        long count = -1;
        if (base && cpu1 >= 0 && cpu1 < o->ncpu)
            count = (long)(*(volatile uint64_t *)(base + ((uintptr_t)cpu1 << 13)) & 0x3ff);
        void *probe = ebb_zone_alloc(g_zone);
        printf(" zone_lo12=%03lx pcpu_base_lo12=%s%03lx pcpu_hdr_cpu=%d item_lo12=%03lx "
               "pcpu_count=%ld slot_lo12=%03lx requests=%llu frees=%llu bucket_size=%llu depot_nitems_before=%llu "
               "depot_nitems_after=%llu cached_bytes_pcpu=%llu pages_mapped=%llu buckets_enabled=%llu "
               "squeeze_windows=%llu reclaim_trim=%llu reclaim_drain=%llu reclaim_drain_cpu=%llu "
               "released_bytes=%llu",
               (unsigned long)(zone_obj(g_zone) & 4095), base ? "" : "unknown:",
               (unsigned long)(base & 4095), cpu1,
               (unsigned long)((uintptr_t)probe & 4095), count,
               count >= 0 ? (unsigned long)((base + ((uintptr_t)cpu1 << 13) + 56 + 8 * count) & 4095) : 0ul,
               (unsigned long long)(z1.requests - z0.requests),
               (unsigned long long)(z1.frees - z0.frees), (unsigned long long)z1.bucket_size,
               (unsigned long long)z0.depot_nitems, (unsigned long long)z1.depot_nitems,
               (unsigned long long)z1.cached_bytes_pcpu, (unsigned long long)z1.pages_mapped,
               (unsigned long long)z1.buckets_enabled,
               (unsigned long long)(z1.squeeze_windows - z0.squeeze_windows),
               (unsigned long long)(z1.reclaim_trim - z0.reclaim_trim),
               (unsigned long long)(z1.reclaim_drain - z0.reclaim_drain),
               (unsigned long long)(z1.reclaim_drain_cpu - z0.reclaim_drain_cpu),
               (unsigned long long)(z1.released_bytes - z0.released_bytes));
        /* Whole virtual addresses of the hot lines (bits above 12 differ from process to
         * process with ASLR): the handle, this CPU's stack header, an item, the rseq area. */
        extern const ptrdiff_t __rseq_offset __attribute__((weak));
        uintptr_t rseq = &__rseq_offset ? (uintptr_t)__builtin_thread_pointer() + __rseq_offset : 0;
        printf(" zone_va=%lx pcpu_va=%lx item_va=%lx rseq_va=%lx live_va=%lx",
               (unsigned long)zone_obj(g_zone),
               (unsigned long)(base ? base + ((uintptr_t)cpu1 << 13) : 0),
               (unsigned long)(uintptr_t)probe, (unsigned long)rseq,
               (unsigned long)(uintptr_t)live);
        printf(" zone_pfn=%llx pcpu_pfn=%llx item_pfn=%llx", pfn_of(zone_obj(g_zone)),
               pfn_of(base ? base + ((uintptr_t)cpu1 << 13) : 0), pfn_of((uintptr_t)probe));
        ebb_zone_free(g_zone, probe);
    }
    printf("\n");
}

/* ------------------------------------------------------------------ main */

/* Which malloc the process has: the object that defines the first `malloc` in lookup order. */
static const char *malloc_origin(void) {
    Dl_info info;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    if (m && dladdr(m, &info) && info.dli_fname)
        return info.dli_fname;
    return "unknown";
}

static void usage(void) {
    fprintf(stderr,
            "usage: allocbench --alloc ebbtide|malloc [--label NAME] [--cases a,b,...|all]\n"
            "                  [--iters N] [--min-ms MS] [--cpu N | --cpu-cycle] [--diag]\n"
            "                  [--pad BYTES]\n"
            "cases: pair64 pair256 pair4096 live256_64 live256_256 live256_4096 cross2_64\n");
    exit(2);
}

static int run_all(const struct opts *o, char *cases) {
    int ran = 0;
    for (char *tok = strtok(cases, ","); tok; tok = strtok(NULL, ",")) {
        int all = strcmp(tok, "all") == 0, found = 0;
        for (size_t i = 0; i < NCASES; i++)
            if (all || strcmp(tok, CASES[i]) == 0) {
                run_case(CASES[i], o);
                found = 1;
                ran++;
            }
        if (!found) {
            fprintf(stderr, "allocbench: unknown case %s\n", tok);
            exit(2);
        }
    }
    fflush(stdout);
    return ran;
}

int main(int argc, char **argv) {
    struct opts o = {.ebb = -1, .label = NULL, .iters = 0, .min_ms = 20, .cpu = -1, .diag = 0};
    char cases[256] = "all";
    long pad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--diag") == 0) {
            o.diag = 1;
            continue;
        }
        if (strcmp(a, "--cpu-cycle") == 0) {
            o.cpu_cycle = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--alloc") == 0) {
            if (strcmp(v, "ebbtide") == 0)
                o.ebb = 1;
            else if (strcmp(v, "malloc") == 0)
                o.ebb = 0;
            else
                usage();
        } else if (strcmp(a, "--label") == 0) {
            o.label = v;
        } else if (strcmp(a, "--cases") == 0) {
            snprintf(cases, sizeof cases, "%s", v);
        } else if (strcmp(a, "--iters") == 0) {
            o.iters = atol(v);
        } else if (strcmp(a, "--min-ms") == 0) {
            o.min_ms = atof(v);
        } else if (strcmp(a, "--cpu") == 0) {
            o.cpu = atoi(v);
        } else if (strcmp(a, "--pad") == 0) {
            pad = atol(v);
        } else {
            usage();
        }
    }
    if (o.ebb < 0 || o.iters < 0 || pad < 0 || pad > (1 << 20))
        usage();
    if (!o.label)
        o.label = o.ebb ? "ebbtide" : "malloc";
    o.ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (o.ncpu < 1)
        o.ncpu = 1;
    if (o.cpu < 0)
        o.cpu = o.ncpu - 1;
    printf("#info allocator=%s mode=%s malloc_from=%s ebbtide=%s ncpu=%d pid=%d\n", o.label,
           o.ebb ? "ebb_zone" : "malloc", malloc_origin(), ebb_version(), o.ncpu, (int)getpid());
    if (o.ebb)
        create_zones();
    /* --pad moves this thread's stack (and so the live array) down by BYTES: the address
     * experiment of docs/benchmarks.md sweeps it. */
    volatile char *shift = pad ? __builtin_alloca((size_t)pad) : NULL;
    if (shift)
        shift[0] = 0;
    int ran = run_all(&o, cases);
    if (o.ebb)
        for (int i = 0; i < 3; i++)
            if (ebb_zone_destroy(g_zones[i]) != 0)
                die("ebb_zone_destroy");
    printf("#done cases=%d\n", ran);
    return ran > 0 ? 0 : 1;
}
