//! `ebbtide run [--conf K=V,…] [--no-control] -- CMD ARGS…`: starts any program with ebbtide as
//! its malloc (`libebbtide_malloc.so` preloaded) and its control socket on, so `ebbtide stat
//! PID` shows its size classes and its cached memory goes back under pressure.
//!
//! The configuration is checked here, all of it, before the program starts: a bad name or
//! value is an error naming it, and nothing runs. `--conf` adds to `EBBTIDE_CONF` from the
//! environment (later assignments win); `LD_PRELOAD` keeps what it had, after the malloc. The
//! program replaces this process (`exec`): same pid, its own exit status and signals.

use crate::error::CliError;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Tunables for the program, `name=value,…` (the `EBBTIDE_CONF` syntax, see
    /// docs/ABI/testing/options); may be given more than once.
    #[arg(long, value_name = "K=V,…")]
    conf: Vec<String>,
    /// Leave the control socket off (it is on by default).
    #[arg(long)]
    no_control: bool,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD ARGS")]
    command: Vec<OsString>,
}

/// The `EBBTIDE_CONF` the program gets: the environment's, then `--conf`, then the control
/// socket unless turned off or set explicitly.
pub fn program_conf(env_conf: Option<&str>, conf: &[String], control: bool) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if let Some(e) = env_conf.filter(|e| !e.trim().is_empty()) {
        parts.push(e);
    }
    parts.extend(
        conf.iter()
            .map(String::as_str)
            .filter(|c| !c.trim().is_empty()),
    );
    let mut s = parts.join(",");
    let names_socket = s
        .split(',')
        .any(|kv| kv.split('=').next().map(str::trim) == Some("control_socket"));
    if control && !names_socket {
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str("control_socket=1");
    }
    s
}

/// `LD_PRELOAD` with the malloc first.
pub fn program_preload(lib: &std::path::Path, existing: Option<&str>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(e) = existing.filter(|e| !e.trim().is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

pub fn run(a: Args) -> Result<(), CliError> {
    let env_conf = std::env::var("EBBTIDE_CONF").ok();
    let conf = program_conf(env_conf.as_deref(), &a.conf, !a.no_control);
    if let Err(errors) = ebbtide::options::Registry::new().apply_conf(&conf) {
        let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        return Err(CliError::Usage(format!(
            "bad configuration for the program (EBBTIDE_CONF={conf}): {}",
            list.join("; ")
        )));
    }
    let lib = ebbtide_lab::malloc_lib::locate_or_build().map_err(CliError::Usage)?;
    let preload = program_preload(&lib, std::env::var("LD_PRELOAD").ok().as_deref());
    let (prog, args) = a
        .command
        .split_first()
        .ok_or_else(|| CliError::Usage("no program to run (ebbtide run -- CMD ARGS)".into()))?;
    let err = std::process::Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("EBBTIDE_CONF", &conf)
        .exec();
    Err(CliError::Io {
        what: format!("cannot run {}", prog.to_string_lossy()),
        err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_is_merged_and_the_socket_turned_on() {
        assert_eq!(program_conf(None, &[], true), "control_socket=1");
        assert_eq!(program_conf(None, &[], false), "");
        assert_eq!(
            program_conf(Some("checked=1"), &["squeeze_ms=5".into()], true),
            "checked=1,squeeze_ms=5,control_socket=1"
        );
        assert_eq!(
            program_conf(None, &["control_socket=0".into()], true),
            "control_socket=0"
        );
    }

    #[test]
    fn preload_keeps_what_was_there() {
        let l = std::path::Path::new("/x/libebbtide_malloc.so");
        assert_eq!(program_preload(l, None), "/x/libebbtide_malloc.so");
        assert_eq!(
            program_preload(l, Some("/y.so")),
            "/x/libebbtide_malloc.so:/y.so"
        );
    }
}
