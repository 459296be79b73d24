//! Reading a pointer's fields with errors that name the field, so a 400 tells the caller which
//! one was missing or malformed.

use serde_json::{Map, Value};

use super::errors::ApiError;

/// Text with U+0000 is refused on every store: PostgreSQL cannot keep it, and the two stores
/// answer the same.
const NUL: &str = "contains a NUL byte (U+0000), which the ledger does not store";

/// A JSON object plus the path it sits at (`""`, `"conceptData."`), for error details.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Fields<'a> {
    pub fn new(obj: &'a Map<String, Value>, prefix: &str) -> Self {
        Fields {
            obj,
            prefix: prefix.to_string(),
        }
    }

    /// The fields of a pointer the ledger composed itself (always an object; anything else
    /// reads as one with no fields).
    pub fn composed(pointer: &'a Value) -> Self {
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        Fields::new(pointer.as_object().unwrap_or(&EMPTY), "")
    }

    fn err(&self, name: &str, what: &str) -> ApiError {
        ApiError::bad(format!("{}{name}: {what}", self.prefix))
    }

    /// A field that is absent or JSON null reads as absent.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.contains('\0') => Err(self.err(name, NUL)),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(self.err(name, "must be a string")),
        }
    }

    /// A required string that is not blank.
    pub fn req_str(&self, name: &str) -> Result<&'a str, ApiError> {
        match self.opt_str(name)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(self.err(name, "required non-empty string")),
        }
    }

    pub fn opt_f64_in(&self, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x >= lo && x <= hi => Ok(Some(x)),
                _ => Err(self.err(name, &format!("must be a number in {lo}..{hi}"))),
            },
        }
    }

    pub fn opt_i64_in(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(x) if x >= lo && x <= hi => Ok(Some(x)),
                _ => Err(self.err(name, &format!("must be an integer in {lo}..={hi}"))),
            },
        }
    }

    pub fn opt_obj(&self, name: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.err(name, "must be an object")),
        }
    }

    pub fn req_obj(&self, name: &str) -> Result<Fields<'a>, ApiError> {
        match self.opt_obj(name)? {
            Some(m) => Ok(Fields::new(m, &format!("{}{name}.", self.prefix))),
            None => Err(self.err(name, "required object")),
        }
    }

    pub fn opt_str_list(&self, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v.as_str() {
                    Some(s) if s.contains('\0') => Err(self.err(name, NUL)),
                    Some(s) => Ok(s.to_string()),
                    None => Err(self.err(name, "must be an array of strings")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.err(name, "must be an array of strings")),
        }
    }

    /// One of a fixed set of words, or `default` when absent.
    pub fn opt_enum(
        &self,
        name: &str,
        allowed: &[&'static str],
        default: &'static str,
    ) -> Result<&'static str, ApiError> {
        match self.opt_str(name)? {
            None => Ok(default),
            Some(s) => {
                allowed.iter().find(|a| **a == s).copied().ok_or_else(|| {
                    self.err(name, &format!("must be one of {}", allowed.join(", ")))
                })
            }
        }
    }

    pub fn req_enum(&self, name: &str, allowed: &[&'static str]) -> Result<&'static str, ApiError> {
        if self.opt_str(name)?.is_none() {
            return Err(self.err(name, &format!("required, one of {}", allowed.join(", "))));
        }
        self.opt_enum(name, allowed, "")
    }
}
