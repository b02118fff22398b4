/* Minimal test helpers shared by the C tests (no framework needed). */
#ifndef EBB_TEST_CHECK_H
#define EBB_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static int check_passes;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) {                                                                    \
            check_passes++;                                                            \
        } else {                                                                       \
            check_failures++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,    \
                    __LINE__, #cond, ebb_last_error());                                \
        }                                                                              \
    } while (0)

/* Fatal: the rest of the test cannot run. */
#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s (last error: %s)\n", __FILE__,  \
                    __LINE__, #cond, ebb_last_error());                                \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static int check_finish(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, check_passes, check_failures);
    return check_failures == 0 ? 0 : 1;
}

#endif
