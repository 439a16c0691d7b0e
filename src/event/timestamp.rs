//! RFC 3339 UTC timestamps with milliseconds (`2026-11-29T10:04:45.123Z`) from the system clock.
//! The civil-date conversion lives here so the core needs no date library.

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of every timestamp this module formats: the event framing relies on it being fixed.
pub const TIMESTAMP_LEN: usize = 24;

/// The last millisecond a four-digit year can show (9999-12-31T23:59:59.999Z); later clocks clamp.
const MAX_MILLIS: u64 = 253_402_300_799_999;

/// Milliseconds since the Unix epoch; a clock set before 1970 reads as the epoch.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The current time, formatted.
pub fn now() -> String {
    format_millis(now_millis())
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (always 24 bytes).
pub fn format_millis(millis: u64) -> String {
    Timestamp::from_millis(millis).as_str().to_owned()
}

/// A formatted timestamp held inline: copied, never allocated, on the append path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp([u8; TIMESTAMP_LEN]);

impl Timestamp {
    /// `millis` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`, digit by digit (no `fmt`).
    pub fn from_millis(millis: u64) -> Self {
        let millis = millis.min(MAX_MILLIS);
        let days = millis / 86_400_000;
        let in_day = millis % 86_400_000;
        let (year, month, day) = civil_from_days(days);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut value: u64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, in_day / 3_600_000);
        put(14, 2, in_day / 60_000 % 60);
        put(17, 2, in_day / 1000 % 60);
        put(20, 3, in_day % 1000);
        Self(out)
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators were written, so this never fails.
        std::str::from_utf8(&self.0).unwrap_or("1970-01-01T00:00:00.000Z")
    }
}

/// Year, month (1–12) and day (1–31) of the proleptic Gregorian calendar for a count of days
/// since 1970-01-01. Howard Hinnant's algorithm: shift the year to start in March so the leap
/// day is last, then split days into 400-year eras, years of era, and a month table by formula.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // 719 468 days separate 0000-03-01 from 1970-01-01; counting from there keeps it unsigned.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_leap(year: u64) -> bool {
        (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
    }

    fn month_len(year: u64, month: u64) -> u64 {
        match month {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    #[test]
    fn now_is_the_system_clock_in_milliseconds() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = u128::from(now_millis());
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(before.as_millis() <= now && now <= after.as_millis());
    }

    #[test]
    fn formats_the_epoch_and_a_known_instant() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-29T10:04:45.123Z, computed independently.
        assert_eq!(format_millis(1_795_946_685_123), "2026-11-29T10:04:45.123Z");
    }

    #[test]
    fn handles_leap_days_and_century_rules() {
        assert_eq!(format_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_millis(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(format_millis(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
    }

    #[test]
    fn every_day_for_two_centuries_follows_the_calendar() {
        // Walks the calendar day by day, independently of the formula under test.
        let mut day_number = 0;
        for year in 1970..2170 {
            for month in 1..=12 {
                for day in 1..=month_len(year, month) {
                    assert_eq!(civil_from_days(day_number), (year, month, day));
                    day_number += 1;
                }
            }
        }
        assert_eq!(day_number, 73_049);
    }

    #[test]
    fn digit_formatting_agrees_with_fmt() {
        for millis in [
            0,
            1,
            59_999,
            86_399_999,
            1_795_946_685_123,
            now_millis(),
            MAX_MILLIS,
        ] {
            let (year, month, day) = civil_from_days(millis / 86_400_000);
            let ms = millis % 86_400_000;
            let expected = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
                ms / 3_600_000,
                ms / 60_000 % 60,
                ms / 1000 % 60,
                ms % 1000
            );
            assert_eq!(format_millis(millis), expected);
        }
    }

    #[test]
    fn every_timestamp_has_the_fixed_length() {
        for millis in [0, 1, 999, 86_399_999, now_millis(), MAX_MILLIS, u64::MAX] {
            assert_eq!(format_millis(millis).len(), TIMESTAMP_LEN);
        }
        assert_eq!(format_millis(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
