//! `ZoneOptions::bucket_items`: a zone's starting and smallest bucket, and with it the floor of
//! its CPUs' stacks (two buckets); 0 keeps UMA's table; above the largest bucket the zone is
//! refused with an error naming the option.

use ebbtide_core::{bucket_size_for, ConfigError, CreateError, Zone, ZoneOptions, BUCKET_MAX};

#[path = "../support/pin.rs"]
mod pin;

#[test]
fn bucket_items_sets_the_bucket_and_the_stack_floor() {
    let _turn = crate::serial::turn(module_path!());
    let cpu = pin::pin_last_cpu();
    let z = Zone::new(ZoneOptions::new("bucket-30", 256).bucket_items(30)).unwrap();
    let s = z.snapshot();
    assert_eq!((s.bucket_size, s.bucket_size_min), (30, 30), "{s:?}");
    assert_ne!(
        bucket_size_for(256),
        30,
        "the test must differ from the table"
    );
    let p = z.alloc().unwrap();
    let st = z.snapshot().per_cpu[cpu];
    assert_eq!(st.capacity, 2 * 30, "the floor is two buckets: {st:?}");
    // SAFETY: an item of this zone, freed once.
    unsafe { z.free(p).unwrap() };

    let d = Zone::new(ZoneOptions::new("bucket-default", 256)).unwrap();
    assert_eq!(d.snapshot().bucket_size, bucket_size_for(256));
}

#[test]
fn a_bucket_above_the_largest_is_refused_by_name() {
    let _turn = crate::serial::turn(module_path!());
    match Zone::new(ZoneOptions::new("bucket-big", 64).bucket_items(BUCKET_MAX + 1)) {
        Err(CreateError::Config(e @ ConfigError::BadBucket { items, max })) => {
            assert_eq!((items, max), (BUCKET_MAX + 1, BUCKET_MAX));
            let msg = e.to_string();
            assert!(
                msg.contains("'bucket_items'") && msg.contains("255"),
                "{msg}"
            );
        }
        other => panic!("expected BadBucket, got {:?}", other.map(|_| ())),
    }
    assert!(Zone::new(ZoneOptions::new("bucket-max", 64).bucket_items(BUCKET_MAX)).is_ok());
}
