//! [`Size`]: one grammar for every amount of bytes a user writes, such as
//! `limits.max_disk: 2GiB` or `limits.max_file_size: 20MiB`.
//!
//! A size is a number, an optional fraction, and an optional unit: `20MiB`, `1.5GiB`,
//! `512 KiB`, `300MB`, `4096B`, or a bare number of bytes (`1048576`). Binary units
//! (`KiB`, `MiB`, `GiB`, `TiB`) count in powers of 1024, decimal ones (`kB`/`KB`, `MB`,
//! `GB`, `TB`) in powers of 1000, as their names say.

use std::fmt;

/// How to write a size; for hints.
pub const SIZE_HINT: &str = "write a number of bytes or a number followed by a unit: `20MiB`, `2GiB`, `1.5GiB`, \
                             `500MB`, `4096`";

/// An amount of bytes a user wrote. Displays (and serializes) as its canonical text:
/// the largest binary unit that divides it exactly (`2048MiB` becomes `2GiB`), or bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(u64);

/// Why a text is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a size: {reason}")]
pub struct SizeError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// Every unit a size may carry, with its number of bytes. The binary ones, largest
/// first, are also the units sizes are displayed in.
const UNITS: [(&str, u64); 10] = [
    ("TiB", TIB),
    ("GiB", GIB),
    ("MiB", MIB),
    ("KiB", KIB),
    ("B", 1),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("kB", 1_000),
    ("KB", 1_000),
];

/// Digits of a fraction that count (more cannot change a whole byte of a `TiB`).
const MAX_FRACTION_DIGITS: u32 = 15;

impl Size {
    pub const ZERO: Size = Size(0);

    pub const fn from_bytes(bytes: u64) -> Size {
        Size(bytes)
    }

    pub const fn from_mib(mib: u64) -> Size {
        Size(mib.saturating_mul(MIB))
    }

    pub const fn from_gib(gib: u64) -> Size {
        Size(gib.saturating_mul(GIB))
    }

    pub const fn bytes(&self) -> u64 {
        self.0
    }

    pub const fn is_zero(&self) -> bool {
        self.0 == 0
    }

    /// Reads a size: `20MiB`, `1.5GiB`, `500 MB`, `4096B`, `4096` (bytes). A fraction
    /// of a byte is rounded down.
    pub fn parse(text: &str) -> Result<Size, SizeError> {
        let err = |reason: &str| SizeError { text: text.to_string(), reason: reason.to_string() };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(err("it is empty"));
        }
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err("it does not start with a number"));
        }
        let whole: u128 = trimmed[..digits].parse().map_err(|_| err("it is too large"))?;
        let mut rest = &trimmed[digits..];
        let (mut numerator, mut denominator) = (0u128, 1u128);
        if let Some(after) = rest.strip_prefix('.') {
            let len = after.bytes().take_while(u8::is_ascii_digit).count();
            if len == 0 {
                return Err(err("a `.` must be followed by digits"));
            }
            let kept = len.min(MAX_FRACTION_DIGITS as usize);
            numerator = after[..kept].parse().map_err(|_| err("its fraction is not a number"))?;
            denominator = 10u128.pow(kept as u32);
            rest = &after[len..];
        }
        let unit = rest.trim_start();
        let per_unit = if unit.is_empty() {
            1
        } else {
            match UNITS.iter().find(|(name, _)| *name == unit) {
                Some((_, bytes)) => *bytes,
                None => {
                    return Err(err(&format!("unknown unit `{unit}` (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)")));
                }
            }
        };
        if per_unit == 1 && numerator != 0 {
            return Err(err("a number of bytes has no fraction"));
        }
        let bytes = whole * u128::from(per_unit) + numerator * u128::from(per_unit) / denominator;
        u64::try_from(bytes).map(Size).map_err(|_| err("it is too large"))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 != 0 {
            for (name, bytes) in &UNITS[..4] {
                if self.0.is_multiple_of(*bytes) {
                    return write!(f, "{}{name}", self.0 / bytes);
                }
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl std::str::FromStr for Size {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Size, SizeError> {
        Size::parse(s)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Size;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as `20MiB` or `2GiB`, or a number of bytes")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                Size::parse(v).map_err(E::custom)
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v).map(Size).map_err(|_| E::custom(format!("`{v}` is not a size: it is negative")))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Size, E> {
                Err(E::custom(format!(
                    "`{v}` is not a size: write a whole number of bytes, or a unit such as `1.5GiB`"
                )))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(feature = "schemars")]
impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": ["string", "integer"],
            "minimum": 0,
            "description": "A size: `20MiB`, `2GiB`, `1.5GiB`, `500MB`, or a number of bytes.",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> u64 {
        Size::parse(text).unwrap().bytes()
    }

    fn reason(text: &str) -> String {
        Size::parse(text).unwrap_err().reason
    }

    #[test]
    fn reads_units_fractions_and_plain_bytes() {
        assert_eq!(bytes("20MiB"), 20 << 20);
        assert_eq!(bytes("2GiB"), 2 << 30);
        assert_eq!(bytes("1.5GiB"), 3 << 29);
        assert_eq!(bytes("512 KiB"), 512 << 10);
        assert_eq!(bytes("1TiB"), 1 << 40);
        assert_eq!(bytes("300MB"), 300_000_000);
        assert_eq!(bytes("2kB"), 2_000);
        assert_eq!(bytes("2KB"), 2_000);
        assert_eq!(bytes("1.5GB"), 1_500_000_000);
        assert_eq!(bytes("4096B"), 4096);
        assert_eq!(bytes("4096"), 4096);
        assert_eq!(bytes(" 0 "), 0);
        assert_eq!(bytes("0.5KiB"), 512);
        assert_eq!(bytes("0.0001KiB"), 0, "a fraction of a byte rounds down");
    }

    #[test]
    fn explains_what_is_wrong() {
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason("MiB"), "it does not start with a number");
        assert_eq!(reason("-1MiB"), "it does not start with a number");
        assert_eq!(reason("2 gigs"), "unknown unit `gigs` (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
        assert_eq!(reason("2mib"), "unknown unit `mib` (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
        assert_eq!(reason("1.5"), "a number of bytes has no fraction");
        assert_eq!(reason("1.GiB"), "a `.` must be followed by digits");
        assert_eq!(reason("17000000TiB"), "it is too large");
        assert_eq!(reason("99999999999999999999999999999999999999999"), "it is too large");
        assert_eq!(Size::parse("x").unwrap_err().to_string(), "`x` is not a size: it does not start with a number");
    }

    #[test]
    fn displays_canonically_and_reads_back() {
        for (text, canonical) in [
            ("2048MiB", "2GiB"),
            ("20MiB", "20MiB"),
            ("1.5GiB", "1536MiB"),
            ("1000", "1000B"),
            ("1024", "1KiB"),
            ("0", "0B"),
            ("1MB", "1000000B"),
        ] {
            let size = Size::parse(text).unwrap();
            assert_eq!(size.to_string(), canonical, "{text}");
            assert_eq!(Size::parse(canonical).unwrap(), size, "{canonical}");
        }
    }

    #[test]
    fn round_trips_through_serde() {
        let size: Size = serde_json::from_str("\"2GiB\"").unwrap();
        assert_eq!(size, Size::from_gib(2));
        assert_eq!(serde_json::to_string(&size).unwrap(), "\"2GiB\"");
        let plain: Size = serde_json::from_str("1048576").unwrap();
        assert_eq!(plain, Size::from_mib(1));
        assert!(serde_json::from_str::<Size>("-1").is_err());
        assert!(serde_json::from_str::<Size>("1.5").is_err());
        assert!(serde_json::from_str::<Size>("\"lots\"").is_err());
    }
}
