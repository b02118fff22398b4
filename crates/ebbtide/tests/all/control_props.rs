//! Property tests of the control protocol: the request parser is total and reads back what
//! `Request::to_line` writes; replies decode to what was encoded, whatever the chunking;
//! error replies stay one line.

use ebbtide::control::protocol::{
    decode_reply, encode_err, encode_ok, parse_request, Format, ParseError, Reply, ReplyError,
    Request, MAX_REQUEST,
};
use ebbtide::options::TABLE;
use ebbtide::pressure::Level;
use proptest::prelude::*;

fn request() -> impl Strategy<Value = Request> {
    let name = proptest::sample::select(TABLE.iter().map(|d| d.name).collect::<Vec<_>>())
        .prop_map(str::to_string);
    let word = "[a-z0-9_]{1,16}";
    prop_oneof![
        Just(Request::Ping),
        Just(Request::Version),
        Just(Request::Help),
        Just(Request::Events),
        proptest::sample::select(vec![Format::Table, Format::Json, Format::Prometheus])
            .prop_map(Request::Stats),
        Just(Request::Get(None)),
        prop_oneof![name.clone(), word.prop_map(String::from)].prop_map(|n| Request::Get(Some(n))),
        proptest::collection::vec((name, "[a-z0-9,+|]{1,12}"), 1..4).prop_map(|kv| {
            Request::Set(
                kv.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            )
        }),
        proptest::sample::select(Level::ALL.to_vec()).prop_map(Request::Pressure),
    ]
}

/// Lines that look like requests: verbs, near-verbs, arguments, separators, junk bytes.
fn request_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        proptest::sample::select(vec![
            "ping",
            "PING",
            "version",
            "stats",
            "json",
            "prometheus",
            "table",
            "get",
            "set",
            "pressure",
            "low",
            "moderate",
            "critical",
            "normal",
            "none",
            "events",
            "help",
            "squeeze_ms",
            "=",
            ",",
            " ",
            "\t",
            "\r",
            "\n",
            "\0",
            "é",
            "\u{7f}",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[a-z_=,0-9]{0,12}".prop_map(|s| s.into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn requests_round_trip(r in request()) {
        let _turn = crate::serial::turn(module_path!());
        let line = r.to_line();
        prop_assert_eq!(parse_request(line.as_bytes()), Ok(r.clone()));
        let with_nl = format!("  {line}\r\n");
        prop_assert_eq!(parse_request(with_nl.as_bytes()), Ok(r));
    }

    #[test]
    fn parser_is_total_and_errors_are_one_line(bytes in request_like()) {
        let _turn = crate::serial::turn(module_path!());
        match parse_request(&bytes) {
            Ok(r) => {
                // Whatever is accepted is printable as a request line and reads back.
                let line = r.to_line();
                prop_assert!(!line.contains('\n'));
                prop_assert_eq!(parse_request(line.as_bytes()), Ok(r));
            }
            Err(e) => {
                let framed = encode_err(&e.to_string());
                prop_assert_eq!(framed.iter().filter(|&&b| b == b'\n').count(), 1);
                let (reply, used) = decode_reply(&framed).unwrap();
                prop_assert_eq!(used, framed.len());
                prop_assert!(matches!(reply, Reply::Err(_)));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _turn = crate::serial::turn(module_path!());
        let _ = parse_request(&bytes);
        let _ = decode_reply(&bytes);
    }

    #[test]
    fn long_lines_are_refused(n in MAX_REQUEST..MAX_REQUEST * 3) {
        let _turn = crate::serial::turn(module_path!());
        let line = vec![b'p'; n];
        prop_assert!(
            matches!(parse_request(&line), Err(ParseError::TooLong { len }) if len == n),
            "{} bytes accepted", n
        );
    }

    #[test]
    fn replies_round_trip_in_any_chunks(
        payloads in proptest::collection::vec((any::<bool>(), any::<String>()), 1..5),
        cut in any::<proptest::sample::Index>(),
    ) {
        let _turn = crate::serial::turn(module_path!());
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (is_ok, text) in &payloads {
            if *is_ok {
                wire.extend(encode_ok(text));
                want.push(Reply::Ok(text.clone()));
            } else {
                wire.extend(encode_err(text));
                let one_line: Vec<&str> =
                    text.split(['\n', '\r']).filter(|p| !p.is_empty()).collect();
                let msg = if one_line.is_empty() {
                    "unspecified error".to_string()
                } else {
                    one_line.join("; ")
                };
                want.push(Reply::Err(msg));
            }
        }
        // A prefix is incomplete (or already holds whole replies).
        let k = cut.index(wire.len());
        let mut got = Vec::new();
        let mut at = 0;
        loop {
            match decode_reply(&wire[at..k]) {
                Ok((r, used)) => { got.push(r); at += used; }
                Err(ReplyError::Incomplete) => break,
                Err(e) => return Err(TestCaseError::fail(format!("{e} at {at}"))),
            }
        }
        // The rest decodes to the remaining replies.
        while at < wire.len() {
            let (r, used) = decode_reply(&wire[at..]).unwrap();
            got.push(r);
            at += used;
        }
        prop_assert_eq!(got, want);
    }
}
