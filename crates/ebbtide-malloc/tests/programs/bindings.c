/* Calls each allocation function once through the program's own references, so that
 * LD_DEBUG=bindings shows where each of them binds (crates/ebbtide-malloc/tests/real_programs.rs). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *a = malloc(100);
    char *b = calloc(10, 10);
    a = realloc(a, 1000);
    void *c = NULL;
    int r = posix_memalign(&c, 64, 100);
    void *d = aligned_alloc(256, 512);
    size_t u = malloc_usable_size(a);
    memset(a, 1, 1000);
    printf("%d %d %d %d\n", r, u >= 1000, ((unsigned long)c % 64) == 0, ((unsigned long)d % 256) == 0);
    free(d);
    free(c);
    free(b);
    free(a);
    return 0;
}
