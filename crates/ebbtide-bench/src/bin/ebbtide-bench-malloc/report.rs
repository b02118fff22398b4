//! The markdown the run prints: time and peak-RSS tables, extra figures, the verdict against
//! the targets, and the failures with a command that reproduces each.

use crate::allocators::Allocator;
use crate::cases::{Case, Failure, Sample};
use crate::stats::{self, GEOMEAN_TARGET, WORST_TARGET};

/// What one allocator did in one case over all rounds.
#[derive(Default)]
pub struct Cell {
    pub samples: Vec<Sample>,
    pub failure: Option<Failure>,
}

impl Cell {
    pub fn values(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.value).collect()
    }
    pub fn rss_mib(&self) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| s.rss_kib as f64 / 1024.0)
            .collect()
    }
    /// The median time, when the cell has no failure.
    pub fn median(&self) -> Option<f64> {
        (self.failure.is_none() && !self.samples.is_empty()).then(|| stats::median(&self.values()))
    }
    pub fn median_rss(&self) -> Option<f64> {
        (self.failure.is_none() && !self.samples.is_empty()).then(|| stats::median(&self.rss_mib()))
    }
}

/// Three significant digits, at most two decimals.
pub fn fmt(x: f64) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn cell_text(c: &Cell, v: &[f64]) -> String {
    if c.failure.is_some() {
        return "**FAILED**".into();
    }
    if v.is_empty() {
        return "—".into();
    }
    format!(
        "{} [{}–{}]",
        fmt(stats::median(v)),
        fmt(stats::min(v)),
        fmt(stats::max(v))
    )
}

pub struct Report<'a> {
    pub cases: &'a [&'static Case],
    pub allocs: &'a [Allocator],
    /// results[case][allocator]
    pub results: &'a [Vec<Cell>],
    pub rounds: usize,
}

impl Report<'_> {
    fn peers(&self) -> Vec<usize> {
        (0..self.allocs.len())
            .filter(|&i| self.allocs[i].is_peer())
            .collect()
    }
    fn ebbtide(&self) -> Option<usize> {
        self.allocs.iter().position(|a| a.name == "ebbtide")
    }
    fn header(&self, first: &str, last: &str) -> String {
        let names: Vec<&str> = self.allocs.iter().map(|a| a.name).collect();
        let lead = first.matches('|').count() + 1;
        format!(
            "| {first} | {} | {last} |\n|{}{}---:|\n",
            names.join(" | "),
            "---|".repeat(lead),
            "---:|".repeat(names.len())
        )
    }

    /// ebbtide's (case, ratio to the fastest peer) where both exist.
    pub fn time_ratios(&self) -> Vec<(String, f64)> {
        let Some(e) = self.ebbtide() else {
            return Vec::new();
        };
        let peers = self.peers();
        self.cases
            .iter()
            .zip(self.results)
            .filter_map(|(c, row)| {
                let m: Vec<Option<f64>> = row.iter().map(Cell::median).collect();
                let (_, best) = stats::fastest(&m, &peers)?;
                Some((c.name.to_string(), m[e]? / best))
            })
            .collect()
    }

    pub fn time_table(&self) -> String {
        let peers = self.peers();
        let mut s = self.header("case | unit", "ebbtide / fastest peer");
        for (c, row) in self.cases.iter().zip(self.results) {
            let cells: Vec<String> = row.iter().map(|x| cell_text(x, &x.values())).collect();
            let m: Vec<Option<f64>> = row.iter().map(Cell::median).collect();
            let ratio = match (self.ebbtide(), stats::fastest(&m, &peers)) {
                (Some(e), Some((b, best))) => match m[e] {
                    Some(v) => format!("**{:.2}** ({})", v / best, self.allocs[b].name),
                    None => "failed".into(),
                },
                _ => "—".into(),
            };
            s += &format!(
                "| {} | {} | {} | {ratio} |\n",
                c.name,
                c.unit(),
                cells.join(" | ")
            );
        }
        s
    }

    pub fn rss_table(&self) -> String {
        let peers = self.peers();
        let mut s = self.header("case", "ebbtide / median peer");
        for (c, row) in self.cases.iter().zip(self.results) {
            let cells: Vec<String> = row.iter().map(|x| cell_text(x, &x.rss_mib())).collect();
            let m: Vec<Option<f64>> = row.iter().map(Cell::median_rss).collect();
            let ratio = match (self.ebbtide(), stats::median_peer(&m, &peers)) {
                (Some(e), Some(mp)) => match m[e] {
                    Some(v) => format!("**{:.2}** ({} MiB)", v / mp, fmt(mp)),
                    None => "failed".into(),
                },
                _ => "—".into(),
            };
            s += &format!("| {} | {} | {ratio} |\n", c.name, cells.join(" | "));
        }
        s
    }

    /// One row per (case, extra figure), medians.
    pub fn extras_table(&self) -> Option<String> {
        let mut rows = String::new();
        for (c, row) in self.cases.iter().zip(self.results) {
            let mut keys: Vec<String> = Vec::new();
            for cell in row {
                for s in &cell.samples {
                    for (k, _) in &s.extras {
                        if !keys.contains(k) {
                            keys.push(k.clone());
                        }
                    }
                }
            }
            for k in keys {
                let cells: Vec<String> = row
                    .iter()
                    .map(|cell| {
                        let v: Vec<f64> = cell
                            .samples
                            .iter()
                            .filter_map(|s| s.extras.iter().find(|e| e.0 == k).map(|e| e.1))
                            .collect();
                        if cell.failure.is_some() || v.is_empty() {
                            "—".into()
                        } else {
                            fmt(stats::median(&v))
                        }
                    })
                    .collect();
                rows += &format!("| {} {k} | {} | |\n", c.name, cells.join(" | "));
            }
        }
        (!rows.is_empty()).then(|| self.header("case, figure", "") + &rows)
    }

    /// Every allocator's geometric mean of its ratio to the fastest peer (a peer's own ratio
    /// is 1.0 where it is the fastest), over the cases where all have a figure.
    pub fn geomeans(&self) -> Vec<(String, f64, usize)> {
        let peers = self.peers();
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); self.allocs.len()];
        for row in self.results {
            let m: Vec<Option<f64>> = row.iter().map(Cell::median).collect();
            let Some((_, best)) = stats::fastest(&m, &peers) else {
                continue;
            };
            for (i, v) in m.iter().enumerate() {
                if let Some(v) = v {
                    per[i].push(v / best);
                }
            }
        }
        self.allocs
            .iter()
            .zip(per)
            .map(|(a, v)| (a.name.to_string(), stats::geomean(&v), v.len()))
            .collect()
    }

    pub fn verdict(&self) -> String {
        let mut s = String::new();
        let Some(e) = self.ebbtide() else {
            return "No ebbtide column: no verdict.\n".into();
        };
        let ratios = self.time_ratios();
        let failed: Vec<&str> = self
            .cases
            .iter()
            .zip(self.results)
            .filter(|(_, row)| row[e].failure.is_some())
            .map(|(c, _)| c.name)
            .collect();
        s += "| target | measured | met? |\n|---|---|---|\n";
        match stats::time_verdict(&ratios) {
            Some(v) => {
                s += &format!(
                    "| geometric mean of time / fastest peer ≤ {GEOMEAN_TARGET:.1} | {:.3} over {} cases | {} |\n",
                    v.geomean,
                    ratios.len(),
                    if v.geomean_met { "yes" } else { "**no**" }
                );
                let over: Vec<String> = ratios
                    .iter()
                    .filter(|r| r.1 > WORST_TARGET)
                    .map(|r| format!("{} {:.2}", r.0, r.1))
                    .collect();
                s += &format!(
                    "| no case worse than {WORST_TARGET:.1}× the fastest peer | worst {} {:.2}{} | {} |\n",
                    v.worst_case,
                    v.worst,
                    if over.is_empty() {
                        String::new()
                    } else {
                        format!("; above: {}", over.join(", "))
                    },
                    if v.worst_met { "yes" } else { "**no**" }
                );
            }
            None => s += "| time | no case with both ebbtide and a peer | — |\n",
        }
        let peers = self.peers();
        let mut rss_over = Vec::new();
        let mut rss_n = 0;
        for (c, row) in self.cases.iter().zip(self.results) {
            let m: Vec<Option<f64>> = row.iter().map(Cell::median_rss).collect();
            if let (Some(v), Some(mp)) = (m[e], stats::median_peer(&m, &peers)) {
                rss_n += 1;
                if v > mp {
                    rss_over.push(format!("{} {:.2}", c.name, v / mp));
                }
            }
        }
        s += &format!(
            "| peak RSS ≤ the median peer's, every case | {} of {rss_n} cases above{} | {} |\n",
            rss_over.len(),
            if rss_over.is_empty() {
                String::new()
            } else {
                format!(": {}", rss_over.join(", "))
            },
            if rss_over.is_empty() && rss_n > 0 {
                "yes"
            } else {
                "**no**"
            }
        );
        s += &format!(
            "| every case runs correctly | {} | {} |\n",
            if failed.is_empty() {
                "no failure".to_string()
            } else {
                format!("failed: {}", failed.join(", "))
            },
            if failed.is_empty() { "yes" } else { "**no**" }
        );
        s
    }

    pub fn failures(&self) -> Option<String> {
        let mut s = String::new();
        for (c, row) in self.cases.iter().zip(self.results) {
            for (a, cell) in self.allocs.iter().zip(row) {
                if let Some(f) = &cell.failure {
                    s += &format!(
                        "- **{} / {}** (after {} good runs): {}\n  reproduce: `{}`\n",
                        c.name,
                        a.name,
                        cell.samples.len(),
                        f.reason,
                        f.repro
                    );
                }
            }
        }
        (!s.is_empty()).then_some(s)
    }

    pub fn print(&self) {
        println!("## Time");
        println!();
        print!("{}", self.time_table());
        println!();
        println!(
            "Cells: median [min–max] over {} rounds, one fresh process per allocator, case and \
             round. ns/op: inside the C program, the timed loop only; ms: wall time of the \
             program (redis: of redis-benchmark against the preloaded server).",
            self.rounds
        );
        println!();
        println!("## Peak RSS (MiB, ru_maxrss of the process; redis: of redis-server)");
        println!();
        print!("{}", self.rss_table());
        if let Some(t) = self.extras_table() {
            println!();
            println!("## Extra figures (medians)");
            println!();
            print!("{t}");
        }
        println!();
        println!("## Geometric mean of time / fastest peer");
        println!();
        for (n, g, k) in self.geomeans() {
            println!("- {n}: {} ({k} cases)", fmt(g));
        }
        println!();
        println!("## Verdict (issue 12 targets)");
        println!();
        print!("{}", self.verdict());
        if let Some(f) = self.failures() {
            println!();
            println!("## Failures");
            println!();
            print!("{f}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::find;
    use std::path::PathBuf;

    fn alloc(name: &'static str) -> Allocator {
        Allocator {
            name,
            preload: PathBuf::from(format!("/l/{name}.so")),
            env: Vec::new(),
        }
    }

    fn cell(v: &[f64], rss_kib: u64) -> Cell {
        Cell {
            samples: v
                .iter()
                .map(|&value| Sample {
                    value,
                    rss_kib,
                    extras: vec![],
                    output: None,
                })
                .collect(),
            failure: None,
        }
    }

    #[test]
    fn ratios_verdict_and_failures() {
        let cases = [find("pair_small").unwrap(), find("larson").unwrap()];
        let allocs = [alloc("ebbtide"), alloc("glibc"), alloc("jemalloc")];
        let mut broken = cell(&[], 0);
        broken.failure = Some(Failure {
            reason: "killed by signal 11 (SIGSEGV)".into(),
            repro: "LD_PRELOAD=/l/ebbtide.so x".into(),
        });
        let results = vec![
            vec![
                cell(&[2.0, 2.2, 9.0], 4096),
                cell(&[4.0], 2048),
                cell(&[5.0], 3072),
            ],
            vec![broken, cell(&[10.0], 1024), cell(&[8.0], 1024)],
        ];
        let r = Report {
            cases: &cases,
            allocs: &allocs,
            results: &results,
            rounds: 3,
        };
        // pair_small: median 2.2 against glibc's 4.0.
        let t = r.time_ratios();
        assert_eq!(t.len(), 1);
        assert!((t[0].1 - 0.55).abs() < 1e-9, "{t:?}");
        let table = r.time_table();
        assert!(table.contains("| pair_small | ns/op | 2.20 [2.00–9.00] | 4.00 [4.00–4.00] | 5.00 [5.00–5.00] | **0.55** (glibc) |"), "{table}");
        assert!(table.contains("| larson | ns/op | **FAILED** |"), "{table}");
        assert!(table.contains("failed |"), "{table}");
        // RSS: 4 MiB against the median peer's 2.5 MiB.
        assert!(
            r.rss_table().contains("**1.60** (2.50 MiB)"),
            "{}",
            r.rss_table()
        );
        let v = r.verdict();
        assert!(v.contains("| 0.550 over 1 cases | yes |"), "{v}");
        assert!(
            v.contains("1 of 1 cases above: pair_small 1.60 | **no** |"),
            "{v}"
        );
        assert!(v.contains("failed: larson | **no** |"), "{v}");
        let f = r.failures().unwrap();
        assert!(
            f.contains("larson / ebbtide")
                && f.contains("SIGSEGV")
                && f.contains("LD_PRELOAD=/l/ebbtide.so x"),
            "{f}"
        );
        // Geometric means: jemalloc is 1.25 then 1.0 (fastest at larson).
        let g = r.geomeans();
        assert_eq!(g[2].0, "jemalloc");
        assert!((g[2].1 - (1.25f64).sqrt()).abs() < 1e-9, "{g:?}");
        assert_eq!(g[0].2, 1);
    }

    /// `ebbtide-norseq` is shown but neither a peer nor the compared column.
    #[test]
    fn the_norseq_variant_is_not_compared() {
        let cases = [find("pair_small").unwrap()];
        let allocs = [alloc("ebbtide"), alloc("ebbtide-norseq"), alloc("glibc")];
        let results = vec![vec![
            cell(&[3.0], 1024),
            cell(&[1.0], 1024),
            cell(&[2.0], 1024),
        ]];
        let r = Report {
            cases: &cases,
            allocs: &allocs,
            results: &results,
            rounds: 1,
        };
        assert_eq!(r.time_ratios(), vec![("pair_small".to_string(), 1.5)]);
        assert!(
            r.time_table().contains("**1.50** (glibc)"),
            "{}",
            r.time_table()
        );
        let g = r.geomeans();
        assert_eq!(g[1].0, "ebbtide-norseq");
        assert!((g[1].1 - 0.5).abs() < 1e-12);
    }

    #[test]
    fn number_format() {
        assert_eq!(fmt(1234.4), "1234");
        assert_eq!(fmt(12.345), "12.3");
        assert_eq!(fmt(1.2345), "1.23");
        assert_eq!(fmt(f64::NAN), "—");
    }
}
