//! `ebbtide stat PID [--json|--prometheus]`.
//!
//! `--prometheus` asks the process for its JSON and renders it with the library's emitter in
//! this build (as `ebbtide exporter` does, without the `pid`/`comm`/`cgroup` labels), so the two
//! always show the same names, whatever version of ebbtide the process runs. The table too is
//! rendered here from the JSON: `stats json` is the request the process answers without
//! allocating, so looking at a program does not count as its work (`docs/design/observer.md`).

use super::Target;
use crate::client;
use crate::error::CliError;
use crate::snapshot_json;
use ebbtide::control::protocol::{Format, Request};
use ebbtide::stats::Exposition;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// JSON (the documented stats fields, see docs/ABI/testing/stats-*).
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Prometheus text exposition format (the names of `ebbtide exporter`).
    #[arg(long)]
    prometheus: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let out = client::request(
        a.target.pid,
        a.target.socket.as_deref(),
        &Request::Stats(Format::Json),
    )?;
    if a.json {
        print!("{out}");
        return Ok(());
    }
    let read = snapshot_json::parse(&out).map_err(|e| {
        CliError::Protocol(format!("the statistics of process {}: {e}", a.target.pid))
    })?;
    if a.prometheus {
        let mut page = Exposition::new();
        page.add_snapshot_where(&read.snapshot, &[], &|g, f| read.has(g, f));
        print!("{}", page.render());
    } else {
        print!("{}", read.snapshot.to_table());
    }
    Ok(())
}
