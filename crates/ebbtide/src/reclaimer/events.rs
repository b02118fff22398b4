//! Event counters per source kind and the last event: what statistics read of the pressure
//! state ([`pressure_state`]).

use super::*;

/// Events per source kind, in [`kind_index`] order, then the total.
pub(super) static EVENTS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

pub(super) static LAST_EVENT: AtomicU64 = AtomicU64::new(0); // kind << 8 | level, +1 (0 = none)

pub(super) static LAST_EVENT_NS: AtomicU64 = AtomicU64::new(0);

/// How many times the reclaim thread opened the sources (once at start, once more after a
/// tunable changed them, and after each loss: a program closing the watcher's descriptors).
/// Relaxed: a statistic.
pub(super) static SOURCE_OPENS: AtomicU64 = AtomicU64::new(0);

/// Index of a source kind in the event counters (and the stats names).
pub(super) fn kind_index(k: SourceKind) -> usize {
    match k {
        SourceKind::Systemd => 0,
        SourceKind::Psi => 1,
        SourceKind::CgroupV1Level => 2,
        SourceKind::Headroom => 3,
        SourceKind::MemoryEvents => 4,
        SourceKind::Budget => 5,
        SourceKind::Explicit => 6,
    }
}

pub(super) const MMAP_FAILURE: usize = 7;

/// The stats names of the source kinds, in the order of [`PressureState::events`].
pub const KIND_NAMES: [&str; 8] = [
    "systemd",
    "psi",
    "cgroup1",
    "headroom",
    "events",
    "budget",
    "explicit",
    "mmap_failure",
];

pub(super) fn count_event(kind: SourceKind, level: Level) {
    count_index(kind_index(kind), level);
}

pub(super) fn count_index(i: usize, level: Level) {
    EVENTS[i].fetch_add(1, Ordering::Relaxed);
    EVENTS[8].fetch_add(1, Ordering::Relaxed);
    LAST_EVENT.store(((i as u64) << 8 | level as u64) + 1, Ordering::Relaxed);
    LAST_EVENT_NS.store(crate::os::now_ns(), Ordering::Relaxed);
}

/// A failed mapping was handled (DRAIN_CPU and a retry): counted as a Critical event. (The
/// core's `map_failure` hook: only counters.)
pub(crate) fn count_map_failure() {
    count_index(MMAP_FAILURE, Level::Critical);
}

/// What the reclaim thread knows, for statistics (the `stats` module turns it into fields).
#[derive(Clone, Debug, Default)]
pub struct PressureState {
    /// The level the policy holds (0..=3).
    pub level: u64,
    /// Events per source kind, in [`KIND_NAMES`] order.
    pub events: [u64; 8],
    /// All events.
    pub total_events: u64,
    /// The last event: kind (a [`KIND_NAMES`] index), level, ns since (monotonic).
    pub last_event: Option<(usize, u64, u64)>,
    /// Every source's status as the watcher reports it (PSI and cgroup v1 have one per level).
    pub statuses: Vec<SourceStatus>,
    /// Why no reclaim thread watches the sources (empty when one does).
    pub thread_note: &'static str,
    /// How many times the sources were opened (see `SOURCE_OPENS`).
    pub source_opens: u64,
}

/// The stats name of a source kind.
pub fn kind_name(k: SourceKind) -> &'static str {
    KIND_NAMES[kind_index(k)]
}

/// The reclaim thread's state now.
pub fn pressure_state() -> PressureState {
    PressureState {
        statuses: lock_gated(&SHARED).statuses.clone(),
        ..pressure_state_head()
    }
}

/// [`pressure_state`] without the sources' statuses (`statuses` empty): allocates nothing,
/// for the control socket's observations; [`with_statuses`] reads them in place.
pub fn pressure_state_head() -> PressureState {
    let last = LAST_EVENT.load(Ordering::Relaxed);
    let last_event = (last != 0).then(|| {
        let v = last - 1;
        let ago = crate::os::now_ns().saturating_sub(LAST_EVENT_NS.load(Ordering::Relaxed));
        ((v >> 8) as usize % 8, v & 0xff, ago)
    });
    let thread_note = if THREAD_DISABLED.load(Ordering::Relaxed) {
        "reclaim thread off (reclaim_thread=false, failed to start, or stopped after panics)"
    } else if !STARTED.load(Ordering::Relaxed) {
        "reclaim thread not started yet (no zone created)"
    } else {
        ""
    };
    PressureState {
        level: LEVEL.load(Ordering::Relaxed) as u64,
        events: core::array::from_fn(|i| EVENTS[i].load(Ordering::Relaxed)),
        total_events: EVENTS[8].load(Ordering::Relaxed),
        last_event,
        statuses: Vec::new(),
        thread_note,
        source_opens: SOURCE_OPENS.load(Ordering::Relaxed),
    }
}

/// Calls `f` with every source's status, in place (under the state's lock: `f` must be short
/// and must not wait).
pub fn with_statuses<R>(f: impl FnOnce(&[SourceStatus]) -> R) -> R {
    f(&lock_gated(&SHARED).statuses)
}
