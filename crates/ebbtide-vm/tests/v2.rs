//! ebbtide on a stock kernel's cgroup v2 (Debian's, in a qemu guest; see the `ebbtide-vm`
//! crate): every v2 pressure source for real, unprivileged processes, the malloc under an
//! unmodified python3 against glibc's, `memory.max` reached. One guest per test binary; the
//! tests' jobs run in it one at a time, each in its own cgroup, removed also when it fails.
//! Times are the guest's (TCG runs it 8–40× slower than the host).

#[path = "../../ebbtide-malloc/tests/support/nested_build.rs"]
mod nested_build;

use ebbtide_vm::shared::guest;
use ebbtide_vm::{Job, Output, Vm, VmConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

static VM: Mutex<Option<Vm>> = Mutex::new(None);

/// THP `madvise` (the setting of our hosts): these tests are about the v2 sources; the THP
/// `always` case is issue 38's item 2.
fn config() -> VmConfig {
    VmConfig {
        append: "transparent_hugepage=madvise".into(),
        ..VmConfig::default()
    }
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `libebbtide_malloc.so` and the `ebbtide` CLI, built once per test process (test profile,
/// this test's target directory); the guest runs them from the host's paths.
fn host_binaries() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let dir = nested_build::cargo_build(&root(), "ebbtide-malloc", "test", "debug");
        nested_build::cargo_build(&root(), "ebbtide-cli", "test", "debug");
        let lib = dir.join("libebbtide_malloc.so");
        let cli = dir.join("ebbtide");
        assert!(lib.exists() && cli.exists(), "{} or {} missing after the build", lib.display(), cli.display());
        (lib, cli)
    })
}

fn run(test: &str, job: Job) -> Option<Output> {
    let mut g = guest(&VM, test, &config())?;
    let vm = g.as_mut().unwrap();
    match vm.run(&job) {
        Ok(o) => Some(o),
        Err(e) => panic!("{test}: {e}"),
    }
}

/// The `KEY=VALUE` lines of a driver's output.
fn values(o: &Output) -> BTreeMap<String, String> {
    o.stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn int(v: &BTreeMap<String, String>, k: &str) -> i64 {
    v.get(k).and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| panic!("no {k} in {v:?}"))
}

/// One run of `tests/guest/cache_neighbour.py` with `args`; `None`: skipped (no VM here).
fn scenario(test: &str, args: &[String]) -> Option<(Output, BTreeMap<String, String>)> {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/cache_neighbour.py");
    let script = format!("exec /usr/bin/python3 {} {}\n", driver.display(), args.join(" "));
    let o = run(test, Job::new(script).limit(Duration::from_secs(240)))?;
    o.success(test);
    let v = values(&o);
    eprintln!("{test}: {args:?}\n{}", o.stdout);
    Some((o, v))
}

/// The malloc's environment for the service: `sources` only, periodic trimming pushed out an
/// hour, so memory coming back is the pressure response alone.
fn ebbtide_env(sources: &str) -> String {
    let (lib, _) = host_binaries();
    format!(
        "ENV=LD_PRELOAD={};EBBTIDE_CONF=sources={sources},trim_interval_ms=60min,pool_shrink_interval_ms=60min",
        lib.display()
    )
}

#[test]
fn guest_is_a_stock_cgroup_v2_kernel_and_jobs_run_as_root_or_a_user() {
    let t = "guest_is_a_stock_cgroup_v2_kernel";
    let Some(o) = run(
        t,
        Job::new(
            "stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.controllers; \
             awk '/SwapTotal/ {print $2}' /proc/meminfo; head -1 /proc/pressure/memory | cut -c1-4; \
             id -u; echo to-stderr >&2; exit 7",
        ),
    ) else {
        return;
    };
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(o.code, 7, "{o:?}");
    assert_eq!(o.stderr.trim(), "to-stderr");
    assert_eq!(lines[0], "cgroup2fs", "{o:?}");
    assert!(lines[1].split_whitespace().any(|c| c == "memory"), "{o:?}");
    assert!(lines[2].parse::<u64>().unwrap() > 0, "no swap: {o:?}");
    assert_eq!(lines[3], "some", "{o:?}");
    assert_eq!(lines[4], "0");
    let u = run(t, Job::new("id -u; id -g; touch /sys/fs/cgroup/x 2>&1 | grep -c 'Permission denied'").user(1000, 1000)).unwrap();
    assert_eq!(u.stdout.split_whitespace().collect::<Vec<_>>(), ["1000", "1000", "1"], "{u:?}");
    let limited = run(t, Job::new("sleep 30").limit(Duration::from_secs(1))).unwrap();
    assert_eq!(limited.code, 137, "a job past its limit is killed: {limited:?}");
}
