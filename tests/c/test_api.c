/* Single-threaded tests of the C API: zones, bad input, hooks, options versioning, limits,
 * reclaim, page pools, statistics, tunables, version (pressure and low-memory handlers:
 * test_pressure.c). Exit status 0 when every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ebbtide.h"
#include "check.h"

/* ---- helpers ---- */

static int saved_stderr = -1;
static FILE *capture_file;

/* Sends stderr (fd 2) to a temporary file until end_capture. */
static void begin_capture(void) {
    fflush(stderr);
    capture_file = tmpfile();
    REQUIRE(capture_file != NULL);
    saved_stderr = dup(2);
    REQUIRE(saved_stderr >= 0);
    REQUIRE(dup2(fileno(capture_file), 2) == 2);
}

/* Restores stderr and returns what was written to it (static buffer). */
static const char *end_capture(void) {
    static char text[8192];
    fflush(stderr);
    REQUIRE(dup2(saved_stderr, 2) == 2);
    close(saved_stderr);
    rewind(capture_file);
    size_t n = fread(text, 1, sizeof text - 1, capture_file);
    text[n] = '\0';
    fclose(capture_file);
    return text;
}

/* The stats struct of the zone called `name`; 0 if found. */
static int zone_stats(const char *name, struct ebbtide_zone_stats *out) {
    size_t n = ebb_stats_zones(NULL, 0);
    REQUIRE(n != (size_t)-1);
    struct ebbtide_zone_stats *all = calloc(n + 1, sizeof *all);
    REQUIRE(all != NULL);
    size_t m = ebb_stats_zones(all, n + 1);
    int rc = -1;
    for (size_t i = 0; i < m && i < n + 1; i++) {
        if (strcmp(all[i].name, name) == 0) {
            *out = all[i];
            rc = 0;
        }
    }
    free(all);
    return rc;
}

/* ---- tests ---- */

static void test_version(void) {
    const char *v = ebb_version();
    REQUIRE(v != NULL);
    CHECK(strcmp(v, EBB_VERSION) == 0);
}

static void test_basic(void) {
    ebb_zone *z = ebb_zone_create("capi-basic", 100, 0, 0);
    REQUIRE(z != NULL);
    CHECK(ebb_zone_item_size(z) >= 100);
    CHECK(ebb_zone_item_size(z) % 16 == 0);
    enum { N = 1000 };
    unsigned char *items[N];
    for (int i = 0; i < N; i++) {
        items[i] = ebb_zone_alloc(z);
        REQUIRE(items[i] != NULL);
        CHECK(((uintptr_t)items[i] & 15) == 0);
        memset(items[i], i & 0xff, 100);
    }
    for (int i = 0; i < N; i++) {
        CHECK(items[i][0] == (i & 0xff) && items[i][99] == (i & 0xff));
    }
    struct ebbtide_zone_stats st;
    REQUIRE(zone_stats("capi-basic", &st) == 0);
    CHECK(st.used == N);
    CHECK(st.size == 100);
    CHECK(st.requests >= N);
    for (int i = 0; i < N; i++) ebb_zone_free(z, items[i]);
    REQUIRE(zone_stats("capi-basic", &st) == 0);
    CHECK(st.used == 0);
    ebb_zone_free(z, NULL); /* no-op, like free(NULL) */
    CHECK(ebb_zone_destroy(z) == 0);
    CHECK(zone_stats("capi-basic", &st) == -1);

    /* Alignment and the ZERO flag. */
    z = ebb_zone_create("capi-aligned", 40, 64, EBB_ZONE_ZERO);
    REQUIRE(z != NULL);
    unsigned char *p = ebb_zone_alloc(z);
    REQUIRE(p != NULL);
    CHECK(((uintptr_t)p & 63) == 0);
    memset(p, 0xAB, 40);
    ebb_zone_free(z, p);
    for (int round = 0; round < 3; round++) {
        unsigned char *q = ebb_zone_alloc(z);
        REQUIRE(q != NULL);
        int zero = 1;
        for (int i = 0; i < 40; i++) zero &= q[i] == 0;
        CHECK(zero);
        memset(q, 0xCD, 40);
        ebb_zone_free(z, q);
    }
    CHECK(ebb_zone_destroy(z) == 0);

    /* Every flag at once is accepted. */
    z = ebb_zone_create("capi-allflags", 8, 8,
                        EBB_ZONE_NOTRIM | EBB_ZONE_NOBUCKET | EBB_ZONE_CHECKED | EBB_ZONE_ZERO);
    REQUIRE(z != NULL);
    p = ebb_zone_alloc(z);
    CHECK(p != NULL);
    ebb_zone_free(z, p);
    CHECK(ebb_zone_destroy(z) == 0);
}

static void expect_create_einval(const char *name, size_t size, size_t align, unsigned flags) {
    errno = 0;
    ebb_zone *z = ebb_zone_create(name, size, align, flags);
    CHECK(z == NULL);
    CHECK(errno == EINVAL);
    CHECK(ebb_last_error()[0] != '\0');
    if (z != NULL) ebb_zone_destroy(z);
}

static void test_bad_create(void) {
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    expect_create_einval(NULL, 64, 0, 0);
    expect_create_einval("", 64, 0, 0);
    expect_create_einval(longname, 64, 0, 0);
    expect_create_einval("bad\"quote", 64, 0, 0);
    expect_create_einval("bad\nline", 64, 0, 0);
    expect_create_einval("\xff\xfe", 64, 0, 0); /* not UTF-8 */
    expect_create_einval("capi-bad", 0, 0, 0);
    expect_create_einval("capi-bad", (size_t)1 << 40, 0, 0);
    expect_create_einval("capi-bad", SIZE_MAX, 0, 0);
    expect_create_einval("capi-bad", 64, 3, 0);
    expect_create_einval("capi-bad", 64, (size_t)sysconf(_SC_PAGESIZE) * 2, 0);
    expect_create_einval("capi-bad", 64, 0, 0x100);
    expect_create_einval("capi-bad", 64, 0, 16);
    struct ebbtide_zone_stats st;
    CHECK(zone_stats("capi-bad", &st) == -1); /* nothing was created */
}

static void test_bad_calls(void) {
    errno = 0;
    CHECK(ebb_zone_alloc(NULL) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_zone_destroy(NULL) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_zone_item_size(NULL) == 0);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_zone_reclaim(NULL, EBB_RECLAIM_TRIM) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_reclaim(0) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_reclaim(4) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_stats_global(NULL) == -1);
    CHECK(errno == EINVAL);

    /* Free with a NULL zone: reported, counted, nothing done. */
    unsigned long long before = ebb_invalid_frees();
    int dummy;
    begin_capture();
    ebb_zone_free(NULL, &dummy);
    const char *msg = end_capture();
    CHECK(strstr(msg, "zone is NULL") != NULL);
    CHECK(ebb_invalid_frees() == before + 1);
}

static void test_invalid_frees(void) {
    ebb_zone *z = ebb_zone_create("capi-invalid", 64, 0, 0);
    ebb_zone *other = ebb_zone_create("capi-other", 64, 0, 0);
    REQUIRE(z != NULL && other != NULL);
    unsigned char *p = ebb_zone_alloc(z);
    unsigned char *q = ebb_zone_alloc(other);
    REQUIRE(p != NULL && q != NULL);
    void *heap = malloc(64);
    REQUIRE(heap != NULL);
    int on_stack;
    void *bad[] = {heap, &on_stack, p + 1, p + 8, q};
    unsigned long long before = ebb_invalid_frees();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "%#lx", (unsigned long)(uintptr_t)bad[i]);
        errno = 0;
        begin_capture();
        ebb_zone_free(z, bad[i]);
        const char *msg = end_capture();
        CHECK(strstr(msg, "invalid free") != NULL);
        CHECK(strstr(msg, "capi-invalid") != NULL); /* names the zone */
        CHECK(strstr(msg, addr) != NULL);           /* and the address */
        CHECK(errno == EINVAL);
    }
    CHECK(ebb_invalid_frees() == before + sizeof bad / sizeof bad[0]);
    /* None of them was applied: p is still live and both zones are intact. */
    struct ebbtide_zone_stats st;
    REQUIRE(zone_stats("capi-invalid", &st) == 0);
    CHECK(st.used == 1);
    CHECK(st.invalid_frees == sizeof bad / sizeof bad[0]); /* counted per zone too */
    REQUIRE(zone_stats("capi-other", &st) == 0);
    CHECK(st.used == 1);
    CHECK(st.invalid_frees == 0);
    p[63] = 1; /* still ours (ASan would object if anything had been unmapped) */
    ebb_zone_free(z, p);
    ebb_zone_free(other, q);
    CHECK(ebb_zone_destroy(z) == 0);
    CHECK(ebb_zone_destroy(other) == 0);
    free(heap);

    /* Double free in a checked zone: caught at once, not applied. */
    z = ebb_zone_create("capi-checked", 32, 0, EBB_ZONE_CHECKED);
    REQUIRE(z != NULL);
    p = ebb_zone_alloc(z);
    void *keep = ebb_zone_alloc(z);
    REQUIRE(p != NULL && keep != NULL);
    ebb_zone_free(z, p);
    before = ebb_invalid_frees();
    begin_capture();
    ebb_zone_free(z, p);
    const char *msg = end_capture();
    CHECK(strstr(msg, "double free") != NULL);
    CHECK(strstr(msg, "capi-checked") != NULL);
    CHECK(ebb_invalid_frees() == before + 1);
    REQUIRE(zone_stats("capi-checked", &st) == 0);
    CHECK(st.used == 1); /* the double free did not take `keep`'s count away */
    CHECK(st.invalid_frees == 1);
    /* The freed item comes back exactly once. */
    void *a = ebb_zone_alloc(z);
    void *b = ebb_zone_alloc(z);
    CHECK(a != NULL && b != NULL && a != b);
    ebb_zone_free(z, a);
    ebb_zone_free(z, b);
    ebb_zone_free(z, keep);
    CHECK(ebb_zone_destroy(z) == 0);

    /* Double free outside checked mode: the core catches it when the item reaches its slab
     * (here: at the drain), reports it and does not apply it. */
    z = ebb_zone_create("capi-late", 64, 0, 0);
    REQUIRE(z != NULL);
    keep = ebb_zone_alloc(z);
    p = ebb_zone_alloc(z);
    REQUIRE(keep != NULL && p != NULL);
    begin_capture();
    ebb_zone_free(z, p);
    ebb_zone_free(z, p);
    CHECK(ebb_reclaim(EBB_RECLAIM_DRAIN_CPU) >= 0);
    msg = end_capture();
    CHECK(strstr(msg, "double free") != NULL);
    CHECK(strstr(msg, "capi-late") != NULL);
    REQUIRE(zone_stats("capi-late", &st) == 0);
    CHECK(st.used == 1);
    a = ebb_zone_alloc(z);
    b = ebb_zone_alloc(z);
    CHECK(a != NULL && b != NULL && a != b);
    ebb_zone_free(z, a);
    ebb_zone_free(z, b);
    ebb_zone_free(z, keep);
    CHECK(ebb_zone_destroy(z) == 0);
}

static void test_destroy_busy(void) {
    ebb_zone *z = ebb_zone_create("capi-busy", 48, 0, 0);
    REQUIRE(z != NULL);
    unsigned char *p = ebb_zone_alloc(z);
    unsigned char *q = ebb_zone_alloc(z);
    REQUIRE(p != NULL && q != NULL);
    memset(p, 0x11, 48);
    ebb_zone_free(z, q);
    errno = 0;
    CHECK(ebb_zone_destroy(z) == -1);
    CHECK(errno == EBUSY);
    CHECK(strstr(ebb_last_error(), "1 items are still in use") != NULL);
    /* Nothing was freed: the item and the zone still work. */
    CHECK(p[0] == 0x11 && p[47] == 0x11);
    void *r = ebb_zone_alloc(z);
    CHECK(r != NULL);
    ebb_zone_free(z, r);
    ebb_zone_free(z, p);
    CHECK(ebb_zone_destroy(z) == 0);
    /* Double destroy is refused, not undefined. */
    errno = 0;
    CHECK(ebb_zone_destroy(z) == -1);
    CHECK(errno == EINVAL);
}

/* ---- hooks ---- */

struct hook_counts {
    int init, fini, ctor, dtor;
    int fail_ctor;
    size_t size_seen;
};

static int h_init(void *item, size_t size, void *arg) {
    struct hook_counts *c = arg;
    c->init++;
    c->size_seen = size;
    memset(item, 0x5A, size);
    return 0;
}
static void h_fini(void *item, size_t size, void *arg) {
    (void)item;
    (void)size;
    ((struct hook_counts *)arg)->fini++;
}
static int h_ctor(void *item, size_t size, void *arg) {
    struct hook_counts *c = arg;
    (void)size;
    c->ctor++;
    ((unsigned char *)item)[0] = 0xC7;
    return c->fail_ctor ? -1 : 0;
}
static void h_dtor(void *item, size_t size, void *arg) {
    (void)size;
    ((struct hook_counts *)arg)->dtor++;
    ((unsigned char *)item)[0] = 0xD7;
}

static int h_init_fail(void *item, size_t size, void *arg) {
    (void)item;
    (void)size;
    (void)arg;
    return 1;
}

static void test_hooks(void) {
    struct hook_counts c = {0};
    struct ebb_zone_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.init = h_init;
    o.fini = h_fini;
    o.ctor = h_ctor;
    o.dtor = h_dtor;
    o.hook_arg = &c;
    ebb_zone *z = ebb_zone_create_ex("capi-hooks", 24, &o);
    REQUIRE(z != NULL);
    unsigned char *p[10];
    for (int i = 0; i < 10; i++) {
        p[i] = ebb_zone_alloc(z);
        REQUIRE(p[i] != NULL);
        CHECK(p[i][0] == 0xC7); /* ctor ran after init */
        CHECK(p[i][1] == 0x5A); /* init filled the item */
    }
    CHECK(c.ctor == 10);
    CHECK(c.init >= 10);
    CHECK(c.size_seen == ebb_zone_item_size(z));
    for (int i = 0; i < 10; i++) ebb_zone_free(z, p[i]);
    CHECK(c.dtor == 10);
    /* A failing ctor fails the allocation with ECANCELED. */
    c.fail_ctor = 1;
    errno = 0;
    CHECK(ebb_zone_alloc(z) == NULL);
    CHECK(errno == ECANCELED);
    c.fail_ctor = 0;
    /* Drain returns the items to the slabs: fini runs for every init'ed item. */
    CHECK(ebb_zone_reclaim(z, EBB_RECLAIM_DRAIN_CPU) >= 0);
    CHECK(ebb_zone_destroy(z) == 0);
    CHECK(c.fini == c.init);

    /* A failing init hook. */
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.init = h_init_fail;
    z = ebb_zone_create_ex("capi-initfail", 24, &o);
    REQUIRE(z != NULL);
    errno = 0;
    CHECK(ebb_zone_alloc(z) == NULL);
    CHECK(errno == ECANCELED);
    struct ebbtide_zone_stats st;
    REQUIRE(zone_stats("capi-initfail", &st) == 0);
    CHECK(st.fails >= 1);
    CHECK(ebb_zone_destroy(z) == 0);
}

/* ---- caches bounded by reuse (options version 2) ---- */

static void reuse_burst(ebb_zone *z, void **p, int n) {
    for (int i = 0; i < n; i++) {
        p[i] = ebb_zone_alloc(z);
        REQUIRE(p[i] != NULL);
    }
    for (int i = 0; i < n; i++) ebb_zone_free(z, p[i]);
}

/* Two zones of one-page items with the same fixed caps (256 items of depot, 256 free slabs), one
 * of them bounded by reuse with a floor of 16: filled once and emptied, the fixed one keeps up to
 * its caps and the bounded one its floor; filled again (everything taken again), the bounded one
 * keeps up to the fixed caps too. */
static void test_reuse_caps(void) {
    enum { N = 1500, FIXED = 256, FLOOR = 16, PAGE = 4096 };
    static void *p[N];
    struct ebb_zone_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.depot_max_items = FIXED;
    o.free_slabs_max_bytes = FIXED * PAGE;
    ebb_zone *fixed = ebb_zone_create_ex("capi-reuse-fixed", PAGE, &o);
    o.reuse_floor_bytes = FLOOR * PAGE;
    ebb_zone *bounded = ebb_zone_create_ex("capi-reuse-bounded", PAGE, &o);
    REQUIRE(fixed != NULL && bounded != NULL);
    REQUIRE(ebb_zone_item_size(fixed) == PAGE);

    reuse_burst(fixed, p, N);
    reuse_burst(bounded, p, N);
    struct ebbtide_zone_stats f, b;
    REQUIRE(zone_stats("capi-reuse-fixed", &f) == 0);
    REQUIRE(zone_stats("capi-reuse-bounded", &b) == 0);
    CHECK(f.used == 0 && b.used == 0);
    CHECK(f.depot_nitems >= FIXED - 2);              /* the fixed cap: kept */
    CHECK(f.free_bytes_slabs / PAGE >= FIXED - 2);   /* kept (the excess waits 10 ms or less) */
    CHECK(b.depot_nitems <= FLOOR);                  /* nothing taken again: the floor */
    /* Free slabs beyond the cap go back within 10 ms without pressure (at the next free or the
     * reclaim thread's next step, every 100 ms). */
    usleep(400 * 1000);
    REQUIRE(zone_stats("capi-reuse-bounded", &b) == 0);
    CHECK(b.free_bytes_slabs / PAGE <= FLOOR + 1);

    /* Filled again: every item is taken again (from the depot, the free slabs and the slabs
     * given back), so the bounded zone's caps are its fixed ones for now. */
    reuse_burst(bounded, p, N);
    REQUIRE(zone_stats("capi-reuse-bounded", &b) == 0);
    CHECK(b.depot_nitems >= FIXED - 2);

    /* A zero floor field is "fixed caps only"; version 1 callers (no such members) too. */
    memset(&o, 0, sizeof o);
    o.size = offsetof(struct ebb_zone_options, free_slabs_max_bytes);
    o.depot_max_items = 8;
    ebb_zone *v1 = ebb_zone_create_ex("capi-reuse-v1", PAGE, &o);
    REQUIRE(v1 != NULL);
    CHECK(ebb_zone_destroy(v1) == 0);
    CHECK(ebb_zone_destroy(fixed) == 0);
    CHECK(ebb_zone_destroy(bounded) == 0);
}

/* ---- options versioning ---- */

struct options_v2 { /* what a future, larger struct might look like */
    struct ebb_zone_options v1;
    uint64_t future_option;
};

static void test_options_versions(void) {
    struct ebb_zone_options o;
    ebb_zone *z;

    /* NULL options: defaults. */
    z = ebb_zone_create_ex("capi-opt-null", 16, NULL);
    CHECK(z != NULL);
    if (z) CHECK(ebb_zone_destroy(z) == 0);

    /* An older, smaller struct: only size (and align) known; the rest defaults, whatever
     * garbage follows in memory. */
    memset(&o, 0xFF, sizeof o);
    o.size = offsetof(struct ebb_zone_options, init);
    o.align = 32;
    z = ebb_zone_create_ex("capi-opt-old", 16, &o);
    REQUIRE(z != NULL);
    void *p = ebb_zone_alloc(z);
    CHECK(p != NULL && ((uintptr_t)p & 31) == 0);
    ebb_zone_free(z, p);
    CHECK(ebb_zone_destroy(z) == 0);

    /* Just the size member. */
    memset(&o, 0xFF, sizeof o);
    o.size = sizeof(size_t);
    z = ebb_zone_create_ex("capi-opt-min", 16, &o);
    CHECK(z != NULL);
    if (z) CHECK(ebb_zone_destroy(z) == 0);

    /* A size that is no version's size. */
    memset(&o, 0, sizeof o);
    o.size = offsetof(struct ebb_zone_options, align) + 3;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-odd", 16, &o) == NULL);
    CHECK(errno == EINVAL);
    o.size = 0;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-zero", 16, &o) == NULL);
    CHECK(errno == EINVAL);

    /* A newer, larger struct: accepted while the unknown tail is zero. */
    struct options_v2 o2;
    memset(&o2, 0, sizeof o2);
    o2.v1.size = sizeof o2;
    o2.v1.flags = EBB_ZONE_ZERO;
    z = ebb_zone_create_ex("capi-opt-new", 16, &o2.v1);
    CHECK(z != NULL);
    if (z) CHECK(ebb_zone_destroy(z) == 0);
    o2.future_option = 1;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-new2", 16, &o2.v1) == NULL);
    CHECK(errno == EINVAL);
    CHECK(strstr(ebb_last_error(), "unknown tail") != NULL);

    /* Implausible size (sizeof forgotten, garbage). */
    memset(&o, 0, sizeof o);
    o.size = 1u << 20;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-huge", 16, &o) == NULL);
    CHECK(errno == EINVAL);

    /* Bad members. */
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.limit_mode = 7;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-mode", 16, &o) == NULL);
    CHECK(errno == EINVAL);
    o.limit_mode = EBB_LIMIT_FAIL;
    o.flags = 0x80;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-flags", 16, &o) == NULL);
    CHECK(errno == EINVAL);
    o.flags = 0;
    o.align = 24;
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-align", 16, &o) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    o.align = 0;
    CHECK(ebb_zone_create_ex(NULL, 16, &o) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_zone_create_ex("capi-opt-size0", 0, &o) == NULL);
    CHECK(errno == EINVAL);
}

/* ---- limits ---- */

static void test_limits(void) {
    struct ebb_zone_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.max_items = 4;
    o.limit_mode = EBB_LIMIT_FAIL;
    ebb_zone *z = ebb_zone_create_ex("capi-limit", 128, &o);
    REQUIRE(z != NULL);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = ebb_zone_alloc(z);
        REQUIRE(p[i] != NULL);
    }
    errno = 0;
    CHECK(ebb_zone_alloc(z) == NULL);
    CHECK(errno == ENOMEM);
    CHECK(strstr(ebb_last_error(), "limit") != NULL);
    struct ebbtide_zone_stats st;
    REQUIRE(zone_stats("capi-limit", &st) == 0);
    CHECK(st.limit == 4);
    CHECK(st.used == 4);
    CHECK(st.fails >= 1);
    ebb_zone_free(z, p[3]);
    p[3] = ebb_zone_alloc(z);
    CHECK(p[3] != NULL);
    for (int i = 0; i < 4; i++) ebb_zone_free(z, p[i]);
    CHECK(ebb_zone_destroy(z) == 0);
    /* EBB_LIMIT_WAIT is exercised across threads in test_threads.c. */
}

/* ---- reclaim ---- */

static void test_reclaim(void) {
    ebb_zone *z = ebb_zone_create("capi-reclaim", 256, 0, 0);
    REQUIRE(z != NULL);
    enum { N = 40000 }; /* ~10 MiB */
    void **items = malloc(N * sizeof *items);
    REQUIRE(items != NULL);
    for (int i = 0; i < N; i++) {
        items[i] = ebb_zone_alloc(z);
        REQUIRE(items[i] != NULL);
        memset(items[i], 1, 256);
    }
    for (int i = 0; i < N; i++) ebb_zone_free(z, items[i]);
    free(items);
    long long trim = ebb_reclaim(EBB_RECLAIM_TRIM);
    CHECK(trim >= 0);
    long long drained = ebb_reclaim(EBB_RECLAIM_DRAIN_CPU);
    CHECK(drained >= 0);
    CHECK(trim + drained >= (long long)N * 256 / 2); /* most of it went back to the OS */
    CHECK(ebb_reclaim(EBB_RECLAIM_DRAIN) >= 0);
    struct ebbtide_global_stats g;
    CHECK(ebb_stats_global(&g) == 0);
    CHECK(g.released_bytes >= (uint64_t)(trim + drained));
    CHECK(ebb_zone_destroy(z) == 0);
}

/* ---- page pools ---- */

/* The stats struct of the pool called `name` from ebb_stats_pools; 0 if found. */
static int pool_stats(const char *name, struct ebbtide_pool_stats *out) {
    size_t n = ebb_stats_pools(NULL, 0);
    REQUIRE(n != (size_t)-1);
    struct ebbtide_pool_stats *all = calloc(n + 1, sizeof *all);
    REQUIRE(all != NULL);
    size_t m = ebb_stats_pools(all, n + 1);
    int rc = -1;
    for (size_t i = 0; i < m && i < n + 1; i++) {
        if (strcmp(all[i].zone.name, name) == 0) {
            *out = all[i];
            rc = 0;
        }
    }
    free(all);
    return rc;
}

/* Every byte of the page is `v`. */
static int page_is(const unsigned char *p, size_t len, unsigned char v) {
    for (size_t i = 0; i < len; i++) {
        if (p[i] != v) return 0;
    }
    return 1;
}

static void test_pool_bad_args(void) {
    errno = 0;
    CHECK(ebb_pool_create(NULL, 4) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_create("", 4) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_create("bad\"name", 4) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_get(NULL) == NULL);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_destroy(NULL) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_shrink(NULL) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_pool_set_max_buffer_pages(NULL, 1) == -1);
    CHECK(errno == EINVAL);
    struct ebbtide_pool_stats st;
    errno = 0;
    CHECK(ebb_pool_stats(NULL, &st) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    ebb_pool_put(NULL, NULL); /* nothing at all */
    CHECK(errno == 0);
}

static void test_pools(void) {
    const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    ebb_pool *pool = ebb_pool_create("capi-pool", 16);
    REQUIRE(pool != NULL);
    enum { NP = 200, KEEP = 20 };
    unsigned char *pages[NP];
    for (int i = 0; i < NP; i++) {
        pages[i] = ebb_pool_get(pool);
        REQUIRE(pages[i] != NULL);
        CHECK((uintptr_t)pages[i] % ps == 0); /* page-aligned */
        memset(pages[i], i & 0xff, ps);       /* and a whole page is ours */
    }
    for (int i = 0; i < NP; i++) CHECK(page_is(pages[i], ps, (unsigned char)(i & 0xff)));

    struct ebbtide_pool_stats st;
    REQUIRE(ebb_pool_stats(pool, &st) == 0);
    CHECK(strcmp(st.zone.name, "capi-pool") == 0);
    CHECK(st.zone.size == ps);
    CHECK(st.pages_in_use == NP);
    CHECK(st.max_buffer_pages == 16);
    /* Listed by ebb_stats_pools, not by ebb_stats_zones. */
    CHECK(pool_stats("capi-pool", &st) == 0);
    CHECK(st.pages_in_use == NP);
    struct ebbtide_zone_stats zs;
    CHECK(zone_stats("capi-pool", &zs) != 0);

    /* Destroy while pages are in use: EBUSY, nothing changed, the pool still works. */
    errno = 0;
    CHECK(ebb_pool_destroy(pool) == -1);
    CHECK(errno == EBUSY);
    CHECK(strstr(ebb_last_error(), "capi-pool") != NULL);
    CHECK(page_is(pages[NP - 1], ps, (NP - 1) & 0xff));
    REQUIRE(ebb_pool_stats(pool, &st) == 0);
    CHECK(st.pages_in_use == NP);

    /* Invalid puts: reported, counted, not applied. */
    void *heap = malloc(ps);
    REQUIRE(heap != NULL);
    ebb_zone *z = ebb_zone_create("capi-pool-zone", 64, 0, 0);
    REQUIRE(z != NULL);
    void *item = ebb_zone_alloc(z);
    ebb_pool *other = ebb_pool_create("capi-pool-other", 0);
    REQUIRE(item != NULL && other != NULL);
    void *foreign = ebb_pool_get(other);
    REQUIRE(foreign != NULL);
    void *bad[] = {heap, pages[0] + 1, pages[0] + ps / 2, item, foreign};
    unsigned long long before = ebb_invalid_frees();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "%#lx", (unsigned long)(uintptr_t)bad[i]);
        errno = 0;
        begin_capture();
        ebb_pool_put(pool, bad[i]);
        const char *msg = end_capture();
        CHECK(strstr(msg, "invalid free") != NULL);
        CHECK(strstr(msg, "capi-pool") != NULL);
        CHECK(strstr(msg, addr) != NULL);
        CHECK(errno == EINVAL);
    }
    errno = 0;
    begin_capture();
    ebb_pool_put(NULL, pages[0]);
    const char *msg = end_capture();
    CHECK(strstr(msg, "pool is NULL") != NULL);
    CHECK(errno == EINVAL);
    CHECK(ebb_invalid_frees() == before + sizeof bad / sizeof bad[0] + 1);
    REQUIRE(ebb_pool_stats(pool, &st) == 0);
    CHECK(st.pages_in_use == NP);
    CHECK(st.zone.invalid_frees == sizeof bad / sizeof bad[0]);
    CHECK(page_is(pages[0], ps, 0));

    /* Return all but KEEP pages, then shrink to the cap: 16 free pages stay, the rest goes back
     * to the OS (the reclaim thread may have shrunk first: it does the same every 100 ms). */
    for (int i = KEEP; i < NP; i++) ebb_pool_put(pool, pages[i]);
    long long rel = ebb_pool_shrink(pool);
    CHECK(rel >= 0 && rel % (long long)ps == 0);
    REQUIRE(ebb_pool_stats(pool, &st) == 0);
    CHECK(st.free_pages == 16);
    CHECK(st.pages_in_use == KEEP);
    /* Without pressure they leave lazily (lazy_free): for good, or on the lazy list until
     * lazy_decay_ms. */
    CHECK(st.zone.released_bytes + st.zone.lazy_bytes >= (uint64_t)(NP - KEEP - 16) * ps);
    CHECK(ebb_pool_shrink(pool) == 0); /* at the cap already */
    for (int i = 0; i < KEEP; i++) CHECK(page_is(pages[i], ps, (unsigned char)(i & 0xff)));

    /* A lower cap is enforced by the reclaim thread's periodic shrink (every 100 ms). */
    CHECK(ebb_pool_set_max_buffer_pages(pool, 4) == 0);
    for (int tries = 0; tries < 300; tries++) {
        REQUIRE(ebb_pool_stats(pool, &st) == 0);
        if (st.free_pages == 4) break;
        usleep(10 * 1000);
    }
    CHECK(st.max_buffer_pages == 4);
    CHECK(st.free_pages == 4);
    CHECK(st.pages_in_use == KEEP);
    for (int i = 0; i < KEEP; i++) CHECK(page_is(pages[i], ps, (unsigned char)(i & 0xff)));
    /* Pages come back from the pool (possibly fresh ones) and are whole pages. */
    unsigned char *again = ebb_pool_get(pool);
    REQUIRE(again != NULL);
    CHECK((uintptr_t)again % ps == 0);
    memset(again, 0xab, ps);
    ebb_pool_put(pool, again);

    /* The statistics JSON carries the pool under "pools". */
    size_t need = ebb_stats_json(NULL, 0);
    char *json = malloc(need + 4096);
    REQUIRE(json != NULL);
    REQUIRE(ebb_stats_json(json, need + 4096) < need + 4096);
    const char *pools = strstr(json, "\"pools\":[");
    CHECK(pools != NULL);
    if (pools != NULL) {
        CHECK(strstr(pools, "\"name\":\"capi-pool\"") != NULL);
        CHECK(strstr(pools, "\"max_buffer_pages\":4") != NULL);
        CHECK(strstr(pools, "\"pages_in_use\":20") != NULL);
        CHECK(strstr(pools, "\"free_pages\"") != NULL);
        CHECK(strstr(pools, "\"invalid_frees\":5") != NULL);
    }
    free(json);

    /* Everything back: destroy works, a second destroy is EINVAL. */
    for (int i = 0; i < KEEP; i++) ebb_pool_put(pool, pages[i]);
    CHECK(ebb_pool_destroy(pool) == 0);
    errno = 0;
    CHECK(ebb_pool_destroy(pool) == -1);
    CHECK(errno == EINVAL);
    CHECK(pool_stats("capi-pool", &st) != 0);
    ebb_pool_put(other, foreign);
    CHECK(ebb_pool_destroy(other) == 0);
    ebb_zone_free(z, item);
    CHECK(ebb_zone_destroy(z) == 0);
    free(heap);
}

/* ---- statistics ---- */

static void test_stats_json(void) {
    ebb_zone *z = ebb_zone_create("capi-json", 72, 0, 0);
    REQUIRE(z != NULL);
    void *p = ebb_zone_alloc(z);
    REQUIRE(p != NULL);

    size_t need = ebb_stats_json(NULL, 0);
    CHECK(need > 0);
    /* Small buffer: truncated, NUL-terminated, returns the full length. */
    char small[16];
    memset(small, 'Z', sizeof small);
    size_t n = ebb_stats_json(small, sizeof small);
    CHECK(n >= need); /* may have grown by a digit or two, never shrunk below a zone's worth */
    CHECK(small[sizeof small - 1] == '\0');
    CHECK(strlen(small) == sizeof small - 1);
    CHECK(small[0] == '{');
    /* len 1: just the NUL. */
    char one = 'Z';
    CHECK(ebb_stats_json(&one, 1) > 0);
    CHECK(one == '\0');
    /* Full buffer. */
    size_t cap = need + 4096;
    char *buf = malloc(cap);
    REQUIRE(buf != NULL);
    n = ebb_stats_json(buf, cap);
    REQUIRE(n < cap);
    CHECK(strlen(buf) == n);
    CHECK(buf[0] == '{' && buf[n - 1] == '}');
    CHECK(strstr(buf, "\"name\":\"capi-json\"") != NULL);
    const char *keys[] = {"\"name\"",         "\"size\"",           "\"limit\"",
                          "\"used\"",         "\"free\"",           "\"requests\"",
                          "\"fails\"",        "\"sleeps\"",         "\"bucket_size\"",
                          "\"mapped_bytes\"", "\"cached_bytes\"",   "\"released_bytes\"",
                          "\"pressure_level\"", "\"pressure_events\"", "\"invalid_frees\"",
                          "\"pools\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strstr(buf, keys[i]) == NULL) {
            fprintf(stderr, "stats JSON lacks %s\n", keys[i]);
            CHECK(0);
        }
    }
    free(buf);

    struct ebbtide_zone_stats st;
    REQUIRE(zone_stats("capi-json", &st) == 0);
    CHECK(st.used == 1 && st.size == 72);
    ebb_zone_free(z, p);
    CHECK(ebb_zone_destroy(z) == 0);
}

/* ---- tunables ---- */

static void test_tunables(void) {
    char v[64], w[64];
    int n = ebb_get("squeeze_ms", v, sizeof v);
    REQUIRE(n > 0);
    CHECK((size_t)n == strlen(v));

    CHECK(ebb_set("squeeze_ms", "250") == 0);
    CHECK(ebb_get("squeeze_ms", w, sizeof w) > 0);
    CHECK(strstr(w, "250") == w);

    /* Bad value: EINVAL, nothing changed. */
    errno = 0;
    CHECK(ebb_set("squeeze_ms", "soon") == -1);
    CHECK(errno == EINVAL);
    CHECK(strstr(ebb_last_error(), "squeeze_ms") != NULL);
    errno = 0;
    CHECK(ebb_set("squeeze_ms", "99999999") == -1); /* out of range */
    CHECK(errno == EINVAL);
    char x[64];
    CHECK(ebb_get("squeeze_ms", x, sizeof x) > 0);
    CHECK(strcmp(x, w) == 0);

    /* Unknown names: ENOENT. */
    errno = 0;
    CHECK(ebb_set("squeez_ms", "5") == -1);
    CHECK(errno == ENOENT);
    errno = 0;
    CHECK(ebb_get("no_such_tunable", x, sizeof x) == -1);
    CHECK(errno == ENOENT);
    /* NULL arguments: EINVAL. */
    errno = 0;
    CHECK(ebb_set(NULL, "5") == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_set("squeeze_ms", NULL) == -1);
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(ebb_get(NULL, x, sizeof x) == -1);
    CHECK(errno == EINVAL);

    /* snprintf semantics. */
    char tiny[2] = {'Z', 'Z'};
    int full = ebb_get("squeeze_ms", NULL, 0);
    CHECK(full == (int)strlen(w));
    CHECK(ebb_get("squeeze_ms", tiny, sizeof tiny) == full);
    CHECK(tiny[0] == w[0] && tiny[1] == '\0');

    /* Restore, then the list. */
    CHECK(ebb_set("squeeze_ms", v) == 0);
    size_t need = ebb_options_list(NULL, 0);
    REQUIRE(need > 0);
    char *list = malloc(need + 1);
    REQUIRE(list != NULL);
    CHECK(ebb_options_list(list, need + 1) == need);
    CHECK(strlen(list) == need);
    char line[96];
    snprintf(line, sizeof line, "squeeze_ms=%s\n", v);
    CHECK(strstr(list, line) != NULL);
    CHECK(strstr(list, "checked=") != NULL);
    /* Every listed name can be read back. */
    int names = 0;
    for (char *s = list; *s; names++) {
        char *eq = strchr(s, '=');
        char *nl = strchr(s, '\n');
        REQUIRE(eq != NULL && nl != NULL && eq < nl);
        *eq = '\0';
        errno = 0;
        if (ebb_get(s, NULL, 0) < 0) {
            fprintf(stderr, "listed tunable %s cannot be read\n", s);
            CHECK(0);
        }
        s = nl + 1;
    }
    CHECK(names > 5);
    free(list);
}

int main(void) {
    /* Before the allocator starts: no pressure sources but the explicit API, so pressure on a
     * busy host cannot open a squeeze window under the pool tests (pools shrink to 0 then). */
    REQUIRE(ebb_set("sources", "none") == 0);
    test_version();
    test_basic();
    test_bad_create();
    test_bad_calls();
    test_invalid_frees();
    test_destroy_busy();
    test_hooks();
    test_options_versions();
    test_reuse_caps();
    test_limits();
    test_reclaim();
    test_pool_bad_args();
    test_pools();
    test_stats_json();
    test_tunables();
    return check_finish("test_api");
}
