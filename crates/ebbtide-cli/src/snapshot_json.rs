//! A process's statistics as the library's own [`Snapshot`], read back from the JSON of its
//! control socket (`stats json`), so that every output of this command (`stat --prometheus`,
//! the exporter) goes through the library's one emitter with this build's names, whatever
//! version of ebbtide the process runs.
//!
//! Fields are matched by name through [`Stats::set`]. A field this build knows but the process
//! did not send (a process built before the field was added: adding fields does not bump the
//! stats version) is listed in [`Read::missing`], and the emitters leave it out rather than
//! show a 0 the process never said; fields this build does not know are ignored.

use ebbtide::stats::{
    Field, GlobalStats, PoolStats, Snapshot, SourceStats, Stats, Value, ZoneStats, STATS_VERSION,
};
use serde_json::Value as Json;

/// A snapshot read from JSON.
#[derive(Debug, Default)]
pub struct Read {
    /// The statistics.
    pub snapshot: Snapshot,
    /// `(group, field)` of every field this build knows that the JSON did not have.
    pub missing: Vec<(&'static str, &'static str)>,
}

impl Read {
    /// Whether the process sent `field` of `group` (the filter for
    /// [`ebbtide::stats::Exposition::add_snapshot_where`]).
    pub fn has(&self, group: &str, field: &Field) -> bool {
        !self
            .missing
            .iter()
            .any(|(g, f)| *g == group && *f == field.name)
    }
}

fn fill<S: Stats + Default>(
    obj: &Json,
    what: &str,
    missing: &mut Vec<(&'static str, &'static str)>,
) -> Result<S, String> {
    let map = obj
        .as_object()
        .ok_or_else(|| format!("{what} is not a JSON object"))?;
    let mut s = S::default();
    for f in S::fields() {
        let Some(v) = map.get(f.name) else {
            if !missing.contains(&(S::GROUP, f.name)) {
                missing.push((S::GROUP, f.name));
            }
            continue;
        };
        let value = match v {
            Json::String(t) => Value::Text(t),
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::U64(
                n.as_u64()
                    .ok_or_else(|| format!("{what}.{}: {n} is not a whole number", f.name))?,
            ),
            other => return Err(format!("{what}.{}: unexpected value {other}", f.name)),
        };
        if !s.set(f.name, value) {
            return Err(format!(
                "{what}.{}: {v} is not a {} as the field is",
                f.name,
                f.ty.word()
            ));
        }
    }
    Ok(s)
}

fn list<S: Stats + Default>(
    root: &Json,
    key: &str,
    missing: &mut Vec<(&'static str, &'static str)>,
) -> Result<Vec<S>, String> {
    match root.get(key) {
        None => Ok(Vec::new()),
        Some(Json::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, o)| fill::<S>(o, &format!("{key}[{i}]"), missing))
            .collect(),
        Some(other) => Err(format!("{key} is not a JSON array: {other}")),
    }
}

/// Read the JSON of `stats json` (see `docs/ABI/testing/stats-*`).
pub fn parse(text: &str) -> Result<Read, String> {
    let root: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    match root.get("version").and_then(Json::as_u64) {
        Some(v) if v == u64::from(STATS_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "stats version {v}; this ebbtide command reads version {STATS_VERSION}"
            ))
        }
        None => return Err("no stats \"version\" in the JSON".into()),
    }
    let mut missing = Vec::new();
    let global = fill::<GlobalStats>(
        root.get("global")
            .ok_or("no \"global\" object in the JSON")?,
        "global",
        &mut missing,
    )?;
    let sources = list::<SourceStats>(&root, "sources", &mut missing)?;
    let zones = list::<ZoneStats>(&root, "zones", &mut missing)?;
    let pools = list::<PoolStats>(&root, "pools", &mut missing)?;
    Ok(Read {
        snapshot: Snapshot {
            global,
            sources,
            zones,
            pools,
        },
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_of_the_sample() {
        let s = Snapshot::sample();
        let r = parse(&s.to_json()).unwrap();
        assert_eq!(r.snapshot, s);
        assert!(r.missing.is_empty(), "{:?}", r.missing);
        assert_eq!(r.snapshot.to_prometheus(), s.to_prometheus());
    }

    #[test]
    fn fields_an_older_process_did_not_send_are_left_out() {
        let mut j: Json = serde_json::from_str(&Snapshot::sample().to_json()).unwrap();
        j["zones"][0]
            .as_object_mut()
            .unwrap()
            .remove("invalid_frees");
        j["global"]
            .as_object_mut()
            .unwrap()
            .remove("squeeze_until_ms");
        j["zones"][1]["some_future_field"] = Json::from(3);
        let r = parse(&j.to_string()).unwrap();
        assert_eq!(
            r.missing,
            [("global", "squeeze_until_ms"), ("zone", "invalid_frees")]
        );
        let mut e = ebbtide::stats::Exposition::new();
        e.add_snapshot_where(&r.snapshot, &[], &|g, f| r.has(g, f));
        let text = e.render();
        assert!(
            !text.contains("ebbtide_squeeze_remaining_seconds"),
            "{text}"
        );
        assert!(!text.contains("ebbtide_zone_invalid_frees_total"), "{text}");
        assert!(text.contains("ebbtide_zone_used_items"), "{text}");
    }

    #[test]
    fn clear_errors() {
        let e = |t: &str| parse(t).unwrap_err();
        assert!(e("nope").starts_with("not JSON"), "{}", e("nope"));
        assert_eq!(
            e(r#"{"version":2}"#),
            format!("stats version 2; this ebbtide command reads version {STATS_VERSION}")
        );
        assert_eq!(e(r#"{"global":{}}"#), "no stats \"version\" in the JSON");
        assert_eq!(e(r#"{"version":1}"#), "no \"global\" object in the JSON");
        let mut j: Json = serde_json::from_str(&Snapshot::sample().to_json()).unwrap();
        j["zones"][1]["used"] = Json::from("many");
        assert_eq!(
            e(&j.to_string()),
            "zones[1].used: \"many\" is not a u64 as the field is"
        );
        j["zones"][1]["used"] = Json::from(-1);
        assert_eq!(e(&j.to_string()), "zones[1].used: -1 is not a whole number");
        j["zones"] = Json::from(3);
        assert_eq!(e(&j.to_string()), "zones is not a JSON array: 3");
    }
}
