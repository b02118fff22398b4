//! Address space on demand (issue 39, docs/design/address-space.md): a program that lowers
//! its `RLIMIT_AS` after start (glibc's `tst-malloc-thread-fail` in small,
//! `programs/rlimit_as_lowered.c`) can still create a thread and gets about as many 1 MiB
//! blocks as under glibc; so does one started under the limit; and a small program's `VmSize`
//! is what it uses, not the allocator's reservations.

#[path = "../support/mod.rs"]
mod support;

use std::os::unix::process::CommandExt;
use support::{command, compile, lib, program, scratch};

/// The limit the program lowers itself to (MiB), as in the issue.
const LIMIT_MIB: u64 = 200;
/// ebbtide's blocks at least this share of glibc's.
const SHARE: f64 = 0.95;
/// ebbtide's `VmSize` at start at most glibc's plus this much (KiB).
const VSZ_EXTRA_KIB: i64 = 32 << 10;

#[derive(Debug)]
struct Outcome {
    vmsize_kib: i64,
    thread: String,
    blocks: u64,
    after_free: String,
}

/// `c` starts with `RLIMIT_AS` at `kib` KiB.
fn limit_before_start(c: &mut std::process::Command, kib: u64) {
    let limit = (kib << 10) as libc::rlim_t;
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn run(exe: &std::path::Path, when: &str, preload: bool) -> Outcome {
    let mut c = command(exe);
    c.args([LIMIT_MIB.to_string().as_str(), when]);
    if preload {
        c.env("LD_PRELOAD", lib());
    }
    if when == "before" {
        limit_before_start(&mut c, LIMIT_MIB << 10);
    }
    let out = c.output().expect("run rlimit_as_lowered");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{when}, preload {preload}: {}\n{text}\n{stderr}",
        out.status
    );
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {k:?} in {text:?}"))
    };
    Outcome {
        vmsize_kib: field("vmsize_kib ").parse().unwrap(),
        thread: field("thread "),
        blocks: field("blocks ").parse().unwrap(),
        after_free: field("after_free "),
    }
}

fn check(when: &str) {
    let Some(exe) = compile(
        &program("rlimit_as_lowered.c"),
        &scratch(&format!("rlimit-as-{when}")),
        &[],
    ) else {
        return;
    };
    let glibc = run(&exe, when, false);
    let ours = run(&exe, when, true);
    eprintln!("RLIMIT_AS {LIMIT_MIB} MiB set {when} start: glibc {glibc:?}, ebbtide {ours:?}");
    assert_eq!(glibc.thread, "created", "glibc: {glibc:?}");
    assert_eq!(
        ours.thread, "created",
        "ebbtide: the thread, as under glibc"
    );
    assert!(
        ours.blocks as f64 >= SHARE * glibc.blocks as f64,
        "ebbtide got {} blocks of 1 MiB, glibc {}: fewer than {SHARE} of glibc's",
        ours.blocks,
        glibc.blocks
    );
    assert_eq!(ours.after_free, "ok", "freed, the blocks serve again");
    assert!(
        ours.vmsize_kib <= glibc.vmsize_kib + VSZ_EXTRA_KIB,
        "VmSize at start: ebbtide {} KiB, glibc {} KiB",
        ours.vmsize_kib,
        glibc.vmsize_kib
    );
}

#[test]
fn a_limit_lowered_after_start_is_honoured_as_under_glibc() {
    let _turn = crate::serial::turn(module_path!());
    check("after");
}

#[test]
fn a_limit_set_before_start_is_honoured_as_under_glibc() {
    let _turn = crate::serial::turn(module_path!());
    check("before");
}

/// The test program `src` (`tests/programs`, compiled into its own scratch folder), started
/// under `RLIMIT_AS` at `limit_kib` KiB if given, succeeds and prints a first line starting `ok`
/// under glibc, and so under ebbtide. Nothing when no compiler is there (`compile` says why).
fn succeeds_as_under_glibc(src: &str, limit_kib: Option<u64>, ok: &str) {
    let folder = src.trim_end_matches(".c").replace('_', "-");
    let Some(exe) = compile(&program(src), &scratch(&folder), &[]) else {
        return;
    };
    let exe = exe.as_path();
    for preload in [false, true] {
        let mut c = command(exe);
        if preload {
            c.env("LD_PRELOAD", lib());
        }
        if let Some(kib) = limit_kib {
            limit_before_start(&mut c, kib);
        }
        let out = c.output().expect("run the program");
        let text = String::from_utf8_lossy(&out.stdout);
        let who = if preload { "ebbtide" } else { "glibc" };
        assert!(
            out.status.success() && text.starts_with(ok),
            "{} under {who}, RLIMIT_AS {limit_kib:?} KiB: {}: {text}{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A limit under which the arena's whole span cannot be reserved: `rlimit_as_classes` (three
/// blocks of each of ~90 sizes, 8 bytes to 32 KiB, 1.6 MiB in all) needs ~35 MiB of address
/// space under ebbtide (a chunk's first step and descriptors per class) against ~8 under glibc.
const TIGHT_MIB: u64 = 48;

/// Under a tight limit set before start, a program that uses every size class runs as under
/// glibc: the arena keeps its full span, of which only the map is mapped
/// (`os::reserve_span`); before, the span shrank to what the limit could hold reserved, a
/// chunk per class ran out after a dozen classes, and `ls` failed under `ulimit -v 100000`.
#[test]
fn a_tight_limit_set_before_start_serves_every_size_class() {
    let _turn = crate::serial::turn(module_path!());
    succeeds_as_under_glibc("rlimit_as_classes.c", Some(TIGHT_MIB << 10), "classes ok");
}

/// Under every limit from one the loader cannot live with to one the program fits in, a
/// program that handles `malloc`'s NULL ends as it decides, never by an abort of the library's
/// making: the library's own allocations at load (its options, the report of a zone it cannot
/// create) take the bootstrap area when the heap cannot serve them (`ebbtide::LibraryCode`),
/// and an `OsError` is written without allocating. Before, Rust's allocation-error handler
/// ended the program ("memory allocation of 22 bytes failed", SIGABRT) at 5–6 MiB.
#[test]
fn no_abort_for_the_librarys_sake_under_any_limit() {
    use std::os::unix::process::ExitStatusExt;
    let _turn = crate::serial::turn(module_path!());
    let Some(exe) = compile(
        &program("rlimit_as_classes.c"),
        &scratch("rlimit-as-no-abort"),
        &[],
    ) else {
        return;
    };
    let mut fitted = false;
    // 128 KiB steps through the first 16 MiB (where the loader and the library's start-up
    // run out), 1 MiB steps beyond.
    let limits = (24..128)
        .map(|k| k * 128)
        .chain((16..=TIGHT_MIB).map(|m| m << 10));
    for kib in limits {
        let mut c = command(&exe);
        c.env("LD_PRELOAD", lib());
        limit_before_start(&mut c, kib);
        let out = c.output().expect("run rlimit_as_classes");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.signal() != Some(libc::SIGABRT) && !stderr.contains("memory allocation of"),
            "RLIMIT_AS {kib} KiB: {}: {stderr}",
            out.status
        );
        fitted |= out.status.success();
    }
    assert!(
        fitted,
        "the program never ran whole, even under {TIGHT_MIB} MiB"
    );
}

/// Memory one class held and freed serves the others under the limit: `rlimit_as_reuse`
/// fills its limit (what it maps plus 64 MiB, lowered after start) with 4 KiB blocks, frees
/// them, and asks for sizes it never used; every one is served, as under glibc. Before, a class
/// whose zone could not be made got NULL (a keg keeps its chunks), as under jemalloc still.
#[test]
fn memory_freed_by_one_class_serves_the_others_under_the_limit() {
    let _turn = crate::serial::turn(module_path!());
    succeeds_as_under_glibc("rlimit_as_reuse.c", None, "reuse ok");
}

/// A buffer grown by `realloc` under the limit (`rlimit_as_realloc`: the limit filled with
/// 64-byte blocks and freed first) reaches the size glibc's does, 43 MiB of the 64 allowed, twice:
/// a refused `mremap` unmaps the empty chunks and tries once more (`huge::realloc`). Before,
/// it stopped at 29 MiB (glibc's `tst-dynarray-fail` failed 9 times in 12 for that).
#[test]
fn a_buffer_grown_by_realloc_under_the_limit_gets_the_space_freed_before() {
    let _turn = crate::serial::turn(module_path!());
    succeeds_as_under_glibc("rlimit_as_realloc.c", None, "realloc ok");
}

/// Another mapping in the way of the arena's next pages (`mapping_in_the_way`: placed right
/// after the newest block's mapping, as a JIT or libc-test's `malloc-brk-fail` does) costs the
/// chunk it lies in, not the program's allocations: 4000 blocks of 4 KiB, 10,000 and 40,000
/// bytes are served, as under glibc. Before, the keg tried those pages again and again and the
/// third `malloc(10000)` failed with ENOMEM (`Keg::abandon_newest`, `Arena::alloc_chunk`).
#[test]
fn a_mapping_in_the_arenas_way_costs_a_chunk_not_an_allocation() {
    let _turn = crate::serial::turn(module_path!());
    let folder = "mapping-in-the-way";
    let Some(exe) = compile(&program("mapping_in_the_way.c"), &scratch(folder), &[]) else {
        return;
    };
    for size in ["4096", "10000", "40000"] {
        for preload in [false, true] {
            let mut c = command(&exe);
            c.arg(size);
            if preload {
                c.env("LD_PRELOAD", lib());
            }
            let out = c.output().expect("run the program");
            let text = String::from_utf8_lossy(&out.stdout);
            let who = if preload { "ebbtide" } else { "glibc" };
            assert!(
                out.status.success() && text.starts_with("in the way ok"),
                "size {size} under {who}: {}: {text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Address space freed in small blocks serves large ones and the other way round under the
/// limit: `rlimit_as_across` fills its limit with 64-byte blocks, frees them, asks for 4 KiB
/// and 1 MiB blocks, then fills it with 256 KiB blocks, frees them, asks for 64-byte and 4 KiB
/// ones; all are served, as under glibc (mimalloc and tcmalloc too; jemalloc fails the 1 MiB
/// blocks). Before, a keg kept its chunks mapped and the page heap its span: 0 of the 4 KiB
/// blocks and 11 696 of the 64-byte ones. Now a refused mapping unmaps the empty chunks
/// (`Keg::unmap_empty_chunks`) and the page heap's span above its top before the retry.
#[test]
fn address_space_freed_in_one_size_serves_any_other_under_the_limit() {
    let _turn = crate::serial::turn(module_path!());
    succeeds_as_under_glibc("rlimit_as_across.c", None, "across ok");
}
