//! `docs/ABI/testing/control/socket` must say what the control code says (the verb table and
//! the limits). `EBBTIDE_BLESS=1 cargo test -p ebbtide --test all control_abi` rewrites it,
//! keeping each entry's `Date:`, `Version:` and `Users:`.

use ebbtide::abi::control::file;
use ebbtide::abi::{compare, parse, regenerate};
use std::path::Path;

#[test]
fn control_abi_doc_matches_code() {
    let _turn = crate::serial::turn(module_path!());
    let f = file();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/ABI")
        .join(&f.path);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let existing = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if std::env::var_os("EBBTIDE_BLESS").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, regenerate(&f, &existing)).unwrap();
        return;
    }
    assert!(!text.is_empty(), "{} is missing", path.display());
    let problems = compare(&f.path, &f.entries, &existing);
    assert!(
        problems.is_empty(),
        "{} disagrees with the code (regenerate with EBBTIDE_BLESS=1 cargo test -p ebbtide \
         --test all control_abi):\n{}",
        f.path,
        problems.join("\n")
    );
    // Every verb and the socket are documented, under their dotted names.
    let keys: Vec<&str> = existing.iter().map(|e| e.key()).collect();
    assert_eq!(keys[0], "ebbtide.control.socket");
    for v in ebbtide::control::protocol::VERBS {
        assert!(keys.contains(&format!("ebbtide.control.{}", v.name).as_str()));
    }
}
