/* rlimit_as_classes: under whatever RLIMIT_AS it was started with, mallocs and writes three
 * blocks of each of about a hundred sizes from 8 bytes to 32 KiB (each 1/16 larger than the
 * last: every size class of a segregated allocator, a chunk each in ebbtide; 1.6 MiB in all),
 * checks and frees them, and prints "classes ok" or the first size that failed. A small
 * program that uses many sizes under a tight `ulimit -v`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX (32 << 10)
#define EACH 3
#define SIZES 128

static unsigned char *blocks[SIZES][EACH];
static size_t sizes[SIZES];

int main(void) {
    size_t n = 0;
    for (size_t s = 8; s <= MAX && n < SIZES; s += s / 16 + 8)
        sizes[n++] = s;
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < EACH; i++) {
            unsigned char *p = malloc(sizes[k]);
            if (!p) {
                printf("classes failed at %zu bytes\n", sizes[k]);
                return 1;
            }
            memset(p, 0x5a, sizes[k]);
            blocks[k][i] = p;
        }
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < EACH; i++) {
            unsigned char *p = blocks[k][i];
            if (p[0] != 0x5a || p[sizes[k] - 1] != 0x5a) {
                printf("classes corrupt at %zu bytes\n", sizes[k]);
                return 1;
            }
            free(p);
        }
    printf("classes ok (%zu sizes)\n", n);
    return 0;
}
