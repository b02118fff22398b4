//! ABI entries of the control socket, generated from the code (the verb table
//! [`protocol::VERBS`] and the limits), in the format of `docs/ABI/README`.
//!
//! The file is `docs/ABI/testing/control/socket`; `tests/all/control_abi.rs` checks it against
//! [`file()`] and rewrites it with `EBBTIDE_BLESS=1`. (It sits in a subdirectory because
//! `tests/all/abi_docs.rs` refuses flat files under `testing/` that
//! [`super::expected_files`] does not generate; adding [`file()`] to that list
//! would let one test cover both.)

use super::{Entry, File};
use crate::control::protocol::{self, MAX_REQUEST, PROTOCOL_VERSION};
use crate::control::{MAX_CONNECTIONS, READ_TIMEOUT, WRITE_TIMEOUT};

/// An entry of the control socket: its user is the `ebbtide` command.
fn entry(what: String, description: String) -> Entry {
    super::entry(what, description, "ebbtide command (crates/ebbtide-cli).")
}

fn socket_entry() -> Entry {
    entry(
        "ebbtide.control.socket (Unix stream socket; tunable control_socket, API control::start)"
            .into(),
        format!(
            "A Unix stream socket through which tools read statistics, read and set \
             tunables and inject pressure levels. Off by default; on with the tunable \
             control_socket (EBBTIDE_CONTROL_SOCKET=1, options::set, or a set request) or \
             ebbtide::control::start(); off with control_socket=false or \
             ebbtide::control::stop().\n\n\
             Path: $XDG_RUNTIME_DIR/ebbtide/<pid>.sock when XDG_RUNTIME_DIR is an absolute \
             path and that directory passes the checks, else /tmp/ebbtide-<uid>/<pid>.sock. \
             The directory is created with mode 0700 and used only if it is a real \
             directory (not a symbolic link) owned by the process's effective uid with no \
             group or other access. The socket has mode 0600. Sockets of dead processes \
             in the directory are removed when a server starts; the socket is removed by \
             stop() and at process exit. A forked child does not serve its parent's \
             socket.\n\n\
             Access: every connection is checked with SO_PEERCRED: only the same uid and \
             root are served; others get 'err permission denied: ...' and are closed.\n\n\
             Framing: one request per line, at most {MAX_REQUEST} bytes including the \
             newline (a CR before it is ignored), UTF-8 without control characters other \
             than tab; several requests may be sent on one connection and are answered in \
             order. Each reply is either 'ok <len>' newline followed by exactly <len> bytes \
             of UTF-8 payload, or 'err <message>' newline (one line). A malformed request \
             gets an err reply and the connection stays open.\n\n\
             Limits: a request line must be complete within {} ms of the connection or of \
             the previous reply, else 'err timeout: ...' and the connection is closed; a \
             longer line gets 'err request too long: ...' and the connection is closed; a \
             reply not read within {} ms closes the connection; at most {MAX_CONNECTIONS} \
             clients at once, one more gets 'err busy: ...'.\n\n\
             Protocol version: {PROTOCOL_VERSION} (reported by version); bumped when a \
             request changes meaning or the framing changes, not when requests are added. \
             The exact wording of messages is not part of the ABI; the 'ok'/'err' framing \
             and the payload formats are.",
            READ_TIMEOUT.as_millis(),
            WRITE_TIMEOUT.as_millis()
        ),
    )
}

/// Every entry: the socket, then one per request verb.
pub fn entries() -> Vec<Entry> {
    let mut v = vec![socket_entry()];
    for verb in protocol::VERBS {
        let syntax = format!("{} {}", verb.name, verb.args);
        v.push(entry(
            format!("ebbtide.control.{} (control socket request)", verb.name),
            format!(
                "Request: {}\n\nExample: {}\n\nReply: {}",
                syntax.trim_end(),
                verb.example,
                verb.reply
            ),
        ));
    }
    v
}

/// The generated file (`path` relative to `docs/ABI/`).
pub fn file() -> File {
    File {
        path: "testing/control/socket".into(),
        entries: entries(),
    }
}
