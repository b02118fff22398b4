/* A program that closes every descriptor above 2 it did not open, as daemons do at start
 * (closefrom(3), close_range(3, ~0U, 0), or a loop to the descriptor limit), then goes on
 * allocating: it must keep running. Under the malloc nothing may depend on descriptors the
 * program is free to close; the same as fork_close_exec.c without the fork. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    /* whatever the libraries start has started (libebbtide_malloc.so opens its pressure
     * sources one second after start by default) */
    usleep(1300 * 1000);
    close_range(3, ~0U, 0);
    usleep(300 * 1000);
    size_t total = 0;
    for (int i = 0; i < 100000; i++) {
        char *p = malloc(16 + i % 5000);
        p[0] = (char)i;
        total += (unsigned char)p[0];
        free(p);
    }
    printf("still running %zu\n", total);
    return 0;
}
