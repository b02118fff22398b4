//! A dense size class in huge pages in an unmodified program (issue 42,
//! docs/design/hugepage-heap.md): `python3` with `PYTHONMALLOC=malloc` (every object a `malloc`)
//! preloading the library builds a million 40-byte `bytes` objects (one 80-byte class, about
//! 76 MiB), waits half a second and reads its own `AnonHugePages`: the class crossed 32 MiB, so
//! its chunks from then on are huge pages and the older ones, first touched on 4 KiB pages, were
//! collapsed by the runtime's thread within a pass over the pools (100 ms). Without that
//! collapse the first 32 MiB stayed on 4 KiB pages.
//!
//! THP `never` (nothing can be huge) skips saying so.

#[path = "../support/mod.rs"]
mod support;

use support::{command, lib};

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

#[test]
fn a_dense_class_of_a_python_program_sits_in_huge_pages() {
    let _turn = crate::serial::turn(module_path!());
    let mode = std::fs::read_to_string(THP).unwrap_or_default();
    if mode.is_empty() || mode.contains("[never]") {
        support::skip::skip(
            "a_dense_class_of_a_python_program_sits_in_huge_pages",
            &format!("THP is off here ({THP}: {mode:?})"),
        );
        return;
    }
    let script = "\
import time
xs = [bytes(40) for _ in range(1_000_000)]
time.sleep(0.5)
for line in open('/proc/self/smaps_rollup'):
    if line.startswith('AnonHugePages:'):
        print(int(line.split()[1]) // 1024)
";
    let out = command("python3")
        .args(["-S", "-c", script])
        .env("PYTHONMALLOC", "malloc")
        .env("LD_PRELOAD", lib())
        .output()
        .expect("run python3 (Debian package python3)");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let huge_mib: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no AnonHugePages line: {out:?}"));
    eprintln!("python3, 1,000,000 bytes(40): {huge_mib} MiB in huge pages");
    // 76 MiB in the class: all of it huge but the newest chunk's unreached page and what the
    // kernel could not back (a machine with memory to spare backs it).
    assert!(
        huge_mib >= 64,
        "{huge_mib} MiB of the 80-byte class in huge pages (at least 64 expected)"
    );
}

/// A memory cgroup of its own for one test, removed when dropped (also when the test fails):
/// cgroup v1's memory hierarchy where it is mounted (this host), else v2's. `None` (the test
/// skips, saying why) where none can be made: not root, no memory controller.
struct Cgroup {
    dir: std::path::PathBuf,
    usage: &'static str,
}

impl Cgroup {
    fn new(name: &str) -> Option<Cgroup> {
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
        let (parent, usage) = if v1.join("memory.usage_in_bytes").exists() {
            (v1.to_path_buf(), "memory.usage_in_bytes")
        } else {
            let root = std::path::Path::new("/sys/fs/cgroup");
            let ctl = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "memory") {
                return None;
            }
            // Children of the root get the memory controller only when the root hands it down.
            let sub =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !sub.split_whitespace().any(|c| c == "memory")
                && std::fs::write(root.join("cgroup.subtree_control"), "+memory").is_err()
            {
                return None;
            }
            (root.to_path_buf(), "memory.current")
        };
        let dir = parent.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Cgroup { dir, usage })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The child has exited (waited for); its charge may take a moment to leave.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// What a program gives back is uncharged from its memory cgroup at once, not when the kernel
/// gets round to splitting the huge pages it broke: `python3` (`PYTHONMALLOC=malloc`) in a
/// memory cgroup of its own builds a million 40-byte objects (the 80-byte class, dense: huge
/// chunks), frees them and calls `malloc_trim(0)`, reading the cgroup's charge before, at the
/// top and after. Measured (cgroup v1, THP `madvise`): 5, 95 and 8 MiB; with the chunks' huge
/// pages given back in part without a split first (`os::split_huge`), 5, 95 and 49 — RSS 11
/// MiB all the same, the rest charged until memory pressure made the kernel split the pages.
#[test]
fn a_trimmed_python_program_leaves_its_memory_cgroup_uncharged() {
    let _turn = crate::serial::turn(module_path!());
    let Some(cg) = Cgroup::new("ebbtide-trim") else {
        support::skip::skip(
            "a_trimmed_python_program_leaves_its_memory_cgroup_uncharged",
            "no memory cgroup can be made here (not root, or no memory controller)",
        );
        return;
    };
    let script = "\
import ctypes, sys, time
usage = lambda: int(open(sys.argv[1]).read()) >> 20
time.sleep(0.2)
start = usage()
xs = [bytes(40) for _ in range(1_000_000)]
time.sleep(0.5)
full = usage()
del xs
ctypes.CDLL(None).malloc_trim(0)
print(start, full, usage())
";
    let procs = cg.dir.join("cgroup.procs");
    let out = command("sh")
        .args([
            "-c",
            "echo $$ > \"$1\" && exec python3 -S -c \"$2\" \"$3\"",
            "sh",
        ])
        .arg(&procs)
        .arg(script)
        .arg(cg.dir.join(cg.usage))
        .env("PYTHONMALLOC", "malloc")
        .env("LD_PRELOAD", lib())
        .output()
        .expect("run sh and python3 (Debian package python3)");
    assert!(
        out.status.success(),
        "python3 in {}: {}",
        cg.dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mib: Vec<u64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let [start, full, trimmed] = mib[..] else {
        panic!("python3 printed {text:?}");
    };
    eprintln!("python3's memory cgroup: {start} MiB, {full} with the objects, {trimmed} after malloc_trim");
    assert!(full >= start + 64, "the objects were charged: {mib:?}");
    assert!(
        (trimmed - start) * 4 <= full - start,
        "{start} MiB charged at the start, {full} with the objects, {trimmed} after malloc_trim: \
         more than a quarter of what was given back is still charged (huge pages broken \
         without a split?)"
    );
}
