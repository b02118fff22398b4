/* twolists: a model of the per-CPU stack's fast path, to ask what a free and an allocation that
 * do not wait for each other would buy (docs/benchmarks.md, "The stacks' address as the owner
 * test", "Two counters, modelled and built"). No rseq, no zone, no pointer check: plain
 * functions on stacks laid out as `pcpu.rs` lays out a CPU's stack (a header word whose low 16
 * bits are the count, the items after it).
 *
 * What it answered, and what it did not: here "split" runs a pair in about half the time of
 * "one"; built into `pcpu.rs` (the same two counters in the rseq sections) it ran slower, in the
 * C entry points and in the Rust harness alike: the model's "one" is slower than the real
 * sections (3.6-3.9 against the real pair's 2.1 ns of `BareStacks`), so what it removes is not
 * what bounds the real code. Kept as the record of that, not as a guide.
 *
 *   cc -O2 -o /tmp/twolists benches/c/micro/twolists.c
 *   /tmp/twolists
 *
 * Layouts:
 *   one   one stack: the allocation pops the top, the free pushes onto it (pcpu.rs today). Each
 *         operation reads the count word the one before it wrote.
 *   two   two stacks, as UMA's per-CPU alloc and free buckets: the allocation pops the alloc
 *         stack, the free pushes onto the free stack, and an allocation that finds its stack
 *         empty swaps the two (both operations read which stack is which first: a word written
 *         only by the swap). A free waits only for the free before it, an allocation only for
 *         the allocation before it.
 *   split one stack with two counters (below, beside its functions).
 * Cases: pair (allocate, free the same item) and live (a FIFO of 200 live items: free the
 * oldest, allocate its replacement), as ebbtide-bench-c's pair64 and live256_64.
 *
 * Prints ns per pair for each layout and case, the best of five repetitions of 100 M pairs.
 * Not a test.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define CAP 512
#define LIVE 200
#define N 100000000L

struct stack {
    uint64_t word; /* count in the low 16 bits */
    void *items[CAP];
};

static struct stack one __attribute__((aligned(64)));
static struct stack two_a __attribute__((aligned(64))), two_b __attribute__((aligned(64)));
/* Which of two_a and two_b the allocation pops and the free pushes: written by the swap only. */
static struct stack *volatile alloc_side = &two_a, *volatile free_side = &two_b;
static char items[CAP][64];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) static void *pop_one(void) {
    uint64_t w = one.word;
    unsigned n = w & 0xffff;
    if (!n)
        return 0;
    void *p = one.items[n - 1];
    one.word = w - 1;
    return p;
}

__attribute__((noinline)) static void push_one(void *p) {
    uint64_t w = one.word;
    unsigned n = w & 0xffff;
    one.items[n] = p;
    one.word = w + 1;
}

__attribute__((noinline)) static void *pop_two(void) {
    struct stack *a = alloc_side;
    uint64_t w = a->word;
    unsigned n = w & 0xffff;
    if (__builtin_expect(!n, 0)) {
        struct stack *f = free_side;
        alloc_side = f;
        free_side = a;
        a = f;
        w = a->word;
        n = w & 0xffff;
        if (!n)
            return 0;
    }
    void *p = a->items[n - 1];
    a->word = w - 1;
    return p;
}

__attribute__((noinline)) static void push_two(void *p) {
    struct stack *f = free_side;
    uint64_t w = f->word;
    unsigned n = w & 0xffff;
    f->items[n] = p;
    f->word = w + 1;
}

/*   split one stack, two counters: `pushed` written by pushes only, `popped` by pops only; the
 *         count is their difference. A pop waits only for the pop before it, a push for the
 *         push before it, and the LIFO order stays. */
static struct {
    uint64_t pushed, popped;
    void *items[CAP];
} split __attribute__((aligned(64)));

__attribute__((noinline)) static void *pop_split(void) {
    uint64_t q = split.popped;
    unsigned n = (unsigned)(split.pushed - q);
    if (!n)
        return 0;
    void *p = split.items[n - 1];
    split.popped = q + 1;
    return p;
}

__attribute__((noinline)) static void push_split(void *p) {
    uint64_t w = split.pushed;
    unsigned n = (unsigned)(w - split.popped);
    split.items[n] = p;
    split.pushed = w + 1;
}

typedef void *(*pop_fn)(void);
typedef void (*push_fn)(void *);

static double pair(pop_fn pop, push_fn push) {
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t = now();
        for (long i = 0; i < N; i++)
            push(pop());
        double e = (now() - t) / N;
        best = e < best ? e : best;
    }
    return best;
}

static double live(pop_fn pop, push_fn push) {
    void *slots[LIVE];
    for (int i = 0; i < LIVE; i++)
        slots[i] = pop();
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t = now();
        for (long i = 0; i < N; i++) {
            void **s = &slots[i % LIVE];
            push(*s);
            *s = pop();
        }
        double e = (now() - t) / N;
        best = e < best ? e : best;
    }
    for (int i = 0; i < LIVE; i++)
        push(slots[i]);
    return best;
}

int main(void) {
    for (int i = 0; i < 256; i++) {
        push_one(items[i]);
        push_two(items[i]);
        push_split(items[i]);
    }
    /* Through function pointers so that neither layout is inlined into its loop. */
    pop_fn p1 = pop_one, p2 = pop_two, p3 = pop_split;
    push_fn q1 = push_one, q2 = push_two, q3 = push_split;
    printf("pair one %.2f ns/pair\n", pair(p1, q1));
    printf("pair two %.2f ns/pair\n", pair(p2, q2));
    printf("pair split %.2f ns/pair\n", pair(p3, q3));
    printf("live one %.2f ns/pair\n", live(p1, q1));
    printf("live two %.2f ns/pair\n", live(p2, q2));
    printf("live split %.2f ns/pair\n", live(p3, q3));
    return 0;
}
