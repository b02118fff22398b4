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
//! | `server` | the poll loop: timeouts, size bounds, connection limit, descriptors the program closed |
//! | `buffer` | request and reply bytes in mappings of their own, not the program's allocator |
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
//! An observation (`ping`, `version`, `stats json`, `events`) takes nothing from the global
//! allocator, which in a malloc process is the program's own zones: request and reply bytes
//! are mapped from the OS (`buffer`), the statistics written straight into the reply
//! ([`crate::stats::write_json`]). Watching a program does not show as its requests or its
//! footprint (`docs/design/observer.md`).
//!
//! # Process life
//!
//! * Exit: the socket is removed by an `atexit` handler (and by [`stop`]); a socket left by a
//!   killed process is removed by the next server that starts in the same directory, and
//!   `ebbtide ls` skips it.
//! * Fork: the runtime's fork child handler closes the inherited listener and connections
//!   (they are library descriptors, `ebbtide_pressure::libfd`); the child does not serve the
//!   parent's socket. A child that wants its own calls [`start`] (it gets `<child pid>.sock`).
//! * Descriptors: the listener, the wake pipe and every connection sit at high numbers, out of
//!   the program's way. A program that closes them (`closefrom(3)` in a daemon) ends the loop;
//!   the control thread records why and starts the server again a second later, at the same
//!   path.

mod buffer;
pub mod events;
mod handler;
pub mod inject;
pub mod path;
pub mod peer;
pub mod protocol;
mod server;

pub use server::{MAX_CONNECTIONS, READ_TIMEOUT, WRITE_TIMEOUT};

use crate::options::{self, Tunable};
use ebbtide_pressure::libfd::LibFd;
use std::io;
use std::os::fd::IntoRawFd;
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
    wake_tx: LibFd,
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
use ebbtide_core::lock_gated;

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

fn install_process_hooks() {
    PROCESS_HOOKS.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that stays valid for the life of the
        // process (it is a static function). Failure (ENOMEM) only loses the cleanup.
        unsafe {
            libc::atexit(at_exit);
        }
        // The runtime's one fork handler closes the server's descriptors in a child
        // (`ebbtide_pressure::libfd::close_all_in_child`).
        crate::threads::register_fork_handler();
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
    let mut state = lock_gated(&STATE);
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
    // SAFETY: the listener's descriptor was just created by bind and is handed over whole.
    let listener = unsafe { LibFd::adopt(listener.into_raw_fd()) }.map_err(|e| {
        let _ = std::fs::remove_file(&sock);
        io::Error::new(e.kind(), format!("control socket listener: {e}"))
    })?;
    let (wake_rx, wake_tx) = pipe().map_err(|e| {
        let _ = std::fs::remove_file(&sock);
        io::Error::new(e.kind(), format!("control socket wake pipe: {e}"))
    })?;
    let server = server::Server::new(listener, wake_rx).inspect_err(|_| {
        let _ = std::fs::remove_file(&sock);
    })?;
    let thread = crate::lifetime::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("ebbtide-control".into())
            .spawn(move || {
                ON_CONTROL_THREAD.with(|c| c.set(true));
                let me = crate::lifetime::register_runtime_thread();
                let exit = server.run();
                crate::lifetime::unregister_runtime_thread(me);
                if let server::Exit::Lost(why) = exit {
                    restart_after_loss(&why);
                }
            })
    })
    .map_err(|e| {
        let _ = std::fs::remove_file(&sock);
        io::Error::new(e.kind(), format!("cannot start the control thread: {e}"))
    })?;
    *lock_gated(&EXIT_PATH) = Some((pid, sock.clone()));
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
        let mut state = lock_gated(&STATE);
        forget_after_fork(&mut state);
        let Some(r) = state.take() else {
            return;
        };
        // Closing the write end makes the read end readable (EOF) and wakes the poll. (If the
        // program closed it, the server has found out or will within a second.)
        drop(r.wake_tx);
        // Removed now, under the lock, so that a server started after the lock is released
        // (same pid, same path) keeps its socket and its exit cleanup.
        let _ = std::fs::remove_file(&r.path);
        let mut exit = lock_gated(&EXIT_PATH);
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
    let mut state = lock_gated(&STATE);
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

/// A close-on-exec pipe of library descriptors: (read end nonblocking, write end).
fn pipe() -> io::Result<(LibFd, LibFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is valid for writing two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let rx = unsafe { LibFd::adopt(fds[0]) };
    let rx = match rx {
        Ok(rx) => rx,
        Err(e) => {
            // SAFETY: the write end is still ours alone.
            unsafe { libc::close(fds[1]) };
            return Err(e);
        }
    };
    // SAFETY: as for the read end: open, owned by nobody else.
    let tx = unsafe { LibFd::adopt(fds[1]) }?;
    Ok((rx, tx))
}

/// On the control thread, after the program closed the listener or the wake pipe: record why,
/// wait a second (a program closing its descriptors is usually done by then) and start the
/// server again at the same path — unless it was stopped meanwhile or is not this thread's.
fn restart_after_loss(why: &str) {
    events::record(
        "error",
        &format!("{why}; the control socket starts again in 1 s"),
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    {
        let mut state = lock_gated(&STATE);
        forget_after_fork(&mut state);
        let ours = state
            .as_ref()
            .is_some_and(|r| r.thread.thread().id() == std::thread::current().id());
        if !ours {
            return;
        }
        let r = state.take().expect("checked above");
        // This thread's own handle: dropping it detaches the thread, which ends below.
        drop(r.thread);
        drop(r.wake_tx);
        let _ = std::fs::remove_file(&r.path);
    }
    if let Err(e) = start() {
        events::record("error", &format!("control socket not started again: {e}"));
    }
}
