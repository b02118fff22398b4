//! The control socket: statistics, tunables and pressure injection for tools such as the
//! `ebbtide` command, over a Unix stream socket private to the user.
//!
//! Off by default. It starts with [`start`] or when the `control_socket` tunable turns on
//! (`EBBTIDE_CONTROL_SOCKET=1` read by [`crate::options::init_from_env`], `options::set`, or a
//! `set` request on another channel), and stops with [`stop`] or when the tunable turns off.
//! The subscription to the tunable is made by a load-time constructor of this module, so it
//! exists before `main`; [`install`] does the same for callers that prefer to be explicit.
//!
//! # Files
//!
//! | file | concept |
//! |---|---|
//! | [`abi`] | the ABI entries of the socket (generated `docs/ABI/testing/control/socket`) |
//! | [`path`] | where sockets live (`$XDG_RUNTIME_DIR/ebbtide/<pid>.sock`, else `/tmp/ebbtide-<uid>/<pid>.sock`), directory checks, stale sockets |
//! | [`peer`] | `SO_PEERCRED` and the rule: same uid or root |
//! | [`protocol`] | request parser and reply framing (pure; fuzzed) |
//! | `handler` | executing one request |
//! | [`inject`] | what `pressure <level>` does (one function to redirect to the pressure layer) |
//! | [`events`] | the recent events ring |
//! | `server` | the poll loop: timeouts, size bounds, connection limit |
//! | `fdreg` | the server's descriptors, closed in a forked child |
//!
//! The protocol is documented in `docs/control-protocol.md` and in
//! `docs/ABI/testing/control/socket`.
//!
//! # Isolation from the allocator
//!
//! The server is one thread of its own. It never runs on an allocating thread, the allocator
//! never waits for it, and it holds no lock while it waits for a client: requests are read
//! and replies written with nonblocking I/O under a 1 s read / 5 s write deadline. The only
//! locks it takes are those of the layers it calls while executing a request (the zone
//! registry while listing zones, the options writers' lock, the reclaim lock), each for a
//! bounded time that does not depend on the client.
//!
//! # Process life
//!
//! * Exit: the socket is removed by an `atexit` handler (and by [`stop`]); a socket left by a
//!   killed process is removed by the next server that starts in the same directory, and
//!   `ebbtide ls` skips it.
//! * Fork: a `pthread_atfork` child handler closes the inherited listener and connections; the
//!   child does not serve the parent's socket. A child that wants its own calls [`start`]
//!   (it gets `<child pid>.sock`).

pub mod events;
mod fdreg;
mod handler;
pub mod inject;
pub mod path;
pub mod peer;
pub mod protocol;
mod server;

pub use server::{MAX_CONNECTIONS, READ_TIMEOUT, WRITE_TIMEOUT};

use crate::options::{self, Tunable};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::thread::JoinHandle;

/// A running server, owned by the process that started it.
struct Running {
    pid: u32,
    path: PathBuf,
    /// Write end of the wake pipe: one byte (or closing it) stops the thread.
    wake_tx: OwnedFd,
    thread: JoinHandle<()>,
}

static STATE: Mutex<Option<Running>> = Mutex::new(None);
/// The socket to remove at exit, with the pid that created it.
static EXIT_PATH: Mutex<Option<(u32, PathBuf)>> = Mutex::new(None);
static PROCESS_HOOKS: Once = Once::new();
static SUBSCRIBE: Once = Once::new();

thread_local! {
    /// Set on the control thread: a `set control_socket=false` request arrives there, and the
    /// thread cannot join itself.
    static ON_CONTROL_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// The guarded data is replaced whole, never left half-updated: poisoning says nothing.
use ebbtide_core::lock;

/// Subscribe to the `control_socket` tunable (idempotent), and start the server if the
/// tunable is already on. Called by this module's load-time constructor; public for callers
/// that build without constructors or want to be explicit.
pub fn install() {
    SUBSCRIBE.call_once(|| options::subscribe(on_tunable_change));
    if options::get_bool(Tunable::ControlSocket) {
        let _ = start_logged();
    }
}

fn on_tunable_change(t: Tunable, _value: u64) {
    if t != Tunable::ControlSocket {
        return;
    }
    // Act on the current value, not the one passed in: concurrent setters may interleave
    // their callbacks (see `options::subscribe`).
    if options::get_bool(Tunable::ControlSocket) {
        let _ = start_logged();
    } else {
        stop();
    }
}

fn start_logged() -> io::Result<PathBuf> {
    let r = start();
    if let Err(e) = &r {
        eprintln!("ebbtide: control socket not started: {e}");
    }
    r
}

/// Load-time constructor: subscribe to the tunable before `main` runs (allocates one small
/// vector entry; starts nothing).
extern "C" fn constructor() {
    SUBSCRIBE.call_once(|| options::subscribe(on_tunable_change));
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn at_exit() {
    // Never block at exit: if another thread holds the lock, skip (the next server in this
    // directory removes the stale socket).
    if let Ok(g) = EXIT_PATH.try_lock() {
        if let Some((pid, path)) = g.as_ref() {
            if *pid == std::process::id() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn atfork_child() {
    fdreg::close_all_in_child();
}

fn install_process_hooks() {
    PROCESS_HOOKS.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that stays valid for the life of the
        // process (it is a static function). Failure (ENOMEM) only loses the cleanup.
        unsafe {
            libc::atexit(at_exit);
        }
        // The runtime's one fork handler runs `atfork_child` in the child: it only does atomic
        // operations and `close`, which are async-signal-safe as a child handler requires.
        crate::threads::on_fork_child(atfork_child);
    });
}

/// If the state belongs to the parent of a fork, leak it: its descriptors were closed by the
/// child handler and its thread does not exist here, so it must neither be joined nor have
/// its descriptors closed again (their numbers may be reused by now).
fn forget_after_fork(state: &mut Option<Running>) {
    if state.as_ref().is_some_and(|r| r.pid != std::process::id()) {
        std::mem::forget(state.take());
    }
}

/// Start the server (idempotent) and return the socket's path.
///
/// Picks the first usable directory of [`path::candidate_dirs`], creating it 0700 and checking
/// it, removes stale sockets of dead processes there, binds `<pid>.sock` with mode 0600 and
/// starts the control thread. The error names the directory or call that failed.
pub fn start() -> io::Result<PathBuf> {
    let mut state = lock(&STATE);
    forget_after_fork(&mut state);
    if let Some(r) = state.as_ref() {
        return Ok(r.path.clone());
    }
    install_process_hooks();
    let pid = std::process::id();
    let uid = path::euid();
    let mut problems = Vec::new();
    let mut dir = None;
    for d in path::candidate_dirs(std::env::var_os("XDG_RUNTIME_DIR"), uid) {
        match path::ensure_private_dir(&d, uid) {
            Ok(()) => {
                dir = Some(d);
                break;
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    let Some(dir) = dir else {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("no usable socket directory: {}", problems.join("; ")),
        ));
    };
    for p in path::remove_stale(&dir) {
        events::record("cleanup", &format!("removed stale socket {}", p.display()));
    }
    let sock = path::socket_path_in(&dir, pid);
    // A socket under our own pid can only be a leftover of an earlier process with this pid
    // (we are not serving: the state is empty).
    if std::fs::symlink_metadata(&sock).is_ok() {
        std::fs::remove_file(&sock).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot remove {}: {e}", sock.display()))
        })?;
    }
    let listener = bind_private(&sock)?;
    let (wake_rx, wake_tx) = pipe().map_err(|e| {
        let _ = std::fs::remove_file(&sock);
        io::Error::new(e.kind(), format!("control socket wake pipe: {e}"))
    })?;
    fdreg::remember(listener.as_raw_fd());
    fdreg::remember(wake_rx.as_raw_fd());
    fdreg::remember(wake_tx.as_raw_fd());
    let listener_fd = listener.as_raw_fd();
    let wake_rx_fd = wake_rx.as_raw_fd();
    let server = server::Server::new(listener, wake_rx).inspect_err(|_| {
        let _ = std::fs::remove_file(&sock);
    })?;
    let thread = crate::lifetime::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("ebbtide-control".into())
            .spawn(move || {
                ON_CONTROL_THREAD.with(|c| c.set(true));
                server.run();
                fdreg::forget(listener_fd);
                fdreg::forget(wake_rx_fd);
            })
    })
    .map_err(|e| {
        let _ = std::fs::remove_file(&sock);
        io::Error::new(e.kind(), format!("cannot start the control thread: {e}"))
    })?;
    *lock(&EXIT_PATH) = Some((pid, sock.clone()));
    events::record("start", &format!("serving {}", sock.display()));
    *state = Some(Running {
        pid,
        path: sock.clone(),
        wake_tx,
        thread,
    });
    Ok(sock)
}

/// Stop the server (idempotent): wake and join the thread, close every connection, remove
/// the socket file.
///
/// The state lock is released before the join: the control thread may be finishing a
/// request whose tunable callback calls [`start`] or [`stop`] itself, and must not wait for
/// us while we wait for it.
pub fn stop() {
    let (path, thread) = {
        let mut state = lock(&STATE);
        forget_after_fork(&mut state);
        let Some(r) = state.take() else {
            return;
        };
        fdreg::forget(r.wake_tx.as_raw_fd());
        // Closing the write end makes the read end readable (EOF) and wakes the poll.
        drop(r.wake_tx);
        // Removed now, under the lock, so that a server started after the lock is released
        // (same pid, same path) keeps its socket and its exit cleanup.
        let _ = std::fs::remove_file(&r.path);
        let mut exit = lock(&EXIT_PATH);
        if exit.as_ref().is_some_and(|(_, p)| p == &r.path) {
            *exit = None;
        }
        (r.path, r.thread)
    };
    if ON_CONTROL_THREAD.with(|c| c.get()) {
        // Stopping from a request: the loop ends after this reply (sent best effort); the
        // thread cannot join itself.
        drop(thread);
    } else {
        let _ = thread.join();
    }
    events::record("stop", &format!("removed {}", path.display()));
}

/// The socket being served by this process, if any.
pub fn socket_path() -> Option<PathBuf> {
    let mut state = lock(&STATE);
    forget_after_fork(&mut state);
    state.as_ref().map(|r| r.path.clone())
}

/// Whether this process serves a control socket.
pub fn is_running() -> bool {
    socket_path().is_some()
}

/// Bind `path` and make it mode 0600. The directory (0700, ours) keeps everybody else out
/// between the bind and the chmod.
fn bind_private(path: &Path) -> io::Result<UnixListener> {
    let l = UnixListener::bind(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {}: {e}", path.display())))?;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(io::Error::new(
            e.kind(),
            format!("cannot chmod 0600 {}: {e}", path.display()),
        ));
    }
    Ok(l)
}

/// A close-on-exec pipe: (read end nonblocking, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is valid for writing two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
