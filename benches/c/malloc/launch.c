/*
 * launch.c — starts one program with an allocator preloaded and reports the program's own
 * peak RSS. Part of ebbtide-bench-malloc (crates/ebbtide-bench), compiled beside mallocbench.
 *
 *   launch REPORT PRELOAD PROGRAM [ARGS...]
 *
 * Why a launcher: Linux keeps a process's ru_maxrss across execve, and a child started by the
 * driver (posix_spawn/vfork, sharing the driver's memory until the exec) begins with the
 * driver's high-water mark, so wait4 would report max(driver, program). Forked from this small
 * process, the program starts with a fresh maxrss (a new signal struct) and only this
 * launcher's few pages in its copied address space.
 *
 * The program gets LD_PRELOAD=PRELOAD (removed when PRELOAD is empty); the launcher itself
 * runs without it. REPORT receives one line: "maxrss_kib=N exit=C signal=S" (S 0 unless the
 * program was killed by a signal). The launcher exits with the program's status, or 128+S.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: launch REPORT PRELOAD PROGRAM [ARGS...]\n");
        return 2;
    }
    const char *report = argv[1], *preload = argv[2];
    pid_t pid = fork();
    if (pid < 0) {
        perror("launch: fork");
        return 125;
    }
    if (pid == 0) {
        if (preload[0])
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execvp(argv[3], argv + 3);
        fprintf(stderr, "launch: cannot run %s: %s\n", argv[3], strerror(errno));
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR) {
            perror("launch: wait4");
            return 125;
        }
    FILE *f = fopen(report, "w");
    if (!f) {
        fprintf(stderr, "launch: cannot write %s: %s\n", report, strerror(errno));
        return 125;
    }
    fprintf(f, "maxrss_kib=%ld exit=%d signal=%d\n", ru.ru_maxrss,
            WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
