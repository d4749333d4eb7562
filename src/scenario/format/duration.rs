//! Durations in virtual time as a file writes them (`150ms`, `2s`, `1.5s`, `2m`, `1h`, or a
//! number of milliseconds), with their limit.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration in virtual time: an integer of milliseconds, or a string such as `150ms`, `2s`,
/// `1.5s`, `2m`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Millis(pub u64);

/// Parses `150ms`, `2s`, `1.5s`, `2m`, `1h` or a bare number of milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (s, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("invalid duration `{s}`: expected a number of milliseconds or a string like 150ms, 2s, 1.5s, 2m")
    })?;
    if value.is_nan() {
        return Err(format!("invalid duration `{s}`: not a number"));
    }
    if value < 0.0 {
        return Err(format!(
            "invalid duration `{s}`: a duration cannot be negative"
        ));
    }
    let ms = value * scale;
    if ms > MAX_DURATION_MS as f64 {
        return Err(too_long(s));
    }
    // Virtual time counts whole milliseconds: a fraction of one would be rounded without a word.
    if (ms - ms.round()).abs() > 1e-6 {
        return Err(format!(
            "invalid duration `{s}`: virtual time counts whole milliseconds ({ms} ms is not)"
        ));
    }
    Ok(ms.round() as u64)
}

/// The longest duration a scenario may give: 1e15 ms, about 31,700 years. Longer ones would
/// saturate the virtual clock.
pub const MAX_DURATION_MS: u64 = 1_000_000_000_000_000;

fn too_long(s: &str) -> String {
    format!("invalid duration `{s}`: longer than the {MAX_DURATION_MS} ms (about 31,700 years) a duration may be")
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: milliseconds, or a string like 150ms, 2s, 1.5s, 2m")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Millis, E> {
                if v > MAX_DURATION_MS {
                    return Err(E::custom(too_long(&v.to_string())));
                }
                Ok(Millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom("a duration cannot be negative")),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Millis, E> {
                parse_duration(&v.to_string())
                    .map(Millis)
                    .map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                parse_duration(v).map(Millis).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl JsonSchema for Millis {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Virtual time: milliseconds, or a string like 150ms, 2s, 1.5s, 2m",
            "oneOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9.]+(ms|s|m|h)?$"}
            ]
        })
    }
}
