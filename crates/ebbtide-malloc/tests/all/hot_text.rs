//! The library's hot functions together (`hot-text.txt`, `build.rs`): the layout that keeps
//! a preloaded program's share of the library's text small.
//!
//! * the built library has a `.text.hot` section, 64-byte aligned throughout, holding the C
//!   entry points (each at the start of a cache line), and right after it `.text.warm` with the
//!   other functions of the list, starting with what every program runs that is not Rust (the
//!   PLT, the rseq abort handlers, the C runtime's `frame_dummy`): all of it in the first 64 KiB
//!   window, not at the far end of the hot functions or in `.text`;
//! * the list names functions that exist: nearly every name of the project's own crates in
//!   `hot-text.txt` matches a symbol of the build (a rename would otherwise drop it silently);
//! * a program that preloads the library keeps less than half of the library's executable
//!   pages resident (nearly all of them before: the kernel maps every cached page within
//!   64 KiB of a touched one, and start-up touched functions all over the text);
//! * where the loader reads them (glibc 2.36 or later), the library's relative relocations are
//!   packed (`.relr.dyn`, `ebbtide_build::relr_link`): `.rela.dyn`, which `ld.so` reads at every start and
//!   which kept 64 KiB more of the read-only segment resident, holds only the few others;
//! * the executable segment is aligned to 64 KiB (`p_align`, which the loader honours) and
//!   `.text.hot` starts at its first window, so the kernel's 64 KiB fault-around windows that
//!   cover it are as few as its size allows (`ebbtide_build::hot_text_link`);
//! * the library carries its own unwinder (GCC's `libgcc_eh.a`, hidden) where the compiler has
//!   it: no `libgcc_s.so.1` loaded into every preloading program, and no `_Unwind_*` symbol
//!   exported to take a C++ program's exceptions (`ebbtide_build::unwind_link`).
//!
//! The library is the release build (`cargo build --release -p ebbtide-malloc` into this test's
//! target directory, about 10 s): the list is made for it, and a build without link-time
//! optimisation runs other, uninlined helpers. `readelf` and `nm` are binutils', which the link
//! itself needs.

#[path = "../support/mod.rs"]
mod support;

// The build script's own test of the machine's glibc (what decides the flag), not a copy of it.
use ebbtide_build::{relr_link, unwind_link};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// `libebbtide_malloc.so` as released, built once per test process.
fn lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| support::build_lib("release", "release"))
}

fn tool(name: &str, args: &[&str], lib: &Path) -> String {
    let out = Command::new(name)
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("run {name} (Debian package binutils): {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} {} failed",
        lib.display()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every section of the library: (name, address, size, alignment).
fn sections(lib: &Path) -> Vec<(String, u64, u64, u64)> {
    tool("readelf", &["-SW"], lib)
        .lines()
        .filter_map(|line| {
            // "  [15] .text.hot  PROGBITS  00000000000352c0 0342c0 03dd2a 00  AX  0   0 64"
            let rest = line.trim_start().strip_prefix('[')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            (f.len() >= 10).then(|| {
                let align = f[f.len() - 1].parse().ok()?;
                Some((f[1].to_string(), hex(f[3])?, hex(f[5])?, align))
            })?
        })
        .collect()
}

/// Every defined symbol: (address, name).
fn symbols(lib: &Path) -> Vec<(u64, String)> {
    tool("nm", &[], lib)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[2].to_string()))
        })
        .collect()
}

#[test]
fn entry_points_plt_and_rseq_handlers_are_in_the_hot_section() {
    let _turn = crate::serial::turn(module_path!());
    let lib = lib();
    let sections = sections(lib);
    let section = |name: &str| sections.iter().find(|s| s.0 == name);
    let &(_, lo, size, align) = section(".text.hot").unwrap_or_else(|| {
        panic!(
            "{} has no .text.hot section: build.rs's linker script was not applied",
            lib.display()
        )
    });
    assert_eq!(
        align, 64,
        ".text.hot's input sections are 64-byte aligned (SUBALIGN)"
    );
    let hi = lo + size;
    let &(_, warm, warm_size, _) = section(".text.warm").expect("no .text.warm section");
    assert!(
        (hi..hi + 64).contains(&warm),
        ".text.warm at {warm:#x} does not follow .text.hot (which ends at {hi:#x})"
    );
    assert!(
        section(".plt").is_none(),
        "the PLT has a section of its own instead of starting .text.warm"
    );
    assert!(
        section("__rseq_failure").is_none(),
        "the rseq abort handlers have a section of their own instead of starting .text.warm"
    );
    let syms = symbols(lib);
    let find = |name: &str| {
        syms.iter()
            .find(|(_, n)| n == name)
            .map(|&(a, _)| a)
            .unwrap_or_else(|| panic!("{name} is not defined"))
    };
    let others = ["__libc_malloc", "__libc_free", "_Znwm", "_ZdlPv"];
    for &name in support::C_NAMES.iter().chain(&others) {
        let a = find(name);
        assert!(
            (lo..hi).contains(&a),
            "{name} at {a:#x} is outside .text.hot ({lo:#x}..{hi:#x})"
        );
        assert_eq!(a % 64, 0, "{name} at {a:#x} does not start a cache line");
    }
    // What every program runs that is not a Rust function, at the start of .text.warm (the first
    // 64 KiB window): glibc's `atexit`, the C runtime's load- and exit-time functions, and the
    // PLT, which has no symbol once inside another section: found by its first entry, which
    // jumps through the third word of the GOT (the dynamic loader's resolver).
    for name in ["atexit", "frame_dummy", "__do_global_dtors_aux"] {
        let a = find(name);
        assert!(
            (warm..warm + 4096).contains(&a),
            "{name} at {a:#x} is not at the start of .text.warm ({warm:#x}, {warm_size} bytes)"
        );
    }
    let start = format!("--start-address={warm:#x}");
    let stop = format!("--stop-address={:#x}", warm + 4096);
    let head = tool("objdump", &["-d", "-j", ".text.warm", &start, &stop], lib);
    assert!(
        head.lines()
            .any(|l| l.contains("jmp") && l.contains("<_GLOBAL_OFFSET_TABLE_+0x10>")),
        "no PLT (its first entry: jmp *GOT+16) in the first 4 KiB of .text.warm"
    );
}

#[test]
fn the_list_names_functions_of_the_build() {
    let _turn = crate::serial::turn(module_path!());
    let lib = lib();
    let list = std::fs::read_to_string(support::root().join("crates/ebbtide-malloc/hot-text.txt"))
        .unwrap();
    let syms = symbols(lib);
    // The project's own crates (legacy mangling: `_ZN` + length + crate name); std's names
    // depend on the toolchain and are not checked.
    let own: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix("_ZN")
                .map(|r| r.trim_start_matches(|c: char| c.is_ascii_digit()))
                .is_some_and(|r| r.starts_with("ebbtide"))
        })
        .collect();
    assert!(
        own.len() > 100,
        "hot-text.txt names {} functions of ours",
        own.len()
    );
    let missing: Vec<&&str> = own
        .iter()
        .filter(|n| !syms.iter().any(|(_, s)| s.starts_with(**n)))
        .collect();
    // A function that a change inlines everywhere disappears from the build; a few such are
    // harmless. More than 5 % gone is a stale list.
    assert!(
        missing.len() * 20 <= own.len(),
        "{} of hot-text.txt's {} names of our crates match no symbol (stale after a rename? \
         regenerate with scripts/hot-text.sh): {missing:?}",
        missing.len(),
        own.len()
    );
}

/// Rss and Size (kB) of the library's executable mappings in a process.
fn exec_rss(pid: u32, lib: &Path) -> (u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let lib = lib.canonicalize().unwrap();
    let (mut rss, mut size, mut ours) = (0, 0, false);
    for line in smaps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first()
            .is_some_and(|r| r.contains('-') && !r.ends_with(':'))
            && f.len() >= 5
        {
            ours = f.len() >= 6 && f[1].contains('x') && Path::new(f[5]) == lib;
        } else if ours && f.len() == 3 && f[0] == "Size:" {
            size += f[1].parse::<u64>().unwrap();
        } else if ours && f.len() == 3 && f[0] == "Rss:" {
            rss += f[1].parse::<u64>().unwrap();
        }
    }
    (rss, size)
}

/// Rss and Size (kB) of the library's executable mapping in `sleep 5` run with the library
/// preloaded, `after` it started; `None` (saying so) where the kernel's window
/// (`fault_around_bytes`, debugfs, 64 KiB by default) can be read and is larger: the tests'
/// bounds assume 64 KiB.
fn text_of_sleep(after: Duration) -> Option<(u64, u64)> {
    let lib = lib();
    if let Ok(s) = std::fs::read_to_string("/sys/kernel/debug/fault_around_bytes") {
        if s.trim().parse::<u64>().is_ok_and(|b| b > 65536) {
            support::skip::skip(
                &support::skip::current_test(),
                &format!(
                    "fault_around_bytes is {} here, the bound assumes 65536",
                    s.trim()
                ),
            );
            return None;
        }
    }
    let mut cmd = support::command("sleep");
    cmd.arg("5").env("LD_PRELOAD", lib);
    let mut child = cmd.spawn().expect("run sleep");
    std::thread::sleep(after);
    let text = exec_rss(child.id(), lib);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        text.1 > 0,
        "no executable mapping of {} in sleep",
        lib.display()
    );
    Some(text)
}

#[test]
fn a_preloaded_program_keeps_less_than_half_of_the_text_resident() {
    let _turn = crate::serial::turn(module_path!());
    // Start-up is over well within a second (the runtime's threads start lazily, past
    // `runtime_start_bytes`: `sleep` never starts them).
    let Some((rss, size)) = text_of_sleep(Duration::from_millis(1000)) else {
        return;
    };
    eprintln!("sleep: {rss} of {size} kB of the library's executable mapping resident");
    assert!(
        rss * 2 < size,
        "{rss} of {size} kB of the library's text resident in `sleep`: the hot functions are \
         spread (scripts/hot-text.sh lists those outside .text.hot)"
    );
}

/// A program in its first few hundred milliseconds (start-up and its first allocations; the
/// runtime's threads start lazily, past `runtime_start_bytes`) runs what the list puts first:
/// at most three of the 64 KiB windows of the hot functions are resident (two when nothing
/// else interferes: 128 of 256 kB with the list ordered by first use and naming every Rust
/// function the traced programs run, docs/benchmarks.md, "The hot functions in the order
/// programs first run them"; four, 256 kB, with `keg::mapped_bytes` and the fork gate's drop
/// glue missing from the list: left in `.text`, each kept one more window resident).
#[test]
#[ignore = "passes alone and in the malloc's whole test binary under CI=true (128 kB); in the full `scripts/test.sh` runs of 2026-11-28 and 2026-11-29 it read 224-256 kB in every run, cause not found (issue 40)"]
fn a_short_program_keeps_the_first_windows_of_the_text() {
    let _turn = crate::serial::turn(module_path!());
    // Up to three runs, the fewest resident pages counting: in the full workspace run under
    // load one run in several read 256 kB while the same build read 128 kB alone; a list that
    // lacks what `sleep` runs reads 256 kB in every run.
    let mut rss = u64::MAX;
    for _ in 0..3 {
        let Some((r, _)) = text_of_sleep(Duration::from_millis(350)) else {
            return;
        };
        eprintln!("sleep, 350 ms in: {r} kB of the library's text resident");
        rss = rss.min(r);
        if rss <= 3 * 64 {
            break;
        }
    }
    assert!(
        rss <= 3 * 64,
        "{rss} kB of the library's text resident in `sleep` after 350 ms, the fewest of three \
         runs (at most 3 windows of 64 KiB expected): what short programs run is no longer at the front of hot-text.txt, or \
         not in it (scripts/hot-text-order.py adds and orders it; scripts/hot-text.sh lists \
         what faulted outside the hot functions)"
    );
}

#[test]
fn relative_relocations_are_packed_where_the_loader_reads_them() {
    let _turn = crate::serial::turn(module_path!());
    if std::env::var_os("EBBTIDE_RELR").is_some() {
        support::skip::skip(
            "relative_relocations_are_packed_where_the_loader_reads_them",
            "EBBTIDE_RELR is set: the build did as told",
        );
        return;
    }
    if !relr_link::host_loader_reads_relr() {
        support::skip::skip(
            "relative_relocations_are_packed_where_the_loader_reads_them",
            &format!(
                "glibc {:?} here: its loader does not read DT_RELR",
                relr_link::host_glibc()
            ),
        );
        return;
    }
    let secs = sections(lib());
    let size = |name: &str| secs.iter().find(|s| s.0 == name).map(|s| s.2);
    let relr = size(".relr.dyn").expect("no .relr.dyn: linked without -z pack-relative-relocs");
    let rela = size(".rela.dyn").unwrap_or(0);
    eprintln!(".relr.dyn {relr} bytes, .rela.dyn {rela} bytes");
    // Unpacked, .rela.dyn held ~1,700 relative relocations (43 KiB with the rest); what stays
    // are the relocations against symbols (the GOT's, a few hundred bytes each kind).
    assert!(
        rela < 8 * 1024,
        ".rela.dyn is {rela} bytes: the relative relocations were not packed"
    );
}

/// The program headers of type LOAD: (flags, offset, virtual address, alignment).
fn loads(lib: &Path) -> Vec<(String, u64, u64, u64)> {
    tool("readelf", &["-lW"], lib)
        .lines()
        .filter_map(|l| {
            // "  LOAD  0x030000 0x0000000000030000 0x0000000000030000 0x0b61a5 0x0b61a5 R E 0x10000"
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() != Some(&"LOAD") || f.len() < 8 {
                return None;
            }
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            let flags = f[6..f.len() - 1].concat();
            Some((flags, hex(f[1])?, hex(f[2])?, hex(f[f.len() - 1])?))
        })
        .collect()
}

#[test]
fn the_hot_text_starts_a_64_kib_window() {
    let _turn = crate::serial::turn(module_path!());
    const WINDOW: u64 = 64 * 1024;
    let lib = lib();
    let loads = loads(lib);
    let exec: Vec<_> = loads.iter().filter(|l| l.0.contains('E')).collect();
    assert_eq!(
        exec.len(),
        1,
        "one executable LOAD segment expected: {loads:?}"
    );
    let (_, offset, vaddr, align) = exec[0];
    assert!(
        *align >= WINDOW && vaddr % WINDOW == 0 && offset % WINDOW == 0,
        "the executable segment (offset {offset:#x}, address {vaddr:#x}, alignment {align:#x}) \
         does not start a 64 KiB window: linked without -z max-page-size=0x10000 -z separate-code?"
    );
    let secs = sections(lib);
    let (_, hot, _, _) = secs
        .iter()
        .find(|s| s.0 == ".text.hot")
        .expect("no .text.hot section");
    // The hot functions: .text.hot and .text.warm after it, as one range.
    let (_, warm, warm_size, _) = secs
        .iter()
        .find(|s| s.0 == ".text.warm")
        .expect("no .text.warm section");
    let size = warm + warm_size - hot;
    // Only .init and .fini (a few dozen bytes) come before it in the segment.
    assert!(
        hot - vaddr < 256,
        ".text.hot at {hot:#x}, {} bytes into the executable segment",
        hot - vaddr
    );
    let windows = (hot + size).div_ceil(WINDOW) - hot / WINDOW;
    eprintln!(
        ".text.hot and .text.warm: {size} bytes at {hot:#x}, {windows} windows of 64 KiB ({} \
         bytes to spare in the last)",
        windows * WINDOW - (hot - vaddr) - size
    );
    assert_eq!(windows, size.div_ceil(WINDOW));
}

#[test]
fn the_unwinder_is_the_librarys_own() {
    let _turn = crate::serial::turn(module_path!());
    if std::env::var_os("EBBTIDE_STATIC_UNWIND").is_some() {
        support::skip::skip(
            "the_unwinder_is_the_librarys_own",
            "EBBTIDE_STATIC_UNWIND is set: the build did as told",
        );
        return;
    }
    if unwind_link::compiler_archives().is_none() {
        support::skip::skip(
            "the_unwinder_is_the_librarys_own",
            "the C compiler has no libgcc_eh.a here: the library links libgcc_s",
        );
        return;
    }
    let lib = lib();
    let dynamic = tool("readelf", &["-dW"], lib);
    assert!(
        !dynamic.contains("libgcc_s"),
        "{} still needs libgcc_s.so.1:\n{dynamic}",
        lib.display()
    );
    // Neither imported nor exported: a preloaded library's exported _Unwind_RaiseException
    // would take the exceptions of every C++ program.
    let exported = tool("nm", &["-D"], lib);
    let unwind: Vec<&str> = exported
        .lines()
        .filter(|l| l.contains("_Unwind_"))
        .collect();
    assert!(unwind.is_empty(), "dynamic _Unwind_ symbols: {unwind:?}");
    let all = symbols(lib);
    for name in [
        "_Unwind_RaiseException",
        "_Unwind_Resume",
        "_Unwind_Backtrace",
    ] {
        assert!(
            all.iter().any(|(_, n)| n == name),
            "{name} is not in the library: who unwinds its panics?"
        );
    }
}
