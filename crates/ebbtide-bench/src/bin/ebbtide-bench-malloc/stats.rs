//! Medians, spreads, ratios and the verdict against the targets: pure functions of the
//! samples.

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Geometric mean of positive ratios (NaN for none).
pub fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// The fastest peer of one case: (index, median) with the smallest median among `peers`'
/// medians that exist.
pub fn fastest(medians: &[Option<f64>], peers: &[usize]) -> Option<(usize, f64)> {
    peers
        .iter()
        .filter_map(|&i| medians[i].map(|m| (i, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The peer with the smallest median among `peers` (for peak RSS: the lowest peer).
pub fn lowest(medians: &[Option<f64>], peers: &[usize]) -> Option<(usize, f64)> {
    fastest(medians, peers)
}

/// The median of the peers' medians (for peak RSS: "no worse than the median peer").
pub fn median_peer(medians: &[Option<f64>], peers: &[usize]) -> Option<f64> {
    let v: Vec<f64> = peers.iter().filter_map(|&i| medians[i]).collect();
    (!v.is_empty()).then(|| median(&v))
}

/// The time targets over ebbtide's per-case ratios to the fastest peer.
#[derive(Debug, PartialEq)]
pub struct TimeVerdict {
    pub geomean: f64,
    pub worst_case: String,
    pub worst: f64,
    /// Geometric mean ≤ 1.0.
    pub geomean_met: bool,
    /// No case above 1.5.
    pub worst_met: bool,
}

pub const GEOMEAN_TARGET: f64 = 1.0;
pub const WORST_TARGET: f64 = 1.5;
/// Issue 43: no case of the sweep above 1.10 × the best peer.
pub const SWEEP_WORST: f64 = 1.10;

pub fn time_verdict(ratios: &[(String, f64)]) -> Option<TimeVerdict> {
    let (wc, w) = ratios.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let g = geomean(&ratios.iter().map(|r| r.1).collect::<Vec<_>>());
    Some(TimeVerdict {
        geomean: g,
        worst_case: wc.clone(),
        worst: *w,
        geomean_met: g <= GEOMEAN_TARGET,
        worst_met: *w <= WORST_TARGET,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max_geomean() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(min(&[3.0, 1.0]), 1.0);
        assert_eq!(max(&[3.0, 1.0]), 3.0);
        assert!((geomean(&[2.0, 0.5]) - 1.0).abs() < 1e-12);
        assert!((geomean(&[4.0, 1.0]) - 2.0).abs() < 1e-12);
        assert!(geomean(&[]).is_nan());
    }

    #[test]
    fn fastest_and_median_peer_skip_missing() {
        // index 0 is ebbtide (not a peer); 2 failed.
        let m = [Some(1.0), Some(5.0), None, Some(3.0), Some(4.0)];
        let peers = [1, 2, 3, 4];
        assert_eq!(fastest(&m, &peers), Some((3, 3.0)));
        assert_eq!(median_peer(&m, &peers), Some(4.0));
        assert_eq!(fastest(&[Some(1.0), None], &[1]), None);
        assert_eq!(median_peer(&[Some(1.0), None], &[1]), None);
    }

    #[test]
    fn verdict_geomean_and_worst() {
        let r = |v: &[(&str, f64)]| {
            time_verdict(
                &v.iter()
                    .map(|(c, x)| (c.to_string(), *x))
                    .collect::<Vec<_>>(),
            )
        };
        let v = r(&[("a", 0.5), ("b", 1.6), ("c", 1.0)]).unwrap();
        assert_eq!(v.worst_case, "b");
        assert!(!v.worst_met);
        assert!((v.geomean - 0.8_f64.powf(1.0 / 3.0)).abs() < 1e-9);
        assert!(v.geomean_met);
        let v = r(&[("a", 1.2), ("b", 1.3)]).unwrap();
        assert!(!v.geomean_met && v.worst_met);
        assert_eq!(r(&[]), None);
    }
}
