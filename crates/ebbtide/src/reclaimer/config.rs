//! The policy's and the sources' settings, read from the tunables.

use super::*;

/// Policy settings from the tunables.
pub fn policy_config() -> PolicyConfig {
    PolicyConfig {
        trim_min_interval_ms: options::get_u64(Tunable::TrimMinIntervalMs),
        squeeze_ms: options::get_u64(Tunable::SqueezeMs),
        drain_min_interval_ms: options::get_u64(Tunable::DrainMinIntervalMs),
        drain_cpu_min_interval_ms: options::get_u64(Tunable::DrainCpuMinIntervalMs),
        level_hold_ms: options::get_u64(Tunable::LevelHoldMs),
    }
}

/// Source detection settings from the tunables.
pub fn detect_config() -> DetectConfig {
    let src = options::sources();
    let mut cfg = DetectConfig::default();
    cfg.systemd.enabled = src.contains("systemd");
    cfg.psi.enabled = src.contains("psi");
    let window = options::get_u64(Tunable::PsiWindowUs);
    cfg.psi.low = Some(PsiTrigger::some(
        options::get_u64(Tunable::PsiLowStallUs),
        window,
    ));
    cfg.psi.moderate = Some(PsiTrigger::some(
        options::get_u64(Tunable::PsiModerateStallUs),
        window,
    ));
    cfg.psi.critical = Some(PsiTrigger::full(
        options::get_u64(Tunable::PsiCriticalStallUs),
        window,
    ));
    cfg.v1_level.enabled = src.contains("cgroup1");
    cfg.headroom.enabled = src.contains("headroom");
    cfg.headroom.low_free = options::get_u64(Tunable::HeadroomLowPct) as f64 / 100.0;
    cfg.headroom.moderate_free = options::get_u64(Tunable::HeadroomModeratePct) as f64 / 100.0;
    cfg.headroom.critical_free = options::get_u64(Tunable::HeadroomCriticalPct) as f64 / 100.0;
    cfg.headroom.min_interval_ms = options::get_u64(Tunable::HeadroomMinIntervalMs);
    cfg.headroom.max_interval_ms = options::get_u64(Tunable::HeadroomMaxIntervalMs);
    cfg.headroom.repeat_ms = options::get_u64(Tunable::HeadroomRepeatMs);
    cfg.headroom.growth_per_s = options::get_u64(Tunable::HeadroomGrowthBytes);
    // The cgroup's usage counts our MADV_FREE'd pages until the kernel takes them, which it does
    // first and without I/O: not pressure. Pages still settling are not excluded: the kernel can
    // only swap those (measured: excluding them let the quick blkback run reach its limit at
    // start, where lazily given-up pool pages hid the growth from the headroom source).
    cfg.headroom_exclude = Some(Arc::new(ebbtide_core::lazy::lazy_bytes));
    cfg.memory_events.enabled = src.contains("events");
    let budget = options::get_u64(Tunable::MaxCachedBytes);
    if src.contains("budget") && budget > 0 {
        let held: pressure::HeldBytes = Arc::new(reclaim::cached_bytes);
        cfg.budget = Some((
            BudgetConfig {
                max_cached_bytes: budget,
                ..BudgetConfig::default()
            },
            held,
        ));
    }
    cfg
}

/// The tunables [`detect_config`] reads: when any of them changes at run time, the reclaim thread
/// detects and opens its sources again, so new thresholds and intervals take effect at once.
pub(super) const SOURCE_TUNABLES: &[Tunable] = &[
    Tunable::Sources,
    Tunable::PsiWindowUs,
    Tunable::PsiLowStallUs,
    Tunable::PsiModerateStallUs,
    Tunable::PsiCriticalStallUs,
    Tunable::HeadroomLowPct,
    Tunable::HeadroomModeratePct,
    Tunable::HeadroomCriticalPct,
    Tunable::HeadroomMinIntervalMs,
    Tunable::HeadroomMaxIntervalMs,
    Tunable::HeadroomRepeatMs,
    Tunable::HeadroomGrowthBytes,
    Tunable::MaxCachedBytes,
];

/// The tunables that [`detect_config`] reads (the reclaim thread opens its sources again when one
/// changes). `tests/tunable_effects.rs` checks the list against `detect_config` itself.
pub fn source_tunables() -> &'static [Tunable] {
    SOURCE_TUNABLES
}

pub(super) fn source_settings() -> [u64; SOURCE_TUNABLES.len()] {
    core::array::from_fn(|i| options::get_u64(SOURCE_TUNABLES[i]))
}

/// The per-CPU budget of the resize pass (which only the reclaim thread runs).
pub(super) fn configure_sizing() {
    ebbtide_core::sizing::set_budget(options::get_u64(Tunable::PcpuBudgetBytes));
}

/// Lazily freed pages (`MADV_FREE`) only with a reclaim thread, which decays them.
pub(super) fn configure_lazy() {
    reclaim::configure_lazy(
        options::get_bool(Tunable::LazyFree),
        options::get_u64(Tunable::LazySettleMs),
        options::get_u64(Tunable::LazyDecayMs),
    );
}
