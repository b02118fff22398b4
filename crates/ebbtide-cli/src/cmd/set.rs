//! `ebbtide set PID NAME=VALUE [NAME=VALUE...]`: one batch, all or none.

use super::Target;
use crate::client;
use crate::error::CliError;
use ebbtide::control::protocol::Request;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// NAME=VALUE entries (also NAME=VALUE,NAME=VALUE); applied together or not at all.
    #[arg(required = true, value_name = "NAME=VALUE")]
    assignments: Vec<String>,
}

pub fn run(a: Args) -> Result<(), CliError> {
    for s in &a.assignments {
        if !s.contains('=') {
            return Err(CliError::Usage(format!(
                "'{s}' is not NAME=VALUE (for example squeeze_ms=20)"
            )));
        }
        if s.chars().any(char::is_whitespace) {
            return Err(CliError::Usage(format!(
                "'{s}' contains white space; values never do"
            )));
        }
    }
    let conf = a.assignments.join(",");
    let out = client::request(
        a.target.pid,
        a.target.socket.as_deref(),
        &Request::Set(conf),
    )?;
    print!("{out}");
    Ok(())
}
