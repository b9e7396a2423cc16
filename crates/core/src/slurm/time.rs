//! Slurm time limits. `--time` takes minutes at best, so hours are converted to whole minutes, rounding
//! up: a requested 0.5 h must become 30 minutes, and a tiny positive value must never become zero.

/// Whole minutes for a positive number of hours, rounded up (never 0 for a positive input).
pub fn hours_to_minutes(hours: f64) -> u64 {
    let minutes = (hours * 60.0 - 1e-9).ceil();
    if minutes < 1.0 {
        1
    } else {
        minutes as u64
    }
}

/// Slurm's `[D-]HH:MM:SS` form for a number of minutes.
pub fn format_duration_minutes(minutes: u64) -> String {
    let days = minutes / (24 * 60);
    let hours = (minutes / 60) % 24;
    let mins = minutes % 60;
    if days > 0 {
        format!("{days}-{hours:02}:{mins:02}:00")
    } else {
        format!("{hours:02}:{mins:02}:00")
    }
}

/// Parse Slurm's time forms (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) into whole
/// minutes, rounding seconds up; `UNLIMITED`/`INFINITE` and unparseable text give None.
pub fn parse_slurm_duration_minutes(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("UNLIMITED") || text.eq_ignore_ascii_case("INFINITE") {
        return None;
    }
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, text),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse::<u64>().ok()).collect::<Option<_>>()?;
    let seconds = match (text.contains('-'), parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return None,
    };
    Some(days * 24 * 60 + seconds.div_ceil(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_from_hours() {
        let cases = [(4.0, 240), (3.8, 228), (0.5, 30), (0.001, 1), (1.0 / 60.0, 1), (12.0, 720), (0.25, 15)];
        for (h, want) in cases {
            assert_eq!(hours_to_minutes(h), want, "hours_to_minutes({h})");
        }
    }

    #[test]
    fn parse_slurm_forms() {
        let cases = [
            ("04:00:00", Some(240)),
            ("30", Some(30)),
            ("30:30", Some(31)),
            ("1-00:00:00", Some(1440)),
            ("2-12", Some(2 * 1440 + 720)),
            ("1-01:30", Some(1440 + 90)),
            ("UNLIMITED", None),
            ("garbage", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_slurm_duration_minutes(text), want, "{text}");
        }
    }

    #[test]
    fn slurm_duration_form() {
        let cases = [
            (240, "04:00:00"),
            (30, "00:30:00"),
            (1, "00:01:00"),
            (24 * 60, "1-00:00:00"),
            (25 * 60 + 5, "1-01:05:00"),
            (228, "03:48:00"),
        ];
        for (m, want) in cases {
            assert_eq!(format_duration_minutes(m), want, "format({m})");
        }
    }
}
