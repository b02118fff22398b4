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
 * tcmalloc's did here, and ebbtide's under load). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
    }
    kill(sender, SIGKILL);
    waitpid(sender, NULL, 0);
    printf("fork_signal ok %d\n", (int)in_handler_forks);
    return in_handler_forks > 0 ? 0 : 3;
}
