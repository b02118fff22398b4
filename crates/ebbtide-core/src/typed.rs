//! A typed front end: [`TypedZone<T>`] hands out [`ZBox<T>`], an owning box whose drop runs `T`'s
//! destructor and gives the item back to the zone.
//!
//! ```
//! use ebbtide_core::{TypedZone, ZBox};
//! let zone = TypedZone::<[u64; 4]>::new("typed-doc").unwrap();
//! let mut b: ZBox<'_, [u64; 4]> = zone.alloc([1, 2, 3, 4]).unwrap();
//! b[0] = 10;
//! assert_eq!(*b, [10, 2, 3, 4]);
//! let v = ZBox::into_inner(b); // the item is back in the zone
//! assert_eq!(v[0], 10);
//! ```
//!
//! A box borrows its zone, so it cannot outlive it:
//! ```compile_fail
//! use ebbtide_core::TypedZone;
//! let b;
//! {
//!     let zone = TypedZone::<u64>::new("typed-outlive").unwrap();
//!     b = zone.alloc(1).unwrap();
//! } // `zone` dropped here while still borrowed
//! drop(b);
//! ```
//!
//! Nor can the zone be moved (or destroyed) while a box is alive:
//! ```compile_fail
//! use ebbtide_core::TypedZone;
//! let zone = TypedZone::<u64>::new("typed-move").unwrap();
//! let b = zone.alloc(1).unwrap();
//! let moved = zone; // cannot move out of `zone` because it is borrowed
//! drop(b);
//! drop(moved);
//! ```

use crate::error::{AllocError, CreateError};
use crate::zone::{Zone, ZoneFlags, ZoneOptions};
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// A zone of `T`s. Items are sized and aligned for `T` (a zero-sized `T` takes 1 byte, rounded
/// up to the zone's minimum item).
pub struct TypedZone<T> {
    zone: Zone,
    // The zone owns no `T` (boxes do), so `TypedZone<T>` is Send + Sync whatever `T` is:
    // `fn() -> T` is Send + Sync and has no drop-check obligations.
    _t: PhantomData<fn() -> T>,
}

impl<T> TypedZone<T> {
    /// A zone for `T` named `name` (default options).
    ///
    /// Fails with [`crate::ConfigError::BadAlign`] when `T`'s alignment is above the page size.
    pub fn new(name: &str) -> Result<Self, CreateError> {
        Self::with_flags(name, ZoneFlags::default())
    }

    /// As [`TypedZone::new`], with zone flags (e.g. [`crate::ZoneFlags::CHECKED`]).
    pub fn with_flags(name: &str, flags: ZoneFlags) -> Result<Self, CreateError> {
        Self::from_options(ZoneOptions::new(name, 1).flags(flags))
    }

    /// A zone from full options (limits, reserve, depot cap, hooks); `size` and `align` are
    /// replaced by `T`'s.
    pub fn from_options(mut o: ZoneOptions<'_>) -> Result<Self, CreateError> {
        o.size = mem::size_of::<T>().max(1);
        o.align = mem::align_of::<T>();
        Ok(TypedZone {
            zone: Zone::new(o)?,
            _t: PhantomData,
        })
    }

    /// Moves `value` into a new item. On failure the value is handed back with the error.
    pub fn alloc(&self, value: T) -> Result<ZBox<'_, T>, (AllocError, T)> {
        match self.zone.alloc() {
            Ok(p) => {
                let p = p.cast::<T>();
                debug_assert_eq!(p.as_ptr() as usize % mem::align_of::<T>(), 0);
                // SAFETY: the item is ours, at least size_of::<T>() bytes and aligned for T
                // (the zone was created with T's size and alignment).
                unsafe { p.as_ptr().write(value) };
                Ok(ZBox {
                    ptr: p,
                    zone: self,
                    _owns: PhantomData,
                })
            }
            Err(e) => Err((e, value)),
        }
    }

    /// The underlying zone (statistics, reclaim, validation).
    pub fn zone(&self) -> &Zone {
        &self.zone
    }
}

impl<T> fmt::Debug for TypedZone<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedZone")
            .field("name", &self.zone.name())
            .field("item_size", &self.zone.item_size())
            .finish()
    }
}

/// An owning pointer to a `T` in a [`TypedZone`]. Dropping it drops the `T` and frees the item.
pub struct ZBox<'z, T> {
    ptr: NonNull<T>,
    zone: &'z TypedZone<T>,
    // Owns a T (drop check, auto traits).
    _owns: PhantomData<T>,
}

// SAFETY: a ZBox owns its T exclusively, like Box<T>: sending it moves the T to another thread
// (needs T: Send), and the item may be freed from any thread (the zone takes cross-thread frees;
// `&TypedZone<T>` is Send because TypedZone<T> is Sync).
unsafe impl<T: Send> Send for ZBox<'_, T> {}
// SAFETY: a shared &ZBox only gives out &T, so sharing it is sharing &T (needs T: Sync).
unsafe impl<T: Sync> Sync for ZBox<'_, T> {}

impl<'z, T> ZBox<'z, T> {
    /// Moves the value out and gives the item back to the zone.
    pub fn into_inner(b: Self) -> T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the box holds an initialised T that nobody else can reach; it is read once and
        // the box is not dropped (ManuallyDrop), so the T is not dropped twice.
        let v = unsafe { b.ptr.as_ptr().read() };
        // SAFETY: the item came from this zone and is freed once.
        let r = unsafe { b.zone.zone.free(b.ptr.cast()) };
        debug_assert!(r.is_ok(), "{r:?}");
        v
    }

    /// Leaks the box: the value lives (and its item stays in use) for as long as the zone is
    /// borrowed. The zone then cannot be destroyed ([`Zone::destroy`] reports the item in use).
    pub fn leak(b: Self) -> &'z mut T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the T is initialised and owned by nobody else from now on; the item stays
        // allocated at least as long as the zone borrow 'z.
        unsafe { &mut *b.ptr.as_ptr() }
    }

    /// The address of the value.
    pub fn as_ptr(b: &Self) -> *const T {
        b.ptr.as_ptr()
    }
}

impl<T> Deref for ZBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: initialised T, shared borrow tied to &self.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for ZBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: initialised T, unique borrow tied to &mut self.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: fmt::Debug> fmt::Debug for ZBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T> Drop for ZBox<'_, T> {
    fn drop(&mut self) {
        // Give the item back even if T's destructor panics.
        struct Free<'a, T>(&'a TypedZone<T>, NonNull<T>);
        impl<T> Drop for Free<'_, T> {
            fn drop(&mut self) {
                // SAFETY: the item came from this zone and is freed once.
                let r = unsafe { self.0.zone.free(self.1.cast()) };
                debug_assert!(r.is_ok(), "{r:?}");
            }
        }
        let _free = Free(self.zone, self.ptr);
        // SAFETY: the T is initialised and dropped once, here.
        unsafe { self.ptr.as_ptr().drop_in_place() };
    }
}
