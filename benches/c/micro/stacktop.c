/* stacktop: a model of the per-CPU stack's fast path, to ask whether caching the top item
 * beside the count would shorten a malloc's pair of calls (docs/benchmarks.md, "Four
 * candidates tried against the remaining misses"). No rseq, no zone: plain functions on
 * arrays laid out as `pcpu.rs` lays out a CPU's stack, and a free that finds its stack from
 * the pointer through a chunk map (one load), as the malloc's free does.
 *
 *   cc -O2 -o /tmp/stacktop benches/c/micro/stacktop.c
 *   /tmp/stacktop LAYOUT K      LAYOUT a: count in the header word, the item in the slot below
 *                                         it (pcpu.rs today)
 *                                      d: the same, plus the top item cached in the header with a
 *                                         tag (the count it is valid for); a pop takes the item
 *                                         from the cache when the tag matches
 *                               K 1, 2, 4, 16: classes in turn; 0: sizes as mallocbench's
 *                                         pair_small draws them (16-256 B), 16-byte classes
 *
 * Prints "LAYOUT K NS ns/pair", the best of five repetitions of 20 M pairs. Not a test.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "../benchutil.h"

#define NCL 16
#define CHUNK_SHIFT 22

struct stack {
    uint64_t word;       /* count in the low 16 bits */
    uint32_t cap, floor; /* pushes while count < cap, pops while count > floor */
    uint64_t top;        /* layout d: the top item << 16 | the count it is valid for */
    uint64_t pad[4];
    uint64_t below;      /* items[-1]: always 0 */
    void *items[1008];
} __attribute__((aligned(64)));

static struct stack *stacks[NCL];
static uint8_t class_of[64];
static struct stack **chunk_map;
static uintptr_t arena;
static size_t sizes[64];

__attribute__((noinline)) static void *slow(void) { abort(); }

static inline struct stack *by_size(size_t n) { return stacks[class_of[((n + 7) >> 3) & 63]]; }
static inline struct stack *by_pointer(void *p) {
    return chunk_map[((uintptr_t)p - arena) >> CHUNK_SHIFT];
}

__attribute__((noinline)) static void *malloc_a(size_t n) {
    struct stack *s = by_size(n);
    uint64_t w = s->word;
    uint32_t c = w & 0xffff;
    if (c <= s->floor)
        return slow();
    void *p = s->items[c - 1];
    s->word = w - 1 + (1 << 16);
    return p;
}

__attribute__((noinline)) static void free_a(void *p) {
    struct stack *s = by_pointer(p);
    uint64_t w = s->word;
    uint32_t c = w & 0xffff;
    if (c >= s->cap || s->items[c - 1] == p) {
        slow();
        return;
    }
    s->items[c] = p;
    s->word = w + 1;
}

__attribute__((noinline)) static void *malloc_d(size_t n) {
    struct stack *s = by_size(n);
    uint64_t w = s->word;
    uint32_t c = w & 0xffff;
    if (c <= s->floor)
        return slow();
    uint64_t t = s->top;
    void *p = (t & 0xffff) == c ? (void *)(t >> 16) : s->items[c - 1];
    s->top = ((uint64_t)s->items[c - 2] << 16) | (c - 1);
    s->word = w - 1 + (1 << 16);
    return p;
}

__attribute__((noinline)) static void free_d(void *p) {
    struct stack *s = by_pointer(p);
    uint64_t w = s->word;
    uint32_t c = w & 0xffff;
    uint64_t t = s->top;
    void *top = (t & 0xffff) == c ? (void *)(t >> 16) : s->items[c - 1];
    if (c >= s->cap || top == p) {
        slow();
        return;
    }
    s->items[c] = p;
    s->top = ((uint64_t)p << 16) | (c + 1);
    s->word = w + 1;
}

int main(int argc, char **argv) {
    if (argc != 3 || (argv[1][0] != 'a' && argv[1][0] != 'd')) {
        fprintf(stderr, "usage: stacktop a|d K\n");
        return 2;
    }
    char layout = argv[1][0];
    int k = atoi(argv[2]);
    long n = 20000000;
    char *a = mmap(0, (size_t)(NCL + 1) << CHUNK_SHIFT, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED)
        return 1;
    arena = ((uintptr_t)a + (1 << CHUNK_SHIFT) - 1) & ~(((uintptr_t)1 << CHUNK_SHIFT) - 1);
    chunk_map = calloc(NCL + 1, sizeof *chunk_map);
    for (int c = 0; c < NCL; c++) {
        /* each class's stack at its own colour in a page, as pcpu.rs places them */
        char *m = aligned_alloc(4096, sizeof(struct stack) + 4096);
        struct stack *s = (struct stack *)(m + 64 * (c * 7 % 60));
        memset(s, 0, sizeof *s);
        s->cap = 500;
        s->floor = 1;
        for (int i = 0; i < 100; i++) { /* 100 items of the class's chunk */
            void *p = (void *)(arena + ((uintptr_t)c << CHUNK_SHIFT) + 64 * (i + 1));
            s->items[i] = p;
            s->word = i + 1;
            s->top = ((uint64_t)p << 16) | (i + 1);
        }
        stacks[c] = s;
        chunk_map[c] = s;
    }
    for (int i = 0; i < 64; i++) {
        class_of[i] = k ? i % k : 0;
        sizes[i] = (size_t)(((i * 37) % 64) * 8);
    }
    if (k == 0) { /* log-uniform 16-256 B as mallocbench's fill_sizes, 16-byte classes */
        uint64_t x = 88172645463325252ull;
        for (int i = 0; i < 64; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int b = 4 + (int)(x % 5);
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t v = ((size_t)1 << b) + (x % ((size_t)1 << b));
            sizes[i] = v > 256 ? 256 : v;
            class_of[i] = (uint8_t)(((i * 8 + 15) / 16) % NCL);
        }
    }
    void *(*m)(size_t) = layout == 'a' ? malloc_a : malloc_d;
    void (*f)(void *) = layout == 'a' ? free_a : free_d;
    double best = 1e18;
    for (int r = 0; r < 5; r++) {
        double t = now_ns();
        for (long i = 0; i < n; i++) {
            char *p = m(sizes[i & 63]);
            p[0] = (char)i; /* the program's use of the block */
            if (p[0] != (char)i)
                abort();
            f(p);
        }
        double d = (now_ns() - t) / n;
        if (d < best)
            best = d;
    }
    printf("%c %d %.2f ns/pair\n", layout, k, best);
    return 0;
}
