/* Multi-threaded tests: items allocated on one thread and freed on another (ring of threads
 * and a producer/consumer queue), concurrent stats/reclaim, EBB_LIMIT_WAIT sleeping until
 * another thread frees, and a page pool passed between threads while another one shrinks it.
 * Exit status 0 when every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ebbtide.h"
#include "check.h"

enum { THREADS = 4, PER_THREAD = 5000, ROUNDS = 6, ITEM = 96 };

static ebb_zone *ring_zone;
static pthread_barrier_t barrier;
static uint32_t *slots[THREADS][PER_THREAD];
static int ring_errors;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

static void ring_error(const char *what) {
    pthread_mutex_lock(&err_lock);
    ring_errors++;
    fprintf(stderr, "ring: %s (last error: %s)\n", what, ebb_last_error());
    pthread_mutex_unlock(&err_lock);
}

/* Each round: every thread fills its own slots, then frees the slots of its neighbour after
 * checking the neighbour's pattern is intact. */
static void *ring_worker(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < PER_THREAD; i++) {
            uint32_t *p = ebb_zone_alloc(ring_zone);
            if (p == NULL) {
                ring_error("alloc failed");
                continue;
            }
            for (int k = 0; k < ITEM / 4; k++) p[k] = (uint32_t)(me << 24 | round << 16 | i);
            slots[me][i] = p;
        }
        pthread_barrier_wait(&barrier);
        int from = (me + 1 + round % (THREADS - 1)) % THREADS;
        for (int i = 0; i < PER_THREAD; i++) {
            uint32_t *p = slots[from][i];
            if (p == NULL) continue;
            uint32_t want = (uint32_t)(from << 24 | round << 16 | i);
            if (p[0] != want || p[ITEM / 4 - 1] != want) ring_error("item overwritten while live");
            ebb_zone_free(ring_zone, p);
            slots[from][i] = NULL;
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static void test_ring(void) {
    ring_zone = ebb_zone_create("capi-mt-ring", ITEM, 0, 0);
    REQUIRE(ring_zone != NULL);
    REQUIRE(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, ring_worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
    CHECK(ring_errors == 0);
    struct ebbtide_zone_stats st[64];
    size_t n = ebb_stats_zones(st, 64);
    int found = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        if (strcmp(st[i].name, "capi-mt-ring") == 0) {
            found = 1;
            CHECK(st[i].used == 0);
            CHECK(st[i].requests >= (uint64_t)THREADS * PER_THREAD * ROUNDS);
        }
    }
    CHECK(found);
    CHECK(ebb_zone_destroy(ring_zone) == 0);
}

/* ---- producer / consumer with a reclaimer and a stats reader running alongside ---- */

enum { QCAP = 1024, PRODUCED = 100000 };
static ebb_zone *pc_zone;
static void *queue[QCAP];
static int qhead, qtail, qcount, producers_done;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static volatile int stop_side;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < PRODUCED; i++) {
        uint64_t *p = ebb_zone_alloc(pc_zone);
        if (p == NULL) {
            ring_error("producer alloc failed");
            continue;
        }
        p[0] = (uint64_t)i * 2654435761u;
        p[1] = ~p[0];
        pthread_mutex_lock(&qlock);
        while (qcount == QCAP) pthread_cond_wait(&qcond, &qlock);
        queue[qtail] = p;
        qtail = (qtail + 1) % QCAP;
        qcount++;
        pthread_cond_broadcast(&qcond);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    producers_done++;
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qlock);
    return NULL;
}

static void *consumer(void *arg) {
    long *freed = arg;
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (qcount == 0 && producers_done < 2) pthread_cond_wait(&qcond, &qlock);
        if (qcount == 0) {
            pthread_mutex_unlock(&qlock);
            return NULL;
        }
        uint64_t *p = queue[qhead];
        qhead = (qhead + 1) % QCAP;
        qcount--;
        pthread_cond_broadcast(&qcond);
        pthread_mutex_unlock(&qlock);
        if (p[1] != ~p[0]) ring_error("consumer saw a corrupted item");
        ebb_zone_free(pc_zone, p);
        (*freed)++;
    }
}

static void *side(void *arg) {
    (void)arg;
    char buf[256];
    int i = 0;
    while (!stop_side) {
        if (ebb_stats_json(buf, sizeof buf) == 0) ring_error("stats failed");
        if (ebb_reclaim(1 + i++ % 3) < 0) ring_error("reclaim failed");
        usleep(1000);
    }
    return NULL;
}

static void test_producer_consumer(void) {
    pc_zone = ebb_zone_create("capi-mt-pc", 16, 0, 0);
    REQUIRE(pc_zone != NULL);
    pthread_t p[2], c[2], s;
    long freed[2] = {0, 0};
    REQUIRE(pthread_create(&s, NULL, side, NULL) == 0);
    for (int i = 0; i < 2; i++) {
        REQUIRE(pthread_create(&p[i], NULL, producer, NULL) == 0);
        REQUIRE(pthread_create(&c[i], NULL, consumer, &freed[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(p[i], NULL);
        pthread_join(c[i], NULL);
    }
    stop_side = 1;
    pthread_join(s, NULL);
    CHECK(ring_errors == 0);
    CHECK(freed[0] + freed[1] == 2L * PRODUCED);
    CHECK(ebb_zone_destroy(pc_zone) == 0);
}

/* ---- EBB_LIMIT_WAIT: an allocation sleeps until another thread frees ---- */

static ebb_zone *wait_zone;
static volatile int waiter_done;
static void *waiter_item;

static void *waiter(void *arg) {
    (void)arg;
    waiter_item = ebb_zone_alloc(wait_zone); /* blocks: the zone is full */
    __atomic_store_n(&waiter_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_limit_wait(void) {
    struct ebb_zone_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.max_items = 2;
    o.limit_mode = EBB_LIMIT_WAIT;
    wait_zone = ebb_zone_create_ex("capi-mt-wait", 64, &o);
    REQUIRE(wait_zone != NULL);
    void *a = ebb_zone_alloc(wait_zone);
    void *b = ebb_zone_alloc(wait_zone);
    REQUIRE(a != NULL && b != NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, waiter, NULL) == 0);
    struct timespec d = {0, 200 * 1000 * 1000};
    nanosleep(&d, NULL);
    CHECK(__atomic_load_n(&waiter_done, __ATOMIC_SEQ_CST) == 0); /* still asleep */
    ebb_zone_free(wait_zone, a);
    pthread_join(t, NULL);
    CHECK(waiter_done == 1);
    CHECK(waiter_item != NULL);
    struct ebbtide_zone_stats st[64];
    size_t n = ebb_stats_zones(st, 64);
    for (size_t i = 0; i < n && i < 64; i++) {
        if (strcmp(st[i].name, "capi-mt-wait") == 0) {
            CHECK(st[i].sleeps >= 1);
            CHECK(st[i].used == 2);
        }
    }
    ebb_zone_free(wait_zone, b);
    ebb_zone_free(wait_zone, waiter_item);
    CHECK(ebb_zone_destroy(wait_zone) == 0);
}

/* ---- a page pool shared by threads, shrunk while in use ---- */

enum { POOL_PAGES = 200, POOL_ROUNDS = 8 };
static ebb_pool *mt_pool;
static unsigned char *pool_slots[THREADS][POOL_PAGES];
static size_t page_size;
static volatile int pool_stop;

/* Like ring_worker, with pages: get and stamp own pages, then check and put a neighbour's. */
static void *pool_worker(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int round = 0; round < POOL_ROUNDS; round++) {
        for (int i = 0; i < POOL_PAGES; i++) {
            unsigned char *p = ebb_pool_get(mt_pool);
            if (p == NULL || (uintptr_t)p % page_size != 0) {
                ring_error("pool get failed or page not aligned");
                pool_slots[me][i] = NULL;
                continue;
            }
            memset(p, (me * 31 + round * 7 + i) & 0xff, page_size);
            pool_slots[me][i] = p;
        }
        pthread_barrier_wait(&barrier);
        int from = (me + 1 + round % (THREADS - 1)) % THREADS;
        for (int i = 0; i < POOL_PAGES; i++) {
            unsigned char *p = pool_slots[from][i];
            if (p == NULL) continue;
            unsigned char want = (unsigned char)((from * 31 + round * 7 + i) & 0xff);
            if (p[0] != want || p[page_size / 2] != want || p[page_size - 1] != want)
                ring_error("page changed while in use");
            ebb_pool_put(mt_pool, p);
            pool_slots[from][i] = NULL;
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

/* Shrinks the pool over and over while the workers use it. */
static void *pool_shrinker(void *arg) {
    long long *total = arg;
    while (!__atomic_load_n(&pool_stop, __ATOMIC_SEQ_CST)) {
        long long r = ebb_pool_shrink(mt_pool);
        if (r < 0) ring_error("ebb_pool_shrink failed");
        else *total += r;
        struct ebbtide_pool_stats st;
        if (ebb_pool_stats(mt_pool, &st) != 0) ring_error("ebb_pool_stats failed");
        usleep(1000);
    }
    return NULL;
}

static void test_pool_threads(void) {
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    ring_errors = 0;
    mt_pool = ebb_pool_create("capi-mt-pool", 8);
    REQUIRE(mt_pool != NULL);
    REQUIRE(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
    long long shrunk = 0;
    pthread_t t[THREADS], s;
    REQUIRE(pthread_create(&s, NULL, pool_shrinker, &shrunk) == 0);
    for (int i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, pool_worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    __atomic_store_n(&pool_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(s, NULL);
    pthread_barrier_destroy(&barrier);
    CHECK(ring_errors == 0);
    CHECK(shrunk >= 0); /* may be 0: the reclaim thread's own shrink can get there first */
    struct ebbtide_pool_stats st;
    REQUIRE(ebb_pool_stats(mt_pool, &st) == 0);
    CHECK(st.pages_in_use == 0);
    CHECK(st.zone.requests >= (uint64_t)THREADS * POOL_PAGES * POOL_ROUNDS);
    CHECK(ebb_pool_shrink(mt_pool) >= 0);
    REQUIRE(ebb_pool_stats(mt_pool, &st) == 0);
    CHECK(st.free_pages <= 8);
    /* Without pressure the pages leave lazily (lazy_free): given back for good, or still on
     * the lazy list (settling or MADV_FREE'd) until lazy_decay_ms. */
    CHECK(st.zone.released_bytes + st.zone.lazy_bytes >=
          (uint64_t)(THREADS * POOL_PAGES - 8) * page_size);
    CHECK(ebb_pool_destroy(mt_pool) == 0);
}

int main(void) {
    test_ring();
    test_producer_consumer();
    test_limit_wait();
    test_pool_threads();
    return check_finish("test_threads");
}
