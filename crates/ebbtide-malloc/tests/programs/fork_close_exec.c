/* Reduced from CPython's test_subprocess (subprocess with group=/user= forks instead of
 * vforking, and the child closes every descriptor above 2 before exec): three times, a forked
 * child waits a little, closes all its descriptors above 2, waits again and execs /bin/true,
 * which must run. Nothing of the malloc in the child may depend on descriptors the program is
 * free to close. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        pid_t p = fork();
        if (p < 0) return 2;
        if (p == 0) {
            /* whatever the child's libraries start has started (libebbtide_malloc.so opens
             * its pressure sources one second after start by default) */
            usleep(1300 * 1000);
            close_range(3, ~0U, 0);
            usleep(300 * 1000);
            char *m = malloc(100);
            free(m);
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        int st;
        if (waitpid(p, &st, 0) != p) return 3;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("child %d: %s %d\n", i, WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    printf("bad children: %d\n", bad);
    return 0;
}
