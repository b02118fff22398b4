/* Double frees of blocks above the size classes, and what the allocator says of them:
 *   large     a 1 MiB block (a page run of the page heap) freed twice, other blocks between
 *   huge      an 80 MiB block (a mapping of its own) freed twice, other blocks between
 *   interior  a pointer into a live large block
 *   small     a non-immediate double free of a 48-byte block (caught in checked mode)
 * After the bad free the program allocates on and checks that no two live blocks share an
 * address; it prints "<mode> survived". Under abort_on_error=1 it must not get there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "large";
    size_t n = !strcmp(mode, "huge") ? (size_t)80 << 20 : !strcmp(mode, "small") ? 48 : 1 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    if (!strcmp(mode, "interior")) {
        free(a + 8192);
    } else {
        free(a);
        free(b);
        free(a); /* not immediate: b was freed in between */
    }
    char *c = malloc(n), *d = malloc(n);
    if (!c || !d || c == d) { printf("%s: the same block handed out twice\n", mode); return 1; }
    memset(c, 3, n);
    memset(d, 4, n);
    if (!strcmp(mode, "interior")) free(a);
    free(c);
    free(d);
    printf("%s survived\n", mode);
    return 0;
}
