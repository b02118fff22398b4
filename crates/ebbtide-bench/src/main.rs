//! ebbtide-bench: ebbtide against peer allocators, all called directly in one process.
//!
//! `ebbtide-bench all` runs every case and prints one markdown table of medians and ratios.
//! See this crate's README.md for what each case measures.

mod peers;
mod ring;
mod skeleton;

use peers::{Alloc, WithAlloc, Zones};
use std::hint::black_box;
use std::time::Instant;

const USAGE: &str = "usage: ebbtide-bench [all | CASE...] [--reps N] [--scale F]
cases: pair64 pair256 live256_64 live256_256 burst256_64 burst256_256 cross2 cross2_touch
       memory_1m64
  --reps N    repetitions per allocator and case (default 21, at least 15 recommended)
  --scale F   multiply the iterations per repetition by F (default 1.0)";

const CASES: &[&str] = &[
    "pair64",
    "pair256",
    "live256_64",
    "live256_256",
    "burst256_64",
    "burst256_256",
    "cross2",
    "cross2_touch",
    "memory_1m64",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child-mem") {
        child_mem(&args[1]);
        return;
    }
    if args.first().map(String::as_str) == Some("pairs") {
        // `pairs ALLOC SIZE N`: N alloc+free pairs of one allocator, nothing else (for counting
        // instructions under callgrind: run with two N and take the difference).
        let size: usize = args[2].parse().expect("size");
        let n: usize = args[3].parse().expect("n");
        let zones = Zones::new();
        let ns = peers::with_alloc(&args[1], size, &zones, Timed { case: "pair64", n });
        println!("{ns:.2} ns/pair");
        return;
    }
    let mut reps = 21usize;
    let mut scale = 1.0f64;
    let mut cases: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--reps" => reps = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "--scale" => scale = it.next().and_then(|v| v.parse().ok()).expect(USAGE),
            "all" => cases.extend_from_slice(CASES),
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            c => match CASES.iter().find(|k| **k == c) {
                Some(k) => cases.push(k),
                None => {
                    eprintln!("unknown case {c}\n{USAGE}");
                    std::process::exit(2);
                }
            },
        }
    }
    if cases.is_empty() {
        cases.extend_from_slice(CASES);
    }
    let names = peers::present();
    print_environment(reps, scale, &names);
    let zones = Zones::new();
    let mut rows = Vec::new();
    for case in cases {
        let row = if case == "memory_1m64" {
            run_memory(reps, &names)
        } else {
            run_timed(case, reps, scale, &names, &zones)
        };
        eprintln!("{}", row.line(&names));
        rows.push(row);
    }
    println!();
    println!("load average after: {}", loadavg());
    println!();
    print_table(&rows, &names);
}

// ---------------------------------------------------------------- environment

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}

fn glibc_version() -> String {
    extern "C" {
        fn gnu_get_libc_version() -> *const libc::c_char;
    }
    // SAFETY: returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether glibc registered an rseq area for this thread (ebbtide's fast path needs it).
fn rseq_registered() -> bool {
    // SAFETY: dlsym with NUL-terminated names; glibc declares `const unsigned int __rseq_size`.
    unsafe {
        let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        !s.is_null() && *(s as *const u32) >= 20
    }
}

fn print_environment(reps: usize, scale: f64, names: &[&str]) {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("# ebbtide-bench");
    println!();
    println!("- cpu: {} ({} online)", cpu_model(), ncpu());
    println!("- kernel: {}", kernel.trim());
    println!("- glibc: {}", glibc_version());
    println!(
        "- rseq registered by glibc: {} (ebbtide's per-CPU fast path {})",
        rseq_registered(),
        if rseq_registered() {
            "in use"
        } else {
            "NOT in use: locked mode"
        }
    );
    println!(
        "- peers: {} (tcmalloc = gperftools libtcmalloc_minimal.so.4 via dlopen{})",
        names.join(", "),
        if names.contains(&"tcmalloc") {
            ""
        } else {
            ": absent"
        }
    );
    println!("- repetitions per allocator and case: {reps}, scale {scale}");
    println!("- load average before: {}", loadavg());
}

/// CPUs online (not the affinity mask, which `pin` narrows).
fn ncpu() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

/// Pins the calling thread to `cpu` (ignored if that fails).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_setaffinity(0) acts on this thread.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

// ---------------------------------------------------------------- results

struct Row {
    case: &'static str,
    unit: &'static str,
    /// Per allocator (same order as the names): samples.
    samples: Vec<Vec<f64>>,
    /// Extra text for the notes under the table.
    note: String,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

impl Row {
    fn medians(&self) -> Vec<f64> {
        self.samples.iter().map(|s| median(s)).collect()
    }

    /// (ratio ebbtide / best peer by median, name of that peer); ebbtide is index 0.
    fn ratio(&self, names: &[&str]) -> (f64, &'static str) {
        let m = self.medians();
        let mut best = (f64::INFINITY, "");
        for (i, v) in m.iter().enumerate() {
            if peers::is_peer(names[i]) && *v < best.0 {
                best = (*v, peers::ALL.iter().find(|n| **n == names[i]).unwrap());
            }
        }
        (m[0] / best.0, best.1)
    }

    fn cell(&self, i: usize) -> String {
        let s = &self.samples[i];
        if self.unit == "%" {
            format!("{:.1} [{:.1}–{:.1}]", median(s), min(s), max(s))
        } else {
            format!("{:.2} [{:.2}–{:.2}]", median(s), min(s), max(s))
        }
    }

    fn line(&self, names: &[&str]) -> String {
        let mut out = format!("{:<13}", self.case);
        for (i, n) in names.iter().enumerate() {
            out += &format!(" {n}={:.2}", median(&self.samples[i]));
        }
        out
    }
}

fn print_table(rows: &[Row], names: &[&str]) {
    print!("| case | unit |");
    for n in names {
        print!(" {n} |");
    }
    println!(" ebbtide / best peer |");
    print!("|---|---|");
    for _ in names {
        print!("---:|");
    }
    println!("---:|");
    for r in rows {
        print!("| {} | {} |", r.case, r.unit);
        for i in 0..names.len() {
            print!(" {} |", r.cell(i));
        }
        let (ratio, best) = r.ratio(names);
        if r.unit == "%" {
            println!(
                " {:+.1} pts vs {best} |",
                r.medians()[0]
                    - r.medians()
                        .iter()
                        .zip(names)
                        .filter(|(_, n)| peers::is_peer(n))
                        .map(|(v, _)| *v)
                        .fold(f64::INFINITY, f64::min)
            );
        } else {
            println!(" **{ratio:.2}** ({best}) |");
        }
    }
    println!();
    println!("Cells: median [min–max] over the repetitions.");
    for r in rows {
        if !r.note.is_empty() {
            println!("{}", r.note);
        }
    }
}

// ---------------------------------------------------------------- timed cases

/// Iterations per repetition of each case (before `--scale`).
fn iterations(case: &str) -> usize {
    match case {
        "pair64" | "pair256" => 1 << 21,
        "live256_64" | "live256_256" | "burst256_64" | "burst256_256" => 1 << 20,
        "cross2" | "cross2_touch" => 1 << 19,
        _ => unreachable!(),
    }
}

fn case_size(case: &str) -> usize {
    if case.ends_with("256") && case != "live256_64" && case != "burst256_64" {
        256
    } else {
        64
    }
}

fn run_timed(case: &'static str, reps: usize, scale: f64, names: &[&str], zones: &Zones) -> Row {
    let n = ((iterations(case) as f64 * scale) as usize).max(1024);
    let size = case_size(case);
    let cpus = ncpu();
    let mut samples = vec![Vec::with_capacity(reps); names.len()];
    // For the pair cases, ebbtide's bare rseq critical sections (see skeleton.rs) run in the
    // same rounds, right after ebbtide.
    let skel = if case.starts_with("pair") {
        skeleton::Skeleton::new()
    } else {
        None
    };
    let mut skel_ns = Vec::new();
    // One untimed warm-up repetition per allocator, then `reps` rounds; each round runs every
    // allocator once, the starting allocator rotating from round to round (ABC, BCA, CAB, ...)
    // so drift and order effects fall on all of them alike.
    for round in 0..=reps {
        for k in 0..names.len() {
            let i = (k + round) % names.len();
            if !case.starts_with("cross2") {
                pin(cpus - 1);
            }
            let ns = peers::with_alloc(names[i], size, zones, Timed { case, n });
            if round > 0 {
                samples[i].push(ns);
            }
            if let (Some(sk), "ebbtide") = (&skel, names[i]) {
                let ns = pair(sk, n);
                if round > 0 {
                    skel_ns.push(ns);
                }
            }
        }
    }
    let note = match case {
        "cross2" | "cross2_touch" if cpus < 2 => {
            "cross2: only one CPU online, both threads share it.".to_string()
        }
        _ if !skel_ns.is_empty() => format!(
            "{case}: ebbtide's rseq pop + push critical sections alone (pcpu::BareStacks, \
             no ownership check, no careful flag, no Result), same rounds: median {:.2} ns \
             [{:.2}–{:.2}] vs Zone::alloc+free {:.2} ns.",
            median(&skel_ns),
            min(&skel_ns),
            max(&skel_ns),
            median(&samples[0])
        ),
        _ => String::new(),
    };
    Row {
        case,
        unit: "ns/op",
        samples,
        note,
    }
}

struct Timed {
    case: &'static str,
    n: usize,
}

impl WithAlloc for Timed {
    type Out = f64;
    fn run<A: Alloc>(self, a: &A) -> f64 {
        match self.case {
            "pair64" | "pair256" => pair(a, self.n),
            "live256_64" | "live256_256" => live_fifo(a, self.n),
            "burst256_64" | "burst256_256" => burst(a, self.n),
            "cross2" => cross2::<A, false>(a, self.n),
            "cross2_touch" => cross2::<A, true>(a, self.n),
            _ => unreachable!(),
        }
    }
}

/// alloc + free back to back; ns per pair.
#[inline(never)]
fn pair<A: Alloc>(a: &A, n: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        let p = black_box(a.alloc());
        // SAFETY: p came from a.alloc() just now.
        unsafe { a.free(p) };
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

const LIVE: usize = 256;

/// 256 items live; each step frees the oldest and allocates a new one (a FIFO of 256); ns per
/// free + alloc.
#[inline(never)]
fn live_fifo<A: Alloc>(a: &A, n: usize) -> f64 {
    let mut live = [core::ptr::null_mut::<u8>(); LIVE];
    for s in live.iter_mut() {
        *s = a.alloc();
    }
    let t = Instant::now();
    for k in 0..n {
        let s = &mut live[k % LIVE];
        // SAFETY: *s is live and owned here.
        unsafe { a.free(*s) };
        *s = black_box(a.alloc());
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    for s in live {
        // SAFETY: each is live.
        unsafe { a.free(s) };
    }
    ns
}

/// Rounds of "allocate 256, then free those 256 in allocation order"; ns per alloc + free.
#[inline(never)]
fn burst<A: Alloc>(a: &A, n: usize) -> f64 {
    let mut live = [core::ptr::null_mut::<u8>(); LIVE];
    let rounds = n.div_ceil(LIVE);
    let t = Instant::now();
    for _ in 0..rounds {
        for s in live.iter_mut() {
            *s = black_box(a.alloc());
        }
        for s in live.iter() {
            // SAFETY: each is live and owned here.
            unsafe { a.free(*s) };
        }
    }
    t.elapsed().as_nanos() as f64 / (rounds * LIVE) as f64
}

/// Producer (CPU 0) allocates and passes each pointer through an SPSC ring to a consumer (CPU 1)
/// that frees it; wall time from the start barrier to the last free, ns per item. With `TOUCH`
/// the producer writes the item's first word (the "message") and the consumer reads it before
/// the free, so the item's cache line crosses cores for every allocator alike.
#[inline(never)]
fn cross2<A: Alloc, const TOUCH: bool>(a: &A, n: usize) -> f64 {
    let ring = ring::Ring::new(1024);
    let (mut prod, mut cons) = ring.split();
    let go = std::sync::Barrier::new(2);
    let cpus = ncpu();
    let (start, end) = std::thread::scope(|s| {
        let go = &go;
        let p = s.spawn(move || {
            pin(0);
            go.wait();
            let t = Instant::now();
            for k in 0..n {
                let q = a.alloc();
                if TOUCH {
                    // SAFETY: q points to at least 8 writable, suitably aligned bytes.
                    unsafe { q.cast::<usize>().write(k) };
                }
                prod.push(q);
            }
            t
        });
        let c = s.spawn(move || {
            pin(1 % cpus);
            go.wait();
            for _ in 0..n {
                let q = cons.pop();
                if TOUCH {
                    // SAFETY: the producer wrote this word before publishing q.
                    black_box(unsafe { q.cast::<usize>().read() });
                }
                // SAFETY: each pointer came from a.alloc() on the producer and is freed once.
                unsafe { a.free(q) };
            }
            Instant::now()
        });
        (p.join().unwrap(), c.join().unwrap())
    });
    end.duration_since(start).as_nanos() as f64 / n as f64
}

// ---------------------------------------------------------------- memory

const MEM_ITEMS: usize = 1 << 20;
const MEM_ITEM: usize = 64;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// In a fresh process: RSS before and after allocating (and writing) 1 Mi items of 64 B with the
/// named allocator. Prints `rss_delta=B` and, for ebbtide, its own counters.
fn child_mem(name: &str) {
    let mut ptrs: Vec<*mut u8> = vec![core::ptr::null_mut(); MEM_ITEMS];
    for p in ptrs.iter_mut() {
        *black_box(p) = core::ptr::null_mut(); // resident before the baseline
    }
    let _ = rss_bytes(); // warm the read path
    struct Fill<'a>(&'a mut [*mut u8]);
    impl WithAlloc for Fill<'_> {
        type Out = ();
        fn run<A: Alloc>(self, a: &A) {
            for p in self.0.iter_mut() {
                let q = a.alloc();
                // SAFETY: q points to MEM_ITEM writable bytes.
                unsafe { core::ptr::write_bytes(q, 0xa5, MEM_ITEM) };
                *p = q;
            }
        }
    }
    let before = rss_bytes();
    if name == "ebbtide" {
        // The zone is made after the baseline: its own mappings count.
        let e = peers::Ebbtide::new(MEM_ITEM);
        Fill(&mut ptrs).run(&e);
        let after = rss_bytes();
        let snap = e.0.snapshot();
        let global = ebbtide::stats::collect().global.mapped_bytes;
        println!(
            "rss_delta={} zone_mapped={} global_mapped={} used={}",
            after - before,
            snap.mapped_bytes,
            global,
            snap.used
        );
        std::mem::forget(e);
        return;
    }
    match name {
        // Made after the baseline too, like ebbtide's zone above.
        "ebbtide-c" => Fill(&mut ptrs).run(&peers::EbbtideC::new(MEM_ITEM)),
        "mimalloc" => Fill(&mut ptrs).run(&peers::Mimalloc(MEM_ITEM)),
        "jemalloc" => Fill(&mut ptrs).run(&peers::Jemalloc(MEM_ITEM)),
        "glibc" => Fill(&mut ptrs).run(&peers::Glibc(MEM_ITEM)),
        "tcmalloc" => Fill(&mut ptrs).run(&peers::Tcmalloc(
            MEM_ITEM,
            peers::tcmalloc_fns().expect("tcmalloc absent"),
        )),
        _ => panic!("unknown allocator {name}"),
    }
    let after = rss_bytes();
    println!("rss_delta={}", after - before);
}

fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

fn run_memory(reps: usize, names: &[&str]) -> Row {
    let exe = std::env::current_exe().expect("current_exe");
    let item_bytes = (MEM_ITEMS * MEM_ITEM) as f64;
    let mut samples = vec![Vec::with_capacity(reps); names.len()];
    let mut zone_mapped = Vec::new();
    let mut global_mapped = Vec::new();
    for round in 0..reps {
        for k in 0..names.len() {
            let i = (k + round) % names.len();
            let out = std::process::Command::new(&exe)
                .args(["child-mem", names[i]])
                .output()
                .expect("spawn child");
            assert!(
                out.status.success(),
                "child {} failed: {}",
                names[i],
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8_lossy(&out.stdout).into_owned();
            let delta = field(&line, "rss_delta").expect("rss_delta");
            samples[i].push((delta - item_bytes) / item_bytes * 100.0);
            if names[i] == "ebbtide" {
                zone_mapped.push(field(&line, "zone_mapped").unwrap());
                global_mapped.push(field(&line, "global_mapped").unwrap());
            }
        }
    }
    let zm = median(&zone_mapped);
    let gm = median(&global_mapped);
    let note = format!(
        "memory_1m64: overhead % = (RSS delta − 64 MiB) / 64 MiB for 1 Mi live 64-byte items, each \
         allocator in a fresh child process. ebbtide's own counters (median): zone mapped_bytes = \
         {:.0} B ({:+.2} %), stats global mapped_bytes = {:.0} B ({:+.2} %).",
        zm,
        (zm - item_bytes) / item_bytes * 100.0,
        gm,
        (gm - item_bytes) / item_bytes * 100.0
    );
    Row {
        case: "memory_1m64",
        unit: "%",
        samples,
        note,
    }
}
