//! What crosses from an upstream to a client or to storage. Every text an upstream sends (results,
//! error messages, progress and log messages, elicitations, tool definitions) passes the redactor
//! with the secrets of the user whose session it came through. An elicitation the upstream relays
//! is marked as the upstream's, so it cannot pose as gatehouse, and may send the user only to an
//! http or https URL at an origin the upstream may send users to (`elicitation_origins`).

use serde_json::{Value, json};
use url::{Origin, Url};

use super::upstream::Upstream;
use crate::text;
use crate::tools::Redactor;

/// An elicitation's message shown to the user, at most (before the upstream's name is added).
const MAX_MESSAGE_BYTES: usize = 2048;

/// One upstream's messages for one user.
pub struct Crossing<'a> {
    /// The upstream's id.
    pub upstream: &'a str,
    /// Its `elicitation_origins`; any http or https origin when `None`.
    pub origins: Option<&'a [Origin]>,
    pub redactor: &'a Redactor,
}

/// Why a relayed elicitation was refused, said to the upstream (or, for its -32042, to the model).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl<'a> Crossing<'a> {
    pub fn of(upstream: &'a Upstream, redactor: &'a Redactor) -> Self {
        Self {
            upstream: &upstream.id,
            origins: upstream.elicitation_origins.as_deref(),
            redactor,
        }
    }

    /// Whether the upstream may send users to `url`: an http or https URL at one of its
    /// `elicitation_origins`, when those are set.
    fn may_send_users_to(&self, url: &Url) -> bool {
        matches!(url.scheme(), "http" | "https") && self.origins.is_none_or(|origins| origins.contains(&url.origin()))
    }

    pub fn text(&self, text: &str) -> String {
        self.redactor.text(text)
    }

    /// `text` redacted, then cut to `max_bytes` (in that order, so no cut splits a secret into
    /// a piece the redactor would not know).
    pub fn bounded_text(&self, text: &str, max_bytes: usize) -> String {
        text::bounded(&self.redactor.text(text), max_bytes)
    }

    pub fn value(&self, value: Value) -> Value {
        self.redactor.value(value)
    }

    /// An elicitation of the upstream's (the params of its `elicitation/create`, or one entry of its
    /// -32042's `elicitations`) as the client gets it: redacted, its message naming the upstream,
    /// its URL (URL mode) checked.
    pub fn elicitation(&self, elicitation: Value) -> Result<Value, Refused> {
        let mut elicitation = self.redactor.value(elicitation);
        let Some(fields) = elicitation.as_object_mut() else {
            return Err(Refused("an elicitation must be an object".to_owned()));
        };
        let url_mode = fields.get("mode").and_then(Value::as_str) == Some("url") || fields.contains_key("url");
        if url_mode {
            let link = fields.get("url").and_then(Value::as_str).unwrap_or("");
            let allowed = Url::parse(link).is_ok_and(|url| self.may_send_users_to(&url));
            if !allowed {
                return Err(Refused(format!(
                    "gatehouse does not send users to `{}` for the {} server",
                    text::bounded(link, 200),
                    self.upstream
                )));
            }
        }
        let message = fields.get("message").and_then(Value::as_str).unwrap_or("");
        let message = text::bounded(message, MAX_MESSAGE_BYTES);
        fields.insert("message".to_owned(), json!(self.named(&message)));
        Ok(elicitation)
    }

    /// `message` as said by the upstream, never by gatehouse.
    fn named(&self, message: &str) -> String {
        format!("The {} server asks: {message}", self.upstream)
    }
}

#[cfg(test)]
mod tests;
