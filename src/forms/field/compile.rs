//! Compiling one `[[forms.fields]]` entry into a [`Field`]: the kind, its bounds, lengths, pattern,
//! options and default, each refused with the key to fix when it could not work.

use chrono::NaiveDate;
use regex::{Regex, RegexBuilder};

use super::check::parse_date;
use super::{Bound, EMAIL_CAP, Field, FieldKind, SINGLE_LINE_CAP, SelectOption, TEXTAREA_CAP};
use crate::config::{ConfigError, FieldConfig, OptionConfig};
use crate::domain::is_identifier;

/// A configured pattern runs on every post: a megabyte of compiled program is plenty for any sane
/// pattern and stops a counted repetition like `(a{1000}){1000}` from taking the service's memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

const KIND_NAMES: &str = "text, textarea, email, url, number, integer, boolean, select, date, secret";

impl Field {
    /// `key` names the field in errors, e.g. `forms[0].fields[1]`.
    pub(in crate::forms) fn compile(config: &FieldConfig, key: &str) -> Result<Self, ConfigError> {
        if !is_identifier(&config.name) {
            return Err(ConfigError::key(
                format!("{key}.name"),
                "must be 1 to 64 letters, digits, `-` or `_` (it is the name posted by the page)",
            ));
        }
        if config.label.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.label"), "must not be empty"));
        }
        let kind = match config.kind.as_str() {
            "text" => FieldKind::Text,
            "textarea" => FieldKind::Textarea,
            "email" => FieldKind::Email,
            "url" => FieldKind::Url,
            "number" => FieldKind::Number,
            "integer" => FieldKind::Integer,
            "boolean" => FieldKind::Boolean,
            "date" => FieldKind::Date,
            "secret" => FieldKind::Secret,
            "select" => FieldKind::Select(compile_options(config.options.as_deref(), key)?),
            other => {
                return Err(ConfigError::key(
                    format!("{key}.type"),
                    format!("`{other}` is not a field type; use one of {KIND_NAMES}"),
                ));
            }
        };
        if config.options.is_some() && !matches!(kind, FieldKind::Select(_)) {
            return Err(ConfigError::key(
                format!("{key}.options"),
                "only select fields take options",
            ));
        }

        let takes_range = matches!(kind, FieldKind::Number | FieldKind::Integer | FieldKind::Date);
        let bound = |value: &Option<toml::Value>, name: &str| match value {
            None => Ok(None),
            Some(_) if !takes_range => Err(ConfigError::key(
                format!("{key}.{name}"),
                "only number, integer and date fields take min and max (use min_length and max_length for text)",
            )),
            Some(value) => compile_bound(&kind, value, &format!("{key}.{name}")).map(Some),
        };
        let min = bound(&config.min, "min")?;
        let max = bound(&config.max, "max")?;
        if let (Some(low), Some(high)) = (min, max)
            && low.exceeds(high)
        {
            return Err(ConfigError::key(
                format!("{key}.min"),
                format!("{low} is greater than max {high}: no value could be accepted"),
            ));
        }

        let takes_length = kind.takes_length();
        let cap = match kind {
            FieldKind::Textarea => TEXTAREA_CAP,
            _ => SINGLE_LINE_CAP,
        };
        for (value, name) in [(config.min_length, "min_length"), (config.max_length, "max_length")] {
            if value.is_some() && !takes_length {
                return Err(ConfigError::key(
                    format!("{key}.{name}"),
                    "only text, textarea, email, url and secret fields take min_length and max_length",
                ));
            }
        }
        if let Some(max_length) = config.max_length {
            if max_length == 0 {
                return Err(ConfigError::key(format!("{key}.max_length"), "must be at least 1"));
            }
            if max_length > cap {
                return Err(ConfigError::key(
                    format!("{key}.max_length"),
                    format!("must be at most {cap}, the limit for a {} field", config.kind),
                ));
            }
        }
        let max_length = config.max_length.unwrap_or(cap);
        // Longer addresses cannot be delivered, whatever the configuration allows.
        let max_length = match kind {
            FieldKind::Email => max_length.min(EMAIL_CAP),
            _ => max_length,
        };
        if let Some(min_length) = config.min_length
            && min_length > max_length
        {
            return Err(ConfigError::key(
                format!("{key}.min_length"),
                format!("{min_length} is greater than the maximum length {max_length}"),
            ));
        }

        let pattern = match &config.pattern {
            None => None,
            Some(_)
                if !matches!(
                    kind,
                    FieldKind::Text | FieldKind::Textarea | FieldKind::Email | FieldKind::Secret
                ) =>
            {
                return Err(ConfigError::key(
                    format!("{key}.pattern"),
                    "only text, textarea, email and secret fields take a pattern",
                ));
            }
            Some(pattern) => Some(compile_pattern(pattern, &format!("{key}.pattern"))?),
        };

        let mut field = Self {
            name: config.name.clone(),
            label: config.label.clone(),
            help: config.help.clone(),
            required: config.required,
            kind,
            min_length: config.min_length,
            max_length,
            pattern,
            min,
            max,
            default: None,
        };
        if let Some(default) = &config.default {
            let default_key = format!("{key}.default");
            let text = field.default_text(default, &default_key)?;
            field
                .check(text.as_deref(), false)
                .map_err(|message| ConfigError::key(&default_key, format!("is not valid for this field: {message}")))?;
            field.default = text;
        }
        Ok(field)
    }

    /// The default as posted text, refusing a TOML type that does not fit the kind.
    fn default_text(&self, value: &toml::Value, key: &str) -> Result<Option<String>, ConfigError> {
        let wrong = |expected: &str| {
            Err(ConfigError::key(
                key,
                format!("must be {expected} for a {} field", self.kind_name()),
            ))
        };
        match (&self.kind, value) {
            (FieldKind::Secret, _) => Err(ConfigError::key(
                key,
                "a secret field cannot have a default: a secret written in the config is not the user's",
            )),
            (FieldKind::Boolean, toml::Value::Boolean(checked)) => Ok(checked.then(|| "true".to_owned())),
            (FieldKind::Boolean, _) => wrong("true or false"),
            (FieldKind::Integer, toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            (FieldKind::Integer, _) => wrong("an integer"),
            (FieldKind::Number, toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            (FieldKind::Number, toml::Value::Float(n)) if n.is_finite() => Ok(Some(n.to_string())),
            (FieldKind::Number, _) => wrong("a finite number"),
            (FieldKind::Date, toml::Value::Datetime(_)) => match toml_local_date(value) {
                Some(date) => Ok(Some(date.format("%Y-%m-%d").to_string())),
                None => wrong("a date like 2026-01-31 (without a time)"),
            },
            (_, toml::Value::String(text)) => Ok(Some(text.clone())),
            (FieldKind::Date, _) => wrong("a date like \"2026-01-31\""),
            _ => wrong("a string"),
        }
    }
}

fn toml_local_date(value: &toml::Value) -> Option<NaiveDate> {
    match value {
        toml::Value::Datetime(toml::value::Datetime {
            date: Some(date),
            time: None,
            offset: None,
        }) => NaiveDate::from_ymd_opt(date.year.into(), date.month.into(), date.day.into()),
        _ => None,
    }
}

fn compile_bound(kind: &FieldKind, value: &toml::Value, key: &str) -> Result<Bound, ConfigError> {
    let bound = match (kind, value) {
        (FieldKind::Integer, toml::Value::Integer(n)) => Some(Bound::Integer(*n)),
        (FieldKind::Integer, _) => return Err(ConfigError::key(key, "must be an integer for an integer field")),
        (FieldKind::Number, toml::Value::Integer(n)) => Some(Bound::Number(*n as f64)),
        (FieldKind::Number, toml::Value::Float(n)) if n.is_finite() => Some(Bound::Number(*n)),
        (FieldKind::Number, _) => return Err(ConfigError::key(key, "must be a finite number for a number field")),
        (_, toml::Value::String(text)) => parse_date(text).map(Bound::Date),
        _ => toml_local_date(value).map(Bound::Date),
    };
    bound.ok_or_else(|| ConfigError::key(key, "must be a date like 2026-01-31 for a date field"))
}

fn compile_pattern(pattern: &str, key: &str) -> Result<Regex, ConfigError> {
    let build = |source: &str| {
        RegexBuilder::new(source)
            .size_limit(PATTERN_SIZE_LIMIT)
            .dfa_size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| ConfigError::key(key, format!("is not a usable regular expression: {e}")))
    };
    // Compiled alone first: `a)|(b` is invalid alone but balanced once wrapped, and would then match
    // any value starting with `a` instead of being refused.
    build(pattern)?;
    build(&format!("^(?:{pattern})$"))
}

fn compile_options(options: Option<&[OptionConfig]>, key: &str) -> Result<Vec<SelectOption>, ConfigError> {
    let options = options.unwrap_or_default();
    if options.is_empty() {
        return Err(ConfigError::key(
            format!("{key}.options"),
            "a select field needs at least one option",
        ));
    }
    let mut compiled: Vec<SelectOption> = Vec::with_capacity(options.len());
    for (index, option) in options.iter().enumerate() {
        let option_key = format!("{key}.options[{index}]");
        // A blank value would read as "nothing chosen", and a control character could never be posted back.
        if option.value.trim().is_empty() {
            return Err(ConfigError::key(format!("{option_key}.value"), "must not be empty"));
        }
        if option.value.chars().any(char::is_control) {
            return Err(ConfigError::key(
                format!("{option_key}.value"),
                "must not contain control characters",
            ));
        }
        if let Some(first) = compiled.iter().position(|known| known.value == option.value) {
            return Err(ConfigError::key(
                format!("{option_key}.value"),
                format!("`{}` is already the value of option {first}", option.value),
            ));
        }
        if option.label.trim().is_empty() {
            return Err(ConfigError::key(format!("{option_key}.label"), "must not be empty"));
        }
        compiled.push(SelectOption {
            value: option.value.clone(),
            label: option.label.clone(),
        });
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests;
