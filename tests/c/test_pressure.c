/* Memory pressure through the C API: ebb_pressure_notify (bad levels, CRITICAL giving cached
 * memory back), ebb_pressure_level, low-memory handlers (level and arg, on which thread,
 * allocating inside a handler, unregister, the 17th registration), and a squeeze emptying a
 * page pool. Only explicit notifications count here: the host's own pressure sources are off
 * (sources=none), so a busy machine cannot change the levels under the test.
 * Exit status 0 when every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ebbtide.h"
#include "check.h"

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct ebbtide_global_stats global(void) {
    struct ebbtide_global_stats g;
    REQUIRE(ebb_stats_global(&g) == 0);
    return g;
}

/* Back to no pressure, and wait until the reclaim thread has seen it. */
static void calm(void) {
    CHECK(ebb_pressure_notify(EBB_PRESSURE_NONE) == 0);
    uint64_t end = now_ms() + 3000;
    while (ebb_pressure_level() != EBB_PRESSURE_NONE && now_ms() < end) usleep(5000);
    CHECK(ebb_pressure_level() == EBB_PRESSURE_NONE);
    usleep(50 * 1000);
}

/* ---- handlers ---- */

struct ctx {
    atomic_int calls;
    atomic_int last_level;
    atomic_int on_main_thread;
    atomic_int alloc_ok;
    ebb_zone *zone; /* allocated from and freed to inside the handler */
};

static pthread_t main_thread;

static void handler(int level, void *arg) {
    struct ctx *c = arg;
    atomic_store(&c->last_level, level);
    if (pthread_equal(pthread_self(), main_thread)) atomic_store(&c->on_main_thread, 1);
    if (c->zone != NULL) {
        /* Handlers may allocate and free (no allocator lock is held). */
        void *p = ebb_zone_alloc(c->zone);
        if (p != NULL) {
            memset(p, 0x5a, 64);
            ebb_zone_free(c->zone, p);
            atomic_fetch_add(&c->alloc_ok, 1);
        }
    }
    atomic_fetch_add(&c->calls, 1); /* last: a waiter seeing the count sees the rest */
}

static void noop_handler(int level, void *arg) {
    (void)level;
    (void)arg;
}

/* Waits up to 3 s for c->calls to exceed `n`. */
static int wait_calls(struct ctx *c, int n) {
    uint64_t end = now_ms() + 3000;
    while (atomic_load(&c->calls) <= n && now_ms() < end) usleep(2000);
    return atomic_load(&c->calls) > n;
}

static void test_bad_levels(void) {
    struct ebbtide_global_stats before = global();
    int level = ebb_pressure_level();
    int bad[] = {-1, 4, 100, -2147483647 - 1, 2147483647};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        CHECK(ebb_pressure_notify(bad[i]) == -1);
        CHECK(errno == EINVAL);
        CHECK(strstr(ebb_last_error(), "level") != NULL);
    }
    usleep(50 * 1000);
    struct ebbtide_global_stats after = global();
    /* Nothing happened: no event counted, same level. */
    CHECK(after.events_explicit == before.events_explicit);
    CHECK(after.pressure_events == before.pressure_events);
    CHECK(ebb_pressure_level() == level);
}

static void test_handlers(void) {
    ebb_zone *z = ebb_zone_create("capi-lowmem", 64, 0, 0); /* starts the reclaim thread */
    REQUIRE(z != NULL);
    usleep(100 * 1000);                                        /* let it come up */
    static struct ctx c1, c2;
    c1.zone = z;
    c2.zone = NULL;
    /* Bad arguments. */
    errno = 0;
    CHECK(ebb_lowmem_register(NULL, &c1) == -1);
    CHECK(errno == EINVAL);
    int bad[] = {-1, EBB_LOWMEM_MAX, 12345};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        CHECK(ebb_lowmem_unregister(bad[i]) == -1);
        CHECK(errno == EINVAL);
    }

    int h1 = ebb_lowmem_register(handler, &c1);
    int h2 = ebb_lowmem_register(handler, &c2);
    CHECK(h1 >= 0 && h2 >= 0 && h1 != h2);

    /* LOW: both handlers called with the level and their own arg. */
    uint64_t events = global().events_explicit;
    CHECK(ebb_pressure_notify(EBB_PRESSURE_LOW) == 0);
    CHECK(global().events_explicit == events + 1);
    CHECK(wait_calls(&c1, 0));
    CHECK(wait_calls(&c2, 0));
    CHECK(atomic_load(&c1.last_level) == EBB_PRESSURE_LOW);
    CHECK(atomic_load(&c2.last_level) == EBB_PRESSURE_LOW);
    CHECK(atomic_load(&c1.alloc_ok) >= 1); /* the handler allocated and freed */
    CHECK(ebb_pressure_level() == EBB_PRESSURE_LOW);

    /* MODERATE: called again with the new level. */
    atomic_store(&c1.on_main_thread, 0);
    int n1 = atomic_load(&c1.calls), n2 = atomic_load(&c2.calls);
    CHECK(ebb_pressure_notify(EBB_PRESSURE_MODERATE) == 0);
    CHECK(wait_calls(&c1, n1));
    CHECK(wait_calls(&c2, n2));
    CHECK(atomic_load(&c1.last_level) == EBB_PRESSURE_MODERATE);
    CHECK(atomic_load(&c2.last_level) == EBB_PRESSURE_MODERATE);
    CHECK(ebb_pressure_level() == EBB_PRESSURE_MODERATE);
    /* With a reclaim thread (the default), handlers run on it, not on the notifying thread. */
    char rt[16] = "";
    CHECK(ebb_get("reclaim_thread", rt, sizeof rt) > 0);
    if (strcmp(rt, "true") == 0) {
        CHECK(atomic_load(&c1.on_main_thread) == 0);
    }

    /* Unregistered: no more calls to h1, h2 still called. */
    CHECK(ebb_lowmem_unregister(h1) == 0);
    errno = 0;
    CHECK(ebb_lowmem_unregister(h1) == -1); /* twice: EINVAL */
    CHECK(errno == EINVAL);
    calm();
    n1 = atomic_load(&c1.calls);
    n2 = atomic_load(&c2.calls);
    CHECK(ebb_pressure_notify(EBB_PRESSURE_LOW) == 0);
    CHECK(wait_calls(&c2, n2));
    usleep(100 * 1000);
    CHECK(atomic_load(&c1.calls) == n1);

    /* At most EBB_LOWMEM_MAX (16): h2 and 15 more, then ENOSPC; a freed slot is reusable. */
    int hs[EBB_LOWMEM_MAX];
    int got = 0;
    for (int i = 0; i < EBB_LOWMEM_MAX - 1; i++) {
        hs[i] = ebb_lowmem_register(noop_handler, NULL);
        CHECK(hs[i] >= 0);
        if (hs[i] >= 0) got++;
    }
    CHECK(got == EBB_LOWMEM_MAX - 1);
    errno = 0;
    CHECK(ebb_lowmem_register(noop_handler, NULL) == -1); /* the 17th */
    CHECK(errno == ENOSPC);
    CHECK(ebb_lowmem_unregister(hs[0]) == 0);
    int again = ebb_lowmem_register(noop_handler, NULL);
    CHECK(again >= 0);
    CHECK(ebb_lowmem_unregister(again) == 0);
    for (int i = 1; i < got; i++) CHECK(ebb_lowmem_unregister(hs[i]) == 0);
    CHECK(ebb_lowmem_unregister(h2) == 0);
    calm();
    CHECK(ebb_zone_destroy(z) == 0);
}

/* ---- CRITICAL gives cached memory back ---- */

static void test_critical_releases(void) {
    calm();
    ebb_zone *z = ebb_zone_create("capi-critical", 256, 0, 0);
    REQUIRE(z != NULL);
    enum { N = 20000 };
    void **items = malloc(N * sizeof *items);
    REQUIRE(items != NULL);
    for (int i = 0; i < N; i++) {
        items[i] = ebb_zone_alloc(z);
        REQUIRE(items[i] != NULL);
        memset(items[i], 1, 256);
    }
    void *keep = items[0];
    for (int i = 1; i < N; i++) ebb_zone_free(z, items[i]);
    free(items);
    struct ebbtide_global_stats before = global();
    CHECK(before.mapped_bytes >= (uint64_t)N / 2 * 256);
    CHECK(before.cached_bytes > 0);

    CHECK(ebb_pressure_notify(EBB_PRESSURE_CRITICAL) == 0);
    struct ebbtide_global_stats after = global();
    uint64_t end = now_ms() + 3000;
    while (!(after.mapped_bytes < before.mapped_bytes / 4) && now_ms() < end) {
        usleep(5000);
        after = global();
    }
    printf("CRITICAL: mapped_bytes %llu -> %llu, released_bytes %llu -> %llu\n",
           (unsigned long long)before.mapped_bytes, (unsigned long long)after.mapped_bytes,
           (unsigned long long)before.released_bytes, (unsigned long long)after.released_bytes);
    CHECK(after.mapped_bytes < before.mapped_bytes / 4);
    CHECK(after.released_bytes >= before.released_bytes + (uint64_t)N / 2 * 256);
    CHECK(after.pressure_level == EBB_PRESSURE_CRITICAL);
    CHECK(ebb_pressure_level() == EBB_PRESSURE_CRITICAL);
    CHECK(strcmp(after.last_event_source, "explicit") == 0);
    CHECK(after.last_event_level == EBB_PRESSURE_CRITICAL);
    /* The item in use is untouched and still usable. */
    CHECK(((unsigned char *)keep)[255] == 1);
    ebb_zone_free(z, keep);
    calm();
    CHECK(ebb_zone_destroy(z) == 0);
}

/* ---- MODERATE squeezes page pools to 0 free pages ---- */

static void test_squeeze_pool(void) {
    calm();
    const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    ebb_pool *pool = ebb_pool_create("capi-squeeze", 1024);
    REQUIRE(pool != NULL);
    enum { NP = 300 };
    unsigned char *pages[NP];
    for (int i = 0; i < NP; i++) {
        pages[i] = ebb_pool_get(pool);
        REQUIRE(pages[i] != NULL);
        memset(pages[i], 7, ps);
    }
    for (int i = 1; i < NP; i++) ebb_pool_put(pool, pages[i]);
    struct ebbtide_pool_stats st;
    REQUIRE(ebb_pool_stats(pool, &st) == 0);
    CHECK(st.free_pages >= NP - 1); /* under the cap: kept */

    CHECK(ebb_pressure_notify(EBB_PRESSURE_MODERATE) == 0);
    uint64_t end = now_ms() + 3000;
    do {
        REQUIRE(ebb_pool_stats(pool, &st) == 0);
        if (st.free_pages == 0) break;
        usleep(5000);
    } while (now_ms() < end);
    CHECK(st.free_pages == 0);
    CHECK(st.pages_in_use == 1);
    CHECK(st.zone.squeeze_windows >= 1);
    int intact = 1;
    for (size_t i = 0; i < ps; i++) intact &= pages[0][i] == 7;
    CHECK(intact);
    ebb_pool_put(pool, pages[0]);
    calm();
    CHECK(ebb_pool_destroy(pool) == 0);
}

int main(void) {
    main_thread = pthread_self();
    /* Before anything starts the allocator: only explicit notifications, and no rate limits
     * between them (each notify below must act). */
    REQUIRE(ebb_set("sources", "none") == 0);
    REQUIRE(ebb_set("trim_min_interval_ms", "0") == 0);
    REQUIRE(ebb_set("drain_min_interval_ms", "0") == 0);
    REQUIRE(ebb_set("drain_cpu_min_interval_ms", "0") == 0);
    REQUIRE(ebb_set("squeeze_ms", "100") == 0);
    test_bad_levels();
    test_handlers();
    test_critical_releases();
    test_squeeze_pool();
    test_bad_levels();
    return check_finish("test_pressure");
}
