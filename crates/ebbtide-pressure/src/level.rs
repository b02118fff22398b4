//! The four pressure levels, shared by every source, the policy and the C ABI.

use std::fmt;
use std::str::FromStr;

/// How short of memory the process is.
///
/// The numeric values are a C ABI (`EBB_PRESSURE_NONE` = 0 .. `EBB_PRESSURE_CRITICAL` = 3) and
/// must never change. Levels are ordered: `Normal < Low < Moderate < Critical`.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Level {
    /// No pressure (`EBB_PRESSURE_NONE`).
    #[default]
    Normal = 0,
    /// Memory is getting short: trim caches to their working set.
    Low = 1,
    /// Memory is short: squeeze and drain the depots.
    Moderate = 2,
    /// Memory is critically short: drain per-CPU caches and disable buckets.
    Critical = 3,
}

impl Level {
    /// All levels in ascending order.
    pub const ALL: [Level; 4] = [Level::Normal, Level::Low, Level::Moderate, Level::Critical];

    /// The level with this ABI value, `None` for values above 3.
    /// From the C ABI value (`EBB_PRESSURE_*`, 0..=3).
    pub const fn from_raw(v: i32) -> Option<Level> {
        if v < 0 || v > 3 {
            None
        } else {
            Level::from_u8(v as u8)
        }
    }

    pub const fn from_u8(v: u8) -> Option<Level> {
        match v {
            0 => Some(Level::Normal),
            1 => Some(Level::Low),
            2 => Some(Level::Moderate),
            3 => Some(Level::Critical),
            _ => None,
        }
    }

    /// The ABI value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Lower-case name, as accepted by [`FromStr`].
    pub const fn name(self) -> &'static str {
        match self {
            Level::Normal => "normal",
            Level::Low => "low",
            Level::Moderate => "moderate",
            Level::Critical => "critical",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Level::from_str`]: the text that was not a level name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLevelError(pub String);

impl fmt::Display for ParseLevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid pressure level {:?} (expected none, normal, low, moderate or critical)",
            self.0
        )
    }
}

impl std::error::Error for ParseLevelError {}

impl FromStr for Level {
    type Err = ParseLevelError;

    /// Accepts `normal`, `none` (= normal), `low`, `moderate`, `critical`, case-insensitive,
    /// surrounding white space ignored.
    fn from_str(s: &str) -> Result<Level, ParseLevelError> {
        let t = s.trim();
        for (name, level) in [
            ("normal", Level::Normal),
            ("none", Level::Normal),
            ("low", Level::Low),
            ("moderate", Level::Moderate),
            ("critical", Level::Critical),
        ] {
            if t.eq_ignore_ascii_case(name) {
                return Ok(level);
            }
        }
        Err(ParseLevelError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_values_are_fixed() {
        assert_eq!(Level::Normal as u8, 0);
        assert_eq!(Level::Low as u8, 1);
        assert_eq!(Level::Moderate as u8, 2);
        assert_eq!(Level::Critical as u8, 3);
        for l in Level::ALL {
            assert_eq!(Level::from_u8(l.as_u8()), Some(l));
        }
        assert_eq!(Level::from_u8(4), None);
        assert_eq!(Level::from_u8(255), None);
    }

    #[test]
    fn ordering() {
        assert!(Level::Normal < Level::Low);
        assert!(Level::Low < Level::Moderate);
        assert!(Level::Moderate < Level::Critical);
        assert_eq!(Level::Low.max(Level::Critical), Level::Critical);
    }

    #[test]
    fn parse_and_display_round_trip() {
        for l in Level::ALL {
            assert_eq!(l.to_string().parse::<Level>(), Ok(l));
        }
        assert_eq!("none".parse::<Level>(), Ok(Level::Normal));
        assert_eq!(" Critical\n".parse::<Level>(), Ok(Level::Critical));
        let e = "medium".parse::<Level>().unwrap_err();
        assert!(e.to_string().contains("\"medium\""));
        assert!("".parse::<Level>().is_err());
    }
}
