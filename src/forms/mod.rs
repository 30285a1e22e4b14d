//! Hosted web forms defined in configuration: what a user enters in the browser when a tool needs
//! something only they can give (an API key, a confirmation).
//!
//! Everything is checked at start, so a bad form stops the service with a named key instead of
//! showing users a form they cannot complete. Posted values are checked only here, on the server:
//! the page is `novalidate`, so one set of rules and one set of messages apply to every client.

mod field;
mod view;

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{ConfigError, FormConfig};
use crate::domain::is_identifier;
use crate::secret::Secret;

pub use crate::config::FormScope;
pub use field::{Field, FieldKind, SelectOption};
pub use view::{FieldView, OptionView};

use field::Outcome;

const KEY_PREFIX: &str = "forms";
const DEFAULT_SUBMIT_LABEL: &str = "Submit";

/// All configured forms, compiled and checked once at start.
#[derive(Debug, Clone, Default)]
pub struct Forms {
    /// In configuration order, which is the order pages list them in.
    forms: Vec<Form>,
    by_id: BTreeMap<String, usize>,
}

impl Forms {
    pub fn from_config(forms: &[FormConfig]) -> Result<Forms, ConfigError> {
        let mut compiled = Forms::default();
        for (index, config) in forms.iter().enumerate() {
            let key = format!("{KEY_PREFIX}[{index}]");
            let form = Form::compile(config, &key)?;
            if let Some(first) = compiled.by_id.get(&form.id) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!("`{}` is already the id of {KEY_PREFIX}[{first}]", form.id),
                ));
            }
            compiled.by_id.insert(form.id.clone(), index);
            compiled.forms.push(form);
        }
        Ok(compiled)
    }

    pub fn get(&self, id: &str) -> Option<&Form> {
        self.by_id.get(id).and_then(|&index| self.forms.get(index))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Form> {
        self.forms.iter()
    }
}

#[derive(Debug, Clone)]
pub struct Form {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub submit_label: String,
    pub scope: FormScope,
    pub fields: Vec<Field>,
}

/// What a valid submission holds. Secrets are kept apart so that storing the values as plain JSON
/// can never write a secret in the clear: they go to the vault, the values do not.
#[derive(Debug, Clone, Default)]
pub struct Submission {
    pub values: serde_json::Map<String, serde_json::Value>,
    pub secrets: BTreeMap<String, Secret<String>>,
}

/// Per-field messages, in field order (the order the page shows them, so an error summary reads
/// top to bottom).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    errors: Vec<(String, String)>,
}

impl FieldErrors {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, message)| message.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.errors
            .iter()
            .map(|(name, message)| (name.as_str(), message.as_str()))
    }
}

impl Form {
    fn compile(config: &FormConfig, key: &str) -> Result<Form, ConfigError> {
        if !is_identifier(&config.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                "must be 1 to 64 letters, digits, `-` or `_` (it appears in URLs and tool requirements)",
            ));
        }
        if config.title.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.title"), "must not be empty"));
        }
        if let Some(label) = &config.submit_label
            && label.trim().is_empty()
        {
            return Err(ConfigError::key(
                format!("{key}.submit_label"),
                "must not be empty (leave it out for \"Submit\")",
            ));
        }
        if config.scope == FormScope::User {
            // A user's values outlive any one call, so there are no call arguments to show.
            if config.description.as_deref().is_some_and(|text| text.contains("{{")) {
                return Err(ConfigError::key(
                    format!("{key}.description"),
                    "only call-scoped forms can show tool arguments (`{{...}}`); set scope = \"call\" or remove them",
                ));
            }
            if config.fields.is_empty() {
                return Err(ConfigError::key(
                    format!("{key}.fields"),
                    "a user-scoped form needs at least one field (only a call-scoped confirmation may have none)",
                ));
            }
        }
        let mut fields: Vec<Field> = Vec::with_capacity(config.fields.len());
        for (index, field) in config.fields.iter().enumerate() {
            let field_key = format!("{key}.fields[{index}]");
            let field = Field::compile(field, &field_key)?;
            if let Some(first) = fields.iter().position(|known| known.name == field.name) {
                return Err(ConfigError::key(
                    format!("{field_key}.name"),
                    format!("`{}` is already the name of {key}.fields[{first}]", field.name),
                ));
            }
            fields.push(field);
        }
        Ok(Form {
            id: config.id.clone(),
            title: config.title.clone(),
            description: config.description.clone(),
            submit_label: config
                .submit_label
                .clone()
                .unwrap_or_else(|| DEFAULT_SUBMIT_LABEL.to_owned()),
            scope: config.scope,
            fields,
        })
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|field| field.name == name)
    }

    /// Every field is checked, so the page can show all problems at once rather than one per post.
    pub fn validate(
        &self,
        input: &[(String, String)],
        stored_secrets: &BTreeSet<String>,
    ) -> Result<Submission, FieldErrors> {
        let posted = self.first_values(input);
        let mut submission = Submission::default();
        let mut errors = FieldErrors::none();
        for field in &self.fields {
            let raw = posted.get(field.name.as_str()).copied();
            match field.check(raw, stored_secrets.contains(&field.name)) {
                Ok(Outcome::Absent) => {}
                Ok(Outcome::Value(value)) => {
                    submission.values.insert(field.name.clone(), value);
                }
                Ok(Outcome::Secret(secret)) => {
                    submission.secrets.insert(field.name.clone(), Secret::new(secret));
                }
                Err(message) => errors.errors.push((field.name.clone(), message)),
            }
        }
        if errors.is_empty() { Ok(submission) } else { Err(errors) }
    }

    /// The first value posted for each field. The first counts because a browser posts fields in
    /// page order, so a value appended to a crafted URL cannot override what the page sent.
    fn first_values<'a>(&self, input: &'a [(String, String)]) -> BTreeMap<&'a str, &'a str> {
        let mut posted = BTreeMap::new();
        for (name, value) in input {
            if self.field(name).is_some() {
                posted.entry(name.as_str()).or_insert(value.as_str());
            }
        }
        posted
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Root {
        #[serde(default)]
        forms: Vec<FormConfig>,
    }

    pub(super) fn compile(toml: &str) -> Result<Forms, ConfigError> {
        let root: Root = toml::from_str(toml).expect("test TOML parses");
        Forms::from_config(&root.forms)
    }

    /// A user-scoped form `t` with one field `f` (label `F`) described by `spec`.
    pub(super) fn one(spec: &str) -> Form {
        try_one(spec).expect("field config is valid")
    }

    pub(super) fn try_one(spec: &str) -> Result<Form, ConfigError> {
        let toml =
            format!("[[forms]]\nid = \"t\"\ntitle = \"T\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\n{spec}\n");
        compile(&toml).map(|forms| forms.get("t").cloned().expect("form t"))
    }

    pub(super) fn post(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    /// The key and message of a refused configuration.
    pub(super) fn refusal(result: Result<impl std::fmt::Debug, ConfigError>) -> (String, String) {
        match result {
            Err(ConfigError::Key { key, message }) => (key, message),
            other => panic!("expected a key error, got {other:?}"),
        }
    }

    pub(super) fn field_refusal(spec: &str) -> (String, String) {
        refusal(try_one(spec))
    }

    const EXAMPLE: &str = r#"
[[forms]]
id = "openai"
title = "OpenAI API key"
description = "Stored encrypted; used only for calls you make."
scope = "user"
submit_label = "Save"
[[forms.fields]]
name = "api_key"
label = "API key"
type = "secret"
help = "Starts with sk-"
required = true
min_length = 20
[[forms.fields]]
name = "org"
label = "Organization"
type = "select"
options = [{ value = "personal", label = "Personal" }, { value = "acme", label = "ACME Inc." }]
default = "personal"

[[forms]]
id = "pay"
title = "Confirm payment"
description = "Pay {{args.amount}} EUR to {{args.payee}}?"
scope = "call"
submit_label = "Pay"
"#;

    #[test]
    fn the_documented_example_compiles() {
        let forms = compile(EXAMPLE).expect("example is valid");
        let ids: Vec<_> = forms.iter().map(|form| form.id.as_str()).collect();
        assert_eq!(ids, ["openai", "pay"]);
        let openai = forms.get("openai").expect("openai");
        assert_eq!(openai.submit_label, "Save");
        assert_eq!(openai.scope, FormScope::User);
        assert!(openai.field("api_key").expect("api_key").is_secret());
        assert!(!openai.field("org").expect("org").is_secret());
        assert_eq!(
            openai.field("org").expect("org").kind,
            FieldKind::Select(vec![
                SelectOption {
                    value: "personal".into(),
                    label: "Personal".into()
                },
                SelectOption {
                    value: "acme".into(),
                    label: "ACME Inc.".into()
                },
            ])
        );
        let pay = forms.get("pay").expect("pay");
        assert_eq!(pay.scope, FormScope::Call);
        assert!(pay.fields.is_empty());
        assert!(forms.get("missing").is_none());
        assert!(openai.field("missing").is_none());
    }

    #[test]
    fn scope_and_submit_label_have_defaults() {
        let form = one("type = \"text\"");
        assert_eq!(form.scope, FormScope::User);
        assert_eq!(form.submit_label, "Submit");
    }

    #[test]
    fn a_call_scoped_form_without_fields_validates_to_nothing() {
        let forms = compile(EXAMPLE).expect("example is valid");
        let pay = forms.get("pay").expect("pay");
        let submission = pay
            .validate(&post(&[("csrf", "x"), ("action", "approve")]), &BTreeSet::new())
            .expect("valid");
        assert!(submission.values.is_empty() && submission.secrets.is_empty());
    }

    #[test]
    fn no_forms_is_fine() {
        assert_eq!(compile("").expect("empty").iter().count(), 0);
    }

    #[test]
    fn unknown_keys_are_refused_by_serde() {
        let root: Result<Root, _> = toml::from_str("[[forms]]\nid = \"a\"\ntitle = \"A\"\ncolour = \"red\"\n");
        assert!(root.is_err());
        let root: Result<Root, _> = toml::from_str(
            "[[forms]]\nid = \"a\"\ntitle = \"A\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\nplaceholder = \"x\"\n",
        );
        assert!(root.is_err());
        let root: Result<Root, _> = toml::from_str("[[forms]]\nid = \"a\"\ntitle = \"A\"\nscope = \"session\"\n");
        assert!(root.is_err());
    }

    #[test]
    fn form_level_refusals_name_the_key() {
        let form = |id: &str, rest: &str| format!("[[forms]]\nid = \"{id}\"\ntitle = \"T\"\n{rest}\n");
        let field = "[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\n";

        let (key, message) = refusal(compile(&form("bad id", field)));
        assert_eq!(key, "forms[0].id");
        assert!(message.contains("letters, digits"), "{message}");

        let (key, message) = refusal(compile(&(form("a", field) + &form("a", field))));
        assert_eq!(key, "forms[1].id");
        assert!(message.contains("forms[0]"), "{message}");

        let (key, _) = refusal(compile(
            "[[forms]]\nid = \"a\"\ntitle = \"  \"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\n",
        ));
        assert_eq!(key, "forms[0].title");

        let (key, message) = refusal(compile(&(form("a", field) + &form("b", ""))));
        assert_eq!(key, "forms[1].fields");
        assert!(message.contains("at least one field"), "{message}");

        let (key, message) = refusal(compile(&form(
            "a",
            &format!("description = \"Pay {{{{args.amount}}}}\"\n{field}"),
        )));
        assert_eq!(key, "forms[0].description");
        assert!(
            message.contains("only call-scoped forms can show tool arguments"),
            "{message}"
        );

        let (key, _) = refusal(compile(&form("a", &format!("submit_label = \" \"\n{field}"))));
        assert_eq!(key, "forms[0].submit_label");

        // The same description is fine on a call-scoped form.
        compile(&form("a", "scope = \"call\"\ndescription = \"Pay {{args.amount}}\"")).expect("call form");
    }

    #[test]
    fn field_names_and_labels_are_checked() {
        let (key, _) =
            field_refusal("type = \"text\"\n[[forms.fields]]\nname = \"g h\"\nlabel = \"G\"\ntype = \"text\"");
        assert_eq!(key, "forms[0].fields[1].name");

        let (key, message) =
            field_refusal("type = \"text\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"G\"\ntype = \"email\"");
        assert_eq!(key, "forms[0].fields[1].name");
        assert!(message.contains("forms[0].fields[0]"), "{message}");

        let (key, _) = refusal(compile(
            "[[forms]]\nid = \"a\"\ntitle = \"A\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"\"\ntype = \"text\"\n",
        ));
        assert_eq!(key, "forms[0].fields[0].label");

        let (key, message) = field_refusal("type = \"password\"");
        assert_eq!(key, "forms[0].fields[0].type");
        assert!(message.contains("`password`"), "{message}");
        for kind in [
            "text", "textarea", "email", "url", "number", "integer", "boolean", "select", "date", "secret",
        ] {
            assert!(message.contains(kind), "{message} lists {kind}");
        }
    }

    #[test]
    fn refusals_reach_fields_of_later_forms() {
        let toml = format!(
            "{EXAMPLE}\n[[forms]]\nid = \"c\"\ntitle = \"C\"\n[[forms.fields]]\nname = \"a\"\nlabel = \"A\"\ntype = \"text\"\n[[forms.fields]]\nname = \"b\"\nlabel = \"B\"\ntype = \"text\"\npattern = \"(\"\n"
        );
        let (key, message) = refusal(compile(&toml));
        assert_eq!(key, "forms[2].fields[1].pattern");
        assert!(message.contains("regular expression"), "{message}");
    }

    #[test]
    fn min_and_max_are_checked() {
        let cases = [
            (
                "type = \"text\"\nmin = 1",
                "forms[0].fields[0].min",
                "only number, integer and date",
            ),
            (
                "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }]\nmax = 1",
                "forms[0].fields[0].max",
                "only number",
            ),
            (
                "type = \"number\"\nmin = \"1\"",
                "forms[0].fields[0].min",
                "finite number",
            ),
            (
                "type = \"number\"\nmax = nan",
                "forms[0].fields[0].max",
                "finite number",
            ),
            (
                "type = \"number\"\nmax = inf",
                "forms[0].fields[0].max",
                "finite number",
            ),
            ("type = \"integer\"\nmin = 1.5", "forms[0].fields[0].min", "integer"),
            ("type = \"integer\"\nmax = \"9\"", "forms[0].fields[0].max", "integer"),
            (
                "type = \"integer\"\nmin = 10\nmax = 9",
                "forms[0].fields[0].min",
                "greater than max",
            ),
            (
                "type = \"number\"\nmin = 1.5\nmax = 1",
                "forms[0].fields[0].min",
                "greater than max",
            ),
            (
                "type = \"date\"\nmin = \"2026-13-01\"",
                "forms[0].fields[0].min",
                "date like",
            ),
            (
                "type = \"date\"\nmin = \"31/01/2026\"",
                "forms[0].fields[0].min",
                "date like",
            ),
            (
                "type = \"date\"\nmax = 2026-01-31T10:00:00",
                "forms[0].fields[0].max",
                "date like",
            ),
            ("type = \"date\"\nmax = 20260131", "forms[0].fields[0].max", "date like"),
            (
                "type = \"date\"\nmin = \"2026-02-01\"\nmax = 2026-01-31",
                "forms[0].fields[0].min",
                "greater than max",
            ),
        ];
        for (spec, expected_key, expected_message) in cases {
            let (key, message) = field_refusal(spec);
            assert_eq!(key, expected_key, "{spec}");
            assert!(message.contains(expected_message), "{spec}: {message}");
        }
        one("type = \"number\"\nmin = 1\nmax = 2.5");
        one("type = \"integer\"\nmin = -3\nmax = -3");
        one("type = \"date\"\nmin = \"2026-01-01\"\nmax = 2026-12-31");
    }

    #[test]
    fn lengths_are_checked() {
        let cases = [
            (
                "type = \"number\"\nmin_length = 1",
                "forms[0].fields[0].min_length",
                "only text, textarea",
            ),
            (
                "type = \"boolean\"\nmax_length = 1",
                "forms[0].fields[0].max_length",
                "only text, textarea",
            ),
            (
                "type = \"text\"\nmin_length = 5\nmax_length = 4",
                "forms[0].fields[0].min_length",
                "greater than",
            ),
            (
                "type = \"text\"\nmin_length = 2049",
                "forms[0].fields[0].min_length",
                "greater than",
            ),
            (
                "type = \"text\"\nmax_length = 2049",
                "forms[0].fields[0].max_length",
                "at most 2048",
            ),
            (
                "type = \"secret\"\nmax_length = 5000",
                "forms[0].fields[0].max_length",
                "at most 2048",
            ),
            (
                "type = \"textarea\"\nmax_length = 20001",
                "forms[0].fields[0].max_length",
                "at most 20000",
            ),
            (
                "type = \"text\"\nmax_length = 0",
                "forms[0].fields[0].max_length",
                "at least 1",
            ),
            (
                "type = \"email\"\nmin_length = 255",
                "forms[0].fields[0].min_length",
                "maximum length 254",
            ),
        ];
        for (spec, expected_key, expected_message) in cases {
            let (key, message) = field_refusal(spec);
            assert_eq!(key, expected_key, "{spec}");
            assert!(message.contains(expected_message), "{spec}: {message}");
        }
        one("type = \"textarea\"\nmax_length = 20000\nmin_length = 20000");
        one("type = \"url\"\nmin_length = 10\nmax_length = 10");
    }

    #[test]
    fn patterns_are_checked() {
        let (key, message) = field_refusal("type = \"url\"\npattern = \"https://.*\"");
        assert_eq!(key, "forms[0].fields[0].pattern");
        assert!(message.contains("only text, textarea, email and secret"), "{message}");
        let (key, _) = field_refusal("type = \"number\"\npattern = \"[0-9]+\"");
        assert_eq!(key, "forms[0].fields[0].pattern");

        let (key, message) = field_refusal("type = \"text\"\npattern = \"[a-z\"");
        assert_eq!(key, "forms[0].fields[0].pattern");
        assert!(message.contains("regular expression"), "{message}");

        // Valid once wrapped in `^(?:…)$`, but not alone: would otherwise escape the anchors.
        let (key, _) = field_refusal("type = \"text\"\npattern = \"a)|(?:b\"");
        assert_eq!(key, "forms[0].fields[0].pattern");

        // A counted repetition that would compile to far more than the size limit.
        let (key, message) = field_refusal("type = \"text\"\npattern = '(\\w{1000}){1000}'");
        assert_eq!(key, "forms[0].fields[0].pattern");
        assert!(message.contains("size limit"), "{message}");

        one("type = \"textarea\"\npattern = '(?s).*'");
        one("type = \"secret\"\npattern = 'sk-[A-Za-z0-9]{20,}'");
    }

    #[test]
    fn options_are_checked() {
        let cases = [
            ("type = \"select\"", "forms[0].fields[0].options", "at least one option"),
            (
                "type = \"select\"\noptions = []",
                "forms[0].fields[0].options",
                "at least one option",
            ),
            (
                "type = \"text\"\noptions = [{ value = \"a\", label = \"A\" }]",
                "forms[0].fields[0].options",
                "only select",
            ),
            (
                "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }, { value = \" \", label = \"B\" }]",
                "forms[0].fields[0].options[1].value",
                "empty",
            ),
            (
                "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }, { value = \"a\", label = \"B\" }]",
                "forms[0].fields[0].options[1].value",
                "option 0",
            ),
            (
                "type = \"select\"\noptions = [{ value = \"a\", label = \"\" }]",
                "forms[0].fields[0].options[0].label",
                "empty",
            ),
            (
                "type = \"select\"\noptions = [{ value = \"a\\nb\", label = \"A\" }]",
                "forms[0].fields[0].options[0].value",
                "control",
            ),
        ];
        for (spec, expected_key, expected_message) in cases {
            let (key, message) = field_refusal(spec);
            assert_eq!(key, expected_key, "{spec}");
            assert!(message.contains(expected_message), "{spec}: {message}");
        }
    }

    #[test]
    fn defaults_are_checked() {
        let options = "options = [{ value = \"a\", label = \"A\" }]";
        let cases = [
            ("type = \"secret\"\ndefault = \"sk-123\"", "cannot have a default"),
            ("type = \"text\"\ndefault = true", "must be a string"),
            ("type = \"text\"\ndefault = 5", "must be a string"),
            ("type = \"boolean\"\ndefault = \"true\"", "true or false"),
            ("type = \"integer\"\ndefault = \"5\"", "integer"),
            ("type = \"integer\"\ndefault = 5.0", "integer"),
            ("type = \"number\"\ndefault = \"5\"", "finite number"),
            ("type = \"number\"\ndefault = nan", "finite number"),
            ("type = \"date\"\ndefault = 5", "date like"),
            ("type = \"date\"\ndefault = 2026-01-31T08:00:00Z", "date like"),
            (
                "type = \"date\"\ndefault = \"tomorrow\"",
                "Enter a date like 2026-01-31.",
            ),
            (
                "type = \"date\"\nmin = \"2026-01-01\"\ndefault = \"2025-12-31\"",
                "on or after 2026-01-01",
            ),
            (
                "type = \"text\"\nmin_length = 5\ndefault = \"abc\"",
                "Enter at least 5 characters.",
            ),
            (
                "type = \"text\"\npattern = '[0-9]+'\ndefault = \"abc\"",
                "expected format",
            ),
            ("type = \"text\"\ndefault = \"two\\nlines\"", "one line"),
            ("type = \"text\"\nrequired = true\ndefault = \"\"", "required"),
            ("type = \"number\"\nmax = 10\ndefault = 10.5", "at most 10"),
            ("type = \"integer\"\nmin = 1\ndefault = 0", "at least 1"),
            ("type = \"email\"\ndefault = \"nobody\"", "email address"),
            ("type = \"url\"\ndefault = \"ftp://example.com\"", "web address"),
            ("type = \"boolean\"\nrequired = true\ndefault = false", "Tick this box"),
        ];
        for (spec, expected_message) in cases {
            let (key, message) = field_refusal(spec);
            assert_eq!(key, "forms[0].fields[0].default", "{spec}");
            assert!(message.contains(expected_message), "{spec}: {message}");
        }
        let (key, message) = field_refusal(&format!("type = \"select\"\n{options}\ndefault = \"b\""));
        assert_eq!(key, "forms[0].fields[0].default");
        assert!(message.contains("Choose one of the options."), "{message}");

        for spec in [
            "type = \"text\"\ndefault = \"<b>hi</b>\"",
            "type = \"textarea\"\ndefault = \"a\\nb\"",
            "type = \"email\"\ndefault = \"a@example.com\"",
            "type = \"url\"\ndefault = \"https://example.com\"",
            "type = \"number\"\ndefault = 2",
            "type = \"number\"\ndefault = 2.5",
            "type = \"integer\"\ndefault = -2",
            "type = \"boolean\"\ndefault = true",
            "type = \"date\"\ndefault = \"2026-01-31\"",
            "type = \"date\"\ndefault = 2026-01-31",
            "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }]\ndefault = \"a\"",
        ] {
            one(spec);
        }
    }

    #[test]
    fn refusals_render_with_the_key() {
        let error = try_one("type = \"text\"\nmin = 1").expect_err("refused");
        assert!(
            error.to_string().starts_with("config key `forms[0].fields[0].min`: "),
            "{error}"
        );
    }
}
