//! `cargo build -p PACKAGE --profile PROFILE` into the running test binary's own target
//! directory: how the malloc's tests (`support::build_lib`) and the C API's (`c_tests.rs`,
//! which includes this file with `#[path]`) get the shared library they load or link.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `package` of the workspace at `root` with `profile` into this test's target directory
/// and returns the directory the profile's artifacts land in (`target/<dir>`).
pub fn cargo_build(root: &Path, package: &str, profile: &str, dir: &str) -> PathBuf {
    // .../target/<profile>/deps/<test>-HASH → .../target
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
    let out = Command::new(env!("CARGO"))
        .args(["build", "-p", package, "--profile", profile, "--target-dir"])
        .arg(target)
        .current_dir(root)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build -p {package} --profile {profile} failed: status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    target.join(dir)
}
