//! Pure text helpers the vocabulary shares: times and durations as people write them, hex and
//! hashes, one safe line, and an enum variant's wire name. No clock, no randomness, no files:
//! those are process rules (`metabob_process::{clock, random, files}`).

use std::time::{Duration, UNIX_EPOCH};

/// RFC 3339 with milliseconds, UTC. A time past year 9999 has no RFC 3339 form and is shown as
/// the last one that does: rows are bounded when read, so only arithmetic on a bound value
/// gets here, and formatting never panics.
pub fn rfc3339_ms(ms: i64) -> String {
    let ms = ms.clamp(0, crate::row::MAX_TIME_MS);
    let t = UNIX_EPOCH + Duration::from_millis(ms as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parses RFC 3339 back to epoch milliseconds; `None` for anything else.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
}

/// A duration as people write it (`90s`, `30m`, `24h`, `7days`, `1h 30m`); `None` for anything
/// else.
pub fn parse_duration(s: &str) -> Option<Duration> {
    humantime::parse_duration(s.trim()).ok()
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(data))
}

/// `s` made safe to print on one line (anchor: one_line): control characters (newlines
/// included) become spaces and it is cut at `max` characters with `…`, so a hostile field can
/// neither forge lines of a reply nor flood it.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.trim().chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// A unit enum variant's wire name, as its serde attributes spell it (anchor: wire_name): the
/// one vocabulary the JSON, SPEC, the policy file and every sentence for people share, so a
/// `Display` never shows a Rust type's own name.
pub fn wire_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `Display` for unit enums through [`wire_name`].
#[macro_export]
macro_rules! display_as_wire_name {
    ($($t:ty),+ $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&$crate::text::wire_name(self))
            }
        }
    )+};
}
