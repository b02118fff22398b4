//! Finding `libebbtide_malloc.so`, the library `ebbtide run` and `ebbtide lab malloc` preload.
//!
//! Looked for, in order:
//! 1. `$EBBTIDE_MALLOC_LIB` (a path to the library; an error if it names no file);
//! 2. next to the running executable (`target/<profile>/` in a cargo build, where
//!    `cargo build -p ebbtide-malloc` puts it beside `ebbtide`);
//! 3. `../lib/` from the executable's directory (an installed `bin/ebbtide`).
//!
//! When none has it and the executable runs from a cargo target directory of this workspace,
//! [`locate_or_build`] builds it there (`cargo build -p ebbtide-malloc` with the same profile),
//! so `cargo run -p ebbtide-cli -- run …` works on a fresh clone.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The library's file name.
pub const MALLOC_LIB: &str = "libebbtide_malloc.so";

/// Where `libebbtide_malloc.so` is, without building anything.
pub fn locate() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("EBBTIDE_MALLOC_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "EBBTIDE_MALLOC_LIB={} names no file (it must be the path of {MALLOC_LIB})",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join(MALLOC_LIB), dir.join("../lib").join(MALLOC_LIB)];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.clone());
        }
    }
    Err(format!(
        "{MALLOC_LIB} not found (looked at $EBBTIDE_MALLOC_LIB, {} and {}); build it with \
         `cargo build --release -p ebbtide-malloc` or set EBBTIDE_MALLOC_LIB",
        candidates[0].display(),
        candidates[1].display()
    ))
}

/// [`locate`], building the library first when this executable runs from a cargo target
/// directory of the workspace (`<workspace>/target/<profile>/`) and it is not there yet.
pub fn locate_or_build() -> Result<PathBuf, String> {
    match locate() {
        Ok(p) => Ok(p),
        Err(not_found) => {
            if std::env::var_os("EBBTIDE_MALLOC_LIB").is_some() {
                return Err(not_found);
            }
            let Some((workspace, target, profile)) = cargo_layout() else {
                return Err(not_found);
            };
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.current_dir(&workspace)
                .args(["build", "-q", "-p", "ebbtide-malloc", "--target-dir"])
                .arg(&target);
            match profile.as_str() {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            eprintln!(
                "ebbtide: {MALLOC_LIB} is not built yet; building it (cargo build -p ebbtide-malloc, {profile})"
            );
            let st = cmd
                .status()
                .map_err(|e| format!("{not_found}; running cargo to build it failed: {e}"))?;
            if !st.success() {
                return Err(format!(
                    "{not_found}; `cargo build -p ebbtide-malloc` failed ({st})"
                ));
            }
            locate()
        }
    }
}

/// `(workspace root, target dir, profile dir name)` when the executable sits in
/// `<root>/target/<profile>/` (or `.../deps/`) next to this workspace's `Cargo.toml`.
fn cargo_layout() -> Option<(PathBuf, PathBuf, String)> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    if dir.file_name()? == "deps" || dir.file_name()? == "examples" {
        dir = dir.parent()?;
    }
    let profile = dir.file_name()?.to_str()?.to_string();
    let target = dir.parent()?;
    let root = target.parent()?;
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    if !manifest.contains("crates/ebbtide-malloc") {
        return None;
    }
    // `test` and `bench` profiles put their artifacts in `debug` and `release`.
    let profile = match profile.as_str() {
        "debug" | "release" => profile,
        _ => return None,
    };
    Some((root.to_path_buf(), target.to_path_buf(), profile))
}
