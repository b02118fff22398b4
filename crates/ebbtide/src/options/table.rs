//! The one table of tunables.
//!
//! Every tunable is declared once, in the `tunables!` invocation at the bottom of this file.
//! The macro generates the [`Tunable`] enum, the static [`TABLE`] of definitions and the
//! default values the atomics start from. Everything else — the environment names, the
//! parsers, `options::list()`, the ABI documentation under `docs/ABI/` — derives from it.
//!
//! Naming rule: the unit is part of the name (`_ms`, `_us`, `_bytes`, `_pct`, `_pages`), so a
//! bare number is never ambiguous, in `EBBTIDE_CONF`, in the environment or on the control
//! socket.

/// How a tunable's value is written and stored. Every value is stored as one `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`); stored as 1/0.
    Bool,
    /// A plain count (items, pages); a whole number.
    Count,
    /// A duration in milliseconds; accepts the suffixes `us`, `ms`, `s`, `min`.
    Millis,
    /// A duration in microseconds; accepts the suffixes `us`, `ms`, `s`.
    Micros,
    /// A size in bytes; accepts the binary suffixes `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`.
    Bytes,
    /// A percentage 0..=100; an optional trailing `%`.
    Percent,
    /// A set of words from the given list, separated by `,` `+` or `|`, or `none`.
    /// Stored as a bit mask: bit *i* set means word *i* is in the set.
    Words(&'static [&'static str]),
}

impl Kind {
    /// The unit as written in documentation and error messages.
    pub const fn unit(self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Count => "count",
            Kind::Millis => "milliseconds",
            Kind::Micros => "microseconds",
            Kind::Bytes => "bytes",
            Kind::Percent => "percent",
            Kind::Words(_) => "list of words",
        }
    }
}

/// Stability level of an interface, as the directories of `docs/ABI/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbiLevel {
    /// Will not break; moves only to `obsolete` with notice.
    Stable,
    /// Believed complete; may grow, should not break; users should register in `Users:`.
    Testing,
    /// Still present, scheduled for removal.
    Obsolete,
    /// Gone; documented for the record.
    Removed,
}

impl AbiLevel {
    /// The directory name under `docs/ABI/`.
    pub const fn dir(self) -> &'static str {
        match self {
            AbiLevel::Stable => "stable",
            AbiLevel::Testing => "testing",
            AbiLevel::Obsolete => "obsolete",
            AbiLevel::Removed => "removed",
        }
    }
}

/// One row of the table.
#[derive(Debug)]
pub struct TunableDef {
    /// The enum value naming this row (`TABLE[t as usize].tunable == t`).
    pub tunable: Tunable,
    /// Lower-case name with its unit, e.g. `squeeze_ms`.
    pub name: &'static str,
    /// Syntax and unit.
    pub kind: Kind,
    /// Value before any setting, in the stored representation.
    pub default: u64,
    /// Smallest accepted value (inclusive).
    pub min: u64,
    /// Largest accepted value (inclusive).
    pub max: u64,
    /// `true`: may change while the allocator runs; `false`: start-up only (environment,
    /// or the API before [`crate::options::freeze_startup`]).
    pub runtime: bool,
    /// ABI stability level (where its documentation lives).
    pub level: AbiLevel,
    /// One line for listings.
    pub summary: &'static str,
    /// Longer documentation: meaning, sentinels, interactions.
    pub doc: &'static str,
}

impl TunableDef {
    /// `EBBTIDE_` followed by the upper-cased name, e.g. `EBBTIDE_SQUEEZE_MS`.
    pub fn env_name(&self) -> String {
        let mut s = String::with_capacity(8 + self.name.len());
        s.push_str("EBBTIDE_");
        s.push_str(&self.name.to_ascii_uppercase());
        s
    }
}

/// The pressure sources that the `sources` tunable selects from, in bit order.
pub const SOURCE_WORDS: &[&str] = &["systemd", "psi", "cgroup1", "headroom", "events", "budget"];

/// Bit mask of all [`SOURCE_WORDS`].
pub const SOURCES_ALL: u64 = (1 << SOURCE_WORDS.len()) - 1;

macro_rules! tunables {
    ($(
        $(#[$meta:meta])*
        $variant:ident {
            name: $name:literal,
            kind: $kind:expr,
            default: $default:expr,
            range: $min:expr => $max:expr,
            runtime: $runtime:expr,
            level: $level:ident,
            summary: $summary:literal,
            doc: $doc:literal $(,)?
        }
    ),* $(,)?) => {
        /// Names every tunable; `Tunable::X as usize` indexes [`TABLE`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(usize)]
        pub enum Tunable {
            $( $(#[$meta])* $variant, )*
        }

        /// Number of tunables.
        pub const COUNT: usize = [$($name),*].len();

        impl Tunable {
            /// Every tunable, in table order.
            pub const ALL: [Tunable; COUNT] = [$(Tunable::$variant),*];
        }

        /// The table: one row per tunable, in [`Tunable`] order.
        pub static TABLE: [TunableDef; COUNT] = [$(
            TunableDef {
                tunable: Tunable::$variant,
                name: $name,
                kind: $kind,
                default: $default,
                min: $min,
                max: $max,
                runtime: $runtime,
                level: AbiLevel::$level,
                summary: $summary,
                doc: $doc,
            }
        ),*];

        /// Default values in table order (usable in `const` context).
        pub(crate) const DEFAULTS: [u64; COUNT] = [$($default),*];
    };
}

use ebbtide_pressure::{HeadroomConfig, PolicyConfig, PsiConfig};

tunables! {
    /// Squeeze window after Moderate pressure.
    SqueezeMs {
        name: "squeeze_ms",
        kind: Kind::Millis,
        default: PolicyConfig::DEFAULT.squeeze_ms,
        range: 0 => 60_000,
        runtime: true,
        level: Testing,
        summary: "how long page pools and depots stay squeezed to zero after Moderate pressure",
        doc: "After a Moderate (or worse) pressure event every page pool shrinks to 0 free pages \
              instead of max_buffer_pages, and zone depots trim to nothing, until this many \
              milliseconds have passed (xen-blkback buffer_squeeze_duration_ms). \
              0 means no window: one shrink per event, then normal limits again.",
    },
    /// Period of the working-set update and idle trim.
    TrimIntervalMs {
        name: "trim_interval_ms",
        kind: Kind::Millis,
        default: 2000,
        range: 100 => 3_600_000,
        runtime: true,
        level: Testing,
        summary: "period of the depot working-set update and idle trim on the reclaim thread",
        doc: "The reclaim thread updates every depot's working-set estimate (UMA's wss, imax, \
              imin, limin, timin) and trims depots above it this often, with or without pressure.",
    },
    /// How often page pools enforce `max_buffer_pages`.
    PoolShrinkIntervalMs {
        name: "pool_shrink_interval_ms",
        kind: Kind::Millis,
        default: 100,
        range: 10 => 60_000,
        runtime: true,
        level: Testing,
        summary: "how often page pools shrink to max_buffer_pages",
        doc: "Page pools give free pages above their cap back this often, even when idle \
              (xen-blkback LRU_INTERVAL). A squeeze window shorter than this interval is \
              still honoured: a pressure event wakes the pools.",
    },
    /// Default cap of free pages a page pool keeps.
    MaxBufferPages {
        name: "max_buffer_pages",
        kind: Kind::Count,
        default: 1024,
        range: 0 => 1 << 32,
        runtime: true,
        level: Testing,
        summary: "default number of free pages a page pool keeps",
        doc: "Free pages a page pool keeps between shrinks when no squeeze window is open \
              (xen-blkback max_buffer_pages). Pages in use are never counted or touched. \
              0 means keep no free pages (the permanent worst-case squeeze).",
    },
    /// Whether free pages leave lazily (`MADV_FREE`) where there is no pressure.
    LazyFree {
        name: "lazy_free",
        kind: Kind::Bool,
        default: 1,
        range: 0 => 1,
        runtime: true,
        level: Testing,
        summary: "give free pages back with MADV_FREE where there is no pressure",
        doc: "When true, pages that leave a cache without pressure (the periodic page pool shrink \
              to max_buffer_pages, PagePool::shrink, the idle trim, the free slabs a zone has \
              held beyond its cap for 10 ms) are offered with MADV_FREE: \
              the kernel takes them only when it needs memory, and a reuse before that costs no \
              page fault. A zone or a malloc's large block about to fault in fresh pages first \
              gives back as many lazily freed bytes of the other zones, oldest first. Under pressure (a squeeze window, a TRIM, DRAIN or DRAIN_CPU) pages \
              leave with MADV_DONTNEED, and every lazily freed page goes with them. Lazily freed \
              pages still count in RSS and in the cgroup's usage until the kernel takes them or \
              lazy_decay_ms passes. Needs the reclaim thread (which decays them); without it, \
              and when false, pages leave with MADV_DONTNEED at once. Turning it off gives every \
              lazily freed page back at once.",
    },
    /// How long free pages wait before they are offered with MADV_FREE.
    LazySettleMs {
        name: "lazy_settle_ms",
        kind: Kind::Millis,
        default: 100,
        range: 0 => 600_000,
        runtime: true,
        level: Testing,
        summary: "free pages given up without pressure wait this long before MADV_FREE",
        doc: "The first stage of the decay (jemalloc's dirty pages): a slab given up without \
              pressure leaves the cache at once but is offered with MADV_FREE only after this \
              long, so a page reused within it costs neither a system call nor a fault (the \
              kernel's page allocator hands a freed page back the same way; a page pool's pages \
              wait in the pool's stash, which its next miss takes from first). Checked every \
              pool_shrink_interval_ms. Under pressure such slabs go back with MADV_DONTNEED at \
              once; the headroom source counts them as usage (only pages already offered with \
              MADV_FREE are not counted). 0 means MADV_FREE at once.",
    },
    /// How long lazily freed pages may stay before they go back for good.
    LazyDecayMs {
        name: "lazy_decay_ms",
        kind: Kind::Millis,
        default: 1000,
        range: 0 => 600_000,
        runtime: true,
        level: Testing,
        summary: "lazily freed pages not reused for this long go back with MADV_DONTNEED",
        doc: "The last stage of the decay (settling -> MADV_FREE -> given back, as jemalloc's \
              dirty -> muzzy -> clean): a slab given up without pressure that no allocation took back for this \
              long is given back with MADV_DONTNEED, so memory that stays unused leaves RSS. \
              Checked every pool_shrink_interval_ms, so a page leaves within lazy_decay_ms plus \
              that interval. 0 means at the next check.",
    },
    /// The library's own budget for cached memory.
    MaxCachedBytes {
        name: "max_cached_bytes",
        kind: Kind::Bytes,
        default: 0,
        range: 0 => 1 << 48,
        runtime: true,
        level: Testing,
        summary: "budget for memory held in caches (per-CPU, depots, free slabs, pools); 0 = unlimited",
        doc: "When the bytes held in caches pass this budget the budget source raises pressure \
              and the reclaim thread drains (UMA's uma_kmem_limit). 0 means unlimited. \
              Accepts K/M/G/T or KiB/MiB/GiB/TiB suffixes (all binary, 1K = 1024).",
    },
    /// Per-CPU budget of the demand-sized per-CPU caches.
    PcpuBudgetBytes {
        name: "pcpu_budget_bytes",
        kind: Kind::Bytes,
        default: ebbtide_core::sizing::DEFAULT_BUDGET_BYTES,
        range: 0 => 1 << 40,
        runtime: true,
        level: Testing,
        summary: "bytes of capacity each CPU's caches may add above the bucket pairs",
        doc: "Every zone's stack on a CPU holds at least UMA's bucket pair (2 x bucket_size \
              items: the floor, not counted here and never cut by this budget); above that, \
              capacity follows misses (an allocation that finds the stack empty, a free that \
              finds it full), counting only the misses of alternations (2 x min(underflows, \
              overflows): a stack that only frees what another CPU allocates, or only \
              allocates what another frees, misses once per bucket whatever its capacity). A \
              free that finds the stack full grows it at once by one bucket if the stack also \
              underflowed since the last pass, out of what this budget has left on that CPU (as \
              the last pass left it, less what such growth took since; the whole budget before \
              the first pass). Every pool_shrink_interval_ms the reclaim thread grows a stack by \
              one bucket per such miss not already grown for, up to 1008 items, as long as the \
              sum over every zone of (capacity above the floor x item size) on that CPU stays \
              within this budget, takes capacity back (half per pass) from stacks that have not \
              missed for 1 s when another needs it, and recomputes what is left (tcmalloc's \
              per-CPU cache resizing; its default is 1.5 MiB). A lower value is applied at the \
              next pass: grants shrink, stacks holding more than their new capacity give the \
              excess to their slabs. 0 means no capacity above the bucket pairs (UMA's sizing \
              alone). Without the reclaim thread only the growth at frees happens. Accepts \
              K/M/G/T or KiB/MiB/GiB/TiB suffixes.",
    },
    /// Rate limit of per-CPU drains.
    DrainCpuMinIntervalMs {
        name: "drain_cpu_min_interval_ms",
        kind: Kind::Millis,
        default: PolicyConfig::DEFAULT.drain_cpu_min_interval_ms,
        range: 0 => 3_600_000,
        runtime: true,
        level: Testing,
        summary: "minimum time between two DRAIN_CPU reclaims",
        doc: "A DRAIN_CPU reclaim (depots, then every per-CPU cache, then depots again) runs at \
              most once per this interval (UMA: once per second). 0 means no rate limit.",
    },
    /// Rate limit of depot drains.
    DrainMinIntervalMs {
        name: "drain_min_interval_ms",
        kind: Kind::Millis,
        default: PolicyConfig::DEFAULT.drain_min_interval_ms,
        range: 0 => 3_600_000,
        runtime: true,
        level: Testing,
        summary: "minimum time between two pressure-triggered DRAIN reclaims",
        doc: "A DRAIN reclaim (every depot to the slabs) triggered by Moderate pressure runs at \
              most once per this interval, so a chatty source cannot cause a reclaim storm; the \
              squeeze window is still extended by every event. 0 means no rate limit.",
    },
    /// Rate limit of trims triggered by pressure.
    TrimMinIntervalMs {
        name: "trim_min_interval_ms",
        kind: Kind::Millis,
        default: PolicyConfig::DEFAULT.trim_min_interval_ms,
        range: 0 => 3_600_000,
        runtime: true,
        level: Testing,
        summary: "minimum time between two pressure-triggered TRIM reclaims",
        doc: "Pressure events closer together than this are coalesced into one TRIM reclaim. \
              0 means no rate limit.",
    },
    /// How long a pressure level holds before it decays.
    LevelHoldMs {
        name: "level_hold_ms",
        kind: Kind::Millis,
        default: PolicyConfig::DEFAULT.level_hold_ms,
        range: 0 => 600_000,
        runtime: true,
        level: Testing,
        summary: "how long a pressure level holds without new events before it drops",
        doc: "The pressure level stays at the highest level seen until no event of that level \
              arrived for this long, then drops one level at a time. 0 means the level drops \
              at the next check. The default outlasts one 2 s PSI window plus delivery jitter: \
              PSI reports at most once per window while a stall continues.",
    },
    /// PSI trigger stall for Low pressure.
    PsiLowStallUs {
        name: "psi_low_stall_us",
        kind: Kind::Micros,
        default: PsiConfig::DEFAULT_LOW_STALL_US,
        range: 1 => 10_000_000,
        runtime: false,
        level: Testing,
        summary: "PSI 'some' stall per window that signals Low pressure",
        doc: "Written as 'some <stall_us> <window_us>' into the PSI trigger of the Low level \
              (GLib's GMemoryMonitor uses 70 ms per 2 s). Must not exceed psi_window_us.",
    },
    /// PSI trigger stall for Moderate pressure.
    PsiModerateStallUs {
        name: "psi_moderate_stall_us",
        kind: Kind::Micros,
        default: PsiConfig::DEFAULT_MODERATE_STALL_US,
        range: 1 => 10_000_000,
        runtime: false,
        level: Testing,
        summary: "PSI 'some' stall per window that signals Moderate pressure",
        doc: "Written as 'some <stall_us> <window_us>' into the PSI trigger of the Moderate \
              level. Must not exceed psi_window_us.",
    },
    /// PSI trigger stall for Critical pressure.
    PsiCriticalStallUs {
        name: "psi_critical_stall_us",
        kind: Kind::Micros,
        default: PsiConfig::DEFAULT_CRITICAL_STALL_US,
        range: 1 => 10_000_000,
        runtime: false,
        level: Testing,
        summary: "PSI 'full' stall per window that signals Critical pressure",
        doc: "Written as 'full <stall_us> <window_us>' into the PSI trigger of the Critical \
              level. Must not exceed psi_window_us.",
    },
    /// PSI trigger window.
    PsiWindowUs {
        name: "psi_window_us",
        kind: Kind::Micros,
        default: PsiConfig::DEFAULT_WINDOW_US,
        range: 500_000 => 10_000_000,
        runtime: false,
        level: Testing,
        summary: "PSI trigger window",
        doc: "Window of every PSI trigger. The kernel accepts 500 ms to 10 s; without \
              CAP_SYS_RESOURCE (kernels >= 6.5) only multiples of 2 s.",
    },
    /// Headroom below which pressure is Low.
    HeadroomLowPct {
        name: "headroom_low_pct",
        kind: Kind::Percent,
        default: HeadroomConfig::DEFAULT_LOW_PCT,
        range: 0 => 100,
        runtime: true,
        level: Testing,
        summary: "free share of the memory limit below which the headroom source signals Low",
        doc: "The headroom source compares (limit - current) / limit of the cgroup (or the \
              machine) with this share. 0 disables the Low level of this source. Nonzero \
              headroom levels must satisfy critical <= moderate <= low.",
    },
    /// Headroom below which pressure is Moderate.
    HeadroomModeratePct {
        name: "headroom_moderate_pct",
        kind: Kind::Percent,
        default: HeadroomConfig::DEFAULT_MODERATE_PCT,
        range: 0 => 100,
        runtime: true,
        level: Testing,
        summary: "free share of the memory limit below which the headroom source signals Moderate",
        doc: "As headroom_low_pct, for the Moderate level. 0 disables the level.",
    },
    /// Headroom below which pressure is Critical.
    HeadroomCriticalPct {
        name: "headroom_critical_pct",
        kind: Kind::Percent,
        default: HeadroomConfig::DEFAULT_CRITICAL_PCT,
        range: 0 => 100,
        runtime: true,
        level: Testing,
        summary: "free share of the memory limit below which the headroom source signals Critical",
        doc: "As headroom_low_pct, for the Critical level. 0 disables the level.",
    },
    /// Headroom poll interval at the Critical threshold.
    HeadroomMinIntervalMs {
        name: "headroom_min_interval_ms",
        kind: Kind::Millis,
        default: HeadroomConfig::DEFAULT_MIN_INTERVAL_MS,
        range: 1 => 60_000,
        runtime: true,
        level: Testing,
        summary: "headroom poll interval at (and below) the Critical threshold",
        doc: "The headroom source reads the cgroup's usage this often once the free share is at \
              headroom_critical_pct; the interval grows with the cube of the free share up to \
              headroom_max_interval_ms at twice headroom_low_pct, and is never longer than the \
              runway bound of headroom_growth_bytes.",
    },
    /// Headroom poll interval far from the limit.
    HeadroomMaxIntervalMs {
        name: "headroom_max_interval_ms",
        kind: Kind::Millis,
        default: HeadroomConfig::DEFAULT_MAX_INTERVAL_MS,
        range: 1 => 600_000,
        runtime: true,
        level: Testing,
        summary: "headroom poll interval while at least twice headroom_low_pct is free",
        doc: "The longest headroom poll interval, used far from the limit (and while the cgroup \
              has no limit, to notice a new one). A value below headroom_min_interval_ms is \
              raised to it.",
    },
    /// Growth rate the headroom poll pace assumes.
    HeadroomGrowthBytes {
        name: "headroom_growth_bytes",
        kind: Kind::Bytes,
        default: HeadroomConfig::DEFAULT_GROWTH_PER_S,
        range: 0 => 1 << 40,
        runtime: true,
        level: Testing,
        summary: "bytes per second the headroom source assumes the cgroup's usage can grow by (a rate)",
        doc: "The headroom source polls again before usage growing at this rate (or at the rate \
              it saw since its previous reading, if faster) could use up half of what is left \
              below the Critical threshold, however large the free share: a small group \
              (112 MiB, half free) is read every 98 ms, not every second, because a neighbour \
              faulting at 100 MiB/s would reach memory.max between two polls at the share's \
              pace. 0 paces by the growth seen alone. Accepts K/M/G/T suffixes (binary).",
    },
    /// Repeat of a persisting headroom level.
    HeadroomRepeatMs {
        name: "headroom_repeat_ms",
        kind: Kind::Millis,
        default: HeadroomConfig::DEFAULT_REPEAT_MS,
        range: 10 => 600_000,
        runtime: true,
        level: Testing,
        summary: "how often the headroom source repeats a persisting non-Normal level",
        doc: "A level other than Normal that persists is reported again after this long, so the \
              policy's level hold stays fresh; changes of level are reported at once.",
    },
    /// Which pressure sources to start.
    Sources {
        name: "sources",
        kind: Kind::Words(SOURCE_WORDS),
        default: SOURCES_ALL,
        range: 0 => SOURCES_ALL,
        runtime: false,
        level: Testing,
        summary: "pressure sources to start",
        doc: "Any of systemd, psi, cgroup1, headroom, events, budget, or none. A source that \
              cannot start on this machine is reported inactive with a reason in the stats; \
              the explicit API and mmap failures always count as sources.",
    },
    /// Delay before the pressure sources open.
    SourcesDelayMs {
        name: "sources_delay_ms",
        kind: Kind::Millis,
        default: 0,
        range: 0 => 60_000,
        runtime: false,
        level: Testing,
        summary: "how long after its start the reclaim thread opens the pressure sources",
        doc: "Until then pressure comes only from explicit notifications, the budget and failed \
              mappings; periodic work runs from the start. libebbtide_malloc.so makes it 1000 \
              unless the environment sets it: a process that ends sooner has nothing to give \
              back, and a PSI trigger costs tens of milliseconds to tear down at exit (measured: \
              /bin/true took 80 ms instead of 3). There the opening is asked of the program's \
              next allocation slow path, which opens the sources inside that allocation (an \
              open on the reclaim thread while the program runs could take the program's \
              lowest free descriptor for a moment); the reclaim thread opens them itself when \
              no such allocation comes within 100 ms.",
    },
    /// Whether the reclaim thread runs.
    ReclaimThread {
        name: "reclaim_thread",
        kind: Kind::Bool,
        default: 1,
        range: 0 => 1,
        runtime: false,
        level: Testing,
        summary: "run the background reclaim thread",
        doc: "When false no thread is started: periodic trims and pressure handling happen only \
              when the application calls the reclaim API, and page pools shrink on their own \
              allocation and free paths.",
    },
    /// Whether reclaims hand emptied slabs to a helper thread.
    ReleaseThread {
        name: "release_thread",
        kind: Kind::Bool,
        default: 1,
        range: 0 => 1,
        runtime: false,
        level: Testing,
        summary: "give pages back on a helper thread while a reclaim is still emptying slabs",
        doc: "When true (and more than one CPU is available) the first zone starts an idle \
              thread, ebbtide-release, to which large reclaims hand the slabs they empty, so \
              the kernel's work of giving the pages back overlaps with the item work; a reclaim \
              still returns only when every page it counts is gone. When false no such thread \
              exists and the reclaiming thread gives every page back itself (slower for large \
              caches of small items).",
    },
    /// Whether the control socket listens.
    ControlSocket {
        name: "control_socket",
        kind: Kind::Bool,
        default: 0,
        range: 0 => 1,
        runtime: true,
        level: Testing,
        summary: "serve the control socket",
        doc: "Turning it on at run time starts the control socket (stats, tunables, reclaim \
              requests); turning it off closes it.",
    },
    /// Full pointer checks on every free.
    Checked {
        name: "checked",
        kind: Kind::Bool,
        default: 0,
        range: 0 => 1,
        runtime: false,
        level: Testing,
        summary: "check every freed pointer fully (slower)",
        doc: "Every free verifies that the pointer belongs to the zone, is item-aligned and is \
              not already free; a violation is reported on stderr with the pointer and what \
              is wrong, and not applied (the item is not freed twice), and the program goes on \
              unless abort_on_error is set. Without it only a double free of the item on top of \
              this CPU's cache, or of one that reached its slab, is caught. Start-up only \
              because objects allocated before the switch carry no check state.",
    },
    /// Every detected misuse (bad pointer, double free) ends the process with SIGABRT.
    AbortOnError {
        name: "abort_on_error",
        kind: Kind::Bool,
        default: 0,
        range: 0 => 1,
        runtime: true,
        level: Testing,
        summary: "end the process with SIGABRT at the first detected misuse (double free, bad pointer)",
        doc: "When true, every misuse the allocator detects (a double free, a pointer it never \
              made, a pointer inside a block) is reported on stderr and the process is then \
              killed with SIGABRT, as glibc's malloc does, so a core dump shows the culprit. \
              Default false: a detected misuse is reported and not applied (nothing is freed \
              twice, no block is handed out twice), so the allocator's state stays sound and a \
              service that only preloads ebbtide to give memory back does not crash on a bug \
              glibc may not even see; set it in development and CI. The malloc reads it from \
              the environment in place at start-up, the zone API at every report.",
    },
    /// The malloc's footprint at which its runtime threads start.
    RuntimeStartBytes {
        name: "runtime_start_bytes",
        kind: Kind::Bytes,
        default: 16 << 20,
        range: 0 => 1 << 48,
        runtime: false,
        level: Testing,
        summary: "malloc footprint at which the runtime's threads start; 0 = at load",
        doc: "A process running the malloc (LD_PRELOAD) stays single-threaded until its \
              footprint (slabs of the size classes, blocks above them and the page heap's free \
              runs) passes this many bytes: then an allocation's slow path starts the reclaim \
              thread and the release helper. A short or small program never gets them, so \
              unshare(CLONE_NEWUSER), set*id and fork from signal handlers behave as under \
              glibc. They start at load when this is 0, when sources or control_socket are set \
              explicitly, and at max_cached_bytes when that is lower (docs/design/lazy-runtime.md). \
              Zones of the zone API start them at their creation.",
    },
}

/// The definition of `t`.
#[inline]
pub fn def(t: Tunable) -> &'static TunableDef {
    &TABLE[t as usize]
}

/// The definition named `name` (exact, lower-case match).
pub fn lookup(name: &str) -> Option<&'static TunableDef> {
    TABLE.iter().find(|d| d.name == name)
}

/// Rows are equal when they name the same tunable (there is one row per tunable).
impl PartialEq for TunableDef {
    fn eq(&self, other: &Self) -> bool {
        self.tunable == other.tunable
    }
}

impl Eq for TunableDef {}
