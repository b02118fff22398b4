//! `ebbtide ls`: processes with a control socket.
//!
//! Looks in our own socket directories, every `/tmp/ebbtide-<uid>/` and every
//! `/run/user/<uid>/ebbtide/` we may read (all of them as root, our own otherwise), and asks
//! each live socket for its version (1 s timeout) to show whether it answers.

use crate::client;
use crate::error::CliError;
use ebbtide::control::path;
use ebbtide::control::protocol::Request;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also list sockets whose process is gone (stale).
    #[arg(long)]
    all: bool,
    /// Do not connect to the sockets (no STATUS column).
    #[arg(long)]
    no_check: bool,
}

fn user_name(uid: u32) -> String {
    if let Ok(text) = std::fs::read_to_string("/etc/passwd") {
        for l in text.lines() {
            let mut f = l.split(':');
            let (Some(name), _, Some(id)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if id.parse() == Ok(uid) {
                return name.to_string();
            }
        }
    }
    uid.to_string()
}

pub fn run(a: Args) -> Result<(), CliError> {
    let mut rows: Vec<[String; 5]> = Vec::new();
    let mut unreadable = Vec::new();
    let mut seen = Vec::new();
    for dir in client::all_socket_dirs() {
        let list = match path::list_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                unreadable.push(dir);
                continue;
            }
            Err(_) => continue,
        };
        for (pid, sock) in list {
            if seen.contains(&sock) {
                continue;
            }
            seen.push(sock.clone());
            let alive = path::pid_alive(pid);
            if !alive && !a.all {
                continue;
            }
            let user = client::process_uid(pid)
                .map(user_name)
                .unwrap_or_else(|| "-".into());
            let comm = if alive {
                client::process_comm(pid)
            } else {
                "-".into()
            };
            let status = if !alive {
                "stale (process gone)".to_string()
            } else if a.no_check {
                "-".to_string()
            } else {
                match client::request_with_timeout(
                    pid,
                    &sock,
                    &Request::Version,
                    Duration::from_secs(1),
                ) {
                    Ok(v) => v.split_whitespace().take(4).collect::<Vec<_>>().join(" "),
                    Err(CliError::PermissionDenied { .. }) => "permission denied".into(),
                    Err(CliError::Stale(_)) => "stale (not accepting)".into(),
                    Err(e) => format!("error: {e}"),
                }
            };
            rows.push([
                pid.to_string(),
                user,
                comm,
                status,
                sock.display().to_string(),
            ]);
        }
    }
    rows.sort_by_key(|r| r[0].parse::<u32>().unwrap_or(0));
    let header = ["PID", "USER", "COMMAND", "STATUS", "SOCKET"].map(String::from);
    let mut widths = [0usize; 5];
    for r in std::iter::once(&header).chain(rows.iter()) {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(rows.iter()) {
        let line = format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
        println!("{}", line.trim_end());
    }
    for d in unreadable {
        eprintln!(
            "ebbtide: note: cannot read {} (permission denied; its sockets belong to another \
             user)",
            d.display()
        );
    }
    Ok(())
}
