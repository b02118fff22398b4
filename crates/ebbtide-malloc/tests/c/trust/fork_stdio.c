/* fork while other threads read long lines through stdio and flush every stream (glibc bug
 * 19431): a pre-fork handler that takes an allocator lock before glibc's stdio list lock can
 * wait on a getline thread that waits, inside realloc, on that allocator lock, while a
 * fflush(NULL) thread holds the list lock and waits for the getline thread's file.
 * Runs for argv[2] seconds (default 3); a hang is killed by alarm() and reported as SIGALRM. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;
static const char *path;

static void *forker(void *a) {
    (void)a;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); abort(); }
        if (pid == 0) _exit(17);
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 17) {
            fprintf(stderr, "bad child status %d\n", st);
            abort();
        }
    }
    return NULL;
}

static void *reader(void *a) {
    (void)a;
    FILE *f = fopen(path, "r");
    if (!f) { perror("fopen"); abort(); }
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        rewind(f);
        char *line = NULL;
        size_t cap = 0;
        if (getline(&line, &cap, f) < 0) { perror("getline"); abort(); }
        free(line);
    }
    fclose(f);
    return NULL;
}

static void *flusher(void *a) {
    (void)a;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
        if (fflush(NULL) != 0) { perror("fflush"); abort(); }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: fork_stdio FILE [SECONDS]\n"); return 2; }
    path = argv[1];
    int secs = argc > 2 ? atoi(argv[2]) : 3;
    /* One long line: getline grows its buffer through realloc up to blocks above the size
     * classes (the page heap and the table of large blocks). */
    FILE *f = fopen(path, "w");
    if (!f) { perror("fopen"); return 2; }
    for (int i = 0; i < 3 << 20; i++) fputc('x', f);
    fputc('\n', f);
    fclose(f);
    alarm(secs + 10);
    pthread_t t[13];
    int n = 0;
    for (int i = 0; i < 4; i++) pthread_create(&t[n++], NULL, forker, NULL);
    for (int i = 0; i < 8; i++) pthread_create(&t[n++], NULL, reader, NULL);
    pthread_create(&t[n++], NULL, flusher, NULL);
    sleep(secs);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    puts("fork_stdio ok");
    return 0;
}
