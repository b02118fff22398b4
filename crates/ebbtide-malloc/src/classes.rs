//! The size classes: which zone serves a request of `n` bytes.
//!
//! ```text
//!  class   0    1   2   3   4   5   6   7    8  |  9 .. 16   | 17 .. 24 | ... | 105 .. 112
//!  size    8   16  32  48  64  80  96 112  128  | 144 .. 256 | 288..512 | ... | 1 MiB - 7·128 KiB .. 1 MiB
//!          └─ 16-byte steps (every item 16-aligned from 16 on) ─┘└─ eight classes per doubling ─┘
//! ```
//!
//! Above 128 bytes every power-of-two interval `(2^k, 2^(k+1)]` has eight classes, `2^(k-3)`
//! apart (jemalloc's `sz` with four per doubling, tcmalloc's `sizemap` with hand-picked steps and
//! mimalloc's bins with four are the anchors; eight keeps the waste at most 12.5 %): a request of
//! `2^k + 1` bytes gets `2^k + 2^(k-3)`, `2^(k-3) - 1` bytes (under 1/8 of the request) too many.
//! Below 128 the classes are 16 bytes apart, so every block from 16 bytes on is 16-aligned
//! (what glibc promises and SIMD code assumes); there the waste of a 17-byte request is 15
//! bytes, the "smallest classes" exception.
//!
//! Every class size is a multiple of its lowest set bit, and slabs start on page boundaries, so
//! a class's items are aligned to `min(lowest set bit, page)`: an aligned request takes the
//! first class at or above it whose size is a multiple of the alignment.
//!
//! Up to 1 KiB the class is one load from a 129-entry table indexed by `(n + 7) / 8`; above it,
//! a leading-zero count and two shifts. Above [`MAX_CLASS_SIZE`] (1 MiB, the core's largest item)
//! a request is a huge block with its own mapping (`huge.rs`).

/// Number of classes.
pub const NCLASSES: usize = 9 + 13 * 8;
/// The largest class (the core's largest item).
pub const MAX_CLASS_SIZE: usize = 1 << 20;
/// Requests up to this size take the table.
pub(crate) const TABLE_MAX: usize = 1024;

const fn size_of_class(c: usize) -> usize {
    if c < 9 {
        if c == 0 {
            8
        } else {
            16 * c
        }
    } else {
        let k = 7 + (c - 9) / 8;
        let j = (c - 9) % 8;
        (1 << k) + (j + 1) * (1 << (k - 3))
    }
}

/// The class of `n` bytes (`n <= MAX_CLASS_SIZE`) by arithmetic.
const fn compute_class(n: usize) -> usize {
    if n <= 8 {
        0
    } else if n <= 128 {
        n.div_ceil(16)
    } else {
        let k = (usize::BITS - 1 - (n - 1).leading_zeros()) as usize; // 2^k < n <= 2^(k+1)
        let j = (n - 1 - (1 << k)) >> (k - 3);
        9 + (k - 7) * 8 + j
    }
}

/// Size of every class.
pub static SIZES: [u32; NCLASSES] = {
    let mut t = [0u32; NCLASSES];
    let mut c = 0;
    while c < NCLASSES {
        t[c] = size_of_class(c) as u32;
        c += 1;
    }
    t
};

/// Class of every request up to 1 KiB, indexed by `(n + 7) / 8`.
pub(crate) static SMALL: [u8; TABLE_MAX / 8 + 1] = {
    let mut t = [0u8; TABLE_MAX / 8 + 1];
    let mut i = 0;
    while i <= TABLE_MAX / 8 {
        t[i] = compute_class(i * 8) as u8;
        i += 1;
    }
    t
};

/// The class serving `n` bytes; `n` must be at most [`MAX_CLASS_SIZE`].
#[inline(always)]
pub fn class_of(n: usize) -> usize {
    debug_assert!(n <= MAX_CLASS_SIZE);
    if n <= TABLE_MAX {
        // Through `local_ref!`: no GOT load for the table's address (`ebbtide_core::local`).
        ebbtide_core::local_ref!(SMALL)[(n + 7) >> 3] as usize
    } else {
        // Laid out after the rest of `malloc`, so that the table's sizes fall through to the
        // stack's pop with no taken jump; not slower for the sizes here
        // (docs/design/malloc-class-formula.md).
        large_class();
        class_above_table(n)
    }
}

/// [`class_of`] for `n` above the table's sizes (`TABLE_MAX < n <= MAX_CLASS_SIZE`): the
/// formula, eight classes per power of two.
#[inline(always)]
pub fn class_above_table(n: usize) -> usize {
    debug_assert!(n > TABLE_MAX && n <= MAX_CLASS_SIZE);
    let k = (usize::BITS - 1 - (n - 1).leading_zeros()) as usize;
    9 + (k - 7) * 8 + ((n - 1 - (1 << k)) >> (k - 3))
}

/// Marks the branch of [`class_of`] above the table as the unlikely one (a call to a `#[cold]`
/// function that does nothing: `core::hint::cold_path` is above the crate's MSRV).
#[cold]
#[inline(always)]
fn large_class() {}

/// The size of class `c`.
#[inline(always)]
pub fn size(c: usize) -> usize {
    SIZES[c] as usize
}

/// The alignment every item of class `c` has: the lowest set bit of its size, at most a page.
pub fn natural_align(c: usize) -> usize {
    let s = size(c);
    (s & s.wrapping_neg()).min(4096)
}

/// The first class of at least `n` bytes whose items are `align`-aligned (`align` a power of
/// two, at most a page); `None` when no class is big enough.
pub fn class_aligned(n: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two() && align <= 4096);
    let n = n.max(align);
    if n > MAX_CLASS_SIZE {
        return None;
    }
    (class_of(n)..NCLASSES).find(|&c| size(c).is_multiple_of(align))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_formula_agree_and_fit() {
        for n in 0..=MAX_CLASS_SIZE {
            let c = class_of(n);
            assert_eq!(c, compute_class(n), "{n}");
            assert!(size(c) >= n, "{n} -> class {c} of {}", size(c));
            if c > 0 {
                assert!(size(c - 1) < n, "{n}: class {} would do", c - 1);
            }
        }
        assert_eq!(size(NCLASSES - 1), MAX_CLASS_SIZE);
        assert_eq!(class_of(MAX_CLASS_SIZE), NCLASSES - 1);
    }

    #[test]
    fn waste_is_at_most_an_eighth_above_128_bytes() {
        for n in 129..=MAX_CLASS_SIZE {
            let s = size(class_of(n));
            assert!((s - n) * 8 < n, "{n} -> {s}");
        }
    }

    #[test]
    fn sizes_are_increasing_and_16_aligned_from_16() {
        for c in 1..NCLASSES {
            assert!(size(c) > size(c - 1));
            assert_eq!(size(c) % 16, 0, "class {c}");
            assert!(natural_align(c) >= 16);
        }
    }

    #[test]
    fn aligned_classes() {
        for shift in 3..=12 {
            let a = 1usize << shift;
            for n in [0, 1, a - 1, a, a + 1, 3 * a, 5000, 70000] {
                let c = class_aligned(n, a).unwrap();
                assert!(size(c) >= n.max(a) && size(c).is_multiple_of(a), "{n} {a}");
                assert!(natural_align(c) >= a);
            }
        }
        assert_eq!(class_aligned(MAX_CLASS_SIZE + 1, 16), None);
    }
}
