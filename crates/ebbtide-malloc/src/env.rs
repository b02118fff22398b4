//! The few settings the malloc needs before anything can allocate, read from `environ` in
//! place (no allocation, no locale, no `getenv` of a library that might allocate), as mimalloc
//! reads its options: whether zones start in checked mode.
//!
//! The full configuration (`EBBTIDE_CONF` and every `EBBTIDE_<NAME>`, with its errors reported
//! by name) is read later by the runtime, from the load-time constructor; it agrees with what is
//! read here because both take `EBBTIDE_CHECKED` over `checked=` in `EBBTIDE_CONF`.

use core::ffi::{c_char, CStr};

extern "C" {
    static environ: *const *const c_char;
}

/// The value of the environment variable `name` (without `=`), straight from `environ`.
pub fn raw_var(name: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated strings; it
    // is read, never written, and the strings live as long as the process unless the program
    // changes its environment (then we may read a stale but still valid string).
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return None;
        }
        while !(*p).is_null() {
            let s = CStr::from_ptr(*p).to_bytes();
            if s.len() > name.len() && s.starts_with(name) && s[name.len()] == b'=' {
                return Some(&s[name.len() + 1..]);
            }
            p = p.add(1);
        }
    }
    None
}

/// A boolean as the options table spells it; `None` for anything else (the runtime reports it).
pub fn parse_bool(v: &[u8]) -> Option<bool> {
    match v {
        b"1" | b"true" | b"yes" | b"on" => Some(true),
        b"0" | b"false" | b"no" | b"off" => Some(false),
        _ => None,
    }
}

/// The value of `key` in a `k=v,k=v` list.
pub fn conf_value<'a>(conf: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    conf.split(|&b| b == b',').find_map(|kv| {
        let kv = kv.trim_ascii();
        let eq = kv.iter().position(|&b| b == b'=')?;
        (kv[..eq].trim_ascii() == key).then(|| kv[eq + 1..].trim_ascii())
    })
}

/// Checked mode at start-up: `EBBTIDE_CHECKED`, else `checked=` in `EBBTIDE_CONF`, else off.
pub fn checked() -> bool {
    if let Some(v) = raw_var(b"EBBTIDE_CHECKED").and_then(parse_bool) {
        return v;
    }
    raw_var(b"EBBTIDE_CONF")
        .and_then(|c| conf_value(c, b"checked"))
        .and_then(parse_bool)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_lists() {
        assert_eq!(conf_value(b"a=1,checked=on", b"checked"), Some(&b"on"[..]));
        assert_eq!(conf_value(b" checked = 1 ", b"checked"), Some(&b"1"[..]));
        assert_eq!(conf_value(b"unchecked=1", b"checked"), None);
        assert_eq!(parse_bool(b"on"), Some(true));
        assert_eq!(parse_bool(b"maybe"), None);
    }

    #[test]
    fn reads_the_real_environment() {
        // PATH is set in every test environment cargo runs.
        assert!(raw_var(b"PATH").is_some());
        assert!(raw_var(b"EBBTIDE_SURELY_NOT_SET_ANYWHERE").is_none());
    }
}
