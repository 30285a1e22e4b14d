//! `[[forms]]`: hosted web forms as configured, before `crate::forms` compiles and checks them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A hosted web form: what a user types in the browser (an API key, a confirmation), never passing
/// through the model.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormConfig {
    /// Named by `requires = ["form:ID"]` and by `{{form.ID.FIELD}}` templates; 1 to 64 letters,
    /// digits, `-` or `_`.
    #[schemars(example = &"openai")]
    pub id: String,
    /// The form page's heading.
    #[schemars(example = &"OpenAI API key")]
    pub title: String,
    /// Text above the fields. With `scope = "call"` it may show the call's arguments,
    /// `{{args.NAME}}`, escaped (each must be an argument of every tool requiring the form).
    #[schemars(example = &"Stored encrypted; used only for calls you make.")]
    pub description: Option<String>,
    /// The submit button's text (default "Submit").
    #[schemars(example = &"Save")]
    pub submit_label: Option<String>,
    /// `user`: kept for the user and reused by later calls; `call`: one answer for one tool call.
    #[serde(default)]
    pub scope: FormScope,
    /// The form's fields, in order; a call-scoped form without fields is a confirmation
    /// (Confirm / Cancel); a user-scoped one needs at least one.
    #[serde(default)]
    pub fields: Vec<FieldConfig>,
}

/// Whose answer a form collects: a user's lasting values (reused by every call) or one tool call's
/// answer (asked again each time, and so allowed to show that call's arguments).
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FormScope {
    /// A user's lasting values, reused by every call.
    #[default]
    User,
    /// One tool call's answer, asked again for each call.
    Call,
}

/// One field of a form.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldConfig {
    /// The field's name, as templates name it (`{{form.ID.NAME}}`).
    #[schemars(example = &"api_key")]
    pub name: String,
    /// The label shown beside the input.
    #[schemars(example = &"API key")]
    pub label: String,
    /// The kind of input: `text`, `textarea`, `email`, `url`, `number`, `integer`, `boolean`,
    /// `select`, `date` or `secret` (sealed with the key ring, never shown again).
    #[serde(rename = "type")]
    #[schemars(example = &"secret")]
    pub kind: String,
    /// Help text under the field.
    #[schemars(example = &"Starts with sk-")]
    pub help: Option<String>,
    /// Whether the field must be filled in.
    #[serde(default)]
    #[schemars(example = true)]
    pub required: bool,
    /// The value the form starts with (not for secrets).
    #[schemars(with = "Option<serde_json::Value>")]
    #[schemars(example = &"personal")]
    pub default: Option<toml::Value>,
    /// The smallest value (`number`, `integer`, `date`).
    #[schemars(with = "Option<serde_json::Value>")]
    #[schemars(example = 1)]
    pub min: Option<toml::Value>,
    /// The largest value (`number`, `integer`, `date`).
    #[schemars(with = "Option<serde_json::Value>")]
    #[schemars(example = 100)]
    pub max: Option<toml::Value>,
    /// The fewest characters (text kinds).
    #[schemars(example = 20)]
    pub min_length: Option<usize>,
    /// The most characters (text kinds; at most 2,048, or 20,000 in a textarea).
    #[schemars(example = 200)]
    pub max_length: Option<usize>,
    /// A Rust regular expression the whole value must match (text kinds).
    #[schemars(example = &"^sk-[A-Za-z0-9]+$")]
    pub pattern: Option<String>,
    /// The choices of a `select`.
    pub options: Option<Vec<OptionConfig>>,
}

/// One choice of a `select` field.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionConfig {
    /// What is stored when this choice is picked.
    #[schemars(example = &"acme")]
    pub value: String,
    /// What the user sees.
    #[schemars(example = &"ACME Inc.")]
    pub label: String,
}
