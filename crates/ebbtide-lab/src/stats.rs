//! Summary statistics and two-sample t-tests, printed the way FreeBSD's `ministat` prints
//! them.
//!
//! `ministat` (FreeBSD `usr.bin/ministat/ministat.c`, function `Relative`) compares each
//! data set against the first with **Student's t-test on the pooled standard deviation**
//! (it assumes equal variances), reading t from a table for df ≤ 100. The brief for this
//! crate asks for **Welch's t-test** (no equal-variance assumption), so both are here:
//!
//! * [`TTest::Welch`] — difference `d = mean(x) − mean(ref)`, standard error
//!   `s = √(var_x/n_x + var_ref/n_ref)`, Welch–Satterthwaite degrees of freedom,
//!   interval `e = t(1 − α/2, df) · s`; relative interval by the same delta-method
//!   form ministat uses, `t · √(var_x/n_x + var_ref/n_ref · mean_x²/mean_ref²)`, divided by
//!   `mean_ref`.
//! * [`TTest::StudentPooled`] — ministat's own formula, term by term.
//!
//! "Difference" is declared when `|d| > e`, as in ministat. The t quantile is computed
//! (inverse of Student's t CDF through the regularised incomplete beta function), not
//! read from a table, so fractional Welch degrees of freedom work; for integer df it
//! agrees with ministat's table to its printed precision.
//!
//! The verdict text is ministat's: `No difference proven at 95.0% confidence`, or
//! `Difference at 95.0% confidence` followed by `\t<d> +/- <e>`, `\t<pct>% +/- <pct_e>%`
//! and a line naming the test, numbers in C's `%g` format.

use std::fmt::Write as _;

/// Min, max, median, mean and sample standard deviation of a data set.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of points.
    pub n: usize,
    /// Smallest point.
    pub min: f64,
    /// Largest point.
    pub max: f64,
    /// Median (mean of the two middle points for even n, as ministat).
    pub median: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for n = 1.
    pub stddev: f64,
}

impl Summary {
    /// Summarises `data`; `None` if it is empty or holds a NaN.
    pub fn of(data: &[f64]) -> Option<Summary> {
        if data.is_empty() || data.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut v = data.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Some(Summary {
            n,
            min: v[0],
            max: v[n - 1],
            median,
            mean,
            stddev: var.sqrt(),
        })
    }

    /// Sample variance.
    pub fn variance(&self) -> f64 {
        self.stddev * self.stddev
    }
}

/// Which two-sample test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TTest {
    /// Welch's unequal-variance t-test.
    Welch,
    /// Student's t-test with pooled standard deviation (what ministat does).
    StudentPooled,
}

/// The outcome of comparing a data set against a reference.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Comparison {
    /// Test used.
    pub test: TTest,
    /// Confidence level in percent (e.g. 95.0).
    pub confidence_pct: f64,
    /// Degrees of freedom.
    pub df: f64,
    /// The t quantile used.
    pub t: f64,
    /// mean(x) − mean(reference).
    pub difference: f64,
    /// Half-width of the confidence interval of `difference`.
    pub interval: f64,
    /// `difference` in % of the reference mean.
    pub difference_pct: f64,
    /// Half-width of the interval of `difference_pct`, in percentage points.
    pub interval_pct: f64,
    /// Pooled standard deviation (StudentPooled) or standard error of the difference
    /// (Welch).
    pub spread: f64,
    /// `|difference| > interval`.
    pub significant: bool,
}

impl Comparison {
    /// ministat's verdict text (no trailing newline).
    pub fn verdict(&self) -> String {
        let conf = format!("{:.1}", self.confidence_pct);
        if !self.significant {
            return format!("No difference proven at {conf}% confidence");
        }
        let how = match self.test {
            TTest::StudentPooled => format!("(Student's t, pooled s = {})", fmt_g(self.spread, 6)),
            TTest::Welch => format!(
                "(Welch's t, df = {}, s = {})",
                fmt_g(self.df, 6),
                fmt_g(self.spread, 6)
            ),
        };
        format!(
            "Difference at {conf}% confidence\n\t{} +/- {}\n\t{}% +/- {}%\n\t{how}",
            fmt_g(self.difference, 6),
            fmt_g(self.interval, 6),
            fmt_g(self.difference_pct, 6),
            fmt_g(self.interval_pct, 6),
        )
    }
}

/// Compares `x` against `reference` at `confidence_pct` (e.g. 95.0). `None` if either set
/// has fewer than 2 points, the confidence is outside (0, 100), or the reference mean is 0.
pub fn compare(
    reference: &[f64],
    x: &[f64],
    test: TTest,
    confidence_pct: f64,
) -> Option<Comparison> {
    let r = Summary::of(reference)?;
    let s = Summary::of(x)?;
    if r.n < 2 || s.n < 2 || !(confidence_pct > 0.0 && confidence_pct < 100.0) || r.mean == 0.0 {
        return None;
    }
    let (nr, nx) = (r.n as f64, s.n as f64);
    let (vr, vx) = (r.variance(), s.variance());
    let p = 1.0 - (1.0 - confidence_pct / 100.0) / 2.0;
    let d = s.mean - r.mean;
    let ratio2 = (s.mean * s.mean) / (r.mean * r.mean);
    let (df, spread, se, rel_se) = match test {
        TTest::StudentPooled => {
            let df = nr + nx - 2.0;
            let spool = (((nx - 1.0) * vx + (nr - 1.0) * vr) / df).sqrt();
            let se = spool * (1.0 / nx + 1.0 / nr).sqrt();
            // ministat: re = (ds->n-1)*Var(ds) + (rs->n-1)*Var(rs)*Avg(ds)^2/Avg(rs)^2,
            //           re *= (ds->n+rs->n) / (ds->n*rs->n*(ds->n+rs->n-2)).
            let re = ((nx - 1.0) * vx + (nr - 1.0) * vr * ratio2) * (nx + nr) / (nx * nr * df);
            (df, spool, se, re.sqrt())
        }
        TTest::Welch => {
            let (a, b) = (vx / nx, vr / nr);
            let se = (a + b).sqrt();
            let df = if a + b == 0.0 {
                nr + nx - 2.0
            } else {
                (a + b) * (a + b) / (a * a / (nx - 1.0) + b * b / (nr - 1.0))
            };
            (df, se, se, (a + b * ratio2).sqrt())
        }
    };
    let t = t_quantile(p, df);
    let e = t * se;
    Some(Comparison {
        test,
        confidence_pct,
        df,
        t,
        difference: d,
        interval: e,
        difference_pct: d * 100.0 / r.mean,
        interval_pct: t * rel_se * 100.0 / r.mean,
        spread,
        significant: d.abs() > e,
    })
}

/// The seed's table: a header with the label column's title and
/// `Min Max Median Avg Stddev`, one row per data set (values as ministat's `%13.8g`),
/// then, for every set after the first, the verdict of comparing it against the first.
///
/// Returns `None` when a set is empty.
pub fn ministat_table(
    label_title: &str,
    sets: &[(&str, &[f64])],
    test: TTest,
    confidence_pct: f64,
) -> Option<String> {
    let w = sets
        .iter()
        .map(|(l, _)| l.len())
        .chain(std::iter::once(label_title.len()))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{label_title:<w$} {:>13} {:>13} {:>13} {:>13} {:>13}",
        "Min", "Max", "Median", "Avg", "Stddev"
    );
    for (label, data) in sets {
        let s = Summary::of(data)?;
        let _ = writeln!(
            out,
            "{label:<w$} {:>13} {:>13} {:>13} {:>13} {:>13}",
            fmt_g(s.min, 8),
            fmt_g(s.max, 8),
            fmt_g(s.median, 8),
            fmt_g(s.mean, 8),
            fmt_g(s.stddev, 8)
        );
    }
    if let Some((_, reference)) = sets.first() {
        for (_, data) in &sets[1..] {
            match compare(reference, data, test, confidence_pct) {
                Some(c) => {
                    let _ = writeln!(out, "{}", c.verdict());
                }
                None => {
                    let _ = writeln!(out, "(too few points for a t-test)");
                }
            }
        }
    }
    Some(out)
}

/// C's `printf("%.<prec>g", x)`.
pub fn fmt_g(x: f64, prec: usize) -> String {
    let prec = prec.max(1);
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    // Round to `prec` significant digits first; the exponent after rounding decides.
    let sci = format!("{:.*e}", prec - 1, x);
    let (mant, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    if exp < -4 || exp >= prec as i32 {
        let mant = trim_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Continued fraction for the incomplete beta function (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The regularised incomplete beta function I_x(a, b).
pub fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// CDF of Student's t distribution with `df` (> 0, may be fractional) degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * inc_beta(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The `p` quantile of Student's t with `df` degrees of freedom (inverse of [`t_cdf`]),
/// by bisection to machine precision. `p` in (0, 1).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "t_quantile: p = {p} outside (0, 1)");
    assert!(df > 0.0, "t_quantile: df = {df} must be > 0");
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    if p == 0.5 {
        return 0.0;
    }
    let mut hi = 1.0;
    while t_cdf(hi, df) < p {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-13 * hi {
            break;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's overhead table (max_pgs 0 and 1024); these 5-point sets have exactly the
    /// seed's min, max, median, mean and stddev.
    const SEED_0: [f64; 5] = [417.0, 417.0, 420.0, 420.0, 423.0];
    const SEED_1024: [f64; 5] = [414.0, 415.0, 416.0, 419.0, 425.0];

    #[test]
    fn t_quantiles_match_tables() {
        // Two-sided 95 % critical values from standard t tables (and ministat's table).
        for (df, want) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (4.0, 2.776),
            (8.0, 2.306),
            (10.0, 2.228),
            (30.0, 2.042),
            (100.0, 1.984),
        ] {
            let t = t_quantile(0.975, df);
            assert!((t - want).abs() < 5e-4, "t(0.975, {df}) = {t}, want {want}");
        }
        assert!((t_quantile(0.995, 8.0) - 3.355).abs() < 5e-4);
        assert!((t_quantile(0.95, 5.0) - 2.015).abs() < 5e-4);
        assert!((t_quantile(0.025, 8.0) + 2.306).abs() < 5e-4);
        assert!((t_quantile(0.975, 1e6) - 1.960).abs() < 5e-4);
        // CDF round trip with a fractional df.
        let q = t_quantile(0.9, 6.32);
        assert!((t_cdf(q, 6.32) - 0.9).abs() < 1e-10);
        assert!((t_cdf(0.0, 3.0) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn summary_matches_seed_rows() {
        let a = Summary::of(&SEED_0).unwrap();
        assert_eq!((a.min, a.max, a.median), (417.0, 423.0, 420.0));
        assert!((a.mean - 419.4).abs() < 1e-12);
        assert_eq!(fmt_g(a.stddev, 8), "2.5099801");
        let b = Summary::of(&SEED_1024).unwrap();
        assert_eq!((b.min, b.max, b.median), (414.0, 425.0, 416.0));
        assert_eq!(fmt_g(b.mean, 8), "417.8");
        assert_eq!(fmt_g(b.stddev, 8), "4.4384682");
        let even = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(Summary::of(&[]).is_none());
        assert_eq!(Summary::of(&[7.0]).unwrap().stddev, 0.0);
    }

    #[test]
    fn seed_table_says_no_difference() {
        let table = ministat_table(
            "max_pgs",
            &[("0", &SEED_0), ("1024", &SEED_1024)],
            TTest::Welch,
            95.0,
        )
        .unwrap();
        let want = "\
max_pgs           Min           Max        Median           Avg        Stddev
0                 417           423           420         419.4     2.5099801
1024              414           425           416         417.8     4.4384682
No difference proven at 95.0% confidence
";
        assert_eq!(table, want);
        // ministat's own (pooled) test agrees.
        let c = compare(&SEED_0, &SEED_1024, TTest::StudentPooled, 95.0).unwrap();
        assert!(!c.significant);
        assert_eq!(c.df, 8.0);
    }

    #[test]
    fn welch_numbers_by_hand() {
        // var 6.3 and 19.7, n = 5: se = sqrt(5.2), df = 27.04 / ((1.26^2 + 3.94^2) / 4).
        let c = compare(&SEED_0, &SEED_1024, TTest::Welch, 95.0).unwrap();
        assert!((c.difference + 1.6).abs() < 1e-12);
        assert!((c.spread - 5.2f64.sqrt()).abs() < 1e-12);
        let df = 27.04 / ((1.26f64.powi(2) + 3.94f64.powi(2)) / 4.0);
        assert!((c.df - df).abs() < 1e-9);
        assert!((c.interval - t_quantile(0.975, df) * 5.2f64.sqrt()).abs() < 1e-9);
        assert!(!c.significant);
    }

    #[test]
    fn difference_wording_matches_ministat() {
        // ministat's man-page data (iguana vs chameleon), pooled test at 80 %. By hand:
        // means 300 and 540, variances 340000/6 and 357800/4, spool² = 697800/10,
        // spool = 264.159; e = t(0.9, 10) · spool · √(1/5 + 1/7) = 1.372184 · 154.676 =
        // 212.243 (ministat's table has t = 1.372 and prints 212.215); relative:
        // √((4·89450 + 6·56666.7·(540/300)²) · 12/350) · t · 100/300 = 102.314 %.
        let iguana = [50.0, 200.0, 150.0, 400.0, 750.0, 400.0, 150.0];
        let chameleon = [150.0, 400.0, 720.0, 500.0, 930.0];
        let no = compare(&iguana, &chameleon, TTest::StudentPooled, 95.0).unwrap();
        assert_eq!(no.verdict(), "No difference proven at 95.0% confidence");
        let yes = compare(&iguana, &chameleon, TTest::StudentPooled, 80.0).unwrap();
        assert_eq!(
            yes.verdict(),
            "Difference at 80.0% confidence\n\t240 +/- 212.243\n\t80% +/- 102.314%\n\t(Student's t, pooled s = 264.159)"
        );
        // Clearly different sets under Welch.
        let a = [100.0, 101.0, 99.0, 100.5, 99.5];
        let b = [110.0, 111.0, 109.0, 110.5, 109.5, 110.0];
        let w = compare(&a, &b, TTest::Welch, 95.0).unwrap();
        assert!(w.significant);
        let v = w.verdict();
        assert!(
            v.starts_with("Difference at 95.0% confidence\n\t10 +/- "),
            "{v}"
        );
        assert!(v.contains("\t10% +/- "), "{v}");
        assert!(v.contains("(Welch's t, df = "), "{v}");
    }

    #[test]
    fn fmt_g_matches_c() {
        assert_eq!(fmt_g(419.4, 8), "419.4");
        assert_eq!(fmt_g(417.0, 8), "417");
        assert_eq!(fmt_g(212.21503, 6), "212.215");
        assert_eq!(fmt_g(-0.38150, 6), "-0.3815");
        assert_eq!(fmt_g(1234567.0, 6), "1.23457e+06");
        assert_eq!(fmt_g(0.0001234, 6), "0.0001234");
        assert_eq!(fmt_g(0.00001234, 6), "1.234e-05");
        assert_eq!(fmt_g(999999.5, 6), "1e+06");
        assert_eq!(fmt_g(0.0, 6), "0");
    }
}
