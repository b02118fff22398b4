//! `ebbtide exporter [--listen ADDR:PORT] [--once] ...`: the statistics of every ebbtide
//! process on the host (that the control sockets' rules let us read) for Prometheus, over
//! HTTP at `GET /metrics`.
//!
//! Each scrape finds the processes anew ([`fleet::discover`]), asks them for `stats json` in
//! parallel, each within `--timeout-ms` and all within the scrape's budget (`--scrape-timeout-ms`,
//! or less when Prometheus says its own timeout in `X-Prometheus-Scrape-Timeout-Seconds`), and
//! renders one page with the library's emitter ([`Exposition`]): every family once, each
//! process's series labelled `pid`, `comm` and `cgroup`, then the exporter's own metrics. A
//! process that stalls or vanishes loses its own series and is counted in
//! `ebbtide_exporter_errors_total{reason}`; the page is still served.
//!
//! The HTTP server is `oxhttp`: a thread per connection, at most `--max-connections` at once
//! (more wait in the listen queue until one finishes), a read and write timeout per
//! connection, request headers limited to 8 KiB, a malformed request answered with 400.
//! `GET /metrics` is the page, `GET /` a short text naming it, any other path 404, any other
//! method on those two paths 405.

use crate::error::CliError;
use crate::fleet::{self, Failure, Outcome};
use ebbtide::stats::{Exposition, MetricType, PROMETHEUS_CONTENT_TYPE};
use oxhttp::model::header::{ALLOW, CONTENT_TYPE};
use oxhttp::model::{Body, Method, Request, Response, StatusCode};
use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default `--listen`: loopback only; open it to the network on purpose.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9466";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address and port to serve on: 127.0.0.1:9466, [::1]:9466, 0.0.0.0:9466 (every
    /// interface), localhost:9466 (every address of the name). Port 0 picks a free port.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    listen: Listen,
    /// Time one process has to answer, in milliseconds; a process slower than that loses its
    /// series for that scrape.
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    timeout_ms: u64,
    /// Time one whole scrape may take, in milliseconds (Prometheus's own scrape timeout, from
    /// its X-Prometheus-Scrape-Timeout-Seconds header, makes it shorter).
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    scrape_timeout_ms: u64,
    /// Processes asked at the same time.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    parallel: u64,
    /// HTTP connections served at the same time; more wait until one finishes.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_connections: u64,
    /// Seconds an HTTP client may take for each read or write before it is cut off.
    #[arg(long, value_name = "S", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    http_timeout: u64,
    /// Print one scrape on standard output and exit, without serving HTTP.
    #[arg(long)]
    once: bool,
    /// Serve every zone's own series (`ebbtide_zone_*{zone="..."}`, about 40 per zone) besides
    /// the per-size-range sums. Costs thousands of series per malloc process: for one host's
    /// debugging, not for a fleet.
    #[arg(long)]
    per_zone: bool,
    /// Serve the own series of the zones with this name (exact, or a prefix ending in `*`:
    /// `--zone 'blk-*'`); may be given more than once, or as a comma-separated list.
    #[arg(long, value_name = "NAME", value_delimiter = ',', value_parser = parse_zone_pattern)]
    zone: Vec<String>,
}

/// `--zone`: a zone name, or a prefix followed by `*`; not empty.
fn parse_zone_pattern(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("an empty zone name (give a zone's name, or a prefix ending in '*')".into());
    }
    if s[..s.len() - 1].contains('*') {
        return Err(format!(
            "'{s}': '*' may only end a zone name (a prefix: 'blk-*')"
        ));
    }
    Ok(s.to_string())
}

/// Which zones get series of their own (all zones are in the per-size-range sums).
#[derive(Clone, Debug, Default)]
pub struct ZoneSeries {
    all: bool,
    patterns: Vec<String>,
}

impl ZoneSeries {
    /// Whether zone `name` gets its own series.
    pub fn wants(&self, name: &str) -> bool {
        self.all
            || self.patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == p,
            })
    }
}

/// A parsed `--listen`: what the user wrote and the addresses it names.
#[derive(Clone, Debug)]
pub struct Listen {
    text: String,
    addrs: Vec<SocketAddr>,
}

/// `--listen` syntax: `HOST:PORT` with an IP address (IPv6 in brackets) or a name.
fn parse_listen(s: &str) -> Result<Listen, String> {
    let example = "e.g. 127.0.0.1:9466, [::1]:9466 or 0.0.0.0:9466";
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("expected ADDR:PORT, {example}"));
    };
    if host.is_empty() {
        return Err(format!(
            "no address before ':{port}': give one, {example} (0.0.0.0 serves every interface)"
        ));
    }
    if port.parse::<u16>().is_err() {
        return Err(format!("'{port}' is not a port (0 to 65535); {example}"));
    }
    let addrs: Vec<SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("'{host}' names no address"));
    }
    Ok(Listen {
        text: s.to_string(),
        addrs,
    })
}

/// What the exporter counts across scrapes.
struct State {
    zones: ZoneSeries,
    per_process: Duration,
    scrape_budget: Duration,
    parallel: usize,
    scrapes: AtomicU64,
    errors: [AtomicU64; Failure::ALL.len()],
    /// `(pid, reason)` already reported on stderr, so that a process that keeps failing the
    /// same way is reported once (pruned to the pids of the last scrape).
    reported: Mutex<HashSet<(u32, Failure)>>,
}

impl State {
    fn new(a: &Args) -> State {
        State {
            zones: ZoneSeries {
                all: a.per_zone,
                patterns: a.zone.clone(),
            },
            per_process: Duration::from_millis(a.timeout_ms),
            scrape_budget: Duration::from_millis(a.scrape_timeout_ms),
            parallel: a.parallel as usize,
            scrapes: AtomicU64::new(0),
            errors: Default::default(),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// Report new failures on stderr, once per process and reason.
    fn report(&self, outcomes: &[Outcome]) {
        let mut r = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|(pid, _)| outcomes.iter().any(|o| o.pid == *pid));
        for o in outcomes {
            if let Err((f, msg)) = &o.result {
                if *f != Failure::Vanished && r.insert((o.pid, *f)) {
                    eprintln!(
                        "ebbtide exporter: process {} ({}): {}: {msg}",
                        o.pid,
                        o.comm,
                        f.reason()
                    );
                }
            }
        }
    }

    /// One scrape: find the processes, ask them, render the page.
    fn scrape(&self, budget: Duration) -> String {
        let start = Instant::now();
        let deadline = start + budget.min(self.scrape_budget);
        let targets = fleet::discover();
        let outcomes = fleet::gather(&targets, self.per_process, deadline, self.parallel);
        let scrapes = self.scrapes.fetch_add(1, Ordering::Relaxed) + 1;
        for o in &outcomes {
            if let Err((f, _)) = &o.result {
                let i = Failure::ALL.iter().position(|x| x == f).expect("listed");
                self.errors[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.report(&outcomes);
        let errors: Vec<u64> = self
            .errors
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .collect();
        render(&outcomes, &self.zones, scrapes, &errors, start.elapsed())
    }
}

/// The page for `outcomes`: every process's statistics (zones summed per size range, and the
/// zones `zones` names on their own), then the exporter's own metrics.
fn render(
    outcomes: &[Outcome],
    zones: &ZoneSeries,
    scrapes: u64,
    errors: &[u64],
    took: Duration,
) -> String {
    let mut e = Exposition::new();
    for o in outcomes {
        if let Ok(read) = &o.result {
            let pid = o.pid.to_string();
            let labels = [
                ("pid", pid.as_str()),
                ("comm", o.comm.as_str()),
                ("cgroup", o.cgroup.as_str()),
            ];
            e.add_snapshot_bounded(&read.snapshot, &labels, &|g, f| read.has(g, f), &|z| {
                zones.wants(z)
            });
        }
    }
    use MetricType::{Counter, Gauge};
    e.add_u64(
        "ebbtide_exporter_build_info",
        "The ebbtide exporter's version (the value is always 1).",
        Gauge,
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    e.add_u64(
        "ebbtide_exporter_scrapes_total",
        "Scrapes served since the exporter started, this one included.",
        Counter,
        &[],
        scrapes,
    );
    e.add_f64(
        "ebbtide_exporter_scrape_duration_seconds",
        "Time this scrape took to find the processes and gather their statistics.",
        Gauge,
        &[],
        took.as_secs_f64(),
    );
    e.add_u64(
        "ebbtide_exporter_processes_seen",
        "Processes with a live control socket the exporter may read, found in this scrape.",
        Gauge,
        &[],
        outcomes.len() as u64,
    );
    e.add_u64(
        "ebbtide_exporter_processes_scraped",
        "Processes whose statistics are in this scrape.",
        Gauge,
        &[],
        outcomes.iter().filter(|o| o.result.is_ok()).count() as u64,
    );
    for (f, n) in Failure::ALL.iter().zip(errors) {
        e.add_u64(
            "ebbtide_exporter_errors_total",
            "Processes whose statistics could not be read, by reason (timeout, deadline: the \
             scrape's budget ran out before its turn, refused, permission, server: it answered \
             an error, protocol, io, vanished: it exited meanwhile), since the exporter \
             started.",
            Counter,
            &[("reason", f.reason())],
            *n,
        );
    }
    for o in outcomes {
        if matches!(o.result, Err((Failure::Vanished, _))) {
            continue;
        }
        let pid = o.pid.to_string();
        let labels = [
            ("pid", pid.as_str()),
            ("comm", o.comm.as_str()),
            ("cgroup", o.cgroup.as_str()),
        ];
        e.add_u64(
            "ebbtide_exporter_process_up",
            "1 if this process's statistics are in this scrape, 0 if it did not answer in time \
             or could not be read (see ebbtide_exporter_errors_total).",
            Gauge,
            &labels,
            u64::from(o.result.is_ok()),
        );
        e.add_f64(
            "ebbtide_exporter_process_scrape_duration_seconds",
            "Time spent asking this process for its statistics in this scrape.",
            Gauge,
            &labels,
            o.took.as_secs_f64(),
        );
    }
    e.render()
}

/// Prometheus's own timeout for this scrape, if it said one.
fn prometheus_timeout(req: &Request<Body>) -> Option<Duration> {
    let v = req
        .headers()
        .get("x-prometheus-scrape-timeout-seconds")?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()?;
    // Leave a tenth for rendering and the network.
    (v.is_finite() && v > 0.0).then(|| Duration::from_secs_f64((v * 0.9).min(3600.0)))
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from(body))
        .expect("static headers are valid")
}

/// The HTTP side: routes and methods.
fn handle(state: &State, req: &Request<Body>) -> Response<Body> {
    let path = req.uri().path();
    match (path, req.method()) {
        ("/metrics", &Method::GET) => {
            let budget = prometheus_timeout(req).unwrap_or(Duration::MAX);
            let page = state.scrape(budget);
            Response::builder()
                .header(CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)
                .body(Body::from(page))
                .expect("static headers are valid")
        }
        ("/", &Method::GET) => text(
            StatusCode::OK,
            format!(
                "ebbtide exporter {}\nThe statistics of every ebbtide process on this host are \
                 at /metrics (Prometheus text format).\n",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        ("/metrics" | "/", m) => {
            let mut r = text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {m} not allowed on {path}: only GET\n"),
            );
            r.headers_mut()
                .insert(ALLOW, "GET".parse().expect("valid header value"));
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            format!("not found: {path} (the metrics are at /metrics)\n"),
        ),
    }
}

/// Check that every address can be bound (and pick a port for port 0), with a clear error
/// naming the address and the cause. The probes are closed before the server binds.
fn probe(listen: &Listen) -> Result<Vec<SocketAddr>, CliError> {
    let mut addrs = listen.addrs.clone();
    let mut port = addrs[0].port();
    for a in addrs.iter_mut() {
        if port != 0 {
            a.set_port(port);
        }
        let l = TcpListener::bind(*a).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    "the address is already in use: another process listens there; choose \
                     another port with --listen"
                        .to_string()
                }
                std::io::ErrorKind::PermissionDenied => format!(
                    "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE): {e}"
                ),
                std::io::ErrorKind::AddrNotAvailable => {
                    format!("no interface of this host has that address: {e}")
                }
                _ => e.to_string(),
            };
            CliError::Usage(format!(
                "cannot listen on {a} (--listen {}): {why}",
                listen.text
            ))
        })?;
        port = l.local_addr().map(|a| a.port()).unwrap_or(port);
        a.set_port(port);
    }
    Ok(addrs)
}

pub fn run(a: Args) -> Result<(), CliError> {
    let state = Arc::new(State::new(&a));
    if a.once {
        let page = state.scrape(Duration::MAX);
        std::io::stdout()
            .write_all(page.as_bytes())
            .map_err(|err| CliError::Io {
                what: "cannot write to standard output".into(),
                err,
            })?;
        return Ok(());
    }
    let addrs = probe(&a.listen)?;
    let s = Arc::clone(&state);
    let mut server = oxhttp::Server::new(move |req| handle(&s, req))
        .with_global_timeout(Duration::from_secs(a.http_timeout))
        .with_max_concurrent_connections(a.max_connections as usize);
    for addr in &addrs {
        server = server.bind(*addr);
    }
    let server = server
        .with_server_name(format!("ebbtide-exporter/{}", env!("CARGO_PKG_VERSION")))
        .expect("a valid header value")
        .spawn()
        .map_err(|e| {
            CliError::Usage(format!(
                "cannot listen on {} (--listen {}): {e}",
                addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                a.listen.text
            ))
        })?;
    for addr in &addrs {
        println!("ebbtide exporter: serving http://{addr}/metrics");
    }
    let _ = std::io::stdout().flush();
    server.join().map_err(|err| CliError::Io {
        what: "the HTTP server stopped".into(),
        err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot_json::Read;
    use ebbtide::stats::{check_exposition, Snapshot};

    #[test]
    fn listen_syntax() {
        let ok = parse_listen("127.0.0.1:9466").unwrap();
        assert_eq!(ok.addrs, ["127.0.0.1:9466".parse::<SocketAddr>().unwrap()]);
        assert_eq!(parse_listen("[::1]:0").unwrap().addrs[0].port(), 0);
        assert!(parse_listen("9466")
            .unwrap_err()
            .starts_with("expected ADDR:PORT"));
        assert!(parse_listen(":9466")
            .unwrap_err()
            .starts_with("no address before ':9466'"));
        assert!(parse_listen("127.0.0.1:99999")
            .unwrap_err()
            .starts_with("'99999' is not a port"));
        assert!(parse_listen("127.0.0.1:x")
            .unwrap_err()
            .contains("not a port"));
        assert!(parse_listen("no-such-host.invalid:9466")
            .unwrap_err()
            .starts_with("cannot resolve 'no-such-host.invalid'"));
    }

    #[test]
    fn a_port_in_use_is_refused_clearly() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = probe(&parse_listen(&addr).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "cannot listen on {addr} (--listen {addr}): the address is already in use"
            )),
            "{e}"
        );
        let free = probe(&parse_listen("127.0.0.1:0").unwrap()).unwrap();
        assert_ne!(free[0].port(), 0);
    }

    fn outcome(pid: u32, result: Result<Read, (Failure, String)>) -> Outcome {
        Outcome {
            pid,
            comm: format!("svc{pid}"),
            cgroup: "/system.slice/x.service".into(),
            took: Duration::from_millis(3),
            result,
        }
    }

    #[test]
    fn page_of_processes_that_answered_and_not() {
        let read = || Read {
            snapshot: Snapshot::sample(),
            missing: Vec::new(),
        };
        let outcomes = [
            outcome(10, Ok(read())),
            outcome(11, Err((Failure::Timeout, "slow".into()))),
            outcome(12, Ok(read())),
            outcome(13, Err((Failure::Vanished, "gone".into()))),
        ];
        let mut errors = vec![0; Failure::ALL.len()];
        errors[0] = 4;
        let all = ZoneSeries {
            all: true,
            patterns: Vec::new(),
        };
        let page = render(&outcomes, &all, 7, &errors, Duration::from_millis(1500));
        check_exposition(&page).unwrap();
        assert!(page.contains(
            "ebbtide_zone_used_items{pid=\"12\",comm=\"svc12\",cgroup=\"/system.slice/x.service\",zone=\"small 64\"} 1000\n"
        ));
        assert!(
            !page.contains("pid=\"11\",comm=\"svc11\",cgroup=\"/system.slice/x.service\",zone=")
        );
        assert!(page.contains("ebbtide_exporter_process_up{pid=\"11\",comm=\"svc11\",cgroup=\"/system.slice/x.service\"} 0\n"));
        assert!(page.contains("ebbtide_exporter_process_up{pid=\"10\",comm=\"svc10\",cgroup=\"/system.slice/x.service\"} 1\n"));
        assert!(
            !page.contains("pid=\"13\""),
            "a vanished process has no series"
        );
        assert!(page.contains("ebbtide_exporter_errors_total{reason=\"timeout\"} 4\n"));
        assert!(page.contains("ebbtide_exporter_errors_total{reason=\"vanished\"} 0\n"));
        assert!(page.contains("ebbtide_exporter_scrapes_total 7\n"));
        assert!(page.contains("ebbtide_exporter_scrape_duration_seconds 1.5\n"));
        assert!(page.contains("ebbtide_exporter_processes_seen 4\n"));
        assert!(page.contains("ebbtide_exporter_processes_scraped 2\n"));
        assert_eq!(page.matches("# HELP ebbtide_zone_used_items ").count(), 1);
    }

    #[test]
    fn zones_on_request() {
        let none = ZoneSeries::default();
        assert!(!none.wants("malloc 64"));
        let some = ZoneSeries {
            all: false,
            patterns: vec!["small 64".into(), "blk-*".into()],
        };
        assert!(some.wants("small 64") && some.wants("blk-ring0") && some.wants("blk-"));
        assert!(!some.wants("small 640") && !some.wants("big"));
        assert!(parse_zone_pattern("").is_err());
        assert!(parse_zone_pattern("a*b")
            .unwrap_err()
            .contains("may only end"));
        assert_eq!(parse_zone_pattern("a*").unwrap(), "a*");

        let read = || Read {
            snapshot: Snapshot::sample(),
            missing: Vec::new(),
        };
        let outcomes = [outcome(10, Ok(read()))];
        let errors = vec![0; Failure::ALL.len()];
        let page = render(&outcomes, &none, 1, &errors, Duration::ZERO);
        check_exposition(&page).unwrap();
        assert!(!page.contains("ebbtide_zone_"), "{page}");
        assert!(page.contains("ebbtide_zones_used_items{pid=\"10\",comm=\"svc10\",cgroup=\"/system.slice/x.service\",size_range=\"1-64\"} 1000\n"));
        let page = render(&outcomes, &some, 1, &errors, Duration::ZERO);
        check_exposition(&page).unwrap();
        assert!(page.contains("zone=\"small 64\"} 1000\n"));
        assert!(!page.contains("zone=\"big"));
    }

    #[test]
    fn routes() {
        let state = State::new(&Args {
            listen: parse_listen(DEFAULT_LISTEN).unwrap(),
            timeout_ms: 100,
            scrape_timeout_ms: 500,
            parallel: 2,
            max_connections: 2,
            http_timeout: 1,
            once: false,
            per_zone: false,
            zone: Vec::new(),
        });
        let req = |m: Method, p: &str| {
            Request::builder()
                .method(m)
                .uri(format!("http://localhost{p}"))
                .body(Body::empty())
                .unwrap()
        };
        let r = handle(&state, &req(Method::GET, "/metrics?x=1"));
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], PROMETHEUS_CONTENT_TYPE);
        let body = r.into_body().to_string().unwrap();
        check_exposition(&body).unwrap();
        assert!(
            body.contains("ebbtide_exporter_scrapes_total 1\n"),
            "{body}"
        );
        assert_eq!(
            handle(&state, &req(Method::GET, "/")).status(),
            StatusCode::OK
        );
        let r = handle(&state, &req(Method::GET, "/nope"));
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            r.into_body().to_string().unwrap(),
            "not found: /nope (the metrics are at /metrics)\n"
        );
        let r = handle(&state, &req(Method::POST, "/metrics"));
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[ALLOW], "GET");
        let mut timed = req(Method::GET, "/metrics");
        timed
            .headers_mut()
            .insert("x-prometheus-scrape-timeout-seconds", "10".parse().unwrap());
        assert_eq!(prometheus_timeout(&timed), Some(Duration::from_secs(9)));
        timed
            .headers_mut()
            .insert("x-prometheus-scrape-timeout-seconds", "-1".parse().unwrap());
        assert_eq!(prometheus_timeout(&timed), None);
    }
}
