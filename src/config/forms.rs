//! `[[forms]]`: hosted web forms as configured, before `crate::forms` compiles and checks them.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormConfig {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub submit_label: Option<String>,
    #[serde(default)]
    pub scope: FormScope,
    #[serde(default)]
    pub fields: Vec<FieldConfig>,
}

/// Whose answer a form collects: a user's lasting values (reused by every call) or one tool call's
/// answer (asked again each time, and so allowed to show that call's arguments).
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FormScope {
    #[default]
    User,
    Call,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldConfig {
    pub name: String,
    pub label: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub help: Option<String>,
    #[serde(default)]
    pub required: bool,
    pub default: Option<toml::Value>,
    pub min: Option<toml::Value>,
    pub max: Option<toml::Value>,
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    pub pattern: Option<String>,
    pub options: Option<Vec<OptionConfig>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionConfig {
    pub value: String,
    pub label: String,
}
