//! Per-CPU capacity that follows demand, as pure functions of counters and the time.
//!
//! Every (zone, CPU) stack has a *floor* — UMA's alloc + free bucket pair, `2 × bucket_size`,
//! which contention grows and pressure steps down and halves — and a *grant* of slots above it
//! that this policy moves (tcmalloc's per-CPU cache resizing, `cpu_cache.cc`: capacity grows
//! where the misses are, inside a per-CPU byte budget shared by all size classes, and is taken
//! back from classes that stopped missing). A *miss* is a trip of the slow path past this CPU's
//! stack while caching is on: an allocation that found the stack empty (underflow) or a free
//! that found it full (overflow). The slow path counts them (plain counters in the
//! zone's per-CPU `pcpu::Demand` line); the reclaim thread's resize pass
//! (`reclaim::resize_pcpu`, every `pool_shrink_interval_ms`) reads the counters and applies the
//! functions below, one CPU at a time over every zone:
//!
//! 1. [`wanted`]: a stack that missed `m` times since the last pass wants `m` more buckets'
//!    worth of slots (one bucket per miss, tcmalloc's "grow by a batch per miss"), up to its
//!    storage — counting only the misses capacity can avoid. Those are the misses of an
//!    alternation: a stack that only overflows (on a CPU that frees what another allocates) or
//!    only underflows (one that allocates what another frees) misses once per bucket whatever
//!    its capacity, since each miss moves a whole bucket to or from the depot. So of `u`
//!    underflows and `o` overflows the pass counts `2 × min(u, o)` ([`Stack::one_way`] is the
//!    rest), and a free grows its stack at once only if the stack also underflowed since the
//!    last pass and since it last grew that way (one bucket per alternation). (The malloc's `prodcons`: every miss one way; its stacks grew by misses to the
//!    whole budget on the consumer's CPU, all of it idle, about 1.3 MiB of its 6 MiB peak.)
//! 2. [`plan`]: with `used` bytes granted on this CPU (grants above the floors, every zone), `need`
//!    bytes wanted and `budget` the per-CPU budget (`pcpu_budget_bytes`): how many bytes the
//!    stacks that stopped missing ([`is_quiet`]: no miss for `quiet_ns`) give back, and how many
//!    every stack gives back when the CPU is over budget (the budget lowered, floors grown).
//! 3. [`give_back`] then [`grow`]: each quiet stack gives back at most half its grant per pass
//!    (capacity leaves gradually, so a stack that pauses briefly keeps most of it), then each
//!    missing stack takes what it wants from what is free, in registry order.
//!
//! **Growth at the miss.** Between passes a stack whose free finds it full (an overflow) after
//! an underflow also grows at once, by one bucket ([`grow_at_miss`]), out of its CPU's *room*:
//! the part of the budget the last pass left unallocated, taken with one atomic subtraction on
//! the slow path (tcmalloc grows a class's per-CPU capacity the same way, on the miss, from the
//! CPU's unallocated capacity), so a stack that misses need not wait for the next pass (up to
//! `pool_shrink_interval_ms`). Only overflows grow at once: an allocation that finds the stack
//! empty fetches a bucket whatever the capacity, so growing there only spends the room. And an
//! overflow grows the stack only if an underflow came between it and the stack's last growth
//! (one bucket per alternation): a stack that misses one way only (a consumer's CPU) misses
//! once per bucket whatever its capacity, so growing it would only park the budget there. The
//! pass counts the slots misses took as already given ([`Stack::grown`]), so a miss grows a
//! stack once, not twice, and recomputes the room (`budget − Σ grant bytes`); before a CPU's
//! first pass the room is the whole budget. The measurements: docs/design/pcpu-growth.md.
//!
//! **The budget is what demand adds above the floors** (`Σ grant × item size`, not
//! `Σ (floor + grant) × item size`): in the malloc, whose ~100 size classes each keep UMA's
//! bucket pair (8–32 KiB of items a class), the floors alone exceed the 1.5 MiB default, so
//! counting them would leave no room for any stack to grow. tcmalloc's budget is its per-CPU
//! capacity, but its classes start near zero, where these start at UMA's pair.
//!
//! At rest, every CPU's `Σ grant × item size` is within the budget; the floors come on top
//! (UMA's bucket pair per zone, never cut by the budget); a stack holding more than its new
//! capacity is trimmed down to it by the same pass. Pressure
//! and idleness act on the grant directly: Low (TRIM) takes a quarter back (at least a bucket), a
//! DRAIN_CPU halves it, an idle stack (no operation for a period) loses all of it, and while
//! caching is off (Critical, a squeeze window) the capacity is 0 whatever the grant.

use core::sync::atomic::{AtomicU64, Ordering};

/// Default per-CPU budget: tcmalloc's classic `kMaxCpuCacheSize` (1.5 MiB per CPU).
pub const DEFAULT_BUDGET_BYTES: u64 = 1536 * 1024;

/// Default time without a miss after which a stack counts as having stopped missing.
pub const DEFAULT_QUIET_NS: u64 = 1_000_000_000;

/// Pages one allocation miss of a page pool imports at most (onto the CPU's stack, within its
/// room): the kernel's per-CPU page lists refill `pcp->batch` pages at once (63 on large zones).
pub const POOL_REFILL_BATCH: usize = 63;

/// Items an allocation miss of a page pool imports from its slabs: one for the caller plus what
/// the CPU's stack has `room` for, at most [`POOL_REFILL_BATCH`], at least the zone's bucket size
/// `bucket` (what any other zone imports).
pub fn pool_refill(bucket: usize, room: usize) -> usize {
    room.saturating_add(1).min(POOL_REFILL_BATCH).max(bucket)
}

static BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_BUDGET_BYTES);

/// The per-CPU budget in bytes (the runtime's `pcpu_budget_bytes`).
pub fn budget() -> u64 {
    BUDGET.load(Ordering::Relaxed)
}

/// Sets the per-CPU budget; the next resize pass applies it (0: no grant above the floors).
pub fn set_budget(bytes: u64) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

/// One (zone, CPU) stack as the policy sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    /// Slots the stack keeps whatever the budget (`2 × bucket_size`, at most `storage`).
    pub floor: u32,
    /// Slots granted above the floor.
    pub grant: u32,
    /// Item slots the stack has (its largest capacity).
    pub storage: u32,
    /// The zone's bucket size: the growth per miss.
    pub step: u32,
    /// Bytes per item.
    pub item_size: u64,
    /// Misses (underflows + overflows) since the last pass.
    pub misses: u64,
    /// When the last pass saw a miss (0: never).
    pub last_miss_ns: u64,
    /// Slots already granted at misses since the last pass ([`grow_at_miss`]).
    pub grown: u32,
    /// Of `misses`, those no capacity avoids: `|underflows − overflows|` (see the module docs).
    pub one_way: u64,
}

impl Stack {
    /// The capacity in slots: floor + grant, within storage.
    pub fn capacity(&self) -> u32 {
        self.floor.saturating_add(self.grant).min(self.storage)
    }

    /// The bytes this stack counts against its CPU's budget: its capacity above the floor.
    pub fn bytes(&self) -> u64 {
        (self.capacity() - self.floor.min(self.storage)) as u64 * self.item_size
    }
}

/// Slots the stack wants to grow by in this pass: one bucket per miss, less what its misses
/// already took at once ([`Stack::grown`]), up to its storage.
pub fn wanted(s: &Stack) -> u32 {
    let room = s.storage.saturating_sub(s.capacity());
    let want = s
        .misses
        .saturating_sub(s.one_way)
        .saturating_mul(s.step.max(1) as u64)
        .saturating_sub(s.grown as u64);
    want.min(room as u64) as u32
}

/// What a stack whose free just found it full asks at once of its CPU's room ([`take_room`],
/// which grants all of it or nothing: a partial bucket would only move the next miss closer):
/// one bucket's worth of slots (its step), within its storage, if the stack also
/// `underflowed` since the last pass and since it last grew at a miss (else the miss is one
/// way: see the module docs). Returns
/// the slots and their bytes; `(0, 0)` when it does not grow now.
pub fn grow_at_miss(s: &Stack, underflowed: bool) -> (u32, u64) {
    let slots = s.step.max(1).min(s.storage.saturating_sub(s.capacity()));
    if !underflowed || slots == 0 {
        return (0, 0);
    }
    (slots, slots as u64 * s.item_size)
}

/// Of `misses` of which `underflows` were underflows, those no capacity avoids.
pub fn one_way(misses: u64, underflows: u64) -> u64 {
    let overflows = misses.saturating_sub(underflows);
    underflows.abs_diff(overflows)
}

/// CPUs whose room is kept (`ROOM`); a CPU above them grows only in the passes.
pub const ROOM_CPUS: usize = 1024;

/// Per CPU, the room plus one (0: no pass has run on that CPU yet, the room is the whole
/// budget). Written by the passes (`set_room`), taken from by the slow paths (`take_room`).
/// Zero-initialised in `.bss`: a CPU that never runs a zone never touches its line's page.
static ROOM: [AtomicU64; ROOM_CPUS] = [const { AtomicU64::new(0) }; ROOM_CPUS];

/// The room a `ROOM` entry stands for (see there).
fn room_of(v: u64) -> u64 {
    if v == 0 {
        budget()
    } else {
        v - 1
    }
}

/// Takes `bytes` from `cpu`'s room if it holds them all. Relaxed: a budget counter with no data
/// behind it; racing takers are serialised by the RMW, and the next pass recomputes the room
/// from the grants whatever happened meanwhile.
pub fn take_room(cpu: usize, bytes: u64) -> bool {
    let Some(r) = ROOM.get(cpu) else {
        return false;
    };
    r.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        room_of(v).checked_sub(bytes).map(|left| left + 1)
    })
    .is_ok()
}

/// The room `cpu` has now (what [`take_room`] takes from).
pub fn room(cpu: usize) -> u64 {
    ROOM.get(cpu)
        .map_or(0, |r| room_of(r.load(Ordering::Relaxed)))
}

/// Sets `cpu`'s room after a pass: the budget less what that CPU's stacks count against it.
pub fn set_room(cpu: usize, budget: u64, used: u64) {
    if let Some(r) = ROOM.get(cpu) {
        r.store(budget.saturating_sub(used) + 1, Ordering::Relaxed);
    }
}

/// Has the stack stopped missing: no miss seen for `quiet_ns` at `now_ns`? A stack that missed
/// in this pass is never quiet; one that never missed is.
pub fn is_quiet(s: &Stack, now_ns: u64, quiet_ns: u64) -> bool {
    s.misses == 0 && now_ns.saturating_sub(s.last_miss_ns) >= quiet_ns
}

/// When the last miss was, after this pass (what the caller stores back).
pub fn last_miss_after(s: &Stack, now_ns: u64) -> u64 {
    if s.misses > 0 {
        now_ns
    } else {
        s.last_miss_ns
    }
}

/// What one CPU's pass does, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Bytes the quiet stacks give back (each at most half its grant, see [`give_back`]).
    pub from_quiet: u64,
    /// Bytes every stack gives back, quiet or not, because the CPU is over budget.
    pub from_all: u64,
    /// Bytes the missing stacks may take.
    pub for_growth: u64,
}

/// The plan of one CPU's pass: `used` bytes granted now (every zone's floor + grant on this
/// CPU), `need` bytes the missing stacks want, `quiet_half` bytes the quiet stacks could give
/// back this pass (half of each one's grant, rounded up), `budget` the per-CPU budget.
pub fn plan(used: u64, need: u64, quiet_half: u64, budget: u64) -> Plan {
    if used > budget {
        // Over budget: quiet stacks first, then everyone; no growth.
        let over = used - budget;
        let from_quiet = over.min(quiet_half);
        return Plan {
            from_quiet,
            from_all: over - from_quiet,
            for_growth: 0,
        };
    }
    let free = budget - used;
    if need <= free {
        return Plan {
            from_quiet: 0,
            from_all: 0,
            for_growth: need,
        };
    }
    // Take capacity back from the stacks that stopped missing, as much as the growth needs.
    let from_quiet = (need - free).min(quiet_half);
    Plan {
        from_quiet,
        from_all: 0,
        for_growth: free + from_quiet,
    }
}

/// Slots a quiet stack may give back in one pass: half its grant, rounded up.
pub fn quiet_half_slots(s: &Stack) -> u32 {
    s.grant.div_ceil(2)
}

/// Takes up to `bytes` back from a stack, at most `max_slots` slots (whole items, rounded up so
/// the CPU ends within budget). Returns the new grant and the bytes taken.
pub fn give_back(s: &Stack, bytes: u64, max_slots: u32) -> (u32, u64) {
    if bytes == 0 || s.grant == 0 || s.item_size == 0 {
        return (s.grant, 0);
    }
    let slots = bytes
        .div_ceil(s.item_size)
        .min(max_slots.min(s.grant) as u64) as u32;
    // Only slots that count (the capacity is capped by storage) free budget bytes.
    let before = s.bytes();
    let after = Stack {
        grant: s.grant - slots,
        ..*s
    };
    (s.grant - slots, before - after.bytes())
}

/// Grows a missing stack by what it wants, within `free` bytes. Returns the new grant and the
/// bytes taken.
pub fn grow(s: &Stack, free: u64) -> (u32, u64) {
    if s.item_size == 0 {
        return (s.grant, 0);
    }
    let slots = (wanted(s) as u64).min(free / s.item_size) as u32;
    (s.grant + slots, slots as u64 * s.item_size)
}

/// The grant after Low pressure (a TRIM): a quarter less, and at least one bucket's worth (UMA
/// steps the bucket size down by one). One bucket alone was too little once stacks grew at
/// their misses: the malloc's classes of 640 B–1 KiB kept 180–270 items each (grants of 20–30
/// buckets) through six Low events, 2.8–4.5 MB of a small redis left cached after a neighbour
/// needed the memory (`ebbtide-experiments/tests/all/malloc_smoke.rs` then failed now and then). A quarter per event
/// leaves a sixth of a grant after six.
pub fn after_trim(grant: u32, step: u32) -> u32 {
    grant.saturating_sub(step.max(1).max(grant.div_ceil(4)))
}

/// The grant before a per-CPU drain (DRAIN_CPU): halved, as UMA halves the bucket size.
pub fn after_drain_cpu(grant: u32) -> u32 {
    grant / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_refill_is_the_room_plus_one_within_the_batch_and_never_below_a_bucket() {
        assert_eq!(pool_refill(2, 0), 2);
        assert_eq!(pool_refill(2, 4), 5);
        assert_eq!(pool_refill(2, 62), POOL_REFILL_BATCH);
        assert_eq!(pool_refill(2, 500), POOL_REFILL_BATCH);
        assert_eq!(pool_refill(2, usize::MAX), POOL_REFILL_BATCH);
        assert_eq!(pool_refill(100, 500), 100, "a grown bucket is not cut");
    }

    const MS: u64 = 1_000_000;

    fn stack(floor: u32, grant: u32, misses: u64, item: u64) -> Stack {
        Stack {
            floor,
            grant,
            storage: 504,
            step: 62,
            item_size: item,
            misses,
            last_miss_ns: 0,
            grown: 0,
            one_way: 0,
        }
    }

    #[test]
    fn a_miss_grows_by_one_bucket_within_storage_and_room() {
        let s = stack(124, 0, 0, 256);
        assert_eq!(grow_at_miss(&s, true), (62, 62 * 256));
        // Not a partial bucket: the room must hold all of it. (A CPU slot of its own: no zone
        // of this test binary runs there, nor does another test use it.)
        let cpu = ROOM_CPUS - 2;
        set_room(cpu, 62 * 256 - 1, 0);
        assert!(!take_room(cpu, grow_at_miss(&s, true).1));
        assert_eq!(room(cpu), 62 * 256 - 1, "nothing taken");
        // Near the storage: what is left of it.
        let s = stack(124, 504 - 124 - 10, 0, 256);
        assert_eq!(grow_at_miss(&s, true), (10, 10 * 256));
        let s = stack(124, 504 - 124, 0, 256);
        assert_eq!(grow_at_miss(&s, true), (0, 0));
        // A stack that only overflows (frees what another CPU allocates) does not grow.
        assert_eq!(grow_at_miss(&stack(124, 0, 0, 256), false), (0, 0));
    }

    #[test]
    fn only_the_misses_of_an_alternation_count() {
        assert_eq!(one_way(10, 5), 0);
        assert_eq!(one_way(10, 10), 10, "only underflows");
        assert_eq!(one_way(10, 0), 10, "only overflows");
        assert_eq!(one_way(10, 2), 6);
        let mut s = stack(124, 0, 10, 256);
        s.one_way = one_way(10, 10);
        assert_eq!(
            wanted(&s),
            0,
            "a producer's stack: capacity avoids none of its misses"
        );
        s.one_way = one_way(10, 2);
        assert_eq!(wanted(&s), 4 * 62, "two alternations: four misses");
    }

    #[test]
    fn the_pass_wants_only_what_misses_did_not_already_take() {
        let mut s = stack(124, 62, 3, 256);
        assert_eq!(wanted(&s), 3 * 62);
        s.grown = 62;
        assert_eq!(wanted(&s), 2 * 62);
        s.grown = 10 * 62;
        assert_eq!(wanted(&s), 0);
    }

    #[test]
    fn room_is_the_budget_until_a_pass_then_what_it_left() {
        // The last CPU slot: no zone of this test binary runs there.
        let cpu = ROOM_CPUS - 1;
        assert_eq!(room(cpu), budget());
        assert!(take_room(cpu, 1000));
        assert_eq!(room(cpu), budget() - 1000);
        set_room(cpu, 10_000, 7_000);
        assert_eq!(room(cpu), 3_000);
        assert!(!take_room(cpu, 3_001));
        assert!(take_room(cpu, 3_000));
        assert_eq!(room(cpu), 0);
        assert!(!take_room(cpu, 1));
        // Over budget: no room, not a wrapped one.
        set_room(cpu, 10_000, 12_000);
        assert_eq!(room(cpu), 0);
        // CPUs beyond the table never grow between passes.
        assert_eq!(room(ROOM_CPUS), 0);
        assert!(!take_room(ROOM_CPUS, 1));
    }

    /// One CPU's pass over `zs` at `now`, as the resize pass applies the functions.
    fn pass(zs: &mut [Stack], now: u64, budget: u64) {
        let used: u64 = zs.iter().map(|s| s.bytes()).sum();
        let need: u64 = zs.iter().map(|s| wanted(s) as u64 * s.item_size).sum();
        let quiet: u64 = zs
            .iter()
            .filter(|s| is_quiet(s, now, DEFAULT_QUIET_NS))
            .map(|s| quiet_half_slots(s) as u64 * s.item_size)
            .sum();
        let p = plan(used, need, quiet, budget);
        let mut q = p.from_quiet;
        for s in zs.iter_mut() {
            if is_quiet(s, now, DEFAULT_QUIET_NS) {
                let (g, b) = give_back(s, q, quiet_half_slots(s));
                s.grant = g;
                q = q.saturating_sub(b);
            }
        }
        let mut a = p.from_all;
        for s in zs.iter_mut() {
            let (g, b) = give_back(s, a, u32::MAX);
            s.grant = g;
            a = a.saturating_sub(b);
        }
        let mut f = p.for_growth;
        for s in zs.iter_mut() {
            let (g, b) = grow(s, f);
            s.grant = g;
            f -= b;
        }
        for s in zs.iter_mut() {
            s.last_miss_ns = last_miss_after(s, now);
            s.misses = 0;
        }
    }

    #[test]
    fn grows_one_bucket_per_miss_up_to_storage() {
        let s = stack(124, 0, 1, 256);
        assert_eq!(wanted(&s), 62);
        assert_eq!(wanted(&stack(124, 0, 3, 256)), 186);
        assert_eq!(
            wanted(&stack(124, 0, 100, 256)),
            504 - 124,
            "storage bounds growth"
        );
        assert_eq!(
            wanted(&stack(504, 0, 9, 64)),
            0,
            "a full-storage floor cannot grow"
        );
        assert_eq!(wanted(&stack(124, 0, 0, 256)), 0, "no miss, no growth");
        let (g, b) = grow(&stack(124, 0, 2, 256), u64::MAX);
        assert_eq!((g, b), (124, 124 * 256));
    }

    #[test]
    fn growth_stays_within_the_budget() {
        // The budget is above the floors: 32 KiB = 128 slots of 256 B on top of the 124.
        let mut zs = [stack(124, 0, 100, 256)];
        pass(&mut zs, MS, 32 * 1024);
        assert_eq!(zs[0].grant, 128);
        assert_eq!(zs[0].bytes(), 32 * 1024);
        assert_eq!(zs[0].capacity(), 124 + 128);
        // More misses: no more room.
        zs[0].misses = 50;
        pass(&mut zs, 2 * MS, 32 * 1024);
        assert_eq!(zs[0].grant, 128);
    }

    #[test]
    fn the_floors_do_not_count_against_the_budget() {
        // Forty zones whose floors (124 × 256 B each, 1.2 MiB together) are above a 1 MiB
        // budget: one that misses still grows.
        let mut zs = [stack(124, 0, 0, 256); 40];
        zs[7].misses = 4;
        pass(&mut zs, MS, 1 << 20);
        assert_eq!(zs[7].grant, 4 * 62);
        assert_eq!(zs[0].bytes(), 0, "a floor counts nothing");
    }

    #[test]
    fn quiet_stacks_give_capacity_to_missing_ones_over_time() {
        // Zone A grew to its storage, then stopped missing; zone B starts missing. The budget
        // holds A's 380 slots of grant and 190 more.
        let budget = 570 * 256;
        let mut zs = [stack(124, 380, 0, 256), stack(124, 0, 0, 256)];
        zs[0].last_miss_ns = 10 * MS;
        // 0.5 s after A's last miss it is not quiet yet: B gets only the free budget.
        zs[1].misses = 10;
        pass(&mut zs, 510 * MS, budget);
        let free_slots = (budget - 380 * 256) / 256;
        assert_eq!(free_slots, 190);
        assert_eq!(zs[0].grant, 380, "a recently missing stack keeps its grant");
        assert_eq!(zs[1].grant as u64, free_slots);
        // 1.01 s after: A is quiet and gives back (at most half its grant per pass) what B needs.
        zs[1].misses = 10;
        pass(&mut zs, 1010 * MS, budget);
        assert_eq!(zs[0].grant, 190, "half of the grant in one pass");
        assert_eq!(zs[1].grant as u64, free_slots + 190);
        let used: u64 = zs.iter().map(|s| s.bytes()).sum();
        assert!(used <= budget);
    }

    #[test]
    fn quiet_stacks_keep_their_grant_when_nobody_needs_it() {
        let mut zs = [stack(124, 200, 0, 256), stack(124, 0, 0, 256)];
        pass(&mut zs, 60_000 * MS, 1 << 20);
        assert_eq!(
            zs[0].grant, 200,
            "no missing stack, budget not exceeded: nothing moves"
        );
    }

    #[test]
    fn over_budget_takes_back_from_quiet_first_then_everyone() {
        // The budget was lowered to 30 KiB with 2 × 100 × 256 B = 50 KiB granted.
        let mut zs = [stack(124, 100, 0, 256), stack(124, 100, 0, 256)];
        zs[1].last_miss_ns = 5_000 * MS; // B missed recently
        pass(&mut zs, 5_100 * MS, 30 * 1024);
        let used: u64 = zs.iter().map(|s| s.bytes()).sum();
        assert!(used <= 30 * 1024, "{used}");
        assert!(
            zs[0].grant < zs[1].grant,
            "the quiet stack gave back first: {zs:?}"
        );
        // No budget: grants go to 0, floors stay.
        pass(&mut zs, 5_200 * MS, 0);
        assert_eq!((zs[0].grant, zs[1].grant), (0, 0));
        assert_eq!(zs[0].capacity(), 124);
    }

    #[test]
    fn plan_arithmetic() {
        assert_eq!(
            plan(100, 50, 0, 200),
            Plan {
                from_quiet: 0,
                from_all: 0,
                for_growth: 50
            }
        );
        assert_eq!(
            plan(180, 50, 40, 200),
            Plan {
                from_quiet: 30,
                from_all: 0,
                for_growth: 50
            }
        );
        assert_eq!(
            plan(180, 50, 10, 200),
            Plan {
                from_quiet: 10,
                from_all: 0,
                for_growth: 30
            }
        );
        assert_eq!(
            plan(300, 50, 40, 200),
            Plan {
                from_quiet: 40,
                from_all: 60,
                for_growth: 0
            }
        );
    }

    #[test]
    fn pressure_steps() {
        assert_eq!(
            after_trim(200, 62),
            138,
            "a bucket when it is more than a quarter"
        );
        assert_eq!(
            after_trim(200, 8),
            150,
            "a quarter when it is more than a bucket"
        );
        assert_eq!(after_trim(201, 8), 150, "the quarter rounded up");
        assert_eq!(after_trim(10, 62), 0);
        assert_eq!(after_trim(3, 0), 2, "at least one slot");
        let mut g = 200;
        for _ in 0..6 {
            g = after_trim(g, 8);
        }
        assert!(g <= 200 / 5, "six Low events leave less than a fifth: {g}");
        assert_eq!(after_drain_cpu(201), 100);
    }

    #[test]
    fn quiet_needs_the_whole_period_without_misses() {
        let mut s = stack(124, 10, 0, 256);
        s.last_miss_ns = 1_000 * MS;
        assert!(!is_quiet(&s, 1_999 * MS, DEFAULT_QUIET_NS));
        assert!(is_quiet(&s, 2_000 * MS, DEFAULT_QUIET_NS));
        s.misses = 1;
        assert!(!is_quiet(&s, 9_000 * MS, DEFAULT_QUIET_NS));
        assert_eq!(last_miss_after(&s, 9_000 * MS), 9_000 * MS);
    }
}
