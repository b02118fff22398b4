//! Reading a preloaded program's ebbtide statistics through its control socket
//! (`docs/control-protocol.md`): one `stats json` request, the same that `ebbtide stat PID
//! --json` sends. The ebbtide rows of `lab malloc` run with `control_socket=true`; the lab
//! polls the statistics so the report can say what the pressure sources did.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where process `pid`'s socket may be (its environment is the lab's: same
/// `XDG_RUNTIME_DIR`, same uid).
pub fn socket_paths(pid: i32) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        let x = PathBuf::from(x);
        if x.is_absolute() {
            v.push(x.join("ebbtide").join(format!("{pid}.sock")));
        }
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    v.push(PathBuf::from(format!("/tmp/ebbtide-{uid}/{pid}.sock")));
    v
}

/// One request (a line without its newline) to process `pid`'s socket; the `ok` payload, or
/// `None` if it serves no socket (yet) or the reply is an error or malformed.
pub fn request(pid: i32, line: &str) -> Option<Vec<u8>> {
    let path = socket_paths(pid).into_iter().find(|p| p.exists())?;
    let mut s = UnixStream::connect(&path).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut r = BufReader::new(s);
    let mut head = String::new();
    r.read_line(&mut head).ok()?;
    let len = parse_ok_header(&head)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(body)
}

/// `stats json` of process `pid`.
pub fn stats_json(pid: i32) -> Option<Value> {
    serde_json::from_slice(&request(pid, "stats json")?).ok()
}

/// `stats table` of process `pid` (the `vmstat -z` style table `ebbtide stat PID` prints).
pub fn stats_table(pid: i32) -> Option<String> {
    String::from_utf8(request(pid, "stats table")?).ok()
}

/// The payload length of an `ok <len>` reply line.
pub fn parse_ok_header(line: &str) -> Option<usize> {
    line.trim_end().strip_prefix("ok ")?.parse().ok()
}

/// The global figures the report quotes, from a `stats json` object (missing ones are left
/// out): pressure events per source, the last level, bytes released.
pub fn global_figures(stats: &Value) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    let Some(g) = stats.get("global") else {
        return m;
    };
    for k in [
        "pressure_events",
        "events_psi",
        "events_cgroup1",
        "events_headroom",
        "events_events",
        "events_systemd",
        "events_budget",
        "last_event_level",
        "last_event_source",
        "released_bytes",
        "squeezed_ms",
        "lazy_freed_bytes",
        "lazy_bytes",
        "lazy_pending_bytes",
        "mapped_bytes",
        "cached_bytes",
    ] {
        if let Some(v) = g.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    // Which sources ran, and why the others did not.
    if let Some(src) = stats.get("sources").and_then(Value::as_array) {
        let list: Vec<String> = src
            .iter()
            .map(|s| {
                let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
                match s.get("active").and_then(Value::as_bool) {
                    Some(true) => format!("{name}: active"),
                    _ => format!(
                        "{name}: {}",
                        s.get("reason")
                            .and_then(Value::as_str)
                            .unwrap_or("inactive")
                    ),
                }
            })
            .collect();
        m.insert("sources".into(), list.into());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_figures() {
        assert_eq!(parse_ok_header("ok 123\n"), Some(123));
        assert_eq!(parse_ok_header("err busy\n"), None);
        let v: Value = serde_json::json!({"global": {"pressure_events": 3, "events_psi": 1,
            "other": 9}});
        let m = global_figures(&v);
        assert_eq!(m.get("pressure_events"), Some(&Value::from(3)));
        assert!(!m.contains_key("other"));
        assert!(global_figures(&serde_json::json!({})).is_empty());
        assert!(socket_paths(42).iter().any(|p| p.ends_with("42.sock")));
    }
}
