//! The stale-entry check of the hot-text linker script ([`hot_text_link::Checked`]) with the
//! real linkers: a shared library of two C functions, each in its own section
//! (`-ffunction-sections`, as rustc puts every function), linked with the script by LLD (rustc's
//! own, `gcc-ld/ld.lld` of the toolchain) and by GNU ld. Every entry matching: the link succeeds
//! and lays the functions out in the list's order; an entry matching nothing: the link fails
//! and its message names that entry, and only that one.

use ebbtide_build::hot_text_link::{script, Checked};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolchain's `gcc-ld` directory (its `ld.lld` runs rust-lld), as rustc passes it to `cc`
/// with `-B`.
fn rust_lld_dir() -> PathBuf {
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc --print sysroot");
    let sysroot = String::from_utf8(out.stdout).unwrap();
    let dir = Path::new(sysroot.trim()).join(format!(
        "lib/rustlib/{}-unknown-linux-gnu/bin/gcc-ld",
        std::env::consts::ARCH
    ));
    assert!(dir.join("ld.lld").exists(), "no {}/ld.lld", dir.display());
    dir
}

/// Links `names` (each checked) into a shared library with `linker` ("lld" or "bfd"); the
/// linker's exit status and its stderr, and the library's symbol table on success.
fn link(work: &Path, linker: &str, names: &[&str]) -> (bool, String, String) {
    let c = work.join("f.c");
    std::fs::write(
        &c,
        "int hot_alpha(int x) { return x * 3 + 1; }\nint hot_beta(int x) { return x ^ 0x55; }\n",
    )
    .unwrap();
    let mut entries = Checked::default();
    for n in names {
        entries.push(
            &format!("*(.text.{n}*)"),
            &format!("hot-text.txt: {n} matches no function"),
        );
    }
    let ld = work.join(format!("{linker}.ld"));
    std::fs::write(&ld, script("the test", &entries.body, "", &entries.asserts)).unwrap();
    let so = work.join(format!("lib{linker}.so"));
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-shared", "-fPIC", "-O1", "-ffunction-sections"]);
    if linker == "lld" {
        cmd.arg("-B").arg(rust_lld_dir()).arg("-fuse-ld=lld");
    } else {
        cmd.arg("-fuse-ld=bfd");
    }
    let out = cmd
        .arg(&c)
        .arg(format!("-Wl,-T,{}", ld.display()))
        .arg("-o")
        .arg(&so)
        .output()
        .expect("running cc");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let nm = if out.status.success() {
        let o = Command::new("nm").arg(&so).output().expect("nm");
        String::from_utf8_lossy(&o.stdout).into_owned()
    } else {
        String::new()
    };
    (out.status.success(), stderr, nm)
}

fn address(nm: &str, name: &str) -> u64 {
    nm.lines()
        .find(|l| l.ends_with(&format!(" {name}")))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .unwrap_or_else(|| panic!("{name} not in the library:\n{nm}"))
}

fn check(linker: &str) {
    let work = std::env::temp_dir().join(format!(
        "ebbtide-build-stale-{}-{linker}",
        std::process::id()
    ));
    std::fs::create_dir_all(&work).unwrap();

    // Every entry matches: the link succeeds, in the list's order (beta before alpha).
    let (ok, stderr, nm) = link(&work, linker, &["hot_beta", "hot_alpha"]);
    assert!(
        ok,
        "{linker}: the link with matching entries failed:\n{stderr}"
    );
    assert!(
        address(&nm, "hot_beta") < address(&nm, "hot_alpha"),
        "{linker}: the functions are not in the list's order:\n{nm}"
    );
    // The markers stay out of the dynamic symbol table.
    let dynsym = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(work.join(format!("lib{linker}.so")))
        .output()
        .unwrap();
    let dynsym = String::from_utf8_lossy(&dynsym.stdout);
    assert!(
        !dynsym.contains("__ebbtide_hot_text_"),
        "{linker}: markers exported:\n{dynsym}"
    );

    // A stale entry between two good ones: the link fails, naming it and only it.
    let (ok, stderr, _) = link(&work, linker, &["hot_beta", "hot_gone", "hot_alpha"]);
    assert!(!ok, "{linker}: the link with a stale entry succeeded");
    assert!(
        stderr.contains("hot-text.txt: hot_gone matches no function"),
        "{linker}: the stale entry is not named:\n{stderr}"
    );
    assert!(
        !stderr.contains("hot_beta matches") && !stderr.contains("hot_alpha matches"),
        "{linker}: a matching entry reported stale:\n{stderr}"
    );
    std::fs::remove_dir_all(&work).unwrap();
}

#[test]
fn rust_lld_fails_the_link_on_a_stale_entry_only() {
    check("lld");
}

#[test]
fn gnu_ld_fails_the_link_on_a_stale_entry_only() {
    check("bfd");
}
