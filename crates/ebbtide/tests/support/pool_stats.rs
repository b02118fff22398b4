//! What the lazy-free tests read of one page pool: its zone's statistics, and the bound on what
//! a pool holds beyond the pages a test took (an allocation miss imports a refill batch onto the
//! CPU's stack, `ebbtide_core::sizing::pool_refill`).

/// The statistics of the zone of the pool named `name`.
pub fn of(name: &str) -> ebbtide::stats::ZoneStats {
    ebbtide::stats::collect()
        .pools
        .into_iter()
        .find(|p| p.zone.name == name)
        .expect("the pool in the stats")
        .zone
}

/// Bytes a pool may hold beyond what was taken from it: a refill batch per CPU.
pub fn refill_slack() -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (ebbtide_core::sizing::POOL_REFILL_BATCH * 4096 * cpus) as u64
}
