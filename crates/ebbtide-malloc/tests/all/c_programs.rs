//! Builds `libebbtide_malloc.so` (a nested `cargo build -p ebbtide-malloc` into this target
//! directory, test profile) and runs C and C++ programs on it, compiled with the system
//! compilers (`$CC`, default `cc`; `$CXX`, default `c++`):
//!
//! * `tests/c/api.c`: every C name and its contracts — preloaded, linked (`-lebbtide_malloc`),
//!   and preloaded with glibc's rseq registration off (the per-CPU caches' locked mode);
//! * the same program's bad pointers (a stack address, an interior pointer, a double free, a
//!   foreign `realloc`, `malloc_usable_size` of a foreign pointer): one clear message each,
//!   nothing applied, the allocator still working; a non-immediate double free caught in
//!   checked mode;
//! * `tests/c/cxx.cpp`: the C++ operators, a new handler and a real `std::bad_alloc`,
//!   preloaded and linked;
//! * `tests/c/stress.c`: threads freeing each other's blocks, threads exiting, forks with the
//!   other threads busy, `malloc_trim` (DRAIN_CPU) in a loop;
//! * a forked child gets the runtime's threads back (at its first slow path);
//! * `dlopen` of a library that allocates in its constructor and hands its blocks to the
//!   program (and takes the program's), then `dlclose`.

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CFLAGS: &[&str] = &[
    "-std=gnu11",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    // The tests call malloc and free on purpose in ways the compiler warns about (bad pointers,
    // sizes near SIZE_MAX) or would elide (a block allocated and freed unused).
    "-fno-builtin",
    "-Wno-free-nonheap-object",
    "-Wno-use-after-free",
    "-Wno-alloc-size-larger-than",
    "-Wno-deprecated-declarations",
];

fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The directory of the library built once by the shared test support.
fn lib_dir() -> &'static Path {
    support::lib().parent().unwrap()
}

fn lib() -> PathBuf {
    support::lib().to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("malloc-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn compile(src: &str, out: &Path, cxx: bool, linked: bool) {
    let (cc, std): (String, &[&str]) = if cxx {
        (
            std::env::var("CXX").unwrap_or_else(|_| "c++".into()),
            &["-std=c++17", "-O2", "-g", "-Wall", "-Wextra", "-Werror"],
        )
    } else {
        (std::env::var("CC").unwrap_or_else(|_| "cc".into()), CFLAGS)
    };
    let mut c = Command::new(&cc);
    c.args(std)
        .arg("-pthread")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/c")
                .join(src),
        )
        .arg("-o")
        .arg(out);
    if linked {
        c.arg("-L").arg(lib_dir()).arg("-lebbtide_malloc");
        c.arg(format!("-Wl,-rpath,{}", lib_dir().display()));
    }
    c.arg("-ldl");
    let o = c.output().unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(o.status.success(), "compiling {src} failed:\n{}", show(&o));
}

fn run(bin: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Output {
    let mut c = Command::new(bin);
    c.args(args).env_remove("EBBTIDE_CONF");
    if preload {
        c.env("LD_PRELOAD", lib());
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// `src` compiled once per process (`cxx`: as C++; `linked`: against the library), into one
/// scratch folder emptied once: two tests that asked for programs at once emptied the folder
/// (`scratch`) and compiled to the same path under each other, and one ran its program while
/// the other's linker was rewriting it ("Permission denied", seen in a full run).
fn program(src: &str, cxx: bool, linked: bool) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let out = DIR.get_or_init(|| scratch("bin")).join(format!(
        "{}-{}",
        src.replace('.', "_"),
        if linked { "linked" } else { "plain" }
    ));
    if !built.contains(&out) {
        compile(src, &out, cxx, linked);
        built.push(out.clone());
    }
    out
}

#[test]
fn c_api_preloaded_linked_and_locked() {
    let _turn = crate::serial::turn(module_path!());
    let plain = program("api.c", false, false);
    let o = run(&plain, &[], &[], true);
    assert!(
        o.status.success() && o.stdout.starts_with(b"api ok"),
        "{}",
        show(&o)
    );
    assert!(o.stderr.is_empty(), "unexpected messages:\n{}", show(&o));
    // Without the preload the same binary runs on glibc, where free_sized is missing: the test
    // program refuses (it proves the names it checks are ebbtide's).
    let o = run(&plain, &[], &[], false);
    assert!(
        !o.status.success(),
        "api.c passed on glibc alone?\n{}",
        show(&o)
    );
    let linked = program("api.c", false, true);
    let o = run(&linked, &[], &[], false);
    assert!(o.status.success(), "linked:\n{}", show(&o));
    // glibc without rseq: the per-CPU caches run locked; the malloc must still be exact.
    let o = run(
        &plain,
        &[],
        &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")],
        true,
    );
    assert!(o.status.success(), "rseq off:\n{}", show(&o));
}

#[test]
fn bad_pointers_are_reported_not_applied() {
    let _turn = crate::serial::turn(module_path!());
    let plain = program("api.c", false, false);
    let o = run(&plain, &["bad"], &[], true);
    assert!(o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "not a block ebbtide allocated (from before ebbtide was loaded, another allocator, or no allocation); not applied",
        "pointer is inside an item but not at its start; not applied",
        "double free: the item is already free; not applied",
        "realloc(",
        "malloc_usable_size(",
    ] {
        assert!(err.contains(want), "no message {want:?}:\n{err}");
    }
    assert_eq!(err.lines().count(), 5, "one line per bad pointer:\n{err}");
}

#[test]
fn double_free_caught_in_checked_mode() {
    let _turn = crate::serial::turn(module_path!());
    let d = scratch("df");
    let src = d.join("df.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <stdlib.h>
int main(void) {
    void *a = malloc(48), *b = malloc(48);
    free(a);
    free(b);
    free(a); /* not the top of this CPU's cache: only checked mode sees it at once */
    void *c = malloc(48), *e = malloc(48);
    printf("%d\n", c != e);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = d.join("df");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O0", "-fno-builtin", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let o = run(&bin, &[], &[("EBBTIDE_CONF", "checked=1")], true);
    assert!(o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("double free"),
        "checked mode missed it:\n{err}"
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "1",
        "two live blocks share an address"
    );
}

#[test]
fn cxx_operators_preloaded_and_linked() {
    let _turn = crate::serial::turn(module_path!());
    let plain = program("cxx.cpp", true, false);
    let o = run(&plain, &[], &[], true);
    assert!(
        o.status.success() && o.stdout.starts_with(b"cxx ok"),
        "{}",
        show(&o)
    );
    let linked = program("cxx.cpp", true, true);
    let o = run(&linked, &[], &[], false);
    assert!(
        o.status.success() && o.stdout.starts_with(b"cxx ok"),
        "{}",
        show(&o)
    );
}

#[test]
fn stress_threads_forks_and_drains() {
    let _turn = crate::serial::turn(module_path!());
    let bin = program("stress.c", false, false);
    let o = run(&bin, &[], &[], true);
    assert!(o.status.success(), "{}", show(&o));
    assert!(o.stderr.is_empty(), "messages:\n{}", show(&o));
}

#[test]
fn forked_child_restarts_the_runtime() {
    let _turn = crate::serial::turn(module_path!());
    let d = scratch("fork");
    let src = d.join("fork.c");
    // The parent's reclaim thread exists before the fork; the child, after its first slow
    // path (where a forked child's runtime starts again), lists its threads' names.
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static void threads(const char *who) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[128], name[64] = "";
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(p, "r");
        if (f) { if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = 0; fclose(f); }
        printf("%s %s\n", who, name);
    }
    closedir(d);
}
int main(void) {
    free(malloc(100));
    usleep(200000);
    threads("parent");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child's runtime starts at its first slow path (a block above the classes). */
        void *volatile big = malloc(200000); /* volatile: not elided with its free */
        free(big);
        usleep(200000);
        threads("child");
        void *p = malloc(1000); free(p);
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#,
    )
    .unwrap();
    let bin = d.join("fork");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    // runtime_start_bytes=0: the parent's threads start at load (a small program has none).
    let o = run(&bin, &[], &[("EBBTIDE_RUNTIME_START_BYTES", "0")], true);
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("parent ebbtide-reclaim"), "{out}");
    assert!(
        out.contains("child ebbtide-reclaim"),
        "the child has no reclaim thread:\n{out}"
    );
}

#[test]
fn dlopen_of_a_library_that_allocates() {
    let _turn = crate::serial::turn(module_path!());
    let d = scratch("dlopen");
    let lib_src = d.join("plug.c");
    std::fs::write(
        &lib_src,
        r#"#include <stdlib.h>
#include <string.h>
static char *made_at_load;
__attribute__((constructor)) static void init(void) {
    made_at_load = malloc(5000);
    strcpy(made_at_load, "constructed");
}
__attribute__((destructor)) static void fini(void) { free(made_at_load); }
char *plug_make(size_t n) { char *p = malloc(n); memset(p, 'x', n - 1); p[n - 1] = 0; return p; }
void plug_take(void *p) { free(p); }
const char *plug_loaded(void) { return made_at_load; }
"#,
    )
    .unwrap();
    let plug = d.join("libplug.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&plug)
        .arg(&lib_src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let main_src = d.join("main.c");
    std::fs::write(
        &main_src,
        r#"#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    (void)argc;
    for (int round = 0; round < 20; round++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
        char *(*make)(size_t) = (char *(*)(size_t))dlsym(h, "plug_make");
        void (*take)(void *) = (void (*)(void *))dlsym(h, "plug_take");
        const char *(*loaded)(void) = (const char *(*)(void))dlsym(h, "plug_loaded");
        if (strcmp(loaded(), "constructed") != 0) return 2;
        char *p = make(1000 + round);
        if (strlen(p) != (size_t)(999 + round) || malloc_usable_size(p) < 1000) return 3;
        free(p);                       /* the library's block, freed by the program */
        char *q = malloc(300);
        take(q);                       /* the program's block, freed by the library */
        if (dlclose(h) != 0) return 4;
    }
    puts("dlopen ok");
    return 0;
}
"#,
    )
    .unwrap();
    let bin = d.join("main");
    let o = Command::new(&cc)
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&main_src)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let o = run(&bin, &[plug.to_str().unwrap()], &[], true);
    assert!(
        o.status.success() && o.stdout.starts_with(b"dlopen ok"),
        "{}",
        show(&o)
    );
    assert!(o.stderr.is_empty(), "messages:\n{}", show(&o));
}

#[test]
fn runtime_threads_do_not_keep_a_process_alive() {
    let _turn = crate::serial::turn(module_path!());
    // main() ends with pthread_exit while a worker runs: the process must end when the worker
    // does (the C library's last-thread exit), not live on in the runtime's threads.
    let d = scratch("lastthread");
    let src = d.join("last.c");
    std::fs::write(
        &src,
        r#"#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *work(void *a) {
    (void)a;
    for (int i = 0; i < 1000; i++) free(malloc(100 + i));
    usleep(300000);
    puts("worker done");
    fflush(stdout);
    return NULL;
}
int main(void) {
    pthread_t t;
    free(malloc(10));
    pthread_create(&t, NULL, work, NULL);
    pthread_exit(NULL);
}
"#,
    )
    .unwrap();
    let bin = d.join("last");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let t0 = std::time::Instant::now();
    let o = Command::new("timeout")
        .arg("20")
        .arg(&bin)
        .env("LD_PRELOAD", lib())
        .env_remove("EBBTIDE_CONF")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "worker done");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "took {:?} to end",
        t0.elapsed()
    );
}
