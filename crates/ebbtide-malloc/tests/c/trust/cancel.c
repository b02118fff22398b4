/* Thread cancellation (glibc's tst-malloc-stats-cancellation): a thread that calls malloc,
 * free, malloc_stats (which writes to stderr) and, with argument "messages", frees a bad
 * pointer (a message on stderr) in a loop is cancelled. The allocator's own writes must not be cancellation points: the
 * cancellation must happen at the thread's pthread_testcancel, and the process must go on.
 * Prints "cancel ok" when the thread ended cancelled. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int cleanups;
static int bad_frees;

static void cleanup(void *a) { (void)a; cleanups++; }

static void *work(void *a) {
    (void)a;
    static char not_heap[64];
    pthread_cleanup_push(cleanup, NULL);
    for (unsigned i = 0;; i++) {
        void *p = malloc(32 + i % 3000);
        free(p);
        void *q = malloc(200000 + i % 7);     /* above the classes */
        free(q);
        malloc_stats();
        if (bad_frees && i % 64 == 0) free(not_heap + 8);  /* a message on stderr */
        pthread_testcancel();
    }
    pthread_cleanup_pop(0);
    return NULL;
}

int main(int argc, char **argv) {
    /* "messages": also free a bad pointer now and then (ebbtide reports it on stderr and goes
     * on; glibc would abort, so it is not done there). */
    bad_frees = argc > 1 && argv[1][0] == 'm';
    /* The messages and statistics go nowhere: only the cancellation matters. */
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    alarm(20);
    for (int round = 0; round < 20; round++) {
        pthread_t t;
        pthread_create(&t, NULL, work, NULL);
        usleep(20000);
        pthread_cancel(t);
        void *r;
        pthread_join(t, &r);
        if (r != PTHREAD_CANCELED) { puts("not cancelled"); return 1; }
    }
    printf("cancel ok %d\n", cleanups);
    return cleanups == 20 ? 0 : 1;
}
