//! Taking items from a zone and giving them back, for the zone tests (included with `#[path]`).

#![allow(dead_code)] // each test binary uses some of these

use ebbtide_core::Zone;
use std::ptr::NonNull;

/// `n` items from `z`.
pub fn alloc_n(z: &Zone, n: usize) -> Vec<NonNull<u8>> {
    (0..n).map(|_| z.alloc().unwrap()).collect()
}

/// Frees every item of `v` (items of `z`, each freed once).
pub fn free_all(z: &Zone, v: Vec<NonNull<u8>>) {
    for p in v {
        // SAFETY: the caller's items of `z`, freed once.
        unsafe { z.free(p).unwrap() };
    }
}
