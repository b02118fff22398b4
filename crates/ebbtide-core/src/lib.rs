//! # ebbtide
//!
//! Kernel-style object caches for userspace processes that give memory back when the system or
//! the container runs short: FreeBSD UMA's zone allocator (per-CPU bucket caches over a depot of
//! full buckets over slabs), xen-blkback's squeeze of page pools, and the Linux pressure signals
//! that no userspace allocator listens to.
//!
//! This crate is the allocator core: it never calls the global allocator on its paths, never
//! starts a thread, and knows nothing of pressure sources, options, statistics formats or the
//! control socket. What it needs from a runtime above it (the `ebbtide` crate, or a malloc) is
//! passed in ([`runtime`]): a hook called at zone creation (configuration, threads), a hook
//! counting failed mappings, checked mode by default, the release helper
//! ([`release::serve_forever`], run on the runtime's thread).
//!
//! ## Objects, top to bottom
//!
//! ```text
//!   Zone  ── one item size, hooks, limit, flags; the unit users see            zone/
//!    │
//!    ├─ per-CPU stacks  ── LIFO of free items per (zone, CPU); rseq critical   pcpu.rs
//!    │                     sections, no lock; cap = 2 × bucket size + a grant  sizing.rs,
//!    │                     that follows misses, in a per-CPU budget (≤ 1008)   zone/resize.rs
//!    ├─ depot           ── full buckets, MRU first, capped; WSS estimator      depot.rs, wss.rs
//!    │                     (caps that may follow reuse, with the keg's)        reuse.rs
//!    │    └ buckets     ── arrays of item pointers from internal kegs          bucket.rs
//!    └─ keg             ── slabs on partial / free / lazy / clean lists        keg/, lazy.rs
//!         └ slabs       ── runs of pages cut into items; metadata off-page,    slab.rs
//!                          in the arena's descriptor span, not in the chunk
//!                          slab 0 coloured per keg (out of one TLB set)
//!              └ chunks ── 4 MiB pieces of one arena span, mapped as used;   arena.rs
//!                          tagged in a chunk map: any pointer to its keg, O(1)
//!                          (and to its zone's per-CPU stacks: the keg's hint);
//!                          a dense keg's chunks are huge pages               keg/huge.rs
//!                 └ OS  ── mmap/mprotect/madvise/membarrier/dlsym/atfork,      os.rs
//!                          write(2), the clock (one time base; fake in tests)
//! ```
//!
//! Beside them: the list of live zones (`registry`), the squeeze window, the "buckets disabled"
//! switch and the one-reclaim-at-a-time lock (`gate`), the release pipeline that gives pages
//! back while a drain goes on ([`release`]), page pools ([`page_pool`]), typed zones
//! ([`typed`]), the reclaim entry points ([`reclaim`]). Below everything, [`local_ref!`]
//! (`local.rs`): the statics the fast paths read (the arena's view, the rseq offset, a
//! malloc's tables) addressed relative to `rip`, not through the GOT — loads a
//! memory-bound program's misses would otherwise wait behind.
//!
//! ## Layers
//! Layer order (bottom first): local, sync, spin, os, contention, forkgate, wss, reuse, sizing, error, runtime, gate, registry, lazy, arena, slab, release, disposal, keg, bucket, pcpu, depot, outer, zone, reclaim, page_pool, typed.
//!
//! Each module names only modules before it in that list (`tests/all/layers.rs` reads the code and
//! fails on a module that reaches up). The registry is an intrusive list that knows no zone; the
//! release ring knows kegs only through its `Releasing` trait; the gates sit below the zones
//! that read them and above nothing but the OS.
//!
//! Vocabulary: an *item* is what a zone hands out; a *slab* is a run of OS pages holding items of
//! one keg; a *chunk* is the 4 MiB unit of address space a keg owns; a *bucket* is an array of free
//! item pointers; a *stack* is one CPU's cache of one zone (UMA's alloc and free buckets end to
//! end).
//!
//! ### Giving memory back: four verbs
//! UMA names giving memory back with three verbs; this crate uses them, and one more for pages
//! (`docs/design/vocabulary.md` maps every public name that uses another verb to these):
//!
//! * To **trim** is to bring a cache down to what it should hold, coldest first: the depot to
//!   its working set, a stack to its capacity, a keg's free list to its cap, a page pool to
//!   `max_buffer_pages` (UMA's `zone_trim`, `UMA_RECLAIM_TRIM`).
//! * To **drain** is to empty a cache entirely into the slabs: the depot, one CPU's stack or
//!   every CPU's (UMA's `zone_drain`, `cache_drain`, `UMA_RECLAIM_DRAIN(_CPU)`).
//! * To **reclaim** is to answer a request for memory — trim or drain the caches of one zone or
//!   all, then release their free slabs — all of it done before the call returns (UMA's
//!   `uma_reclaim`, `uma_zone_reclaim`).
//! * To **release** is to give pages to the OS: *now* (`MADV_DONTNEED`, [`os::release`]) or
//!   *lazily* (settle, then `MADV_FREE`, released for good after the decay delay: [`lazy`]).
//!   UMA's `zone_release` hands items to the keg; here that is to *take back* (`Keg::take_back`,
//!   `ZoneInner::return_to_keg`), which moves items, not memory.
//!
//! Which of these a path does with what it frees is one value, the caller's *disposal
//! decision* (`disposal.rs`): taken once at the top (the free path, the periodic pass, a
//! reclaim, the squeeze, a page pool's trim) and passed down to the keg, which reads no process
//! state of its own.
//!
//! ## Allocation order
//! 1. this CPU's stack (fast path, inlined: one rseq critical section);
//! 2. a full bucket from the depot (one item returned, the rest pushed onto this CPU's stack);
//! 3. a bucket's worth imported from the keg: partial slabs, then free slabs, then lazy slabs
//!    (given up without pressure, no fault unless the kernel took the page), then clean (given
//!    back) slabs, then a new chunk; a failed mapping triggers DRAIN_CPU and one retry. The
//!    slabs give a bucket out in ascending address order and the stack is LIFO, so the bucket
//!    is pushed reversed: a CPU hands a fresh slab out ascending, the order prefetchers follow.
//!
//! A bucket starts at UMA's size for the item size (8–16 KiB of items up to a page;
//! `bucket_size_for`) or at `ZoneOptions::bucket_items` (the malloc's hundred classes take half:
//! two buckets per stack are a floor every CPU keeps).
//!
//! Steps 2 and 3 are *misses* of this CPU's stack (underflows); a free that finds the stack full
//! is one too (an overflow). The slow path counts them, per (zone, CPU), and a free that finds
//! the stack full grows it at once by one bucket if the stack also underflowed since the last
//! pass and since it last grew (one bucket per alternation) and the CPU's budget has room; the resize pass ([`reclaim::resize_pcpu`], on the
//! runtime's thread every `pool_shrink_interval_ms`) grows the stacks by the misses of
//! alternations (a stack that only overflows or only underflows misses once per bucket whatever
//! its capacity), one bucket per miss not already grown for, within a per-CPU byte budget of
//! capacity above UMA's bucket pairs shared by every zone, and takes capacity back from stacks
//! that stopped missing when another needs it ([`sizing`], a pure policy; tcmalloc's per-CPU
//! cache resizing). A stack opens on its CPU's first slow path, and no pass writes a stack its
//! CPU never used (`Pcpu::in_use`): a zone costs memory only on the CPUs that run it.
//!
//! Free goes the other way: this CPU's stack; when full, a bucket's worth is flushed to the
//! depot; when the depot is at its cap, caching is off (NOBUCKET, buckets disabled by critical
//! pressure, a squeeze window, limit sleepers) or the thread has no rseq area, straight to the
//! slabs. Every free is first checked in O(1) against the chunk map (never touching the item),
//! and the push refuses an item that is already the top of this CPU's stack (an immediate double
//! free, `free(p); free(p)`).
//!
//! The fast path's constants (per-CPU base, rseq offset, the `careful` bits that send hooks,
//! checked/zeroing zones and locked mode to the slow path, arena bounds, chunk tag, slab
//! geometry) are copied into every `Zone` handle: a handle is immutable plain data, so a loop of
//! allocations keeps them in registers instead of reloading them through the zone object after
//! each critical section. A C caller keeps nothing in registers across calls: there every
//! constant is a load, and the C entry points are bound by their loads, not their instructions
//! or the latency of their checks (docs/design/benchmarks-record.md, "Loads, not instructions" and "The
//! stacks' address as the owner test"). Hence constants packed two to a word (the slabs' range;
//! the slab mask and the item test's bound), the chunk map at the arena's base (`arena.rs`), the
//! CPU id tested by its sign against stacks sized for every possible CPU (`pcpu.rs`, "The CPU id
//! test"), `careful` carried in a bit of the C API's handle, the C `free`'s owner test made
//! with the stacks' base the push loads anyway (the chunk's hint) instead of the zone's tag, and
//! one header field per critical section: the stack's room and its stop live in the word the
//! section commits (`pcpu.rs`, "Room, not cap"), not in fields of their own.
//!
//! ## Reclaim order
//! `TRIM` (depot to its working set) → `DRAIN` (whole depot) → `DRAIN_CPU` (depot, then every
//! CPU's stack of every zone — one loop over CPUs, one `membarrier` per CPU — then the depot
//! again). Items go back to their slabs; free slabs go back to the OS with `MADV_DONTNEED`, one
//! call per run of adjacent slabs, never under a keg lock. In a large drain the slabs emptied
//! along the way are handed to the release helper (the runtime's thread running
//! [`release::serve_forever`]), which gives their pages back while the drain goes on; the call
//! still returns only when every page it counts is gone. Without pressure (the periodic
//! page-pool shrink, the idle trim) free slabs go to the lazy list instead: `MADV_FREE` after
//! `lazy_settle_ms`, `MADV_DONTNEED` after `lazy_decay_ms`, all of them at once when pressure
//! comes ([`lazy`]; a page pool's shrink keeps the pages it gives back lazily in an array, its
//! stash, which its next miss takes from first, as the kernel's per-CPU page lists hand a freed
//! page back: `zone/stash.rs`); and a keg with a free-slab cap keeps what a free empties beyond it on
//! its free list for 10 ms before it joins the lazy decay (`keg/excess.rs`, `EXCESS_DELAY_MS`; back at
//! once under pressure). Lazily freed slabs make room for fresh ones: a zone (or the malloc's
//! page heap) about to fault in new pages first gives back as many lazily freed bytes of the
//! other zones (`zone/drain.rs`, `make_room`), so memory one size class freed leaves RSS as
//! another grows, the cross-class reuse that allocators whose classes share pages have. Per-CPU
//! capacity shrinks with them: a TRIM takes a quarter of every stack's grant back (at least a
//! bucket's worth), a DRAIN_CPU halves it, an idle stack loses all of it ([`sizing`]). A policy
//! step that opens a squeeze window, turns buckets off and asks for DRAIN_CPU is one pass over
//! the CPUs
//! ([`reclaim::respond`]).
//!
//! **Huge pages** (`keg/huge.rs`, Temeraire's rule): a keg that holds 32 MiB of slabs takes its
//! next chunks as two huge pages (`MADV_HUGEPAGE`, fewer TLB misses for a program's many small
//! objects); every release gives whole free chunks and huge pages back first (a chunk holds
//! slabs only, its descriptors lie in the arena's descriptor span; one `MADV_DONTNEED` of 2 MiB
//! or more, no split), then the free slabs outside huge pages, and breaks huge pages last,
//! splitting each first so that the memory cgroup's charge drops with the RSS — under
//! pressure or a reclaim as needed, in a calm pass only while the huge pages are less than half
//! used beyond recent demand. Huge chunks' free slabs never go lazily (`MADV_FREE` of part of a
//! huge page splits it).
//!
//! ## Locks (outermost first) and who owns them
//! | lock | owner | protects |
//! |---|---|---|
//! | reclaim mutex | `gate` | one reclaim at a time (re-entry returns 0) |
//! | registry mutex | `registry` | the list of live zones |
//! | limit mutex (per zone) | `zone/limit.rs` | `max_items` sleepers (FIFO tickets); taken alone, never with another core lock held |
//! | header lock (per zone, per CPU) | `pcpu` | drainers and cap writers; every op in locked mode |
//! | depot mutex (per zone) | `depot` | buckets and the WSS estimator; `try_lock` failure grows the bucket size |
//! | keg mutex (per keg) | `keg` | slab lists, bitmaps, counters; innermost; only `fini` runs under it, never `madvise` (only `munmap` of its empty chunks after a refused mapping, `keg/empty.rs`, a rare path like a zone's destruction) |
//! | stash mutex (per page pool) | `zone/stash.rs` | the pages a shrink gave back lazily; a leaf, like the keg's: nothing is taken while it is held |
//! | arena free-chunk mutex | `arena` | the free chunk list |
//!
//! The registry, depot, keg, stash and arena mutexes are [`contention::Counted`]: an acquisition
//! that finds one held counts a wait and the time it blocked (per zone for the depot, keg and
//! stash, process-wide for the others), which statistics report (`docs/design/contention.md`).
//!
//! The fast path takes none of them. No path of the core (alloc, free, reclaim) calls the global
//! allocator once a zone exists: metadata lives in the library's own pages (zone objects, per-CPU
//! arrays, chunk headers, buckets), so the core can serve as a process's `malloc`. Every byte it
//! maps is counted: item and bucket slabs in [`mapped_bytes`], its own structures in
//! [`os::metadata_bytes`]. The runtime's locks (policy, handlers, `APPLY`) are all outside these
//! (see the `ebbtide` crate).
//!
//! ## Invariants
//! * keg: `backed_slabs × items_per_slab = items_out + free_items`;
//! * zone: `items_out = used + Σ per-CPU counts + depot items`, so
//!   `items mapped = used + per-CPU + depot + free in slabs` ([`Zone::validate`] walks every
//!   layer and checks it; it is compiled in every build);
//! * depot: `imax ≥ nitems ≥ bimin ≥ imin` ([`wss::Wss::check`]).
//!
//! ## Unsafe code
//! `unsafe_op_in_unsafe_fn` is denied; every `unsafe fn` lists its obligations under `# Safety`,
//! every `unsafe` block discharges them in a `// SAFETY:` comment, and every non-Relaxed atomic
//! says what it pairs with.
#![deny(unsafe_op_in_unsafe_fn)]

// Under `--cfg loom` only the sync shim, the OS boundary, the per-CPU layer (its locked mode
// and remote drains, model-checked in `pcpu::loom_tests`) and the pure estimator compile: the
// rest maps memory and keeps `static` locks, which loom cannot model.
#[cfg(not(loom))]
pub(crate) mod arena;
#[cfg(not(loom))]
pub(crate) mod bucket;
#[cfg(not(loom))]
pub mod contention;
#[cfg(not(loom))]
pub(crate) mod depot;
#[cfg(not(loom))]
pub(crate) mod disposal;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod forkgate;
#[cfg(not(loom))]
pub(crate) mod gate;
#[cfg(not(loom))]
pub(crate) mod keg;
#[cfg(not(loom))]
pub mod lazy;
#[cfg_attr(loom, allow(unused_macros, dead_code))]
pub mod local;
#[cfg_attr(loom, allow(dead_code))]
pub mod os;
#[cfg(not(loom))]
pub mod outer;
#[cfg(not(loom))]
pub mod page_pool;
#[cfg_attr(loom, allow(dead_code))]
pub mod pcpu;
#[cfg(not(loom))]
pub mod reclaim;
#[cfg(not(loom))]
pub(crate) mod registry;
#[cfg(not(loom))]
pub mod release;
#[cfg(not(loom))]
pub mod reuse;
#[cfg(not(loom))]
pub mod runtime;
#[cfg(not(loom))]
pub mod sizing;
#[cfg(not(loom))]
pub(crate) mod slab;
#[cfg(not(loom))]
pub mod spin;
#[cfg_attr(loom, allow(dead_code, unused_imports))]
pub(crate) mod sync;
#[cfg(not(loom))]
pub mod typed;
pub mod wss;
#[cfg(not(loom))]
pub mod zone;

#[cfg(not(loom))]
pub use arena::{owner_entry, owner_entry_raw, owner_tag, ChunkOwner};
#[cfg(not(loom))]
pub use bucket::{bucket_size_for, BUCKET_MAX};
#[cfg(not(loom))]
pub use error::{AllocError, ConfigError, CreateError, InvalidFree, ZoneBusy};
#[cfg(not(loom))]
pub use keg::{mapped_bytes, released_bytes, InvalidKind};
#[cfg(not(loom))]
pub use page_pool::{PagePool, PoolSnapshot};
#[cfg(not(loom))]
pub use pcpu::Mode as PcpuMode;
#[cfg(not(loom))]
pub use reclaim::Request;
#[cfg(not(loom))]
pub use typed::{TypedZone, ZBox};
#[cfg(not(loom))]
pub use zone::{LimitMode, Zone, ZoneFlags, ZoneOptions, ZoneSnapshot};

#[cfg(not(loom))]
pub use forkgate::{lock_gated, Gated};
#[cfg(not(loom))]
pub use sync::{lock, Lock};

/// How the per-CPU caches synchronise in this process (rseq, or locked as a fallback).
#[cfg(not(loom))]
pub fn pcpu_mode() -> pcpu::Mode {
    pcpu::mode()
}
