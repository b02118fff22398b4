//! `ebbtide stat PID [--json|--prometheus]`.

use super::Target;
use crate::client;
use crate::error::CliError;
use ebbtide::control::protocol::{Format, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// JSON (the documented stats fields, see docs/ABI/testing/stats-*).
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Prometheus text exposition format.
    #[arg(long)]
    prometheus: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let format = if a.json {
        Format::Json
    } else if a.prometheus {
        Format::Prometheus
    } else {
        Format::Table
    };
    let out = client::request(
        a.target.pid,
        a.target.socket.as_deref(),
        &Request::Stats(format),
    )?;
    print!("{out}");
    Ok(())
}
