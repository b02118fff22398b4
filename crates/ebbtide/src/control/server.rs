//! The server loop: one thread, one `poll` over the listening socket, a wake pipe and every
//! connection. All sockets are nonblocking, so no single client can hold the thread:
//!
//! * a request line must be complete within [`READ_TIMEOUT`] of the connection (or of the
//!   previous reply); otherwise the client gets `err timeout ...` and is closed;
//! * a line longer than [`MAX_REQUEST`] gets `err request too long ...` and the connection is
//!   closed without reading the rest;
//! * a reply the client does not read within [`WRITE_TIMEOUT`] closes the connection; while a
//!   reply is pending, nothing more is read from that client (so its replies cannot pile up);
//! * at most [`MAX_CONNECTIONS`] clients at once; one more gets `err busy ...` and is closed.
//!
//! Requests are executed on this thread ([`super::handler::handle`]); the work is bounded and
//! does not depend on the client. The allocator's threads never wait for this thread.
//!
//! Every descriptor is a [`LibFd`]: out of the program's way, and checked every round (at
//! least once a second) — a program may close descriptors it did not open. A lost connection
//! is dropped; a lost listener or wake pipe ends the loop with [`Exit::Lost`], and the control
//! thread starts the server again (`super::restart_after_loss`).
//!
//! Memory: a round of the loop and an observation (`ping`, `version`, `stats json`, `events`)
//! take nothing from the program's allocator — the poll set is on the stack, the connection
//! table was sized at start ([`MAX_CONNECTIONS`]), each connection's request and reply bytes
//! are [`MapBuf`]s mapped from the OS, and a reply's buffer is unmapped once it is written
//! (`docs/design/observer.md`).

use super::buffer::MapBuf;
use super::events;
use super::handler;
use super::peer;
use super::protocol::{encode_err, parse_request, MAX_REQUEST};
use ebbtide_pressure::libfd::LibFd;
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Time a client has to send a complete request line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// Time a client has to read a reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Clients served at once.
pub const MAX_CONNECTIONS: usize = 32;

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The wake pipe said stop.
    Stopped,
    /// The listener or the wake pipe is not the server's any more (the program closed it).
    Lost(String),
}

struct Conn {
    stream: LibFd,
    /// Bytes read and not yet handled (at most [`MAX_REQUEST`]).
    inbuf: MapBuf,
    /// The reply being written, from `out_pos`; unmapped when written.
    out: MapBuf,
    out_pos: usize,
    deadline: Instant,
    /// Close once `out` is written.
    closing: bool,
    /// The peer shut down its write side.
    eof: bool,
}

/// Room left before a payload for its header, `ok <len>\n` (`len` has at most 20 digits).
const HEADER_ROOM: usize = 24;

impl Conn {
    fn new(stream: LibFd, now: Instant) -> Conn {
        Conn {
            stream,
            inbuf: MapBuf::new(),
            out: MapBuf::new(),
            out_pos: 0,
            deadline: now + READ_TIMEOUT,
            closing: false,
            eof: false,
        }
    }

    fn writing(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Queue `bytes` as the whole reply. Without memory for it the connection closes.
    fn queue(&mut self, bytes: &[u8], now: Instant) {
        self.out.clear();
        if !self.out.push(bytes) {
            self.closing = true;
        }
        self.out_pos = 0;
        self.deadline = now + WRITE_TIMEOUT;
    }

    /// Execute `line` and queue its reply: the payload is written straight into `out` after
    /// room for its header, which is then written in front of it.
    fn answer(&mut self, line: &[u8], now: Instant) {
        let req = match parse_request(line) {
            Ok(req) => req,
            Err(e) => return self.queue(&encode_err(&e.to_string()), now),
        };
        self.out.clear();
        if !self.out.push(&[b' '; HEADER_ROOM]) {
            // No memory for a reply: say nothing more and close.
            self.out.release();
            self.closing = true;
            return;
        }
        match handler::handle(&req, &mut self.out) {
            Ok(()) => {
                let len = self.out.len() - HEADER_ROOM;
                let mut head = [0u8; HEADER_ROOM];
                let n = ok_header(len, &mut head);
                self.out.overwrite(HEADER_ROOM - n, &head[..n]);
                self.out_pos = HEADER_ROOM - n;
                self.deadline = now + WRITE_TIMEOUT;
            }
            Err(msg) => self.queue(&encode_err(&msg), now),
        }
    }

    /// Handle the next complete line in `inbuf`, if any; returns whether one was handled.
    fn next_request(&mut self, now: Instant) -> bool {
        let (end, take) = match self.inbuf.as_slice().iter().position(|&b| b == b'\n') {
            Some(nl) => (nl + 1, nl + 1),
            None if self.eof && !self.inbuf.is_empty() => (self.inbuf.len(), self.inbuf.len()),
            None => {
                if self.inbuf.len() >= MAX_REQUEST {
                    let msg = format!(
                        "request too long: {} bytes without a newline (the limit is \
                         {MAX_REQUEST} bytes per line); closing the connection",
                        self.inbuf.len()
                    );
                    self.queue(&encode_err(&msg), now);
                    self.inbuf.release();
                    self.closing = true;
                    return true;
                }
                return false;
            }
        };
        // The line is moved out of `inbuf` onto the stack (it is at most MAX_REQUEST bytes),
        // so that the handler may borrow the connection.
        let mut line = [0u8; MAX_REQUEST];
        let n = end.min(MAX_REQUEST);
        line[..n].copy_from_slice(&self.inbuf.as_slice()[..n]);
        self.inbuf.consume(take);
        self.answer(&line[..n], now);
        true
    }
}

/// `ok <len>\n` into `head`; returns its length.
fn ok_header(len: usize, head: &mut [u8; HEADER_ROOM]) -> usize {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = len;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let d = &digits[i..];
    head[..3].copy_from_slice(b"ok ");
    head[3..3 + d.len()].copy_from_slice(d);
    head[3 + d.len()] = b'\n';
    4 + d.len()
}

/// What the thread owns while it runs.
pub(crate) struct Server {
    listener: LibFd,
    wake: LibFd,
    own_uid: u32,
    conns: Vec<Conn>,
}

impl Server {
    pub(crate) fn new(listener: LibFd, wake: LibFd) -> io::Result<Server> {
        listener.set_nonblocking()?;
        Ok(Server {
            listener,
            wake,
            own_uid: super::path::euid(),
            // Sized once: accepting a client never grows it.
            conns: Vec::with_capacity(MAX_CONNECTIONS),
        })
    }

    /// Serve until the wake pipe says stop (a byte arrives or the write end closes), or the
    /// listener or wake pipe is lost.
    pub(crate) fn run(mut self) -> Exit {
        let mut next_alone_check = Instant::now() + Duration::from_secs(1);
        let exit = loop {
            let now = Instant::now();
            if now >= next_alone_check {
                next_alone_check = now + Duration::from_secs(1);
                // Every other thread has ended: end too, so that the process ends as it would
                // without us (see `crate::lifetime`).
                if crate::lifetime::alone() {
                    break Exit::Stopped;
                }
            }
            if let Err(lost) = self.listener.check().and_then(|()| self.wake.check()) {
                break Exit::Lost(format!("{lost} (listener or wake pipe)"));
            }
            // A connection the program closed is dropped (its number is not touched again).
            self.conns.retain(|c| c.stream.check().is_ok());
            let mut fds = [pollfd(-1, 0); 2 + MAX_CONNECTIONS];
            fds[0] = pollfd(self.wake.raw(), libc::POLLIN);
            fds[1] = pollfd(self.listener.raw(), libc::POLLIN);
            for (slot, c) in fds[2..].iter_mut().zip(&self.conns) {
                let ev = if c.writing() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                *slot = pollfd(c.stream.raw(), ev);
            }
            let nfds = 2 + self.conns.len();
            let timeout = self
                .conns
                .iter()
                .map(|c| c.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let ms = timeout.as_millis().clamp(1, 1000) as libc::c_int;
            // SAFETY: `fds` is a valid, initialised array of at least `nfds` pollfd structs
            // (`conns` never holds more than MAX_CONNECTIONS) that stays alive (and unmoved)
            // for the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds as libc::nfds_t, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                events::record("error", &format!("poll failed: {e}; control socket stops"));
                break Exit::Stopped;
            }
            if (fds[0].revents | fds[1].revents) & libc::POLLNVAL != 0 {
                // Closed while we slept: the check at the top of the loop names it.
                continue;
            }
            if fds[0].revents != 0 {
                break Exit::Stopped;
            }
            let now = Instant::now();
            // Connections first (their indexes are fds[2..]), then accept new ones.
            // In place, in order: `retain_mut` visits each connection once, front to back.
            let mut i = 2;
            self.conns.retain_mut(|c| {
                let rev = fds[i].revents;
                i += 1;
                service(c, rev, now)
            });
            if fds[1].revents & libc::POLLIN != 0 {
                self.accept_all(now);
            }
        };
        for c in self.conns.drain(..) {
            // Best effort for a reply queued just before the stop (e.g. the reply to
            // `set control_socket=false`): one nonblocking write, then close.
            if c.writing() && c.stream.check().is_ok() {
                let _ = (&c.stream).write(&c.out.as_slice()[c.out_pos..]);
            }
        }
        exit
    }

    fn accept_all(&mut self, now: Instant) {
        loop {
            let stream = match accept(&self.listener) {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: leave the client in the backlog, try next round.
                    events::record("error", &format!("accept failed: {e}"));
                    return;
                }
            };
            let refusal = match peer::peer_cred(stream.raw()) {
                Err(e) => Some(format!(
                    "permission denied: cannot read peer credentials: {e}"
                )),
                Ok(cred) => match peer::check(cred, self.own_uid) {
                    Err(msg) => {
                        events::record("refused", &msg);
                        Some(msg)
                    }
                    Ok(()) if self.conns.len() >= MAX_CONNECTIONS => Some(format!(
                        "busy: {MAX_CONNECTIONS} clients are connected already; try again"
                    )),
                    Ok(()) => None,
                },
            };
            match refusal {
                Some(msg) => {
                    // One nonblocking attempt: a fresh socket buffer always takes one line.
                    let _ = (&stream).write(&encode_err(&msg));
                }
                // Below MAX_CONNECTIONS (checked above): within the capacity reserved at start.
                None => self.conns.push(Conn::new(stream, now)),
            }
        }
    }
}

/// One nonblocking, close-on-exec connection from `listener`, as a library descriptor.
fn accept(listener: &LibFd) -> io::Result<LibFd> {
    // SAFETY: null address pointers are allowed (the peer's address is not wanted).
    let fd = unsafe {
        libc::accept4(
            listener.raw(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by accept4 and is owned by nobody else.
    unsafe { LibFd::adopt(fd) }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Advance one connection; false when it is to be closed (dropping it closes its socket and
/// unmaps its buffers).
fn service(c: &mut Conn, rev: libc::c_short, now: Instant) -> bool {
    if c.writing() {
        if rev & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0 {
            match (&c.stream).write(&c.out.as_slice()[c.out_pos..]) {
                Ok(n) => c.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if c.writing() {
            return now < c.deadline;
        }
        // Reply complete: its pages go back to the OS now, not when the client leaves.
        c.out.release();
        c.out_pos = 0;
        if c.closing {
            return false;
        }
        c.deadline = now + READ_TIMEOUT;
        // A pipelined request may already be buffered.
        if c.next_request(now) {
            return true;
        }
        return !c.eof;
    }
    if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
        let room = MAX_REQUEST - c.inbuf.len().min(MAX_REQUEST);
        let mut buf = [0u8; MAX_REQUEST];
        match (&c.stream).read(&mut buf[..room.max(1)]) {
            Ok(0) => c.eof = true,
            Ok(n) => {
                if !c.inbuf.push(&buf[..n]) {
                    // No memory for the request: nothing can be answered.
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
        if c.next_request(now) {
            return true;
        }
        if c.eof {
            return false;
        }
    }
    if now >= c.deadline {
        let msg = if c.inbuf.is_empty() {
            format!(
                "timeout: no request within {} ms; closing the connection",
                READ_TIMEOUT.as_millis()
            )
        } else {
            format!(
                "timeout: request line not finished within {} ms ({} bytes without a \
                 newline); closing the connection",
                READ_TIMEOUT.as_millis(),
                c.inbuf.len()
            )
        };
        let _ = (&c.stream).write(&encode_err(&msg));
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_encode_ok_s() {
        for len in [0, 7, 10, 4096, usize::MAX] {
            let mut head = [0u8; HEADER_ROOM];
            let n = ok_header(len, &mut head);
            assert_eq!(&head[..n], format!("ok {len}\n").as_bytes());
        }
    }
}
