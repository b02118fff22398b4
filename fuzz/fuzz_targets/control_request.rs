//! Fuzz the control socket's request parser and reply framing.
//!
//! Checks, for any input: no panic; an accepted request prints as one line that parses back
//! to the same request; a refused one gives a one-line error reply that decodes as an error;
//! and the reply decoder, fed the input as if it came from a server, never panics and never
//! claims more bytes than it was given.
//!
//! Run: `cargo +nightly fuzz run control_request -- -max_total_time=60` (from the repository
//! root).
#![no_main]

use ebbtide::control::protocol::{decode_reply, encode_err, encode_ok, parse_request, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Feed the input as a stream of request lines, as the server splits it.
    for line in data.split_inclusive(|&b| b == b'\n') {
        match parse_request(line) {
            Ok(req) => {
                let text = req.to_line();
                assert!(!text.contains('\n'), "{text:?}");
                assert_eq!(parse_request(text.as_bytes()), Ok(req));
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                let framed = encode_err(&msg);
                assert_eq!(framed.iter().filter(|&&b| b == b'\n').count(), 1);
                let (reply, used) = decode_reply(&framed).expect("own error reply decodes");
                assert_eq!(used, framed.len());
                assert!(matches!(reply, Reply::Err(_)));
            }
        }
    }
    if let Ok((reply, used)) = decode_reply(data) {
        assert!(used <= data.len());
        if let Reply::Ok(p) = reply {
            assert_eq!(&encode_ok(&p)[..], &data[..used]);
        }
    }
});
