//! Property test of one zone against a shadow model.
//!
//! Random sequences of allocations, frees of random live items, invalid frees (foreign, misaligned,
//! double), reclaim requests, periodic passes, squeeze windows and the "buckets disabled" switch
//! run against a zone and a shadow model (the set of live items, each filled with a pattern derived
//! from a unique tag). After **every** step:
//! * `validate()` succeeds and `items_mapped == used + pcpu + depot + free_in_slabs`;
//! * `used == model.len()`;
//! * no live item was handed out twice, and (for small zones) no live item's bytes changed;
//! * what each operation promises holds: NOBUCKET and "buckets disabled" keep nothing cached,
//!   `Drain` empties the depot, `DrainCpu` empties the depot and every per-CPU stack, an invalid
//!   free returns `Err` (or, for a non-checked NOBUCKET zone, is counted late) and changes nothing.
//!
//! Squeeze and "buckets disabled" are process-wide, so no other module's test runs beside this
//! file's (`serial.rs`), every test takes `GLOBAL` (other zones' reclaims would otherwise move
//! items between `validate`'s reads), and each case restores the switches when it ends.

use ebbtide_core::{InvalidKind, Request, Zone, ZoneFlags, ZoneOptions};
use proptest::prelude::*;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Mutex;

static GLOBAL: Mutex<()> = Mutex::new(());

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8),
    Free(usize),
    FreeForeign,
    FreeStack,
    FreeMisaligned(usize, usize),
    DoubleFree,
    Reclaim(Request),
    ReclaimAll(Request),
    Periodic,
    Squeeze,
    Buckets(bool),
}

fn op() -> impl Strategy<Value = Op> {
    let req = prop_oneof![
        Just(Request::Trim),
        Just(Request::Drain),
        Just(Request::DrainCpu)
    ];
    prop_oneof![
        30 => (1u8..=40).prop_map(Op::Alloc),
        30 => any::<usize>().prop_map(Op::Free),
        2 => Just(Op::FreeForeign),
        1 => Just(Op::FreeStack),
        2 => (any::<usize>(), 1usize..4096).prop_map(|(i, d)| Op::FreeMisaligned(i, d)),
        3 => Just(Op::DoubleFree),
        4 => req.clone().prop_map(Op::Reclaim),
        2 => req.prop_map(Op::ReclaimAll),
        3 => Just(Op::Periodic),
        1 => Just(Op::Squeeze),
        2 => any::<bool>().prop_map(Op::Buckets),
    ]
}

#[derive(Clone, Copy, Debug)]
struct Config {
    size: usize,
    checked: bool,
    nobucket: bool,
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![
            Just(1usize),
            Just(8),
            Just(13),
            Just(24),
            Just(48),
            Just(100),
            Just(257),
            Just(1000),
            Just(4096),
            Just(5000),
        ],
        any::<bool>(),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(size, checked, nobucket)| Config {
            size,
            checked,
            nobucket,
        })
}

fn pattern(tag: u64, i: usize) -> u8 {
    (tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 24) as u8 ^ (i as u8).wrapping_mul(31)
}

fn fill(p: NonNull<u8>, len: usize, tag: u64) {
    for i in 0..len {
        // SAFETY: the item is ours and `len` = item_size bytes long.
        unsafe { p.as_ptr().add(i).write(pattern(tag, i)) };
    }
}

fn intact(p: NonNull<u8>, len: usize, tag: u64) -> Result<(), String> {
    for i in 0..len {
        // SAFETY: a live item of ours.
        let b = unsafe { p.as_ptr().add(i).read() };
        if b != pattern(tag, i) {
            return Err(format!(
                "live item {p:p} (tag {tag}) corrupted at byte {i}: {b:#x} != {:#x}",
                pattern(tag, i)
            ));
        }
    }
    Ok(())
}

/// Restores the process-wide switches when a case ends (also on a failed assertion).
struct Restore;
impl Drop for Restore {
    fn drop(&mut self) {
        ebbtide_core::reclaim::set_buckets_enabled(true);
    }
}

fn run_case(cfg: Config, ops: &[Op]) -> Result<(), TestCaseError> {
    // The model's expectations are exact (nothing cached while buckets are off, counts after
    // every step): this runs on the core alone, where no reclaim thread exists to act on the
    // machine's real pressure behind them.
    let _restore = Restore;
    let mut flags = ZoneFlags::default();
    if cfg.checked {
        flags = flags | ZoneFlags::CHECKED;
    }
    if cfg.nobucket {
        flags = flags | ZoneFlags::NOBUCKET;
    }
    let zone = Zone::new(ZoneOptions::new("model", cfg.size).flags(flags)).unwrap();
    let foreign_zone = Zone::new(ZoneOptions::new("model-foreign", 64)).unwrap();
    let foreign = foreign_zone.alloc().unwrap();
    let isz = zone.item_size();
    prop_assert!(isz >= cfg.size && isz >= 8);
    // Full content checks of every live item at every step only while that is cheap.
    let check_all = isz <= 256;

    let mut live: HashMap<usize, u64> = HashMap::new();
    let mut order: Vec<usize> = Vec::new(); // live items, for picking one at random
    let mut freed: Vec<usize> = Vec::new(); // items freed and not handed out again
    let mut next_tag = 1u64;
    let mut now = 1_000_000_000u64;
    let mut buckets_on = true;

    for (step, op) in ops.iter().enumerate() {
        let invalid_before = zone.snapshot().invalid_frees;
        match *op {
            Op::Alloc(n) => {
                for _ in 0..n {
                    let p = zone
                        .alloc()
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let a = p.as_ptr() as usize;
                    prop_assert_eq!(a % 8, 0, "item {:#x} not 8-aligned", a);
                    if isz >= 16 {
                        prop_assert_eq!(a % 16, 0, "item {:#x} not 16-aligned", a);
                    }
                    prop_assert!(
                        !live.contains_key(&a),
                        "step {}: item {:#x} handed out twice while live",
                        step,
                        a
                    );
                    fill(p, isz, next_tag);
                    live.insert(a, next_tag);
                    order.push(a);
                    freed.retain(|&f| f != a);
                    next_tag += 1;
                }
            }
            Op::Free(i) => {
                if order.is_empty() {
                    continue;
                }
                let a = order.swap_remove(i % order.len());
                let tag = live.remove(&a).unwrap();
                let p = NonNull::new(a as *mut u8).unwrap();
                intact(p, isz, tag).map_err(TestCaseError::fail)?;
                // SAFETY: a live item of this zone, freed once.
                let r = unsafe { zone.free(p) };
                prop_assert!(r.is_ok(), "valid free refused: {:?}", r);
                freed.push(a);
                if freed.len() > 64 {
                    freed.remove(0);
                }
            }
            Op::FreeForeign => {
                // SAFETY: not an item of `zone`: must be refused without touching it.
                let r = unsafe { zone.free(foreign) };
                prop_assert_eq!(r.map_err(|e| e.kind), Err(InvalidKind::NotInZone));
                prop_assert_eq!(zone.snapshot().invalid_frees, invalid_before + 1);
            }
            Op::FreeStack => {
                let mut x = 0u64;
                let p = NonNull::from(&mut x).cast::<u8>();
                // SAFETY: not an item: must be refused.
                let r = unsafe { zone.free(p) };
                prop_assert_eq!(r.map_err(|e| e.kind), Err(InvalidKind::NotInZone));
            }
            Op::FreeMisaligned(i, d) => {
                if order.is_empty() {
                    continue;
                }
                let a = order[i % order.len()];
                let d = d % isz;
                if d == 0 {
                    continue;
                }
                let p = NonNull::new((a + d) as *mut u8).unwrap();
                // SAFETY: inside a live item but not its start: must be refused.
                let r = unsafe { zone.free(p) };
                prop_assert_eq!(r.map_err(|e| e.kind), Err(InvalidKind::Misaligned));
                prop_assert_eq!(zone.snapshot().invalid_frees, invalid_before + 1);
            }
            Op::DoubleFree => {
                // A double free is only defined behaviour to try where the zone promises to catch
                // it without applying it: checked mode (at once), or a NOBUCKET zone (every free
                // reaches the slab, which refuses an item that is already free).
                let Some(&a) = freed.last() else { continue };
                if !(cfg.checked || cfg.nobucket) || live.contains_key(&a) {
                    continue;
                }
                let p = NonNull::new(a as *mut u8).unwrap();
                // SAFETY: `a` was an item of this zone, already freed; the zone promises (checked or
                // NOBUCKET, tested above) to refuse it without touching memory it does not own.
                let r = unsafe { zone.free(p) };
                if cfg.checked {
                    prop_assert_eq!(r.map_err(|e| e.kind), Err(InvalidKind::DoubleFree));
                } else {
                    prop_assert!(r.is_ok(), "late-detected double free returns Ok: {:?}", r);
                }
                prop_assert_eq!(
                    zone.snapshot().invalid_frees,
                    invalid_before + 1,
                    "double free not counted"
                );
            }
            Op::Reclaim(req) => {
                zone.reclaim(req);
            }
            Op::ReclaimAll(req) => {
                ebbtide_core::reclaim::reclaim_all(req);
            }
            Op::Periodic => {
                now += 1_000_000_000;
                zone.periodic(now);
            }
            Op::Squeeze => {
                // A short window: it expires by itself, so nothing must be restored.
                ebbtide_core::reclaim::squeeze(200_000);
                let c = zone.validate().map_err(TestCaseError::fail)?;
                prop_assert_eq!((c.pcpu, c.depot), (0, 0), "squeeze left items cached");
            }
            Op::Buckets(on) => {
                ebbtide_core::reclaim::set_buckets_enabled(on);
                buckets_on = on;
            }
        }

        let c = zone.validate().map_err(TestCaseError::fail)?;
        prop_assert_eq!(
            c.items_mapped,
            c.used + c.pcpu + c.depot + c.free_in_slabs,
            "step {} ({:?}): counting equation broken: {:?}",
            step,
            op,
            c
        );
        prop_assert_eq!(
            c.used,
            live.len(),
            "step {} ({:?}): used != model",
            step,
            op
        );
        if cfg.nobucket || !buckets_on {
            prop_assert_eq!(
                (c.pcpu, c.depot),
                (0, 0),
                "step {} ({:?}): cached",
                step,
                op
            );
        }
        match op {
            Op::Reclaim(Request::Drain) | Op::ReclaimAll(Request::Drain) => {
                prop_assert_eq!(c.depot, 0, "Drain left the depot non-empty")
            }
            Op::Reclaim(Request::DrainCpu) | Op::ReclaimAll(Request::DrainCpu) => {
                prop_assert_eq!((c.pcpu, c.depot), (0, 0), "DrainCpu left items cached")
            }
            _ => {}
        }
        if check_all {
            for (&a, &tag) in &live {
                intact(NonNull::new(a as *mut u8).unwrap(), isz, tag)
                    .map_err(TestCaseError::fail)?;
            }
        }
    }

    // Free everything, drain, and the zone must give every slab back and be destroyable.
    for (a, tag) in live.drain() {
        let p = NonNull::new(a as *mut u8).unwrap();
        intact(p, isz, tag).map_err(TestCaseError::fail)?;
        // SAFETY: live item, freed once.
        unsafe { zone.free(p) }.map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    ebbtide_core::reclaim::set_buckets_enabled(true);
    zone.reclaim(Request::DrainCpu);
    let c = zone.validate().map_err(TestCaseError::fail)?;
    prop_assert_eq!(
        (c.used, c.pcpu, c.depot, c.items_mapped, c.free_in_slabs),
        (0, 0, 0, 0, 0),
        "after freeing all and DrainCpu: {:?}",
        c
    );
    prop_assert_eq!(zone.snapshot().mapped_bytes, 0);
    prop_assert!(zone.destroy().is_ok(), "empty zone refused destruction");
    // SAFETY: allocated from foreign_zone above, freed once.
    unsafe { foreign_zone.free(foreign) }.unwrap();
    prop_assert!(foreign_zone.destroy().is_ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn zone_matches_shadow_model(cfg in config(), ops in prop::collection::vec(op(), 1..160)) {
        let _turn = crate::serial::turn(module_path!());
        let _g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
        run_case(cfg, &ops)?;
    }
}

/// A deterministic long run: many allocations across bucket boundaries, interleaved with every
/// reclaim kind, to reach the depot's cap logic and slab turnover that short random cases rarely
/// reach.
#[test]
fn long_deterministic_sequence() {
    let _turn = crate::serial::turn(module_path!());
    let _g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut ops = Vec::new();
    for round in 0..40usize {
        ops.push(Op::Alloc(40));
        ops.push(Op::Alloc(40));
        for k in 0..50 {
            ops.push(Op::Free(round * 7 + k * 13));
        }
        match round % 5 {
            0 => ops.push(Op::Reclaim(Request::Trim)),
            1 => ops.push(Op::Periodic),
            2 => ops.push(Op::Reclaim(Request::Drain)),
            3 => ops.push(Op::ReclaimAll(Request::DrainCpu)),
            _ => ops.push(Op::Periodic),
        }
    }
    for size in [8, 100, 4096] {
        for (checked, nobucket) in [(false, false), (true, false), (false, true)] {
            run_case(
                Config {
                    size,
                    checked,
                    nobucket,
                },
                &ops,
            )
            .unwrap();
        }
    }
}
