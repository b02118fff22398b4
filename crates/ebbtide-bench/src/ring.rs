//! A bounded single-producer single-consumer ring of pointers (Lamport queue with cached
//! indices). Its cost is the same for every allocator in `cross2`.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

#[repr(align(128))]
struct Padded<T>(T);

pub struct Ring {
    slots: Box<[UnsafeCell<*mut u8>]>,
    mask: usize,
    /// Next slot the consumer reads (written by the consumer only).
    head: Padded<AtomicUsize>,
    /// Next slot the producer writes (written by the producer only).
    tail: Padded<AtomicUsize>,
}

// SAFETY: a slot is written by the producer only while the consumer cannot read it (tail has not
// been published past it) and read by the consumer only after the Release store of tail.
unsafe impl Sync for Ring {}
// SAFETY: the slots hold raw pointers the ring only moves between one producer and one consumer,
// under the same publication protocol that makes it Sync; nothing is tied to a thread.
unsafe impl Send for Ring {}

impl Ring {
    pub fn new(cap_pow2: usize) -> Ring {
        assert!(cap_pow2.is_power_of_two());
        Ring {
            slots: (0..cap_pow2)
                .map(|_| UnsafeCell::new(core::ptr::null_mut()))
                .collect(),
            mask: cap_pow2 - 1,
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }
}

/// Spin briefly, then give the CPU away: on a shared machine the other end may be descheduled,
/// and spinning for a whole time slice would measure the scheduler, not the allocator.
#[inline]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 256 {
        core::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// The producer end (use from one thread only).
pub struct Producer<'a> {
    r: &'a Ring,
    tail: usize,
    head_cache: usize,
}

/// The consumer end (use from one thread only).
pub struct Consumer<'a> {
    r: &'a Ring,
    head: usize,
    tail_cache: usize,
}

impl Ring {
    /// Splits into the two ends; the ring must be empty and not split elsewhere.
    pub fn split(&self) -> (Producer<'_>, Consumer<'_>) {
        let t = self.tail.0.load(Ordering::Relaxed);
        let h = self.head.0.load(Ordering::Relaxed);
        assert_eq!(t, h);
        (
            Producer {
                r: self,
                tail: t,
                head_cache: h,
            },
            Consumer {
                r: self,
                head: h,
                tail_cache: t,
            },
        )
    }
}

impl Producer<'_> {
    #[inline]
    pub fn push(&mut self, p: *mut u8) {
        let cap = self.r.mask + 1;
        let mut spins = 0u32;
        while self.tail - self.head_cache == cap {
            self.head_cache = self.r.head.0.load(Ordering::Acquire);
            if self.tail - self.head_cache == cap {
                backoff(&mut spins);
            }
        }
        // SAFETY: the slot is not visible to the consumer (see `Sync` above).
        unsafe { *self.r.slots[self.tail & self.r.mask].get() = p };
        self.tail += 1;
        self.r.tail.0.store(self.tail, Ordering::Release);
    }
}

impl Consumer<'_> {
    #[inline]
    pub fn pop(&mut self) -> *mut u8 {
        let mut spins = 0u32;
        while self.head == self.tail_cache {
            self.tail_cache = self.r.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                backoff(&mut spins);
            }
        }
        // SAFETY: the slot was published by the producer's Release store of tail.
        let p = unsafe { *self.r.slots[self.head & self.r.mask].get() };
        self.head += 1;
        self.r.head.0.store(self.head, Ordering::Release);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_every_item_in_order() {
        let r = Ring::new(8);
        let (mut p, mut c) = r.split();
        std::thread::scope(|s| {
            s.spawn(move || {
                for i in 1..=10_000usize {
                    p.push(i as *mut u8);
                }
            });
            for i in 1..=10_000usize {
                assert_eq!(c.pop() as usize, i);
            }
        });
    }
}
