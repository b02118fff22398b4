/* peak_rss PROGRAM [ARG...]: runs PROGRAM and prints its peak resident set in KiB (wait4's
 * ru_maxrss) on stdout; exits 1 unless it exited with status 0. Built static, so that the
 * hiwater mark a forked child carries into exec (the launcher's own pages) is as small as can
 * be: the peak measured is the program's. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: peak_rss PROGRAM [ARG...]\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        execv(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("wait4");
        return 1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: status %#x\n", argv[1], status);
        return 1;
    }
    printf("%ld\n", ru.ru_maxrss);
    return 0;
}
