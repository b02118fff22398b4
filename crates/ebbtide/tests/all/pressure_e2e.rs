//! End to end under real memory pressure (root, cgroup v1): a service process holding 160 MiB of
//! freed objects in ebbtide's caches shares a 256 MiB memory cgroup with a hog that keeps growing.
//! One pressure source at a time is enabled in the service (`EBBTIDE_SOURCES`), and periodic
//! trimming is pushed out to an hour, so memory coming back can only be the pressure response.
//! Each real source must fire, the service's reclaim thread must give the cached bytes back, and
//! the service must survive. Everything created is removed, also when a test fails.

#[path = "../pressure_support/mod.rs"]
mod pressure_support;

use pressure_support::{require_root, require_v1_memory, Hog, ScratchCgroup};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
#[ignore = "helper process of the pressure tests (memory hog); run by them, not directly"]
fn hog_main() {
    let _turn = crate::serial::turn(module_path!());
    pressure_support::hog_main();
}

/// The service: caches `EBBTIDE_TEST_SERVICE_MIB` MiB of 1 KiB objects, then answers `stat` with its
/// cached bytes and pressure events, until `exit`.
#[test]
#[ignore = "helper process of the pressure tests (service); run by them, not directly"]
fn service_main() {
    let _turn = crate::serial::turn(module_path!());
    let Some(mib) = std::env::var("EBBTIDE_TEST_SERVICE_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        eprintln!("service_main is a helper process of pressure_e2e; nothing to do");
        return;
    };
    let z = ebbtide::Zone::new(ebbtide::ZoneOptions::new("service-objects", 1024)).unwrap();
    let n = (mib << 20) / 1024;
    let v: Vec<_> = (0..n).map(|_| z.alloc().unwrap()).collect();
    for p in &v {
        // SAFETY: objects of ours.
        unsafe { p.as_ptr().write_bytes(7, 1024) };
    }
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    let out = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "exit" {
            break;
        }
        let s = ebbtide::stats::collect();
        let g = &s.global;
        let mut o = out.lock();
        let _ = writeln!(
            o,
            "SVC cached={} mapped={} events={} systemd={} psi={} cgroup1={} headroom={} level={}",
            g.cached_bytes,
            g.mapped_bytes,
            g.pressure_events,
            g.events_systemd,
            g.events_psi,
            g.events_cgroup1,
            g.events_headroom,
            g.pressure_level
        );
        let _ = o.flush();
    }
    drop(z);
}

struct Service {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Service {
    fn spawn(cgroup: &Path, sources: &str, mib: u64) -> Service {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--ignored",
            "--exact",
            "pressure_e2e::service_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EBBTIDE_TEST_SERVICE_MIB", mib.to_string())
        .env("EBBTIDE_SOURCES", sources)
        .env("EBBTIDE_TRIM_INTERVAL_MS", "3600000")
        .env("EBBTIDE_LEVEL_HOLD_MS", "500")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        pressure_support::join_cgroup_before_exec(&mut cmd, cgroup);
        let mut child = cmd.spawn().expect("spawning the service");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Service {
            child,
            stdin,
            stdout,
        }
    }

    /// (cached bytes, events of `source`, total events), or None if the service died.
    fn stat(&mut self, source: &str) -> Option<(u64, u64, u64)> {
        writeln!(self.stdin, "stat").ok()?;
        self.stdin.flush().ok()?;
        loop {
            let mut s = String::new();
            if self.stdout.read_line(&mut s).ok()? == 0 {
                return None;
            }
            if let Some(i) = s.find("SVC ") {
                let kv: std::collections::HashMap<&str, u64> = s[i + 4..]
                    .split_whitespace()
                    .filter_map(|w| {
                        w.split_once('=')
                            .and_then(|(k, v)| Some((k, v.parse().ok()?)))
                    })
                    .collect();
                return Some((kv["cached"], kv[source], kv["events"]));
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(source: &str, hog_action: impl FnOnce(&mut Hog, &mut dyn FnMut() -> bool)) {
    if !require_root(&format!("pressure_e2e {source}")) || !require_v1_memory("pressure_e2e") {
        return;
    }
    // A swap file gives the kernel room to reclaim gradually: without it, a cgroup of anonymous
    // memory goes from fine to OOM in one step, faster than any event can be delivered.
    let _swap = match ebbtide_lab::SwapFile::create(1024 * MIB) {
        Ok(s) => s,
        Err(e) => panic!("cannot create a swap file for the test: {e}"),
    };
    let cg = ScratchCgroup::new(256 * MIB);
    std::fs::write(cg.dir.join("memory.swappiness"), "60").expect("memory.swappiness");
    let mut svc = Service::spawn(&cg.dir, source, 160);
    // Wait until the service has its cache.
    let t = Instant::now();
    let (cached0, ev0, _) = loop {
        let s = svc.stat(source).expect("service alive");
        if s.0 >= 150 * MIB {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "service never cached its burst: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut hog = Hog::spawn(&cg.dir);
    let start = Instant::now();
    let mut result = None;
    {
        let mut check = || {
            let Some((cached, ev, total)) = svc.stat(source) else {
                return true;
            };
            if cached <= cached0 / 4 && ev > ev0 {
                result = Some((start.elapsed(), cached, ev, total));
                return true;
            }
            false
        };
        hog_action(&mut hog, &mut check);
    }
    let (took, cached, ev, total) = result.unwrap_or_else(|| {
        panic!(
            "source {source}: cached bytes did not drop: last {:?}",
            svc.stat(source)
        )
    });
    eprintln!(
        "source {source}: {} MiB cached → {} MiB in {took:?} after the hog started; {ev} {source} events ({total} in all)",
        cached0 / MIB,
        cached / MIB
    );
    assert!(svc.stat(source).is_some(), "the service survived");
}

/// Grows the hog step by step until `check` is satisfied (or 200 MiB).
fn grow(hog: &mut Hog, check: &mut dyn FnMut() -> bool) {
    for mib in (8..=200).step_by(8) {
        if hog.cmd(&format!("grow {mib}")).is_none() || check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..50 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn cgroup_v1_pressure_level_gives_the_cache_back() {
    let _turn = crate::serial::turn(module_path!());
    run("cgroup1", grow);
}

#[test]
fn headroom_gives_the_cache_back() {
    let _turn = crate::serial::turn(module_path!());
    run("headroom", grow);
}

#[test]
fn psi_gives_the_cache_back() {
    let _turn = crate::serial::turn(module_path!());
    // PSI here is system-wide (/proc/pressure/memory): stalls come from reclaim in the limited
    // cgroup once the hog presses against the limit with the service's cache still held.
    run("psi", grow);
}
