//! Durations as written in the YAML file: `500ms`, `3s`, `5m`, `1h`, or a bare number of seconds.

use std::time::Duration;

use super::raw::RawDuration;

/// Parses a [`RawDuration`]; the error says what is expected.
pub fn parse_duration(value: &RawDuration) -> Result<Duration, String> {
    let text = match value {
        RawDuration::Seconds(n) => return Ok(Duration::from_secs(*n)),
        RawDuration::Text(s) => s.trim(),
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a duration such as 500ms, 3s, 5m or 1h".to_owned())?;
    let d = match unit.trim() {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        other => return Err(format!("unknown unit {other:?}: use ms, s, m or h")),
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Duration, String> {
        parse_duration(&RawDuration::Text(s.into()))
    }

    #[test]
    fn units() {
        assert_eq!(p("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(p("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(p("3"), Ok(Duration::from_secs(3)));
        assert_eq!(p("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(p("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration(&RawDuration::Seconds(7)),
            Ok(Duration::from_secs(7))
        );
        assert!(p("").is_err());
        assert!(p("s").is_err());
        assert!(p("3d").is_err());
        assert!(p("-3s").is_err());
        assert!(p("1.5s").is_err());
    }
}
