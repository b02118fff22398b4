/* What the C benchmarks share (mallocbench.c, allocbench.c and the micro benchmarks, each
 * including it by its path relative to the source, so no -I is needed): the clock they time
 * with and the pseudo-random generator their sizes and slots come from. Include it after the
 * system headers, once _GNU_SOURCE (or another feature macro exposing clock_gettime under
 * -std=c11) is defined. */
#ifndef EBBTIDE_BENCHUTIL_H
#define EBBTIDE_BENCHUTIL_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Marsaglia's xorshift64 (13, 7, 17): advances *s (never 0) and returns it. */
static inline uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#endif
