/* rlimit_as_lowered MiB after|before: prints its VmSize at start, then (`after`) lowers its own
 * RLIMIT_AS to MiB mebibytes, creates a thread and joins it, and mallocs 1 MiB blocks (each
 * touched) until malloc fails; prints what happened. `before`: the limit was set by whoever
 * started it; the same without lowering it. glibc's tst-malloc-thread-fail in small. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vmsize.h"

static void *thread(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[2], "after") && strcmp(argv[2], "before"))) {
        fprintf(stderr, "usage: rlimit_as_lowered MiB after|before\n");
        return 2;
    }
    printf("vmsize_kib %ld\n", vmsize_kib());
    if (!strcmp(argv[2], "after")) {
        rlim_t limit = (rlim_t)strtoul(argv[1], 0, 10) << 20;
        struct rlimit r = {limit, limit};
        if (setrlimit(RLIMIT_AS, &r) != 0) {
            perror("setrlimit");
            return 2;
        }
    }
    pthread_t t;
    int e = pthread_create(&t, 0, thread, 0);
    printf("thread %s\n", e == 0 ? "created" : strerror(e));
    if (e == 0)
        pthread_join(t, 0);
    size_t n = 0;
    void **kept = 0;
    for (;;) {
        void **p = malloc(1 << 20);
        if (!p)
            break;
        memset(p, 1, 4096);
        *p = kept;
        kept = p;
        n++;
    }
    printf("blocks %zu\n", n);
    while (kept) {
        void **next = *kept;
        free(kept);
        kept = next;
    }
    /* The memory is back: the allocator works again. */
    void *q = malloc(1 << 20);
    printf("after_free %s\n", q ? "ok" : "failed");
    free(q);
    return 0;
}
