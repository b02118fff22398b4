use super::*;

/// Takes `items` back with `fini` run on each: slabs emptied are released at once with
/// `release`, else onto the free list. Returns the bytes released. (Shared by the keg's test
/// modules.)
pub(super) fn take_back(
    k: &Keg,
    items: &[*mut u8],
    release: bool,
    fini: impl FnMut(*mut u8),
    invalid: impl FnMut(*mut u8, InvalidKind),
) -> usize {
    let mut d = if release {
        Disposal::release()
    } else {
        Disposal::keep()
    };
    k.take_back(items, &mut d, Some(fini), invalid).bytes
}

/// A xorshift64 generator from `seed` (not 0): the tests' reproducible random numbers.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// `n` items imported from `k`, in as many calls as it takes.
pub(crate) fn import_n(k: &Keg, n: usize) -> Vec<*mut u8> {
    let mut v = vec![ptr::null_mut(); n];
    let mut got = 0;
    while got < n {
        got += k.import(&mut v[got..]).unwrap();
    }
    v
}

/// Pages of `[addr, addr + len)` resident in memory.
pub(super) fn resident_pages(addr: usize, len: usize) -> usize {
    let ps = os::page_size();
    let mut vec = vec![0u8; len.div_ceil(ps)];
    // SAFETY: the range is mapped memory of ours (page aligned); `vec` has one byte per page.
    let r = unsafe { libc::mincore(addr as *mut _, len, vec.as_mut_ptr()) };
    assert_eq!(r, 0);
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

#[test]
fn import_release_reclaim() {
    let k = Keg::new(64, 0).unwrap();
    let mut v = vec![ptr::null_mut(); 1000];
    assert_eq!(k.import(&mut v).unwrap(), 1000);
    let c = k.validate().unwrap();
    assert_eq!(c.items_out, 1000);
    assert_eq!(c.backed_slabs, 1000usize.div_ceil(64));
    let mut sorted = v.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 1000, "no item handed out twice");
    for p in &v {
        assert!(k.owns(*p as usize));
        // SAFETY: the item is ours, 64 bytes.
        unsafe { p.write_bytes(0x5a, 64) };
    }
    let mut bad = vec![];
    take_back(&k, &v, false, |_| {}, |p, kind| bad.push((p, kind)));
    assert!(bad.is_empty());
    let c = k.validate().unwrap();
    assert_eq!(c.items_out, 0);
    assert_eq!(c.free_slabs, 16);
    assert_eq!(k.release_free(0, &mut Disposal::keep()), 16 * 4096);
    let c = k.validate().unwrap();
    assert_eq!((c.free_slabs, c.backed_slabs), (0, 0));
    k.destroy().unwrap();
}

#[test]
fn lazy_slabs_are_reused_first_and_decay_oldest_first() {
    let ps = os::page_size();
    let k = Keg::new(ps, 0).unwrap();
    let mut v = vec![ptr::null_mut(); 8];
    assert_eq!(k.import(&mut v).unwrap(), 8);
    for p in &v {
        // SAFETY: pages of ours.
        unsafe { p.write_bytes(7, ps) };
    }
    take_back(&k, &v[..4], false, |_| {}, |_, _| panic!("invalid"));
    // Fake time: the first four go lazy at t = 1000 ms, the next four at t = 1600 ms.
    assert_eq!(k.release_free_lazily(0, 1000, true), 4 * ps);
    take_back(&k, &v[4..], false, |_| {}, |_, _| panic!("invalid"));
    assert_eq!(k.release_free_lazily(0, 1600, true), 4 * ps);
    let c = k.validate().unwrap();
    assert_eq!((c.lazy_slabs, c.free_slabs, c.backed_slabs), (8, 0, 0));
    assert_eq!(c.lazy_freed_bytes, 8 * ps as u64);
    // Allocation takes the newest lazy slabs first (no fault unless the kernel took them).
    let mut w = vec![ptr::null_mut(); 2];
    k.import(&mut w).unwrap();
    let c = k.validate().unwrap();
    assert_eq!((c.lazy_slabs, c.lazy_reused_bytes), (6, 2 * ps as u64));
    assert!(w.iter().all(|p| v[4..].contains(p)), "newest first");
    // Decay with fake time and a 1000 ms delay: nothing at 1999, the older four at 2000,
    // the rest at 2600.
    assert_eq!(k.release_lazy(Some((1999, 1000))), 0);
    assert_eq!(k.release_lazy(Some((2000, 1000))), 4 * ps);
    assert_eq!(k.validate().unwrap().lazy_slabs, 2);
    assert_eq!(k.release_lazy(Some((2600, 1000))), 2 * ps);
    let c = k.validate().unwrap();
    assert_eq!((c.lazy_slabs, c.clean_slabs >= 6), (0, true));
    // A free into a lazily freed slab is a double free; a purge without delay takes all.
    take_back(&k, &w, false, |_| {}, |_, _| panic!("invalid"));
    k.release_free_lazily(0, 3000, true);
    let mut bad = vec![];
    take_back(&k, &w[..1], false, |_| {}, |p, kind| bad.push((p, kind)));
    assert_eq!(bad, vec![(w[0], InvalidKind::DoubleFree)]);
    assert_eq!(k.release_lazy(None), 2 * ps);
    k.validate().unwrap();
    k.destroy().unwrap();
}

#[test]
fn settling_slabs_are_offered_after_the_settle_delay_unless_reused() {
    let ps = os::page_size();
    let k = Keg::new(ps, 0).unwrap();
    let mut v = vec![ptr::null_mut(); 6];
    k.import(&mut v).unwrap();
    for p in &v {
        // SAFETY: pages of ours.
        unsafe { p.write_bytes(9, ps) };
    }
    take_back(&k, &v, false, |_| {}, |_, _| panic!("invalid"));
    // Given up at t = 500 ms, not offered yet (settle 100 ms).
    assert_eq!(k.release_free_lazily(0, 500, false), 6 * ps);
    assert_eq!(k.counts().lazy_freed_bytes, 0, "no MADV_FREE yet");
    // Reused within the settle delay: taken back without any system call.
    let mut w = vec![ptr::null_mut(); 2];
    k.import(&mut w).unwrap();
    assert_eq!(k.advise_lazy(599, 100), 0, "still settling");
    assert_eq!(k.advise_lazy(600, 100), 4 * ps);
    assert_eq!(k.advise_lazy(700, 100), 0, "offered once");
    let c = k.validate().unwrap();
    assert_eq!((c.lazy_slabs, c.lazy_freed_bytes), (4, 4 * ps as u64));
    // The decay counts from when the slabs were given up.
    assert_eq!(k.release_lazy(Some((1499, 1000))), 0);
    assert_eq!(k.release_lazy(Some((1500, 1000))), 4 * ps);
    take_back(&k, &w, false, |_| {}, |_, _| panic!("invalid"));
    k.release_free_lazily(0, 2000, false);
    assert_eq!(
        k.release_lazy(None),
        2 * ps,
        "pressure: settling slabs go too"
    );
    k.validate().unwrap();
    k.destroy().unwrap();
}

#[test]
fn invalid_pointers_are_reported_not_applied() {
    // A keg with colour pages, so that its chunk's start is no item (a keg of colour 0, one in
    // 64 tags, depending on how many kegs the tests running beside this one made, starts its
    // slab 0 there).
    let k = loop {
        let k = Keg::new(48, 0).unwrap();
        if colour_of(k.tag) != 0 {
            break k;
        }
        k.destroy().unwrap();
    };
    let other = Keg::new(48, 0).unwrap();
    let mut v = [ptr::null_mut(); 4];
    k.import(&mut v).unwrap();
    let mut w = [ptr::null_mut(); 1];
    other.import(&mut w).unwrap();
    let mut x = 0u64;
    let bogus = [
        (&mut x as *mut u64).cast::<u8>(),
        w[0],
        v[0].wrapping_add(8),
        (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8,
    ];
    let mut bad = vec![];
    take_back(&k, &bogus, false, |_| {}, |p, kind| bad.push((p, kind)));
    assert_eq!(
        bad.iter().map(|b| b.1).collect::<Vec<_>>(),
        vec![
            InvalidKind::NotInZone,
            InvalidKind::NotInZone,
            InvalidKind::Misaligned,
            InvalidKind::NotAnItem
        ]
    );
    take_back(&k, &v[..1], false, |_| {}, |_, _| panic!("valid"));
    let mut bad = vec![];
    take_back(&k, &v[..1], false, |_| {}, |p, kind| bad.push((p, kind)));
    assert_eq!(bad, vec![(v[0], InvalidKind::DoubleFree)]);
    k.validate().unwrap();
    assert_eq!(
        k.destroy(),
        Err(3),
        "destroy with live items fails and changes nothing"
    );
    k.validate().unwrap();
    take_back(&k, &v[1..], false, |_| {}, |_, _| panic!("valid"));
    take_back(&other, &w, false, |_| {}, |_, _| panic!("valid"));
    k.destroy().unwrap();
    other.destroy().unwrap();
}

#[test]
fn kegs_made_one_after_another_start_their_slabs_on_different_pages() {
    let colours: std::collections::HashSet<usize> =
        (1..=COLOURS as u64).map(|i| colour_of(2 * i)).collect();
    assert_eq!(
        colours.len(),
        COLOURS,
        "consecutive tags: every colour once"
    );
    assert!((0..1000u64).all(|i| colour_of(2 * i) < COLOURS));
    let a = Keg::new(64, 0).unwrap();
    let b = Keg::new(64, 0).unwrap();
    assert_ne!(a.geo.first_slab, b.geo.first_slab);
    assert_eq!(
        b.geo.first_slab - Geometry::for_item(64).first_slab,
        colour_of(b.tag) * os::page_size()
    );
    a.destroy().unwrap();
    b.destroy().unwrap();
}

#[test]
fn slab_metadata_is_written_as_slabs_are_first_used() {
    let ps = os::page_size();
    // 16-byte items: 4 KiB slabs, a thousand descriptors of 64 bytes (16 pages; no live bitmap
    // outside checked mode) in the chunk's descriptor area (`arena.rs`), none in the chunk.
    let k = Keg::new(16, 0).unwrap();
    let g = k.geo;
    assert_eq!(g.meta_size, 64, "{g:?}");
    assert!(g.slabs_per_chunk > CHUNK_SIZE / ps - COLOURS, "{g:?}");
    let mut v = vec![ptr::null_mut(); 3 * g.items_per_slab];
    assert_eq!(k.import(&mut v).unwrap(), v.len());
    let chunk = v[0] as usize & !(CHUNK_SIZE - 1);
    let desc = k.arena.desc_of(chunk);
    let desc_resident = || resident_pages(desc, k.arena.desc_mapped_bytes(chunk));
    assert_eq!(desc_resident(), 1, "three slabs: one page of descriptors");
    assert_eq!(
        k.arena.desc_mapped_bytes(chunk),
        os::round_up(
            CHUNK_HEADER + g.slabs_per_chunk * g.meta_size,
            crate::arena::DESC_STEP
        ),
        "mapped whole with the chunk (a free into a slab never carved reads its descriptor)"
    );
    assert_eq!(resident_pages(chunk, g.first_slab), 0, "the colour pages");
    let c = k.validate().unwrap();
    assert_eq!(c.backed_slabs, 3);
    assert_eq!(
        c.clean_slabs,
        g.slabs_per_chunk - 3,
        "never-used slabs count as clean"
    );
    // A pointer into a slab never carved was never handed out.
    let never = (chunk + g.first_slab + 10 * g.slab_size) as *mut u8;
    let mut bad = vec![];
    take_back(&k, &[never], false, |_| {}, |p, kind| bad.push((p, kind)));
    assert_eq!(bad, vec![(never, InvalidKind::NotAnItem)]);
    k.validate().unwrap();
    // Given back and reused: clean slabs are taken before new ones are carved.
    take_back(&k, &v, false, |_| {}, |_, _| panic!("valid"));
    assert_eq!(k.release_free(0, &mut Disposal::keep()), 3 * g.slab_size);
    assert_eq!(k.import(&mut v).unwrap(), v.len());
    let mut bases: Vec<usize> = v.iter().map(|&p| p as usize & !(g.slab_size - 1)).collect();
    bases.sort_unstable();
    bases.dedup();
    assert!(bases
        .iter()
        .all(|&b| b < chunk + g.first_slab + 3 * g.slab_size));
    take_back(&k, &v, false, |_| {}, |_, _| panic!("valid"));
    // Every slab of the chunk, then the next chunk.
    let mut all = vec![ptr::null_mut(); (g.slabs_per_chunk + 1) * g.items_per_slab];
    assert_eq!(k.import(&mut all).unwrap(), all.len());
    let c = k.validate().unwrap();
    assert_eq!((c.chunks, c.backed_slabs), (2, g.slabs_per_chunk + 1));
    let meta_pages = os::round_up(CHUNK_HEADER + g.slabs_per_chunk * g.meta_size, ps) / ps;
    assert_eq!(desc_resident(), meta_pages, "every descriptor written");
    assert_eq!(
        resident_pages(chunk, g.first_slab),
        0,
        "the colour's pages never touched"
    );
    take_back(&k, &all, false, |_| {}, |_, _| panic!("valid"));
    assert_eq!(
        k.release_free(0, &mut Disposal::keep()),
        (g.slabs_per_chunk + 1) * g.slab_size
    );
    k.validate().unwrap();
    k.destroy().unwrap();
}

#[test]
fn free_slabs_beyond_the_cap_go_back_when_emptied() {
    let k = Keg::new(256, 0).unwrap().keep_free_at_most(2);
    let g = k.geo;
    let mut v = vec![ptr::null_mut(); 5 * g.items_per_slab];
    assert_eq!(k.import(&mut v).unwrap(), v.len());
    for p in &v {
        // SAFETY: our item of 256 bytes: every page of the five slabs becomes resident.
        unsafe { p.write_bytes(1, 256) };
    }
    let before = k.counts().released_bytes;
    let r = k.take_back(
        &v,
        &mut Disposal::keep(),
        None::<fn(*mut u8)>,
        |_, _| panic!(),
    );
    assert_eq!(r.valid, v.len());
    assert_eq!(r.bytes, 3 * g.slab_size, "all but two slabs given back");
    let c = k.validate().unwrap();
    assert_eq!((c.free_slabs, c.backed_slabs), (2, 2));
    assert_eq!(c.released_bytes - before, 3 * g.slab_size as u64);
    // Without a cap everything stays backed until a reclaim.
    let k2 = Keg::new(256, 0).unwrap();
    k2.import(&mut v).unwrap();
    let r = k2.take_back(
        &v,
        &mut Disposal::keep(),
        None::<fn(*mut u8)>,
        |_, _| panic!(),
    );
    assert_eq!((r.bytes, k2.validate().unwrap().free_slabs), (0, 5));
    k.destroy().unwrap();
    k2.destroy().unwrap();
}

#[test]
fn release_empty_gives_pages_back_at_once() {
    let k = Keg::new(4096, 0).unwrap();
    let mut v = [ptr::null_mut(); 8];
    k.import(&mut v).unwrap();
    assert_eq!(take_back(&k, &v, true, |_| {}, |_, _| panic!()), 8 * 4096);
    let c = k.validate().unwrap();
    assert_eq!((c.backed_slabs, c.clean_slabs > 0), (0, true));
    k.destroy().unwrap();
}

#[test]
fn a_mapping_in_the_newest_chunks_way_sends_the_keg_to_a_new_chunk() {
    let k = Keg::new(4096, 0).unwrap();
    let g = k.geo;
    let chunk_of = |p: *mut u8| p as usize & !(CHUNK_SIZE - 1);
    // Slabs until the newest chunk is one mapped in part (a chunk other tests gave back may
    // be mapped whole already: no mapping can be in its way).
    let mut v = Vec::new();
    let chunk = loop {
        let mut slab = vec![ptr::null_mut(); g.items_per_slab];
        assert_eq!(k.import(&mut slab).unwrap(), slab.len());
        v.extend_from_slice(&slab);
        let c = chunk_of(slab[0]);
        if k.arena.mapped_bytes(c) < CHUNK_SIZE {
            break c;
        }
        assert!(
            v.len() < 64 * g.slabs_per_chunk * g.items_per_slab,
            "no fresh chunk"
        );
    };
    let mapped = k.arena.mapped_bytes(chunk);
    let mut slabs: Vec<usize> = v
        .iter()
        .filter(|&&p| chunk_of(p) == chunk)
        .map(|&p| p as usize & !(g.slab_size - 1))
        .collect();
    slabs.sort_unstable();
    slabs.dedup();
    let (before, carved) = (k.validate().unwrap(), slabs.len());
    // Another mapping right after what the chunk has mapped (a program's MAP_FIXED_NOREPLACE,
    // libc-test's malloc-brk-fail, a JIT placing its code by a hint).
    let squat = CHUNK_SIZE - mapped;
    // SAFETY: a fixed mapping that replaces nothing (MAP_FIXED_NOREPLACE refuses to).
    let at = unsafe {
        libc::mmap(
            (chunk + mapped) as *mut libc::c_void,
            squat,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(at as usize, chunk + mapped, "the squatter's place");
    // More slabs than what the chunk has mapped holds: the rest come from another chunk.
    let left = (mapped - g.first_slab) / g.slab_size - carved;
    let mut w = vec![ptr::null_mut(); (left + 2) * g.items_per_slab];
    assert_eq!(k.import(&mut w).unwrap(), w.len(), "no ENOMEM");
    assert!(w.iter().any(|&p| chunk_of(p) != chunk), "a new chunk");
    assert!(
        w.iter()
            .all(|&p| chunk_of(p) != chunk || (p as usize) < chunk + mapped),
        "nothing in the squatter's pages"
    );
    let c = k.validate().unwrap();
    assert_eq!(
        (c.chunks, c.backed_slabs),
        (before.chunks + 1, before.backed_slabs + left + 2)
    );
    take_back(&k, &v, true, |_| {}, |_, _| panic!("valid"));
    take_back(&k, &w, true, |_| {}, |_, _| panic!("valid"));
    k.validate().unwrap();
    // Every chunk goes back (the abandoned one with the slabs it had).
    assert!(k.unmap_empty_chunks() > 0);
    assert_eq!(k.validate().unwrap().chunks, 0);
    // SAFETY: the squatter mapped above, ours.
    assert_eq!(unsafe { libc::munmap(at, squat) }, 0);
    k.destroy().unwrap();
}
