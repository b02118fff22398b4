//! Filling a [`Snapshot`] from the live zones: per-CPU counters are merged here, on the reader's
//! thread, so reading statistics never slows an allocation.

use super::{GlobalStats, Snapshot, SourceStats, ZoneStats};
use crate::zone::ZoneSnapshot;

/// Snapshots of every live zone (oldest first).
pub fn zone_snapshots() -> Vec<ZoneSnapshot> {
    ebbtide_core::zone::snapshots()
}

/// Bytes a zone holds in caches (per-CPU, depot, free slab slots).
pub(crate) fn zone_cached(z: &ZoneSnapshot) -> u64 {
    z.cached_bytes_pcpu + z.cached_bytes_depot + z.free_bytes_slabs
}

/// The process-wide figures now, given the zones' cached bytes and the pressure state; the
/// source of the last event comes apart (a static name, so that the live writer copies
/// nothing). Allocates nothing.
pub(crate) fn global_now(
    zones_cached: u64,
    p: &crate::reclaimer::PressureState,
) -> (GlobalStats, &'static str) {
    let mut g = GlobalStats {
        mapped_bytes: ebbtide_core::mapped_bytes(),
        metadata_bytes: crate::os::metadata_bytes(),
        // Caches of the layers above the zones (the malloc's page heap), given back by the
        // same paths, count with the zones'.
        cached_bytes: zones_cached + ebbtide_core::outer::held_bytes(),
        released_bytes: ebbtide_core::released_bytes(),
        squeeze_until_ms: {
            let until = crate::reclaim::squeeze_until();
            let now = crate::os::now_ns();
            if until > now {
                (until - now).div_ceil(1_000_000)
            } else {
                0
            }
        },
        squeezed_ms: crate::reclaim::squeezed_ns() / 1_000_000,
        lazy_bytes: crate::lazy::lazy_bytes(),
        lazy_freed_bytes: crate::lazy::lazy_freed_bytes(),
        lazy_pending_bytes: crate::lazy::lazy_pending_bytes(),
        ..GlobalStats::default()
    };
    let h = ebbtide_core::outer::huge_pages();
    [
        g.page_heap_huge_pages,
        g.page_heap_partly_used,
        g.page_heap_huge_broken,
    ] = [h.huge, h.partly_used, h.broken];
    g.page_heap_released_whole_bytes = h.released_whole_bytes;
    let w = ebbtide_core::contention::process();
    [g.lock_waits_arena, g.lock_wait_ns_arena] = [w.arena.waits, w.arena.wait_ns];
    [g.lock_waits_registry, g.lock_wait_ns_registry] = [w.registry.waits, w.registry.wait_ns];
    [g.lock_waits_page_heap, g.lock_wait_ns_page_heap] = [w.page_heap.waits, w.page_heap.wait_ns];
    g.pressure_level = p.level;
    g.pressure_events = p.total_events;
    g.source_opens = p.source_opens;
    [
        g.events_systemd,
        g.events_psi,
        g.events_cgroup1,
        g.events_headroom,
        g.events_events,
        g.events_budget,
        g.events_explicit,
        g.events_mmap_failure,
    ] = p.events;
    let mut source = "";
    if let Some((kind, level, ago_ns)) = p.last_event {
        source = crate::reclaimer::KIND_NAMES[kind];
        g.last_event_level = level;
        g.last_event_ms_ago = ago_ns / 1_000_000;
    }
    (g, source)
}

/// The source kinds listed when no reclaim thread watches (the explicit one first, active).
pub(crate) const KINDS_WITHOUT_THREAD: [&str; 7] = [
    "explicit", "systemd", "psi", "cgroup1", "headroom", "events", "budget",
];

/// The process's statistics now. Pressure figures are filled in by the pressure layer when it
/// runs; without it they stay 0.
pub fn collect() -> Snapshot {
    let zones = zone_snapshots();
    let p = crate::reclaimer::pressure_state();
    let (mut global, source) = global_now(zones.iter().map(zone_cached).sum(), &p);
    global.last_event_source = source.to_string();
    let mut s = Snapshot {
        global,
        sources: Vec::new(),
        zones: Vec::new(),
        pools: Vec::new(),
    };
    for z in &zones {
        if z.pool_max_buffer_pages != u64::MAX {
            s.pools.push(super::PoolStats {
                zone: ZoneStats::from(z),
                max_buffer_pages: z.pool_max_buffer_pages,
                free_pages: z.free,
                pages_in_use: z.used,
                squeezed: crate::reclaim::squeezing_now(),
            });
        } else {
            s.zones.push(ZoneStats::from(z));
        }
    }
    s.sources = sources_of(&p.statuses);
    if s.sources.is_empty() && !p.thread_note.is_empty() {
        for (i, n) in KINDS_WITHOUT_THREAD.into_iter().enumerate() {
            s.sources.push(SourceStats {
                name: n.into(),
                active: i == 0,
                reason: if i == 0 {
                    String::new()
                } else {
                    p.thread_note.into()
                },
                ..SourceStats::default()
            });
        }
    }
    s
}

/// One entry per source kind from the watcher's statuses (PSI and cgroup v1 register one source
/// per level): an active kind names what each of its sources reads (`watches`), an inactive one
/// why none runs (`reason`).
pub(crate) fn sources_of(statuses: &[ebbtide_pressure::SourceStatus]) -> Vec<SourceStats> {
    let mut sources: Vec<SourceStats> = Vec::new();
    for st in statuses {
        let name = crate::reclaimer::kind_name(st.kind);
        let i = match sources.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                sources.push(SourceStats {
                    name: name.to_string(),
                    ..SourceStats::default()
                });
                sources.len() - 1
            }
        };
        let s = &mut sources[i];
        if st.active {
            s.active = true;
            s.reason.clear();
            join(&mut s.watches, &st.detail);
        } else if !s.active {
            join(&mut s.reason, &st.detail);
        }
    }
    sources
}

/// Appends `part` to the `; `-separated list `list` unless it is there already.
fn join(list: &mut String, part: &str) {
    if part.is_empty() || list.split("; ").any(|p| p == part) {
        return;
    }
    if !list.is_empty() {
        list.push_str("; ");
    }
    list.push_str(part);
}

#[cfg(test)]
mod tests {
    use super::sources_of;
    use ebbtide_pressure::{SourceKind, SourceStatus};

    #[test]
    fn active_sources_name_what_they_read() {
        let st = [
            SourceStatus::inactive(
                SourceKind::Psi,
                "no PSI at /sys/fs/cgroup/a/memory.pressure",
            ),
            SourceStatus::active(
                SourceKind::Psi,
                "/proc/pressure/memory: some 150000 1000000",
            ),
            SourceStatus::active(SourceKind::Psi, "/proc/pressure/memory: full 50000 1000000"),
            SourceStatus::active(SourceKind::Psi, "/proc/pressure/memory: full 50000 1000000"),
            SourceStatus::inactive(SourceKind::CgroupV1Level, "no v1 controller"),
            SourceStatus::inactive(SourceKind::CgroupV1Level, "retrying"),
        ];
        let s = sources_of(&st);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[0].active && s[0].reason.is_empty(), "{s:?}");
        assert_eq!(
            s[0].watches,
            "/proc/pressure/memory: some 150000 1000000; /proc/pressure/memory: full 50000 1000000"
        );
        assert!(!s[1].active && s[1].watches.is_empty(), "{s:?}");
        assert_eq!(s[1].reason, "no v1 controller; retrying");
    }
}
