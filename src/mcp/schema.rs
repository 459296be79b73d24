//! Tool input schemas: generated from each tool's argument type, and the one check every call's
//! arguments pass against them before the tool runs (SPEC.md §The MCP server).

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The input schema of `T`, with every subschema inlined: some MCP clients cannot follow `$ref`.
pub fn schema_of<T: JsonSchema>() -> Map<String, Value> {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    let obj = schema
        .as_object_mut()
        .expect("an argument struct's schema is an object");
    obj.remove("$schema");
    obj.remove("title");
    obj.clone()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    let have = type_name(v);
    want == have || (want == "number" && have == "integer")
}

fn at(path: &str) -> &str {
    if path.is_empty() { "arguments" } else { path }
}

/// Checks `v` against `schema`: types, required properties, enums, bounds and items, the parts
/// the generated schemas use (anchor: validate_args). The error names the field and the rule.
pub fn validate(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(s) => type_matches(s, v),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|s| type_matches(s, v)),
            _ => true,
        };
        if !ok {
            return Err(format!("{}: expected {t}, got {}", at(path), type_name(v)));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        let names: Vec<String> = options.iter().map(Value::to_string).collect();
        return Err(format!("{}: must be one of {}", at(path), names.join(", ")));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array)
            && !alts.is_empty()
        {
            let mut errs = alts.iter().map(|s| validate(s, v, path));
            if !errs.any(|r| r.is_ok()) {
                let first = alts
                    .iter()
                    .map(|s| validate(s, v, path))
                    .find_map(Result::err)
                    .unwrap_or_default();
                return Err(first);
            }
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("{}: must be at least {min}", at(path)));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("{}: must be at most {max}", at(path)));
        }
    }
    if let Some(arr) = v.as_array() {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (arr.len() as u64) < min
        {
            return Err(format!("{}: must hold at least {min} items", at(path)));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (arr.len() as u64) > max
        {
            return Err(format!("{}: must hold at most {max} items", at(path)));
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            validate(items, item, &format!("{}[{i}]", at(path)))?;
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(req) {
                return Err(format!("{req}: required"));
            }
        }
        if let Some(props) = props {
            for (k, val) in obj {
                if let Some(s) = props.get(k) {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    validate(s, val, &p)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        #[schemars(length(max = 3))]
        files: Vec<String>,
        #[schemars(range(min = 1, max = 100))]
        limit: Option<u32>,
        severity: Option<crate::ledger::finding::Severity>,
    }

    #[test]
    fn the_generated_schema_refuses_what_it_should() {
        let s = Value::Object(schema_of::<Args>());
        assert!(!s.to_string().contains("$ref"));
        let ok = json!({"files": ["a"], "limit": 5, "severity": "HIGH"});
        assert_eq!(validate(&s, &ok, ""), Ok(()));
        let cases = [
            (json!({}), "files: required"),
            (json!({"files": "a"}), "files: expected"),
            (json!({"files": [1]}), "files[0]: expected"),
            (
                json!({"files": [], "limit": 500}),
                "limit: must be at most 100",
            ),
            (json!({"files": [], "severity": "BAD"}), "must be one of"),
            (
                json!({"files": ["a", "b", "c", "d"]}),
                "files: must hold at most 3 items",
            ),
        ];
        for (v, want) in cases {
            let err = validate(&s, &v, "").expect_err("refused");
            assert!(err.contains(want), "{v}: {err}");
        }
    }
}
