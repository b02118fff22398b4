//! Whether a VM test may skip: only where nobody promised it runs.
//!
//! On our machines (root) and in CI (`CI` set to anything but `false`/`0`/empty) `build.sh`
//! installs what is missing and the VM must boot, so an [`Unavailable`] there is a test failure.
//! Elsewhere (a developer's unprivileged checkout without qemu) the test says why and skips.

/// Why no guest can be had here.
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl Unavailable {
    pub fn new(s: impl Into<String>) -> Self {
        Unavailable(s.into())
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether VM tests must run here: under CI or as root.
pub fn must_run() -> bool {
    let ci = std::env::var("CI")
        .map(|v| !matches!(v.trim(), "" | "0" | "false"))
        .unwrap_or(false);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    ci || root
}

/// `Some(value)` when `r` is usable; when not: panics where the VM must work ([`must_run`]),
/// else prints the reason for `test` and returns `None` (the caller returns: skipped).
pub fn require<T>(test: &str, r: Result<T, Unavailable>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(why) if must_run() => panic!("{test}: the VM is required here (CI or root) but: {why}"),
        Err(why) => {
            eprintln!("{test}: SKIPPED, no VM here: {why}");
            None
        }
    }
}
