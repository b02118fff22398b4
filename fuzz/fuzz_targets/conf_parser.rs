//! Fuzz the `EBBTIDE_CONF` parser and the registry behind it.
//!
//! Checks, for any input: no panic; every accepted assignment is inside its tunable's range
//! and its canonical text parses back to the same value; applying the text to a registry
//! either changes exactly the accepted values or, on error, changes nothing.
//!
//! Run: `cargo +nightly fuzz run conf_parser -- -max_total_time=60` (from the repository root).
#![no_main]

use ebbtide::options::parse::{canonical, parse_conf, parse_value};
use ebbtide::options::Registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_conf(text, "EBBTIDE_CONF");
    if let Ok(assignments) = &parsed {
        for a in assignments {
            assert!(
                a.def.min <= a.value && a.value <= a.def.max,
                "{}",
                a.def.name
            );
            let c = canonical(a.def, a.value);
            assert_eq!(parse_value(a.def, &c), Ok(a.value), "{} = {c}", a.def.name);
        }
    }
    let r = Registry::new();
    let before = r.snapshot();
    match r.apply_conf(text) {
        Ok(()) => {
            let assignments = parsed.expect("apply_conf accepted what parse_conf refused");
            for a in &assignments {
                assert_eq!(r.get_u64(a.def.tunable), a.value);
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in &errors {
                assert!(!e.to_string().is_empty());
            }
            assert_eq!(r.snapshot(), before, "a refused batch changed something");
        }
    }
});
