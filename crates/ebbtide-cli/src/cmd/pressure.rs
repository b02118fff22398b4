//! `ebbtide pressure PID LEVEL`.

use super::Target;
use crate::client;
use crate::error::CliError;
use ebbtide::control::protocol::Request;
use ebbtide::pressure::Level;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// normal, low, moderate or critical.
    level: String,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let level: Level = a
        .level
        .parse()
        .map_err(|e: ebbtide::pressure::ParseLevelError| CliError::Usage(e.to_string()))?;
    let out = client::request(
        a.target.pid,
        a.target.socket.as_deref(),
        &Request::Pressure(level),
    )?;
    print!("{out}");
    Ok(())
}
