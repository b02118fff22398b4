/* bufpool: a small message-buffer pool on top of an ebbtide zone.
 *
 * A server keeps 2 KiB message buffers in a zone with a ctor that stamps a header and a limit
 * of 4096 buffers in flight. It handles a burst (workers allocate on one thread and the
 * buffers are released on another), then the burst is over: ebb_reclaim gives the cached
 * buffers' memory back to the OS, and the statistics show it.
 *
 * It also keeps a page pool for receive pages and a stash of spare pages of its own (as a
 * driver keeps pages granted to a ring). A low-memory handler gives the stash back to the pool
 * when the library reports pressure; ebb_pressure_notify(EBB_PRESSURE_MODERATE) stands in for
 * real pressure here, and the pool's free pages go back to the OS (squeeze window).
 *
 * Build (after scripts/install-capi.sh):
 *   cc -std=c11 -O2 bufpool.c -o bufpool $(pkg-config --cflags --libs ebbtide) -pthread
 * or from the source tree (cargo build -p ebbtide-capi):
 *   cc -std=c11 -O2 -Iinclude examples/c/bufpool.c -o bufpool -Ltarget/debug -lebbtide \
 *      -Wl,-rpath,$PWD/target/debug -pthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ebbtide.h>

#define MSG_SIZE 2048
#define MSG_MAGIC 0x6d736762u /* "msgb" */
#define IN_FLIGHT 4096
#define BURST 20000

struct msg {
    uint32_t magic;
    uint32_t len;
    char data[MSG_SIZE - 8];
};

static int msg_ctor(void *item, size_t size, void *arg) {
    (void)size;
    (void)arg;
    struct msg *m = item;
    m->magic = MSG_MAGIC;
    m->len = 0;
    return 0;
}

static ebb_zone *msgs;
static struct msg *ring[IN_FLIGHT];
static int head, tail, count, done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

/* The "network" thread: takes filled buffers and releases them. */
static void *sender(void *arg) {
    long *sent = arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (count == 0 && !done) pthread_cond_wait(&cond, &lock);
        if (count == 0) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        struct msg *m = ring[head];
        head = (head + 1) % IN_FLIGHT;
        count--;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
        if (m->magic != MSG_MAGIC) abort();
        *sent += m->len;
        ebb_zone_free(msgs, m);
    }
}

/* Receive pages: a pool, and spare pages the application holds on to for fast reuse. */
#define SPARE_MAX 64
static ebb_pool *rx;
static void *spare[SPARE_MAX];
static int nspare;
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int lowmem_calls, lowmem_level, lowmem_returned;

/* Low-memory handler: runs on the library's reclaim thread before it reclaims, with no
 * allocator lock held, so it may put pages back (it must not create or destroy pools). */
static void on_lowmem(int level, void *arg) {
    (void)arg;
    pthread_mutex_lock(&spare_lock);
    int n = nspare;
    while (nspare > 0) ebb_pool_put(rx, spare[--nspare]);
    pthread_mutex_unlock(&spare_lock);
    atomic_store(&lowmem_level, level);
    atomic_fetch_add(&lowmem_returned, n);
    atomic_fetch_add(&lowmem_calls, 1);
}

static int rx_demo(void) {
    rx = ebb_pool_create("bufpool-rx", 32); /* keep at most 32 free pages between shrinks */
    if (rx == NULL) {
        fprintf(stderr, "ebb_pool_create: %s (%s)\n", strerror(errno), ebb_last_error());
        return 1;
    }
    int h = ebb_lowmem_register(on_lowmem, NULL);
    if (h < 0) {
        fprintf(stderr, "ebb_lowmem_register: %s (%s)\n", strerror(errno), ebb_last_error());
        return 1;
    }
    /* A receive burst: 256 pages in flight, then all but SPARE_MAX go back to the pool. */
    void *pages[256];
    for (int i = 0; i < 256; i++) {
        if ((pages[i] = ebb_pool_get(rx)) == NULL) return 1;
        memset(pages[i], 0, 64); /* "receive" into it */
    }
    pthread_mutex_lock(&spare_lock);
    for (int i = 0; i < 256; i++) {
        if (nspare < SPARE_MAX) spare[nspare++] = pages[i];
        else ebb_pool_put(rx, pages[i]);
    }
    pthread_mutex_unlock(&spare_lock);
    struct ebbtide_pool_stats ps;
    ebb_pool_stats(rx, &ps);
    unsigned long long free_before = (unsigned long long)ps.free_pages;

    /* Memory pressure (here reported by hand; normally PSI, cgroup events, ...). */
    ebb_pressure_notify(EBB_PRESSURE_MODERATE);
    for (int i = 0; i < 200 && atomic_load(&lowmem_calls) == 0; i++) usleep(10 * 1000);
    for (int i = 0; i < 200; i++) { /* the squeeze empties the pool */
        ebb_pool_stats(rx, &ps);
        if (ps.free_pages == 0) break;
        usleep(10 * 1000);
    }
    printf("low-memory handler: called %d time(s), level %d, returned %d spare pages\n",
           atomic_load(&lowmem_calls), atomic_load(&lowmem_level), atomic_load(&lowmem_returned));
    printf("pool %s: free pages %llu -> %llu, %llu bytes released to the OS\n", ps.zone.name,
           free_before, (unsigned long long)ps.free_pages,
           (unsigned long long)ps.zone.released_bytes);

    ebb_lowmem_unregister(h);
    pthread_mutex_lock(&spare_lock);
    while (nspare > 0) ebb_pool_put(rx, spare[--nspare]);
    pthread_mutex_unlock(&spare_lock);
    ebb_pressure_notify(EBB_PRESSURE_NONE);
    if (ebb_pool_destroy(rx) != 0) {
        fprintf(stderr, "ebb_pool_destroy: %s (%s)\n", strerror(errno), ebb_last_error());
        return 1;
    }
    return 0;
}

int main(void) {
    struct ebb_zone_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.ctor = msg_ctor;
    o.max_items = IN_FLIGHT;
    o.limit_mode = EBB_LIMIT_WAIT; /* back-pressure: wait for the sender to release one */
    msgs = ebb_zone_create_ex("bufpool-msgs", sizeof(struct msg), &o);
    if (msgs == NULL) {
        fprintf(stderr, "ebb_zone_create_ex: %s (%s)\n", strerror(errno), ebb_last_error());
        return 1;
    }

    long sent = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, sender, &sent) != 0) return 1;
    for (int i = 0; i < BURST; i++) {
        struct msg *m = ebb_zone_alloc(msgs);
        if (m == NULL) {
            fprintf(stderr, "ebb_zone_alloc: %s (%s)\n", strerror(errno), ebb_last_error());
            return 1;
        }
        m->len = (uint32_t)snprintf(m->data, sizeof m->data, "message %d", i);
        pthread_mutex_lock(&lock);
        while (count == IN_FLIGHT) pthread_cond_wait(&cond, &lock);
        ring[tail] = m;
        tail = (tail + 1) % IN_FLIGHT;
        count++;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);

    struct ebbtide_global_stats before, after;
    ebb_stats_global(&before);
    long long released = ebb_reclaim(EBB_RECLAIM_DRAIN_CPU);
    ebb_stats_global(&after);
    printf("sent %d messages (%ld bytes of payload)\n", BURST, sent);
    printf("burst over: released %lld bytes to the OS (cached %llu -> %llu bytes)\n", released,
           (unsigned long long)before.cached_bytes, (unsigned long long)after.cached_bytes);

    struct ebbtide_zone_stats z;
    if (ebb_stats_zones(&z, 1) >= 1)
        printf("zone %s: size %llu, used %llu, requests %llu, sleeps %llu\n", z.name,
               (unsigned long long)z.size, (unsigned long long)z.used,
               (unsigned long long)z.requests, (unsigned long long)z.sleeps);

    char tun[32];
    if (ebb_get("squeeze_ms", tun, sizeof tun) >= 0) printf("squeeze_ms = %s\n", tun);

    if (ebb_zone_destroy(msgs) != 0) {
        fprintf(stderr, "ebb_zone_destroy: %s (%s)\n", strerror(errno), ebb_last_error());
        return 1;
    }
    if (rx_demo() != 0) return 1;
    printf("ebbtide %s: done\n", ebb_version());
    return 0;
}
