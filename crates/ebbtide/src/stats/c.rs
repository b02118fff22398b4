//! The C view: declaration text matching the `#[repr(C)]` mirrors.

use super::{
    FieldType, GlobalStats, PoolStats, SourceStats, Stats, ZoneStats, C_TEXT_LEN, STATS_VERSION,
};
use std::fmt::Write;

fn decl<S: Stats>(out: &mut String, base: Option<(&str, &str)>, own: &[super::Field]) {
    let _ = writeln!(out, "struct {} {{", S::C_NAME);
    if let Some((member, c_struct)) = base {
        let _ = writeln!(out, "\tstruct {c_struct} {member};");
    }
    for f in own {
        let _ = match f.ty {
            FieldType::Text => writeln!(
                out,
                "\tchar {}[EBBTIDE_STATS_TEXT_LEN];\t/* {} */",
                f.name, f.description
            ),
            FieldType::U64 => writeln!(
                out,
                "\tuint64_t {};\t/* {}, {}: {} */",
                f.name,
                f.kind.word(),
                f.unit.word(),
                f.description
            ),
            FieldType::Bool => writeln!(
                out,
                "\tuint64_t {};\t/* 0 or 1: {} */",
                f.name, f.description
            ),
        };
    }
    out.push_str("};\n\n");
}

/// The C declarations of the stats structs, as they must appear in `include/ebbtide.h`:
/// `EBBTIDE_STATS_VERSION`, `EBBTIDE_STATS_TEXT_LEN` and `struct ebbtide_zone_stats`,
/// `ebbtide_pool_stats`, `ebbtide_global_stats`, `ebbtide_source_stats`. Every member is
/// 8-byte sized or a text array whose length is a multiple of 8, so there is no padding and
/// the layout is the declaration order on every ABI with 8-byte `uint64_t` alignment.
pub fn c_header() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "/* Generated from ebbtide::stats; do not edit by hand. */"
    );
    let _ = writeln!(out, "#define EBBTIDE_STATS_VERSION {STATS_VERSION}");
    let _ = writeln!(out, "#define EBBTIDE_STATS_TEXT_LEN {C_TEXT_LEN}\n");
    decl::<ZoneStats>(&mut out, None, ZoneStats::OWN_FIELDS);
    decl::<PoolStats>(
        &mut out,
        Some(("zone", ZoneStats::C_NAME)),
        PoolStats::OWN_FIELDS,
    );
    decl::<GlobalStats>(&mut out, None, GlobalStats::OWN_FIELDS);
    decl::<SourceStats>(&mut out, None, SourceStats::OWN_FIELDS);
    out
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// Members and their offsets as the C text lays them out (no padding by construction).
    fn c_layout(header: &str, c_name: &str) -> (Vec<(String, usize)>, usize) {
        let start = header.find(&format!("struct {c_name} {{")).unwrap();
        let body = &header[start..];
        let body = &body[body.find('\n').unwrap() + 1..body.find("};").unwrap()];
        let mut off = 0;
        let mut out = Vec::new();
        for line in body.lines() {
            let decl = line.trim().split(';').next().unwrap();
            let (size, name) = if let Some(rest) = decl.strip_prefix("uint64_t ") {
                (8, rest.to_string())
            } else if let Some(rest) = decl.strip_prefix("char ") {
                (C_TEXT_LEN, rest.split('[').next().unwrap().to_string())
            } else if let Some(rest) = decl.strip_prefix("struct ") {
                let mut p = rest.split(' ');
                let ty = p.next().unwrap();
                let (_, size) = c_layout(header, ty);
                (size, p.next().unwrap().to_string())
            } else {
                panic!("unexpected C member: {line}");
            };
            out.push((name, off));
            off += size;
        }
        (out, off)
    }

    fn check<S: Stats>(offsets: Vec<(&str, usize)>, size: usize) {
        let header = c_header();
        let (layout, c_size) = c_layout(&header, S::C_NAME);
        let rust: Vec<(String, usize)> = offsets
            .into_iter()
            .map(|(n, o)| (n.to_string(), o))
            .collect();
        assert_eq!(rust, layout, "{}", S::C_NAME);
        assert_eq!(size, c_size, "{}", S::C_NAME);
    }

    #[test]
    fn c_text_matches_repr_c_layout() {
        check::<ZoneStats>(ZoneStatsC::member_offsets(), size_of::<ZoneStatsC>());
        check::<PoolStats>(PoolStatsC::member_offsets(), size_of::<PoolStatsC>());
        check::<GlobalStats>(GlobalStatsC::member_offsets(), size_of::<GlobalStatsC>());
        check::<SourceStats>(SourceStatsC::member_offsets(), size_of::<SourceStatsC>());
    }

    #[test]
    fn to_c_copies_values() {
        let s = Snapshot::sample();
        let c = s.pools[0].to_c();
        assert_eq!(c.zone.used, s.pools[0].zone.used);
        assert_eq!(c.squeezed, 1);
        assert_eq!(&c.zone.name[..10], b"blk-ring0\0");
        let g = s.global.to_c();
        assert_eq!(g.pressure_level, 2);
        assert_eq!(&g.last_event_source[..4], b"psi\0");
    }
}
