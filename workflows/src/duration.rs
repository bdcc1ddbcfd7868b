//! Durations as workflow files write them: `500ms`, `90s`, `30m`, `2h`, `1d`, or
//! combined, largest unit first: `1h30m`, `2m 30s`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How to write a duration; used in every hint about one.
pub(crate) const DURATION_HINT: &str =
    "write a whole number followed by a unit: `500ms`, `90s`, `30m`, `2h`, `1d`, or combine them, e.g. `1h30m`";

/// A span of time read from a workflow file. Serializes back to its canonical text
/// (`1h30m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(std::time::Duration);

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a duration: {reason}")]
pub struct DurationError {
    pub text: String,
    pub reason: String,
}

const UNITS: [(&str, u64); 5] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

impl Duration {
    pub fn from_std(duration: std::time::Duration) -> Duration {
        Duration(duration)
    }

    pub fn as_std(&self) -> std::time::Duration {
        self.0
    }

    /// Parses `30m`, `1h30m`, `500ms`, `2m 30s`.
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let err = |reason: String| DurationError { text: text.to_string(), reason };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(err("it is empty".to_string()));
        }
        let mut rest = trimmed;
        let mut total: u64 = 0;
        let mut last_unit_ms = u64::MAX;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(err(format!("expected a number at `{rest}`")));
            }
            let number: u64 = rest[..digits].parse().map_err(|_| err("the number is too large".to_string()))?;
            rest = rest[digits..].trim_start();
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = &rest[..unit_len];
            if unit.is_empty() {
                return Err(if rest.starts_with('.') {
                    err("fractions are not supported; use a smaller unit (`90s`, not `1.5m`)".to_string())
                } else {
                    err(format!("`{number}` has no unit"))
                });
            }
            let Some(&(_, unit_ms)) = UNITS.iter().find(|(name, _)| *name == unit) else {
                return Err(err(format!("unknown unit `{unit}`")));
            };
            if unit_ms >= last_unit_ms {
                return Err(err("write the units from largest to smallest, each once (`1h30m`)".to_string()));
            }
            last_unit_ms = unit_ms;
            total = number
                .checked_mul(unit_ms)
                .and_then(|ms| total.checked_add(ms))
                .ok_or_else(|| err("it is too long".to_string()))?;
            rest = rest[unit_len..].trim_start();
        }
        Ok(Duration(std::time::Duration::from_millis(total)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ms = u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return f.write_str("0s");
        }
        for (name, unit_ms) in UNITS {
            if ms >= unit_ms {
                write!(f, "{}{name}", ms / unit_ms)?;
                ms %= unit_ms;
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Duration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Duration, DurationError> {
        Duration::parse(s)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> std::time::Duration {
        d.0
    }
}

impl Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Duration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `30m`")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u128 {
        Duration::parse(text).unwrap().as_std().as_millis()
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(ms("30m"), 30 * 60_000);
        assert_eq!(ms("90s"), 90_000);
        assert_eq!(ms("1h30m"), 90 * 60_000);
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("2m 30s"), 150_000);
        assert_eq!(ms("1d"), 86_400_000);
        assert_eq!(ms("0s"), 0);
    }

    #[test]
    fn explains_what_is_wrong() {
        let reason = |t: &str| Duration::parse(t).unwrap_err().reason;
        assert_eq!(reason("10 parsecs"), "unknown unit `parsecs`");
        assert_eq!(reason("30"), "`30` has no unit");
        assert_eq!(reason("1.5m"), "fractions are not supported; use a smaller unit (`90s`, not `1.5m`)");
        assert_eq!(reason("30m1h"), "write the units from largest to smallest, each once (`1h30m`)");
        assert_eq!(reason("m"), "expected a number at `m`");
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason("99999999999999999999s"), "the number is too large");
    }

    #[test]
    fn displays_canonically() {
        assert_eq!(Duration::parse("90m").unwrap().to_string(), "1h30m");
        assert_eq!(Duration::parse("1500ms").unwrap().to_string(), "1s500ms");
        assert_eq!(Duration::parse("0s").unwrap().to_string(), "0s");
        assert_eq!(Duration::parse("2m 30s").unwrap().to_string(), "2m30s");
    }

    #[test]
    fn round_trips_through_serde() {
        let d: Duration = serde_json::from_str("\"1h30m\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m\"");
    }
}
