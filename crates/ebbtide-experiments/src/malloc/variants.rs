//! The allocators `lab malloc` compares, and how each is put under an unmodified program.
//!
//! Every one is preloaded (`LD_PRELOAD`), the way a user of a malloc replacement runs a
//! program they did not build: jemalloc (default, and `MALLOC_CONF=background_thread:true`),
//! mimalloc, tcmalloc (gperftools, minimal) from Debian's packages, and ebbtide's
//! `libebbtide_malloc.so` ([`ebbtide_lab::malloc_lib::locate_or_build`]) with `EBBTIDE_CONF`.
//!
//! glibc is "nothing preloaded" — except for Debian's `redis-server`, which links
//! `libjemalloc.so.2`: its `malloc` binds to jemalloc unless something comes first in the
//! search order. Preloading glibc's own `libc.so.6` puts it first (one copy is loaded; only
//! the order changes), so `malloc`/`free`/`malloc_usable_size` bind to glibc, as
//! `LD_DEBUG=bindings` shows. redis's calls of jemalloc's own `nallocx`/`mallctl` (size
//! hints, `INFO` statistics) still go to jemalloc under every preload: a preload replaces only
//! the names it defines.
//!
//! [`check_binding`] proves that `malloc` really binds to the preloaded library before any
//! figure is taken (an empty or broken build of the ebbtide library would otherwise measure
//! glibc under ebbtide's name).

use crate::idle::find_lib;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The two unmodified programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// Debian's `redis-server`.
    Redis,
    /// Debian's `python3` with `PYTHONMALLOC=malloc`.
    Python,
}

impl Program {
    /// `redis` or `python`.
    pub fn name(self) -> &'static str {
        match self {
            Program::Redis => "redis",
            Program::Python => "python",
        }
    }
}

/// One allocator.
#[derive(Clone, Debug)]
pub struct Variant {
    /// Row name: `ebbtide`, `glibc`, `jemalloc`, `jemalloc-bg`, `mimalloc`, `tcmalloc`.
    pub name: &'static str,
    /// The preloaded library for Python (`None`: glibc).
    pub preload: Option<PathBuf>,
    /// `MALLOC_CONF` (jemalloc).
    pub malloc_conf: Option<&'static str>,
    /// `EBBTIDE_CONF` (ebbtide).
    pub ebbtide_conf: Option<String>,
}

impl Variant {
    /// Whether this is ebbtide.
    pub fn is_ebbtide(&self) -> bool {
        self.name == "ebbtide"
    }

    /// The library to preload under `program`.
    pub fn preload_for(&self, program: Program) -> Option<PathBuf> {
        match (&self.preload, program) {
            (None, Program::Redis) => find_lib("libc.so.6"),
            (p, _) => p.clone(),
        }
    }

    /// The environment that selects this allocator under `program`.
    pub fn env(&self, program: Program) -> Vec<(String, String)> {
        let mut v = Vec::new();
        if let Some(p) = self.preload_for(program) {
            v.push(("LD_PRELOAD".into(), p.display().to_string()));
        }
        if let Some(c) = self.malloc_conf {
            v.push(("MALLOC_CONF".into(), c.into()));
        }
        if let Some(c) = &self.ebbtide_conf {
            v.push(("EBBTIDE_CONF".into(), c.clone()));
        }
        v
    }
}

/// Variables of the lab's own environment that the programs must not inherit.
/// `EBBTIDE_MALLOC_LIB` tells the lab where the library is; a preloaded ebbtide reads every
/// `EBBTIDE_*` variable as a tunable, does not know this one and then ignores *all* its
/// environment settings (`EBBTIDE_CONF` included) — seen with the library at main 854ba0a.
pub const LAB_ONLY_ENV: &[&str] = &["EBBTIDE_MALLOC_LIB"];

/// Applies the allocator's environment to a program's command: sets `env`, removes
/// [`LAB_ONLY_ENV`].
pub fn apply_env(cmd: &mut std::process::Command, env: &[(String, String)]) {
    for k in LAB_ONLY_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
}

/// The `EBBTIDE_CONF` of the ebbtide rows: the caller's own `EBBTIDE_CONF` (if any) and the
/// control socket on, so the lab can read the preloaded program's statistics.
pub fn ebbtide_conf() -> String {
    match std::env::var("EBBTIDE_CONF") {
        Ok(c) if !c.trim().is_empty() => format!("{},control_socket=true", c.trim()),
        _ => "control_socket=true".into(),
    }
}

/// The allocators found on this machine, and a note for each one skipped.
pub fn variants(ebbtide_lib: Result<PathBuf, String>) -> (Vec<Variant>, Vec<String>) {
    let mut v = Vec::new();
    let mut notes = Vec::new();
    match ebbtide_lib.and_then(|p| check_binding(&p).map(|()| p)) {
        Ok(p) => v.push(Variant {
            name: "ebbtide",
            preload: Some(p),
            malloc_conf: None,
            ebbtide_conf: Some(ebbtide_conf()),
        }),
        Err(e) => notes.push(format!("ebbtide skipped: {e}")),
    }
    v.push(Variant {
        name: "glibc",
        preload: None,
        malloc_conf: None,
        ebbtide_conf: None,
    });
    for (name, lib, conf, pkg) in crate::idle::PEERS {
        match find_lib(lib) {
            Some(p) => match check_binding(&p) {
                Ok(()) => v.push(Variant {
                    name,
                    preload: Some(p),
                    malloc_conf: conf,
                    ebbtide_conf: None,
                }),
                Err(e) => notes.push(format!("{name} skipped: {e}")),
            },
            None => notes.push(format!(
                "{name} skipped: {lib} not found (Debian: apt-get install {pkg})"
            )),
        }
    }
    (v, notes)
}

/// Runs `python3 -c pass` with `lib` preloaded and `LD_DEBUG=bindings`: `Ok` if `malloc`
/// bound to `lib`.
pub fn check_binding(lib: &Path) -> Result<(), String> {
    let out = Command::new(super::python::interpreter())
        .args(["-c", "pass"])
        .env("LD_PRELOAD", lib)
        .env("LD_DEBUG", "bindings")
        .env("PYTHONMALLOC", "malloc")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run python3 to check {}: {e}", lib.display()))?;
    let text = String::from_utf8_lossy(&out.stderr);
    if binds_malloc_to(&text, lib) {
        Ok(())
    } else {
        Err(format!(
            "{} does not provide malloc (LD_DEBUG=bindings of python3 shows no `malloc' bound \
             to it; {})",
            lib.display(),
            if out.status.success() {
                "python3 ran".to_string()
            } else {
                format!("python3 failed: {}", out.status)
            }
        ))
    }
}

/// Whether an `LD_DEBUG=bindings` log binds the symbol `malloc` to `lib`.
pub fn binds_malloc_to(log: &str, lib: &Path) -> bool {
    let lib = lib.to_string_lossy();
    let base = Path::new(lib.as_ref())
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    log.lines().any(|l| {
        l.contains("normal symbol `malloc'")
            && l.split(" to ").nth(1).is_some_and(|to| {
                let target = to.split_whitespace().next().unwrap_or("");
                target == lib || (!base.is_empty() && target.ends_with(&format!("/{base}")))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_log_is_read() {
        let log = "   27708:\tbinding file python3 [0] to /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 [0]: normal symbol `malloc'\n\
                   27708:\tbinding file python3 [0] to /lib/x86_64-linux-gnu/libc.so.6 [0]: normal symbol `free'";
        assert!(binds_malloc_to(
            log,
            Path::new("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2")
        ));
        assert!(!binds_malloc_to(
            log,
            Path::new("/lib/x86_64-linux-gnu/libc.so.6")
        ));
        assert!(!binds_malloc_to("", Path::new("/x/libebbtide_malloc.so")));
    }

    #[test]
    fn glibc_under_redis_preloads_libc() {
        let g = Variant {
            name: "glibc",
            preload: None,
            malloc_conf: None,
            ebbtide_conf: None,
        };
        assert!(g.env(Program::Python).is_empty());
        if let Some(libc) = find_lib("libc.so.6") {
            assert_eq!(
                g.env(Program::Redis),
                vec![("LD_PRELOAD".to_string(), libc.display().to_string())]
            );
        }
    }
}
