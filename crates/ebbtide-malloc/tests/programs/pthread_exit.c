/* Reduced from CPython's test_threading (a thread forks; in the child that thread returns):
 * the main thread ends with pthread_exit while a worker runs; the process must end, with
 * status 0, when that last thread of the program returns (glibc exits when its thread count
 * reaches zero) — threads of the malloc must not keep the process alive. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *worker(void *arg) {
    (void)arg;
    usleep(200 * 1000);
    char *p = malloc(1000);
    printf("worker done %d\n", p != NULL);
    fflush(stdout);
    free(p);
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    printf("main: pthread_exit\n");
    fflush(stdout);
    pthread_exit(NULL);
}
