//! A dense size class in huge pages in an unmodified program (issue 42,
//! docs/design/hugepage-heap.md): `python3` with `PYTHONMALLOC=malloc` (every object a `malloc`)
//! preloading the library builds a million 40-byte `bytes` objects (one 80-byte class, about
//! 76 MiB), waits half a second and reads its own `AnonHugePages`: the class crossed 32 MiB, so
//! the second half of each of its chunks is a huge page from then on, and the older chunks'
//! halves, first touched on 4 KiB pages, were collapsed by the runtime's thread within a pass
//! over the pools (100 ms): 40 MiB. Without that collapse the first 32 MiB stayed on 4 KiB pages
//! (22 MiB in huge pages).
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
    // 76 MiB in the class: half of it in huge pages (each chunk's second half) but the newest
    // chunk's unreached page and what the kernel could not back (a machine with memory to spare
    // backs it).
    assert!(
        huge_mib >= 32,
        "{huge_mib} MiB of the 80-byte class in huge pages (at least 32 expected)"
    );
}
