//! The neighbour of `lab malloc`: a second process in the program's cgroup that needs memory.
//!
//! It maps `EBBTIDE_LAB_NB_BYTES` of anonymous memory and writes one byte per page at
//! `EBBTIDE_LAB_NB_RATE` bytes per second (a service ramping up, not an instant spike), then
//! keeps every page in use — one pass over all of them every 200 ms — until
//! `EBBTIDE_LAB_NB_HOLD_MS` after the ramp. Its pages are hot, the program's freed-but-cached
//! pages are cold: when the group is at its limit the kernel swaps the program's out (or, with
//! no swap left, the OOM killer picks a victim).
//!
//! Protocol: `EBBTIDE_LAB MARK` lines `ramped` (all pages written once), and one `RESULT` with
//! the ramp's seconds and the passes made.

use crate::{emit, env_u64};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
/// Pages written between two looks at the clock during the ramp (1 MiB).
const STEP: usize = 256;

/// The child's main: returns the exit code.
pub(crate) fn child_main() -> i32 {
    let bytes = env_u64("NB_BYTES") as usize;
    let rate = env_u64("NB_RATE").max(1) as f64;
    let hold = Duration::from_millis(env_u64("NB_HOLD_MS"));
    let len = bytes.max(PAGE);
    // SAFETY: an anonymous private mapping; the arguments are valid and the result checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        eprintln!(
            "neighbour: mmap of {len} bytes failed: {}",
            std::io::Error::last_os_error()
        );
        return 1;
    }
    let base = p.cast::<u8>();
    let pages = len / PAGE;
    let t0 = Instant::now();
    let mut done = 0usize;
    while done < pages {
        let end = (done + STEP).min(pages);
        for i in done..end {
            // SAFETY: `i < pages`, so the byte lies inside the mapping made above, which
            // only this thread writes.
            unsafe { base.add(i * PAGE).write_volatile(1) };
        }
        done = end;
        // Pace: page `done` is due at done × PAGE / rate seconds after the start.
        let due = Duration::from_secs_f64((done * PAGE) as f64 / rate);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let ramp_s = t0.elapsed().as_secs_f64();
    emit("MARK", " ramped");
    let t1 = Instant::now();
    let mut passes = 0u64;
    let mut stamp = 2u8;
    while t1.elapsed() < hold {
        for i in 0..pages {
            // SAFETY: `i < pages`, so the byte lies inside the mapping made above, which only this
            // thread writes.
            unsafe { base.add(i * PAGE).write_volatile(stamp) };
        }
        passes += 1;
        stamp = stamp.wrapping_add(1).max(1);
        std::thread::sleep(Duration::from_millis(200).min(hold.saturating_sub(t1.elapsed())));
    }
    emit(
        "RESULT",
        &serde_json::json!({"ramp_s": ramp_s, "passes": passes, "bytes": len}).to_string(),
    );
    // SAFETY: unmaps exactly the mapping made above; nothing refers to it any more.
    unsafe { libc::munmap(p, len) };
    0
}
