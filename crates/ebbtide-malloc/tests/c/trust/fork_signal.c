/* fork from a signal handler that interrupted a fork (glibc's tst-mallocfork2): POSIX makes
 * fork async-signal-safe, and a single-threaded process must not hang when a SIGUSR1 handler
 * forks while the main program is inside fork (or malloc). A second process sends the
 * signals as fast as it can. A hang is killed by alarm() (SIGALRM). Prints the number of
 * forks made inside handlers (must be > 0).
 *
 * As in tst-mallocfork2, a handler forks once per iteration of the main loop, and returns at
 * once for the signals after that until the loop clears the flag: a handler that forks at
 * every signal starves the loop whenever a fork and its wait take longer than the sender's
 * period (it then "hangs" under any allocator whose fork is slow enough: jemalloc's and
 * tcmalloc's did here, and ebbtide's under load).
 *
 * fork_signal [ITERATIONS [MIB]]: with MIB, that many MiB stay allocated (64 KiB blocks)
 * before the loop, and the loop frees and allocates blocks of up to 70 KB, as tst-mallocfork2
 * does: past ebbtide's runtime_start_bytes its runtime threads run, so the process is
 * multi-threaded for glibc (which then takes its fork lock) while the program itself has one
 * thread. Prints the number of the process's tasks before the loop too. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

/* Tasks (threads) of this process now. */
static int tasks(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static volatile sig_atomic_t in_handler_forks;
/* Set by the handler that forked; cleared by the main loop at each iteration. */
static volatile sig_atomic_t forked_this_iteration;

static void handler(int sig) {
    (void)sig;
    if (forked_this_iteration) return;
    forked_this_iteration = 1;
    int e = 0;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) {
        in_handler_forks++;
        while (waitpid(pid, NULL, 0) < 0 && (e = 1)) {}
    }
    (void)e;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 500;
    int mib = argc > 2 ? atoi(argv[2]) : 0;
    enum { SLOTS = 1009 };
    static void *slot[SLOTS];
    for (int i = 0; i < mib * 16; i++) {
        char *k = malloc(65536);
        if (!k) { perror("malloc"); return 1; }
        memset(k, 1, 65536);
        if (i < SLOTS) slot[i] = k; /* the rest stays allocated to the end */
    }
    printf("tasks %d\n", tasks());
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    pid_t me = getpid();
    pid_t sender = fork();
    if (sender == 0) {
        for (;;) {
            if (kill(me, SIGUSR1) != 0) _exit(0);
            usleep(100);
        }
    }
    alarm(30);
    for (int i = 0; i < iters; i++) {
        forked_this_iteration = 0;
        void *p = malloc(100 + i % 5000);
        pid_t pid = fork();
        if (pid == 0) _exit(0);
        if (pid < 0) { perror("fork"); return 1; }
        while (waitpid(pid, NULL, 0) < 0) {}
        free(p);
        if (mib) {
            /* Signals inside free and malloc too, some of them in the page heap's lock. */
            unsigned r = (unsigned)i * 2654435761u;
            int k = (int)(r % SLOTS);
            free(slot[k]);
            slot[k] = malloc((r >> 8) % 70000);
            if (!slot[k]) { perror("malloc"); return 1; }
        }
    }
    kill(sender, SIGKILL);
    waitpid(sender, NULL, 0);
    printf("fork_signal ok %d\n", (int)in_handler_forks);
    return in_handler_forks > 0 ? 0 : 3;
}
