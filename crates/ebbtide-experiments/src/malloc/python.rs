//! Debian's unmodified `python3` as the program of `lab malloc`, with `PYTHONMALLOC=malloc`
//! (every object is a `malloc`, none goes to CPython's own arenas).
//!
//! The script below is the whole program. On `burst` it builds a dict of N entries, each a
//! list of a string of 7 to ~700 bytes, a float and a tuple — several size classes, as a real
//! cache of records. On `delete` it drops the dict and runs `gc.collect()`. In between and
//! afterwards it keeps running: every 100 ms it makes and drops a few small objects.
//! Each command is answered with one line carrying the process's RSS.

use ebbtide_lab::{Cgroup, Error, LabChild, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Debian's interpreter, `/usr/bin/python3`, when it exists; else `python3` from `PATH`.
/// (A `PATH` may put a pyenv shim or a self-built Python first; the experiment is about the
/// distribution's unmodified program.)
pub fn interpreter() -> PathBuf {
    let debian = PathBuf::from("/usr/bin/python3");
    if debian.is_file() {
        debian
    } else {
        PathBuf::from("python3")
    }
}

/// The program (`python3 -c SCRIPT N`).
pub const SCRIPT: &str = r#"
import gc, os, select, sys
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
n = int(sys.argv[1])
data = None
tick = 0
print('ready', rss(), flush=True)
while True:
    r, _, _ = select.select([sys.stdin], [], [], 0.1)
    if not r:
        tick += 1
        small = [str(tick + i) * 3 for i in range(64)]
        del small
        continue
    cmd = sys.stdin.readline().strip()
    if cmd == 'burst':
        data = {}
        for i in range(n):
            data['key:%010d' % i] = [('v%d' % i) * (1 + (i * 7919) % 97), i * 1.5, (i, -i)]
        print('burst', len(data), rss(), flush=True)
    elif cmd == 'delete':
        data = None
        gc.collect()
        print('deleted', rss(), flush=True)
    elif cmd == 'ping':
        print('pong', rss(), flush=True)
    else:
        break
"#;

/// A running `python3` in a cgroup.
pub struct Python {
    child: LabChild,
    stdin: ChildStdin,
    stdout: std::sync::mpsc::Receiver<String>,
}

impl Python {
    /// Starts `python3 -c SCRIPT entries` (in `cg`, if given) with `env` (the allocator); returns once it
    /// printed `ready`.
    pub fn start(cg: Option<&Cgroup>, env: &[(String, String)], entries: u64) -> Result<Python> {
        let mut cmd = Command::new(interpreter());
        cmd.args(["-c", SCRIPT])
            .arg(entries.to_string())
            .env("PYTHONMALLOC", "malloc")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        super::variants::apply_env(&mut cmd, env);
        let spawned = match cg {
            Some(cg) => cg.spawn(&mut cmd),
            None => LabChild::spawn(&mut cmd),
        };
        let mut child = spawned.map_err(|e| Error::Other(format!("cannot start python3: {e}")))?;
        let stdin = child.inner_mut().stdin.take().expect("piped stdin");
        let out: ChildStdout = child.inner_mut().stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut p = Python {
            child,
            stdin,
            stdout: rx,
        };
        p.expect("ready", Duration::from_secs(30))?;
        Ok(p)
    }

    /// The interpreter's pid.
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    fn expect(&mut self, word: &str, timeout: Duration) -> Result<Vec<u64>> {
        match self.stdout.recv_timeout(timeout) {
            Ok(l) => parse_answer(&l, word)
                .ok_or_else(|| Error::Other(format!("python3 said {l:?}, expected {word:?}"))),
            Err(_) => {
                let st = self.child.try_wait().ok().flatten();
                Err(Error::Other(match st {
                    Some(st) => format!("python3 ended ({st}) before answering {word:?}"),
                    None => format!("python3 did not answer {word:?} within {timeout:?}"),
                }))
            }
        }
    }

    fn send(&mut self, cmd: &str, answer: &str, timeout: Duration) -> Result<Vec<u64>> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| Error::Other(format!("python3 {cmd}: {e}")))?;
        self.expect(answer, timeout)
    }

    /// The burst; returns the number of entries made.
    pub fn burst(&mut self) -> Result<u64> {
        let v = self.send("burst", "burst", Duration::from_secs(600))?;
        Ok(v.first().copied().unwrap_or(0))
    }

    /// The delete.
    pub fn delete(&mut self) -> Result<()> {
        self.send("delete", "deleted", Duration::from_secs(300))
            .map(|_| ())
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Ends it (`exit` on stdin, SIGKILL after 5 s); returns its exit status text.
    pub fn stop(mut self) -> String {
        let _ = writeln!(self.stdin, "exit").and_then(|()| self.stdin.flush());
        match self.child.wait_timeout(Duration::from_secs(5)) {
            Ok(Some(st)) => st.to_string(),
            _ => match self.child.kill() {
                Ok(st) => format!("{st} (did not exit within 5 s)"),
                Err(e) => e.to_string(),
            },
        }
    }
}

/// The numbers after `word` in an answer line (`burst 123 4567` → `[123, 4567]`).
pub fn parse_answer(line: &str, word: &str) -> Option<Vec<u64>> {
    let mut it = line.split_whitespace();
    if it.next()? != word {
        return None;
    }
    it.map(|x| x.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer("burst 10 4096", "burst"), Some(vec![10, 4096]));
        assert_eq!(parse_answer("ready 1", "burst"), None);
        assert_eq!(parse_answer("burst x", "burst"), None);
        assert_eq!(parse_answer("deleted", "deleted"), Some(vec![]));
    }

    #[test]
    fn the_script_runs_the_protocol() {
        // Without a cgroup: the script itself, on this machine's python3 (skip if none).
        let Ok(mut c) = Command::new(interpreter())
            .args(["-c", SCRIPT, "1000"])
            .env("PYTHONMALLOC", "malloc")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
        else {
            eprintln!("SKIPPED: no python3");
            return;
        };
        let mut i = c.stdin.take().unwrap();
        writeln!(i, "burst\ndelete\nexit").unwrap();
        drop(i);
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(parse_answer(lines[0], "ready").is_some());
        assert_eq!(parse_answer(lines[1], "burst").unwrap()[0], 1000);
        assert!(parse_answer(lines[2], "deleted").is_some());
    }
}
