//! Real programs nobody on the team wrote, unmodified from Debian's packages, under
//! `LD_PRELOAD=libebbtide_malloc.so`, with the same results as under glibc's malloc:
//!
//! * **python3** (`/usr/bin/python3`, `PYTHONMALLOC=malloc` so every object is a malloc): a
//!   workload of our own (`tests/programs/workload.py`), and a large part of CPython's own test
//!   suite (package `libpython3.11-testsuite`): every module of [`CPYTHON_MODULES`] must pass
//!   under ebbtide, or fail under glibc too;
//! * **sqlite3**: a bulk load, indexes, joins, JSON, window functions, VACUUM
//!   (`tests/programs/bulk.sql`);
//! * **git**: a repository built, branched, merged, logged, diffed, blamed, gc'd, repacked,
//!   fsck'd, archived (`tests/programs/git.sh`, fixed identities and dates);
//! * **perl**: hashes, strings, regular expressions, sorting (`tests/programs/workload.pl`);
//! * **a C++ program** on the standard library (`tests/programs/stdlib.cpp`, built with `g++`
//!   here): containers, strings, regex, exceptions across threads, producer/consumer threads,
//!   `std::bad_alloc` from a huge `new`, a custom new handler, nothrow and over-aligned `new`;
//! * **sort, xz, gzip, awk** (`tests/programs/tools.sh`): a parallel sort with a large buffer,
//!   multi-threaded xz;
//! * **node** (`tests/programs/workload.js`): maps, JSON, Buffers and ArrayBuffers (malloc'd
//!   backing stores), zlib, regular expressions, worker threads;
//! * **jq** (`tests/programs/jq.sh`): grouping, sorting, regular expressions (Oniguruma),
//!   string building, `@base64`, `reduce`, `--stream` over 30 000 objects;
//! * **redis-server** driven by `redis-benchmark`, then a dataset of our own written and read
//!   back whole, `DBSIZE`, and a clean `SHUTDOWN`;
//! * and **`LD_DEBUG=bindings`** proof that the allocation symbols of these programs (and of
//!   the C library inside them) bind to `libebbtide_malloc.so`.
//!
//! Each program runs under glibc and under ebbtide (each run with its own scratch directory);
//! the quick ones also under ebbtide's checked mode (`EBBTIDE_CONF=checked=1`) and with glibc's
//! rseq off (`GLIBC_TUNABLES=glibc.pthread.rseq=0`: the per-CPU caches' locked mode). The test
//! compares exit status and stdout with glibc's, and fails on any `ebbtide:` message on stderr.
//! Every run has a time limit: a hang is killed and reported as a failure.
//!
//! Reduced cases (`tests/programs/pthread_exit.c`, `close_all_fds.c`, `fork_close_exec.c`,
//! `fds_at_start.c`, `blocked_signals.c`) pin down what broke CPython's `test_threading`,
//! `test_subprocess`, `test_posix` and `test_signal` under the malloc (all four now in
//! [`CPYTHON_MODULES`]).
//!
//! A missing program skips its test with a message naming the Debian package (and fails under
//! `CI`, where `.ci/run` installs them).

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/resp.rs"]
mod resp;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{
    command, compile, installed, lib, no_ebbtide_messages, program, run, same_as_glibc, scratch,
    Malloc, Run, C_NAMES,
};

const PYTHON: &str = "/usr/bin/python3";

/// A way of running ebbtide: a name and the environment it adds.
type Variant = (&'static str, &'static [(&'static str, &'static str)]);

/// The default configuration.
const DEFAULT: Variant = ("default", &[]);
/// Checked mode: every free checked against the slab (double frees, foreign pointers).
const CHECKED: Variant = ("checked", &[("EBBTIDE_CONF", "checked=1")]);
/// glibc told not to register rseq: the per-CPU caches in their locked mode.
const NO_RSEQ: Variant = ("no-rseq", &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")]);
/// The control socket on, as under `ebbtide run` (its thread and descriptors in the process).
const CONTROL: Variant = ("control", &[("EBBTIDE_CONF", "control_socket=1")]);
/// Every variant, for the programs quick enough to run several times.
const ALL: &[Variant] = &[DEFAULT, CHECKED, NO_RSEQ];

/// Runs `make(dir)` under glibc, then under ebbtide in each of `variants` (each run in its own
/// scratch directory), and checks that every ebbtide run agrees with glibc's. Returns the
/// glibc run and the ebbtide runs.
fn compare(
    name: &str,
    limit: Duration,
    variants: &[Variant],
    make: impl Fn(&Path) -> Command,
) -> (Run, Vec<Run>) {
    lib();
    let dir = scratch(name);
    let fresh = |tag: &str| {
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let g = run(make(&fresh("glibc")), Malloc::Glibc, &dir, name, limit);
    let mut runs = Vec::new();
    let mut times = Vec::new();
    for (label, env) in variants {
        let mut c = make(&fresh(label));
        for (k, v) in *env {
            c.env(k, v);
        }
        let tag = format!("{name}-{label}");
        let e = run(c, Malloc::Ebbtide, &dir, &tag, limit);
        same_as_glibc(&format!("{name} (ebbtide {label})"), &g, &e);
        times.push(format!("{label} {:.1} s", e.secs));
        runs.push(e);
    }
    eprintln!(
        "{name}: same output under glibc ({:.1} s) and ebbtide ({})",
        g.secs,
        times.join(", ")
    );
    let _ = std::fs::remove_dir_all(&dir);
    (g, runs)
}

/// Fails unless `run`'s stdout contains every one of `wants`: the program ran to its end (same
/// output as glibc's says only that both agree).
fn assert_output_has(run: &Run, wants: &[&str]) {
    let out = run.stdout_str();
    for want in wants {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

/// [`compare`] in the default configuration only; returns (glibc, ebbtide).
fn both(name: &str, limit: Duration, make: impl Fn(&Path) -> Command) -> (Run, Run) {
    let (g, mut e) = compare(name, limit, &[DEFAULT], make);
    (g, e.pop().unwrap())
}

#[test]
fn python_workload() {
    let _turn = crate::serial::turn(module_path!());
    if !installed(PYTHON, "python3") {
        return;
    }
    let (_, runs) = compare("python", Duration::from_secs(120), ALL, |_| {
        let mut c = command(PYTHON);
        c.env("PYTHONMALLOC", "malloc").arg(program("workload.py"));
        c
    });
    let e = &runs[0]; // all agree with glibc
    let out = e.stdout_str();
    assert!(
        out.starts_with("allocator malloc\n"),
        "PYTHONMALLOC=malloc not in effect: {out}"
    );
    assert!(out.contains("\ndigest "), "workload did not finish: {out}");
}

/// CPython test modules (package `libpython3.11-testsuite`) that pass under glibc on Debian 12
/// and allocate heavily (objects, containers, text, numbers, codecs, compression, files,
/// threads, the compiler and importer); together one to two minutes on two CPUs. Left out for
/// time (each a minute or more; they passed under ebbtide when tried by hand): test_asyncio,
/// test_concurrent_futures, test_multiprocessing_fork; test_socket and test_capi fail under
/// glibc here.
const CPYTHON_MODULES: &[&str] = &[
    // First: regrtest's workers take modules in order, and this one mostly sleeps (50 s here).
    "test_signal",
    "test_dict",
    "test_list",
    "test_tuple",
    "test_set",
    "test_unicode",
    "test_bytes",
    "test_memoryview",
    "test_array",
    "test_deque",
    "test_ordered_dict",
    "test_collections",
    "test_heapq",
    "test_sort",
    "test_itertools",
    "test_functools",
    "test_long",
    "test_float",
    "test_math",
    "test_fractions",
    "test_decimal",
    "test_statistics",
    "test_random",
    "test_struct",
    "test_json",
    "test_re",
    "test_codecs",
    "test_csv",
    "test_pickle",
    "test_marshal",
    "test_copy",
    "test_weakref",
    "test_gc",
    "test_ast",
    "test_dataclasses",
    "test_enum",
    "test_xml_etree",
    "test_email",
    "test_difflib",
    "test_zlib",
    "test_bz2",
    "test_lzma",
    "test_hashlib",
    "test_zipfile",
    "test_io",
    "test_mmap",
    "test_os",
    "test_shutil",
    "test_tempfile",
    "test_ctypes",
    "test_queue",
    "test_thread",
    "test_threading_local",
    "test_argparse",
    "test_base64",
    "test_binascii",
    "test_bisect",
    "test_bufio",
    "test_class",
    "test_compile",
    "test_configparser",
    "test_coroutines",
    "test_datetime",
    "test_descr",
    "test_dis",
    "test_exceptions",
    "test_fileio",
    "test_fork1",
    "test_format",
    "test_generators",
    "test_grammar",
    "test_gzip",
    "test_hmac",
    "test_importlib",
    "test_inspect",
    "test_logging",
    "test_operator",
    "test_pprint",
    "test_pty",
    "test_selectors",
    "test_string",
    "test_sys",
    "test_tarfile",
    "test_textwrap",
    "test_time",
    "test_tokenize",
    "test_traceback",
    "test_uuid",
    "test_wait4",
    "test_zipimport",
    "test_threading",
    "test_subprocess",
    "test_posix",
];

/// `module → result word` from regrtest's progress lines (`[ 3/52] test_x passed ...`).
fn regrtest_results(out: &str) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    for l in out.lines() {
        let Some(i) = l.find("] test_") else { continue };
        let mut words = l[i + 2..].split_whitespace();
        if let (Some(name), Some(result)) = (words.next(), words.next()) {
            m.insert(name.to_string(), result.to_string());
        }
    }
    m
}

/// regrtest on `modules` in parallel workers; a module still running after `per_module` is
/// killed by regrtest (`--timeout`) and counts as failed.
fn regrtest(modules: &[&str], per_module: u64, malloc: Malloc, dir: &Path, tag: &str) -> Run {
    let mut c = command(PYTHON);
    c.env("PYTHONMALLOC", "malloc")
        .current_dir(dir)
        .args(["-m", "test", "-j0", "--timeout", &per_module.to_string()])
        .args(modules);
    run(c, malloc, dir, tag, Duration::from_secs(600))
}

/// Runs `modules` under ebbtide; every module must pass, or fail under glibc as well (then it
/// is the machine's, reported and not counted).
fn cpython_suite(name: &str, modules: &[&str], per_module: u64) {
    if !installed(PYTHON, "python3")
        || !installed(
            "/usr/lib/python3.11/test/test_dict.py",
            "libpython3.11-testsuite",
        )
    {
        return;
    }
    lib();
    let dir = scratch(name);
    let e = regrtest(modules, per_module, Malloc::Ebbtide, &dir, "ebbtide");
    let out = e.stdout_str();
    let results = regrtest_results(&out);
    let not_passed: Vec<&str> = modules
        .iter()
        .copied()
        .filter(|m| results.get(*m).map(String::as_str) != Some("passed"))
        .collect();
    let mut ours = Vec::new();
    if !not_passed.is_empty() {
        let g = regrtest(&not_passed, per_module, Malloc::Glibc, &dir, "glibc");
        let gres = regrtest_results(&g.stdout_str());
        for m in &not_passed {
            let under_glibc = gres.get(*m).map_or("no result", String::as_str);
            let under_ebbtide = results.get(*m).map_or("no result", String::as_str);
            if under_glibc == "passed" {
                ours.push(format!(
                    "{m}: {under_ebbtide} under ebbtide, passed under glibc"
                ));
            } else {
                eprintln!("{m}: {under_ebbtide} under ebbtide and {under_glibc} under glibc: not the malloc's");
            }
        }
    }
    assert!(
        ours.is_empty(),
        "CPython's test suite under ebbtide:\n  {}\n--- regrtest output (tail)\n{}\n--- stderr (tail)\n{}",
        ours.join("\n  "),
        support::tail(&out, 80),
        e.stderr_tail(40)
    );
    no_ebbtide_messages(name, &e);
    eprintln!(
        "{name}: {} modules passed under ebbtide in {:.0} s",
        modules.len() - not_passed.len(),
        e.secs
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cpython_test_suite() {
    let _turn = crate::serial::turn(module_path!());
    cpython_suite("cpython", CPYTHON_MODULES, 240);
}

#[test]
fn sqlite3_bulk_load_and_queries() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/sqlite3", "sqlite3") {
        return;
    }
    let (_, runs) = compare("sqlite3", Duration::from_secs(120), ALL, |d| {
        let mut c = command("/usr/bin/sqlite3");
        c.arg(d.join("bulk.db"))
            .stdin(std::fs::File::open(program("bulk.sql")).unwrap());
        c
    });
    let e = &runs[0]; // all agree with glibc
    let out = e.stdout_str();
    assert!(out.contains("counts|50000|300000|"), "{out}");
    assert!(out.contains("\nok\n"), "integrity_check: {out}");
}

#[test]
fn git_session() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/git", "git") {
        return;
    }
    let (_, runs) = compare("git", Duration::from_secs(180), ALL, |d| {
        let mut c = command("/bin/sh");
        c.arg(program("git.sh")).arg(d);
        c
    });
    let e = &runs[0]; // all agree with glibc
    let out = e.stdout_str();
    assert!(out.ends_with("== done\n"), "{}", support::tail(&out, 20));
    assert!(out.contains("Merge branch 'topic'"), "{out}");
}

#[test]
fn everyday_tools() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/xz", "xz-utils") || !installed("/usr/bin/gzip", "gzip") {
        return;
    }
    let (_, runs) = compare("tools", Duration::from_secs(120), ALL, |d| {
        let mut c = command("/bin/sh");
        c.arg(program("tools.sh")).arg(d);
        c
    });
    let e = &runs[0]; // all agree with glibc
    assert!(e.stdout_str().contains("\nuniq "), "{}", e.stdout_str());
}

#[test]
fn node_workload() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/node", "nodejs") {
        return;
    }
    let (_, runs) = compare("node", Duration::from_secs(120), ALL, |_| {
        let mut c = command("/usr/bin/node");
        c.arg(program("workload.js"));
        c
    });
    // All agree with glibc (`compare`): the first stands for them.
    assert_output_has(
        &runs[0],
        &["map 133333 ", "gzip true ", "\nworkers ", "\ndone\n"],
    );
}

#[test]
fn jq_filters() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/jq", "jq") {
        return;
    }
    let (_, runs) = compare("jq", Duration::from_secs(120), ALL, |d| {
        let mut c = command("/bin/sh");
        c.arg(program("jq.sh")).arg(d);
        c
    });
    // All agree with glibc (`compare`): the first stands for them.
    assert_output_has(
        &runs[0],
        &["count 30000\n", "\nreduce 37\n", "\nstream 180000\n"],
    );
}

#[test]
fn perl_workload() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/perl", "perl") {
        return;
    }
    let (_, runs) = compare("perl", Duration::from_secs(120), ALL, |_| {
        let mut c = command("/usr/bin/perl");
        c.arg(program("workload.pl"));
        c
    });
    let e = &runs[0]; // all agree with glibc
    assert!(e.stdout_str().contains("\ndigest "), "{}", e.stdout_str());
}

#[test]
fn cpp_standard_library() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("cpp-build");
    let Some(exe) = compile(&program("stdlib.cpp"), &dir, &[]) else {
        return;
    };
    let (_, runs) = compare("cpp", Duration::from_secs(120), ALL, |_| command(&exe));
    // All agree with glibc (`compare`): the first stands for them.
    assert_output_has(
        &runs[0],
        &[
            "oom bad_alloc nothrow=null vector=1 handler_calls=3 then_bad_alloc=1\n",
            "aligned ok\n",
            "done\n",
        ],
    );
}

/// Reduced from CPython's `test_threading` hang under the malloc.
#[test]
fn pthread_exit_from_main_ends_the_process() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("pthread-exit-build");
    let Some(exe) = compile(&program("pthread_exit.c"), &dir, &[]) else {
        return;
    };
    // Also with the control socket on (as under `ebbtide run`): its thread ends too.
    let (_, runs) = compare(
        "pthread_exit",
        Duration::from_secs(20),
        &[DEFAULT, CONTROL],
        |_| command(&exe),
    );
    for e in runs {
        assert_eq!(e.stdout_str(), "main: pthread_exit\nworker done 1\n");
    }
}

/// The general case behind the `test_subprocess` failures: a program closing descriptors it did
/// not open (as daemons do) must go on running.
#[test]
fn program_closing_all_descriptors_keeps_running() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("close-all-build");
    let Some(exe) = compile(&program("close_all_fds.c"), &dir, &[]) else {
        return;
    };
    // Also with the control socket on (as under `ebbtide run`): it is closed too.
    let (_, runs) = compare(
        "close_all_fds",
        Duration::from_secs(30),
        &[DEFAULT, CONTROL],
        |_| command(&exe),
    );
    for e in runs {
        assert_eq!(
            e.stdout_str(),
            format!(
                "still running {}\n",
                (0..100_000u32).map(|i| i % 256).sum::<u32>()
            )
        );
    }
}

/// Reduced from CPython's `test_posix` (posix_spawn with fd 0 closed) and `test_subprocess`
/// (pass_fds) failures: a program started with stdin closed finds it closed, its first `open`
/// gets 0, and it finds no descriptor above 2 it did not inherit.
#[test]
fn descriptors_at_start_are_the_programs() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("fds-build");
    let Some(exe) = compile(&program("fds_at_start.c"), &dir, &[]) else {
        return;
    };
    let (_, e) = both("fds_at_start", Duration::from_secs(30), |_| {
        let mut c = command("/bin/sh");
        c.args(["-c", "exec \"$0\" <&-"]).arg(&exe);
        c
    });
    assert!(
        e.stdout_str().starts_with("fd 0 at start: closed\n"),
        "{}",
        e.stdout_str()
    );
}

/// Reduced from CPython's `test_signal` failures: signals a program blocks stay pending for it
/// (sigpending, sigtimedwait, signalfd), instead of reaching a thread of the malloc.
#[test]
fn blocked_signals_stay_pending() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("signals-build");
    let Some(exe) = compile(&program("blocked_signals.c"), &dir, &[]) else {
        return;
    };
    let (_, e) = both("blocked_signals", Duration::from_secs(30), |_| {
        command(&exe)
    });
    assert_eq!(
        e.stdout_str(),
        "pending: USR1 1 USR2 1 TERM 1; handler ran 0 times\nsigtimedwait: 1\nsignalfd: SIGTERM 1\n"
    );
}

/// Reduced from CPython's `test_subprocess` failures under the malloc.
#[test]
fn forked_child_closing_all_descriptors_still_execs() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("fork-close-build");
    let Some(exe) = compile(&program("fork_close_exec.c"), &dir, &[]) else {
        return;
    };
    let (_, e) = both("fork_close_exec", Duration::from_secs(30), |_| {
        command(&exe)
    });
    assert_eq!(e.stdout_str(), "bad children: 0\n");
}

// ---------------------------------------------------------------------------------------------
// redis-server

/// Kills the server when the test ends in any way.
struct Server {
    child: std::process::Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The dataset written into redis and read back: strings, lists, hashes, sorted sets of
/// known content, some of them deleted again.
fn dataset() -> Vec<Vec<Vec<u8>>> {
    let mut cmds: Vec<Vec<Vec<u8>>> = Vec::new();
    let v = |s: String| s.into_bytes();
    for i in 0..20_000u32 {
        let val: String = (0..(i % 300))
            .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
            .collect();
        cmds.push(vec![v("SET".into()), v(format!("ds:str:{i}")), v(val)]);
    }
    for i in 0..500u32 {
        let mut c = vec![v("RPUSH".into()), v(format!("ds:list:{i}"))];
        c.extend((0..=(i % 100)).map(|j| v(format!("{i}-{j}"))));
        cmds.push(c);
    }
    for i in 0..300u32 {
        let mut c = vec![v("HSET".into()), v(format!("ds:hash:{i}"))];
        for j in 0..=(i % 50) {
            c.push(v(format!("f{j}")));
            c.push(v("x".repeat((j * 7 % 200) as usize)));
        }
        cmds.push(c);
    }
    for i in 0..200u32 {
        let mut c = vec![v("ZADD".into()), v(format!("ds:zset:{i}"))];
        for j in 0..=(i % 80) {
            c.push(v(((j * 37) % 1000).to_string()));
            c.push(v(format!("m{j}")));
        }
        cmds.push(c);
    }
    for i in (0..20_000u32).step_by(4) {
        cmds.push(vec![v("DEL".into()), v(format!("ds:str:{i}"))]);
    }
    cmds
}

/// Reads the dataset back and returns a transcript; fails on any value that is not what
/// [`dataset`] wrote.
fn check_dataset(c: &mut resp::Client) -> String {
    let mut gets: Vec<Vec<Vec<u8>>> = Vec::new();
    for i in 0..20_000u32 {
        gets.push(vec![b"GET".to_vec(), format!("ds:str:{i}").into_bytes()]);
    }
    for (i, r) in c.pipeline(&gets).into_iter().enumerate() {
        let i = i as u32;
        let want = if i.is_multiple_of(4) {
            None
        } else {
            Some(
                (0..(i % 300))
                    .map(|j| b'a' + ((i + j) % 26) as u8)
                    .collect::<Vec<u8>>(),
            )
        };
        assert_eq!(r, resp::Reply::Bulk(want), "GET ds:str:{i}");
    }
    for i in (0..500u32).step_by(7) {
        let r = c.cmds(&["LRANGE", &format!("ds:list:{i}"), "0", "-1"]);
        let want: Vec<String> = (0..=(i % 100)).map(|j| format!("{i}-{j}")).collect();
        assert_eq!(
            r.text(),
            format!("[{}]", want.join(",")),
            "LRANGE ds:list:{i}"
        );
    }
    for i in (0..300u32).step_by(5) {
        let n = c.cmds(&["HLEN", &format!("ds:hash:{i}")]);
        assert_eq!(
            n,
            resp::Reply::Int(i64::from(i % 50 + 1)),
            "HLEN ds:hash:{i}"
        );
        let j = i % 50;
        let f = c.cmds(&["HGET", &format!("ds:hash:{i}"), &format!("f{j}")]);
        assert_eq!(
            f.text(),
            "x".repeat((j * 7 % 200) as usize),
            "HGET ds:hash:{i} f{j}"
        );
    }
    for i in (0..200u32).step_by(3) {
        let r = c.cmds(&["ZRANGE", &format!("ds:zset:{i}"), "0", "-1", "WITHSCORES"]);
        let mut want: Vec<(u32, String)> = (0..=(i % 80))
            .map(|j| ((j * 37) % 1000, format!("m{j}")))
            .collect();
        want.sort();
        let flat: Vec<String> = want
            .iter()
            .flat_map(|(s, m)| [m.clone(), s.to_string()])
            .collect();
        assert_eq!(
            r.text(),
            format!("[{}]", flat.join(",")),
            "ZRANGE ds:zset:{i}"
        );
    }
    let mut keys = 0usize;
    let mut cursor = "0".to_string();
    loop {
        let r = c.cmds(&["SCAN", &cursor, "MATCH", "ds:*", "COUNT", "1000"]);
        let resp::Reply::Array(Some(parts)) = r else {
            panic!("SCAN: {r:?}")
        };
        cursor = parts[0].text();
        if let resp::Reply::Array(Some(ks)) = &parts[1] {
            keys += ks.len();
        }
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(
        keys,
        15_000 + 500 + 300 + 200,
        "keys ds:* after the deletes"
    );
    format!("dataset ok: {keys} keys")
}

/// `redis-server` under `malloc` on a free port, no persistence: `redis-benchmark` with random
/// keys over several data types, then our dataset written and read back whole, `DBSIZE` through
/// `redis-cli`, and `SHUTDOWN NOSAVE` with exit status 0. Returns the deterministic part of
/// what it saw.
fn redis_scenario(malloc: Malloc) -> String {
    let dir = scratch(&format!("redis-{}", malloc.name()));
    let port = free_port();
    let mut cmd = command("/usr/bin/redis-server");
    support::with_malloc(&mut cmd, malloc);
    cmd.args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stderr(std::fs::File::create(dir.join("redis.err")).unwrap());
    let mut server = Server {
        child: cmd.spawn().expect("start redis-server"),
    };
    // Without the preload, Debian's redis-server runs on the libjemalloc it is linked with.
    let m = match malloc {
        Malloc::Glibc => "its own jemalloc (no preload)",
        Malloc::Ebbtide => "ebbtide",
    };
    let t0 = Instant::now();
    let mut client = loop {
        if let Ok(c) = resp::Client::connect(port) {
            break c;
        }
        if let Some(s) = server.child.try_wait().unwrap() {
            panic!(
                "redis-server under {m} ended at start ({}): {}",
                support::describe(&s),
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "redis-server under {m} did not accept connections on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(client.cmds(&["PING"]).text(), "PONG");

    // The benchmark: random keys over a keyspace of 100 000, pipelined, several data types.
    let tests = "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,lrange_100,mset";
    let mut bench = command("/usr/bin/redis-benchmark");
    bench
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-r", "100000", "-n", "200000", "-c", "20", "-P", "16", "-q", "-t", tests,
        ]);
    let b = run(
        bench,
        malloc,
        &dir,
        "redis-benchmark",
        Duration::from_secs(240),
    );
    assert!(
        b.status.success(),
        "redis-benchmark against redis-server under {m}: {}\n{}",
        support::describe(&b.status),
        b.stderr_tail(20)
    );
    no_ebbtide_messages("redis-benchmark", &b);
    // -q rewrites a progress line with \r; keep each test's final figure.
    let report: Vec<String> = b
        .stdout_str()
        .lines()
        .filter_map(|l| l.rsplit('\r').next())
        .map(|l| l.trim().to_string())
        .filter(|l| l.contains("requests per second"))
        .collect();
    assert_eq!(
        report.len(),
        tests.split(',').count() + 1, // lrange_100 first runs an LPUSH of its own
        "redis-benchmark did not finish every test:\n{}",
        b.stdout_str()
    );
    let dbsize_after_bench = match client.cmds(&["DBSIZE"]) {
        resp::Reply::Int(n) => n,
        r => panic!("DBSIZE: {r:?}"),
    };
    assert!(dbsize_after_bench > 0, "the benchmark left no keys");

    // Our own data, written (pipelined) and read back whole.
    let writes = client.pipeline(&dataset());
    for (i, r) in writes.iter().enumerate() {
        assert!(!matches!(r, resp::Reply::Error(_)), "write {i}: {r:?}");
    }
    let transcript = check_dataset(&mut client);
    // redis-cli too, as its users call it (under the same malloc).
    let mut cli = command("/usr/bin/redis-cli");
    cli.args(["-p", &port.to_string(), "DBSIZE"]);
    let d = run(cli, malloc, &dir, "redis-cli", Duration::from_secs(30));
    no_ebbtide_messages("redis-cli", &d);
    assert_eq!(
        d.stdout_str().trim(),
        (dbsize_after_bench + 16_000).to_string(),
        "DBSIZE through redis-cli after the dataset (benchmark keys {dbsize_after_bench} + 16 000 of ours)"
    );
    // The commands that ask the allocator: Debian's redis-server calls jemalloc's mallctl for
    // them (its own figures, not ebbtide's), and malloc_usable_size (ebbtide's) for MEMORY USAGE.
    for c in [
        &["MEMORY", "USAGE", "ds:list:99"][..],
        &["MEMORY", "STATS"],
        &["MEMORY", "DOCTOR"],
        &["MEMORY", "MALLOC-STATS"],
        &["MEMORY", "PURGE"],
    ] {
        let r = client.cmds(c);
        assert!(
            !matches!(r, resp::Reply::Error(_)),
            "{} under {m}: {r:?}",
            c.join(" ")
        );
    }
    let usage = client.cmds(&["MEMORY", "USAGE", "ds:list:99"]);
    assert!(
        matches!(usage, resp::Reply::Int(n) if n >= 100 * 5),
        "MEMORY USAGE of a 100-element list under {m}: {usage:?}"
    );
    assert_eq!(client.cmds(&["PING"]).text(), "PONG");
    let mem = client.cmds(&["INFO", "memory"]).text();
    let mem: Vec<&str> = mem
        .lines()
        .filter(|l| {
            [
                "mem_allocator:",
                "used_memory:",
                "allocator_allocated:",
                "used_memory_rss:",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .collect();

    // A clean shutdown.
    let mut cli = command("/usr/bin/redis-cli");
    cli.args(["-p", &port.to_string(), "SHUTDOWN", "NOSAVE"]);
    let _ = run(cli, malloc, &dir, "redis-shutdown", Duration::from_secs(30));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "redis-server under {m} did not exit after SHUTDOWN"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let err = std::fs::read_to_string(dir.join("redis.err")).unwrap_or_default();
    assert!(
        status.success(),
        "redis-server under {m}: {}\n--- log (tail)\n{}\n--- stderr\n{err}",
        support::describe(&status),
        support::tail(&log, 30)
    );
    for (what, text) in [("log", &log), ("stderr", &err)] {
        assert!(
            !text.contains("ebbtide:"),
            "redis-server {what} under {m} has malloc messages:\n{text}"
        );
    }
    eprintln!(
        "redis-server under {m}: {} | {transcript}, DBSIZE {}, clean shutdown\n  {}",
        mem.join(" "),
        dbsize_after_bench + 16_000,
        report.join("\n  ")
    );
    let _ = std::fs::remove_dir_all(&dir);
    format!("{transcript}; exit {}", support::describe(&status))
}

#[test]
fn redis_server_under_benchmark_keeps_its_data() {
    let _turn = crate::serial::turn(module_path!());
    if !installed("/usr/bin/redis-server", "redis-server")
        || !installed("/usr/bin/redis-benchmark", "redis-tools")
        || !installed("/usr/bin/redis-cli", "redis-tools")
    {
        return;
    }
    lib();
    let glibc = redis_scenario(Malloc::Glibc);
    let ebbtide = redis_scenario(Malloc::Ebbtide);
    assert_eq!(
        glibc, ebbtide,
        "redis-server: without and with the preload, different results"
    );
}

// ---------------------------------------------------------------------------------------------
// LD_DEBUG=bindings

/// `(from object, to object, symbol)` of every `binding file ... to ...: normal symbol` line
/// the dynamic loader wrote for `cmd` under the preload.
fn bindings(mut cmd: Command, dir: &Path, tag: &str) -> Vec<(String, String, String)> {
    let prefix = dir.join(format!("ld-{tag}"));
    cmd.env("LD_DEBUG", "bindings")
        .env("LD_DEBUG_OUTPUT", &prefix);
    let r = run(cmd, Malloc::Ebbtide, dir, tag, Duration::from_secs(60));
    assert!(
        r.status.success(),
        "{tag} under the preload with LD_DEBUG: {}\n{}",
        support::describe(&r.status),
        r.stderr_tail(20)
    );
    no_ebbtide_messages(tag, &r);
    let name = prefix.file_name().unwrap().to_str().unwrap().to_string();
    let mut out = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let f = f.unwrap();
        let n = f.file_name().to_string_lossy().into_owned();
        if !n.starts_with(&format!("{name}.")) {
            continue;
        }
        for l in std::fs::read_to_string(f.path()).unwrap().lines() {
            let Some(i) = l.find("binding file ") else {
                continue;
            };
            let rest = &l[i + "binding file ".len()..];
            let (Some(to), Some(sym)) = (rest.find(" to "), rest.find(": normal symbol `")) else {
                continue;
            };
            let from = rest[..to].split(" [").next().unwrap().to_string();
            let target = rest[to + 4..sym].split(" [").next().unwrap().to_string();
            let s = &rest[sym + ": normal symbol `".len()..];
            let s = s[..s.find('\'').unwrap_or(s.len())].to_string();
            out.push((from, target, s));
        }
    }
    assert!(!out.is_empty(), "{tag}: LD_DEBUG wrote no bindings");
    out
}

/// Checks that each of `symbols` is bound at least once from `program` to the library, and that
/// no object of the process binds any of them elsewhere.
fn assert_bound_to_ebbtide(
    tag: &str,
    b: &[(String, String, String)],
    program: &str,
    symbols: &[&str],
) {
    let lib = lib().to_str().unwrap();
    for s in symbols {
        assert!(
            b.iter()
                .any(|(f, t, sym)| sym == s && t == lib && f.ends_with(program)),
            "{tag}: no binding of `{s}' from {program} to {lib}; bindings of it: {:?}",
            b.iter().filter(|(_, _, sym)| sym == s).collect::<Vec<_>>()
        );
        // A non-PIE executable (Debian's python3) that takes a function's address defines it as
        // a canonical PLT entry: the other objects bind to that entry, which binds to the library.
        let forwarders: Vec<&str> = b
            .iter()
            .filter(|(f, t, sym)| sym == s && t == lib && f != lib)
            .map(|(f, _, _)| f.as_str())
            .collect();
        let elsewhere: Vec<_> = b
            .iter()
            .filter(|(_, t, sym)| sym == s && t != lib && !forwarders.contains(&t.as_str()))
            .collect();
        assert!(
            elsewhere.is_empty(),
            "{tag}: `{s}' bound to another object than {lib}: {elsewhere:?}"
        );
    }
}

#[test]
fn symbols_bind_to_ebbtide() {
    let _turn = crate::serial::turn(module_path!());
    let dir = scratch("bindings");
    let lib_path = lib().to_str().unwrap().to_string();

    // A C program calling each function.
    // (-O0 -fno-builtin: the compiler must not elide an allocation the program only frees.)
    if let Some(exe) = compile(&program("bindings.c"), &dir, &["-O0", "-fno-builtin"]) {
        let b = bindings(command(&exe), &dir, "c");
        assert_bound_to_ebbtide("C program", &b, "/bindings", C_NAMES);
        // The C library's own calls (stdio's buffer) go to ebbtide too.
        assert!(
            b.iter()
                .any(|(f, t, s)| f.contains("libc.so") && t == &lib_path && s == "malloc"),
            "libc.so's own malloc does not bind to ebbtide"
        );
    }
    // A C++ program: operator new and delete by their Itanium names.
    if let Some(exe) = compile(&program("stdlib.cpp"), &dir, &[]) {
        let b = bindings(command(&exe), &dir, "cpp");
        // (g++ compiles `delete` as the sized forms; libstdc++'s own code uses the unsized ones.)
        assert_bound_to_ebbtide(
            "C++ program",
            &b,
            "/stdlib",
            &[
                "_Znwm",
                "_ZdlPvm",
                "_Znam",
                "_ZnamRKSt9nothrow_t",
                "_ZnwmSt11align_val_t",
                "_ZnamSt11align_val_t",
                "_ZdlPvmSt11align_val_t",
                "_ZdaPvSt11align_val_t",
            ],
        );
        assert_bound_to_ebbtide(
            "libstdc++",
            &b,
            "libstdc++.so.6",
            &["_Znwm", "_ZdlPv", "_Znam", "_ZdaPv", "malloc", "free"],
        );
    }
    // Debian's programs.
    if installed(PYTHON, "python3") {
        let mut c = command(PYTHON);
        c.env("PYTHONMALLOC", "malloc").args([
            "-c",
            "import json; print(len(json.dumps(list(range(10000)))))",
        ]);
        let b = bindings(c, &dir, "python3");
        assert_bound_to_ebbtide(
            "python3",
            &b,
            "/usr/bin/python3",
            &["malloc", "free", "calloc", "realloc"],
        );
    }
    if installed("/usr/bin/sqlite3", "sqlite3") {
        let mut c = command("/usr/bin/sqlite3");
        c.args([":memory:", "select 1;"]);
        let b = bindings(c, &dir, "sqlite3");
        assert_bound_to_ebbtide(
            "sqlite3",
            &b,
            "libsqlite3.so.0",
            &["malloc", "free", "realloc"],
        );
    }
    if installed("/usr/bin/perl", "perl") {
        let mut c = command("/usr/bin/perl");
        c.args([
            "-e",
            "my %h = map { $_ => 1 } 1..1000; print scalar(keys %h), qq(\\n)",
        ]);
        let b = bindings(c, &dir, "perl");
        assert_bound_to_ebbtide("perl", &b, "/usr/bin/perl", &["malloc", "free", "realloc"]);
    }
    if installed("/usr/bin/redis-server", "redis-server") {
        let mut c = command("/usr/bin/redis-server");
        c.arg("--version");
        let b = bindings(c, &dir, "redis");
        // redis-server is linked with libjemalloc: the preload still takes malloc and friends;
        // jemalloc's own extensions (nallocx, mallctl) stay jemalloc's.
        assert_bound_to_ebbtide(
            "redis-server",
            &b,
            "/redis-server",
            &["malloc", "free", "calloc", "realloc", "malloc_usable_size"],
        );
        let jemalloc: Vec<&str> = b
            .iter()
            .filter(|(f, t, _)| f.ends_with("/redis-server") && t.contains("libjemalloc"))
            .map(|(_, _, s)| s.as_str())
            .collect();
        eprintln!("redis-server binds to libjemalloc only: {jemalloc:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
