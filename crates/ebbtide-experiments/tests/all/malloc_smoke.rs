//! `ebbtide-lab malloc --smoke` for real (root): Debian's redis-server and python3 in
//! memory-limited cgroups with a swap allowance, each with glibc, jemalloc and — when
//! `libebbtide_malloc.so` is there (`EBBTIDE_MALLOC_LIB`, or built by the lab in this cargo
//! tree) — ebbtide. Checks the machinery and the behaviour the experiment exists to show, not
//! particular figures:
//!
//! * every run produced its record (burst really made, data really deleted);
//! * with glibc, whose cache nothing empties, the neighbour forces the group into swap or
//!   the OOM killer, and the freed memory is not back;
//! * ebbtide (when it ran) gave the memory back under the neighbour: back within the window,
//!   no OOM kill;
//! * the tables, plots and `summary.json` are written, and nothing is left behind (cgroups,
//!   swap file, sockets).
//!
//! Without root, or without redis-server/python3, it says why and skips. About 40 s.

#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ebbtide-lab"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn leftovers(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let tag = format!("ebbtide-lab-{pid}-");
    if let Ok(h) = ebbtide_lab::MemoryHierarchy::detect() {
        for base in std::iter::once(h.base_dir).chain(h.psi_base_dir) {
            for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with(&tag) {
                    found.push(e.path().display().to_string());
                }
            }
        }
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let swap_tag = format!("ebbtide-lab-swap-{pid}-");
    found.extend(
        swaps
            .lines()
            .filter(|l| l.contains(&swap_tag))
            .map(String::from),
    );
    let tmp = std::env::temp_dir().join(format!("ebbtide-lab-malloc-{pid}"));
    if tmp.exists() {
        found.push(tmp.display().to_string());
    }
    found
}

fn record<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] == name)
        .unwrap_or_else(|| panic!("no record {name} in {s}"))
}

fn num(r: &Value, k: &str) -> f64 {
    r[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {r}"))
}

#[test]
fn malloc_smoke() {
    let _turn = crate::serial::turn(module_path!());
    if !is_root() {
        skip::skip("malloc_smoke", "needs root (memory cgroups, a swap file)");
        return;
    }
    if !have("redis-server") || !have("redis-cli") || !have("python3") {
        skip::skip(
            "malloc_smoke",
            "needs redis-server, redis-cli and python3 \
             (apt-get install redis-server redis-tools python3)",
        );
        return;
    }
    let out = std::env::temp_dir().join(format!("ebbtide-malloc-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let child = Command::new(exe())
        .args(["malloc", "--smoke", "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ebbtide-lab");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("{stderr}");
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        leftovers(pid).is_empty(),
        "left behind: {:?}",
        leftovers(pid)
    );

    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let ebbtide_ran = s["variants"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["variant"] == "redis/neighbour/ebbtide");
    for program in ["redis", "python"] {
        for mode in ["neighbour", "idle"] {
            for alloc in ["glibc", "jemalloc"] {
                let r = record(&s, &format!("{program}/{mode}/{alloc}"));
                assert!(r.get("error").is_none(), "{r}");
                // The burst was real: tens of MiB above the start.
                assert!(num(r, "peak_mib") > num(r, "before_mib") + 20.0, "{r}");
            }
            let plot = out.join(format!("malloc-{program}-{mode}.svg"));
            assert!(plot.exists(), "{}", plot.display());
        }
        // glibc keeps the freed memory: the neighbour forces swap-outs or an OOM kill.
        let g = record(&s, &format!("{program}/neighbour/glibc"));
        assert!(
            num(g, "group_swap_out_mib") > 0.0 || num(g, "oom_kills") > 0.0,
            "the neighbour put no pressure on glibc: {g}"
        );
        assert_ne!(g["back"], "back", "{g}");
        if ebbtide_ran {
            let e = record(&s, &format!("{program}/neighbour/ebbtide"));
            assert_eq!(e["back"], "back", "ebbtide kept the memory: {e}");
            assert_eq!(num(e, "oom_kills"), 0.0, "{e}");
        } else {
            eprintln!("note: no ebbtide rows (libebbtide_malloc.so missing or not a malloc)");
        }
    }
    assert!(
        stdout.contains("Targets (memory back within 3 s"),
        "{stdout}"
    );
    assert!(out.join("tables.txt").exists());
    let _ = std::fs::remove_dir_all(&out);
}
