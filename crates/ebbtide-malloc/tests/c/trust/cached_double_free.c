/* A double free of a small block that is still cached, in the default mode (no checked mode):
 * for each size, `p = malloc(n); q = malloc(n); free(p); free(q); free(p);` — the block `p`
 * is no longer the top of this CPU's stack (`q` is), so the immediate-duplicate test does not
 * see it — and the same with `depth` other blocks freed in between. Every such second free must
 * be reported (one line each on stderr) and not applied: afterwards `depth + 2` blocks of the
 * size are allocated and must all differ (a double free applied hands `p` out twice). Prints
 * "cached double frees: N" and "survived". Under glibc the process aborts at the first one
 * (its tcache key), which the test does not run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 40

static int check_distinct(void **v, int n, size_t size) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (v[i] == v[j]) {
                printf("size %zu: block %p handed out twice\n", size, v[i]);
                return 0;
            }
    return 1;
}

int main(void) {
    static const size_t sizes[] = {16, 64, 256, 1000, 4000}; /* 15 cases: below the 16 lines reported before the count takes over */
    static const int depths[] = {1, 5, MAXD};
    int done = 0;
    for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (unsigned d = 0; d < sizeof depths / sizeof depths[0]; d++) {
            size_t n = sizes[s];
            int depth = depths[d];
            void *others[MAXD];
            char *p = malloc(n);
            if (!p) return 2;
            memset(p, 0x5a, n);
            for (int i = 0; i < depth; i++) {
                others[i] = malloc(n);
                if (!others[i]) return 2;
                memset(others[i], 0x33, n);
            }
            free(p);
            for (int i = 0; i < depth; i++) free(others[i]);
            free(p); /* p is cached, `depth` blocks above it: must be reported, not applied */
            done++;
            void *again[MAXD + 2];
            for (int i = 0; i < depth + 2; i++) {
                again[i] = malloc(n);
                if (!again[i]) return 2;
                memset(again[i], 0x77, n);
            }
            if (!check_distinct(again, depth + 2, n)) return 1;
            for (int i = 0; i < depth + 2; i++) free(again[i]);
        }
    }
    printf("cached double frees: %d\n", done);
    printf("survived\n");
    return 0;
}
