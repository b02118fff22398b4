//! The `global_allocator` example's figures add up: for every state it prints, "in use" is its
//! two parts and "mapped" is its three, and nothing is more in use than mapped (the example once
//! printed "in use 37.7 MiB, mapped 35.1 MiB": in use counted the blocks above the size classes,
//! mapped only the classes' slabs). And under critical pressure the mapped memory goes back.

use std::process::Command;

/// The MiB figures of a line, in order.
fn figures(line: &str) -> Vec<f64> {
    line.split_whitespace()
        .zip(line.split_whitespace().skip(1))
        .filter(|(_, unit)| unit.trim_end_matches([',', ')']) == "MiB")
        .map(|(v, _)| v.trim_start_matches('(').parse().unwrap())
        .collect()
}

#[test]
fn the_example_reports_in_use_within_mapped_and_gives_memory_back() {
    let _turn = crate::serial::turn(module_path!());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The example in this test's profile, so no second profile gets built.
    let profile: &[&str] = if cfg!(debug_assertions) {
        &[]
    } else {
        &["--release"]
    };
    let out = Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "-p",
            "ebbtide-malloc",
            "--example",
            "global_allocator",
        ])
        .args(profile)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    let mut states = 0;
    for (i, l) in lines.iter().enumerate() {
        let l = l.trim();
        if let Some(rest) = l.strip_prefix("in use ") {
            let used = figures(rest);
            let mapped_line = lines[i + 1].trim();
            assert!(mapped_line.starts_with("mapped "), "{text}");
            let mapped = figures(mapped_line);
            assert_eq!(used.len(), 3, "{l}");
            assert_eq!(mapped.len(), 4, "{mapped_line}");
            // Sums agree to the printed rounding (0.1 MiB per term).
            assert!((used[0] - used[1] - used[2]).abs() <= 0.15, "{l}");
            assert!(
                (mapped[0] - mapped[1] - mapped[2] - mapped[3]).abs() <= 0.2,
                "{mapped_line}"
            );
            assert!(used[0] <= mapped[0], "more in use than mapped:\n{text}");
            // The blocks above the classes are counted the same in both.
            assert_eq!(used[2], mapped[2], "{text}");
            states += 1;
        }
    }
    assert_eq!(states, 2, "the index and the dropped index:\n{text}");
    // The index is tens of MiB; critical pressure gives it back (the example waits until at
    // most 1 MiB is left mapped, for 3 s at most).
    let built = figures(lines[1])[0];
    assert!(built > 10.0, "{text}");
    let last = lines.last().unwrap().trim();
    assert!(last.starts_with("mapped "), "{text}");
    assert!(figures(last)[0] <= 1.0, "{text}");
}
