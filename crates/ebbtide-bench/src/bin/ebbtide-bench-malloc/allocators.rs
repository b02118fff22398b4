//! The allocators under test and how each is put into a process: always by `LD_PRELOAD`
//! (glibc too: preloading `libc.so.6` puts glibc's `malloc` first in the lookup order, which
//! matters for programs linked with another malloc, such as Debian's `redis-server` with
//! `libjemalloc.so.2`), and the proof that the preload took.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Names in table order; `ebbtide` first. `ebbtide-norseq` (not run by default) is the same
/// library with glibc told not to register rseq (`GLIBC_TUNABLES=glibc.pthread.rseq=0`), so
/// ebbtide runs without its per-CPU fast path; it is shown, not compared.
pub const NAMES: &[&str] = &[
    "ebbtide",
    "ebbtide-norseq",
    "glibc",
    "jemalloc",
    "mimalloc",
    "tcmalloc",
];

/// The allocators run when `--only` is not given.
pub const DEFAULT: &[&str] = &["ebbtide", "glibc", "jemalloc", "mimalloc", "tcmalloc"];

/// The environment of the `ebbtide-norseq` column.
pub const NORSEQ_ENV: (&str, &str) = ("GLIBC_TUNABLES", "glibc.pthread.rseq=0");

/// The Debian library of each peer and the package it comes from.
const PEERS: &[(&str, &str, &str)] = &[
    ("glibc", "libc.so.6", "libc6"),
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
    (
        "tcmalloc",
        "libtcmalloc_minimal.so.4",
        "libtcmalloc-minimal4",
    ),
];

const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// One allocator: its name and the library preloaded for it.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub name: &'static str,
    pub preload: PathBuf,
    /// Environment the program runs with besides `LD_PRELOAD`.
    pub env: Vec<(&'static str, &'static str)>,
}

impl Allocator {
    /// The peers: not ebbtide nor its variants.
    pub fn is_peer(&self) -> bool {
        !self.name.starts_with("ebbtide")
    }

    /// This allocator under another name with more environment (`ebbtide-norseq`).
    pub fn variant(&self, name: &'static str, env: (&'static str, &'static str)) -> Allocator {
        let mut v = self.clone();
        v.name = name;
        v.env.push(env);
        v
    }

    /// This allocator under another name (`--baseline`'s column).
    pub fn renamed(&self, name: &'static str) -> Allocator {
        let mut v = self.clone();
        v.name = name;
        v
    }

    /// The file name that must define `malloc` in a process of this allocator.
    pub fn defining_file(&self) -> String {
        self.preload
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("LD_PRELOAD", &self.preload)
            .envs(self.env.iter().copied());
    }

    /// `launcher REPORT PRELOAD PROGRAM`: the program started by the launcher
    /// (`benches/c/malloc/launch.c`) with this allocator preloaded, its peak RSS in `report`.
    pub fn launch(
        &self,
        launcher: &Path,
        report: &Path,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Command {
        let mut cmd = Command::new(launcher);
        cmd.arg(report)
            .arg(&self.preload)
            .arg(program)
            .env_remove("LD_PRELOAD")
            .envs(self.env.iter().copied());
        cmd
    }

    /// As [`Allocator::launch`], with ebbtide's counters read at the program's exit: `shim`
    /// (`stats_at_exit.so`) preloaded after the library, the control socket on (added to the
    /// configuration the run would have), the snapshot written to `stats`
    /// (`crate::contention`).
    pub fn launch_counted(
        &self,
        launcher: &Path,
        report: &Path,
        shim: &Path,
        stats: &Path,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Command {
        let mut preload = self.preload.clone().into_os_string();
        preload.push(":");
        preload.push(shim);
        let conf = self
            .env
            .iter()
            .find(|(k, _)| *k == "EBBTIDE_CONF")
            .map(|(_, v)| v.to_string())
            .or_else(|| std::env::var("EBBTIDE_CONF").ok())
            .filter(|c| !c.trim().is_empty());
        let conf = match conf {
            Some(c) => format!("{c},control_socket=1"),
            None => "control_socket=1".into(),
        };
        let mut cmd = Command::new(launcher);
        cmd.arg(report)
            .arg(preload)
            .arg(program)
            .env_remove("LD_PRELOAD")
            .envs(self.env.iter().copied())
            .env("EBBTIDE_CONF", conf)
            .env(crate::contention::STATS_ENV, stats);
        cmd
    }

    /// `LD_PRELOAD=... ` for a reproducer command line.
    pub fn shell_prefix(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.env {
            s += &format!("{k}={v} ");
        }
        s + &format!("LD_PRELOAD={}", self.preload.display())
    }
}

/// Whether `LD_PRELOAD` can carry `path`: the dynamic linker splits it at spaces and colons.
pub fn preloadable(path: &Path) -> Result<(), String> {
    let s = path.to_string_lossy();
    if s.contains([' ', ':', '\t', '\n']) {
        return Err(format!(
            "{s} has a space or colon, which LD_PRELOAD cannot carry (it splits there): \
             move it (or the --work/TMPDIR directory) to a path without one"
        ));
    }
    Ok(())
}

pub fn find_lib(file: &str) -> Option<PathBuf> {
    LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(file))
        .find(|p| p.exists())
}

/// The peers named in `only` that are installed (looked for in `dir` first when given: a
/// packed folder's copies); a note on stderr for each missing one.
pub fn peers(only: &[String], dir: Option<&Path>) -> Vec<Allocator> {
    let mut v = Vec::new();
    for (name, file, package) in PEERS {
        if !only.iter().any(|o| o == name) {
            continue;
        }
        let packed = dir.map(|d| d.join(file)).filter(|p| p.is_file());
        match packed.or_else(|| find_lib(file)) {
            Some(p) => v.push(Allocator {
                name,
                preload: p,
                env: Vec::new(),
            }),
            None => eprintln!(
                "skipping {name}: {file} not found in {} (Debian: apt-get install {package})",
                LIB_DIRS.join(", ")
            ),
        }
    }
    v
}

/// `libebbtide_malloc.so`: the `--lib` path, else `$EBBTIDE_MALLOC_LIB`, else found beside
/// this executable or built (`ebbtide_lab::malloc_lib::locate_or_build`). Copied into `dir`
/// (name with its content hash) so a rebuild during the run does not change what is measured.
pub fn ebbtide(lib: Option<&Path>, dir: &Path) -> Result<(Allocator, String), String> {
    let src = match lib {
        Some(p) if p.is_file() => p.to_path_buf(),
        Some(p) => {
            return Err(format!(
                "--lib {}: no such file (the path of libebbtide_malloc.so)",
                p.display()
            ))
        }
        None => ebbtide_lab::malloc_lib::locate_or_build()?,
    };
    let bytes = std::fs::read(&src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let hash = fnv1a(&bytes);
    let copy = dir.join(format!("libebbtide_malloc-{hash:016x}.so"));
    if !copy.exists() {
        std::fs::write(&copy, &bytes)
            .map_err(|e| format!("cannot copy {} to {}: {e}", src.display(), copy.display()))?;
    }
    let about = format!(
        "{} ({} bytes, fnv1a {hash:016x}, copied to {})",
        src.display(),
        bytes.len(),
        copy.display()
    );
    Ok((
        Allocator {
            name: "ebbtide",
            preload: copy,
            env: Vec::new(),
        },
        about,
    ))
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

/// Checks, with the dynamic linker's own trace, that in `cmd` (run with `LD_BIND_NOW=1`
/// `LD_DEBUG=bindings`, the allocator preloaded) every binding of `malloc`, `free`, `calloc`,
/// `realloc` and `malloc_usable_size` goes to the allocator's library. `cmd` should be a cheap invocation of the
/// program (`--version`).
pub fn check_bindings(mut cmd: Command, a: &Allocator, dir: &Path) -> Result<(), String> {
    let base = dir.join(format!("bindings-{}", a.name));
    // LD_DEBUG_OUTPUT appends ".PID": remove old ones first.
    clear_prefixed(&base);
    a.apply(&mut cmd);
    let out = cmd
        .env("LD_BIND_NOW", "1")
        .env("LD_DEBUG", "bindings")
        .env("LD_DEBUG_OUTPUT", &base)
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} under {} failed ({}): {}",
            cmd.get_program(),
            a.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut text = String::new();
    for f in prefixed(&base) {
        text += &std::fs::read_to_string(&f).unwrap_or_default();
    }
    clear_prefixed(&base);
    let program = crate::child::which(&cmd.get_program().to_string_lossy());
    binds_to(&text, &a.defining_file(), program.as_deref())
}

/// Every `malloc`/`free`/`calloc`/`realloc`/`malloc_usable_size` binding in an `LD_DEBUG=bindings` trace goes to a
/// file whose name ends in `want`; at least one `malloc` binding is there. A binding to the
/// program itself (`program`) is let through: a non-PIE executable that takes the address of
/// `free` exports a canonical PLT entry for it, other objects bind to that, and it is the
/// program's own binding (checked like any other) that says where `free` really is.
pub fn binds_to(trace: &str, want: &str, program: Option<&Path>) -> Result<(), String> {
    let program = program.and_then(|p| p.canonicalize().ok());
    let mut mallocs = 0;
    for line in trace.lines() {
        let Some((files, sym)) = line.split_once(": normal symbol `") else {
            continue;
        };
        let sym = sym.split('\'').next().unwrap_or("");
        if !matches!(
            sym,
            "malloc" | "free" | "calloc" | "realloc" | "malloc_usable_size"
        ) {
            continue;
        }
        // "binding file A [0] to B [0]"
        let to = files
            .split(" to ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .unwrap_or("");
        let to_program =
            program.is_some() && Path::new(to).canonicalize().ok().as_deref() == program.as_deref();
        if !to.ends_with(want) && !to_program {
            return Err(format!(
                "`{sym}` binds to {to}, not {want} (the preload did not take): {}",
                line.trim()
            ));
        }
        if sym == "malloc" {
            mallocs += 1;
        }
    }
    if mallocs == 0 {
        return Err("no binding of `malloc` in the LD_DEBUG=bindings trace".into());
    }
    Ok(())
}

fn prefixed(base: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(stem)) = (base.parent(), base.file_name()) else {
        return Vec::new();
    };
    let stem = stem.to_string_lossy().into_owned() + ".";
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&stem))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn clear_prefixed(base: &Path) {
    for f in prefixed(base) {
        let _ = std::fs::remove_file(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_trace_is_read_per_symbol() {
        let ok = "     12345:\tbinding file /usr/bin/redis-server [0] to /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 [0]: normal symbol `malloc'\n\
                  12345:\tbinding file /lib/x86_64-linux-gnu/libc.so.6 [0] to /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 [0]: normal symbol `free' [GLIBC_2.2.5]\n\
                  12345:\tbinding file /usr/bin/redis-server [0] to /lib/x86_64-linux-gnu/libjemalloc.so.2 [0]: normal symbol `mallctl'\n";
        assert_eq!(binds_to(ok, "libmimalloc.so.2", None), Ok(()));
        let e = binds_to(ok, "libc.so.6", None).unwrap_err();
        assert!(
            e.contains("`malloc` binds to") && e.contains("libmimalloc"),
            "{e}"
        );
        let bad = "1:\tbinding file /usr/bin/x [0] to /lib/x86_64-linux-gnu/libc.so.6 [0]: normal symbol `realloc'\n\
                   1:\tbinding file /usr/bin/x [0] to /l/libmimalloc.so.2 [0]: normal symbol `malloc'\n";
        assert!(binds_to(bad, "libmimalloc.so.2", None)
            .unwrap_err()
            .contains("`realloc`"));
        assert!(binds_to("", "libc.so.6", None)
            .unwrap_err()
            .contains("no binding"));
        // `malloc_usable_size` must come from the same allocator (redis calls it on every
        // object); `malloc_stats_print` and other names are not checked.
        let other =
            "1:\tbinding file /a [0] to /l/libc.so.6 [0]: normal symbol `malloc_usable_size'\n\
                     1:\tbinding file /a [0] to /l/libx.so [0]: normal symbol `malloc'\n";
        assert!(binds_to(other, "libx.so", None)
            .unwrap_err()
            .contains("malloc_usable_size"));
        let other =
            "1:\tbinding file /a [0] to /l/libc.so.6 [0]: normal symbol `malloc_stats_print'\n\
                     1:\tbinding file /a [0] to /l/libx.so [0]: normal symbol `malloc'\n";
        assert_eq!(binds_to(other, "libx.so", None), Ok(()));
        // A binding to the program's own canonical PLT entry (Debian's non-PIE python3).
        let sh = crate::child::which("sh").unwrap();
        let canon = format!(
            "1:\tbinding file /l/libc.so.6 [0] to {} [0]: normal symbol `free'\n\
             1:\tbinding file {} [0] to /l/libx.so [0]: normal symbol `malloc'\n",
            sh.display(),
            sh.display()
        );
        assert_eq!(binds_to(&canon, "libx.so", Some(&sh)), Ok(()));
        assert!(binds_to(&canon, "libx.so", None).is_err());
    }

    #[test]
    fn preload_paths() {
        assert!(preloadable(Path::new("/a/b/libx.so")).is_ok());
        assert!(preloadable(Path::new("/a b/libx.so"))
            .unwrap_err()
            .contains("space or colon"));
        assert!(preloadable(Path::new("/a:b/libx.so")).is_err());
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
