/*
 * ebbtide.h — C API of the ebbtide zone allocator (libebbtide.so / libebbtide.a).
 *
 * Hand-written, and checked against the Rust side by crates/ebbtide-capi/tests/c_tests.rs:
 * constants, struct layouts (offsets and sizes compiled in a C program), the exported symbols
 * (nm -D) against the functions declared here, and the stats block below against
 * ebbtide::stats::c_header(). Regenerate that block with
 *   EBBTIDE_BLESS=1 cargo test -p ebbtide-capi --lib header_stats_block
 *
 * Conventions: a failing call returns NULL / -1 / 0 (as documented per function) and sets
 * errno; ebb_last_error() then says what was wrong (per thread). No call ever lets a Rust panic
 * through: internal errors are EIO, or an abort with a message in ebb_zone_free and
 * ebb_pool_put.
 * See docs/c-api.md.
 */
#ifndef EBBTIDE_H
#define EBBTIDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EBB_VERSION "0.1.0"

/* Memory pressure levels (ebb_pressure_notify, ebb_pressure_level, low-memory handlers). */
#define EBB_PRESSURE_NONE      0
#define EBB_PRESSURE_LOW       1
#define EBB_PRESSURE_MODERATE  2
#define EBB_PRESSURE_CRITICAL  3

/* Reclaim requests (ebb_reclaim, ebb_zone_reclaim). */
#define EBB_RECLAIM_TRIM       1 /* depot down to its working set, free slabs back to the OS */
#define EBB_RECLAIM_DRAIN      2 /* whole depot to the slabs, free slabs back to the OS */
#define EBB_RECLAIM_DRAIN_CPU  3 /* depot and every CPU's cache, free slabs back to the OS */

/* Zone flags (ebb_zone_create, struct ebb_zone_options.flags). */
#define EBB_ZONE_NOTRIM    1u /* never trim the depot to its working set (drains still apply) */
#define EBB_ZONE_NOBUCKET  2u /* no per-CPU caches or depot: every call goes to the slabs */
#define EBB_ZONE_CHECKED   4u /* full checks on every free: double frees caught at once */
#define EBB_ZONE_ZERO      8u /* zero each item on allocation */

/* What an allocation does when the zone is at max_items. */
#define EBB_LIMIT_FAIL 0 /* fail at once (errno ENOMEM, counted as a fail) */
#define EBB_LIMIT_WAIT 1 /* sleep until an item comes back (FIFO, counted as a sleep) */

/* Most low-memory handlers registered at once (ebb_lowmem_register). */
#define EBB_LOWMEM_MAX 16

/* Opaque handles. An ebb_zone * is not the zone's address (it carries a flag for the fast
 * paths beside it): keep it and pass it back as it came; never dereference it. */
typedef struct ebb_zone ebb_zone;
typedef struct ebb_pool ebb_pool;

/* Hooks. init/ctor return 0 on success; anything else fails the allocation (errno ECANCELED).
 * init runs when an item leaves a slab, fini when it returns to one (with the zone's slab lock
 * held), ctor on every allocation, dtor on every free. Hooks must not allocate from or free to
 * their own zone. arg is opts->hook_arg, passed from whatever thread allocates or frees. */
typedef int (*ebb_init_fn)(void *item, size_t size, void *arg);
typedef void (*ebb_fini_fn)(void *item, size_t size, void *arg);

/* Zone options, version 2. Set size = sizeof(struct ebb_zone_options) and leave what you do
 * not need 0 (memset or = {0}): every 0 means the default. Later versions only append members:
 * the library accepts the size of every older version (defaults for the members it lacks) and
 * rejects (EINVAL) a larger size whose unknown tail is not all zero. */
struct ebb_zone_options {
    size_t size;            /* sizeof(struct ebb_zone_options) */
    size_t align;           /* 0 = 8 (16 for items of 16 bytes or more); a power of two <= page size */
    ebb_init_fn init;
    ebb_fini_fn fini;
    ebb_init_fn ctor;
    ebb_fini_fn dtor;
    void *hook_arg;         /* passed to every hook */
    size_t max_items;       /* at most this many items out of the slabs (cached count); 0 = no limit */
    int limit_mode;         /* EBB_LIMIT_FAIL or EBB_LIMIT_WAIT */
    unsigned flags;         /* EBB_ZONE_* */
    size_t reserve_items;   /* free slabs kept backed when reclaiming, in items */
    uint64_t depot_max_items; /* most items the depot may hold; 0 = no cap */
    /* Version 2 (appended): */
    uint64_t free_slabs_max_bytes; /* entirely free slabs kept backed between reclaims (at least
                                    * one slab); beyond them a slab a free empties gives its pages
                                    * back; 0 = all kept until a reclaim */
    uint64_t reuse_floor_bytes; /* non-zero: the depot's and the free slabs' caps follow the
                                 * bytes allocations took again from them lately (this period
                                 * of trim_interval_ms or the last), at least this many bytes
                                 * each, at most the caps above; 0 = fixed caps only */
};

/* ---- zones ---- */

/* NULL, errno EINVAL on bad arguments (NULL or bad name: empty, > 63 bytes, control characters,
 * quotes or backslashes; size 0 or too large; align not a power of two or above the page size;
 * unknown flags), ENOMEM when the zone's metadata cannot be mapped. align 0 = default. */
ebb_zone *ebb_zone_create(const char *name, size_t size, size_t align, unsigned flags);
/* As ebb_zone_create with options; opts NULL = defaults. */
ebb_zone *ebb_zone_create_ex(const char *name, size_t item_size, const struct ebb_zone_options *opts);
/* One item. NULL, errno ENOMEM (no memory, or max_items reached with EBB_LIMIT_FAIL),
 * ECANCELED (init or ctor hook refused), EINVAL (zone NULL). */
void *ebb_zone_alloc(ebb_zone *zone);
/* item NULL: nothing. An invalid free (not an item of this zone, not an item's start, or a
 * double free caught in checked mode) is printed on stderr, counted (ebb_invalid_frees) and
 * NOT applied; errno is set to EINVAL. */
void ebb_zone_free(ebb_zone *zone, void *item);
/* 0, or -1 errno EBUSY while items are live (nothing freed, the zone stays usable), EINVAL for
 * NULL or a handle that is not a live zone (double destroy). */
int ebb_zone_destroy(ebb_zone *zone);
/* Usable item size (size rounded up to the alignment); 0, errno EINVAL for NULL. */
size_t ebb_zone_item_size(const ebb_zone *zone);
/* Reclaim from one zone: bytes given back to the OS, or -1 errno EINVAL. */
long long ebb_zone_reclaim(ebb_zone *zone, int request);
/* Invalid frees seen through this API since the process started. */
unsigned long long ebb_invalid_frees(void);

/* ---- page pools ---- */

/* A pool of page-sized, page-aligned buffers (xen-blkback style) keeping at most
 * max_buffer_pages free pages: the reclaim thread shrinks every pool to its cap every
 * pool_shrink_interval_ms (100 ms), and to 0 free pages while a squeeze window is open
 * (Moderate or Critical pressure). Pages in use are never touched.
 * NULL, errno EINVAL (bad name, as for zones), ENOMEM (metadata could not be mapped). */
ebb_pool *ebb_pool_create(const char *name, size_t max_buffer_pages);
/* One page (page-aligned, page size bytes). NULL, errno ENOMEM (no memory), EINVAL (NULL). */
void *ebb_pool_get(ebb_pool *pool);
/* page NULL: nothing. An invalid put (not a page of this pool, not a page's start) is printed
 * on stderr, counted (ebb_invalid_frees) and NOT applied; errno is set to EINVAL. */
void ebb_pool_put(ebb_pool *pool, void *page);
/* 0, or -1 errno EBUSY while pages are in use (nothing freed, the pool stays usable), EINVAL for
 * NULL or a handle that is not a live pool (double destroy). */
int ebb_pool_destroy(ebb_pool *pool);
/* New cap of free pages, used from the next shrink. 0, or -1 errno EINVAL (NULL). */
int ebb_pool_set_max_buffer_pages(ebb_pool *pool, size_t max_buffer_pages);
/* Shrink to the cap now (0 free pages during a squeeze window): bytes given back to the OS, or
 * -1 errno EINVAL (NULL). */
long long ebb_pool_shrink(ebb_pool *pool);

/* ---- memory pressure ---- */

/* Report memory pressure (EBB_PRESSURE_*). The library's reclaim thread acts at once: low-memory
 * handlers, then LOW: TRIM; MODERATE: DRAIN and a squeeze window (squeeze_ms: caches and pools
 * emptied, frees go straight back to the OS); CRITICAL: DRAIN_CPU, squeeze, per-CPU caches off
 * while critical. Without a reclaim thread (reclaim_thread=false) this is done on the calling
 * thread before returning. Reclaims are rate limited (*_min_interval_ms tunables). 0, or -1
 * errno EINVAL for any other level (nothing happens). */
int ebb_pressure_notify(int level);
/* The pressure level in effect (EBB_PRESSURE_*); it decays one level per level_hold_ms without
 * new events. */
int ebb_pressure_level(void);

/* Low-memory handler: called with the pressure level in effect and its arg. */
typedef void (*ebb_lowmem_fn)(int level, void *arg);
/* Register fn(level, arg), called when the level rises or the allocator is about to reclaim for
 * pressure. It runs on the library's reclaim thread (or on the thread calling
 * ebb_pressure_notify when there is no reclaim thread), before the allocator reclaims, with no
 * allocator lock held: it may allocate and free (ebb_zone_alloc/free, ebb_pool_get/put, malloc),
 * but must not create or destroy zones or pools, and should return quickly. A handle >= 0, or -1
 * errno EINVAL (fn NULL) / ENOSPC (EBB_LOWMEM_MAX handlers registered). */
int ebb_lowmem_register(ebb_lowmem_fn fn, void *arg);
/* 0, or -1 errno EINVAL (not a registered handle). A call already under way on the reclaim
 * thread may still finish after this returns. */
int ebb_lowmem_unregister(int handle);

/* ---- reclaim, statistics, tunables ---- */

/* Reclaim from every zone: bytes given back to the OS, or -1 errno EINVAL (unknown request). */
long long ebb_reclaim(int request);
/* Statistics as JSON, snprintf semantics: writes at most len - 1 bytes plus a NUL (len > 0) and
 * returns the length of the whole text (buf may be NULL when len is 0). Per zone: name, size,
 * limit, used, free, requests, fails, sleeps, bucket_size, ...; global: mapped_bytes,
 * cached_bytes, released_bytes, pressure_level, pressure_events, ... 0 with errno EIO on an
 * internal error. */
size_t ebb_stats_json(char *buf, size_t len);
/* Tunables (names as in docs/ABI/testing/options, e.g. "squeeze_ms"). ebb_get: the canonical
 * text of the value, snprintf semantics, returns its length, or -1 errno EINVAL (NULL name) /
 * ENOENT (no such tunable). ebb_set: 0, or -1 errno ENOENT (no such tunable) / EINVAL (NULL,
 * unparsable, out of range, start-up only, breaks a cross-tunable rule); nothing is changed
 * on failure. */
int ebb_get(const char *name, char *buf, size_t len);
int ebb_set(const char *name, const char *value);
/* Every tunable as "name=value\n" lines, snprintf semantics. */
size_t ebb_options_list(char *buf, size_t len);
/* The library version ("0.1.0"), static storage. */
const char *ebb_version(void);
/* This thread's message about its last failed call ("" if none); valid until its next failure. */
const char *ebb_last_error(void);

/* ---- statistics as C structs ---- */

/* BEGIN ebbtide::stats::c_header() */
/* Generated from ebbtide::stats; do not edit by hand. */
#define EBBTIDE_STATS_VERSION 1
#define EBBTIDE_STATS_TEXT_LEN 64

struct ebbtide_zone_stats {
	char name[EBBTIDE_STATS_TEXT_LEN];	/* Zone name, as given when the zone was created. */
	uint64_t size;	/* gauge, bytes: Item size. */
	uint64_t align;	/* gauge, bytes: Item alignment. */
	uint64_t limit;	/* gauge, items: Maximum number of items (max_items); 0 means no limit. Cached items count toward it. */
	uint64_t used;	/* gauge, items: Items allocated and not yet freed. */
	uint64_t free;	/* gauge, items: Free items held by the zone: per-CPU buckets, the depot and free slots in slabs (as vmstat -z FREE). */
	uint64_t requests;	/* counter, events: Allocations served. */
	uint64_t fails;	/* counter, events: Allocations that failed (limit reached without waiting, or no memory). */
	uint64_t sleeps;	/* counter, events: Allocations that waited for an item because the zone was at its limit. */
	uint64_t frees;	/* counter, events: Items freed. */
	uint64_t bucket_size;	/* gauge, items: Current per-CPU bucket size (grows on depot contention, shrinks on trim and drain). */
	uint64_t bucket_size_max;	/* gauge, items: Largest bucket size allowed for this item size. */
	uint64_t depot_nitems;	/* gauge, items: Items in full buckets in the depot. */
	uint64_t depot_imax;	/* gauge, items: Depot high mark since the last working-set update (decays by half each update). */
	uint64_t depot_imin;	/* gauge, items: Depot low mark since the last working-set update. */
	uint64_t depot_bimin;	/* gauge, items: Depot low mark since the last new high mark. */
	uint64_t depot_wss;	/* gauge, items: Working-set size estimate of the depot (UMA wss). */
	uint64_t depot_limin;	/* gauge, items: Long-term average of items the depot kept above its working set (UMA limin). */
	uint64_t depot_timin;	/* gauge, events: Consecutive working-set updates in which the depot stayed above its working set (UMA timin). */
	uint64_t cached_bytes_pcpu;	/* gauge, bytes: Bytes of free items in per-CPU buckets. */
	uint64_t cached_bytes_depot;	/* gauge, bytes: Bytes of free items in depot buckets. */
	uint64_t free_bytes_slabs;	/* gauge, bytes: Bytes of free item slots in slabs. */
	uint64_t pages_mapped;	/* gauge, pages: OS pages mapped for this zone's slabs. */
	uint64_t slab_bytes;	/* gauge, bytes: Size of one slab. */
	uint64_t items_per_slab;	/* gauge, items: Items in one slab. */
	uint64_t efficiency_pct;	/* gauge, percent: items_per_slab * size / slab_bytes, in percent (UMA efficiency). */
	uint64_t reclaim_trim;	/* counter, events: TRIM reclaims run on this zone (depot down to its working set). */
	uint64_t reclaim_drain;	/* counter, events: DRAIN reclaims run on this zone (whole depot). */
	uint64_t reclaim_drain_cpu;	/* counter, events: DRAIN_CPU reclaims run on this zone (depot, every per-CPU cache, depot again). */
	uint64_t released_bytes;	/* counter, bytes: Bytes given back to the OS (munmap or madvise) by this zone. */
	uint64_t squeeze_windows;	/* counter, events: Squeeze windows opened on this zone. */
	uint64_t buckets_enabled;	/* 0 or 1: Whether per-CPU buckets are in use (disabled while pressure is critical). */
	uint64_t invalid_frees;	/* counter, events: Frees refused because the pointer was not a live item of the zone (reported on stderr, never applied). */
	uint64_t lazy_bytes;	/* gauge, bytes: Bytes of free slabs given up without pressure (settling — a page pool's in its stash —, or offered to the kernel with MADV_FREE) and neither reused nor given back for good yet (still in RSS until the kernel takes them; not in released_bytes). */
	uint64_t lazy_freed_bytes;	/* counter, bytes: Bytes offered to the kernel with MADV_FREE (lazy_free), apart from released_bytes. */
	uint64_t lazy_reused_bytes;	/* counter, bytes: Bytes of lazily freed slabs taken back by allocation (reuse without a page fault unless the kernel had taken the page). */
	uint64_t pcpu_capacity;	/* gauge, items: Capacity of this zone's per-CPU caches, summed over CPUs: each CPU's bucket pair (2 x bucket_size) plus what the resize pass granted it for its misses, within pcpu_budget_bytes (0 while caching is off). */
	uint64_t pcpu_capacity_bytes;	/* gauge, bytes: pcpu_capacity times the item size: what this zone's per-CPU caches may hold. */
	uint64_t pcpu_capacity_max;	/* gauge, items: Largest capacity of this zone's cache on one CPU. */
	uint64_t pcpu_underflows;	/* counter, events: Allocations that found this CPU's cache empty and went to the depot or the slabs (misses that grow the cache). */
	uint64_t pcpu_overflows;	/* counter, events: Frees that found this CPU's cache full and flushed a bucket to the depot (misses that grow the cache). */
	uint64_t pcpu_interval_misses;	/* gauge, events: Misses (underflows and overflows, every CPU) counted by the last resize pass, i.e. in the last pool_shrink_interval_ms. */
	uint64_t lock_waits_depot;	/* counter, events: Acquisitions of this zone's depot mutex (its full buckets: every CPU's cache misses) that found it held and waited. */
	uint64_t lock_waits_keg;	/* counter, events: Acquisitions of this zone's keg mutex (its slab lists: items imported into the caches, freed to the slabs, reclaimed) that found it held and waited. */
	uint64_t lock_waits_stash;	/* counter, events: Acquisitions of a page pool's stash mutex (the pages a shrink gave back lazily) that found it held and waited; 0 for other zones. */
	uint64_t lock_wait_ns_depot;	/* counter, nanoseconds: Time the waits of lock_waits_depot spent blocked (CLOCK_MONOTONIC, read only around a wait). */
	uint64_t lock_wait_ns_keg;	/* counter, nanoseconds: Time the waits of lock_waits_keg spent blocked. */
	uint64_t lock_wait_ns_stash;	/* counter, nanoseconds: Time the waits of lock_waits_stash spent blocked. */
	uint64_t remote_frees;	/* counter, events: Items freed on one CPU and allocated on another through the depot: the items of buckets one CPU's full cache flushed that another CPU's empty cache took (a program's producer/consumer traffic; a free into the freeing CPU's own cache costs no lock and is not counted). */
	uint64_t remote_buckets;	/* counter, events: The depot buckets that carried remote_frees from one CPU to another. */
	uint64_t huge_pages;	/* gauge, pages: Huge pages (2 MiB) of this zone's slabs that hold memory: a zone holding 32 MiB of slabs turns its 4 MiB chunks into two MADV_HUGEPAGE pages each (fewer TLB misses). */
	uint64_t huge_partly_used;	/* gauge, pages: Of huge_pages, those partly used: some of their slabs hold items, some do not. */
	uint64_t huge_broken;	/* gauge, pages: Of huge_pages, those broken: some of their slabs were given back (the kernel split the huge page) while the rest stays. */
	uint64_t huge_released;	/* counter, pages: Huge pages given back whole (one MADV_DONTNEED of 2 MiB, no split) since the zone was created. */
	uint64_t huge_collapsed;	/* counter, pages: Huge pages the zone collapsed (MADV_COLLAPSE, on the reclaim thread) since it was created: its older chunks when it turned huge, and pages broken by a release once all in use again. */
};

struct ebbtide_pool_stats {
	struct ebbtide_zone_stats zone;
	uint64_t max_buffer_pages;	/* gauge, pages: Free pages the pool keeps between shrinks outside a squeeze window. */
	uint64_t free_pages;	/* gauge, pages: Free pages in the pool now. */
	uint64_t pages_in_use;	/* gauge, pages: Pages handed out and not yet returned (never released by a shrink). */
	uint64_t squeezed;	/* 0 or 1: Whether a squeeze window is open (the pool shrinks to 0 free pages). */
};

struct ebbtide_global_stats {
	uint64_t mapped_bytes;	/* gauge, bytes: Bytes mapped from the OS by the library. */
	uint64_t cached_bytes;	/* gauge, bytes: Bytes held in caches: per-CPU buckets, depots, free slab slots, free pool pages, and the caches of layers above the zones that reclaim drains with them (the malloc's page heap of free large runs). */
	uint64_t released_bytes;	/* counter, bytes: Bytes given back to the OS. */
	uint64_t pressure_level;	/* gauge, level (0 none, 1 low, 2 moderate, 3 critical): Current pressure level. */
	uint64_t pressure_events;	/* counter, events: Pressure events received from all sources. */
	uint64_t events_systemd;	/* counter, events: Pressure events from the systemd MEMORY_PRESSURE_WATCH source. */
	uint64_t events_psi;	/* counter, events: Pressure events from PSI triggers. */
	uint64_t events_cgroup1;	/* counter, events: Pressure events from cgroup v1 memory.pressure_level. */
	uint64_t events_headroom;	/* counter, events: Pressure events from the headroom source (limit minus usage). */
	uint64_t events_events;	/* counter, events: Pressure events from cgroup v2 memory.events (high, max, oom). */
	uint64_t events_budget;	/* counter, events: Pressure events from the max_cached_bytes budget. */
	uint64_t events_explicit;	/* counter, events: Pressure events requested through the API or the control socket. */
	uint64_t events_mmap_failure;	/* counter, events: Pressure events raised by a failed mmap. */
	char last_event_source[EBBTIDE_STATS_TEXT_LEN];	/* Source of the last pressure event (a source name, or empty if none yet). */
	uint64_t last_event_level;	/* gauge, level (0 none, 1 low, 2 moderate, 3 critical): Level of the last pressure event (0 if none yet). */
	uint64_t last_event_ms_ago;	/* gauge, milliseconds: Time since the last pressure event (0 if none yet). */
	uint64_t squeeze_until_ms;	/* gauge, milliseconds: Time left until the current squeeze window closes; 0 when no window is open. */
	uint64_t metadata_bytes;	/* gauge, bytes: Bytes of the library's own metadata in memory (zone objects, per-CPU stacks, chunk headers and slab descriptors, the used part of the chunk map); with mapped_bytes, every byte the library maps and touches. */
	uint64_t squeezed_ms;	/* counter, milliseconds: Time covered by squeeze windows since the process started (a window still open counts to its end). */
	uint64_t lazy_bytes;	/* gauge, bytes: Bytes offered to the kernel with MADV_FREE and not yet reused or given back for good, over all zones; part of RSS until the kernel takes them (LazyFree in smaps_rollup). */
	uint64_t lazy_pending_bytes;	/* gauge, bytes: Bytes of free slabs (and page pools' stashed pages) given up without pressure that wait lazy_settle_ms before MADV_FREE, over all zones (in RSS; reused without a system call). */
	uint64_t lazy_freed_bytes;	/* counter, bytes: Bytes offered to the kernel with MADV_FREE since the process started, apart from released_bytes. */
	uint64_t source_opens;	/* counter, events: Times the reclaim thread opened the pressure sources: at start, when a tunable changed them, and a second after the program closed their descriptors (closefrom, close_range), which the watcher finds within a second. */
	uint64_t lock_waits_arena;	/* counter, events: Acquisitions of the arena's free-chunk mutex (kegs taking and giving back 4 MiB chunks) that found it held and waited. */
	uint64_t lock_waits_registry;	/* counter, events: Acquisitions of the registry mutex (the list of live zones: zone creation, reclaim passes, statistics) that found it held and waited. */
	uint64_t lock_waits_page_heap;	/* counter, events: Acquisitions of the malloc's page heap mutex (large blocks' page runs and the table of large and huge blocks) that found it held and waited; 0 without libebbtide_malloc. */
	uint64_t lock_wait_ns_arena;	/* counter, nanoseconds: Time the waits of lock_waits_arena spent blocked (CLOCK_MONOTONIC, read only around a wait). */
	uint64_t lock_wait_ns_registry;	/* counter, nanoseconds: Time the waits of lock_waits_registry spent blocked. */
	uint64_t lock_wait_ns_page_heap;	/* counter, nanoseconds: Time the waits of lock_waits_page_heap spent blocked. */
	uint64_t page_heap_huge_pages;	/* gauge, pages: Huge pages (2 MiB regions made MADV_HUGEPAGE while at least half in blocks) of the malloc's page heap (blocks of 64 KiB-64 MiB); 0 without libebbtide_malloc. */
	uint64_t page_heap_partly_used;	/* gauge, pages: 2 MiB regions of the malloc's page heap partly in blocks. */
	uint64_t page_heap_huge_broken;	/* gauge, pages: Huge pages of the malloc's page heap given back in part (the kernel split them) and not whole since. */
	uint64_t page_heap_released_whole_bytes;	/* counter, bytes: Bytes of the malloc's page heap given back as whole 2 MiB regions (one MADV_DONTNEED per stretch, no huge page split). */
};

struct ebbtide_source_stats {
	char name[EBBTIDE_STATS_TEXT_LEN];	/* Source name (systemd, psi, cgroup1, headroom, events, budget, explicit, mmap_failure). */
	uint64_t active;	/* 0 or 1: Whether the source is running. */
	char reason[EBBTIDE_STATS_TEXT_LEN];	/* Why the source is not active (empty when active). */
	char watches[EBBTIDE_STATS_TEXT_LEN];	/* What the active source reads: its files, descriptor or socket, with the trigger or thresholds it uses; several of the kind joined by '; ' (empty when not active). */
};

/* END ebbtide::stats::c_header() */

/* One struct ebbtide_zone_stats per zone (oldest first) into out[0..n]; returns the number of
 * zones (may exceed n). out may be NULL when n is 0. (size_t)-1, errno EIO, on internal error. */
size_t ebb_stats_zones(struct ebbtide_zone_stats *out, size_t n);
/* One struct ebbtide_pool_stats per page pool (oldest first) into out[0..n]; returns the number
 * of pools (may exceed n). Pools are not in ebb_stats_zones. (size_t)-1, errno EIO. */
size_t ebb_stats_pools(struct ebbtide_pool_stats *out, size_t n);
/* One pool's statistics. 0, or -1 errno EINVAL (NULL) / EIO. */
int ebb_pool_stats(ebb_pool *pool, struct ebbtide_pool_stats *out);
/* 0, or -1 errno EINVAL (out NULL) / EIO. */
int ebb_stats_global(struct ebbtide_global_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* EBBTIDE_H */
