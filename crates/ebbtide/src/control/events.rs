//! The recent control events (`events` request, the event pane of `ebbtide top`): a small
//! ring kept by the control thread. Each line is `<unix_ms> <kind> <detail>`.

use crate::pressure::Level;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// Events kept; older ones are dropped.
pub const KEEP: usize = 64;

static RING: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Last level injected through the socket, as `level + 1` (0: none yet).
static LAST_INJECTED: AtomicU8 = AtomicU8::new(0);

fn now_unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Record an event. `kind` is one word; `detail` is made one line.
pub fn record(kind: &str, detail: &str) {
    let detail: String = detail
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = format!("{} {kind} {detail}", now_unix_ms());
    // The ring is only touched by the control thread and by tests; poisoning cannot leave
    // it inconsistent (a push or pop either happened or did not).
    let mut r = ebbtide_core::lock_gated(&RING);
    if r.len() == KEEP {
        r.pop_front();
    }
    r.push_back(line);
}

/// Remember an injected level (for `events` and `version`).
pub fn set_injected(level: Level) {
    LAST_INJECTED.store(level as u8 + 1, Ordering::Relaxed);
}

/// The last level injected through the control socket, if any.
pub fn last_injected() -> Option<Level> {
    match LAST_INJECTED.load(Ordering::Relaxed) {
        0 => None,
        v => Level::from_u8(v - 1),
    }
}

/// Write every kept event, oldest first, one a line, into `out` (the ring is read in place:
/// nothing is allocated unless `out` does).
pub fn write_text<W: std::fmt::Write>(out: &mut W) -> std::fmt::Result {
    let r = ebbtide_core::lock_gated(&RING);
    for l in r.iter() {
        out.write_str(l)?;
        out.write_char('\n')?;
    }
    Ok(())
}

/// All kept events, oldest first, one a line.
pub fn text() -> String {
    let r = ebbtide_core::lock_gated(&RING);
    let mut out = String::new();
    for l in r.iter() {
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest() {
        for i in 0..KEEP + 5 {
            record("test", &format!("n{i}\nx"));
        }
        let t = text();
        let lines: Vec<&str> = t.lines().filter(|l| l.contains(" test n")).collect();
        assert!(lines.len() <= KEEP);
        assert!(lines
            .last()
            .unwrap()
            .ends_with(&format!("test n{} x", KEEP + 4)));
        assert!(!t.contains(" test n0 x\n"));
    }
}
