/* Threads allocating, freeing each other's blocks (through a shared ring), exiting and being
 * replaced, while another thread forks children that allocate, and another calls malloc_trim
 * (a DRAIN_CPU) over and over. Every block carries a pattern checked when freed. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RING 4096
static _Atomic(uintptr_t) ring[RING];
static atomic_int stop;
static atomic_long bad;

static size_t size_for(unsigned r) {
    switch (r % 8) {
    case 0: return 8 + r % 56;
    case 1: return 64 + r % 200;
    case 2: return 256 + r % 800;
    case 3: return 1000 + r % 4000;
    case 4: return 5000 + r % 60000;
    case 5: return 16;
    case 6: return 48;
    default: return (r % 64 == 7) ? (1 << 20) + r % 3000000 : 100;
    }
}

static void *make(unsigned r) {
    size_t n = size_for(r);
    unsigned char *p = malloc(n);
    if (!p) return NULL;
    size_t *h = (size_t *)p;
    if (n >= 16) { h[0] = n; h[1] = n ^ 0x5a5a5a5a; }
    memset(p + (n >= 16 ? 16 : 0), (int)(n & 0xff), n >= 16 ? n - 16 : n);
    return p;
}

static void check_free(void *v) {
    unsigned char *p = v;
    size_t *h = (size_t *)p;
    if (malloc_usable_size(p) >= 16 && (h[1] == (h[0] ^ 0x5a5a5a5a))) {
        size_t n = h[0];
        for (size_t i = 16; i < n; i += 97)
            if (p[i] != (unsigned char)(n & 0xff)) { atomic_fetch_add(&bad, 1); break; }
    }
    free(p);
}

static void *worker(void *arg) {
    unsigned r = (unsigned)(uintptr_t)arg * 2654435761u;
    for (int i = 0; i < 10000 && !atomic_load(&stop); i++) {
        r = r * 1103515245u + 12345u;
        void *p = make(r >> 4);
        uintptr_t old = atomic_exchange(&ring[(r >> 8) % RING], (uintptr_t)p);
        if (old) check_free((void *)old);
    }
    return NULL;
}

static void *trimmer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) { malloc_trim(0); usleep(5000); }
    return NULL;
}

static void *forker(void *arg) {
    (void)arg;
    for (int i = 0; i < 12 && !atomic_load(&stop); i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* the child: one thread, every lock free; allocate and free a lot, then exit */
            void *ps[1000];
            for (int k = 0; k < 1000; k++) ps[k] = make((unsigned)k * 7u);
            for (int k = 0; k < 1000; k++) check_free(ps[k]);
            _exit(atomic_load(&bad) ? 3 : 0);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %d failed: %d\n", pid, st);
            atomic_fetch_add(&bad, 1);
        }
        usleep(1000);
    }
    return NULL;
}

int main(void) {
    pthread_t tr, fk;
    pthread_create(&tr, NULL, trimmer, NULL);
    pthread_create(&fk, NULL, forker, NULL);
    /* waves of short-lived workers: threads exit and new ones take their place */
    for (int wave = 0; wave < 6; wave++) {
        pthread_t w[4];
        for (int i = 0; i < 4; i++) pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)(wave * 4 + i + 1));
        for (int i = 0; i < 4; i++) pthread_join(w[i], NULL);
    }
    pthread_join(fk, NULL);
    atomic_store(&stop, 1);
    pthread_join(tr, NULL);
    for (int i = 0; i < RING; i++) {
        uintptr_t p = atomic_exchange(&ring[i], 0);
        if (p) check_free((void *)p);
    }
    printf("stress %s (bad %ld)\n", atomic_load(&bad) ? "failed" : "ok", atomic_load(&bad));
    return atomic_load(&bad) != 0;
}
