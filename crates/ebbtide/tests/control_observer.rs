// A test binary of its own, outside tests/all/: its counting #[global_allocator] is the whole process's.
//! Watching a process costs it no allocation: the control socket answers the observations
//! (`ping`, `version`, `stats json`, `events`) without calling the global allocator — in a
//! malloc process that allocator is the program's own zones, whose request counters and
//! footprint the answer reports (`docs/design/observer.md`).
//!
//! A counting global allocator counts every thread's allocations while a client on raw
//! system calls (which allocate nothing themselves) asks the server; each exchange must leave
//! the count where it was. One test in this file: no other test thread allocates meanwhile.

use ebbtide::control;
use ebbtide::options;
use ebbtide::{Zone, ZoneOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Allocations (and reallocations) of every thread while `COUNTING`.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// The sizes of the first counted allocations, for the failure message.
static SIZES: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
static COUNTING: AtomicBool = AtomicBool::new(false);

struct Counting;

fn count(size: usize) {
    // Relaxed: the count is read after the exchange, which the reading thread waited for
    // through the socket (a system call orders more than enough for a test's tally).
    if COUNTING.load(Ordering::Relaxed) {
        let n = ALLOCS.fetch_add(1, Ordering::Relaxed);
        if n < SIZES.len() {
            SIZES[n].store(size, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees carry over; counting touches only static atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System` with this `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr`/`layout` come from `System` (see `alloc`); the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// One request over a fresh connection with raw system calls only; the reply's bytes land in
/// `buf`. Returns how many.
fn exchange(path: &std::ffi::CStr, request: &[u8], buf: &mut [u8]) -> usize {
    // SAFETY: plain system calls on a socket this function owns, with buffers it owns; the
    // address is a zeroed sockaddr_un with a NUL-terminated path that fits (checked).
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.to_bytes_with_nul();
        assert!(bytes.len() <= addr.sun_path.len());
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let r = libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect");
        assert_eq!(
            libc::write(fd, request.as_ptr().cast(), request.len()),
            request.len() as isize
        );
        libc::shutdown(fd, libc::SHUT_WR);
        let mut n = 0;
        loop {
            let r = libc::read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n);
            assert!(r >= 0, "read");
            if r == 0 {
                break;
            }
            n += r as usize;
            assert!(n < buf.len(), "reply larger than the test's buffer");
        }
        libc::close(fd);
        n
    }
}

#[test]
fn observations_allocate_nothing_in_the_observed_process() {
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe { std::env::remove_var("XDG_RUNTIME_DIR") };
    let zones: Vec<Zone> = (0..40)
        .map(|i| Zone::new(ZoneOptions::new(&format!("observed-{i}"), 16 + 24 * i)).unwrap())
        .collect();
    for z in &zones {
        let p = z.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { z.free(p) }.unwrap();
    }
    options::set("control_socket", "true").unwrap();
    let path = control::start().unwrap();
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    // Once before counting: the server's first round and lazily set-up state (thread locals,
    // the events ring) are start-up costs, not an observation's.
    for req in [&b"ping\n"[..], b"version\n", b"stats json\n", b"events\n"] {
        exchange(&cpath, req, &mut buf);
    }
    for (req, want) in [
        (&b"ping\n"[..], &b"ok 5\npong\n"[..]),
        (b"version\n", b"ok "),
        (b"stats json\n", b"ok "),
        (b"events\n", b"ok "),
        (b"stats json\nping\nstats json\n", b"ok "),
    ] {
        ALLOCS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        let mut n = 0;
        for _ in 0..20 {
            n = exchange(&cpath, req, &mut buf);
        }
        COUNTING.store(false, Ordering::Relaxed);
        let reply = &buf[..n];
        assert!(
            reply.starts_with(want),
            "{:?}",
            String::from_utf8_lossy(&reply[..n.min(200)])
        );
        let allocs = ALLOCS.load(Ordering::Relaxed);
        let sizes: Vec<usize> = SIZES
            .iter()
            .take(allocs)
            .map(|s| s.load(Ordering::Relaxed))
            .collect();
        assert_eq!(
            allocs,
            0,
            "20 x {:?} allocated {allocs} times in the observed process (first sizes {sizes:?})",
            String::from_utf8_lossy(req)
        );
        if req == b"stats json\n" {
            let text = std::str::from_utf8(reply).unwrap();
            let json = text.split_once('\n').unwrap().1;
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let names: Vec<&str> = v["zones"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|z| z["name"].as_str())
                .filter(|n| n.starts_with("observed-"))
                .collect();
            let want: Vec<String> = (0..40).map(|i| format!("observed-{i}")).collect();
            assert_eq!(names, want, "every zone, oldest first");
        }
    }
    control::stop();
    drop(zones);
}
