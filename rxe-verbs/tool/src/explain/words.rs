//! How the explainer says quantities: durations the way people say them.

use std::time::Duration;

/// A duration the way people say it: "640 µs" as "0.64 ms", "655.36 ms".
pub fn duration(d: Duration) -> String {
    let us = d.as_micros();
    let trim = |x: f64, unit: &str| {
        let s = format!("{x:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s} {unit}")
    };
    if us < 100 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        trim(us as f64 / 1e3, "ms")
    } else {
        trim(us as f64 / 1e6, "s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_people_say_them() {
        assert_eq!(duration(Duration::from_micros(640)), "0.64 ms");
        assert_eq!(duration(Duration::from_micros(655_360)), "655.36 ms");
        assert_eq!(duration(Duration::from_micros(10)), "10 µs");
        assert_eq!(duration(Duration::from_micros(2_000_000)), "2 s");
    }
}
