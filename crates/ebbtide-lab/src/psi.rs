//! Pressure stall information (`/proc/pressure/memory`, a v2 group's `memory.pressure`).

use crate::error::{read_to_string, Error, Result};

/// One PSI line: share of time (in %) some/all tasks stalled over 10 s, 60 s, 300 s, and the
/// total stall time in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct PsiLine {
    /// avg10, %.
    pub avg10: f64,
    /// avg60, %.
    pub avg60: f64,
    /// avg300, %.
    pub avg300: f64,
    /// Total stall, µs.
    pub total_us: u64,
}

/// The `some` and `full` lines of a memory pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Psi {
    /// At least one task stalled on memory.
    pub some: PsiLine,
    /// All non-idle tasks stalled on memory.
    pub full: PsiLine,
}

impl Psi {
    /// Parses the text of a pressure file.
    pub fn parse(text: &str) -> std::result::Result<Psi, String> {
        let mut psi = Psi::default();
        let mut seen_some = false;
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let kind = it.next();
            let mut l = PsiLine::default();
            for kv in it {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("field {kv:?} is not key=value"))?;
                let bad = |_| format!("bad number in {kv:?}");
                match k {
                    "avg10" => l.avg10 = v.parse().map_err(bad)?,
                    "avg60" => l.avg60 = v.parse().map_err(bad)?,
                    "avg300" => l.avg300 = v.parse().map_err(bad)?,
                    "total" => l.total_us = v.parse().map_err(|_| format!("bad total {v:?}"))?,
                    _ => {}
                }
            }
            match kind {
                Some("some") => {
                    psi.some = l;
                    seen_some = true;
                }
                Some("full") => psi.full = l,
                _ => {}
            }
        }
        if seen_some {
            Ok(psi)
        } else {
            Err("no `some` line".into())
        }
    }

    /// Reads the system-wide `/proc/pressure/memory`.
    pub fn system() -> Result<Psi> {
        let p = "/proc/pressure/memory";
        Psi::parse(&read_to_string(p)?).map_err(|detail| Error::Parse {
            what: p.into(),
            detail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_psi() {
        let t = "some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\n\
                 full avg10=0.75 avg60=0.10 avg300=0.00 total=678\n";
        let p = Psi::parse(t).unwrap();
        assert_eq!(p.some.total_us, 12345);
        assert_eq!(p.full.avg10, 0.75);
        assert!(Psi::parse("nothing here").is_err());
    }
}
