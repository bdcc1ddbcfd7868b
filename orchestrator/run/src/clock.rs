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

/// Reads what [`rfc3339`] writes (`2026-11-29T15:20:01.123Z`; the fraction may be
/// absent or of any length, the zone must be `Z`); `None` for any other text.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let (date, time) = text.trim().strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut parts = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (h, min, s) = (parts.next()??, parts.next()??, parts.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    if !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let ms = format!("{fraction:0<3}").get(..3)?.parse::<u64>().ok()?;
    let days = u64::try_from(days_from_civil(y, m, d)).ok()?;
    let secs = days * 86_400 + h * 3600 + min * 60 + s;
    Some(UNIX_EPOCH + std::time::Duration::from_millis(secs * 1000 + ms))
}

/// A calendar date to days since 1970-01-01 (the inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
        assert_eq!(super::parse_rfc3339("2026-11-29T15:01:01.005Z"), Some(at));
        assert_eq!(super::parse_rfc3339("2026-11-29T15:01:01.5Z"), Some(at + Duration::from_millis(495)));
        assert_eq!(super::parse_rfc3339("2026-11-29T15:01:01Z"), Some(at - Duration::from_millis(5)));
        let leap = UNIX_EPOCH + Duration::from_secs(11_016 * 86_400);
        assert_eq!(super::parse_rfc3339("2000-02-29T00:00:00.000Z"), Some(leap));
        for bad in ["", "2026-11-29", "2026-13-01T00:00:00Z", "2026-11-29T15:01:01+01:00", "2026-11-29T25:00:00Z"] {
            assert_eq!(super::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn run_ids_are_branch_safe() {
        let id = super::run_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'), "{id}");
    }
}
