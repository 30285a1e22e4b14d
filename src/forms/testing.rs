//! Helpers for unit tests that need compiled forms, here and in other modules: the TOML fixtures
//! under `testdata/` (one copy of each), compiling them, and shorthand for posted input.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::{Form, Forms};
use crate::config::{ConfigError, FormConfig};

/// The forms of the book's example (docs/src/gating/forms.md): `openai`, user-scoped with a secret `api_key` and a select
/// `org`, and `pay`, a call-scoped confirmation without fields that shows tool arguments.
pub(crate) const EXAMPLE: &str = include_str!("testdata/example.toml");
/// Form `t` with one field of every kind, with help, defaults and limits.
pub(crate) const EVERY_KIND: &str = include_str!("testdata/every_kind.toml");
/// Form `t` whose field order (`zeta`, `alpha`, `ok`, `mail`) is neither alphabetical nor the order
/// a test posts them in.
pub(crate) const FIELD_ORDER: &str = include_str!("testdata/field_order.toml");

/// The `[[forms]]` part of a configuration file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Root {
    #[serde(default)]
    pub(crate) forms: Vec<FormConfig>,
}

pub(crate) fn compile(toml: &str) -> Result<Forms, ConfigError> {
    let root: Root = toml::from_str(toml).expect("test TOML parses");
    Forms::from_config(&root.forms)
}

/// Form `id` of a valid fixture.
pub(crate) fn form(toml: &str, id: &str) -> Form {
    compile(toml).expect("valid").get(id).cloned().expect("form in fixture")
}

/// A user-scoped form `t` with one field `f` (label `F`) described by `spec`.
pub(crate) fn one(spec: &str) -> Form {
    try_one(spec).expect("field config is valid")
}

pub(crate) fn try_one(spec: &str) -> Result<Form, ConfigError> {
    let toml = format!("[[forms]]\nid = \"t\"\ntitle = \"T\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\n{spec}\n");
    compile(&toml).map(|forms| forms.get("t").cloned().expect("form t"))
}

pub(crate) fn post(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// No stored secrets.
pub(crate) fn none() -> BTreeSet<String> {
    BTreeSet::new()
}

/// The key and message of a refused configuration.
pub(crate) fn refusal(result: Result<impl std::fmt::Debug, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::Key { key, message }) => (key, message),
        other => panic!("expected a key error, got {other:?}"),
    }
}

/// The key and message refusing form `t`'s field `f` described by `spec`.
pub(crate) fn field_refusal(spec: &str) -> (String, String) {
    refusal(try_one(spec))
}
