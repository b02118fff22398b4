//! Carrying out one parsed request: [`Request`] in, payload or error message out.
//!
//! Called on the control thread only. What each request touches:
//!
//! * `stats`: [`crate::stats::collect`] (the zone registry's lock, briefly, to list zones;
//!   per-CPU counters are read without locks);
//! * `get`/`set`: the options registry (writers' lock only; readers on the fast path never
//!   lock);
//! * `pressure`: [`super::inject::inject`] (the reclaim layer's own locks).
//!
//! Nothing here holds a lock while waiting for a client: the reply is built completely
//! before the server starts writing it.

use super::buffer::MapBuf;
use super::events;
use super::inject;
use super::protocol::{help_text, Format, Request, PROTOCOL_VERSION};
use crate::options;
use std::fmt::Write;

/// Execute `req`, appending its payload to `out`; `Err(message)` for an error reply.
///
/// The observations (`ping`, `version`, `stats json`, `events`) write straight into `out`, a
/// buffer mapped from the OS, and allocate nothing: watching a program must not be counted as
/// its work (`docs/design/observer.md`). The other requests (a `stats table` or `prometheus`
/// text built in process, `get`, `set`, `pressure`, `help`) build their text first; they
/// are not what the `ebbtide` command's `stat`, `top` and `exporter` send.
pub fn handle(req: &Request, out: &mut MapBuf) -> Result<(), String> {
    let full = |out: &MapBuf| {
        format!(
            "reply too large: more than {} bytes, or no memory for it ({} bytes written)",
            super::buffer::MAX_BYTES,
            out.len()
        )
    };
    let text = match req {
        Request::Ping => return out.write_str("pong\n").map_err(|_| full(out)),
        Request::Version => {
            return writeln!(
                out,
                "ebbtide {} protocol {PROTOCOL_VERSION} pid {}",
                env!("CARGO_PKG_VERSION"),
                std::process::id()
            )
            .map_err(|_| full(out))
        }
        Request::Stats(Format::Json) => {
            return crate::stats::write_json(out)
                .and_then(|()| out.write_char('\n'))
                .map_err(|_| full(out))
        }
        Request::Events => return events::write_text(out).map_err(|_| full(out)),
        Request::Help => help_text(),
        Request::Stats(Format::Table) => crate::stats::collect().to_table(),
        Request::Stats(Format::Prometheus) => crate::stats::collect().to_prometheus(),
        Request::Get(None) => {
            let mut text = String::new();
            for s in options::list() {
                text.push_str(&s.to_string());
                text.push('\n');
            }
            text
        }
        Request::Get(Some(name)) => options::get(name)
            .map(|v| format!("{v}\n"))
            .map_err(|e| e.to_string())?,
        Request::Set(conf) => {
            let names: Vec<&'static str> = options::parse::parse_conf(conf, "control socket")
                .map_err(join_errors)?
                .iter()
                .map(|a| a.def.name)
                .collect();
            options::apply_conf_from(conf, "control socket").map_err(join_errors)?;
            let mut text = String::new();
            for n in names {
                let v = options::get(n).map_err(|e| e.to_string())?;
                text.push_str(&format!("{n}={v}\n"));
            }
            events::record("set", text.trim_end().replace('\n', ",").as_str());
            text
        }
        Request::Pressure(level) => {
            let done = inject::inject(*level);
            events::set_injected(*level);
            let msg = format!(
                "injected {}: released {} bytes",
                done.level, done.released_bytes
            );
            events::record("pressure", &msg);
            format!("{msg}\n")
        }
    };
    out.write_str(&text).map_err(|_| full(out))
}

fn join_errors(errors: Vec<options::OptionError>) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
