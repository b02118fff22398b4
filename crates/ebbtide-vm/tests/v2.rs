//! ebbtide on a stock kernel's cgroup v2 (Debian's, in a qemu guest; see the `ebbtide-vm`
//! crate): every v2 pressure source for real, unprivileged processes, the malloc under an
//! unmodified python3 against glibc's, `memory.max` reached. One guest per test binary (and
//! a systemd one); the tests' jobs run in it one at a time, each in its own cgroup, removed also
//! when it fails; a test with a time bound runs with no other guest busy (`QUIET`).
//! Times are the guest's (TCG runs it 8–40× slower than the host).

#[path = "../../ebbtide-malloc/tests/support/nested_build.rs"]
mod nested_build;

use ebbtide_vm::shared::guest;
use ebbtide_vm::{Job, Output, Vm, VmConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

static VM: Mutex<Option<Vm>> = Mutex::new(None);

/// Taken for writing for a whole test body (its VM boot included) by every test whose assertion
/// is a time bound or a race against a growing neighbour, for reading by the others: cargo runs
/// this binary's tests on threads, and a second guest booting or running beside such a test on a
/// 2-CPU host slows TCG enough to miss the bound (cache back after 1,016 ms and the neighbour
/// OOM-killed while the systemd guest ran; alone the same case passes). Taken before any `VM`
/// lock, so the order is always this lock, then a guest's.
static QUIET: RwLock<()> = RwLock::new(());

/// No other guest busy while the guard lives (a failed test's poison is no reason to stop).
fn alone() -> RwLockWriteGuard<'static, ()> {
    QUIET.write().unwrap_or_else(|e| e.into_inner())
}

/// Any number of tests holding this may run; none while a test holds `alone()`.
fn beside() -> RwLockReadGuard<'static, ()> {
    QUIET.read().unwrap_or_else(|e| e.into_inner())
}

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
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
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
        assert!(
            lib.exists() && cli.exists(),
            "{} or {} missing after the build",
            lib.display(),
            cli.display()
        );
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
    v.get(k)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {k} in {v:?}"))
}

/// One run of `tests/guest/cache_neighbour.py` with `args`; `None`: skipped (no VM here).
fn scenario(test: &str, args: &[String]) -> Option<(Output, BTreeMap<String, String>)> {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/cache_neighbour.py");
    let quoted: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "exec /usr/bin/python3 -u {} {}\n",
        driver.display(),
        quoted.join(" ")
    );
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
        "ENV=LD_PRELOAD={};EBBTIDE_CONF=sources={sources},control_socket=1,trim_interval_ms=60min,pool_shrink_interval_ms=60s",
        lib.display()
    )
}

#[test]
fn guest_is_a_stock_cgroup_v2_kernel_and_jobs_run_as_root_or_a_user() {
    let _quiet = beside();
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
    let u = run(
        t,
        Job::new("id -u; id -g; touch /sys/fs/cgroup/x 2>&1 | grep -c 'Permission denied'")
            .user(1000, 1000),
    )
    .unwrap();
    assert_eq!(
        u.stdout.split_whitespace().collect::<Vec<_>>(),
        ["1000", "1000", "1"],
        "{u:?}"
    );
    let limited = run(t, Job::new("sleep 30").limit(Duration::from_secs(1))).unwrap();
    assert_eq!(
        limited.code, 137,
        "a job past its limit is killed: {limited:?}"
    );
}

/// A trim is uncharged from the memory cgroup at once on the stock kernel too (cgroup v2,
/// `memory.current`): python3 (`PYTHONMALLOC=malloc`, the malloc preloaded) frees a million
/// 40-byte objects, whose size class sat in huge pages, and calls `malloc_trim(0)`; what it gave
/// back leaves the cgroup's charge then, not when the kernel splits the huge pages it broke
/// (`tests/guest/trim_charge.py`; the host's test on v1: the malloc's `huge_classes.rs`).
#[test]
fn a_trimmed_python_is_uncharged_from_its_v2_cgroup() {
    let _quiet = beside();
    let t = "a_trimmed_python_is_uncharged_from_its_v2_cgroup";
    let (lib, _) = host_binaries();
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/trim_charge.py");
    let Some(o) = run(
        t,
        Job::new(format!(
            "exec /usr/bin/python3 -u {} {}\n",
            driver.display(),
            lib.display()
        ))
        .limit(Duration::from_secs(120)),
    ) else {
        return;
    };
    o.success(t);
    let v = values(&o);
    eprintln!("{t}:\n{}", o.stdout);
    let (start, full, trimmed) = (int(&v, "START"), int(&v, "FULL"), int(&v, "TRIMMED"));
    assert!(full >= start + 64, "the objects were charged: {v:?}");
    assert!(
        int(&v, "HUGE") >= 32,
        "the class in huge pages (THP madvise): {v:?}"
    );
    assert!(
        (trimmed - start) * 4 <= full - start,
        "more than a quarter of what the trim gave back still charged: {v:?}"
    );
}

/// Sizes of the cache scenario: the service's dropped cache and the neighbour together exceed
/// `memory.high`; either alone does not.
fn cache_args(name: &str, service: &str) -> Vec<String> {
    vec![
        format!("NAME={name}"),
        "HIGH=96M".into(),
        "MAX=400M".into(),
        "CACHE_MIB=40".into(),
        "NEIGHBOUR_MIB=auto".into(),
        "STEP_MS=20".into(),
        "WATCH_S=6".into(),
        service.to_string(),
    ]
}

/// The malloc case of issue 38 with each v2 source alone, against glibc in the same guest:
/// freed memory back within 3 s (guest time) of the neighbour's start, no more swap and no
/// more `memory.events` `high` than glibc's process.
#[test]
fn each_v2_source_alone_gives_the_malloc_cache_back_within_3s() {
    let _quiet = alone();
    let t = "each_v2_source_alone";
    let Some((_, glibc)) = scenario(t, &cache_args("glibc", "")) else {
        return;
    };
    let mut rows = vec![("glibc".to_string(), glibc.clone())];
    for source in ["events", "psi", "headroom"] {
        let mut args = cache_args(source, &ebbtide_env(source));
        args.push(format!("STAT={}", host_binaries().1.display()));
        let (_, v) = scenario(t, &args).unwrap();
        rows.push((format!("ebbtide {source}"), v));
    }
    eprintln!("{t}: allocator        back_ms  swap_kib  high  max  oom_kill  stall_us  cached_kib");
    for (n, v) in &rows {
        eprintln!(
            "{t}: {n:16} {:8} {:9} {:5} {:4} {:9} {:9} {:11}",
            int(v, "BACK_MS"),
            int(v, "SWAP_KIB"),
            int(v, "EVENTS_HIGH"),
            int(v, "EVENTS_MAX"),
            int(v, "EVENTS_OOM_KILL"),
            int(v, "STALL_US"),
            int(v, "RSS_CACHED_KIB") - int(v, "BASE_KIB")
        );
    }
    for (n, v) in &rows[1..] {
        assert!(
            int(v, "RSS_CACHED_KIB") - int(v, "BASE_KIB") > 8 << 10,
            "{n}: the dropped cache was not held: {v:?}"
        );
        let source = n.strip_prefix("ebbtide ").unwrap();
        // The kernel files the service holds open are the source's own (the cgroup's).
        let files = v.get("FILES").cloned().unwrap_or_default();
        let want: &[&str] = match source {
            "events" => &["CG/memory.events"],
            "psi" => &["CG/memory.pressure"],
            _ => &["CG/memory.current", "CG/memory.high", "CG/memory.max"],
        };
        assert_eq!(files, want.join(","), "{n}: files held open");
        assert!(
            int(v, &format!("STAT_EVENTS_{}", source.to_uppercase())) > 0,
            "{n}: the source never fired: {v:?}"
        );
        let back = int(v, "BACK_MS");
        assert!(
            (0..=3000).contains(&back),
            "{n}: cache back after {back} ms (limit 3000): {v:?}"
        );
        assert!(
            int(v, "SWAP_KIB") <= int(&glibc, "SWAP_KIB").max(1024),
            "{n}: more swap than glibc: {v:?} vs {glibc:?}"
        );
        assert!(
            int(v, "EVENTS_HIGH") <= int(&glibc, "EVENTS_HIGH").max(2),
            "{n}: more memory.high events than glibc: {v:?} vs {glibc:?}"
        );
        assert_eq!(int(v, "SERVICE_KILLED"), 0, "{n}: {v:?}");
    }
}

/// The `ebbtide stat` table's source lines of a driver run with `STAT=`.
fn stat_sources(o: &Output) -> String {
    let s = o
        .stdout
        .split("STAT_BEGIN")
        .nth(1)
        .and_then(|s| s.split("STAT_END").next())
        .unwrap_or("");
    s.lines()
        .skip_while(|l| !l.starts_with("SOURCE"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn unprivileged(test: &str, delegate: bool) {
    // A 3 s bound on the cache coming back.
    let _quiet = alone();
    let (lib, cli) = host_binaries();
    let mut args = cache_args(if delegate { "delegated" } else { "rootowned" }, &format!(
        "ENV=LD_PRELOAD={};EBBTIDE_CONF=control_socket=1,trim_interval_ms=60min,pool_shrink_interval_ms=60s",
        lib.display()
    ));
    args.push("UID=1000".into());
    args.push(format!("DELEGATE={}", u8::from(delegate)));
    args.push(format!("STAT={}", cli.display()));
    let Some((o, v)) = scenario(test, &args) else {
        return;
    };
    let table = stat_sources(&o);
    eprintln!(
        "{test}: sources of a uid-1000 process ({}):\n{table}",
        if delegate {
            "delegated cgroup"
        } else {
            "cgroup owned by root"
        }
    );
    let line = |k: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{k}:")))
            .unwrap_or_else(|| panic!("{test}: no {k} line in `ebbtide stat`:\n{}", o.stdout))
            .to_string()
    };
    // memory.events and memory.current/high are world-readable: these start for anyone.
    assert!(line("events").contains("yes"), "{test}: {table}");
    assert!(line("headroom").contains("yes"), "{test}: {table}");
    assert!(line("cgroup1").contains("no"), "{test}: {table}");
    // Which files: the cgroup's memory.pressure needs write access for a trigger; without it the
    // PSI source falls back to the system-wide /proc/pressure/memory (accepted from uid 1000 on
    // this 6.1 kernel).
    let files = v.get("FILES").cloned().unwrap_or_default();
    let psi_file = if delegate {
        "CG/memory.pressure"
    } else {
        "/proc/pressure/memory"
    };
    assert!(line("psi").contains("yes"), "{test}: {table}");
    assert!(
        files.split(',').any(|f| f == psi_file),
        "{test}: PSI on {psi_file} expected, files {files}"
    );
    assert!(
        files.split(',').any(|f| f == "CG/memory.events"),
        "{test}: files {files}"
    );
    let back = int(&v, "BACK_MS");
    // One PSI window (2 s) plus 1 s.
    assert!(
        (0..=3000).contains(&back),
        "{test}: cache back after {back} ms (limit 3000): {v:?}"
    );
    assert_eq!(int(&v, "SERVICE_KILLED"), 0, "{test}: {v:?}");
}

/// An unprivileged process (uid 1000) in a cgroup whose files it may not write (most
/// containers): which sources start (`ebbtide stat`), and the cache comes back in time.
#[test]
fn unprivileged_in_a_cgroup_owned_by_root() {
    unprivileged("unprivileged_rootowned", false);
}

/// An unprivileged process in a cgroup delegated to it as systemd delegates one (the
/// directory, `cgroup.procs`, `cgroup.threads`, `cgroup.subtree_control`, `memory.pressure`
/// and `memory.reclaim` chowned).
#[test]
fn unprivileged_in_a_delegated_cgroup() {
    unprivileged("unprivileged_delegated", true);
}

/// `memory.max` reached without swap: glibc's cgroup sees an OOM kill, ebbtide's none (its
/// sources give the dropped cache back first).
#[test]
fn memory_max_reached_no_oom_kill_for_ebbtide() {
    let _quiet = alone();
    let t = "memory_max_no_oom_kill";
    let args = |name: &str, env: &str| {
        vec![
            format!("NAME={name}"),
            "MAX=112M".into(),
            "SWAP_MAX=0".into(),
            "CACHE_MIB=40".into(),
            "NEIGHBOUR_MIB=auto".into(),
            "EXCESS_PCT=50".into(),
            "STEP_MS=40".into(),
            "WATCH_S=6".into(),
            env.to_string(),
        ]
    };
    let Some((_, glibc)) = scenario(t, &args("oomglibc", "")) else {
        return;
    };
    let (_, eb) = scenario(
        t,
        &args("oomebbtide", &ebbtide_env("systemd,psi,headroom,events")),
    )
    .unwrap();
    assert!(
        int(&glibc, "EVENTS_OOM_KILL") >= 1,
        "{t}: glibc's cgroup saw no OOM kill, the case does not reach memory.max: {glibc:?}"
    );
    assert_eq!(
        int(&eb, "EVENTS_OOM_KILL"),
        0,
        "{t}: ebbtide's cgroup saw an OOM kill: {eb:?}"
    );
    assert_eq!(
        int(&eb, "SERVICE_KILLED") + int(&eb, "NEIGHBOUR_KILLED"),
        0,
        "{t}: {eb:?}"
    );
}

static SYSTEMD_VM: Mutex<Option<Vm>> = Mutex::new(None);

/// systemd 257 (Debian trixie) as PID 1: a service with `MemoryHigh=` and
/// `MemoryPressureWatch=on` under `ebbtide run` gets `$MEMORY_PRESSURE_WATCH` naming its own
/// cgroup's `memory.pressure`, and ebbtide's systemd source starts on it.
#[test]
fn systemd_pid1_service_gets_memory_pressure_watch_and_the_systemd_source_starts() {
    let _quiet = alone();
    let t = "systemd_pid1";
    let (_, cli) = host_binaries();
    let Some(mut g) = guest(
        &SYSTEMD_VM,
        t,
        &VmConfig {
            systemd: true,
            ..config()
        },
    ) else {
        return;
    };
    let vm = g.as_mut().unwrap();
    let script = format!(
        "systemctl start dbus.socket\n\
         systemd-run --unit=ebbtide-svc -p MemoryHigh=96M -p MemoryPressureWatch=on \
           -E EBBTIDE_CONF=sources=systemd,control_socket=1 -E HOME=/tmp \
           /host{cli} run -- /usr/bin/sleep 120\n\
         for i in $(seq 100); do pid=$(systemctl show -P MainPID ebbtide-svc); [ \"$pid\" != 0 ] && [ -e /tmp/ebbtide-0/$pid.sock ] && break; sleep 0.2; done\n\
         sleep 2 # past the malloc's sources_delay_ms (1 s)\n\
         systemctl --version | head -1\n\
         echo PID=$pid\n\
         tr '\\0' '\\n' < /proc/$pid/environ | grep ^MEMORY_PRESSURE\n\
         /host{cli} stat $pid 2>&1 | sed -n '/^SOURCE/,/^$/p;/error/p'\n\
         ls -l /proc/$pid/fd | grep -o '/sys/fs/cgroup/.*' | sed 's/^/FD=/'\n\
         systemctl stop ebbtide-svc\n",
        cli = cli.display()
    );
    let o = vm
        .run(&Job::new(script).limit(Duration::from_secs(180)))
        .unwrap_or_else(|e| panic!("{t}: {e}"));
    eprintln!("{t}:\n{}\n{}", o.stdout, o.stderr);
    o.success(t);
    let watch = o
        .value("MEMORY_PRESSURE_WATCH")
        .unwrap_or_else(|| panic!("{t}: no MEMORY_PRESSURE_WATCH: {o:?}"));
    assert_eq!(
        watch, "/sys/fs/cgroup/system.slice/ebbtide-svc.service/memory.pressure",
        "{o:?}"
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l.starts_with("systemd:") && l.contains("yes")),
        "{t}: systemd source not active: {o:?}"
    );
    assert!(
        o.stdout.lines().any(|l| l.trim() == format!("FD={watch}")),
        "{t}: {watch} not held open: {o:?}"
    );
    // The cache case: the systemd source alone brings the dropped cache back, one event per
    // kernel notification (counted on a trigger of our own with the same bytes).
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/systemd_case.py");
    let o = vm
        .run(
            &Job::new(format!(
                "exec python3 -u /host{} /host{}\n",
                driver.display(),
                cli.display()
            ))
            .limit(Duration::from_secs(240)),
        )
        .unwrap_or_else(|e| panic!("{t}: {e}"));
    eprintln!("{t}: cache case\n{}\n{}", o.stdout, o.stderr);
    o.success(t);
    let v = values(&o);
    assert_eq!(
        v.get("WRITE").map(String::as_str),
        Some("b'some 200000 2000000\\x00'"),
        "{v:?}"
    );
    assert!(
        int(&v, "CACHED_BYTES") > 8 << 20,
        "{t}: no cache held: {v:?}"
    );
    let back = int(&v, "BACK_MS");
    assert!(
        (0..=3000).contains(&back),
        "{t}: cache back after {back} ms (limit 3000): {v:?}"
    );
    let (events, notify) = (int(&v, "EVENTS_SYSTEMD"), int(&v, "NOTIFY"));
    assert!(events >= 1, "{t}: the systemd source never fired: {v:?}");
    assert!(
        (events - notify).abs() <= 1,
        "{t}: {events} events for {notify} kernel notifications: {v:?}"
    );
}
