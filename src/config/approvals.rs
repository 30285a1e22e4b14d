//! `[[approvals]]`: calls that wait until someone else says yes. A tool (or an upstream's tool)
//! requiring `approval:ID` runs only once approvers matching `approvers` (the shape of `allow`)
//! approved that very call, `quorum` of them, within `ttl`; `notify` posts each new request to a
//! webhook.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::duration::{DurationText, duration, duration_text};
use super::identity::{AllowConfig, check_allow};
use super::{Config, ConfigError};
use crate::domain::is_identifier;
use crate::secret::Secret;

/// An approval: a call requiring `approval:ID` waits until approvers approve that very call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Named by `requires = ["approval:ID"]`; letters, digits, `-` and `_`.
    #[schemars(example = &"payments")]
    pub id: String,
    /// Shown to callers and approvers ("Payment approval").
    #[schemars(example = &"Payment approval")]
    pub title: String,
    /// Who may approve, by claims (as `allow`); never the caller themself.
    #[schemars(example = serde_json::json!({"groups": ["finance"]}))]
    pub approvers: AllowConfig,
    /// How many approvers must approve (at least 1).
    #[serde(default = "one")]
    pub quorum: u32,
    /// How long a request waits for its approvers (at most 7d).
    #[serde(default = "an_hour", deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub ttl: Duration,
    /// Where each new request is announced.
    #[serde(default)]
    pub notify: NotifyConfig,
    /// The largest arguments (as JSON, in bytes) a call needing this approval may have: approvers
    /// see every argument whole, so a larger call is refused before any request is made.
    #[serde(default = "max_argument_bytes")]
    pub max_argument_bytes: usize,
}

/// Where each new request is announced.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// A URL that gets a JSON POST per new request, with a Slack-compatible `text`.
    #[schemars(example = &"https://hooks.slack.com/services/T000/B000/XXXX")]
    pub webhook: Option<String>,
    /// Signs each POST: `X-Gatehouse-Signature: sha256=HMAC(secret, timestamp + "." + body)`.
    #[schemars(example = &"env:FINANCE_WEBHOOK_SECRET")]
    pub secret: Option<Secret<String>>,
    /// Whether the POST carries the call's arguments (by default only the tool's name).
    #[serde(default)]
    pub arguments: bool,
}

fn one() -> u32 {
    1
}

fn max_argument_bytes() -> usize {
    64 * 1024
}

fn an_hour() -> Duration {
    Duration::from_secs(3600)
}

/// The longest an approval may wait: a week.
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most `max_argument_bytes` may allow: what one approval request may store (sealed) and show.
const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// Each approval's keys, and that every `approval:ID` a tool requires names one.
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    for (i, approval) in config.approvals.iter().enumerate() {
        let key = format!("approvals[{i}]");
        if !is_identifier(&approval.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                "must be letters, digits, `-` and `_`",
            ));
        }
        if config.approvals[..i].iter().any(|a| a.id == approval.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                format!("`{}` is configured twice", approval.id),
            ));
        }
        if approval.title.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.title"), "must not be empty"));
        }
        check_allow(&format!("{key}.approvers"), Some(&approval.approvers), &config.identity)?;
        if approval.quorum == 0 {
            return Err(ConfigError::key(format!("{key}.quorum"), "must be at least 1"));
        }
        if approval.ttl.is_zero() || approval.ttl > MAX_TTL {
            return Err(ConfigError::key(
                format!("{key}.ttl"),
                "must be longer than zero and at most 7d",
            ));
        }
        if approval.max_argument_bytes == 0 || approval.max_argument_bytes > MAX_ARGUMENT_BYTES {
            return Err(ConfigError::key(
                format!("{key}.max_argument_bytes"),
                format!("must be at least 1 and at most {MAX_ARGUMENT_BYTES}"),
            ));
        }
        let notify = &approval.notify;
        if let Some(webhook) = &notify.webhook {
            let url = url::Url::parse(webhook)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"));
            if url.is_none() {
                return Err(ConfigError::key(
                    format!("{key}.notify.webhook"),
                    "must be an http or https URL",
                ));
            }
        }
        if notify.webhook.is_none() && (notify.secret.is_some() || notify.arguments) {
            return Err(ConfigError::key(
                format!("{key}.notify"),
                "`secret` and `arguments` are for a `webhook`",
            ));
        }
    }
    let tools = config
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("tools[{i}].requires"), &t.requires));
    let upstreams = config.upstreams.iter().enumerate().flat_map(|(i, u)| {
        let overrides = u
            .overrides
            .iter()
            .enumerate()
            .map(move |(j, o)| (format!("upstreams[{i}].overrides[{j}].requires"), &o.requires));
        std::iter::once((format!("upstreams[{i}].requires"), &u.requires)).chain(overrides)
    });
    for (key, requires) in tools.chain(upstreams) {
        for (j, text) in requires.iter().enumerate() {
            let Some(id) = text.trim().strip_prefix("approval:") else {
                continue;
            };
            if !config.approvals.iter().any(|a| a.id == id.trim()) {
                return Err(ConfigError::key(
                    format!("{key}[{j}]"),
                    format!("names approval `{}`, which is not configured", id.trim()),
                ));
            }
        }
    }
    Ok(())
}
