//! Property tests of the tunables registry: parsers are total, valid settings round-trip,
//! failed settings change nothing.

use ebbtide::options::parse::{canonical, human, parse_conf, parse_value};
use ebbtide::options::{Kind, Registry, TABLE};
use proptest::prelude::*;

/// A tunable index and a value inside its range.
fn valid_setting() -> impl Strategy<Value = (usize, u64)> {
    (0..TABLE.len()).prop_flat_map(|i| {
        let d = &TABLE[i];
        let values = match d.kind {
            Kind::Words(words) => (0..(1u64 << words.len())).boxed(),
            _ => prop_oneof![Just(d.min), Just(d.max), d.min..=d.max].boxed(),
        };
        (Just(i), values)
    })
}

/// Text that looks like settings: names, near-names, values, separators, junk.
fn conf_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(TABLE.iter().map(|d| d.name).collect::<Vec<_>>())
            .prop_map(str::to_string),
        "[a-z_]{0,20}",
        "[0-9]{0,25}",
        proptest::sample::select(vec![
            "=", ",", "+", "|", "ms", "us", "s", "min", "K", "MiB", "G", "%", "none", "psi",
            "true", " ", "_", "=,", "é", "\u{0}", "\n"
        ])
        .prop_map(str::to_string),
        any::<String>(),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parsers_never_panic(s in conf_like()) {
        let _turn = crate::serial::turn(module_path!());
        let _ = parse_conf(&s, "EBBTIDE_CONF");
        for d in TABLE.iter() {
            let _ = parse_value(d, &s);
        }
        let r = Registry::new();
        let _ = r.apply_conf(&s);
        let _ = r.set(&s, &s);
        let _ = r.get(&s);
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>(), v in any::<String>()) {
        let _turn = crate::serial::turn(module_path!());
        let _ = parse_conf(&s, "x");
        let r = Registry::new();
        let _ = r.set(&s, &v);
        for d in TABLE.iter() {
            let _ = parse_value(d, &v);
        }
    }

    #[test]
    fn valid_set_get_round_trips((i, v) in valid_setting(), use_human in any::<bool>()) {
        let _turn = crate::serial::turn(module_path!());
        let d = &TABLE[i];
        let r = Registry::new();
        let text = if use_human { human(d, v) } else { canonical(d, v) };
        match r.set(d.name, &text) {
            Ok(()) => {
                prop_assert_eq!(r.get_u64(d.tunable), v);
                let got = r.get(d.name).unwrap();
                prop_assert_eq!(&got, &canonical(d, v));
                // What get returns is accepted back and means the same.
                prop_assert_eq!(parse_value(d, &got), Ok(v));
            }
            Err(e) => {
                // Only the cross-tunable rules may refuse a value inside the range.
                prop_assert!(
                    matches!(e.kind, ebbtide::options::OptionErrorKind::Conflict { .. }),
                    "{} = {} refused: {}", d.name, text, e
                );
                prop_assert_eq!(r.get_u64(d.tunable), d.default);
            }
        }
    }

    #[test]
    fn failed_set_changes_nothing(name in conf_like(), value in conf_like(), frozen in any::<bool>()) {
        let _turn = crate::serial::turn(module_path!());
        let r = Registry::new();
        r.set("squeeze_ms", "33").unwrap();
        if frozen {
            r.freeze_startup();
        }
        let before = r.snapshot();
        if r.set(&name, &value).is_err() {
            prop_assert_eq!(r.snapshot(), before);
        }
    }

    #[test]
    fn failed_conf_changes_nothing(good in proptest::collection::vec(valid_setting(), 0..6),
                                   bad in conf_like()) {
        let _turn = crate::serial::turn(module_path!());
        let r = Registry::new();
        let before = r.snapshot();
        let mut conf: Vec<String> = good
            .iter()
            .map(|&(i, v)| format!("{}={}", TABLE[i].name, canonical(&TABLE[i], v).replace(',', "+")))
            .collect();
        conf.push(format!("squeez_ms={bad}"));
        let text = conf.join(",");
        prop_assert!(r.apply_conf(&text).is_err(), "{}", text);
        prop_assert_eq!(r.snapshot(), before);
    }
}
