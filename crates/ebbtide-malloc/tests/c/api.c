/* Every C name of libebbtide_malloc.so, its contracts (errno, EINVAL, ENOMEM, overflow,
 * alignment, realloc contents, usable sizes), introspection (mallinfo2, malloc_trim) and the
 * messages for bad pointers. Run preloaded and linked; exits non-zero on the first failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>
/* glibc 2.36 has none of these: found at run time (preloaded or linked, they are ebbtide's). */
static void (*free_sized)(void *, size_t);
static void (*free_aligned_sized)(void *, size_t, size_t);
static int (*__posix_memalign)(void **, size_t, size_t);
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);

static int failures;
#define CHECK(c)                                                                      \
    do {                                                                              \
        if (!(c)) {                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);             \
            failures++;                                                               \
        }                                                                             \
    } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 31);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 31)) return 0;
    return 1;
}

static void sizes_and_alignment(void) {
    size_t sizes[] = {0, 1, 7, 8, 9, 15, 16, 17, 24, 100, 128, 129, 1000, 1024, 1025, 4096,
                      4097, 65536, 100000, 1 << 20, (1 << 20) + 1, 5 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        CHECK(p != NULL);
        CHECK(n < 16 || (uintptr_t)p % 16 == 0);
        CHECK((uintptr_t)p % 8 == 0);
        CHECK(malloc_usable_size(p) >= n);
        /* the waste bound above 128 bytes: at most 1/8 of the request (huge: page rounding) */
        if (n > 128 && n <= (1 << 20)) CHECK((malloc_usable_size(p) - n) * 8 < n);
        fill(p, malloc_usable_size(p), (unsigned)n);
        CHECK(same(p, malloc_usable_size(p), (unsigned)n));
        free(p);
    }
}

static void calloc_zeroes(void) {
    for (int round = 0; round < 3; round++) {
        size_t ns[] = {1, 64, 3000, 70000, 2 << 20};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            /* dirty a block of the class first, then calloc must still give zeroes */
            unsigned char *d = malloc(ns[i]);
            memset(d, 0xAB, ns[i]);
            free(d);
            unsigned char *p = calloc(ns[i], 1);
            CHECK(p != NULL);
            for (size_t k = 0; k < ns[i]; k++)
                if (p[k]) { CHECK(!"calloc not zero"); break; }
            free(p);
        }
    }
    errno = 0;
    CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc((size_t)1 << 32, (size_t)1 << 32) == NULL && errno == ENOMEM);
}

static void realloc_keeps_contents(void) {
    unsigned char *p = NULL;
    size_t old = 0;
    size_t steps[] = {1, 10, 100, 120, 64, 500, 4000, 3900, 70000, 2 << 20, 3 << 20, 900000, 33, 0};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        size_t n = steps[i];
        unsigned char *q = realloc(p, n);
        if (n == 0) {
            CHECK(q == NULL); /* glibc: realloc(p, 0) frees and returns NULL */
            p = NULL;
            break;
        }
        CHECK(q != NULL);
        size_t keep = old < n ? old : n;
        CHECK(same(q, keep, 7));
        fill(q, n, 7);
        p = q;
        old = n;
    }
    /* in place while the class fits */
    p = malloc(100);
    CHECK(realloc(p, 110) == p);
    free(realloc(p, 110));
    /* overflow */
    p = malloc(10);
    errno = 0;
    CHECK(reallocarray(p, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
    unsigned char *r = reallocarray(p, 10, 10);
    CHECK(r != NULL && malloc_usable_size(r) >= 100);
    free(r);
    errno = 0;
    CHECK(malloc(SIZE_MAX - 100) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    p = malloc(16);
    CHECK(realloc(p, SIZE_MAX - 4096) == NULL && errno == ENOMEM);
    free(p);
}

static void aligned(void) {
    size_t aligns[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536, 1 << 21};
    size_t sizes[] = {1, 24, 100, 4096, 5000, 300000, 3 << 20};
    for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            void *p = NULL;
            CHECK(posix_memalign(&p, aligns[a], sizes[s]) == 0);
            CHECK(p != NULL && (uintptr_t)p % aligns[a] == 0);
            CHECK(malloc_usable_size(p) >= sizes[s]);
            memset(p, 1, sizes[s]);
            free(p);
            p = aligned_alloc(aligns[a], sizes[s]);
            CHECK(p != NULL && (uintptr_t)p % aligns[a] == 0);
            free_aligned_sized(p, aligns[a], sizes[s]);
            p = memalign(aligns[a], sizes[s]);
            CHECK(p != NULL && (uintptr_t)p % aligns[a] == 0);
            free(p);
        }
    void *p = (void *)1;
    int e = errno;
    CHECK(posix_memalign(&p, 24, 10) == EINVAL && p == (void *)1 && errno == e);
    CHECK(posix_memalign(&p, 4, 10) == EINVAL);
    errno = 0;
    CHECK(aligned_alloc(24, 10) == NULL && errno == EINVAL);
    /* memalign rounds a non-power of two up, like glibc */
    p = memalign(24, 10);
    CHECK(p != NULL && (uintptr_t)p % 32 == 0);
    free(p);
    long pg = sysconf(_SC_PAGESIZE);
    p = valloc(10);
    CHECK(p && (uintptr_t)p % pg == 0);
    free(p);
    p = pvalloc(10);
    CHECK(p && (uintptr_t)p % pg == 0 && malloc_usable_size(p) >= (size_t)pg);
    free(p);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
    /* A failure sets errno as well, as glibc and the peers do (glibc's tst-malloc-thread-fail
     * reads it); a success leaves it alone. */
    errno = 0;
    CHECK(posix_memalign(&p, 64, SIZE_MAX - 10) == ENOMEM && errno == ENOMEM);
    errno = EBADF;
    p = NULL;
    CHECK(posix_memalign(&p, 64, 100) == 0 && p && errno == EBADF);
    free(p);
}

static void aliases(void) {
    void *p = __libc_malloc(40);
    CHECK(p && malloc_usable_size(p) >= 40);
    p = __libc_realloc(p, 400);
    CHECK(p && malloc_usable_size(p) >= 400);
    __libc_free(p);
    p = __libc_calloc(10, 10);
    CHECK(p && ((char *)p)[99] == 0);
    free_sized(p, 100);
    p = __libc_memalign(256, 10);
    CHECK(p && (uintptr_t)p % 256 == 0);
    free(p);
    p = __libc_valloc(1);
    CHECK(p && (uintptr_t)p % 4096 == 0);
    free(p);
    p = __libc_pvalloc(1);
    CHECK(p && (uintptr_t)p % 4096 == 0);
    free(p);
    CHECK(__posix_memalign(&p, 128, 1) == 0 && (uintptr_t)p % 128 == 0);
    free(p);
}

static void free_keeps_errno(void) {
    void *ps[100];
    for (int i = 0; i < 100; i++) ps[i] = malloc(i * 100 + 1);
    for (int i = 0; i < 100; i++) {
        errno = 12345;
        free(ps[i]);
        CHECK(errno == 12345);
    }
    errno = 777;
    free(NULL);
    CHECK(errno == 777);
    void *h = malloc(8 << 20);
    errno = 778;
    free(h);
    CHECK(errno == 778);
}

static void introspection(void) {
    enum { N = 20000 };
    static void *ps[N];
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < N; i++) ps[i] = malloc(200);
    void *huge = malloc(4 << 20);
    struct mallinfo2 mid = mallinfo2();
    CHECK(mid.uordblks >= before.uordblks + (size_t)N * 200);
    CHECK(mid.hblks >= 1 && mid.hblkhd >= (4 << 20));
    CHECK(mid.arena >= (size_t)N * 200);
    for (int i = 0; i < N; i++) free(ps[i]);
    free(huge);
    struct mallinfo2 after = mallinfo2();
    CHECK(after.fordblks >= (size_t)N * 200 / 2);
    CHECK(malloc_trim(0) == 1); /* something was given back */
    struct mallinfo2 trimmed = mallinfo2();
    CHECK(trimmed.arena < after.arena);
    struct mallinfo old = mallinfo();
    CHECK(old.arena >= 0);
    /* malloc_stats ends with glibc's totals in glibc's format (what programs and glibc's
     * tst-malloc-stats-cancellation look for). */
    static char text[1 << 16];
    FILE *t = tmpfile();
    CHECK(t != NULL);
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fileno(t), 2) == 2);
    malloc_stats();
    CHECK(dup2(saved, 2) == 2);
    close(saved);
    rewind(t);
    size_t got = fread(text, 1, sizeof text - 1, t);
    text[got] = 0;
    fclose(t);
    CHECK(strstr(text, "Total (incl. mmap):\nsystem bytes     = ") != NULL);
    CHECK(strstr(text, "\nmax mmap regions = ") && strstr(text, "\nmax mmap bytes   = "));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bad") == 0) {
        (void)argv;
        /* bad pointers: messages, nothing applied, the allocator still works */
        char stack_buf[64];
        free(stack_buf + 8);
        int *p = malloc(64);
        free((char *)p + 8); /* inside a block */
        free(p);
        free(p); /* immediate double free */
        CHECK(realloc(stack_buf, 10) == NULL);
        CHECK(malloc_usable_size(stack_buf) == 0);
        void *q = malloc(64);
        CHECK(q != NULL);
        free(q);
        puts(failures ? "failed" : "bad pointers ok");
        return failures != 0;
    }
    free_sized = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    free_aligned_sized = (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    __posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_DEFAULT, "__posix_memalign");
    CHECK(free_sized && free_aligned_sized && __posix_memalign);
    if (failures) return 1;
    sizes_and_alignment();
    calloc_zeroes();
    realloc_keeps_contents();
    aligned();
    aliases();
    free_keeps_errno();
    introspection();
    puts(failures ? "failed" : "api ok");
    return failures != 0;
}
