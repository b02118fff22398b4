//! Debian's unmodified `redis-server` as the program of `lab malloc`.
//!
//! The server listens on a Unix socket only (`--port 0`, no TCP port to collide with), with
//! persistence off (`--save ""`, `--appendonly no`), redis's own active defragmentation off
//! (`--activedefrag no`), its request to start jemalloc's background thread off
//! (`--jemalloc-bg-thread no`: that thread is what the `jemalloc-bg` row measures, through
//! `MALLOC_CONF`, and redis would otherwise turn it on under the plain `jemalloc` row too) and
//! no lazy freeing. The burst is `SET key:N <value>` for N keys with values of 64 to 1024
//! bytes, streamed through `redis-cli --pipe` (redis's own mass-insertion tool); the delete
//! is `DEL key:N` for each of them, the same way (see [`RedisServer::delete`] for why not
//! `FLUSHALL`). While the run lasts, a client sends one `SET`/`GET` pair every
//! 100 ms: the service stays in use, as services do.

use crate::Rng;
use ebbtide_lab::{Cgroup, Error, LabChild, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One RESP command.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// A RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`
    Error(String),
    /// `:5`
    Int(i64),
    /// `$n` (None for `$-1`)
    Bulk(Option<Vec<u8>>),
    /// `*n`
    Array(Vec<Reply>),
}

/// Reads one reply.
pub fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "redis closed the connection",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad reply {line:?}"),
        )
    };
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" => Ok(Reply::Status(rest.into())),
        "-" => Ok(Reply::Error(rest.into())),
        ":" => rest.parse().map(Reply::Int).map_err(|_| bad()),
        "$" => {
            let n: i64 = rest.parse().map_err(|_| bad())?;
            if n < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut b = vec![0u8; n as usize + 2];
            r.read_exact(&mut b)?;
            b.truncate(n as usize);
            Ok(Reply::Bulk(Some(b)))
        }
        "*" => {
            let n: i64 = rest.parse().map_err(|_| bad())?;
            let mut v = Vec::new();
            for _ in 0..n.max(0) {
                v.push(read_reply(r)?);
            }
            Ok(Reply::Array(v))
        }
        _ => Err(bad()),
    }
}

/// One connection to the server.
pub struct Conn {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Conn {
    /// Connects to the server's socket.
    pub fn connect(sock: &Path) -> std::io::Result<Conn> {
        let s = UnixStream::connect(sock)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            w: s.try_clone()?,
            r: BufReader::new(s),
        })
    }

    /// Sends one command and reads its reply; an error reply is an `Err`.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let what = String::from_utf8_lossy(args.first().copied().unwrap_or(b"")).into_owned();
        self.w
            .write_all(&resp(args))
            .map_err(|e| Error::Other(format!("redis {what}: {e}")))?;
        match read_reply(&mut self.r) {
            Ok(Reply::Error(e)) => Err(Error::Other(format!("redis {what}: {e}"))),
            Ok(r) => Ok(r),
            Err(e) => Err(Error::Other(format!("redis {what}: {e}"))),
        }
    }

    /// `INFO memory` as a map.
    pub fn info_memory(&mut self) -> Result<BTreeMap<String, String>> {
        match self.cmd(&[b"INFO", b"memory"])? {
            Reply::Bulk(Some(b)) => Ok(parse_info(&String::from_utf8_lossy(&b))),
            r => Err(Error::Other(format!("redis INFO: unexpected reply {r:?}"))),
        }
    }

    /// `DBSIZE`.
    pub fn dbsize(&mut self) -> Result<i64> {
        match self.cmd(&[b"DBSIZE"])? {
            Reply::Int(n) => Ok(n),
            r => Err(Error::Other(format!(
                "redis DBSIZE: unexpected reply {r:?}"
            ))),
        }
    }
}

/// `key:value` lines of an `INFO` reply.
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Key number `i` of the burst.
pub fn key(i: u64) -> String {
    format!("key:{i:010}")
}

/// Keys the trickle client uses (`tick:0` … `tick:63`).
pub const TRICKLE_KEYS: u64 = 64;

/// The value of key number `i`: 64 to 1024 bytes, contents derived from `i`.
pub(crate) fn value_of(i: u64, rng: &mut Rng) -> Vec<u8> {
    let len = rng.range(64, 1024) as usize;
    let seed = format!("{i:016x}");
    seed.as_bytes().iter().copied().cycle().take(len).collect()
}

/// A running `redis-server` in a cgroup.
pub struct RedisServer {
    child: LabChild,
    sock: PathBuf,
}

/// What `fill` put in.
#[derive(Clone, Copy, Debug)]
pub struct FillReport {
    /// Keys in the database after the fill.
    pub keys: u64,
    /// Bytes of values sent.
    pub value_bytes: u64,
    /// Seconds the fill took.
    pub seconds: f64,
}

impl RedisServer {
    /// Starts the server (in `cg`, if given) with `env` (the allocator), its socket and log in `dir`;
    /// returns once it answers `PING`.
    pub fn start(
        cg: Option<&Cgroup>,
        env: &[(String, String)],
        dir: &Path,
        tag: &str,
    ) -> Result<RedisServer> {
        let sock = dir.join(format!("redis-{tag}.sock"));
        let log = dir.join(format!("redis-{tag}.log"));
        let _ = std::fs::remove_file(&sock);
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", "0", "--unixsocket"])
            .arg(&sock)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--activedefrag", "no", "--jemalloc-bg-thread", "no"])
            .args(["--lazyfree-lazy-user-del", "no", "--daemonize", "no"])
            .args(["--protected-mode", "no", "--loglevel", "notice", "--dir"])
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        super::variants::apply_env(&mut cmd, env);
        let spawned = match cg {
            Some(cg) => cg.spawn(&mut cmd),
            None => LabChild::spawn(&mut cmd),
        };
        let mut child = spawned.map_err(|e| {
            Error::Other(format!(
                "cannot start redis-server (Debian: apt-get install redis-server): {e}"
            ))
        })?;
        let t0 = Instant::now();
        loop {
            if let Ok(mut c) = Conn::connect(&sock) {
                if let Ok(Reply::Status(s)) = c.cmd(&[b"PING"]) {
                    if s == "PONG" {
                        break;
                    }
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(Error::Other(format!(
                    "redis-server exited at start ({st}); its log {}:\n{}",
                    log.display(),
                    tail.lines().rev().take(10).collect::<Vec<_>>().join("\n")
                )));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(Error::Other(format!(
                    "redis-server did not answer PING on {} within 20 s",
                    sock.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(RedisServer { child, sock })
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    /// The socket.
    pub fn sock(&self) -> &Path {
        &self.sock
    }

    /// A new connection.
    pub fn conn(&self) -> Result<Conn> {
        Conn::connect(&self.sock)
            .map_err(|e| Error::Other(format!("connect {}: {e}", self.sock.display())))
    }

    /// Whether the server still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Streams commands through `redis-cli --pipe`; returns the seconds it took.
    fn pipe(&self, mut next: impl FnMut(u64) -> Option<Vec<u8>>) -> Result<f64> {
        let t0 = Instant::now();
        let mut cli = Command::new("redis-cli")
            .arg("-s")
            .arg(&self.sock)
            .arg("--pipe")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Other(format!(
                    "cannot run redis-cli (Debian: apt-get install redis-tools): {e}"
                ))
            })?;
        let stdin = cli.stdin.take().expect("piped stdin");
        let mut w = BufWriter::with_capacity(1 << 20, stdin);
        let mut write_err = None;
        let mut i = 0;
        while let Some(c) = next(i) {
            if let Err(e) = w.write_all(&c) {
                write_err = Some(e);
                break;
            }
            i += 1;
        }
        if write_err.is_none() {
            write_err = w.flush().err();
        }
        drop(w);
        let out = cli
            .wait_with_output()
            .map_err(|e| Error::Other(format!("redis-cli --pipe: {e}")))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(e) = write_err {
            return Err(Error::Other(format!(
                "redis-cli --pipe: writing failed: {e}; it said: {text}"
            )));
        }
        if !out.status.success() || !text.contains("errors: 0") {
            return Err(Error::Other(format!(
                "redis-cli --pipe failed ({}): {}",
                out.status,
                text.trim()
            )));
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    /// The burst: `keys` `SET key:N <value>` through `redis-cli --pipe`.
    pub fn fill(&self, keys: u64, seed: u64) -> Result<FillReport> {
        let mut rng = Rng::new(seed);
        let mut value_bytes = 0u64;
        let seconds = self.pipe(|i| {
            (i < keys).then(|| {
                let v = value_of(i, &mut rng);
                value_bytes += v.len() as u64;
                resp(&[b"SET", key(i).as_bytes(), &v])
            })
        })?;
        let n = self.conn()?.dbsize()?;
        if n < keys as i64 {
            return Err(Error::Other(format!(
                "after the fill redis holds {n} keys, not {keys}"
            )));
        }
        Ok(FillReport {
            keys: n as u64,
            value_bytes,
            seconds,
        })
    }

    /// The delete: `DEL key:N` for every key of the burst, through `redis-cli --pipe` (as
    /// an application deletes its data). Not `FLUSHALL SYNC`: redis follows that with an
    /// explicit jemalloc purge (`jemalloc_purge()` in `flushallCommand`, redis's own
    /// hand-written give-back, which reaches jemalloc only). Checks that only the trickle's
    /// keys are left.
    pub fn delete(&self, keys: u64) -> Result<()> {
        self.pipe(|i| (i < keys).then(|| resp(&[b"DEL", key(i).as_bytes()])))?;
        match self.conn()?.dbsize()? {
            n if n <= TRICKLE_KEYS as i64 => Ok(()),
            n => Err(Error::Other(format!(
                "{n} keys left after deleting every key"
            ))),
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after 5 s); returns its exit status text.
    pub fn stop(mut self) -> String {
        let _ = self.child.signal(libc::SIGTERM);
        match self.child.wait_timeout(Duration::from_secs(5)) {
            Ok(Some(st)) => st.to_string(),
            _ => match self.child.kill() {
                Ok(st) => format!("{st} (after SIGTERM was ignored for 5 s)"),
                Err(e) => e.to_string(),
            },
        }
    }

    /// Waits for the server's end without signalling it (after an OOM kill).
    pub fn wait_status(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|s| s.to_string())
    }
}

/// A client sending one `SET` and one `GET` every 100 ms until dropped.
pub struct Trickle {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Trickle {
    /// Starts it.
    pub fn start(sock: &Path) -> Trickle {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let (s, o, e, sock) = (
            stop.clone(),
            ops.clone(),
            errors.clone(),
            sock.to_path_buf(),
        );
        let handle = std::thread::spawn(move || {
            let mut conn: Option<Conn> = None;
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                if conn.is_none() {
                    conn = Conn::connect(&sock).ok();
                }
                if let Some(c) = conn.as_mut() {
                    let k = format!("tick:{}", n % TRICKLE_KEYS);
                    let v = format!("{n:032}");
                    let ok = c.cmd(&[b"SET", k.as_bytes(), v.as_bytes()]).is_ok()
                        && c.cmd(&[b"GET", k.as_bytes()]).is_ok();
                    if ok {
                        o.fetch_add(2, Ordering::Relaxed);
                    } else {
                        e.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                } else {
                    e.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Trickle {
            stop,
            ops,
            errors,
            handle: Some(handle),
        }
    }

    /// Stops it: (commands answered, failures).
    pub fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        (
            self.ops.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_round_trip() {
        assert_eq!(
            resp(&[b"SET", b"k", b"vv"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n"
        );
        let mut r = std::io::Cursor::new(
            b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n".to_vec(),
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Status("OK".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Int(42));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Bulk(Some(b"abc".to_vec()))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Array(vec![Reply::Int(1), Reply::Bulk(Some(b"x".to_vec()))])
        );
        assert!(read_reply(&mut r).is_err());
        let mut bad = std::io::Cursor::new(b"?huh\r\n".to_vec());
        assert!(read_reply(&mut bad).is_err());
    }

    #[test]
    fn info_and_values() {
        let m = parse_info("# Memory\r\nused_memory:123\r\nmem_allocator:jemalloc-5.3.0\r\n");
        assert_eq!(m["used_memory"], "123");
        assert_eq!(m["mem_allocator"], "jemalloc-5.3.0");
        let mut rng = Rng::new(1);
        for i in 0..1000 {
            let v = value_of(i, &mut rng);
            assert!((64..=1024).contains(&v.len()));
        }
    }
}
