//! Tool input schemas: generated from each tool's argument type, and the one check every call's
//! arguments pass against them before the tool runs (SPEC.md §The MCP server).

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use metabob_wire::text::one_line;

/// The input schema of `T`, with every subschema inlined: some MCP clients cannot follow `$ref`.
/// Every object with named fields is closed (`additionalProperties: false`), here and so for
/// every tool at once, so a misspelt or invented argument is refused instead of silently doing
/// nothing, and clients can see that from the schema.
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
    // An argument struct with no fields has no `properties`, and takes nothing all the same.
    obj.entry("additionalProperties")
        .or_insert(Value::Bool(false));
    close_objects(&mut schema);
    match schema {
        Value::Object(obj) => obj,
        _ => Map::new(),
    }
}

/// Sets `additionalProperties: false` on every subschema that names its properties and says
/// nothing about others; a free-form map (`additionalProperties: true`) stays open. Keys that
/// hold data rather than schemas (`enum`, `default`, …) are left alone, and `properties` holds
/// schemas by field name, so a field called `properties` is not taken for a schema keyword.
fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(obj) => {
            if obj.contains_key("properties") {
                obj.entry("additionalProperties")
                    .or_insert(Value::Bool(false));
            }
            for (key, sub) in obj.iter_mut() {
                match (key.as_str(), sub) {
                    ("enum" | "const" | "default" | "examples", _) => {}
                    ("properties", Value::Object(by_name)) => {
                        by_name.values_mut().for_each(close_objects)
                    }
                    (_, sub) => close_objects(sub),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
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

/// The path of field `k` of the object at `path`.
fn field(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// A value as an error quotes it: JSON, cut so that a long or hostile value cannot flood the
/// reply.
fn quoted(v: &Value) -> String {
    one_line(&v.to_string(), QUOTED_CHARS)
}

const QUOTED_CHARS: usize = 60;

/// The refusal of names a closed object does not take, with the names it does take, so the
/// caller can correct the call in one go.
fn unknown_fields(path: &str, unknown: &[&String], props: Option<&Map<String, Value>>) -> String {
    let names: Vec<String> = unknown
        .iter()
        .map(|k| quoted(&Value::String((*k).clone())))
        .collect();
    let plural = if names.len() == 1 { "" } else { "s" };
    let takes: Vec<&str> = props
        .into_iter()
        .flat_map(|p| p.keys())
        .map(String::as_str)
        .collect();
    let (what, whom) = if path.is_empty() {
        ("argument", "this tool takes")
    } else {
        ("field", "it takes")
    };
    let takes = if takes.is_empty() {
        format!("{whom} none")
    } else {
        format!("{whom}: {}", takes.join(", "))
    };
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    };
    format!(
        "{prefix}unknown {what}{plural} {} ({takes})",
        names.join(", ")
    )
}

/// Checks `v` against `schema`: types, required properties, enums, bounds, items and the names a
/// closed object does not take, the parts the generated schemas use (anchor: validate_args). The
/// error names the field and the rule.
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
            // An optional field's type is [T, "null"]; the null half is what leaving it out
            // means, so only T is named.
            let want = match t {
                Value::Array(ts) => ts
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(" or "),
                t => t.to_string(),
            };
            return Err(format!(
                "{}: expected {want}, got {}",
                at(path),
                type_name(v)
            ));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        // An optional enum lists null among its values; leaving the argument out says the same
        // more plainly, so the refusal names the words only.
        let names: Vec<String> = options
            .iter()
            .filter(|o| !o.is_null())
            .map(Value::to_string)
            .collect();
        return Err(format!(
            "{}: must be one of {} (got {})",
            at(path),
            names.join(", "),
            quoted(v)
        ));
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
        let known = |k: &String| props.is_some_and(|p| p.contains_key(k));
        // Unknown names first: a misspelt required argument is better named as the misspelling
        // than as the argument that is missing.
        if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
            let unknown: Vec<&String> = obj.keys().filter(|k| !known(k)).collect();
            if !unknown.is_empty() {
                return Err(unknown_fields(path, &unknown, props));
            }
        }
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(req) {
                return Err(format!("{}: required", field(path, req)));
            }
        }
        let extra = schema.get("additionalProperties").filter(|s| s.is_object());
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(s, val, &field(path, k))?,
                None => {
                    if let Some(s) = extra {
                        validate(s, val, &field(path, k))?;
                    }
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
    struct Args {
        #[schemars(length(max = 3))]
        files: Vec<String>,
        #[schemars(range(min = 1, max = 100))]
        limit: Option<u32>,
        severity: Option<metabob_wire::finding::Severity>,
        kind: Option<Kind>,
        inner: Option<Inner>,
        pointer: Option<Map<String, Value>>,
    }

    #[derive(Debug, PartialEq, serde::Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Bug,
        Smell,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    struct Inner {
        x: u32,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    struct Nothing {}

    #[test]
    fn the_generated_schema_refuses_what_it_should() {
        let s = Value::Object(schema_of::<Args>());
        assert!(!s.to_string().contains("$ref"));
        let ok = json!({"files": ["a"], "limit": 5, "severity": "HIGH", "kind": "bug",
            "inner": {"x": 1}, "pointer": {"anything": 1}});
        assert_eq!(validate(&s, &ok, ""), Ok(()));
        // What the schema accepts is what serde reads, field by field.
        let read: Args = serde_json::from_value(ok).expect("an accepted value deserializes");
        assert_eq!(read.files, ["a"]);
        assert_eq!(read.limit, Some(5));
        assert_eq!(read.severity, Some(metabob_wire::finding::Severity::High));
        assert_eq!(read.kind, Some(Kind::Bug));
        assert_eq!(read.inner.map(|i| i.x), Some(1));
        assert_eq!(
            read.pointer.and_then(|p| p.get("anything").cloned()),
            Some(json!(1))
        );
        let smell: Args = serde_json::from_value(json!({"files": [], "kind": "smell"}))
            .expect("an accepted value deserializes");
        assert_eq!(smell.kind, Some(Kind::Smell));
        let cases = [
            (json!({}), "files: required"),
            (json!({"files": "a"}), "files: expected"),
            (json!({"files": [1]}), "files[0]: expected"),
            (
                json!({"files": [], "kind": 3}),
                r#"kind: expected "string", got integer"#,
            ),
            (
                json!({"files": [], "limit": 500}),
                "limit: must be at most 100",
            ),
            (
                json!({"files": [], "severity": "BAD"}),
                r#"severity: must be one of "CRITICAL", "HIGH", "MEDIUM", "LOW", "INFO" (got "BAD")"#,
            ),
            (
                json!({"files": [], "kind": "teach"}),
                r#"kind: must be one of "bug", "smell" (got "teach")"#,
            ),
            (
                json!({"files": ["a", "b", "c", "d"]}),
                "files: must hold at most 3 items",
            ),
            (json!({"files": [], "inner": {}}), "inner.x: required"),
            (
                json!({"files": [], "inner": {"x": 1, "y": 2}}),
                r#"inner: unknown field "y" (it takes: x)"#,
            ),
        ];
        for (v, want) in cases {
            let err = validate(&s, &v, "").expect_err("refused");
            assert!(err.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn unknown_arguments_are_refused_by_name_and_the_schema_says_so() {
        let s = Value::Object(schema_of::<Args>());
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(
            s["properties"]["inner"]
                .to_string()
                .matches("false")
                .count(),
            1,
            "a nested struct is closed too: {}",
            s["properties"]["inner"]
        );
        assert!(
            !s["properties"]["pointer"].to_string().contains("false"),
            "a free-form map stays open: {}",
            s["properties"]["pointer"]
        );
        let err = validate(&s, &json!({"files": [], "foo": 1}), "").expect_err("refused");
        assert!(
            err.starts_with(r#"unknown argument "foo" (this tool takes: "#),
            "{err}"
        );
        for name in ["files", "limit", "severity", "kind", "inner", "pointer"] {
            assert!(err.contains(name), "{err} lacks {name}");
        }
        // Every unknown name at once, and before a required one it may be a misspelling of.
        let err = validate(&s, &json!({"file": ["a"], "lmit": 5}), "").expect_err("refused");
        assert!(
            err.starts_with(r#"unknown arguments "file", "lmit" ("#),
            "{err}"
        );
        // A struct with no fields takes nothing.
        let none = Value::Object(schema_of::<Nothing>());
        assert_eq!(none["additionalProperties"], json!(false));
        assert_eq!(validate(&none, &json!({}), ""), Ok(()));
        assert_eq!(
            validate(&none, &json!({"x": 1}), ""),
            Err(r#"unknown argument "x" (this tool takes none)"#.to_string())
        );
        // A hostile name is quoted on one line and cut.
        let long = format!("a\n{}", "b".repeat(500));
        let err = validate(&none, &json!({ long: 1 }), "").expect_err("refused");
        assert!(!err.contains('\n') && err.len() < 200, "{err}");
    }
}
