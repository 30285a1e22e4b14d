//! The configuration reference, the book's page of every key (type, default, environment
//! variable, constraints, example), rendered from the configuration's schema so it cannot drift.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::schema::{Key, KeyKind, keys, resolve};

/// Where the book keeps the two generated files, relative to the repository.
pub const REFERENCE_PATH: &str = "docs/src/reference/configuration.md";
pub const SCHEMA_PATH: &str = "docs/src/reference/gatehouse.schema.json";

/// The schema as the repository keeps it: pretty JSON and a final newline.
pub fn schema_text(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// The reference page, in Markdown.
pub fn markdown(schema: &Value) -> String {
    let definitions = schema.get("definitions").and_then(Value::as_object);
    let mut page = String::from(HEADER);
    for key in keys(schema) {
        let depth = key.path.matches(['.']).count();
        let heading = "#".repeat((depth + 2).min(6));
        let shown = match key.kind {
            KeyKind::Table if depth == 0 => format!("[{}]", key.path),
            KeyKind::Tables if depth == 0 => format!("[[{}]]", key.path),
            _ => key.path.clone(),
        };
        let _ = writeln!(page, "\n{heading} `{shown}`\n");
        if let Some(description) = &key.description {
            let _ = writeln!(page, "{description}\n");
        }
        if key.kind == KeyKind::Value {
            facts(&mut page, &key, definitions);
        }
    }
    page
}

const HEADER: &str = "<!-- Written by `gatehouse config-reference`; edit the doc comments in src/config/ instead. -->

# Configuration reference

Every key of the configuration file, generated from the configuration types. Keys are grouped by
table, alphabetically. A key inside a list of tables (`[[providers]]`) is written `providers[].id`,
as error messages write it with the entry's index (`providers[0].id`).

- **Environment**: a key of a table (not of a list of tables) is also set by the variable shown,
  `GATEHOUSE_<SECTION>__<KEY>`; lists also take comma-separated text.
- **`env:NAME`**: any string value written `env:NAME` is read from the environment variable `NAME`.
- **Durations** are text: a number and a unit, `\"30s\"`, `\"10m\"`, `\"1h 30m\"`, `\"7d\"`.

The same keys as a JSON Schema: [`gatehouse.schema.json`](gatehouse.schema.json), for editors
(see [Editor support](../configuration.md#editor-support)).
";

fn facts(page: &mut String, key: &Key, definitions: Option<&Map<String, Value>>) {
    let _ = writeln!(
        page,
        "- Type: {}",
        type_text(&key.schema, key.type_name.as_deref(), definitions)
    );
    for (value, description) in variants(&key.schema, definitions) {
        if !description.is_empty() {
            let _ = writeln!(page, "  - `{value}`: {description}");
        }
    }
    match key.schema.get("default") {
        Some(value) if !value.is_null() => {
            let _ = writeln!(page, "- Default: `{}`", toml_text(value));
        }
        _ if key.required => page.push_str("- Required\n"),
        _ => page.push_str("- Default: unset\n"),
    }
    if let Some(env) = &key.env {
        let _ = writeln!(page, "- Environment: `{env}`");
    }
    let constraints = constraints(&key.schema);
    if !constraints.is_empty() {
        let _ = writeln!(page, "- Constraints: {}", constraints.join("; "));
    }
    let name = key.path.rsplit('.').next().unwrap_or(&key.path);
    if let Some(example) = example(&key.schema) {
        let _ = writeln!(page, "- Example: `{name} = {}`", toml_text(example));
    }
}

/// The first example, else the default when it is a value.
pub fn example(schema: &Map<String, Value>) -> Option<&Value> {
    let examples = schema.get("examples").and_then(Value::as_array);
    examples
        .and_then(|e| e.first())
        .or_else(|| schema.get("default"))
        .filter(|v| !v.is_null())
}

fn type_text(schema: &Map<String, Value>, type_name: Option<&str>, definitions: Option<&Map<String, Value>>) -> String {
    if type_name == Some("Duration") {
        return "duration".into();
    }
    let consts = variants(schema, definitions);
    if !consts.is_empty() {
        let values: Vec<String> = consts.iter().map(|(v, _)| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    };
    match types.first().copied() {
        Some("array") => {
            let (items, name) = schema
                .get("items")
                .map_or_else(|| (Map::new(), None), |i| resolve(i, definitions));
            format!("list of {}", plural(&type_text(&items, name.as_deref(), definitions)))
        }
        Some("object") => {
            let (values, name) = schema
                .get("additionalProperties")
                .map_or_else(|| (Map::new(), None), |v| resolve(v, definitions));
            format!("table of {}", plural(&type_text(&values, name.as_deref(), definitions)))
        }
        Some("string") if schema.get("format").and_then(Value::as_str) == Some("uri") => "URL".into(),
        Some("integer") => "integer".into(),
        Some(other) => other.into(),
        None => "any value".into(),
    }
}

fn plural(text: &str) -> String {
    match text {
        "any value" => "any values".into(),
        "duration" | "string" | "integer" | "boolean" | "number" => format!("{text}s"),
        other => other.into(),
    }
}

/// The values a key may take, when the schema lists them, with each one's description.
fn variants(schema: &Map<String, Value>, definitions: Option<&Map<String, Value>>) -> Vec<(String, String)> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(|v| (value_text(v), String::new())).collect();
    }
    let Some(variants) = schema.get("oneOf").and_then(Value::as_array) else {
        return Vec::new();
    };
    variants
        .iter()
        .flat_map(|variant| {
            let (variant, _) = resolve(variant, definitions);
            let description = variant
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let values = match (variant.get("const"), variant.get("enum").and_then(Value::as_array)) {
                (Some(one), _) => vec![one.clone()],
                (None, Some(many)) => many.clone(),
                (None, None) => Vec::new(),
            };
            values.into_iter().map(move |v| (value_text(&v), description.clone()))
        })
        .collect()
}

fn constraints(schema: &Map<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(min) = schema.get("minimum").filter(|m| m.as_f64() != Some(0.0)) {
        found.push(format!("at least {min}"));
    }
    if let Some(max) = schema.get("maximum") {
        found.push(format!("at most {max}"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        found.push(format!("matches `{pattern}`"));
    }
    found
}

fn value_text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// A JSON value written as TOML (inline), as the file would have it.
pub fn toml_text(value: &Value) -> String {
    match value {
        Value::String(text) => toml::Value::String(text.clone()).to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(toml_text).collect::<Vec<_>>().join(", ")),
        Value::Object(table) if table.is_empty() => "{}".into(),
        Value::Object(table) => {
            let entries: Vec<String> = table.iter().map(|(k, v)| format!("{k} = {}", toml_text(v))).collect();
            format!("{{ {} }}", entries.join(", "))
        }
        other => other.to_string(),
    }
}
