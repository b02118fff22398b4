//! `ebbtide-lab idle`: a burst, then idleness.
//!
//! Each allocator runs in its own child process so RSS is comparable: a small working set is
//! allocated and kept; a worker thread allocates a burst of 64-byte objects, writes them,
//! frees them all, and then idles (alive, doing nothing) — the thread that "happened to go
//! idle keeping its cache". RSS is sampled every 100 ms. The pointer array of the burst is
//! mapped with `mmap` directly, outside every allocator.
//!
//! Peers come from the distribution's shared libraries through `LD_PRELOAD` (this binary's
//! Rust allocations go to `malloc`): glibc (none preloaded), jemalloc (default, and with
//! `MALLOC_CONF=background_thread:true`), mimalloc, tcmalloc (gperftools, minimal). ebbtide
//! itself runs a 64-byte zone with default tunables. The library `ebbtide` never depends on
//! any of them.

use crate::{
    emit, env_str, env_u64, lab_setup, loadavg, out_dir, run_child, self_rss, write_text, Opts,
    Scale,
};
use ebbtide_lab::{
    plot::LinePlot, Progress, Result, Sampler, SamplerConfig, Series, Summary, Table, VariantRecord,
};
use std::path::PathBuf;
use std::time::Duration;

const MIB: f64 = (1u64 << 20) as f64;
const OBJ: usize = 64;

/// Sizes of one idle run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Objects in the burst.
    pub burst_objects: u64,
    /// Objects kept live throughout.
    pub ws_objects: u64,
    /// Seconds of idleness after the burst is freed.
    pub idle_seconds: u64,
}

impl Params {
    /// The sizes for a scale.
    pub fn for_scale(s: Scale) -> Params {
        match s {
            Scale::Smoke => Params {
                burst_objects: 256 << 10,
                ws_objects: 16 << 10,
                idle_seconds: 3,
            },
            Scale::Quick => Params {
                burst_objects: 2 << 20,
                ws_objects: 64 << 10,
                idle_seconds: 15,
            },
            Scale::Full => Params {
                burst_objects: 4 << 20,
                ws_objects: 64 << 10,
                idle_seconds: 30,
            },
        }
    }
}

/// An array of `n` pointers in its own anonymous mapping (outside every allocator).
struct PtrArray {
    ptr: *mut *mut u8,
    n: usize,
}

impl PtrArray {
    fn new(n: usize) -> PtrArray {
        let len = n.max(1) * std::mem::size_of::<*mut u8>();
        // SAFETY: an anonymous private mapping; the arguments are valid and the result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap of the pointer array failed");
        PtrArray { ptr: p.cast(), n }
    }
    fn slice(&mut self) -> &mut [*mut u8] {
        // SAFETY: the mapping holds `n` zero-initialised (null) pointers and lives as long as
        // `self`; the borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.n) }
    }
}

impl Drop for PtrArray {
    fn drop(&mut self) {
        let len = self.n.max(1) * std::mem::size_of::<*mut u8>();
        // SAFETY: unmaps exactly the mapping made in `new`, no longer referenced.
        unsafe { libc::munmap(self.ptr.cast(), len) };
    }
}

/// One allocator interface for the child: ebbtide's 64-byte zone, or `malloc`.
enum Alloc {
    Ebbtide(ebbtide::Zone),
    Malloc,
}

impl Alloc {
    fn alloc(&self) -> *mut u8 {
        match self {
            Alloc::Ebbtide(z) => z.alloc().expect("ebbtide alloc").as_ptr(),
            // SAFETY: plain malloc; checked below.
            Alloc::Malloc => unsafe { libc::malloc(OBJ) }.cast(),
        }
    }
    /// # Safety
    /// `p` comes from `self.alloc()` and is freed once.
    unsafe fn free(&self, p: *mut u8) {
        match self {
            Alloc::Ebbtide(z) => {
                let p = std::ptr::NonNull::new(p).expect("non-null");
                // SAFETY: the caller's guarantee.
                unsafe { z.free(p) }.expect("ebbtide free")
            }
            // SAFETY: the caller's guarantee.
            Alloc::Malloc => unsafe { libc::free(p.cast()) },
        }
    }
}

// SAFETY: zones are Sync; malloc is thread-safe.
unsafe impl Sync for Alloc {}

fn fill(a: &Alloc, arr: &mut PtrArray) {
    for (i, slot) in arr.slice().iter_mut().enumerate() {
        let p = a.alloc();
        assert!(!p.is_null(), "allocation failed");
        // SAFETY: a fresh 64-byte object of ours.
        unsafe { p.write_bytes(i as u8, OBJ) };
        *slot = p;
    }
}

/// The child: `EBBTIDE_LAB_ALLOC` = `ebbtide` or `malloc`.
pub(crate) fn child_main() -> i32 {
    let burst = env_u64("BURST_OBJECTS") as usize;
    let ws = env_u64("WS_OBJECTS") as usize;
    let idle = env_u64("IDLE_SECONDS");
    let a = match env_str("ALLOC").as_str() {
        "ebbtide" => Alloc::Ebbtide(
            ebbtide::Zone::new(ebbtide::ZoneOptions::new("idle-64", OBJ)).expect("zone"),
        ),
        _ => Alloc::Malloc,
    };
    let mut keep = PtrArray::new(ws);
    fill(&a, &mut keep);
    std::thread::sleep(Duration::from_millis(1000));
    let rss_before = self_rss();
    emit("MARK", " working set");
    let (rss_peak, rss_freed, rss_end) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut arr = PtrArray::new(burst);
            fill(&a, &mut arr);
            let peak = self_rss();
            emit("MARK", " burst");
            for p in arr.slice().iter() {
                // SAFETY: allocated by `fill` above, freed once.
                unsafe { a.free(*p) };
            }
            drop(arr);
            let freed = self_rss();
            emit("MARK", " freed");
            // This thread now idles; so does the process.
            std::thread::sleep(Duration::from_secs(idle));
            (peak, freed, self_rss())
        })
        .join()
        .expect("burst thread")
    });
    emit("MARK", " idle end");
    for p in keep.slice().iter() {
        // SAFETY: allocated by `fill`, freed once.
        unsafe { a.free(*p) };
    }
    emit(
        "RESULT",
        &serde_json::json!({"rss_before": rss_before, "rss_peak": rss_peak,
            "rss_freed": rss_freed, "rss_end": rss_end})
        .to_string(),
    );
    0
}

pub(crate) fn find_lib(name: &str) -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .map(|d| PathBuf::from(d).join(name))
    .find(|p| p.exists())
}

/// The peer allocators every malloc experiment compares: (name, library file, MALLOC_CONF,
/// Debian package), jemalloc twice (with and without its background thread).
pub(crate) const PEERS: [(&str, &str, Option<&str>, &str); 4] = [
    ("jemalloc", "libjemalloc.so.2", None, "libjemalloc2"),
    (
        "jemalloc-bg",
        "libjemalloc.so.2",
        Some("background_thread:true"),
        "libjemalloc2",
    ),
    ("mimalloc", "libmimalloc.so.2", None, "libmimalloc2.0"),
    (
        "tcmalloc",
        "libtcmalloc_minimal.so.4",
        None,
        "libtcmalloc-minimal4",
    ),
];

/// (name, LD_PRELOAD library, MALLOC_CONF)
type Variant = (&'static str, Option<PathBuf>, Option<&'static str>);

/// The allocators to compare, and notes on the peers that are missing.
fn variants() -> (Vec<Variant>, Vec<String>) {
    let mut v = vec![("ebbtide", None, None), ("glibc", None, None)];
    let mut missing = Vec::new();
    for (name, lib, conf, pkg) in PEERS {
        match find_lib(lib) {
            Some(p) => v.push((name, Some(p), conf)),
            None => missing.push(format!(
                "{name} skipped: {lib} not found (Debian: apt-get install {pkg})"
            )),
        }
    }
    (v, missing)
}

/// Seconds from the `freed` mark until RSS is within 10 % of the burst above the level before
/// the burst; `None` if it never got there.
fn give_back_seconds(s: &Series, before: f64, peak: f64) -> Option<f64> {
    let tf = s.marks.iter().find(|m| m.label == "freed")?.t_ms;
    let thr = before + 0.1 * (peak - before);
    s.samples
        .iter()
        .filter(|x| x.t_ms >= tf)
        .find(|x| x.rss_bytes.is_some_and(|r| (r as f64) <= thr))
        .map(|x| ((x.t_ms - tf) / 1e3).max(0.0))
}

/// Runs the idle experiment; prints progress and the table; writes `summary.json`,
/// `tables.txt`, `memory.svg` into `opts.out`. Needs no root.
pub fn run_idle(opts: &Opts) -> Result<Summary> {
    let p = Params::for_scale(opts.scale);
    let out = out_dir(opts)?;
    let _lock = lab_setup(false)?;
    let (vars, missing) = variants();
    let mut summary = Summary::new("idle");
    summary.note(format!(
        "scale {}; burst {} x {} B ({:.0} MiB), working set {} objects, idle {} s; load average at start {}",
        opts.scale.as_str(), p.burst_objects, OBJ,
        (p.burst_objects as f64 * OBJ as f64) / MIB, p.ws_objects, p.idle_seconds, loadavg()
    ));
    for m in &missing {
        eprintln!("idle: {m}");
        summary.note(m.clone());
    }
    let mut progress = Progress::new("idle", vars.len());
    let mut rows = Vec::new();
    let mut plot = LinePlot::new(
        "idle: RSS after a burst of 64-byte objects is freed (t = 0)",
        "time since the burst was freed (s)",
        "RSS (MiB)",
    )
    .mark(0.0, "burst freed");
    for (name, lib, conf) in &vars {
        progress.begin(name);
        let mut env = vec![
            (
                "EBBTIDE_LAB_BURST_OBJECTS".to_string(),
                p.burst_objects.to_string(),
            ),
            (
                "EBBTIDE_LAB_WS_OBJECTS".to_string(),
                p.ws_objects.to_string(),
            ),
            (
                "EBBTIDE_LAB_IDLE_SECONDS".to_string(),
                p.idle_seconds.to_string(),
            ),
            (
                "EBBTIDE_LAB_ALLOC".to_string(),
                if *name == "ebbtide" {
                    "ebbtide"
                } else {
                    "malloc"
                }
                .to_string(),
            ),
        ];
        if let Some(l) = lib {
            env.push(("LD_PRELOAD".into(), l.display().to_string()));
        }
        if let Some(c) = conf {
            env.push(("MALLOC_CONF".into(), c.to_string()));
        }
        let sampler = Sampler::start(SamplerConfig {
            interval: Duration::from_millis(100),
            pid: None,
            cgroup: None,
        })?;
        let run = run_child(
            "idle",
            &env,
            None,
            Some(&sampler),
            Duration::from_secs(p.idle_seconds + 120),
        );
        let series = sampler.stop()?;
        let run = match run {
            Ok(r) if r.success => r,
            Ok(r) => {
                progress.note(&format!("{name} failed: {}", r.status));
                summary.push(VariantRecord::new(*name).with("error", r.status));
                continue;
            }
            Err(e) => {
                progress.note(&format!("{name} failed: {e}"));
                summary.push(VariantRecord::new(*name).with("error", e.to_string()));
                continue;
            }
        };
        let before = run.num("rss_before").unwrap_or(0.0);
        let peak = run.num("rss_peak").unwrap_or(0.0);
        let freed = run.num("rss_freed").unwrap_or(0.0);
        let end = run.num("rss_end").unwrap_or(0.0);
        let back = give_back_seconds(&series, before, peak);
        let returned_pct = if peak > before {
            100.0 * (peak - end) / (peak - before)
        } else {
            0.0
        };
        progress.note(&format!(
            "{name}: peak {:.0} MiB, after free {:.0} MiB, after {} s idle {:.0} MiB, back in {}",
            peak / MIB,
            freed / MIB,
            p.idle_seconds,
            end / MIB,
            back.map_or("never".to_string(), |s| format!("{s:.1} s"))
        ));
        if let Some(tf) = series
            .marks
            .iter()
            .find(|m| m.label == "freed")
            .map(|m| m.t_ms)
        {
            let pts = series
                .samples
                .iter()
                .filter(|x| x.t_ms >= tf - 3000.0)
                .filter_map(|x| x.rss_bytes.map(|r| ((x.t_ms - tf) / 1e3, r as f64 / MIB)))
                .collect();
            plot = plot.line(name, pts);
        }
        rows.push((
            name.to_string(),
            before,
            peak,
            freed,
            end,
            back,
            returned_pct,
        ));
        summary.push(
            VariantRecord::new(*name)
                .with("rss_before_mib", (before / MIB * 10.0).round() / 10.0)
                .with("rss_peak_mib", (peak / MIB * 10.0).round() / 10.0)
                .with("rss_after_free_mib", (freed / MIB * 10.0).round() / 10.0)
                .with("rss_end_mib", (end / MIB * 10.0).round() / 10.0)
                .with("give_back_s", back)
                .with("returned_pct", (returned_pct * 10.0).round() / 10.0)
                .with("ld_preload", lib.as_ref().map(|l| l.display().to_string()))
                .with("malloc_conf", *conf),
        );
    }
    progress.finish();
    let mut t = Table::new(&[
        "allocator",
        "before MiB",
        "peak MiB",
        "freed MiB",
        &format!("after {} s idle", p.idle_seconds),
        "returned",
        "back within 10 % in",
    ]);
    for (n, b, pk, f, e, back, pct) in &rows {
        t.row(&[
            n.clone(),
            format!("{:.1}", b / MIB),
            format!("{:.1}", pk / MIB),
            format!("{:.1}", f / MIB),
            format!("{:.1}", e / MIB),
            format!("{pct:.0} %"),
            back.map_or("never".to_string(), |s| format!("{s:.1} s")),
        ]);
    }
    let tables = format!(
        "Idle: RSS after a burst of {} x {} B, freed by a thread that then idles\n{}",
        p.burst_objects,
        OBJ,
        t.render()
    );
    print!("\n{tables}");
    write_text(&out, "tables.txt", &tables)?;
    summary.write_to(&out)?;
    plot.write_svg(&out.join("memory.svg"))?;
    eprintln!("idle: wrote {}", out.display());
    Ok(summary)
}
