// A test binary of its own, outside tests/all/: the environment is read once, before anything else reads the options.
//! `init_from_env` against the real process environment (one test: the environment and the
//! global registry are process-wide).

use ebbtide::options::{self, OptionErrorKind, Tunable, Watcher};

#[test]
fn env_is_read_once_all_or_nothing_then_frozen() {
    // Set before anything reads the environment (this binary has no other test).
    std::env::set_var(
        "EBBTIDE_CONF",
        "squeeze_ms=25,sources=psi,cgroup1,checked=true,trim_interval_ms=1",
    );
    std::env::set_var("EBBTIDE_MAX_CACHED_BYTES", "64M");

    let errors = options::init_from_env();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(errors[0].kind, OptionErrorKind::OutOfRange { .. }));
    assert!(
        errors[0].to_string().contains("100ms..=3600000ms"),
        "{}",
        errors[0]
    );
    // Nothing applied: one bad entry blocks the whole environment.
    assert_eq!(options::get_u64(Tunable::SqueezeMs), 10);
    assert_eq!(options::get_u64(Tunable::MaxCachedBytes), 0);
    assert!(!options::get_bool(Tunable::Checked));
    assert_eq!(options::generation(), 0);

    // Idempotent: the environment is not read again, the same errors come back.
    std::env::set_var("EBBTIDE_CONF", "squeeze_ms=25");
    let again = options::init_from_env();
    assert_eq!(again, errors);
    assert_eq!(options::get_u64(Tunable::SqueezeMs), 10);

    // The API still works before and after the freeze.
    let mut w = Watcher::new();
    assert!(!w.changed());
    options::set("checked", "true").unwrap();
    assert!(w.changed());
    assert!(!w.changed());
    assert_eq!(options::freeze_startup(), errors);
    let e = options::set("checked", "false").unwrap_err();
    assert!(matches!(e.kind, OptionErrorKind::StartupOnly { .. }), "{e}");
    options::set("squeeze_ms", "1s").unwrap();
    assert_eq!(options::get_duration(Tunable::SqueezeMs).as_millis(), 1000);
    assert_eq!(options::get("squeeze_ms").unwrap(), "1000");
    assert!(options::sources().contains("psi"));
    assert_eq!(options::list().len(), options::TABLE.len());
    assert_eq!(
        options::last_changed(Tunable::SqueezeMs),
        options::generation()
    );
}
