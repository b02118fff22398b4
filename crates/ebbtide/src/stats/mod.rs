//! Statistics, defined once.
//!
//! Each group of statistics (zone, page pool, global, pressure source) is declared in a single
//! list in this file: one `stats_group!` invocation per group. From that list come:
//!
//! * the Rust struct the core fills ([`ZoneStats`], [`PoolStats`], [`GlobalStats`],
//!   [`SourceStats`]) and its [`Field`] descriptors (`FIELDS`: name, [`FieldKind`], [`Unit`],
//!   `vmstat -z` column, description);
//! * the merge of per-CPU parts (`add_counters`: counters add, gauges are left alone);
//! * the `#[repr(C)]` mirror (`ZoneStatsC`, ...) and the C declaration text ([`c_header`]);
//! * every emitter: [`Snapshot::to_json`], [`Snapshot::to_prometheus`] (one process; the
//!   [`Exposition`] builder behind it also serves `ebbtide exporter`, many processes in one
//!   page), [`Snapshot::to_table`] (`vmstat -z` style), and [`write_json`], the JSON of
//!   [`Snapshot::to_json`] written from the live zones without allocating (the control
//!   socket's `stats json`: `docs/design/observer.md`);
//! * the reverse of the JSON: [`Stats::set`] fills a struct field by field, by name;
//! * the ABI documentation (`docs/ABI/testing/stats-*`, see [`crate::abi`]).
//!
//! Counters only grow (wrapping at 2^64); gauges are current values. The two never share a
//! name: counters end in `_total` in Prometheus and are typed `counter` there. Prometheus
//! names follow its conventions (base units, unit suffix, one family per quantity with a label
//! where fields differ only by source or kind); [`prometheus_series`] gives every field's.
//!
//! The core builds a [`Snapshot`] on the reader's thread (allocation is fine here): it merges
//! its per-CPU counters into the structs and pushes one [`ZoneStats`] per zone and one
//! [`PoolStats`] per page pool.

mod c;
mod collect;
mod json;
mod live;
mod prometheus;
mod table;

pub use c::c_header;
pub use collect::{collect, zone_snapshots};
pub use live::write_json;
pub use prometheus::{
    check_exposition, metric_name as prometheus_name, series as prometheus_series, size_range,
    zone_field_summed, Exposition, MetricType, Series, CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE,
    SIZE_RANGES, ZONE_SUMS,
};

/// Zone JSON keys the C API reads; they may not be renamed or removed.
pub const C_API_ZONE_FIELDS: &[&str] = &[
    "name",
    "size",
    "limit",
    "used",
    "free",
    "requests",
    "fails",
    "sleeps",
    "bucket_size",
];

/// Global JSON keys the C API reads; they may not be renamed or removed.
pub const C_API_GLOBAL_FIELDS: &[&str] = &[
    "mapped_bytes",
    "cached_bytes",
    "released_bytes",
    "pressure_level",
    "pressure_events",
];

/// Version of the snapshot layout (JSON `version`, C `EBBTIDE_STATS_VERSION`). Bumped when a
/// field is removed or changes meaning; adding fields at the end does not bump it.
pub const STATS_VERSION: u32 = 1;

/// Bytes of a text field in the C mirror, including the terminating NUL (longer text is
/// truncated at a UTF-8 boundary).
pub const C_TEXT_LEN: usize = 64;

/// What kind of quantity a field is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// The instance's name: a Prometheus label, the first table column.
    Label,
    /// Only grows (wrapping at 2^64); Prometheus `counter`, name ends in `_total`.
    Counter,
    /// A current value; Prometheus `gauge`.
    Gauge,
    /// Descriptive text that is not the key; Prometheus `<name>_info{<name>="text"} 1`.
    Info,
}

impl FieldKind {
    /// Lower-case word for documentation.
    pub const fn word(self) -> &'static str {
        match self {
            FieldKind::Label => "label",
            FieldKind::Counter => "counter",
            FieldKind::Gauge => "gauge",
            FieldKind::Info => "info",
        }
    }
}

/// How a field is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// UTF-8 text (`String`; `char[C_TEXT_LEN]` in C).
    Text,
    /// `u64` (`uint64_t`).
    U64,
    /// `bool` (`uint64_t` 0 or 1 in C, 0/1 in Prometheus, `true`/`false` in JSON).
    Bool,
}

impl FieldType {
    /// Word for documentation.
    pub const fn word(self) -> &'static str {
        match self {
            FieldType::Text => "string",
            FieldType::U64 => "u64",
            FieldType::Bool => "bool",
        }
    }
}

/// Unit of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Text or no unit.
    None,
    /// Bytes.
    Bytes,
    /// Items (objects of the zone's size).
    Items,
    /// Pages of the page pool or the OS.
    Pages,
    /// Percent.
    Percent,
    /// Number of events (requests, failures, reclaims).
    Events,
    /// Milliseconds.
    Millis,
    /// Nanoseconds.
    Nanos,
    /// 0 or 1.
    Boolean,
    /// Pressure level: 0 none, 1 low, 2 moderate, 3 critical.
    Level,
}

impl Unit {
    /// Word for documentation.
    pub const fn word(self) -> &'static str {
        match self {
            Unit::None => "none",
            Unit::Bytes => "bytes",
            Unit::Items => "items",
            Unit::Pages => "pages",
            Unit::Percent => "percent",
            Unit::Events => "events",
            Unit::Millis => "milliseconds",
            Unit::Nanos => "nanoseconds",
            Unit::Boolean => "boolean",
            Unit::Level => "level (0 none, 1 low, 2 moderate, 3 critical)",
        }
    }
}

/// Description of one statistic.
#[derive(Debug, PartialEq, Eq)]
pub struct Field {
    /// Name (JSON key, C member, base of the Prometheus metric name).
    pub name: &'static str,
    /// Storage type.
    pub ty: FieldType,
    /// Counter, gauge, label or info.
    pub kind: FieldKind,
    /// Unit.
    pub unit: Unit,
    /// Column header in the `vmstat -z` style table; empty: not in the table.
    pub column: &'static str,
    /// One-sentence description.
    pub description: &'static str,
}

/// A field's value, borrowed from a stats struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// [`FieldType::Text`].
    Text(&'a str),
    /// [`FieldType::U64`].
    U64(u64),
    /// [`FieldType::Bool`].
    Bool(bool),
}

impl Value<'_> {
    /// Numeric value (bools as 0/1, text as `None`).
    pub fn as_u64(self) -> Option<u64> {
        match self {
            Value::Text(_) => None,
            Value::U64(v) => Some(v),
            Value::Bool(b) => Some(u64::from(b)),
        }
    }
}

/// Implemented by every generated stats struct.
pub trait Stats {
    /// Group name (`zone`, `pool`, `global`, `source`): Prometheus prefix and label name.
    const GROUP: &'static str;
    /// Name of the C struct (`ebbtide_zone_stats`).
    const C_NAME: &'static str;
    /// All fields in order (for a pool: the zone fields, then its own).
    fn fields() -> Vec<&'static Field>;
    /// Call `f` for every field in [`Stats::fields`] order.
    fn for_each(&self, f: &mut dyn FnMut(&'static Field, Value<'_>));
    /// Set the field called `name` (for a pool, zone fields too) to `value`, for readers that
    /// rebuild a snapshot from its JSON. Returns false, changing nothing, when no field has
    /// that name or `value` is not of the field's type.
    fn set(&mut self, name: &str, value: Value<'_>) -> bool;
}

/// Copy `s` into a NUL-terminated C text buffer, truncating at a character boundary.
pub fn c_text(s: &str) -> [u8; C_TEXT_LEN] {
    let mut out = [0u8; C_TEXT_LEN];
    let mut end = s.len().min(C_TEXT_LEN - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&s.as_bytes()[..end]);
    out
}

macro_rules! rust_ty {
    (Text) => {
        String
    };
    (U64) => {
        u64
    };
    (Bool) => {
        bool
    };
}

macro_rules! c_ty {
    (Text) => {
        [u8; C_TEXT_LEN]
    };
    (U64) => {
        u64
    };
    (Bool) => {
        u64
    };
}

macro_rules! to_c {
    (Text, $v:expr) => {
        c_text(&$v)
    };
    (U64, $v:expr) => {
        $v
    };
    (Bool, $v:expr) => {
        u64::from($v)
    };
}

macro_rules! to_value {
    (Text, $v:expr) => {
        Value::Text(&$v)
    };
    (U64, $v:expr) => {
        Value::U64($v)
    };
    (Bool, $v:expr) => {
        Value::Bool($v)
    };
}

macro_rules! set_field {
    (Text, $dst:expr, $v:expr) => {
        match $v {
            Value::Text(t) => {
                $dst = t.to_string();
                true
            }
            _ => false,
        }
    };
    (U64, $dst:expr, $v:expr) => {
        match $v {
            Value::U64(n) => {
                $dst = n;
                true
            }
            _ => false,
        }
    };
    (Bool, $dst:expr, $v:expr) => {
        match $v {
            Value::Bool(b) => {
                $dst = b;
                true
            }
            _ => false,
        }
    };
}

macro_rules! merge_field {
    (Counter, U64, $a:expr, $b:expr) => {
        $a = $a.wrapping_add($b)
    };
    ($kind:ident, $ty:ident, $a:expr, $b:expr) => {};
}

/// The value of a stats field read from a source snapshot: the field of the same name, converted
/// to the stats type, unless the list gives an expression (`= expr`).
use ebbtide_core::zone::ZoneSnapshot;

macro_rules! field_from {
    ($z:ident, $f:ident, U64) => {
        $z.$f as u64
    };
    ($z:ident, $f:ident, Text) => {
        $z.$f.clone()
    };
    ($z:ident, $f:ident, Bool) => {
        $z.$f
    };
    ($z:ident, $f:ident, $ty:ident, $src:expr) => {
        $src
    };
}

/// Declares one group of statistics; see the module docs for what it generates.
macro_rules! stats_group {
    // A group filled from a source snapshot (`from Type(binding)`): each field is the snapshot's
    // field of the same name, or the expression after `=`. The list is written once; the
    // `From<&Type>` conversion is generated from it.
    (
        $(#[$meta:meta])*
        struct $name:ident, c $cname:ident = $c_name:literal, group $group:literal,
        from $snap:ident ($z:ident)
        {
            $( $f:ident : $ty:ident, $kind:ident, $unit:ident, $col:literal, $desc:literal
               $(= $src:expr)? ; )*
        }
    ) => {
        stats_group! {
            $(#[$meta])*
            struct $name, c $cname = $c_name, group $group {
                $( $f : $ty, $kind, $unit, $col, $desc; )*
            }
        }

        impl From<&$snap> for $name {
            fn from($z: &$snap) -> $name {
                $name {
                    $( $f: field_from!($z, $f, $ty $(, $src)?), )*
                }
            }
        }
    };
    (
        $(#[$meta:meta])*
        struct $name:ident, c $cname:ident = $c_name:literal, group $group:literal
        $(, base $base:ident : $base_ty:ident / $base_c:ident)?
        {
            $( $f:ident : $ty:ident, $kind:ident, $unit:ident, $col:literal, $desc:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $(
                #[doc = concat!("The `", stringify!($base), "` part.")]
                pub $base: $base_ty,
            )?
            $(
                #[doc = $desc]
                pub $f: rust_ty!($ty),
            )*
        }

        impl $name {
            /// This group's own fields (without a base part).
            pub const OWN_FIELDS: &'static [Field] = &[$(
                Field {
                    name: stringify!($f),
                    ty: FieldType::$ty,
                    kind: FieldKind::$kind,
                    unit: Unit::$unit,
                    column: $col,
                    description: $desc,
                },
            )*];

            /// Add the counters of `other` into `self` (merging per-CPU parts); gauges and
            /// text are left as they are.
            pub fn add_counters(&mut self, other: &Self) {
                // A group may have no counters at all.
                let _ = other;
                $( self.$base.add_counters(&other.$base); )?
                $( merge_field!($kind, $ty, self.$f, other.$f); )*
            }

            /// The `#[repr(C)]` mirror.
            pub fn to_c(&self) -> $cname {
                $cname {
                    $( $base: self.$base.to_c(), )?
                    $( $f: to_c!($ty, self.$f), )*
                }
            }
        }

        impl Stats for $name {
            const GROUP: &'static str = $group;
            const C_NAME: &'static str = $c_name;

            fn fields() -> Vec<&'static Field> {
                #[allow(unused_mut)]
                let mut v: Vec<&'static Field> = Vec::new();
                $( let _ = stringify!($base); v.extend(<$base_ty as Stats>::fields()); )?
                v.extend(Self::OWN_FIELDS.iter());
                v
            }

            fn for_each(&self, f: &mut dyn FnMut(&'static Field, Value<'_>)) {
                $( self.$base.for_each(f); )?
                let mut own = Self::OWN_FIELDS.iter();
                $(
                    if let Some(field) = own.next() {
                        f(field, to_value!($ty, self.$f));
                    }
                )*
            }

            fn set(&mut self, name: &str, value: Value<'_>) -> bool {
                $( if self.$base.set(name, value) { return true; } )?
                match name {
                    $( stringify!($f) => set_field!($ty, self.$f, value), )*
                    _ => false,
                }
            }
        }

        #[doc = concat!("C mirror of [`", stringify!($name), "`]: `struct ", $c_name,
                        "` in `include/ebbtide.h` (see [`c_header`]).")]
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $cname {
            $(
                #[doc = concat!("The `", stringify!($base), "` part.")]
                pub $base: $base_c,
            )?
            $(
                #[doc = $desc]
                pub $f: c_ty!($ty),
            )*
        }

        impl $cname {
            /// `(member, offset)` of every member, in order (checked against the C text).
            pub fn member_offsets() -> Vec<(&'static str, usize)> {
                vec![
                    $( (stringify!($base), std::mem::offset_of!($cname, $base)), )?
                    $( (stringify!($f), std::mem::offset_of!($cname, $f)), )*
                ]
            }
        }
    };
}

stats_group! {
    /// Statistics of one zone (one line of `vmstat -z`).
    struct ZoneStats, c ZoneStatsC = "ebbtide_zone_stats", group "zone", from ZoneSnapshot(z) {
        name: Text, Label, None, "ITEM", "Zone name, as given when the zone was created.";
        size: U64, Gauge, Bytes, "SIZE", "Item size.";
        align: U64, Gauge, Bytes, "", "Item alignment.";
        limit: U64, Gauge, Items, "LIMIT", "Maximum number of items (max_items); 0 means no limit. Cached items count toward it.";
        used: U64, Gauge, Items, "USED", "Items allocated and not yet freed.";
        free: U64, Gauge, Items, "FREE", "Free items held by the zone: per-CPU buckets, the depot and free slots in slabs (as vmstat -z FREE).";
        requests: U64, Counter, Events, "REQ", "Allocations served.";
        fails: U64, Counter, Events, "FAIL", "Allocations that failed (limit reached without waiting, or no memory).";
        sleeps: U64, Counter, Events, "SLEEP", "Allocations that waited for an item because the zone was at its limit.";
        frees: U64, Counter, Events, "", "Items freed.";
        bucket_size: U64, Gauge, Items, "BUCKET", "Current per-CPU bucket size (grows on depot contention, shrinks on trim and drain).";
        bucket_size_max: U64, Gauge, Items, "", "Largest bucket size allowed for this item size.";
        depot_nitems: U64, Gauge, Items, "DEPOT", "Items in full buckets in the depot."
            = z.depot.nitems;
        depot_imax: U64, Gauge, Items, "", "Depot high mark since the last working-set update (decays by half each update)."
            = z.depot.imax;
        depot_imin: U64, Gauge, Items, "", "Depot low mark since the last working-set update."
            = z.depot.imin;
        depot_bimin: U64, Gauge, Items, "", "Depot low mark since the last new high mark."
            = z.depot.bimin;
        depot_wss: U64, Gauge, Items, "WSS", "Working-set size estimate of the depot (UMA wss)."
            = z.depot.wss;
        depot_limin: U64, Gauge, Items, "", "Long-term average of items the depot kept above its working set (UMA limin)."
            = z.depot.limin;
        depot_timin: U64, Gauge, Events, "", "Consecutive working-set updates in which the depot stayed above its working set (UMA timin)."
            = z.depot.timin;
        cached_bytes_pcpu: U64, Gauge, Bytes, "", "Bytes of free items in per-CPU buckets.";
        cached_bytes_depot: U64, Gauge, Bytes, "", "Bytes of free items in depot buckets.";
        free_bytes_slabs: U64, Gauge, Bytes, "", "Bytes of free item slots in slabs.";
        pages_mapped: U64, Gauge, Pages, "", "OS pages mapped for this zone's slabs.";
        slab_bytes: U64, Gauge, Bytes, "", "Size of one slab.";
        items_per_slab: U64, Gauge, Items, "", "Items in one slab.";
        efficiency_pct: U64, Gauge, Percent, "EFF%", "items_per_slab * size / slab_bytes, in percent (UMA efficiency)."
            = z.efficiency_pct.floor() as u64;
        reclaim_trim: U64, Counter, Events, "", "TRIM reclaims run on this zone (depot down to its working set).";
        reclaim_drain: U64, Counter, Events, "", "DRAIN reclaims run on this zone (whole depot).";
        reclaim_drain_cpu: U64, Counter, Events, "", "DRAIN_CPU reclaims run on this zone (depot, every per-CPU cache, depot again).";
        released_bytes: U64, Counter, Bytes, "RELEASED", "Bytes given back to the OS (munmap or madvise) by this zone.";
        squeeze_windows: U64, Counter, Events, "", "Squeeze windows opened on this zone.";
        buckets_enabled: Bool, Gauge, Boolean, "", "Whether per-CPU buckets are in use (disabled while pressure is critical).";
        invalid_frees: U64, Counter, Events, "", "Frees refused because the pointer was not a live item of the zone (reported on stderr, never applied).";
        lazy_bytes: U64, Gauge, Bytes, "LAZY", "Bytes of free slabs given up without pressure (settling — a page pool's in its stash —, or offered to the kernel with MADV_FREE) and neither reused nor given back for good yet (still in RSS until the kernel takes them; not in released_bytes).";
        lazy_freed_bytes: U64, Counter, Bytes, "", "Bytes offered to the kernel with MADV_FREE (lazy_free), apart from released_bytes.";
        lazy_reused_bytes: U64, Counter, Bytes, "", "Bytes of lazily freed slabs taken back by allocation (reuse without a page fault unless the kernel had taken the page).";
        pcpu_capacity: U64, Gauge, Items, "PCPUCAP", "Capacity of this zone's per-CPU caches, summed over CPUs: each CPU's bucket pair (2 x bucket_size) plus what the resize pass granted it for its misses, within pcpu_budget_bytes (0 while caching is off).";
        pcpu_capacity_bytes: U64, Gauge, Bytes, "", "pcpu_capacity times the item size: what this zone's per-CPU caches may hold.";
        pcpu_capacity_max: U64, Gauge, Items, "", "Largest capacity of this zone's cache on one CPU."
            = z.pcpu_capacity_max;
        pcpu_underflows: U64, Counter, Events, "UNDERFL", "Allocations that found this CPU's cache empty and went to the depot or the slabs (misses that grow the cache).";
        pcpu_overflows: U64, Counter, Events, "OVERFL", "Frees that found this CPU's cache full and flushed a bucket to the depot (misses that grow the cache).";
        pcpu_interval_misses: U64, Gauge, Events, "", "Misses (underflows and overflows, every CPU) counted by the last resize pass, i.e. in the last pool_shrink_interval_ms."
            = z.pcpu_interval_misses;
        lock_waits_depot: U64, Counter, Events, "DWAIT", "Acquisitions of this zone's depot mutex (its full buckets: every CPU's cache misses) that found it held and waited."
            = z.depot_waits.waits;
        lock_waits_keg: U64, Counter, Events, "KWAIT", "Acquisitions of this zone's keg mutex (its slab lists: items imported into the caches, freed to the slabs, reclaimed) that found it held and waited."
            = z.keg_waits.waits;
        lock_waits_stash: U64, Counter, Events, "", "Acquisitions of a page pool's stash mutex (the pages a shrink gave back lazily) that found it held and waited; 0 for other zones."
            = z.stash_waits.waits;
        lock_wait_ns_depot: U64, Counter, Nanos, "", "Time the waits of lock_waits_depot spent blocked (CLOCK_MONOTONIC, read only around a wait)."
            = z.depot_waits.wait_ns;
        lock_wait_ns_keg: U64, Counter, Nanos, "", "Time the waits of lock_waits_keg spent blocked."
            = z.keg_waits.wait_ns;
        lock_wait_ns_stash: U64, Counter, Nanos, "", "Time the waits of lock_waits_stash spent blocked."
            = z.stash_waits.wait_ns;
        remote_frees: U64, Counter, Events, "REMOTE", "Items freed on one CPU and allocated on another through the depot: the items of buckets one CPU's full cache flushed that another CPU's empty cache took (a program's producer/consumer traffic; a free into the freeing CPU's own cache costs no lock and is not counted).";
        remote_buckets: U64, Counter, Events, "", "The depot buckets that carried remote_frees from one CPU to another.";
        huge_pages: U64, Gauge, Pages, "HUGE", "Huge pages (2 MiB) of this zone's slabs that hold memory: a zone holding 32 MiB of slabs turns its 4 MiB chunks into two MADV_HUGEPAGE pages each (fewer TLB misses).";
        huge_partly_used: U64, Gauge, Pages, "HPART", "Of huge_pages, those partly used: some of their slabs hold items, some do not.";
        huge_broken: U64, Gauge, Pages, "HBROKEN", "Of huge_pages, those broken: some of their slabs were given back (the kernel split the huge page) while the rest stays.";
        huge_released: U64, Counter, Pages, "", "Huge pages given back whole (one MADV_DONTNEED of 2 MiB, no split) since the zone was created.";
        huge_collapsed: U64, Counter, Pages, "", "Huge pages the zone collapsed (MADV_COLLAPSE, on the reclaim thread) since it was created: its older chunks when it turned huge, and pages broken by a release once all in use again.";
    }
}

stats_group! {
    /// Statistics of one page pool: the zone statistics of its pages plus its own.
    struct PoolStats, c PoolStatsC = "ebbtide_pool_stats", group "pool", base zone: ZoneStats / ZoneStatsC {
        max_buffer_pages: U64, Gauge, Pages, "MAXPG", "Free pages the pool keeps between shrinks outside a squeeze window.";
        free_pages: U64, Gauge, Pages, "FREEPG", "Free pages in the pool now.";
        pages_in_use: U64, Gauge, Pages, "INUSE", "Pages handed out and not yet returned (never released by a shrink).";
        squeezed: Bool, Gauge, Boolean, "SQZ", "Whether a squeeze window is open (the pool shrinks to 0 free pages).";
    }
}

stats_group! {
    /// Process-wide statistics.
    struct GlobalStats, c GlobalStatsC = "ebbtide_global_stats", group "global" {
        mapped_bytes: U64, Gauge, Bytes, "", "Bytes mapped from the OS by the library.";
        cached_bytes: U64, Gauge, Bytes, "", "Bytes held in caches: per-CPU buckets, depots, free slab slots, free pool pages, and the caches of layers above the zones that reclaim drains with them (the malloc's page heap of free large runs).";
        released_bytes: U64, Counter, Bytes, "", "Bytes given back to the OS.";
        pressure_level: U64, Gauge, Level, "", "Current pressure level.";
        pressure_events: U64, Counter, Events, "", "Pressure events received from all sources.";
        events_systemd: U64, Counter, Events, "", "Pressure events from the systemd MEMORY_PRESSURE_WATCH source.";
        events_psi: U64, Counter, Events, "", "Pressure events from PSI triggers.";
        events_cgroup1: U64, Counter, Events, "", "Pressure events from cgroup v1 memory.pressure_level.";
        events_headroom: U64, Counter, Events, "", "Pressure events from the headroom source (limit minus usage).";
        events_events: U64, Counter, Events, "", "Pressure events from cgroup v2 memory.events (high, max, oom).";
        events_budget: U64, Counter, Events, "", "Pressure events from the max_cached_bytes budget.";
        events_explicit: U64, Counter, Events, "", "Pressure events requested through the API or the control socket.";
        events_mmap_failure: U64, Counter, Events, "", "Pressure events raised by a failed mmap.";
        last_event_source: Text, Info, None, "", "Source of the last pressure event (a source name, or empty if none yet).";
        last_event_level: U64, Gauge, Level, "", "Level of the last pressure event (0 if none yet).";
        last_event_ms_ago: U64, Gauge, Millis, "", "Time since the last pressure event (0 if none yet).";
        squeeze_until_ms: U64, Gauge, Millis, "", "Time left until the current squeeze window closes; 0 when no window is open.";
        metadata_bytes: U64, Gauge, Bytes, "", "Bytes of the library's own metadata in memory (zone objects, per-CPU stacks, chunk headers and slab descriptors, the used part of the chunk map); with mapped_bytes, every byte the library maps and touches.";
        squeezed_ms: U64, Counter, Millis, "", "Time covered by squeeze windows since the process started (a window still open counts to its end).";
        lazy_bytes: U64, Gauge, Bytes, "", "Bytes offered to the kernel with MADV_FREE and not yet reused or given back for good, over all zones; part of RSS until the kernel takes them (LazyFree in smaps_rollup).";
        lazy_pending_bytes: U64, Gauge, Bytes, "", "Bytes of free slabs (and page pools' stashed pages) given up without pressure that wait lazy_settle_ms before MADV_FREE, over all zones (in RSS; reused without a system call).";
        lazy_freed_bytes: U64, Counter, Bytes, "", "Bytes offered to the kernel with MADV_FREE since the process started, apart from released_bytes.";
        source_opens: U64, Counter, Events, "", "Times the reclaim thread opened the pressure sources: at start, when a tunable changed them, and a second after the program closed their descriptors (closefrom, close_range), which the watcher finds within a second.";
        lock_waits_arena: U64, Counter, Events, "", "Acquisitions of the arena's free-chunk mutex (kegs taking and giving back 4 MiB chunks) that found it held and waited.";
        lock_waits_registry: U64, Counter, Events, "", "Acquisitions of the registry mutex (the list of live zones: zone creation, reclaim passes, statistics) that found it held and waited.";
        lock_waits_page_heap: U64, Counter, Events, "", "Acquisitions of the malloc's page heap mutex (large blocks' page runs and the table of large and huge blocks) that found it held and waited; 0 without libebbtide_malloc.";
        lock_wait_ns_arena: U64, Counter, Nanos, "", "Time the waits of lock_waits_arena spent blocked (CLOCK_MONOTONIC, read only around a wait).";
        lock_wait_ns_registry: U64, Counter, Nanos, "", "Time the waits of lock_waits_registry spent blocked.";
        lock_wait_ns_page_heap: U64, Counter, Nanos, "", "Time the waits of lock_waits_page_heap spent blocked.";
        page_heap_huge_pages: U64, Gauge, Pages, "", "Huge pages (2 MiB regions made MADV_HUGEPAGE while at least half in blocks) of the malloc's page heap (blocks of 64 KiB-64 MiB); 0 without libebbtide_malloc.";
        page_heap_partly_used: U64, Gauge, Pages, "", "2 MiB regions of the malloc's page heap partly in blocks.";
        page_heap_huge_broken: U64, Gauge, Pages, "", "Huge pages of the malloc's page heap given back in part (the kernel split them) and not whole since.";
        page_heap_released_whole_bytes: U64, Counter, Bytes, "", "Bytes of the malloc's page heap given back as whole 2 MiB regions (one MADV_DONTNEED per stretch, no huge page split).";
    }
}

stats_group! {
    /// State of one pressure source.
    struct SourceStats, c SourceStatsC = "ebbtide_source_stats", group "source" {
        name: Text, Label, None, "SOURCE", "Source name (systemd, psi, cgroup1, headroom, events, budget, explicit, mmap_failure).";
        active: Bool, Gauge, Boolean, "ACTIVE", "Whether the source is running.";
        reason: Text, Info, None, "REASON", "Why the source is not active (empty when active).";
        watches: Text, Info, None, "WATCHES", "What the active source reads: its files, descriptor or socket, with the trigger or thresholds it uses; several of the kind joined by '; ' (empty when not active).";
    }
}

/// Everything the library reports at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Process-wide figures.
    pub global: GlobalStats,
    /// One entry per pressure source.
    pub sources: Vec<SourceStats>,
    /// One entry per zone.
    pub zones: Vec<ZoneStats>,
    /// One entry per page pool.
    pub pools: Vec<PoolStats>,
}

impl Snapshot {
    /// JSON: `{"version":1,"global":{...},"sources":[...],"zones":[...],"pools":[...]}`,
    /// every field under its own name (pools flat: zone fields, then pool fields).
    pub fn to_json(&self) -> String {
        json::snapshot(self)
    }

    /// Prometheus text exposition format 0.0.4, names after Prometheus's conventions (see
    /// [`prometheus_series`]); the same emitter as [`Exposition`], one snapshot, no extra
    /// labels.
    pub fn to_prometheus(&self) -> String {
        prometheus::snapshot(self)
    }

    /// A `vmstat -z` style table (ITEM SIZE LIMIT USED FREE REQ FAIL SLEEP ...), preceded by
    /// the global figures and sources, followed by the page pools.
    pub fn to_table(&self) -> String {
        table::snapshot(self)
    }

    /// A snapshot with made-up but self-consistent figures, for tests, docs and tools.
    pub fn sample() -> Snapshot {
        let zone = |name: &str, size: u64, used: u64| {
            let items_per_slab = 4096 / size;
            ZoneStats {
                name: name.into(),
                size,
                align: 8,
                limit: if size > 1000 { 10_000 } else { 0 },
                used,
                free: 300,
                requests: used * 10,
                fails: 1,
                sleeps: 2,
                frees: used * 9,
                bucket_size: 30,
                bucket_size_max: 254,
                depot_nitems: 120,
                depot_imax: 240,
                depot_imin: 60,
                depot_bimin: 60,
                depot_wss: 180,
                depot_limin: 12,
                depot_timin: 3,
                cached_bytes_pcpu: 150 * size,
                cached_bytes_depot: 120 * size,
                free_bytes_slabs: 30 * size,
                pages_mapped: (used + 300).div_ceil(items_per_slab),
                slab_bytes: 4096,
                items_per_slab,
                efficiency_pct: items_per_slab * size * 100 / 4096,
                reclaim_trim: 5,
                reclaim_drain: 1,
                reclaim_drain_cpu: 1,
                released_bytes: 1 << 20,
                squeeze_windows: 2,
                buckets_enabled: true,
                invalid_frees: 0,
                lazy_bytes: 3 << 20,
                lazy_freed_bytes: 4 << 20,
                lazy_reused_bytes: 1 << 20,
                pcpu_capacity: 2 * 60 + 92,
                pcpu_capacity_bytes: (2 * 60 + 92) * size,
                pcpu_capacity_max: 60 + 92,
                pcpu_underflows: 40,
                pcpu_overflows: 38,
                pcpu_interval_misses: 2,
                lock_waits_depot: 7,
                lock_waits_keg: 3,
                lock_waits_stash: 0,
                lock_wait_ns_depot: 21_500,
                lock_wait_ns_keg: 4_000_000,
                lock_wait_ns_stash: 0,
                remote_frees: used * 2,
                remote_buckets: used * 2 / 60,
                huge_pages: 12,
                huge_partly_used: 3,
                huge_broken: 1,
                huge_released: 40,
                huge_collapsed: 16,
            }
        };
        Snapshot {
            global: GlobalStats {
                mapped_bytes: 64 << 20,
                cached_bytes: 3 << 20,
                released_bytes: 5 << 20,
                pressure_level: 2,
                pressure_events: 9,
                events_systemd: 0,
                events_psi: 6,
                events_cgroup1: 0,
                events_headroom: 1,
                events_events: 0,
                events_budget: 1,
                events_explicit: 1,
                events_mmap_failure: 0,
                last_event_source: "psi".into(),
                last_event_level: 2,
                last_event_ms_ago: 1500,
                squeeze_until_ms: 0,
                metadata_bytes: 1 << 20,
                squeezed_ms: 250,
                lazy_bytes: 3 << 20,
                lazy_freed_bytes: 4 << 20,
                lazy_pending_bytes: 1 << 20,
                source_opens: 1,
                lock_waits_arena: 2,
                lock_waits_registry: 1,
                lock_waits_page_heap: 11,
                lock_wait_ns_arena: 1_250_000,
                lock_wait_ns_registry: 900,
                lock_wait_ns_page_heap: 2_000_000_500,
                page_heap_huge_pages: 4,
                page_heap_partly_used: 2,
                page_heap_huge_broken: 1,
                page_heap_released_whole_bytes: 64 << 20,
            },
            sources: vec![
                SourceStats {
                    name: "psi".into(),
                    active: true,
                    reason: String::new(),
                    watches: "/proc/pressure/memory: some 150000 1000000 -> low".into(),
                },
                SourceStats {
                    name: "cgroup1".into(),
                    active: false,
                    reason:
                        "no \"memory\" controller mounted at /sys/fs/cgroup/memory\\v1\nretrying"
                            .into(),
                    watches: String::new(),
                },
            ],
            zones: vec![zone("small 64", 64, 1000), zone("big \"4k\"", 4096, 20)],
            pools: vec![PoolStats {
                zone: zone("blk-ring0", 4096, 256),
                max_buffer_pages: 1024,
                free_pages: 12,
                pages_in_use: 256,
                squeezed: true,
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_are_unique_and_valid() {
        for fields in [
            ZoneStats::fields(),
            PoolStats::fields(),
            GlobalStats::fields(),
            SourceStats::fields(),
        ] {
            let mut names: Vec<&str> = fields.iter().map(|f| f.name).collect();
            names.sort_unstable();
            let n = names.len();
            names.dedup();
            assert_eq!(n, names.len(), "duplicate field");
            for f in fields {
                assert!(f
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
                assert_eq!(
                    f.ty == FieldType::Text,
                    matches!(f.kind, FieldKind::Label | FieldKind::Info),
                    "{}",
                    f.name
                );
                assert!(f.description.ends_with('.'), "{}", f.name);
            }
        }
    }

    #[test]
    fn for_each_visits_fields_in_order() {
        let s = Snapshot::sample();
        let mut seen = Vec::new();
        s.pools[0].for_each(&mut |f, _| seen.push(f.name));
        let want: Vec<&str> = PoolStats::fields().iter().map(|f| f.name).collect();
        assert_eq!(seen, want);
        assert_eq!(
            seen.len(),
            ZoneStats::OWN_FIELDS.len() + PoolStats::OWN_FIELDS.len()
        );
    }

    #[test]
    fn add_counters_adds_only_counters() {
        let mut a = Snapshot::sample().zones[0].clone();
        let b = a.clone();
        a.add_counters(&b);
        assert_eq!(a.requests, 2 * b.requests);
        assert_eq!(a.released_bytes, 2 * b.released_bytes);
        assert_eq!(a.used, b.used);
        assert_eq!(a.name, b.name);
        let mut p = Snapshot::sample().pools[0].clone();
        let q = p.clone();
        p.add_counters(&q);
        assert_eq!(p.zone.frees, 2 * q.zone.frees);
        assert_eq!(p.free_pages, q.free_pages);
    }

    #[test]
    fn c_text_truncates_on_char_boundary() {
        let long = "é".repeat(40);
        let t = c_text(&long);
        let end = t.iter().position(|&b| b == 0).unwrap();
        assert!(end < C_TEXT_LEN);
        assert!(std::str::from_utf8(&t[..end]).is_ok());
        assert_eq!(&c_text("psi")[..4], b"psi\0");
    }
}

#[cfg(test)]
mod tests_emit;
