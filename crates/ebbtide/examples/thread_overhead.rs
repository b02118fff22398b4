//! Fast-path cost with the reclaim thread and every pressure source active against none.
//! Alternates child processes (`EBBTIDE_RECLAIM_THREAD=true` with the default sources, and
//! `false` with `sources=none`), each timing 64-byte alloc+free pairs, and prints ministat's
//! table with a Welch t-test at 95 %.
//!
//! `cargo run --release -p ebbtide --example thread_overhead [RUNS]`
use ebbtide::{Zone, ZoneOptions};
use ebbtide_lab::stats::{ministat_table, TTest};
use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

fn child() {
    let z = Zone::new(ZoneOptions::new("overhead", 64)).unwrap();
    // Let the reclaim thread start and register its sources.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let n = 20_000_000;
    let t = Instant::now();
    for _ in 0..n {
        let p = z.alloc().unwrap();
        black_box(p);
        // SAFETY: just allocated.
        unsafe { z.free(p).unwrap() };
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let running = ebbtide::reclaimer::running();
    let active = ebbtide::stats::collect()
        .sources
        .iter()
        .filter(|s| s.active)
        .count();
    println!("RESULT {ns:.4} {running} {active}");
}

fn main() {
    if std::env::var_os("EBBTIDE_TEST_OVERHEAD_CHILD").is_some() {
        return child();
    }
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let exe = std::env::current_exe().unwrap();
    let (mut on, mut off) = (vec![], vec![]);
    for i in 0..2 * runs {
        let thread = i % 2 == 0;
        let out = Command::new(&exe)
            .env("EBBTIDE_TEST_OVERHEAD_CHILD", "1")
            .env(
                "EBBTIDE_RECLAIM_THREAD",
                if thread { "true" } else { "false" },
            )
            .env(
                "EBBTIDE_SOURCES",
                if thread {
                    "systemd,psi,cgroup1,headroom,events,budget"
                } else {
                    "none"
                },
            )
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        let line = s
            .lines()
            .find(|l| l.starts_with("RESULT"))
            .unwrap_or_else(|| panic!("child: {s} {}", String::from_utf8_lossy(&out.stderr)));
        let w: Vec<&str> = line.split_whitespace().collect();
        let ns: f64 = w[1].parse().unwrap();
        eprintln!(
            "run {i}: reclaim thread {} ({} active sources): {ns:.3} ns/pair",
            w[2], w[3]
        );
        if thread {
            on.push(ns)
        } else {
            off.push(ns)
        }
    }
    print!(
        "{}",
        ministat_table(
            "reclaim_thread",
            &[("off", &off), ("on", &on)],
            TTest::Welch,
            95.0
        )
        .unwrap()
    );
}
