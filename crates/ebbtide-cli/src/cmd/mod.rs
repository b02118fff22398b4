//! One module per subcommand.

pub mod docgen;
pub mod exporter;
pub mod get;
pub mod ls;
pub mod pressure;
pub mod run;
pub mod set;
pub mod stat;
pub mod top;

use std::path::PathBuf;

/// Options every command that talks to one process takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Process id of the target.
    pub pid: u32,
    /// Use this socket instead of looking for the process's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}
