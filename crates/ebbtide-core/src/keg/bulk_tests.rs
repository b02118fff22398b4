//! The bulk release path (`take_back`'s cursor and fast path) and the release pipeline.
use super::tests::{import_n, resident_pages, take_back, xorshift};
use super::*;
use crate::release::Session;

fn no_invalid(p: *mut u8, k: InvalidKind) {
    panic!("unexpected invalid pointer {p:?}: {k:?}")
}

#[test]
fn pipeline_release_empties_slabs_and_gives_pages_back() {
    let k = Keg::new(64, 0).unwrap();
    let v = import_n(&k, 64 * 40);
    for p in &v {
        // SAFETY: ours, 64 bytes: every page of the 40 slabs becomes resident.
        unsafe { p.write_bytes(0xa5, 64) };
    }
    let slabs: Vec<usize> = {
        let mut s: Vec<usize> = v.iter().map(|&p| p as usize & !4095).collect();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(slabs.len(), 40);
    assert!(slabs.iter().all(|&s| resident_pages(s, 4096) == 1));
    let mut sess = Session::begin_wait(true);
    // In bucket-sized batches, in reverse (as a drain does).
    let mut rev = v.clone();
    rev.reverse();
    let mut valid = 0;
    for c in rev.chunks(254) {
        let r = k.take_back(
            c,
            &mut Disposal::reclaim(&mut sess, false),
            None::<fn(*mut u8)>,
            no_invalid,
        );
        assert_eq!(r.bytes, 0, "pipeline bytes are counted by the session");
        valid += r.valid;
    }
    assert_eq!(valid, v.len());
    let c = k.validate().unwrap();
    assert_eq!(
        (c.items_out, c.backed_slabs, c.releasing_slabs, c.free_slabs),
        (0, 0, 40, 0),
        "emptied slabs wait on `releasing`, not backed, not allocatable"
    );
    assert_eq!(sess.finish(), 40 * 4096);
    let c = k.validate().unwrap();
    assert_eq!((c.releasing_slabs, c.released_bytes), (0, 40 * 4096));
    assert!(c.clean_slabs >= 40);
    for &s in &slabs {
        assert_eq!(resident_pages(s, 4096), 0, "slab {s:#x} still resident");
    }
    k.destroy().unwrap();
}

#[test]
fn pipeline_keeps_the_reserve_and_inactive_session_keeps_everything() {
    let k = Keg::new(64, 3).unwrap();
    let v = import_n(&k, 64 * 10);
    let mut sess = Session::begin_wait(true);
    k.take_back(
        &v[..64 * 5],
        &mut Disposal::reclaim(&mut sess, false),
        None::<fn(*mut u8)>,
        no_invalid,
    );
    let c = k.validate().unwrap();
    assert_eq!((c.free_slabs, c.releasing_slabs), (3, 2));
    assert_eq!(sess.finish(), 2 * 4096);
    // An inactive session means Keep.
    let mut off = Session::inactive();
    k.take_back(
        &v[64 * 5..],
        &mut Disposal::reclaim(&mut off, false),
        None::<fn(*mut u8)>,
        no_invalid,
    );
    let c = k.validate().unwrap();
    assert_eq!((c.free_slabs, c.releasing_slabs, c.backed_slabs), (8, 0, 8));
    // `release_free` through a session: all but the reserve, counted at the end.
    let mut sess = Session::begin_wait(true);
    assert_eq!(
        k.release_free(k.reserve_slabs(), &mut Disposal::reclaim(&mut sess, false)),
        0
    );
    assert_eq!(k.validate().unwrap().releasing_slabs, 5);
    assert_eq!(sess.finish(), 5 * 4096);
    let c = k.validate().unwrap();
    assert_eq!((c.free_slabs, c.backed_slabs), (3, 3));
    k.destroy().unwrap();
}

#[test]
fn bad_pointers_inside_a_bulk_release_are_reported_not_applied() {
    // A keg with colour pages (63 in 64 are), below its slab 0: no item's.
    let k = loop {
        let k = Keg::new(64, 0).unwrap();
        if k.geo.first_slab > 0 {
            break k;
        }
    };
    let other = Keg::new(64, 0).unwrap();
    let v = import_n(&k, 64 * 3);
    let w = import_n(&other, 1);
    // Free slab 2 entirely first: its items are double frees afterwards.
    take_back(&k, &v[128..], false, |_| {}, no_invalid);
    let mut x = 0u64;
    let batch = [
        v[0],
        v[1],
        v[1],                 // double free inside the batch, in the cached word
        v[2].wrapping_add(8), // misaligned, inside the cached slab
        v[3],
        v[130], // already free (whole free slab)
        w[0],   // another keg's item
        (&mut x as *mut u64).cast(),
        v[64], // next slab
        v[0],  // double free, back in the first slab
        v[65],
        (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8, // a colour page
        v[66],
    ];
    let mut bad = vec![];
    let mut seen = vec![];
    let mut sess = Session::begin_wait(true);
    let r = k.take_back(
        &batch,
        &mut Disposal::reclaim(&mut sess, false),
        Some(|p| seen.push(p)),
        |p, kind| bad.push((p, kind)),
    );
    assert_eq!(sess.finish(), 0);
    assert_eq!(r.valid, 6);
    assert_eq!(
        seen,
        vec![v[0], v[1], v[3], v[64], v[65], v[66]],
        "fini on valid items only"
    );
    assert_eq!(
        bad,
        vec![
            (v[1], InvalidKind::DoubleFree),
            (v[2].wrapping_add(8), InvalidKind::Misaligned),
            (v[130], InvalidKind::DoubleFree),
            (w[0], InvalidKind::NotInZone),
            ((&mut x as *mut u64).cast(), InvalidKind::NotInZone),
            (v[0], InvalidKind::DoubleFree),
            (
                (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8,
                InvalidKind::NotAnItem
            ),
        ]
    );
    let c = k.validate().unwrap();
    assert_eq!(c.items_out, 128 - 6);
    // The same batch without fini (the fast path) reports the same and applies nothing.
    let mut bad2 = vec![];
    let r = k.take_back(
        &batch,
        &mut Disposal::keep(),
        None::<fn(*mut u8)>,
        |p, kind| bad2.push((p, kind)),
    );
    assert_eq!(r.valid, 0);
    assert_eq!(bad2.len(), batch.len());
    assert!(bad2
        .iter()
        .all(|b| b.1 != InvalidKind::NotAnItem || b.0 == batch[11]));
    assert_eq!(k.validate().unwrap().items_out, 128 - 6);
    take_back(&k, &v[..128], false, |_| {}, |_, _| {});
    take_back(&other, &w, false, |_| {}, no_invalid);
    assert_eq!(k.validate().unwrap().items_out, 0);
    k.destroy().unwrap();
    other.destroy().unwrap();
}

/// Random batches (duplicates, already free items, misaligned pointers, several slabs and
/// bitmap words, item sizes with and without a fast path) against a shadow set.
#[test]
fn bulk_release_matches_a_shadow_model() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for &size in &[16usize, 64, 96, 256, 4096] {
        let k = Keg::new(size, 1).unwrap();
        let mut out: Vec<*mut u8> = import_n(&k, 3000);
        let mut free: Vec<*mut u8> = vec![];
        for round in 0..60 {
            let mut batch = vec![];
            let n = (next() % 400) as usize;
            for _ in 0..n {
                let r = next() % 100;
                if r < 80 && !out.is_empty() {
                    let i = (next() as usize) % out.len();
                    batch.push(out.swap_remove(i));
                } else if r < 90 && !batch.is_empty() {
                    batch.push(batch[(next() as usize) % batch.len()]);
                } else if r < 95 && !free.is_empty() {
                    batch.push(free[(next() as usize) % free.len()]);
                } else if !batch.is_empty() {
                    batch.push(batch[0].wrapping_add(8));
                }
            }
            if round % 3 == 0 {
                batch.sort();
            }
            // Expected: the first occurrence of an item taken out of `out` is valid.
            let mut seen = std::collections::HashSet::new();
            let mut expect_valid = 0;
            let mut expect_bad = 0;
            let taken: std::collections::HashSet<*mut u8> = batch
                .iter()
                .copied()
                .filter(|p| !free.contains(p) && (*p as usize).is_multiple_of(8))
                .collect();
            for &p in &batch {
                if taken.contains(&p) && k.locate(p as usize).is_ok() && seen.insert(p) {
                    expect_valid += 1;
                } else {
                    expect_bad += 1;
                }
            }
            let mut bad = 0;
            let mut sess = Session::begin_wait(round % 2 == 0);
            let mut mode = match round % 3 {
                0 => Disposal::reclaim(&mut sess, false),
                1 => Disposal::keep(),
                _ => Disposal::release(),
            };
            let r = k.take_back(&batch, &mut mode, None::<fn(*mut u8)>, |_, _| bad += 1);
            sess.finish();
            assert_eq!(
                (r.valid, bad),
                (expect_valid, expect_bad),
                "size {size} round {round}"
            );
            free.extend(seen);
            k.validate().unwrap();
            // Give some back out (the keg may hand out any free item, also ones in `free`).
            let again = import_n(&k, (next() % 200) as usize);
            for p in again {
                if let Some(i) = free.iter().position(|&f| f == p) {
                    free.swap_remove(i);
                }
                out.push(p);
            }
            let c = k.validate().unwrap();
            assert_eq!(c.items_out, out.len(), "size {size} round {round}");
        }
        take_back(&k, &out, false, |_| {}, no_invalid);
        k.destroy().unwrap();
    }
}

/// Allocation goes on while another thread releases through the pipeline: a slab is never
/// handed out while its pages are being released (its contents would turn to zeros).
#[test]
fn concurrent_alloc_during_pipeline_release() {
    let k = std::sync::Arc::new(Keg::new(64, 0).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let user = {
        let (k, stop) = (k.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 50 {
                let v = import_n(&k, 300);
                for (i, p) in v.iter().enumerate() {
                    // SAFETY: ours, 64 bytes.
                    unsafe { p.write_bytes(i as u8 | 1, 64) };
                }
                std::thread::yield_now();
                for (i, p) in v.iter().enumerate() {
                    for b in 0..64 {
                        // SAFETY: ours, 64 bytes.
                        let got = unsafe { *p.add(b) };
                        assert_eq!(got, i as u8 | 1, "item {p:?} changed under its owner");
                    }
                }
                take_back(&k, &v, false, |_| {}, no_invalid);
                rounds += 1;
            }
        })
    };
    for _ in 0..30 {
        let v = import_n(&k, 64 * 200);
        for p in &v {
            // SAFETY: ours, 64 bytes.
            unsafe { p.write_bytes(0xee, 64) };
        }
        let mut sess = Session::begin_wait(false);
        for c in v.chunks(254) {
            k.take_back(
                c,
                &mut Disposal::reclaim(&mut sess, false),
                None::<fn(*mut u8)>,
                no_invalid,
            );
        }
        k.release_free(0, &mut Disposal::reclaim(&mut sess, false));
        sess.finish();
        k.validate().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    user.join().unwrap();
    let c = k.validate().unwrap();
    assert_eq!((c.items_out, c.releasing_slabs), (0, 0));
    k.destroy().unwrap();
}

/// No `madvise` under the keg lock: the squeeze's release and the synchronous release of free
/// slabs drop it, so allocation from the keg is never stalled behind the kernel.
/// Each release here is slowed to 100 ms; another thread must still get the lock at once.
#[test]
fn pages_go_back_with_the_keg_lock_dropped() {
    let k = Keg::new(4096, 0).unwrap();
    let longest_wait = |release: &dyn Fn()| {
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut worst = std::time::Duration::ZERO;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = std::time::Instant::now();
                    let _ = k.counts(); // takes the keg lock
                    worst = worst.max(t.elapsed());
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                worst
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            crate::os::fault::set_release_delay_us(100_000);
            release();
            crate::os::fault::set_release_delay_us(0);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            waiter.join().unwrap()
        })
    };
    // The squeeze: slabs emptied by a release with `Emptied::Release`.
    let v = import_n(&k, 8);
    let w = longest_wait(&|| {
        let r = k.take_back(
            &v,
            &mut Disposal::release(),
            None::<fn(*mut u8)>,
            |p, kind| panic!("{p:?}: {kind:?}"),
        );
        assert_eq!(r.bytes, 8 * 4096);
    });
    assert!(
        w < std::time::Duration::from_millis(50),
        "lock held {w:?} during madvise"
    );
    // The synchronous reclaim of free slabs (every other slab, so one madvise per slab).
    let v = import_n(&k, 16);
    let keep: Vec<_> = v.iter().step_by(2).copied().collect();
    let drop_: Vec<_> = v.iter().skip(1).step_by(2).copied().collect();
    take_back(
        &k,
        &drop_,
        false,
        |_| {},
        |p, kind| panic!("{p:?}: {kind:?}"),
    );
    let w = longest_wait(&|| assert_eq!(k.release_free(0, &mut Disposal::keep()), 8 * 4096));
    assert!(
        w < std::time::Duration::from_millis(50),
        "lock held {w:?} during madvise"
    );
    take_back(
        &k,
        &keep,
        false,
        |_| {},
        |p, kind| panic!("{p:?}: {kind:?}"),
    );
    k.release_free(0, &mut Disposal::keep());
    let c = k.validate().unwrap();
    assert_eq!((c.items_out, c.backed_slabs), (0, 0));
    k.destroy().unwrap();
}

/// More kegs than a session tracks at once, and far more runs than the ring holds (every
/// other slab of a chunk: one-page runs, so runs also find the ring full and wait in the
/// session's overflow until the owner drops the keg lock).
#[test]
fn many_kegs_and_fragmented_runs() {
    let kegs: Vec<Keg> = (0..20).map(|_| Keg::new(4096, 0).unwrap()).collect();
    let items: Vec<Vec<*mut u8>> = kegs.iter().map(|k| import_n(k, 600)).collect();
    for v in &items {
        for p in v {
            // SAFETY: ours, 4096 bytes.
            unsafe { p.write_bytes(1, 4096) };
        }
    }
    let mut sess = Session::begin_wait(true);
    for (k, v) in kegs.iter().zip(&items) {
        let odd: Vec<*mut u8> = v.iter().copied().skip(1).step_by(2).collect();
        k.take_back(
            &odd,
            &mut Disposal::reclaim(&mut sess, false),
            None::<fn(*mut u8)>,
            no_invalid,
        );
    }
    // The session tracks 16 kegs: the other 4 kept their emptied slabs on the free list...
    let waiting: Vec<usize> = kegs.iter().map(|k| k.counts().free_slabs).collect();
    assert_eq!(
        waiting.iter().filter(|&&n| n == 300).count(),
        4,
        "{waiting:?}"
    );
    assert_eq!(
        waiting.iter().filter(|&&n| n == 0).count(),
        16,
        "{waiting:?}"
    );
    // ... which the reclaim's final pass hands over (completing the first 16 to make room).
    for k in &kegs {
        assert_eq!(
            k.release_free(k.reserve_slabs(), &mut Disposal::reclaim(&mut sess, false)),
            0
        );
    }
    assert_eq!(sess.finish(), 20 * 300 * 4096);
    for (k, v) in kegs.iter().zip(&items) {
        let c = k.validate().unwrap();
        assert_eq!(
            (c.items_out, c.releasing_slabs, c.backed_slabs),
            (300, 0, 300)
        );
        for p in v.iter().skip(1).step_by(2) {
            assert_eq!(resident_pages(*p as usize, 4096), 0);
        }
        for p in v.iter().step_by(2) {
            assert_eq!(
                resident_pages(*p as usize, 4096),
                1,
                "a live item was released"
            );
        }
        take_back(
            k,
            &v.iter().copied().step_by(2).collect::<Vec<_>>(),
            false,
            |_| {},
            no_invalid,
        );
        k.destroy().unwrap();
    }
}
