//! SVG line plots (plotters' SVG backend only: no system fonts or freetype needed; text is
//! written as SVG `<text>` and laid out with estimated glyph widths).
//!
//! [`LinePlot`] is the generic form: named series of (x, y) points, vertical marks with
//! labels (pressure events), title, axis labels, legend. [`memory_plot`] and [`swap_plot`]
//! build the two standard plots from sampler [`Series`].

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};
use crate::sampler::Series;

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotSeries {
    /// Legend text.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A vertical line at `x` with a short label (e.g. a pressure event).
#[derive(Debug, Clone, PartialEq)]
pub struct PlotMark {
    /// Position on the x axis.
    pub x: f64,
    /// Text drawn at the top of the line.
    pub label: String,
}

/// A line plot.
#[derive(Debug, Clone, PartialEq)]
pub struct LinePlot {
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// The lines.
    pub series: Vec<PlotSeries>,
    /// Vertical marks.
    pub marks: Vec<PlotMark>,
    /// Width and height in pixels.
    pub size: (u32, u32),
    /// Where the legend goes.
    pub legend: LegendPosition,
}

/// Corner of the plot area that holds the legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegendPosition {
    /// Top left.
    UpperLeft,
    /// Top right (the default: the y range has headroom above the data there).
    UpperRight,
    /// Bottom left.
    LowerLeft,
    /// Bottom right.
    LowerRight,
}

impl LegendPosition {
    fn to_plotters(self) -> SeriesLabelPosition {
        match self {
            LegendPosition::UpperLeft => SeriesLabelPosition::UpperLeft,
            LegendPosition::UpperRight => SeriesLabelPosition::UpperRight,
            LegendPosition::LowerLeft => SeriesLabelPosition::LowerLeft,
            LegendPosition::LowerRight => SeriesLabelPosition::LowerRight,
        }
    }
}

/// Axis tick text: integers without ".0", others with up to 2 decimals.
fn tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Other(format!("drawing {}: {e}", path.display()))
}

impl LinePlot {
    /// An empty 960×540 plot.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LinePlot {
        LinePlot {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            marks: Vec::new(),
            size: (960, 540),
            legend: LegendPosition::UpperRight,
        }
    }

    /// Adds a line.
    pub fn line(mut self, name: &str, points: Vec<(f64, f64)>) -> LinePlot {
        self.series.push(PlotSeries {
            name: name.into(),
            points,
        });
        self
    }

    /// Adds a vertical mark.
    pub fn mark(mut self, x: f64, label: &str) -> LinePlot {
        self.marks.push(PlotMark {
            x,
            label: label.into(),
        });
        self
    }

    fn bounds(&self) -> (f64, f64, f64, f64) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.marks.iter().map(|m| m.x))
            .filter(|x| x.is_finite());
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| y.is_finite());
        let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (y0, mut y1) = ys.fold((0.0f64, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        if !x0.is_finite() || !x1.is_finite() {
            (x0, x1) = (0.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if !y1.is_finite() || y1 <= y0 {
            y1 = y0 + 1.0;
        }
        // Headroom above the data for the legend and the mark labels.
        (x0, x1, y0, y1 + (y1 - y0) * 0.25)
    }

    /// Draws the plot into an SVG file.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        let (x0, x1, y0, y1) = self.bounds();
        let root = SVGBackend::new(path, self.size).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err(path))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_err(path))?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()
            .map_err(plot_err(path))?;
        for (i, s) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(plot_err(path))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        let grey = RGBColor(120, 120, 120);
        for (i, m) in self.marks.iter().enumerate() {
            let series = chart
                .draw_series(LineSeries::new(
                    vec![(m.x, y0), (m.x, y1)],
                    grey.stroke_width(1),
                ))
                .map_err(plot_err(path))?;
            if i == 0 {
                series.label("events").legend(move |(x, y)| {
                    PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], grey)
                });
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    m.label.clone(),
                    // Staggered in four rows so labels of nearby marks do not overprint.
                    (m.x, y1 - (y1 - y0) * 0.04 * (i % 4) as f64),
                    // Labels right of the middle end at their line, so they stay inside.
                    ("sans-serif", 12).into_font().color(&grey).pos(Pos::new(
                        if m.x > (x0 + x1) / 2.0 {
                            HPos::Right
                        } else {
                            HPos::Left
                        },
                        VPos::Top,
                    )),
                )))
                .map_err(plot_err(path))?;
        }
        if !self.series.is_empty() || !self.marks.is_empty() {
            chart
                .configure_series_labels()
                .position(self.legend.to_plotters())
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(plot_err(path))?;
        }
        root.present().map_err(plot_err(path))?;
        Ok(())
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Memory in MiB over time (s), one line per variant: the cgroup's usage where sampled,
/// else the process RSS. Marks of every variant are drawn, labelled `<variant>: <label>`.
pub fn memory_plot(title: &str, variants: &[(&str, &Series)]) -> LinePlot {
    let mut p = LinePlot::new(title, "time (s)", "memory (MiB)");
    for (name, s) in variants {
        let cg: Vec<(f64, f64)> = s
            .samples
            .iter()
            .filter_map(|x| x.cgroup_usage_bytes.map(|b| (x.t_ms / 1e3, b as f64 / MIB)))
            .collect();
        let pts = if cg.is_empty() {
            s.samples
                .iter()
                .filter_map(|x| x.rss_bytes.map(|b| (x.t_ms / 1e3, b as f64 / MIB)))
                .collect()
        } else {
            cg
        };
        p = p.line(name, pts);
        p = add_marks(p, name, s, variants.len() > 1);
    }
    p
}

/// Swap traffic (pages since start) over time (s): `<variant> pswpout` and
/// `<variant> pswpin` lines.
pub fn swap_plot(title: &str, variants: &[(&str, &Series)]) -> LinePlot {
    let mut p = LinePlot::new(title, "time (s)", "pages swapped (cumulative)");
    for (name, s) in variants {
        let out = s
            .samples
            .iter()
            .map(|x| (x.t_ms / 1e3, x.pswpout as f64))
            .collect();
        let inn = s
            .samples
            .iter()
            .map(|x| (x.t_ms / 1e3, x.pswpin as f64))
            .collect();
        p = p.line(&format!("{name} pswpout"), out);
        p = p.line(&format!("{name} pswpin"), inn);
        p = add_marks(p, name, s, variants.len() > 1);
    }
    p
}

fn add_marks(mut p: LinePlot, variant: &str, s: &Series, prefix: bool) -> LinePlot {
    for m in &s.marks {
        let mut label = if prefix {
            format!("{variant}: {}", m.label)
        } else {
            m.label.clone()
        };
        if let Some(l) = m.level {
            label.push_str(&format!(" ({l})"));
        }
        p = p.mark(m.t_ms / 1e3, &label);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{Mark, Sample};
    use crate::vmstat::CounterSource;

    fn fake_series(scale: u64) -> Series {
        Series {
            interval_ms: 100.0,
            counter_source: CounterSource::SystemVmstat,
            samples: (0..20)
                .map(|i| Sample {
                    t_ms: i as f64 * 100.0,
                    rss_bytes: Some(i * scale * 1024 * 1024),
                    proc_swap_bytes: None,
                    cgroup_usage_bytes: None,
                    cgroup_swap_bytes: None,
                    pswpin: i * 3,
                    pswpout: i * 10 * scale,
                    psi_some_us: None,
                })
                .collect(),
            marks: vec![Mark {
                t_ms: 700.0,
                label: "pressure".into(),
                level: Some(2.0),
            }],
            errors: vec![],
        }
    }

    #[test]
    fn writes_svgs_with_series_names() {
        let dir =
            std::env::temp_dir().join(format!("ebbtide-lab-unit-plot-{}", std::process::id()));
        let (a, b) = (fake_series(1), fake_series(2));
        let mem = dir.join("memory.svg");
        memory_plot("memory over time", &[("before", &a), ("after", &b)])
            .write_svg(&mem)
            .unwrap();
        let svg = std::fs::read_to_string(&mem).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for want in [
            "memory over time",
            "before",
            "after",
            "memory (MiB)",
            "time (s)",
            "after: pressure (2)",
            "<polyline",
        ] {
            assert!(svg.contains(want), "SVG lacks {want:?}");
        }
        let sw = dir.join("swap.svg");
        swap_plot("swap", &[("v1", &a)]).write_svg(&sw).unwrap();
        let svg = std::fs::read_to_string(&sw).unwrap();
        assert!(svg.contains("v1 pswpout") && svg.contains("v1 pswpin"));
        // An empty plot still renders.
        LinePlot::new("empty", "x", "y")
            .write_svg(&dir.join("empty.svg"))
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
