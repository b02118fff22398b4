//! `ebbtide run [--conf K=V,…] -- CMD ARGS…` on real programs: the malloc preloaded and the
//! control socket on (so `ebbtide stat PID` shows the program's size classes), a bad
//! configuration refused before anything runs, the program's exit status passed through.

#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EBBTIDE: &str = env!("CARGO_BIN_EXE_ebbtide");

#[test]
fn the_program_gets_the_malloc_and_the_socket() {
    let _turn = crate::serial::turn(module_path!());
    let o = Command::new(EBBTIDE)
        .args(["run", "--conf", "checked=0", "--", "/bin/sh", "-c"])
        .arg("echo \"$LD_PRELOAD\"; echo \"$EBBTIDE_CONF\"")
        .env_remove("EBBTIDE_CONF")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    assert!(
        lines.next().unwrap().ends_with("/libebbtide_malloc.so"),
        "{out}"
    );
    assert_eq!(lines.next().unwrap(), "checked=0,control_socket=1");
}

#[test]
fn bad_configuration_is_refused_before_the_program_runs() {
    let _turn = crate::serial::turn(module_path!());
    let marker = std::env::temp_dir().join(format!("ebbtide-run-marker-{}", std::process::id()));
    let o = Command::new(EBBTIDE)
        .args(["run", "--conf", "squeeze_ms=banana", "--", "/usr/bin/touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("squeeze_ms"), "{err}");
    assert!(
        !marker.exists(),
        "the program ran despite the bad configuration"
    );
}

#[test]
fn exit_status_passes_through() {
    let _turn = crate::serial::turn(module_path!());
    let o = Command::new(EBBTIDE)
        .args(["run", "--", "/bin/sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7));
    let o = Command::new(EBBTIDE)
        .args(["run", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run /nonexistent/program"));
}

#[test]
fn stat_shows_the_size_classes_of_a_preloaded_program() {
    let _turn = crate::serial::turn(module_path!());
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        skip::skip(
            "stat_shows_the_size_classes_of_a_preloaded_program",
            &format!("{python} is missing (apt-get install python3)"),
        );
        return;
    }
    let mut child = Command::new(EBBTIDE)
        .args(["run", "--", python, "-c"])
        .arg("import sys,time\nx=[str(i)*3 for i in range(200000)]\nprint('ready',flush=True)\ntime.sleep(20)")
        .env("PYTHONMALLOC", "malloc")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let t0 = Instant::now();
    let stat = loop {
        let o = Command::new(EBBTIDE)
            .args(["stat", &pid.to_string()])
            .output()
            .unwrap();
        if o.status.success() || t0.elapsed() > Duration::from_secs(10) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(stat.status.success(), "{stat:?}");
    let table = String::from_utf8_lossy(&stat.stdout);
    // 200,000 strings (52 to 67 bytes each as Python objects) and the list holding them: the
    // size classes' blocks in use are at least that many.
    let used: u64 = table
        .lines()
        .filter(|l| l.starts_with("malloc-"))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .sum();
    assert!(
        used >= 200_000,
        "the size classes do not hold python's strings ({used} blocks in use):\n{table}"
    );
}
