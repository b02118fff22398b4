//! `ebbtide top PID`: a live, slabtop-like view of a process's zones.
//!
//! Every interval it asks for `stats json` and `events` (one connection each) and redraws:
//! a header with the pressure level, the process-wide figures and where threads waited (lock
//! waits by lock, the time blocked, the remote frees: `docs/design/contention.md`), the zones
//! table (the `vmstat -z` columns, DWAIT, KWAIT and REMOTE among them, plus REQ/s), and the
//! recent events. Keys: `s`, `→` or `>` sort by the
//! next column, `←` or `<` by the previous one, `r` reverses the order, `q` or Esc quits.
//!
//! `--batch` prints the same header and table as plain text instead, once per interval, and
//! ends after `--iterations` tables (as `top -b -n`): for scripts and logs, no terminal needed.
//! The first table has no REQ/s yet (`-`).
//!
//! Watching costs the process nothing it would count as its own: `stats json` and `events`
//! are answered without allocating (`docs/design/observer.md`), so a sleeping program shows
//! 0 REQ/s.

use super::Target;
use crate::client;
use crate::error::CliError;
use ebbtide::control::protocol::{Format, Request};
use ebbtide::pressure::Level;
use ebbtide::stats::{FieldKind, Stats, ZoneStats};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Alignment, Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;
use serde_json::Value;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    interval_ms: u64,
    /// Initial sort column (a header such as USED, SIZE, REQ/s; case-insensitive).
    #[arg(long, default_value = "USED")]
    sort: String,
    /// Print plain-text tables instead of a screen (no terminal needed) and end after
    /// --iterations of them.
    #[arg(long)]
    batch: bool,
    /// With --batch: how many tables to print, one per interval (the first has no REQ/s yet).
    #[arg(long, default_value_t = 2, requires = "batch",
          value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
}

/// One table column: its header and the JSON key it shows (`None`: REQ/s, computed).
#[derive(Clone, Debug)]
pub struct Column {
    pub header: &'static str,
    pub key: Option<&'static str>,
    pub numeric: bool,
}

/// The columns: every zone field with a `vmstat -z` column, then REQ/s.
pub fn columns() -> Vec<Column> {
    let mut v: Vec<Column> = ZoneStats::fields()
        .into_iter()
        .filter(|f| !f.column.is_empty())
        .map(|f| Column {
            header: f.column,
            key: Some(f.name),
            numeric: matches!(f.kind, FieldKind::Gauge | FieldKind::Counter),
        })
        .collect();
    v.push(Column {
        header: "REQ/s",
        key: None,
        numeric: true,
    });
    v
}

/// What the screen shows; refreshed from the process.
pub struct State {
    pid: u32,
    comm: String,
    socket: PathBuf,
    interval: Duration,
    pub columns: Vec<Column>,
    pub sort: usize,
    pub descending: bool,
    global: Value,
    zones: Vec<Value>,
    rates: HashMap<String, f64>,
    prev: Option<(Instant, HashMap<String, u64>)>,
    events: Vec<String>,
    error: Option<String>,
}

impl State {
    fn refresh(&mut self) {
        let stats = client::request_at(self.pid, &self.socket, &Request::Stats(Format::Json));
        let events = client::request_at(self.pid, &self.socket, &Request::Events);
        match stats
            .map_err(|e| e.to_string())
            .and_then(|s| serde_json::from_str::<Value>(&s).map_err(|e| format!("stats JSON: {e}")))
        {
            Ok(v) => {
                self.apply(v, Instant::now());
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
        if let Ok(ev) = events {
            self.events = ev.lines().map(format_event).collect();
        }
    }

    /// Take a new snapshot (also computes REQ/s against the previous one).
    pub fn apply(&mut self, v: Value, now: Instant) {
        self.global = v["global"].clone();
        self.zones = v["zones"].as_array().cloned().unwrap_or_default();
        let reqs: HashMap<String, u64> = self
            .zones
            .iter()
            .map(|z| {
                (
                    z["name"].as_str().unwrap_or("").to_string(),
                    z["requests"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        self.rates.clear();
        if let Some((t, prev)) = &self.prev {
            let dt = now.duration_since(*t).as_secs_f64();
            if dt > 0.0 {
                for (name, r) in &reqs {
                    if let Some(p) = prev.get(name) {
                        self.rates
                            .insert(name.clone(), r.saturating_sub(*p) as f64 / dt);
                    }
                }
            }
        }
        self.prev = Some((now, reqs));
    }

    fn cell(&self, z: &Value, c: &Column) -> (String, f64) {
        match c.key {
            None => {
                let name = z["name"].as_str().unwrap_or("");
                match self.rates.get(name) {
                    Some(r) => (format!("{r:.0}"), *r),
                    None => ("-".into(), -1.0),
                }
            }
            Some(k) => match &z[k] {
                Value::String(s) => (s.clone(), 0.0),
                Value::Bool(b) => (if *b { "yes" } else { "no" }.into(), f64::from(*b as u8)),
                Value::Number(n) => (n.to_string(), n.as_f64().unwrap_or(0.0)),
                _ => ("?".into(), 0.0),
            },
        }
    }

    /// The zones as rows of cells, sorted.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let col = &self.columns[self.sort];
        let mut keyed: Vec<(Vec<String>, f64, String)> = self
            .zones
            .iter()
            .map(|z| {
                let cells: Vec<String> = self.columns.iter().map(|c| self.cell(z, c).0).collect();
                let (text, num) = self.cell(z, col);
                (cells, num, text)
            })
            .collect();
        keyed.sort_by(|a, b| {
            let o = if col.numeric {
                a.1.total_cmp(&b.1)
            } else {
                a.2.cmp(&b.2)
            };
            if self.descending {
                o.reverse()
            } else {
                o
            }
        });
        keyed.into_iter().map(|k| k.0).collect()
    }

    /// Handle a key; `false` to quit.
    pub fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> bool {
        let n = self.columns.len();
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
            KeyCode::Char('s') | KeyCode::Char('>') | KeyCode::Right => {
                self.sort = (self.sort + 1) % n
            }
            KeyCode::Char('<') | KeyCode::Left => self.sort = (self.sort + n - 1) % n,
            KeyCode::Char('r') => self.descending = !self.descending,
            _ => {}
        }
        true
    }

    /// The header lines.
    pub fn header(&self) -> Vec<String> {
        let g = &self.global;
        let level_name = |v: &Value| {
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .and_then(Level::from_u8)
                .map(Level::name)
                .unwrap_or("?")
        };
        let injected = self
            .events
            .iter()
            .rev()
            .find_map(|e| e.split(" pressure injected ").nth(1))
            .and_then(|r| r.split(':').next())
            .map(|l| format!(" (last injected: {l})"))
            .unwrap_or_default();
        let last = match g["last_event_source"].as_str() {
            Some(s) if !s.is_empty() => format!(
                "last pressure event: {s} {} {} ms ago",
                level_name(&g["last_event_level"]),
                g["last_event_ms_ago"]
            ),
            _ => "last pressure event: none".into(),
        };
        vec![
            format!(
                "ebbtide top - pid {} ({}) - every {:.1} s - sort: {} {} - keys: s/</> column, \
                 r reverse, q quit",
                self.pid,
                self.comm,
                self.interval.as_secs_f64(),
                self.columns[self.sort].header,
                if self.descending { "desc" } else { "asc" }
            ),
            format!(
                "pressure: {}{injected} | events {} | mapped {} | cached {} | released {} | \
                 squeeze {} ms | zones {}",
                level_name(&g["pressure_level"]),
                g["pressure_events"],
                bytes(&g["mapped_bytes"]),
                bytes(&g["cached_bytes"]),
                bytes(&g["released_bytes"]),
                g["squeeze_until_ms"],
                self.zones.len()
            ),
            match &self.error {
                Some(e) => format!("refresh failed: {e}"),
                None => last,
            },
            self.contention(),
        ]
    }

    /// Where threads waited: the zones' lock waits summed by lock (and the zone that waited
    /// most), the process-wide locks, the time all of them blocked, and the remote frees.
    pub fn contention(&self) -> String {
        let g = &self.global;
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let zones = |k: &str| self.zones.iter().map(|z| n(&z[k])).sum::<u64>();
        let zone_waits = |z: &Value| {
            ["depot", "keg", "stash"]
                .iter()
                .map(|l| n(&z[format!("lock_waits_{l}")]))
                .sum::<u64>()
        };
        let worst = self
            .zones
            .iter()
            .max_by_key(|z| zone_waits(z))
            .filter(|z| zone_waits(z) > 0)
            .map(|z| {
                format!(
                    " (most: {} {})",
                    z["name"].as_str().unwrap_or("?"),
                    zone_waits(z)
                )
            })
            .unwrap_or_default();
        let ns: u64 = ["depot", "keg", "stash"]
            .iter()
            .map(|l| zones(&format!("lock_wait_ns_{l}")))
            .chain(
                ["arena", "registry", "page_heap"]
                    .iter()
                    .map(|l| n(&g[format!("lock_wait_ns_{l}")])),
            )
            .sum();
        format!(
            "lock waits: depot {} keg {} stash {}{worst} | arena {} registry {} page heap {} | \
             blocked {:.1} ms | remote frees {}",
            zones("lock_waits_depot"),
            zones("lock_waits_keg"),
            zones("lock_waits_stash"),
            n(&g["lock_waits_arena"]),
            n(&g["lock_waits_registry"]),
            n(&g["lock_waits_page_heap"]),
            ns as f64 / 1e6,
            zones("remote_frees"),
        )
    }

    fn draw(&self, f: &mut Frame) {
        let [head, table, events] = Layout::vertical([
            Constraint::Length(4),
            Constraint::Min(4),
            Constraint::Length(8),
        ])
        .areas(f.area());
        f.render_widget(
            Paragraph::new(
                self.header()
                    .into_iter()
                    .map(Line::from)
                    .collect::<Vec<_>>(),
            ),
            head,
        );
        let rows = self.rows();
        let widths: Vec<Constraint> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([c.header.len() + 1])
                    .max()
                    .unwrap_or(4);
                Constraint::Length(w as u16)
            })
            .collect();
        // Numbers right-aligned, text left-aligned, as in vmstat -z.
        let align = |i: usize, text: String| {
            let line = Line::from(text);
            Cell::from(if self.columns[i].numeric {
                line.alignment(Alignment::Right)
            } else {
                line
            })
        };
        let header = Row::new(self.columns.iter().enumerate().map(|(i, c)| {
            let mut t = c.header.to_string();
            if i == self.sort {
                t.push(if self.descending { 'v' } else { '^' });
            }
            align(i, t)
        }))
        .style(Style::default().add_modifier(Modifier::REVERSED));
        let body = rows
            .into_iter()
            .map(|r| Row::new(r.into_iter().enumerate().map(|(i, c)| align(i, c))));
        f.render_widget(
            Table::new(body, widths)
                .header(header)
                .column_spacing(1)
                .block(Block::default().borders(Borders::TOP).title("zones")),
            table,
        );
        let shown = events.height.saturating_sub(1) as usize;
        let ev: Vec<Line> = self
            .events
            .iter()
            .skip(self.events.len().saturating_sub(shown))
            .map(|e| Line::from(e.as_str()))
            .collect();
        f.render_widget(
            Paragraph::new(ev).block(Block::default().borders(Borders::TOP).title("events")),
            events,
        );
    }
}

fn bytes(v: &Value) -> String {
    let n = v.as_u64().unwrap_or(0) as f64;
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n:.0} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}

/// `<unix_ms> <kind> <detail>` → `HH:MM:SS <kind> <detail>` (UTC).
pub fn format_event(line: &str) -> String {
    let (ms, rest) = line.split_once(' ').unwrap_or(("", line));
    match ms.parse::<u64>() {
        Ok(ms) => {
            let s = ms / 1000 % 86_400;
            format!("{:02}:{:02}:{:02} {rest}", s / 3600, s / 60 % 60, s % 60)
        }
        Err(_) => line.to_string(),
    }
}

/// A state for tests and for `run`.
pub fn new_state(pid: u32, socket: PathBuf, interval: Duration, sort: &str) -> State {
    let columns = columns();
    let sort = columns
        .iter()
        .position(|c| c.header.eq_ignore_ascii_case(sort))
        .unwrap_or(0);
    State {
        pid,
        comm: client::process_comm(pid),
        socket,
        interval,
        columns,
        sort,
        descending: true,
        global: Value::Null,
        zones: Vec::new(),
        rates: HashMap::new(),
        prev: None,
        events: Vec::new(),
        error: None,
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let pid = a.target.pid;
    let socket = match a.target.socket {
        Some(p) => p,
        None => client::find_socket(pid)?,
    };
    let cols = columns();
    if !cols.iter().any(|c| c.header.eq_ignore_ascii_case(&a.sort)) {
        let names: Vec<&str> = cols.iter().map(|c| c.header).collect();
        return Err(CliError::Usage(format!(
            "unknown sort column '{}' (expected one of {})",
            a.sort,
            names.join(", ")
        )));
    }
    // Fail before taking over the terminal if the process cannot be reached.
    client::request_at(pid, &socket, &Request::Ping)?;
    if a.batch {
        let mut st = new_state(pid, socket, Duration::from_millis(a.interval_ms), &a.sort);
        return batch(&mut st, a.iterations);
    }
    if !std::io::stdout().is_terminal() {
        return Err(CliError::Usage(
            "top needs a terminal; use 'ebbtide stat PID' for a one-shot table".into(),
        ));
    }
    let interval = Duration::from_millis(a.interval_ms);
    let mut st = new_state(pid, socket, interval, &a.sort);
    st.refresh();
    let mut terminal = ratatui::init();
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now() + interval;
        loop {
            terminal.draw(|f| st.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press && !st.key(k.code, k.modifiers) {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= next {
                st.refresh();
                next = Instant::now() + interval;
            }
        }
    })();
    ratatui::restore();
    result.map_err(|err| CliError::Io {
        what: "terminal".into(),
        err,
    })
}

/// `--batch`: `iterations` plain-text tables, one per interval.
fn batch(st: &mut State, iterations: u64) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for i in 0..iterations {
        if i > 0 {
            std::thread::sleep(st.interval);
        }
        st.refresh();
        let text = st.text();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|err| CliError::Io {
                what: "standard output".into(),
                err,
            })?;
    }
    Ok(())
}

impl State {
    /// The header, the table (columns aligned) and the events as plain text, with a blank
    /// line after (one `--batch` table).
    pub fn text(&self) -> String {
        let mut lines = self.header();
        // The keys make no sense without a screen.
        if let Some(first) = lines.first_mut() {
            if let Some(i) = first.find(" - keys:") {
                first.truncate(i);
            }
        }
        let head: Vec<String> = self.columns.iter().map(|c| c.header.to_string()).collect();
        let rows = self.rows();
        let widths: Vec<usize> = (0..head.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([head[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let fmt_row = |r: &[String]| {
            r.iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        lines.push(fmt_row(&head));
        lines.extend(rows.iter().map(|r| fmt_row(r)));
        if !self.events.is_empty() {
            lines.push("events:".into());
            lines.extend(self.events.iter().cloned());
        }
        let mut text = lines.join("\n");
        text.push_str("\n\n");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with_sample() -> State {
        let mut st = new_state(1, "/nonexistent".into(), Duration::from_secs(1), "USED");
        let v: Value = serde_json::from_str(&ebbtide::stats::Snapshot::sample().to_json()).unwrap();
        let t0 = Instant::now();
        st.apply(v.clone(), t0);
        let mut v2 = v;
        v2["zones"][0]["requests"] = Value::from(v2["zones"][0]["requests"].as_u64().unwrap() + 50);
        st.apply(v2, t0 + Duration::from_millis(500));
        st
    }

    #[test]
    fn columns_follow_the_stats_table() {
        let c = columns();
        assert_eq!(c[0].header, "ITEM");
        assert!(c.iter().any(|c| c.header == "USED"));
        // Per-CPU capacity and misses.
        for h in ["PCPUCAP", "UNDERFL", "OVERFL", "HUGE", "HPART", "HBROKEN"] {
            assert!(c.iter().any(|c| c.header == h), "{h}");
        }
        assert_eq!(c.last().unwrap().header, "REQ/s");
    }

    #[test]
    fn rows_show_capacity_and_misses() {
        let st = state_with_sample();
        let i = st
            .columns
            .iter()
            .position(|c| c.header == "PCPUCAP")
            .unwrap();
        let j = st
            .columns
            .iter()
            .position(|c| c.header == "UNDERFL")
            .unwrap();
        let rows = st.rows();
        assert!(
            rows.iter().all(|r| r[i] == "212" && r[j] == "40"),
            "{rows:?}"
        );
    }

    #[test]
    fn sorting_and_keys() {
        let mut st = state_with_sample();
        let used = st.columns.iter().position(|c| c.header == "USED").unwrap();
        assert_eq!(st.sort, used);
        // Sample: "small 64" has 1000 used, "big \"4k\"" 20.
        assert_eq!(st.rows()[0][0], "small 64");
        st.key(KeyCode::Char('r'), KeyModifiers::NONE);
        assert_eq!(st.rows()[0][0], "big \"4k\"");
        st.key(KeyCode::Left, KeyModifiers::NONE);
        st.key(KeyCode::Char('s'), KeyModifiers::NONE);
        assert_eq!(st.sort, used);
        assert!(st.header()[0].contains("sort: USED asc"));
        assert!(!st.key(KeyCode::Char('q'), KeyModifiers::NONE));
        let rate = st.columns.len() - 1;
        st.sort = rate;
        st.descending = true;
        assert_eq!(st.rows()[0][rate], "100");
    }

    #[test]
    fn header_and_events() {
        let mut st = state_with_sample();
        st.events = vec![format_event(
            "3600000 pressure injected moderate: released 0 bytes",
        )];
        assert_eq!(
            st.events[0],
            "01:00:00 pressure injected moderate: released 0 bytes"
        );
        let h = st.header();
        assert!(
            h[1].starts_with("pressure: moderate (last injected: moderate)"),
            "{h:?}"
        );
        assert!(h[2].contains("psi moderate 1500 ms ago"), "{h:?}");
        // Sample: both zones 7 depot and 3 keg waits (here 30 for the first); page heap 11
        // waits, 2 s blocked.
        st.zones[0]["lock_waits_keg"] = Value::from(30u64);
        assert_eq!(
            st.header()[3],
            "lock waits: depot 14 keg 33 stash 0 (most: small 64 37) | arena 2 registry 1 \
             page heap 11 | blocked 2009.3 ms | remote frees 2040"
        );
        assert_eq!(bytes(&Value::from(3u64 << 20)), "3.0 MiB");
    }

    #[test]
    fn batch_text_has_the_table() {
        let st = state_with_sample();
        let t = st.text();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ebbtide top - pid 1") && !lines[0].contains("keys:"));
        let head = lines
            .iter()
            .find(|l| l.starts_with("ITEM"))
            .expect("a header row");
        assert!(head.trim_end().ends_with("REQ/s"), "{t}");
        assert!(t.ends_with("\n\n"));
    }
}
