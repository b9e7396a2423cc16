//! Unix seconds as UTC text: the one formatter of every door's times (no time zone database).

/// Unix seconds as UTC, `2026-12-04T18:42:24Z` (the days-to-civil conversion of the proleptic
/// Gregorian calendar).
pub fn rfc3339(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// [`rfc3339`] for people: `2026-12-04 18:42:24Z`.
pub fn readable(unix: i64) -> String {
    rfc3339(unix).replacen('T', " ", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_table() {
        for (unix, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (1_796_409_744, "2026-12-04T18:42:24Z"),
            (-1, "1969-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(unix), want, "{unix}");
        }
        assert_eq!(readable(1_796_256_000 + 3661), "2026-12-03 01:01:01Z");
    }
}
