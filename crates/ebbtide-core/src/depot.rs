//! The depot: a zone's list of full buckets behind one mutex, with its working-set estimate.
//!
//! Buckets are kept most-recently-used first: allocation takes the hottest bucket from the head,
//! trimming removes the coldest from the tail. The depot is capped (the zone's cap now,
//! `ZoneInner::depot_cap`: `ZoneOptions::depot_max_items`, UMA's `bucket_max`, bounded by reuse
//! for a zone that opted in); a bucket that would overflow it is refused and its items go to the
//! slabs.
//!
//! Lock order: zone depot lock → keg lock (never the other way).

use crate::bucket::Bucket;
use crate::wss::Wss;
use core::ptr::{self, NonNull};

/// The state behind the depot mutex.
pub(crate) struct DepotInner {
    head: *mut Bucket,
    tail: *mut Bucket,
    pub(crate) nbuckets: usize,
    pub(crate) wss: Wss,
}

// SAFETY: the buckets belong to the depot; they are only touched with its mutex held.
unsafe impl Send for DepotInner {}

impl DepotInner {
    pub(crate) fn new() -> DepotInner {
        DepotInner {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            nbuckets: 0,
            wss: Wss::default(),
        }
    }

    /// Puts a full bucket in at the head; `ws` as in [`Wss::insert`]. Gives the bucket back when
    /// the depot would hold more than `cap` items (the zone's cap now, `ZoneInner::depot_cap`).
    pub(crate) fn put(
        &mut self,
        b: NonNull<Bucket>,
        ws: bool,
        cap: u64,
    ) -> Result<(), NonNull<Bucket>> {
        let bp = b.as_ptr();
        // SAFETY: `b` is a live bucket handed to the depot.
        let n = unsafe { (*bp).count } as u64;
        if self.wss.nitems + n > cap {
            return Err(b);
        }
        // SAFETY: `bp` and the head (if any) are live buckets owned by the depot.
        unsafe {
            (*bp).prev = ptr::null_mut();
            (*bp).next = self.head;
            if self.head.is_null() {
                self.tail = bp;
            } else {
                (*self.head).prev = bp;
            }
        }
        self.head = bp;
        self.nbuckets += 1;
        self.wss.insert(n, ws);
        Ok(())
    }

    /// Takes the most recently put bucket (an allocation: demand, also when the depot is empty).
    pub(crate) fn take(&mut self) -> Option<NonNull<Bucket>> {
        let Some(b) = NonNull::new(self.head) else {
            self.wss.miss();
            return None;
        };
        // SAFETY: `b` is the live head bucket.
        unsafe {
            self.head = (*b.as_ptr()).next;
            if self.head.is_null() {
                self.tail = ptr::null_mut();
            } else {
                (*self.head).prev = ptr::null_mut();
            }
            self.nbuckets -= 1;
            self.wss.remove((*b.as_ptr()).count as u64);
        }
        Some(b)
    }

    /// Takes the least recently put bucket if the depot holds more than `target` items (a trim or
    /// drain: not demand, see [`Wss::reclaim`]).
    pub(crate) fn take_cold_above(&mut self, target: u64) -> Option<NonNull<Bucket>> {
        if self.wss.nitems <= target {
            return None;
        }
        let b = NonNull::new(self.tail)?;
        // SAFETY: `b` is the live tail bucket.
        unsafe {
            self.tail = (*b.as_ptr()).prev;
            if self.tail.is_null() {
                self.head = ptr::null_mut();
            } else {
                (*self.tail).next = ptr::null_mut();
            }
            self.nbuckets -= 1;
            self.wss.reclaim((*b.as_ptr()).count as u64);
        }
        Some(b)
    }

    /// Is `item` in one of the depot's buckets? (A suspected double free's confirmation,
    /// `ZoneInner::free_suspect`; walks every bucket.)
    pub(crate) fn contains(&self, item: *mut u8) -> bool {
        let mut b = self.head;
        while !b.is_null() {
            // SAFETY: buckets on the list are live and full up to their count; the caller
            // holds the depot lock (`&self` of the locked depot).
            unsafe {
                let n = (*b).count as usize;
                if Bucket::slots(NonNull::new_unchecked(b))[..n].contains(&item) {
                    return true;
                }
                b = (*b).next;
            }
        }
        false
    }

    /// Recounts the buckets and checks the counters and the estimator bounds.
    pub(crate) fn validate(&self) -> Result<u64, String> {
        let (mut n, mut items, mut b) = (0, 0u64, self.head);
        let mut prev = ptr::null_mut();
        while !b.is_null() {
            // SAFETY: buckets on the list are live; the caller holds the depot lock.
            unsafe {
                if (*b).prev != prev {
                    return Err("depot list: broken prev link".into());
                }
                if (*b).count == 0 || (*b).count > (*b).cap {
                    return Err(format!(
                        "depot bucket with count {} cap {}",
                        (*b).count,
                        (*b).cap
                    ));
                }
                items += (*b).count as u64;
                n += 1;
                prev = b;
                b = (*b).next;
            }
        }
        if prev != self.tail {
            return Err("depot list: tail is not the last bucket".into());
        }
        if n != self.nbuckets || items != self.wss.nitems {
            return Err(format!(
                "depot counters: {} buckets / {} items recorded, {n} / {items} found",
                self.nbuckets, self.wss.nitems
            ));
        }
        self.wss.check()?;
        Ok(items)
    }
}
