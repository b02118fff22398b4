//! `ebbtide get PID [NAME]`.

use super::Target;
use crate::client;
use crate::error::CliError;
use ebbtide::control::protocol::Request;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Tunable name (all tunables, with default and range, when omitted).
    name: Option<String>,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let out = client::request(
        a.target.pid,
        a.target.socket.as_deref(),
        &Request::Get(a.name),
    )?;
    print!("{out}");
    Ok(())
}
