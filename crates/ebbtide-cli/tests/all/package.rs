//! The Debian package end to end, as an operator meets it (root; `scripts/package-deb.sh`):
//! built with the one command, installed on this machine with dpkg, used (a program runs under
//! the installed malloc through the installed `ebbtide run`, `ebbtide ls` and `stat` see it, a C
//! program builds against the installed C API with pkg-config and runs), then purged: every
//! file it installed is gone. A guard purges the package also when the test fails.
//!
//! Not root, it skips (a failure under CI). A machine where a package `ebbtide` is installed
//! already is left alone: the test skips rather than remove it.

#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "the_package_installs_works_and_removes_cleanly";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, fails the test with its output unless it succeeds; returns its stdout.
/// The cargo profile this test was built with: `release` under `cargo test --release`, else
/// `test` (its folder, `target/debug`, is the dev profile's).
fn this_profile() -> &'static str {
    let exe = std::env::current_exe().expect("the test's path");
    // target/<dir>/deps/<test binary>
    match exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
    {
        Some(d) if d == "release" => "release",
        _ => "test",
    }
}

fn ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Purges the packages when dropped (the test's end, or its failure).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "ebbtide-dbgsym", "ebbtide"])
            .status();
    }
}

/// A child killed and reaped when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A command with nothing of the test's environment that would change which malloc the
/// program gets or where the command looks for it.
fn clean(program: &str) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        // (cargo's LD_LIBRARY_PATH names the build's own libebbtide.so.)
        if k.starts_with("EBBTIDE_")
            || k == "LD_PRELOAD"
            || k == "LD_LIBRARY_PATH"
            || k == "XDG_RUNTIME_DIR"
        {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn the_package_installs_works_and_removes_cleanly() {
    let _turn = crate::serial::turn(module_path!());
    if !skip::need_root(TEST, "dpkg installs and removes the package") {
        return;
    }
    if installed("ebbtide") || installed("ebbtide-dbgsym") {
        skip::skip(
            TEST,
            "a package ebbtide is installed on this machine already: the test would remove it",
        );
        return;
    }
    for (tool, package) in [
        ("/usr/bin/python3", "python3"),
        ("/usr/bin/pkg-config", "pkg-config"),
    ] {
        if !Path::new(tool).exists() {
            skip::skip(
                TEST,
                &format!("{tool} is missing (apt-get install {package})"),
            );
            return;
        }
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("deb");
    let _ = std::fs::remove_dir_all(&out);

    // 1. One command builds both packages, from this test's profile: the artifacts `cargo
    // test` made (a release build of their own took 75 s of the CI run).
    let built = ok(Command::new("bash")
        .arg(repo().join("scripts/package-deb.sh"))
        .arg(&out)
        .env("EBBTIDE_DEB_PROFILE", this_profile())
        .current_dir(repo())
        .stderr(Stdio::inherit()));
    let debs: Vec<&str> = built.lines().rev().take(2).collect();
    let (dbg, deb) = (debs[0], debs[1]);
    assert!(
        deb.ends_with("_amd64.deb") || deb.contains("/ebbtide_"),
        "{built}"
    );
    assert!(dbg.contains("/ebbtide-dbgsym_"), "{built}");

    // 2. Installed.
    let _guard = Installed;
    ok(Command::new("dpkg").args(["-i", deb, dbg]));
    assert!(installed("ebbtide") && installed("ebbtide-dbgsym"));
    let files: Vec<String> = ok(Command::new("dpkg").args(["-L", "ebbtide", "ebbtide-dbgsym"]))
        .lines()
        .filter(|l| Path::new(l).is_file())
        .map(str::to_string)
        .collect();
    for want in [
        "/usr/bin/ebbtide",
        "/usr/lib/libebbtide_malloc.so",
        "/usr/lib/libebbtide.so",
        "/usr/lib/libebbtide.a",
        "/usr/include/ebbtide.h",
        "/usr/lib/pkgconfig/ebbtide.pc",
        "/usr/share/man/man1/ebbtide.1.gz",
        "/usr/share/man/man1/ebbtide-exporter.1.gz",
        "/usr/share/man/man1/ebbtide-run.1.gz",
        "/usr/share/bash-completion/completions/ebbtide",
        "/usr/share/zsh/vendor-completions/_ebbtide",
        "/usr/share/fish/vendor_completions.d/ebbtide.fish",
        "/lib/systemd/system/ebbtide-exporter.service",
        "/usr/share/doc/ebbtide/examples/ebbtide-service.conf",
    ] {
        assert!(
            files.iter().any(|f| f == want),
            "{want} not installed: {files:?}"
        );
    }
    let unit = std::fs::read_to_string("/lib/systemd/system/ebbtide-exporter.service").unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/ebbtide exporter "),
        "{unit}"
    );
    let dropin =
        std::fs::read_to_string("/usr/share/doc/ebbtide/examples/ebbtide-service.conf").unwrap();
    assert!(dropin.contains("Environment=LD_PRELOAD=/usr/lib/libebbtide_malloc.so"));
    assert!(dropin.contains("control_socket=1"));
    // Debug info is in -dbgsym, not in the shipped files.
    for f in [
        "/usr/bin/ebbtide",
        "/usr/lib/libebbtide_malloc.so",
        "/usr/lib/libebbtide.so",
    ] {
        let sections = ok(Command::new("readelf").args(["-SW", f]));
        assert!(!sections.contains(".debug_info"), "{f} carries debug info");
        assert!(
            sections.contains(".gnu_debuglink"),
            "{f} names no debug file"
        );
    }
    let ar_debug = ok(Command::new("readelf").args(["-SW", "/usr/lib/libebbtide.a"]));
    assert!(
        !ar_debug.contains(".debug_info"),
        "libebbtide.a carries debug info"
    );
    let debug_files: Vec<&String> = files.iter().filter(|f| f.ends_with(".debug")).collect();
    assert_eq!(debug_files.len(), 3, "{debug_files:?}");
    for d in debug_files {
        assert!(
            ok(Command::new("readelf").args(["-SW", d])).contains(".debug_info"),
            "{d}"
        );
    }
    // The man page and the completions come from the command's definition.
    let man = ok(Command::new("zcat").arg("/usr/share/man/man1/ebbtide-exporter.1.gz"));
    assert!(
        man.contains("per\\-zone") || man.contains("per-zone"),
        "{man}"
    );
    let bash = std::fs::read_to_string("/usr/share/bash-completion/completions/ebbtide").unwrap();
    assert!(bash.contains("exporter") && bash.contains("--per-zone"));

    // 3. A program under the installed malloc, through the installed command.
    let script = "import sys\nx = [bytearray(n) for n in range(1, 5000)]\n\
                  print('ready', flush=True)\nsys.stdin.read()\n";
    let mut child = Kill(
        clean("/usr/bin/ebbtide")
            .args(["run", "--", "/usr/bin/python3", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains("/usr/lib/libebbtide_malloc.so"),
        "the program does not run under the installed malloc"
    );
    let t0 = Instant::now();
    loop {
        let ls = ok(&mut clean("/usr/bin/ebbtide").arg("ls"));
        if ls
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&pid.to_string()))
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "ebbtide ls does not list {pid}:\n{ls}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stat = ok(&mut clean("/usr/bin/ebbtide").args(["stat", &pid.to_string()]));
    assert!(stat.contains("malloc"), "{stat}");
    drop(child.0.stdin.take());
    let st = child.0.wait().unwrap();
    assert!(st.success(), "the program under ebbtide: {st}");

    // A C program against the installed C API (pkg-config finds it in /usr/lib/pkgconfig).
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("deb-capi");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("zone.c");
    std::fs::write(
        &src,
        "#include <ebbtide.h>\n#include <stdio.h>\n#include <string.h>\n\
         int main(void) {\n\
           ebb_zone *z = ebb_zone_create(\"pkgtest\", 100, 8, 0);\n\
           if (!z) return 1;\n\
           void *p = ebb_zone_alloc(z);\n\
           if (!p) return 2;\n\
           memset(p, 1, 100);\n\
           ebb_zone_free(z, p);\n\
           printf(\"%s %zu\\n\", EBB_VERSION, ebb_zone_item_size(z));\n\
           return ebb_zone_destroy(z) == 0 ? 0 : 3;\n\
         }\n",
    )
    .unwrap();
    let flags = ok(Command::new("pkg-config").args(["--cflags", "--libs", "ebbtide"]));
    let exe = dir.join("zone");
    ok(Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace()));
    let said = ok(&mut clean(exe.to_str().unwrap()));
    // The item size, rounded up to the zone's alignment.
    let size: u64 = said
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        said.starts_with(env!("CARGO_PKG_VERSION")) && (100..=128).contains(&size),
        "{said}"
    );
    let ldd = ok(clean("ldd").arg(&exe));
    // The installed library (on a merged-/usr system the loader may say /lib/…).
    let resolved = ldd
        .lines()
        .find_map(|l| l.trim().strip_prefix("libebbtide.so => "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{ldd}"));
    assert_eq!(
        std::fs::canonicalize(resolved).unwrap(),
        std::fs::canonicalize("/usr/lib/libebbtide.so").unwrap(),
        "{ldd}"
    );

    // 4. Purged: every file it installed is gone.
    ok(Command::new("dpkg").args(["--purge", "ebbtide-dbgsym", "ebbtide"]));
    assert!(!installed("ebbtide") && !installed("ebbtide-dbgsym"));
    let left: Vec<&String> = files.iter().filter(|f| Path::new(f).exists()).collect();
    assert!(left.is_empty(), "left after dpkg --purge: {left:?}");
}
