//! Wall-clock dates for prompts and reports, in UTC, without a time-zone database.

use std::time::{SystemTime, UNIX_EPOCH};

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn today() -> String {
    let (date, _) = split(SystemTime::now());
    date
}

/// `at` as RFC 3339 in UTC with milliseconds: `2026-11-29T15:20:01.123Z`.
pub fn rfc3339(at: SystemTime) -> String {
    let (date, ms_of_day) = split(at);
    let (h, m, s, ms) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{date}T{h:02}:{m:02}:{s:02}.{ms:03}Z")
}

/// A short, sortable, unique-enough run id: `YYYYMMDD-HHMMSS-xxxxxx`.
pub fn run_id() -> String {
    let now = SystemTime::now();
    let (date, ms_of_day) = split(now);
    let secs = ms_of_day / 1000;
    let nanos = now.duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    // Mix the pid and the sub-second time: two runs started in the same second by
    // different processes (a CI matrix) get different ids.
    let mix = (u64::from(nanos) ^ (u64::from(std::process::id()) << 20)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{}-{:02}{:02}{:02}-{:06x}",
        date.replace('-', ""),
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        (mix >> 40) & 0xff_ffff
    )
}

/// The date of `at` and the milliseconds since its midnight.
fn split(at: SystemTime) -> (String, u64) {
    let ms = at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let (y, m, d) = civil_from_days((ms / 86_400_000) as i64);
    (format!("{y:04}-{m:02}-{d:02}"), ms % 86_400_000)
}

/// Days since 1970-01-01 to a calendar date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { era * 400 + yoe + 1 } else { era * 400 + yoe }, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn timestamps() {
        let at = UNIX_EPOCH + Duration::from_millis(20_786 * 86_400_000 + 15 * 3_600_000 + 61_005);
        assert_eq!(super::rfc3339(at), "2026-11-29T15:01:01.005Z");
    }

    #[test]
    fn run_ids_are_branch_safe() {
        let id = super::run_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'), "{id}");
    }
}
