//! Emitter tests: every format from one sample snapshot, read back and checked against the
//! field lists.

use super::*;
use serde_json::Value as Json;

fn check_object<S: Stats>(obj: &Json, what: &str) {
    let map = obj
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object"));
    let fields = S::fields();
    assert_eq!(map.len(), fields.len(), "{what}: unexpected keys");
    for f in fields {
        let v = map
            .get(f.name)
            .unwrap_or_else(|| panic!("{what}: missing {}", f.name));
        let ok = match f.ty {
            FieldType::Text => v.is_string(),
            FieldType::U64 => v.is_u64(),
            FieldType::Bool => v.is_boolean(),
        };
        assert!(ok, "{what}.{}: wrong JSON type: {v}", f.name);
    }
}

#[test]
fn json_round_trips_with_every_field_typed() {
    let s = Snapshot::sample();
    let j: Json = serde_json::from_str(&s.to_json()).expect("valid JSON");
    assert_eq!(j["version"], STATS_VERSION);
    check_object::<GlobalStats>(&j["global"], "global");
    for (i, z) in j["zones"].as_array().unwrap().iter().enumerate() {
        check_object::<ZoneStats>(z, "zone");
        assert_eq!(z["name"], s.zones[i].name.as_str());
        assert_eq!(z["used"], s.zones[i].used);
        assert_eq!(z["buckets_enabled"], s.zones[i].buckets_enabled);
    }
    assert_eq!(j["zones"].as_array().unwrap().len(), s.zones.len());
    for p in j["pools"].as_array().unwrap() {
        check_object::<PoolStats>(p, "pool");
    }
    for src in j["sources"].as_array().unwrap() {
        check_object::<SourceStats>(src, "source");
    }
    // Escaped text comes back exactly.
    assert_eq!(j["sources"][1]["reason"], s.sources[1].reason.as_str());
    assert_eq!(j["zones"][1]["name"], "big \"4k\"");
}

#[test]
fn json_has_the_keys_the_c_api_reads() {
    let j: Json = serde_json::from_str(&Snapshot::sample().to_json()).unwrap();
    for k in C_API_ZONE_FIELDS {
        assert!(j["zones"][0].get(k).is_some(), "zone key {k}");
    }
    for k in [
        "name",
        "size",
        "limit",
        "used",
        "free",
        "requests",
        "fails",
        "sleeps",
        "bucket_size",
    ] {
        assert!(C_API_ZONE_FIELDS.contains(&k));
    }
    for k in C_API_GLOBAL_FIELDS {
        assert!(j["global"][k].is_u64(), "global key {k}");
    }
    for k in [
        "mapped_bytes",
        "cached_bytes",
        "released_bytes",
        "pressure_level",
        "pressure_events",
    ] {
        assert!(C_API_GLOBAL_FIELDS.contains(&k));
    }
}

#[test]
fn json_of_an_empty_snapshot() {
    let j: Json = serde_json::from_str(&Snapshot::default().to_json()).unwrap();
    assert_eq!(j["zones"], Json::Array(vec![]));
    check_object::<GlobalStats>(&j["global"], "global");
}

#[test]
fn json_escapes_control_characters() {
    let mut s = Snapshot::default();
    s.zones.push(ZoneStats {
        name: "a\u{1}b\t\r\n\\\"é".into(),
        ..ZoneStats::default()
    });
    let j: Json = serde_json::from_str(&s.to_json()).unwrap();
    assert_eq!(j["zones"][0]["name"], "a\u{1}b\t\r\n\\\"é");
}

#[test]
fn prometheus_passes_the_checker() {
    let text = Snapshot::sample().to_prometheus();
    check_exposition(&text).unwrap();
    assert!(text.contains("ebbtide_zone_used_items{zone=\"small 64\"} 1000\n"));
    assert!(text.contains("ebbtide_zone_used_items{zone=\"big \\\"4k\\\"\"} 20\n"));
    assert!(text.contains("# TYPE ebbtide_zone_requests_total counter\n"));
    assert!(text.contains("# TYPE ebbtide_zone_used_items gauge\n"));
    assert!(text.contains("ebbtide_pool_squeezed{pool=\"blk-ring0\"} 1\n"));
    assert!(text.contains("ebbtide_pressure_level 2\n"));
    assert!(text.contains("ebbtide_last_event_source_info{last_event_source=\"psi\"} 1\n"));
    assert!(text.contains("ebbtide_last_event_age_seconds 1.5\n"));
    assert!(text.contains("ebbtide_squeeze_remaining_seconds 0\n"));
    assert!(text.contains(
        "ebbtide_source_reason_info{source=\"cgroup1\",reason=\"no \\\"memory\\\" controller mounted at /sys/fs/cgroup/memory\\\\v1\\nretrying\"} 1\n"
    ));
    assert!(text.contains(
        "ebbtide_source_watches_info{source=\"psi\",watches=\"/proc/pressure/memory: some 150000 1000000 -> low\"} 1\n"
    ));
    // An empty text is no series: a source that is not active watches nothing.
    assert!(!text.contains("watches=\"\""), "{text}");
    // One events family with a source label, HELP and TYPE once.
    assert_eq!(
        text.matches("# TYPE ebbtide_source_events_total counter\n")
            .count(),
        1
    );
    assert_eq!(
        text.matches("ebbtide_source_events_total{source=").count(),
        8
    );
    assert!(
        !text.contains("ebbtide_events_"),
        "per-source names are gone"
    );
    check_exposition(&Snapshot::default().to_prometheus()).unwrap();
}

#[test]
fn prometheus_counters_and_gauges_stay_apart() {
    let text = Snapshot::sample().to_prometheus();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut p = line.split(' ').skip(2);
        let (name, ty) = (p.next().unwrap(), p.next().unwrap());
        assert_eq!(name.ends_with("_total"), ty == "counter", "{line}");
    }
    for f in ZoneStats::fields() {
        if f.kind == FieldKind::Counter {
            let family = prometheus_series("zone", f).family;
            assert!(
                text.contains(&format!("# TYPE {family} counter")),
                "{family}"
            );
        }
    }
}

#[test]
fn prometheus_has_every_field() {
    // Every field of every group has its sample (the sample snapshot has no empty text).
    let s = Snapshot::sample();
    let text = s.to_prometheus();
    let check = |group: &str, fields: Vec<&'static Field>| {
        for f in fields.into_iter().filter(|f| f.kind != FieldKind::Label) {
            let se = prometheus_series(group, f);
            let found = text.lines().any(|l| {
                l.starts_with(&format!("{}{{", se.family))
                    || l.starts_with(&format!("{} ", se.family))
                        && se
                            .label
                            .as_ref()
                            .is_none_or(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            });
            let found = found
                && se.label.as_ref().is_none_or(|(k, v)| {
                    text.lines()
                        .any(|l| l.starts_with(&se.family) && l.contains(&format!("{k}=\"{v}\"")))
                });
            assert!(found, "{group}.{} ({})", f.name, se.family);
        }
    };
    check("global", GlobalStats::fields());
    check("source", SourceStats::fields());
    check("zone", ZoneStats::fields());
    check("pool", PoolStats::fields());
}

#[test]
fn set_reads_back_every_field() {
    // Stats::set is the reverse of for_each: copying every value field by field gives the
    // same struct.
    fn copy<S: Stats + Default + PartialEq + std::fmt::Debug>(s: &S) {
        let mut t = S::default();
        s.for_each(&mut |f, v| assert!(t.set(f.name, v), "{}", f.name));
        assert_eq!(&t, s);
        assert!(!t.set("no_such_field", Value::U64(1)));
    }
    let s = Snapshot::sample();
    copy(&s.global);
    copy(&s.zones[1]);
    copy(&s.pools[0]);
    copy(&s.sources[1]);
    let mut z = ZoneStats::default();
    assert!(!z.set("used", Value::Text("7")), "wrong type");
    assert!(!z.set("name", Value::U64(7)), "wrong type");
    assert_eq!(z, ZoneStats::default());
}

#[test]
fn table_has_vmstat_columns() {
    let s = Snapshot::sample();
    let t = s.to_table();
    let header = t
        .lines()
        .find(|l| l.starts_with("ITEM "))
        .expect("zone header");
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        &cols[..8],
        &["ITEM", "SIZE", "LIMIT", "USED", "FREE", "REQ", "FAIL", "SLEEP"]
    );
    let row = t.lines().find(|l| l.starts_with("small 64:")).unwrap();
    let cells: Vec<&str> = row["small 64:".len()..].split_whitespace().collect();
    assert_eq!(&cells[..7], &["64", "0", "1000", "300", "10000", "1", "2"]);
    // Columns are aligned: every number ends where its header ends.
    let end_of = |l: &str, i: usize| {
        let mut ends = Vec::new();
        let b = l.as_bytes();
        for j in 0..b.len() {
            if b[j] != b' ' && (j + 1 == b.len() || b[j + 1] == b' ') {
                ends.push(j);
            }
        }
        ends[i]
    };
    assert_eq!(end_of(header, 1), end_of(row, 2), "SIZE column aligned");
    assert!(t.contains("MAXPG"), "pool section");
    assert!(t.contains("pressure_level: 2"));
    assert!(!t.lines().any(|l| l.ends_with(' ')));
}

#[test]
fn c_header_declares_every_field() {
    let h = c_header();
    for f in ZoneStats::fields() {
        assert!(h.contains(&format!(" {}", f.name)), "{}", f.name);
    }
    assert!(h.contains("struct ebbtide_pool_stats {\n\tstruct ebbtide_zone_stats zone;"));
    assert!(h.contains("#define EBBTIDE_STATS_VERSION 1"));
}
