//! # ebbtide as the process's malloc
//!
//! FreeBSD's `malloc(9)` is UMA zones in size classes; this crate is the same for a Linux
//! process: `malloc` and friends on ebbtide's zone core, so that an unmodified program's freed
//! memory sits in caches that give it back when the machine or the container runs short (every
//! pressure source, the squeeze, DRAIN_CPU, the idle trim, the `max_cached_bytes` budget — the
//! runtime of the `ebbtide` crate, configured by `EBBTIDE_CONF`), and its size classes show in
//! `ebbtide stat PID` like any zones.
//!
//! Built as `libebbtide_malloc.so` (`LD_PRELOAD` it, or link it) and as a Rust library whose
//! [`EbbtideMalloc`] is a `#[global_allocator]`.
//!
//! ## Pieces, bottom first
//! ```text
//!   env.rs        settings needed before anything may allocate, read from `environ` in place
//!   report.rs     messages about bad pointers: one write(2) from a stack buffer, rate-limited
//!   classes.rs    113 size classes, 8 B .. 1 MiB, ≤ 12.5 % waste above 128 B; one table load
//!   bootstrap.rs  a static bump area for requests re-entering a zone's creation on its thread
//!   regions.rs    the page heap's 2 MiB hugepage regions: bytes in blocks, which are huge
//!   pageheap.rs   page runs for blocks above 64 KiB in one reservation; freed runs stay resident,
//!                 coalesced, and serve any size (best fit) until idle, drain or pressure
//!   huge.rs       the table of blocks above the classes: large ones from the page heap, huge
//!                 ones (above 64 MiB, grown by realloc beyond 1 MiB) own mappings, mremap
//!   heap.rs       one zone per class (created on first use, without the runtime hook); the
//!                 fast paths read each zone's constants from tables by class (`malloc`) and
//!                 by chunk tag (`free`, after the arena's chunk map); malloc/free/realloc/
//!                 aligned logic
//!   stats.rs      mallinfo2, mallinfo, malloc_stats, malloc_trim (DRAIN_CPU)
//!   api.rs        the C names and glibc's __libc_* aliases
//!   cpp.rs        the C++ operators (Itanium names), new handler and a real std::bad_alloc
//!   fork.rs       fork(): the core's fork gate around it, the lazy start armed again in the child
//!   runtime_start.rs  when the runtime's threads start: from a slow path past runtime_start_bytes
//!   global.rs     the Rust #[global_allocator]
//! ```
//!
//! ## Process life
//! * **First call.** Whatever calls `malloc` first (the dynamic loader for a TLS block, the C
//!   library, a constructor) creates that class's zone: system calls only — the zone is made
//!   without the runtime's creation hook, checked mode is read from `environ` in place. A
//!   request that re-enters during the creation on the same thread gets a bootstrap block.
//! * **The runtime**: its configuration is read, and the control socket started when
//!   configured, by this library's load-time constructor ([`ebbtide::prepare_runtime`]); its
//!   threads (the reclaim thread with the pressure sources, the release helper) start lazily,
//!   from an allocation's slow path once the footprint passes `runtime_start_bytes` (16 MiB),
//!   outside any lock (`runtime_start.rs`, `docs/design/lazy-runtime.md`): a small program
//!   stays single-threaded. They allocate like any code, from these zones.
//! * **Threads** have no caches of their own (the caches are per CPU), so a thread that exits
//!   leaves nothing behind to drain.
//! * **fork**: see `fork.rs`.
//! * **Pointers ebbtide never made** (from before the preload, another allocator, garbage):
//!   `free`, `realloc` and `malloc_usable_size` recognise them without touching their memory
//!   (the arena's chunk map, the huge table, the bootstrap area) and say so on stderr; nothing
//!   is applied. A double free is caught at once when the block is the top of this CPU's cache,
//!   when it reaches its slab otherwise, and always in checked mode (`EBBTIDE_CONF=checked=1`);
//!   of a block above the classes while its tombstone lasts (huge) or always (page heap).
//!   `abort_on_error=1` makes every detected misuse end the process with `SIGABRT`.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod bootstrap;
pub mod classes;
pub mod cpp;
mod entry;
pub mod env;
pub mod fork;
pub mod global;
pub mod heap;
pub mod huge;
pub mod pageheap;
pub mod regions;
pub mod report;
pub mod runtime_start;
#[cfg(test)]
mod slowcount;
pub mod stats;

pub use global::EbbtideMalloc;

extern "C" fn start() {
    // Its allocations are the library's own: never an abort for them (`heap.rs`).
    let _own = ebbtide::LibraryCode::enter();
    fork::register();
    ebbtide_core::outer::register(&huge::HugeCache);
    // Every process of a machine may run with this library (`LD_PRELOAD` in a service's
    // environment, `ebbtide run sh`): one that ends within a second has nothing to give back,
    // and tearing down a PSI trigger at exit costs tens of milliseconds (docs/malloc.md). The
    // pressure sources open after a second unless the environment says otherwise.
    let env_sets = env::raw_var(b"EBBTIDE_SOURCES_DELAY_MS").is_some()
        || env::raw_var(b"EBBTIDE_CONF")
            .and_then(|c| env::conf_value(c, b"sources_delay_ms"))
            .is_some();
    if !env_sets {
        let _ = ebbtide::options::set("sources_delay_ms", "1000");
    }
    // The delayed opening is done by an allocation of the program's (`runtime_start.rs`).
    ebbtide::reclaimer::open_on_program_threads();
    runtime_start::at_load();
}

// The load-time constructor: runs once the C library is initialised, outside any allocation.
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;
