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

use super::events;
use super::inject;
use super::protocol::{help_text, Format, Request, PROTOCOL_VERSION};
use crate::options;

/// Execute `req`; `Ok(payload)` or `Err(message)`.
pub fn handle(req: &Request) -> Result<String, String> {
    match req {
        Request::Ping => Ok("pong\n".into()),
        Request::Version => Ok(format!(
            "ebbtide {} protocol {PROTOCOL_VERSION} pid {}\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id()
        )),
        Request::Help => Ok(help_text()),
        Request::Stats(f) => {
            let s = crate::stats::collect();
            Ok(match f {
                Format::Table => s.to_table(),
                Format::Json => {
                    let mut j = s.to_json();
                    j.push('\n');
                    j
                }
                Format::Prometheus => s.to_prometheus(),
            })
        }
        Request::Get(None) => {
            let mut out = String::new();
            for s in options::list() {
                out.push_str(&s.to_string());
                out.push('\n');
            }
            Ok(out)
        }
        Request::Get(Some(name)) => options::get(name)
            .map(|v| format!("{v}\n"))
            .map_err(|e| e.to_string()),
        Request::Set(conf) => {
            let names: Vec<&'static str> = options::parse::parse_conf(conf, "control socket")
                .map_err(join_errors)?
                .iter()
                .map(|a| a.def.name)
                .collect();
            options::apply_conf_from(conf, "control socket").map_err(join_errors)?;
            let mut out = String::new();
            for n in names {
                let v = options::get(n).map_err(|e| e.to_string())?;
                out.push_str(&format!("{n}={v}\n"));
            }
            events::record("set", out.trim_end().replace('\n', ",").as_str());
            Ok(out)
        }
        Request::Pressure(level) => {
            let done = inject::inject(*level);
            events::set_injected(*level);
            let msg = format!(
                "injected {}: released {} bytes",
                done.level, done.released_bytes
            );
            events::record("pressure", &msg);
            Ok(format!("{msg}\n"))
        }
        Request::Events => Ok(events::text()),
    }
}

fn join_errors(errors: Vec<options::OptionError>) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
