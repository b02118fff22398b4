//! The statistics JSON of the live process, written straight into a sink without allocating:
//! what the control socket answers to `stats json` (what `ebbtide stat`, `top` and `exporter`
//! ask for). An observation must not be counted as the program's work: in a malloc process
//! the program's allocator is ebbtide's zones, so a `Vec` or `String` built here would show as
//! the program's requests and footprint (`docs/design/observer.md`).
//!
//! The text is the same as [`super::Snapshot::to_json`] of [`super::collect`]'s snapshot,
//! field for field. The zones are read in two passes under the registry lock (the global
//! figures need the zones' cached bytes before the zones are written), so the global
//! `cached_bytes` and the zones' figures are each consistent with a moment a few
//! microseconds apart, as any racy statistics read is.

use super::collect::{global_now, zone_cached, KINDS_WITHOUT_THREAD};
use super::json::{array_open, object_with, snapshot_open, string, string_body};
use super::{Field, PoolStats, SourceStats, ZoneStats};
use ebbtide_core::zone::{visit_snapshots, ZoneSnapshot};
use ebbtide_pressure::SourceStatus;
use std::fmt::{self, Write};

/// Write the statistics JSON (one line, no newline) into `out`, allocating nothing: the zones
/// are visited in place ([`visit_snapshots`]), the sources' statuses read in place, and text
/// written from where it lies. `out` must not allocate either (the control socket's buffer is
/// mapped from the OS); an error from it ends the text early.
pub fn write_json<W: Write>(out: &mut W) -> fmt::Result {
    let mut zones_cached = 0;
    visit_snapshots(|z, _| zones_cached += zone_cached(z));
    let p = crate::reclaimer::pressure_state_head();
    let (global, last_source) = global_now(zones_cached, &p);
    snapshot_open(out)?;
    object_with(out, &global, &mut |f, o| {
        if f.name == "last_event_source" {
            string(o, last_source)?;
            return Ok(true);
        }
        Ok(false)
    })?;
    array_open(out, "sources")?;
    crate::reclaimer::with_statuses(|st| sources(out, st, p.thread_note))?;
    out.write_char(']')?;
    array_open(out, "zones")?;
    zones(out, false)?;
    out.write_char(']')?;
    array_open(out, "pools")?;
    zones(out, true)?;
    out.write_str("]}")
}

/// Every zone (`pools` false) or every page pool (true), oldest first, comma separated.
fn zones<W: Write>(out: &mut W, pools: bool) -> fmt::Result {
    let mut first = true;
    let mut r = Ok(());
    let squeezed = crate::reclaim::squeezing_now();
    visit_snapshots(|z: &ZoneSnapshot, name: &str| {
        if r.is_err() || (z.pool_max_buffer_pages != u64::MAX) != pools {
            return;
        }
        r = (|| {
            if !first {
                out.write_char(',')?;
            }
            first = false;
            // The snapshot's own name is empty (`visit_snapshots`): cloning it allocates
            // nothing; the name is written from the zone.
            let zone = ZoneStats::from(z);
            let mut name_field = |f: &'static Field, o: &mut W| {
                if f.name == "name" {
                    string(o, name)?;
                    return Ok(true);
                }
                Ok(false)
            };
            if pools {
                let pool = PoolStats {
                    zone,
                    max_buffer_pages: z.pool_max_buffer_pages,
                    free_pages: z.free,
                    pages_in_use: z.used,
                    squeezed,
                };
                object_with(out, &pool, &mut name_field)
            } else {
                object_with(out, &zone, &mut name_field)
            }
        })();
    });
    r
}

/// One object per source kind, in the order the kinds first appear among the statuses (as
/// `collect`'s `sources_of`); without statuses and with a reason why no thread watches, the
/// fixed list `collect` gives.
fn sources<W: Write>(out: &mut W, st: &[SourceStatus], thread_note: &str) -> fmt::Result {
    if st.is_empty() {
        if thread_note.is_empty() {
            return Ok(());
        }
        for (i, name) in KINDS_WITHOUT_THREAD.into_iter().enumerate() {
            if i > 0 {
                out.write_char(',')?;
            }
            let s = SourceStats {
                active: i == 0,
                ..SourceStats::default()
            };
            object_with(out, &s, &mut |f, o| match f.name {
                "name" => string(o, name).map(|()| true),
                "reason" if i > 0 => string(o, thread_note).map(|()| true),
                _ => Ok(false),
            })?;
        }
        return Ok(());
    }
    let name_of = |s: &SourceStatus| crate::reclaimer::kind_name(s.kind);
    let mut first = true;
    for (i, s) in st.iter().enumerate() {
        let name = name_of(s);
        if st[..i].iter().any(|e| name_of(e) == name) {
            continue;
        }
        if !first {
            out.write_char(',')?;
        }
        first = false;
        let active = st[i..].iter().any(|e| name_of(e) == name && e.active);
        let s = SourceStats {
            active,
            ..SourceStats::default()
        };
        object_with(out, &s, &mut |f, o| match f.name {
            "name" => string(o, name).map(|()| true),
            // Active: what its sources read; inactive: why none runs (the other one empty).
            "watches" if active => joined(o, st, name, true).map(|()| true),
            "reason" if !active => joined(o, st, name, false).map(|()| true),
            _ => Ok(false),
        })?;
    }
    Ok(())
}

/// The details of kind `name`'s statuses with `active`, each once, joined by `; `, as one
/// JSON string (what `collect`'s `join` builds).
fn joined<W: Write>(out: &mut W, st: &[SourceStatus], name: &str, active: bool) -> fmt::Result {
    let of = |e: &SourceStatus| crate::reclaimer::kind_name(e.kind) == name && e.active == active;
    out.write_char('"')?;
    let mut first = true;
    for (i, e) in st.iter().enumerate() {
        if !of(e) || e.detail.is_empty() || st[..i].iter().any(|p| of(p) && p.detail == e.detail) {
            continue;
        }
        if !first {
            out.write_str("; ")?;
        }
        first = false;
        string_body(out, &e.detail)?;
    }
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebbtide_pressure::SourceKind;

    fn text(st: &[SourceStatus], note: &str) -> String {
        let mut s = String::new();
        sources(&mut s, st, note).unwrap();
        s
    }

    /// The sources part is what `collect` builds and `to_json` writes, in both cases.
    #[test]
    fn sources_match_the_collected_ones() {
        let st = [
            SourceStatus::inactive(
                SourceKind::Psi,
                "no PSI at /sys/fs/cgroup/a/memory.pressure",
            ),
            SourceStatus::active(
                SourceKind::Psi,
                "/proc/pressure/memory: some 150000 1000000",
            ),
            SourceStatus::active(SourceKind::Psi, "/proc/pressure/memory: full \"50000\""),
            SourceStatus::active(SourceKind::Psi, "/proc/pressure/memory: full \"50000\""),
            SourceStatus::inactive(SourceKind::CgroupV1Level, "no v1 controller"),
            SourceStatus::inactive(SourceKind::CgroupV1Level, "retrying"),
            SourceStatus::inactive(SourceKind::CgroupV1Level, "no v1 controller"),
            SourceStatus::active(SourceKind::Explicit, ""),
        ];
        let want = super::super::Snapshot {
            sources: super::super::collect::sources_of(&st),
            ..Default::default()
        }
        .to_json();
        let got = text(&st, "");
        assert!(
            want.contains(&format!("\"sources\":[{got}]")),
            "{want}\n{got}"
        );
    }

    #[test]
    fn sources_without_a_thread_match_the_collected_ones() {
        let got = text(&[], "reclaim thread off");
        assert!(got.starts_with(r#"{"name":"explicit","active":true,"reason":"","watches":""},{"name":"systemd","active":false,"reason":"reclaim thread off""#), "{got}");
        assert_eq!(got.matches("{\"name\"").count(), 7);
        assert_eq!(text(&[], ""), "");
    }

    /// The whole text equals `collect().to_json()` when nothing changes between the two.
    #[test]
    fn the_live_json_is_the_collected_json() {
        let z = ebbtide_core::Zone::new(ebbtide_core::zone::ZoneOptions::new("live-json-test", 48))
            .unwrap();
        let p = z.alloc().unwrap();
        let mut live = String::new();
        write_json(&mut live).unwrap();
        let collected = super::super::collect().to_json();
        // Figures that move by themselves (ages, squeeze deadlines) aside, the texts are equal.
        let strip = |s: &str| {
            let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
            v["global"]["last_event_ms_ago"] = 0.into();
            v["global"]["squeeze_until_ms"] = 0.into();
            v
        };
        assert_eq!(strip(&live), strip(&collected));
        assert!(live.contains("\"name\":\"live-json-test\""), "{live}");
        // SAFETY: `p` came from `z.alloc` and is not used again.
        unsafe { z.free(p) }.unwrap();
    }
}
