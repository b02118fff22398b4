//! Plain-text tables with aligned columns, in the seed's style:
//!
//! ```text
//!         pswpin  pswpout
//! before  76,672  185,799
//! after      867    3,967
//! ```
//!
//! The first column is left-aligned, the others right-aligned (override per column);
//! columns are separated by two spaces; no trailing spaces.

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Pad on the right.
    Left,
    /// Pad on the left.
    Right,
}

/// A table built row by row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers (the first may be empty, as in the seed).
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Table {
        let align = (0..headers.len())
            .map(|i| if i == 0 { Align::Left } else { Align::Right })
            .collect();
        Table {
            headers: headers.iter().map(|h| h.as_ref().to_string()).collect(),
            align,
            rows: Vec::new(),
        }
    }

    /// Sets the alignment of column `col`.
    pub fn align(mut self, col: usize, a: Align) -> Table {
        if col < self.align.len() {
            self.align[col] = a;
        }
        self
    }

    /// Adds a row; missing cells are blank, extra cells are an error in the caller's code
    /// and panic.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) -> &mut Table {
        assert!(
            cells.len() <= self.headers.len(),
            "row has {} cells, table has {} columns",
            cells.len(),
            self.headers.len()
        );
        let mut r: Vec<String> = cells.iter().map(|c| c.as_ref().to_string()).collect();
        r.resize(self.headers.len(), String::new());
        self.rows.push(r);
        self
    }

    /// Renders the table, one line per row, each ending in `\n`.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let widths: Vec<usize> = (0..n)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain(std::iter::once(self.headers[c].chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(self.rows.iter()) {
            let mut s = String::new();
            for c in 0..n {
                if c > 0 {
                    s.push_str("  ");
                }
                let cell = &line[c];
                let pad = widths[c] - cell.chars().count();
                match self.align[c] {
                    Align::Left => {
                        s.push_str(cell);
                        s.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(cell);
                    }
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// An integer with `,` every three digits: `76672` → `76,672`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Signed version of [`thousands`].
pub fn thousands_i(n: i64) -> String {
    if n < 0 {
        format!("-{}", thousands(n.unsigned_abs()))
    } else {
        thousands(n as u64)
    }
}

/// A float with a fixed number of decimals and thousands separators in the integer part.
pub fn thousands_f(x: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let int = thousands(int.parse().unwrap_or(0));
    let sign = if x < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(76672), "76,672");
        assert_eq!(thousands(185799), "185,799");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands_i(-3967), "-3,967");
        assert_eq!(thousands_f(1234.5, 1), "1,234.5");
        assert_eq!(thousands_f(-0.04, 1), "0.0");
        assert_eq!(thousands_f(-1234.0, 0), "-1,234");
    }

    #[test]
    fn seed_before_after_table() {
        let mut t = Table::new(&["", "pswpin", "pswpout"]);
        t.row(&["before", &thousands(76672), &thousands(185799)]);
        t.row(&["after", &thousands(867), &thousands(3967)]);
        assert_eq!(
            t.render(),
            "        pswpin  pswpout\nbefore  76,672  185,799\nafter      867    3,967\n"
        );
    }

    #[test]
    fn seed_duration_sweep_table() {
        let mut t = Table::new(&["duration", "pswpin", "pswpout"]).align(0, Align::Right);
        for (d, i, o) in [(1u64, 707u64, 5095u64), (10, 867, 3967), (100, 362, 3348)] {
            t.row(&[d.to_string(), thousands(i), thousands(o)]);
        }
        assert_eq!(
            t.to_string(),
            "duration  pswpin  pswpout\n       1     707    5,095\n      10     867    3,967\n     100     362    3,348\n"
        );
    }

    #[test]
    fn short_rows_are_padded() {
        let mut t = Table::new(&["a", "b"]);
        t.row(&["x"]);
        assert_eq!(t.render(), "a  b\nx\n");
    }
}
