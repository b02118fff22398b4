//! `max_items`: reservations against the limit, and FIFO sleepers while it is reached.

use super::*;

impl ZoneInner {
    pub(super) fn reserve_items(&self, want: usize) -> Result<usize, AllocError> {
        if self.max_items == 0 {
            return Ok(want);
        }
        loop {
            let cur = self.items_reserved.load(Ordering::Relaxed);
            let room = self.max_items.saturating_sub(cur);
            if room > 0 {
                let take = want.min(room);
                if self
                    .items_reserved
                    // AcqRel: the count is a budget handed between threads; pairs with the
                    // SeqCst `fetch_sub` in `unreserve` (a reservation made possible by a return
                    // happens after it).
                    .compare_exchange(cur, cur + take, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(take);
                }
                continue;
            }
            match self.limit_mode {
                LimitMode::Fail => {
                    self.counters.fails.fetch_add(1, Ordering::Relaxed);
                    return Err(AllocError::LimitReached {
                        max_items: self.max_items,
                    });
                }
                LimitMode::Wait => self.wait_for_room(),
            }
        }
    }

    /// Sleeps (FIFO) until items come back to the slabs. Before the first sleep, cached items
    /// are pushed back to the slabs so they can satisfy the sleepers.
    pub(super) fn wait_for_room(&self) {
        // Sleep outside the fork gate (a fork must not wait for a sleeper); the drain below goes
        // back inside. A fork while this thread sleeps copies at most this zone's limit mutex
        // held (zones with `LimitMode::Wait` only).
        let _paused = crate::forkgate::pause();
        self.counters.sleeps.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.limit);
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.sleepers += 1;
        if st.sleepers == 1 {
            // SeqCst: a Dekker pair with `unreserve` (it lowers `items_reserved`, then loads
            // `limit_full`; we store `limit_full`, then load `items_reserved` in the loop, all
            // SeqCst): one of the two sees the other, so a return is never missed by a sleeper.
            self.limit_full.store(true, Ordering::SeqCst);
            drop(st);
            {
                let _inside = crate::forkgate::enter();
                self.close_all_caps();
                self.drain_caches();
            }
            st = lock(&self.limit);
        }
        loop {
            // SeqCst: the load of the Dekker pair with `unreserve` (see `limit_full` above).
            let room = self.items_reserved.load(Ordering::SeqCst) < self.max_items;
            if room && st.serving == ticket {
                break;
            }
            #[cfg(not(loom))]
            {
                let (g, _) = self
                    .limit_cv
                    .wait_timeout(st, std::time::Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner());
                st = g;
            }
            #[cfg(loom)]
            {
                st = self.limit_cv.wait(st).unwrap();
            }
        }
        st.serving += 1;
        st.sleepers -= 1;
        if st.sleepers == 0 {
            // SeqCst: as the store of `true` above.
            self.limit_full.store(false, Ordering::SeqCst);
        }
        drop(st);
        self.limit_cv.notify_all();
    }

    pub(super) fn unreserve(&self, n: usize) {
        if self.max_items == 0 || n == 0 {
            return;
        }
        // SeqCst decrement, then SeqCst load of `limit_full`: our side of the Dekker pair with
        // `wait_for_room` (see there): a sleeper that raised `limit_full` before this load is
        // woken below, one that raises it after loads the lowered count. (The sleeper's 50 ms
        // timed wait is only a backstop.) Limit paths only: the cost does not matter.
        self.items_reserved.fetch_sub(n, Ordering::SeqCst);
        if self.limit_full.load(Ordering::SeqCst) {
            let _g = lock(&self.limit);
            self.limit_cv.notify_all();
        }
    }
}
