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
