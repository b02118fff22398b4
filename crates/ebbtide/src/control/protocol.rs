//! The wire protocol: request lines in, framed replies out. Pure functions, no I/O, shared by
//! the server, the `ebbtide` command and the fuzz target.
//!
//! A request is one line of at most [`MAX_REQUEST`] bytes (the `\n` included; a `\r` before it
//! is ignored): a verb and its arguments separated by spaces or tabs. Verbs are
//! case-insensitive; arguments are not (tunable names are lower case).
//!
//! ```text
//! ping                              -> ok: pong
//! version                           -> ok: ebbtide 0.1.0 protocol 1 pid 1234
//! stats [table|json|prometheus]     -> ok: the stats::Snapshot in that format (default table)
//! get [NAME]                        -> ok: NAME's canonical value, or every tunable, one a line
//! set NAME=VALUE[,NAME=VALUE...]    -> ok: what changed, one `name=value` a line
//! pressure normal|low|moderate|critical -> ok: what was done
//! events                            -> ok: the recent control events, oldest first
//! help                              -> ok: this list
//! ```
//!
//! A reply is either `ok <len>\n` followed by exactly `<len>` bytes of payload (UTF-8), or
//! `err <message>\n` with a one-line message. Every request gets exactly one reply, in order.

use crate::pressure::Level;
use std::fmt;

/// Protocol version, reported by `version`. Bumped when a verb changes meaning or the framing
/// changes; new verbs do not bump it.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest request line in bytes, the newline included.
pub const MAX_REQUEST: usize = 4096;

/// Largest reply payload a client accepts (a safety bound for clients, far above any real
/// snapshot).
pub const MAX_REPLY: usize = 64 << 20;

/// A stats output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `vmstat -z` style table ([`crate::stats::Snapshot::to_table`]).
    Table,
    /// JSON ([`crate::stats::Snapshot::to_json`]).
    Json,
    /// Prometheus text format 0.0.4 ([`crate::stats::Snapshot::to_prometheus`]).
    Prometheus,
}

impl Format {
    /// The word used on the wire.
    pub const fn word(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Prometheus => "prometheus",
        }
    }
}

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `ping`.
    Ping,
    /// `version`.
    Version,
    /// `help`.
    Help,
    /// `stats [format]`.
    Stats(Format),
    /// `get [name]`.
    Get(Option<String>),
    /// `set name=value[,name=value...]`: the text after the verb, handed to
    /// [`crate::options::apply_conf_from`] whole (all or nothing).
    Set(String),
    /// `pressure <level>`.
    Pressure(Level),
    /// `events`.
    Events,
}

impl Request {
    /// The request as a line (without the newline) that [`parse_request`] reads back.
    pub fn to_line(&self) -> String {
        match self {
            Request::Ping => "ping".into(),
            Request::Version => "version".into(),
            Request::Help => "help".into(),
            Request::Stats(f) => format!("stats {}", f.word()),
            Request::Get(None) => "get".into(),
            Request::Get(Some(n)) => format!("get {n}"),
            Request::Set(conf) => format!("set {conf}"),
            Request::Pressure(l) => format!("pressure {}", l.name()),
            Request::Events => "events".into(),
        }
    }
}

/// Why a request line was refused. The [`fmt::Display`] text is what the client sees after
/// `err `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The line was empty or only white space.
    Empty,
    /// The line is longer than [`MAX_REQUEST`].
    TooLong {
        /// Bytes received without a newline (at least).
        len: usize,
    },
    /// Not UTF-8.
    NotUtf8,
    /// A control character other than tab inside the line.
    ControlChar {
        /// Byte offset.
        at: usize,
    },
    /// Unknown verb.
    UnknownVerb(String),
    /// A verb got arguments it does not take, or too many.
    ExtraArgument {
        /// The verb.
        verb: &'static str,
        /// The first unexpected argument.
        arg: String,
    },
    /// A verb is missing its argument.
    MissingArgument {
        /// The verb.
        verb: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// `stats` with an unknown format.
    BadFormat(String),
    /// `pressure` with an unknown level.
    BadLevel(String),
    /// `set` without `=` in an entry.
    BadAssignment(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => write!(f, "empty request (try 'help')"),
            ParseError::TooLong { len } => write!(
                f,
                "request too long: {len} bytes without a newline (the limit is {MAX_REQUEST} \
                 bytes per line)"
            ),
            ParseError::NotUtf8 => write!(f, "request is not valid UTF-8"),
            ParseError::ControlChar { at } => {
                write!(f, "request has a control character at byte {at}")
            }
            ParseError::UnknownVerb(v) => write!(
                f,
                "unknown request '{}' (expected ping, version, help, stats, get, set, \
                 pressure or events)",
                printable(v)
            ),
            ParseError::ExtraArgument { verb, arg } => {
                write!(f, "'{verb}' takes no argument '{}'", printable(arg))
            }
            ParseError::MissingArgument { verb, expected } => {
                write!(f, "'{verb}' needs {expected}")
            }
            ParseError::BadFormat(s) => write!(
                f,
                "unknown stats format '{}' (expected table, json or prometheus)",
                printable(s)
            ),
            ParseError::BadLevel(s) => write!(
                f,
                "unknown pressure level '{}' (expected normal, low, moderate or critical)",
                printable(s)
            ),
            ParseError::BadAssignment(s) => {
                write!(f, "'set' entry '{}' is not name=value", printable(s))
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// At most 64 characters of `s`, for quoting client text in an error.
fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if s.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

/// Parse one request line (with or without its trailing `\n` / `\r\n`).
pub fn parse_request<'a>(line: &'a [u8]) -> Result<Request, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() >= MAX_REQUEST {
        return Err(ParseError::TooLong { len: line.len() });
    }
    let text = std::str::from_utf8(line).map_err(|_| ParseError::NotUtf8)?;
    if let Some(at) = text
        .bytes()
        .position(|b| b != b'\t' && b.is_ascii_control())
    {
        return Err(ParseError::ControlChar { at });
    }
    let text = text.trim_matches([' ', '\t']);
    let (verb, rest) = match text.find([' ', '\t']) {
        Some(i) => (&text[..i], text[i..].trim_start_matches([' ', '\t'])),
        None => (text, ""),
    };
    if verb.is_empty() {
        return Err(ParseError::Empty);
    }
    let mut args = rest.split([' ', '\t']).filter(|a| !a.is_empty());
    // Borrowed words, compared without case: parsing an observation (`stats json`, `ping`)
    // allocates nothing (`docs/design/observer.md`); only what a request keeps is copied.
    let one_arg = |verb: &'static str, args: &mut dyn Iterator<Item = &'a str>| {
        let first = args.next();
        if let Some(extra) = args.next() {
            return Err(ParseError::ExtraArgument {
                verb,
                arg: extra.to_string(),
            });
        }
        Ok(first)
    };
    let is = |w: &str| verb.eq_ignore_ascii_case(w);
    if let Some((word, req)) = [
        ("ping", Request::Ping),
        ("version", Request::Version),
        ("help", Request::Help),
        ("events", Request::Events),
    ]
    .into_iter()
    .find(|(w, _)| is(w))
    {
        if let Some(a) = args.next() {
            return Err(ParseError::ExtraArgument {
                verb: word,
                arg: a.to_string(),
            });
        }
        return Ok(req);
    }
    if is("stats") {
        let f = match one_arg("stats", &mut args)? {
            None => Format::Table,
            Some(w) if w.eq_ignore_ascii_case("table") => Format::Table,
            Some(w) if w.eq_ignore_ascii_case("json") => Format::Json,
            Some(w) if w.eq_ignore_ascii_case("prometheus") || w.eq_ignore_ascii_case("prom") => {
                Format::Prometheus
            }
            Some(w) => return Err(ParseError::BadFormat(w.to_string())),
        };
        return Ok(Request::Stats(f));
    }
    if is("get") {
        return Ok(Request::Get(one_arg("get", &mut args)?.map(str::to_string)));
    }
    if is("set") {
        if rest.is_empty() {
            return Err(ParseError::MissingArgument {
                verb: "set",
                expected: "name=value[,name=value...]",
            });
        }
        // Values never contain white space; a space means a second argument. Entries are
        // checked for '=' here so the error names the request syntax; everything else
        // (names, values, ranges) is the options parser's job.
        let conf = one_arg("set", &mut args)?.unwrap_or_default();
        if let Some(bad) = conf.split(',').next().filter(|e| !e.contains('=')) {
            return Err(ParseError::BadAssignment(bad.to_string()));
        }
        return Ok(Request::Set(conf.to_string()));
    }
    if is("pressure") {
        return match one_arg("pressure", &mut args)? {
            None => Err(ParseError::MissingArgument {
                verb: "pressure",
                expected: "a level: normal, low, moderate or critical",
            }),
            Some(w) => w
                .parse::<Level>()
                .map(Request::Pressure)
                .map_err(|_| ParseError::BadLevel(w.to_string())),
        };
    }
    Err(ParseError::UnknownVerb(verb.to_string()))
}

/// A reply as the client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `ok <len>\n<payload>`.
    Ok(String),
    /// `err <message>\n`.
    Err(String),
}

/// Frame a successful reply.
pub fn encode_ok(payload: &str) -> Vec<u8> {
    let mut out = format!("ok {}\n", payload.len()).into_bytes();
    out.extend_from_slice(payload.as_bytes());
    out
}

/// Frame an error reply. Line breaks in `message` become `; ` so the reply stays one line.
pub fn encode_err(message: &str) -> Vec<u8> {
    let mut one_line = String::with_capacity(message.len() + 5);
    one_line.push_str("err ");
    let mut first = true;
    for part in message.split(['\n', '\r']).filter(|p| !p.is_empty()) {
        if !first {
            one_line.push_str("; ");
        }
        first = false;
        one_line.push_str(part);
    }
    if first {
        one_line.push_str("unspecified error");
    }
    one_line.push('\n');
    one_line.into_bytes()
}

/// Why bytes from a server are not a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// More bytes are needed (the reply is not complete yet).
    Incomplete,
    /// The bytes are not a reply; the text says why.
    Malformed(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Incomplete => write!(f, "the reply ended early"),
            ReplyError::Malformed(m) => write!(f, "malformed reply: {m}"),
        }
    }
}

/// Read one reply from the start of `buf`; on success also returns how many bytes it used.
pub fn decode_reply(buf: &[u8]) -> Result<(Reply, usize), ReplyError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > 64 && !buf.starts_with(b"err ") {
            return Err(ReplyError::Malformed("no header line".into()));
        }
        return Err(ReplyError::Incomplete);
    };
    let head = std::str::from_utf8(&buf[..nl])
        .map_err(|_| ReplyError::Malformed("header is not UTF-8".into()))?;
    if let Some(msg) = head.strip_prefix("err ") {
        return Ok((Reply::Err(msg.to_string()), nl + 1));
    }
    let Some(len) = head.strip_prefix("ok ") else {
        return Err(ReplyError::Malformed(format!(
            "header '{}' is neither 'ok <len>' nor 'err <message>'",
            printable(head)
        )));
    };
    // Canonical decimal only (what `encode_ok` writes): digits, no sign, no leading zero.
    let canonical = !len.is_empty()
        && len.len() <= 20
        && len.bytes().all(|b| b.is_ascii_digit())
        && (len == "0" || !len.starts_with('0'));
    let len: usize = len
        .parse()
        .ok()
        .filter(|_| canonical)
        .ok_or_else(|| ReplyError::Malformed(format!("bad length '{}'", printable(len))))?;
    if len > MAX_REPLY {
        return Err(ReplyError::Malformed(format!(
            "payload of {len} bytes exceeds the {MAX_REPLY}-byte limit"
        )));
    }
    let body = &buf[nl + 1..];
    if body.len() < len {
        return Err(ReplyError::Incomplete);
    }
    let payload = std::str::from_utf8(&body[..len])
        .map_err(|_| ReplyError::Malformed("payload is not UTF-8".into()))?;
    Ok((Reply::Ok(payload.to_string()), nl + 1 + len))
}

/// One request verb, for `help`, the ABI documentation and the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verb {
    /// The verb.
    pub name: &'static str,
    /// Its arguments, as in `help`.
    pub args: &'static str,
    /// One line for `help`.
    pub summary: &'static str,
    /// What the `ok` payload holds.
    pub reply: &'static str,
    /// An example line that [`parse_request`] accepts.
    pub example: &'static str,
}

/// Every verb, in `help` order.
pub const VERBS: &[Verb] = &[
    Verb {
        name: "ping",
        args: "",
        summary: "check that the process answers",
        reply: "pong and a newline.",
        example: "ping",
    },
    Verb {
        name: "version",
        args: "",
        summary: "library and protocol version, pid",
        reply: "'ebbtide <library version> protocol <protocol version> pid <pid>' and a newline.",
        example: "version",
    },
    Verb {
        name: "stats",
        args: "[table|json|prometheus]",
        summary: "statistics (default table)",
        reply: "the statistics snapshot in that format: the vmstat -z style table, the JSON \
                object (one line, then a newline; fields in docs/ABI/testing/stats-*), or the \
                Prometheus text exposition format 0.0.4. 'prom' is accepted for prometheus.",
        example: "stats json",
    },
    Verb {
        name: "get",
        args: "[NAME]",
        summary: "one tunable's value, or all tunables",
        reply: "with NAME: the tunable's canonical value and a newline (see ebbtide.conf); \
                without: one line per tunable, 'name = value (default D; range R; run time|\
                start-up only) summary'. An unknown NAME is an error naming close names.",
        example: "get squeeze_ms",
    },
    Verb {
        name: "set",
        args: "NAME=VALUE[,NAME=VALUE...]",
        summary: "set tunables, all or none",
        reply: "one 'name=value' line per tunable set, with the canonical value. The text is \
                one batch in the EBBTIDE_CONF syntax (ebbtide.conf), without white space: if \
                any entry is wrong nothing changes and the error lists every problem, each \
                prefixed with 'control socket entry N'. Setting control_socket=false stops \
                the server after this reply.",
        example: "set squeeze_ms=20,max_cached_bytes=64M",
    },
    Verb {
        name: "pressure",
        args: "normal|low|moderate|critical",
        summary: "inject a pressure level",
        reply: "'injected <level>: released <bytes> bytes' and a newline. What each level \
                does: see ebbtide::control::inject (none also means normal).",
        example: "pressure moderate",
    },
    Verb {
        name: "events",
        args: "",
        summary: "recent control events",
        reply: "the last 64 control events, oldest first, one per line: '<unix time in ms> \
                <kind> <detail>', kind one of start, stop, cleanup, set, pressure, refused, \
                error.",
        example: "events",
    },
    Verb {
        name: "help",
        args: "",
        summary: "this list",
        reply: "one line per request.",
        example: "help",
    },
];

/// The text of `help`.
pub fn help_text() -> String {
    let mut out = format!(
        "ebbtide control protocol {PROTOCOL_VERSION}: one request per line, at most \
         {MAX_REQUEST} bytes\n"
    );
    for v in VERBS {
        let head = format!("{} {}", v.name, v.args);
        out.push_str(&format!("{:<40} {}\n", head.trim_end(), v.summary));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_verb() {
        assert_eq!(parse_request(b"ping\n"), Ok(Request::Ping));
        assert_eq!(parse_request(b"  PING \r\n"), Ok(Request::Ping));
        assert_eq!(parse_request(b"version"), Ok(Request::Version));
        assert_eq!(parse_request(b"stats"), Ok(Request::Stats(Format::Table)));
        assert_eq!(
            parse_request(b"stats\tJSON"),
            Ok(Request::Stats(Format::Json))
        );
        assert_eq!(
            parse_request(b"stats prometheus"),
            Ok(Request::Stats(Format::Prometheus))
        );
        assert_eq!(parse_request(b"get"), Ok(Request::Get(None)));
        assert_eq!(
            parse_request(b"get squeeze_ms"),
            Ok(Request::Get(Some("squeeze_ms".into())))
        );
        assert_eq!(
            parse_request(b"set squeeze_ms=20,sources=psi,cgroup1"),
            Ok(Request::Set("squeeze_ms=20,sources=psi,cgroup1".into()))
        );
        assert_eq!(
            parse_request(b"pressure Critical"),
            Ok(Request::Pressure(Level::Critical))
        );
        assert_eq!(parse_request(b"events"), Ok(Request::Events));
        assert_eq!(parse_request(b"help"), Ok(Request::Help));
    }

    #[test]
    fn refuses_with_clear_messages() {
        let e = |l: &[u8]| parse_request(l).unwrap_err().to_string();
        assert_eq!(e(b"\n"), "empty request (try 'help')");
        assert!(e(b"frobnicate x").starts_with("unknown request 'frobnicate'"));
        assert_eq!(e(b"ping now"), "'ping' takes no argument 'now'");
        assert_eq!(e(b"get a b"), "'get' takes no argument 'b'");
        assert!(e(b"stats xml").contains("'xml' (expected table, json or prometheus)"));
        assert!(e(b"pressure medium").contains("'medium'"));
        assert!(e(b"pressure").contains("needs a level"));
        assert!(e(b"set").contains("needs name=value"));
        assert_eq!(
            e(b"set squeeze_ms"),
            "'set' entry 'squeeze_ms' is not name=value"
        );
        assert_eq!(e(b"ping\x01"), "request has a control character at byte 4");
        assert_eq!(e(b"\xff"), "request is not valid UTF-8");
        assert!(e(&[b'a'; MAX_REQUEST]).starts_with("request too long"));
    }

    #[test]
    fn every_verb_is_parsed_and_listed() {
        for v in VERBS {
            let r = parse_request(v.example.as_bytes()).unwrap();
            assert!(r.to_line().starts_with(v.name), "{v:?}");
            assert!(help_text().contains(v.summary));
        }
        assert_eq!(VERBS.len(), 8);
    }

    #[test]
    fn to_line_round_trips() {
        for r in [
            Request::Ping,
            Request::Version,
            Request::Help,
            Request::Events,
            Request::Stats(Format::Prometheus),
            Request::Get(None),
            Request::Get(Some("checked".into())),
            Request::Set("a=1,b=2".into()),
            Request::Pressure(Level::Normal),
        ] {
            assert_eq!(parse_request(r.to_line().as_bytes()), Ok(r));
        }
    }

    #[test]
    fn replies_round_trip() {
        let mut buf = encode_ok("héllo\nworld");
        buf.extend(encode_err("bad\nthing"));
        let (r, n) = decode_reply(&buf).unwrap();
        assert_eq!(r, Reply::Ok("héllo\nworld".into()));
        let (r2, n2) = decode_reply(&buf[n..]).unwrap();
        assert_eq!(r2, Reply::Err("bad; thing".into()));
        assert_eq!(n + n2, buf.len());
        assert_eq!(decode_reply(b"ok 5\nabc"), Err(ReplyError::Incomplete));
        assert!(matches!(
            decode_reply(b"huh\n"),
            Err(ReplyError::Malformed(_))
        ));
        assert_eq!(encode_err(""), b"err unspecified error\n");
    }
}
