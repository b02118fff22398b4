#[test]
fn t() {
    let o = std::process::Command::new(env!("CARGO"))
        .args(["build", "-p", "ebbtide-capi"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    println!(
        "{}",
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .filter(|l| !l.starts_with("warning") && l.contains("ing"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
