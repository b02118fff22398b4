/* Reduced from CPython's test_signal (test_sigpending, test_sigtimedwait_poll): a program that
 * blocks signals and collects them itself (sigpending, sigtimedwait, a signalfd: the way many
 * servers take SIGTERM) must find them pending, not handled elsewhere. A signal sent to the
 * process goes to any thread that does not block it, so threads a library starts inside the
 * program must block every signal (jemalloc's background threads do). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

int main(void) {
    usleep(100 * 1000); /* whatever the libraries start has started */
    signal(SIGUSR1, on_usr1);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);

    kill(getpid(), SIGUSR1);
    kill(getpid(), SIGUSR2); /* default action: terminate, if it reached a thread */
    kill(getpid(), SIGTERM); /* default action: terminate, if it reached a thread */
    usleep(100 * 1000);

    sigset_t pending;
    sigpending(&pending);
    printf("pending: USR1 %d USR2 %d TERM %d; handler ran %d times\n",
           sigismember(&pending, SIGUSR1), sigismember(&pending, SIGUSR2),
           sigismember(&pending, SIGTERM), (int)handled);
    struct timespec zero = {0, 0};
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    printf("sigtimedwait: %d\n", sigtimedwait(&one, NULL, &zero) == SIGUSR2);
    struct signalfd_siginfo si;
    sigemptyset(&one);
    sigaddset(&one, SIGTERM);
    /* (the signalfd reads any pending signal of its set: SIGUSR1 first, then SIGTERM) */
    int got_term = 0;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTERM) {
            got_term = 1;
            break;
        }
    }
    printf("signalfd: SIGTERM %d\n", got_term);
    return 0;
}
