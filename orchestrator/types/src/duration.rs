//! [`Duration`]: one grammar for every span of time a user writes, in a workflow file
//! (`limits.timeout: 1h30m`) or on the command line (`--timeout 1.5h`).
//!
//! A duration is one or more terms, largest unit first, each unit once: `500ms`, `90s`,
//! `30m`, `1.5h`, `2d`, `1h30m`, `2m 30s`. A term's number may have a fraction. A bare
//! number (`90`, `2.5`) is seconds. Units: `d`, `h`, `m`, `s`, `ms`, `us`, `ns`, and the
//! words `day(s)`, `hr(s)`, `hour(s)`, `min(s)`, `minute(s)`, `sec(s)`, `second(s)`.

use std::fmt;

/// How to write a duration; for hints.
pub const DURATION_HINT: &str = "write a number followed by a unit: `500ms`, `90s`, `30m`, `1.5h`, `1d`, or \
                                 combine them, largest first, e.g. `1h30m`";

/// A span of time a user wrote. Displays (and serializes) as its canonical text:
/// `90m` becomes `1h30m`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(std::time::Duration);

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a duration: {reason}")]
pub struct DurationError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The units, largest first: the canonical name, the other names, and nanoseconds.
const UNITS: [(&str, &[&str], u128); 7] = [
    ("d", &["day", "days"], 86_400 * NANOS_PER_SEC),
    ("h", &["hr", "hrs", "hour", "hours"], 3_600 * NANOS_PER_SEC),
    ("m", &["min", "mins", "minute", "minutes"], 60 * NANOS_PER_SEC),
    ("s", &["sec", "secs", "second", "seconds"], NANOS_PER_SEC),
    ("ms", &[], 1_000_000),
    ("us", &[], 1_000),
    ("ns", &[], 1),
];

/// Digits of a fraction that count; the rest is below a nanosecond of any unit.
const MAX_FRACTION_DIGITS: usize = 18;

impl Duration {
    pub const ZERO: Duration = Duration(std::time::Duration::ZERO);

    pub const fn from_std(duration: std::time::Duration) -> Duration {
        Duration(duration)
    }

    pub const fn from_secs(secs: u64) -> Duration {
        Duration(std::time::Duration::from_secs(secs))
    }

    pub const fn as_std(&self) -> std::time::Duration {
        self.0
    }

    pub const fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// What is left of `self` after `elapsed`; zero when it has all passed.
    pub fn saturating_sub(self, elapsed: std::time::Duration) -> Duration {
        Duration(self.0.saturating_sub(elapsed))
    }

    /// Reads a duration: `30m`, `1.5h`, `1h30m`, `500ms`, `2m 30s`, `90` (seconds).
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let err = |reason: String| DurationError { text: text.to_string(), reason };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(err("it is empty".to_string()));
        }
        let mut rest = trimmed;
        let mut total: u128 = 0;
        let mut last_unit = u128::MAX;
        let mut first = true;
        while !rest.is_empty() {
            let (whole, fraction, after) = number(rest).ok_or_else(|| err(format!("expected a number at `{rest}`")))?;
            let written = &rest[..rest.len() - after.len()];
            rest = after.trim_start();
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = &rest[..unit_len];
            let unit_nanos = if unit.is_empty() {
                // A bare number is seconds, but only on its own: in `1h30` the `30` is
                // more likely minutes than seconds.
                if !(first && rest.is_empty()) {
                    return Err(err(format!("`{written}` has no unit")));
                }
                NANOS_PER_SEC
            } else {
                let Some(&(_, _, nanos)) = UNITS.iter().find(|(name, other, _)| *name == unit || other.contains(&unit))
                else {
                    return Err(err(format!("unknown unit `{unit}`")));
                };
                nanos
            };
            if unit_nanos >= last_unit {
                return Err(err("write the units from largest to smallest, each once (`1h30m`)".to_string()));
            }
            last_unit = unit_nanos;
            first = false;
            let too_long = || err("it is too long".to_string());
            let term = whole.checked_mul(unit_nanos).ok_or_else(too_long)?;
            let fraction_nanos = fraction.0.checked_mul(unit_nanos).ok_or_else(too_long)? / fraction.1;
            total = total.checked_add(term).and_then(|t| t.checked_add(fraction_nanos)).ok_or_else(too_long)?;
            rest = rest[unit_len..].trim_start();
        }
        let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| err("it is too long".to_string()))?;
        // The remainder is below one second, so it fits.
        let nanos = (total % NANOS_PER_SEC) as u32;
        Ok(Duration(std::time::Duration::new(secs, nanos)))
    }
}

/// Splits a leading `12` or `1.5` off `text`: the whole part, the fraction as
/// (numerator, denominator), and what follows. `None` when `text` does not start with a
/// digit, or the whole part does not fit.
fn number(text: &str) -> Option<(u128, (u128, u128), &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let whole: u128 = text[..digits].parse().ok()?;
    let rest = &text[digits..];
    let Some(after_point) = rest.strip_prefix('.') else { return Some((whole, (0, 1), rest)) };
    let fraction_len = after_point.bytes().take_while(u8::is_ascii_digit).count();
    let kept = fraction_len.min(MAX_FRACTION_DIGITS);
    let numerator: u128 = if kept == 0 { 0 } else { after_point[..kept].parse().ok()? };
    let denominator = 10u128.pow(kept as u32);
    Some((whole, (numerator, denominator), &after_point[fraction_len..]))
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        for (name, _, unit) in UNITS {
            if nanos >= unit {
                write!(f, "{}{name}", nanos / unit)?;
                nanos %= unit;
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

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration(d)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Duration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `30m`, `1.5h` or `1h30m`")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(E::custom)
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
                Ok(Duration::from_secs(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
                u64::try_from(v)
                    .map(Duration::from_secs)
                    .map_err(|_| E::custom(format!("`{v}` is not a duration: it is negative")))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Duration, E> {
                std::time::Duration::try_from_secs_f64(v)
                    .map(Duration)
                    .map_err(|_| E::custom(format!("`{v}` is not a duration: give a positive number of seconds")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(feature = "schemars")]
impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": ["string", "number"],
            "description": "A duration: `500ms`, `90s`, `30m`, `1.5h`, `1h30m`, or a number of seconds.",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u128 {
        Duration::parse(text).unwrap().as_std().as_millis()
    }

    fn reason(text: &str) -> String {
        Duration::parse(text).unwrap_err().reason
    }

    #[test]
    fn reads_what_the_workflow_grammar_read() {
        assert_eq!(ms("30m"), 30 * 60_000);
        assert_eq!(ms("90s"), 90_000);
        assert_eq!(ms("1h30m"), 90 * 60_000);
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("2m 30s"), 150_000);
        assert_eq!(ms("1d"), 86_400_000);
        assert_eq!(ms("0s"), 0);
    }

    #[test]
    fn reads_what_the_command_line_grammar_read() {
        assert_eq!(ms("1.5h"), 5_400_000);
        assert_eq!(ms("10m"), 600_000);
        assert_eq!(ms("250ms"), 250);
        assert_eq!(ms("7"), 7_000);
        assert_eq!(ms("2.5"), 2_500);
        assert_eq!(ms("1.5m"), 90_000);
        assert_eq!(ms("10 mins"), 600_000);
        assert_eq!(ms("2 hours"), 7_200_000);
        assert_eq!(ms("3sec"), 3_000);
        assert_eq!(ms("1hr"), 3_600_000);
        assert_eq!(ms(" 90s "), 90_000);
    }

    #[test]
    fn mixes_both() {
        assert_eq!(ms("1h 0.5m"), 3_630_000);
        assert_eq!(ms("1d12h"), 36 * 3_600_000);
        assert_eq!(Duration::parse("1.5us").unwrap().as_std().as_nanos(), 1_500);
        assert_eq!(Duration::parse("0.000000001s").unwrap().as_std().as_nanos(), 1);
        assert_eq!(ms("1.25000000000000000000000001s"), 1_250);
        let left = Duration::parse("1m").unwrap().saturating_sub(std::time::Duration::from_secs(20));
        assert_eq!(left, Duration::from_secs(40));
        assert!(left.saturating_sub(std::time::Duration::from_secs(60)).is_zero());
    }

    #[test]
    fn explains_what_is_wrong() {
        assert_eq!(reason("10 parsecs"), "unknown unit `parsecs`");
        assert_eq!(reason("1h30"), "`30` has no unit");
        assert_eq!(reason("1.5 2s"), "`1.5` has no unit");
        assert_eq!(reason("30m1h"), "write the units from largest to smallest, each once (`1h30m`)");
        assert_eq!(reason("1m 1min"), "write the units from largest to smallest, each once (`1h30m`)");
        assert_eq!(reason("m"), "expected a number at `m`");
        assert_eq!(reason("-5s"), "expected a number at `-5s`");
        assert_eq!(reason(".5s"), "expected a number at `.5s`");
        assert_eq!(reason("soon"), "expected a number at `soon`");
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason("99999999999999999999s"), "it is too long");
        assert_eq!(
            reason("999999999999999999999999999999999999999999d"),
            "expected a number at `999999999999999999999999999999999999999999d`"
        );
        assert_eq!(Duration::parse("x").unwrap_err().to_string(), "`x` is not a duration: expected a number at `x`");
    }

    #[test]
    fn displays_canonically_and_reads_back() {
        for (text, canonical) in [
            ("90m", "1h30m"),
            ("1500ms", "1s500ms"),
            ("0s", "0s"),
            ("2m 30s", "2m30s"),
            ("1.5h", "1h30m"),
            ("90", "1m30s"),
            ("1.0005s", "1s500us"),
        ] {
            let d = Duration::parse(text).unwrap();
            assert_eq!(d.to_string(), canonical, "{text}");
            assert_eq!(Duration::parse(canonical).unwrap(), d, "{canonical}");
        }
    }

    #[test]
    fn round_trips_through_serde() {
        let d: Duration = serde_json::from_str("\"1h30m\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m\"");
        let secs: Duration = serde_json::from_str("90").unwrap();
        assert_eq!(secs, Duration::from_secs(90));
        let fraction: Duration = serde_json::from_str("1.5").unwrap();
        assert_eq!(fraction.as_std().as_millis(), 1_500);
        assert!(serde_json::from_str::<Duration>("-1").is_err());
        assert!(serde_json::from_str::<Duration>("\"1 fortnight\"").is_err());
    }
}
