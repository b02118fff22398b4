//! The resize pass: per-CPU capacity moved to where the misses are, within the per-CPU budget
//! (the policy is `sizing.rs`; this file reads the counters, applies it, and sets the caps).
//!
//! One CPU at a time, over every zone: read each stack's misses since the last pass and its
//! grant, plan, give back, grow, store the new grants and caps; then, if a stack now holds more
//! than its cap, stop it, fence its CPU and move the excess to the slabs, so what the caches hold at rest stays within the budget. Runs on the
//! reclaim thread with the registry locked, as the one reclaim in progress; never on an
//! allocation path.

use super::*;
use crate::sizing::{self, Stack};

/// What a resize pass did (summed over every CPU and zone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResizeReport {
    /// Slots granted to stacks that missed.
    pub grown_slots: u64,
    /// Slots taken back (from stacks that stopped missing, or because a CPU was over budget).
    pub taken_slots: u64,
    /// Items moved from stacks above their new cap to the slabs.
    pub trimmed_items: u64,
    /// Bytes given back to the OS by that trim.
    pub released_bytes: u64,
}

impl ZoneInner {
    /// This stack as the policy sees it (`misses`: those of the pass being planned).
    fn sizing_stack(&self, cpu: usize, misses: u64) -> Stack {
        let d = self.pcpu.demand(cpu);
        Stack {
            floor: self.bucket_target_cap().min(self.pcpu.storage),
            grant: d.grant.load(Ordering::Relaxed),
            storage: self.pcpu.storage,
            step: self.bucket_size.load(Ordering::Relaxed).max(1),
            item_size: self.item_size as u64,
            misses,
            last_miss_ns: d.last_miss_ns.load(Ordering::Relaxed),
            grown: d.interval_grown.load(Ordering::Relaxed),
            one_way: sizing::one_way(misses, d.interval_under.load(Ordering::Relaxed) as u64),
        }
    }

    /// A miss on this CPU's stack (slow path, caching on): grow the stack at once by one bucket
    /// if its CPU's room holds it (`sizing::grow_at_miss`). The caller's `sync_cap` then opens
    /// the stack to the new capacity. Returns whether it grew.
    pub(super) fn grow_at_miss(&self) -> bool {
        let cpu = self.pcpu.this_cpu();
        let d = self.pcpu.demand(cpu);
        let s = self.sizing_stack(cpu, 0);
        // Underflows since the last pass and since this stack last grew at a miss (the low 32
        // bits suffice for "any"): growth follows alternations, one bucket per overflow that
        // comes after an underflow. "Since the last pass" alone is not enough: a stack that
        // underflowed once (one early allocation on a consumer's CPU) would grow at every
        // overflow until the next pass, to its storage, holding idle blocks
        // (docs/design/pcpu-growth.md). Relaxed loads: the counters are statistics and this
        // heuristic's marks (`pcpu::Demand`), ordering nothing else; a stale value only delays
        // or allows one bucket's growth, which the next pass accounts for.
        let u = d.underflows.load(Ordering::Relaxed) as u32;
        let since_pass = u.wrapping_sub(d.under_seen.load(Ordering::Relaxed)) > 0;
        let since_growth = u != d.under_at_grow.load(Ordering::Relaxed);
        let (slots, bytes) = sizing::grow_at_miss(&s, since_pass && since_growth);
        if slots > 0 && sizing::take_room(cpu, bytes) {
            // Relaxed: see `pcpu::Demand` (a pass storing the grant meanwhile wins); the mark
            // is only this heuristic's, written by the CPU's own slow path.
            d.grant.fetch_add(slots, Ordering::Relaxed);
            d.grown.fetch_add(slots, Ordering::Relaxed);
            d.under_at_grow.store(u, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Does the policy size this zone's stacks? Not while caching is off for it (NOBUCKET,
    /// buckets disabled, squeeze, limit sleepers): its caps are 0 and its misses are not counted.
    fn sized(&self) -> bool {
        self.bucket_target_cap() > 0
    }
}

/// One resize pass over every zone (registry locked, inside `gate::exclusive`), at `now_ns`
/// with a per-CPU budget of `budget` bytes and stacks quiet after `quiet_ns` without a miss.
pub(crate) fn resize_locked(
    reg: &crate::registry::Locked,
    now_ns: u64,
    budget: u64,
    quiet_ns: u64,
) -> ResizeReport {
    let mut rep = ResizeReport::default();
    // Where the trimmed items' emptied slabs go: decided once for the pass, from the process
    // state now.
    let mut d = Disposal::current();
    let ncpu = os::cpu_count();
    let mut buf = [ptr::null_mut::<u8>(); STACK_BUF];
    for cpu in 0..ncpu {
        // 1. Read the misses of the interval (kept in `interval_misses` for step 2 and the
        //    statistics), and sum what this CPU grants, wants and could take back.
        let (mut used, mut need, mut quiet_half) = (0u64, 0u64, 0u64);
        reg.for_each(|z: &ZoneInner| {
            if cpu >= z.pcpu.ncpu() || !z.sized() || !z.pcpu.in_use(cpu) {
                return;
            }
            let d = z.pcpu.demand(cpu);
            let under = d.underflows.load(Ordering::Relaxed);
            let total = under + d.overflows.load(Ordering::Relaxed);
            let misses = total.wrapping_sub(d.seen.swap(total, Ordering::Relaxed));
            d.interval_misses.store(misses, Ordering::Relaxed);
            d.interval_grown
                .store(d.grown.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            d.interval_under.store(
                (under as u32).wrapping_sub(d.under_seen.swap(under as u32, Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            let s = z.sizing_stack(cpu, misses);
            used += s.bytes();
            need += sizing::wanted(&s) as u64 * s.item_size;
            if sizing::is_quiet(&s, now_ns, quiet_ns) {
                quiet_half += sizing::quiet_half_slots(&s) as u64 * s.item_size;
            }
        });
        let plan = sizing::plan(used, need, quiet_half, budget);
        // 2. Give back, then grow, in registry order; store grants and caps.
        let (mut from_quiet, mut from_all, mut for_growth) =
            (plan.from_quiet, plan.from_all, plan.for_growth);
        let mut excess = false;
        let mut used_after = 0u64;
        reg.for_each(|z: &ZoneInner| {
            if cpu >= z.pcpu.ncpu() || !z.sized() || !z.pcpu.in_use(cpu) {
                return;
            }
            let d = z.pcpu.demand(cpu);
            let mut s = z.sizing_stack(cpu, d.interval_misses.load(Ordering::Relaxed));
            let before = s.grant;
            if sizing::is_quiet(&s, now_ns, quiet_ns) {
                let (g, b) = sizing::give_back(&s, from_quiet, sizing::quiet_half_slots(&s));
                s.grant = g;
                from_quiet = from_quiet.saturating_sub(b);
            }
            let (g, b) = sizing::give_back(&s, from_all, u32::MAX);
            s.grant = g;
            from_all = from_all.saturating_sub(b);
            let (g, b) = sizing::grow(&s, for_growth);
            s.grant = g;
            for_growth -= b;
            if s.grant >= before {
                rep.grown_slots += (s.grant - before) as u64;
            } else {
                rep.taken_slots += (before - s.grant) as u64;
            }
            d.grant.store(s.grant, Ordering::Relaxed);
            used_after += s.bytes();
            d.last_miss_ns
                .store(sizing::last_miss_after(&s, now_ns), Ordering::Relaxed);
            let cap = z.cap_for(cpu);
            let h = z.pcpu.header(cpu);
            let g = lock_header(h);
            // (A stack is stopped only while its drainer holds this lock: never here.)
            z.pcpu.set_cap(&g, h, cap);
            drop(g);
            if z.pcpu.count(cpu) > cap as usize {
                excess = true;
            }
        });
        // What misses may take at once until the next pass (`sizing::grow_at_miss`).
        sizing::set_room(cpu, budget, used_after);
        if !excess {
            continue;
        }
        // 3. Stacks above their cap: stop, fence, move the excess to the slabs. (One fence per
        //    such stack: the pass rarely lowers a cap below what a stack holds — a CPU over budget,
        //    a quiet stack giving back.)
        reg.for_each(|z: &ZoneInner| {
            if cpu >= z.pcpu.ncpu() || z.pcpu.count(cpu) <= z.cap_for(cpu) as usize {
                return;
            }
            let h = z.pcpu.header(cpu);
            let _g = lock_header(h);
            z.pcpu.stop_fenced(cpu, h);
            let cap = z.cap_for(cpu);
            let mut n = 0;
            z.pcpu.take_stopped_above(cpu, h, cap as usize, cap, |p| {
                buf[n] = p;
                n += 1;
            });
            if n > 0 {
                rep.trimmed_items += n as u64;
                rep.released_bytes += z.return_to_keg(&buf[..n], &mut d) as u64;
            }
        });
    }
    rep
}

/// Room for one full per-CPU stack.
const STACK_BUF: usize = crate::pcpu::STORAGE_MAX as usize;
