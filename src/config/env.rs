//! The environment layer: `GATEHOUSE_<SECTION>__<KEY>` variables overlaid onto the file's table,
//! and `env:NAME` string values replaced by the variable NAME, both before the table is typed.

use std::collections::BTreeMap;

use super::ConfigError;

/// Environment variables that override one key: `GATEHOUSE_<SECTION>__<KEY>`, e.g.
/// `GATEHOUSE_DATABASE__URL`. The double underscore separates levels because keys contain `_`.
pub const ENV_PREFIX: &str = "GATEHOUSE_";
const ENV_LEVEL_SEPARATOR: &str = "__";
/// A string value `env:NAME` is replaced by the variable NAME (secrets stay out of files).
const ENV_REFERENCE: &str = "env:";

/// The variable that overrides the key at `path` (`["server", "bind"]`): `GATEHOUSE_SERVER__BIND`,
/// the name [`apply_env_overrides`] reads back.
pub(super) fn env_name(path: &[String]) -> String {
    let levels: Vec<String> = path.iter().map(|level| level.to_ascii_uppercase()).collect();
    format!("{ENV_PREFIX}{}", levels.join(ENV_LEVEL_SEPARATOR))
}

/// Overlays `GATEHOUSE_<SECTION>__<KEY>=value` onto the file's table. The value is taken as a
/// string where the key holds a string, and otherwise parsed as a TOML value (`8`, `true`,
/// `["a", "b"]`); a list key also takes comma-separated text.
pub(super) fn apply_env_overrides(tree: &mut toml::Table, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if !rest.contains(ENV_LEVEL_SEPARATOR) {
            continue;
        }
        let path: Vec<String> = rest.split(ENV_LEVEL_SEPARATOR).map(str::to_ascii_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::key(
                name.clone(),
                "is not of the form GATEHOUSE_<SECTION>__<KEY>",
            ));
        }
        let (leaf, sections) = path.split_last().expect("split yields at least one element");
        let mut table = &mut *tree;
        for section in sections {
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| {
                ConfigError::key(
                    name.clone(),
                    format!("`{section}` is not a section, so it cannot hold keys"),
                )
            })?;
        }
        let value = env_value(table.get(leaf), sections.first().map(String::as_str), leaf, raw);
        table.insert(leaf.clone(), value);
    }
    Ok(())
}

fn env_value(existing: Option<&toml::Value>, section: Option<&str>, leaf: &str, raw: &str) -> toml::Value {
    let is_list = matches!(existing, Some(toml::Value::Array(_))) || LIST_KEYS.contains(&(section.unwrap_or(""), leaf));
    let is_string =
        matches!(existing, Some(toml::Value::String(_))) || STRING_KEYS.contains(&(section.unwrap_or(""), leaf));
    if is_string {
        return toml::Value::String(raw.to_owned());
    }
    if let Ok(parsed) = format!("v = {raw}").parse::<toml::Table>()
        && let Some(value) = parsed.get("v")
    {
        return value.clone();
    }
    if is_list {
        let items = raw.split(',').map(str::trim).filter(|s| !s.is_empty());
        return toml::Value::Array(items.map(|s| toml::Value::String(s.to_owned())).collect());
    }
    toml::Value::String(raw.to_owned())
}

/// Keys whose environment override is always text, even when it looks like a number.
const STRING_KEYS: &[(&str, &str)] = &[
    ("server", "bind"),
    ("server", "public_url"),
    ("server", "request_body_timeout"),
    ("server", "sse_keep_alive"),
    ("server", "sse_retry"),
    ("server", "template_dir"),
    ("server", "metrics_bind"),
    ("database", "url"),
    ("identity", "mode"),
    ("identity", "header"),
    ("identity", "local_principal"),
    ("identity", "groups_header"),
    ("identity", "email_header"),
    ("identity", "issuer"),
    ("identity", "audience"),
    ("identity", "client_id"),
    ("identity", "client_secret"),
    ("identity", "principal_claim"),
    ("identity", "jwks_refresh_interval"),
    ("identity", "browser_session_ttl"),
    ("mcp", "session_idle_timeout"),
    ("elicitation", "ttl"),
    ("elicitation", "wait"),
    ("elicitation", "progress_interval"),
    ("secrets", "dev_key_file"),
    ("log", "format"),
    ("telemetry", "otlp_endpoint"),
    ("telemetry", "service_name"),
];
/// Keys whose environment override may be comma-separated text.
const LIST_KEYS: &[(&str, &str)] = &[
    ("server", "allowed_origins"),
    ("server", "trusted_proxies"),
    ("secrets", "keys"),
    ("identity", "scopes"),
];

pub(super) fn resolve_env_references(
    value: &mut toml::Value,
    path: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    match value {
        toml::Value::String(text) => {
            if let Some(name) = text.strip_prefix(ENV_REFERENCE) {
                let resolved = env.get(name).ok_or_else(|| {
                    ConfigError::key(path, format!("refers to environment variable {name}, which is not set"))
                })?;
                *text = resolved.clone();
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve_env_references(item, &format!("{path}[{i}]"), env)?;
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                resolve_env_references(item, &child, env)?;
            }
        }
        _ => {}
    }
    Ok(())
}
