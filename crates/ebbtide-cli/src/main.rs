//! `ebbtide`: list, inspect and steer processes that use the ebbtide allocator, through their
//! control sockets (see `docs/control-protocol.md`).
//!
//! One module per subcommand under `cmd/`, each with an `Args` (clap) and a `run`. Adding a
//! subcommand: a module in `cmd/`, a variant in [`Command`], an arm in [`main`].
//!
//! Below the commands: `client` (one request to one process's socket), `fleet` (every process
//! we may read, asked in parallel), `snapshot_json` (a process's JSON back into the library's
//! `Snapshot`, so every Prometheus output goes through the library's one emitter) and `error`.
//! Commands use them; they never use a command.

mod client;
mod cmd;
mod error;
mod fleet;
mod snapshot_json;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Inspect and steer processes that use ebbtide.
#[derive(Parser, Debug)]
#[command(name = "ebbtide", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List processes that serve a control socket.
    Ls(cmd::ls::Args),
    /// Print a process's statistics (vmstat -z style table, JSON or Prometheus).
    Stat(cmd::stat::Args),
    /// Live view of a process's zones, sortable by column (q quits).
    Top(cmd::top::Args),
    /// Print one tunable, or all of them.
    Get(cmd::get::Args),
    /// Set tunables (all or none).
    Set(cmd::set::Args),
    /// Inject a pressure level (normal, low, moderate, critical).
    Pressure(cmd::pressure::Args),
    /// Serve the statistics of every ebbtide process on this host to Prometheus (GET /metrics).
    Exporter(cmd::exporter::Args),
    /// Run a program with ebbtide as its malloc and its control socket on:
    /// ebbtide run [--conf K=V,…] -- CMD ARGS…
    Run(cmd::run::Args),
    /// Reproduce the experiments: blkback, uma, idle, malloc or all [--quick|--smoke|--full]
    /// [--out DIR] [--runs N] (root for cgroups and swap files).
    #[command(disable_help_flag = true)]
    Lab {
        /// Passed to the lab: `ebbtide lab --help` lists them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print shell completions for this command: ebbtide completions bash > /etc/bash_completion.d/ebbtide
    Completions(cmd::docgen::CompletionsArgs),
    /// Write the man pages of this command into a directory (packaging).
    #[command(hide = true)]
    Manpages(cmd::docgen::ManpagesArgs),
}

fn main() -> ExitCode {
    // The lab's variants re-execute this binary: serve them before parsing arguments.
    ebbtide_experiments::child_main_if_requested();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Ls(a) => cmd::ls::run(a),
        Command::Stat(a) => cmd::stat::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Get(a) => cmd::get::run(a),
        Command::Set(a) => cmd::set::run(a),
        Command::Pressure(a) => cmd::pressure::run(a),
        Command::Exporter(a) => cmd::exporter::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Completions(a) => cmd::docgen::completions::<Cli>(a),
        Command::Manpages(a) => cmd::docgen::manpages::<Cli>(a),
        Command::Lab { args } => {
            return ExitCode::from(
                ebbtide_experiments::cli_main_as("ebbtide", args).clamp(0, 255) as u8,
            )
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ebbtide: error: {e}");
            ExitCode::FAILURE
        }
    }
}
