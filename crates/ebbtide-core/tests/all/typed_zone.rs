//! The typed API: `TypedZone<T>` and its owning `ZBox`.

use ebbtide_core::{AllocError, ConfigError, CreateError, LimitMode, TypedZone, ZBox};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counted<'a> {
    drops: &'a Cell<usize>,
    payload: [u64; 5],
}
impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.drops.set(self.drops.get() + 1);
    }
}

#[test]
fn drop_runs_the_destructor_once_and_frees_the_item() {
    let _turn = crate::serial::turn(module_path!());
    let drops = Cell::new(0);
    let z = TypedZone::<Counted>::new("typed-drop").unwrap();
    assert!(z.zone().item_size() >= std::mem::size_of::<Counted>());
    let mut boxes = Vec::new();
    for i in 0..1000u64 {
        let b = z
            .alloc(Counted {
                drops: &drops,
                payload: [i; 5],
            })
            .map_err(|(e, _)| e)
            .unwrap();
        assert_eq!(
            ZBox::as_ptr(&b) as usize % std::mem::align_of::<Counted>(),
            0
        );
        boxes.push(b);
    }
    assert_eq!(z.zone().validate().unwrap().used, 1000);
    for (i, b) in boxes.iter_mut().enumerate() {
        assert_eq!(b.payload, [i as u64; 5]);
        b.payload[0] = 7;
    }
    assert_eq!(drops.get(), 0);
    drop(boxes);
    assert_eq!(drops.get(), 1000, "every value dropped exactly once");
    assert_eq!(z.zone().validate().unwrap().used, 0, "every item freed");
}

#[test]
fn into_inner_moves_out_without_dropping() {
    let _turn = crate::serial::turn(module_path!());
    let drops = Cell::new(0);
    let z = TypedZone::<Counted>::new("typed-into").unwrap();
    let b = z
        .alloc(Counted {
            drops: &drops,
            payload: [3; 5],
        })
        .map_err(|(e, _)| e)
        .unwrap();
    let v = ZBox::into_inner(b);
    assert_eq!(drops.get(), 0, "into_inner must not drop the value");
    assert_eq!(v.payload, [3; 5]);
    assert_eq!(z.zone().validate().unwrap().used, 0, "item given back");
    drop(v);
    assert_eq!(drops.get(), 1);
}

#[test]
fn leak_keeps_the_item_in_use() {
    let _turn = crate::serial::turn(module_path!());
    let z = TypedZone::<u32>::new("typed-leak").unwrap();
    let r: &mut u32 = ZBox::leak(z.alloc(5).unwrap());
    *r += 1;
    assert_eq!(*r, 6);
    assert_eq!(z.zone().validate().unwrap().used, 1);
}

#[test]
fn zero_sized_and_odd_types() {
    let _turn = crate::serial::turn(module_path!());
    let z = TypedZone::<()>::new("typed-zst").unwrap();
    let a = z.alloc(()).unwrap();
    let b = z.alloc(()).unwrap();
    assert_ne!(
        ZBox::as_ptr(&a),
        ZBox::as_ptr(&b),
        "ZSTs still get distinct items"
    );
    drop((a, b));

    #[derive(Debug, PartialEq)]
    #[repr(align(64))]
    struct Aligned(u8);
    let z = TypedZone::<Aligned>::new("typed-align64").unwrap();
    let x = z.alloc(Aligned(9)).unwrap();
    assert_eq!(ZBox::as_ptr(&x) as usize % 64, 0);
    assert_eq!(format!("{x:?}"), "Aligned(9)");

    #[repr(align(8192))]
    struct Huge(#[allow(dead_code)] u8);
    match TypedZone::<Huge>::new("typed-align8k") {
        Err(CreateError::Config(ConfigError::BadAlign { align, .. })) => assert_eq!(align, 8192),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("alignment above the page size accepted"),
    }
}

#[test]
fn failed_alloc_hands_the_value_back() {
    let _turn = crate::serial::turn(module_path!());
    let drops = Cell::new(0);
    let z = TypedZone::<Counted>::from_options(
        ebbtide_core::ZoneOptions::new("typed-limit", 0).max_items(1, LimitMode::Fail),
    )
    .unwrap();
    let mk = |v| Counted {
        drops: &drops,
        payload: [v; 5],
    };
    let held = z.alloc(mk(1)).map_err(|(e, _)| e).unwrap();
    let (e, v) = z
        .alloc(mk(2))
        .err()
        .expect("the limit must refuse a second item");
    assert_eq!(e, AllocError::LimitReached { max_items: 1 });
    assert_eq!(v.payload, [2; 5], "the value comes back with the error");
    assert_eq!(drops.get(), 0, "nothing dropped by the failed allocation");
    drop((held, v));
    assert_eq!(drops.get(), 2);
    assert!(z.alloc(mk(3)).is_ok(), "room again after the drop");
}

#[test]
fn boxes_move_between_threads() {
    let _turn = crate::serial::turn(module_path!());
    let z = TypedZone::<Arc<AtomicUsize>>::new("typed-send").unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let boxes: Vec<_> = (0..100)
        .map(|_| z.alloc(counter.clone()).unwrap())
        .collect();
    assert_eq!(Arc::strong_count(&counter), 101);
    std::thread::scope(|s| {
        s.spawn(move || {
            for b in boxes {
                b.fetch_add(1, Ordering::Relaxed);
                drop(b); // freed on another thread
            }
        });
    });
    assert_eq!(counter.load(Ordering::Relaxed), 100);
    assert_eq!(
        Arc::strong_count(&counter),
        1,
        "every Arc inside was dropped"
    );
    assert_eq!(z.zone().validate().unwrap().used, 0);
}

#[test]
fn auto_traits() {
    let _turn = crate::serial::turn(module_path!());
    fn send_sync<T: Send + Sync>() {}
    send_sync::<TypedZone<std::rc::Rc<u8>>>(); // the zone owns no T
    send_sync::<ZBox<'static, u64>>();
}
