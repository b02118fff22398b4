//! The cross-allocator check of what the programs printed (python, sqlite): every run of a
//! case must print what most of its runs printed.

use crate::allocators::Allocator;
use crate::cases::{self, Row};
use crate::report::Cell;

/// The cases whose programs print a result (python, sqlite): a run whose output differs from
/// what most runs of the case printed is a failure of its allocator.
pub fn check(cases: &[Row], results: &mut [Vec<Cell>], allocs: &[Allocator]) {
    for (c, row) in cases.iter().zip(results.iter_mut()) {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for cell in row.iter() {
            for s in &cell.samples {
                if let Some(o) = &s.output {
                    match counts.iter_mut().find(|x| x.0 == o.text) {
                        Some(x) => x.1 += 1,
                        None => counts.push((o.text.clone(), 1)),
                    }
                }
            }
        }
        let Some((reference, _)) = counts.iter().max_by_key(|x| x.1).cloned() else {
            continue;
        };
        for (a, cell) in allocs.iter().zip(row.iter_mut()) {
            let wrong = cell
                .samples
                .iter()
                .filter_map(|s| s.output.as_ref())
                .find(|o| o.text != reference);
            if let (Some(w), None) = (wrong, &cell.failure) {
                let first = |s: &str| s.lines().next().unwrap_or("").to_string();
                cell.failure = Some(cases::Failure {
                    reason: format!(
                        "{} under {}: wrong output: {:?} where the other runs printed {:?}",
                        c.label(),
                        a.name,
                        first(&w.text),
                        first(&reference)
                    ),
                    repro: w.repro.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{find, Printed, Row, Sample};
    use std::path::PathBuf;

    fn run(text: &str) -> Sample {
        Sample {
            value: 1.0,
            rss_kib: 1,
            extras: vec![],
            output: Some(Printed {
                text: text.into(),
                repro: format!("cmd printing {text}"),
            }),
            counters: None,
        }
    }

    #[test]
    fn the_odd_output_fails_its_allocator() {
        let cases = [Row::plain(find("sqlite_bulk").unwrap())];
        let allocs: Vec<Allocator> = ["ebbtide", "glibc", "jemalloc"]
            .iter()
            .map(|n| Allocator {
                name: n,
                preload: PathBuf::from("/l/x.so"),
                env: vec![],
            })
            .collect();
        let mut results = vec![vec![
            Cell {
                samples: vec![run("42\n"), run("41\n")],
                failure: None,
            },
            Cell {
                samples: vec![run("42\n"), run("42\n")],
                failure: None,
            },
            Cell {
                samples: vec![run("42\n")],
                failure: None,
            },
        ]];
        check(&cases, &mut results, &allocs);
        let f = results[0][0].failure.as_ref().expect("ebbtide failed");
        assert!(
            f.reason
                .contains("sqlite_bulk under ebbtide: wrong output: \"41\""),
            "{}",
            f.reason
        );
        assert!(f.reason.contains("printed \"42\""), "{}", f.reason);
        assert_eq!(f.repro, "cmd printing 41\n");
        assert!(results[0][1].failure.is_none() && results[0][2].failure.is_none());
    }
}
