//! A minimal Redis client (RESP2 over TCP) for checking the data a `redis-server` under the
//! malloc holds: commands as arrays of bulk strings, replies parsed whole. Pipelined writes
//! ([`Client::pipeline`]) load a dataset quickly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text, for comparisons (`nil` for a missing value).
    pub fn text(&self) -> String {
        match self {
            Reply::Status(s) => s.clone(),
            Reply::Error(e) => format!("ERR {e}"),
            Reply::Int(i) => i.to_string(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            Reply::Bulk(None) | Reply::Array(None) => "nil".into(),
            Reply::Array(Some(v)) => {
                let parts: Vec<String> = v.iter().map(Reply::text).collect();
                format!("[{}]", parts.join(","))
            }
        }
    }
}

pub struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

impl Client {
    pub fn connect(port: u16) -> std::io::Result<Client> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Client {
            w: s.try_clone()?,
            r: BufReader::new(s),
        })
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        let mut buf = Vec::new();
        encode(&mut buf, args);
        self.w.write_all(&buf).expect("send to redis");
        self.read()
    }

    /// `cmd` with text arguments.
    pub fn cmds(&mut self, args: &[&str]) -> Reply {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.cmd(&a)
    }

    /// Sends all `commands` at once, then reads their replies in order.
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Vec<Reply> {
        let mut buf = Vec::new();
        for c in commands {
            let a: Vec<&[u8]> = c.iter().map(|v| v.as_slice()).collect();
            encode(&mut buf, &a);
        }
        // Written from another thread so that a large pipeline cannot fill both socket buffers.
        let mut w = self.w.try_clone().unwrap();
        let writer = std::thread::spawn(move || w.write_all(&buf));
        let replies = commands.iter().map(|_| self.read()).collect();
        writer.join().unwrap().expect("send to redis");
        replies
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("read from redis");
        assert!(
            l.ends_with("\r\n"),
            "redis closed the connection or sent {l:?}"
        );
        l.truncate(l.len() - 2);
        l
    }

    fn read(&mut self) -> Reply {
        let l = self.line();
        let (kind, rest) = l.split_at(1);
        match kind {
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().expect("integer reply")),
            "$" => {
                let n: i64 = rest.parse().expect("bulk length");
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).expect("read bulk");
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n: i64 = rest.parse().expect("array length");
                if n < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            _ => panic!("unexpected reply line from redis: {l:?}"),
        }
    }
}
