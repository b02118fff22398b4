//! Line plots as SVG and PNG (plotters' SVG backend, and `raster`'s PNG backend with a built-in
//! bitmap font: no system fonts or freetype needed). In the SVG, text is `<text>` laid out with
//! estimated glyph widths; the PNG is the same layout at twice the size.
//!
//! [`LinePlot`] is the generic form: named series of (x, y) points, vertical marks with
//! labels (pressure events), title, axis labels, legend. [`memory_plot`] and [`swap_plot`]
//! build the two standard plots from sampler [`Series`].

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::raster::{self, Raster};

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

    /// Draws the plot into an SVG file, and the same plot as a PNG beside it (`path` with the
    /// extension `png`), so every plot can be shown where SVG cannot.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        let root = SVGBackend::new(path, self.size).into_drawing_area();
        self.draw(&root, 1).map_err(plot_err(path))?;
        root.present().map_err(plot_err(path))?;
        drop(root);
        self.write_png(&path.with_extension("png"))
    }

    /// Draws the plot into a PNG file at twice the SVG's size (the same layout, every length
    /// doubled), text in a built-in bitmap font.
    pub fn write_png(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        let (w, h) = (self.size.0 * PNG_SCALE, self.size.1 * PNG_SCALE);
        let mut pixels = raster::white(w, h);
        {
            let root = Raster::new(w, h, &mut pixels).into_drawing_area();
            self.draw(&root, PNG_SCALE).map_err(plot_err(path))?;
        }
        raster::write_png(path, w, h, &pixels).map_err(plot_err(path))
    }

    /// Draws the plot on `root`, every length (margins, fonts, strokes) times `k`.
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        k: u32,
    ) -> std::result::Result<(), String> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let kf = k as f64;
        let (x0, x1, y0, y1) = self.bounds();
        root.fill(&WHITE).map_err(e)?;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22.0 * kf))
            .margin(12 * k)
            .x_label_area_size(45 * k)
            .y_label_area_size(70 * k)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style(("sans-serif", 12.0 * kf))
            .axis_desc_style(("sans-serif", 14.0 * kf))
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()
            .map_err(e)?;
        for (i, s) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let width = 2 * k;
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(width),
                ))
                .map_err(e)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(
                        vec![(x, y), (x + 20 * k as i32, y)],
                        color.stroke_width(width),
                    )
                });
        }
        let grey = RGBColor(120, 120, 120);
        let line_grey = RGBColor(175, 175, 175);
        for (i, m) in self.marks.iter().enumerate() {
            let series = chart
                .draw_series(LineSeries::new(
                    vec![(m.x, y0), (m.x, y1)],
                    line_grey.stroke_width(1),
                ))
                .map_err(e)?;
            if i == 0 {
                let n = self.marks.len();
                let name = if n == 1 {
                    "event".to_string()
                } else {
                    format!("{n} events")
                };
                series.label(name).legend(move |(x, y)| {
                    let (x, h) = (x + 10 * k as i32, 6 * k as i32);
                    PathElement::new(vec![(x, y - h), (x, y + h)], line_grey.stroke_width(k))
                });
            }
        }
        // The marks' labels, in pixel coordinates: each in the first of LABEL_ROWS rows under
        // the top where it overlaps no label already there; a label with no room is left out
        // (its line stays), so labels never overprint however dense the events.
        let font = ("sans-serif", 12.0 * kf).into_font().color(&grey);
        let mut rows: Vec<Vec<(i32, i32)>> = vec![Vec::new(); LABEL_ROWS];
        let gap = 6 * k as i32;
        let (_, top) = chart.backend_coord(&(x0, y1));
        let (left, _) = chart.backend_coord(&(x0, y0));
        let (right, _) = chart.backend_coord(&(x1, y0));
        for m in self.marks.iter().filter(|m| !m.label.trim().is_empty()) {
            let (px, _) = chart.backend_coord(&(m.x, y1));
            let (w, h) = root.estimate_text_size(&m.label, &font).map_err(e)?;
            let (w, h) = (w as i32, h as i32);
            // Labels right of the middle end at their line, so they stay inside.
            let right_of_middle = m.x > (x0 + x1) / 2.0;
            let (a, b) = if right_of_middle {
                (px - w - 2, px)
            } else {
                (px, px + w + 2)
            };
            if a < left || b > right {
                continue;
            }
            let Some(row) = rows
                .iter()
                .position(|r| r.iter().all(|&(c, d)| b + gap <= c || d + gap <= a))
            else {
                continue;
            };
            rows[row].push((a, b));
            let y = top + 2 * k as i32 + row as i32 * (h + 3 * k as i32);
            let anchor = Pos::new(
                if right_of_middle {
                    HPos::Right
                } else {
                    HPos::Left
                },
                VPos::Top,
            );
            let x = if right_of_middle { px - 2 } else { px + 2 };
            root.draw(&Text::new(
                m.label.clone(),
                (x, y),
                font.clone().pos(anchor),
            ))
            .map_err(e)?;
        }
        if !self.series.is_empty() || !self.marks.is_empty() {
            chart
                .configure_series_labels()
                .position(self.legend.to_plotters())
                .label_font(("sans-serif", 12.0 * kf))
                .legend_area_size(30 * k)
                .margin(10 * k)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }
        Ok(())
    }
}

/// How much larger a PNG is than its SVG, in each dimension.
const PNG_SCALE: u32 = 2;

/// Rows of mark labels under the top of the plot area.
const LABEL_ROWS: usize = 4;

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
        if m.label.is_empty() {
            // A line without a label stays one (no bare "variant: ").
            p = p.mark(m.t_ms / 1e3, "");
            continue;
        }
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
        for png in ["memory.png", "swap.png"] {
            let (w, h) = decode_png(&dir.join(png));
            assert_eq!((w, h), (1920, 1080), "{png}");
        }
        // An empty plot still renders.
        LinePlot::new("empty", "x", "y")
            .write_svg(&dir.join("empty.svg"))
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Width and height of a PNG file, decoding all of it (so a broken file fails here).
    fn decode_png(path: &Path) -> (u32, u32) {
        let dec = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        // Not a blank canvas: lines and text were drawn.
        let dark = buf[..info.buffer_size()]
            .chunks(3)
            .filter(|p| p.iter().all(|&c| c < 128))
            .count();
        assert!(dark > 1000, "{}: {dark} dark pixels", path.display());
        (info.width, info.height)
    }

    /// Mark labels at one height never overlap, however dense the marks (the blkback sweep's
    /// swap plot had hundreds of pressure events in 20 s, their labels printed over each other).
    #[test]
    fn dense_marks_labels_do_not_overlap() {
        let dir =
            std::env::temp_dir().join(format!("ebbtide-lab-unit-marks-{}", std::process::id()));
        let mut p = LinePlot::new("dense marks", "time (s)", "pages")
            .line("a", (0..100).map(|i| (i as f64 * 0.2, i as f64)).collect());
        for i in 0..300 {
            p = p.mark(i as f64 * 0.066, &format!("10 ms: psi ({})", i % 3));
        }
        let svg_path = dir.join("marks.svg");
        p.write_svg(&svg_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        // (x, y, anchor, text) of the grey labels.
        let mut labels: Vec<(f64, f64, String, String)> = Vec::new();
        for t in svg.split("<text").skip(1) {
            if !t.contains("fill=\"#787878\"") {
                continue;
            }
            let attr = |name: &str| {
                let i = t.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                t[i..i + t[i..].find('"').unwrap()].to_string()
            };
            let text = t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()]
                .trim()
                .to_string();
            labels.push((
                attr("x").parse().unwrap(),
                attr("y").parse().unwrap(),
                attr("text-anchor"),
                text,
            ));
        }
        assert!(labels.len() >= 4, "some labels are drawn: {}", labels.len());
        assert!(labels.len() < 100, "not all 300 fit: {}", labels.len());
        // Each label's extent at a lower bound of 4 px a character (the SVG's 9.7 px font).
        let span = |(x, _, a, t): &(f64, f64, String, String)| {
            let w = t.chars().count() as f64 * 4.0;
            if a == "end" {
                (x - w, *x)
            } else {
                (*x, x + w)
            }
        };
        for (i, l) in labels.iter().enumerate() {
            for m in &labels[i + 1..] {
                if l.1 == m.1 {
                    let ((a, b), (c, d)) = (span(l), span(m));
                    assert!(b <= c || d <= a, "overlap: {l:?} {m:?}");
                }
            }
        }
        let (w, h) = decode_png(&dir.join("marks.png"));
        assert_eq!((w, h), (1920, 1080));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
