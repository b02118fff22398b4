//! `ebbtide-demo`: a small service that uses ebbtide and serves its control socket, for trying
//! the `ebbtide` command and for the end-to-end tests.
//!
//! It creates three zones (`demo-small` 64 B, `demo-buf` 512 B, `demo-page` 4096 B), keeps
//! some items of each allocated, frees others (so the caches hold memory), and keeps
//! allocating and freeing a few items every 100 ms. The control socket is enabled through the
//! `control_socket` tunable: from the environment (`EBBTIDE_CONTROL_SOCKET=1`, read with
//! `options::init_from_env`) or, when the environment does not set it, with
//! `options::set("control_socket", "true")`.
//!
//! Prints `ready <pid> <socket>` on stdout once serving, then runs until stdin reaches end of
//! file or `--seconds N` pass (default 600).

use ebbtide::options;
use ebbtide::{Zone, ZoneOptions};
use std::io::{BufRead, Write};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static DONE: AtomicBool = AtomicBool::new(false);

fn main() {
    let mut seconds = 600u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage("--seconds needs a whole number"))
            }
            other => usage(&format!("unknown argument '{other}'")),
        }
    }
    for e in options::init_from_env() {
        eprintln!("ebbtide-demo: environment: {e}");
    }
    if !options::get_bool(options::Tunable::ControlSocket) {
        if let Err(e) = options::set("control_socket", "true") {
            eprintln!("ebbtide-demo: cannot enable the control socket: {e}");
            std::process::exit(1);
        }
    }
    let zones: Vec<Zone> = [("demo-small", 64), ("demo-buf", 512), ("demo-page", 4096)]
        .into_iter()
        .map(|(n, s)| Zone::new(ZoneOptions::new(n, s)).expect("create zone"))
        .collect();
    let mut live: Vec<Vec<NonNull<u8>>> = Vec::new();
    for (i, z) in zones.iter().enumerate() {
        let n = [5000, 800, 200][i];
        let mut items: Vec<NonNull<u8>> = (0..n).map(|_| z.alloc().expect("alloc")).collect();
        // Free every other one: the caches keep them.
        let mut kept = Vec::new();
        for (j, p) in items.drain(..).enumerate() {
            if j % 2 == 0 {
                kept.push(p);
            } else {
                // SAFETY: `p` came from this zone's alloc and is not used after this call.
                unsafe { z.free(p) }.expect("free");
            }
        }
        live.push(kept);
    }
    let Some(sock) = ebbtide::control::socket_path() else {
        eprintln!("ebbtide-demo: the control socket did not start (see the message above)");
        std::process::exit(1);
    };
    println!("ready {} {}", std::process::id(), sock.display());
    std::io::stdout().flush().ok();
    std::thread::spawn(|| {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.is_err() {
                break;
            }
        }
        DONE.store(true, Ordering::Relaxed);
    });
    let end = Instant::now() + Duration::from_secs(seconds);
    while !DONE.load(Ordering::Relaxed) && Instant::now() < end {
        for z in &zones {
            let batch: Vec<NonNull<u8>> = (0..32).filter_map(|_| z.alloc().ok()).collect();
            for p in batch {
                // SAFETY: allocated just above from this zone, freed once.
                unsafe { z.free(p) }.expect("free");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (z, items) in zones.iter().zip(live) {
        for p in items {
            // SAFETY: each kept item came from this zone and is freed once.
            unsafe { z.free(p) }.expect("free");
        }
    }
    drop(zones);
    ebbtide::control::stop();
}

fn usage(msg: &str) -> ! {
    eprintln!("ebbtide-demo: {msg}\nusage: ebbtide-demo [--seconds N]");
    std::process::exit(2);
}
