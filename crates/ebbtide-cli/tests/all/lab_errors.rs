//! `ebbtide lab`'s bad input reads as every other `ebbtide` error: `ebbtide: error: WHAT`, the
//! wrong word named, a failure exit status, and nothing run.

use std::process::Command;

const EBBTIDE: &str = env!("CARGO_BIN_EXE_ebbtide");

fn lab(args: &[&str]) -> (i32, String) {
    let o = Command::new(EBBTIDE)
        .arg("lab")
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_experiment_is_an_ebbtide_error_naming_it() {
    let _turn = crate::serial::turn(module_path!());
    let (code, err) = lab(&["bogus"]);
    assert_eq!(code, 2, "{err}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("ebbtide: error: unknown experiment \"bogus\""),
        "{err}"
    );
    assert!(first.contains("blkback"), "the choices are named: {err}");
}

#[test]
fn every_usage_error_of_the_lab_has_the_prefix() {
    let _turn = crate::serial::turn(module_path!());
    for args in [
        &["--bogus"][..],
        &[][..],
        &["blkback", "--runs", "x"][..],
        &["replot"][..],
    ] {
        let (code, err) = lab(args);
        assert_ne!(code, 0, "{args:?}: {err}");
        assert!(err.starts_with("ebbtide: error: "), "{args:?}: {err}");
    }
}

#[test]
fn the_error_prefix_is_the_one_of_the_other_commands() {
    let _turn = crate::serial::turn(module_path!());
    // The same prefix as a command that fails after parsing (no such process).
    let o = Command::new(EBBTIDE)
        .args(["stat", "--", "999999999"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("ebbtide: error: "), "{err}");
}
