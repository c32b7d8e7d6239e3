//! Human formatting of sizes, durations and previews (pure, unit-tested natively).

/// `1536` -> `1.5 KB`, `1_500_000_000` -> `1.5 GB` (decimal units, like download sizes are quoted).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Whole percent of a 0..=1 fraction, clamped.
pub fn percent(fraction: f64) -> u32 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * 100.0).floor() as u32
}

/// Time left: `less than a minute`, `about 3 min`, `about 1 h 5 min`.
pub fn eta(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "unknown".to_owned();
    }
    let s = seconds.round() as u64;
    if s < 60 {
        "less than a minute left".to_owned()
    } else if s < 3600 {
        format!("about {} min left", s.div_ceil(60))
    } else {
        let minutes = s.div_ceil(60);
        format!("about {} h {} min left", minutes / 60, minutes % 60)
    }
}

/// Tool call duration: `850 ms`, `1.2 s`, `2 min 5 s`.
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return String::new();
    }
    if ms < 1000.0 {
        format!("{} ms", ms.round() as u64)
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// At most `max` characters of `text`, with an ellipsis when cut (cuts on a char boundary).
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Tool arguments on one line: `{"selector":"#buy"}`; `null` and `{}` show as empty.
pub fn args_preview(args: &serde_json::Value, max: usize) -> String {
    match args {
        serde_json::Value::Null => String::new(),
        serde_json::Value::Object(map) if map.is_empty() => String::new(),
        other => truncate(&other.to_string(), max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_use_decimal_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_536), "1.5 KB");
        assert_eq!(bytes(512_000_000), "512 MB");
        assert_eq!(bytes(1_500_000_000), "1.5 GB");
        assert_eq!(bytes(3_100_000_000_000), "3.1 TB");
    }

    #[test]
    fn percent_clamps_and_floors() {
        assert_eq!(percent(0.0), 0);
        assert_eq!(percent(0.349), 34);
        assert_eq!(percent(1.5), 100);
        assert_eq!(percent(-1.0), 0);
        assert_eq!(percent(f64::NAN), 0);
    }

    #[test]
    fn eta_rounds_up_minutes() {
        assert_eq!(eta(12.0), "less than a minute left");
        assert_eq!(eta(61.0), "about 2 min left");
        assert_eq!(eta(3600.0 + 5.0 * 60.0), "about 1 h 5 min left");
        assert_eq!(eta(f64::INFINITY), "unknown");
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms(849.6), "850 ms");
        assert_eq!(duration_ms(1_234.0), "1.2 s");
        assert_eq!(duration_ms(125_000.0), "2 min 5 s");
        assert_eq!(duration_ms(-1.0), "");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo wörld", 5), "héllo…");
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("💎💎💎", 2), "💎💎…");
    }

    #[test]
    fn args_preview_is_compact() {
        assert_eq!(args_preview(&serde_json::json!({}), 50), "");
        assert_eq!(args_preview(&serde_json::Value::Null, 50), "");
        assert_eq!(
            args_preview(&serde_json::json!({"selector": "#buy"}), 50),
            r##"{"selector":"#buy"}"##
        );
        assert_eq!(
            args_preview(&serde_json::json!({"text": "abcdefghij"}), 8),
            "{\"text\":…"
        );
    }
}
