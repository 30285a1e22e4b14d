//! The configuration file's JSON Schema, derived from the configuration types (their doc comments
//! are its descriptions), and every key it describes, walked out of it for the reference.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use super::Config;
use super::env::env_name;

/// The JSON Schema (draft 7, which taplo and Even Better TOML read) of the configuration file.
pub fn schema() -> Value {
    let mut schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<Config>()
        .to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("title".into(), "gatehouse configuration".into());
    }
    schema
}

/// What a key is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A value.
    Value,
    /// A table of keys (`[server]`, `http = { ... }`).
    Table,
    /// A list of tables (`[[providers]]`).
    Tables,
}

/// One key of the configuration, as the schema describes it.
#[derive(Debug, Clone)]
pub struct Key {
    /// The key as errors name it, with `[]` for any entry of a list: `providers[].client_id`.
    pub path: String,
    pub kind: KeyKind,
    /// The key's own schema, references resolved.
    pub schema: Map<String, Value>,
    /// The field's documentation, else its type's.
    pub description: Option<String>,
    /// The environment variable that sets it (keys of tables outside lists only).
    pub env: Option<String>,
    /// The name of the type the key refers to (`Duration`), when it refers to one.
    pub type_name: Option<String>,
    /// Whether its table must have it (an entry of a list of tables without `id`, say).
    pub required: bool,
}

/// Every key, tables and lists of tables too, depth first in the schema's (alphabetical) order.
pub fn keys(schema: &Value) -> Vec<Key> {
    let mut keys = Vec::new();
    let definitions = schema.get("definitions").and_then(Value::as_object);
    let top: &[String] = &[];
    if let Some(root) = schema.as_object() {
        walk(root, "", Some(top), definitions, &mut keys);
    }
    keys
}

/// The keys of one table (its schema). `env_path` is the table's path for environment variables,
/// `None` within a list of tables (which the environment cannot reach).
fn walk(
    table: &Map<String, Value>,
    prefix: &str,
    env_path: Option<&[String]>,
    definitions: Option<&Map<String, Value>>,
    keys: &mut Vec<Key>,
) {
    let Some(properties) = table.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required = table.get("required").and_then(Value::as_array);
    for (name, field) in properties {
        let path = format!("{prefix}{name}");
        let (mut schema, type_name) = resolve(field, definitions);
        let description = field
            .get("description")
            .or_else(|| schema.get("description"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        for sibling in ["default", "examples"] {
            if let Some(value) = field.get(sibling) {
                schema.insert(sibling.into(), value.clone());
            }
        }
        let env_path = env_path.map(|p| [p, std::slice::from_ref(name)].concat());
        let items = schema
            .get("items")
            .map(|items| resolve(items, definitions).0)
            .filter(|items| items.contains_key("properties"));
        let table = Some(schema.clone()).filter(|s| s.contains_key("properties"));
        let (kind, env) = match (&table, &items) {
            (Some(_), _) => (KeyKind::Table, None),
            (None, Some(_)) => (KeyKind::Tables, None),
            (None, None) => (KeyKind::Value, env_path.as_deref().map(env_name)),
        };
        keys.push(Key {
            path: path.clone(),
            kind,
            schema,
            description,
            env,
            type_name,
            required: required.is_some_and(|r| r.iter().any(|n| n == name)),
        });
        if let Some(children) = table {
            walk(&children, &format!("{path}."), env_path.as_deref(), definitions, keys);
        }
        if let Some(children) = items {
            walk(&children, &format!("{path}[]."), None, definitions, keys);
        }
    }
}

/// A schema with its reference followed (also through `allOf` of one and `anyOf` with `null`,
/// which is how an optional table or a documented reference is written), and the referred type's
/// name.
pub fn resolve(schema: &Value, definitions: Option<&Map<String, Value>>) -> (Map<String, Value>, Option<String>) {
    let empty = Map::new();
    let object = schema.as_object().unwrap_or(&empty);
    if let Some(name) = object
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/definitions/"))
    {
        let target = definitions.and_then(|d| d.get(name)).cloned().unwrap_or(Value::Null);
        let (resolved, _) = resolve(&target, definitions);
        return (resolved, Some(name.to_owned()));
    }
    for combinator in ["allOf", "anyOf"] {
        if let Some(variants) = object.get(combinator).and_then(Value::as_array) {
            let non_null: Vec<&Value> = variants
                .iter()
                .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let [only] = non_null[..] {
                return resolve(only, definitions);
            }
        }
    }
    (object.clone(), None)
}
